//! The gate every request passes, whichever door it came through (plain HTTP, a CONNECT before and after its
//! ClientHello, a request or HTTP/2 stream inside an inspected tunnel, a transparent listener, the DNS stub): one
//! [`RequestCtx`] per request carries whose it is, its audit id, the policy snapshot it is decided on and when it
//! began; the gate asks the policy, writes the audit line, and hands back the go-ahead or the finished refusal.
//!
//! This module is the only writer of audit lines and the only place where a line that cannot be written turns into
//! a refusal (503 `audit-failed`). A refusal is also a warning on stderr, so an operator watching the terminal
//! sees it.

use std::borrow::Cow;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use leash_policy::{Admission, Decision, Question, TlsInspection, Verdict};

use crate::ask::{Held, HeldKind, Ruling, Settlement};
use crate::audit::{
    refusal, AuditError, AuditLog, DecisionEntry, OutcomeEntry, Timestamp, UpstreamFailure, LOOKUP_METHOD,
};
use crate::config::Snapshot;
use crate::metrics::Metrics;
use crate::refusal::Response;
use crate::shared::Shared;
use crate::wire::target::split_query;

/// What the audit line says a request asked for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Asked<'a> {
    /// The HTTP method, `CONNECT` for a tunnel, `DNS` for a lookup, `-` for a head that could not be read.
    pub method: &'a str,
    pub host: &'a str,
    pub port: u16,
    /// The path (with its query) of an HTTP request; `None` for a tunnel or a lookup.
    pub path: Option<&'a str>,
}

impl Asked<'_> {
    /// What a refusal's answer names: `<host><path>` without the query, or `host:port` for a tunnel.
    pub fn shown(&self) -> String {
        match self.path {
            Some(path) => format!("{}{}", self.host, split_query(path).0),
            None => format!("{}:{}", self.host, self.port),
        }
    }
}

/// What a decision line says beyond the decision, for a request that goes out changed.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Extras<'a> {
    /// What was stripped from a model API request's body (`provider-tools-stripped`).
    pub stripped: Option<&'a [String]>,
    /// The credential put on the request (its entry's name).
    pub credential: Option<&'a str>,
    /// The service the request came through (see [`crate::service`]).
    pub service: Option<&'a str>,
    /// The `Upgrade` asked for that does not go up (see [`crate::upgrade`]).
    pub upgrade_dropped: Option<&'a str>,
    /// Ask mode: the person's answer (or the timeout) that decided the request.
    pub ruling: Option<Ruling>,
}

impl<'a> Extras<'a> {
    /// What an allowed request's line adds to its decision: what was stripped from a model API body (nothing said
    /// when nothing was), the credential put on it, and the `Upgrade` that does not go up.
    pub fn allowed(stripped: &'a [String], credential: Option<&'a str>, upgrade_dropped: Option<&'a str>) -> Self {
        let stripped = (!stripped.is_empty()).then_some(stripped);
        Extras { stripped, credential, upgrade_dropped, service: None, ruling: None }
    }
}

/// One request on its way through leash.
pub(crate) struct RequestCtx<'s> {
    pub sh: &'s Shared,
    /// The policy the request is decided on, from its first question to its outcome.
    pub snap: Arc<Snapshot>,
    /// The request's id in the audit log: its decision line and its outcome line carry it.
    pub id: u64,
    pub peer: SocketAddr,
    pub started: Instant,
    /// The policy's service the request came through (its lines say so), if any.
    pub service: Option<Arc<str>>,
}

impl<'s> RequestCtx<'s> {
    /// A request that begins now: the next audit id, the policy as it is now.
    pub fn new(sh: &'s Shared, peer: SocketAddr) -> Self {
        let (id, snap) = (sh.cfg.audit.next_id(), sh.cfg.policy.current());
        Self { sh, snap, id, peer, started: Instant::now(), service: None }
    }

    /// A request that begins now on the listener of service `name`.
    pub fn for_service(sh: &'s Shared, peer: SocketAddr, name: &Arc<str>) -> Self {
        Self { service: Some(name.clone()), ..Self::new(sh, peer) }
    }

    /// The policy's answer to `question`, with the inspection this proxy can give.
    pub fn decide(&self, question: &Question<'_>) -> Decision {
        self.snap.decide(question, self.tls())
    }

