//! HTTP/2 inside an inspected tunnel (the client and the upstream both chose `h2`): hyper serves the client's
//! connection, each stream is decided on its own (`:scheme` https, `:authority` and any Host naming the SNI host
//! and the tunnel's port, canonical path), and allowed streams go to the upstream over one HTTP/2 connection with
//! bodies and trailers streamed both ways — so gRPC works. Refused streams get leash's 403; the connection stays up,
//! and the rest of a body the client is still sending is read and dropped ([`super::client_body`]).

use std::borrow::Cow;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http::header::{HeaderName, CONTENT_ENCODING, CONTENT_LENGTH, HOST};
use http::{HeaderMap, HeaderValue, Request, Response as HttpResponse, Version};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::{Body, Frame, Incoming};
use hyper::client::conn::http2::SendRequest;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use leash_policy::{canonicalize, parse_authority, Decision, ProviderTools, Question, Reason, Scheme, Verdict, Via};

use super::client_body::ClientBody;
use super::{ClientTls, Inspected, UpstreamTls};
use crate::audit::{refusal, UpstreamFailure};
use crate::config::Snapshot;
use crate::credentials::{LeakFound, LeakWatch, Outbound, Redactor};
use crate::gate::{Asked, Extras, RequestCtx};
use crate::headers;
use crate::model::{self, Gate};
use crate::refusal::Response;
use crate::wire::target::split_query;

type ResBody = BoxBody<Bytes, hyper::Error>;
/// A request body going up: the client's stream as it comes, or a model API body leash read and checked.
type ReqBody = BoxBody<Bytes, BoxError>;
type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Upstream = SendRequest<Counted<ReqBody>>;

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
pub(super) async fn serve(t: Arc<Inspected>, client: ClientTls, upstream: UpstreamTls) -> (u16, u64, u64) {
    let exec = TokioExecutor::new();
    let handshake =
        hyper::client::conn::http2::Builder::new(exec.clone()).handshake::<_, Counted<ReqBody>>(TokioIo::new(upstream));
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

/// One stream: decide at the gate, forward or refuse. `sender` is the upstream connection, or why there is none.
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
    let path_and_query = parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
    let (path_only, _) = split_query(&path_and_query);
    let host = t.host_str();
    let asked = |path| Asked { method: parts.method.as_str(), host: &host, port: t.port, path: Some(path) };
    let decision = decide(&t, &ctx, &parts, path_only).unwrap_or_else(|refused| refused);
    if decision.verdict == Verdict::Block {
        return own_response(&ctx.refuse(&asked(&path_and_query), &decision));
    }
    // Credentials: one bound to another host refuses the stream; the host's own goes in.
    let secrets = &ctx.sh.cfg.credentials;
    let method = parts.method.as_str().to_owned();
    let outbound = secrets.outbound_h2(&ctx.snap, &t.host, (&method, &path_and_query), &mut parts.headers);
    let (credential, redact, query) = match outbound {
        Outbound::Leak(name) => return own_response(&ctx.refuse_leak(&asked(&path_and_query), &name)),
        Outbound::Go { credential, redactor, query } => (credential, redactor, query),
    };
    // The path and query sent: the decided one, unless a credential went into its query (never logged).
    let sent_path = query.map_or_else(|| path_and_query.clone(), |q| format!("{path_only}?{q}"));
    let checked = match ctx.snap.filters_provider_tools(&t.host) {
        true => gate(&t, &parts, body, ctx.snap.provider_tools()).await,
        false => {
            Ok(Checked { body: body.map_err(BoxError::from).boxed(), length: None, stripped: Vec::new(), read: None })
        }
    };
    let checked = match checked {
        Ok(checked) => checked,
        Err(why) => {
            let answer = Response::provider_error(&host, &format!("{host}{path_only}"), &why);
            return own_response(&ctx.refuse_with(&asked(&path_and_query), &model::refused(), answer));
        }
    };
    // A body leash read is searched too.
    let own = ctx.snap.credential_for(&t.host).map(|c| &*c.name);
    if let Some(name) = checked.read.as_ref().and_then(|body| secrets.found_in_any(own, [body.as_ref()])) {
        return own_response(&ctx.refuse_leak(&asked(&path_and_query), name));
    }
    // INVARIANT: logged before the stream's head or body goes up.
    let forwarded = model::forwarded(&decision, &checked.stripped);
    let extras = Extras::allowed(&checked.stripped, credential.as_deref(), None);
    if let Err(answer) = ctx.pass_with(&asked(path_only), &forwarded, extras) {
        return own_response(&answer);
    }
    let mut sender = match sender {
        Ok(sender) => sender,
        Err(why) => return failed(&t, &ctx, UpstreamFailure::BadResponse, &why),
    };
    let up = Arc::new(AtomicU64::new(0));
    let mut request = Request::builder()
        .method(parts.method.clone())
        .uri(format!("https://{}{sent_path}", t.authority()))
        .version(Version::HTTP_2);
    if let Some(headers) = request.headers_mut() {
        copy_end_to_end(&parts.headers, headers);
        if let Some(length) = checked.length {
            headers.insert(CONTENT_LENGTH, HeaderValue::from(length));
        }
    }
    // A body that carries a credential bound elsewhere is cut off before it, and the stream refused.
    let leaked = Arc::new(Mutex::new(None));
    let body = match LeakWatch::new(secrets, own) {
        Some(watch) => {
            WatchedBody { inner: checked.body, watch, found: leaked.clone(), held_trailers: None, ended: false }.boxed()
        }
        None => checked.body,
    };
    let request = match request.body(Counted { inner: body, count: up.clone(), on_end: None }) {
        Ok(r) => r,
        Err(e) => return failed(&t, &ctx, UpstreamFailure::BadResponse, &e.to_string()),
    };
    match sender.send_request(request).await {
        Ok(response) => {
            let status = response.status().as_u16();
            let mut response = response;
            if let Some(redactor) = &redact {
                redact_fields(response.headers_mut(), redactor);
            }
            let log = OutcomeLog {
                t: t.clone(),
                snap: ctx.snap.clone(),
                id: ctx.id,
                status,
                up,
                started: ctx.started,
                totals,
            };
            response.map(|body| {
                let inner = match redact {
                    Some(redactor) => Redacted { inner: body, redactor, ended: false, trailers: None }.boxed(),
                    None => body.boxed(),
                };
                Counted { inner, count: Arc::new(AtomicU64::new(0)), on_end: Some(log) }.boxed()
            })
        }
        Err(e) => match leaked.lock().unwrap_or_else(|p| p.into_inner()).take() {
            Some(name) => own_response(&ctx.refuse_leak(&asked(&path_and_query), &name)),
            None => failed(&t, &ctx, failure_of(&e), &e.to_string()),
        },
    }
}

