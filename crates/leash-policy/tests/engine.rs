//! The policy engine's one integration-test binary: readable helpers here ("this policy, this request, expect this
//! decision"), the cases in the modules below, grouped by what they cover.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test's helpers fail it by panicking")]

use leash_policy::{
    load, parse_absolute_target, parse_authority, ClientHelloFacts, Decision, Format, Policy, Question, Request,
    TlsInspection, Verdict, Via,
};

#[path = "engine/admission.rs"]
mod admission;
#[path = "engine/boundary.rs"]
mod boundary;
#[path = "engine/credentials.rs"]
mod credentials;
#[path = "engine/decisions.rs"]
mod decisions;
#[path = "engine/error_kinds.rs"]
mod error_kinds;
#[path = "engine/exceptions.rs"]
mod exceptions;
#[path = "engine/files.rs"]
mod files;
#[path = "engine/hosts.rs"]
mod hosts;
#[path = "engine/methods.rs"]
mod methods;
#[path = "engine/model_apis.rs"]
mod model_apis;
#[path = "engine/paths.rs"]
mod paths;
#[path = "engine/props.rs"]
mod props;
#[path = "engine/purity.rs"]
mod purity;
#[path = "engine/reachable.rs"]
mod reachable;
#[path = "engine/scale.rs"]
mod scale;
#[path = "engine/services.rs"]
mod services;

/// Load a YAML policy that must be valid.
pub fn policy(yaml: &str) -> Policy {
    load(yaml, Format::Yaml, None)
        .unwrap_or_else(|errors| panic!("policy should load: {}", render_errors(&errors)))
        .policy
}

/// Decide a plain-proxy request (`GET http://host/path`) and render it like `explain`'s first line:
/// `allow rule api.example.com`, `block not-allowed`, or `error bad-host` when the target itself is refused.
pub fn decide(yaml: &str, url: &str) -> String {
    decide_on(&policy(yaml), Via::ForwardProxy, url)
}

/// Decide an inner request of an inspected tunnel.
pub fn decide_inner(yaml: &str, url: &str) -> String {
    decide_on(&policy(yaml), Via::Tunnel, url)
}

pub fn decide_on(policy: &Policy, via: Via, url: &str) -> String {
    decide_method_on(policy, via, "GET", url)
}

/// Decide a request with `method` (plain or inner, as `via` says).
pub fn decide_method_on(policy: &Policy, via: Via, method: &str, url: &str) -> String {
    let target = match parse_absolute_target(url) {
        Ok(t) => t,
        Err(leash_policy::TargetError::Host(_)) => return "error bad-host".to_owned(),
        Err(_) => return "error bad-request".to_owned(),
    };
    let (host, port, path) = (&target.authority.host, target.port(), &target.path);
    let req = Request { via, scheme: target.scheme, host, port, path, method };
    render(&policy.decide(&Question::Request(req), TlsInspection::Available))
}

/// Decide a CONNECT to `authority` (`host:port`).
pub fn connect(yaml: &str, authority: &str) -> String {
    let a = parse_authority(authority).unwrap();
    let port = a.port.unwrap_or(443);
    render(&policy(yaml).decide(&Question::Connect { target: &a.host, port }, TlsInspection::Available))
}

/// Decide a tunnel to `authority` on what its ClientHello showed.
pub fn hello(yaml: &str, authority: &str, facts: ClientHelloFacts<'_>) -> String {
    let a = parse_authority(authority).unwrap();
    let question = Question::ClientHello { target: &a.host, port: a.port.unwrap_or(443), hello: facts };
    render(&policy(yaml).decide(&question, TlsInspection::Available))
}

pub fn render(d: &Decision) -> String {
    let verdict = match d.verdict {
        Verdict::Allow => "allow",
        Verdict::Block => "block",
        Verdict::Inspect => "inspect",
        Verdict::WouldBlock => "would-block",
    };
    match &d.rule {
        Some(rule) => format!("{verdict} {} {rule}", d.reason),
        None => format!("{verdict} {}", d.reason),
    }
}

/// The errors of a policy that must be invalid, each as `line:column entry: message`.
pub fn errors(text: &str, format: Format) -> Vec<String> {
    errors_for(text, format, None)
}

pub fn errors_for(text: &str, format: Format, profile: Option<&str>) -> Vec<String> {
    match load(text, format, profile) {
        Ok(_) => panic!("policy should be refused:\n{text}"),
        Err(errors) => errors
            .iter()
            .map(|e| format!("{}:{} {}: {}", e.line.unwrap_or(0), e.column.unwrap_or(0), e.entry, e.message))
            .collect(),
    }
}

/// The warnings of a valid policy, each as `entry: message`.
pub fn warnings(yaml: &str) -> Vec<String> {
    let loaded = load(yaml, Format::Yaml, None).unwrap_or_else(|e| panic!("{}", render_errors(&e)));
    loaded.warnings.iter().map(|w| w.to_string()).collect()
}

fn render_errors(errors: &[leash_policy::PolicyError]) -> String {
    errors.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n")
}

/// An allowlist of these hosts.
pub fn allowlist(hosts: &[&str]) -> String {
    format!("network:\n  mode: allowlist\n  allowed_hosts: [{}]\n", hosts.join(", "))
}

/// A blocklist of these entries.
pub fn blocklist(entries: &[&str]) -> String {
    format!("network:\n  mode: blocklist\n  blocked_urls: [{}]\n", entries.join(", "))
}
