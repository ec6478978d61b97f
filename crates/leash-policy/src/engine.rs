//! The decision function: a validated [`Policy`] and the facts of one request in, a [`Decision`] out.
//!
//! Checks run cheapest and broadest first — scheme, port, IP literal, then the rules — so a refusal names the first
//! thing wrong with a request. Names are matched by `crate::matcher`, which picks the most specific rule.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use crate::credentials::Credential;
use crate::decision::{ClientHelloFacts, Decision, Mode, ProviderTools, Refusals, Request, Scheme, Verdict, Via};
use crate::dest::{is_internal, Cidr};
use crate::fasthash::FastMap;
use crate::host::{parse_host, Host, Name};
use crate::matcher::{Kind, Matcher};
use crate::method::Methods;
use crate::method_rules::MethodRules;
use crate::path::CanonicalPath;
use crate::reason::Reason;
use crate::services::Service;
use crate::spec::{HostPattern, HostRule, Network, UrlRule, DEFAULT_MODEL_APIS};
use crate::upstream::UpstreamProxy;

mod exceptions;
use exceptions::compile_exceptions;
pub use exceptions::Overruled;

/// A validated, compiled policy. Its only constructor is [`crate::file::load`] (and [`Policy::from_inline`]).
#[derive(Debug)]
pub struct Policy {
    mode: Mode,
    ports: Vec<u16>,
    tunnel_ports: Vec<u16>,
    allow_destinations: Vec<Cidr>,
    inspect_all: bool,
    /// Dotted quads listed in an allowlist's `allowed_hosts`, with the entry that listed them.
    allowed_ipv4: FastMap<Ipv4Addr, Arc<str>>,
    /// Allowlist: `allowed_hosts` and `allowed_urls`; blocklist: `blocked_urls`.
    rules: Matcher,
    /// The other kind's rules, exceptions decided against `rules` by specificity (see `engine/exceptions.rs`):
    /// allowlist: `blocked_urls`; blocklist: `allowed_hosts` and `allowed_urls`. Usually empty.
    exceptions: Matcher,
    /// [`DEFAULT_MODEL_APIS`] and the exact `model_apis` entries.
    model_exact: FastMap<Box<str>, ()>,
    /// `.x` entries of `model_apis`, without the dot.
    model_subtrees: FastMap<Box<str>, ()>,
    provider_tools: ProviderTools,
    /// `refusals` (see [`Policy::refusals`]).
    refusals: Refusals,
    /// Some tunnel may be inspected (see [`Policy::may_inspect`]).
    may_inspect: bool,
    /// Audit mode (see [`Policy::audits`]).
    audit: bool,
    /// Ask mode (see [`Policy::asks`]).
    ask: bool,
    /// `credentials`: secrets leash puts on requests to their hosts (see [`Policy::credential_for`]).
    credentials: Vec<Credential>,
    /// `upstream_proxy`: where allowed requests go out, unless bypassed.
    upstream: Option<UpstreamProxy>,
    /// `services`: the operator's own services (see [`Policy::services`]).
    services: Vec<Service>,
    /// The operator's boundary this policy is held inside (see [`Policy::within`]).
    boundary: Option<Arc<Boundary>>,
    /// The allowing entries (an allowlist's own, a blocklist's exceptions), each as a request it admits (`leash check
    /// --within` asks a boundary).
    allows: Vec<AllowedEntry>,
    /// Entries that list methods, and `network.methods` (see [`Policy::default_methods`]).
    methods: MethodRules,
}

/// A validated boundary (see [`crate::boundary`]): a policy holding rules only, and the name messages give it (its
/// file, as the caller read it). Made by [`Boundary::new`]; a run's policy is held inside one by [`Policy::within`].
#[derive(Debug)]
pub struct Boundary {
    pub(crate) policy: Policy,
    pub(crate) label: Arc<str>,
}

