//! The end-of-run summary of `leash run` and `leash docker run`: how many requests the policy refused, where to and
//! why, and the policy's hints under each (`leash_policy::hints`), on standard error once the command has ended and
//! the audit log is complete. Nothing is printed when nothing was refused. `leash explain` prints the same hints under
//! a refusal ([`explain_hint_lines`]).
//!
//! What the command asked for is printed with everything but printable ASCII escaped: a host or path is the
//! sandboxed command's text, and must not drive (or, with bidirectional controls, disguise) the reader's terminal.

use std::collections::HashSet;
use std::fmt::Write as _;

use leash_policy::{parse_absolute_target, parse_authority, parse_host, Policy, Reason, Refused, RequestKind, Scheme};
use leash_proxy::audit::{Refusal, Refusals, RefusedDestination};
use leash_proxy::{AuditLog, PolicyHandle};

/// Most destinations the summary names: a screenful. The rest are counted on one line; the audit log has each.
const MAX_NAMED: usize = 20;

/// Prints the summary of the refusals `audit` wrote, with hints from the policy as it is now; nothing with `quiet`
/// (`--quiet`) or when nothing was refused.
pub fn print(audit: &AuditLog, policy: &PolicyHandle, quiet: bool) {
    if quiet {
        return;
    }
    eprint!("{}", render(&audit.refusals(), &policy.current()));
    eprint!("{}", render_noticed(&audit.noticed()));
}

/// What the summary says besides refusals: allowed requests whose upstream failed, by destination and cause, and
/// provider-side tools stripped from model requests, by host and tool (each the most frequent first, a few named);
/// empty when there was neither.
pub fn render_noticed(noticed: &leash_proxy::audit::Noticed) -> String {
    let mut out = String::new();
    let sections = [
        (&noticed.failures, noticed.untold.0, "allowed request(s) failed upstream (the command saw only a failure)"),
        (
            &noticed.stripped,
            noticed.untold.1,
            "provider-side tool(s) stripped from model requests (the model answered without them)",
        ),
    ];
    for (list, untold, what) in sections {
        let total: u64 = list.iter().map(|(_, n)| n).sum::<u64>().saturating_add(untold);
        if total == 0 {
            continue;
        }
        let _ = writeln!(out, "leash: {total} {what}");
        for ((place, why), n) in list.iter().take(MAX_NAMED) {
            let _ = writeln!(out, "  {n} × {place}: {why}");
        }
        let more = list.iter().skip(MAX_NAMED).map(|(_, n)| n).sum::<u64>().saturating_add(untold);
        if more > 0 {
            let _ = writeln!(out, "  and {more} more (the audit log has each)");
        }
    }
    out
}

/// The summary's text, empty when nothing was refused.
pub fn render(refusals: &Refusals, policy: &Policy) -> String {
    let Some(mut out) = header(refusals.total(Refusal::Refused), refusals.total(Refusal::WouldBlock)) else {
        return String::new();
    };
    // A host refused as a tunnel, as plain HTTP and as a lookup would get one hint three times; once is enough.
    let mut hinted = HashSet::new();
    for destination in refusals.destinations.iter().take(MAX_NAMED) {
        out.push_str(&destination_line(destination));
        for hint in hints(policy, destination).into_iter().filter(|hint| hinted.insert(hint.clone())) {
            let _ = writeln!(out, "      hint: {hint}");
        }
    }
    let hidden = refusals.destinations.iter().skip(MAX_NAMED).map(|d| d.count).sum::<u64>();
    let more = hidden.saturating_add(refusals.untold.refused).saturating_add(refusals.untold.would_block);
    if more > 0 {
        let _ = writeln!(out, "  and {more} more to other destinations (the audit log has each)");
    }
    let by_the_rules = |d: &RefusedDestination| d.refusal == Refusal::Refused && d.reason == Reason::NotAllowed;
    if refusals.destinations.iter().any(by_the_rules) {
        out.push_str(LEARN);
    }
    out
}

/// Said under refusals by the rules: how to learn what the command needs instead of guessing entry by entry.
const LEARN: &str = "  to learn a policy from what the command does: run it again with --audit --log audit.jsonl, \
                     then `leash policy suggest audit.jsonl`\n";

