//! Ask mode's holding: a request the policy refuses as `not-allowed` waits here while a person is asked, over
//! leash's terminal or its control socket (both in the binary; they read [`Asking::watch`] and call
//! [`Asking::answer`]).
//!
//! What this module owns:
//! - **One question per host.** Requests for a host already asked about wait on the same question; the answer
//!   releases them all (`once` lets exactly those through).
//! - **Answers for the run.** `run` and `always` allow the host (or a `.domain` over it) for the rest of the run,
//!   `deny` and a question nobody answered in time refuse it for the rest of the run, so an agent that retries is
//!   not asked about the same host a hundred times. `always` is `run` here; the binary writes the policy file and
//!   reloads it before it answers.
//! - **The clock.** A question open longer than the timeout is a refusal (`ask-timeout`).
//!
//! Nothing here resolves or dials: the caller does that once the answer is yes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, watch};

use crate::audit::now_rfc3339;
use crate::metrics::Metrics;

/// How long a question stays open when nobody configures it.
pub const DEFAULT_ASK_TIMEOUT: Duration = Duration::from_secs(30);

/// The events a watcher gets: at most this many wait unread before the slowest watcher misses some (it then lists
/// what is pending again).
const EVENTS_BUFFERED: usize = 256;

/// What a person can answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Answer {
    /// The requests waiting now go; the next request to the host is asked again.
    Once,
    /// The host (or the `.domain` given) is allowed for the rest of the run.
    Run,
    /// As `run`, and the policy file now lists it (written by the binary before it answers).
    Always,
    /// The host (or the `.domain` given) is refused for the rest of the run.
    Deny,
}

impl Answer {
    /// The word the control socket and the audit log use.
    pub fn as_str(self) -> &'static str {
        match self {
            Answer::Once => "once",
            Answer::Run => "run",
            Answer::Always => "always",
            Answer::Deny => "deny",
        }
    }

    /// The answer a word names, as the control socket and the terminal take them (`o`, `r`, `a`, `d` too).
    pub fn parse(word: &str) -> Option<Answer> {
        match word {
            "once" | "o" => Some(Answer::Once),
            "run" | "r" => Some(Answer::Run),
            "always" | "a" => Some(Answer::Always),
            "deny" | "d" => Some(Answer::Deny),
            _ => None,
        }
    }
}

/// Who answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AnsweredBy {
    /// The person at leash's terminal.
    Terminal,
    /// A client of the control socket.
    Socket,
}

impl AnsweredBy {
    /// The word the audit log's `decided_by` uses.
    pub fn as_str(self) -> &'static str {
        match self {
            AnsweredBy::Terminal => "terminal",
            AnsweredBy::Socket => "socket",
        }
    }
}

/// How a question ended, as the audit line of every request it held says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settlement {
    /// The answer; `None` when nobody answered in time.
    pub answer: Option<Answer>,
    /// Who answered; `None` when nobody did.
    pub by: Option<AnsweredBy>,
}

impl Settlement {
    pub(crate) const TIMED_OUT: Settlement = Settlement { answer: None, by: None };

    /// Whether the requests it settles go on.
    pub fn allows(self) -> bool {
        matches!(self.answer, Some(Answer::Once | Answer::Run | Answer::Always))
    }

    /// The audit log's `answer` word (`timeout` when nobody answered).
    pub fn answer_word(self) -> &'static str {
        self.answer.map_or("timeout", Answer::as_str)
    }

    /// The audit log's `decided_by` word (`timeout` when nobody answered).
    pub fn by_word(self) -> &'static str {
        self.by.map_or("timeout", AnsweredBy::as_str)
    }
}

/// What kind of request a question is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HeldKind {
    /// An HTTP request: plain, or inside an inspected tunnel (its path is shown).
    Request,
    /// A tunnel, on its target or its TLS server name.
    Tunnel,
}

/// One open question: what the person is shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Question {
    /// Its number in this run; answers name it.
    pub id: u64,
    /// Request or tunnel.
    pub kind: HeldKind,
    /// The HTTP method, or `CONNECT` for a tunnel.
    pub method: String,
    /// The host asked for (canonical: lowercase, no trailing dot).
    pub host: String,
    /// Its port.
    pub port: u16,
    /// The path with its query (a request's; a tunnel has none).
    pub path: Option<String>,
    /// When it was first asked (RFC 3339, UTC).
    pub asked_at: String,
    /// How many requests wait for it now.
    pub waiting: usize,
}

/// What a watcher of the questions is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A new question is open.
    Asked(Question),
    /// A question was answered (or timed out): it is closed.
    Settled {
        /// The question's id.
        id: u64,
        /// How it ended.
        settlement: Settlement,
    },
}

/// Why an answer was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    /// No open question has this id (answered already, timed out, or never asked).
    #[error("no open question {0}")]
    NoSuchQuestion(u64),
    /// The scope given does not cover the question's host.
    #[error("`{scope}` does not cover `{host}`: give the host itself or a `.domain` it is under")]
    ScopeDoesNotCover {
        /// The scope given.
        scope: String,
        /// The question's host.
        host: String,
    },
}

