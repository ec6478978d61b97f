//! Counters for Prometheus, and the endpoint that serves them: what the gate decided (by kind, decision word and
//! reason), how allowed requests ended (bytes, duration, upstream failures), audit lines that could not be written,
//! client connections open now, the policy's generation and the build.
//!
//! Counting is lock-free and allocates nothing: every counter is an atomic in a fixed table, written by
//! [`crate::gate`] as it writes audit lines and by the accept loop (the connection gauge). Only a scrape allocates,
//! to render the text exposition format (version 0.0.4). Labels are fixed words (the audit log's), never a host, a
//! path or a client: a scrape says how much and why, never where to.
//!
//! The endpoint ([`serve_metrics`]) is the operator's: `leash proxy --metrics ADDR` binds it on an address of its
//! own, never on the proxy's, and `leash run` and `leash docker run` do not offer it, so it is never bound inside a
//! sandbox. It answers `GET /metrics`, 404 for any other path and 405 for any other method, one request per
//! connection.

use std::fmt::{Display, Write as _};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leash_policy::{Decision, Reason};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::audit::{verdict_word, LineKind, UpstreamFailure};
use crate::policy_handle::PolicyHandle;
use crate::wire::http_head::{parse_request_head, RequestHead};
use crate::wire::Parsed;

/// The `kind` label of a decision: an HTTP request (plain or inside an inspected tunnel), a tunnel, a DNS lookup.
const KINDS: [&str; 3] = ["http", "tunnel", "dns"];

/// The decision words counted apart: every word [`verdict_word`] says. A word missing here (one added later) is
/// counted as `other` rather than lost.
const DECISIONS: [&str; 5] = ["allow", "inspect", "block", "would-block", "other"];

const REASONS: usize = Reason::ALL.len();

/// One counter per kind, decision word and reason: a few hundred atomics, indexed without hashing or allocating.
const DECISION_SLOTS: usize = KINDS.len() * DECISIONS.len() * REASONS;

/// Every upstream failure, in the order the audit log's documentation lists their words.
const FAILURES: [UpstreamFailure; 9] = UpstreamFailure::ALL;

/// Upper bounds of the request-duration histogram's buckets, in microseconds and as the `le` label says them. An
/// answer from a nearby origin takes milliseconds, a model API's seconds to minutes, and a tunnel lasts as long as
/// its client keeps it: the buckets go from 5 ms to 10 minutes.
const DURATION_BUCKETS: [(u64, &str); 10] = [
    (5_000, "0.005"),
    (25_000, "0.025"),
    (100_000, "0.1"),
    (250_000, "0.25"),
    (1_000_000, "1"),
    (2_500_000, "2.5"),
    (10_000_000, "10"),
    (30_000_000, "30"),
    (120_000_000, "120"),
    (600_000_000, "600"),
];

/// The counters of one proxy. Shared through [`crate::ProxyConfig::metrics`]; cheap to update from any task.
pub struct Metrics {
    /// Indexed by [`decision_slot`].
    decisions: [AtomicU64; DECISION_SLOTS],
    /// Indexed as [`FAILURES`].
    upstream_failures: [AtomicU64; FAILURES.len()],
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
    /// Outcomes per bucket of [`DURATION_BUCKETS`], then one for longer ones; not cumulative (the renderer sums).
    durations: [AtomicU64; DURATION_BUCKETS.len() + 1],
    duration_sum_us: AtomicU64,
    audit_write_failures: AtomicU64,
    connections_open: AtomicU64,
    /// Connections refused because their client held its bound.
    connections_over_client_bound: AtomicU64,
    /// Idle keep-alive connections closed to make room near the global bound.
    idle_connections_reclaimed: AtomicU64,
    /// SIGHUP reloads that replaced the policy, and those refused (an invalid file; changed credentials).
    reloads_applied: AtomicU64,
    reloads_refused: AtomicU64,
    /// Ask mode: questions open now, answers by [`ASK_ANSWERS`], and the time questions stayed open.
    ask_open: AtomicU64,
    ask_answers: [AtomicU64; ASK_ANSWERS.len()],
    ask_wait_sum_us: AtomicU64,
}

/// Ask mode's answer words (`leash_ask_answers_total`'s `answer` label), `timeout` for a question nobody answered.
const ASK_ANSWERS: [&str; 5] = ["once", "run", "always", "deny", "timeout"];

