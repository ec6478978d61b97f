//! The network rules of Anthropic's sandbox runtime (`srt`, its `~/.srt-settings.json`: `network`) and of Claude
//! Code's settings (`settings.json`: `sandbox.network`, and its `permissions` rules `WebFetch(domain:NAME)`, which
//! its sandbox takes as allowed and denied domains too), read as a leash policy with a line per entry saying what it
//! became. Both are an allowlist: `allowedDomains` lets a name through, `deniedDomains` wins over it.
//!
//! What their entries mean, and how each is read here:
//! - `example.com`: that name only → `allowed_hosts: example.com`.
//! - `*.example.com`: every name under it, **not** `example.com` itself → `.example.com`, which also admits the
//!   name itself (leash has no subdomains-only form): said in the entry's line, and refused when that name is denied.
//! - `NAME:PORT`: that name on that port only. Leash's ports are the policy's, for every host: port 443 or 80 is
//!   read as the name alone (said so); any other port cannot be expressed.
//! - `localhost`, IP literals: leash refuses addresses and the loopback by design (declare a `services:` entry for a
//!   loopback service); cannot be expressed.
//! - a denied entry: drops the allowed entries it covers whole; one already outside every allowed entry is said to
//!   be refused anyway; one inside an allowed wildcard becomes a `blocked_urls` exception (`*.corp.example` but not
//!   `jira.corp.example`), which covers the name and every name under it: where that is more than the runtime's
//!   entry (`jira.corp.example`'s subdomains, `*.x`'s `x`) it refuses more, and says so. Denying the name a `*.`
//!   entry leash widens to (`corp.example` beside `*.corp.example`) cannot be expressed: a block entry on it would
//!   cover the names the wildcard allows. `*` denies everything.
//!
//! Whatever cannot be expressed is not guessed at: every such entry is named in one error and nothing is loaded.
//! Keys other than the two lists (proxy ports, Unix sockets, filesystem rules) are the runtime's own and are listed
//! as left alone.

use super::domains::{allowlist, Entry, Pattern};
use super::foreign::{error, section as child, strings};
use super::raw::{Node, Value};
use super::{PolicyError, PolicyErrorKind};

