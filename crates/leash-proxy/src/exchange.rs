//! One request/response exchange with an upstream: the head and body go up while the response comes down (so
//! early responses work), 1xx responses are passed on, a 101 that answers the WebSocket
//! the request asked for switches to a relay (a watched one on a credential's host: `upgrade.rs`), any other is
//! refused.
//! A client that goes away while its final response is being relayed ends the exchange, not as a failure: its
//! outcome keeps the upstream's status and the bytes relayed each way until then (as a reset HTTP/2 stream's does).

use std::io::{self, Write as _};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::audit::UpstreamFailure;

use crate::conn::{BufConn, Next, ReadHeadError, Reparse, Source};
pub(crate) use crate::credentials::Watches;
use crate::credentials::{Filter, Filtered, LeakFound, LeakWatch, Redacting, Redactor, Watched};
use crate::dial::DialError;
use crate::gate::{Asked, RequestCtx};
use crate::headers;
use crate::refusal::{reply, Response};
use crate::request::Plan;
use crate::shared::Shared;
use crate::upgrade::{self, SwitchRefused};
use crate::websocket_relay::{self, BadFrames};
use crate::wire::http_head::{parse_response_head, response_framing, BodyFraming, RequestHead, ResponseHead, Version};
use crate::wire::websocket::FrameError;

/// A completed exchange.
pub(crate) struct Exchanged {
    pub status: u16,
    pub up: u64,
    pub down: u64,
    pub upstream_reusable: bool,
    pub client_keep_alive: bool,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ExchangeError {
    /// The upstream closed or reset before any response byte: a pooled connection that had gone stale.
    #[error("upstream closed the connection before answering")]
    Stale,
    #[error("no response from upstream in time")]
    Timeout,
    #[error("malformed response from upstream: {0}")]
    BadResponse(String),
    #[error("upstream connection failed: {0}")]
    Upstream(io::Error),
    #[error("{0}")]
    Dial(DialError),
    /// leash answers by itself, its decision line already written: a re-dial (after the first upstream connection
    /// went stale or closed) was refused on its destination or on the upstream's certificate, as a first dial is.
    #[error("{}", .0.body.trim_end())]
    Answered(Response),
    /// The response had begun reaching the client and the upstream failed, or the client failed before the final
    /// response (reading its body, writing a 1xx): nothing more can be said. (A client that goes away during the
    /// final response is no error: see [`Relayed::client_gone`].)
    #[error("connection ended mid-response: {0}")]
    Midway(io::Error),
    /// The request body carried this credential to a host it does not belong to; the body was cut off before it.
    #[error("the request body carries credential `{0}`")]
    Leak(Arc<str>),
    /// A 101 leash does not relay (see `upgrade.rs`): nothing of it reached the client.
    #[error("{0}: not relayed")]
    Switched(SwitchRefused),
    /// After a WebSocket's 101 on a credential's host, the server's frames could not be followed: the connection
    /// was ended.
    #[error("{}", BadFrames(*.0))]
    Frames(FrameError),
}

impl ExchangeError {
    /// Why the upstream failed, for the outcome's `error` (`None` where leash answered by itself).
    pub fn cause(&self) -> Option<UpstreamFailure> {
        match self {
            ExchangeError::Stale => Some(UpstreamFailure::Closed),
            ExchangeError::Timeout => Some(UpstreamFailure::TimedOut),
            ExchangeError::BadResponse(_) | ExchangeError::Switched(_) | ExchangeError::Frames(_) => {
                Some(UpstreamFailure::BadResponse)
            }
            ExchangeError::Upstream(e) => Some(UpstreamFailure::of_io(e)),
            ExchangeError::Dial(e) => e.cause(),
            // Either side may have ended a response under way: nothing to blame the upstream for.
            ExchangeError::Midway(_) | ExchangeError::Answered(_) | ExchangeError::Leak(_) => None,
        }
    }

    pub fn status(&self) -> u16 {
        match self {
            ExchangeError::Timeout => 504,
            ExchangeError::Dial(e) => e.status(),
            ExchangeError::Answered(r) => r.status,
            ExchangeError::Leak(_) => 403,
            _ => 502,
        }
    }