/// A request body going up through a [`LeakWatch`]: a credential found ends it with an error (the stream is reset
/// upstream, nothing of the credential sent) and is noted in `found`.
struct WatchedBody<B> {
    inner: B,
    watch: LeakWatch,
    found: Arc<Mutex<Option<Arc<str>>>>,
    held_trailers: Option<Frame<Bytes>>,
    ended: bool,
}

impl<B: Body<Data = Bytes, Error = BoxError> + Unpin> Body for WatchedBody<B> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(trailers) = self.held_trailers.take() {
            return Poll::Ready(Some(Ok(trailers)));
        }
        if self.ended {
            return Poll::Ready(None);
        }
        let frame = match ready!(Pin::new(&mut self.inner).poll_frame(cx)) {
            None => {
                self.ended = true;
                let rest = self.watch.finish();
                return Poll::Ready((!rest.is_empty()).then(|| Ok(Frame::data(Bytes::from(rest)))));
            }
            Some(Err(e)) => return Poll::Ready(Some(Err(e))),
            Some(Ok(frame)) => frame,
        };
        match frame.into_data() {
            Ok(data) => match self.watch.pass(&data, true) {
                Ok(now) => Poll::Ready(Some(Ok(Frame::data(Bytes::from(now))))),
                Err(name) => {
                    *self.found.lock().unwrap_or_else(|p| p.into_inner()) = Some(name.clone());
                    Poll::Ready(Some(Err(Box::new(LeakFound(name)))))
                }
            },
            Err(trailers) => {
                let fields = trailers.trailers_ref().into_iter().flatten();
                let leaked = fields.into_iter().find_map(|(k, v)| {
                    self.watch.found_in(k.as_str().as_bytes()).or_else(|| self.watch.found_in(v.as_bytes()))
                });
                if let Some(name) = leaked {
                    *self.found.lock().unwrap_or_else(|p| p.into_inner()) = Some(name.clone());
                    return Poll::Ready(Some(Err(Box::new(LeakFound(name)))));
                }
                let rest = self.watch.finish();
                if rest.is_empty() {
                    return Poll::Ready(Some(Ok(trailers)));
                }
                self.held_trailers = Some(trailers);
                Poll::Ready(Some(Ok(Frame::data(Bytes::from(rest)))))
            }
        }
    }
}

/// A stream's body after the model API gate.
struct Checked {
    body: ReqBody,
    /// The length of a body leash read (its `content-length` replaces the client's).
    length: Option<usize>,
    stripped: Vec<String>,
    /// The body leash read, as it goes up (searched for credentials bound to other hosts).
    read: Option<Bytes>,
}

