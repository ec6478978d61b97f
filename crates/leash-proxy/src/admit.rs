//! The one admission sequence an HTTP request goes through between its door and its upstream, whichever door it came
//! in by (plain HTTP, `forward.rs`; HTTP/1.1 and HTTP/2 inside an inspected tunnel, `inspect/h1.rs` and
//! `inspect/h2.rs`): decide → credential → model API body gate → leak check → route → log. A door reads its wire
//! format into an [`Entry`] and a request ([`Outgoing`], [`RequestBody`]), hands them over with a [`Door`] that knows
//! how to reach its upstream, and gets back the request as it goes up ([`Admitted`]) or a refusal already on record
//! ([`Refusal`]). A step added here applies to every door; the doors hold none.

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use leash_policy::{Admission, Decision, Host, ProviderTools, Question, Reason, Request, Route, Tunnel, Verdict};

use crate::ask::Ruling;
use crate::credentials::{LeakWatch, Outbound, Redactor, Watches};
use crate::dial::DialError;
use crate::gate::{ruled, Asked, Extras, RequestCtx};
use crate::message::{Outgoing, RequestBody};
use crate::model::{self, Gated};
use crate::refusal::Response;
use crate::upgrade;
use crate::wire::target::split_query;

/// A request at its door, read and checked against its wire format, about to be admitted.
pub(crate) struct Entry<'a> {
    /// What the policy is asked.
    pub question: Question<'a>,
    /// The host the request goes to (the question's).
    pub host: &'a Host,
    /// What the audit line names. Its path keeps the query: a refusal's line names it so, an allowed request's line
    /// names the path only.
    pub asked: Asked<'a>,
}