/// One entry of an allowlist as the request it admits: its host (the name a `.x` entry covers), and its path.
#[derive(Debug, Clone)]
pub(crate) struct AllowedEntry {
    pub(crate) text: Arc<str>,
    pub(crate) host: Name,
    pub(crate) path: Option<CanonicalPath>,
    /// A `.x` entry: it covers every subdomain of `host` too.
    pub(crate) subtree: bool,
    /// The methods its leading words list (`None`: those `network.methods` admits, or any).
    pub(crate) methods: Option<crate::method::Methods>,
}

impl Policy {
    /// Allowlist or blocklist: what happens to a request no rule names.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Audit mode (`mode: audit`, or any policy with `leash run --audit`): what the host and path rules would refuse
    /// is let through as `would-block`; the destination rules (ports, IP literals, internal addresses) and every
    /// other check still refuse.
    pub fn audits(&self) -> bool {
        self.audit
    }

    /// Ask mode (`mode: ask`, or an allowlist with `--ask`): a request the rules refuse as `not-allowed` is held
    /// while a person is asked; every other refusal stays one. The proxy does the holding (see
    /// [`Policy::may_ask`]).
    pub fn asks(&self) -> bool {
        self.ask
    }

    /// Whether `decision` is one ask mode holds while a person is asked: a `not-allowed` refusal, and only that
    /// (ports, IP literals, internal destinations, schemes, ClientHello checks, path `rule`s, model API and
    /// credential refusals stay refusals).
    pub fn may_ask(&self, decision: &Decision) -> bool {
        self.ask && decision.verdict == Verdict::Block && decision.reason == Reason::NotAllowed
    }

    /// Whether a tunnel to `host` would be inspected were the host allowed (`inspect: all`, a model API whose tools
    /// are filtered, a credential's host): ask mode opens such a tunnel to a host no rule admits and asks about each
    /// request in it, path shown, instead of about the name alone.
    pub fn inspects_if_allowed(&self, host: &Host) -> bool {
        let Some(name) = host.name() else { return false };
        self.inspect_all || self.filters_name(name.as_str()) || self.credential_for_name(name.as_str()).is_some()
    }

    /// This policy in ask mode; `None` for a blocklist (nothing in it is refused as `not-allowed`) or a policy in
    /// audit mode (which refuses nothing to ask about).
    pub fn into_ask(self) -> Option<Policy> {
        match (self.mode, self.audit) {
            (Mode::Allowlist, false) => Some(Policy { ask: true, ..self }),
            _ => None,
        }
    }

    /// The `credentials` entries, in the file's order.
    pub fn credentials(&self) -> &[Credential] {
        &self.credentials
    }

    /// The credential that belongs to `host`: the first entry one of whose hosts covers it. Its tunnels are always
    /// inspected, and a plain-HTTP request to it is refused unless the entry allows plaintext.
    pub fn credential_for(&self, host: &Host) -> Option<&Credential> {
        let name = host.name()?;
        self.credential_for_name(name.as_str())
    }

    fn credential_for_name(&self, name: &str) -> Option<&Credential> {
        self.credentials.iter().find(|c| c.hosts.iter().any(|h| h.covers(name)))
    }

    /// The upstream proxy allowed requests go out through, if the policy names one.
    pub fn upstream_proxy(&self) -> Option<&UpstreamProxy> {
        self.upstream.as_ref()
    }

    /// The `services` entries, in the file's order: each listens inside the sandbox and relays to its target on
    /// the host, outside the proxy's rules (the loader made sure the proxy cannot reach the targets too).
    pub fn services(&self) -> &[Service] {
        &self.services
    }

    /// The service listening on loopback port `port`, if any.
    pub fn service_on_port(&self, port: u16) -> Option<&Service> {
        self.services.iter().find(|s| s.listen == crate::services::ServiceListen::Port(port))
    }