    /// True when the client already received part of a response (so no error response can follow).
    pub fn response_started(&self) -> bool {
        matches!(self, ExchangeError::Midway(_) | ExchangeError::Frames(_))
    }
}

/// How the response went.
struct Relayed {
    status: u16,
    down: u64,
    framing: BodyFraming,
    upstream_close: bool,
    upgraded: bool,
    /// A write to the client failed during the final response (it hung up): `down` is what it accepted before.
    client_gone: bool,
}

/// Record how an exchange ended and say whether the client may go on; a failure the client has not seen any of
/// yet is answered with 502/504 naming `authority()`, a body that carried a credential elsewhere with 403 under
/// `asked`. The completed exchange is returned for the caller's upstream reuse.
pub(crate) async fn settle<S>(
    ctx: &RequestCtx<'_>,
    client: &mut BufConn<S>,
    result: Result<Exchanged, ExchangeError>,
    (asked, authority): (&Asked<'_>, impl FnOnce() -> String),
) -> (Next, Option<Exchanged>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    match result {
        Ok(done) => {
            ctx.outcome(done.status, done.up, done.down);
            let next = if done.client_keep_alive { Next::KeepAlive } else { Next::Close };
            (next, Some(done))
        }
        // A refusal on a re-dial: its block line is the request's last, as for a refusal on a first dial.
        Err(ExchangeError::Answered(response)) => (reply(client, &response, false).await, None),
        // Its block line follows the request's allow line under the same id, as a refusal on a re-dial does.
        Err(ExchangeError::Leak(name)) => (reply(client, &ctx.refuse_leak(asked, &name), false).await, None),
        Err(e) => {
            let (status, authority) = (e.status(), authority());
            ctx.failed(status, &authority, e.cause(), &e.to_string());
            if e.response_started() {
                return (Next::Close, None);
            }
            let response = Response::upstream_failed(status, &authority, &e.to_string());
            (reply(client, &response, false).await, None)
        }
    }
}

/// Send `request` (and the client's body) up, relay the response down. The upstream is a plain TCP connection
/// (forward proxy) or the TLS session of an inspected tunnel. `watches`: the credential put on the request, turned
/// back into its placeholder wherever the response body echoes it; credentials the request body must not carry to
/// this host; the upstream proxy. Lent, each watch cloned where it starts: taken by value, they were kept beside
/// their clones in the exchange's future, which is part of every connection's.
pub(crate) async fn exchange<S, U>(
    sh: &Shared,
    client: &mut BufConn<S>,
    upstream: &mut BufConn<U>,
    (request, head, plan): (&[u8], &RequestHead, &Plan<'_>),
    watches: &Watches,
) -> Result<Exchanged, ExchangeError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
    U: AsyncRead + AsyncWrite + Unpin + Send,
{
    if let Err(e) = upstream.io.write_all(request).await.and(upstream.io.flush().await) {
        return Err(stale_or(e));
    }
    let keep = plan.client_keep_alive;
    let (relayed, body_sent) = if plan.framing == BodyFraming::None {
        let mut down = upstream.source();
        let watch = (watches.redact.clone(), watches.via_proxy.as_deref());
        (relay_response(sh, &mut down, &mut client.io, (head, keep, false), watch).await?, Some(0))
    } else {
        let continued = expects_continue(head);
        if continued {
            // The request is decided and its head is upstream: the client may send its body (RFC 9110 §10.1.1;
            // an origin that never answers 100 itself would otherwise leave a waiting client waiting).
            let sent = client.io.write_all(CONTINUE).await.and(client.io.flush().await);
            sent.map_err(ExchangeError::Midway)?;
        }
        with_body(sh, client, upstream, head, plan, watches, continued).await?
    };
    let up = request.len() as u64 + body_sent.unwrap_or(0);
    if relayed.client_gone {
        return Ok(done(relayed.status, up, relayed.down, false, false));
    }
    // relay_final let only the WebSocket the request asked for switch.
    if relayed.upgraded && upgrade::forwarded(head).is_some() {
        // What watches the exchange watches the bytes after a 101 too.
        let after_upgrade = (watches.redact.clone(), watches.leaks.clone());
        let (a, b) = relay_upgraded(client, upstream, after_upgrade).await?;
        return Ok(done(relayed.status, up + a, relayed.down + b, false, false));
    }
    let complete = body_sent.is_some() && relayed.framing != BodyFraming::UntilClose;
    let reusable = complete && !relayed.upstream_close;
    Ok(done(relayed.status, up, relayed.down, reusable, complete && keep))
}

/// leash's own interim answer to a request that expects one.
const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// An HTTP/1.1 request with `Expect: 100-continue` (any case), whose client waits for a 100 before its body; an
/// HTTP/1.0 request's expectation is ignored, as RFC 9110 §10.1.1 says.
fn expects_continue(head: &RequestHead) -> bool {
    head.version == Version::Http11 && head.values("expect").any(|v| v.eq_ignore_ascii_case(b"100-continue"))
}

fn done(status: u16, up: u64, down: u64, upstream_reusable: bool, client_keep_alive: bool) -> Exchanged {
    Exchanged { status, up, down, upstream_reusable, client_keep_alive }
}

/// Stream the body up while the response streams down. `None` when the response ended before the body did.
async fn with_body<S, U>(
    sh: &Shared,
    client: &mut BufConn<S>,
    upstream: &mut BufConn<U>,
    head: &RequestHead,
    plan: &Plan<'_>,
    watches: &Watches,
    continued: bool,
) -> Result<(Relayed, Option<u64>), ExchangeError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
    U: AsyncRead + AsyncWrite + Unpin + Send,
{
    let BufConn { io: client_io, buf: client_buf } = client;
    let (mut client_rd, mut client_wr) = tokio::io::split(client_io);
    let (mut up_rd, mut up_wr) = tokio::io::split(&mut upstream.io);
    let mut body_src = Source { buf: client_buf, io: &mut client_rd };
    let mut down = Source { buf: &mut upstream.buf, io: &mut up_rd };
    let send = async {
        match watches.leaks.clone() {
            Some(watch) => {
                let chunked = plan.framing == BodyFraming::Chunked;
                let mut watched = Watched::new(&mut up_wr, watch, chunked);
                let sent = send_body(&mut body_src, &mut watched, plan.framing).await?;
                // The body's end: what the watch held (a possible start that was none) goes up.
                watched.finish().await.map(|()| sent)
            }
            None => send_body(&mut body_src, &mut up_wr, plan.framing).await,
        }
    };
    let watch = (watches.redact.clone(), watches.via_proxy.as_deref());
    let recv = relay_response(sh, &mut down, &mut client_wr, (head, plan.client_keep_alive, continued), watch);
    tokio::pin!(send, recv);
    let mut sent = None;
    loop {
        tokio::select! {
            s = &mut send, if sent.is_none() => match s {
                Ok(n) => sent = Some(n),
                Err(e) => return Err(LeakFound::of(&e).map_or(ExchangeError::Midway(e), ExchangeError::Leak)),
            },
            r = &mut recv => return Ok((r?, sent)),
        }
    }
}

async fn send_body<R, W>(src: &mut Source<'_, R>, to: &mut W, framing: BodyFraming) -> io::Result<u64>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let sent = match framing {
        BodyFraming::ContentLength(n) => src.copy_exact(to, n).await?,
        BodyFraming::Chunked => src.relay_chunked(to).await?,
        BodyFraming::None | BodyFraming::UntilClose => 0,
    };
    to.flush().await?;
    Ok(sent)
}

/// Read response heads (passing 1xx on, but for a 100 when leash has sent the client its own), then the final head
/// and its body.
async fn relay_response<R, W>(
    sh: &Shared,
    down: &mut Source<'_, R>,
    client: &mut W,
    (request, client_keep_alive, continued): (&RequestHead, bool, bool),
    (redact, via_proxy): (Option<Redactor>, Option<&str>),
) -> Result<Relayed, ExchangeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let limits = &sh.cfg.limits;
    let max = limits.max_head_bytes;
    let mut first = true;
    loop {
        let head = down
            .read_head(limits.response_timeout, limits.response_timeout, Reparse::OnLineEnd { max }, |b| {
                parse_response_head(b, max)
            })
            .await
            .map_err(|e| head_error(e, first))?;
        first = false;
        if head.status == 100 && continued {
            continue;
        }
        if (100..200).contains(&head.status) && head.status != 101 {
            let bytes = client_head_bytes(&head, false, redact.as_ref());
            client.write_all(&bytes).await.map_err(ExchangeError::Midway)?;
            client.flush().await.map_err(ExchangeError::Midway)?;
            continue;
        }
        // The upstream proxy's own refusal: a 502 naming it, never passed on as the origin's answer.
        if let Some(refused) = via_proxy.and_then(|proxy| proxy_refusal(&head).map(|why| (proxy, why))) {
            // The marker is the upstream's text, quoted in the 502, the log and a warning: a credential's value in
            // it (a proxy echoing what it got) becomes the placeholder there too.
            let why = sh.cfg.credentials.masked(&refused.1).unwrap_or(refused.1);
            return Err(ExchangeError::Dial(DialError::UpstreamProxy(refused.0.to_owned(), why)));
        }
        return relay_final(down, client, &head, (request, client_keep_alive), redact).await;
    }
}

/// Whether a response through the upstream proxy is the proxy's own refusal rather than the origin's answer, and
/// then its status and marker as the 502 and the log name them. Only what proxies mark as theirs counts: `407`
/// (only a proxy asks for proxy credentials) and squid's `X-Squid-Error` (on every page squid itself generates:
/// `ERR_ACCESS_DENIED`, `ERR_DNS_FAIL`, ...). Any other status, a `403` included, may be the origin's and is relayed.
/// RFC 9209's `Proxy-Status` is not taken: a CDN in front of the origin sets it on its own errors too.
fn proxy_refusal(head: &ResponseHead) -> Option<String> {
    if let Some(marker) = head.values("x-squid-error").next() {
        return Some(format!("{} (X-Squid-Error: {})", head.status, String::from_utf8_lossy(marker).trim()));
    }
    (head.status == 407).then(|| "407".to_owned())
}

fn head_error(e: ReadHeadError<crate::wire::http_head::HeadError>, first: bool) -> ExchangeError {
    match e {
        ReadHeadError::Closed if first => ExchangeError::Stale,
        ReadHeadError::Io(e) if first && is_stale(&e) => ExchangeError::Stale,
        ReadHeadError::Idle | ReadHeadError::Timeout => ExchangeError::Timeout,
        ReadHeadError::Closed => ExchangeError::Upstream(io::ErrorKind::UnexpectedEof.into()),
        ReadHeadError::Io(e) => ExchangeError::Upstream(e),
        ReadHeadError::Malformed(e) => ExchangeError::BadResponse(e.to_string()),
    }
}

async fn relay_final<R, W>(
    down: &mut Source<'_, R>,
    client: &mut W,
    head: &ResponseHead,
    (request, client_keep_alive): (&RequestHead, bool),
    redact: Option<Redactor>,
) -> Result<Relayed, ExchangeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let upgraded = head.status == 101;
    let framing = if upgraded {
        // INVARIANT: nothing follows a 101 unexamined: only the WebSocket the request asked for switches.
        upgrade::check_switch(request, head, redact.is_some()).map_err(ExchangeError::Switched)?;
        BodyFraming::None
    } else {
        response_framing(head, &request.method).map_err(|e| ExchangeError::BadResponse(e.to_string()))?
    };
    let closing = !client_keep_alive || framing == BodyFraming::UntilClose;
    // A value echoed in the head (a Location, a debug field's name or value, the reason) is turned back into the
    // placeholder too.
    let mut head_bytes = client_head_bytes(head, closing && !upgraded, redact.as_ref());
    let mut to = ToClient { inner: client, written: 0, failed: false };
    let relayed = async {
        // A small body that came with its head goes out in the same write: one segment, and one wake-up of the
        // client, instead of two (on a keep-alive exchange of small answers, a tenth of leash's CPU per request).
        let framing = match (framing, &redact) {
            (BodyFraming::ContentLength(n), None) if n <= COALESCED_BODY && n <= down.buf.len() as u64 => {
                head_bytes.extend(down.buf.drain(..n as usize));
                BodyFraming::None
            }
            _ => framing,
        };
        to.write_all(&head_bytes).await?;
        match redact {
            None => drop(relay_body(down, &mut to, framing).await?),
            Some(redactor) => {
                let mut redacting = Redacting::new(&mut to, redactor, framing == BodyFraming::Chunked);
                relay_body(down, &mut redacting, framing).await?;
                redacting.finish().await?;
            }
        }
        // A TLS writer may still hold the last records; a TCP flush is free.
        to.flush().await
    };
    let client_gone = match relayed.await {
        Ok(()) => false,
        Err(_) if to.failed => true,
        Err(e) => return Err(ExchangeError::Midway(e)),
    };
    let upstream_close = !head.is_persistent();
    Ok(Relayed { status: head.status, down: to.written, framing, upstream_close, upgraded, client_gone })
}

