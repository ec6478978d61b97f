//! Plain-HTTP forwarding (absolute-form requests): one request at a time off a client connection, each decided on
//! its own at the gate, forwarded to a pooled or freshly checked upstream connection, the response streamed back.

use std::net::SocketAddr;

use leash_policy::{Host, Question, Request, Route, Via};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::admit::{Door, Entry};
use crate::conn::{BufConn, Next};
use crate::dial::{self, connect_route, route_checked, route_via, DialError, UpstreamIo};
use crate::exchange::{exchange, settle, ExchangeError, Exchanged, Watches};
use crate::gate::{Asked, RequestCtx};
use crate::h1_admit::admit_h1;
use crate::pool::PoolKey;
use crate::request::{plan, refuse_early, Plan};
use crate::shared::Shared;
use crate::standing::{until_cut, Recheck};
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
    let (host, port) = (&plan.target.authority.host, plan.port);
    let key = PoolKey { host: host.as_str().as_ref().into(), port, generation: ctx.snap.generation };
    let shown = host.as_str();
    let asked = Asked { method: &head.method, host: &shown, port, path: Some(plan.target.path_and_query) };
    let path = &plan.target.path;
    let question = Question::Request(Request { via: Via::ForwardProxy, scheme: plan.target.scheme, host, port, path });
    let entry = Entry { question, host, asked };
    let mut door = Plain { ctx: &ctx, host, port, key: &key };
    let auth = sh.cfg.upstream_auth.as_deref();
    let sending = match admit_h1(&ctx, client, (head, &plan), (entry, &mut door), auth).await {
        Ok(sending) => sending,
        Err(next) => return next,
    };
    plan.framing = sending.framing;
    let allowed = Asked { path: Some(split_query(plan.target.path_and_query).0), ..asked };
    let (head, bytes, admitted) = (&*sending.head, &sending.bytes, sending.admitted);
    let standing = (!admitted.by_person).then(|| {
        let (scheme, host, path) = (plan.target.scheme, plan.target.authority.host.clone(), plan.target.path.clone());
        sh.cfg.policy.register(Recheck::Request { scheme, host, port, path }, &ctx.snap, ctx.tls())
    });
    let forwarding = forward(&ctx, client, (head, &plan, bytes, admitted.watches), key, admitted.upstream, &allowed);
    match until_cut(forwarding, standing.as_ref()).await {
        Some(next) => next,
        None => {
            // A new policy refuses it mid-exchange (a long download, a WebSocket): the connection ends here.
            ctx.cut();
            Next::Close
        }
    }
}

/// The door of a plain-HTTP request: a pooled connection to its host (or the upstream proxy), else its route
/// resolved and checked, dialled once the request is on record.
struct Plain<'a> {
    ctx: &'a RequestCtx<'a>,
    host: &'a Host,
    port: u16,
    key: &'a PoolKey,
}

/// A plain-HTTP request's route: a pooled connection, or checked addresses to dial.
enum PlainRoute {
    Pooled(UpstreamIo),
    Checked(dial::Route),
}

impl Door for Plain<'_> {
    type Route = PlainRoute;
    type Upstream = Upstream;

    async fn route(&mut self, via: Route<'_>) -> Result<PlainRoute, DialError> {
        if let Some(stream) = self.ctx.sh.pool.take(self.key) {
            return Ok(PlainRoute::Pooled(stream));
        }
        route_via(self.ctx.sh, &self.ctx.snap, (self.host, self.port), via).await.map(PlainRoute::Checked)
    }

    async fn connect(&mut self, route: PlainRoute) -> Result<Upstream, DialError> {
        match route {
            PlainRoute::Pooled(stream) => Ok(Upstream { stream, pooled: true }),
            PlainRoute::Checked(route) => {
                let stream = connect_route(&route, self.port, self.ctx.sh.cfg.limits.connect_timeout).await?;
                Ok(Upstream { stream, pooled: false })
            }
        }
    }

    /// Through the upstream proxy the request goes in absolute form (the route is the policy's, fixed per host).
    fn through(&self, via: Route<'_>) -> Option<String> {
        via.through().map(|up| up.authority())
    }
}

/// A connection to the upstream, and whether it came from the pool (only a pooled one can be stale).
struct Upstream {
    stream: UpstreamIo,
    pooled: bool,
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
    let mut result = exchange(sh, client, &mut conn, (request, head, plan), &watches).await;
    if matches!(result, Err(ExchangeError::Stale)) && upstream.pooled && plan.framing == BodyFraming::None {
        match redial(ctx, plan, asked).await {
            Ok(stream) => {
                upstream = Upstream { stream, pooled: false };
                conn = BufConn::new(upstream.stream);
                result = exchange(sh, client, &mut conn, (request, head, plan), &watches).await;
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
        ctx.sh.pool.put(key, conn.into_io());
    }
    next
}
