//! One audit line, the one type both sides use: the proxy writes it ([`AuditLog::decision`](super::AuditLog),
//! built in `gate.rs`) and `leash log summary` and `leash policy suggest` read it back ([`AuditLine::parse`]). Its
//! JSON is the log's format (docs/audit-log.md), field for field and in this order. The words that are not free text
//! are enums here, in one place: the `decision` word ([`Verdict`]), the `reason` ([`Reason`]), an outcome's `error`
//! ([`UpstreamFailure`]), and what a line's `method` says it records ([`LineKind`]).

use std::borrow::Cow;
use std::io;

use leash_policy::{Reason, RequestKind, Verdict};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The `method` of a tunnel's line (`CONNECT`, or TLS at a transparent listener).
pub const TUNNEL_METHOD: &str = "CONNECT";
/// The `method` of a lookup answered by the DNS stub.
pub const LOOKUP_METHOD: &str = "DNS";
/// The `method` of a connection to a `tcp` service.
pub const SERVICE_METHOD: &str = "SERVICE";

/// A line of the log: a decision, or the outcome of an allowed request, joined to its decision by `id`.
#[derive(Debug, Clone, PartialEq)]
pub enum AuditLine<'a> {
    /// A decision line: what was asked, and what the policy (or leash) made of it.
    Decision(Box<DecisionEntry<'a>>),
    /// An outcome line: how an allowed request ended.
    Outcome(OutcomeEntry<'a>),
    /// A new policy put in force while leash ran.
    Switch(SwitchEntry<'a>),
}

impl AuditLine<'static> {
    /// A line of the log read back: a decision if it has a `decision` field, else an outcome. `None` for anything
    /// else — a warning among the lines of a replayed log, a truncated line, a word this leash does not know.
    pub fn parse(line: &str) -> Option<AuditLine<'static>> {
        let value: serde_json::Value = serde_json::from_str(line).ok()?;
        if value.get("event").and_then(|e| e.as_str()) == Some(SWITCH_EVENT) {
            return SwitchEntry::deserialize(&value).ok().map(AuditLine::Switch);
        }
        match value.get("decision") {
            Some(_) => DecisionEntry::deserialize(&value).ok().map(|d| AuditLine::Decision(Box::new(d))),
            None => OutcomeEntry::deserialize(&value).ok().map(AuditLine::Outcome),
        }
    }
}

/// The decision record of one request or tunnel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionEntry<'a> {
    /// The request's id in this run (ids restart with each run; a log appended to holds several runs).
    pub id: u64,
    /// RFC 3339, UTC, milliseconds. Always written; a line read without one has it empty.
    #[serde(default)]
    pub time: Cow<'a, str>,
    /// The HTTP method; [`TUNNEL_METHOD`], [`LOOKUP_METHOD`] or [`SERVICE_METHOD`] for what is not an HTTP
    /// request; `-` for a head that could not be read. [`DecisionEntry::kind`] tells them apart.
    pub method: Cow<'a, str>,
    /// The host as asked (a tunnel's SNI once read; a service's name).
    pub host: Cow<'a, str>,
    /// The port asked for (53 for a lookup).
    pub port: u16,
    /// An HTTP request's path with its query; `null` for tunnels and lookups.
    pub path: Option<Cow<'a, str>>,
    /// The `decision` word: `allow`, `block`, `inspect` or `would-block`.
    #[serde(with = "verdict_word")]
    pub decision: Verdict,
    /// The policy entry that matched, as written in the file.
    pub rule: Option<Cow<'a, str>>,
    /// The `reason` word (see [`Reason`]).
    #[serde(with = "reason_word")]
    pub reason: Reason,
    /// The client's address and port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<Cow<'a, str>>,
    /// What was removed from a model API request (`provider-tools-stripped`), one item per provider-side tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stripped: Option<Cow<'a, [String]>>,
    /// The credential leash put on the request (its `credentials` entry's name; never its value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<Cow<'a, str>>,
    /// The `services` entry the request or connection came through (its `host` is the service's name then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<Cow<'a, str>>,
    /// The `Upgrade` the request asked for that leash did not pass on (anything but a WebSocket: `h2c`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_dropped: Option<Cow<'a, str>>,
    /// Ask mode: who decided a request the rules would have refused as `not-allowed` — `terminal` (a person at
    /// leash's terminal), `socket` (a client of the control socket) or `timeout` (nobody, in time). Absent: the
    /// policy's rules decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<Cow<'a, str>>,
    /// Ask mode: the answer — `once`, `run`, `always`, `deny` or `timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<Cow<'a, str>>,
    /// Ask mode: how long the request was held for its answer, in milliseconds (0 for a host answered earlier).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waited_ms: Option<f64>,
}

