//! The one entry point of the engine: [`Policy::decide`] answers every [`Question`] the proxy, the DNS stub and
//! `leash explain` ask about a request. The rules that span steps live here and nowhere else: a tunnel that needs
//! TLS inspection is refused where there is none, and an `https://` URL is the tunnel to its host and then, when
//! that tunnel is inspected, the request inside it.

use crate::decision::{ClientHelloFacts, Decision, Request, Scheme, Verdict, Via};
use crate::engine::{Boundary, Policy};
use crate::host::Host;
use crate::path::CanonicalPath;
use crate::reason::Reason;
use crate::url::AbsoluteTarget;

/// Whether the one asking can terminate TLS for a tunnel the policy wants inspected (the proxy has a CA, or not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsInspection {
    /// Such a tunnel is inspected: every request in it is decided on its own.
    Available,
    /// Such a tunnel is refused (`needs-inspection`): spliced, its paths would go undecided.
    Unavailable,
}

/// What is asked about one request, at the step where it is asked.
#[derive(Debug, Clone, Copy)]
pub enum Question<'a> {
    /// An HTTP request: absolute-form to the forward proxy, to a transparent listener, or inside an inspected
    /// tunnel (`via` says which).
    Request(Request<'a>),
    /// A tunnel on its target alone, before its ClientHello (`CONNECT host:port`). `Inspect` when every request in
    /// it must be decided on its own.
    Connect {
        /// The host the tunnel was opened to.
        target: &'a Host,
        /// Its port, checked against `tunnel_ports`.
        port: u16,
    },
    /// A tunnel on its ClientHello: the target it was opened to and what the ClientHello showed. The target's
    /// decision is taken again first, so this question alone decides a tunnel.
    ClientHello {
        /// The host the tunnel was opened to (a transparent listener's: the SNI name).
        target: &'a Host,
        /// Its port.
        port: u16,
        /// What the ClientHello carried.
        hello: ClientHelloFacts<'a>,
    },
    /// An `https://` URL as a whole, as `leash explain` asks it: the tunnel to its host (whose ClientHello names
    /// that host), then, when the tunnel is inspected, the request inside it on its path.
    Https {
        /// The URL's host.
        host: &'a Host,
        /// Its port (443 unless written).
        port: u16,
        /// Its path, canonical.
        path: &'a CanonicalPath,
    },
    /// A name asked of `leash run`'s DNS stub: `block` when no request to it could pass.
    Lookup {
        /// The name asked.
        host: &'a Host,
    },
}

impl<'a> Question<'a> {
    /// The question an absolute URL asks: `https` as a whole ([`Question::Https`]), anything else as a request to
    /// the forward proxy (which refuses schemes it does not proxy).
    pub fn of_url(target: &'a AbsoluteTarget<'_>) -> Question<'a> {
        let (host, port, path) = (&target.authority.host, target.port(), &target.path);
        match target.scheme {
            Scheme::Https => Question::Https { host, port, path },
            scheme => Question::Request(Request { via: Via::ForwardProxy, scheme, host, port, path }),
        }
    }
}

impl Policy {
    /// Decide `question`. The proxy asks at each step of a request, the DNS stub on each lookup, and `leash explain`
    /// once per request; all of them through here, so none can take a decision the others would not.
    ///
    /// Under a boundary ([`Policy::within`]) the boundary decides first and its refusal is the answer; see
    /// [`crate::boundary`].
    pub fn decide(&self, question: &Question<'_>, tls: TlsInspection) -> Decision {
        match self.boundary() {
            Some(boundary) => self.decide_within(boundary, question, tls),
            None => self.decide_own(question, tls),
        }
    }

