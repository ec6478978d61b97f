//! Exceptions: rules of the other kind in one policy (an allowlist's `blocked_urls`, a blocklist's `allowed_hosts`
//! and `allowed_urls`), decided with the mode's own rules by one order of specificity (`crate::matcher::Rank`): a
//! longer host suffix first, then a path rule over an exact host over a subtree, then a longer path. So "everything
//! but `corp.example`, except `jira.corp.example`" and "`pypi.org`, but not `pypi.org/project/evil`" mean what they
//! say, and a rule of either kind can be an exception to an exception. A tie (one entry both allowed and blocked) is
//! refused by the loader; were one to reach here, the block rule wins, failing closed.
//!
//! Only policies that hold exceptions come here (the engine checks `exceptions.is_empty()` first), so a policy of
//! one kind is decided exactly as before, at the same cost.
//!
//! What an exception cannot do: re-admit what a blocklist refuses on its own (an IP literal, a name that spells an
//! address), nor lift any check outside the rules (ports, internal destinations, model API bodies, credentials).

use std::sync::Arc;

use crate::decision::{Decision, Mode, Verdict};
use crate::host::{Host, Name};
use crate::matcher::{Kind, Matcher, Rank};
use crate::path::CanonicalPath;
use crate::reason::Reason;
use crate::spec::{HostPattern, Network};

use super::{block, decision, Policy};

/// An exception that decided, and the less specific entry of the other kind it is cut out of (for `explain`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overruled {
    /// The more specific entry, which decided, as written in the file.
    pub exception: Arc<str>,
    /// True if the exception allows (cut out of a blocked entry), false if it refuses (cut out of an allowed one).
    pub allows: bool,
    /// The less specific entry of the other kind it overrules, as written.
    pub inside: Arc<str>,
    /// True when the exception is a path rule asked about on a name alone (a tunnel, a lookup): it decides some
    /// paths of the name against `inside`, so the name's tunnels are inspected and each request decided on its path.
    pub on_some_paths: bool,
}

/// A matching rule, its kind and its rank.
#[derive(Debug, Clone, Copy)]
struct Found<'p> {
    kind: Kind,
    rank: Rank,
    rule: &'p Arc<str>,
}

/// What a name gets before its path is known: the verdict of its most specific host-level rule (or the mode's
/// default), and the first path rule that decides some of its paths the other way.
#[derive(Debug)]
pub(super) struct NameLevel<'p> {
    verdict: Verdict,
    reason: Reason,
    rule: Option<&'p Arc<str>>,
    other_way: Option<&'p Arc<str>>,
    /// Some path of the name is decided otherwise than the name as a whole: its tunnels need inspection.
    pub(super) path_matters: bool,
}

impl Policy {
    /// In a policy with exceptions, the exception that decides `host` (on `path` for a request; on the name alone
    /// for `None`: a tunnel or a lookup) and the entry of the other kind it overrules. `None` when no exception
    /// decides there, or the policy holds rules of one kind only.
    pub fn overruled(&self, host: &Host, path: Option<&CanonicalPath>) -> Option<Overruled> {
        let Host::Name(name) = host else { return None };
        if self.exceptions.is_empty() {
            return None;
        }
        let name = name.as_str();
        let (own, other) = match path {
            Some(path) => (ranked(&self.rules, name, path.as_str()), ranked(&self.exceptions, name, path.as_str())),
            None => (host_ranked(&self.rules, name), host_ranked(&self.exceptions, name)),
        };
        if let (Some(a), Some(b)) = (own, other) {
            let (winner, loser) = if outranks(a, b) { (a, b) } else { (b, a) };
            return Some(Overruled {
                exception: Arc::clone(winner.rule),
                allows: winner.kind == Kind::Allow,
                inside: Arc::clone(loser.rule),
                on_some_paths: false,
            });
        }
        let level = self.name_level(name);
        match (path, level.rule, level.other_way) {
            (None, Some(inside), Some(exception)) => Some(Overruled {
                exception: Arc::clone(exception),
                allows: level.verdict == Verdict::Block,
                inside: Arc::clone(inside),
                on_some_paths: true,
            }),
            _ => None,
        }
    }

    /// A request's decision when the policy holds exceptions: the most specific rule of either kind decides.
    pub(super) fn decide_name_with_exceptions(&self, name: &Name, path: &CanonicalPath) -> Decision {
        let d = match self.best_of_both(name.as_str(), path.as_str()) {
            Some(found) if found.kind == Kind::Block => decision(Verdict::Block, Reason::Rule, Some(found.rule)),
            // INVARIANT: an allow that rests on a path prefix admits a path only if every way a server may split it
            // is allowed too (as for an allowlist's `allowed_urls`, see `Policy::every_reading_admitted`).
            Some(found) if found.rank.is_path() && !self.every_reading_allowed(name, path) => {
                block(Reason::AmbiguousPath)
            }
            Some(found) => decision(Verdict::Allow, Reason::Rule, Some(found.rule)),
            None => self.by_default(),
        };
        self.no_address_by_exception(name, d)
    }

    /// A tunnel's (or a lookup's) decision on its name when the policy holds exceptions: the name's host-level
    /// verdict, inspected when a path rule decides some of its paths the other way.
    pub(super) fn decide_tunnel_with_exceptions(&self, name: &Name) -> Decision {
        let level = self.name_level(name.as_str());
        let d = match (level.verdict, level.other_way) {
            (Verdict::Allow, None) if !self.inspect_all => decision(Verdict::Allow, level.reason, level.rule),
            (Verdict::Allow, _) => decision(Verdict::Inspect, level.reason, level.rule),
            // Blocked as a whole, allowed on some paths: opened and inspected, on the exception that lets it open.
            (_, Some(exception)) => decision(Verdict::Inspect, Reason::Rule, Some(exception)),
            (_, None) => decision(Verdict::Block, level.reason, level.rule),
        };
        self.no_address_by_exception(name, d)
    }

