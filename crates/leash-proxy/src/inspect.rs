//! Inspected tunnels: TLS terminated with a leaf from the run's CA, every inner request (every HTTP/2 stream)
//! decided on its own, and leash's own answers given inside TLS so a client that trusts the CA can read them.
//!
//! Order for an allowed tunnel to an inspected host: resolve the SNI name once and check the addresses; log the
//! tunnel (`inspect`: as a spliced tunnel is logged before it is dialled, no upstream connection is opened when the
//! log cannot be written); dial exactly the checked addresses; complete TLS with the upstream (verified, offering the
//! client's ALPN protocols; a failure adds a `block upstream-tls` line under the tunnel's id); complete TLS with the
//! client, agreeing to the protocol the upstream chose; then serve HTTP/1.1 ([`h1`]) or HTTP/2 ([`h2`]). Nothing the
//! client sends inside TLS reaches the upstream before its request was decided and logged.
//!
//! An HTTP/1.1 session a tunnel leaves clean (its last response read to the end, nothing more from the upstream) is
//! kept, as plain HTTP keeps its upstream connections: the next tunnel to the same host and port under the same
//! policy generation whose client does not offer HTTP/2 is logged and then served on it, with no lookup, dial or
//! upstream handshake (the addresses were checked, the certificate verified, when it was dialled).

mod client_body;
mod h1;
mod h2;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leash_policy::{Decision, Host, Reason, Verdict};
use rustls::pki_types::ServerName;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_rustls::{server, TlsAcceptor, TlsConnector};

use crate::audit::TUNNEL_METHOD;
use crate::config::Snapshot;
use crate::conn::{close_gracefully, BufConn, Reparse, TlsIo};
use crate::dial::{connect_tunnel, route_checked, DialError, Route};
use crate::gate::{Asked, RequestCtx};
use crate::pool::PoolKey;
use crate::refusal::Response;
use crate::shared::Shared;
use crate::tls::{Inspection, ALPN_H2, ALPN_HTTP1, SEND_BUFFER_LIMIT};
use crate::upstream_io::UpstreamTls;
use crate::wire::http_head::parse_request_head;
use crate::wire::target::split_query;

/// The client side of an inspected tunnel: TLS over the client connection (whose buffer replays the ClientHello).
/// [`TlsIo`] under each session reads many records per syscall and writes them vectored.
pub(crate) type ClientTls = server::TlsStream<TlsIo<BufConn<TcpStream>>>;

/// A tunnel's upstream session, and whether an earlier tunnel left it (only a kept one can have gone stale).
pub(crate) struct Session {
    pub tls: UpstreamTls,
    pub kept: bool,
}

/// One inspected tunnel: whose it is and what it was decided on.
pub(crate) struct Inspected {
    pub sh: Arc<Shared>,
    pub snap: Arc<Snapshot>,
    pub tls: Arc<Inspection>,
    /// The SNI name the tunnel was decided on; every inner request must name it.
    pub host: Host,
    pub port: u16,
    /// The tunnel's id in the audit log (the CONNECT line and the tunnel's outcome line).
    pub id: u64,
    pub peer: SocketAddr,
    pub started: Instant,
}

/// Why no upstream TLS session was made.
enum UpstreamError {
    Dial(DialError),
    /// The handshake failed: the certificate did not verify, or TLS itself failed. Never retried without TLS.
    Tls(String),
}

impl Inspected {
    fn host_str(&self) -> String {
        self.host.as_str().into_owned()
    }

    /// `host` or `host:port` as a Host header or `:authority` names it.
    fn authority(&self) -> String {
        match self.port {
            443 => self.host_str(),
            port => format!("{}:{port}", self.host_str()),
        }
    }