/// Relay both ways after a WebSocket's 101; returns the bytes up and down. With credentials, the client's bytes are
/// watched for those bound elsewhere (a leak ends the connection: `ExchangeError::Leak`) and the server's frames
/// followed, the host's own value turned back into the placeholder in every message (frames that cannot be followed
/// end the connection: `ExchangeError::Frames`).
async fn relay_upgraded<S, U>(
    client: &mut BufConn<S>,
    upstream: &mut BufConn<U>,
    (redact, leaks): (Option<Redactor>, Option<LeakWatch>),
) -> Result<(u64, u64), ExchangeError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
    U: AsyncRead + AsyncWrite + Unpin + Send,
{
    if redact.is_none() && leaks.is_none() {
        return Ok(tokio::io::copy_bidirectional(client, upstream).await.unwrap_or((0, 0)));
    }
    let (mut client_rd, mut client_wr) = tokio::io::split(client);
    let (mut up_rd, mut up_wr) = tokio::io::split(upstream);
    let up = copy_through(&mut client_rd, &mut up_wr, leaks);
    let down = async {
        match redact {
            Some(redactor) => websocket_relay::relay_frames(&mut up_rd, &mut client_wr, redactor).await,
            None => copy_through(&mut up_rd, &mut client_wr, None::<Redactor>).await,
        }
    };
    match tokio::try_join!(up, down) {
        Ok(bytes) => Ok(bytes),
        Err(e) => match (LeakFound::of(&e), BadFrames::of(&e)) {
            (Some(name), _) => Err(ExchangeError::Leak(name)),
            (_, Some(bad)) => Err(ExchangeError::Frames(bad)),
            // Either side going away ends the relay, as it does without credentials.
            (None, None) => Ok((0, 0)),
        },
    }
}

