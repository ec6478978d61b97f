//! Hosts: one parser for every place a host appears (URL authority, Host header, CONNECT target, SNI, policy
//! entries), so they are compared in one canonical form: lowercase, one trailing dot dropped.
//!
//! Classification: a plain DNS name ([`Host::Name`]), an IPv4 address in exactly dotted-quad spelling
//! ([`Host::Ipv4`]), or any other IP-literal spelling ([`Host::IpLiteral`]: decimal, octal, hex, short forms, a last
//! label all digits or `0x`+hex, IPv6 in brackets, IPv4-mapped IPv6). Anything else odd is a [`HostError`].
//!
//! A dotted quad with a trailing dot (`1.2.3.4.`) is an [`Host::IpLiteral`], not an [`Host::Ipv4`]: an allowlist
//! admits a listed address "in exactly that spelling", and the trailing-dot rule is for names.

use std::borrow::Cow;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// RFC 1035: a name is at most 253 characters in text form, a label at most 63.
const MAX_NAME_LEN: usize = 253;
const MAX_LABEL_LEN: usize = 63;

/// A validated DNS name: lowercase ASCII letters, digits, hyphens and dots, no empty label, no trailing dot,
/// at most 253 bytes, labels at most 63, last label not numeric-looking.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Name(Box<str>);

impl Name {
    /// The name, lowercase, without a trailing dot.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A host in canonical form.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Host {
    /// A DNS name, validated (see [`Name`]).
    Name(Name),
    /// Exactly `a.b.c.d`, each part decimal 0-255 without leading zeros.
    Ipv4(Ipv4Addr),
    /// Any other IP-literal spelling; holds the canonical (lowercased) text for logs.
    IpLiteral(Box<str>),
}

impl Host {
    /// The canonical text: the name, the dotted quad, or the literal as written (lowercased).
    pub fn as_str(&self) -> Cow<'_, str> {
        match self {
            Host::Name(name) => Cow::Borrowed(name.as_str()),
            Host::Ipv4(ip) => Cow::Owned(ip.to_string()),
            Host::IpLiteral(text) => Cow::Borrowed(text),
        }
    }

    /// The name, if this host is one (IP literals have none).
    pub fn name(&self) -> Option<&Name> {
        match self {
            Host::Name(name) => Some(name),
            _ => None,
        }
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_str())
    }
}

/// A host and an optional port, as in `host`, `host:port`, `[v6]:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authority {
    /// The host, canonical.
    pub host: Host,
    /// The port, if one was written.
    pub port: Option<u16>,
}

/// Why a host or authority is not acceptable (always reason `bad-host`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    /// Nothing where a host was expected.
    #[error("empty host")]
    Empty,
    /// `user@host`: credentials in the authority, which could hide the real host from a reader.
    #[error("userinfo (`@`) in the authority")]
    Userinfo,
    /// `%` in the host: an encoded name that servers and resolvers may decode differently.
    #[error("percent-encoding in the host")]
    PercentEncoded,
    /// A character outside ASCII (write the IDNA form, `xn--...`).
    #[error("non-ASCII character in the host")]
    NonAscii,
    /// A character a host name cannot hold (say `_` or `/`).
    #[error("character `{0}` is not allowed in a host")]
    BadChar(char),
    /// Two dots in a row, or a dot first.
    #[error("empty label in the host")]
    EmptyLabel,
    /// Longer than 253 bytes, or a label longer than 63.
    #[error("host or label too long")]
    TooLong,
    /// A port that is not a decimal number from 0 to 65535.
    #[error("invalid port")]
    BadPort,
}

/// Parse a bare host (no port): lowercase, drop one trailing dot, classify.
pub fn parse_host(raw: &str) -> Result<Host, HostError> {
    if raw.is_empty() {
        return Err(HostError::Empty);
    }
    if raw.contains('@') {
        return Err(HostError::Userinfo);
    }
    if raw.starts_with('[') {
        return parse_bracketed(raw);
    }
    if raw.contains('%') {
        return Err(HostError::PercentEncoded);
    }
    if !raw.is_ascii() {
        return Err(HostError::NonAscii);
    }
    // Most hosts arrive lowercase already; only copy when there is something to lower.
    let lower: Cow<'_, str> = match raw.bytes().any(|b| b.is_ascii_uppercase()) {
        true => Cow::Owned(raw.to_ascii_lowercase()),
        false => Cow::Borrowed(raw),
    };
    let (text, had_dot) = match lower.strip_suffix('.') {
        Some(stripped) => (stripped, true),
        None => (lower.as_ref(), false),
    };
    if let Some(bad) = text.chars().find(|c| !is_host_char(*c)) {
        // INVARIANT: a bare IPv6 literal (`::1`) is still an IP literal, never a name handed to the resolver.
        if bad == ':' && text.parse::<Ipv6Addr>().is_ok() {
            return Ok(Host::IpLiteral(lower.as_ref().into()));
        }
        return Err(HostError::BadChar(bad));
    }
    check_labels(text)?;
    Ok(classify(text, had_dot, &lower))
}

