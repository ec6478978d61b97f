//! HTTP/1.1 inside an inspected tunnel: the same strict head parser, checks and forwarding as plain HTTP, with the
//! origin-form target read as `https://<SNI host><target>`, every Host required to name the SNI host, and one
//! upstream TLS session for the tunnel (dialed again, checked again, if the upstream closes it between requests),
//! kept for the next tunnel to the host when this one leaves it clean.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use leash_policy::{Question, Request, Scheme, Via};

use super::{upstream_tls_refused, ClientTls, Inspected, Session, UpstreamError};
use crate::admit::{Entry, Tunnelled};
use crate::conn::{close_gracefully, BufConn, Next, ReadHeadError};
use crate::dial::DialError;
use crate::exchange::{exchange, settle, ExchangeError, Exchanged, Watches};
use crate::gate::{Asked, RequestCtx};
use crate::h1_admit::admit_h1;
use crate::limits::Limits;
use crate::request::{
    bad_request, close_after, plan, read_request_head_within, refuse_early, refuse_early_as, refuse_unreadable, Plan,
};
use crate::upstream_io::UpstreamTls;
use crate::wire::http_head::{BodyFraming, HeadError, RequestHead};
use crate::wire::target::split_query;

/// The tunnel's upstream session, and whether it has served a request already, in this tunnel or an earlier one (only
/// a reused one can be stale).
struct Upstream {
    conn: BufConn<UpstreamTls>,
    reused: bool,
}

/// A request as its allow line named it, so a refusal on a re-dial is logged under the same id and rule.
struct Logged<'a> {
    ctx: &'a RequestCtx<'a>,
    asked: Asked<'a>,
    rule: Option<Arc<str>>,
}

/// Serve requests until the client closes or a request ends the connection; returns bytes up and down.
pub(super) fn serve(t: &Inspected, client: ClientTls, upstream: Session) -> impl Future<Output = (u64, u64)> + '_ {
    serve_on(t, BufConn::new(client), Some(Upstream { conn: BufConn::new(upstream.tls), reused: upstream.kept }))
}

/// [`serve`] with no upstream session yet: the first request that goes up dials one (resolved and checked then).
/// Ask mode's tunnels to a host no rule admits start so, so nothing is resolved or dialled before a person allows a
/// request in them.
pub(super) fn serve_undialled(t: &Inspected, client: ClientTls) -> impl Future<Output = (u64, u64)> + '_ {
    serve_on(t, BufConn::new(client), None)
}

/// The request loop, for as long as the tunnel is open. An async block that owns both sessions, not an async fn: an
/// async fn's future keeps its arguments beside the locals they are moved into, and so did `serve`'s, a copy of both
/// TLS sessions each (about 2.4 kB apiece) in every open tunnel.
#[allow(clippy::manual_async_fn, reason = "an async fn keeps its arguments beside the locals they move into")]
fn serve_on(
    t: &Inspected,
    mut client: BufConn<ClientTls>,
    mut upstream: Option<Upstream>,
) -> impl Future<Output = (u64, u64)> + '_ {
    async move {
        let mut totals = (0u64, 0u64);
        let limits = &t.sh.cfg.limits;
        loop {
            let head = match next_head(&mut client, &mut upstream, limits).await {
                Ok(head) => head,
                Err(e) => {
                    // A session as idle as its client for the idle timeout is likely closed upstream soon.
                    if !matches!(e, ReadHeadError::Idle) {
                        keep(t, upstream.take());
                    }
                    refuse_unreadable(&t.sh, &mut client, e, t.peer).await;
                    close_gracefully(&mut client.io).await;
                    return totals;
                }
            };
            if request(t, &mut client, &head, &mut upstream, &mut totals).await == Next::Close {
                keep(t, upstream.take());
                close_after(&mut client, &head).await;
                return totals;
            }
        }
    }
}

/// Keep the session the tunnel ends with, before its client is closed: [`finish`] let it stay only clean (the last
/// response read to its end), and only with nothing read beyond it.
fn keep(t: &Inspected, upstream: Option<Upstream>) {
    if let Some(up) = upstream.filter(|up| up.conn.buf.is_empty()) {
        t.keep(up.conn.io);
    }
}

/// How long a tunnel waits for its client's next request holding its read buffers. A client's requests in a row
/// come sooner and are read with the buffers as they are; a tunnel quiet this long lets go of them (8 KiB each way)
/// and waits for the client's socket holding none, as an idle plain-HTTP connection does (`server::wait_idle`).
const QUIET: Duration = Duration::from_millis(50);

