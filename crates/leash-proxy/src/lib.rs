//! leash's egress proxy: the async I/O around the policy engine.
//!
//! It owns the listeners, HTTP/1.1 forwarding and CONNECT tunnels, the ClientHello peek, upstream dialing with the
//! destination check, the audit log and the refusal responses. It does not decide anything itself: every decision
//! is `leash_policy`'s; and it does not build sandboxes (`leash-sandbox`) or parse command lines (the binary).
#![forbid(unsafe_code)]

pub mod audit;
pub mod config;
mod conn;
mod dial;
mod exchange;
mod forward;
mod headers;
mod netinfo;
mod pool;
pub mod refusal;
mod relay;
pub mod resolve;
mod server;
mod shared;
mod tunnel;
pub mod wire;

pub use audit::AuditLog;
pub use config::{Limits, PolicyHandle, ProxyConfig};
pub use netinfo::local_interface_addrs;
pub use resolve::{Resolve, ResolveFuture, SystemResolver};
pub use server::serve;

/// Whether this build terminates TLS for hosts with path rules. Until it does, such tunnels are refused with
/// `needs-inspection`, and `leash explain` says so.
pub const TLS_INSPECTION: bool = false;