/// The hint lines `leash explain` prints under a refusal of `method url`: the request's facts are read again from
/// the command line, as explain read them.
pub fn explain_hint_lines(policy: &Policy, method: &str, url: &str, refusal: &leash_policy::Decision) -> Vec<String> {
    // Refused, or (audit mode) would be: a hint is about what the policy refuses.
    if matches!(refusal.verdict, leash_policy::Verdict::Allow | leash_policy::Verdict::Inspect) {
        return Vec::new();
    }
    let hints = if method.eq_ignore_ascii_case("CONNECT") {
        let Ok(authority) = parse_authority(url) else { return Vec::new() };
        // Explain asks for a port before it decides a tunnel.
        let Some(port) = authority.port else { return Vec::new() };
        let refused =
            Refused { kind: RequestKind::Tunnel, host: &authority.host, port, path: None, reason: refusal.reason };
        policy.hints(&refused)
    } else {
        let Ok(target) = parse_absolute_target(url) else { return Vec::new() };
        // An https URL's port is checked as its tunnel's; its path, when inspected, as a request inside it.
        let kind = if target.scheme == Scheme::Https { RequestKind::Tunnel } else { RequestKind::Http };
        let (host, port, path) = (&target.authority.host, target.port(), Some(target.path.as_str()));
        policy.hints(&Refused { kind, host, port, path, reason: refusal.reason })
    };
    hints.iter().map(|hint| format!("hint: {hint}")).collect()
}

/// `leash: 3 requests refused`, and what an audit mode let through; `None` when there was neither.
fn header(refused: u64, would_block: u64) -> Option<String> {
    let requests = |n| format!("{n} {}", if n == 1 { "request" } else { "requests" });
    let let_through = "would have been refused (audit mode: let through)";
    let line = match (refused, would_block) {
        (0, 0) => return None,
        (n, 0) => format!("{} refused", requests(n)),
        (0, w) => format!("{} {let_through}", requests(w)),
        (n, w) => format!("{} refused, and {w} more {let_through}", requests(n)),
    };
    Some(format!("leash: {line}\n"))
}

/// `  2 × CONNECT api.example.test:443: not-allowed` (`would-block not-allowed` for what an audit mode let through);
/// for HTTP with an example path, its query left out (it can be long, and carry tokens).
fn destination_line(d: &RefusedDestination) -> String {
    let host = printable(&d.host);
    let path = d.example_path.as_deref().map(|path| path.split_once('?').map_or(path, |(path, _query)| path));
    let place = match (d.kind, path) {
        (RequestKind::Lookup, _) => format!("DNS {host}"),
        (RequestKind::Tunnel, _) => format!("CONNECT {host}:{}", d.port),
        (RequestKind::Http, Some(path)) if d.count == 1 => format!("HTTP {host}:{}{}", d.port, printable(path)),
        (RequestKind::Http, Some(path)) => format!("HTTP {host}:{} (e.g. {})", d.port, printable(path)),
        (RequestKind::Http, None) => format!("HTTP {host}:{}", d.port),
    };
    let would = if d.refusal == Refusal::WouldBlock { "would-block " } else { "" };
    format!("  {} × {place}: {would}{}\n", d.count, d.reason)
}

fn hints(policy: &Policy, d: &RefusedDestination) -> Vec<leash_policy::Hint> {
    // A host the engine could not read (`bad-host`) points at no entry of the policy.
    let Ok(host) = parse_host(&d.host) else { return Vec::new() };
    let path = d.example_path.as_deref();
    policy.hints(&Refused { kind: d.kind, host: &host, port: d.port, path, reason: d.reason })
}

