//! HTTP/2 inside an inspected tunnel (the client and the upstream both chose `h2`): hyper serves the client's
//! connection, each stream is decided on its own (`:scheme` https, `:authority` and any Host naming the SNI host
//! and the tunnel's port, canonical path), and allowed streams go to the upstream over one HTTP/2 connection with
//! bodies and trailers streamed both ways — so gRPC works. Refused streams get leash's 403; the connection stays up,
//! and the rest of a body the client is still sending is read and dropped ([`super::client_body`]).

mod bodies;

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http::header::{HeaderName, CONTENT_LENGTH, HOST};
use http::{HeaderMap, HeaderValue, Request, Response as HttpResponse, Version};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming};
use hyper::client::conn::http2::SendRequest;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use leash_policy::{canonicalize, parse_authority, CanonicalPath, Decision, Question, Reason, Scheme, Via};

use super::client_body::ClientBody;
use super::{ClientTls, Inspected};
use crate::admit::{admit, sent_target, Admitted, Entry, Tunnelled};
use crate::audit::{refusal, UpstreamFailure};
use crate::config::Snapshot;
use crate::credentials::Redactor;
use crate::gate::{Asked, RequestCtx};
use crate::headers::Redact;
use crate::message::Outgoing;
use crate::model::H2Body;
use crate::refusal::Response;
use crate::upstream_io::UpstreamTls;
use crate::wire::target::split_query;
use bodies::{Redacted, WatchedBody};

type ResBody = BoxBody<Bytes, hyper::Error>;
/// A request body going up: the client's stream as it comes, or a model API body leash read and checked.
type ReqBody = BoxBody<Bytes, BoxError>;
type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Upstream = SendRequest<Counted<ReqBody>>;
/// Where a request body's watch notes the credential it stopped at.
type Found = Arc<Mutex<Option<Arc<str>>>>;

/// Fields that describe one connection (RFC 9113 §8.2.2); never forwarded. `te` is kept only as `trailers`.
const CONNECTION_SPECIFIC: [&str; 6] =
    ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "host"];

/// Bytes each way over the whole tunnel.
#[derive(Default)]
struct Totals {
    up: AtomicU64,
    down: AtomicU64,
}

/// Serve the client's HTTP/2 connection until it ends; returns the tunnel's status and the body bytes relayed up and
/// down. When the upstream's HTTP/2 handshake fails the client is still served, so each of its streams is decided
/// and logged as usual, and every allowed one answered 502; the tunnel's status is then 502.
///
/// The upstream's handshake runs boxed: its future (5.4 kB, the session in it) was the largest state of every
/// connection's future, which each connection, spliced, inspected or plain, is allocated at for as long as it is
/// open. An async block rather than an async fn, which would keep one more copy of the client's session.
pub(super) fn serve(
    t: Arc<Inspected>,
    client: ClientTls,
    upstream: UpstreamTls,
) -> impl Future<Output = (u16, u64, u64)> {
    let exec = TokioExecutor::new();
    let handshake = Box::pin(
        hyper::client::conn::http2::Builder::new(exec.clone()).handshake::<_, Counted<ReqBody>>(TokioIo::new(upstream)),
    );
    async move {
        let (sender, upstream_task, status) = match handshake.await {
            Ok((sender, conn)) => (Ok(sender), Some(tokio::spawn(conn)), 200),
            Err(e) => {
                tracing::warn!("upstream {}: HTTP/2 handshake failed: {e}", t.authority());
                (Err(Arc::<str>::from(format!("HTTP/2 handshake failed: {e}"))), None, 502)
            }
        };
        let totals = Arc::new(Totals::default());
        let service = {
            let totals = totals.clone();
            service_fn(move |req| {
                let (t, sender, totals) = (t.clone(), sender.clone(), totals.clone());
                async move { Ok::<_, Infallible>(stream(t, sender, req, totals).await) }
            })
        };
        let served = hyper::server::conn::http2::Builder::new(exec).serve_connection(TokioIo::new(client), service);
        if let Err(e) = served.await {
            tracing::debug!("inspected HTTP/2 connection ended: {e}");
        }
        if let Some(task) = upstream_task {
            task.abort();
        }
        (status, totals.up.load(Ordering::Relaxed), totals.down.load(Ordering::Relaxed))
    }
}

