//! `leash explain`: the decision the proxy would take for one request, with the reason in plain words, and what it
//! would do to the request. Both come from the one value the proxy acts on too ([`Policy::admit`]: the decision and
//! the [`leash_policy::Treatment`]); this module only puts it into words.

use leash_policy::{
    parse_absolute_target, parse_authority, Admission, CanonicalPath, Decision, Host, Policy, ProviderTools, Question,
    Reason, Route, Scheme, Service, ServiceKind, TargetError, TlsInspection, Tunnel, Verdict,
};

use crate::cli::ExplainArgs;
use crate::exit::{Exit, Failure};
use crate::policy_file::load_file;

pub fn run(args: &ExplainArgs) -> Result<Exit, Failure> {
    let (method, url) = match args.request.as_slice() {
        [url] => ("GET", url.as_str()),
        [method, url] => (method.as_str(), url.as_str()),
        _ => return Err(usage("give [METHOD] URL")),
    };
    // Exit 1 means "refused", so a policy that does not load (invalid, unknown profile) is 2, like a usage error:
    // a script asking `explain` must never read a broken policy as a refusal.
    let policy = match (&args.policy, &args.task) {
        (Some(path), _) => load_file(path, args.profile.as_deref()).map(|l| l.policy),
        (None, Some(task)) => crate::policy_file::load_task(task).map(|(l, _)| l.policy),
        (None, None) => crate::policy_file::inline(&args.allow, &args.block),
    }
    .map_err(|f| f.with_exit(Exit::Usage))?;
    let policy = crate::policy_file::bounded(policy, args.boundary.as_deref())?;
    let explained = match service_asked(&policy, url) {
        Some((service, path)) => explain_service(service, method, path),
        None if method.eq_ignore_ascii_case("CONNECT") => explain_connect(&policy, url),
        None => explain_url(&policy, method, url),
    };
    match explained {
        Ok(mut e) => {
            e.lines.extend(crate::shared::summary::explain_hint_lines(&policy, method, url, &e.decision));
            Ok(print(&e))
        }
        Err(msg) => Err(usage(&msg)),
    }
}

/// The service a URL reaches and the path asked of it: `service:NAME[/path]`, or `http://localhost:PORT/path` (or
/// `127.0.0.1`) where a service listens on PORT inside the sandbox.
fn service_asked<'p, 'u>(policy: &'p Policy, url: &'u str) -> Option<(&'p Service, &'u str)> {
    if let Some(rest) = url.strip_prefix("service:") {
        let (name, path) = rest.find('/').map_or((rest, "/"), |i| rest.split_at(i));
        return policy.services().iter().find(|s| &*s.name == name).map(|s| (s, path));
    }
    let target = parse_absolute_target(url).ok()?;
    let loopback = matches!(target.authority.host.as_str().as_ref(), "localhost" | "127.0.0.1");
    let service = policy.service_on_port(target.port()).filter(|_| loopback && target.scheme == Scheme::Http)?;
    Some((service, target.path_and_query))
}

/// A request on one of the policy's services, decided by the service alone.
fn explain_service(service: &Service, method: &str, path: &str) -> Result<Explained, String> {
    let decision = match service.kind {
        ServiceKind::Tcp => service.decide_connection(),
        ServiceKind::Http { .. } => service.decide_request(path),
    };
    let what = match &service.kind {
        ServiceKind::Tcp => {
            "a TCP service: every connection is relayed and logged (method SERVICE); leash reads no request".to_owned()
        }
        ServiceKind::Http { paths } if paths.is_empty() => {
            "an HTTP service: every path is allowed, each request logged".to_owned()
        }
        ServiceKind::Http { paths } => {
            let paths: Vec<&str> = paths.iter().map(|p| p.as_str()).collect();
            format!(
                "an HTTP service allowing only {}; `{method} {path}` is decided on its canonical path",
                paths.join(" ")
            )
        }
    };
    let lines = vec![
        format!(
            "service `{}`: listens on {} in the sandbox, relayed to {} on the host, outside the proxy's rules",
            service.name,
            service.listen.shown(),
            service.target.shown()
        ),
        what,
    ];
    Ok(Explained { decision, lines })
}

