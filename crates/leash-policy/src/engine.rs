//! The decision function: a validated [`Policy`] and the facts of one request in, a [`Decision`] out.

use std::net::IpAddr;
use std::sync::Arc;

use crate::host::Host;
use crate::path::CanonicalPath;
use crate::reason::Reason;

/// Default deny (`allowlist`) or default allow (`blocklist`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Allowlist,
    Blocklist,
}

/// A request's scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
    Other,
}

/// How the request reached leash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// Absolute-form request to the forward proxy (ports checked against `ports`).
    ForwardProxy,
    /// An inner request of an inspected tunnel (the port was checked on the CONNECT).
    Tunnel,
}

/// The facts of one HTTP request.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub via: Via,
    pub scheme: Scheme,
    pub host: &'a Host,
    pub port: u16,
    pub path: &'a CanonicalPath,
}

/// What the ClientHello reader found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientHelloFacts<'a> {
    /// Exactly one host_name entry, raw as sent.
    ServerName(&'a str),
    NoServerName,
    /// Several names, or a name that is not a valid host.
    BadServerName,
    /// The ClientHello carries the encrypted_client_hello extension.
    Ech,
    /// Not a TLS ClientHello at all.
    NotTls,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    Block,
    /// Allowed at the tunnel level, but the host carries path rules (or `inspect: all`): every inner request is
    /// decided on its own.
    Inspect,
}

/// A decision: the verdict, the reason word, and the policy entry that matched (as written in the file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub verdict: Verdict,
    pub reason: Reason,
    pub rule: Option<Arc<str>>,
}

/// A validated, compiled policy. Its only constructor is [`crate::file::load`] (and [`Policy::from_inline`]).
#[derive(Debug)]
pub struct Policy {}

impl Policy {
    pub fn mode(&self) -> Mode {
        todo!()
    }

    /// Decide one HTTP request (plain proxy or inside an inspected tunnel).
    pub fn decide_request(&self, _req: &Request<'_>) -> Decision {
        todo!()
    }

    /// Decide a CONNECT on its target alone, before any ClientHello: port, IP literal, and the target name as the
    /// provisional SNI (which the ClientHello must then confirm). `Inspect` when the host carries path rules.
    pub fn decide_connect(&self, _target: &Host, _port: u16) -> Decision {
        todo!()
    }

    /// Decide a tunnel on its ClientHello, after [`Policy::decide_connect`] allowed the target.
    pub fn decide_client_hello(&self, _target: &Host, _port: u16, _hello: ClientHelloFacts<'_>) -> Decision {
        todo!()
    }

    /// The destination check after resolution: `Err(Reason::InternalDestination)` if any address is internal (or
    /// one of `own`, this host's interface and listening addresses) and not inside `allow_destinations`.
    pub fn check_destination(&self, _addrs: &[IpAddr], _own: &[IpAddr]) -> Result<(), Reason> {
        todo!()
    }
}
