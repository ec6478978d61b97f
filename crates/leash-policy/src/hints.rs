//! Hints under a refusal: the likely slip in the policy behind a request a user expected to pass, one sentence each
//! (`leash run`'s end-of-run summary and `leash explain` print them). They read the policy and never change a
//! decision; a refusal with no likely slip behind it gets none.

use std::fmt;
use std::sync::Arc;

use crate::decision::Mode;
use crate::engine::Policy;
use crate::host::{Host, Name};
use crate::path::canonicalize;
use crate::reason::Reason;

/// What kind of request was refused, as far as hints tell them apart: which port list applied to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestKind {
    /// A tunnel (`CONNECT`, or TLS at a transparent listener): its port is checked against `tunnel_ports`.
    Tunnel,
    /// An HTTP request: a plain one's port is checked against `ports` (one inside a tunnel was checked as the tunnel).
    Http,
    /// A name looked up at the sandbox's DNS stub.
    Lookup,
}

/// One refused request, as hints need to know it.
#[derive(Debug, Clone, Copy)]
pub struct Refused<'a> {
    /// Which port list applied to it.
    pub kind: RequestKind,
    /// The host it named.
    pub host: &'a Host,
    /// The port it named.
    pub port: u16,
    /// The path as sent (the query may follow), if the request had one.
    pub path: Option<&'a str>,
    /// Why it was refused.
    pub reason: Reason,
}

/// A likely slip in the policy behind one refusal; its `Display` is one sentence.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Hint {
    /// Allowlist: the host lies under an exact entry (`parent`), which covers only itself.
    SubdomainOfExact {
        /// The exact entry the host lies under.
        parent: Box<str>,
    },
    /// Allowlist: the host is allowed on some paths only (`allowed_urls`, such as `rule`), and not on this one.
    OutsideAllowedPaths {
        /// The host refused.
        host: Box<str>,
        /// One `allowed_urls` entry for it, as written.
        rule: Arc<str>,
    },
    /// Blocklist: a path rule (`rule`, when the path names it) refused this path; other paths on the host pass.
    BlockedPath {
        /// The host refused.
        host: Box<str>,
        /// The `blocked_urls` entry that refused the path, when the path was given.
        rule: Option<Arc<str>>,
    },
    /// The port is not in the list that applies to this kind of request.
    PortNotListed {
        /// The port refused.
        port: u16,
        /// The list that applied.
        list: PortList,
        /// The ports that list holds.
        listed: Vec<u16>,
    },
    /// Neither `ports` nor `tunnel_ports` lists a port, so no request can pass (and no name resolves).
    NoPorts,
    /// Allowlist: the host refused is one of a preset's (`+python`), which the policy does not name.
    InPreset {
        /// The host refused.
        host: Box<str>,
        /// The newest version of the preset, as written in a policy (`+python@1`).
        preset: Box<str>,
    },
}

/// The policy's two port lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortList {
    /// `ports`: the ports a plain-HTTP request may name.
    Ports,
    /// `tunnel_ports`: the ports a CONNECT may name.
    TunnelPorts,
}

impl Policy {
    /// The hints for one refused request, most useful first; empty when the refusal points at no likely slip.
    pub fn hints(&self, refused: &Refused<'_>) -> Vec<Hint> {
        let port = (refused.reason == Reason::Port).then(|| self.port_hint(refused.kind, refused.port));
        let Some(name) = refused.host.name() else { return port.into_iter().collect() };
        let subdomain = self.subdomain_hint(name, refused.reason);
        let path = self.path_hint(name, refused);
        let preset = self.preset_hint(name, refused.reason);
        port.into_iter().chain(subdomain).chain(path).chain(preset).collect()
    }