/// What a door does to reach the upstream of an admitted request: the two steps around its decision line.
pub(crate) trait Door {
    /// Where the request goes once its route is checked: a pooled connection or checked addresses (plain HTTP), the
    /// tunnel's own upstream (inside an inspected tunnel).
    type Route: Send;
    /// What the request is sent on.
    type Upstream;
    /// Check where the request goes (`via`, the policy's route), before its line is written. A
    /// [`DialError::Refused`] is a refusal by the destination check; any other error is an allowed request whose
    /// upstream failed.
    fn route(&mut self, via: Route<'_>) -> impl Future<Output = Result<Self::Route, DialError>> + Send;
    /// Open the checked route, once the request is on record.
    fn connect(&mut self, route: Self::Route) -> impl Future<Output = Result<Self::Upstream, DialError>> + Send;
    /// The upstream proxy (its authority) the request itself is sent to by the policy's route `via`, if it is.
    fn through(&self, via: Route<'_>) -> Option<String>;
}

/// The door of a request inside an inspected tunnel: its route is the tunnel's, checked and dialled (through the
/// upstream proxy's tunnel, if the policy says so) when the tunnel was; the request goes on the tunnel's session.
pub(crate) struct Tunnelled;

impl Door for Tunnelled {
    type Route = ();
    type Upstream = ();

    async fn route(&mut self, _: Route<'_>) -> Result<(), DialError> {
        Ok(())
    }

    async fn connect(&mut self, (): ()) -> Result<(), DialError> {
        Ok(())
    }

    fn through(&self, _: Route<'_>) -> Option<String> {
        None
    }
}

/// How a refused request left the client's connection, so a door knows whether the connection may go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyLeft {
    /// Refused on its head: its body (if it has one) is still to come.
    Unread,
    /// Its body was read whole.
    Read,
    /// Refused in a way the connection does not survive (a body read in part, an upstream that failed).
    Broken,
}

/// A refused request: the answer to send, already on record.
pub(crate) struct Refusal {
    /// leash's answer (403, 502, 503, ...).
    pub answer: Response,
    /// What became of the request's body.
    pub body: BodyLeft,
}

impl Refusal {
    fn new(answer: Response, body: BodyLeft) -> Self {
        Refusal { answer, body }
    }
}

/// An admitted request: on record, and what goes up.
pub(crate) struct Admitted<U> {
    /// What the request is sent on.
    pub upstream: U,
    /// What watches the exchange for credentials: the host's own turned back into its placeholder in the response,
    /// those bound elsewhere that the request body must not carry.
    pub watches: Watches,
    /// The query sent in place of the request's (a credential put into a parameter of it); never logged.
    pub query: Option<String>,
    /// The body the model API gate read and checked, to go up in place of the client's.
    pub body: Option<Bytes>,
    /// The upstream proxy (its authority) the request goes through by the policy's route, if it does.
    pub through: Option<String>,
    /// The rule the request was allowed by: a refusal at a later re-dial names it too.
    pub rule: Option<Arc<str>>,
    /// Whether a person's answer let it on (ask mode), not the rules: a new policy's rules do not cut it then.
    pub by_person: bool,
}

/// Admit one request: decide → credential → model API body gate → leak check → route → log. `request` is
/// rewritten as it goes up (the credential put in, fields only leash may set); `body` is read only by the gate.
pub(crate) async fn admit<M, B, D>(
    ctx: &RequestCtx<'_>,
    entry: Entry<'_>,
    (request, body): (&mut M, &mut B),
    door: &mut D,
) -> Result<Admitted<D::Upstream>, Refusal>
where
    M: Outgoing + Send,
    B: RequestBody + Send,
    D: Door + Send,
{
    let asked = &entry.asked;
    let (admission, ruling) = admission(ctx, &entry, &*request).await?;
    let Some(treatment) = admission.treatment else {
        return Err(Refusal::new(ctx.refuse_ruled(asked, &admission.decision, ruling), BodyLeft::Unread));
    };
    // INVARIANT: a credential's value goes out in clear only where its entry allows plaintext, however the request
    // was let on (the rules, audit mode, a person's yes). The policy refuses such a request already; kept here too.
    if admission.tunnel == Tunnel::None && treatment.credential.is_some_and(|c| !c.plaintext) {
        let in_clear = Decision { verdict: Verdict::Block, reason: Reason::CredentialPlaintext, rule: None };
        return Err(Refusal::new(ctx.refuse_ruled(asked, &in_clear, ruling), BodyLeft::Unread));
    }
    // Credentials: one bound to another host refuses the request; the host's own goes in.
    let secrets = &ctx.sh.cfg.credentials;
    let (credential, redact, query) = match secrets.outgoing(treatment.credential, entry.host, request) {
        Outbound::Leak(name) => return Err(Refusal::new(ctx.refuse_leak(asked, &name), BodyLeft::Unread)),
        Outbound::Go { credential, redactor, query } => (credential, redactor, query),
    };
    let own = treatment.credential.map(|c| &*c.name);
    let (read, stripped) = gate_body(ctx, &entry, treatment.model_gate, (&*request, body), own).await?;
    if read.is_some() {
        // The body goes up from memory, framed by its own length; leash answered any `100 Continue` itself.
        model::REFRAMED.iter().for_each(|name| request.remove(name));
    }
    let decision = model::forwarded(&admission.decision, &stripped);
    let dropped = upgrade::dropped(request.upgrade());
    let extras = Extras { ruling, ..Extras::allowed(&stripped, credential.as_deref(), dropped.as_deref()) };
    let allowed = Asked { path: asked.path.map(|p| split_query(p).0), ..*asked };
    let upstream = route_and_log(ctx, &allowed, (&decision, extras), treatment.route, door).await?;
    let through = door.through(treatment.route);
    // An answer through the upstream proxy may quote the `Proxy-Authorization` leash sent it. (Not a WebSocket's:
    // a watched one may negotiate no extension, which is the credential hosts' rule, not every host's.)
    let redact = match through {
        Some(_) if request.upgrade().is_none() => Redactor::joined(redact, secrets.upstream_redactor()),
        _ => redact,
    };
    let watches = Watches { redact, leaks: LeakWatch::new(secrets, own), via_proxy: through.clone() };
    Ok(Admitted { upstream, watches, query, body: read, through, rule: decision.rule, by_person: ruling.is_some() })
}

/// The policy's answer about the request, and in ask mode a person's: a request the rules refuse as `not-allowed` is
/// held until its host is answered, then treated as the policy treats an allowed request to it, or refused. A head
/// carrying a credential bound to another host is refused at once, before any question: no answer could let it on.
async fn admission<'c, M: Outgoing>(
    ctx: &'c RequestCtx<'_>,
    entry: &Entry<'_>,
    request: &M,
) -> Result<(Admission<'c>, Option<Ruling>), Refusal> {
    let admission = as_a_write_if_websocket(ctx, &entry.question, request, ctx.admission(&entry.question));
    if ctx.snap.may_ask(&admission.decision) {
        let own = ctx.snap.credential_for(entry.host).map(|c| &*c.name);
        if let Some(name) = ctx.sh.cfg.credentials.carried_elsewhere(own, request) {
            return Err(Refusal::new(ctx.refuse_leak(&entry.asked, name), BodyLeft::Unread));
        }
    }
    let Some(ruling) = ctx.hold(&entry.asked, &admission.decision).await else { return Ok((admission, None)) };
    let decision = ruled(ruling);
    let treatment = (decision.verdict == Verdict::Allow).then(|| ctx.snap.treatment(entry.host));
    Ok((Admission { decision, treatment, ..admission }, Some(ruling)))
}

