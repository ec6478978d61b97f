//! What a sandboxed program is given, as one plan that every way in builds and serves by name: the proxy's listener,
//! the DNS stub's socket, a transparent listener per port (at [`TRANSPARENT_ADDR`], where the stub answers allowed
//! names), a listener per service port, and the variables that point clients at the proxy. `leash run`, `leash docker
//! run|attach` and `leash attach` build a [`Plan`], bind its addresses inside their namespace (how is theirs: the
//! sandbox's init, `setns` into a container's), hand the sockets back in the plan's order, and serve the [`Bound`]
//! that [`Plan::take`] sorts them into. Nothing else matches sockets by position.

use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, UdpSocket};
use std::sync::Arc;

use crate::audit::AuditLog;
use crate::service::{ServiceListener, ServiceSocket};
use crate::{ask::Asking, PolicyHandle, ProxyConfig, TRANSPARENT_ADDR};

/// The conventional proxy port, where the proxy listens inside by default.
pub const PROXY_PORT: u16 = 3128;

/// Where the proxy listens inside a sandbox or container: its own loopback, [`PROXY_PORT`].
pub const PROXY_INSIDE: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::LOCALHOST, PROXY_PORT);

/// Where the DNS stub answers inside: the namespace's own loopback, as its resolv.conf says.
pub const DNS_INSIDE: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 53);

/// Variables that could point a client at another proxy or exempt hosts from ours, in both spellings (curl reads
/// only the lower-case `http_proxy`, most others the upper-case).
pub const PROXY_VARS: [&str; 8] =
    ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy", "no_proxy"];

/// Node's switch to honour the proxy variables (Node 24).
pub const NODE_PROXY_VAR: &str = "NODE_USE_ENV_PROXY";

/// The sockets to bind inside a namespace, and what they are for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    proxy: SocketAddrV4,
    dns: Option<SocketAddrV4>,
    transparent: Vec<u16>,
    services: Vec<(Arc<str>, u16)>,
}

/// The plan's sockets, bound inside and handed back, sorted by what each is for.
#[derive(Debug)]
pub struct Bound {
    /// The proxy's listener.
    pub proxy: TcpListener,
    /// The DNS stub's socket, where the plan has one.
    pub dns: Option<UdpSocket>,
    /// The transparent listeners.
    pub transparent: Vec<TcpListener>,
    /// The services' listeners, by name (ports bound inside, and Unix sockets added with [`Bound::with_services`]).
    pub services: Vec<ServiceSocket>,
}

/// The sockets handed back are not the plan's: fewer, or more, than it asked for.
#[derive(Debug, thiserror::Error)]
#[error("the namespace handed back {got_tcp} TCP and {got_udp} UDP sockets for a plan of {want_tcp} and {want_udp}")]
pub struct NotThePlan {
    got_tcp: usize,
    got_udp: usize,
    want_tcp: usize,
    want_udp: usize,
}

impl Plan {
    /// The proxy's listener alone, at `proxy`.
    pub fn proxy_at(proxy: SocketAddrV4) -> Plan {
        Plan { proxy, dns: None, transparent: Vec::new(), services: Vec::new() }
    }

    /// A listener per service port, on the proxy's address (by the service's name).
    pub fn with_services(mut self, ports: &[(Arc<str>, u16)]) -> Plan {
        self.services = ports.to_vec();
        self
    }

    /// The DNS stub at [`DNS_INSIDE`] and a transparent listener per port `policy` allows (80 and 443 first), as many
    /// as fit with the rest under `max_sockets` (what the namespace can hand back at once); call it after
    /// [`Plan::with_services`].
    pub fn with_dns_and_transparent(mut self, policy: &leash_policy::Policy, max_sockets: usize) -> Plan {
        self.dns = Some(DNS_INSIDE);
        let room = max_sockets.saturating_sub(2 + self.services.len());
        self.transparent = crate::transparent_ports(policy, room);
        self
    }

    /// Where the proxy listens.
    pub fn proxy(&self) -> SocketAddrV4 {
        self.proxy
    }

    /// Whether the plan has the DNS stub (and with it the transparent listeners).
    pub fn has_dns(&self) -> bool {
        self.dns.is_some()
    }

    /// The TCP addresses to bind, in the order [`Plan::take`] expects them back: the proxy, the transparent ports,
    /// the services.
    pub fn tcp(&self) -> Vec<SocketAddrV4> {
        let transparent = self.transparent.iter().map(|p| SocketAddrV4::new(TRANSPARENT_ADDR, *p));
        let services = self.services.iter().map(|(_, p)| SocketAddrV4::new(*self.proxy.ip(), *p));
        std::iter::once(self.proxy).chain(transparent).chain(services).collect()
    }

