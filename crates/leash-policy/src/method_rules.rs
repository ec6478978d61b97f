//! Rules by method: entries that list methods (`read-only api.example.com`, `POST github.com/*/*/git-upload-pack`)
//! and `network.methods`, applied on top of the decision the method-less rules take.
//!
//! Entries that list no methods are compiled into the policy's one matcher as before; each entry that lists methods
//! goes into one matcher per method it lists, so a request is looked up in its own method's matcher only, and a
//! policy without methods pays one branch per decision. What the two layers mean together:
//!
//! - allowlist: a request is allowed when some entry covering it admits its method (an entry that lists none admits
//!   `network.methods`, or every method when that is not set). A refusal by method (`method-not-allowed`) names the
//!   entry that covers the path; it is a refusal by the rules (audit mode lets it through as `would-block`).
//! - blocklist: an entry that lists methods refuses those methods on what it covers, besides every other entry; what
//!   no entry refuses is allowed if `network.methods` admits its method.
//!
//! A tunnel to a host whose requests may be decided by method is inspected: its name alone cannot say.

use std::sync::Arc;

use crate::decision::{Decision, Mode, Verdict};
use crate::host::Name;
use crate::matcher::{Kind, Matcher};
use crate::method::{Methods, KNOWN_METHODS};
use crate::path::CanonicalPath;
use crate::reason::Reason;
use crate::spec::{HostPattern, Network};

/// The method layer of a compiled policy.
#[derive(Debug)]
pub(crate) struct MethodRules {
    mode: Mode,
    /// `network.methods`, with the setting's text that decisions name.
    default: Option<(Methods, Arc<str>)>,
    /// The entries that list methods: one matcher per [`KNOWN_METHODS`] name, in that order; empty when none does.
    by_method: Vec<Matcher>,
    /// Every entry, methods or not, when some entry lists methods: the most specific entry covering a request,
    /// which a refusal by method names.
    all: Option<Matcher>,
}

impl MethodRules {
    /// The entries of `network` that list methods, and its `methods` setting.
    pub(crate) fn compile(network: &Network) -> MethodRules {
        let kind = match network.mode {
            Mode::Allowlist => Kind::Allow,
            Mode::Blocklist => Kind::Block,
        };
        let listed =
            network.hosts.iter().any(|r| r.methods.is_some()) || network.urls.iter().any(|r| r.methods.is_some());
        let default = network.methods.clone();
        if !listed {
            return MethodRules { mode: network.mode, default, by_method: Vec::new(), all: None };
        }
        let by_method = KNOWN_METHODS
            .iter()
            .map(|method| matcher_of(network, kind, |methods| methods.is_some_and(|m| m.admits(method))))
            .collect();
        let all = Some(matcher_of(network, kind, |_| true));
        MethodRules { mode: network.mode, default, by_method, all }
    }

