//! The model API gate of an inspected tunnel: a request to a model host whose provider-side tools the
//! policy filters has its body read whole (bounded), checked by [`crate::provider_tools`], and forwarded unchanged,
//! forwarded stripped, or refused. What cannot be checked — a body that is not JSON, is compressed, is larger than
//! the bound, or a WebSocket whose messages follow the upgrade — is refused, never passed unread. Responses are not
//! touched: they stream as for any request. The admission sequence (`admit.rs`) calls in here for every door.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Body;
use leash_policy::{Decision, ProviderTools, Reason, Verdict};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::audit::refusal;
use crate::conn::BufConn;
use crate::limits::Limits;
use crate::message::{Outgoing, RequestBody};
use crate::provider_tools::{filter, Outcome};
use crate::wire::chunked::ChunkedScanner;
use crate::wire::http_head::{BodyFraming, RequestHead};

/// What becomes of a model API request with a body.
#[derive(Debug)]
pub(super) enum Gate {
    /// Forward this body; `stripped` lists what was removed from it (empty: it is the body as sent).
    Forward { body: Bytes, stripped: Vec<String> },
    /// Refuse with 403 `provider-tools`; the text says why.
    Refuse(String),
}

/// Check the whole body of a request to `path` (the endpoint matters to some shapes: `/v1/containers`) under `mode`.
pub(super) fn judge(body: Bytes, path: &str, mode: ProviderTools) -> Gate {
    match filter(&body, path, mode) {
        Ok(Outcome::Unchanged) => Gate::Forward { body, stripped: Vec::new() },
        Ok(Outcome::Stripped { body, removed }) => Gate::Forward { body: Bytes::from(body), stripped: removed },
        Ok(Outcome::Refused { tools }) => Gate::Refuse(format!(
            "the policy refuses provider-side tools in model API requests (provider_tools: {}): {}",
            mode.as_str(),
            tools.join("; ")
        )),
        Err(e) => Gate::Refuse(format!("{e}; {UNCHECKED}")),
    }
}

/// Why an unreadable body is refused rather than forwarded.
const UNCHECKED: &str = "leash reads model API request bodies for provider-side tools and refuses what it cannot read";

/// The problem with the request's `Content-Encoding` values, if any: anything but `identity` is not read.
pub(super) fn encoding_problem<'a>(values: impl Iterator<Item = &'a [u8]>) -> Option<String> {
    for value in values {
        let value = String::from_utf8_lossy(value);
        let other = value.split(',').map(str::trim).find(|t| !t.eq_ignore_ascii_case("identity"));
        if let Some(coding) = other {
            return Some(format!(
                "the body is `{coding}`-encoded (Content-Encoding), which leash does not read; send model API \
                 requests uncompressed"
            ));
        }
    }
    None
}

/// The refusal text for a body over the bound.
pub(super) fn too_large(max: usize) -> String {
    format!("the body is larger than {max} bytes, the most leash reads; {UNCHECKED}")
}

/// The refusal text for a WebSocket upgrade to a model host.
pub(super) const UPGRADE: &str =
    "a WebSocket upgrade to a model API carries messages leash does not read (provider-side tools among them)";

/// The decision logged for a forwarded body: the policy's, or `allow provider-tools-stripped` when something went.
/// Audit mode's `would-block` stays one (the line's `stripped` names what went): it says what the rules refuse.
pub(super) fn forwarded(d: &Decision, stripped: &[String]) -> Decision {
    match stripped.is_empty() || d.verdict == Verdict::WouldBlock {
        true => d.clone(),
        false => Decision { verdict: Verdict::Allow, reason: Reason::ProviderToolsStripped, rule: d.rule.clone() },
    }
}

/// The decision logged for a refused one.
pub(super) fn refused() -> Decision {
    refusal(Reason::ProviderTools)
}

/// The payload of a chunked body, trailers dropped, as [`Capped::dechunking`] keeps it; `None` if it is not well
/// formed or not whole.
#[cfg(test)]
pub(super) fn dechunk(raw: &[u8]) -> Option<Vec<u8>> {
    let mut capped = Capped::dechunking(usize::MAX);
    capped.take(raw).ok()?;
    capped.chunked.as_ref().is_some_and(ChunkedScanner::is_done).then_some(capped.buf)
}

/// A writer into memory that fails once more than `cap` bytes are written (a body read to be checked). Dechunking,
/// it keeps only a chunked body's data (sizes, extensions and trailers dropped as they pass), and only data counts
/// towards the cap: as for an HTTP/2 stream's DATA frames, so the bound means the same through every door.
pub(super) struct Capped {
    pub buf: Vec<u8>,
    cap: usize,
    /// Set when a write went past the cap.
    pub over: bool,
    /// Follows a chunked body's framing, to tell its data from the rest.
    chunked: Option<ChunkedScanner>,
}

