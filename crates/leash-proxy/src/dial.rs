//! Reaching an upstream: resolve an allowed name once, run the destination check on every address, and dial only
//! the addresses that passed — never a second lookup, so a DNS answer cannot change between check and connect.
//! With an `upstream_proxy`, an allowed request's connection goes to that proxy instead (a tunnel through its
//! `CONNECT`), and the name is resolved there: leash decided it before, on everything but its address. An
//! `https://` proxy is spoken to over TLS ([`UpstreamIo::Tls`]), verified against its name (or address); whatever
//! then goes to the destination, a tunnel's TLS included, runs inside that session.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use leash_policy::{Host, Policy, Reason, UpstreamProxy};
use rustls::pki_types::ServerName;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::audit::UpstreamFailure;
use crate::conn::{BufConn, Reparse, TlsIo};
use crate::shared::Shared;
use crate::tls::SEND_BUFFER_LIMIT;
pub(crate) use crate::upstream_io::UpstreamIo;
use crate::wire::http_head::parse_response_head;

/// Why no upstream connection was made.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    /// The destination check refused the resolved addresses: a refusal (403), not a failure.
    #[error("the name resolves to an internal address")]
    Refused(Reason),
    #[error("cannot resolve `{0}`: {1}")]
    Resolve(String, io::Error),
    #[error("cannot connect: {0}")]
    Connect(io::Error),
    #[error("connect timed out")]
    Timeout,
    /// The upstream proxy answered the tunnel's CONNECT with this status (or with something that is no answer).
    #[error("the upstream proxy `{0}` answered {1}")]
    UpstreamProxy(String, String),
}

impl DialError {
    /// Why the dial failed, for the outcome's `error` (`None` for a refusal, which is no failure).
    pub fn cause(&self) -> Option<UpstreamFailure> {
        match self {
            DialError::Refused(_) => None,
            DialError::Resolve(..) => Some(UpstreamFailure::CannotResolve),
            DialError::Connect(e) => Some(UpstreamFailure::of_io(e)),
            DialError::Timeout => Some(UpstreamFailure::TimedOut),
            DialError::UpstreamProxy(..) => Some(UpstreamFailure::UpstreamProxy),
        }
    }

    /// The status an allowed request gets for this failure.
    pub fn status(&self) -> u16 {
        match self {
            DialError::Refused(_) => 403,
            DialError::Timeout => 504,
            DialError::Resolve(..) | DialError::Connect(_) | DialError::UpstreamProxy(..) => 502,
        }
    }
}

/// Where an allowed request's connection goes.
#[derive(Debug, Clone)]
pub(crate) enum Route {
    /// Straight to these checked addresses of the destination.
    Direct(Vec<IpAddr>),
    /// To the upstream proxy at these addresses and port (`authority` names it in messages), over TLS when `tls`
    /// is given.
    Proxy { addrs: Vec<IpAddr>, port: u16, authority: String, tls: Option<ProxyTls> },
}

/// How to speak TLS to an `https://` upstream proxy: the name (or address) its certificate must carry, and the
/// configuration trusting the system roots and `upstream_proxy_ca`.
#[derive(Clone)]
pub(crate) struct ProxyTls {
    name: ServerName<'static>,
    config: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for ProxyTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyTls").field("name", &self.name).finish_non_exhaustive()
    }
}

/// The route of an allowed request to `host:port`: the upstream proxy's addresses, or the destination's, resolved
/// once and checked.
pub(crate) async fn route_checked(sh: &Shared, policy: &Policy, host: &Host, port: u16) -> Result<Route, DialError> {
    route_via(sh, policy, (host, port), policy.route(host)).await
}

/// [`route_checked`] on the route the policy's admission of the request named (`via`).
pub(crate) async fn route_via(
    sh: &Shared,
    policy: &Policy,
    (host, port): (&Host, u16),
    via: leash_policy::Route<'_>,
) -> Result<Route, DialError> {
    match via.through() {
        // The proxy is the operator's own, named in the policy: its address is not checked as a destination is.
        Some(up) => {
            let tls = if up.tls { Some(proxy_tls(sh, up)?) } else { None };
            let addrs = resolve(sh, &up.host, up.port).await?;
            Ok(Route::Proxy { addrs, port: up.port, authority: up.authority(), tls })
        }
        None => resolve_checked(sh, policy, host, port).await.map(Route::Direct),
    }
}

/// The TLS side of an `https://` upstream proxy: its configuration (built once) and the name to verify.
fn proxy_tls(sh: &Shared, up: &UpstreamProxy) -> Result<ProxyTls, DialError> {
    let failed = |why: String| DialError::UpstreamProxy(up.authority(), why);
    let config = sh.proxy_tls.config(up.ca_file.as_deref()).map_err(|e| failed(format!("no TLS set-up: {e}")))?;
    let name = match &up.host {
        Host::Ipv4(ip) => ServerName::IpAddress(IpAddr::V4(*ip).into()),
        host => ServerName::try_from(host.as_str().into_owned()).map_err(|e| failed(format!("its name: {e}")))?,
    };
    Ok(ProxyTls { name, config })
}