/// `text` with everything but printable ASCII escaped (`\u{1b}`, `\n`, `\u{202e}`).
fn printable(text: &str) -> String {
    text.chars().fold(String::with_capacity(text.len()), |mut out, c| {
        match c.is_ascii_graphic() || c == ' ' {
            true => out.push(c),
            false => out.extend(c.escape_default()),
        }
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_failures_and_stripped_tools_are_summed_up_and_nothing_is_said_without_them() {
        let mut noticed = leash_proxy::audit::Noticed::default();
        assert_eq!(render_noticed(&noticed), "");
        noticed.failures = vec![(("git.test:443".into(), "tls".into()), 2)];
        noticed.stripped = vec![(("models.test".into(), "web_search".into()), 1)];
        let said = render_noticed(&noticed);
        assert!(
            said.contains("leash: 2 allowed request(s) failed upstream") && said.contains("  2 × git.test:443: tls\n"),
            "{said}"
        );
        assert!(
            said.contains("provider-side tool(s) stripped") && said.contains("  1 × models.test: web_search\n"),
            "{said}"
        );
    }
    use leash_policy::Reason;
    use leash_proxy::audit::Untold;

    fn refused(
        kind: RequestKind,
        host: &str,
        port: u16,
        path: Option<&str>,
        reason: Reason,
        count: u64,
    ) -> RefusedDestination {
        let example_path = path.map(Into::into);
        RefusedDestination { refusal: Refusal::Refused, kind, host: host.into(), port, reason, count, example_path }
    }

    #[test]
    fn nothing_refused_prints_nothing() {
        let policy = Policy::from_inline(&["example.test".to_owned()], &[]).unwrap();
        assert_eq!(render(&Refusals::default(), &policy), "");
    }

    #[test]
    fn each_destination_gets_a_line_and_each_hint_is_given_once() {
        let policy = Policy::from_inline(&["example.test".to_owned()], &[]).unwrap();
        let refusals = Refusals {
            destinations: vec![
                refused(RequestKind::Tunnel, "api.example.test", 443, None, Reason::NotAllowed, 2),
                refused(RequestKind::Http, "api.example.test", 80, Some("/a?token=secret"), Reason::NotAllowed, 2),
                refused(RequestKind::Http, "example.test", 8080, Some("/x"), Reason::Port, 1),
                refused(RequestKind::Lookup, "evil.test\u{1b}[2J\u{202e}", 53, None, Reason::NotAllowed, 1),
            ],
            untold: Untold::default(),
        };
        assert_eq!(
            render(&refusals, &policy),
            "leash: 6 requests refused\n  \
             2 × CONNECT api.example.test:443: not-allowed\n      \
             hint: did you mean `.example.test`? `example.test` covers only itself, not its subdomains\n  \
             2 × HTTP api.example.test:80 (e.g. /a): not-allowed\n  \
             1 × HTTP example.test:8080/x: port\n      \
             hint: port 8080 is not in `ports` [80, 443], the ports a plain-HTTP request may name\n  \
             1 × DNS evil.test\\u{1b}[2J\\u{202e}: not-allowed\n"
                .to_owned()
                + LEARN
        );
    }

    #[test]
    fn past_a_screenful_the_rest_is_one_count() {
        let policy = Policy::from_inline(&[], &[]).unwrap();
        let destinations = (0..MAX_NAMED + 2)
            .map(|i| refused(RequestKind::Http, &format!("h{i}.test"), 80, Some("/"), Reason::NotAllowed, 3))
            .collect();
        let text = render(&Refusals { destinations, untold: Untold { refused: 4, would_block: 0 } }, &policy);
        assert!(text.starts_with(&format!("leash: {} requests refused\n", (MAX_NAMED as u64 + 2) * 3 + 4)), "{text}");
        assert!(text.ends_with(&format!("  and 10 more to other destinations (the audit log has each)\n{LEARN}")));
        assert_eq!(text.lines().count(), MAX_NAMED + 3);
    }

    #[test]
    fn what_an_audit_mode_let_through_is_told_apart() {
        let policy = Policy::from_inline(&["example.test".to_owned()], &[]).unwrap();
        let port = refused(RequestKind::Tunnel, "example.test", 22, None, Reason::Port, 1);
        let name = refused(RequestKind::Tunnel, "api.example.test", 443, None, Reason::NotAllowed, 2);
        let name = RefusedDestination { refusal: Refusal::WouldBlock, ..name };
        let both = Refusals { destinations: vec![name.clone(), port], untold: Untold::default() };
        let text = render(&both, &policy);
        assert!(
            text.starts_with(
                "leash: 1 request refused, and 2 more would have been refused (audit mode: let through)\n  \
                 2 × CONNECT api.example.test:443: would-block not-allowed\n      \
                 hint: did you mean `.example.test`?"
            ),
            "{text}"
        );
        let only = Refusals { destinations: vec![name], untold: Untold::default() };
        let text = render(&only, &policy);
        assert!(text.starts_with("leash: 2 requests would have been refused (audit mode: let through)\n"), "{text}");
        assert!(!text.contains("to learn a policy"), "nothing was refused by the rules: {text}");
    }
}