/// The next request head, within the idle timeout for its first byte; after [`QUIET`] without one, the client's
/// and the upstream session's read buffers are let go of until the client sends again.
async fn next_head(
    client: &mut BufConn<ClientTls>,
    upstream: &mut Option<Upstream>,
    limits: &Limits,
) -> Result<RequestHead, ReadHeadError<HeadError>> {
    let quiet = QUIET.min(limits.idle_timeout);
    match read_request_head_within(client, limits, quiet).await {
        Err(ReadHeadError::Idle) => {}
        read => return read,
    }
    // Nothing arrived: nothing is buffered above the client's socket either (the session's read came back pending,
    // so the socket is where the next bytes come from).
    client.release_if_empty();
    if let Some(up) = upstream {
        up.conn.release_if_empty();
    }
    // The rest of the idle timeout, for the first byte of the head as before (bytes of a TLS record not yet whole
    // wake the wait without bringing one).
    let deadline = tokio::time::Instant::now() + (limits.idle_timeout - quiet);
    let socket = &client.io.get_ref().0.get_ref().io;
    match tokio::time::timeout_at(deadline, socket.readable()).await {
        Ok(Ok(())) => {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            read_request_head_within(client, limits, left).await
        }
        Ok(Err(e)) => Err(ReadHeadError::Io(e)),
        Err(_) => Err(ReadHeadError::Idle),
    }
}

/// The origin-form target an inner request stands for: its own, or the path and query of an absolute-form target
/// naming the tunnel's own host and port over https (RFC 9112 §3.2.2: a server must accept the absolute form; a
/// client that names the host it tunnelled to is no trick). Any other absolute form is refused: the tunnel was decided
/// on its name, and the request would name another.
fn inner_path<'t>(t: &Inspected, target: &'t str) -> Option<&'t str> {
    if target.starts_with('/') {
        return Some(target);
    }
    let scheme = target.get(..8).filter(|s| s.eq_ignore_ascii_case("https://"))?;
    let rest = &target[scheme.len()..];
    let (authority, path) = rest.find(['/', '?']).map_or((rest, "/"), |at| (&rest[..at], &rest[at..]));
    let named = leash_policy::parse_authority(authority).ok()?;
    let same = named.host == t.host && named.port.unwrap_or(443) == t.port && path.starts_with('/');
    same.then_some(path)
}

/// Decide one inner request and forward it when allowed.
async fn request(
    t: &Inspected,
    client: &mut BufConn<ClientTls>,
    head: &RequestHead,
    upstream: &mut Option<Upstream>,
    totals: &mut (u64, u64),
) -> Next {
    let ctx = t.request_ctx();
    let Some(path) = inner_path(t, &head.target) else {
        // Logged under the tunnel's own host: the target's text is no authority to read one from.
        let host = t.host_str();
        let asked = Asked { method: &head.method, host: &host, port: t.port, path: Some(&head.target) };
        let early = bad_request("inside a tunnel the request target is a path, or an https URL of the tunnel's host");
        return refuse_early_as(&ctx, client, &asked, early).await;
    };
    let absolute = format!("https://{}{}", t.authority(), path);
    let mut plan = match plan(head, &absolute) {
        Ok(plan) => plan,
        Err(early) => return refuse_early(&ctx, client, head, &absolute, early).await,
    };
    let host = t.host_str();
    let asked = Asked { method: &head.method, host: &host, port: t.port, path: Some(&head.target) };
    let path = &plan.target.path;
    let (via, scheme, method) = (Via::Tunnel, Scheme::Https, head.method.as_str());
    let question = Question::Request(Request { via, scheme, host: &t.host, port: t.port, path, method });
    let entry = Entry { question, host: &t.host, asked };
    let sending = match admit_h1(&ctx, client, (head, &plan), (entry, &mut Tunnelled), None).await {
        Ok(sending) => sending,
        Err(next) => return next,
    };
    plan.framing = sending.framing;
    // Fields of `sending` used where they are: a local moved out of it, or an argument taken by value, would be one
    // more copy of them (the watches: 232 bytes) in every tunnel's future.
    let head = &*sending.head;
    let rule = sending.admitted.rule;
    let logged = Logged { ctx: &ctx, asked: Asked { path: Some(split_query(&head.target).0), ..asked }, rule };
    let result = forward(t, client, (head, &plan, &sending.bytes, &sending.admitted.watches), upstream, &logged).await;
    finish(t, (&ctx, &logged.asked), client, result, upstream, totals).await
}

