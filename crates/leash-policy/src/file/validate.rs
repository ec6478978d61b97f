//! The raw tree → validated [`Network`] sections, collecting every error (not just the first) across the whole file,
//! every profile included, each naming its entry, position and the rule it breaks.

use std::sync::Arc;

use super::entries::{host_entry, model_api_entry, url_entry, List, UrlEntry};
use super::methods::{method_word, split_entry};
use super::presets::{self, PresetUse};
use super::raw::{Key, Node, Pos, ScalarKind, Value};
use super::spelling::closest;
use super::PolicyErrorKind::{
    self, BadCidr, BadMethod, BadPort, BadProfileName, BadValue, DuplicateKey, MissingKey, UnknownKey, WrongList,
    WrongType,
};
use super::{warn, PolicyError, Warning};
use crate::decision::{Mode, ProviderTools, Refusals};
use crate::dest::Cidr;
use crate::spec::{HostPattern, HostRule, Network, Oversight, UrlRule, DEFAULT_PORTS, DEFAULT_TUNNEL_PORTS};

const TOP_KEYS: &[&str] = &["network", "profiles"];
const PROFILE_KEYS: &[&str] = &["network"];
pub(crate) const NETWORK_KEYS: &[&str] = &[
    "mode",
    "allowed_hosts",
    "allowed_urls",
    "blocked_urls",
    "ports",
    "tunnel_ports",
    "allow_destinations",
    "inspect",
    "model_apis",
    "provider_tools",
    "refusals",
    "credentials",
    "upstream_proxy",
    "upstream_proxy_auth_env",
    "upstream_proxy_bypass",
    "upstream_proxy_ca",
    "services",
    "methods",
];

/// Every section of a file, checked.
pub(crate) struct Checked {
    /// The top-level `network`, if it is valid.
    pub(crate) top: Option<Network>,
    /// Each profile by name, with its network if valid.
    pub(crate) profiles: Vec<(String, Option<Network>)>,
    /// Where `profiles` is, for the unknown-profile error.
    pub(crate) profiles_pos: Option<Pos>,
    pub(crate) errors: Vec<PolicyError>,
    pub(crate) warnings: Vec<Warning>,
    /// Every preset written in an `allowed_hosts` list, in every section, with the entry that names it.
    pub(crate) presets: Vec<PresetUse>,
}

/// Check a whole document.
pub(crate) fn document(root: &Node) -> Checked {
    let mut c = Checker::default();
    let mut checked = Checked {
        top: None,
        profiles: Vec::new(),
        profiles_pos: None,
        errors: Vec::new(),
        warnings: Vec::new(),
        presets: Vec::new(),
    };
    if matches!(root.value, Value::Scalar(ScalarKind::Null, _)) {
        c.error(MissingKey, "network", root.pos, "the policy is empty; it needs a `network` section".to_owned());
    } else if let Some(fields) = c.map("", root, TOP_KEYS) {
        match find(&fields, "network") {
            Some((_, node)) => checked.top = c.network("network", node),
            None => {
                let message = "missing `network`; every policy has a top-level one".to_owned();
                c.error(MissingKey, "network", root.pos, message);
            }
        }
        if let Some((key, node)) = find(&fields, "profiles") {
            checked.profiles_pos = Some(key.pos);
            checked.profiles = c.profiles(node);
        }
    }
    checked.errors = c.errors;
    checked.warnings = c.warnings;
    checked.presets = c.presets;
    checked
}

#[derive(Default)]
pub(super) struct Checker {
    pub(super) errors: Vec<PolicyError>,
    pub(super) warnings: Vec<Warning>,
    /// The presets `allowed_hosts` lists named, each with its entry (`leash check` says what each added).
    pub(super) presets: Vec<PresetUse>,
}

pub(super) type Fields<'n> = Vec<(&'n Key, &'n Node)>;

