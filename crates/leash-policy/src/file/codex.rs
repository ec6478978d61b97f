//! The network rules of a Codex CLI `config.toml`, read as a leash policy with a line per setting saying what it
//! became. Codex decides in two steps, and so does this reading:
//!
//! 1. Whether commands reach the network at all: the permission profile `default_permissions` names (`:read-only`
//!    and `:workspace` keep them off, `:danger-full-access` lets them out, a `[permissions.NAME]` profile by its
//!    `network.enabled`), or the older `sandbox_mode` (`workspace-write` with `[sandbox_workspace_write]
//!    network_access = true`, or `danger-full-access`), which decides instead whenever it is set. Off: an allowlist
//!    of nothing.
//! 2. With the network on, its proxy (`[features.network_proxy]`, `enabled = true`) holds commands to a `domains`
//!    map of `"PATTERN" = "allow" | "deny"` (the profile's `[permissions.NAME.network] domains` too), deny winning.
//!    Without the proxy, every public host: a blocklist of nothing.
//!
//! Patterns: `example.com` that host; `*.example.com` the names under it (leash's `.example.com` also admits the
//! name itself: said so); `**.example.com` it and the names under it; `*` every host, read as a blocklist of the
//! denied entries (each of which then also blocks its subdomains: stricter, said so). Addresses, `localhost`,
//! wildcards inside a label, and the proxy's `limited` mode (GET, HEAD and OPTIONS only) cannot be expressed; as
//! for the other importers, every such setting is named in one error and nothing is loaded. Codex cloud's internet
//! access is set in its web settings, not in a file, and is not read here.

use super::domains::{allowlist, Entry, Pattern};
use super::foreign::{error, section};
use super::raw::{Node, ScalarKind, Value};
use super::{PolicyError, PolicyErrorKind, TaskPolicy};

/// The top-level keys that make a TOML file Codex's configuration rather than a harness's task.
const CODEX_KEYS: [&str; 6] =
    ["sandbox_mode", "sandbox_workspace_write", "default_permissions", "permissions", "features", "approval_policy"];

/// Whether `root` is a Codex `config.toml`: one of Codex's own keys, and none of a task's `sandbox` or `agent`.
pub(crate) fn is_codex_config(root: &Node) -> bool {
    let Value::Map(entries) = &root.value else { return false };
    entries.iter().any(|(k, _)| CODEX_KEYS.contains(&k.name.as_str()))
        && section(root, "sandbox").is_none()
        && section(root, "agent").is_none()
}

/// Reads a Codex `config.toml` (`root`) as a policy: its text (YAML) and a line per setting.
pub(crate) fn config_policy(root: &Node) -> Result<TaskPolicy, PolicyError> {
    let mut became = Vec::new();
    let access = network_access(root, &mut became)?;
    let proxy = section(root, "features").and_then(|f| field(f, "network_proxy"));
    let proxy_on = match proxy.map(|p| &p.value) {
        Some(Value::Scalar(ScalarKind::Bool, on)) => on == "true",
        Some(Value::Map(_)) => proxy.and_then(|p| field(p, "enabled")).is_some_and(is_true),
        _ => false,
    };
    let mut domains = Vec::new();
    if let Some(table) = proxy.and_then(|p| field(p, "domains")) {
        domains.extend(domain_rules(table, "features.network_proxy.domains")?);
    }
    if let Access::Profile(name, profile, _) = &access {
        if let Some(table) = field(profile, "network").and_then(|n| field(n, "domains")) {
            domains.extend(domain_rules(table, &format!("permissions.{name}.network.domains"))?);
        }
    }
    let text = match (access.on(), proxy_on) {
        (false, _) => {
            became.push("→ mode: allowlist, nothing listed (commands have no network)".to_owned());
            if !domains.is_empty() {
                became.push("the `domains` rules → left alone: the network they would narrow is off".to_owned());
            }
            "network:\n  mode: allowlist\n  allowed_hosts: []\n".to_owned()
        }
        (true, false) => {
            let why = "→ mode: blocklist, nothing listed (no network_proxy: commands reach every public host)";
            became.push(why.to_owned());
            "network:\n  mode: blocklist\n  blocked_urls: []\n".to_owned()
        }
        (true, true) => {
            if proxy.and_then(|p| field(p, "mode")).is_some_and(|m| scalar(m) == Some("limited")) {
                let message = "cannot be expressed as a leash policy: features.network_proxy.mode `limited` (GET, \
                               HEAD and OPTIONS only): leash's rules do not name methods"
                    .to_owned();
                return Err(error(PolicyErrorKind::BadValue, "features.network_proxy.mode", message));
            }
            became.push("features.network_proxy → its domains decide (deny wins)".to_owned());
            proxied(domains, &mut became)?
        }
    };
    Ok(TaskPolicy { text, became })
}