/// An entry read: the pattern, and a note on what changed on the way.
type Read = Result<(Pattern, Option<&'static str>), String>;

/// One `allowedDomains`/`deniedDomains` entry.
fn pattern(entry: &str) -> Read {
    let entry = entry.trim().to_ascii_lowercase();
    if entry.starts_with('[') || entry.matches(':').count() > 1 {
        return Err("an IP address: leash decides by name and refuses address literals".into());
    }
    let (name, note) = match entry.rsplit_once(':') {
        Some((name, "443" | "80")) => {
            (name.to_owned(), Some("the port dropped: leash's ports are the policy's (80, 443)"))
        }
        Some((_, port)) => return Err(format!("port {port} only: leash's ports are the policy's, for every host")),
        None => (entry.clone(), None),
    };
    let name = name.trim_end_matches('.');
    if name == "localhost" || name.ends_with(".localhost") || name.parse::<std::net::Ipv4Addr>().is_ok() {
        return Err(
            "the loopback or an address: leash refuses those (a loopback service is a `services:` entry)".into()
        );
    }
    match name.strip_prefix("*.") {
        Some(domain) if !domain.is_empty() && !domain.contains('*') => Ok((Pattern::Under(domain.to_owned()), note)),
        None if !name.is_empty() && !name.contains('*') => Ok((Pattern::Exact(name.to_owned()), note)),
        _ => Err("a wildcard leash cannot read (only a leading `*.` is)".into()),
    }
}

/// Reads the settings document `root` as a policy: its text (YAML) and a line per entry.
pub(crate) fn settings_policy(root: &Node) -> Result<super::TaskPolicy, PolicyError> {
    let (network, at) = match (child(root, "sandbox").and_then(|s| child(s, "network")), child(root, "network")) {
        (Some(n), _) => (n, "sandbox.network"),
        (None, Some(n)) => (n, "network"),
        (None, None) => {
            let message = "no `network` (sandbox-runtime) or `sandbox.network` (Claude Code) section".to_owned();
            return Err(error(PolicyErrorKind::MissingKey, "network", message));
        }
    };
    let field = |key: &str| format!("{at}.{key}");
    let mut allowed =
        labelled(&field("allowedDomains"), strings(Some(network), "allowedDomains", &field("allowedDomains"))?);
    let mut denied =
        labelled(&field("deniedDomains"), strings(Some(network), "deniedDomains", &field("deniedDomains"))?);
    let mut became = vec![format!("{at} → mode: allowlist (what allowedDomains does not name is refused)")];
    if let Some(permissions) = child(root, "permissions") {
        allowed.extend(web_fetch_domains(permissions, "allow")?);
        denied.extend(web_fetch_domains(permissions, "deny")?);
    }
    let mut unexpressible = Vec::new();
    let read = |list: &[(String, String)], out: &mut Vec<String>| -> Vec<Entry> {
        let mut ok = Vec::new();
        for (label, entry) in list {
            match pattern(entry) {
                Ok((p, note)) => ok.push((label.clone(), p, note)),
                Err(why) => out.push(format!("{label} `{entry}`: {why}")),
            }
        }
        ok
    };
    let deny_all: Vec<String> = denied.iter().filter(|(_, d)| d.trim() == "*").map(|(l, _)| l.clone()).collect();
    denied.retain(|(_, d)| d.trim() != "*");
    let mut allow = read(&allowed, &mut unexpressible);
    let deny = read(&denied, &mut unexpressible);
    if let Some(label) = deny_all.first() {
        became.push(format!("{label} `*` → every request refused: nothing allowed"));
        allow.clear();
    }
    let text = allowlist(allow, deny, &mut became, &mut unexpressible);
    if !unexpressible.is_empty() {
        let message = format!("cannot be expressed as a leash policy: {}", unexpressible.join("; "));
        return Err(error(PolicyErrorKind::BadValue, at, message));
    }
    for key in keys(network).into_iter().filter(|k| *k != "allowedDomains" && *k != "deniedDomains") {
        became.push(format!("{} → left alone: the runtime's own setting, not a rule on names", field(key)));
    }
    Ok(super::TaskPolicy { text, became })
}

/// Each entry with its place: `FIELD[i]`.
fn labelled(field: &str, entries: Vec<String>) -> Vec<(String, String)> {
    entries.into_iter().enumerate().map(|(i, e)| (format!("{field}[{i}]"), e)).collect()
}

/// Claude Code's `permissions.allow`/`permissions.deny` rules that name a domain, `WebFetch(domain:NAME)`: its
/// sandbox takes them as allowed and denied domains too. Other rules (tools, paths) are not about the network.
fn web_fetch_domains(permissions: &Node, key: &str) -> Result<Vec<(String, String)>, PolicyError> {
    let rules =
        labelled(&format!("permissions.{key}"), strings(Some(permissions), key, &format!("permissions.{key}"))?);
    let domain = |rule: &str| rule.trim().strip_prefix("WebFetch(domain:")?.strip_suffix(')').map(str::to_owned);
    Ok(rules.into_iter().filter_map(|(label, rule)| domain(&rule).map(|d| (label, d))).collect())
}

fn keys(node: &Node) -> Vec<&str> {
    let Value::Map(entries) = &node.value else { return Vec::new() };
    entries.iter().map(|(k, _)| k.name.as_str()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{load, parse_absolute_target, Format, Question, TlsInspection, Verdict};

    fn import(json: &str) -> Result<super::super::TaskPolicy, PolicyError> {
        settings_policy(&super::super::json::parse(json).unwrap())
    }

    fn allowed(task: &super::super::TaskPolicy, url: &str) -> bool {
        let policy = load(&task.text, Format::Yaml, None).unwrap().policy;
        let target = parse_absolute_target(url).unwrap();
        policy.decide(&Question::of_url(&target), TlsInspection::Available).verdict == Verdict::Allow
    }

    #[test]
    fn an_srt_allowlist_decides_as_srt_does_and_says_where_it_widens() {
        let task = import(
            r#"{"network": {"allowedDomains": ["pypi.org", "*.pythonhosted.org", "github.com:443", "*.npmjs.org"],
                "deniedDomains": ["registry.npmjs.org", "*.npmjs.org", "evil.example"],
                "allowUnixSockets": ["/var/run/docker.sock"]},
               "filesystem": {"denyRead": ["~/.ssh"]}}"#,
        )
        .unwrap();
        for (url, want) in [
            ("https://pypi.org/simple/", true),
            ("https://sub.pypi.org/", false),
            ("https://files.pythonhosted.org/x.whl", true),
            ("https://github.com/org/repo", true),
            ("https://registry.npmjs.org/left-pad", false),
            ("https://evil.example/", false),
            ("https://example.org/", false),
        ] {
            assert_eq!(allowed(&task, url), want, "{url}\n{}", task.text);
        }
        let lines = task.became.join("\n");
        assert!(lines.contains("`*.pythonhosted.org` → allowed_hosts: .pythonhosted.org (every name under"), "{lines}");
        assert!(lines.contains("pythonhosted.org itself, which `*.` leaves out"), "{lines}");
        assert!(
            lines.contains("`github.com` → allowed_hosts: github.com (this host only; the port dropped"),
            "{lines}"
        );
        assert!(lines.contains("deniedDomains[1] `*.npmjs.org` → *.npmjs.org left out of allowed_hosts"), "{lines}");
        assert!(lines.contains("deniedDomains[2] `evil.example` → refused already"), "{lines}");
        assert!(lines.contains("network.allowUnixSockets → left alone"), "{lines}");
    }

    #[test]
    fn claude_codes_settings_are_read_under_sandbox_network() {
        let task = import(r#"{"permissions": {}, "sandbox": {"enabled": true, "network": {"allowedDomains": ["api.anthropic.com"]}}}"#)
            .unwrap();
        assert!(allowed(&task, "https://api.anthropic.com/v1/messages"));
        assert!(!allowed(&task, "https://example.org/"));
        assert!(task.became[0].starts_with("sandbox.network → mode: allowlist"), "{:?}", task.became);
        // Its WebFetch domain rules count as allowed and denied domains, as its sandbox takes them.
        let task = import(
            r#"{"permissions": {"allow": ["Bash(npm test)", "WebFetch(domain:docs.rs)", "WebFetch(domain:*.crates.io)"],
                                "deny": ["WebFetch(domain:static.crates.io)", "Read(./.env)"]},
                "sandbox": {"network": {"allowedDomains": ["*.crates.io"]}}}"#,
        )
        .unwrap();
        // A denied name inside an allowed wildcard is an exception: refused, and the rest of the wildcard allowed.
        assert!(!allowed(&task, "https://static.crates.io/crates/x"), "{}", task.text);
        assert!(allowed(&task, "https://index.crates.io/config.json") && allowed(&task, "https://docs.rs/"));
        assert!(
            task.became.iter().any(|l| l.starts_with(
                "permissions.deny[0] `static.crates.io` → blocked_urls: static.crates.io (an exception inside the \
                 allowed `*.crates.io`; it refuses every name under static.crates.io too"
            )),
            "{:?}",
            task.became
        );
        let task = import(
            r#"{"permissions": {"allow": ["WebFetch(domain:docs.rs)"], "deny": ["WebFetch(domain:evil.example)"]},
                "sandbox": {"network": {"allowedDomains": ["index.crates.io"]}}}"#,
        )
        .unwrap();
        assert!(allowed(&task, "https://docs.rs/serde") && allowed(&task, "https://index.crates.io/config.json"));
        assert!(!allowed(&task, "https://evil.example/"));
        assert!(
            task.became.iter().any(|l| l.starts_with("permissions.allow[0] `docs.rs` → allowed_hosts: docs.rs")),
            "{:?}",
            task.became
        );
    }

    #[test]
    fn denied_names_inside_an_allowed_wildcard_become_exceptions_that_refuse_at_least_what_the_runtime_does() {
        let task = import(
            r#"{"network": {"allowedDomains": ["*.corp.example", "x.jira.corp.example"],
                "deniedDomains": ["jira.corp.example", "*.hr.corp.example"]}}"#,
        )
        .unwrap();
        for (url, want) in [
            ("https://wiki.corp.example/", true),
            ("https://jira.corp.example/browse/X-1", false),
            // The runtime's exact deny leaves jira's subdomains allowed; leash's block entry refuses them, except
            // the one allowed by its own, more specific entry.
            ("https://y.jira.corp.example/", false),
            ("https://x.jira.corp.example/", true),
            ("https://pay.hr.corp.example/", false),
            // `*.hr.corp.example` leaves `hr.corp.example` to the wildcard; leash's block entry refuses it too.
            ("https://hr.corp.example/", false),
        ] {
            assert_eq!(allowed(&task, url), want, "{url}\n{}", task.text);
        }
        let lines = task.became.join("\n");
        assert!(lines.contains("`*.hr.corp.example` → blocked_urls: hr.corp.example (an exception inside the allowed `*.corp.example`; it refuses hr.corp.example itself too"), "{lines}");
        let loaded = load(&task.text, Format::Yaml, None).unwrap();
        assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    }

    #[test]
    fn a_deny_all_refuses_everything_and_nothing_listed_allows_nothing() {
        let all = import(r#"{"network": {"allowedDomains": ["pypi.org"], "deniedDomains": ["*"]}}"#).unwrap();
        assert!(!allowed(&all, "https://pypi.org/"));
        let none = import(r#"{"network": {}}"#).unwrap();
        assert!(!allowed(&none, "https://pypi.org/"));
    }

    #[test]
    fn what_cannot_be_expressed_is_named_entry_by_entry_and_nothing_is_loaded() {
        let e = import(
            r#"{"network": {"allowedDomains": ["localhost", "127.0.0.1", "[::1]:8080", "api.example.com:8443", "*.corp.example", "*.b.example"],
                "deniedDomains": ["jira.corp.example", "b.example"]}}"#,
        )
        .unwrap_err();
        for named in [
            "allowedDomains[0] `localhost`",
            "allowedDomains[1] `127.0.0.1`",
            "allowedDomains[2] `[::1]:8080`",
            "allowedDomains[3] `api.example.com:8443`: port 8443 only",
            "deniedDomains[1] `b.example`: the name leash's `.b.example` for the allowed `*.b.example` admits too",
        ] {
            assert!(e.message.contains(named), "{named}: {e}");
        }
        // An exception inside an allowed wildcard is expressed (see below), so it is not named among these.
        assert!(!e.message.contains("jira.corp.example"), "{e}");
        let missing = import(r#"{"permissions": {"allow": []}}"#).unwrap_err();
        assert_eq!(missing.kind, PolicyErrorKind::MissingKey, "{missing}");
        let wrong = import(r#"{"network": {"allowedDomains": "pypi.org"}}"#).unwrap_err();
        assert_eq!(wrong.entry, "network.allowedDomains", "{wrong}");
    }
}
