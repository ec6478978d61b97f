//! Absolute-form request targets (`http://host[:port]/path?query`), as a forward proxy receives them.

use crate::decision::Scheme;
use crate::host::{parse_authority, Authority, HostError};
use crate::path::{canonicalize, CanonicalPath, PathError};

/// An absolute-form target split into its parts. `path_and_query` is the raw text after the authority (`/` when it
/// was empty), forwarded verbatim; `path` is its canonical form, decided on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AbsoluteTarget<'a> {
    /// `http`, `https` or another scheme.
    pub scheme: Scheme,
    /// The host and port, canonical.
    pub authority: Authority,
    /// The authority exactly as written in the target.
    pub authority_raw: &'a str,
    /// The raw text after the authority, query included, forwarded verbatim.
    pub path_and_query: &'a str,
    /// The path canonicalised, which the rules are compared with.
    pub path: CanonicalPath,
}

impl AbsoluteTarget<'_> {
    /// The port named or the scheme's default (80 for http, 443 for https, 0 for other schemes).
    pub fn port(&self) -> u16 {
        match (self.authority.port, self.scheme) {
            (Some(port), _) => port,
            (None, Scheme::Http) => 80,
            (None, Scheme::Https) => 443,
            (None, Scheme::Other) => 0,
        }
    }
}

/// Why a request target is unacceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// Origin-form (`/path`) or anything without `scheme://`: 400.
    #[error("request target is not in absolute form (`http://host/path`)")]
    NotAbsolute,
    /// 403 `bad-host`.
    #[error("bad host: {0}")]
    Host(#[from] HostError),
    /// 400 `bad-request`.
    #[error("bad path: {0}")]
    Path(#[from] PathError),
}

/// Parse an absolute-form request target. The scheme is matched case-insensitively.
pub fn parse_absolute_target(raw: &str) -> Result<AbsoluteTarget<'_>, TargetError> {
    let (scheme_raw, rest) = raw.split_once("://").ok_or(TargetError::NotAbsolute)?;
    let scheme = parse_scheme(scheme_raw).ok_or(TargetError::NotAbsolute)?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority_raw, remainder) = rest.split_at(end);
    let authority = parse_authority(authority_raw)?;
    let path = canonicalize(remainder)?;
    let path_and_query = if remainder.is_empty() { "/" } else { remainder };
    Ok(AbsoluteTarget { scheme, authority, authority_raw, path_and_query, path })
}

/// A scheme is a letter then letters, digits, `+`, `-`, `.` (RFC 3986 §3.1); anything else is not absolute form.
fn parse_scheme(raw: &str) -> Option<Scheme> {
    let mut chars = raw.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
    if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')) {
        return None;
    }
    let is = |name: &str| raw.eq_ignore_ascii_case(name);
    Some(if is("http") {
        Scheme::Http
    } else if is("https") {
        Scheme::Https
    } else {
        Scheme::Other
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::Host;

    #[test]
    fn splits_scheme_authority_and_path() {
        let t = parse_absolute_target("HTTP://Example.com:8080/a/../b?q=1").unwrap();
        assert_eq!(t.scheme, Scheme::Http);
        assert_eq!(t.authority_raw, "Example.com:8080");
        assert_eq!(t.authority.host.as_str(), "example.com");
        assert_eq!(t.port(), 8080);
        assert_eq!(t.path_and_query, "/a/../b?q=1");
        assert_eq!(t.path.as_str(), "/b");
    }

    #[test]
    fn defaults_and_empty_paths() {
        let t = parse_absolute_target("https://example.com").unwrap();
        assert_eq!((t.scheme, t.port(), t.path_and_query, t.path.as_str()), (Scheme::Https, 443, "/", "/"));
        let t = parse_absolute_target("http://example.com?x=1").unwrap();
        assert_eq!((t.port(), t.path_and_query, t.path.as_str()), (80, "?x=1", "/"));
        let t = parse_absolute_target("ftp://example.com/x").unwrap();
        assert_eq!((t.scheme, t.port()), (Scheme::Other, 0));
    }

    #[test]
    fn refusals() {
        assert_eq!(parse_absolute_target("/path").unwrap_err(), TargetError::NotAbsolute);
        assert_eq!(parse_absolute_target("example.com/x").unwrap_err(), TargetError::NotAbsolute);
        assert_eq!(parse_absolute_target("1http://x/").unwrap_err(), TargetError::NotAbsolute);
        assert_eq!(parse_absolute_target("http://u:p@example.com/").unwrap_err(), HostError::Userinfo.into());
        assert_eq!(parse_absolute_target("http://example.com#x").unwrap_err(), PathError::Fragment.into());
        assert_eq!(parse_absolute_target("http:///x").unwrap_err(), HostError::Empty.into());
        let t = parse_absolute_target("http://[::1]:80/").unwrap();
        assert!(matches!(t.authority.host, Host::IpLiteral(_)));
    }
}