    /// The service a CONNECT to `host:port` means: the one listening on `port` when `host` is the sandbox's own
    /// loopback (`localhost`, `127.0.0.1`, `[::1]`). A client that tunnels to a loopback gateway through the proxy
    /// whatever `NO_PROXY` says (Gemini's) reaches the service it would have reached by the port, and nothing else:
    /// any other address stays an IP literal.
    pub fn service_at(&self, host: &Host, port: u16) -> Option<&Service> {
        let loopback = match host {
            Host::Name(name) => name.as_str() == "localhost",
            Host::Ipv4(ip) => *ip == Ipv4Addr::LOCALHOST,
            Host::IpLiteral(literal) => &**literal == "[::1]",
        };
        loopback.then(|| self.service_on_port(port)).flatten()
    }

    /// This policy in audit mode. Every name is then reachable, model APIs among them: their tunnels are inspected.
    pub fn into_audit(self) -> Policy {
        let may_inspect = self.may_inspect || self.provider_tools != ProviderTools::Allow;
        Policy { audit: true, ask: false, may_inspect, ..self }
    }

    /// `network.methods`: what an entry that lists no methods admits (and, in a blocklist, what the default allows).
    /// `None` admits every method.
    pub fn default_methods(&self) -> Option<Methods> {
        self.methods.default_methods()
    }

    /// Ports a plain-HTTP request may name (`ports`); empty allows none.
    pub fn ports(&self) -> &[u16] {
        &self.ports
    }

    /// Ports a CONNECT may name (`tunnel_ports`); empty allows none.
    pub fn tunnel_ports(&self) -> &[u16] {
        &self.tunnel_ports
    }

    /// CIDRs exempt from the internal-destination refusal.
    pub fn allow_destinations(&self) -> &[Cidr] {
        &self.allow_destinations
    }

    /// `network.inspect: all`: every allowed tunnel is inspected.
    pub fn inspect_all(&self) -> bool {
        self.inspect_all
    }

    /// False when no tunnel can ever be inspected: no `inspect: all`, no path rule, no rule by method, and no model
    /// API host whose tools are filtered can be allowed. A caller may then do without a CA (`leash run` writes none).
    /// Errs towards true.
    pub fn may_inspect(&self) -> bool {
        self.may_inspect || self.boundary.as_ref().is_some_and(|b| b.policy.may_inspect())
    }

    /// `network.refusals`: how the proxy answers a refusal (it logs it as one either way).
    pub fn refusals(&self) -> Refusals {
        self.refusals
    }

    /// `network.provider_tools`: what happens to provider-side tools in requests to model API hosts.
    pub fn provider_tools(&self) -> ProviderTools {
        self.provider_tools
    }

    /// True if `host` carries model traffic: one of [`DEFAULT_MODEL_APIS`], or listed in `model_apis` (`.x` entries
    /// cover subdomains). Says nothing about whether the host is allowed.
    pub fn is_model_api(&self, host: &Host) -> bool {
        host.name().is_some_and(|name| self.is_model_name(name.as_str()))
    }

    /// True if request bodies to `host` are checked for provider-side tools: a model API while `provider_tools` is
    /// `strip` or `refuse`. Such a host's allowed tunnels are inspected.
    pub fn filters_provider_tools(&self, host: &Host) -> bool {
        host.name().is_some_and(|name| self.filters_name(name.as_str()))
    }

    fn filters_name(&self, name: &str) -> bool {
        self.provider_tools != ProviderTools::Allow && self.is_model_name(name)
    }

    fn is_model_name(&self, name: &str) -> bool {
        let subtree = |s: &str| self.model_subtrees.contains_key(s);
        self.model_exact.contains_key(name)
            || subtree(name)
            || name.match_indices('.').any(|(i, _)| name.get(i + 1..).is_some_and(subtree))
    }

    /// True if the decision on `host` depends on the path: a `blocked_urls` path entry covers it, or an
    /// `allowed_urls` entry names it and `allowed_hosts` does not already allow it whole. Such a host's tunnels are
    /// inspected (so are a model API's, see [`Policy::filters_provider_tools`], and every one under `inspect: all`).
    pub fn host_has_path_rules(&self, host: &Host) -> bool {
        if self.boundary.as_ref().is_some_and(|b| b.policy.host_has_path_rules(host)) {
            return true;
        }
        let Host::Name(name) = host else { return false };
        if !self.exceptions.is_empty() {
            return self.name_level(name.as_str()).path_matters;
        }
        match self.mode {
            Mode::Allowlist if self.rules.host_rule(name.as_str()).is_some() => false,
            _ => self.rules.first_path_rule(name.as_str()).is_some(),
        }
    }

