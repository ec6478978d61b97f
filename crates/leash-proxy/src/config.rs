//! What a running proxy is given: the policy (swappable on reload, `policy_handle.rs`), the audit log, the resolver,
//! the addresses it must never dial, and its limits (`limits.rs`). Entry points receive these; nothing is global.

use std::net::IpAddr;
use std::sync::Arc;

use crate::audit::AuditLog;
use crate::credentials::Secrets;
use crate::fair::ConnectionBound;
pub use crate::limits::{connections_for_open_files, Limits, FDS_PER_CONNECTION, FD_HEADROOM, MAX_MODEL_BODY};
use crate::metrics::Metrics;
pub use crate::policy_handle::{PolicyHandle, Snapshot, Swapped};
use crate::resolve::Resolve;
use crate::tls::Inspection;

/// The host's own addresses, which no upstream may be.
#[derive(Clone, Debug)]
pub enum OwnAddrs {
    /// Exactly these.
    Given(Arc<[IpAddr]>),
    /// What this host's kernel delivers locally (its `local` routes: interface addresses and whole local prefixes),
    /// read when the first upstream is checked: a run that never dials does not pay for reading them at start (a
    /// fortieth of `leash run -- true`). Read again at the next check after the kernel reports an address or route
    /// change, so an address or prefix the host gains later is refused too.
    Host,
}

/// Everything [`crate::serve`] needs.
#[derive(Clone)]
pub struct ProxyConfig {
    /// The policy in force, swapped whole on reload.
    pub policy: PolicyHandle,
    /// Where every decision and outcome is written before the request goes on.
    pub audit: Arc<AuditLog>,
    /// How allowed names are resolved (the system's, with `--resolve` pins; tests give their own).
    pub resolver: Arc<dyn Resolve>,
    /// This host's own addresses (local prefixes included): never dialed, whatever DNS says (nor the proxy's listening
    /// addresses).
    pub own_addrs: OwnAddrs,
    /// Bounds on connections, heads, bodies and waits.
    pub limits: Limits,
    /// TLS inspection (the run's CA, both TLS sides). `None`: a tunnel that needs inspection is refused
    /// (`needs-inspection`), never let through unseen.
    pub inspection: Option<Arc<Inspection>>,
    /// The counters `leash proxy --metrics` serves; every proxy counts (`Arc::default()` where nobody reads them).
    pub metrics: Arc<Metrics>,
    /// The secrets of the policy's `credentials` entries and their placeholders (read when leash started; empty
    /// without credentials). A request to a credential's host whose secret is missing here is refused.
    pub credentials: Arc<Secrets>,
    /// `Proxy-Authorization` for the policy's `upstream_proxy` (`Basic ...`, read when leash started), if it needs one.
    pub upstream_auth: Option<Arc<str>>,
    /// A connection bound shared with other proxies (`leash attach --dir`); `None`: one of its own, from `limits`.
    pub bound: Option<ConnectionBound>,
    /// Gives the heap's free pages back to the system once a burst of connections has ended, so RSS falls from its
    /// peak (the binary passes `leash_sandbox::release_free_memory`: `malloc_trim` needs `unsafe`, which this crate
    /// forbids). `None`: the allocator keeps them for reuse.
    pub release_free_memory: Option<fn()>,
    /// Ask mode's questions (`--ask`, `mode: ask`): where a request the policy refuses as `not-allowed` is held while
    /// a person is asked. `None`: such a request is refused, as in an allowlist (even under an ask-mode policy, so a
    /// proxy nobody can answer fails closed at once rather than after a timeout).
    pub ask: Option<Arc<crate::ask::Asking>>,
}