/// Copy `from` to `to` until `from` ends, through `filter` when there is one, then shut `to`'s writing side.
async fn copy_through<R, W, F>(from: &mut R, to: &mut W, filter: Option<F>) -> io::Result<u64>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
    F: Filter + Unpin,
{
    let n = match filter {
        Some(filter) => {
            let mut filtered = Filtered::new(&mut *to, filter, false);
            let n = tokio::io::copy(from, &mut filtered).await?;
            filtered.finish().await?;
            n
        }
        None => tokio::io::copy(from, to).await?,
    };
    let _ = to.shutdown().await;
    Ok(n)
}

/// Relay a response body as it is framed; returns the bytes relayed.
async fn relay_body<R, W>(down: &mut Source<'_, R>, to: &mut W, framing: BodyFraming) -> io::Result<u64>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    Ok(match framing {
        BodyFraming::ContentLength(n) => down.copy_exact(to, n).await?,
        BodyFraming::Chunked => down.relay_chunked(to).await?,
        BodyFraming::UntilClose => down.copy_to_end(to).await?,
        BodyFraming::None => 0,
    })
}

/// The largest body written to the client together with its head, when it is already read (`relay_final`).
const COALESCED_BODY: u64 = 16 * 1024;

/// The client's side of a final response: counts the bytes it accepted and notes a failed write, so a client that
/// hangs up is told from an upstream that fails, and the outcome keeps what reached the client.
struct ToClient<'a, W> {
    inner: &'a mut W,
    written: u64,
    failed: bool,
}

