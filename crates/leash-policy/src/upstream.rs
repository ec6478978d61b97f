//! `upstream_proxy`: a corporate HTTP proxy every allowed request goes out through, except destinations listed in
//! `upstream_proxy_bypass`. leash still decides every request first, exactly as without it; the upstream proxy only
//! carries what leash allowed. What changes is who resolves names: through the proxy, leash never sees the address
//! a name has, so the internal-destination check becomes the upstream proxy's job (docs/policy.md says so, and
//! leash warns at start).

use crate::host::{Host, Name};

/// The upstream proxy of a policy, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamProxy {
    /// The proxy's host, as written (a name or an IPv4 address).
    pub host: Host,
    pub port: u16,
    /// The variable of leash's environment holding `user:password` for the proxy (Basic), if it needs one.
    pub auth_env: Option<String>,
    /// Destinations reached directly (their names resolved and checked by leash as usual).
    pub bypass: Vec<BypassEntry>,
}

/// An `upstream_proxy_bypass` entry: a host, or (with a leading dot) it and every subdomain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BypassEntry {
    Exact(Name),
    Subtree(Name),
}

impl UpstreamProxy {
    /// Whether a request to `host` goes out directly instead of through the proxy.
    pub fn bypasses(&self, host: &Host) -> bool {
        let Some(name) = host.name() else { return false };
        let name = name.as_str();
        self.bypass.iter().any(|entry| match entry {
            BypassEntry::Exact(n) => n.as_str() == name,
            BypassEntry::Subtree(n) => {
                name == n.as_str() || name.strip_suffix(n.as_str()).is_some_and(|head| head.ends_with('.'))
            }
        })
    }

    /// `host:port` as a request line or an error names the proxy.
    pub fn authority(&self) -> String {
        format!("{}:{}", self.host.as_str(), self.port)
    }
}

/// Parse `http://HOST:PORT` (a trailing `/` allowed). Err says what is wrong, for the loader's message.
pub(crate) fn parse_proxy_url(text: &str) -> Result<(Host, u16), String> {
    let rest = match text.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => rest,
        Some((scheme, _)) if scheme.eq_ignore_ascii_case("https") => {
            return Err(format!("`{text}`: an https:// upstream proxy is not supported yet; use http://"))
        }
        _ => return Err(format!("`{text}` is not an upstream proxy URL; write `http://HOST:PORT`")),
    };
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.contains(['/', '?', '#', '@']) {
        let why = "write only `http://HOST:PORT` (credentials come from `upstream_proxy_auth_env`)";
        return Err(format!("`{text}`: {why}"));
    }
    let parsed = crate::host::parse_authority(authority).map_err(|e| format!("`{text}`: {e}"))?;
    let port = parsed.port.ok_or_else(|| format!("`{text}` needs a port, e.g. `{text}:3128`"))?;
    match parsed.host {
        Host::IpLiteral(_) => Err(format!("`{text}`: name the proxy, or write its address as a dotted quad")),
        host => Ok((host, port)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_is_http_host_and_port_only() {
        let (host, port) = parse_proxy_url("http://proxy.corp.test:3128").unwrap();
        assert_eq!((host.as_str().into_owned(), port), ("proxy.corp.test".to_owned(), 3128));
        assert!(parse_proxy_url("http://10.1.2.3:8080/").is_ok());
        assert!(parse_proxy_url("https://proxy:443").unwrap_err().contains("not supported yet"));
        assert!(parse_proxy_url("http://proxy").unwrap_err().contains("needs a port"));
        assert!(parse_proxy_url("http://user:pw@proxy:3128").unwrap_err().contains("upstream_proxy_auth_env"));
        assert!(parse_proxy_url("proxy:3128").unwrap_err().contains("is not an upstream proxy URL"));
    }
}