    /// Decide one HTTP request (plain proxy or inside an inspected tunnel).
    pub(crate) fn decide_request(&self, req: &Request<'_>) -> Decision {
        match (req.via, req.scheme) {
            (Via::ForwardProxy, Scheme::Http) if !self.ports.contains(&req.port) => return block(Reason::Port),
            (Via::ForwardProxy, Scheme::Http) | (Via::Tunnel, Scheme::Https) => {}
            _ => return block(Reason::Scheme),
        }
        match req.host {
            // INVARIANT: every IP-literal spelling but a listed dotted quad is refused here, before any resolution.
            Host::IpLiteral(_) => block(Reason::IpLiteral),
            Host::Ipv4(ip) => self.methods.ipv4(self.decide_ipv4(*ip), req.method),
            Host::Name(name) => {
                let d = self.methods.request(self.decide_name(name, req.path), name, req.path, req.method);
                self.credential_in_clear(req, name, d)
            }
        }
    }

    /// Decide a CONNECT on its target alone, before any ClientHello: port, IP literal, and the target name as the
    /// provisional SNI (which the ClientHello must then confirm). `Inspect` when the host carries path rules.
    pub(crate) fn decide_connect(&self, target: &Host, port: u16) -> Decision {
        if !self.tunnel_ports.contains(&port) {
            return block(Reason::Port);
        }
        match target {
            Host::IpLiteral(_) => block(Reason::IpLiteral),
            Host::Ipv4(ip) => self.decide_ipv4(*ip),
            Host::Name(name) => self.decide_tunnel_name(name),
        }
    }

    /// Decide a tunnel on its ClientHello, after [`Policy::decide_connect`] allowed the target.
    pub(crate) fn decide_client_hello(&self, target: &Host, port: u16, hello: ClientHelloFacts<'_>) -> Decision {
        let on_target = self.decide_connect(target, port);
        match on_target.verdict {
            // A target refused by the host rules alone is what audit mode lets through (`would-block`) and ask mode
            // lets a person allow (`not-allowed`): the ClientHello checks must still hold there, or a tunnel to an
            // unlisted host could carry any protocol, or another host's name past the person's yes.
            Verdict::Block if self.lifts_on_target(&on_target) => {
                let hello_alone = Decision { verdict: Verdict::Allow, ..on_target.clone() };
                match check_client_hello(target, hello, hello_alone) {
                    refused if refused.verdict == Verdict::Block => refused,
                    _ => on_target,
                }
            }
            Verdict::Block => on_target,
            _ => check_client_hello(target, hello, on_target),
        }
    }

    /// Whether a tunnel's target refusal is one audit mode lets through or ask mode asks about.
    fn lifts_on_target(&self, on_target: &Decision) -> bool {
        (self.audit && on_target.reason.is_rule()) || (self.ask && on_target.reason == Reason::NotAllowed)
    }

    /// The destination check after resolution: `Err(Reason::InternalDestination)` if any address is internal (or
    /// inside one of `own`: what this host's kernel delivers locally, whole prefixes included, and where the proxy
    /// listens) and not inside `allow_destinations`. No address at all is refused too: there is nothing checked to
    /// dial.
    /// Under a boundary, an address must be exempt in both: the boundary's `allow_destinations` caps the run's.
    pub fn check_destination(&self, addrs: &[IpAddr], own: &[Cidr]) -> Result<(), Reason> {
        if let Some(boundary) = &self.boundary {
            boundary.policy.check_destination(addrs, own)?;
        }
        if addrs.is_empty() {
            return Err(Reason::InternalDestination);
        }
        // INVARIANT: one internal address refuses the whole answer, so no choice of address can reach inside.
        for addr in addrs {
            let exempt = self.allow_destinations.iter().any(|cidr| cidr.contains(*addr));
            if (is_internal(*addr) || own.iter().any(|net| net.contains(*addr))) && !exempt {
                return Err(Reason::InternalDestination);
            }
        }
        Ok(())
    }