    /// The UDP addresses to bind: the DNS stub's, if any.
    pub fn udp(&self) -> Vec<SocketAddrV4> {
        self.dns.into_iter().collect()
    }

    /// Sorts the sockets bound for [`Plan::tcp`] and [`Plan::udp`], in that order, by what each is for.
    pub fn take(&self, tcp: Vec<TcpListener>, mut udp: Vec<UdpSocket>) -> Result<Bound, NotThePlan> {
        let (want_tcp, want_udp) = (1 + self.transparent.len() + self.services.len(), self.udp().len());
        if tcp.len() != want_tcp || udp.len() != want_udp {
            return Err(NotThePlan { got_tcp: tcp.len(), got_udp: udp.len(), want_tcp, want_udp });
        }
        let mut tcp = tcp.into_iter();
        let proxy = tcp.next().ok_or(NotThePlan { got_tcp: 0, got_udp: 0, want_tcp, want_udp })?;
        let transparent = tcp.by_ref().take(self.transparent.len()).collect();
        let services = self
            .services
            .iter()
            .zip(tcp)
            .map(|((name, _), l)| ServiceSocket { name: name.clone(), listener: ServiceListener::Tcp(l) })
            .collect();
        Ok(Bound { proxy, dns: udp.pop(), transparent, services })
    }

    /// Every proxy variable but the `NO_PROXY` pair set to the proxy's URL, and Node told to read them: what a
    /// program inside is given (the caller's own values of [`PROXY_VARS`] are to be dropped first).
    pub fn proxy_env(&self) -> Vec<(OsString, OsString)> {
        proxy_env(&format!("http://{}", self.proxy))
    }
}

/// Every proxy variable but `NO_PROXY` set to `url`, and [`NODE_PROXY_VAR`].
pub fn proxy_env(url: &str) -> Vec<(OsString, OsString)> {
    let set = PROXY_VARS.iter().filter(|v| !v.eq_ignore_ascii_case("no_proxy"));
    let mut env: Vec<(OsString, OsString)> = set.map(|v| ((*v).into(), url.into())).collect();
    env.push((NODE_PROXY_VAR.into(), "1".into()));
    env
}

impl Bound {
    /// These sockets plus services bound elsewhere (Unix sockets on the host, mounted or allowed in).
    pub fn with_services(mut self, more: Vec<ServiceSocket>) -> Bound {
        self.services.extend(more);
        self
    }

    /// Serves the proxy, the DNS stub, the transparent and the service listeners until `shutdown` completes; then
    /// drains in-flight requests and flushes the log.
    pub async fn serve(self, config: ProxyConfig, shutdown: impl std::future::Future<Output = ()>) {
        let audit = config.audit.clone();
        let _dns_running =
            self.dns.and_then(|socket| serve_dns(socket, config.policy.clone(), audit.clone(), config.ask.clone()));
        let proxy = self.proxy.set_nonblocking(true).and_then(|()| tokio::net::TcpListener::from_std(self.proxy));
        let transparent = self
            .transparent
            .into_iter()
            .filter_map(|l| l.set_nonblocking(true).and_then(|()| tokio::net::TcpListener::from_std(l)).ok())
            .collect();
        match proxy {
            Ok(proxy) => {
                let listeners = crate::Listeners { proxy, transparent, services: self.services };
                if let Err(e) = crate::serve_listeners(listeners, config, shutdown).await {
                    tracing::error!("proxy: {e}");
                }
            }
            Err(e) => tracing::error!("cannot serve the proxy's listener inside: {e}"),
        }
        if let Err(e) = audit.flush() {
            tracing::error!("{e}");
        }
    }
}