/// Send the request on the tunnel's upstream session (dialing one if there is none), once more on a fresh session
/// when a reused one turns out stale and no body is left to stream from the client. `bytes` is the head (and, for
/// a body leash read, the body).
async fn forward(
    t: &Inspected,
    client: &mut BufConn<ClientTls>,
    (head, plan, bytes, watches): (&RequestHead, &Plan<'_>, &[u8], &Watches),
    upstream: &mut Option<Upstream>,
    logged: &Logged<'_>,
) -> Result<Exchanged, ExchangeError> {
    let mut attempts = 0;
    loop {
        attempts += 1;
        if upstream.is_none() {
            *upstream = Some(redial(t, logged).await?);
        }
        let Some(up) = upstream.as_mut() else { continue };
        let reused = up.reused;
        let result = exchange(&t.sh, client, &mut up.conn, (bytes, head, plan), watches).await;
        match result {
            Err(ExchangeError::Stale) if reused && plan.framing == BodyFraming::None && attempts == 1 => {
                *upstream = None;
            }
            other => return other,
        }
    }
}

/// A fresh upstream session for a request already logged as allowed, resolved and checked again: a destination
/// refusal (403 `internal-destination`) or a certificate failure (502 `upstream-tls`) is logged and answered exactly
/// as at the tunnel's first dial, under the request's id.
async fn redial(t: &Inspected, logged: &Logged<'_>) -> Result<Upstream, ExchangeError> {
    match t.dial(t.tls.upstream_http1()).await {
        Ok(tls) => Ok(Upstream { conn: BufConn::new(tls), reused: false }),
        Err(UpstreamError::Dial(DialError::Refused(reason))) => {
            Err(ExchangeError::Answered(logged.ctx.refuse_destination(&logged.asked, reason)))
        }
        Err(UpstreamError::Dial(e)) => Err(ExchangeError::Dial(e)),
        Err(UpstreamError::Tls(why)) => {
            Err(ExchangeError::Answered(upstream_tls_refused(t, logged.ctx, &logged.asked, logged.rule.clone(), &why)))
        }
    }
}

/// Log the outcome, keep the upstream session when it is clean, and say whether the client may go on.
async fn finish(
    t: &Inspected,
    (ctx, asked): (&RequestCtx<'_>, &Asked<'_>),
    client: &mut BufConn<ClientTls>,
    result: Result<Exchanged, ExchangeError>,
    upstream: &mut Option<Upstream>,
    totals: &mut (u64, u64),
) -> Next {
    let (next, done) = settle(ctx, client, result, (asked, || t.authority())).await;
    if let Some(done) = &done {
        (totals.0, totals.1) = (totals.0 + done.up, totals.1 + done.down);
    }
    match upstream {
        Some(up) if done.is_some_and(|d| d.upstream_reusable) && up.conn.buf.is_empty() => up.reused = true,
        _ => *upstream = None,
    }
    next
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use tokio::io::AsyncWriteExt;

    use super::{next_head, QUIET};
    use crate::conn::{BufConn, ReadHeadError};
    use crate::inspect::tests::session_pair;
    use crate::limits::Limits;

    /// A tunnel quiet for longer than [`QUIET`] waits for its client's socket holding no read buffer; requests sent
    /// then (two in one write: the second is read from what the first read brought) are read as before, and one
    /// idle for the idle timeout ends with `Idle`, still holding none.
    #[tokio::test]
    async fn a_quiet_tunnel_holds_no_read_buffer_and_reads_what_comes_after() {
        let (session, mut client, _) = session_pair().await;
        let limits = Limits { idle_timeout: Duration::from_secs(1), ..Limits::default() };
        let mut conn = BufConn::new(session);
        let mut upstream = None;
        let send = async {
            tokio::time::sleep(QUIET * 4).await;
            let two = b"GET /a HTTP/1.1\r\nHost: peeked.test\r\n\r\nGET /b HTTP/1.1\r\nHost: peeked.test\r\n\r\n";
            client.write_all(two).await.unwrap();
            client.flush().await.unwrap();
        };
        let (first, ()) = tokio::join!(next_head(&mut conn, &mut upstream, &limits), send);
        assert_eq!(first.unwrap().target, "/a");
        assert_eq!(next_head(&mut conn, &mut upstream, &limits).await.unwrap().target, "/b");
        let idle = next_head(&mut conn, &mut upstream, &limits).await;
        assert!(matches!(idle, Err(ReadHeadError::Idle)), "{idle:?}");
        assert_eq!(conn.buf.capacity(), 0);
    }

    /// Bytes that make no whole TLS record wake a quiet tunnel's wait without bringing a head's first byte: the head
    /// is still waited for no longer than the idle timeout in all.
    #[tokio::test]
    async fn a_quiet_tunnel_waits_for_a_head_no_longer_than_the_idle_timeout() {
        let (session, mut client, _) = session_pair().await;
        let limits = Limits { idle_timeout: Duration::from_secs(1), ..Limits::default() };
        let mut conn = BufConn::new(session);
        let start = Instant::now();
        let trickle = async {
            tokio::time::sleep(limits.idle_timeout / 2).await;
            // The start of a record's header, and no more.
            client.get_mut().0.write_all(&[0x17, 0x03]).await.unwrap();
        };
        let mut upstream = None;
        let (read, ()) = tokio::join!(next_head(&mut conn, &mut upstream, &limits), trickle);
        assert!(matches!(read, Err(ReadHeadError::Idle)), "{read:?}");
        let waited = start.elapsed();
        // Waiting the idle timeout again once the bytes came would be half as long again.
        assert!(waited >= limits.idle_timeout && waited < limits.idle_timeout * 13 / 10, "{waited:?}");
    }
}