/// Whether commands reach the network, by the profile or the older sandbox mode.
enum Access<'n> {
    Off,
    On,
    /// A profile of the file's own: its name, its table and whether its network is enabled.
    Profile(String, &'n Node, bool),
}

impl Access<'_> {
    fn on(&self) -> bool {
        matches!(self, Access::On | Access::Profile(_, _, true))
    }
}

fn network_access<'n>(root: &'n Node, became: &mut Vec<String>) -> Result<Access<'n>, PolicyError> {
    if let Some(mode) = field(root, "sandbox_mode") {
        let mode = scalar(mode).unwrap_or_default();
        let network_access = section(root, "sandbox_workspace_write").and_then(|t| field(t, "network_access"));
        let (access, why) = match mode {
            "read-only" => (Access::Off, "commands read only, no network"),
            "workspace-write" if network_access.is_some_and(is_true) => {
                (Access::On, "with sandbox_workspace_write.network_access = true: the network on")
            }
            "workspace-write" => (Access::Off, "without sandbox_workspace_write.network_access: no network"),
            "danger-full-access" => (Access::On, "no sandbox: the network on"),
            other => {
                let message = format!(
                    "`{other}` is not a sandbox mode; Codex's are `read-only`, `workspace-write`, `danger-full-access`"
                );
                return Err(error(PolicyErrorKind::BadValue, "sandbox_mode", message));
            }
        };
        became.push(format!("sandbox_mode = `{mode}`: {why}"));
        return Ok(access);
    }
    let Some(name) = field(root, "default_permissions").and_then(scalar) else {
        became.push("no sandbox_mode or default_permissions: Codex's default sandbox, no network".to_owned());
        return Ok(Access::Off);
    };
    let (access, why) = match name {
        ":read-only" | ":workspace" => (Access::Off, "a built-in profile without network".to_owned()),
        ":danger-full-access" | ":danger-no-sandbox" => (Access::On, "no sandbox: the network on".to_owned()),
        _ => {
            let Some(profile) = section(root, "permissions").and_then(|p| section(p, name)) else {
                let message = format!("`{name}` names no `[permissions.{name}]` profile in this file");
                return Err(error(PolicyErrorKind::MissingKey, "default_permissions", message));
            };
            let enabled = field(profile, "network").and_then(|n| field(n, "enabled")).is_some_and(is_true);
            let why = match enabled {
                true => format!("permissions.{name}.network.enabled = true: the network on"),
                false => format!("permissions.{name}.network.enabled not true: no network"),
            };
            (Access::Profile(name.to_owned(), profile, enabled), why)
        }
    };
    became.push(format!("default_permissions = `{name}`: {why}"));
    Ok(access)
}

/// One `domains` map: each pattern, labelled, with whether it allows.
fn domain_rules(table: &Node, label: &str) -> Result<Vec<(String, String, bool)>, PolicyError> {
    let Value::Map(entries) = &table.value else {
        let message =
            format!("expected a table of `\"PATTERN\" = \"allow\"` or `\"deny\"`, found {}", table.kind_name());
        return Err(error(PolicyErrorKind::WrongType, label, message));
    };
    entries
        .iter()
        .map(|(key, value)| {
            let at = format!("{label}.\"{}\"", key.name);
            match scalar(value) {
                Some("allow") => Ok((at, key.name.clone(), true)),
                Some("deny") => Ok((at, key.name.clone(), false)),
                _ => Err(error(PolicyErrorKind::BadValue, &at, "expected `allow` or `deny`".to_owned())),
            }
        })
        .collect()
}

/// The policy the proxy's domains make: an allowlist, or under `*` a blocklist of the denied entries.
fn proxied(rules: Vec<(String, String, bool)>, became: &mut Vec<String>) -> Result<String, PolicyError> {
    let mut unexpressible = Vec::new();
    let mut read = |allows: bool| -> Vec<Entry> {
        let mut out = Vec::new();
        for (label, text, _) in rules.iter().filter(|r| r.2 == allows && r.1.trim() != "*") {
            match pattern(text) {
                Ok((p, note)) => out.push((label.clone(), p, note)),
                Err(why) => unexpressible.push(format!("{label}: {why}")),
            }
        }
        out
    };
    let (allow, deny) = (read(true), read(false));
    let everything = rules.iter().find(|r| r.2 && r.1.trim() == "*");
    let text = match everything {
        Some((label, _, _)) => {
            became.push(format!("{label} `*` → mode: blocklist: every public host but the denied ones"));
            blocklist(&deny, became)
        }
        None => allowlist(allow, deny, became, &mut unexpressible),
    };
    if !unexpressible.is_empty() {
        let message = format!("cannot be expressed as a leash policy: {}", unexpressible.join("; "));
        return Err(error(PolicyErrorKind::BadValue, "domains", message));
    }
    Ok(text)
}

