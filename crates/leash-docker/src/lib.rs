//! Docker support for `leash docker run` and `leash docker attach`: a container whose only way out is leash.
//!
//! What it owns:
//! - [`options`]: the `docker run` options split into options, image and command as Docker's own parser does, and
//!   checked for the ones that would defeat the policy. Pure: no Docker, no filesystem.
//! - [`host`]: the host-side look at what those options name (bind sources that resolve to sockets, to a mount of
//!   a kernel filesystem or to leash's own files, named volumes created to bind a host path).
//! - [`engine`]: the Docker engine, each call a `docker` CLI child process with a time bound; the only module that
//!   runs `docker`.
//! - [`gate`]: the start-up gate, a directory mounted read-only in the container that holds its command until
//!   leash's sockets are bound inside, and carries the run's CA files.
//! - [`container`]: a container's life: the `docker create` arguments (no network, leash's proxy and CA environment,
//!   the gate), its start behind the gate, serving it until it ends, its removal.
//! - [`serve`]: the sockets bound inside the container's network namespace, and the proxy and DNS stub served on
//!   them until the container ends or a stop signal comes.
//!
//! What it does not do: parse leash's command line, load the policy, open the audit log, create the run's CA, print
//! to the user (but for a container that could not be removed) or choose exit codes. Those are the binary's; every
//! failure here is a typed error for it to report.
#![warn(missing_docs)]

pub mod container;
pub mod engine;
pub mod gate;
pub mod host;
pub mod options;
pub mod serve;
