//! An HTTP/1.1 request before the policy is asked, plain or inside an inspected tunnel: the checks that need no
//! policy (target, framing, one Host naming the target), the answers to requests refused by them, and the head sent
//! upstream for an allowed one.

use std::io::Write as _;
use std::time::Duration;

use leash_policy::{parse_absolute_target, parse_authority, AbsoluteTarget, Reason, Scheme, TargetError};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::audit::refusal;
use crate::conn::{close_lingering, BufConn, Linger, Next, ReadHeadError, Reparse};
use crate::gate::{Asked, RequestCtx};
use crate::headers;
use crate::limits::Limits;
use crate::refusal::{reply, Response};
use crate::shared::Shared;
use crate::wire::http_head::{parse_request_head, request_framing, BodyFraming, HeadError, Header, RequestHead};
use crate::wire::target::{default_port, loose_target, split_query};

/// A request that passed the checks that need no policy: its parts, framing and connection options.
pub(crate) struct Plan<'h> {
    pub target: AbsoluteTarget<'h>,
    pub port: u16,
    pub framing: BodyFraming,
    pub client_keep_alive: bool,
}

impl Plan<'_> {
    /// This plan with `path_and_query` sent in place of the one decided (a credential put into its query). The
    /// decided one stays what the audit log names.
    pub(crate) fn sending<'s>(&'s self, path_and_query: &'s str) -> Plan<'s> {
        let target = leash_policy::AbsoluteTarget { path_and_query, ..self.target.clone() };
        Plan { target, port: self.port, framing: self.framing, client_keep_alive: self.client_keep_alive }
    }
}

/// A request refused before the policy is asked.
pub(crate) struct Early {
    response: Response,
    reason: Reason,
}

/// Target parsing, framing and Host checks: everything decidable without the policy. `target` is the request's
/// absolute-form target (for an inner request of an inspected tunnel, the one its origin-form target stands for).
pub(crate) fn plan<'t>(head: &RequestHead, target: &'t str) -> Result<Plan<'t>, Early> {
    let target = parse_absolute_target(target).map_err(|e| match e {
        TargetError::Host(_) => Early { response: forbidden_raw(target, Reason::BadHost), reason: Reason::BadHost },
        TargetError::NotAbsolute | TargetError::Path(_) => bad_request(&e.to_string()),
    })?;
    // A scheme leash does not proxy (ftp, gopher, ws, ...) is refused as such, before its Host header is compared
    // with a port it has no default for.
    if target.scheme == Scheme::Other {
        return Err(Early { response: forbidden_at(&target, Reason::Scheme), reason: Reason::Scheme });
    }
    let framing = request_framing(head).map_err(|e| bad_request(&e.to_string()))?;
    let port = target.port();
    check_host_header(head, &target, port)?;
    let client_keep_alive = head.is_persistent();
    Ok(Plan { target, port, framing, client_keep_alive })
}

/// Exactly one Host, naming the same host and port as the absolute-form target (RFC 9112 §3.2.2 lets a proxy
/// ignore it; leash refuses the disagreement instead, so no upstream ever sees a Host it was not decided on).
fn check_host_header(head: &RequestHead, target: &AbsoluteTarget<'_>, port: u16) -> Result<(), Early> {
    let mut hosts = head.values("host");
    let (first, second) = (hosts.next(), hosts.next());
    if second.is_some() {
        return Err(bad_request("several Host headers"));
    }
    let mismatch = || Early { response: forbidden_at(target, Reason::HostMismatch), reason: Reason::HostMismatch };
    let value = first.ok_or_else(mismatch)?;
    let named = std::str::from_utf8(value).ok().and_then(|v| parse_authority(v).ok()).ok_or_else(mismatch)?;
    let named_port = named.port.unwrap_or(default_port(target.scheme));
    if named.host != target.authority.host || named_port != port {
        return Err(mismatch());
    }
    Ok(())
}

fn forbidden_at(target: &AbsoluteTarget<'_>, reason: Reason) -> Response {
    let (path, _) = split_query(target.path_and_query);
    Response::forbidden(&format!("{}{path}", target.authority.host.as_str()), reason)
}

/// A 403 for a target whose host could not be parsed: name it as the client wrote it, minus the query.
fn forbidden_raw(target: &str, reason: Reason) -> Response {
    let after_scheme = target.split_once("://").map_or(target, |(_, rest)| rest);
    let (shown, _) = split_query(after_scheme);
    Response::forbidden(shown, reason)
}

pub(crate) fn bad_request(why: &str) -> Early {
    Early { response: Response::bad_request(400, why), reason: Reason::BadRequest }
}

/// The next request head on `client` (a proxy client, a service's, or one inside an inspected tunnel), read within
/// `limits`: up to the idle timeout for its first byte, then the head timeout and size bound for all of it.
pub(crate) async fn read_request_head<S: AsyncRead + AsyncWrite + Unpin>(
    client: &mut BufConn<S>,
    limits: &Limits,
) -> Result<RequestHead, ReadHeadError<HeadError>> {
    read_request_head_within(client, limits, limits.idle_timeout).await
}

/// [`read_request_head`] waiting up to `idle` for its first byte.
pub(crate) async fn read_request_head_within<S: AsyncRead + AsyncWrite + Unpin>(
    client: &mut BufConn<S>,
    limits: &Limits,
    idle: Duration,
) -> Result<RequestHead, ReadHeadError<HeadError>> {
    let max = limits.max_head_bytes;
    let reparse = Reparse::OnLineEnd { max };
    client.read_head(idle, limits.head_timeout, reparse, |b| parse_request_head(b, max)).await
}

