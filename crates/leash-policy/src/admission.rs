//! The policy's whole answer about a request: its [`Decision`] and, for a request that may go on, its
//! [`Treatment`] — which credential leash puts on it, whether its body passes the model API gate, the route it
//! leaves by, whether its tunnel is inspected. The proxy acts on this value and `leash explain` prints it, so the two
//! can disagree on nothing the policy says about a request.

use crate::credentials::Credential;
use crate::decision::{Decision, ProviderTools, Verdict, Via};
use crate::engine::Policy;
use crate::host::Host;
use crate::question::{Question, TlsInspection};
use crate::upstream::UpstreamProxy;

/// The policy's answer: the decision, the tunnel the request travels in, and the treatment of a request it lets on
/// (`None` for a refusal).
#[derive(Debug, Clone)]
pub struct Admission<'p> {
    /// Verdict, reason and matching rule, as [`Policy::decide`] gives them.
    pub decision: Decision,
    /// Whether the request travels in a tunnel, and whether that tunnel is (or, refused, would be) inspected.
    pub tunnel: Tunnel,
    /// What happens to the request between the decision and the upstream; `None` when it is refused.
    pub treatment: Option<Treatment<'p>>,
}

/// What leash does to an allowed request on its way out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Treatment<'p> {
    /// The credential leash puts on requests to the host, in place of the placeholder the sandbox holds.
    pub credential: Option<&'p Credential>,
    /// The model API gate: request bodies to the host are read and their provider-side tools handled as this says.
    pub model_gate: Option<ProviderTools>,
    /// How the request leaves leash.
    pub route: Route<'p>,
}

/// How an allowed request leaves leash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route<'p> {
    /// No upstream proxy: leash resolves the host, checks every address and dials the checked ones.
    Direct,
    /// Through the policy's upstream proxy, which resolves the host (leash never sees its address).
    UpstreamProxy(&'p UpstreamProxy),
    /// Directly although the policy names an upstream proxy: the host is in `upstream_proxy_bypass`.
    Bypass(&'p UpstreamProxy),
}

impl<'p> Route<'p> {
    /// The upstream proxy the request goes through, if it does.
    pub fn through(self) -> Option<&'p UpstreamProxy> {
        match self {
            Route::UpstreamProxy(up) => Some(up),
            Route::Direct | Route::Bypass(_) => None,
        }
    }
}

/// Whether a request travels in a TLS tunnel, and what leash sees of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tunnel {
    /// Plain HTTP (or a DNS lookup): no tunnel.
    None,
    /// A tunnel relayed as it is: leash saw its server name only.
    Spliced,
    /// A tunnel whose TLS leash terminates: every request inside it is decided and treated on its own.
    Inspected,
}

impl Policy {
    /// Decide `question` (as [`Policy::decide`]) and say how a request it lets on is treated.
    pub fn admit(&self, question: &Question<'_>, tls: TlsInspection) -> Admission<'_> {
        let decision = self.decide(question, tls);
        let (host, tunnel) = self.carried(question, &decision, tls);
        let treatment = match decision.verdict {
            Verdict::Block => None,
            _ => Some(self.treatment(host)),
        };
        Admission { decision, tunnel, treatment }
    }

    /// The treatment of an allowed request to `host`.
    pub fn treatment(&self, host: &Host) -> Treatment<'_> {
        let model_gate = self.filters_provider_tools(host).then(|| self.provider_tools());
        Treatment { credential: self.credential_for(host), model_gate, route: self.route(host) }
    }

    /// How an allowed request to `host` leaves leash.
    pub fn route(&self, host: &Host) -> Route<'_> {
        match self.upstream_proxy() {
            None => Route::Direct,
            Some(up) if up.bypasses(host) => Route::Bypass(up),
            Some(up) => Route::UpstreamProxy(up),
        }
    }

    /// The host `question` is about, and the tunnel a request to it travels in.
    fn carried<'q>(&self, question: &Question<'q>, decision: &Decision, tls: TlsInspection) -> (&'q Host, Tunnel) {
        let inspected_if = |verdict: Verdict| match verdict {
            Verdict::Inspect => Tunnel::Inspected,
            _ => Tunnel::Spliced,
        };
        match *question {
            Question::Request(req) if req.via == Via::Tunnel => (req.host, Tunnel::Inspected),
            Question::Request(req) => (req.host, Tunnel::None),
            Question::Connect { target, .. } | Question::ClientHello { target, .. } => {
                (target, inspected_if(decision.verdict))
            }
            // The tunnel to the URL's host as a CONNECT to it is decided.
            Question::Https { host, port, .. } => {
                (host, inspected_if(self.decide(&Question::Connect { target: host, port }, tls).verdict))
            }
            Question::Lookup { host } => (host, Tunnel::None),
        }
    }
}