impl DecisionEntry<'_> {
    /// What the line records, as its `method` says.
    pub fn kind(&self) -> LineKind {
        LineKind::of_method(&self.method)
    }
}

/// The outcome record of an allowed request, joined to its decision by `id`: `status` is the upstream's (leash's
/// own 502 or 504 when the upstream failed, even mid-response), `bytes_up` and `bytes_down` what was relayed each
/// way. A client that hangs up mid-response is no failure: its outcome has the upstream's status and the bytes
/// relayed until it went away (over HTTP/1.1 as over HTTP/2). `error` says why the upstream failed, when it did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutcomeEntry<'a> {
    /// The id of the decision line it ends.
    pub id: u64,
    /// RFC 3339, UTC, milliseconds. Always written; a line read without one has it empty.
    #[serde(default)]
    pub time: Cow<'a, str>,
    /// The status the client got: the upstream's, or leash's 502 or 504 when the upstream failed.
    pub status: u16,
    /// Bytes relayed from the client to the upstream, head included.
    pub bytes_up: u64,
    /// Bytes relayed from the upstream to the client, head included.
    pub bytes_down: u64,
    /// From the decision to the end of the response. Always written; a line read without one has it 0.
    #[serde(default)]
    pub duration_ms: f64,
    /// An upstream failure's cause; absent when the upstream answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<UpstreamFailure>,
    /// With `error: upstream-proxy`: what the upstream proxy answered (its status, and squid's error name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_proxy_answer: Option<Cow<'a, str>>,
}

/// The `event` of a [`SwitchEntry`].
pub const SWITCH_EVENT: &str = "policy-switch";

/// A new policy put in force while leash ran (`leash policy switch`): which policy gave way to which, who asked, and
/// how many open tunnels and requests in flight it cut. No `id`: it is no request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SwitchEntry<'a> {
    /// RFC 3339, UTC, milliseconds.
    #[serde(default)]
    pub time: Cow<'a, str>,
    /// [`SWITCH_EVENT`].
    pub event: Cow<'a, str>,
    /// The policy in force before: its file (or `--allow`/`--block` for an inline one).
    pub from: Cow<'a, str>,
    /// The SHA-256 of that file's bytes as read (of the inline arguments, for an inline one), hex.
    pub from_sha256: Cow<'a, str>,
    /// The policy in force now: its file.
    pub to: Cow<'a, str>,
    /// The SHA-256 of its bytes as read, hex.
    pub to_sha256: Cow<'a, str>,
    /// The new policy's generation (1 for the first switch).
    pub generation: u64,
    /// Who asked: `control-socket` (`leash policy switch`), or `sighup` (`leash proxy` reloading its file).
    pub by: Cow<'a, str>,
    /// The asking process's uid, as the kernel gave it on the control socket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by_uid: Option<u32>,
    /// The asking process's pid, likewise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by_pid: Option<i32>,
    /// How many open tunnels and requests in flight the new policy refuses, and leash cut (their outcome lines say
    /// `policy-switch`).
    pub cut: usize,
}

impl SwitchEntry<'_> {
    /// The hex SHA-256 of `bytes`: how a policy is named on the line beside its file.
    pub fn digest(bytes: &[u8]) -> String {
        let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
        digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// What a decision line records, told apart by its `method` (the only field that says so).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LineKind {
    /// An HTTP request: plain, inside an inspected tunnel, or to an `http` service; `method` is its own.
    Http,
    /// A tunnel: [`TUNNEL_METHOD`].
    Tunnel,
    /// A name looked up at the DNS stub: [`LOOKUP_METHOD`].
    Lookup,
    /// A connection to a `tcp` service: [`SERVICE_METHOD`].
    Service,
}

impl LineKind {
    /// The kind a line's `method` names.
    pub fn of_method(method: &str) -> LineKind {
        match method {
            TUNNEL_METHOD => LineKind::Tunnel,
            LOOKUP_METHOD => LineKind::Lookup,
            SERVICE_METHOD => LineKind::Service,
            _ => LineKind::Http,
        }
    }