/// Close the client's connection after `head`, the request that ended it. When that request has a body, leash may
/// have answered before reading all of it (a refusal, a failure, an upstream's early answer) while the client is
/// still sending: the rest is read within [`Linger::UNREAD_BODY`], so a client that reads only once its body is sent
/// gets the answer rather than a reset. A body whose framing is malformed (a smuggling shape) is not waited for.
pub(crate) async fn close_after<S: AsyncRead + AsyncWrite + Unpin>(client: &mut BufConn<S>, head: &RequestHead) {
    let linger = match request_framing(head) {
        Ok(BodyFraming::None | BodyFraming::ContentLength(0)) | Err(_) => Linger::BRIEF,
        Ok(_) => Linger::UNREAD_BODY,
    };
    close_lingering(&mut client.io, linger).await;
}

/// Record and answer a request refused before the policy was asked (400s, bad hosts, Host mismatches). `target` is
/// the absolute-form target the request stands for.
pub(crate) async fn refuse_early<S>(
    ctx: &RequestCtx<'_>,
    client: &mut BufConn<S>,
    head: &RequestHead,
    target: &str,
    early: Early,
) -> Next
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let (host, port, path) = loose_target(target);
    let asked = Asked { method: &head.method, host: &host, port, path: Some(path) };
    refuse_early_as(ctx, client, &asked, early).await
}

/// [`refuse_early`], the line naming `asked` (a request whose target names nothing to parse a host from: leash
/// knows where it was sent).
pub(crate) async fn refuse_early_as<S>(
    ctx: &RequestCtx<'_>,
    client: &mut BufConn<S>,
    asked: &Asked<'_>,
    early: Early,
) -> Next
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let response = ctx.refuse_with(asked, &refusal(early.reason), early.response);
    reply(client, &response, false).await
}

/// A head that could not be read: malformed ones get 400 (431 when too large) and a log line; the rest just close.
pub(crate) async fn refuse_unreadable<S: AsyncWrite + Unpin>(
    sh: &Shared,
    client: &mut BufConn<S>,
    e: ReadHeadError<HeadError>,
    peer: std::net::SocketAddr,
) {
    let (status, why) = match e {
        ReadHeadError::Malformed(HeadError::TooLarge) => (431, HeadError::TooLarge.to_string()),
        ReadHeadError::Malformed(e) => (400, e.to_string()),
        ReadHeadError::Timeout => (408, "request head not received in time".to_owned()),
        ReadHeadError::Closed | ReadHeadError::Idle | ReadHeadError::Io(_) => return,
    };
    let mut response = Response::bad_request(status, &why);
    if status == 408 {
        // Nothing was asked: a slow client is not a request to put on record.
        response.body = format!("leash: {why}\n");
    } else {
        let ctx = RequestCtx::new(sh, peer);
        let asked = Asked { method: "-", host: "", port: 0, path: None };
        response = ctx.refuse_with(&asked, &refusal(Reason::BadRequest), response);
    }
    reply(client, &response, false).await;
}

/// How the request line names the target.
#[derive(Debug, Clone, Copy)]
pub(crate) enum TargetForm<'a> {
    /// `/path?query`, to the origin itself.
    Origin,
    /// `http://host:port/path?query`, to the upstream proxy, with its `Proxy-Authorization` if it needs one.
    Proxy { auth: Option<&'a str> },
}

/// The head sent upstream: the original target (so `%2F` and friends reach the API as sent) in origin form, or in
/// absolute form for the upstream proxy; one Host equal to the decided authority, end-to-end headers in order, an
/// `Upgrade` only to a WebSocket.
pub(crate) fn request_head_bytes(head: &RequestHead, plan: &Plan<'_>, form: TargetForm<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 + head.target.len());
    out.extend_from_slice(head.method.as_bytes());
    out.push(b' ');
    if let TargetForm::Proxy { .. } = form {
        let _ = write!(out, "http://{}:{}", plan.target.authority.host.as_str(), plan.port);
    }
    // RFC 9112 §3.2.1: an empty path is sent as `/` (`http://host?q` → `/?q`).
    if plan.target.path_and_query.starts_with('?') {
        out.push(b'/');
    }
    out.extend_from_slice(plan.target.path_and_query.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    out.extend_from_slice(plan.target.authority.host.as_str().as_bytes());
    if plan.port != default_port(plan.target.scheme) {
        let _ = write!(out, ":{}", plan.port);
    }
    out.extend_from_slice(b"\r\n");
    headers::write_end_to_end(&mut out, &head.headers, &["host"]);
    if let TargetForm::Proxy { auth: Some(auth) } = form {
        out.extend_from_slice(b"Proxy-Authorization: ");
        out.extend_from_slice(auth.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    // Only a WebSocket's upgrade goes up: see `upgrade.rs`.
    if let Some(upgrade) = crate::upgrade::forwarded(head) {
        out.extend_from_slice(b"Connection: upgrade\r\nUpgrade: ");
        out.extend_from_slice(upgrade);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// The request to send for a body held in memory: the head (its own framing fields removed, see `model::REFRAMED`) with
/// `Content-Length` framing, then the body.
pub(crate) fn buffered_request(head: &RequestHead, (plan, form): (&Plan<'_>, TargetForm<'_>), body: &[u8]) -> Vec<u8> {
    let mut reframed = head.clone();
    reframed.headers.push(Header::new("Content-Length", body.len().to_string()));
    let mut out = request_head_bytes(&reframed, plan, form);
    out.extend_from_slice(body);
    out
}
