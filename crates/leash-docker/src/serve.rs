//! Serving a container from outside: the sockets bound inside its network namespace (the proxy's listener, the
//! DNS stub's socket), the proxy and stub served on them until the container ends or a stop signal comes, and the
//! signals leash takes over for that time.

use std::net::{Ipv4Addr, SocketAddrV4};

use std::sync::Arc;

use leash_proxy::{PolicyHandle, ProxyConfig, ServiceListener, ServiceSocket, TRANSPARENT_ADDR};
use tokio::signal::unix::{signal, SignalKind};

/// Where the proxy listens inside the container: its own loopback, the conventional proxy port (as `leash run`).
pub const PROXY_INSIDE: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 3128);
/// Where the DNS stub answers inside the container (`--dns 127.0.0.1` names it in the container's resolv.conf).
pub const DNS_INSIDE: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 53);

/// The sockets leash serves inside a container: the proxy's listener, and (`run` only) the DNS stub's socket and
/// the transparent listeners at the address the stub gives allowed names.
pub struct Inside {
    proxy: std::net::TcpListener,
    dns: Option<std::net::UdpSocket>,
    transparent: Vec<std::net::TcpListener>,
    /// The policy's services: their ports bound inside, and their Unix sockets (bound on the host, mounted in).
    services: Vec<ServiceSocket>,
}

impl Inside {
    /// These sockets plus services bound elsewhere (the Unix sockets mounted into the container).
    pub fn with_services(mut self, more: Vec<ServiceSocket>) -> Inside {
        self.services.extend(more);
        self
    }
}

/// Binds the proxy's listener (and with `transparent_ports`, the stub's socket and a transparent listener per port;
/// and a listener on the container's loopback per service port, by service name) inside the network namespace of
/// `pid`, which must hold only `lo`.
pub fn bind_inside(
    pid: u32,
    transparent_ports: Option<&[u16]>,
    service_ports: &[(Arc<str>, u16)],
) -> Result<Inside, leash_sandbox::SandboxError> {
    let netns = leash_sandbox::Netns::Process(pid);
    bind_in_namespace(&netns, &leash_sandbox::Isolation::default(), PROXY_INSIDE, transparent_ports, service_ports)
}

/// [`bind_inside`] for any network namespace, checked as `isolation` says: the proxy's listener at `listen`, the
/// stub's socket and transparent listeners (with `transparent_ports`) on the namespace's loopback, and a listener
/// per service port on `listen`'s address. The building block of `leash attach` and `leash docker`.
pub fn bind_in_namespace(
    netns: &leash_sandbox::Netns,
    isolation: &leash_sandbox::Isolation,
    listen: SocketAddrV4,
    transparent_ports: Option<&[u16]>,
    service_ports: &[(Arc<str>, u16)],
) -> Result<Inside, leash_sandbox::SandboxError> {
    let udp: &[SocketAddrV4] = if transparent_ports.is_some() { &[DNS_INSIDE] } else { &[] };
    let transparent_ports = transparent_ports.unwrap_or_default();
    let mut tcp = vec![listen];
    tcp.extend(transparent_ports.iter().map(|p| SocketAddrV4::new(TRANSPARENT_ADDR, *p)));
    tcp.extend(service_ports.iter().map(|(_, p)| SocketAddrV4::new(*listen.ip(), *p)));
    let mut sockets = leash_sandbox::bind_in(netns, isolation, &tcp, udp)?;
    let no_listener = || leash_sandbox::SandboxError::InvalidSpec("no listener was bound".into());
    let mut bound = std::mem::take(&mut sockets.tcp).into_iter();
    let proxy = bound.next().ok_or_else(no_listener)?;
    let transparent = bound.by_ref().take(transparent_ports.len()).collect();
    let services = service_ports
        .iter()
        .zip(bound)
        .map(|((name, _), l)| ServiceSocket { name: name.clone(), listener: ServiceListener::Tcp(l) })
        .collect();
    Ok(Inside { proxy, dns: sockets.udp.pop(), transparent, services })
}

/// Serves the proxy on `listener` until `ended` resolves (its value returned) or a stop signal arrives. On a signal,
/// `on_signal` runs (stopping the container) and serving goes on until `ended`; without `on_signal` serving stops
/// at once and the result is `None`. Then drains in-flight requests and flushes the log.
pub async fn serve_until<T>(
    inside: Inside,
    config: ProxyConfig,
    mut ended: tokio::sync::oneshot::Receiver<T>,
    stop: &mut StopSignals,
    on_signal: Option<impl FnOnce()>,
) -> Option<T> {
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(inside.serve(config, async move {
        let _ = stop_rx.await;
    }));
    let result = tokio::select! {
        r = &mut ended => r.ok(),
        () = stop.recv() => match on_signal {
            Some(f) => {
                f();
                (&mut ended).await.ok()
            }
            None => None,
        }
    };
    let _ = stop_tx.send(());
    let _ = serving.await;
    result
}

impl Inside {
    /// Serves the proxy, the DNS stub, the transparent and the service listeners bound here until `shutdown`
    /// completes; then drains in-flight requests and flushes the log.
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
                let listeners = leash_proxy::Listeners { proxy, transparent, services: self.services };
                if let Err(e) = leash_proxy::serve_listeners(listeners, config, shutdown).await {
                    tracing::error!("proxy: {e}");
                }
            }
            Err(e) => tracing::error!("cannot serve the namespace's listener: {e}"),
        }
        if let Err(e) = audit.flush() {
            tracing::error!("{e}");
        }
    }
}

/// Serves the DNS stub on `socket` until the returned sender is dropped. A stub that cannot run only means lookups
/// fail inside, which opens nothing, so that is a warning.
fn serve_dns(
    socket: std::net::UdpSocket,
    policy: PolicyHandle,
    audit: std::sync::Arc<leash_proxy::AuditLog>,
    ask: Option<std::sync::Arc<leash_proxy::ask::Asking>>,
) -> Option<tokio::sync::oneshot::Sender<()>> {
    let socket = socket.set_nonblocking(true).and_then(|()| tokio::net::UdpSocket::from_std(socket));
    let socket = match socket {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("dns: no stub resolver in the container ({e}); name lookups there will fail");
            return None;
        }
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let shutdown = async move {
            let _ = stopped.await;
        };
        if let Err(e) = leash_proxy::serve_dns(socket, policy, audit, ask, shutdown).await {
            tracing::error!("dns: {e}");
        }
    });
    Some(stop)
}

/// SIGINT, SIGTERM and SIGHUP (a closed terminal), taken over for the whole run: they stop the container (run) or
/// the serving (attach) instead of killing leash, which then cleans up.
pub struct StopSignals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// Takes the three signals over; from now on they wait for [`StopSignals::recv`].
    pub fn install() -> std::io::Result<StopSignals> {
        Ok(StopSignals {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// The next stop signal (one that arrived before the call included).
    pub async fn recv(&mut self) {
        tokio::select! {
            _ = self.int.recv() => {},
            _ = self.term.recv() => {},
            _ = self.hup.recv() => {},
        }
    }
}