    /// The request kind the policy's hints and the refusal tally tell apart: a service connection goes with HTTP
    /// requests (neither is a tunnel nor a lookup).
    pub fn request_kind(self) -> RequestKind {
        match self {
            LineKind::Tunnel => RequestKind::Tunnel,
            LineKind::Lookup => RequestKind::Lookup,
            LineKind::Http | LineKind::Service => RequestKind::Http,
        }
    }
}

/// Why an allowed request's upstream failed, as the outcome's `error` word says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamFailure {
    /// The name did not resolve.
    CannotResolve,
    /// The upstream refused the connection.
    Refused,
    /// The upstream reset the connection.
    Reset,
    /// No connection, or no response, in time.
    TimedOut,
    /// Any other failure to connect (unreachable, ...).
    CannotConnect,
    /// The upstream's response could not be read.
    BadResponse,
    /// The upstream closed (or reset) the connection before any byte of an answer.
    Closed,
    /// The upstream proxy refused the tunnel (its status is in the warning and the client's 502).
    UpstreamProxy,
    /// Not the upstream: a new policy put in force while it was open refuses it, and leash cut it.
    PolicySwitch,
}

impl UpstreamFailure {
    /// Every failure, in the order docs/audit-log.md lists their words: for reading a word back, and the metrics'
    /// counters.
    pub(crate) const ALL: [UpstreamFailure; 9] = [
        UpstreamFailure::CannotResolve,
        UpstreamFailure::Refused,
        UpstreamFailure::Reset,
        UpstreamFailure::TimedOut,
        UpstreamFailure::CannotConnect,
        UpstreamFailure::BadResponse,
        UpstreamFailure::Closed,
        UpstreamFailure::UpstreamProxy,
        UpstreamFailure::PolicySwitch,
    ];

    /// The audit log's word.
    pub fn as_str(self) -> &'static str {
        match self {
            UpstreamFailure::CannotResolve => "cannot-resolve",
            UpstreamFailure::Refused => "refused",
            UpstreamFailure::Reset => "reset",
            UpstreamFailure::TimedOut => "timed-out",
            UpstreamFailure::CannotConnect => "cannot-connect",
            UpstreamFailure::BadResponse => "bad-response",
            UpstreamFailure::Closed => "closed",
            UpstreamFailure::UpstreamProxy => "upstream-proxy",
            UpstreamFailure::PolicySwitch => "policy-switch",
        }
    }

    /// The cause of a failed connection or transfer.
    pub fn of_io(e: &io::Error) -> UpstreamFailure {
        match e.kind() {
            io::ErrorKind::ConnectionRefused => UpstreamFailure::Refused,
            io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted | io::ErrorKind::BrokenPipe => {
                UpstreamFailure::Reset
            }
            io::ErrorKind::TimedOut => UpstreamFailure::TimedOut,
            io::ErrorKind::UnexpectedEof => UpstreamFailure::Closed,
            _ => UpstreamFailure::CannotConnect,
        }
    }
}

impl Serialize for UpstreamFailure {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for UpstreamFailure {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let word = Cow::<str>::deserialize(d)?;
        let known = UpstreamFailure::ALL.into_iter().find(|f| f.as_str() == word);
        known.ok_or_else(|| serde::de::Error::custom(format!("unknown upstream failure `{word}`")))
    }
}

/// The `decision` word of a verdict.
pub fn verdict_word(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Allow => "allow",
        Verdict::Block => "block",
        Verdict::Inspect => "inspect",
        Verdict::WouldBlock => "would-block",
    }
}

/// [`Verdict`] as its `decision` word, both ways.
mod verdict_word {
    use super::*;

    pub(super) const ALL: [Verdict; 4] = [Verdict::Allow, Verdict::Block, Verdict::Inspect, Verdict::WouldBlock];

    pub fn serialize<S: Serializer>(verdict: &Verdict, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(super::verdict_word(*verdict))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Verdict, D::Error> {
        let word = Cow::<str>::deserialize(d)?;
        let known = ALL.into_iter().find(|v| super::verdict_word(*v) == word);
        known.ok_or_else(|| serde::de::Error::custom(format!("unknown decision `{word}`")))
    }
}

/// [`Reason`] as its word ([`Reason::as_str`]), both ways.
mod reason_word {
    use super::*;