pub(super) fn find<'n>(fields: &Fields<'n>, name: &str) -> Option<(&'n Key, &'n Node)> {
    fields.iter().find(|(k, _)| k.name == name).copied()
}

pub(super) fn join(prefix: &str, name: &str) -> String {
    match prefix {
        "" => name.to_owned(),
        _ => format!("{prefix}.{name}"),
    }
}

impl Checker {
    pub(super) fn error(&mut self, kind: PolicyErrorKind, entry: &str, pos: Pos, message: String) {
        self.errors.push(PolicyError {
            kind,
            entry: entry.to_owned(),
            line: Some(pos.line),
            column: Some(pos.column),
            message,
        });
    }

    pub(super) fn expected(&mut self, entry: &str, node: &Node, what: &str) {
        self.error(WrongType, entry, node.pos, format!("expected {what}, found {}", node.kind_name()));
    }

    /// A mapping with only `allowed` keys, each once; unknown and repeated keys are reported and left out.
    pub(super) fn map<'n>(&mut self, entry: &str, node: &'n Node, allowed: &[&str]) -> Option<Fields<'n>> {
        let Value::Map(pairs) = &node.value else {
            self.expected(if entry.is_empty() { "(top level)" } else { entry }, node, "a mapping");
            return None;
        };
        let mut fields: Fields<'n> = Vec::new();
        for (key, value) in pairs {
            let at = join(entry, &key.name);
            if let Some((first, _)) = find(&fields, &key.name) {
                let message = format!("`{}` is given twice (first on line {})", key.name, first.pos.line);
                self.error(DuplicateKey, &at, key.pos, message);
            } else if allowed.contains(&key.name.as_str()) || allowed.is_empty() {
                fields.push((key, value));
            } else {
                self.error(UnknownKey, &at, key.pos, unknown_key(&key.name, allowed));
            }
        }
        Some(fields)
    }

    fn profiles(&mut self, node: &Node) -> Vec<(String, Option<Network>)> {
        let Some(fields) = self.map("profiles", node, &[]) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (key, value) in fields {
            let entry = join("profiles", &key.name);
            let name_ok =
                !key.name.is_empty() && key.name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !name_ok {
                let message = format!("`{}` is not a profile name; use letters, digits, `-` and `_`", key.name);
                self.error(BadProfileName, &entry, key.pos, message);
            }
            let network = match self.map(&entry, value, PROFILE_KEYS).map(|f| find(&f, "network")) {
                Some(Some((_, net))) => self.network(&join(&entry, "network"), net),
                Some(None) => {
                    let message = "missing `network` in the profile".to_owned();
                    self.error(MissingKey, &join(&entry, "network"), value.pos, message);
                    None
                }
                None => None,
            };
            out.push((key.name.clone(), network));
        }
        out
    }

    /// One `network` section: every field checked even after an error, so all of its problems are reported.
    fn network(&mut self, prefix: &str, node: &Node) -> Option<Network> {
        let before = self.errors.len();
        let first_warning = self.warnings.len();
        let fields = self.map(prefix, node, NETWORK_KEYS)?;
        let mode = self.mode(prefix, node, find(&fields, "mode"));
        let list = |c: &mut Self, name: &str| find(&fields, name).and_then(|(_, n)| c.list(&join(prefix, name), n));
        let mode_only = mode.map(|(mode, _)| mode);
        let hosts = list(self, "allowed_hosts").map(|items| self.allowed_hosts(prefix, items, mode_only));
        let allowed_urls = list(self, "allowed_urls").map(|items| self.urls(prefix, "allowed_urls", items, mode_only));
        let blocked_urls = list(self, "blocked_urls").map(|items| self.urls(prefix, "blocked_urls", items, mode_only));
        let ports = list(self, "ports").map(|items| self.ports(&join(prefix, "ports"), items));
        let tunnel_ports = list(self, "tunnel_ports").map(|items| self.ports(&join(prefix, "tunnel_ports"), items));
        let destinations = list(self, "allow_destinations").map(|items| self.cidrs(prefix, items));
        let inspect_all = find(&fields, "inspect").is_some_and(|(_, n)| self.inspect(&join(prefix, "inspect"), n));
        let model_apis = list(self, "model_apis").map(|items| self.model_apis(prefix, items));
        let credentials = list(self, "credentials").map(|items| self.credentials(prefix, items));
        let upstream = self.upstream_proxy(prefix, &fields);
        let services = list(self, "services").map(|items| self.services(prefix, items)).unwrap_or_default();
        let provider_tools = find(&fields, "provider_tools")
            .and_then(|(_, n)| self.provider_tools(&join(prefix, "provider_tools"), n))
            .unwrap_or_default();
        let methods = find(&fields, "methods").and_then(|(_, n)| self.methods(&join(prefix, "methods"), n));
        let refusals = find(&fields, "refusals")
            .and_then(|(_, n)| self.refusals(&join(prefix, "refusals"), n))
            .unwrap_or_default();
        let (mode, oversight) = mode?;
        // Built even when an entry was refused, so the services' checks report on what did parse: `leash check`
        // names every bad entry at once. The other mode's lists are exceptions, decided by specificity.
        let (hosts, exception_hosts, urls, exception_urls) = match mode {
            Mode::Allowlist => (hosts, None, allowed_urls, blocked_urls),
            Mode::Blocklist => (None, hosts, blocked_urls, allowed_urls),
        };
        let network = Network {
            mode,
            audit: oversight == Oversight::Audit,
            ask: oversight == Oversight::Ask,
            hosts: hosts.unwrap_or_default(),
            urls: urls.unwrap_or_default(),
            exception_hosts: exception_hosts.unwrap_or_default(),
            exception_urls: exception_urls.unwrap_or_default(),
            ports: ports.unwrap_or_else(|| DEFAULT_PORTS.to_vec()),
            tunnel_ports: tunnel_ports.unwrap_or_else(|| DEFAULT_TUNNEL_PORTS.to_vec()),
            allow_destinations: destinations.unwrap_or_default(),
            inspect_all,
            model_apis: model_apis.unwrap_or_default(),
            provider_tools,
            refusals,
            credentials: credentials.unwrap_or_default(),
            upstream,
            services: services.iter().map(|w| w.service.clone()).collect(),
            methods,
        };
        let host_nodes = find(&fields, "allowed_hosts").and_then(|(_, n)| match &n.value {
            Value::Seq(items) => Some(items.as_slice()),
            _ => None,
        });
        self.services_are_gates(prefix, &network, &services, host_nodes.unwrap_or_default());
        self.exceptions_hold(prefix, &network, &fields);
        if self.errors.len() > before {
            return None;
        }
        self.warnings.extend(warn::network(prefix, &network));
        if let Some(section) = self.warnings.get_mut(first_warning..) {
            section.sort_by_cached_key(|w| warn::order(&w.entry, NETWORK_KEYS));
        }
        Some(network)
    }

    /// The mode, and whether it is `audit` (an allowlist that logs what it would refuse and lets it through) or `ask`
    /// (an allowlist that holds what it would refuse as `not-allowed` while a person is asked).
    fn mode(&mut self, prefix: &str, network: &Node, field: Option<(&Key, &Node)>) -> Option<(Mode, Oversight)> {
        let entry = join(prefix, "mode");
        let Some((_, node)) = field else {
            let message = "missing `mode`; it is `allowlist`, `blocklist`, `audit` or `ask`".to_owned();
            self.error(MissingKey, &entry, network.pos, message);
            return None;
        };
        match self.string(&entry, node)? {
            "allowlist" => Some((Mode::Allowlist, Oversight::Enforce)),
            "blocklist" => Some((Mode::Blocklist, Oversight::Enforce)),
            "audit" => Some((Mode::Allowlist, Oversight::Audit)),
            "ask" => Some((Mode::Allowlist, Oversight::Ask)),
            other => {
                let message = format!("`{other}` is not a mode; it is `allowlist`, `blocklist`, `audit` or `ask`");
                self.error(BadValue, &entry, node.pos, message);
                None
            }
        }
    }

    pub(super) fn list<'n>(&mut self, entry: &str, node: &'n Node) -> Option<&'n [Node]> {
        match &node.value {
            Value::Seq(items) => Some(items),
            _ => {
                self.expected(entry, node, "a list (write `[]` for an empty one)");
                None
            }
        }
    }

    pub(super) fn item_string<'n>(&mut self, node: &'n Node, entry: impl FnOnce() -> String) -> Option<&'n str> {
        match &node.value {
            Value::Scalar(ScalarKind::Str, text) => Some(text),
            _ => {
                self.expected(&entry(), node, "a string");
                None
            }
        }
    }

    pub(super) fn string<'n>(&mut self, entry: &str, node: &'n Node) -> Option<&'n str> {
        match &node.value {
            Value::Scalar(ScalarKind::Str, text) => Some(text),
            _ => {
                self.expected(entry, node, "a string");
                None
            }
        }
    }

    /// `mode` is the section's, when it is valid: in a blocklist these are exceptions.
    fn allowed_hosts(&mut self, prefix: &str, items: &[Node], mode: Option<Mode>) -> Vec<HostRule> {
        let mut rules = Vec::with_capacity(items.len());
        for (index, node) in items.iter().enumerate() {
            // Entry names are built only for errors: a policy may have 100,000 entries.
            let entry = || format!("{prefix}.allowed_hosts[{index}]");
            let Some(text) = self.item_string(node, entry) else {
                continue;
            };
            let (methods, rule) = match split_entry(text) {
                Ok(split) => split,
                Err(message) => {
                    self.error(BadMethod, &entry(), node.pos, message);
                    continue;
                }
            };
            if methods.is_some() && mode == Some(Mode::Blocklist) {
                self.error(BadMethod, &entry(), node.pos, exception_methods(text));
                continue;
            }
            if presets::is_preset(rule) {
                match presets::lookup(rule) {
                    // `read-only +github`: the methods hold for every host the preset adds.
                    Ok(preset) => {
                        let added = presets::rules(preset, index).into_iter();
                        rules.extend(added.map(|r| HostRule { methods, ..r }));
                        self.presets.push(PresetUse { entry: entry(), written: text.to_owned(), preset });
                    }
                    Err(e) => self.error(e.kind, &entry(), node.pos, e.message),
                }
                continue;
            }
            match host_entry(rule) {
                Ok(HostPattern::Ipv4(_)) if methods.is_some() => {
                    let message = format!("`{text}`: an IP address entry cannot list methods; name the host instead");
                    self.error(BadMethod, &entry(), node.pos, message);
                }
                Ok(pattern) => rules.push(HostRule { pattern, text: Arc::from(text), index, methods }),
                Err(e) => self.error(e.kind, &entry(), node.pos, e.message),
            }
        }
        rules
    }

    /// `mode` is the section's, when it is valid: a dotted quad in `blocked_urls` means nothing in either mode; the
    /// other mode's list holds exceptions.
    fn urls(&mut self, prefix: &str, name: &str, items: &[Node], mode: Option<Mode>) -> Vec<UrlRule> {
        let list = if name == "allowed_urls" { List::AllowedUrls } else { List::BlockedUrls };
        let mut rules = Vec::with_capacity(items.len());
        for (index, node) in items.iter().enumerate() {
            let entry = || format!("{prefix}.{name}[{index}]");
            let Some(text) = self.item_string(node, entry) else {
                continue;
            };
            let (methods, rule) = match split_entry(text) {
                Ok(split) => split,
                Err(message) => {
                    self.error(BadMethod, &entry(), node.pos, message);
                    continue;
                }
            };
            let exception = matches!(
                (list, mode),
                (List::AllowedUrls, Some(Mode::Blocklist)) | (List::BlockedUrls, Some(Mode::Allowlist))
            );
            if methods.is_some() && exception {
                self.error(BadMethod, &entry(), node.pos, exception_methods(text));
                continue;
            }
            if presets::is_preset(rule) {
                let e = presets::not_here(rule, name);
                self.error(e.kind, &entry(), node.pos, e.message);
                continue;
            }
            match url_entry(rule, list) {
                Ok(UrlEntry::Rule(rule)) => rules.push(UrlRule { index, methods, text: Arc::from(text), ..rule }),
                // In an allowlist the entry would look like an exception cut out of a listed address; it cuts
                // nothing (an address is refused unless listed), so say where the address is allowed instead.
                Ok(UrlEntry::Ipv4) if mode == Some(Mode::Allowlist) => {
                    let message = format!(
                        "`{text}` is an IP address: an allowlist refuses every address `allowed_hosts` does not \
                         list; to refuse it, leave it out there"
                    );
                    self.error(WrongList, &entry(), node.pos, message);
                }
                Ok(UrlEntry::Ipv4) => {
                    let message =
                        format!("`{text}`: a blocklist refuses every IP literal already; this entry does nothing");
                    self.warnings.push(Warning { entry: entry(), message });
                }
                Err(e) => self.error(e.kind, &entry(), node.pos, e.message),
            }
        }
        rules
    }

    fn ports(&mut self, entry: &str, items: &[Node]) -> Vec<u16> {
        let mut ports = Vec::with_capacity(items.len());
        for (index, node) in items.iter().enumerate() {
            let at = format!("{entry}[{index}]");
            match &node.value {
                Value::Scalar(ScalarKind::Int, text) => match text.parse::<u16>() {
                    Ok(port) if port > 0 && text.bytes().all(|b| b.is_ascii_digit()) => ports.push(port),
                    _ => self.error(BadPort, &at, node.pos, format!("`{text}` is not a port; ports are 1-65535")),
                },
                _ => self.expected(&at, node, "a port number"),
            }
        }
        ports
    }

    fn cidrs(&mut self, prefix: &str, items: &[Node]) -> Vec<Cidr> {
        let mut cidrs = Vec::with_capacity(items.len());
        for (index, node) in items.iter().enumerate() {
            let entry = || format!("{prefix}.allow_destinations[{index}]");
            let Some(text) = self.item_string(node, entry) else {
                continue;
            };
            match text.parse::<Cidr>() {
                Ok(cidr) => cidrs.push(cidr),
                Err(e) => self.error(BadCidr, &entry(), node.pos, e.to_string()),
            }
        }
        cidrs
    }

    fn model_apis(&mut self, prefix: &str, items: &[Node]) -> Vec<HostPattern> {
        let mut hosts = Vec::with_capacity(items.len());
        for (index, node) in items.iter().enumerate() {
            let entry = || format!("{prefix}.model_apis[{index}]");
            let Some(text) = self.item_string(node, entry) else {
                continue;
            };
            if presets::is_preset(text) {
                let e = presets::not_here(text, "model_apis");
                self.error(e.kind, &entry(), node.pos, e.message);
                continue;
            }
            match model_api_entry(text) {
                Ok(pattern) => hosts.push(pattern),
                Err(e) => self.error(e.kind, &entry(), node.pos, e.message),
            }
        }
        hosts
    }

    fn refusals(&mut self, entry: &str, node: &Node) -> Option<Refusals> {
        match self.string(entry, node)? {
            "announced" => Some(Refusals::Announced),
            "as-not-found" => Some(Refusals::AsNotFound),
            other => {
                let message = format!("`{other}` is not a refusals setting; it is `announced` or `as-not-found`");
                self.error(BadValue, entry, node.pos, message);
                None
            }
        }
    }

    fn provider_tools(&mut self, entry: &str, node: &Node) -> Option<ProviderTools> {
        match self.string(entry, node)? {
            "strip" => Some(ProviderTools::Strip),
            "refuse" => Some(ProviderTools::Refuse),
            "allow" => Some(ProviderTools::Allow),
            other => {
                let message = format!("`{other}` is not a provider_tools setting; it is `strip`, `refuse` or `allow`");
                self.error(BadValue, entry, node.pos, message);
                None
            }
        }
    }

    /// `methods`: method words (`[GET, HEAD]`, `read-only`), as a list or one string of words.
    fn methods(&mut self, entry: &str, node: &Node) -> Option<(crate::method::Methods, Arc<str>)> {
        let words: Vec<(&str, &Node)> = match &node.value {
            Value::Scalar(ScalarKind::Str, text) => text.split_ascii_whitespace().map(|w| (w, node)).collect(),
            Value::Seq(items) => {
                let strings =
                    items.iter().enumerate().map(|(i, n)| (self.item_string(n, || format!("{entry}[{i}]")), n));
                strings.filter_map(|(s, n)| Some((s?, n))).collect()
            }
            _ => {
                self.expected(entry, node, "a list of methods (`[GET, HEAD, OPTIONS]`) or `read-only`");
                return None;
            }
        };
        if words.is_empty() {
            let message = "no methods: every request would be refused; leave `methods` out to admit every method, or \
                           list some (`read-only`)"
                .to_owned();
            self.error(BadMethod, entry, node.pos, message);
            return None;
        }
        let mut set = crate::method::Methods::default();
        let mut ok = true;
        for (word, at) in &words {
            match method_word(word) {
                Ok(m) => set = set.union(m),
                Err(message) => {
                    ok = false;
                    self.error(BadMethod, entry, at.pos, message);
                }
            }
        }
        let text = format!("methods: {}", words.iter().map(|(w, _)| *w).collect::<Vec<_>>().join(" "));
        ok.then(|| (set, Arc::from(text)))
    }

    fn inspect(&mut self, entry: &str, node: &Node) -> bool {
        match self.string(entry, node) {
            Some("all") => true,
            Some(other) => {
                let message = format!("`{other}` is not an inspect setting; the only value is `all`");
                self.error(BadValue, entry, node.pos, message);
                false
            }
            None => false,
        }
    }
}

