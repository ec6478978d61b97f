//! The validated form of one `network` section: what the loader produces and [`crate::Policy::compile`] consumes.
//! Every field is already checked; nothing here is a raw string where a host or path is meant.

use std::net::Ipv4Addr;
use std::sync::Arc;

use crate::credentials::{Credential, CredentialHost};
use crate::decision::{Mode, ProviderTools, Refusals};
use crate::dest::Cidr;
use crate::host::Name;
use crate::method::Methods;
use crate::path::CanonicalPath;
use crate::services::Service;
use crate::upstream::UpstreamProxy;

/// Plain-HTTP ports when `ports` is not given.
pub(crate) const DEFAULT_PORTS: [u16; 2] = [80, 443];
/// CONNECT ports when `tunnel_ports` is not given.
pub(crate) const DEFAULT_TUNNEL_PORTS: [u16; 1] = [443];

/// Hosts that carry model traffic in every policy: the Anthropic, OpenAI and Gemini public endpoints. A policy's
/// `model_apis` adds to these (an operator's gateway); it cannot remove them, so leaving a default out of a file
/// never turns the filter off (`provider_tools: allow` does, visibly).
pub const DEFAULT_MODEL_APIS: [&str; 3] = ["api.anthropic.com", "api.openai.com", "generativelanguage.googleapis.com"];

/// What an allowlist does with a request its rules refuse: refuse it, let it through on record (`audit`), or hold it
/// while a person is asked (`ask`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Oversight {
    Enforce,
    Audit,
    Ask,
}

/// One validated `network` section.
#[derive(Debug, Clone)]
pub(crate) struct Network {
    pub(crate) mode: Mode,
    /// `mode: audit`: an allowlist whose refusals by its rules are logged as `would-block` and let through.
    pub(crate) audit: bool,
    /// `mode: ask`: an allowlist whose `not-allowed` refusals are held while a person is asked.
    pub(crate) ask: bool,
    /// An allowlist's `allowed_hosts` (a blocklist's are in `exception_hosts`).
    pub(crate) hosts: Vec<HostRule>,
    /// `allowed_urls` in an allowlist, `blocked_urls` in a blocklist.
    pub(crate) urls: Vec<UrlRule>,
    /// A blocklist's `allowed_hosts`: exceptions allowed inside what it blocks (empty in an allowlist, whose
    /// `allowed_hosts` are `hosts`).
    pub(crate) exception_hosts: Vec<HostRule>,
    /// The other mode's URL list, exceptions decided against the mode's own rules by specificity: `blocked_urls`
    /// in an allowlist, `allowed_urls` in a blocklist.
    pub(crate) exception_urls: Vec<UrlRule>,
    pub(crate) ports: Vec<u16>,
    pub(crate) tunnel_ports: Vec<u16>,
    pub(crate) allow_destinations: Vec<Cidr>,
    pub(crate) inspect_all: bool,
    /// `model_apis`: names only (`Exact` or `Subtree`), added to [`DEFAULT_MODEL_APIS`].
    pub(crate) model_apis: Vec<HostPattern>,
    pub(crate) provider_tools: ProviderTools,
    /// `refusals`: how a refusal is answered.
    pub(crate) refusals: Refusals,
    /// `credentials`: secrets leash puts on requests to their hosts.
    pub(crate) credentials: Vec<Credential>,
    /// `upstream_proxy` (with its auth variable and bypass list).
    pub(crate) upstream: Option<UpstreamProxy>,
    /// `services`: the operator's own services, each reached through a listener of its own.
    pub(crate) services: Vec<Service>,
    /// `methods`: what an allow that names no methods of its own admits (an entry, or a blocklist's default), with
    /// the setting as the decisions name it (`methods: read-only`).
    pub(crate) methods: Option<(Methods, Arc<str>)>,
}

impl Network {
    /// An allowlist that allows nothing, with the default ports.
    pub(crate) fn empty(mode: Mode) -> Network {
        Network {
            mode,
            audit: false,
            ask: false,
            hosts: Vec::new(),
            urls: Vec::new(),
            exception_hosts: Vec::new(),
            exception_urls: Vec::new(),
            ports: DEFAULT_PORTS.to_vec(),
            tunnel_ports: DEFAULT_TUNNEL_PORTS.to_vec(),
            allow_destinations: Vec::new(),
            inspect_all: false,
            model_apis: Vec::new(),
            provider_tools: ProviderTools::default(),
            refusals: Refusals::default(),
            credentials: Vec::new(),
            upstream: None,
            services: Vec::new(),
            methods: None,
        }
    }
}

/// What an `allowed_hosts` entry admits.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum HostPattern {
    /// `example.com`: that host only.
    Exact(Name),
    /// `.example.com`: it and every subdomain.
    Subtree(Name),
    /// `192.0.2.7`: that address, in exactly that spelling.
    Ipv4(Ipv4Addr),
}

impl HostPattern {
    /// The hosts a credential is bound to by this entry: a name, or a name and its subdomains; never an address.
    pub(crate) fn credential_host(self) -> Option<CredentialHost> {
        match self {
            HostPattern::Exact(n) => Some(CredentialHost::Exact(n)),
            HostPattern::Subtree(n) => Some(CredentialHost::Subtree(n)),
            HostPattern::Ipv4(_) => None,
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct HostRule {
    pub(crate) pattern: HostPattern,
    /// The entry as written, which decisions name.
    pub(crate) text: Arc<str>,
    /// Its place in its list, for warnings that name it.
    pub(crate) index: usize,
    /// The methods its leading words list (`GET HEAD example.com`); `None` admits what `network.methods` does.
    pub(crate) methods: Option<Methods>,
}

/// A `blocked_urls` or `allowed_urls` entry: `host` or `host/path-prefix`, or `host/pattern` whose `*` segments
/// stand for one segment each (see [`crate::pattern`]).
#[derive(Debug, Clone)]
pub(crate) struct UrlRule {
    pub(crate) host: Name,
    /// The canonical path prefix (case kept; block matching lowercases both sides).
    pub(crate) path: Option<CanonicalPath>,
    pub(crate) text: Arc<str>,
    pub(crate) index: usize,
    /// The methods its leading words list: the only ones it admits (allowed_urls) or refuses (blocked_urls).
    pub(crate) methods: Option<Methods>,
}