    pub fn serialize<S: Serializer>(reason: &Reason, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(reason.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Reason, D::Error> {
        let word = Cow::<str>::deserialize(d)?;
        let known = Reason::ALL.into_iter().find(|r| r.as_str() == word);
        known.ok_or_else(|| serde::de::Error::custom(format!("unknown reason `{word}`")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision() -> DecisionEntry<'static> {
        DecisionEntry {
            id: 7,
            time: "2026-12-02T16:42:13.123Z".into(),
            method: "GET".into(),
            host: "api.example.test".into(),
            port: 443,
            path: Some("/v1/x?q=1".into()),
            decision: Verdict::Allow,
            rule: Some("api.example.test".into()),
            reason: Reason::ProviderToolsStripped,
            client: Some("127.0.0.1:5000".into()),
            stripped: Some(vec!["web_search".to_owned()].into()),
            credential: Some("github".into()),
            service: None,
            upgrade_dropped: Some("h2c".into()),
            decided_by: None,
            answer: None,
            waited_ms: None,
        }
    }

    #[test]
    fn a_decision_is_written_field_for_field_in_the_logs_order_and_read_back_the_same() {
        let line = serde_json::to_string(&decision()).unwrap();
        assert_eq!(
            line,
            r#"{"id":7,"time":"2026-12-02T16:42:13.123Z","method":"GET","host":"api.example.test","port":443,"path":"/v1/x?q=1","decision":"allow","rule":"api.example.test","reason":"provider-tools-stripped","client":"127.0.0.1:5000","stripped":["web_search"],"credential":"github","upgrade_dropped":"h2c"}"#
        );
        assert_eq!(AuditLine::parse(&line), Some(AuditLine::Decision(Box::new(decision()))));
        let bare =
            DecisionEntry { path: None, rule: None, client: None, stripped: None, credential: None, ..decision() };
        let bare = DecisionEntry { upgrade_dropped: None, decision: Verdict::WouldBlock, ..bare };
        let line = serde_json::to_string(&bare).unwrap();
        assert!(line.contains(r#""path":null,"decision":"would-block","rule":null,"reason""#), "{line}");
        assert!(line.ends_with(r#""reason":"provider-tools-stripped"}"#), "{line}");
    }

    #[test]
    fn an_outcome_is_written_in_the_logs_order_and_read_back_the_same() {
        let outcome = OutcomeEntry {
            id: 7,
            time: "t".into(),
            status: 502,
            bytes_up: 1,
            bytes_down: 2,
            duration_ms: 0.5,
            error: Some(UpstreamFailure::UpstreamProxy),
            upstream_proxy_answer: Some("403 ERR_ACCESS_DENIED".into()),
        };
        let line = serde_json::to_string(&outcome).unwrap();
        assert_eq!(
            line,
            r#"{"id":7,"time":"t","status":502,"bytes_up":1,"bytes_down":2,"duration_ms":0.5,"error":"upstream-proxy","upstream_proxy_answer":"403 ERR_ACCESS_DENIED"}"#
        );
        assert_eq!(AuditLine::parse(&line), Some(AuditLine::Outcome(outcome)));
    }

    #[test]
    fn every_word_reads_back_as_itself_and_unknown_words_are_no_line() {
        for failure in UpstreamFailure::ALL {
            let word = serde_json::to_string(&failure).unwrap();
            assert_eq!(serde_json::from_str::<UpstreamFailure>(&word).unwrap(), failure);
        }
        let line = serde_json::to_string(&decision()).unwrap();
        for verdict in verdict_word::ALL {
            let line = line.replace(r#""allow""#, &format!("\"{}\"", verdict_word(verdict)));
            assert!(matches!(AuditLine::parse(&line), Some(AuditLine::Decision(d)) if d.decision == verdict));
        }
        for reason in Reason::ALL {
            let line = line.replace("provider-tools-stripped", reason.as_str());
            assert!(matches!(AuditLine::parse(&line), Some(AuditLine::Decision(d)) if d.reason == reason));
        }
        assert_eq!(AuditLine::parse(&line.replace(r#""allow""#, r#""maybe""#)), None);
        assert_eq!(AuditLine::parse(&line.replace("provider-tools-stripped", "later-reason")), None);
    }

    #[test]
    fn a_lines_method_names_its_kind() {
        let kinds = ["GET", "CONNECT", "DNS", "SERVICE", "-"].map(LineKind::of_method);
        assert_eq!(kinds, [LineKind::Http, LineKind::Tunnel, LineKind::Lookup, LineKind::Service, LineKind::Http]);
        let requests = kinds.map(LineKind::request_kind);
        assert_eq!(
            requests,
            [RequestKind::Http, RequestKind::Tunnel, RequestKind::Lookup, RequestKind::Http, RequestKind::Http]
        );
    }
}