/// "unknown key" with the closest allowed key when one is a likely slip (`allowed_host` → `allowed_hosts`), else
/// every allowed key.
fn unknown_key(name: &str, allowed: &[&str]) -> String {
    match closest(name, allowed) {
        Some(key) => format!("unknown key `{name}`; did you mean `{key}`?"),
        None => {
            let expected = allowed.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ");
            format!("unknown key `{name}`; expected one of {expected}")
        }
    }
}

/// Why an exception (an entry of the other mode's list) may not list methods: exceptions are decided by specificity
/// against the mode's own rules, and a method on one would have to be weighed against rules by method as well —
/// refused rather than guessed.
fn exception_methods(text: &str) -> String {
    format!(
        "`{text}`: an exception (an entry of the other mode's list) cannot list methods; put the methods on an \
         entry of the mode's own list, or use `network.methods`"
    )
}

#[cfg(test)]
mod tests {
    use super::super::spelling::edit_distance;
    use super::unknown_key;

    #[test]
    fn an_unknown_key_close_to_a_known_one_is_named() {
        let keys = ["mode", "allowed_hosts", "allowed_urls", "blocked_urls", "ports"];
        assert_eq!(unknown_key("allowed_host", &keys), "unknown key `allowed_host`; did you mean `allowed_hosts`?");
        assert_eq!(unknown_key("blocked_url", &keys), "unknown key `blocked_url`; did you mean `blocked_urls`?");
        assert_eq!(unknown_key("mdoe", &keys), "unknown key `mdoe`; did you mean `mode`?");
        assert!(unknown_key("colour", &keys).starts_with("unknown key `colour`; expected one of `mode`"));
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