/// A decision and the sentences that explain it.
struct Explained {
    decision: Decision,
    lines: Vec<String>,
}

fn explain_connect(policy: &Policy, target: &str) -> Result<Explained, String> {
    let authority = match parse_authority(target) {
        Ok(a) => a,
        Err(e) => return Ok(refused(Reason::BadHost, format!("`{target}` is not a host:port ({e})"))),
    };
    let port = authority.port.ok_or_else(|| format!("`{target}` needs a port, e.g. `{target}:443`"))?;
    if let Some(service) = policy.service_at(&authority.host, port) {
        let mut e = explain_service(service, "CONNECT", "/")?;
        e.decision = service.decide_connection();
        e.lines.insert(0, format!("CONNECT {target}: the sandbox's loopback port of service `{}`: the tunnel is a connection to the service, as by its port", service.name));
        return Ok(e);
    }
    let admission = policy.admit(&Question::Connect { target: &authority.host, port }, TLS);
    let mut lines = vec![format!(
        "CONNECT {target}: decided on the CONNECT target, then on the TLS server name (SNI), which must name the same host"
    )];
    lines.extend(after_decision(policy, &admission, &authority.host));
    beside_the_entry(&mut lines, exception_line(policy, &admission.decision, &authority.host, None));
    lines.extend(model_api_line(&admission, &authority.host));
    lines.extend(upstream_line(&admission, &authority.host));
    Ok(Explained { decision: admission.decision, lines })
}

fn explain_url(policy: &Policy, method: &str, url: &str) -> Result<Explained, String> {
    let target = match parse_absolute_target(url) {
        Ok(t) => t,
        Err(TargetError::NotAbsolute) => return Err(format!("`{url}` is not an absolute URL (`http://host/path`)")),
        Err(TargetError::Host(e)) => return Ok(refused(Reason::BadHost, format!("the host of `{url}`: {e}"))),
        Err(TargetError::Path(e)) => return Ok(refused(Reason::BadRequest, format!("the path of `{url}`: {e}"))),
    };
    let (host, port, path) = (&target.authority.host, target.port(), target.path.as_str());
    let admission = policy.admit(&Question::of_request(method, &target), TLS);
    let how = match (target.scheme, admission.tunnel) {
        (Scheme::Https, Tunnel::Inspected) => {
            format!("https: `{host}` is TLS-inspected; decided on method `{method}` and canonical path `{path}`")
        }
        (Scheme::Https, _) => format!(
            "https: the tunnel to `{host}:{port}` is decided on its TLS server name; methods and paths inside it are \
             not seen"
        ),
        _ => format!("http: decided on method `{method}`, host `{host}`, port {port}, canonical path `{path}`"),
    };
    let mut lines = vec![how];
    lines.extend(after_decision(policy, &admission, host));
    lines.extend(method_line(policy, &admission.decision, method));
    // A spliced tunnel is decided on its name alone; plain HTTP and an inspected tunnel's request on the path too.
    let on_path = (target.scheme != Scheme::Https || admission.tunnel == Tunnel::Inspected).then_some(&target.path);
    beside_the_entry(&mut lines, exception_line(policy, &admission.decision, host, on_path));
    lines.extend(credential_line(&admission));
    lines.extend(upstream_line(&admission, host));
    lines.extend(model_api_line(&admission, host));
    Ok(Explained { decision: admission.decision, lines })
}

/// What the proxy can do with a tunnel that needs inspection: this build terminates TLS for such hosts (else they
/// are refused with `needs-inspection`, and the answer here says so).
const TLS: TlsInspection =
    if leash_proxy::TLS_INSPECTION { TlsInspection::Available } else { TlsInspection::Unavailable };

