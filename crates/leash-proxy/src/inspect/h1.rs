//! HTTP/1.1 inside an inspected tunnel: the same strict head parser, checks and forwarding as plain HTTP, with the
//! origin-form target read as `https://<SNI host><target>`, every Host required to name the SNI host, and one
//! upstream TLS session for the tunnel (dialed again, checked again, if the upstream closes it between requests).

use std::time::Instant;

use leash_policy::{Request, Scheme, Verdict, Via};
use tokio::io::AsyncWriteExt;

use super::{ClientTls, Inspected, UpstreamError, UpstreamTls};
use crate::conn::{BufConn, Reparse};
use crate::exchange::{exchange, ExchangeError, Exchanged};
use crate::forward::{bad_request, plan, refuse_early, reply, request_head_bytes, split_query, Next, Plan};
use crate::refusal::Response;
use crate::server::refuse_unreadable;
use crate::shared::Attempt;
use crate::wire::http_head::{parse_request_head, BodyFraming, RequestHead};

/// The tunnel's upstream session, and whether it has served a request already (only a reused one can be stale).
struct Upstream {
    conn: BufConn<UpstreamTls>,
    reused: bool,
}

/// Serve requests until the client closes or a request ends the connection; returns bytes up and down.
pub(super) async fn serve(t: &Inspected, client: ClientTls, upstream: UpstreamTls) -> (u64, u64) {
    let mut client = BufConn::new(client);
    let mut upstream = Some(Upstream { conn: BufConn::new(upstream), reused: false });
    let mut totals = (0u64, 0u64);
    let limits = &t.sh.cfg.limits;
    loop {
        let max = limits.max_head_bytes;
        let read = client.read_head(limits.idle_timeout, limits.head_timeout, Reparse::OnLineEnd { max }, |b| {
            parse_request_head(b, max)
        });
        let head = match read.await {
            Ok(head) => head,
            Err(e) => {
                refuse_unreadable(&t.sh, &mut client, e, t.peer).await;
                break;
            }
        };
        if request(t, &mut client, &head, &mut upstream, &mut totals).await == Next::Close {
            break;
        }
    }
    let _ = client.io.shutdown().await;
    totals
}

/// Decide one inner request and forward it when allowed.
async fn request(
    t: &Inspected,
    client: &mut BufConn<ClientTls>,
    head: &RequestHead,
    upstream: &mut Option<Upstream>,
    totals: &mut (u64, u64),
) -> Next {
    let (sh, started, id) = (&t.sh, Instant::now(), t.sh.cfg.audit.next_id());
    let absolute = format!("https://{}{}", t.authority(), head.target);
    if !head.target.starts_with('/') {
        let early = bad_request("inside a tunnel the request target must be a path (origin-form)");
        return refuse_early(sh, client, head, &absolute, id, t.peer, early).await;
    }
    let plan = match plan(head, &absolute) {
        Ok(plan) => plan,
        Err(early) => return refuse_early(sh, client, head, &absolute, id, t.peer, early).await,
    };
    let host = t.host_str();
    let attempt =
        |path| Attempt { id, method: &head.method, host: &host, port: t.port, path: Some(path), peer: t.peer };
    let decision = t.snap.decide_request(&Request {
        via: Via::Tunnel,
        scheme: Scheme::Https,
        host: &t.host,
        port: t.port,
        path: &plan.target.path,
    });
    let (path_only, _) = split_query(&head.target);
    if decision.verdict != Verdict::Allow {
        let keep = plan.framing == BodyFraming::None && plan.client_keep_alive;
        let response = match sh.log_decision(&attempt(&head.target), &decision) {
            Ok(()) => Response::forbidden(&format!("{host}{path_only}"), decision.reason),
            Err(_) => Response::audit_failed(),
        };
        return reply(client, &response, keep).await;
    }
    // INVARIANT: logged before a byte of the request goes up.
    if sh.log_decision(&attempt(path_only), &decision).is_err() {
        return reply(client, &Response::audit_failed(), false).await;
    }
    let result = forward(t, client, head, &plan, upstream).await;
    finish(t, client, result, upstream, totals, started, id).await
}

/// Send the request on the tunnel's upstream session (dialing one if there is none), once more on a fresh session
/// when a reused one turns out stale and the request has no body.
async fn forward(
    t: &Inspected,
    client: &mut BufConn<ClientTls>,
    head: &RequestHead,
    plan: &Plan<'_>,
    upstream: &mut Option<Upstream>,
) -> Result<Exchanged, ExchangeError> {
    let bytes = request_head_bytes(head, plan);
    let mut attempts = 0;
    loop {
        attempts += 1;
        if upstream.is_none() {
            *upstream = Some(redial(t).await?);
        }
        let Some(up) = upstream.as_mut() else { continue };
        let reused = up.reused;
        let result = exchange(&t.sh, client, &mut up.conn, &bytes, head, plan).await;
        match result {
            Err(ExchangeError::Stale) if reused && plan.framing == BodyFraming::None && attempts == 1 => {
                *upstream = None;
            }
            other => return other,
        }
    }
}

async fn redial(t: &Inspected) -> Result<Upstream, ExchangeError> {
    match t.dial(t.tls.upstream_http1()).await {
        Ok(tls) => Ok(Upstream { conn: BufConn::new(tls), reused: false }),
        Err(UpstreamError::Dial(e)) => Err(ExchangeError::Dial(e)),
        Err(UpstreamError::Tls(why)) => Err(ExchangeError::BadResponse(format!("upstream TLS failed: {why}"))),
    }
}

/// Log the outcome, keep the upstream session when it is clean, and say whether the client may go on.
async fn finish(
    t: &Inspected,
    client: &mut BufConn<ClientTls>,
    result: Result<Exchanged, ExchangeError>,
    upstream: &mut Option<Upstream>,
    totals: &mut (u64, u64),
    started: Instant,
    id: u64,
) -> Next {
    let sh = &t.sh;
    match result {
        Ok(done) => {
            sh.log_outcome(id, done.status, done.up, done.down, started);
            (totals.0, totals.1) = (totals.0 + done.up, totals.1 + done.down);
            match upstream {
                Some(up) if done.upstream_reusable && up.conn.buf.is_empty() => up.reused = true,
                _ => *upstream = None,
            }
            if done.client_keep_alive {
                Next::KeepAlive
            } else {
                Next::Close
            }
        }
        Err(e) => {
            *upstream = None;
            let status = e.status();
            sh.log_outcome(id, status, 0, 0, started);
            if e.response_started() {
                return Next::Close;
            }
            reply(client, &Response::upstream_failed(status, &t.authority(), &e.to_string()), false).await
        }
    }
}