/// One stream: read its head and hand it over to the admission sequence, then send it up or answer the refusal.
/// `sender` is the upstream connection, or why there is none.
async fn stream(
    t: Arc<Inspected>,
    sender: Result<Upstream, Arc<str>>,
    req: Request<Incoming>,
    totals: Arc<Totals>,
) -> HttpResponse<ResBody> {
    let ctx = t.request_ctx();
    let (mut parts, body) = req.into_parts();
    // However this stream is answered, the client may send its body to the end (see `client_body`).
    let body = ClientBody::new(body);
    let (method, path_and_query) = (parts.method.clone(), Outgoing::target(&parts).to_owned());
    let host = t.host_str();
    let asked = Asked { method: method.as_str(), host: &host, port: t.port, path: Some(&path_and_query) };
    let path = match checked_path(&t, &parts, split_query(&path_and_query).0) {
        Ok(path) => path,
        Err(refused) => return own_response(&ctx.refuse(&asked, &refused)),
    };
    let mut body = H2Body::new(&parts, body);
    let entry = Entry { question: question(&t, &path, method.as_str()), host: &t.host, asked };
    let admitted = match admit(&ctx, entry, (&mut parts, &mut body), &mut Tunnelled).await {
        Ok(admitted) => admitted,
        Err(refused) => return own_response(&refused.answer),
    };
    let sender = match sender {
        Ok(sender) => sender,
        Err(why) => return failed(&t, &ctx, UpstreamFailure::BadResponse, &why),
    };
    // A refusal after the allow line names what that line named: the path without its query.
    let allowed = Asked { path: Some(split_query(&path_and_query).0), ..asked };
    send(&t, &ctx, (sender, totals), (parts, body, admitted), &allowed).await
}

/// Send an admitted stream up and relay its response; a request body cut off at a credential bound elsewhere is
/// refused under `allowed` (as its allow line named it).
async fn send(
    t: &Arc<Inspected>,
    ctx: &RequestCtx<'_>,
    (mut sender, totals): (Upstream, Arc<Totals>),
    (parts, body, mut admitted): (http::request::Parts, H2Body<ClientBody>, Admitted<()>),
    allowed: &Asked<'_>,
) -> HttpResponse<ResBody> {
    let up = Arc::new(AtomicU64::new(0));
    let leaked = Arc::new(Mutex::new(None));
    let request = match upstream_request(t, &parts, body, &mut admitted, (&up, &leaked)) {
        Ok(request) => request,
        Err(e) => return failed(t, ctx, UpstreamFailure::BadResponse, &e.to_string()),
    };
    match sender.send_request(request).await {
        Ok(response) => relay(t, ctx, response, admitted.watches.redact, (up, totals)),
        Err(e) => match leaked.lock().unwrap_or_else(|p| p.into_inner()).take() {
            Some(name) => own_response(&ctx.refuse_leak(allowed, &name)),
            None => failed(t, ctx, failure_of(&e), &e.to_string()),
        },
    }
}

/// The request sent up for an admitted stream: the path sent (a credential put into its query), the end-to-end
/// fields, and the body leash read (with its length) or the client's, watched for credentials bound elsewhere.
fn upstream_request(
    t: &Inspected,
    parts: &http::request::Parts,
    body: H2Body<ClientBody>,
    admitted: &mut Admitted<()>,
    (up, leaked): (&Arc<AtomicU64>, &Found),
) -> Result<Request<Counted<ReqBody>>, http::Error> {
    let sent_path = sent_target(Outgoing::target(parts), admitted.query.as_deref());
    let mut request = Request::builder()
        .method(parts.method.clone())
        .uri(format!("https://{}{sent_path}", t.authority()))
        .version(Version::HTTP_2);
    if let Some(headers) = request.headers_mut() {
        copy_end_to_end(&parts.headers, headers);
        if let Some(read) = &admitted.body {
            headers.insert(CONTENT_LENGTH, HeaderValue::from(read.len()));
        }
    }
    let body = match (admitted.body.take(), body.body) {
        (Some(read), _) => Full::new(read).map_err(|never| match never {}).boxed(),
        (None, Some(body)) => body.map_err(BoxError::from).boxed(),
        (None, None) => Full::new(Bytes::new()).map_err(|never| match never {}).boxed(),
    };
    // A body that carries a credential bound elsewhere is cut off before it, and the stream refused.
    let body = match admitted.watches.leaks.take() {
        Some(watch) => WatchedBody::new(body, watch, leaked.clone()).boxed(),
        None => body,
    };
    request.body(Counted { inner: body, count: up.clone(), on_end: None })
}

/// The upstream's response as the client gets it: from a credential's host, its fields and body redacted; its
/// outcome written when the body ends.
fn relay(
    t: &Arc<Inspected>,
    ctx: &RequestCtx<'_>,
    mut response: HttpResponse<Incoming>,
    redact: Option<Redactor>,
    (up, totals): (Arc<AtomicU64>, Arc<Totals>),
) -> HttpResponse<ResBody> {
    let status = response.status().as_u16();
    if let Some(redactor) = &redact {
        response.headers_mut().redact(redactor);
    }
    let (snap, id, started) = (ctx.snap.clone(), ctx.id, ctx.started);
    let log = OutcomeLog { t: t.clone(), snap, id, status, up, started, totals };
    response.map(|body| {
        let inner = match redact {
            Some(redactor) => Redacted::new(body, redactor).boxed(),
            None => body.boxed(),
        };
        Counted { inner, count: Arc::new(AtomicU64::new(0)), on_end: Some(log) }.boxed()
    })
}