/// Serves the DNS stub on `socket` until the returned sender is dropped. A stub that cannot run only means lookups
/// fail inside, which opens nothing, so that is a warning.
fn serve_dns(
    socket: UdpSocket,
    policy: PolicyHandle,
    audit: Arc<AuditLog>,
    ask: Option<Arc<Asking>>,
) -> Option<tokio::sync::oneshot::Sender<()>> {
    let socket = socket.set_nonblocking(true).and_then(|()| tokio::net::UdpSocket::from_std(socket));
    let socket = match socket {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("dns: no stub resolver inside ({e}); name lookups there will fail");
            return None;
        }
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let shutdown = async move {
            let _ = stopped.await;
        };
        if let Err(e) = crate::serve_dns(socket, policy, audit, ask, shutdown).await {
            tracing::error!("dns: {e}");
        }
    });
    Some(stop)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(ports: &str) -> leash_policy::Policy {
        let text = format!("network:\n  mode: allowlist\n  allowed_hosts: [a.test]\n  ports: [{ports}]\n");
        leash_policy::load(&text, leash_policy::Format::Yaml, None).unwrap().policy
    }

    fn listeners(n: usize) -> Vec<TcpListener> {
        (0..n).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect()
    }

    #[test]
    fn the_sockets_handed_back_are_sorted_by_what_the_plan_asked_for_each() {
        let services: Vec<(Arc<str>, u16)> = vec![("mcp".into(), 8080), ("llm".into(), 4000)];
        let plan =
            Plan::proxy_at(PROXY_INSIDE).with_services(&services).with_dns_and_transparent(&policy("80, 8443"), 16);
        let tcp = plan.tcp();
        assert_eq!(tcp[0], PROXY_INSIDE);
        let transparent: Vec<u16> = tcp[1..tcp.len() - 2].iter().map(SocketAddrV4::port).collect();
        assert_eq!(transparent, [80, 443, 8443]);
        assert!(tcp[1..tcp.len() - 2].iter().all(|a| *a.ip() == TRANSPARENT_ADDR));
        assert_eq!(
            &tcp[tcp.len() - 2..],
            [SocketAddrV4::new(Ipv4Addr::LOCALHOST, 8080), SocketAddrV4::new(Ipv4Addr::LOCALHOST, 4000)]
        );
        assert_eq!(plan.udp(), [DNS_INSIDE]);
        let given = listeners(tcp.len());
        let ports: Vec<u16> = given.iter().map(|l| l.local_addr().unwrap().port()).collect();
        let bound = plan.take(given, vec![UdpSocket::bind("127.0.0.1:0").unwrap()]).unwrap();
        assert_eq!(bound.proxy.local_addr().unwrap().port(), ports[0]);
        assert_eq!(bound.transparent.len(), 3);
        let names: Vec<&str> = bound.services.iter().map(|s| &*s.name).collect();
        assert_eq!(names, ["mcp", "llm"]);
        assert!(bound.dns.is_some());
    }

    #[test]
    fn transparent_listeners_take_only_the_room_left_beside_the_proxy_the_stub_and_the_services() {
        let many: String = (1..=30).map(|p| (8000 + p).to_string()).collect::<Vec<_>>().join(", ");
        let services: Vec<(Arc<str>, u16)> = vec![("a".into(), 9001), ("b".into(), 9002), ("c".into(), 9003)];
        let plan = Plan::proxy_at(PROXY_INSIDE).with_services(&services).with_dns_and_transparent(&policy(&many), 16);
        assert_eq!(plan.tcp().len() + plan.udp().len(), 16, "exactly what the namespace can hand back");
        let plain = Plan::proxy_at(PROXY_INSIDE);
        assert_eq!((plain.tcp(), plain.udp()), (vec![PROXY_INSIDE], vec![]));
    }

    #[test]
    fn sockets_that_are_not_the_plans_are_refused_not_matched_by_position() {
        let plan = Plan::proxy_at(PROXY_INSIDE).with_services(&[("mcp".into(), 8080)]);
        assert!(plan.take(listeners(1), Vec::new()).is_err(), "a service's listener missing");
        assert!(plan.take(listeners(3), Vec::new()).is_err(), "one too many");
        assert!(
            plan.take(listeners(2), vec![UdpSocket::bind("127.0.0.1:0").unwrap()]).is_err(),
            "a stub not asked for"
        );
        assert!(plan.take(listeners(2), Vec::new()).is_ok());
    }

    #[test]
    fn both_spellings_of_every_proxy_variable_point_at_the_proxy_and_none_exempts_a_host() {
        let env = Plan::proxy_at(SocketAddrV4::new(Ipv4Addr::new(169, 254, 0, 1), 3128)).proxy_env();
        let names: Vec<String> = env.iter().map(|(k, _)| k.to_string_lossy().into()).collect();
        for v in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy", NODE_PROXY_VAR] {
            assert!(names.contains(&v.to_owned()), "{v}");
        }
        assert!(!names.iter().any(|n| n.eq_ignore_ascii_case("no_proxy")));
        assert!(env.iter().filter(|(k, _)| k != NODE_PROXY_VAR).all(|(_, v)| v == "http://169.254.0.1:3128"));
    }
}
