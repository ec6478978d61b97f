//! Plain-HTTP forwarding (absolute-form requests): one request at a time off a client connection, each decided on
//! its own at the gate, forwarded to a pooled or freshly checked upstream connection, the response streamed back.

use std::net::SocketAddr;

use leash_policy::{Decision, Question, Request, Via};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::conn::{BufConn, Next};
use crate::credentials::{LeakWatch, Outbound};
use crate::dial::{connect_route, route_checked, through_proxy, DialError, UpstreamIo};
use crate::exchange::{exchange, settle, ExchangeError, Exchanged, Watches};
use crate::gate::{Asked, Extras, RequestCtx};
use crate::model::{self, Gated};
use crate::pool::PoolKey;
use crate::refusal::{reply, Response};
use crate::request::{plan, refuse_early, request_head_bytes, Plan, TargetForm};
use crate::shared::Shared;
use crate::upgrade;
use crate::wire::http_head::{BodyFraming, RequestHead};
use crate::wire::target::split_query;

/// Decide and forward one absolute-form request.
pub(crate) async fn handle<S>(sh: &Shared, client: &mut BufConn<S>, head: &RequestHead, peer: SocketAddr) -> Next
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let ctx = RequestCtx::new(sh, peer);
    let mut plan = match plan(head, &head.target) {
        Ok(plan) => plan,
        Err(early) => return refuse_early(&ctx, client, head, &head.target, early).await,
    };
    let host = plan.target.authority.host.as_str();
    let (path_only, _) = split_query(plan.target.path_and_query);
    let asked = |path| Asked { method: &head.method, host: &host, port: plan.port, path: Some(path) };
    let question = Question::Request(Request {
        via: Via::ForwardProxy,
        scheme: plan.target.scheme,
        host: &plan.target.authority.host,
        port: plan.port,
        path: &plan.target.path,
    });
    // A refused request's line keeps its query (what was asked); an allowed one's names the path only.
    let decision = match ctx.check(&asked(plan.target.path_and_query), &question) {
        Ok(decision) => decision,
        Err(refused) => {
            let keep = plan.framing == BodyFraming::None && plan.client_keep_alive;
            return reply(client, &refused, keep).await;
        }
    };
    // Credentials: one bound to another host refuses the request; the host's own goes in (plaintext: true only).
    let (sent, outbound) = sh.cfg.credentials.outgoing(&ctx.snap, &plan.target.authority.host, head);
    let (credential, redact, query) = match outbound {
        Outbound::Leak(name) => {
            let keep = plan.framing == BodyFraming::None && plan.client_keep_alive;
            return reply(client, &ctx.refuse_leak(&asked(plan.target.path_and_query), &name), keep).await;
        }
        Outbound::Go { credential, redactor, query } => (credential, redactor, query),
    };
    let sent_target = query.map(|q| format!("{path_only}?{q}"));
    let sent_plan = sent_target.as_deref().map(|t| plan.sending(t));
    let upstream_plan = sent_plan.as_ref().unwrap_or(&plan);
    let own = ctx.snap.credential_for(&plan.target.authority.host).map(|c| &*c.name);
    // Through the upstream proxy the request goes in absolute form (the route is the policy's, fixed per host).
    let via_proxy = ctx.snap.upstream_proxy().filter(|_| through_proxy(&ctx.snap, &plan.target.authority.host));
    let form = match via_proxy {
        Some(_) => TargetForm::Proxy { auth: sh.cfg.upstream_auth.as_deref() },
        None => TargetForm::Origin,
    };
    let via_proxy = via_proxy.map(|up| up.authority());
    // A model API's body is read and checked for provider-side tools, as inside an inspected tunnel.
    let (request, stripped) = match ctx.snap.filters_provider_tools(&plan.target.authority.host) {
        false => (request_head_bytes(&sent, upstream_plan, form), Vec::new()),
        true => {
            let tools = ctx.snap.provider_tools();
            let path = plan.target.path_and_query;
            match model::gate(&sh.cfg.limits, client, (&sent, upstream_plan, path, form), tools).await {
                Gated::Pass => (request_head_bytes(&sent, upstream_plan, form), Vec::new()),
                Gated::Body { request, removed } => {
                    if let Some(name) = sh.cfg.credentials.found_in_any(own, [request.as_slice()]) {
                        let refused = ctx.refuse_leak(&asked(plan.target.path_and_query), name);
                        return reply(client, &refused, plan.client_keep_alive).await;
                    }
                    plan.framing = BodyFraming::None;
                    (request, removed)
                }
                Gated::Refuse { why, keep } => {
                    let answer = Response::provider_error(&host, &format!("{host}{path_only}"), &why);
                    let refused = ctx.refuse_with(&asked(plan.target.path_and_query), &model::refused(), answer);
                    return reply(client, &refused, keep).await;
                }
            }
        }
    };
    let decision = model::forwarded(&decision, &stripped);
    let watches = Watches { redact, leaks: LeakWatch::new(&sh.cfg.credentials, own), via_proxy };

    let dropped = upgrade::dropped(head);
    let extras = Extras::allowed(&stripped, credential.as_deref(), dropped.as_deref());
    let key = PoolKey { host: host.as_ref().into(), port: plan.port, generation: ctx.snap.generation };
    let upstream = match sh.pool.take(&key) {
        Some(stream) => Upstream { stream, pooled: true },
        None => match check_and_dial(&ctx, &plan, &asked(path_only), (&decision, extras)).await {
            Ok(stream) => Upstream { stream, pooled: false },
            Err(response) => return reply(client, &response, false).await,
        },
    };
    if upstream.pooled {
        if let Err(response) = ctx.pass_with(&asked(path_only), &decision, extras) {
            return reply(client, &response, false).await;
        }
    }
    forward(&ctx, client, (&sent, &plan, &request, watches), key, upstream, &asked(path_only)).await
}