    /// The policy's whole answer to `question`: the decision and, for a request it lets on, its treatment.
    pub fn admission(&self, question: &Question<'_>) -> Admission<'_> {
        self.snap.admit(question, self.tls())
    }

    /// The inspection this proxy can give, as every decision here is taken with.
    pub fn tls(&self) -> TlsInspection {
        match self.sh.cfg.inspection {
            Some(_) => TlsInspection::Available,
            None => TlsInspection::Unavailable,
        }
    }

    /// Write the line for `decision`. `Ok` lets the request on; `Err` is the answer when it may not go: the 403
    /// for a refusal, or 503 when the line could not be written (nothing unrecorded goes out).
    pub fn pass(&self, asked: &Asked<'_>, decision: &Decision) -> Result<(), Response> {
        self.pass_with(asked, decision, Extras::default())
    }

    /// [`RequestCtx::pass`] naming what was stripped from a model API request's body, or the credential put on it.
    pub fn pass_with(&self, asked: &Asked<'_>, decision: &Decision, extras: Extras<'_>) -> Result<(), Response> {
        if self.record(asked, decision, extras).is_err() {
            return Err(Response::audit_failed());
        }
        match decision.verdict {
            Verdict::Block => Err(self.shaped(asked, Response::forbidden(&asked.shown(), decision.reason))),
            _ => Ok(()),
        }
    }

    /// `answer` as the policy's `refusals` says (an origin's missing page, see [`Response::as_not_found`]), else, to
    /// a request for a model API, in that API's JSON error shape (its SDK then shows leash's reason); any other
    /// answer as it is. A tunnel's refusal comes before any request, so it is never in an API's shape.
    fn shaped(&self, asked: &Asked<'_>, answer: Response) -> Response {
        if self.snap.refusals() == leash_policy::Refusals::AsNotFound {
            return answer.as_not_found(asked.path.is_some());
        }
        let model_api = asked.path.is_some()
            && leash_policy::parse_host(asked.host).is_ok_and(|host| self.snap.is_model_api(&host));
        match model_api {
            true => answer.in_api_shape(asked.host),
            false => answer,
        }
    }

    /// Ask mode: hold a request `decision` refuses as `not-allowed` until a person answers for its host (see
    /// [`crate::ask`]). `None`: nothing to hold — another decision, or a proxy with no one to ask. Nothing is resolved
    /// or dialled meanwhile; the request's line is written once the answer is in ([`RequestCtx::ruled`]).
    pub async fn hold(&self, asked: &Asked<'_>, decision: &Decision) -> Option<Ruling> {
        let asking = self.sh.cfg.ask.as_ref()?;
        if !self.snap.may_ask(decision) {
            return None;
        }
        let kind = if asked.path.is_some() { HeldKind::Request } else { HeldKind::Tunnel };
        let held = Held { kind, method: asked.method, host: asked.host, port: asked.port, path: asked.path };
        Some(asking.hold(held).await)
    }

    /// Record a refusal and answer it with the plain 403 naming what was asked (503 if it cannot be recorded); a
    /// refusal by a person's answer (or its timeout) says so on its line.
    pub fn refuse_ruled(&self, asked: &Asked<'_>, decision: &Decision, ruling: Option<Ruling>) -> Response {
        match self.pass_with(asked, decision, Extras { ruling, ..Extras::default() }) {
            Err(answer) => answer,
            Ok(()) => self.shaped(asked, Response::forbidden(&asked.shown(), decision.reason)),
        }
    }

    /// Record a refusal and answer it with the plain 403 naming what was asked (503 if it cannot be recorded).
    pub fn refuse(&self, asked: &Asked<'_>, decision: &Decision) -> Response {
        match self.pass(asked, decision) {
            Err(answer) => answer,
            // Only a block is refused; a caller refusing on anything else is a bug, and still gets a refusal.
            Ok(()) => self.shaped(asked, Response::forbidden(&asked.shown(), decision.reason)),
        }
    }

    /// Record a refusal taken outside the policy's rules (a malformed request, an address the destination check
    /// refused, an upstream certificate that failed, a model API body) and answer it with `answer`, or 503 when
    /// the line cannot be written.
    pub fn refuse_with(&self, asked: &Asked<'_>, decision: &Decision, answer: Response) -> Response {
        match self.record(asked, decision, Extras::default()) {
            Ok(()) => self.shaped(asked, answer),
            Err(_) => Response::audit_failed(),
        }
    }

    /// Record a refusal by the destination check (the resolved addresses are internal): a block line under the
    /// request's id and the 403, whether at a first dial or a re-dial.
    pub fn refuse_destination(&self, asked: &Asked<'_>, reason: leash_policy::Reason) -> Response {
        self.refuse(asked, &refusal(reason))
    }

    /// Write the decision line under this request's id, and count it: as decided, or as the 503 `audit-failed` the
    /// client gets when the line cannot be written.
    fn record(&self, asked: &Asked<'_>, decision: &Decision, extras: Extras<'_>) -> Result<(), AuditError> {
        let extras = Extras { service: self.service.as_deref(), ..extras };
        if let Some(tools) = extras.stripped {
            // The model's answer changes and says nothing of why: the operator is told, as they happen.
            tracing::warn!(
                "stripped provider-side tool(s) {} from a request to {}: the model answers without them",
                tools.join(", "),
                asked.host
            );
        }
        let written = write_decision(&self.sh.cfg.audit, self.id, asked, decision, Some(self.peer), extras);
        let metrics = &self.sh.cfg.metrics;
        match &written {
            Ok(()) => metrics.count_decision(asked.method, decision),
            Err(_) => {
                metrics.count_audit_failure();
                metrics.count_decision(asked.method, &refusal(leash_policy::Reason::AuditFailed));
            }
        }
        written
    }

    /// Record and answer a request that carries credential `name` (its placeholder or value) to a host it does not
    /// belong to: the trace of an exfiltration attempt, so also a warning that says which credential.
    pub fn refuse_leak(&self, asked: &Asked<'_>, name: &str) -> Response {
        tracing::warn!("credential `{name}` found in a request to {}: refused as a leak", asked.host);
        self.refuse(asked, &refusal(leash_policy::Reason::CredentialLeak))
    }

    /// Record how an allowed request ended. A failure here cannot refuse anything any more; it is reported.
    pub fn outcome(&self, status: u16, up: u64, down: u64) {
        let outcome = (status, (up, down), None, None);
        write_outcome(&self.sh.cfg.audit, &self.sh.cfg.metrics, self.id, outcome, self.started);
    }

    /// Record that a new policy cut the request before it ended (`error: policy-switch`; what it had relayed is not
    /// known here).
    pub fn cut(&self) {
        let outcome = (0, (0, 0), Some(UpstreamFailure::PolicySwitch), None);
        write_outcome(&self.sh.cfg.audit, &self.sh.cfg.metrics, self.id, outcome, self.started);
    }

    /// What [`RequestCtx::outcome`] needs, owned, for a task that outlives this context (a tunnel's relay).
    pub fn pending_outcome(&self, sh: &Arc<Shared>) -> PendingOutcome {
        PendingOutcome { sh: sh.clone(), id: self.id, started: self.started }
    }

    /// Record that an allowed request's upstream (`authority`) could not be reached, and answer it: the failure
    /// outcome, and the 502/504 saying why.
    pub fn dial_failed(&self, authority: &str, e: &crate::dial::DialError) -> Response {
        self.failed(e.status(), authority, e.cause(), &e.to_string());
        Response::upstream_failed(e.status(), authority, &e.to_string())
    }

    /// Record that an allowed request's upstream (`authority`) failed, and why: the outcome's `error`, and a warning
    /// naming the host and the cause, so an operator sees why a client saw a bare failure.
    pub fn failed(&self, status: u16, authority: &str, cause: Option<UpstreamFailure>, why: &str) {
        if let Some(cause) = cause {
            tracing::warn!("upstream {authority} failed ({}): {why}", cause.as_str());
            self.sh.cfg.audit.count_failure(authority, cause.as_str());
        }
        // The upstream proxy's own answer goes on record, so a refusal by it is told from leash's.
        let answer = (cause == Some(UpstreamFailure::UpstreamProxy)).then(|| why.to_owned());
        let outcome = (status, (0, 0), cause, answer);
        write_outcome(&self.sh.cfg.audit, &self.sh.cfg.metrics, self.id, outcome, self.started);
    }
}

/// The outcome line a request still owes, held by a task of its own: no policy snapshot, no borrow.
pub(crate) struct PendingOutcome {
    sh: Arc<Shared>,
    id: u64,
    started: Instant,
}

impl PendingOutcome {
    /// Record how the request ended (see [`RequestCtx::outcome`]).
    pub fn write(&self, status: u16, up: u64, down: u64) {
        let outcome = (status, (up, down), None, None);
        write_outcome(&self.sh.cfg.audit, &self.sh.cfg.metrics, self.id, outcome, self.started);
    }

