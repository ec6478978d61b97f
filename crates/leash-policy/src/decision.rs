//! The words the engine is spoken to and answers in, apart from the engine itself: a policy's settings ([`Mode`],
//! [`ProviderTools`]), the facts of one request ([`Request`], [`ClientHelloFacts`]) and the answer ([`Verdict`],
//! [`Decision`]). The loader, services, questions and hints use them without depending on how a policy decides.

use std::sync::Arc;

use crate::host::Host;
use crate::path::CanonicalPath;
use crate::reason::Reason;

/// Default deny (`allowlist`) or default allow (`blocklist`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Only what a rule allows passes.
    Allowlist,
    /// Everything passes but what a rule blocks.
    Blocklist,
}

/// How a refusal is answered (`network.refusals`). It is logged as a refusal either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Refusals {
    /// 403 with `X-Leash-Reason` and a body naming what was refused and why (the default).
    #[default]
    Announced,
    /// As an origin answers a page it does not have: a request gets 404 with a body that names no policy, a tunnel
    /// 502 as an unreachable host does; no `X-Leash-Reason`. For evaluations in which the agent must not learn that
    /// something was hidden.
    AsNotFound,
}

impl Refusals {
    /// The quieter of a run's setting and its boundary's: a boundary that hides its refusals hides the run's too.
    pub(crate) fn quieter(self, boundary: Refusals) -> Refusals {
        match boundary {
            Refusals::AsNotFound => Refusals::AsNotFound,
            Refusals::Announced => self,
        }
    }

    /// The setting as written in a policy file.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusals::Announced => "announced",
            Refusals::AsNotFound => "as-not-found",
        }
    }
}

/// What leash does with a model API's provider-side tools (`network.provider_tools`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProviderTools {
    /// Remove them from the request body and forward the rest (the default).
    #[default]
    Strip,
    /// Refuse a request that asks for one.
    Refuse,
    /// Forward model API requests untouched (model hosts are then inspected only for path rules).
    Allow,
}

impl ProviderTools {
    /// The stricter of two settings: `refuse` over `strip` over `allow`.
    pub(crate) fn stricter(self, other: ProviderTools) -> ProviderTools {
        let rank = |t| match t {
            ProviderTools::Allow => 0,
            ProviderTools::Strip => 1,
            ProviderTools::Refuse => 2,
        };
        if rank(other) > rank(self) {
            other
        } else {
            self
        }
    }

    /// The setting as written in a policy file.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderTools::Strip => "strip",
            ProviderTools::Refuse => "refuse",
            ProviderTools::Allow => "allow",
        }
    }
}

/// A request's scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// `http://`: forwarded by the plain proxy.
    Http,
    /// `https://`: a request inside an inspected tunnel; sent to the plain proxy, it is refused (`scheme`).
    Https,
    /// Any other scheme, which nothing forwards.
    Other,
}

/// How the request reached leash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// Absolute-form request to the forward proxy (ports checked against `ports`).
    ForwardProxy,
    /// An inner request of an inspected tunnel (the port was checked on the CONNECT).
    Tunnel,
}

/// The facts of one HTTP request.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// How the request reached leash, which says which port list was already checked.
    pub via: Via,
    /// The scheme of the request's target.
    pub scheme: Scheme,
    /// The host the request names (its target's, which must equal its `Host`).
    pub host: &'a Host,
    /// The port of the target, the scheme's default when none was written.
    pub port: u16,
    /// The path as the rules compare it: canonicalised, without the query.
    pub path: &'a CanonicalPath,
}

/// What the ClientHello reader found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientHelloFacts<'a> {
    /// Exactly one host_name entry, raw as sent.
    ServerName(&'a str),
    /// A ClientHello with no host_name entry at all.
    NoServerName,
    /// Several names, or a name that is not a valid host.
    BadServerName,
    /// The ClientHello carries the encrypted_client_hello extension.
    Ech,
    /// Not a TLS ClientHello at all.
    NotTls,
}

/// The verdict of a decision: what happens to the request or tunnel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Forward it (for a tunnel: splice it, unread).
    Allow,
    /// Refuse it: a 403 (inside TLS for a tunnel whose name was read), a closed tunnel, NXDOMAIN for a lookup.
    Block,
    /// Allowed at the tunnel level, but the host carries path rules (or `inspect: all`): every inner request is
    /// decided on its own.
    Inspect,
    /// Audit mode: the policy's rules would refuse this (the reason says why), and it is let through and logged so
    /// that a policy can be learned from what was used.
    WouldBlock,
}

/// A decision: the verdict, the reason word, and the policy entry that matched (as written in the file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// What happens to the request.
    pub verdict: Verdict,
    /// Why: the audit log's `reason` word.
    pub reason: Reason,
    /// The policy entry that matched, as written in the file; `None` when no rule did (a default, a port, ...).
    pub rule: Option<Arc<str>>,
}