impl<W> ToClient<'_, W> {
    fn note<T>(&mut self, polled: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if let Poll::Ready(Err(_)) = &polled {
            self.failed = true;
        }
        polled
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for ToClient<'_, W> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut *self.inner).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = polled {
            self.written += n as u64;
        }
        self.note(polled)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut *self.inner).poll_flush(cx);
        self.note(polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut *self.inner).poll_shutdown(cx);
        self.note(polled)
    }
}

/// The response head as the client gets it: from a credential's host (`redact`), with the value turned back into
/// the placeholder in its reason and in every field's name and value ([`headers::Redact`], as for HTTP/2). A
/// head that holds the value nowhere (nearly every one) is written once, not rebuilt.
fn client_head_bytes(head: &ResponseHead, close: bool, redact: Option<&Redactor>) -> Vec<u8> {
    let bytes = response_head_bytes(head, close);
    let Some(redactor) = redact else { return bytes };
    let whole = redactor.redact_all(&bytes);
    if whole == bytes {
        return bytes;
    }
    let mut head = head.clone();
    head.reason = redactor.redact_all(&head.reason);
    headers::Redact::redact(&mut head.headers, redactor);
    // And over the whole head once more, as before fields were redacted one by one: nothing is lost either way.
    redactor.redact_all(&response_head_bytes(&head, close))
}

/// The response head passed to the client: end-to-end headers in order (repeated `Set-Cookie` kept).
fn response_head_bytes(head: &ResponseHead, close: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    // Written into the head's own buffer: `format!` made a string of its own for each response.
    let _ = write!(out, "HTTP/1.1 {} ", head.status);
    out.extend_from_slice(&head.reason);
    out.extend_from_slice(b"\r\n");
    headers::write_end_to_end(&mut out, &head.headers, &[]);
    if head.status == 101 {
        out.extend_from_slice(b"Connection: upgrade\r\n");
        for value in head.values("upgrade") {
            out.extend_from_slice(b"Upgrade: ");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
    } else if close {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

fn stale_or(e: io::Error) -> ExchangeError {
    if is_stale(&e) {
        ExchangeError::Stale
    } else {
        ExchangeError::Upstream(e)
    }
}

fn is_stale(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionAborted
    )
}
