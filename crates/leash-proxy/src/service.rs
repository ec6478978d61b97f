//! The policy's `services`: a listener per service (a TCP port or a Unix socket, bound where the sandbox reaches
//! it), whose connections leash relays to the service's target on the host. Nothing is decided on the proxy's rules
//! here: a service is its own gate. A TCP service's connection is one `SERVICE` decision line and its outcome (bytes
//! each way, duration); an HTTP service's requests are each decided on their path by [`Service::decide_request`],
//! logged like proxied ones (the service's name as the host), and relayed over one target connection per client
//! connection.
//!
//! Each connection looks its service up by name in the policy as it is now, so a reload that changes a service's
//! target or paths applies to the next connection, and one that removes the service refuses it; where a service
//! listens is fixed when its listener is bound.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use leash_policy::{Decision, Name, Reason, Service, ServiceKind, ServiceTarget, Verdict};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

use crate::audit::{refusal, SERVICE_METHOD};
use crate::conn::{BufConn, Next};
use crate::dial::{connect_checked, DialError};
use crate::exchange::{exchange, settle, ExchangeError, Watches};
use crate::gate::{Asked, Extras, RequestCtx};
use crate::refusal::{reply, Response};
use crate::request::{close_after, request_head_bytes, Plan, TargetForm};
use crate::shared::Shared;
use crate::wire::http_head::{request_framing, RequestHead};

/// A service's listener, bound by the caller where the sandbox reaches it.
#[derive(Debug)]
pub enum ServiceListener {
    /// A port (inside the sandbox's namespace, or on `leash proxy`'s address).
    Tcp(std::net::TcpListener),
    /// A Unix socket leash created at the service's path.
    Unix(std::os::unix::net::UnixListener),
}

/// A bound listener and the service (by name) it serves.
#[derive(Debug)]
pub struct ServiceSocket {
    /// The `services` entry's name, looked up in the current policy for each connection.
    pub name: Arc<str>,
    /// Where its connections come in.
    pub listener: ServiceListener,
}

/// What audit lines give as a Unix-socket client's address: it has none.
const NO_PEER: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);