    /// Compile a validated network section.
    pub(crate) fn compile(network: Network) -> Policy {
        let kind = match network.mode {
            Mode::Allowlist => Kind::Allow,
            Mode::Blocklist => Kind::Block,
        };
        let mut rules = Matcher::new(kind);
        let mut allowed_ipv4 = FastMap::default();
        // Entries that list methods go to the method layer alone (`MethodRules`).
        for rule in network.hosts.iter().filter(|r| r.methods.is_none()) {
            match &rule.pattern {
                HostPattern::Exact(name) => rules.add_exact(name.as_str(), &rule.text),
                HostPattern::Subtree(name) => rules.add_subtree(name.as_str(), &rule.text),
                HostPattern::Ipv4(ip) => {
                    keep_smaller(allowed_ipv4.entry(*ip).or_insert_with(|| rule.text.clone()), &rule.text)
                }
            }
        }
        for rule in network.urls.iter().filter(|r| r.methods.is_none()) {
            match (&rule.path, kind) {
                (Some(path), _) => rules.add_path(rule.host.as_str(), path.as_str(), &rule.text),
                (None, Kind::Block) => rules.add_subtree(rule.host.as_str(), &rule.text),
                (None, Kind::Allow) => rules.add_exact(rule.host.as_str(), &rule.text),
            }
        }
        rules.finish();
        let exceptions = compile_exceptions(&network, kind);
        // What the policy allows by name: an allowlist's entries, a blocklist's exceptions.
        let allows = match network.mode {
            Mode::Allowlist => allowed_entries(&network.hosts, &network.urls),
            Mode::Blocklist => allowed_entries(&network.exception_hosts, &network.exception_urls),
        };
        let methods = MethodRules::compile(&network);
        let (model_exact, model_subtrees) = model_sets(&network.model_apis);
        let filters_models = network.provider_tools != ProviderTools::Allow;
        let may_inspect = !network.credentials.is_empty()
            || network.inspect_all
            || rules.has_path_rules()
            || !methods.is_empty()
            || exceptions.has_path_rules()
            || (filters_models
                && match network.mode {
                    // Every name but the blocked ones is allowed, model APIs among them; in audit mode every one.
                    Mode::Blocklist => true,
                    Mode::Allowlist if network.audit => true,
                    Mode::Allowlist => allowed_names(&network)
                        .any(|(name, subtree)| may_cover_model(name, subtree, &model_exact, &model_subtrees)),
                });
        Policy {
            mode: network.mode,
            ports: network.ports,
            tunnel_ports: network.tunnel_ports,
            allow_destinations: network.allow_destinations,
            inspect_all: network.inspect_all,
            allowed_ipv4,
            rules,
            exceptions,
            model_exact,
            model_subtrees,
            provider_tools: network.provider_tools,
            refusals: network.refusals,
            may_inspect,
            audit: network.audit,
            ask: network.ask,
            credentials: network.credentials,
            upstream: network.upstream,
            services: network.services,
            boundary: None,
            allows,
            methods,
        }
    }

    /// This policy inside `boundary`, unchecked (see [`Policy::within`]): the boundary's stricter settings for
    /// provider tools and refusals apply to the run too.
    pub(crate) fn bounded_by(self, boundary: Arc<Boundary>) -> Policy {
        let provider_tools = self.provider_tools.stricter(boundary.policy.provider_tools);
        // Errs towards true, as `may_inspect` may: a model API the run allowed unread is now read.
        let may_inspect = self.may_inspect || provider_tools != self.provider_tools;
        let refusals = self.refusals.quieter(boundary.policy.refusals);
        Policy { provider_tools, may_inspect, refusals, boundary: Some(boundary), ..self }
    }

    /// The boundary this policy is held inside, if any.
    pub fn boundary(&self) -> Option<&Arc<Boundary>> {
        self.boundary.as_ref()
    }