impl Capped {
    pub fn new(cap: usize) -> Self {
        Self { buf: Vec::new(), cap, over: false, chunked: None }
    }

    /// A writer that keeps a chunked body's data only.
    pub fn dechunking(cap: usize) -> Self {
        Self { chunked: Some(ChunkedScanner::new()), ..Self::new(cap) }
    }

    /// Keep `bytes` (their data, dechunking); an error once past the cap or, dechunking, at malformed framing.
    fn take(&mut self, bytes: &[u8]) -> io::Result<()> {
        let Some(scanner) = self.chunked.as_mut() else { return keep(&mut self.buf, self.cap, &mut self.over, bytes) };
        let mut rest = bytes;
        while !rest.is_empty() && !scanner.is_done() {
            let left = scanner.data_left();
            // Data in runs; framing and trailers one byte at a time (their lines are short).
            let n = left.map_or(1, |left| usize::try_from(left).map_or(rest.len(), |l| l.min(rest.len())).max(1));
            let (now, later) = rest.split_at(n);
            scanner.feed(now).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            if left.is_some() {
                keep(&mut self.buf, self.cap, &mut self.over, now)?;
            }
            rest = later;
        }
        Ok(())
    }
}

/// `bytes` appended to `buf`, unless that would take it past `cap` (then `over` is set).
fn keep(buf: &mut Vec<u8>, cap: usize, over: &mut bool, bytes: &[u8]) -> io::Result<()> {
    if buf.len().saturating_add(bytes.len()) > cap {
        *over = true;
        return Err(io::Error::other("body larger than the bound"));
    }
    buf.extend_from_slice(bytes);
    Ok(())
}

