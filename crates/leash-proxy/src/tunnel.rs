//! CONNECT tunnels: the target is checked (port, literal, name) without being resolved, the ClientHello is peeked
//! and the tunnel decided on its server name, then spliced to that name — resolved once and checked — with the
//! peeked bytes replayed first. A tunnel refused on its ClientHello is closed without a byte reaching any upstream.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use leash_policy::{
    parse_authority, parse_host, Authority, ClientHelloFacts, Decision, Host, Question, Reason, Verdict,
};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::ask::Ruling;
use crate::audit::{refusal, UpstreamFailure, TUNNEL_METHOD};
use crate::conn::{close_gracefully, BufConn, ReadHeadError, Reparse};
use crate::dial::{connect_tunnel, route_checked, DialError, UpstreamIo};
use crate::fair::Held;
use crate::gate::{ruled, Asked, Extras, RequestCtx};
use crate::inspect::{self, answer_in_tls, Inspected};
use crate::refusal::{reply, Response};
use crate::relay;
use crate::shared::Shared;
use crate::standing::{until_cut, Hello, Recheck, Registration};
use crate::wire::client_hello::{parse_client_hello, ClientHello, ServerName};
use crate::wire::http_head::RequestHead;
use crate::wire::target::loose_authority;
use crate::wire::Parsed;

const ESTABLISHED: &[u8] = b"HTTP/1.1 200 Connection established\r\n\r\n";

/// Handle a CONNECT request; the connection is the tunnel's from here on.
pub(crate) async fn handle(
    sh: &Arc<Shared>,
    mut client: BufConn<TcpStream>,
    head: &RequestHead,
    peer: SocketAddr,
    held: Held,
) {
    let ctx = RequestCtx::new(sh, peer);
    let (target, port) = match connect_target(head) {
        Ok(t) => t,
        Err((response, reason)) => {
            let (host, port) = loose_authority(&head.target, 0);
            let asked = Asked { method: TUNNEL_METHOD, host: &host, port, path: None };
            let response = ctx.refuse_with(&asked, &refusal(reason), response);
            reply(&mut client.io, &response, false).await;
            return;
        }
    };
    // A tunnel to a loopback gateway the policy serves as a service: its connection, decided and logged as the service.
    if let Some(service) = ctx.snap.service_at(&target, port) {
        let name = service.name.clone();
        if client.io.write_all(ESTABLISHED).await.is_ok() {
            crate::service::tunneled(sh, &name, client, peer, port).await;
        }
        drop(held);
        return;
    }
    let host_text = target.as_str().into_owned();
    let asked = Asked { method: TUNNEL_METHOD, host: &host_text, port, path: None };
    // A name carrying a credential would take it out in a DNS query and the TLS server name, whatever is allowed.
    if let Some(name) = sh.cfg.credentials.found_in_name(&host_text) {
        reply(&mut client.io, &ctx.refuse_leak(&asked, name), false).await;
        return;
    }
    let decision = ctx.decide(&Question::Connect { target: &target, port });
    // Ask mode: a tunnel leash will open to ask about each request in it is decided on its ClientHello; any other is
    // held here, on its name, before its 200.
    let opens = opens_to_ask(&ctx, &decision, &target);
    let ruling = if opens { None } else { ctx.hold(&asked, &decision).await };
    let decision = ruling.map_or(decision, ruled);
    if decision.verdict == Verdict::Block && !opens {
        reply(&mut client.io, &ctx.refuse_ruled(&asked, &decision, ruling), false).await;
        return;
    }
    if client.io.write_all(ESTABLISHED).await.is_err() {
        return;
    }
    let tunnel = Tunnel { sh, ctx, target: &target, port, ruling, held };
    tunnel.on_client_hello(client).await;
}

/// Ask mode: whether a tunnel `decision` refuses as `not-allowed` is opened to ask about each request in it (path
/// shown) rather than held on its name: when leash inspects and would inspect the host were it allowed.
fn opens_to_ask(ctx: &RequestCtx<'_>, decision: &Decision, host: &Host) -> bool {
    let cfg = &ctx.sh.cfg;
    cfg.ask.is_some() && cfg.inspection.is_some() && ctx.snap.may_ask(decision) && ctx.snap.inspects_if_allowed(host)
}