/// The checked addresses of an allowed host: resolved once (by `sh`'s resolver) and passed by the destination check.
pub async fn resolve_checked(sh: &Shared, policy: &Policy, host: &Host, port: u16) -> Result<Vec<IpAddr>, DialError> {
    let addrs = resolve(sh, host, port).await?;
    // The host's own addresses as they are now, after the lookup (which may have taken seconds).
    policy.check_destination(&addrs, &sh.own()).map_err(DialError::Refused)?;
    Ok(addrs)
}

async fn resolve(sh: &Shared, host: &Host, port: u16) -> Result<Vec<IpAddr>, DialError> {
    match host {
        // INVARIANT: a name reaches the resolver only after the policy allowed it; literals never do.
        Host::Name(name) => {
            sh.cfg.resolver.resolve(name, port).await.map_err(|e| DialError::Resolve(name.as_str().to_owned(), e))
        }
        Host::Ipv4(ip) => Ok(vec![IpAddr::V4(*ip)]),
        Host::IpLiteral(_) => Err(DialError::Refused(Reason::IpLiteral)),
    }
}

/// A connection for a plain-HTTP request: to the destination, or to the upstream proxy (the request then goes in
/// absolute form).
pub(crate) async fn connect_route(route: &Route, port: u16, timeout: Duration) -> Result<UpstreamIo, DialError> {
    match route {
        Route::Direct(addrs) => connect_checked(addrs, port, timeout).await.map(UpstreamIo::Tcp),
        Route::Proxy { addrs, port, authority, tls } => connect_proxy(addrs, *port, (authority, tls), timeout).await,
    }
}

/// A connection to the upstream proxy: TCP, and over it the TLS session with an `https://` one.
async fn connect_proxy(
    addrs: &[IpAddr],
    port: u16,
    (authority, tls): (&str, &Option<ProxyTls>),
    timeout: Duration,
) -> Result<UpstreamIo, DialError> {
    let tcp = connect_checked(addrs, port, timeout).await?;
    let Some(tls) = tls else { return Ok(UpstreamIo::Tcp(tcp)) };
    let handshake = TlsConnector::from(tls.config.clone()).connect(tls.name.clone(), TlsIo::new(tcp));
    match tokio::time::timeout(timeout, handshake).await {
        Ok(Ok(mut session)) => {
            session.get_mut().1.set_buffer_limit(Some(SEND_BUFFER_LIMIT));
            Ok(UpstreamIo::Tls(Box::new(session)))
        }
        Ok(Err(e)) => Err(DialError::UpstreamProxy(authority.to_owned(), format!("no TLS session: {e}"))),
        Err(_) => Err(DialError::Timeout),
    }
}

/// A connection that carries a tunnel to `host:port`: straight to the destination, or the upstream proxy's once it
/// answered `200` to `CONNECT host:port` (with `auth` as `Proxy-Authorization`).
pub(crate) async fn connect_tunnel(
    sh: &Shared,
    route: &Route,
    (host, port): (&Host, u16),
    timeout: Duration,
) -> Result<UpstreamIo, DialError> {
    let Route::Proxy { authority, .. } = route else {
        return connect_route(route, port, timeout).await;
    };
    let stream = connect_route(route, port, timeout).await?;
    let target = format!("{}:{port}", host.as_str());
    let mut request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
    if let Some(auth) = &sh.cfg.upstream_auth {
        request.push_str(&format!("Proxy-Authorization: {auth}\r\n"));
    }
    request.push_str("\r\n");
    let mut conn = BufConn::new(stream);
    // A TLS session holds what is written until flushed; on TCP the flush costs nothing.
    let sent = async { conn.io.write_all(request.as_bytes()).await.and(conn.io.flush().await) };
    sent.await.map_err(DialError::Connect)?;
    let max = sh.cfg.limits.max_head_bytes;
    let head = conn
        .read_head(timeout, timeout, Reparse::OnLineEnd { max }, |b| parse_response_head(b, max))
        .await
        .map_err(|e| DialError::UpstreamProxy(authority.clone(), format!("no answer to CONNECT ({e:?})")))?;
    // INVARIANT: a tunnel through the upstream proxy starts only on its 2xx, with nothing of the proxy's left over.
    if !(200..300).contains(&head.status) {
        return Err(DialError::UpstreamProxy(authority.clone(), head.status.to_string()));
    }
    if !conn.buf.is_empty() {
        return Err(DialError::UpstreamProxy(authority.clone(), "bytes after its 200".to_owned()));
    }
    Ok(conn.io)
}

/// Connect to the first checked address that answers.
pub async fn connect_checked(addrs: &[IpAddr], port: u16, timeout: Duration) -> Result<TcpStream, DialError> {
    let mut last = DialError::Connect(io::Error::new(io::ErrorKind::NotFound, "no address"));
    for ip in addrs {
        // INVARIANT: `addrs` passed `check_destination` (or are the upstream proxy's, the operator's own); this is
        // the only place upstream sockets are opened.
        match tokio::time::timeout(timeout, TcpStream::connect(SocketAddr::new(*ip, port))).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Ok(Err(e)) => last = DialError::Connect(e),
            Err(_) => last = DialError::Timeout,
        }
    }
    Err(last)
}