    /// The decision on `name` before its path is known (see [`NameLevel`]).
    pub(super) fn name_level(&self, name: &str) -> NameLevel<'_> {
        let host_level = pick(host_ranked(&self.rules, name), host_ranked(&self.exceptions, name));
        let (verdict, reason, rule, min_suffix) = match host_level {
            Some(found) => (verdict_of(found.kind), Reason::Rule, Some(found.rule), found.rank.suffix),
            None => {
                let d = self.by_default();
                (d.verdict, d.reason, None, 0)
            }
        };
        // The path rules that beat the host-level rule on their paths are those naming a suffix at least as long
        // (a path rule beats a host rule on the same name); of the other kind, they decide those paths otherwise.
        let other_kind = if verdict == Verdict::Allow { Kind::Block } else { Kind::Allow };
        let other_way = self.matcher_of(other_kind).first_path_rule_within(name, min_suffix);
        NameLevel { verdict, reason, rule, other_way, path_matters: other_way.is_some() }
    }

    /// No rule names the request: the mode's default.
    fn by_default(&self) -> Decision {
        match self.mode {
            Mode::Allowlist => block(Reason::NotAllowed),
            Mode::Blocklist => decision(Verdict::Allow, Reason::Default, None),
        }
    }

    /// INVARIANT: a blocklist refuses a name that spells an address whatever its exceptions say, as it refuses the
    /// address itself (docs/policy.md): an allowed exception never re-admits one.
    fn no_address_by_exception(&self, name: &Name, d: Decision) -> Decision {
        match self.mode {
            Mode::Blocklist if d.verdict != Verdict::Block && crate::dest::embeds_an_address(name.as_str()) => {
                block(Reason::IpLiteral)
            }
            _ => d,
        }
    }

    /// For an allow that rests on a path prefix: the path is spelled as its canonical form, or the name is allowed
    /// on every path, or no dot segment was removed and the literal reading is allowed too.
    fn every_reading_allowed(&self, name: &Name, path: &CanonicalPath) -> bool {
        if path.literal_reading().is_none() && !path.had_dot_segments() {
            return true;
        }
        let level = self.name_level(name.as_str());
        if level.verdict == Verdict::Allow && !level.path_matters {
            return true;
        }
        !path.had_dot_segments()
            && path.literal_reading().is_none_or(|literal| match self.best_of_both(name.as_str(), literal) {
                Some(found) => found.kind == Kind::Allow,
                None => self.mode == Mode::Blocklist,
            })
    }

    /// The most specific rule of either kind matching `host` and `path`.
    fn best_of_both(&self, host: &str, path: &str) -> Option<Found<'_>> {
        pick(ranked(&self.rules, host, path), ranked(&self.exceptions, host, path))
    }

    fn matcher_of(&self, kind: Kind) -> &Matcher {
        match self.rules.kind() == kind {
            true => &self.rules,
            false => &self.exceptions,
        }
    }
}

/// The exceptions of a validated section, in a matcher of the kind opposite to its mode's (`kind`).
pub(super) fn compile_exceptions(network: &Network, kind: Kind) -> Matcher {
    let other = match kind {
        Kind::Allow => Kind::Block,
        Kind::Block => Kind::Allow,
    };
    let mut exceptions = Matcher::new(other);
    for rule in &network.exception_hosts {
        match &rule.pattern {
            HostPattern::Exact(name) => exceptions.add_exact(name.as_str(), &rule.text),
            HostPattern::Subtree(name) => exceptions.add_subtree(name.as_str(), &rule.text),
            // The loader refuses an address as a blocklist's exception: a blocklist refuses every IP literal.
            HostPattern::Ipv4(_) => {}
        }
    }
    for rule in &network.exception_urls {
        match (&rule.path, other) {
            (Some(path), _) => exceptions.add_path(rule.host.as_str(), path.as_str(), &rule.text),
            (None, Kind::Block) => exceptions.add_subtree(rule.host.as_str(), &rule.text),
            (None, Kind::Allow) => exceptions.add_exact(rule.host.as_str(), &rule.text),
        }
    }
    exceptions.finish();
    exceptions
}

fn ranked<'p>(matcher: &'p Matcher, host: &str, path: &str) -> Option<Found<'p>> {
    let (rank, rule) = matcher.best_ranked(host, path)?;
    Some(Found { kind: matcher.kind(), rank, rule })
}

fn host_ranked<'p>(matcher: &'p Matcher, host: &str) -> Option<Found<'p>> {
    let (rank, rule) = matcher.host_rule_ranked(host)?;
    Some(Found { kind: matcher.kind(), rank, rule })
}

/// The more specific of two matches; a tie goes to the block rule.
fn pick<'p>(a: Option<Found<'p>>, b: Option<Found<'p>>) -> Option<Found<'p>> {
    match (a, b) {
        (Some(a), Some(b)) if outranks(b, a) => Some(b),
        (Some(a), _) => Some(a),
        (None, b) => b,
    }
}

/// Whether `a` decides over `b`: more specific, or as specific and blocking.
fn outranks(a: Found<'_>, b: Found<'_>) -> bool {
    a.rank > b.rank || (a.rank == b.rank && a.kind == Kind::Block)
}

fn verdict_of(kind: Kind) -> Verdict {
    match kind {
        Kind::Allow => Verdict::Allow,
        Kind::Block => Verdict::Block,
    }
}