/// A WebSocket is asked for with a GET and then carries whatever the client sends: it is let on only where a write (a
/// POST to the same place) would be, so a host whose rules admit only reads (`read-only`, an entry listing GET) refuses
/// it with `method-not-allowed`. Without rules by method a POST is decided as the GET was, and nothing changes.
fn as_a_write_if_websocket<'c, M: Outgoing>(
    ctx: &'c RequestCtx<'_>,
    question: &Question<'_>,
    request: &M,
    admission: Admission<'c>,
) -> Admission<'c> {
    let wants_websocket = request.upgrade().is_some_and(upgrade::is_websocket);
    let Question::Request(req) = *question else { return admission };
    if !wants_websocket || admission.decision.verdict == Verdict::Block {
        return admission;
    }
    let as_write = ctx.decide(&Question::Request(Request { method: "POST", ..req }));
    match as_write.verdict {
        // INVARIANT: no WebSocket where a POST would be refused: its messages are writes no rule by method sees.
        Verdict::Block => Admission { decision: as_write, treatment: None, ..admission },
        _ => admission,
    }
}

/// The model API gate, where the policy filters the host's provider-side tools, and the leak check of a body it
/// read: the body as it goes up (when read) and what was stripped from it.
async fn gate_body<M: Outgoing, B: RequestBody>(
    ctx: &RequestCtx<'_>,
    entry: &Entry<'_>,
    tools: Option<ProviderTools>,
    (request, body): (&M, &mut B),
    own: Option<&str>,
) -> Result<(Option<Bytes>, Vec<String>), Refusal> {
    let Some(tools) = tools else { return Ok((None, Vec::new())) };
    let asked = &entry.asked;
    let path = asked.path.unwrap_or("/");
    match model::gate(&ctx.sh.cfg.limits, request, body, path, tools).await {
        Gated::Pass => Ok((None, Vec::new())),
        Gated::Body { body, removed } => {
            // A body leash read is searched too.
            match ctx.sh.cfg.credentials.found_in_any(own, [body.as_ref()]) {
                Some(name) => Err(Refusal::new(ctx.refuse_leak(asked, name), BodyLeft::Read)),
                None => Ok((Some(body), removed)),
            }
        }
        Gated::Refuse { why, read } => {
            let shown = format!("{}{}", asked.host, split_query(path).0);
            let answer = Response::provider_error(asked.host, &shown, &why);
            let left = if read { BodyLeft::Read } else { BodyLeft::Broken };
            Err(Refusal::new(ctx.refuse_with(asked, &model::refused(), answer), left))
        }
    }
}

/// Check the route, write the request's line (allowed, or refused by the destination check), open the route.
async fn route_and_log<D: Door>(
    ctx: &RequestCtx<'_>,
    allowed: &Asked<'_>,
    (decision, extras): (&Decision, Extras<'_>),
    via: Route<'_>,
    door: &mut D,
) -> Result<D::Upstream, Refusal> {
    let broken = |answer| Refusal::new(answer, BodyLeft::Broken);
    let authority = || format!("{}:{}", allowed.host, allowed.port);
    let route = match door.route(via).await {
        Ok(route) => route,
        Err(DialError::Refused(reason)) => return Err(broken(ctx.refuse_destination(allowed, reason))),
        Err(e) => {
            // The request was allowed; its upstream failed before it was dialled.
            ctx.pass_with(allowed, decision, extras).map_err(broken)?;
            return Err(broken(ctx.dial_failed(&authority(), &e)));
        }
    };
    // INVARIANT: logged before a byte of the request goes up.
    ctx.pass_with(allowed, decision, extras).map_err(broken)?;
    door.connect(route).await.map_err(|e| broken(ctx.dial_failed(&authority(), &e)))
}

/// `path_and_query` with `query` sent in place of its own (a credential put into a parameter of it).
pub(crate) fn sent_target<'a>(path_and_query: &'a str, query: Option<&str>) -> Cow<'a, str> {
    match query {
        Some(q) => Cow::Owned(format!("{}?{q}", split_query(path_and_query).0)),
        None => Cow::Borrowed(path_and_query),
    }
}
