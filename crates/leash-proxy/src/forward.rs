//! Plain-HTTP forwarding (absolute-form requests): one request at a time off a client connection, each decided on
//! its own, forwarded to a pooled or freshly checked upstream connection, the response streamed back.

use std::net::SocketAddr;
use std::time::Instant;

use leash_policy::{
    parse_absolute_target, parse_authority, AbsoluteTarget, Decision, Reason, Request, Scheme, TargetError, Verdict,
    Via,
};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::audit::refusal;
use crate::config::Snapshot;
use crate::conn::BufConn;
use crate::dial::{connect_checked, resolve_checked, DialError};
use crate::exchange::{exchange, ExchangeError, Exchanged};
use crate::headers;
use crate::pool::PoolKey;
use crate::refusal::Response;
use crate::shared::{Attempt, Shared};
use crate::wire::http_head::{has_connection_token, request_framing, BodyFraming, RequestHead};

/// What the connection loop does after a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    KeepAlive,
    Close,
}

/// A request that passed the checks that need no policy: its parts, framing and connection options.
pub(crate) struct Plan<'h> {
    pub target: AbsoluteTarget<'h>,
    pub port: u16,
    pub framing: BodyFraming,
    pub client_keep_alive: bool,
}

/// A request refused before the policy is asked.
pub(crate) struct Early {
    response: Response,
    reason: Reason,
}

/// Decide and forward one absolute-form request.
pub(crate) async fn handle<S>(sh: &Shared, client: &mut BufConn<S>, head: &RequestHead, peer: SocketAddr) -> Next
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let started = Instant::now();
    let id = sh.cfg.audit.next_id();
    let plan = match plan(head, &head.target) {
        Ok(plan) => plan,
        Err(early) => return refuse_early(sh, client, head, &head.target, id, peer, early).await,
    };
    let host = plan.target.authority.host.as_str();
    let (path_only, _) = split_query(plan.target.path_and_query);
    let attempt = |path| Attempt { id, method: &head.method, host: &host, port: plan.port, path: Some(path), peer };
    let snap = sh.cfg.policy.current();
    let decision = snap.decide_request(&Request {
        via: Via::ForwardProxy,
        scheme: plan.target.scheme,
        host: &plan.target.authority.host,
        port: plan.port,
        path: &plan.target.path,
    });
    if decision.verdict != Verdict::Allow {
        let keep = plan.framing == BodyFraming::None && plan.client_keep_alive;
        let logged = sh.log_decision(&attempt(plan.target.path_and_query), &decision);
        let response = match logged {
            Ok(()) => Response::forbidden(&format!("{host}{path_only}"), decision.reason),
            Err(_) => Response::audit_failed(),
        };
        return reply(client, &response, keep).await;
    }
    let key = PoolKey { host: host.as_ref().into(), port: plan.port, generation: snap.generation };
    let upstream = match sh.pool.take(&key) {
        Some(stream) => Upstream { stream, pooled: true },
        None => match check_and_dial_logged(sh, &snap, &plan, &attempt(path_only), &decision, started).await {
            Ok(stream) => Upstream { stream, pooled: false },
            Err(response) => return reply(client, &response, false).await,
        },
    };
    if upstream.pooled && sh.log_decision(&attempt(path_only), &decision).is_err() {
        return reply(client, &Response::audit_failed(), false).await;
    }
    forward(sh, client, head, &plan, key, upstream, &snap, &attempt(path_only), started).await
}

struct Upstream {
    stream: TcpStream,
    pooled: bool,
}

/// Resolve, check, log the decision (allow, or the destination refusal), dial. Err is the response to send.
async fn check_and_dial_logged(
    sh: &Shared,
    snap: &Snapshot,
    plan: &Plan<'_>,
    attempt: &Attempt<'_>,
    decision: &Decision,
    started: Instant,
) -> Result<TcpStream, Response> {
    let host = &plan.target.authority.host;
    let addrs = match resolve_checked(sh, snap, host, plan.port).await {
        Ok(addrs) => addrs,
        Err(DialError::Refused(reason)) => return Err(destination_refused(sh, attempt, reason)),
        Err(e) => return Err(upstream_failed(sh, attempt, decision, &e, started)),
    };
    sh.log_decision(attempt, decision).map_err(|_| Response::audit_failed())?;
    connect_checked(&addrs, plan.port, sh.cfg.limits.connect_timeout).await.map_err(|e| {
        let authority = format!("{}:{}", attempt.host, attempt.port);
        sh.log_failure(attempt.id, e.status(), &authority, e.cause(), &e.to_string(), started);
        Response::upstream_failed(e.status(), &authority, &e.to_string())
    })
}

/// Log and answer a request whose destination check refused the resolved addresses, at a first dial or a re-dial:
/// a block line (under the request's id) and a 403 naming `<host><path>` of the attempt.
pub(crate) fn destination_refused(sh: &Shared, attempt: &Attempt<'_>, reason: Reason) -> Response {
    match sh.log_decision(attempt, &refusal(reason)) {
        Ok(()) => Response::forbidden(&format!("{}{}", attempt.host, attempt.path.unwrap_or("")), reason),
        Err(_) => Response::audit_failed(),
    }
}

