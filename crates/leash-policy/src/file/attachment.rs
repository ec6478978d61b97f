//! Attachment files (`leash attach --dir`): each says which network namespace to serve, with which policy, where
//! the proxy listens there and what labels its audit lines carry. Read like policy files (YAML, TOML or JSON, every
//! error with its place); nothing here opens the files it names.

use std::collections::BTreeMap;
use std::net::SocketAddrV4;

use super::raw::{Node, ScalarKind, Value};
use super::validate::{find, join, Checker};
use super::PolicyErrorKind::{BadValue, MissingKey, WrongType};
use super::{Format, PolicyError};

const KEYS: &[&str] = &[
    "netns",
    "pid",
    "policy",
    "profile",
    "listen",
    "interfaces",
    "allow_routes",
    "canaries",
    "transparent",
    "labels",
    "ca_cert_out",
];

/// One attachment, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    /// The network namespace to serve.
    pub namespace: Namespace,
    /// The policy file, as written (relative to the attachment file's directory).
    pub policy: String,
    /// The profile of the policy file to use, if not its top level.
    pub profile: Option<String>,
    /// Where the proxy listens inside; `None` for leash's default.
    pub listen: Option<SocketAddrV4>,
    /// The interfaces the namespace may have besides `lo` (a microVM's tap, say); any other refuses it.
    pub interfaces: Vec<String>,
    /// A namespace with a route out (a default or gateway route) is served anyway: something else, a firewall or
    /// a NetworkPolicy, drops what does not go to leash. The interface check stays.
    pub allow_routes: bool,
    /// With `allow_routes`: outside addresses that answer whenever reachable, which the self-test must not reach.
    pub canaries: Vec<std::net::SocketAddr>,
    /// The DNS stub and transparent listeners are bound inside too, for programs that ignore proxy variables.
    pub transparent: bool,
    /// Added to every audit line of this attachment as `labels`.
    pub labels: BTreeMap<String, String>,
    /// Where to write the CA certificate for the namespace's clients, as written.
    pub ca_cert_out: Option<String>,
}

/// Which namespace an attachment serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Namespace {
    /// A namespace file (`/run/netns/NAME`, a bind mount, `/proc/PID/ns/net`), as written.
    Path(String),
    /// A process's namespace.
    Pid(u32),
}

/// Parse and validate an attachment file's text; every error, each with its place.
pub fn load_attachment(text: &str, format: Format) -> Result<Attachment, Vec<PolicyError>> {
    let root = format.parse(text).map_err(|e| vec![e])?;
    let mut c = Checker::default();
    let attachment = c.attachment(&root);
    match attachment {
        Some(a) if c.errors.is_empty() => Ok(a),
        _ => {
            c.errors.sort_by_key(|e| (e.line, e.column));
            Err(c.errors)
        }
    }
}

impl Checker {
    fn attachment(&mut self, root: &Node) -> Option<Attachment> {
        let fields = self.map("", root, KEYS)?;
        let text = |c: &mut Self, key: &str| find(&fields, key).and_then(|(_, n)| c.string(key, n)).map(str::to_owned);
        let namespace = match (text(self, "netns"), find(&fields, "pid")) {
            (Some(path), None) => Some(Namespace::Path(path)),
            (None, Some((_, node))) => self.pid(node).map(Namespace::Pid),
            (Some(_), Some((key, _))) => {
                self.error(BadValue, "pid", key.pos, "give `netns` or `pid`, not both".to_owned());
                None
            }
            (None, None) => {
                self.error(MissingKey, "netns", root.pos, "missing `netns` (a namespace file) or `pid`".to_owned());
                None
            }
        };
        let policy = text(self, "policy");
        if policy.is_none() && find(&fields, "policy").is_none() {
            self.error(MissingKey, "policy", root.pos, "missing `policy` (the policy file)".to_owned());
        }
        let listen = match find(&fields, "listen").and_then(|(_, n)| self.string("listen", n).map(|t| (t, n.pos))) {
            Some((t, pos)) => match t.parse::<SocketAddrV4>() {
                Ok(addr) => Some(addr),
                Err(_) => {
                    self.error(BadValue, "listen", pos, format!("`{t}` is not an IPv4 address and port"));
                    None
                }
            },
            None => None,
        };
        let interfaces = self.words(&fields, "interfaces");
        let canaries = self.canaries(&fields);
        let labels = self.labels(&fields);
        let attachment = Attachment {
            namespace: namespace?,
            policy: policy?,
            profile: text(self, "profile"),
            listen,
            interfaces,
            allow_routes: self.flag("", &fields, "allow_routes"),
            canaries,
            transparent: self.flag("", &fields, "transparent"),
            labels,
            ca_cert_out: text(self, "ca_cert_out"),
        };
        Some(attachment)
    }