impl AsyncWrite for Capped {
    fn poll_write(mut self: Pin<&mut Self>, _: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        Poll::Ready(self.take(data).map(|()| data.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Headers that describe the body as the client framed it; a body leash read and forwards from memory gets its own
/// `Content-Length` instead (and needs no `100 Continue` from upstream: leash answered it). The admission sequence
/// removes them.
pub(crate) const REFRAMED: [&str; 3] = ["content-length", "transfer-encoding", "expect"];

/// What the model API gate made of a request.
pub(crate) enum Gated {
    /// No body: forward as usual.
    Pass,
    /// The body was read: forward `body` in place of the client's; `removed` is what went.
    Body { body: Bytes, removed: Vec<String> },
    /// Refuse, saying why; `read` if the body was read whole, so the connection can go on.
    Refuse { why: String, read: bool },
}

/// Read and check the body of a request (plain HTTP, or HTTP/1.1 or HTTP/2 inside an inspected tunnel) to a model
/// host whose provider-side tools the policy filters. `path` is the request's path, which some shapes are recognised
/// by. What cannot be read is refused, never passed unread.
pub(crate) async fn gate<M: Outgoing, B: RequestBody>(
    limits: &Limits,
    request: &M,
    body: &mut B,
    path: &str,
    tools: ProviderTools,
) -> Gated {
    let unread = |why| Gated::Refuse { why, read: false };
    if request.upgrade().is_some() {
        return unread(UPGRADE.to_owned());
    }
    if body.is_empty() {
        return Gated::Pass;
    }
    let max = limits.max_model_body;
    if body.declared().is_some_and(|n| n > max as u64) {
        return unread(too_large(max));
    }
    // Read even a body refused for its encoding, so the connection can go on to the next request.
    let whole = match body.read_whole(limits).await {
        Ok(whole) => whole,
        Err(why) => return unread(why.to_string()),
    };
    let refuse = |why| Gated::Refuse { why, read: true };
    if let Some(why) = encoding_problem(request.values_of("content-encoding")) {
        return refuse(why);
    }
    match whole.is_empty() {
        true => Gated::Body { body: whole, removed: Vec::new() },
        false => match judge(whole, path, tools) {
            Gate::Forward { body, stripped } => Gated::Body { body, removed: stripped },
            Gate::Refuse(why) => refuse(why),
        },
    }
}

/// Why a model API request's body could not be read whole; its text is the refusal's.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Unread {
    #[error("{}", too_large(*.0))]
    TooLarge(usize),
    #[error("the body did not arrive in time")]
    Late,
    #[error("the body could not be read: {0}")]
    Io(#[from] io::Error),
    /// An HTTP/2 stream's body failed (reset, connection gone).
    #[error("the body could not be read: {0}")]
    Stream(Box<dyn std::error::Error + Send + Sync>),
}

/// The whole body, de-chunked, at most `max` bytes of data.
pub(crate) async fn read_body<S>(
    limits: &Limits,
    client: &mut BufConn<S>,
    head: &RequestHead,
    framing: BodyFraming,
) -> Result<Vec<u8>, Unread>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let max = limits.max_model_body;
    if head.values("expect").any(|v| v.eq_ignore_ascii_case(b"100-continue")) {
        let continued = client.io.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await;
        continued.and(client.io.flush().await)?;
    }
    let mut capped = match framing {
        BodyFraming::Chunked => Capped::dechunking(max),
        _ => Capped::new(max),
    };
    let copy = async {
        match framing {
            BodyFraming::ContentLength(n) => client.source().copy_exact(&mut capped, n).await,
            _ => client.source().relay_chunked(&mut capped).await,
        }
    };
    // The client sends its body at its own pace; as long as leash would wait for an upstream's answer, no longer.
    let copied = tokio::time::timeout(limits.response_timeout, copy).await;
    match copied {
        _ if capped.over => Err(Unread::TooLarge(max)),
        Err(_) => Err(Unread::Late),
        Ok(Err(e)) => Err(Unread::Io(e)),
        Ok(Ok(_)) => Ok(capped.buf),
    }
}

/// An HTTP/1.1 request's body, still on the client's connection: read off it as its head frames it.
pub(crate) struct H1Body<'a, S> {
    /// The client's connection, the body's bytes next on it.
    pub client: &'a mut BufConn<S>,
    /// The request's head (whether the client waits for `100 Continue`).
    pub head: &'a RequestHead,
    /// How the body is delimited.
    pub framing: BodyFraming,
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send> RequestBody for H1Body<'_, S> {
    type Unread = Unread;

    fn is_empty(&self) -> bool {
        matches!(self.framing, BodyFraming::None | BodyFraming::ContentLength(0))
    }

    fn declared(&self) -> Option<u64> {
        match self.framing {
            BodyFraming::ContentLength(n) => Some(n),
            _ => None,
        }
    }

    async fn read_whole(&mut self, limits: &Limits) -> Result<Bytes, Unread> {
        read_body(limits, self.client, self.head, self.framing).await.map(Bytes::from)
    }
}

/// An HTTP/2 stream's body as hyper hands it over (or a wrapper of it: `inspect/client_body.rs`).
pub(crate) struct H2Body<B> {
    /// The body; `None` once the gate read it.
    pub body: Option<B>,
    /// The length the stream's `content-length` declares.
    declared: Option<u64>,
}

impl<B> H2Body<B> {
    /// The body of a stream whose fields are `parts`.
    pub fn new(parts: &http::request::Parts, body: B) -> Self {
        let length = parts.headers.get(http::header::CONTENT_LENGTH);
        let declared = length.and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        H2Body { body: Some(body), declared }
    }
}

impl<B> RequestBody for H2Body<B>
where
    B: Body<Data = Bytes, Error = hyper::Error> + Send,
{
    type Unread = Unread;

    fn is_empty(&self) -> bool {
        self.body.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn declared(&self) -> Option<u64> {
        self.declared
    }

    async fn read_whole(&mut self, limits: &Limits) -> Result<Bytes, Unread> {
        let Some(body) = self.body.take() else { return Ok(Bytes::new()) };
        let max = limits.max_model_body;
        // The client sends its body at its own pace; as long as leash would wait for an upstream's answer, no longer.
        let collected = tokio::time::timeout(limits.response_timeout, Limited::new(body, max).collect()).await;
        match collected {
            Err(_) => Err(Unread::Late),
            Ok(Err(e)) if e.is::<LengthLimitError>() => Err(Unread::TooLarge(max)),
            Ok(Err(e)) => Err(Unread::Stream(e)),
            Ok(Ok(collected)) => Ok(collected.to_bytes()),
        }
    }
}

#[cfg(test)]
mod tests {
    use leash_policy::ProviderTools::{Refuse, Strip};
    use serde_json::json;

    use super::*;
    use crate::refusal::Response;

    #[test]
    fn dechunk_reads_sizes_extensions_and_stops_at_the_last_chunk() {
        assert_eq!(dechunk(b"5\r\nhello\r\n6;x=1\r\n world\r\n0\r\nT: v\r\n\r\n").unwrap(), b"hello world");
        assert_eq!(dechunk(b"0\r\n\r\n").unwrap(), b"");
        assert_eq!(dechunk(b"5\r\nhel"), None);
        assert_eq!(dechunk(b"zz\r\n"), None);
    }

    #[test]
    fn only_identity_is_read() {
        let none: [&[u8]; 0] = [];
        assert_eq!(encoding_problem(none.into_iter()), None);
        assert_eq!(encoding_problem([&b"identity"[..], b" IDENTITY "].into_iter()), None);
        assert!(encoding_problem([&b"gzip"[..]].into_iter()).unwrap().contains("`gzip`-encoded"));
        assert!(encoding_problem([&b"identity, br"[..]].into_iter()).unwrap().contains("`br`"));
        assert!(encoding_problem([&b""[..]].into_iter()).is_some(), "an empty coding is not identity");
    }

    #[test]
    fn judge_forwards_strips_and_refuses() {
        let plain = Bytes::from_static(br#"{"model":"m","tools":[]}"#);
        let Gate::Forward { body, stripped } = judge(plain.clone(), "/v1/messages", Strip) else { panic!() };
        assert_eq!((body, stripped.len()), (plain, 0), "unchanged bodies go byte for byte");
        let search = Bytes::from_static(br#"{"model":"m","web_search_options":{}}"#);
        let Gate::Forward { body, stripped } = judge(search.clone(), "/v1/chat/completions", Strip) else { panic!() };
        assert_eq!((&body[..], stripped.len()), (&br#"{"model":"m"}"#[..], 1));
        let Gate::Refuse(why) = judge(search, "/v1/chat/completions", Refuse) else { panic!() };
        assert!(why.contains("(provider_tools: refuse): web_search_options"), "{why}");
        let Gate::Refuse(why) = judge(Bytes::from_static(b"a=1"), "/v1/messages", Strip) else { panic!() };
        assert!(why.starts_with("the body is not JSON"), "{why}");
    }

    #[test]
    fn judge_reads_the_path_a_container_is_created_at() {
        let open = Bytes::from_static(br#"{"name":"c","network_policy":{"type":"allowlist","allowed_domains":[]}}"#);
        let Gate::Refuse(why) = judge(open.clone(), "/v1/containers?x=1", Strip) else { panic!() };
        assert!(why.contains("network_policy `allowlist` (container with network access"), "{why}");
        assert!(matches!(judge(open, "/v1/files", Strip), Gate::Forward { .. }));
    }

    /// The status, `Content-Type`, reason and body (as JSON) of a refusal for `host`, as written on the wire.
    fn provider_error(host: &str) -> (String, String, String, serde_json::Value) {
        let bytes = Response::provider_error(host, &format!("{host}/v1/x"), "tools[0] (web search)").to_bytes(true);
        let text = String::from_utf8(bytes).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let header = |name: &str| {
            let line = head.lines().find(|l| l.to_ascii_lowercase().starts_with(&format!("{name}: "))).unwrap();
            line[name.len() + 2..].to_owned()
        };
        assert_eq!(header("content-length"), body.len().to_string());
        let status = head.lines().next().unwrap().to_owned();
        (status, header("content-type"), header("x-leash-reason"), serde_json::from_str(body).unwrap())
    }

    #[test]
    fn a_refusal_comes_in_the_error_shape_of_the_api_at_the_host() {
        let message = |host: &str| {
            format!("leash: {host}/v1/x refused by the egress policy (provider-tools): tools[0] (web search)")
        };
        let anthropic =
            json!({"type": "error", "error": {"type": "permission_error", "message": message("api.anthropic.com")}});
        let gemini =
            |host: &str| json!({"error": {"code": 403, "message": message(host), "status": "PERMISSION_DENIED"}});
        let openai = |host: &str| {
            json!({"error": {
                "message": message(host), "type": "permission_error", "param": null, "code": "leash_provider_tools",
            }})
        };
        for (host, shape) in [
            ("api.anthropic.com", anthropic),
            ("generativelanguage.googleapis.com", gemini("generativelanguage.googleapis.com")),
            ("us-central1-aiplatform.googleapis.com", gemini("us-central1-aiplatform.googleapis.com")),
            ("api.openai.com", openai("api.openai.com")),
            ("llm-gateway.internal", openai("llm-gateway.internal")),
        ] {
            let (status, content_type, reason, body) = provider_error(host);
            assert_eq!(status, "HTTP/1.1 403 Forbidden");
            assert_eq!((content_type.as_str(), reason.as_str()), ("application/json", "provider-tools"), "{host}");
            assert_eq!(body, shape, "{host}");
        }
        let text = Response::provider_tools("h/p", "why").to_bytes(true);
        assert!(String::from_utf8(text).unwrap().contains("Content-Type: text/plain; charset=utf-8\r\n"));
    }
}