    /// True when no entry lists methods and `network.methods` is not set: every decision is the method-less one.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.default.is_none() && self.by_method.is_empty()
    }

    /// `network.methods`, if set.
    pub(crate) fn default_methods(&self) -> Option<Methods> {
        self.default.as_ref().map(|(m, _)| *m)
    }

    /// The decision on a request with `method` to `name` at `path`, given `d`, the one the method-less rules took.
    #[inline]
    pub(crate) fn request(&self, d: Decision, name: &Name, path: &CanonicalPath, method: &str) -> Decision {
        if self.is_empty() {
            return d;
        }
        self.listed_request(d, name, path, method)
    }

    fn listed_request(&self, d: Decision, name: &Name, path: &CanonicalPath, method: &str) -> Decision {
        match self.mode {
            Mode::Allowlist => self.allowlist_request(d, name.as_str(), path, method),
            Mode::Blocklist => self.blocklist_request(d, name.as_str(), path.as_str(), method),
        }
    }

    /// A request to a listed dotted quad (allowed by `d`), which `network.methods` may still refuse.
    pub(crate) fn ipv4(&self, d: Decision, method: &str) -> Decision {
        match d.verdict {
            Verdict::Allow if !self.default_admits(method) => method_refused(d.rule),
            _ => d,
        }
    }

    /// The decision on a tunnel to `name`, given `d`, the one the method-less rules took: inspected where some
    /// request in it may be decided by its method.
    pub(crate) fn tunnel(&self, d: Decision, name: &Name) -> Decision {
        if self.is_empty() {
            return d;
        }
        let inspect = |d: Decision| Decision { verdict: Verdict::Inspect, ..d };
        match (self.mode, d.verdict) {
            (_, Verdict::Allow) if self.default.is_some() => inspect(d),
            (Mode::Blocklist, Verdict::Allow) if self.covering_host(name.as_str()).is_some() => inspect(d),
            (Mode::Allowlist, Verdict::Block) if d.reason == Reason::NotAllowed => {
                match self.covering_host(name.as_str()) {
                    Some(rule) => {
                        Decision { verdict: Verdict::Inspect, reason: Reason::Rule, rule: Some(rule.clone()) }
                    }
                    None => d,
                }
            }
            _ => d,
        }
    }

    fn allowlist_request(&self, d: Decision, name: &str, path: &CanonicalPath, method: &str) -> Decision {
        if d.verdict == Verdict::Allow && self.default_admits(method) {
            return d;
        }
        // INVARIANT: an entry by method admits only where the method-less rules did not refuse by a rule: a
        // `blocked_urls` exception (reason `rule`) refuses whatever the methods an allow entry lists.
        if d.verdict == Verdict::Block && d.reason == Reason::Rule {
            return d;
        }
        if let Some(matcher) = self.matcher_for(method) {
            if let Some(rule) = matcher.best(name, path.as_str()) {
                return match every_reading_admitted(matcher, name, path) {
                    true => Decision { verdict: Verdict::Allow, reason: Reason::Rule, rule: Some(rule.clone()) },
                    false => Decision { verdict: Verdict::Block, reason: Reason::AmbiguousPath, rule: None },
                };
            }
        }
        match d.verdict {
            // A method-less entry admits the path, and `network.methods` not the method.
            Verdict::Allow => method_refused(self.covering(name, path.as_str()).cloned().or(d.rule)),
            _ if d.reason == Reason::NotAllowed => match self.covering(name, path.as_str()) {
                Some(rule) => method_refused(Some(rule.clone())),
                None => d,
            },
            _ => d,
        }
    }

    fn blocklist_request(&self, d: Decision, name: &str, path: &str, method: &str) -> Decision {
        if d.verdict != Verdict::Allow {
            return d;
        }
        if let Some(rule) = self.matcher_for(method).and_then(|m| m.best(name, path)) {
            return Decision { verdict: Verdict::Block, reason: Reason::Rule, rule: Some(rule.clone()) };
        }
        match &self.default {
            Some((methods, text)) if !methods.admits(method) => method_refused(Some(text.clone())),
            _ => d,
        }
    }

    fn default_admits(&self, method: &str) -> bool {
        self.default.as_ref().is_none_or(|(m, _)| m.admits(method))
    }

    /// The matcher of the entries listing `method`; none for a method no entry can list.
    fn matcher_for(&self, method: &str) -> Option<&Matcher> {
        let index = KNOWN_METHODS.iter().position(|m| *m == method)?;
        self.by_method.get(index)
    }

    /// The most specific entry that covers `path` on `name`, whatever its methods.
    fn covering(&self, name: &str, path: &str) -> Option<&Arc<str>> {
        self.all.as_ref()?.best(name, path)
    }

    /// An entry that covers some path on `name`: the host rule, else the first path rule.
    fn covering_host(&self, name: &str) -> Option<&Arc<str>> {
        let all = self.all.as_ref()?;
        all.host_rule(name).or_else(|| all.first_path_rule(name))
    }
}

/// A matcher of the entries of `network` whose methods `wanted` takes.
fn matcher_of(network: &Network, kind: Kind, wanted: impl Fn(Option<Methods>) -> bool) -> Matcher {
    let mut matcher = Matcher::new(kind);
    for rule in network.hosts.iter().filter(|r| wanted(r.methods)) {
        match &rule.pattern {
            HostPattern::Exact(name) => matcher.add_exact(name.as_str(), &rule.text),
            HostPattern::Subtree(name) => matcher.add_subtree(name.as_str(), &rule.text),
            // Decided by `allowed_ipv4`; the loader refuses methods on an address entry.
            HostPattern::Ipv4(_) => {}
        }
    }
    for rule in network.urls.iter().filter(|r| wanted(r.methods)) {
        match (&rule.path, kind) {
            (Some(path), _) => matcher.add_path(rule.host.as_str(), path.as_str(), &rule.text),
            (None, Kind::Block) => matcher.add_subtree(rule.host.as_str(), &rule.text),
            (None, Kind::Allow) => matcher.add_exact(rule.host.as_str(), &rule.text),
        }
    }
    matcher.finish();
    matcher
}

/// A refusal by method, naming the entry (or the `network.methods` setting) that did not admit it.
fn method_refused(rule: Option<Arc<str>>) -> Decision {
    Decision { verdict: Verdict::Block, reason: Reason::MethodNotAllowed, rule }
}

/// As the engine's check for the method-less rules: an allow resting on a path entry of `matcher` holds only when
/// every way a server may split the path is admitted by `matcher` too.
fn every_reading_admitted(matcher: &Matcher, name: &str, path: &CanonicalPath) -> bool {
    let spelled_canonically = path.literal_reading().is_none() && !path.had_dot_segments();
    if spelled_canonically || matcher.host_rule(name).is_some() {
        return true;
    }
    !path.had_dot_segments() && path.literal_reading().is_none_or(|literal| matcher.best(name, literal).is_some())
}