impl Default for Metrics {
    fn default() -> Self {
        Self {
            decisions: std::array::from_fn(|_| AtomicU64::new(0)),
            upstream_failures: std::array::from_fn(|_| AtomicU64::new(0)),
            bytes_up: AtomicU64::new(0),
            bytes_down: AtomicU64::new(0),
            durations: std::array::from_fn(|_| AtomicU64::new(0)),
            duration_sum_us: AtomicU64::new(0),
            audit_write_failures: AtomicU64::new(0),
            connections_open: AtomicU64::new(0),
            connections_over_client_bound: AtomicU64::new(0),
            idle_connections_reclaimed: AtomicU64::new(0),
            reloads_applied: AtomicU64::new(0),
            reloads_refused: AtomicU64::new(0),
            ask_open: AtomicU64::new(0),
            ask_answers: std::array::from_fn(|_| AtomicU64::new(0)),
            ask_wait_sum_us: AtomicU64::new(0),
        }
    }
}

impl Metrics {
    /// Count a decision on a request whose audit line names `method` (`CONNECT` a tunnel, `DNS` a lookup).
    pub(crate) fn count_decision(&self, method: &str, decision: &Decision) {
        // Every reason is in `Reason::ALL` (leash-policy's tests hold it to that), so the slot is always found.
        if let Some(slot) = decision_slot(kind_index(method), verdict_word(decision.verdict), decision.reason) {
            add(&self.decisions[slot], 1);
        }
    }

    /// Count how an allowed request ended: bytes relayed each way, how long it took, and its upstream failure.
    pub(crate) fn count_outcome(&self, (up, down): (u64, u64), took: Duration, failure: Option<UpstreamFailure>) {
        add(&self.bytes_up, up);
        add(&self.bytes_down, down);
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let bucket = DURATION_BUCKETS.iter().position(|(bound, _)| micros <= *bound).unwrap_or(DURATION_BUCKETS.len());
        add(&self.durations[bucket], 1);
        add(&self.duration_sum_us, micros);
        if let Some(failure) = failure {
            add(&self.upstream_failures[failure_index(failure)], 1);
        }
    }

    /// Count an audit line (decision or outcome) that could not be written.
    pub(crate) fn count_audit_failure(&self) {
        add(&self.audit_write_failures, 1);
    }

    /// Count a policy reload: `applied` (the new policy is in force) or refused (the old one is kept).
    pub fn count_reload(&self, applied: bool) {
        add(if applied { &self.reloads_applied } else { &self.reloads_refused }, 1);
    }

    /// Ask mode: a question was opened.
    pub(crate) fn ask_opened(&self) {
        add(&self.ask_open, 1);
    }

    /// Ask mode: a question was closed with `answer` (an [`ASK_ANSWERS`] word) after being open for `open_for`.
    pub(crate) fn ask_settled(&self, answer: &str, open_for: Duration) {
        self.ask_open.fetch_sub(1, Ordering::Relaxed);
        if let Some(i) = ASK_ANSWERS.iter().position(|a| *a == answer) {
            add(&self.ask_answers[i], 1);
        }
        add(&self.ask_wait_sum_us, u64::try_from(open_for.as_micros()).unwrap_or(u64::MAX));
    }

    /// Count a client connection as open until the returned guard is dropped.
    /// A connection refused because its client held its bound (see `fair.rs`).
    pub(crate) fn count_over_client_bound(&self) {
        add(&self.connections_over_client_bound, 1);
    }

    /// An idle keep-alive connection closed to make room for new ones (see `fair.rs`).
    pub(crate) fn count_idle_reclaimed(&self) {
        add(&self.idle_connections_reclaimed, 1);
    }

    /// Count a client connection open until the guard is dropped. The guard owns its share of the metrics, so a
    /// tunnel's relay task can take it along (see [`crate::server::Held`]).
    pub(crate) fn connection_opened(self: &Arc<Self>) -> OpenConnection {
        add(&self.connections_open, 1);
        OpenConnection(self.clone())
    }

