//! Ask mode end to end: `leash run` in ask mode with real clients inside (curl, Python), questions answered over the
//! control socket with `leash ask` and at a pseudo-terminal as a person would; what the command inside can and
//! cannot do about the questions; that a held request holds up nothing else; the path shown for a request inside an
//! inspected tunnel before anything is dialled.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test's helpers fail it by panicking")]

mod common;

#[path = "ask/scene.rs"]
mod scene;

#[path = "ask/socket.rs"]
mod socket;

#[path = "ask/terminal.rs"]
mod terminal;

#[path = "ask/screen.rs"]
mod screen;

#[path = "ask/inside.rs"]
mod inside;

#[path = "ask/inspect.rs"]
mod inspect;

#[path = "ask/proxy.rs"]
mod proxy;
