//! leash's egress proxy: the async I/O around the policy engine.
//!
//! It owns the listeners, HTTP/1.1 forwarding and CONNECT tunnels, the ClientHello peek, TLS inspection (the per-run
//! CA, leaf issuance, HTTP/1.1 and HTTP/2 inside inspected tunnels), the model API gate that strips or refuses
//! provider-side tools in request bodies (the shapes in [`provider_tools`], a pure table), upstream dialing with the
//! destination check, the audit log and the refusal responses. It does not decide anything itself: every decision
//! is `leash_policy`'s; and it does not build sandboxes (`leash-sandbox`) or parse command lines (the binary).
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod admit;
pub mod ask;
pub mod audit;
pub mod ca;
pub mod config;
mod conn;
pub mod credentials;
mod dial;
pub mod dns;
mod exchange;
mod fair;
pub use fair::ConnectionBound;
mod forward;
mod gate;
mod h1_admit;
mod headers;
pub mod inside;
mod inspect;
mod limits;
mod message;
mod metrics;
mod model;
mod netinfo;
mod policy_handle;
mod pool;
pub mod provider_tools;
pub mod refusal;
mod relay;
#[cfg(test)]
mod relay_tests;
mod request;
pub mod resolve;
mod server;
pub mod service;
mod shared;
mod standing;
pub mod tls;
mod tunnel;
mod upgrade;
mod upstream_io;
mod websocket_relay;
pub mod wire;

pub use audit::AuditLog;
pub use config::{Limits, OwnAddrs, PolicyHandle, ProxyConfig, Swapped};
pub use dns::{serve_dns, transparent_ports, TRANSPARENT_ADDR};
pub use metrics::{serve_metrics, Metrics};
pub use resolve::{Resolve, ResolveFuture, SystemResolver};
pub use server::{serve, serve_listeners, serve_with_transparent, Listeners};
pub use service::{ServiceListener, ServiceSocket};
pub use tls::{Inspection, TlsSetupError, UpstreamTrust};

/// Whether this build terminates TLS for hosts with path rules (else such tunnels are refused with
/// `needs-inspection`, and `leash explain` says so).
pub const TLS_INSPECTION: bool = true;
