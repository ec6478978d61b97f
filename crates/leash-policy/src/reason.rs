//! The one list of reasons. Their string forms are the audit log's `reason` words; the log, `explain`, the 403 body
//! and the tests all go through [`Reason`], so a word cannot drift between them.

use std::fmt;

/// Why a request was allowed or refused. `as_str` is the published word (README, audit log, `X-Leash-Reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// A rule matched (an allow rule for allows, a block rule for refusals).
    Rule,
    /// No rule matched and the mode's default applied (blocklist: allow).
    Default,
    /// Allowlist mode and no rule admits the host (or path).
    NotAllowed,
    /// The host is an IP literal in some spelling.
    IpLiteral,
    /// The name resolved to an internal address (loopback, private, link-local, ...).
    InternalDestination,
    /// The port is not in `ports` (plain HTTP) or `tunnel_ports` (CONNECT).
    Port,
    /// A scheme the plain proxy does not forward (`GET https://...`).
    Scheme,
    /// The authority is not a plain host name (percent-encoding, userinfo, non-ASCII, ...).
    BadHost,
    /// Host header, CONNECT target, SNI or URL name different hosts.
    HostMismatch,
    /// The ClientHello carries no server name.
    NoSni,
    /// The ClientHello carries several or an invalid server name.
    BadSni,
    /// The tunnel's first bytes are not a TLS ClientHello.
    NotTls,
    /// The ClientHello carries Encrypted Client Hello; its outer name is not the destination.
    Ech,
    /// The host carries path rules and the tunnel cannot be inspected.
    NeedsInspection,
    /// Only an `allowed_urls` prefix would admit the path, and a server may read its spelling as a path outside the
    /// prefix (a dot segment, or an encoded `/` or `\` or `;param` that moves it out when kept as data).
    AmbiguousPath,
    /// The request is malformed (answered 400).
    BadRequest,
    /// The audit log could not be written (answered 503).
    AuditFailed,
    /// The upstream's TLS certificate could not be verified.
    UpstreamTls,
    /// A request to a model API asked for a provider-side tool the policy refuses, or its body could not be checked
    /// (not JSON, compressed, too large, or sent where leash does not read it).
    ProviderTools,
    /// Provider-side tools were removed from a request to a model API.
    ProviderToolsStripped,
    /// A plain-HTTP request to a host a credential belongs to: credentials never travel in clear.
    CredentialPlaintext,
    /// A credential's placeholder or real value in a request to a host it does not belong to: the trace of an
    /// exfiltration attempt.
    CredentialLeak,
    /// Ask mode: a person allowed it (once, for the run, or always), over the terminal or the control socket.
    Approved,
    /// Ask mode: a person refused it; the host stays refused for the rest of the run.
    Denied,
    /// Ask mode: nobody answered in time; the host stays refused for the rest of the run.
    AskTimeout,
    /// Ask mode: a lookup of a name no rule admits is answered, because the request that follows is held and asked.
    Ask,
    /// The operator's boundary (`--boundary`) refuses it, whatever the run's own policy says: no run policy, audit
    /// mode or ask-mode answer lifts it.
    Boundary,
}

impl Reason {
    /// Every reason, in the order the README lists them.
    pub const ALL: [Reason; 27] = [
        Reason::Rule,
        Reason::Default,
        Reason::NotAllowed,
        Reason::IpLiteral,
        Reason::InternalDestination,
        Reason::Port,
        Reason::Scheme,
        Reason::BadHost,
        Reason::HostMismatch,
        Reason::NoSni,
        Reason::BadSni,
        Reason::NotTls,
        Reason::Ech,
        Reason::NeedsInspection,
        Reason::AmbiguousPath,
        Reason::BadRequest,
        Reason::AuditFailed,
        Reason::UpstreamTls,
        Reason::ProviderTools,
        Reason::ProviderToolsStripped,
        Reason::CredentialPlaintext,
        Reason::CredentialLeak,
        Reason::Approved,
        Reason::Denied,
        Reason::AskTimeout,
        Reason::Ask,
        Reason::Boundary,
    ];