    /// Every metric in the Prometheus text exposition format, version 0.0.4; `policy_generation` is the generation
    /// of the policy in force (0 at start, one more per reload).
    pub fn render(&self, policy_generation: u64) -> String {
        let mut out = Exposition(String::with_capacity(4096));
        out.family("leash_build_info", "gauge", "The leash version serving these metrics; always 1.");
        out.sample("leash_build_info", &[("version", env!("CARGO_PKG_VERSION"))], 1);
        out.family("leash_policy_generation", "gauge", "Policy reloads since leash started.");
        out.sample("leash_policy_generation", &[], policy_generation);
        out.family("leash_policy_reloads_total", "counter", "Policy reloads (SIGHUP) by outcome.");
        out.sample("leash_policy_reloads_total", &[("outcome", "applied")], load(&self.reloads_applied));
        out.sample("leash_policy_reloads_total", &[("outcome", "refused")], load(&self.reloads_refused));
        out.family("leash_connections_open", "gauge", "Client connections open now.");
        out.sample("leash_connections_open", &[], load(&self.connections_open));
        let over = "leash_connections_over_client_limit_total";
        out.family(over, "counter", "Connections refused because their client held its share of the connections.");
        out.sample(over, &[], load(&self.connections_over_client_bound));
        let reclaimed = "leash_idle_connections_closed_total";
        out.family(reclaimed, "counter", "Idle keep-alive connections closed to make room near the connection limit.");
        out.sample(reclaimed, &[], load(&self.idle_connections_reclaimed));
        self.render_decisions(&mut out);
        self.render_outcomes(&mut out);
        out.family("leash_audit_write_failures_total", "counter", "Audit lines that could not be written.");
        out.sample("leash_audit_write_failures_total", &[], load(&self.audit_write_failures));
        self.render_ask(&mut out);
        out.0
    }

    /// `leash_decisions_total`, one sample per kind, decision and reason seen (a series appears with its first count).
    fn render_decisions(&self, out: &mut Exposition) {
        let name = "leash_decisions_total";
        out.family(name, "counter", "Decisions taken, by kind of request, decision word and reason word.");
        for (k, kind) in KINDS.iter().enumerate() {
            for (d, decision) in DECISIONS.iter().enumerate() {
                for (r, reason) in Reason::ALL.iter().enumerate() {
                    let count = load(&self.decisions[slot(k, d, r)]);
                    if count > 0 {
                        out.sample(name, &[("kind", kind), ("decision", decision), ("reason", reason.as_str())], count);
                    }
                }
            }
        }
    }

    /// Ask mode's questions: open now, answered by answer word, and how long they stayed open (a summary).
    fn render_ask(&self, out: &mut Exposition) {
        out.family("leash_ask_pending", "gauge", "Ask mode: questions waiting for a person's answer now.");
        out.sample("leash_ask_pending", &[], load(&self.ask_open));
        let name = "leash_ask_answers_total";
        out.family(name, "counter", "Ask mode: questions closed, by answer (timeout: nobody answered in time).");
        for (answer, count) in ASK_ANSWERS.iter().zip(&self.ask_answers) {
            out.sample(name, &[("answer", answer)], load(count));
        }
        let name = "leash_ask_answer_seconds";
        out.family(name, "summary", "Ask mode: how long questions stayed open before their answer or timeout.");
        let closed: u64 = self.ask_answers.iter().map(load).sum();
        out.sample(&format!("{name}_sum"), &[], load(&self.ask_wait_sum_us) as f64 / 1e6);
        out.sample(&format!("{name}_count"), &[], closed);
    }

    /// What the outcome lines say: upstream failures, bytes, durations.
    fn render_outcomes(&self, out: &mut Exposition) {
        let name = "leash_upstream_failures_total";
        out.family(name, "counter", "Allowed requests whose upstream failed, by the outcome's error word.");
        for (failure, count) in FAILURES.iter().zip(&self.upstream_failures) {
            out.sample(name, &[("error", failure.as_str())], load(count));
        }
        let name = "leash_bytes_total";
        out.family(name, "counter", "Bytes relayed for allowed requests: up to the upstream, down to the client.");
        out.sample(name, &[("direction", "up")], load(&self.bytes_up));
        out.sample(name, &[("direction", "down")], load(&self.bytes_down));
        let name = "leash_request_duration_seconds";
        out.family(name, "histogram", "From an allowed request's start to its outcome (a tunnel's: until it closed).");
        let mut cumulative = 0;
        for ((_, le), count) in DURATION_BUCKETS.iter().zip(&self.durations) {
            cumulative += load(count);
            out.sample("leash_request_duration_seconds_bucket", &[("le", le)], cumulative);
        }
        cumulative += self.durations.last().map_or(0, load);
        out.sample("leash_request_duration_seconds_bucket", &[("le", "+Inf")], cumulative);
        let sum = load(&self.duration_sum_us) as f64 / 1e6;
        out.sample("leash_request_duration_seconds_sum", &[], sum);
        out.sample("leash_request_duration_seconds_count", &[], cumulative);
    }
}

