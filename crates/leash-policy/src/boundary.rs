//! A boundary: the operator's policy that every run policy is held inside (`--boundary FILE`). Its refusals always
//! apply — before the run's own rules, so no audit mode or ask-mode answer can lift them — and what it allows caps
//! what any run may allow. A run policy can only narrow it.
//!
//! A boundary is an ordinary policy file holding rules only: a mode, host and URL rules, ports, the internal
//! destinations it exempts, `inspect`, `provider_tools` and `refusals`. What a run policy *adds* to a sandbox rather
//! than decides (credentials, an upstream proxy, services, model API gateways) is the run's; a boundary holding one
//! is refused, and so is an `audit` or `ask` boundary (a boundary is always enforced). A run policy's `services`
//! relay around the proxy's rules, so under a boundary each must be one the boundary declares (same target).
//!
//! How a decision is combined (see [`Policy::decide`](crate::Policy::decide)): the boundary decides first, as an
//! enforcing policy; a refusal there is the answer, with the reason `boundary` and the boundary's entry. Otherwise
//! the run's policy decides, and a tunnel the boundary wants inspected (its path rules) is inspected whatever the run
//! would have done with it.

use std::sync::Arc;

use crate::decision::{Decision, Mode, Verdict};
use crate::engine::{Boundary, Policy};
use crate::host::{parse_host, Host};
use crate::path::CanonicalPath;
use crate::question::{Question, TlsInspection};

impl Boundary {
    /// `policy` as a boundary named `label` (its file's path), or every reason it cannot be one.
    pub fn new(policy: Policy, label: &str) -> Result<Boundary, Vec<String>> {
        let mut problems = Vec::new();
        if policy.audits() || policy.asks() {
            problems.push("a boundary is always enforced: its mode cannot be `audit` or `ask`".to_owned());
        }
        if !policy.credentials().is_empty() {
            problems.push("`credentials` belong to a run's policy, not to a boundary".to_owned());
        }
        if policy.upstream_proxy().is_some() {
            problems.push("`upstream_proxy` belongs to a run's policy, not to a boundary".to_owned());
        }
        if policy.declares_model_apis() {
            problems.push("`model_apis` belongs to a run's policy, not to a boundary".to_owned());
        }
        match problems.is_empty() {
            true => Ok(Boundary { policy, label: Arc::from(label) }),
            false => Err(problems),
        }
    }

    /// The name the boundary was given (its file).
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The boundary's own policy, as it decides alone (what `explain` shows beside a `boundary` refusal).
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Whether a run's `service` is one the boundary declares (the same target): a service relays around the
    /// proxy's rules, so only the boundary may admit one.
    fn admits_service(&self, service: &crate::services::Service) -> bool {
        self.policy.services().iter().any(|s| s.target == service.target)
    }
}

/// An entry of a run's policy that allows what its boundary refuses: a run under that boundary would refuse it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outside {
    /// The run policy's entry, as written.
    pub entry: Arc<str>,
    /// Whether the boundary refuses all of it, or only some of what it covers (a `.x` entry's subdomains).
    pub whole: bool,
    /// The boundary's own decision on it (its reason and entry).
    pub refused_by: Decision,
}

impl Boundary {
    /// What of `policy` lies outside this boundary (`leash check --within`): each allowing entry the boundary
    /// refuses, asked as an `https://` request to its host and path (for a `.x` entry: to `x`, then to a name under
    /// it). A blocklist run policy is not listed entry by entry; see [`Boundary::caps_a_blocklist`].
    pub fn outside(&self, policy: &Policy) -> Vec<Outside> {
        let mut found = Vec::new();
        for entry in policy.allowed_entries() {
            let path = entry.path.clone().unwrap_or_else(CanonicalPath::root);
            let host = Host::Name(entry.host.clone());
            let d =
                self.policy.decide(&Question::Https { host: &host, port: 443, path: &path }, TlsInspection::Available);
            if d.verdict == Verdict::Block {
                found.push(Outside { entry: entry.text.clone(), whole: true, refused_by: d });
                continue;
            }
            // A made-up child stands for every subdomain: refused there, the entry is wider than the boundary.
            let child = entry.subtree.then(|| parse_host(&format!("any-name.{}", entry.host.as_str())).ok()).flatten();
            if let Some(child) = child {
                let d = self
                    .policy
                    .decide(&Question::Https { host: &child, port: 443, path: &path }, TlsInspection::Available);
                if d.verdict == Verdict::Block {
                    found.push(Outside { entry: entry.text.clone(), whole: false, refused_by: d });
                }
            }
        }
        found
    }

    /// Every service of `policy` this boundary does not declare (same target), said as an error.
    pub fn services_outside(&self, policy: &Policy) -> Vec<String> {
        let outside = policy.services().iter().filter(|s| !self.admits_service(s));
        outside
            .map(|s| {
                format!(
                    "service `{}` relays to {} around the proxy's rules, and the boundary {} declares no service with \
                     that target",
                    s.name,
                    s.target.shown(),
                    self.label()
                )
            })
            .collect()
    }

    /// True when a blocklist run policy is capped by this boundary's allowlist: the run allows every host it does
    /// not block, and only the boundary's hosts will pass.
    pub fn caps_a_blocklist(&self, policy: &Policy) -> bool {
        policy.mode() == Mode::Blocklist && self.policy.mode() == Mode::Allowlist
    }
}

impl Policy {
    /// This policy held inside `boundary`: every decision from now on is the boundary's refusal or, where the
    /// boundary lets a request on, this policy's own. Errors name every service this policy declares that the
    /// boundary does not.
    pub fn within(self, boundary: Arc<Boundary>) -> Result<Policy, Vec<String>> {
        let outside = boundary.services_outside(&self);
        if !outside.is_empty() {
            return Err(outside);
        }
        Ok(self.bounded_by(boundary))
    }
}