    /// The allowing entries: an allowlist's own, a blocklist's exceptions.
    pub(crate) fn allowed_entries(&self) -> &[AllowedEntry] {
        &self.allows
    }

    /// Whether `model_apis` added a host to [`DEFAULT_MODEL_APIS`].
    pub(crate) fn declares_model_apis(&self) -> bool {
        self.model_exact.len() > DEFAULT_MODEL_APIS.len() || !self.model_subtrees.is_empty()
    }

    /// A plain-HTTP request to a credential's host: the credential would travel in clear, so it is refused unless
    /// the entry allows plaintext (a gateway on a private network). Also where the rules refuse it in a way audit
    /// mode lets through or ask mode asks about: neither lifts this refusal, so the value never goes in clear by
    /// either (nor by a person's yes, to this request or to an HTTPS one to the same host).
    fn credential_in_clear(&self, req: &Request<'_>, name: &Name, d: Decision) -> Decision {
        let lifted = d.verdict == Verdict::Block && self.lifts_on_target(&d);
        if req.via != Via::ForwardProxy || (d.verdict != Verdict::Allow && !lifted) {
            return d;
        }
        match self.credential_for_name(name.as_str()) {
            Some(c) if !c.plaintext => Decision { verdict: Verdict::Block, reason: Reason::CredentialPlaintext, ..d },
            _ => d,
        }
    }

    fn decide_ipv4(&self, ip: Ipv4Addr) -> Decision {
        match (self.mode, self.allowed_ipv4.get(&ip)) {
            (Mode::Allowlist, Some(rule)) => decision(Verdict::Allow, Reason::Rule, Some(rule)),
            _ => block(Reason::IpLiteral),
        }
    }

    fn decide_name(&self, name: &Name, path: &CanonicalPath) -> Decision {
        if !self.exceptions.is_empty() {
            return self.decide_name_with_exceptions(name, path);
        }
        let best = self.rules.best(name.as_str(), path.as_str());
        match (self.mode, best) {
            // INVARIANT: an allow prefix admits a path only if every way a server may split it is under the prefix.
            (Mode::Allowlist, Some(_)) if !self.every_reading_admitted(name, path) => block(Reason::AmbiguousPath),
            (Mode::Allowlist, Some(rule)) => decision(Verdict::Allow, Reason::Rule, Some(rule)),
            (Mode::Allowlist, None) => block(Reason::NotAllowed),
            (Mode::Blocklist, Some(rule)) => decision(Verdict::Block, Reason::Rule, Some(rule)),
            // INVARIANT: a name that spells an address is refused as the address would be (docs/policy.md).
            (Mode::Blocklist, None) if crate::dest::embeds_an_address(name.as_str()) => block(Reason::IpLiteral),
            (Mode::Blocklist, None) => decision(Verdict::Allow, Reason::Default, None),
        }
    }

    /// For an allow that rests on an `allowed_urls` prefix: no dot segment was removed (servers remove them at
    /// different stages, or not at all) and the literal reading (split on raw `/` only) is admitted too. Between
    /// those two readings every server's falls: the prefix's own segments are plain, so no reading moves them.
    fn every_reading_admitted(&self, name: &Name, path: &CanonicalPath) -> bool {
        // The common case first, with no second look-up: a path spelled as its canonical form reads one way only.
        let spelled_canonically = path.literal_reading().is_none() && !path.had_dot_segments();
        if spelled_canonically || self.rules.host_rule(name.as_str()).is_some() {
            return true;
        }
        !path.had_dot_segments()
            && path.literal_reading().is_none_or(|literal| self.rules.best(name.as_str(), literal).is_some())
    }

