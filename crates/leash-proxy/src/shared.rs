//! State shared by every connection of one proxy, and the two ways a request reaches the audit log: its decision
//! (before anything is forwarded; a refusal is also a warning on stderr) and, for allowed requests, its outcome.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use leash_policy::{Decision, Verdict};

use crate::audit::{now_rfc3339, verdict_word, AuditError, DecisionEntry, OutcomeEntry, UpstreamFailure};
use crate::config::{OwnAddrs, ProxyConfig};
use crate::netinfo::HostAddrs;
use crate::pool::Pool;

pub(crate) struct Shared {
    pub cfg: ProxyConfig,
    pub pool: Pool,
    /// `cfg.own_addrs` plus the addresses this proxy listens on (specified ones): never dialed.
    own: Own,
}

/// The addresses no upstream may be.
enum Own {
    /// Given in the configuration.
    Fixed(Arc<[IpAddr]>),
    /// This host's, read when first needed and again after the kernel reports a change.
    Host(HostAddrs),
}

/// What the log says a request asked for.
pub(crate) struct Attempt<'a> {
    pub id: u64,
    pub method: &'a str,
    pub host: &'a str,
    pub port: u16,
    pub path: Option<&'a str>,
    pub peer: SocketAddr,
}

impl Shared {
    pub fn new(cfg: ProxyConfig, listening: &[SocketAddr]) -> Self {
        let listening: Vec<IpAddr> = listening.iter().map(|a| a.ip()).filter(|ip| !ip.is_unspecified()).collect();
        let pool = Pool::new(cfg.limits.pool_per_host, cfg.limits.pool_idle);
        let own = match &cfg.own_addrs {
            OwnAddrs::Given(addrs) => Own::Fixed(addrs.iter().chain(&listening).copied().collect()),
            // Nothing is read (or subscribed to) here: a run that never dials does not pay for it.
            OwnAddrs::Host => Own::Host(HostAddrs::new(listening)),
        };
        Self { cfg, pool, own }
    }

    /// The addresses no upstream may be now: the host's own and the proxy's listening ones.
    pub fn own(&self) -> Arc<[IpAddr]> {
        match &self.own {
            Own::Fixed(addrs) => Arc::clone(addrs),
            Own::Host(host) => host.get(),
        }
    }

    /// Record a decision. A refusal is also a warning on stderr, so an operator watching the terminal sees it.
    pub fn log_decision(&self, a: &Attempt<'_>, d: &Decision) -> Result<(), AuditError> {
        self.log_decision_stripped(a, d, None)
    }

    /// [`Shared::log_decision`] with what was stripped from a model API request, if anything.
    pub fn log_decision_stripped(
        &self,
        a: &Attempt<'_>,
        d: &Decision,
        stripped: Option<&[String]>,
    ) -> Result<(), AuditError> {
        if d.verdict == Verdict::Block {
            let path = a.path.unwrap_or("");
            tracing::warn!("refused {} {}:{}{} ({})", a.method, a.host, a.port, path, d.reason);
        }
        let entry = DecisionEntry {
            id: a.id,
            time: now_rfc3339(),
            method: a.method,
            host: a.host,
            port: a.port,
            path: a.path,
            decision: verdict_word(d.verdict),
            rule: d.rule.as_deref(),
            reason: d.reason.as_str(),
            client: Some(a.peer.to_string()),
            stripped,
        };
        let written = self.cfg.audit.decision(&entry);
        if let Err(e) = &written {
            tracing::error!("{e}; refusing the request");
        }
        written
    }

    /// Record how an allowed request ended. A failure here cannot refuse anything any more; it is reported.
    pub fn log_outcome(&self, id: u64, status: u16, up: u64, down: u64, started: Instant) {
        self.write_outcome(id, status, (up, down), started, None);
    }

    /// Record that an allowed request's upstream (`authority`) failed, and why: the outcome's `error`, and a warning
    /// naming the host and the cause, so an operator sees why a client saw a bare failure.
    pub fn log_failure(
        &self,
        id: u64,
        status: u16,
        authority: &str,
        cause: Option<UpstreamFailure>,
        why: &str,
        started: Instant,
    ) {
        if let Some(cause) = cause {
            tracing::warn!("upstream {authority} failed ({}): {why}", cause.as_str());
        }
        self.write_outcome(id, status, (0, 0), started, cause);
    }

    fn write_outcome(
        &self,
        id: u64,
        status: u16,
        (up, down): (u64, u64),
        started: Instant,
        cause: Option<UpstreamFailure>,
    ) {
        let entry = OutcomeEntry {
            id,
            time: now_rfc3339(),
            status,
            bytes_up: up,
            bytes_down: down,
            duration_ms: (started.elapsed().as_secs_f64() * 1e6).round() / 1e3,
            error: cause.map(UpstreamFailure::as_str),
        };
        if let Err(e) = self.cfg.audit.outcome(&entry) {
            tracing::error!("{e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::net::Ipv4Addr;
    use std::sync::Arc;

    use super::*;
    use crate::config::{Limits, PolicyHandle};
    use crate::{AuditLog, SystemResolver};

    fn shared(own_addrs: OwnAddrs, listening: &[&str]) -> Shared {
        let cfg = ProxyConfig {
            policy: PolicyHandle::new(leash_policy::Policy::from_inline(&[], &[]).unwrap()),
            audit: Arc::new(AuditLog::stderr()),
            resolver: Arc::new(SystemResolver::new(HashMap::new())),
            own_addrs,
            limits: Limits::default(),
            inspection: None,
        };
        let listening: Vec<SocketAddr> = listening.iter().map(|a| a.parse().unwrap()).collect();
        Shared::new(cfg, &listening)
    }

    #[test]
    fn no_upstream_may_be_a_given_address_or_where_the_proxy_listens() {
        let given = OwnAddrs::Given(Arc::from(vec![IpAddr::from([192, 0, 2, 7])]));
        let sh = shared(given, &["198.51.100.1:3128", "0.0.0.0:80"]);
        assert_eq!(*sh.own(), [IpAddr::from([192, 0, 2, 7]), IpAddr::from([198, 51, 100, 1])]);
    }

    #[test]
    fn the_hosts_own_addresses_are_read_when_first_needed() {
        let sh = shared(OwnAddrs::Host, &["203.0.113.9:3128"]);
        let own = sh.own();
        assert!(own.contains(&IpAddr::V4(Ipv4Addr::LOCALHOST)), "{own:?}");
        assert_eq!(own.last(), Some(&IpAddr::from([203, 0, 113, 9])));
    }
}
