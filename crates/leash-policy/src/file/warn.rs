//! Warnings for `leash check`: policies that are valid but probably not what was meant — an empty list, a rule
//! written twice, a rule already covered by a broader one, an exemption of every address.
//!
//! Each check is linear or close to it (hash lookups per label or per `/`, one sorted scan per host), so a policy of
//! 100,000 entries is checked within its load-time budget.

use crate::fasthash::FastMap;
use std::borrow::Cow;

use super::Warning;
use crate::decision::{Mode, ProviderTools};
use crate::matcher::longest_prefix;
use crate::spec::{HostPattern, Network, UrlRule, DEFAULT_MODEL_APIS};

/// Every warning for one valid network section named `prefix` (`network`, `profiles.x.network`).
pub(crate) fn network(prefix: &str, net: &Network) -> Vec<Warning> {
    let mut out = Warnings { prefix, list: Vec::new() };
    out.lists(net);
    out.model_apis(net);
    // Repeats and coverage compare hosts and paths. An entry that lists methods admits (or refuses) only those, so
    // `GET x` and `POST x` do not repeat each other and `x/p` is not covered by `read-only x`: those checks see the
    // entries that list none.
    let without_methods;
    let listed = net.hosts.iter().any(|r| r.methods.is_some()) || net.urls.iter().any(|r| r.methods.is_some());
    let net = match listed {
        false => net,
        true => {
            let hosts = net.hosts.iter().filter(|r| r.methods.is_none()).cloned().collect();
            let urls = net.urls.iter().filter(|r| r.methods.is_none()).cloned().collect();
            without_methods = Network { hosts, urls, ..net.clone() };
            &without_methods
        }
    };
    match net.mode {
        Mode::Allowlist => {
            out.allowed_hosts(net);
            out.allowed_urls(net);
        }
        Mode::Blocklist => out.blocked_urls(net),
    }
    out.exceptions(net);
    out.list
}

/// Where a warning sorts: by setting, in the order of `keys` (the reference's, which the validator holds), then by
/// index, so `[9]` comes before `[10]`. Some checks walk hash maps; sorting makes `leash check` print in a stable,
/// file-like order.
pub(crate) fn order(entry: &str, keys: &[&str]) -> (usize, usize) {
    let (list, index) = match entry.strip_suffix(']').and_then(|e| e.rsplit_once('[')) {
        Some((list, index)) => (list, index.parse().unwrap_or(0)),
        None => (entry, 0),
    };
    let setting = list.rsplit('.').next().unwrap_or(list);
    let rank = keys.iter().position(|k| *k == setting).map_or(0, |i| i + 1);
    (rank, index)
}

struct Warnings<'p> {
    prefix: &'p str,
    list: Vec<Warning>,
}