    /// The decision inside `boundary`: its refusal first, so nothing of the run's (audit mode, an ask-mode answer)
    /// comes before it; then the run's own, inspected where the boundary's path rules want a tunnel read.
    fn decide_within(&self, boundary: &Boundary, question: &Question<'_>, tls: TlsInspection) -> Decision {
        if let Question::Https { host, port, path } = *question {
            // Each step bounded on its own: the tunnel, then (inspected) the request inside it.
            let tunnel = self.decide(&Question::ClientHello { target: host, port, hello: server_name(host) }, tls);
            return match tunnel.verdict {
                Verdict::Inspect => self.decide(
                    &Question::Request(Request { via: Via::Tunnel, scheme: Scheme::Https, host, port, path }),
                    tls,
                ),
                _ => tunnel,
            };
        }
        let outer = boundary.policy.decide_enforced(question, tls);
        if outer.verdict == Verdict::Block {
            // INVARIANT: a boundary's refusal is final: reason `boundary`, which audit mode does not lift and ask mode
            // does not ask about.
            return Decision { verdict: Verdict::Block, reason: Reason::Boundary, rule: outer.rule };
        }
        let inner = self.decide_own(question, tls);
        let tunnel = matches!(question, Question::Connect { .. } | Question::ClientHello { .. });
        match (inner.verdict, outer.verdict) {
            // INVARIANT: a tunnel the boundary reads (its path rules) is read, however the run would have passed it.
            (Verdict::Allow | Verdict::WouldBlock, Verdict::Inspect) if tunnel => {
                inspectable(Decision { verdict: Verdict::Inspect, ..inner }, tls)
            }
            _ => inner,
        }
    }

    /// The decision of this policy alone.
    fn decide_own(&self, question: &Question<'_>, tls: TlsInspection) -> Decision {
        let d = self.decide_enforced(question, tls);
        match d.verdict {
            // INVARIANT: audit mode lets through only what the host and path rules refuse; ports, IP literals, the
            // ClientHello checks and the destination check (after resolution, outside this function) still refuse.
            Verdict::Block if self.audits() && d.reason.is_rule() => self.audited(question, d, tls),
            _ => d,
        }
    }

    /// What audit mode makes of a refusal by the rules: it goes on, `would-block`. A tunnel that would be inspected
    /// were its host allowed (a model API whose tools are filtered, a credential's host, `inspect: all`) is inspected
    /// instead, its requests decided (`would-block`) and treated one by one: audit mode changes what is refused,
    /// never what is stripped from a request or put on it.
    fn audited(&self, question: &Question<'_>, d: Decision, tls: TlsInspection) -> Decision {
        match *question {
            Question::Connect { target, .. } | Question::ClientHello { target, .. }
                if self.inspects_if_allowed(target) =>
            {
                inspectable(Decision { verdict: Verdict::Inspect, ..d }, tls)
            }
            _ => Decision { verdict: Verdict::WouldBlock, ..d },
        }
    }

    /// The decision as an enforcing policy takes it.
    pub(crate) fn decide_enforced(&self, question: &Question<'_>, tls: TlsInspection) -> Decision {
        match *question {
            Question::Request(req) => self.decide_request(&req),
            Question::Connect { target, port } => inspectable(self.decide_connect(target, port), tls),
            Question::ClientHello { target, port, hello } => {
                let d = self.decide_client_hello(target, port, hello);
                // A leaf is issued for a server name; a tunnel with none cannot be inspected.
                let named = matches!(hello, ClientHelloFacts::ServerName(_)) && matches!(target, Host::Name(_));
                inspectable(d, if named { tls } else { TlsInspection::Unavailable })
            }
            Question::Https { host, port, path } => {
                let tunnel =
                    self.decide_enforced(&Question::ClientHello { target: host, port, hello: server_name(host) }, tls);
                match tunnel.verdict {
                    Verdict::Inspect => {
                        self.decide_request(&Request { via: Via::Tunnel, scheme: Scheme::Https, host, port, path })
                    }
                    _ => tunnel,
                }
            }
            Question::Lookup { host } => self.decide_lookup(host),
        }
    }
}

/// The ClientHello a client sends to `host` (`leash explain`'s `https://` URL): its name, none for an address.
fn server_name<'h>(host: &'h Host) -> ClientHelloFacts<'h> {
    match host {
        Host::Name(name) => ClientHelloFacts::ServerName(name.as_str()),
        _ => ClientHelloFacts::NoServerName,
    }
}

/// `d`, or its refusal (`needs-inspection`) when it asks for inspection that `tls` cannot give.
fn inspectable(d: Decision, tls: TlsInspection) -> Decision {
    match (d.verdict, tls) {
        (Verdict::Inspect, TlsInspection::Unavailable) => {
            Decision { verdict: Verdict::Block, reason: Reason::NeedsInspection, rule: d.rule }
        }
        _ => d,
    }
}