/// Parse `host[:port]` / `[v6][:port]`. An empty port (`host:`) is an error.
pub fn parse_authority(raw: &str) -> Result<Authority, HostError> {
    if raw.is_empty() {
        return Err(HostError::Empty);
    }
    if raw.contains('@') {
        return Err(HostError::Userinfo);
    }
    if raw.starts_with('[') {
        let Some(close) = raw.find(']') else {
            return Err(HostError::BadChar('['));
        };
        let (host, rest) = raw.split_at(close + 1);
        let port = match rest {
            "" => None,
            _ => Some(parse_port(rest.strip_prefix(':').ok_or(HostError::BadPort)?)?),
        };
        return Ok(Authority { host: parse_bracketed(host)?, port });
    }
    match raw.rsplit_once(':') {
        // Several colons: an unbracketed IPv6 literal (no port can be told apart), or garbage.
        Some((host, _)) if host.contains(':') => Ok(Authority { host: parse_host(raw)?, port: None }),
        Some((host, port)) => Ok(Authority { host: parse_host(host)?, port: Some(parse_port(port)?) }),
        None => Ok(Authority { host: parse_host(raw)?, port: None }),
    }
}

/// A port: 1-65535, decimal digits only.
pub fn parse_port(raw: &str) -> Result<u16, HostError> {
    // Five digits hold every port; more would only be leading zeros, which no client sends.
    if raw.is_empty() || raw.len() > 5 || !raw.bytes().all(|b| b.is_ascii_digit()) {
        return Err(HostError::BadPort);
    }
    match raw.parse::<u32>() {
        Ok(port @ 1..=65535) => u16::try_from(port).map_err(|_| HostError::BadPort),
        _ => Err(HostError::BadPort),
    }
}

/// True if the last label makes the name an IP-literal spelling: all digits, or `0x` and hex digits. This is the
/// WHATWG URL rule, and what `inet_aton` would accept.
pub(crate) fn looks_numeric(name: &str) -> bool {
    let last = name.rsplit('.').next().unwrap_or(name);
    if let Some(hex) = last.strip_prefix("0x") {
        return hex.bytes().all(|b| b.is_ascii_hexdigit());
    }
    !last.is_empty() && last.bytes().all(|b| b.is_ascii_digit())
}

/// `[v6]` or `[v6%zone]`, lowercased. Anything bracketed that is not IPv6 (or IPvFuture) is a bad host.
fn parse_bracketed(raw: &str) -> Result<Host, HostError> {
    let inner = raw.strip_prefix('[').and_then(|r| r.strip_suffix(']')).ok_or(HostError::BadChar('['))?;
    if !inner.is_ascii() {
        return Err(HostError::NonAscii);
    }
    let lower = raw.to_ascii_lowercase();
    let addr = inner.split_once('%').map_or(inner, |(addr, _zone)| addr);
    let future = inner.starts_with(['v', 'V']) && inner.contains('.');
    if addr.parse::<Ipv6Addr>().is_ok() || future {
        return Ok(Host::IpLiteral(lower.into()));
    }
    Err(HostError::BadChar('['))
}

fn is_host_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.'
}

fn check_labels(text: &str) -> Result<(), HostError> {
    if text.is_empty() {
        return Err(HostError::Empty);
    }
    if text.len() > MAX_NAME_LEN {
        return Err(HostError::TooLong);
    }
    for label in text.split('.') {
        if label.is_empty() {
            return Err(HostError::EmptyLabel);
        }
        if label.len() > MAX_LABEL_LEN {
            return Err(HostError::TooLong);
        }
    }
    Ok(())
}