impl Warnings<'_> {
    fn push(&mut self, entry: String, message: String) {
        self.list.push(Warning { entry, message });
    }

    fn lists(&mut self, net: &Network) {
        let p = self.prefix;
        match net.mode {
            // An empty audit policy is how learning starts: everything is let through and logged.
            Mode::Allowlist if net.hosts.is_empty() && net.urls.is_empty() && !net.audit => {
                self.push(p.to_owned(), "the allowlist is empty: nothing is allowed".to_owned());
            }
            Mode::Blocklist if net.urls.is_empty() => {
                self.push(p.to_owned(), "the blocklist is empty: everything is allowed".to_owned());
            }
            _ => {}
        }
        if net.ports.is_empty() {
            self.push(format!("{p}.ports"), "no port is listed: every plain-HTTP request is refused".to_owned());
        }
        if net.tunnel_ports.is_empty() {
            self.push(format!("{p}.tunnel_ports"), "no port is listed: every CONNECT is refused".to_owned());
        }
        for (i, cidr) in net.allow_destinations.iter().enumerate() {
            if cidr.is_everything() {
                let family = if cidr.addr.is_ipv4() { "IPv4" } else { "IPv6" };
                let message = format!("`{cidr}` exempts every {family} address from the internal-destination check");
                self.push(format!("{p}.allow_destinations[{i}]"), message);
            }
        }
    }

    /// `provider_tools: allow`, and `model_apis` entries that add nothing.
    fn model_apis(&mut self, net: &Network) {
        let p = self.prefix;
        if net.provider_tools == ProviderTools::Allow {
            let message = "model APIs' provider-side tools (web search, web fetch, remote MCP) pass untouched: the \
                           model's provider can fetch what this policy refuses"
                .to_owned();
            self.push(format!("{p}.provider_tools"), message);
        }
        for (i, pattern) in net.model_apis.iter().enumerate() {
            if let HostPattern::Exact(name) = pattern {
                if DEFAULT_MODEL_APIS.contains(&name.as_str()) {
                    self.push(format!("{p}.model_apis[{i}]"), format!("`{name}` is a built-in model API already"));
                }
            }
        }
    }

    fn allowed_hosts(&mut self, net: &Network) {
        let prefix = self.prefix;
        let entry = move |i: usize| format!("{prefix}.allowed_hosts[{i}]");
        let mut first: FastMap<&HostPattern, usize> = FastMap::default();
        let subtrees: FastMap<&str, &str> = subtree_texts(net);
        for rule in &net.hosts {
            if let Some(&earlier) = first.get(&rule.pattern) {
                self.push(entry(rule.index), format!("`{}` repeats {}", rule.text, entry(earlier)));
                continue;
            }
            first.insert(&rule.pattern, rule.index);
            if let HostPattern::Subtree(name) = &rule.pattern {
                if let Some(kind) = crate::open_suffix::open_suffix(name.as_str()) {
                    self.push(
                        entry(rule.index),
                        format!("`{}`: {}", rule.text, crate::open_suffix::why_open(name.as_str(), kind)),
                    );
                }
            }
            let covering = match &rule.pattern {
                HostPattern::Exact(name) => covering_subtree(&subtrees, name.as_str(), true),
                HostPattern::Subtree(name) => covering_subtree(&subtrees, name.as_str(), false),
                HostPattern::Ipv4(_) => {
                    let message = format!(
                        "`{}` is an IP address: it is allowed in exactly this spelling, and the destination check \
                         still applies",
                        rule.text
                    );
                    self.push(entry(rule.index), message);
                    None
                }
            };
            if let Some(broader) = covering.filter(|_| !has_exceptions(net)) {
                self.push(entry(rule.index), format!("`{}` is already covered by `{broader}`", rule.text));
            }
        }
    }

    fn allowed_urls(&mut self, net: &Network) {
        let prefix = self.prefix;
        let entry = move |i: usize| format!("{prefix}.allowed_urls[{i}]");
        let subtrees = subtree_texts(net);
        let exact: FastMap<&str, &str> = net
            .hosts
            .iter()
            .filter_map(|r| match &r.pattern {
                HostPattern::Exact(n) => Some((n.as_str(), &*r.text)),
                _ => None,
            })
            .collect();
        let mut paths: FastMap<(&str, &str), &UrlRule> = FastMap::default();
        let mut firsts = Vec::new();
        for rule in &net.urls {
            let key = (rule.host.as_str(), rule.path.as_ref().map_or("/", |p| p.as_str()));
            match paths.get(&key) {
                Some(earlier) => {
                    self.push(entry(rule.index), format!("`{}` repeats {}", rule.text, entry(earlier.index)))
                }
                None => {
                    paths.insert(key, rule);
                    firsts.push((key, rule));
                }
            }
        }
        for ((host, path), rule) in firsts {
            let by_host = exact.get(host).copied().or_else(|| covering_subtree(&subtrees, host, true));
            let by_path = || allow_cover(path).find_map(|q| paths.get(&(host, q))).map(|r| &*r.text);
            if let Some(broader) = by_host.or_else(by_path).filter(|_| !has_exceptions(net)) {
                self.push(entry(rule.index), format!("`{}` is already covered by `{broader}`", rule.text));
            }
        }
    }

    fn blocked_urls(&mut self, net: &Network) {
        let prefix = self.prefix;
        let entry = move |i: usize| format!("{prefix}.blocked_urls[{i}]");
        let lowered: Vec<Option<Cow<'_, str>>> =
            net.urls.iter().map(|r| r.path.as_ref().map(|p| lower(p.as_str()))).collect();
        let mut host_rules: FastMap<&str, &UrlRule> = FastMap::default();
        let mut by_host: FastMap<&str, Vec<(&str, &UrlRule)>> = FastMap::default();
        let mut host_only = Vec::new();
        // Host entries repeat if their name is taken; path entries are checked for repeats in the sorted scan.
        for (rule, path) in net.urls.iter().zip(&lowered) {
            match path {
                None => match host_rules.get(rule.host.as_str()) {
                    Some(earlier) => {
                        self.push(entry(rule.index), format!("`{}` repeats {}", rule.text, entry(earlier.index)));
                    }
                    None => {
                        host_rules.insert(rule.host.as_str(), rule);
                        host_only.push(rule);
                    }
                },
                Some(path) => by_host.entry(rule.host.as_str()).or_default().push((path, rule)),
            }
        }
        let host_rules: FastMap<&str, &str> = host_rules.into_iter().map(|(h, r)| (h, &*r.text)).collect();
        for list in by_host.values_mut() {
            list.sort_unstable_by(|a, b| a.0.cmp(b.0).then(a.1.index.cmp(&b.1.index)));
            // Sorted by path then index, so each run of one path starts with the entry written first.
            let mut run_start: Option<&(&str, &UrlRule)> = None;
            for item in list.iter() {
                match run_start {
                    Some((path, first)) if *path == item.0 => {
                        self.push(entry(item.1.index), format!("`{}` repeats {}", item.1.text, entry(first.index)));
                    }
                    _ => run_start = Some(item),
                }
            }
            // Keep the first of each spelling: later checks name the entry written first.
            list.dedup_by(|later, first| later.0 == first.0);
        }
        // With exceptions, a narrower entry inside a broader one may cut an exception out of an exception.
        if has_exceptions(net) {
            return;
        }
        for rule in host_only {
            if let Some(broader) = proper_suffixes(rule.host.as_str()).find_map(|s| host_rules.get(s)) {
                self.push(entry(rule.index), format!("`{}` is already covered by `{broader}`", rule.text));
            }
        }
        for (host, list) in &by_host {
            self.block_paths(host, list, &host_rules, &by_host);
        }
    }

    /// Path rules under one host: covered by a host rule on it or a parent, by a shorter path under it (one sorted
    /// scan keeping the chain of open prefixes), or by a path rule on a parent.
    fn block_paths(
        &mut self,
        host: &str,
        list: &[(&str, &UrlRule)],
        host_rules: &FastMap<&str, &str>,
        by_host: &FastMap<&str, Vec<(&str, &UrlRule)>>,
    ) {
        let host_rule = std::iter::once(host).chain(proper_suffixes(host)).find_map(|s| host_rules.get(s));
        let mut open: Vec<&(&str, &UrlRule)> = Vec::new();
        for item in list {
            let (path, rule) = item;
            while open.last().is_some_and(|(top, _)| !path.starts_with(*top)) {
                open.pop();
            }
            let by_parent = || {
                proper_suffixes(host).find_map(|s| {
                    let parent = by_host.get(s)?;
                    longest_prefix(parent, |(p, _)| p.as_bytes(), path.as_bytes(), |_| true).map(|(_, r)| &*r.text)
                })
            };
            let broader = host_rule.copied().or_else(|| open.last().map(|(_, r)| &*r.text)).or_else(by_parent);
            match broader {
                Some(broader) => {
                    let message = format!("`{}` is already covered by `{broader}`", rule.text);
                    self.push(format!("{}.blocked_urls[{}]", self.prefix, rule.index), message);
                }
                None => open.push(item),
            }
        }
    }
}