/// What ask mode makes of a tunnel's ClientHello decision.
enum AskStep {
    /// Decided (by the policy, or by a person's answer on the tunnel's name).
    Decided(Decision, Option<Ruling>),
    /// Opened to ask about each request in it (see [`opens_to_ask`]).
    Open(Host),
}

/// The CONNECT target: `host:port`, one Host header at most. Err is the response and its reason.
fn connect_target(head: &RequestHead) -> Result<(Host, u16), (Response, Reason)> {
    if head.values("host").nth(1).is_some() {
        return Err((Response::bad_request(400, "several Host headers"), Reason::BadRequest));
    }
    match parse_authority(&head.target) {
        Ok(Authority { host, port: Some(port) }) => Ok((host, port)),
        Ok(Authority { port: None, .. }) => {
            Err((Response::bad_request(400, "CONNECT target needs a port (`host:443`)"), Reason::BadRequest))
        }
        Err(_) => Err((Response::forbidden(&head.target, Reason::BadHost), Reason::BadHost)),
    }
}

/// A tunnel whose target was allowed and whose 200 was sent.
struct Tunnel<'a> {
    /// The shared state an inspected tunnel keeps (its HTTP/2 streams outlive this borrow).
    sh: &'a Arc<Shared>,
    ctx: RequestCtx<'a>,
    target: &'a Host,
    port: u16,
    /// Ask mode: the answer its CONNECT was held for, if it was.
    ruling: Option<Ruling>,
    /// The client connection's place in the bounds, handed to the relay task.
    held: Held,
}

/// A TLS connection to a transparent listener (a client that ignored the proxy variables and reached the sandbox
/// address the DNS stub gave it): decided exactly like a CONNECT to `<SNI host>:<port>`, on the ClientHello.
pub(crate) async fn transparent(
    sh: &Arc<Shared>,
    mut client: BufConn<TcpStream>,
    port: u16,
    peer: SocketAddr,
    held: Held,
) {
    let ctx = RequestCtx::new(sh, peer);
    let Some(hello) = read_client_hello(sh, &mut client).await else { return };
    let named = match hello.as_ref().map(|h| &h.server_name) {
        Some(ServerName::One(name)) => parse_host(name).ok(),
        _ => None,
    };
    let Some(target) = named else {
        // Without a readable server name there is nothing to decide on (and no name for a leaf): refuse, close.
        let decision = refusal(match facts_of(hello.as_ref()) {
            ClientHelloFacts::NotTls => Reason::NotTls,
            ClientHelloFacts::Ech => Reason::Ech,
            ClientHelloFacts::NoServerName => Reason::NoSni,
            _ => Reason::BadSni,
        });
        ctx.refuse(&Asked { method: TUNNEL_METHOD, host: "", port, path: None }, &decision);
        return drain_and_close(client).await;
    };
    let tunnel = Tunnel { sh, ctx, target: &target, port, ruling: None, held };
    tunnel.on_hello(client, hello).await;
}

/// Read the ClientHello, keeping its bytes in the buffer (they are replayed upstream). `Some(None)`: the bytes are
/// not a ClientHello (or none came in time); `None`: the client went away.
async fn read_client_hello(sh: &Shared, client: &mut BufConn<TcpStream>) -> Option<Option<ClientHello>> {
    let limits = &sh.cfg.limits;
    let peeked = client
        .read_head(limits.client_hello_timeout, limits.client_hello_timeout, Reparse::EveryRead, |b| {
            match parse_client_hello(b) {
                Parsed::Done(hello, _) => Parsed::Done(hello, 0),
                Parsed::NeedMore => Parsed::NeedMore,
                Parsed::Refuse(e) => Parsed::Refuse(e),
            }
        })
        .await;
    match peeked {
        Ok(hello) => Some(Some(hello)),
        Err(ReadHeadError::Malformed(_) | ReadHeadError::Timeout | ReadHeadError::Idle) => Some(None),
        Err(ReadHeadError::Closed | ReadHeadError::Io(_)) => None,
    }
}

