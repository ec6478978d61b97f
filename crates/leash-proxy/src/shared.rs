//! State shared by every connection of one proxy: its configuration, the pools of idle upstream connections, and the
//! addresses no upstream may be. Requests reach the audit log through [`crate::gate`].

use std::net::SocketAddr;
use std::sync::Arc;

use leash_policy::Cidr;

use crate::config::{OwnAddrs, ProxyConfig};
use crate::netinfo::HostAddrs;
use crate::pool::Pool;
use crate::tls::ProxyTls;
use crate::upstream_io::{UpstreamIo, UpstreamTls};

pub(crate) struct Shared {
    pub cfg: ProxyConfig,
    /// Plain-HTTP forwarding's idle upstream connections.
    pub pool: Pool<UpstreamIo>,
    /// The upstream TLS sessions inspected tunnels left clean, for the next tunnel to the same host.
    pub inspected: Pool<UpstreamTls>,
    /// The client configuration for an `https://` upstream proxy, built on first use.
    pub proxy_tls: ProxyTls,
    /// `cfg.own_addrs` plus the addresses this proxy listens on (specified ones): never dialed.
    own: Own,
}

/// The addresses no upstream may be.
enum Own {
    /// Given in the configuration.
    Fixed(Arc<[Cidr]>),
    /// This host's (its local routes: addresses and whole prefixes), read when first needed and again after the
    /// kernel reports a change.
    Host(HostAddrs),
}

impl Shared {
    pub fn new(cfg: ProxyConfig, listening: &[SocketAddr]) -> Self {
        let listening: Vec<Cidr> =
            listening.iter().map(|a| a.ip()).filter(|ip| !ip.is_unspecified()).map(Cidr::from).collect();
        let (per_host, max_idle) = (cfg.limits.pool_per_host, cfg.limits.pool_idle);
        let (pool, inspected) = (Pool::new(per_host, max_idle), Pool::new(per_host, max_idle));
        let own = match &cfg.own_addrs {
            OwnAddrs::Given(addrs) => Own::Fixed(addrs.iter().copied().map(Cidr::from).chain(listening).collect()),
            // Nothing is read (or subscribed to) here: a run that never dials does not pay for it.
            OwnAddrs::Host => Own::Host(HostAddrs::new(listening)),
        };
        Self { cfg, pool, inspected, proxy_tls: ProxyTls::default(), own }
    }

    /// The addresses no upstream may be now: the host's own (whole local prefixes) and the proxy's listening ones.
    pub fn own(&self) -> Arc<[Cidr]> {
        match &self.own {
            Own::Fixed(addrs) => Arc::clone(addrs),
            Own::Host(host) => host.get(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::net::{IpAddr, Ipv4Addr};
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
            metrics: Arc::default(),
            credentials: Arc::default(),
            upstream_auth: None,
            bound: None,
            release_free_memory: None,
            ask: None,
        };
        let listening: Vec<SocketAddr> = listening.iter().map(|a| a.parse().unwrap()).collect();
        Shared::new(cfg, &listening)
    }

    #[test]
    fn no_upstream_may_be_a_given_address_or_where_the_proxy_listens() {
        let given = OwnAddrs::Given(Arc::from(vec![IpAddr::from([192, 0, 2, 7])]));
        let sh = shared(given, &["198.51.100.1:3128", "0.0.0.0:80"]);
        let own = [IpAddr::from([192, 0, 2, 7]), IpAddr::from([198, 51, 100, 1])].map(Cidr::from);
        assert_eq!(*sh.own(), own);
    }

    #[test]
    fn the_hosts_own_addresses_are_read_when_first_needed() {
        let sh = shared(OwnAddrs::Host, &["203.0.113.9:3128"]);
        let own = sh.own();
        assert!(own.iter().any(|c| c.contains(IpAddr::V4(Ipv4Addr::LOCALHOST))), "{own:?}");
        assert_eq!(own.last(), Some(&Cidr::from(IpAddr::from([203, 0, 113, 9]))));
    }
}