/// The denied entries of an allow-everything map as `blocked_urls` host entries, which also cover subdomains.
fn blocklist(deny: &[Entry], became: &mut Vec<String>) -> String {
    let mut text = String::from("network:\n  mode: blocklist\n  blocked_urls:");
    text.push_str(if deny.is_empty() { " []\n" } else { "\n" });
    for (label, p, _) in deny {
        let (host, stricter) = match p {
            Pattern::Exact(h) => (h, format!("; its subdomains are blocked too, which `{h}` leaves open")),
            Pattern::Under(d) => (d, format!("; {d} itself is blocked too, which `*.` leaves open")),
            Pattern::ApexAndUnder(d) => (d, String::new()),
        };
        became.push(format!("{label} `{}` → blocked_urls: {host} (it and every subdomain{stricter})", p.shown()));
        text.push_str(&format!("    - '{host}'\n"));
    }
    text
}

/// One pattern of a `domains` map.
fn pattern(text: &str) -> Result<(Pattern, Option<&'static str>), String> {
    let entry = text.trim().trim_end_matches('.').to_ascii_lowercase();
    let bare = entry.trim_start_matches("**.").trim_start_matches("*.");
    if entry.starts_with('[')
        || entry.contains(':')
        || bare == "localhost"
        || bare.parse::<std::net::Ipv4Addr>().is_ok()
    {
        return Err(format!("`{text}`: the loopback or an address: leash refuses those"));
    }
    if bare.is_empty() || bare.contains(['*', '?']) {
        return Err(format!("`{text}`: a wildcard leash cannot read (only a leading `*.` or `**.` is)"));
    }
    Ok(match (entry.strip_prefix("**."), entry.strip_prefix("*.")) {
        (Some(domain), _) => (Pattern::ApexAndUnder(domain.to_owned()), None),
        (None, Some(domain)) => (Pattern::Under(domain.to_owned()), None),
        (None, None) => (Pattern::Exact(entry.clone()), None),
    })
}

fn field<'n>(map: &'n Node, key: &str) -> Option<&'n Node> {
    let Value::Map(entries) = &map.value else { return None };
    entries.iter().find(|(k, _)| k.name == key).map(|(_, v)| v)
}

fn scalar(node: &Node) -> Option<&str> {
    match &node.value {
        Value::Scalar(ScalarKind::Str, s) => Some(s),
        _ => None,
    }
}