fn after_decision(policy: &Policy, admission: &Admission<'_>, host: &Host) -> Vec<String> {
    let d = &admission.decision;
    let mut lines = vec![format!("{}: {}", d.reason, d.reason.describe())];
    match (&d.rule, policy.boundary()) {
        (Some(rule), Some(b)) if d.reason == Reason::Boundary => {
            lines.push(format!("matching entry of the boundary {}: `{rule}`", b.label()))
        }
        (Some(rule), _) => lines.push(format!("matching entry: `{rule}`")),
        (None, _) => {}
    }
    lines.extend(boundary_line(policy, d));
    if d.verdict == Verdict::WouldBlock {
        lines.push("audit mode: the policy would refuse this; it is let through and logged as would-block".to_owned());
    }
    if policy.may_ask(d) {
        lines.push(ASK_LINE.to_owned());
    }
    if d.verdict == Verdict::Block && policy.refusals() == leash_policy::Refusals::AsNotFound {
        lines.push(UNANNOUNCED_LINE.to_owned());
    }
    // leash itself resolves the host when no upstream proxy does.
    if admission.treatment.is_some_and(|t| t.route.through().is_none()) {
        lines.push(format!(
            "then: leash resolves `{host}` once and refuses it (internal-destination) if any address is loopback, \
             private, link-local, CGNAT or otherwise internal and not inside allow_destinations"
        ));
    }
    lines
}

/// `line` right under the line naming the matching entry (or last, when none is named).
fn beside_the_entry(lines: &mut Vec<String>, line: Option<String>) {
    let Some(line) = line else { return };
    let at = lines.iter().position(|l| l.starts_with("matching entry:")).map_or(lines.len(), |i| i + 1);
    lines.insert(at, line);
}

/// When an exception decided (a rule of the other kind than the mode's): the entry it is cut out of.
fn exception_line(policy: &Policy, d: &Decision, host: &Host, path: Option<&CanonicalPath>) -> Option<String> {
    let o = policy.overruled(host, path)?;
    let (done, other) = if o.allows { ("allowed", "blocked") } else { ("refused", "allowed") };
    if o.on_some_paths {
        return Some(format!(
            "`{}` is an exception inside the {other} `{}`: the paths it names are {done}, so the tunnel is inspected \
             and each request decided on its path",
            o.exception, o.inside
        ));
    }
    (d.rule.as_deref() == Some(&*o.exception)).then(|| {
        format!("{done} by exception `{}` inside {other} `{}`: the more specific entry decides", o.exception, o.inside)
    })
}

/// Under a boundary, who decided: the boundary, which no run policy can lift (its own `explain --policy` says why),
/// or the run's policy, which the boundary let decide.
fn boundary_line(policy: &Policy, d: &Decision) -> Option<String> {
    let b = policy.boundary()?;
    Some(match d.reason {
        Reason::Boundary => format!(
            "the boundary {} refuses this whatever the run's policy says (`leash explain --policy {}` says why)",
            b.label(),
            b.label()
        ),
        _ => format!("within the boundary {}: it lets this on, and the run's policy decided", b.label()),
    })
}

/// Said under a refusal ask mode holds (a `not-allowed` one, no other): what happens to the request instead.
const ASK_LINE: &str = "held: a person is asked (ask mode): allow once, for the run or always (written to the policy \
                        file), or deny; refused (ask-timeout) if nobody answers in time";

/// Said under a refusal the policy answers as an origin's missing page (`refusals: as-not-found`).
const UNANNOUNCED_LINE: &str = "answered as a missing page (refusals: as-not-found): 404 Not Found to a request, 502 \
                                Bad Gateway to a tunnel, nothing naming leash or the rule; logged as a block";

/// Why a method was refused: what the deciding entry (or `network.methods`) admits, and how names are compared.
fn method_line(policy: &Policy, d: &Decision, method: &str) -> Option<String> {
    if d.reason != Reason::MethodNotAllowed {
        return None;
    }
    let known = leash_policy::Methods::known(method).is_some();
    let spelled = match (known, leash_policy::Methods::known(&method.to_ascii_uppercase())) {
        (false, Some(_)) => " (method names are case-sensitive)",
        (false, None) => " (a method no rule can list: refused wherever methods are listed)",
        _ => "",
    };
    let defaults = policy.default_methods().map(|m| format!("; entries that list none admit `{m}` (network.methods)"));
    Some(format!("`{method}`{spelled} is not among the methods admitted here{}", defaults.unwrap_or_default()))
}