/// Read and check the body of a stream to a model host whose provider-side tools the policy filters; `Err` says
/// why it is refused. A stream without a body passes as it is.
async fn gate(
    t: &Inspected,
    parts: &http::request::Parts,
    body: ClientBody,
    tools: ProviderTools,
) -> Result<Checked, String> {
    if body.is_end_stream() {
        return Ok(Checked {
            body: body.map_err(BoxError::from).boxed(),
            length: None,
            stripped: Vec::new(),
            read: None,
        });
    }
    if let Some(why) = model::encoding_problem(parts.headers.get_all(CONTENT_ENCODING).iter().map(|v| v.as_bytes())) {
        return Err(why);
    }
    let max = t.sh.cfg.limits.max_model_body;
    let declared = parts.headers.get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(model::too_large(max));
    }
    // The client sends its body at its own pace; as long as leash would wait for an upstream's answer, no longer.
    let collected = tokio::time::timeout(t.sh.cfg.limits.response_timeout, Limited::new(body, max).collect()).await;
    let whole = match collected {
        Err(_) => return Err("the body did not arrive in time".to_owned()),
        Ok(Err(e)) if e.is::<LengthLimitError>() => return Err(model::too_large(max)),
        Ok(Err(e)) => return Err(format!("the body could not be read: {e}")),
        Ok(Ok(collected)) => collected.to_bytes(),
    };
    let (body, stripped) = match whole.is_empty() {
        true => (whole, Vec::new()),
        false => match model::judge(whole, parts.uri.path(), tools) {
            Gate::Forward { body, stripped } => (body, stripped),
            Gate::Refuse(why) => return Err(why),
        },
    };
    let length = Some(body.len());
    let read = Some(body.clone());
    Ok(Checked { body: Full::new(body).map_err(|never| match never {}).boxed(), length, stripped, read })
}

/// The decision for a stream: scheme, authority and Host, path, then the policy. `Err` is a refusal made before
/// the policy was asked.
fn decide(t: &Inspected, ctx: &RequestCtx<'_>, parts: &http::request::Parts, path: &str) -> Result<Decision, Decision> {
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
    let path = canonicalize(path).map_err(|_| refusal(Reason::BadRequest))?;
    Ok(ctx.decide(&Question::Request(leash_policy::Request {
        via: Via::Tunnel,
        scheme: Scheme::Https,
        host: &t.host,
        port: t.port,
        path: &path,
    })))
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

/// Response fields (or trailers) with a credential's value, where one echoes it in a name or a value, turned back
/// into the placeholder ([`headers::redact_field`], as for HTTP/1.1). A field that cannot be written redacted is
/// dropped, never passed on as it came.
fn redact_fields(fields: &mut HeaderMap, redactor: &Redactor) {
    let untouched = |name: &HeaderName, value: &HeaderValue| {
        let (n, v) = headers::redact_field(redactor, name.as_str().as_bytes(), value.as_bytes());
        matches!((n, v), (Cow::Borrowed(_), Cow::Borrowed(_)))
    };
    // Nearly every response holds no echo: its fields are searched, not copied.
    if fields.iter().all(|(name, value)| untouched(name, value)) {
        return;
    }
    let mut out = HeaderMap::with_capacity(fields.len());
    for (name, value) in fields.iter() {
        let (n, v) = headers::redact_field(redactor, name.as_str().as_bytes(), value.as_bytes());
        if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(&n), HeaderValue::from_bytes(&v)) {
            out.append(n, v);
        }
    }
    *fields = out;
}

/// A response body with a credential's value, wherever it is echoed, turned back into its placeholder (across DATA
/// frames: the [`Redactor`]'s window is held until the next frame, and passed on at the end).
struct Redacted<B> {
    inner: B,
    redactor: Redactor,
    ended: bool,
    /// Trailers that arrived while held bytes were still to go.
    trailers: Option<Frame<Bytes>>,
}

impl<B: Body<Data = Bytes> + Unpin> Body for Redacted<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        if let Some(trailers) = self.trailers.take() {
            return Poll::Ready(Some(Ok(trailers)));
        }
        if self.ended {
            return Poll::Ready(None);
        }
        loop {
            return match Pin::new(&mut self.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        let passed = self.redactor.push(&data, true);
                        // All held (the window): nothing goes until the next frame, and no empty DATA frame meanwhile.
                        if passed.is_empty() {
                            continue;
                        }
                        Poll::Ready(Some(Ok(Frame::data(Bytes::from(passed)))))
                    }
                    // Trailers end the data: what is held goes first, then the trailers on the next poll.
                    Err(mut trailers) => {
                        if let Some(fields) = trailers.trailers_mut() {
                            redact_fields(fields, &self.redactor);
                        }
                        let held = self.redactor.finish();
                        if held.is_empty() {
                            return Poll::Ready(Some(Ok(trailers)));
                        }
                        self.trailers = Some(trailers);
                        Poll::Ready(Some(Ok(Frame::data(Bytes::from(held)))))
                    }
                },
                Poll::Ready(None) => {
                    self.ended = true;
                    let held = self.redactor.finish();
                    match held.is_empty() {
                        true => Poll::Ready(None),
                        false => Poll::Ready(Some(Ok(Frame::data(Bytes::from(held))))),
                    }
                }
                other => other,
            };
        }
    }
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