fn is_true(node: &Node) -> bool {
    matches!(&node.value, Value::Scalar(ScalarKind::Bool, b) if b == "true")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::task::{task_policy, TaskFormat};
    use crate::{load, parse_absolute_target, Format, Question, TlsInspection, Verdict};

    fn import(toml: &str) -> Result<TaskPolicy, PolicyError> {
        task_policy(toml, TaskFormat::Toml)
    }

    fn allowed(task: &TaskPolicy, url: &str) -> bool {
        let policy = load(&task.text, Format::Yaml, None).unwrap().policy;
        let target = parse_absolute_target(url).unwrap();
        policy.decide(&Question::of_url(&target), TlsInspection::Available).verdict == Verdict::Allow
    }

    #[test]
    fn the_proxys_domains_decide_with_deny_winning_and_each_pattern_read_as_codex_reads_it() {
        let task = import(
            "model = \"gpt-5\"\nsandbox_mode = \"workspace-write\"\n[sandbox_workspace_write]\nnetwork_access = true\n\
             [features.network_proxy]\nenabled = true\n\
             domains = { \"api.openai.com\" = \"allow\", \"**.pypi.org\" = \"allow\", \"*.githubusercontent.com\" = \"allow\", \
             \"gist.githubusercontent.com\" = \"deny\", \"evil.example\" = \"deny\" }\n",
        );
        // A denied name inside an allowed wildcard is a `blocked_urls` exception.
        let task = task.unwrap();
        assert!(!allowed(&task, "https://gist.githubusercontent.com/x"), "{}", task.text);
        assert!(allowed(&task, "https://raw.githubusercontent.com/x"), "{}", task.text);
        assert!(
            task.became.iter().any(|l| l.contains(
                "`gist.githubusercontent.com` → blocked_urls: gist.githubusercontent.com (an exception inside the \
                 allowed `*.githubusercontent.com`"
            )),
            "{:?}",
            task.became
        );
        // Denying the name leash's `.pypi.org` admits too cannot be expressed.
        let e = import(
            "sandbox_mode = \"workspace-write\"\n[sandbox_workspace_write]\nnetwork_access = true\n\
             [features.network_proxy]\nenabled = true\n\
             domains = { \"**.pypi.org\" = \"allow\", \"pypi.org\" = \"deny\" }\n",
        )
        .unwrap_err();
        assert!(
            e.message.contains("`pypi.org`: the name leash's `.pypi.org` for the allowed `**.pypi.org` admits too"),
            "{e}"
        );
        let task = import(
            "sandbox_mode = \"workspace-write\"\n[sandbox_workspace_write]\nnetwork_access = true\n\
             [features.network_proxy]\nenabled = true\n\
             domains = { \"api.openai.com\" = \"allow\", \"**.pypi.org\" = \"allow\", \"*.pythonhosted.org\" = \"allow\", \
             \"evil.example\" = \"deny\" }\n",
        )
        .unwrap();
        for (url, want) in [
            ("https://api.openai.com/v1/responses", true),
            ("https://x.api.openai.com/", false),
            ("https://pypi.org/simple/", true),
            ("https://test.pypi.org/simple/", true),
            ("https://files.pythonhosted.org/x.whl", true),
            ("https://evil.example/", false),
            ("https://example.com/", false),
        ] {
            assert_eq!(allowed(&task, url), want, "{url}\n{}", task.text);
        }
        let lines = task.became.join("\n");
        for said in [
            "sandbox_mode = `workspace-write`: with sandbox_workspace_write.network_access = true",
            "`**.pypi.org` → allowed_hosts: .pypi.org (pypi.org and every name under it)",
            "`*.pythonhosted.org` → allowed_hosts: .pythonhosted.org (every name under pythonhosted.org, and \
             pythonhosted.org itself, which `*.` leaves out)",
            "features.network_proxy.domains.\"evil.example\" `evil.example` → refused already",
        ] {
            assert!(lines.contains(said), "{said}\n{lines}");
        }
    }

    #[test]
    fn no_network_no_proxy_and_allow_everything_read_as_codex_runs_them() {
        for off in [
            "approval_policy = \"on-request\"\n",
            "sandbox_mode = \"read-only\"\n",
            "sandbox_mode = \"workspace-write\"\n[features.network_proxy]\nenabled = true\ndomains = { \"a.example\" = \"allow\" }\n",
            "default_permissions = \":workspace\"\n",
            "default_permissions = \"dev\"\n[permissions.dev.network]\nenabled = false\n",
        ] {
            let task = import(off).unwrap();
            assert!(!allowed(&task, "https://a.example/"), "{off}");
        }
        let open = import("sandbox_mode = \"danger-full-access\"\n").unwrap();
        assert!(allowed(&open, "https://anything.example/"));
        let profile = import(
            "default_permissions = \"dev\"\n[permissions.dev.network]\nenabled = true\n\
             domains = { \"registry.npmjs.org\" = \"allow\" }\n[features]\nnetwork_proxy = true\n",
        )
        .unwrap();
        assert!(allowed(&profile, "https://registry.npmjs.org/x") && !allowed(&profile, "https://example.com/"));
        let star = import(
            "sandbox_mode = \"danger-full-access\"\n[features.network_proxy]\nenabled = true\n\
             domains = { \"*\" = \"allow\", \"*.tracker.example\" = \"deny\" }\n",
        )
        .unwrap();
        assert!(allowed(&star, "https://example.com/"));
        assert!(!allowed(&star, "https://a.tracker.example/") && !allowed(&star, "https://tracker.example/"));
        assert!(star.became.iter().any(|l| l.contains("tracker.example itself is blocked too")), "{:?}", star.became);
    }

    #[test]
    fn what_codex_does_and_leash_cannot_is_named() {
        let limited =
            "sandbox_mode = \"danger-full-access\"\n[features.network_proxy]\nenabled = true\nmode = \"limited\"\n";
        assert!(import(limited).unwrap_err().message.contains("GET, HEAD and OPTIONS only"));
        let e = import(
            "sandbox_mode = \"danger-full-access\"\n[features.network_proxy]\nenabled = true\n\
             domains = { \"localhost\" = \"allow\", \"region*.example.com\" = \"allow\", \"10.0.0.1\" = \"allow\" }\n",
        )
        .unwrap_err();
        for named in
            ["`localhost`: the loopback", "`region*.example.com`: a wildcard", "`10.0.0.1`: the loopback or an address"]
        {
            assert!(e.message.contains(named), "{named}: {e}");
        }
        let missing = import("default_permissions = \"nope\"\n").unwrap_err();
        assert_eq!(missing.entry, "default_permissions");
        let bad = import("sandbox_mode = \"yolo\"\n").unwrap_err();
        assert!(bad.message.contains("`yolo` is not a sandbox mode"), "{bad}");
        // A benchflow task.toml is still read as a task.
        let task = import("[sandbox]\nnetwork_mode = \"no-network\"\n").unwrap();
        assert!(task.became[0].starts_with("sandbox.network_mode"), "{:?}", task.became);
    }
}