    /// A tunnel's name at host level: refused outright, allowed as a splice, or inspected because some paths on it
    /// are decided differently, it is a model API whose tools are filtered, or `inspect: all`.
    fn decide_tunnel_name(&self, name: &Name) -> Decision {
        let d = self.methods.tunnel(self.decide_tunnel_rules(name), name);
        match d.verdict {
            // INVARIANT: an allowed model API tunnel is inspected, so no request body reaches it unread.
            Verdict::Allow if self.filters_name(name.as_str()) => Decision { verdict: Verdict::Inspect, ..d },
            // INVARIANT: a credential's host is inspected, so its placeholder can be replaced on every request.
            Verdict::Allow if self.credential_for_name(name.as_str()).is_some() => {
                Decision { verdict: Verdict::Inspect, ..d }
            }
            _ => d,
        }
    }

    fn decide_tunnel_rules(&self, name: &Name) -> Decision {
        if !self.exceptions.is_empty() {
            return self.decide_tunnel_with_exceptions(name);
        }
        let host_rule = self.rules.host_rule(name.as_str());
        let inspect = |reason, rule| decision(Verdict::Inspect, reason, rule);
        match (self.mode, host_rule) {
            (Mode::Allowlist, Some(rule)) if self.inspect_all => inspect(Reason::Rule, Some(rule)),
            (Mode::Allowlist, Some(rule)) => decision(Verdict::Allow, Reason::Rule, Some(rule)),
            (Mode::Allowlist, None) => match self.rules.first_path_rule(name.as_str()) {
                Some(rule) => inspect(Reason::Rule, Some(rule)),
                None => block(Reason::NotAllowed),
            },
            (Mode::Blocklist, Some(rule)) => decision(Verdict::Block, Reason::Rule, Some(rule)),
            (Mode::Blocklist, None) if crate::dest::embeds_an_address(name.as_str()) => block(Reason::IpLiteral),
            (Mode::Blocklist, None) if self.inspect_all || self.rules.first_path_rule(name.as_str()).is_some() => {
                inspect(Reason::Default, None)
            }
            (Mode::Blocklist, None) => decision(Verdict::Allow, Reason::Default, None),
        }
    }

    /// True if some request to `host` would not be refused outright by name: a tunnel on one of `tunnel_ports` or a
    /// plain-HTTP request on one of `ports` is allowed or inspected on some path. `leash run`'s DNS stub answers
    /// such a name and NXDOMAINs every other. A host with path rules is reachable (each request is then decided on
    /// its path); an IP literal, listed dotted quads included, is never reachable as a name.
    pub fn name_is_reachable(&self, host: &Host) -> bool {
        let outside = self.boundary.as_ref().is_some_and(|b| b.policy.decide_lookup(host).verdict == Verdict::Block);
        !outside && self.decide_lookup(host).verdict != Verdict::Block
    }

    /// The decision on a name alone, as [`Policy::name_is_reachable`] takes it, with the rule and reason an audit
    /// line names: `block` when no request to it on any port could pass (`ip-literal` for an address, `port` when
    /// the policy allows no port at all).
    pub(crate) fn decide_lookup(&self, host: &Host) -> Decision {
        let Host::Name(name) = host else { return block(Reason::IpLiteral) };
        if self.tunnel_ports.is_empty() && self.ports.is_empty() {
            return block(Reason::Port);
        }
        // The tunnel decision on a name is the name-level decision of both kinds: it blocks exactly when no rule can
        // allow any path on the name (allowlist) or a host rule blocks every path (blocklist).
        self.decide_tunnel_name(name)
    }

    /// The compiled rules, read-only, for [`crate::hints`].
    pub(crate) fn rules(&self) -> &Matcher {
        &self.rules
    }
}

fn decision(verdict: Verdict, reason: Reason, rule: Option<&Arc<str>>) -> Decision {
    Decision { verdict, reason, rule: rule.cloned() }
}

fn block(reason: Reason) -> Decision {
    Decision { verdict: Verdict::Block, reason, rule: None }
}

