//! `services`: the operator's own services (an MCP gateway, an LLM gateway, the harness's API) that a sandbox
//! reaches through a listener of its own instead of through the proxy. Each entry names where it listens inside the
//! sandbox (a loopback port or a Unix socket path) and where leash relays each connection on the host (`host:port`
//! on the host's loopback or a private address, or a Unix socket path). A `kind: http` service is also decided
//! request by request on its paths, like a proxied request.
//!
//! A service is a gate: its target must not be reachable through the proxy too (the loader refuses a policy where
//! it is), or the agent could talk to the service around the gate.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use crate::decision::{Decision, Verdict};
use crate::path::{canonicalize, CanonicalPath};
use crate::reason::Reason;

/// One `services` entry, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    /// The name audit lines carry (`host` of a `SERVICE` line).
    pub name: Arc<str>,
    /// Where the sandbox reaches it.
    pub listen: ServiceListen,
    /// Where leash relays its connections.
    pub target: ServiceTarget,
    /// Bytes or HTTP requests.
    pub kind: ServiceKind,
}

/// Where a service listens inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ServiceListen {
    /// A TCP port on the sandbox's loopback (`127.0.0.1`), or on `leash proxy`'s listener address.
    Port(u16),
    /// A Unix socket at this absolute path.
    Socket(PathBuf),
}

/// Where leash relays a service's connections, on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServiceTarget {
    /// A TCP address: an IP literal (loopback or private) or a name (`localhost`, a host the operator runs).
    Tcp {
        /// The address or name, as written (a name is resolved when a connection comes).
        host: String,
        /// The port.
        port: u16,
    },
    /// A Unix socket at this absolute path.
    Socket(PathBuf),
}

/// How much of a service's traffic leash reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServiceKind {
    /// Bytes relayed as they are; one audit line per connection.
    Tcp,
    /// HTTP/1.1 requests, each decided on its path and logged; `paths` are the allowed prefixes (canonical, matched
    /// at a `/` boundary like `allowed_urls`), empty for every path.
    Http {
        /// The allowed path prefixes.
        paths: Vec<CanonicalPath>,
    },
}

impl ServiceListen {
    /// How the listener is named in messages: `127.0.0.1:PORT`-style `port 8080`, or the socket's path.
    pub fn shown(&self) -> String {
        match self {
            ServiceListen::Port(port) => format!("port {port}"),
            ServiceListen::Socket(path) => path.display().to_string(),
        }
    }
}

impl ServiceTarget {
    /// `host:port`, or the socket's path.
    pub fn shown(&self) -> String {
        match self {
            ServiceTarget::Tcp { host, port } if host.contains(':') => format!("[{host}]:{port}"),
            ServiceTarget::Tcp { host, port } => format!("{host}:{port}"),
            ServiceTarget::Socket(path) => path.display().to_string(),
        }
    }

    /// The target's IP, when it is written as one.
    pub fn ip(&self) -> Option<IpAddr> {
        match self {
            ServiceTarget::Tcp { host, .. } => host.parse().ok(),
            ServiceTarget::Socket(_) => None,
        }
    }
}

impl Service {
    /// The rule word audit lines carry for this service: `service:NAME`.
    pub fn rule(&self) -> Arc<str> {
        Arc::from(format!("service:{}", self.name))
    }

    /// The decision for a connection to the service: a TCP service lets every connection through; an HTTP one
    /// decides each request instead (see [`Service::decide_request`]).
    pub fn decide_connection(&self) -> Decision {
        Decision { verdict: Verdict::Allow, reason: Reason::Rule, rule: Some(self.rule()) }
    }

    /// The decision for an HTTP request on the service with raw target `path` (`/path?query`): allowed when no
    /// `paths` are listed or one of them admits every reading of the path (as `allowed_urls` prefixes do); a
    /// malformed path is `bad-request`, a dot segment or a spelling a server may read outside the prefix
    /// `ambiguous-path`.
    pub fn decide_request(&self, path: &str) -> Decision {
        let block = |reason| Decision { verdict: Verdict::Block, reason, rule: None };
        let Ok(canonical) = canonicalize(path) else { return block(Reason::BadRequest) };
        let ServiceKind::Http { paths } = &self.kind else { return self.decide_connection() };
        if paths.is_empty() {
            return self.decide_connection();
        }
        let Some(prefix) = admitting(paths, canonical.as_str()) else { return block(Reason::NotAllowed) };
        let every_reading = !canonical.had_dot_segments()
            && canonical.literal_reading().is_none_or(|literal| admitting(paths, literal).is_some());
        if !every_reading {
            return block(Reason::AmbiguousPath);
        }
        let rule = Arc::from(format!("service:{}{}", self.name, prefix.as_str()));
        Decision { verdict: Verdict::Allow, reason: Reason::Rule, rule: Some(rule) }
    }
}

/// The longest prefix in `paths` that admits `path` at a `/` boundary.
fn admitting<'p>(paths: &'p [CanonicalPath], path: &str) -> Option<&'p CanonicalPath> {
    let admits = |prefix: &&CanonicalPath| {
        let key = prefix.as_str();
        path.starts_with(key)
            && (key.ends_with('/') || path.len() == key.len() || path.as_bytes().get(key.len()) == Some(&b'/'))
    };
    paths.iter().filter(admits).max_by_key(|p| p.as_str().len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(paths: &[&str]) -> Service {
        Service {
            name: Arc::from("gw"),
            listen: ServiceListen::Port(8080),
            target: ServiceTarget::Tcp { host: "127.0.0.1".into(), port: 9000 },
            kind: ServiceKind::Http { paths: paths.iter().map(|p| canonicalize(p).unwrap()).collect() },
        }
    }

    #[test]
    fn an_http_service_admits_its_paths_at_a_slash_boundary() {
        let gw = http(&["/mcp", "/v1/tools/"]);
        let allowed = |p: &str| gw.decide_request(p).verdict == Verdict::Allow;
        assert!(allowed("/mcp") && allowed("/mcp/x?y=1") && allowed("/v1/tools/list"));
        assert!(!allowed("/mcpx") && !allowed("/v1/tools") && !allowed("/admin"));
        assert_eq!(gw.decide_request("/mcp/x").rule.as_deref(), Some("service:gw/mcp"));
        assert_eq!(gw.decide_request("/admin").reason, Reason::NotAllowed);
    }

    #[test]
    fn spellings_that_leave_the_prefix_are_refused() {
        let gw = http(&["/mcp"]);
        assert_eq!(gw.decide_request("/mcp/../admin").reason, Reason::NotAllowed);
        assert_eq!(gw.decide_request("/mcp/x/../y").reason, Reason::AmbiguousPath);
        assert_eq!(gw.decide_request("/mcp%2F..%2Fadmin").verdict, Verdict::Block);
        assert_eq!(gw.decide_request("/mcp/%zz").reason, Reason::BadRequest);
    }

    #[test]
    fn without_paths_every_request_is_allowed_and_named() {
        let gw = http(&[]);
        let d = gw.decide_request("/anything");
        assert_eq!((d.verdict, d.rule.as_deref()), (Verdict::Allow, Some("service:gw")));
        assert_eq!(gw.decide_request("/%zz").reason, Reason::BadRequest);
    }
}