/// `text` is lowercase, validated, without its trailing dot; `lower` is the whole lowercased input.
fn classify(text: &str, had_dot: bool, lower: &str) -> Host {
    if !looks_numeric(text) {
        return Host::Name(Name(text.into()));
    }
    match canonical_ipv4(text) {
        Some(ip) if !had_dot => Host::Ipv4(ip),
        _ => Host::IpLiteral(lower.into()),
    }
}

/// Exactly four decimal parts 0-255 without leading zeros; every other spelling is `None`.
pub(crate) fn canonical_ipv4(text: &str) -> Option<Ipv4Addr> {
    let mut octets = [0u8; 4];
    let mut parts = text.split('.');
    for octet in &mut octets {
        let part = parts.next()?;
        let plain = !part.is_empty() && part.len() <= 3 && part.bytes().all(|b| b.is_ascii_digit());
        if !plain || (part.len() > 1 && part.starts_with('0')) {
            return None;
        }
        *octet = part.parse().ok()?;
    }
    match parts.next() {
        Some(_) => None,
        None => Some(Ipv4Addr::from(octets)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(raw: &str) -> bool {
        matches!(parse_host(raw), Ok(Host::IpLiteral(_)))
    }

    #[test]
    fn names_are_lowercased_and_lose_one_trailing_dot() {
        assert_eq!(parse_host("Example.COM.").unwrap().as_str(), "example.com");
        assert_eq!(parse_host("example.com..").unwrap_err(), HostError::EmptyLabel);
        assert_eq!(parse_host("example.cafe").unwrap().as_str(), "example.cafe");
        assert_eq!(parse_host("xn--bcher-kva.de").unwrap().as_str(), "xn--bcher-kva.de");
    }

    #[test]
    fn dotted_quad_is_ipv4_and_every_other_spelling_is_a_literal() {
        assert_eq!(parse_host("127.0.0.1").unwrap(), Host::Ipv4(Ipv4Addr::LOCALHOST));
        for raw in ["127.0.0.01", "0177.0.0.1", "0x7f.0.0.1", "2130706433", "0x7f000001", "127.1", "1.2.3.0x4"] {
            assert!(lit(raw), "{raw}");
        }
        for raw in ["foo.123", "256.1.1.1", "1.2.3.4.5", "1.2.3.4.", "0x", "[::1]", "[::ffff:127.0.0.1]", "::1"] {
            assert!(lit(raw), "{raw}");
        }
        assert!(lit("[fe80::1%25eth0]"));
        assert!(lit("[V1.x]"));
    }

    #[test]
    fn odd_hosts_are_errors() {
        assert_eq!(parse_host("").unwrap_err(), HostError::Empty);
        assert_eq!(parse_host(".").unwrap_err(), HostError::Empty);
        assert_eq!(parse_host("a@b").unwrap_err(), HostError::Userinfo);
        assert_eq!(parse_host("ex%61mple.com").unwrap_err(), HostError::PercentEncoded);
        assert_eq!(parse_host("bücher.de").unwrap_err(), HostError::NonAscii);
        assert_eq!(parse_host("a_b.com").unwrap_err(), HostError::BadChar('_'));
        assert_eq!(parse_host("a..b").unwrap_err(), HostError::EmptyLabel);
        assert_eq!(parse_host(&"a".repeat(64)).unwrap_err(), HostError::TooLong);
        assert_eq!(parse_host(&"a.".repeat(128)).unwrap_err(), HostError::TooLong);
        assert_eq!(parse_host("[evil.com]").unwrap_err(), HostError::BadChar('['));
        assert_eq!(parse_host("a:b").unwrap_err(), HostError::BadChar(':'));
    }

    #[test]
    fn authorities_split_ports() {
        let a = parse_authority("Example.com:8080").unwrap();
        assert_eq!((a.host.as_str().as_ref(), a.port), ("example.com", Some(8080)));
        let a = parse_authority("[::1]:443").unwrap();
        assert_eq!((a.host.as_str().as_ref(), a.port), ("[::1]", Some(443)));
        assert!(matches!(parse_authority("::1").unwrap().host, Host::IpLiteral(_)));
        assert_eq!(parse_authority("example.com").unwrap().port, None);
        for bad in ["example.com:", "example.com:0", "example.com:65536", "example.com:+80", "[::1]x", "[::1]:"] {
            assert_eq!(parse_authority(bad).unwrap_err(), HostError::BadPort, "{bad}");
        }
        assert_eq!(parse_authority("u@example.com").unwrap_err(), HostError::Userinfo);
    }
}
