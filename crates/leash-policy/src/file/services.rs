//! The `services` list of a `network` section: each entry a `name`, a `listen` (a port on the sandbox's loopback, or
//! an absolute Unix socket path), a `target` (`host:port`, or an absolute Unix socket path), and optionally
//! `kind: http` with the `paths` it admits. Then the checks that keep each service a gate: its target not reachable
//! through the proxy as well, no loopback name allowed beside it, no listener clashing with another or with leash's
//! own (the proxy's port, the DNS stub's, the transparent ports).

use std::collections::HashSet;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use super::raw::{Node, Pos, ScalarKind, Value};
use super::validate::{find, join, Checker};
use super::PolicyErrorKind::{self, BadPort, BadValue, DuplicateKey, MissingKey, WrongType};
use crate::decision::Verdict;
use crate::engine::Policy;
use crate::host::Host;
use crate::path::canonicalize;
use crate::question::{Question, TlsInspection};
use crate::services::{Service, ServiceKind, ServiceListen, ServiceTarget};
use crate::spec::Network;

const SERVICE_KEYS: &[&str] = &["name", "listen", "target", "kind", "paths"];

/// Ports inside a sandbox that leash's own listeners take: the proxy's (`leash run`, `leash docker`) and the DNS
/// stub's.
pub const RESERVED_PORTS: [u16; 2] = [3128, 53];

/// Names that mean the host's loopback: allowing one through the proxy beside a service would be a way around it.
const LOOPBACK_NAMES: [&str; 5] =
    ["localhost", "a.localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"];

/// A service as written, with where each of its parts was, for the checks that need the whole section.
pub(super) struct Written {
    pub(super) service: Service,
    pub(super) entry: String,
    /// Where `listen` and `target` are written.
    pub(super) listen_pos: Pos,
    pub(super) target_pos: Pos,
}

impl Checker {
    pub(super) fn services(&mut self, prefix: &str, items: &[Node]) -> Vec<Written> {
        let mut out: Vec<Written> = Vec::with_capacity(items.len());
        let (mut names, mut listens) = (HashSet::new(), HashSet::new());
        for (index, node) in items.iter().enumerate() {
            let entry = format!("{prefix}.services[{index}]");
            let Some(service) = self.service(&entry, node) else { continue };
            let pos_of = |key: &str| match &node.value {
                Value::Map(pairs) => pairs.iter().find(|(k, _)| k.name == key).map_or(node.pos, |(_, v)| v.pos),
                _ => node.pos,
            };
            let (listen_pos, target_pos) = (pos_of("listen"), pos_of("target"));
            if !names.insert(service.name.clone()) {
                let message = format!("a service named `{}` is given twice", service.name);
                self.error(DuplicateKey, &join(&entry, "name"), node.pos, message);
            }
            if !listens.insert(service.listen.clone()) {
                let message = format!("two services listen on {}", service.listen.shown());
                self.error(DuplicateKey, &join(&entry, "listen"), node.pos, message);
            }
            out.push(Written { service, entry, listen_pos, target_pos });
        }
        out
    }

    fn service(&mut self, entry: &str, node: &Node) -> Option<Service> {
        let fields = self.map(entry, node, SERVICE_KEYS)?;
        let before = self.errors.len();
        let required = |c: &mut Self, key: &str| {
            let found = find(&fields, key);
            if found.is_none() {
                c.error(MissingKey, &join(entry, key), node.pos, format!("missing `{key}`"));
            }
            found.map(|(_, n)| n)
        };
        let name = required(self, "name").and_then(|n| self.string(&join(entry, "name"), n)).map(str::to_owned);
        let listen = required(self, "listen").and_then(|n| self.service_listen(&join(entry, "listen"), n));
        let target = required(self, "target").and_then(|n| self.service_target(&join(entry, "target"), n));
        let kind = self.service_kind(entry, find(&fields, "kind").map(|(_, n)| n), find(&fields, "paths"));
        if let Some(name) = &name {
            let word = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !word {
                let message = format!("`{name}` is not a service name; use letters, digits, `-` and `_`");
                self.error(BadValue, &join(entry, "name"), node.pos, message);
            }
        }
        if self.errors.len() > before {
            return None;
        }
        Some(Service { name: Arc::from(name?), listen: listen?, target: target?, kind: kind? })
    }