    /// The tunnel's own context at the gate: its CONNECT line's id, policy and start.
    fn ctx(&self) -> RequestCtx<'_> {
        RequestCtx {
            sh: &self.sh,
            snap: self.snap.clone(),
            id: self.id,
            peer: self.peer,
            started: self.started,
            service: None,
        }
    }

    /// A request inside the tunnel: an id of its own, decided on the policy as it is now (so a reload applies
    /// inside long-lived tunnels too).
    fn request_ctx(&self) -> RequestCtx<'_> {
        RequestCtx::new(&self.sh, self.peer)
    }

    /// Resolve (once), check, dial the checked addresses (or the upstream proxy's tunnel) and complete a verified
    /// TLS handshake offering `alpn`.
    async fn dial(&self, config: Arc<rustls::ClientConfig>) -> Result<UpstreamTls, UpstreamError> {
        let route = self.route().await.map_err(UpstreamError::Dial)?;
        self.dial_route(&route, config).await
    }

    /// A session an earlier tunnel to this host left clean, for a client that does not offer HTTP/2 (one that does
    /// gets a session of its own, so that it speaks HTTP/2 where the upstream does).
    fn kept_session(&self, alpn: &[Vec<u8>]) -> Option<UpstreamTls> {
        if alpn.iter().any(|p| p == ALPN_H2) {
            return None;
        }
        self.sh.inspected.take(&self.pool_key())
    }

    /// Keep a session this tunnel leaves clean (read to the end of its last response, nothing read beyond it) for the
    /// next tunnel to this host: an HTTP/1.1 one only.
    fn keep(&self, upstream: UpstreamTls) {
        if upstream.get_ref().1.alpn_protocol() != Some(ALPN_H2) {
            self.sh.inspected.put(self.pool_key(), upstream);
        }
    }

    /// Sessions are kept per host, port and the policy generation the tunnel was decided (and dialled) under.
    fn pool_key(&self) -> PoolKey {
        PoolKey { host: self.host_str().into(), port: self.port, generation: self.snap.generation }
    }

    async fn route(&self) -> Result<Route, DialError> {
        route_checked(&self.sh, &self.snap, &self.host, self.port).await
    }

    async fn dial_route(&self, route: &Route, config: Arc<rustls::ClientConfig>) -> Result<UpstreamTls, UpstreamError> {
        let limits = &self.sh.cfg.limits;
        let target = (&self.host, self.port);
        let tcp = connect_tunnel(&self.sh, route, target, limits.connect_timeout).await.map_err(UpstreamError::Dial)?;
        let name = ServerName::try_from(self.host_str()).map_err(|e| UpstreamError::Tls(e.to_string()))?;
        let handshake = TlsConnector::from(config).connect(name, TlsIo::new(tcp));
        match tokio::time::timeout(limits.connect_timeout, handshake).await {
            Ok(Ok(mut tls)) => {
                tls.get_mut().1.set_buffer_limit(Some(SEND_BUFFER_LIMIT));
                Ok(tls)
            }
            Ok(Err(e)) if is_tls_error(&e) => Err(UpstreamError::Tls(e.to_string())),
            Ok(Err(e)) => Err(UpstreamError::Dial(DialError::Connect(e))),
            Err(_) => Err(UpstreamError::Dial(DialError::Timeout)),
        }
    }
}

/// Serve an allowed tunnel to an inspected host. `alpn` is what the client's ClientHello offered.
pub(crate) async fn run(t: Inspected, client: BufConn<TcpStream>, alpn: &[Vec<u8>], decision: &Decision) {
    // Shared with the tunnel's HTTP/2 streams, which outlive this call's borrows.
    let t = Arc::new(t);
    let ctx = t.ctx();
    let Some((client, upstream, chosen)) = establish(&t, &ctx, client, alpn, decision).await else { return };
    let (status, up, down) = match chosen.as_deref() {
        Some(ALPN_H2) => h2::serve(t.clone(), client, upstream.tls).await,
        _ => {
            let (up, down) = h1::serve(&t, client, upstream).await;
            (200, up, down)
        }
    };
    ctx.outcome(status, up, down);
}

/// Log the tunnel and get its upstream session (kept, or resolved, checked and dialled), then complete the client's
/// handshake: both sessions and the protocol the upstream chose, or `None` when the tunnel was answered (refused,
/// failed) or its client's handshake failed. Its own function: what its states keep (the dial's result, the answers)
/// was part of every state of `run`'s future, the request loop's too, for as long as the tunnel was open. One await
/// of each step: each await point is a state of its own in the future, and the largest sets its size.
async fn establish(
    t: &Inspected,
    ctx: &RequestCtx<'_>,
    client: BufConn<TcpStream>,
    alpn: &[Vec<u8>],
    decision: &Decision,
) -> Option<(ClientTls, Session, Option<Vec<u8>>)> {
    let (upstream, chosen) = match upstream_session(t, ctx, alpn, decision).await {
        Ok(session) => session,
        Err(Unready::Answer(answer)) => return answer_at_path(t, client, answer).await,
        Err(Unready::Unreachable) => return serve_unreachable(t, ctx, client).await,
    };
    let Some(client) = accept(t, client, t.tls.server_config(chosen.as_deref())).await else {
        // The session, unused, is as clean as it came.
        t.keep(upstream.tls);
        ctx.outcome(0, 0, 0);
        return None;
    };
    Some((client, upstream, chosen))
}

/// Why a tunnel has no upstream session to serve on.
enum Unready {
    /// The answer to give the client inside TLS: the tunnel refused on its addresses, its line unwritable, the
    /// upstream's certificate refused.
    Answer(Response),
    /// The upstream could not be resolved or reached: each request in the tunnel is still decided, and logged, on
    /// its own path ([`serve_unreachable`]); only an allowed one is answered with the failure.
    Unreachable,
}