impl Warnings<'_> {
    /// Exceptions that change nothing: inside no entry of the other kind, or (a blocklist's) naming an address.
    fn exceptions(&mut self, net: &Network) {
        let p = self.prefix;
        match net.mode {
            Mode::Blocklist => {
                let blocked: FastMap<&str, ()> = net.urls.iter().map(|r| (r.host.as_str(), ())).collect();
                let inside = |name: &str| suffixes_of(name).any(|s| blocked.contains_key(s));
                let hosts = net.exception_hosts.iter().filter_map(|r| {
                    let name = match &r.pattern {
                        HostPattern::Exact(n) | HostPattern::Subtree(n) => n.as_str(),
                        HostPattern::Ipv4(_) => return None,
                    };
                    Some((format!("{p}.allowed_hosts[{}]", r.index), name, &r.text))
                });
                let urls = net
                    .exception_urls
                    .iter()
                    .map(|r| (format!("{p}.allowed_urls[{}]", r.index), r.host.as_str(), &r.text));
                for (entry, name, text) in hosts.chain(urls) {
                    let message = if crate::dest::embeds_an_address(name) {
                        format!(
                            "`{text}` spells an IP address, which a blocklist refuses whatever its exceptions say; \
                             this entry has no effect"
                        )
                    } else if !inside(name) {
                        format!(
                            "`{text}` is inside no `blocked_urls` entry, so the blocklist allows it already; this \
                             entry has no effect"
                        )
                    } else {
                        continue;
                    };
                    self.push(entry, message);
                }
            }
            Mode::Allowlist => {
                let subtrees = subtree_texts(net);
                let named: FastMap<&str, ()> = net
                    .hosts
                    .iter()
                    .filter_map(|r| match &r.pattern {
                        HostPattern::Exact(n) => Some((n.as_str(), ())),
                        _ => None,
                    })
                    .chain(net.urls.iter().map(|r| (r.host.as_str(), ())))
                    .collect();
                for rule in &net.exception_urls {
                    let host = rule.host.as_str();
                    if !named.contains_key(host) && covering_subtree(&subtrees, host, true).is_none() {
                        let message = format!(
                            "`{}` is inside no allowed entry, so the allowlist refuses it already; this entry has no \
                             effect",
                            rule.text
                        );
                        self.push(format!("{p}.blocked_urls[{}]", rule.index), message);
                    }
                }
            }
        }
    }
}