struct Upstream {
    stream: UpstreamIo,
    pooled: bool,
}

/// Resolve, check, pass the gate (allow, or the destination refusal), dial. Err is the response to send.
async fn check_and_dial(
    ctx: &RequestCtx<'_>,
    plan: &Plan<'_>,
    asked: &Asked<'_>,
    (decision, extras): (&Decision, Extras<'_>),
) -> Result<UpstreamIo, Response> {
    let host = &plan.target.authority.host;
    let route = match route_checked(ctx.sh, &ctx.snap, host, plan.port).await {
        Ok(route) => route,
        Err(DialError::Refused(reason)) => return Err(ctx.refuse_destination(asked, reason)),
        Err(e) => {
            // The request was allowed; its upstream failed before it was dialled.
            ctx.pass_with(asked, decision, extras)?;
            return Err(upstream_failed(ctx, asked, &e));
        }
    };
    ctx.pass_with(asked, decision, extras)?;
    connect_route(&route, plan.port, ctx.sh.cfg.limits.connect_timeout)
        .await
        .map_err(|e| upstream_failed(ctx, asked, &e))
}

/// An allowed request whose upstream could not be reached: its failure outcome, and the 502/504 saying why.
fn upstream_failed(ctx: &RequestCtx<'_>, asked: &Asked<'_>, e: &DialError) -> Response {
    ctx.dial_failed(&format!("{}:{}", asked.host, asked.port), e)
}

/// Send the request and relay the response, retrying once on a fresh connection when a pooled one turns out stale.
async fn forward<S>(
    ctx: &RequestCtx<'_>,
    client: &mut BufConn<S>,
    (head, plan, request, watches): (&RequestHead, &Plan<'_>, &[u8], Watches),
    key: PoolKey,
    mut upstream: Upstream,
    asked: &Asked<'_>,
) -> Next
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let sh = ctx.sh;
    let mut conn = BufConn::new(upstream.stream);
    let mut result = exchange(sh, client, &mut conn, (request, head, plan), watches.clone()).await;
    if matches!(result, Err(ExchangeError::Stale)) && upstream.pooled && plan.framing == BodyFraming::None {
        match redial(ctx, plan, asked).await {
            Ok(stream) => {
                upstream = Upstream { stream, pooled: false };
                conn = BufConn::new(upstream.stream);
                result = exchange(sh, client, &mut conn, (request, head, plan), watches).await;
            }
            Err(e) => result = Err(e),
        }
    }
    finish(ctx, client, conn, (key, asked), result).await
}

/// A fresh connection for a request already logged as allowed whose pooled connection was stale: resolved and
/// checked again (the answer may have changed), a refusal answered exactly as at a first dial.
async fn redial(ctx: &RequestCtx<'_>, plan: &Plan<'_>, asked: &Asked<'_>) -> Result<UpstreamIo, ExchangeError> {
    let host = &plan.target.authority.host;
    let route = route_checked(ctx.sh, &ctx.snap, host, plan.port).await.map_err(|e| match e {
        DialError::Refused(reason) => ExchangeError::Answered(ctx.refuse_destination(asked, reason)),
        e => ExchangeError::Dial(e),
    })?;
    connect_route(&route, plan.port, ctx.sh.cfg.limits.connect_timeout).await.map_err(ExchangeError::Dial)
}

/// Log the outcome, return the upstream to the pool when it is clean, and say whether the client may go on.
async fn finish<S>(
    ctx: &RequestCtx<'_>,
    client: &mut BufConn<S>,
    conn: BufConn<UpstreamIo>,
    (key, asked): (PoolKey, &Asked<'_>),
    result: Result<Exchanged, ExchangeError>,
) -> Next
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let authority = || format!("{}:{}", key.host, key.port);
    let (next, done) = settle(ctx, client, result, (asked, authority)).await;
    if done.is_some_and(|d| d.upstream_reusable) && conn.buf.is_empty() {
        ctx.sh.pool.put(key, conn.io);
    }
    next
}