    fn service_listen(&mut self, entry: &str, node: &Node) -> Option<ServiceListen> {
        match &node.value {
            Value::Scalar(ScalarKind::Int, text) => match text.parse::<u16>() {
                Ok(port) if port > 0 && text.bytes().all(|b| b.is_ascii_digit()) => Some(ServiceListen::Port(port)),
                _ => {
                    self.error(BadPort, entry, node.pos, format!("`{text}` is not a port; ports are 1-65535"));
                    None
                }
            },
            Value::Scalar(ScalarKind::Str, text) => {
                let path = self.socket_path(entry, node.pos, text)?;
                Some(ServiceListen::Socket(path))
            }
            _ => {
                self.expected(entry, node, "a port number or an absolute Unix socket path");
                None
            }
        }
    }

    fn service_target(&mut self, entry: &str, node: &Node) -> Option<ServiceTarget> {
        let text = self.string(entry, node)?;
        if text.starts_with('/') {
            return self.socket_path(entry, node.pos, text).map(ServiceTarget::Socket);
        }
        let bad = |c: &mut Self, why: &str| {
            let message = format!("`{text}` {why}; write `host:port` or an absolute Unix socket path");
            c.error(BadValue, entry, node.pos, message);
            None
        };
        let (host, port) = match text.rsplit_once(':') {
            Some((host, port)) => (host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host), port),
            None => return bad(self, "has no port"),
        };
        let Ok(port) = port.parse::<u16>() else { return bad(self, "has no valid port") };
        if port == 0 || host.is_empty() || host.contains(['/', '@', '?', '#', ' ']) {
            return bad(self, "is not an address");
        }
        if let Ok(ip) = host.parse::<IpAddr>() {
            if !crate::dest::is_internal(ip) {
                return bad(self, "is not on the host's loopback or a private network");
            }
        } else if crate::host::parse_host(host).is_err() || host.contains(':') {
            return bad(self, "names no valid host");
        }
        Some(ServiceTarget::Tcp { host: host.to_ascii_lowercase(), port })
    }

    fn socket_path(&mut self, entry: &str, pos: Pos, text: &str) -> Option<PathBuf> {
        let path = PathBuf::from(text);
        let normal =
            path.components().all(|c| matches!(c, std::path::Component::RootDir | std::path::Component::Normal(_)));
        // sun_path holds 108 bytes with its terminating NUL.
        if !path.is_absolute() || !normal || text.len() > 107 || text.ends_with('/') {
            let message = format!("`{text}` is not an absolute Unix socket path (no `.` or `..`, at most 107 bytes)");
            self.error(BadValue, entry, pos, message);
            return None;
        }
        Some(path)
    }

    fn service_kind(
        &mut self,
        entry: &str,
        kind: Option<&Node>,
        paths: Option<(&super::raw::Key, &Node)>,
    ) -> Option<ServiceKind> {
        let http = match kind {
            None => false,
            Some(node) => match self.string(&join(entry, "kind"), node)? {
                "tcp" => false,
                "http" => true,
                other => {
                    let message = format!("`{other}` is not a service kind; it is `tcp` (the default) or `http`");
                    self.error(BadValue, &join(entry, "kind"), node.pos, message);
                    return None;
                }
            },
        };
        let Some((key, node)) = paths else {
            return Some(if http { ServiceKind::Http { paths: Vec::new() } } else { ServiceKind::Tcp });
        };
        let at = join(entry, "paths");
        if !http {
            self.error(WrongType, &at, key.pos, "`paths` needs `kind: http`: a TCP service has no paths".to_owned());
            return None;
        }
        let items = self.list(&at, node)?;
        let mut out = Vec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            let Some(text) = self.item_string(item, || format!("{at}[{index}]")) else { continue };
            match canonicalize(text) {
                Ok(path) if path.as_str() == text || format!("{}/", path.as_str()) == text => {
                    out.push(path_as_written(text, path))
                }
                _ => {
                    let message = format!(
                        "`{text}` is not a canonical path (write it as `/a/b`, without `..`, `//`, `?` or escapes)"
                    );
                    self.error(super::PolicyErrorKind::BadPath, &format!("{at}[{index}]"), item.pos, message);
                }
            }
        }
        Some(ServiceKind::Http { paths: out })
    }

    /// The checks that keep each service a gate, on the section's compiled rules (those that parsed: with errors
    /// elsewhere in the section, these still report). `host_nodes` are the `allowed_hosts` entries, for positions.
    pub(super) fn services_are_gates(
        &mut self,
        prefix: &str,
        network: &Network,
        written: &[Written],
        host_nodes: &[Node],
    ) {
        if written.is_empty() {
            return;
        }
        let policy = Policy::compile(Network { services: Vec::new(), ..network.clone() });
        for w in written {
            self.listener_free(network, w);
            self.target_not_proxied(&policy, w);
        }
        self.no_loopback_allowed(prefix, &policy, host_nodes);
    }

    fn listener_free(&mut self, network: &Network, w: &Written) {
        let ServiceListen::Port(port) = w.service.listen else { return };
        let taken = if RESERVED_PORTS.contains(&port) {
            Some("leash's own listener (the proxy's 3128, the DNS stub's 53)")
        } else if network.ports.contains(&port) || network.tunnel_ports.contains(&port) {
            Some("a transparent listener (every port in `ports` and `tunnel_ports`)")
        } else {
            None
        };
        if let Some(what) = taken {
            let message = format!("service `{}` listens on port {port}, which is {what}", w.service.name);
            self.error(PolicyErrorKind::ServiceClash, &join(&w.entry, "listen"), w.listen_pos, message);
        }
    }

    /// A target the proxy would also reach makes the service no gate: by its name allowed, or its address exempt
    /// from the internal-destination check.
    fn target_not_proxied(&mut self, policy: &Policy, w: &Written) {
        let ServiceTarget::Tcp { host, .. } = &w.service.target else { return };
        // `localhost` is the loopback wherever it is looked up: the proxy reaches it only where the loopback is
        // exempt from the internal-destination check (an allowlist naming it is refused on its own, below).
        let loopback = || ["127.0.0.1", "::1"].iter().filter_map(|a| a.parse().ok()).any(|ip| covered(policy, ip));
        let why = match host.parse::<IpAddr>() {
            Ok(ip) => covered(policy, ip).then(|| format!("its address {ip} is in `allow_destinations`")),
            Err(_) if host == "localhost" => loopback().then(|| "the loopback is in `allow_destinations`".to_owned()),
            Err(_) => match crate::host::parse_host(host) {
                Ok(parsed) if lookup_allowed(policy, &parsed) => Some(format!("`{host}` is allowed through the proxy")),
                _ => None,
            },
        };
        if let Some(why) = why {
            let message = format!(
                "service `{}`'s target {} would be reachable around it: {why}; take it out of the proxy's rules",
                w.service.name,
                w.service.target.shown()
            );
            self.error(PolicyErrorKind::ServiceClash, &join(&w.entry, "target"), w.target_pos, message);
        }
    }

    fn no_loopback_allowed(&mut self, prefix: &str, policy: &Policy, host_nodes: &[Node]) {
        if policy.mode() != crate::decision::Mode::Allowlist {
            return;
        }
        let hosts = LOOPBACK_NAMES.iter().filter_map(|n| crate::host::parse_host(n).ok());
        for host in hosts {
            let decision = policy.decide(&Question::Lookup { host: &host }, TlsInspection::Available);
            if decision.verdict == Verdict::Block {
                continue;
            }
            // The entry that admits it, where it is written.
            let rule = decision.rule.as_deref().unwrap_or_default();
            let at = host_nodes.iter().enumerate().find(|(_, n)| matches!(&n.value, Value::Scalar(_, t) if t == rule));
            let (entry, pos) = match at {
                Some((index, node)) => (format!("{prefix}.allowed_hosts[{index}]"), node.pos),
                None => (join(prefix, "allowed_hosts"), host_nodes.first().map(|n| n.pos).unwrap_or_default()),
            };
            let message = format!(
                "`{}` is allowed through the proxy while `services` exist: the host's loopback is reached only through \
                 a service; remove it from `allowed_hosts`",
                host.as_str()
            );
            self.error(PolicyErrorKind::ServiceClash, &entry, pos, message);
            return;
        }
    }
}

/// `paths` entries keep a trailing `/` as written (`/v1/` admits only what is below it).
fn path_as_written(text: &str, path: crate::path::CanonicalPath) -> crate::path::CanonicalPath {
    match text.ends_with('/') && !path.as_str().ends_with('/') {
        true => canonicalize(&format!("{}/", path.as_str())).unwrap_or(path),
        false => path,
    }
}

fn covered(policy: &Policy, ip: IpAddr) -> bool {
    policy.allow_destinations().iter().any(|c| c.contains(ip))
}

/// Whether some request to `host` could pass the proxy's rules (the DNS stub's question).
fn lookup_allowed(policy: &Policy, host: &Host) -> bool {
    policy.decide(&Question::Lookup { host }, TlsInspection::Available).verdict != Verdict::Block
}