/// Whether the section holds rules of both kinds.
fn has_exceptions(net: &Network) -> bool {
    !net.exception_hosts.is_empty() || !net.exception_urls.is_empty()
}

/// `a.b.c`, `b.c` and `c` for `a.b.c`.
fn suffixes_of(host: &str) -> impl Iterator<Item = &str> {
    std::iter::once(host).chain(proper_suffixes(host))
}

/// Block paths compare case-insensitively; most are lowercase already, so copy only when needed.
fn lower(path: &str) -> Cow<'_, str> {
    match path.bytes().any(|b| b.is_ascii_uppercase()) {
        true => Cow::Owned(path.to_ascii_lowercase()),
        false => Cow::Borrowed(path),
    }
}

/// `.x` entries of `allowed_hosts`, by name, with their text.
fn subtree_texts(net: &Network) -> FastMap<&str, &str> {
    net.hosts
        .iter()
        .filter_map(|r| match &r.pattern {
            HostPattern::Subtree(n) => Some((n.as_str(), &*r.text)),
            _ => None,
        })
        .collect()
}

/// The `.x` entry covering `name`: one on a parent, or (if `itself`) on the name itself.
fn covering_subtree<'a>(subtrees: &FastMap<&str, &'a str>, name: &str, itself: bool) -> Option<&'a str> {
    let own = itself.then_some(name);
    own.into_iter().chain(proper_suffixes(name)).find_map(|s| subtrees.get(s).copied())
}