impl From<Response> for Unready {
    fn from(answer: Response) -> Unready {
        Unready::Answer(answer)
    }
}

/// The tunnel's line and upstream session, and the protocol it speaks; or why there is none.
async fn upstream_session(
    t: &Inspected,
    ctx: &RequestCtx<'_>,
    alpn: &[Vec<u8>],
    decision: &Decision,
) -> Result<(Session, Option<Vec<u8>>), Unready> {
    let host = t.host_str();
    let asked = Asked { method: TUNNEL_METHOD, host: &host, port: t.port, path: None };
    if let Some(kept) = t.kept_session(alpn) {
        // INVARIANT: as before a dial, the tunnel is logged before the session carries a byte of its client's.
        if let Err(answer) = ctx.pass(&asked, decision) {
            t.keep(kept);
            return Err(answer.into());
        }
        // HTTP/1.1, as the tunnel that left the session spoke it.
        let chosen = alpn.iter().any(|p| p == ALPN_HTTP1).then(|| ALPN_HTTP1.to_vec());
        return Ok((Session { tls: kept, kept: true }, chosen));
    }
    let route = match t.route().await {
        Ok(route) => route,
        Err(DialError::Refused(reason)) => return Err(ctx.refuse_destination(&asked, reason).into()),
        Err(_) => {
            ctx.pass(&asked, decision)?;
            return Err(Unready::Unreachable);
        }
    };
    // INVARIANT: the tunnel is logged before an upstream connection is opened, so before any byte of the client's
    // reaches one.
    ctx.pass(&asked, decision)?;
    match t.dial_route(&route, t.tls.upstream_config(alpn)).await {
        Ok(upstream) => {
            let chosen = upstream.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
            Ok((Session { tls: upstream, kept: false }, chosen))
        }
        Err(UpstreamError::Tls(why)) => Err(upstream_tls_refused(t, ctx, &asked, decision.rule.clone(), &why).into()),
        Err(UpstreamError::Dial(_)) => Err(Unready::Unreachable),
    }
}

/// An allowed tunnel whose upstream could not be resolved or reached: the client's handshake is completed anyway
/// (HTTP/1.1) and each request in it decided and logged on its own path, as in a tunnel opened to ask. A refused one
/// gets its 403; an allowed one dials, and gets the failure (502/504, its line saying why) if the upstream is still
/// unreachable. Before, the tunnel was answered 502 at once and a blocked path left no line.
async fn serve_unreachable<T>(t: &Inspected, ctx: &RequestCtx<'_>, client: BufConn<TcpStream>) -> Option<T> {
    let Some(client) = accept(t, client, t.tls.server_for_answers()).await else {
        ctx.outcome(0, 0, 0);
        return None;
    };
    let (up, down) = h1::serve_undialled(t, client).await;
    ctx.outcome(200, up, down);
    None
}

/// Ask mode: a tunnel to a host no rule admits, whose requests leash can read, opened to ask about each of them with
/// its path (its line, `inspect` for `ask`, is written by the caller). The client is answered over HTTP/1.1 and no
/// upstream is dialled: the first request a person allows dials it, resolved and checked then.
/// An async block, not an async fn, which would keep a second copy of `t` for as long as the tunnel is open.
#[allow(clippy::manual_async_fn, reason = "an async fn keeps its arguments beside the locals they move into")]
pub(crate) fn ask_inside(t: Inspected, client: BufConn<TcpStream>) -> impl Future<Output = ()> {
    async move {
        let ctx = t.ctx();
        let Some(client) = accept(&t, client, t.tls.server_for_answers()).await else {
            return ctx.outcome(0, 0, 0);
        };
        let (up, down) = h1::serve_undialled(&t, client).await;
        ctx.outcome(200, up, down);
    }
}

/// Record and answer an upstream whose certificate (or TLS itself) failed, at the tunnel's first dial or an HTTP/1.1
/// re-dial: a `block upstream-tls` line under `ctx`'s id, keeping the rule it was allowed by, and a 502.
pub(super) fn upstream_tls_refused(
    t: &Inspected,
    ctx: &RequestCtx<'_>,
    asked: &Asked<'_>,
    rule: Option<Arc<str>>,
    why: &str,
) -> Response {
    let refused = Decision { verdict: Verdict::Block, reason: Reason::UpstreamTls, rule };
    ctx.refuse_with(asked, &refused, Response::upstream_tls(&t.authority(), why))
}

/// Answer a tunnel inside TLS with `answer`, a 403 naming the path the client asked for; `None`, as nothing more is
/// served.
async fn answer_at_path<T>(t: &Inspected, client: BufConn<TcpStream>, answer: Response) -> Option<T> {
    let host = t.host_str();
    answer_in_tls(&t.sh, &t.tls, client, |path| answer.naming_path(&host, path)).await;
    None
}