    /// Record that a new policy cut the request (or tunnel) after `up` and `down` bytes: `error: policy-switch`.
    pub fn cut(&self, status: u16, up: u64, down: u64) {
        let outcome = (status, (up, down), Some(UpstreamFailure::PolicySwitch), None);
        write_outcome(&self.sh.cfg.audit, &self.sh.cfg.metrics, self.id, outcome, self.started);
    }
}

/// The decision a person's answer (or its timeout) makes of a held request: allowed as `approved`, refused as
/// `denied` or `ask-timeout`. No rule decided it, so none is named.
pub(crate) fn ruled(ruling: Ruling) -> Decision {
    let (verdict, reason) = match ruling.settlement {
        s if s.allows() => (Verdict::Allow, leash_policy::Reason::Approved),
        Settlement { answer: Some(_), .. } => (Verdict::Block, leash_policy::Reason::Denied),
        Settlement { answer: None, .. } => (Verdict::Block, leash_policy::Reason::AskTimeout),
    };
    Decision { verdict, reason, rule: None }
}

/// Write one decision line (and the warning for a refusal). The DNS stub writes its lookups through here too.
pub(crate) fn write_decision(
    audit: &AuditLog,
    id: u64,
    asked: &Asked<'_>,
    d: &Decision,
    client: Option<SocketAddr>,
    extras: Extras<'_>,
) -> Result<(), AuditError> {
    match (d.verdict, asked.method) {
        (Verdict::Block, LOOKUP_METHOD) => tracing::warn!("refused DNS {} ({})", asked.host, d.reason),
        (Verdict::Block, method) => {
            let path = asked.path.unwrap_or("");
            tracing::warn!("refused {method} {}:{}{path} ({})", asked.host, asked.port, d.reason);
        }
        _ => {}
    }
    let (stamp, mut client_text) = (Timestamp::now(), [0u8; 64]);
    let entry = DecisionEntry {
        id,
        time: stamp.as_str().into(),
        method: asked.method.into(),
        host: asked.host.into(),
        port: asked.port,
        path: asked.path.map(Into::into),
        decision: d.verdict,
        rule: d.rule.as_deref().map(Into::into),
        reason: d.reason,
        client: client.map(|c| addr_text(c, &mut client_text)),
        stripped: extras.stripped.map(Into::into),
        credential: extras.credential.map(Into::into),
        service: extras.service.map(Into::into),
        upgrade_dropped: extras.upgrade_dropped.map(Into::into),
        decided_by: extras.ruling.map(|r| r.settlement.by_word().into()),
        answer: extras.ruling.map(|r| r.settlement.answer_word().into()),
        waited_ms: extras.ruling.map(|r| (r.waited.as_secs_f64() * 1e6).round() / 1e3),
    };
    let written = audit.decision(&entry);
    if let Err(e) = &written {
        tracing::error!("{e}; refusing the request");
    }
    written
}

/// `addr` as text, written into `buf` (a `String` for every line's client was an allocation); the longest there is,
/// a scoped IPv6 address with a port, takes 58 bytes.
fn addr_text(addr: SocketAddr, buf: &mut [u8; 64]) -> Cow<'_, str> {
    let free = {
        let mut rest = &mut buf[..];
        write!(rest, "{addr}").ok().map(|()| rest.len())
    };
    match free.map(|free| std::str::from_utf8(&buf[..buf.len() - free])) {
        Some(Ok(text)) => Cow::Borrowed(text),
        _ => Cow::Owned(addr.to_string()),
    }
}