/// `b.c` and `c` for `a.b.c`.
fn proper_suffixes(host: &str) -> impl Iterator<Item = &str> {
    host.match_indices('.').filter_map(move |(i, _)| host.get(i + 1..))
}

/// Every allow prefix other than `path` itself that would admit all of `path`: `/a` and `/a/` for `/a/b`.
fn allow_cover(path: &str) -> impl Iterator<Item = &str> {
    let slashes = path.match_indices('/').map(|(i, _)| i);
    slashes.flat_map(move |i| [path.get(..i), path.get(..=i)]).flatten().filter(move |q| !q.is_empty() && *q != path)
}

/// An upstream proxy resolves names itself: the internal-destination check cannot be leash's for requests through it.
pub(crate) fn upstream_proxy(profile: Option<&str>, policy: &crate::Policy) -> Option<Warning> {
    let up = policy.upstream_proxy()?;
    let prefix = profile.map_or_else(|| "network".to_owned(), |p| format!("profiles.{p}.network"));
    Some(Warning {
        entry: format!("{prefix}.upstream_proxy"),
        message: format!(
            "requests through `{}` have their names resolved there: leash still decides names, IP literals, ports, \
             paths and credentials, but refusing names that resolve to internal addresses is the upstream proxy's \
             job (bypassed hosts are checked by leash as usual)",
            up.authority()
        ),
    })
}

/// Credential hosts the policy refuses anyway (a tunnel to them on 443 is blocked by the mode's rules): the
/// credential would never be used, which is likely a slip. And a subdomain entry (`.x`): the real value goes to
/// every name under it that gets the placeholder — with `add: true` to each one, without it to each one the sandbox
/// sends the placeholder to, also one it controls.
pub(crate) fn unused_credentials(profile: Option<&str>, policy: &crate::Policy) -> Vec<Warning> {
    use crate::credentials::CredentialHost;
    use crate::{Host, Question, TlsInspection, Verdict};
    let prefix = profile.map_or_else(|| "network".to_owned(), |p| format!("profiles.{p}.network"));
    let mut out = Vec::new();
    for (i, credential) in policy.credentials().iter().enumerate() {
        for (j, host) in credential.hosts.iter().enumerate() {
            let (CredentialHost::Exact(name) | CredentialHost::Subtree(name)) = host;
            let target = Host::Name(name.clone());
            if let CredentialHost::Subtree(_) = host {
                let (name, adds, credential) = (name.as_str(), credential.add, &credential.name);
                let message = match adds {
                    true => format!(
                        "`.{name}` with `add: true` puts the real secret of `{credential}` on every request to any \
                         subdomain of `{name}`, also one an attacker can register or point elsewhere; list the exact \
                         hosts"
                    ),
                    false => format!(
                        "`.{name}` puts the real secret of `{credential}` on any request to a subdomain of `{name}` \
                         that carries its placeholder, so the sandbox can have it sent to one an attacker can register \
                         or point elsewhere; list the exact hosts"
                    ),
                };
                out.push(Warning { entry: format!("{prefix}.credentials[{i}].hosts[{j}]"), message });
            }
            let d = policy.decide(&Question::Connect { target: &target, port: 443 }, TlsInspection::Available);
            if d.verdict == Verdict::Block {
                out.push(Warning {
                    entry: format!("{prefix}.credentials[{i}].hosts[{j}]"),
                    message: format!(
                        "`{}` is refused by this policy ({}), so the credential `{}` is never used there",
                        name.as_str(),
                        d.reason,
                        credential.name
                    ),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn allow_cover_lists_boundary_prefixes() {
        let v: HashSet<&str> = allow_cover("/a/b").collect();
        assert_eq!(v, HashSet::from(["/", "/a", "/a/"]));
        let v: HashSet<&str> = allow_cover("/a/").collect();
        assert_eq!(v, HashSet::from(["/", "/a"]));
    }
}