    /// `files.pythonhosted.org` refused by an allowlist: it is one of `+python`'s hosts, which find it and its
    /// companions (trial and error finds them one refusal at a time).
    fn preset_hint(&self, name: &Name, reason: Reason) -> Option<Hint> {
        if self.mode() != Mode::Allowlist || reason != Reason::NotAllowed {
            return None;
        }
        let host = name.as_str();
        // A host allowed on some paths only was narrowed on purpose: its preset would undo that.
        if self.rules().first_path_rule(host).is_some() {
            return None;
        }
        let preset = crate::file::HOST_PRESETS
            .iter()
            .filter_map(|p| crate::file::newest_preset(p.name))
            .find(|p| p.hosts.iter().any(|(h, _)| *h == host))?;
        Some(Hint::InPreset { host: host.into(), preset: preset.spelled().into() })
    }

    fn port_hint(&self, kind: RequestKind, port: u16) -> Hint {
        let (list, listed) = match kind {
            RequestKind::Tunnel => (PortList::TunnelPorts, self.tunnel_ports()),
            RequestKind::Http => (PortList::Ports, self.ports()),
            // A name is refused for its port only when the policy lists none at all.
            RequestKind::Lookup => return Hint::NoPorts,
        };
        Hint::PortNotListed { port, list, listed: listed.to_vec() }
    }

    /// `api.example.org` refused while `example.org` is listed: the entry meant `.example.org`, most likely.
    fn subdomain_hint(&self, name: &Name, reason: Reason) -> Option<Hint> {
        if self.mode() != Mode::Allowlist || reason != Reason::NotAllowed {
            return None;
        }
        let parent = self.rules().exact_parent(name.as_str())?;
        Some(Hint::SubdomainOfExact { parent: parent.into() })
    }

    /// A refusal that rests on a path rule: the host as a whole is neither allowed (allowlist) nor blocked
    /// (blocklist), so it is the path that decided.
    fn path_hint(&self, name: &Name, refused: &Refused<'_>) -> Option<Hint> {
        let rules = self.rules();
        let host = name.as_str();
        if rules.host_rule(host).is_some() {
            return None;
        }
        match (self.mode(), refused.reason) {
            (Mode::Allowlist, Reason::NotAllowed) => {
                let rule = Arc::clone(rules.first_path_rule(host)?);
                Some(Hint::OutsideAllowedPaths { host: host.into(), rule })
            }
            (Mode::Blocklist, Reason::Rule) => {
                let path = refused.path.and_then(|raw| canonicalize(raw).ok());
                let rule = path.and_then(|path| rules.best(host, path.as_str()).cloned());
                Some(Hint::BlockedPath { host: host.into(), rule })
            }
            _ => None,
        }
    }
}

impl PortList {
    /// The key as written in a policy file.
    pub fn as_str(self) -> &'static str {
        match self {
            PortList::Ports => "ports",
            PortList::TunnelPorts => "tunnel_ports",
        }
    }

    fn governs(self) -> &'static str {
        match self {
            PortList::Ports => "a plain-HTTP request",
            PortList::TunnelPorts => "a CONNECT (https)",
        }
    }
}