/// How a request ended: its status, the bytes each way, and for a failure its cause and the upstream proxy's answer.
type Ending = (u16, (u64, u64), Option<UpstreamFailure>, Option<String>);

fn write_outcome(
    audit: &AuditLog,
    metrics: &Metrics,
    id: u64,
    (status, (up, down), cause, answer): Ending,
    started: Instant,
) {
    let (took, stamp) = (started.elapsed(), Timestamp::now());
    let entry = OutcomeEntry {
        id,
        time: stamp.as_str().into(),
        status,
        bytes_up: up,
        bytes_down: down,
        duration_ms: (took.as_secs_f64() * 1e6).round() / 1e3,
        error: cause,
        upstream_proxy_answer: answer.map(Into::into),
    };
    metrics.count_outcome((up, down), took, cause);
    if let Err(e) = audit.outcome(&entry) {
        metrics.count_audit_failure();
        tracing::error!("{e}");
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv6Addr, SocketAddrV6};

    use super::*;

    /// A line's client reads as the address's own text, the longest spellings included.
    #[test]
    fn a_client_address_is_written_as_its_own_text() {
        let longest = SocketAddrV6::new(Ipv6Addr::from([0xffff; 8]), 65535, 0, u32::MAX);
        let addrs: [SocketAddr; 4] = [
            "127.0.0.1:5000".parse().unwrap(),
            "255.255.255.255:65535".parse().unwrap(),
            "[::ffff:192.0.2.1]:1".parse().unwrap(),
            longest.into(),
        ];
        for addr in addrs {
            let mut buf = [0u8; 64];
            let text = addr_text(addr, &mut buf);
            assert!(matches!(text, Cow::Borrowed(_)), "{addr} fits the buffer");
            assert_eq!(text, addr.to_string());
        }
        assert_eq!(longest.to_string().len(), 58);
    }
}