/// A resolution failure of an allowed request: logged as allowed, then its 502 outcome.
fn upstream_failed(sh: &Shared, a: &Attempt<'_>, d: &Decision, e: &DialError, started: Instant) -> Response {
    if sh.log_decision(a, d).is_err() {
        return Response::audit_failed();
    }
    let authority = format!("{}:{}", a.host, a.port);
    sh.log_failure(a.id, e.status(), &authority, e.cause(), &e.to_string(), started);
    Response::upstream_failed(e.status(), &authority, &e.to_string())
}

/// Send the request and relay the response, retrying once on a fresh connection when a pooled one turns out stale.
#[allow(clippy::too_many_arguments, reason = "one exchange's parts, borrowed apart (the client mutably)")]
async fn forward<S>(
    sh: &Shared,
    client: &mut BufConn<S>,
    head: &RequestHead,
    plan: &Plan<'_>,
    key: PoolKey,
    mut upstream: Upstream,
    snap: &Snapshot,
    attempt: &Attempt<'_>,
    started: Instant,
) -> Next
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let request = request_head_bytes(head, plan);
    let mut conn = BufConn::new(upstream.stream);
    let mut result = exchange(sh, client, &mut conn, &request, head, plan).await;
    if matches!(result, Err(ExchangeError::Stale)) && upstream.pooled && plan.framing == BodyFraming::None {
        match redial(sh, snap, plan, attempt).await {
            Ok(stream) => {
                upstream = Upstream { stream, pooled: false };
                conn = BufConn::new(upstream.stream);
                result = exchange(sh, client, &mut conn, &request, head, plan).await;
            }
            Err(e) => result = Err(e),
        }
    }
    finish(sh, client, conn, key, result, started, attempt.id).await
}

/// A fresh connection for a request already logged as allowed whose pooled connection was stale: resolved and
/// checked again (the answer may have changed), a refusal answered exactly as at a first dial.
async fn redial(
    sh: &Shared,
    snap: &Snapshot,
    plan: &Plan<'_>,
    attempt: &Attempt<'_>,
) -> Result<TcpStream, ExchangeError> {
    let host = &plan.target.authority.host;
    let addrs = resolve_checked(sh, snap, host, plan.port).await.map_err(|e| match e {
        DialError::Refused(reason) => ExchangeError::Answered(destination_refused(sh, attempt, reason)),
        e => ExchangeError::Dial(e),
    })?;
    connect_checked(&addrs, plan.port, sh.cfg.limits.connect_timeout).await.map_err(ExchangeError::Dial)
}

/// Log the outcome, return the upstream to the pool when it is clean, and say whether the client may go on.
#[allow(clippy::too_many_arguments, reason = "one exchange's parts, borrowed apart (the client mutably)")]
async fn finish<S>(
    sh: &Shared,
    client: &mut BufConn<S>,
    conn: BufConn<TcpStream>,
    key: PoolKey,
    result: Result<Exchanged, ExchangeError>,
    started: Instant,
    id: u64,
) -> Next
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let authority = || format!("{}:{}", key.host, key.port);
    let (next, done) = settle(sh, client, result, authority, started, id).await;
    if done.is_some_and(|d| d.upstream_reusable) && conn.buf.is_empty() {
        sh.pool.put(key, conn.io);
    }
    next
}