/// A connection to a service or to its target: TCP or a Unix socket; or a proxy client's connection whose CONNECT
/// named a service (with whatever it sent after its CONNECT head, not yet read).
pub(crate) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    Tunneled(Box<BufConn<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tunneled(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tunneled(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_flush(cx),
            Stream::Unix(s) => Pin::new(s).poll_flush(cx),
            Stream::Tunneled(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Unix(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tunneled(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// An accepted connection to a service's listener and where it came from.
pub(crate) struct Accepted {
    pub stream: Stream,
    pub peer: SocketAddr,
    /// The listener's port (0 for a Unix socket), as audit lines give it.
    pub port: u16,
}

/// A listener registered with the runtime.
pub(crate) enum Listening {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener),
}

impl Listening {
    pub(crate) fn new(listener: ServiceListener) -> io::Result<Listening> {
        match listener {
            ServiceListener::Tcp(l) => {
                l.set_nonblocking(true)?;
                Ok(Listening::Tcp(tokio::net::TcpListener::from_std(l)?))
            }
            ServiceListener::Unix(l) => {
                l.set_nonblocking(true)?;
                Ok(Listening::Unix(tokio::net::UnixListener::from_std(l)?))
            }
        }
    }

    pub(crate) async fn accept(&self) -> io::Result<Accepted> {
        match self {
            Listening::Tcp(l) => {
                let port = l.local_addr()?.port();
                let (stream, peer) = l.accept().await?;
                let _ = stream.set_nodelay(true);
                Ok(Accepted { stream: Stream::Tcp(stream), peer, port })
            }
            Listening::Unix(l) => {
                let (stream, _) = l.accept().await?;
                Ok(Accepted { stream: Stream::Unix(stream), peer: NO_PEER, port: 0 })
            }
        }
    }
}

/// A proxy client's CONNECT to a loopback port a service listens on ([`leash_policy::Policy::service_at`]), its
/// `200` sent: served as a connection to that service's listener is, on record under the service's name.
pub(crate) async fn tunneled(sh: &Shared, name: &Arc<str>, client: BufConn<TcpStream>, peer: SocketAddr, port: u16) {
    let stream = match client.buf.is_empty() {
        true => Stream::Tcp(client.into_io()),
        false => Stream::Tunneled(Box::new(client)),
    };
    connection(sh, name, Accepted { stream, peer, port }).await;
}

/// Serve one connection to service `name`: look the service up, then relay (TCP) or decide and relay each request
/// (HTTP).
pub(crate) async fn connection(sh: &Shared, name: &Arc<str>, accepted: Accepted) {
    let _open = sh.cfg.metrics.connection_opened();
    let service = sh.cfg.policy.current().services().iter().find(|s| s.name == *name).cloned();
    match service {
        Some(service) if matches!(service.kind, ServiceKind::Http { .. }) => http(sh, &service, accepted).await,
        Some(service) => relay(RequestCtx::for_service(sh, accepted.peer, &service.name), &service, accepted).await,
        None => {
            // Reloaded away: refused on record, and closed.
            let ctx = RequestCtx::for_service(sh, accepted.peer, name);
            let asked = Asked { method: SERVICE_METHOD, host: name, port: accepted.port, path: None };
            let answer = Response::forbidden(name, Reason::NotAllowed);
            let _ = ctx.refuse_with(&asked, &refusal(Reason::NotAllowed), answer);
        }
    }
}

/// A TCP service: one decision line, the bytes relayed both ways until either side ends, one outcome line.
async fn relay(ctx: RequestCtx<'_>, service: &Service, accepted: Accepted) {
    let asked = Asked { method: SERVICE_METHOD, host: &service.name, port: accepted.port, path: None };
    if ctx.pass(&asked, &service.decide_connection()).is_err() {
        return;
    }
    let mut client = accepted.stream;
    let mut target = match dial(ctx.sh, &service.target).await {
        Ok(target) => target,
        Err(e) => return ctx.failed(e.status(), &service.target.shown(), e.cause(), &e.to_string()),
    };
    let (up, down) = match (&mut client, &mut target) {
        // The kernel splices TCP to TCP, as for the proxy's tunnels.
        (Stream::Tcp(c), Stream::Tcp(t)) => crate::relay::tunnel(c, t).await,
        (c, t) => copied(tokio::io::copy_bidirectional(c, t).await),
    };
    ctx.outcome(200, up, down);
}

/// The byte counts of a relay that may have ended in an error (a reset is how many connections end).
fn copied(result: io::Result<(u64, u64)>) -> (u64, u64) {
    result.unwrap_or((0, 0))
}

/// Connect to a service's target: a TCP target's name resolved as the proxy resolves names (so `--resolve` pins
/// apply), its addresses not checked as a destination's are (the operator named them); or its Unix socket.
async fn dial(sh: &Shared, target: &ServiceTarget) -> Result<Stream, DialError> {
    let timeout = sh.cfg.limits.connect_timeout;
    match target {
        ServiceTarget::Tcp { host, port } => {
            let addrs = match host.parse() {
                Ok(ip) => vec![ip],
                Err(_) => {
                    let unusable = || DialError::Resolve(host.clone(), io::Error::other("not a host name"));
                    let parsed = leash_policy::parse_host(host).map_err(|_| unusable())?;
                    let name: &Name = parsed.name().ok_or_else(unusable)?;
                    sh.cfg.resolver.resolve(name, *port).await.map_err(|e| DialError::Resolve(host.clone(), e))?
                }
            };
            connect_checked(&addrs, *port, timeout).await.map(Stream::Tcp)
        }
        ServiceTarget::Socket(path) => connect_unix(path, timeout).await.map(Stream::Unix),
    }
}

async fn connect_unix(path: &Path, timeout: std::time::Duration) -> Result<UnixStream, DialError> {
    match tokio::time::timeout(timeout, UnixStream::connect(path)).await {
        Ok(result) => result.map_err(DialError::Connect),
        Err(_) => Err(DialError::Timeout),
    }
}

/// An HTTP service: requests read one at a time, each decided on its path and logged under the service's name,
/// the allowed ones relayed over one target connection kept while both sides keep theirs.
async fn http(sh: &Shared, service: &Service, accepted: Accepted) {
    let mut client = BufConn::new(accepted.stream);
    let mut target: Option<BufConn<Stream>> = None;
    let limits = &sh.cfg.limits;
    loop {
        let head = match crate::request::read_request_head(&mut client, limits).await {
            Ok(head) => head,
            Err(e) => return crate::request::refuse_unreadable(sh, &mut client, e, accepted.peer).await,
        };
        let ctx = RequestCtx::for_service(sh, accepted.peer, &service.name);
        match request(&ctx, service, accepted.port, &mut client, &head, &mut target).await {
            Next::KeepAlive => {}
            Next::Close => return close_after(&mut client, &head).await,
        }
    }
}

/// One request on an HTTP service.
async fn request(
    ctx: &RequestCtx<'_>,
    service: &Service,
    port: u16,
    client: &mut BufConn<Stream>,
    head: &RequestHead,
    target: &mut Option<BufConn<Stream>>,
) -> Next {
    let asked = Asked { method: &head.method, host: &service.name, port, path: Some(&head.target) };
    let refuse = |reason: Reason, response: Response| ctx.refuse_with(&asked, &refusal(reason), response);
    // Origin form only: a service is no proxy, and a CONNECT or an absolute URL names somewhere else.
    if !head.target.starts_with('/') {
        return reply(client, &refuse(Reason::BadRequest, Response::bad_request(400, "not origin-form")), false).await;
    }
    let decision: Decision = service.decide_request(&head.target);
    if decision.verdict == Verdict::Block {
        let response = match decision.reason {
            Reason::BadRequest => Response::bad_request(400, "malformed path"),
            reason => Response::forbidden(&asked.shown(), reason),
        };
        return reply(client, &ctx.refuse_with(&asked, &decision, response), false).await;
    }
    let framing = match request_framing(head) {
        Ok(framing) => framing,
        Err(e) => {
            return reply(client, &refuse(Reason::BadRequest, Response::bad_request(400, &e.to_string())), false).await
        }
    };
    let dropped = crate::upgrade::dropped(crate::wire::http_head::upgrade_value(head));
    let extras = Extras { upgrade_dropped: dropped.as_deref(), ..Extras::default() };
    if let Err(answer) = ctx.pass_with(&asked, &decision, extras) {
        return reply(client, &answer, false).await;
    }
    // The upstream sees the target's own authority as Host (a server guarding against DNS rebinding expects its
    // own name), and the request's original target.
    let authority = match &service.target {
        ServiceTarget::Tcp { .. } => service.target.shown(),
        ServiceTarget::Socket(_) => "localhost".to_owned(),
    };
    let url = format!("http://{authority}{}", head.target);
    let Ok(parsed) = leash_policy::parse_absolute_target(&url) else {
        return reply(client, &Response::bad_request(400, "unusable target"), false).await;
    };
    let plan = Plan { port: parsed.port(), target: parsed, framing, client_keep_alive: head.is_persistent() };
    let bytes = request_head_bytes(head, &plan, TargetForm::Origin);
    let reused = target.is_some();
    let mut conn = match target.take() {
        Some(conn) => conn,
        None => match dial(ctx.sh, &service.target).await {
            Ok(stream) => BufConn::new(stream),
            Err(e) => return reply(client, &ctx.dial_failed(&service.target.shown(), &e), false).await,
        },
    };
    let mut result = exchange(ctx.sh, client, &mut conn, (&bytes, head, &plan), &Watches::default()).await;
    // A kept connection the service closed meanwhile: once more on a fresh one, when nothing of a body was read.
    if reused
        && matches!(result, Err(ExchangeError::Stale))
        && plan.framing == crate::wire::http_head::BodyFraming::None
    {
        match dial(ctx.sh, &service.target).await {
            Ok(stream) => {
                conn = BufConn::new(stream);
                result = exchange(ctx.sh, client, &mut conn, (&bytes, head, &plan), &Watches::default()).await;
            }
            Err(e) => result = Err(ExchangeError::Dial(e)),
        }
    }
    let (next, done) = settle(ctx, client, result, (&asked, || service.target.shown())).await;
    if done.is_some_and(|d| d.upstream_reusable) && conn.buf.is_empty() {
        *target = Some(conn);
    }
    next
}