    /// `canaries`: `ADDR:PORT` words, IPv4 or IPv6.
    fn canaries(&mut self, fields: &super::validate::Fields<'_>) -> Vec<std::net::SocketAddr> {
        let Some((_, node)) = find(fields, "canaries") else { return Vec::new() };
        let pos = node.pos;
        let mut found = Vec::new();
        for word in self.words(fields, "canaries") {
            match word.parse() {
                Ok(addr) => found.push(addr),
                Err(_) => self.error(BadValue, "canaries", pos, format!("`{word}` is not an address and port")),
            }
        }
        found
    }

    fn pid(&mut self, node: &Node) -> Option<u32> {
        match &node.value {
            Value::Scalar(ScalarKind::Int, t) => match t.parse::<u32>() {
                Ok(pid) if pid > 0 => Some(pid),
                _ => {
                    self.error(BadValue, "pid", node.pos, format!("`{t}` is not a process id"));
                    None
                }
            },
            _ => {
                self.expected("pid", node, "a process id");
                None
            }
        }
    }

    fn words(&mut self, fields: &super::validate::Fields<'_>, key: &str) -> Vec<String> {
        let Some((_, node)) = find(fields, key) else { return Vec::new() };
        let Some(items) = self.list(key, node) else { return Vec::new() };
        let strings = items.iter().enumerate().filter_map(|(i, n)| self.item_string(n, || format!("{key}[{i}]")));
        strings.map(str::to_owned).collect()
    }

    fn labels(&mut self, fields: &super::validate::Fields<'_>) -> BTreeMap<String, String> {
        let Some((_, node)) = find(fields, "labels") else { return BTreeMap::new() };
        let Some(pairs) = self.map("labels", node, &[]) else { return BTreeMap::new() };
        let mut labels = BTreeMap::new();
        for (key, value) in pairs {
            match &value.value {
                Value::Scalar(ScalarKind::Str | ScalarKind::Int | ScalarKind::Bool, t) => {
                    labels.insert(key.name.clone(), t.clone());
                }
                _ => {
                    let message = format!("expected a string, found {}", value.kind_name());
                    self.error(WrongType, &join("labels", &key.name), value.pos, message);
                }
            }
        }
        labels
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attachment_names_a_namespace_a_policy_and_labels() {
        let text = "netns: /run/netns/pod-a\npolicy: agent.yaml\nlisten: 169.254.0.1:3128\ninterfaces: [tap0]\n\
                    labels: {pod: agent-1, namespace: default}\n";
        let a = load_attachment(text, Format::Yaml).unwrap();
        assert_eq!(a.namespace, Namespace::Path("/run/netns/pod-a".into()));
        assert_eq!((a.policy.as_str(), a.listen), ("agent.yaml", Some("169.254.0.1:3128".parse().unwrap())));
        assert_eq!(a.interfaces, ["tap0"]);
        assert_eq!(a.labels.get("pod").map(String::as_str), Some("agent-1"));
        let toml = "pid = 42\npolicy = \"p.toml\"\n[labels]\npod = \"b\"\n";
        assert_eq!(load_attachment(toml, Format::Toml).unwrap().namespace, Namespace::Pid(42));
    }

    #[test]
    fn every_mistake_is_reported() {
        let errs = load_attachment("netns: /x\npid: 3\nlisten: nowhere\ncolour: red\n", Format::Yaml).unwrap_err();
        let messages: Vec<&str> = errs.iter().map(|e| e.message.as_str()).collect();
        assert!(messages.iter().any(|m| m.contains("not both")), "{messages:?}");
        assert!(messages.iter().any(|m| m.contains("not an IPv4 address")), "{messages:?}");
        assert!(messages.iter().any(|m| m.contains("unknown key `colour`")), "{messages:?}");
        assert!(messages.iter().any(|m| m.contains("missing `policy`")), "{messages:?}");
    }

    #[test]
    fn canaries_are_addresses_with_ports_of_either_family() {
        let text = "netns: /run/netns/pod\npolicy: p.yaml\nallow_routes: true\ncanaries: [\"10.0.0.1:443\", \"[2001:db8::1]:80\"]\n";
        let a = load_attachment(text, Format::Yaml).unwrap();
        assert_eq!(a.canaries, ["10.0.0.1:443".parse().unwrap(), "[2001:db8::1]:80".parse().unwrap()]);
        let errs = load_attachment("pid: 3\npolicy: p.yaml\ncanaries: [10.0.0.1]\n", Format::Yaml).unwrap_err();
        assert!(errs.iter().any(|e| e.message.contains("`10.0.0.1` is not an address and port")), "{errs:?}");
    }
}