    /// The published word for this reason.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Rule => "rule",
            Reason::Default => "default",
            Reason::NotAllowed => "not-allowed",
            Reason::IpLiteral => "ip-literal",
            Reason::InternalDestination => "internal-destination",
            Reason::Port => "port",
            Reason::Scheme => "scheme",
            Reason::BadHost => "bad-host",
            Reason::HostMismatch => "host-mismatch",
            Reason::NoSni => "no-sni",
            Reason::BadSni => "bad-sni",
            Reason::NotTls => "not-tls",
            Reason::Ech => "ech",
            Reason::NeedsInspection => "needs-inspection",
            Reason::AmbiguousPath => "ambiguous-path",
            Reason::BadRequest => "bad-request",
            Reason::AuditFailed => "audit-failed",
            Reason::UpstreamTls => "upstream-tls",
            Reason::ProviderTools => "provider-tools",
            Reason::ProviderToolsStripped => "provider-tools-stripped",
            Reason::CredentialPlaintext => "credential-plaintext",
            Reason::CredentialLeak => "credential-leak",
            Reason::Approved => "approved",
            Reason::Denied => "denied",
            Reason::AskTimeout => "ask-timeout",
            Reason::Ask => "ask",
            Reason::Boundary => "boundary",
        }
    }

    /// A refusal by the host and path rules themselves (the one audit mode lets through), as opposed to the port,
    /// the address, the request's shape or the destination.
    pub fn is_rule(self) -> bool {
        matches!(self, Reason::NotAllowed | Reason::Rule | Reason::AmbiguousPath)
    }

    /// One line on what the reason means, for `explain` and the README.
    pub fn describe(self) -> &'static str {
        match self {
            Reason::Rule => "a rule of the policy matched",
            Reason::Default => "no rule matched; the blocklist allows by default",
            Reason::NotAllowed => "the allowlist does not admit this host or path",
            Reason::IpLiteral => "IP addresses are refused; name hosts instead",
            Reason::InternalDestination => "the name resolves to an internal address",
            Reason::Port => "the port is not permitted by the policy",
            Reason::Scheme => "this scheme is not forwarded by the plain proxy; use CONNECT for https",
            Reason::BadHost => "the host is not a plain DNS name",
            Reason::HostMismatch => "the request names two different hosts",
            Reason::NoSni => "the TLS ClientHello names no server",
            Reason::BadSni => "the TLS ClientHello names several or an invalid server name",
            Reason::NotTls => "the tunnel does not start with a TLS ClientHello",
            Reason::Ech => "Encrypted Client Hello hides the real destination",
            Reason::NeedsInspection => "the host carries path rules, which need TLS inspection",
            Reason::AmbiguousPath => {
                "only a path prefix admits this request, and a server may read its spelling as a path outside the \
                 prefix (a dot segment, or an encoded / or \\ or a ;param); send the plain spelling"
            }
            Reason::BadRequest => "the request is malformed",
            Reason::AuditFailed => "the audit log could not be written",
            Reason::UpstreamTls => "the upstream's TLS certificate could not be verified",
            Reason::ProviderTools => {
                "the model API request asks for a provider-side tool the policy refuses, or carries a body leash \
                 cannot check for one"
            }
            Reason::ProviderToolsStripped => "provider-side tools were removed from the model API request",
            Reason::CredentialPlaintext => {
                "a credential belongs to this host, and credentials never travel over plain HTTP; use https"
            }
            Reason::CredentialLeak => {
                "the request carries a credential (its placeholder or its value) to a host it does not belong to"
            }
            Reason::Approved => "ask mode: a person allowed this host",
            Reason::Denied => "ask mode: a person refused this host for the rest of the run",
            Reason::AskTimeout => "ask mode: nobody answered in time; the host is refused for the rest of the run",
            Reason::Ask => "ask mode: the name is answered; the request that follows is held until a person answers",
            Reason::Boundary => "the boundary the operator set refuses this; no run policy can allow it",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn words_are_unique_lowercase_and_hyphenated() {
        let words: HashSet<_> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(words.len(), Reason::ALL.len());
        for w in words {
            assert!(w.bytes().all(|b| b.is_ascii_lowercase() || b == b'-'), "{w}");
        }
    }
}