/// The model API hosts: the built-in list plus the exact entries, and the `.x` entries.
fn model_sets(entries: &[HostPattern]) -> (FastMap<Box<str>, ()>, FastMap<Box<str>, ()>) {
    let mut exact: FastMap<Box<str>, ()> = DEFAULT_MODEL_APIS.iter().map(|h| (Box::from(*h), ())).collect();
    let mut subtrees = FastMap::default();
    for entry in entries {
        match entry {
            HostPattern::Exact(name) => exact.insert(name.as_str().into(), ()),
            HostPattern::Subtree(name) => subtrees.insert(name.as_str().into(), ()),
            // The loader refuses addresses in `model_apis`: inspection decides on names.
            HostPattern::Ipv4(_) => None,
        };
    }
    (exact, subtrees)
}

/// `allowed_hosts` and `allowed_urls` entries (an allowlist's own, or a blocklist's exceptions), as the requests they
/// admit.
fn allowed_entries(hosts: &[HostRule], urls: &[UrlRule]) -> Vec<AllowedEntry> {
    let hosts = hosts.iter().filter_map(|rule| {
        let (host, subtree) = match &rule.pattern {
            HostPattern::Exact(name) => (name.clone(), false),
            HostPattern::Subtree(name) => (name.clone(), true),
            HostPattern::Ipv4(_) => return None,
        };
        Some(AllowedEntry { text: rule.text.clone(), host, path: None, subtree, methods: rule.methods })
    });
    let urls = urls.iter().map(|rule| AllowedEntry {
        text: rule.text.clone(),
        host: rule.host.clone(),
        path: rule.path.clone(),
        subtree: false,
        methods: rule.methods,
    });
    hosts.chain(urls).collect()
}

/// An allowlist's `allowed_hosts` names as (name, covers subdomains); its `allowed_urls` all carry a path.
fn allowed_names(network: &Network) -> impl Iterator<Item = (&str, bool)> {
    network.hosts.iter().filter_map(|rule| match &rule.pattern {
        HostPattern::Exact(name) => Some((name.as_str(), false)),
        HostPattern::Subtree(name) => Some((name.as_str(), true)),
        HostPattern::Ipv4(_) => None,
    })
}

/// Whether an allowlist entry may allow some model API host: the name is one, or lies under a `.x` model entry, or
/// (for a `.x` entry) a model host or `.x` model entry lies under it.
fn may_cover_model(name: &str, subtree: bool, exact: &FastMap<Box<str>, ()>, subtrees: &FastMap<Box<str>, ()>) -> bool {
    let under = |inner: &str, outer: &str| inner == outer || inner.ends_with(&format!(".{outer}"));
    let is_model = exact.contains_key(name) || subtrees.keys().any(|t| under(name, t));
    is_model || (subtree && exact.keys().chain(subtrees.keys()).any(|m| under(m, name)))
}

/// Two entries spelling one dotted quad name the smaller text, as ties do in the matcher.
fn keep_smaller(slot: &mut Arc<str>, rule: &Arc<str>) {
    if rule < slot {
        *slot = rule.clone();
    }
}

/// `on_target` if the ClientHello agrees with the tunnel's target, else the refusal that says how it does not.
fn check_client_hello(target: &Host, hello: ClientHelloFacts<'_>, on_target: Decision) -> Decision {
    match (target, hello) {
        // A listed literal is decided on the literal; a ClientHello naming a server contradicts it.
        (Host::Ipv4(_), ClientHelloFacts::NoServerName) => on_target,
        (Host::Ipv4(_), ClientHelloFacts::ServerName(_)) => block(Reason::HostMismatch),
        (_, ClientHelloFacts::Ech) => block(Reason::Ech),
        (_, ClientHelloFacts::NotTls) => block(Reason::NotTls),
        (_, ClientHelloFacts::NoServerName) => block(Reason::NoSni),
        (_, ClientHelloFacts::BadServerName) => block(Reason::BadSni),
        (Host::Name(name), ClientHelloFacts::ServerName(sni)) => match parse_host(sni) {
            Ok(Host::Name(sni)) if sni == *name => on_target,
            Ok(Host::Name(_)) => block(Reason::HostMismatch),
            _ => block(Reason::BadSni),
        },
        (_, ClientHelloFacts::ServerName(_)) => block(Reason::IpLiteral),
    }
}