/// What the policy is asked about a stream with `method` to `path` in the tunnel.
fn question<'a>(t: &'a Inspected, path: &'a CanonicalPath, method: &'a str) -> Question<'a> {
    let (via, scheme) = (Via::Tunnel, Scheme::Https);
    let request = leash_policy::Request { via, scheme, host: &t.host, port: t.port, path, method };
    Question::Request(request)
}

/// The canonical path of a stream whose scheme, `:authority` and any Host name the tunnel's host and port; `Err` is
/// the refusal of one that does not.
fn checked_path(t: &Inspected, parts: &http::request::Parts, path: &str) -> Result<CanonicalPath, Decision> {
    if parts.uri.scheme_str() != Some("https") {
        return Err(refusal(Reason::Scheme));
    }
    let authority = parts.uri.authority().map(|a| a.as_str());
    let host_header = parts.headers.get(HOST).map(|v| v.to_str().unwrap_or("\u{0}"));
    for named in authority.into_iter().chain(host_header) {
        if !names_tunnel_host(t, named) {
            return Err(refusal(Reason::HostMismatch));
        }
    }
    if authority.is_none() && host_header.is_none() {
        return Err(refusal(Reason::HostMismatch));
    }
    canonicalize(path).map_err(|_| refusal(Reason::BadRequest))
}

/// True if `authority` names the tunnel's host and port (443 when it names none).
fn names_tunnel_host(t: &Inspected, authority: &str) -> bool {
    match parse_authority(authority) {
        Ok(a) => a.host == t.host && a.port.unwrap_or(443) == t.port,
        Err(_) => false,
    }
}

/// Every header but the connection-specific ones; `te` only as `trailers` (what gRPC sends).
fn copy_end_to_end(from: &HeaderMap, to: &mut HeaderMap) {
    for (name, value) in from {
        let n = name.as_str();
        if CONNECTION_SPECIFIC.contains(&n) || (n == "te" && value.as_bytes() != b"trailers") {
            continue;
        }
        to.append(name.clone(), value.clone());
    }
}

/// A failure after the decision: the outcome with its cause and a warning, 502 to the client.
fn failed(t: &Inspected, ctx: &RequestCtx<'_>, cause: UpstreamFailure, why: &str) -> HttpResponse<ResBody> {
    ctx.failed(502, &t.authority(), Some(cause), why);
    own_response(&Response::upstream_failed(502, &t.authority(), why))
}

/// Why an HTTP/2 request to the upstream failed, as the outcome's `error` says it.
fn failure_of(e: &hyper::Error) -> UpstreamFailure {
    let io = std::error::Error::source(e).and_then(|s| s.downcast_ref::<std::io::Error>());
    match io {
        Some(io) => UpstreamFailure::of_io(io),
        None if e.is_timeout() => UpstreamFailure::TimedOut,
        None if e.is_closed() || e.is_canceled() => UpstreamFailure::Closed,
        None => UpstreamFailure::BadResponse,
    }
}

/// One of leash's own responses as an HTTP/2 response.
fn own_response(r: &Response) -> HttpResponse<ResBody> {
    let mut response =
        HttpResponse::new(Full::new(Bytes::from(r.body.clone())).map_err(|never| match never {}).boxed());
    *response.status_mut() = http::StatusCode::from_u16(r.status).unwrap_or(http::StatusCode::FORBIDDEN);
    let headers = response.headers_mut();
    headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static(r.content_type()));
    if let Some(reason) = r.reason {
        headers.insert(HeaderName::from_static("x-leash-reason"), HeaderValue::from_static(reason.as_str()));
    }
    response
}

/// Writes a stream's outcome when its response body ends (or is dropped: a reset stream).
struct OutcomeLog {
    t: Arc<Inspected>,
    /// The policy the stream was decided on (its context's, rebuilt when the body ends).
    snap: Arc<Snapshot>,
    id: u64,
    status: u16,
    up: Arc<AtomicU64>,
    started: Instant,
    totals: Arc<Totals>,
}

/// A body passed through frame by frame (data and trailers, no buffering), counting its data bytes.
struct Counted<B> {
    inner: B,
    count: Arc<AtomicU64>,
    on_end: Option<OutcomeLog>,
}

impl<B: Body<Data = Bytes> + Unpin> Body for Counted<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(data) = frame.data_ref() {
                self.count.fetch_add(data.len() as u64, Ordering::Relaxed);
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

impl<B> Drop for Counted<B> {
    fn drop(&mut self) {
        if let Some(log) = self.on_end.take() {
            let (up, down) = (log.up.load(Ordering::Relaxed), self.count.load(Ordering::Relaxed));
            log.totals.up.fetch_add(up, Ordering::Relaxed);
            log.totals.down.fetch_add(down, Ordering::Relaxed);
            let ctx = RequestCtx {
                sh: &log.t.sh,
                snap: log.snap,
                id: log.id,
                peer: log.t.peer,
                started: log.started,
                service: None,
            };
            ctx.outcome(log.status, up, down);
        }
    }
}
