//! `upstream_proxy`: a corporate HTTP proxy every allowed request goes out through, except destinations listed in
//! `upstream_proxy_bypass`. leash still decides every request first, exactly as without it; the upstream proxy only
//! carries what leash allowed. What changes is who resolves names: through the proxy, leash never sees the address
//! a name has, so the internal-destination check becomes the upstream proxy's job (docs/policy.md says so, and
//! leash warns at start). With `https://`, leash speaks TLS to the proxy itself; `upstream_proxy_ca` names a PEM
//! file of further CAs for its certificate, read (like every file) by the caller, not here.

use crate::host::{Host, Name};

/// The upstream proxy of a policy, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamProxy {
    /// The proxy's host, as written (a name or an IPv4 address).
    pub host: Host,
    /// The proxy's port (the scheme's default, 80 or 443, when not written).
    pub port: u16,
    /// `https://`: leash speaks TLS to the proxy, verifying its certificate against `host` (a name or the address).
    pub tls: bool,
    /// `upstream_proxy_ca`: a PEM file of CAs trusted for the proxy's certificate besides the system roots (a path
    /// as written, relative ones to leash's working directory). Only with `tls`.
    pub ca_file: Option<String>,
    /// The variable of leash's environment holding `user:password` for the proxy (Basic), if it needs one.
    pub auth_env: Option<String>,
    /// Destinations reached directly (their names resolved and checked by leash as usual).
    pub bypass: Vec<BypassEntry>,
}

/// An `upstream_proxy_bypass` entry: a host, or (with a leading dot) it and every subdomain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BypassEntry {
    /// `host`: that name only.
    Exact(Name),
    /// `.host`: the name and every name under it.
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

    /// The proxy as the policy wrote it: `http://host:port` or `https://host:port`.
    pub fn url(&self) -> String {
        format!("{}://{}", if self.tls { "https" } else { "http" }, self.authority())
    }
}

/// A parsed `upstream_proxy` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProxyUrl {
    pub tls: bool,
    pub host: Host,
    pub port: u16,
}

/// Why `upstream_proxy` is not a proxy URL; its text (the loader's message) names the URL and what to write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ProxyUrlError {
    #[error("`{0}` is not an upstream proxy URL; write `http://HOST:PORT` or `https://HOST:PORT`")]
    Scheme(String),
    #[error("`{0}`: write only `http://HOST:PORT` (credentials come from `upstream_proxy_auth_env`)")]
    MoreThanAnAuthority(String),
    #[error("`{url}`: {error}")]
    BadHost { url: String, error: crate::host::HostError },
    #[error("`{0}` needs a port, e.g. `{0}:3128`")]
    NoPort(String),
    #[error("`{0}`: name the proxy, or write its address as a dotted quad")]
    IpLiteral(String),
}

/// Parse `http://HOST:PORT` or `https://HOST:PORT` (a trailing `/` allowed).
pub(crate) fn parse_proxy_url(text: &str) -> Result<ProxyUrl, ProxyUrlError> {
    let (tls, rest) = match text.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => (false, rest),
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("https") => (true, rest),
        _ => return Err(ProxyUrlError::Scheme(text.to_owned())),
    };
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.contains(['/', '?', '#', '@']) {
        return Err(ProxyUrlError::MoreThanAnAuthority(text.to_owned()));
    }
    let parsed = crate::host::parse_authority(authority)
        .map_err(|error| ProxyUrlError::BadHost { url: text.to_owned(), error })?;
    let port = parsed.port.ok_or_else(|| ProxyUrlError::NoPort(text.to_owned()))?;
    match parsed.host {
        Host::IpLiteral(_) => Err(ProxyUrlError::IpLiteral(text.to_owned())),
        host => Ok(ProxyUrl { tls, host, port }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_is_http_or_https_host_and_port_only() {
        let url = parse_proxy_url("http://proxy.corp.test:3128").unwrap();
        assert_eq!((url.host.as_str().into_owned(), url.port, url.tls), ("proxy.corp.test".to_owned(), 3128, false));
        assert!(parse_proxy_url("http://10.1.2.3:8080/").is_ok());
        let url = parse_proxy_url("HTTPS://proxy:443").unwrap();
        assert_eq!((url.host.as_str().into_owned(), url.port, url.tls), ("proxy".to_owned(), 443, true));
        assert!(parse_proxy_url("https://10.1.2.3:3129/").unwrap().tls);
        assert!(parse_proxy_url("socks5://proxy:1080")
            .unwrap_err()
            .to_string()
            .contains("is not an upstream proxy URL"));
        assert!(parse_proxy_url("http://proxy").unwrap_err().to_string().contains("needs a port"));
        assert!(parse_proxy_url("http://user:pw@proxy:3128")
            .unwrap_err()
            .to_string()
            .contains("upstream_proxy_auth_env"));
        assert!(parse_proxy_url("proxy:3128").unwrap_err().to_string().contains("is not an upstream proxy URL"));
    }
}