/// A client connection counted in `leash_connections_open`; dropping it counts the connection closed.
pub(crate) struct OpenConnection(Arc<Metrics>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.connections_open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Most scrapes served at once; a connection beyond them is closed at once. A scraper sends one at a time.
const MAX_SCRAPES: usize = 4;
/// Largest scrape request head. `GET /metrics` with a scraper's headers is a few hundred bytes.
const MAX_SCRAPE_HEAD: usize = 8 * 1024;
/// From a scrape's connection to its answer written: Prometheus's default scrape timeout is 10 s.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);
/// After a failed accept (out of file descriptors, say), wait this long before the next, instead of spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Answer scrapes on `listener` (the operator's address, never a sandbox-facing one) until `shutdown` completes,
/// with `metrics` and the generation of `policy` as they are at each scrape.
pub async fn serve_metrics(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    policy: PolicyHandle,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let permits = Arc::new(Semaphore::new(MAX_SCRAPES));
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => return,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!("metrics: accept failed: {e}");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else { continue };
        let (metrics, policy) = (metrics.clone(), policy.clone());
        tokio::spawn(async move {
            let _ = tokio::time::timeout(SCRAPE_TIMEOUT, scrape(stream, &metrics, &policy)).await;
            drop(permit);
        });
    }
}

/// One connection: read a request head, write the answer, close.
async fn scrape(mut stream: TcpStream, metrics: &Metrics, policy: &PolicyHandle) {
    let answer = match read_head(&mut stream).await {
        Some(Ok(head)) => answer(&head, metrics, policy),
        Some(Err(())) => response("400 Bad Request", &[], "bad request\n"),
        None => return,
    };
    if stream.write_all(&answer).await.is_ok() {
        let _ = stream.shutdown().await;
    }
}

/// The request head: `None` when the client left first, `Err` when it sent no valid head.
async fn read_head(stream: &mut TcpStream) -> Option<Result<RequestHead, ()>> {
    let mut buf = Vec::with_capacity(1024);
    loop {
        match parse_request_head(&buf, MAX_SCRAPE_HEAD) {
            Parsed::Done(head, _) => return Some(Ok(head)),
            Parsed::Refuse(_) => return Some(Err(())),
            Parsed::NeedMore => {}
        }
        match stream.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(_) => {}
        }
    }
}

/// The answer to `head`: the metrics for `GET /metrics` (a query is ignored), else 405 or 404.
fn answer(head: &RequestHead, metrics: &Metrics, policy: &PolicyHandle) -> Vec<u8> {
    let path = head.target.split('?').next().unwrap_or_default();
    if head.method != "GET" {
        return response("405 Method Not Allowed", &[("Allow", "GET")], "only GET\n");
    }
    if path != "/metrics" {
        return response("404 Not Found", &[], "metrics are at /metrics\n");
    }
    let body = metrics.render(policy.current().generation);
    response("200 OK", &[("Content-Type", "text/plain; version=0.0.4; charset=utf-8")], &body)
}

/// A whole HTTP/1.1 response that closes the connection.
fn response(status: &str, headers: &[(&str, &str)], body: &str) -> Vec<u8> {
    let mut head = format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n", body.len());
    for (name, value) in headers {
        let _ = write!(head, "{name}: {value}\r\n");
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body.as_bytes());
    bytes
}

/// The text exposition format being written. Writing to a `String` cannot fail, so `write!` results are ignored.
struct Exposition(String);

impl Exposition {
    /// A metric family's `# HELP` and `# TYPE` lines.
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = write!(self.0, "# HELP {name} ");
        push_escaped(&mut self.0, help, false);
        let _ = writeln!(self.0, "\n# TYPE {name} {kind}");
    }

    /// One sample line: `name{label="value",...} value`.
    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl Display) {
        self.0.push_str(name);
        for (i, (label, text)) in labels.iter().enumerate() {
            self.0.push_str(if i == 0 { "{" } else { "," });
            let _ = write!(self.0, "{label}=\"");
            push_escaped(&mut self.0, text, true);
            self.0.push('"');
        }
        if !labels.is_empty() {
            self.0.push('}');
        }
        let _ = writeln!(self.0, " {value}");
    }
}

