//! HTTP/1.1 inside an inspected tunnel: the same strict head parser, checks and forwarding as plain HTTP, with the
//! origin-form target read as `https://<SNI host><target>`, every Host required to name the SNI host, and one
//! upstream TLS session for the tunnel (dialed again, checked again, if the upstream closes it between requests).

use std::future::Future;
use std::sync::Arc;

use leash_policy::{Question, Request, Scheme, Via};

use super::{upstream_tls_refused, ClientTls, Inspected, UpstreamError, UpstreamTls};
use crate::admit::{Entry, Tunnelled};
use crate::conn::{close_gracefully, BufConn, Next};
use crate::dial::DialError;
use crate::exchange::{exchange, settle, ExchangeError, Exchanged, Watches};
use crate::gate::{Asked, RequestCtx};
use crate::h1_admit::admit_h1;
use crate::request::{bad_request, close_after, plan, refuse_early, refuse_unreadable, Plan};
use crate::wire::http_head::{BodyFraming, RequestHead};
use crate::wire::target::split_query;

/// The tunnel's upstream session, and whether it has served a request already (only a reused one can be stale).
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
pub(super) fn serve(t: &Inspected, client: ClientTls, upstream: UpstreamTls) -> impl Future<Output = (u64, u64)> + '_ {
    serve_on(t, BufConn::new(client), Some(Upstream { conn: BufConn::new(upstream), reused: false }))
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
            let head = match crate::request::read_request_head(&mut client, limits).await {
                Ok(head) => head,
                Err(e) => {
                    refuse_unreadable(&t.sh, &mut client, e, t.peer).await;
                    close_gracefully(&mut client.io).await;
                    return totals;
                }
            };
            if request(t, &mut client, &head, &mut upstream, &mut totals).await == Next::Close {
                close_after(&mut client, &head).await;
                return totals;
            }
        }
    }
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
    let absolute = format!("https://{}{}", t.authority(), head.target);
    if !head.target.starts_with('/') {
        let early = bad_request("inside a tunnel the request target must be a path (origin-form)");
        return refuse_early(&ctx, client, head, &absolute, early).await;
    }
    let mut plan = match plan(head, &absolute) {
        Ok(plan) => plan,
        Err(early) => return refuse_early(&ctx, client, head, &absolute, early).await,
    };
    let host = t.host_str();
    let asked = Asked { method: &head.method, host: &host, port: t.port, path: Some(&head.target) };
    let path = &plan.target.path;
    let question =
        Question::Request(Request { via: Via::Tunnel, scheme: Scheme::Https, host: &t.host, port: t.port, path });
    let entry = Entry { question, host: &t.host, asked };
    let sending = match admit_h1(&ctx, client, (head, &plan), (entry, &mut Tunnelled), None).await {
        Ok(sending) => sending,
        Err(next) => return next,
    };
    plan.framing = sending.framing;
    let (head, admitted) = (&*sending.head, sending.admitted);
    let logged =
        Logged { ctx: &ctx, asked: Asked { path: Some(split_query(&head.target).0), ..asked }, rule: admitted.rule };
    let result = forward(t, client, (head, &plan, &sending.bytes, admitted.watches), upstream, &logged).await;
    finish(t, (&ctx, &logged.asked), client, result, upstream, totals).await
}

/// Send the request on the tunnel's upstream session (dialing one if there is none), once more on a fresh session
/// when a reused one turns out stale and no body is left to stream from the client. `bytes` is the head (and, for
/// a body leash read, the body).
async fn forward(
    t: &Inspected,
    client: &mut BufConn<ClientTls>,
    (head, plan, bytes, watches): (&RequestHead, &Plan<'_>, &[u8], Watches),
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
        let result = exchange(&t.sh, client, &mut up.conn, (bytes, head, plan), watches.clone()).await;
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