/// Complete the client's handshake with the leaf for its SNI; `None` when it fails (the client does not trust the
/// run's CA, or went away).
async fn accept(t: &Inspected, client: BufConn<TcpStream>, config: Arc<rustls::ServerConfig>) -> Option<ClientTls> {
    accept_with(t.sh.cfg.limits.client_hello_timeout, client, config).await
}

/// [`accept`] within `timeout`.
async fn accept_with(
    timeout: Duration,
    client: BufConn<TcpStream>,
    config: Arc<rustls::ServerConfig>,
) -> Option<ClientTls> {
    let handshake = TlsAcceptor::from(config).accept(TlsIo::new(client));
    match tokio::time::timeout(timeout, handshake).await {
        Ok(Ok(mut tls)) => {
            let (io, session) = tls.get_mut();
            session.set_buffer_limit(Some(SEND_BUFFER_LIMIT));
            // The buffer the ClientHello was peeked into (8 KiB) was replayed to the session: a tunnel does not keep
            // it for as long as it is open.
            io.get_mut().release_if_empty();
            Some(tls)
        }
        Ok(Err(e)) => {
            tracing::debug!("client TLS handshake failed (does it trust the run's CA?): {e}");
            None
        }
        Err(_) => None,
    }
}

/// leash's own answer inside TLS, for any tunnel, inspected or not (one refused on its SNI): complete the
/// handshake (HTTP/1.1), read one request head, answer `respond(path)` with `Connection: close`. A client that does
/// not trust the run's CA sees a failed handshake.
pub(crate) async fn answer_in_tls(
    sh: &Shared,
    tls: &Inspection,
    client: BufConn<TcpStream>,
    respond: impl FnOnce(&str) -> Response,
) {
    let limits = &sh.cfg.limits;
    let Some(tls) = accept_with(limits.client_hello_timeout, client, tls.server_for_answers()).await else { return };
    let mut conn = BufConn::new(tls);
    let max = limits.max_head_bytes;
    let read = conn.read_head(limits.head_timeout, limits.head_timeout, Reparse::OnLineEnd { max }, |b| {
        parse_request_head(b, max)
    });
    let path = match read.await {
        Ok(head) if head.target.starts_with('/') => split_query(&head.target).0.to_owned(),
        Ok(_) => String::new(),
        Err(_) => return,
    };
    let response = respond(&path);
    let _ = conn.io.write_all(&response.to_bytes(false)).await;
    close_gracefully(&mut conn.io).await;
}

/// A TLS failure (as opposed to the connection failing under it).
fn is_tls_error(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<rustls::Error>()) || e.kind() == io::ErrorKind::InvalidData
}

#[cfg(test)]
pub(super) mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use rustls::pki_types::ServerName;
    use tokio::net::{TcpListener, TcpStream};
    use tokio_rustls::{client, TlsConnector};

    use super::{accept_with, ClientTls};
    use crate::conn::BufConn;
    use crate::tls::{Inspection, UpstreamTrust};

    /// A client's TLS session and leash's side of it, its ClientHello peeked into the connection's buffer first as a
    /// tunnel's is; and that buffer's capacity before the handshake.
    pub(crate) async fn session_pair() -> (ClientTls, client::TlsStream<TcpStream>, usize) {
        let tls = Inspection::new(&UpstreamTrust { system_roots: true, ..UpstreamTrust::default() }).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(tls.ca().cert_der().clone()).unwrap();
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connect = async {
            let tcp = TcpStream::connect(addr).await.unwrap();
            let name = ServerName::try_from("peeked.test").unwrap();
            TlsConnector::from(Arc::new(config)).connect(name, tcp).await.unwrap()
        };
        let accept = async {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut peeked = BufConn::new(tcp);
            peeked.source().fill(8 * 1024).await.unwrap();
            assert!(!peeked.buf.is_empty());
            let capacity = peeked.buf.capacity();
            (accept_with(Duration::from_secs(5), peeked, tls.server_for_answers()).await.unwrap(), capacity)
        };
        let (client, (session, peeked)) = tokio::join!(connect, accept);
        (session, client, peeked)
    }

    /// The ClientHello is peeked into the client connection's read buffer and replayed to the TLS session; once the
    /// handshake is done nothing is left in it, and an inspected tunnel does not keep it (8 KiB) while it is open.
    #[tokio::test]
    async fn the_buffer_the_client_hello_was_peeked_into_is_released_after_the_handshake() {
        let (session, _client, peeked) = session_pair().await;
        assert!(peeked >= 8 * 1024);
        assert_eq!(session.get_ref().0.get_ref().buf.capacity(), 0);
    }
}