/// `text` escaped as the format wants: a backslash and a line feed always (help text and label values), a double
/// quote in a label value.
fn push_escaped(out: &mut String, text: &str, label_value: bool) {
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if label_value => out.push_str("\\\""),
            c => out.push(c),
        }
    }
}

/// The [`KINDS`] index of a decision line's method (a `tcp` service's connection is counted with HTTP requests).
fn kind_index(method: &str) -> usize {
    match LineKind::of_method(method) {
        LineKind::Http | LineKind::Service => 0,
        LineKind::Tunnel => 1,
        LineKind::Lookup => 2,
    }
}

/// Where a decision is counted; `None` only for a reason missing from `Reason::ALL`.
fn decision_slot(kind: usize, word: &str, reason: Reason) -> Option<usize> {
    let other = DECISIONS.len() - 1;
    let decision = DECISIONS.iter().position(|w| *w == word).unwrap_or(other);
    let reason = Reason::ALL.iter().position(|r| *r == reason)?;
    Some(slot(kind, decision, reason))
}

/// The [`Metrics::decisions`] index of the [`KINDS`], [`DECISIONS`] and `Reason::ALL` indices given.
fn slot(kind: usize, decision: usize, reason: usize) -> usize {
    (kind * DECISIONS.len() + decision) * REASONS + reason
}

/// The [`FAILURES`] index of `failure`.
fn failure_index(failure: UpstreamFailure) -> usize {
    match failure {
        UpstreamFailure::CannotResolve => 0,
        UpstreamFailure::Refused => 1,
        UpstreamFailure::Reset => 2,
        UpstreamFailure::TimedOut => 3,
        UpstreamFailure::CannotConnect => 4,
        UpstreamFailure::BadResponse => 5,
        UpstreamFailure::Closed => 6,
        UpstreamFailure::UpstreamProxy => 7,
        UpstreamFailure::PolicySwitch => 8,
    }
}

// Relaxed: each counter is read on its own; a scrape needs no order between them.
fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

