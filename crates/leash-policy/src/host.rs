//! Hosts: one parser for every place a host appears (URL authority, Host header, CONNECT target, SNI, policy
//! entries), so they are compared in one canonical form: lowercase, one trailing dot dropped.
//!
//! Classification: a plain DNS name ([`Host::Name`]), an IPv4 address in exactly dotted-quad spelling
//! ([`Host::Ipv4`]), or any other IP-literal spelling ([`Host::IpLiteral`]: decimal, octal, hex, short forms, a last
//! label all digits or `0x`+hex, IPv6 in brackets, IPv4-mapped IPv6). Anything else odd is a [`HostError`].

use std::fmt;
use std::net::Ipv4Addr;

/// A validated DNS name: lowercase ASCII letters, digits, hyphens and dots, no empty label, no trailing dot,
/// at most 253 bytes, labels at most 63, last label not numeric-looking.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Name(Box<str>);

impl Name {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A host in canonical form.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Host {
    Name(Name),
    /// Exactly `a.b.c.d`, each part decimal 0-255 without leading zeros.
    Ipv4(Ipv4Addr),
    /// Any other IP-literal spelling; holds the canonical (lowercased) text for logs.
    IpLiteral(Box<str>),
}

impl Host {
    /// The canonical text: the name, the dotted quad, or the literal as written (lowercased).
    pub fn as_str(&self) -> std::borrow::Cow<'_, str> {
        todo!()
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
    pub host: Host,
    pub port: Option<u16>,
}

/// Why a host or authority is not acceptable (always reason `bad-host`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    #[error("empty host")]
    Empty,
    #[error("userinfo (`@`) in the authority")]
    Userinfo,
    #[error("percent-encoding in the host")]
    PercentEncoded,
    #[error("non-ASCII character in the host")]
    NonAscii,
    #[error("character `{0}` is not allowed in a host")]
    BadChar(char),
    #[error("empty label in the host")]
    EmptyLabel,
    #[error("host or label too long")]
    TooLong,
    #[error("invalid port")]
    BadPort,
}

/// Parse a bare host (no port): lowercase, drop one trailing dot, classify.
pub fn parse_host(_raw: &str) -> Result<Host, HostError> {
    todo!()
}

/// Parse `host[:port]` / `[v6][:port]`. An empty port (`host:`) is an error.
pub fn parse_authority(_raw: &str) -> Result<Authority, HostError> {
    todo!()
}
