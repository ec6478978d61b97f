//! State shared by every connection of one proxy, and the two ways a request reaches the audit log: its decision
//! (before anything is forwarded; a refusal is also a warning on stderr) and, for allowed requests, its outcome.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use leash_policy::{Decision, Verdict};

use crate::audit::{now_rfc3339, verdict_word, AuditError, DecisionEntry, OutcomeEntry};
use crate::config::ProxyConfig;
use crate::pool::Pool;

pub(crate) struct Shared {
    pub cfg: ProxyConfig,
    pub pool: Pool,
    /// `cfg.own_addrs` plus the addresses this proxy listens on.
    pub own: Arc<[IpAddr]>,
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
        let mut own: Vec<IpAddr> = cfg.own_addrs.to_vec();
        own.extend(listening.iter().map(|a| a.ip()).filter(|ip| !ip.is_unspecified()));
        let pool = Pool::new(cfg.limits.pool_per_host, cfg.limits.pool_idle);
        Self { cfg, pool, own: own.into() }
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
        let entry = OutcomeEntry {
            id,
            time: now_rfc3339(),
            status,
            bytes_up: up,
            bytes_down: down,
            duration_ms: (started.elapsed().as_secs_f64() * 1e6).round() / 1e3,
        };
        if let Err(e) = self.cfg.audit.outcome(&entry) {
            tracing::error!("{e}");
        }
    }
}