/// What a request to hold shows the person.
#[derive(Debug, Clone, Copy)]
pub struct Held<'a> {
    /// Request or tunnel.
    pub kind: HeldKind,
    /// The HTTP method, or `CONNECT`.
    pub method: &'a str,
    /// The host, canonical.
    pub host: &'a str,
    /// Its port.
    pub port: u16,
    /// The path with its query, for a request.
    pub path: Option<&'a str>,
}

/// A request's answer as its audit line says it: how it ended and how long it waited.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ruling {
    /// The answer that settled it.
    pub settlement: Settlement,
    /// How long the request was held (zero for a host answered for the run before it came).
    pub waited: Duration,
}

/// The questions of one proxy (see the module docs). Shared through [`crate::ProxyConfig::ask`].
pub struct Asking {
    timeout: Duration,
    state: Mutex<State>,
    events: broadcast::Sender<Event>,
    metrics: Arc<Metrics>,
    next_id: AtomicU64,
}

#[derive(Default)]
struct State {
    /// Open questions, by host.
    open: HashMap<String, Open>,
    /// Run-wide answers by scope (`host` or `.domain`), each with its place in the order answered: the newest whose
    /// scope covers a host decides it. Found by the host's own name and its parents' (a handful of lookups, however
    /// many hosts a sandbox made leash refuse).
    run_wide: HashMap<String, (u64, Settlement)>,
    /// Run-wide answers given so far (their order).
    answered: u64,
}

struct Open {
    question: Question,
    since: Instant,
    outcome: watch::Sender<Option<Settlement>>,
}

impl Asking {
    /// No question open; a question nobody answers within `timeout` is a refusal. `metrics` counts questions and
    /// answers.
    pub fn new(timeout: Duration, metrics: Arc<Metrics>) -> Self {
        let (events, _) = broadcast::channel(EVENTS_BUFFERED);
        let state = Mutex::new(State::default());
        Asking { timeout, state, events, metrics, next_id: AtomicU64::new(1) }
    }

    /// How long a question stays open.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Every open question, oldest first.
    pub fn pending(&self) -> Vec<Question> {
        let mut open: Vec<Question> = self.lock().open.values().map(|o| o.question.clone()).collect();
        open.sort_by_key(|q| q.id);
        open
    }

    /// Whether question `id` is still open.
    pub fn is_open(&self, id: u64) -> bool {
        self.lock().open.values().any(|o| o.question.id == id)
    }

    /// Events from now on: new questions and closed ones. Call [`Asking::pending`] after subscribing to know what
    /// was open before.
    pub fn watch(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }

    /// The hosts allowed for the run by a person (`run` or `always`), with the answer, in the order answered.
    pub fn approved(&self) -> Vec<(String, Answer)> {
        let state = self.lock();
        let mut approved: Vec<_> = state.run_wide.iter().filter(|(_, (_, s))| s.allows()).collect();
        approved.sort_by_key(|(_, (order, _))| *order);
        approved.into_iter().filter_map(|(scope, (_, s))| Some((scope.clone(), s.answer?))).collect()
    }

    /// Answer question `id`. `scope` (for `run`, `always` and `deny`) is the host itself (when `None`) or a
    /// `.domain` over it; every open question it covers is settled too.
    pub fn answer(&self, id: u64, answer: Answer, scope: Option<&str>, by: AnsweredBy) -> Result<(), AnswerError> {
        let settlement = Settlement { answer: Some(answer), by: Some(by) };
        let mut state = self.lock();
        let host = state.host_of(id).ok_or(AnswerError::NoSuchQuestion(id))?;
        let scope = match scope {
            None => host.clone(),
            Some(s) if covers(s, &host) => s.to_owned(),
            Some(s) => return Err(AnswerError::ScopeDoesNotCover { scope: s.to_owned(), host }),
        };
        let settled: Vec<String> = match answer {
            Answer::Once => vec![host],
            Answer::Run | Answer::Always | Answer::Deny => {
                state.remember(&scope, settlement);
                state.open.keys().filter(|h| covers(&scope, h)).cloned().collect()
            }
        };
        for host in settled {
            if let Some(open) = state.open.remove(&host) {
                self.close(open, settlement);
            }
        }
        Ok(())
    }

    /// The proxy is stopping (its sandbox has ended, or the operator stops it): every open question is closed as
    /// nobody answered it (`timeout`) at once, so that no held request keeps the drain, nor the terminal asking,
    /// until the timeout.
    pub fn time_out_all(&self) {
        let mut state = self.lock();
        let hosts: Vec<String> = state.open.keys().cloned().collect();
        for host in hosts {
            if let Some(open) = state.open.remove(&host) {
                state.remember(&host, Settlement::TIMED_OUT);
                self.close(open, Settlement::TIMED_OUT);
            }
        }
    }

