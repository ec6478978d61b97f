//! leash's egress proxy: the async I/O around the policy engine.
//!
//! It owns the listeners, HTTP/1.1 forwarding and CONNECT tunnels, the ClientHello peek, upstream dialing with the
//! destination check, the audit log and the refusal responses. It does not decide anything itself: every decision
//! is `leash_policy`'s; and it does not build sandboxes (`leash-sandbox`) or parse command lines (the binary).
#![forbid(unsafe_code)]

pub mod wire;