impl<'a> Tunnel<'a> {
    /// Read the ClientHello, then go on as [`Tunnel::on_hello`]. This and `on_hello` are async blocks, not async fns,
    /// which keep their arguments beside the locals they are moved into: a second copy of the tunnel's state in every
    /// connection's future.
    #[allow(clippy::manual_async_fn, reason = "an async fn keeps its arguments beside the locals they move into")]
    fn on_client_hello(self, mut client: BufConn<TcpStream>) -> impl Future<Output = ()> + 'a {
        async move {
            let Some(hello) = read_client_hello(self.sh, &mut client).await else { return };
            self.on_hello(client, hello).await;
        }
    }

    /// Decide on the ClientHello (`None`: not one) and refuse, inspect or splice.
    #[allow(clippy::manual_async_fn, reason = "an async fn keeps its arguments beside the locals they move into")]
    fn on_hello(self, client: BufConn<TcpStream>, hello: Option<ClientHello>) -> impl Future<Output = ()> + 'a {
        async move {
            let facts = facts_of(hello.as_ref());
            let ctx = &self.ctx;
            let decision = ctx.decide(&Question::ClientHello { target: self.target, port: self.port, hello: facts });
            let sni = match facts {
                ClientHelloFacts::ServerName(name) => Some(parse_host(name)),
                _ => None,
            };
            // The canonical host (lowercase, one trailing dot dropped), as plain-HTTP lines name theirs.
            let shown = match (&sni, facts) {
                (Some(Ok(host)), _) => host.as_str().into_owned(),
                (Some(Err(_)), ClientHelloFacts::ServerName(name)) => name.to_ascii_lowercase(),
                _ => self.target.as_str().into_owned(),
            };
            let asked = Asked { method: TUNNEL_METHOD, host: &shown, port: self.port, path: None };
            if let Some(name) = self.sh.cfg.credentials.found_in_name(&shown) {
                ctx.refuse_leak(&asked, name);
                return drain_and_close(client).await;
            }
            let named = match sni {
                Some(Ok(host @ Host::Name(_))) => Some(host),
                _ => None,
            };
            let (decision, ruling) = match self.ask_step(&asked, decision, named.as_ref()).await {
                AskStep::Decided(decision, ruling) => (decision, ruling),
                AskStep::Open(host) => return self.open_to_ask(client, host, &asked).await,
            };
            match (decision.verdict, &self.sh.cfg.inspection, named) {
                (Verdict::Block, Some(tls), Some(_)) => {
                    // Refused on a readable server name: say why inside TLS (a client trusting the run's CA reads it).
                    let answer = ctx.refuse_ruled(&asked, &decision, ruling);
                    answer_in_tls(self.sh, tls, client, |path| answer.naming_path(&shown, path)).await
                }
                (Verdict::Block, ..) => {
                    ctx.refuse_ruled(&asked, &decision, ruling);
                    drain_and_close(client).await
                }
                (Verdict::Inspect, Some(tls), Some(host)) => {
                    let alpn = hello.as_ref().map(|h| h.alpn.clone()).unwrap_or_default();
                    let recheck = Recheck::Inspected { host: host.clone(), port: self.port };
                    let standing = self.standing(recheck, ruling);
                    let outcome = ctx.pending_outcome(self.sh);
                    let inspecting = inspect::run(self.inspected(tls, host), client, &alpn, &decision);
                    if until_cut(inspecting, standing.as_ref()).await.is_none() {
                        // What the tunnel's requests carried is on their own lines.
                        outcome.cut(200, 0, 0);
                    }
                }
                (Verdict::Inspect, ..) => {
                    // The policy refuses what this proxy cannot inspect; should that ever disagree, refuse anyway.
                    let refused =
                        Decision { verdict: Verdict::Block, reason: Reason::NeedsInspection, rule: decision.rule };
                    ctx.refuse(&asked, &refused);
                    drain_and_close(client).await
                }
                // Audit mode: what the rules would refuse is spliced like an allowed tunnel, its line saying so.
                (Verdict::Allow | Verdict::WouldBlock, ..) => {
                    let upstream_host = match facts {
                        ClientHelloFacts::ServerName(name) => parse_host(name).unwrap_or_else(|_| self.target.clone()),
                        _ => self.target.clone(),
                    };
                    let recheck =
                        Recheck::Spliced { target: self.target.clone(), port: self.port, hello: Hello::of(facts) };
                    self.splice(client, &upstream_host, &asked, (&decision, ruling), recheck).await
                }
            }
        }
    }

    /// Ask mode's part in the ClientHello decision: a tunnel to open and ask about request by request, or one held
    /// on its name (unless its CONNECT was, and the answer stands for the tunnel) and decided by the answer.
    async fn ask_step(&self, asked: &Asked<'_>, decision: Decision, named: Option<&Host>) -> AskStep {
        let ctx = &self.ctx;
        if let Some(host) = named.filter(|host| opens_to_ask(ctx, &decision, host)) {
            return AskStep::Open(host.clone());
        }
        if !ctx.snap.may_ask(&decision) {
            return AskStep::Decided(decision, None);
        }
        let ruling = match self.ruling {
            Some(ruling) => Some(ruling),
            None => ctx.hold(asked, &decision).await,
        };
        let Some(ruling) = ruling else { return AskStep::Decided(decision, None) };
        let ruled = ruled(ruling);
        // Allowed by a person, a tunnel the policy would inspect is refused where leash cannot inspect it.
        let inspected = named.is_some_and(|host| ctx.snap.inspects_if_allowed(host));
        let ruled = match (ruled.verdict, inspected) {
            (Verdict::Allow, true) => Decision { verdict: Verdict::Inspect, ..ruled },
            _ => ruled,
        };
        AskStep::Decided(ruled, Some(ruling))
    }

    /// Ask mode: open the tunnel to `host` without an upstream and ask about each request in it (see
    /// [`inspect::ask_inside`]); its line says so (`inspect`, `ask`).
    async fn open_to_ask(&self, client: BufConn<TcpStream>, host: Host, asked: &Asked<'_>) {
        let (ctx, Some(tls)) = (&self.ctx, &self.sh.cfg.inspection) else { return drain_and_close(client).await };
        let opened = Decision { verdict: Verdict::Inspect, reason: Reason::Ask, rule: None };
        if ctx.pass(asked, &opened).is_err() {
            return drain_and_close(client).await;
        }
        inspect::ask_inside(self.inspected(tls, host), client).await
    }

    /// The tunnel, to be inspected as `host` with `tls`: its line's id, policy and start.
    fn inspected(&self, tls: &Arc<crate::tls::Inspection>, host: Host) -> Inspected {
        let ctx = &self.ctx;
        Inspected {
            sh: self.sh.clone(),
            snap: ctx.snap.clone(),
            tls: tls.clone(),
            host,
            port: self.port,
            id: ctx.id,
            peer: ctx.peer,
            started: ctx.started,
        }
    }

    /// Resolve the decided name once, check it, pass the gate, dial exactly the checked addresses, replay, relay.
    async fn splice(
        self,
        client: BufConn<TcpStream>,
        host: &Host,
        asked: &Asked<'_>,
        (decision, ruling): (&Decision, Option<Ruling>),
        recheck: Recheck,
    ) {
        let ctx = &self.ctx;
        let extras = Extras { ruling, ..Extras::default() };
        let route = match route_checked(ctx.sh, &ctx.snap, host, self.port).await {
            Ok(route) => route,
            Err(DialError::Refused(reason)) => {
                ctx.refuse_destination(asked, reason);
                return drain_and_close(client).await;
            }
            Err(e) => {
                if ctx.pass_with(asked, decision, extras).is_ok() {
                    self.failed(asked.host, e.status(), e.cause(), &e.to_string());
                }
                return;
            }
        };
        if ctx.pass_with(asked, decision, extras).is_err() {
            return drain_and_close(client).await;
        }
        let timeout = ctx.sh.cfg.limits.connect_timeout;
        let upstream = match connect_tunnel(ctx.sh, &route, (host, self.port), timeout).await {
            Ok(s) => s,
            Err(e) => return self.failed(asked.host, e.status(), e.cause(), &e.to_string()),
        };
        let replayed = client.buf.len() as u64;
        let mut upstream = upstream;
        // Flushed: a TLS session to the upstream proxy holds what is written until then (free on TCP).
        if let Err(e) = upstream.write_all(&client.buf).await.and(upstream.flush().await) {
            return self.failed(asked.host, 502, Some(UpstreamFailure::of_io(&e)), &e.to_string());
        }
        let standing = self.standing(recheck, ruling);
        self.relay(client, upstream, replayed, standing);
    }

    /// The tunnel's place among what a new policy is asked about again (see [`crate::standing`]); none for one a
    /// person let on, which stands on their answer, not on the rules.
    fn standing(&self, recheck: Recheck, ruling: Option<Ruling>) -> Option<Registration> {
        let ctx = &self.ctx;
        ruling.is_none().then(|| self.sh.cfg.policy.register(recheck, &ctx.snap, ctx.tls()))
    }

    /// Relay until both sides end, in a task of its own: socket to socket over TCP; in user space through a TLS
    /// session with the upstream proxy. The task owns only the two sockets, what the outcome line needs, the
    /// connection's place in the bounds and among what a swap re-decides, so an idle tunnel does not keep the connection task's state (the request
    /// head, the ClientHello, the inspecting paths' futures) for as long as it is open.
    ///
    /// A new policy that refuses the tunnel (`standing` cut) ends it at once: both sockets are closed, the outcome
    /// says `policy-switch` and what had been relayed.
    fn relay(self, client: BufConn<TcpStream>, upstream: UpstreamIo, replayed: u64, standing: Option<Registration>) {
        let outcome = self.ctx.pending_outcome(self.sh);
        let (mut client, held) = (client.io, self.held);
        tokio::spawn(async move {
            let moved = relay::Moved::default();
            let relaying = async {
                match upstream {
                    UpstreamIo::Tcp(mut tcp) => relay::tunnel_counted(&mut client, &mut tcp, &moved).await,
                    UpstreamIo::Tls(mut session) => relay::tunnel_stream(&mut client, &mut *session, &moved).await,
                }
            };
            let ended = until_cut(relaying, standing.as_ref()).await;
            let (up, down) = moved.get();
            match ended {
                Some(()) => outcome.write(200, replayed + up, down),
                None => outcome.cut(200, replayed + up, down),
            }
            drop(held);
        });
    }

    /// The tunnel's upstream failed after its `200`: the client only sees the tunnel close, so the outcome and a
    /// warning say why.
    fn failed(&self, host: &str, status: u16, cause: Option<UpstreamFailure>, why: &str) {
        self.ctx.failed(status, &format!("{host}:{}", self.port), cause, why);
    }
}

/// What the policy needs to know of a ClientHello (`None`: the bytes were not one).
fn facts_of(hello: Option<&ClientHello>) -> ClientHelloFacts<'_> {
    match hello {
        None => ClientHelloFacts::NotTls,
        Some(h) if h.ech => ClientHelloFacts::Ech,
        Some(h) => match &h.server_name {
            ServerName::One(name) => ClientHelloFacts::ServerName(name),
            ServerName::Absent => ClientHelloFacts::NoServerName,
            ServerName::Invalid => ClientHelloFacts::BadServerName,
        },
    }
}

/// Close a refused tunnel in an orderly way (see [`close_gracefully`]).
async fn drain_and_close(mut client: BufConn<TcpStream>) {
    close_gracefully(&mut client.io).await;
}