    /// How a request to `host` is settled without asking: by a run-wide answer, if one covers it.
    pub(crate) fn settled(&self, host: &str) -> Option<Settlement> {
        self.lock().run_wide_for(host)
    }

    /// The open question about `host`, to wait on its answer without asking again (a DNS lookup of the name).
    pub(crate) fn waiting_on(&self, host: &str) -> Option<watch::Receiver<Option<Settlement>>> {
        self.lock().open.get(host).map(|o| o.outcome.subscribe())
    }

    /// Hold a request until its host is answered: at once when a run-wide answer covers it, else on the open
    /// question about the host (asking one when there is none), until the answer or the timeout.
    pub(crate) async fn hold(&self, held: Held<'_>) -> Ruling {
        let started = Instant::now();
        let mut outcome = {
            let mut state = self.lock();
            if let Some(settlement) = state.run_wide_for(held.host) {
                return Ruling { settlement, waited: Duration::ZERO };
            }
            match state.open.get_mut(held.host) {
                Some(open) => {
                    open.question.waiting += 1;
                    open.outcome.subscribe()
                }
                None => self.ask(&mut state, held),
            }
        };
        let answered = tokio::time::timeout_at(self.deadline(held.host).into(), outcome.wait_for(Option::is_some));
        // The watch's guard is let go at once. Timed out, or the question dropped (it is not while `self` lives):
        // nobody answered.
        let answered = answered.await.ok().and_then(|r| r.ok().and_then(|s| *s));
        let settlement = answered.unwrap_or_else(|| self.time_out(held.host));
        Ruling { settlement, waited: started.elapsed() }
    }

    /// Open a question about `held`'s host; its outcome's receiver.
    fn ask(&self, state: &mut State, held: Held<'_>) -> watch::Receiver<Option<Settlement>> {
        let question = Question {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            kind: held.kind,
            method: held.method.to_owned(),
            host: held.host.to_owned(),
            port: held.port,
            path: held.path.map(str::to_owned),
            asked_at: now_rfc3339(),
            waiting: 1,
        };
        let (outcome, receiver) = watch::channel(None);
        self.metrics.ask_opened();
        // Nobody watching is no error: the question still times out.
        let _ = self.events.send(Event::Asked(question.clone()));
        state.open.insert(held.host.to_owned(), Open { question, since: Instant::now(), outcome });
        receiver
    }

    /// When the open question about `host` times out (now, if none is open).
    fn deadline(&self, host: &str) -> Instant {
        let state = self.lock();
        state.open.get(host).map_or_else(Instant::now, |o| o.since + self.timeout)
    }

    /// The question about `host` timed out: refused for the run, unless it was answered meanwhile.
    fn time_out(&self, host: &str) -> Settlement {
        let mut state = self.lock();
        if let Some(settlement) = state.run_wide_for(host) {
            return settlement;
        }
        let Some(open) = state.open.remove(host) else {
            // Answered `once` just now: the answer is in the channel, which a waiter past the deadline no longer
            // reads. Nobody answered in time.
            return Settlement::TIMED_OUT;
        };
        state.remember(host, Settlement::TIMED_OUT);
        self.close(open, Settlement::TIMED_OUT);
        Settlement::TIMED_OUT
    }

    /// Close `open` with `settlement`: its waiters go on, watchers and the counters are told.
    fn close(&self, open: Open, settlement: Settlement) {
        self.metrics.ask_settled(settlement.answer_word(), open.since.elapsed());
        let _ = open.outcome.send(Some(settlement));
        let _ = self.events.send(Event::Settled { id: open.question.id, settlement });
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves the state consistent (every change is one insert or remove).
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl State {
    fn host_of(&self, id: u64) -> Option<String> {
        self.open.values().find(|o| o.question.id == id).map(|o| o.question.host.clone())
    }

    fn run_wide_for(&self, host: &str) -> Option<Settlement> {
        let exact = self.run_wide.get(host);
        let domains = parents(host).filter_map(|domain| self.run_wide.get(&format!(".{domain}")));
        exact.into_iter().chain(domains).max_by_key(|(order, _)| *order).map(|(_, s)| *s)
    }

    fn remember(&mut self, scope: &str, settlement: Settlement) {
        let order = self.answered;
        self.answered += 1;
        self.run_wide.insert(scope.to_owned(), (order, settlement));
    }
}

/// `host` and every name it is under: `a.b.example`, `b.example`, `example`.
fn parents(host: &str) -> impl Iterator<Item = &str> {
    std::iter::successors(Some(host), |name| name.split_once('.').map(|(_, rest)| rest))
}

/// Whether answer scope `scope` covers `host`: the host itself, or a `.domain` it is the domain of or under (as an
/// `allowed_hosts` entry `.domain` does).
pub fn covers(scope: &str, host: &str) -> bool {
    match scope.strip_prefix('.') {
        Some(domain) => host == domain || host.strip_suffix(domain).is_some_and(|rest| rest.ends_with('.')),
        None => scope == host,
    }
}

#[cfg(test)]
mod tests;