impl fmt::Display for Hint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Hint::SubdomainOfExact { parent } => {
                write!(f, "did you mean `.{parent}`? `{parent}` covers only itself, not its subdomains")
            }
            Hint::OutsideAllowedPaths { host, rule } => write!(
                f,
                "`{host}` is allowed on some paths only, by allowed_urls path rules such as `{rule}`; this path is \
                 under none of them"
            ),
            Hint::BlockedPath { host, rule: Some(rule) } => {
                write!(f, "the blocked_urls path rule `{rule}` refused this path; other paths on `{host}` are allowed")
            }
            Hint::BlockedPath { host, rule: None } => {
                write!(f, "a blocked_urls path rule refused this path; other paths on `{host}` are allowed")
            }
            Hint::PortNotListed { port, list, listed } => {
                let listed: Vec<String> = listed.iter().map(u16::to_string).collect();
                write!(
                    f,
                    "port {port} is not in `{}` [{}], the ports {} may name",
                    list.as_str(),
                    listed.join(", "),
                    list.governs()
                )
            }
            Hint::NoPorts => write!(f, "`ports` and `tunnel_ports` are both empty, so no request can pass"),
            Hint::InPreset { host, preset } => write!(
                f,
                "`{host}` is one of the preset {preset}'s hosts: `{preset}` in allowed_hosts adds it and its \
                 companions (`leash policy presets` lists them)"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::{load, Format};
    use crate::host::parse_host;

    fn allowlist(hosts: &[&str]) -> Policy {
        let hosts: Vec<String> = hosts.iter().map(|h| (*h).to_owned()).collect();
        Policy::from_inline(&hosts, &[]).unwrap()
    }

    fn yaml(text: &str) -> Policy {
        load(text, Format::Yaml, None).unwrap().policy
    }

    /// The hint sentences for a refusal of `kind` to `host:port` `path` with `reason`.
    fn hints(
        policy: &Policy,
        kind: RequestKind,
        host: &str,
        port: u16,
        path: Option<&str>,
        reason: Reason,
    ) -> Vec<String> {
        let host = parse_host(host).unwrap();
        let refused = Refused { kind, host: &host, port, path, reason };
        policy.hints(&refused).iter().map(Hint::to_string).collect()
    }

    #[test]
    fn a_subdomain_of_an_exact_entry_suggests_the_dotted_entry() {
        let policy = allowlist(&["example.org"]);
        let expected = "did you mean `.example.org`? `example.org` covers only itself, not its subdomains";
        for kind in [RequestKind::Tunnel, RequestKind::Http, RequestKind::Lookup] {
            let got = hints(&policy, kind, "api.example.org", 443, None, Reason::NotAllowed);
            assert_eq!(got, [expected], "{kind:?}");
        }
        // The nearest listed parent is the one named.
        let policy = allowlist(&["example.org", "eu.example.org"]);
        let got = hints(&policy, RequestKind::Tunnel, "api.eu.example.org", 443, None, Reason::NotAllowed);
        assert_eq!(got, ["did you mean `.eu.example.org`? `eu.example.org` covers only itself, not its subdomains"]);
    }

    #[test]
    fn an_unrelated_host_or_a_dotted_entry_gets_no_subdomain_hint() {
        let policy = allowlist(&["example.org", ".example.net"]);
        assert!(hints(&policy, RequestKind::Tunnel, "evil.test", 443, None, Reason::NotAllowed).is_empty());
        assert!(hints(&policy, RequestKind::Tunnel, "notexample.org", 443, None, Reason::NotAllowed).is_empty());
        // Refused for another reason than the name: the entry is not what stood in the way.
        assert!(hints(&policy, RequestKind::Http, "api.example.org", 80, Some("/"), Reason::Scheme).is_empty());
    }

    #[test]
    fn a_path_outside_the_allowed_urls_names_a_path_rule() {
        let policy =
            yaml("network:\n  mode: allowlist\n  allowed_hosts: [pypi.org]\n  allowed_urls: [github.com/rust-lang/]\n");
        let got = hints(&policy, RequestKind::Http, "github.com", 443, Some("/evil/x"), Reason::NotAllowed);
        assert_eq!(
            got,
            ["`github.com` is allowed on some paths only, by allowed_urls path rules such as `github.com/rust-lang/`; \
              this path is under none of them"]
        );
        // A host listed whole is not allowed "on some paths only".
        let policy = yaml(
            "network:\n  mode: allowlist\n  allowed_hosts: [github.com]\n  allowed_urls: [github.com/rust-lang/]\n",
        );
        assert!(hints(&policy, RequestKind::Http, "github.com", 443, Some("/x"), Reason::NotAllowed).is_empty());
    }

    #[test]
    fn a_blocklist_path_rule_is_named_and_a_host_rule_is_not_a_path_hint() {
        let block = |rules: &[&str]| {
            let rules: Vec<String> = rules.iter().map(|r| (*r).to_owned()).collect();
            Policy::from_inline(&[], &rules).unwrap()
        };
        let policy = block(&["arxiv.org/abs/2401"]);
        let got = hints(&policy, RequestKind::Http, "arxiv.org", 80, Some("/ABS/2401.1?x=1"), Reason::Rule);
        assert_eq!(
            got,
            ["the blocked_urls path rule `arxiv.org/abs/2401` refused this path; other paths on `arxiv.org` are allowed"]
        );
        let got = hints(&policy, RequestKind::Http, "arxiv.org", 80, None, Reason::Rule);
        assert_eq!(got, ["a blocked_urls path rule refused this path; other paths on `arxiv.org` are allowed"]);
        let policy = block(&["arxiv.org", "arxiv.org/abs/2401"]);
        assert!(hints(&policy, RequestKind::Http, "arxiv.org", 80, Some("/abs/2401"), Reason::Rule).is_empty());
    }

    #[test]
    fn a_refused_port_names_the_list_that_applies() {
        let policy = yaml("network:\n  mode: allowlist\n  allowed_hosts: [example.org]\n  ports: [80, 8080]\n");
        let got = hints(&policy, RequestKind::Http, "example.org", 9000, Some("/"), Reason::Port);
        assert_eq!(got, ["port 9000 is not in `ports` [80, 8080], the ports a plain-HTTP request may name"]);
        let got = hints(&policy, RequestKind::Tunnel, "example.org", 8443, None, Reason::Port);
        assert_eq!(got, ["port 8443 is not in `tunnel_ports` [443], the ports a CONNECT (https) may name"]);
        let none =
            yaml("network:\n  mode: allowlist\n  allowed_hosts: [example.org]\n  ports: []\n  tunnel_ports: []\n");
        let got = hints(&none, RequestKind::Lookup, "example.org", 53, None, Reason::Port);
        assert_eq!(got, ["`ports` and `tunnel_ports` are both empty, so no request can pass"]);
        // An IP literal refused for its port still gets the port hint.
        let got = hints(&policy, RequestKind::Tunnel, "10.0.0.1", 22, None, Reason::Port);
        assert_eq!(got, ["port 22 is not in `tunnel_ports` [443], the ports a CONNECT (https) may name"]);
    }

    #[test]
    fn a_host_of_a_preset_names_the_preset_unless_its_paths_were_narrowed_on_purpose() {
        let policy = allowlist(&["pypi.org"]);
        let got = hints(&policy, RequestKind::Tunnel, "files.pythonhosted.org", 443, None, Reason::NotAllowed);
        assert_eq!(
            got,
            ["`files.pythonhosted.org` is one of the preset +python@1's hosts: `+python@1` in allowed_hosts adds it \
              and its companions (`leash policy presets` lists them)"]
        );
        let other = allowlist(&["example.org"]);
        assert!(hints(&other, RequestKind::Tunnel, "upload.pypi.org", 443, None, Reason::NotAllowed).is_empty());
        let narrowed = yaml("network:\n  mode: allowlist\n  allowed_urls: [github.com/rust-lang/]\n");
        let got = hints(&narrowed, RequestKind::Http, "github.com", 443, Some("/x"), Reason::NotAllowed);
        assert!(got.len() == 1 && got[0].contains("some paths only"), "{got:?}");
        let blocklist = Policy::from_inline(&[], &["pypi.org".to_owned()]).unwrap();
        assert!(hints(&blocklist, RequestKind::Tunnel, "pypi.org", 443, None, Reason::Rule).is_empty());
    }

    #[test]
    fn other_reasons_get_no_hint() {
        let policy = allowlist(&["example.org"]);
        for reason in [Reason::IpLiteral, Reason::InternalDestination, Reason::Ech, Reason::AmbiguousPath] {
            assert!(hints(&policy, RequestKind::Tunnel, "api.example.org", 443, None, reason).is_empty(), "{reason}");
        }
    }
}