/// Where an allowed request goes out: through the upstream proxy (which then resolves the name), or directly.
fn upstream_line(admission: &Admission<'_>, host: &Host) -> Option<String> {
    Some(match admission.treatment?.route {
        Route::Direct => return None,
        Route::Bypass(_) => format!("goes out directly: `{host}` is in upstream_proxy_bypass"),
        Route::UpstreamProxy(up) => format!(
            "goes out through the upstream proxy `{}`, which resolves `{host}` (leash does not see its address)",
            up.url()
        ),
    })
}

/// What happens to a credential of this host's: put on the request by leash (over plain HTTP only where its entry
/// allows it, else the request was refused).
fn credential_line(admission: &Admission<'_>) -> Option<String> {
    let c = admission.treatment?.credential?;
    Some(match admission.tunnel {
        Tunnel::None => format!("credential `{}`: sent over plain HTTP, as its entry allows (plaintext: true)", c.name),
        _ => {
            let mut places: Vec<String> = c.headers().map(|h| format!("`{h}`")).collect();
            places.extend(c.query.as_ref().map(|q| format!("the query parameter `{q}`")));
            format!(
                "credential `{}`: leash puts its secret in {} in place of the placeholder the client holds in `{}`",
                c.name,
                places.join(" or "),
                c.env
            )
        }
    })
}

/// What happens to a model API's request bodies, when the policy filters its provider-side tools.
fn model_api_line(admission: &Admission<'_>, host: &Host) -> Option<String> {
    let setting = admission.treatment?.model_gate?;
    Some(format!(
        "`{host}` is a model API (provider_tools: {}): each request body is read (JSON, uncompressed, bounded) and \
         its provider-side tools (web search, web fetch, remote MCP, search grounding) are {}",
        setting.as_str(),
        match setting {
            ProviderTools::Refuse => "refused",
            _ => "stripped",
        }
    ))
}

fn refused(reason: Reason, why: String) -> Explained {
    Explained { decision: Decision { verdict: Verdict::Block, reason, rule: None }, lines: vec![why] }
}

fn print(e: &Explained) -> Exit {
    let word = match e.decision.verdict {
        Verdict::Allow => "allow",
        Verdict::Block => "block",
        Verdict::Inspect => "inspect",
        Verdict::WouldBlock => "would-block",
    };
    match &e.decision.rule {
        Some(rule) => println!("{word} {} {rule}", e.decision.reason),
        None => println!("{word} {}", e.decision.reason),
    }
    for line in &e.lines {
        println!("  {line}");
    }
    if e.decision.verdict == Verdict::Block {
        Exit::Refused
    } else {
        Exit::Ok
    }
}

fn usage(msg: &str) -> Failure {
    Failure::new(Exit::Usage, format!("leash explain: {msg}"))
}

#[cfg(test)]
mod tests {
    use leash_policy::{load, Format};

    use super::*;

    fn policy(mode: &str) -> Policy {
        let text = format!("network:\n  mode: {mode}\n  allowed_hosts: [api.example.com]\n  ports: [80]\n");
        load(&text, Format::Yaml, None).unwrap().policy
    }

    #[test]
    fn in_ask_mode_a_request_refused_as_not_allowed_is_explained_as_held_for_a_person() {
        let ask = policy("ask");
        let e = explain_url(&ask, "GET", "http://other.example.com/x").unwrap();
        assert_eq!((e.decision.verdict, e.decision.reason), (Verdict::Block, Reason::NotAllowed));
        assert!(e.lines.iter().any(|l| l == ASK_LINE), "{:?}", e.lines);
        let e = explain_connect(&ask, "other.example.com:443").unwrap();
        assert!(e.lines.iter().any(|l| l == ASK_LINE), "{:?}", e.lines);
        // Only `not-allowed` is asked about: a port refusal stays one, and so does everything in a plain allowlist.
        let port = explain_url(&ask, "GET", "http://api.example.com:8080/").unwrap();
        assert_eq!(port.decision.reason, Reason::Port);
        assert!(!port.lines.iter().any(|l| l == ASK_LINE), "{:?}", port.lines);
        let plain = explain_url(&policy("allowlist"), "GET", "http://other.example.com/x").unwrap();
        assert!(!plain.lines.iter().any(|l| l.starts_with("held")), "{:?}", plain.lines);
    }
}