fn load(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use leash_policy::Verdict;

    use super::*;
    use crate::audit::refusal;

    fn decided(verdict: Verdict, reason: Reason) -> Decision {
        Decision { verdict, reason, rule: None }
    }

    #[test]
    fn every_family_has_help_and_type_before_its_samples() {
        let metrics = Metrics::default();
        metrics.count_decision("GET", &decided(Verdict::Allow, Reason::Rule));
        metrics.count_outcome((3, 5), Duration::from_millis(30), None);
        let text = metrics.render(2);
        let mut declared = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                declared.push(rest.split(' ').next().unwrap().to_owned());
            } else if !line.starts_with("# HELP ") {
                let name = line.split(['{', ' ']).next().unwrap();
                let family = declared.last().unwrap();
                assert!(name.starts_with(family.as_str()), "{name} outside its family {family}");
            }
        }
        assert_eq!(text.matches("# HELP ").count(), declared.len());
        assert!(text.ends_with('\n'));
        assert!(text.contains("\nleash_policy_generation 2\n"), "{text}");
        assert!(text.contains(&format!("leash_build_info{{version=\"{}\"}} 1\n", env!("CARGO_PKG_VERSION"))));
    }

    #[test]
    fn decisions_are_counted_by_kind_word_and_reason_and_only_seen_series_shown() {
        let metrics = Metrics::default();
        metrics.count_decision("GET", &decided(Verdict::Allow, Reason::Rule));
        metrics.count_decision("GET", &decided(Verdict::Allow, Reason::Rule));
        metrics.count_decision("CONNECT", &decided(Verdict::Inspect, Reason::Rule));
        metrics.count_decision("DNS", &refusal(Reason::NotAllowed));
        metrics.count_decision("-", &refusal(Reason::BadRequest));
        let text = metrics.render(0);
        let decisions: Vec<&str> = text.lines().filter(|l| l.starts_with("leash_decisions_total{")).collect();
        assert_eq!(
            decisions,
            [
                r#"leash_decisions_total{kind="http",decision="allow",reason="rule"} 2"#,
                r#"leash_decisions_total{kind="http",decision="block",reason="bad-request"} 1"#,
                r#"leash_decisions_total{kind="tunnel",decision="inspect",reason="rule"} 1"#,
                r#"leash_decisions_total{kind="dns",decision="block",reason="not-allowed"} 1"#,
            ]
        );
    }

    #[test]
    fn every_verdict_word_has_a_row_of_its_own() {
        for verdict in [Verdict::Allow, Verdict::Block, Verdict::Inspect] {
            let word = verdict_word(verdict);
            assert!(DECISIONS[..DECISIONS.len() - 1].contains(&word), "{word}");
        }
        assert_eq!(decision_slot(0, "a-word-from-later", Reason::Rule), decision_slot(0, "other", Reason::Rule));
    }

    #[test]
    fn outcomes_fill_bytes_failures_and_a_cumulative_histogram() {
        let metrics = Metrics::default();
        metrics.count_outcome((10, 200), Duration::from_millis(3), None);
        metrics.count_outcome((0, 0), Duration::from_millis(700), Some(UpstreamFailure::Refused));
        metrics.count_outcome((0, 0), Duration::from_secs(3600), Some(UpstreamFailure::TimedOut));
        let text = metrics.render(0);
        for line in [
            "leash_bytes_total{direction=\"up\"} 10",
            "leash_bytes_total{direction=\"down\"} 200",
            "leash_upstream_failures_total{error=\"refused\"} 1",
            "leash_upstream_failures_total{error=\"timed-out\"} 1",
            "leash_upstream_failures_total{error=\"reset\"} 0",
            "leash_request_duration_seconds_bucket{le=\"0.005\"} 1",
            "leash_request_duration_seconds_bucket{le=\"0.25\"} 1",
            "leash_request_duration_seconds_bucket{le=\"1\"} 2",
            "leash_request_duration_seconds_bucket{le=\"600\"} 2",
            "leash_request_duration_seconds_bucket{le=\"+Inf\"} 3",
            "leash_request_duration_seconds_sum 3600.703",
            "leash_request_duration_seconds_count 3",
        ] {
            assert!(text.lines().any(|l| l == line), "no `{line}` in\n{text}");
        }
    }

    #[test]
    fn the_connection_gauge_follows_its_guards() {
        let metrics = Arc::new(Metrics::default());
        let first = metrics.connection_opened();
        let second = metrics.connection_opened();
        assert!(metrics.render(0).contains("\nleash_connections_open 2\n"));
        drop((first, second));
        assert!(metrics.render(0).contains("\nleash_connections_open 0\n"));
    }

    #[test]
    fn label_values_and_help_text_are_escaped() {
        let mut out = Exposition(String::new());
        out.family("m", "gauge", "a \\ b\nc \"d\"");
        out.sample("m", &[("a", "x\\y"), ("b", "say \"hi\"\nbye")], 1.5);
        out.sample("m", &[], 0);
        assert_eq!(
            out.0,
            "# HELP m a \\\\ b\\nc \"d\"\n# TYPE m gauge\nm{a=\"x\\\\y\",b=\"say \\\"hi\\\"\\nbye\"} 1.5\nm 0\n"
        );
    }

    #[test]
    fn the_endpoint_answers_only_get_metrics() {
        let (metrics, policy) =
            (Metrics::default(), PolicyHandle::new(leash_policy::Policy::from_inline(&[], &[]).unwrap()));
        let head = |method: &str, target: &str| RequestHead {
            method: method.to_owned(),
            target: target.to_owned(),
            version: crate::wire::http_head::Version::Http11,
            headers: Vec::new(),
        };
        let status = |bytes: Vec<u8>| String::from_utf8(bytes).unwrap().lines().next().unwrap().to_owned();
        assert_eq!(status(answer(&head("GET", "/metrics"), &metrics, &policy)), "HTTP/1.1 200 OK");
        assert_eq!(status(answer(&head("GET", "/metrics?x=1"), &metrics, &policy)), "HTTP/1.1 200 OK");
        assert_eq!(status(answer(&head("GET", "/"), &metrics, &policy)), "HTTP/1.1 404 Not Found");
        assert_eq!(status(answer(&head("POST", "/metrics"), &metrics, &policy)), "HTTP/1.1 405 Method Not Allowed");
    }
}