/// Log how an exchange ended and say whether the client may go on; a failure the client has not seen any of yet is
/// answered with 502/504 naming `authority()`. The completed exchange is returned for the caller's upstream reuse.
pub(crate) async fn settle<S>(
    sh: &Shared,
    client: &mut BufConn<S>,
    result: Result<Exchanged, ExchangeError>,
    authority: impl FnOnce() -> String,
    started: Instant,
    id: u64,
) -> (Next, Option<Exchanged>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    match result {
        Ok(done) => {
            sh.log_outcome(id, done.status, done.up, done.down, started);
            let next = if done.client_keep_alive { Next::KeepAlive } else { Next::Close };
            (next, Some(done))
        }
        // A refusal on a re-dial: its block line is the request's last, as for a refusal on a first dial.
        Err(ExchangeError::Answered(response)) => (reply(client, &response, false).await, None),
        Err(e) => {
            let (status, authority) = (e.status(), authority());
            sh.log_failure(id, status, &authority, e.cause(), &e.to_string(), started);
            if e.response_started() {
                return (Next::Close, None);
            }
            let response = Response::upstream_failed(status, &authority, &e.to_string());
            (reply(client, &response, false).await, None)
        }
    }
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

pub(crate) fn default_port(scheme: Scheme) -> u16 {
    match scheme {
        Scheme::Https => 443,
        _ => 80,
    }
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

/// Log and answer a request refused before the policy was asked (400s, bad hosts, Host mismatches). `target` is
/// the absolute-form target the request stands for.
pub(crate) async fn refuse_early<S>(
    sh: &Shared,
    client: &mut BufConn<S>,
    head: &RequestHead,
    target: &str,
    id: u64,
    peer: SocketAddr,
    early: Early,
) -> Next
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let (host, port, path) = loose_target(target);
    let attempt = Attempt { id, method: &head.method, host: &host, port, path: Some(path), peer };
    let response = match sh.log_decision(&attempt, &refusal(early.reason)) {
        Ok(()) => early.response,
        Err(_) => Response::audit_failed(),
    };
    reply(client, &response, false).await
}

/// Host, port and path of a target that may not parse, for the log only: the text between `://` and the path, the
/// port it names (else the scheme's default, 0 for an unknown scheme), and the rest as sent (`/` when empty). A
/// target that is not absolute-form is all path.
fn loose_target(target: &str) -> (String, u16, &str) {
    let Some((scheme, rest)) = target.split_once("://") else { return (String::new(), 0, target) };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = (&rest[..end], &rest[end..]);
    let path = if path.is_empty() { "/" } else { path };
    let default = match scheme.to_ascii_lowercase().as_str() {
        "http" => 80,
        "https" => 443,
        _ => 0,
    };
    let (host, port) = loose_authority(authority, default);
    (host, port, path)
}

/// Host and port of an authority that may not parse, for the log only: the port it names, else `default`, and the
/// host as sent before it, lowercased (`Ex.com:81` → `ex.com`, 81; `[::1]` → `[::1]`; `a@b` → `a@b`).
pub(crate) fn loose_authority(authority: &str, default: u16) -> (String, u16) {
    match authority.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') || h.ends_with(']') => match p.parse() {
            Ok(port) => (h.to_ascii_lowercase(), port),
            Err(_) => (authority.to_ascii_lowercase(), default),
        },
        _ => (authority.to_ascii_lowercase(), default),
    }
}

/// Write one of leash's own responses.
pub(crate) async fn reply<S: AsyncWrite + Unpin>(client: &mut S, response: &Response, keep_alive: bool) -> Next {
    match client.write_all(&response.to_bytes(keep_alive)).await.and(client.flush().await) {
        Ok(()) if keep_alive => Next::KeepAlive,
        _ => Next::Close,
    }
}

/// The head sent upstream: origin-form of the original target (so `%2F` and friends reach the API as sent), one
/// Host equal to the decided authority, end-to-end headers in order.
pub(crate) fn request_head_bytes(head: &RequestHead, plan: &Plan<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 + head.target.len());
    out.extend_from_slice(head.method.as_bytes());
    out.push(b' ');
    // RFC 9112 §3.2.1: an empty path is sent as `/` (`http://host?q` → `/?q`).
    if plan.target.path_and_query.starts_with('?') {
        out.push(b'/');
    }
    out.extend_from_slice(plan.target.path_and_query.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    out.extend_from_slice(plan.target.authority.host.as_str().as_bytes());
    if plan.port != default_port(plan.target.scheme) {
        out.extend_from_slice(format!(":{}", plan.port).as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    headers::write_end_to_end(&mut out, &head.headers, &["host"]);
    if let Some(upgrade) = upgrade_value(head) {
        out.extend_from_slice(b"Connection: upgrade\r\nUpgrade: ");
        out.extend_from_slice(upgrade);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// The Upgrade header of a request that asks to switch protocols (`Connection: upgrade` + `Upgrade: ...`).
pub(crate) fn upgrade_value(head: &RequestHead) -> Option<&[u8]> {
    if !has_connection_token(&head.headers, "upgrade") {
        return None;
    }
    head.values("upgrade").next()
}

/// `(path, query)` split at the first raw `?`.
pub(crate) fn split_query(path_and_query: &str) -> (&str, Option<&str>) {
    match path_and_query.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (path_and_query, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loose_target_reads_what_it_can() {
        assert_eq!(loose_target("http://Ex.com:81/x?q"), ("ex.com".into(), 81, "/x?q"));
        assert_eq!(loose_target("/origin"), (String::new(), 0, "/origin"));
        assert_eq!(loose_target("http://a%2eb/"), ("a%2eb".into(), 80, "/"));
        assert_eq!(loose_target("https://user@h"), ("user@h".into(), 443, "/"));
        assert_eq!(loose_target("ftp://h/f"), ("h".into(), 0, "/f"));
    }

    #[test]
    fn loose_authority_reads_the_port_when_there_is_one() {
        assert_eq!(loose_authority("User@Allowed.test:443", 0), ("user@allowed.test".into(), 443));
        assert_eq!(loose_authority("allowed.test", 0), ("allowed.test".into(), 0));
        assert_eq!(loose_authority("allowed.test", 80), ("allowed.test".into(), 80));
        assert_eq!(loose_authority("[::1]:8443", 0), ("[::1]".into(), 8443));
        assert_eq!(loose_authority("::1", 0), ("::1".into(), 0));
        assert_eq!(loose_authority("h:port", 0), ("h:port".into(), 0));
    }
}
