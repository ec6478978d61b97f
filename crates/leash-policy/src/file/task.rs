//! A harness's task file read as a policy, as the harness reads it: benchflow's `task.toml` (its `[sandbox]` and
//! `[agent]` tables) or the YAML front matter of its `task.md` (the same keys, between `---` lines); a `.json` file
//! is a sandbox runtime's settings, read by `sandbox_settings.rs`; a `.md` whose front matter is a GitHub Agentic
//! Workflow's (top-level `network` or `on`, no `sandbox` or `agent`) is read by `gh_aw.rs`, a `.toml` that is a Codex
//! `config.toml` (its `sandbox_mode`, `default_permissions`, `features`, ...) by `codex.rs`. Everything but
//! the network keys is the harness's and left alone. The result is a leash policy's text, loaded as any policy file
//! is, and a line per field saying what it became (`leash check --task` prints them).
//!
//! What benchflow's keys mean, and how each is read here:
//! - `network_mode`: `public` (everything), `no-network` (nothing), `allowlist` (`allowed_hosts` only), `denylist`
//!   (everything but `blocked_urls` and `blocked_hosts`; `blocklist`, the spelling of the change leash started from,
//!   is the same). `[agent]`'s, where set, decides over `[sandbox]`'s; its lists come with it.
//! - `allowed_hosts`: exact hostnames (benchflow admits no subdomain), lower-cased, a trailing dot dropped.
//! - `blocked_hosts`: a hostname and its subdomains, as a leash `blocked_urls` host entry is.
//! - `blocked_urls`: a URL prefix, scheme optional (leash blocks the path over `http` and `https` alike, which is
//!   stricter), its query and fragment ignored (as benchflow does), a trailing `/` dropped (as both do).

use super::foreign::{error, section, strings};
use super::raw::{Node, ScalarKind, Value};
use super::{PolicyError, PolicyErrorKind};

/// Which kind of task file, by its extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskFormat {
    /// `task.toml` (or a Codex `config.toml`, told apart by its keys).
    Toml,
    /// `task.md`: YAML front matter (a benchflow task's, or a GitHub Agentic Workflow's `network:`).
    Markdown,
    /// `.json`: sandbox-runtime's or Claude Code's settings (see `sandbox_settings.rs`).
    SandboxSettings,
}

impl TaskFormat {
    /// `.toml` → TOML, `.md` → Markdown front matter, `.json` → a sandbox runtime's settings.
    pub fn from_path(path: &std::path::Path) -> Option<TaskFormat> {
        match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
            "toml" => Some(TaskFormat::Toml),
            "md" | "markdown" => Some(TaskFormat::Markdown),
            "json" => Some(TaskFormat::SandboxSettings),
            _ => None,
        }
    }
}

/// A task file turned into a policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskPolicy {
    /// The policy, as YAML text for [`super::load`].
    pub text: String,
    /// What each network field of the task became, one line each, in the task's order.
    pub became: Vec<String>,
}

/// The network modes a task may name.
const MODES: [&str; 5] = ["public", "no-network", "allowlist", "denylist", "blocklist"];

/// Reads `text` (a task file in `format`) as a policy; an error names the task's field.
pub fn task_policy(text: &str, format: TaskFormat) -> Result<TaskPolicy, PolicyError> {
    let root = match format {
        TaskFormat::Toml => {
            let root = super::toml::parse(text)?;
            // Codex's config.toml is TOML too; its keys tell it apart.
            if super::codex::is_codex_config(&root) {
                return super::codex::config_policy(&root);
            }
            root
        }
        TaskFormat::Markdown => {
            let root = super::yaml::parse(front_matter(text)?)?;
            // A GitHub Agentic Workflow is a `.md` with front matter too; its keys tell it apart.
            if super::gh_aw::is_workflow(&root) {
                return super::gh_aw::workflow_policy(&root);
            }
            root
        }
        TaskFormat::SandboxSettings => return super::sandbox_settings::settings_policy(&super::json::parse(text)?),
    };
    let (sandbox, agent) = (section(&root, "sandbox"), section(&root, "agent"));
    let agent_mode = agent.and_then(|a| string(a, "network_mode")).filter(|m| !m.is_empty());
    let (table, name, mode) = match (agent_mode, sandbox.and_then(|s| string(s, "network_mode"))) {
        (Some(mode), _) => (agent, "agent", mode),
        (None, Some(mode)) => (sandbox, "sandbox", mode),
        (None, None) => (sandbox, "sandbox", "public".to_owned()),
    };
    let field = |key: &str| format!("{name}.{key}");
    let mut became = vec![format!("{} = `{mode}`", field("network_mode"))];
    let mut out = String::from("network:\n");
    match mode.as_str() {
        "public" => {
            out.push_str("  mode: blocklist\n");
            became[0].push_str(" → mode: blocklist, nothing listed (every public host)");
        }
        "no-network" => {
            out.push_str("  mode: allowlist\n");
            became[0].push_str(" → mode: allowlist, nothing listed (every request refused)");
        }
        "allowlist" => {
            became[0].push_str(" → mode: allowlist");
            out.push_str("  mode: allowlist\n  allowed_hosts:\n");
            for (i, host) in strings(table, "allowed_hosts", &field("allowed_hosts"))?.iter().enumerate() {
                let host = host.trim().trim_end_matches('.').to_ascii_lowercase();
                became.push(format!("{}[{i}] → allowed_hosts: {host} (this host only)", field("allowed_hosts")));
                out.push_str(&format!("    - {}\n", quoted(&host)));
            }
        }
        "denylist" | "blocklist" => {
            became[0].push_str(" → mode: blocklist");
            out.push_str("  mode: blocklist\n  blocked_urls:\n");
            for (i, host) in strings(table, "blocked_hosts", &field("blocked_hosts"))?.iter().enumerate() {
                let host = host.trim().trim_end_matches('.').to_ascii_lowercase();
                became.push(format!("{}[{i}] → blocked_urls: {host} (and every subdomain)", field("blocked_hosts")));
                out.push_str(&format!("    - {}\n", quoted(&host)));
            }
            for (i, url) in strings(table, "blocked_urls", &field("blocked_urls"))?.iter().enumerate() {
                let entry = format!("{}[{i}]", field("blocked_urls"));
                let (rule, notes) = blocked_url(url, &entry)?;
                let notes = if notes.is_empty() { String::new() } else { format!(" ({})", notes.join("; ")) };
                became.push(format!("{entry} → blocked_urls: {rule}{notes}"));
                out.push_str(&format!("    - {}\n", quoted(&rule)));
            }
        }
        other => {
            let message = format!(
                "`{other}` is not a network mode; a task's are {}",
                MODES.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", ")
            );
            return Err(error(PolicyErrorKind::BadValue, &field("network_mode"), message));
        }
    }
    Ok(TaskPolicy { text: out, became })
}

/// The YAML between a leading `---` line and the next `---` line.
fn front_matter(text: &str) -> Result<&str, PolicyError> {
    let missing = || error(PolicyErrorKind::Syntax, "", "no front matter: a task.md opens with a `---` line".into());
    let rest = text.strip_prefix("---\n").or_else(|| text.strip_prefix("---\r\n")).ok_or_else(missing)?;
    let end = rest.find("\n---").ok_or_else(missing)?;
    Ok(rest.get(..end + 1).unwrap_or(rest))
}

/// The string at `key` of a mapping.
fn string(map: &Node, key: &str) -> Option<String> {
    let Value::Map(entries) = &map.value else { return None };
    entries.iter().find(|(k, _)| k.name == key).and_then(|(_, v)| match &v.value {
        Value::Scalar(ScalarKind::Str, s) => Some(s.clone()),
        _ => None,
    })
}

/// A `blocked_urls` entry as leash writes it (`host/path`), and what was changed on the way.
fn blocked_url(url: &str, entry: &str) -> Result<(String, Vec<&'static str>), PolicyError> {
    let mut notes = Vec::new();
    let mut rest = url.trim();
    if let Some((scheme, after)) = rest.split_once("://") {
        if !matches!(scheme.to_ascii_lowercase().as_str(), "http" | "https") {
            let message = format!("`{url}`: a task's blocked URL is `http` or `https`");
            return Err(error(PolicyErrorKind::BadUrl, entry, message));
        }
        notes.push("the scheme dropped: blocked over http and https");
        rest = after;
    }
    if let Some(at) = rest.find(['?', '#']) {
        notes.push("the query ignored, as the harness ignores it");
        rest = rest.get(..at).unwrap_or(rest);
    }
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if path.len() > 1 && path.ends_with('/') {
        notes.push("the trailing `/` dropped: the page and what follows it are blocked");
    }
    Ok((format!("{host}{path}"), notes))
}

/// A YAML single-quoted scalar.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{load, parse_absolute_target, Format, Question, TlsInspection, Verdict};

    fn refuses(task: &TaskPolicy, url: &str) -> bool {
        let policy = load(&task.text, Format::Yaml, None).unwrap().policy;
        let target = parse_absolute_target(url).unwrap();
        policy.decide(&Question::of_url(&target), TlsInspection::Available).verdict == Verdict::Block
    }

    #[test]
    fn a_benchflow_denylist_blocks_the_paper_its_versions_and_the_hosts_and_nothing_else() {
        let toml = "[task]\nname = \"x\"\n[sandbox]\nnetwork_mode = \"denylist\"\ncpus = 2\n\
                    blocked_urls = [\"https://arxiv.org/abs/2401.01234/\", \"http://example.org/a?ref=x\"]\n\
                    blocked_hosts = [\"API.SemanticScholar.org.\"]\n";
        let task = task_policy(toml, TaskFormat::Toml).unwrap();
        for url in [
            "https://arxiv.org/abs/2401.01234",
            "https://arxiv.org/abs/2401.01234v2",
            "http://arxiv.org/abs/2401.01234",
            "https://example.org/a",
            "https://example.org/a?other=1",
            "https://api.semanticscholar.org/graph",
            "https://x.api.semanticscholar.org/",
        ] {
            assert!(refuses(&task, url), "{url}");
        }
        for url in ["https://arxiv.org/abs/2401.99999", "https://pypi.org/simple/", "https://semanticscholar.org/"] {
            assert!(!refuses(&task, url), "{url}");
        }
        assert!(task.became[0].starts_with("sandbox.network_mode = `denylist` → mode: blocklist"), "{:?}", task.became);
        assert!(
            task.became.iter().any(|l| l.contains("scheme dropped") && l.contains("trailing")),
            "{:?}",
            task.became
        );
        assert!(task.became.iter().any(|l| l.contains("query ignored")), "{:?}", task.became);
    }

    #[test]
    fn the_agents_mode_decides_over_the_sandboxs_and_brings_its_list() {
        let toml = "[sandbox]\nnetwork_mode = \"public\"\n[agent]\nnetwork_mode = \"allowlist\"\n\
                    allowed_hosts = [\"pypi.org\"]\n";
        let task = task_policy(toml, TaskFormat::Toml).unwrap();
        assert!(!refuses(&task, "https://pypi.org/simple/"));
        assert!(refuses(&task, "https://files.pypi.org/x"), "exact hosts: no subdomain");
        assert!(refuses(&task, "https://example.com/"));
        assert!(task.became[0].starts_with("agent.network_mode"), "{:?}", task.became);
    }

    #[test]
    fn public_allows_everything_public_and_no_network_nothing() {
        let public = task_policy("[sandbox]\ncpus = 1\n", TaskFormat::Toml).unwrap();
        assert!(!refuses(&public, "https://example.com/"), "public is the default");
        let none = task_policy("[sandbox]\nnetwork_mode = \"no-network\"\n", TaskFormat::Toml).unwrap();
        assert!(refuses(&none, "https://pypi.org/"));
    }

    #[test]
    fn a_task_md_front_matter_reads_the_same_and_the_blocklist_spelling_too() {
        let md = "---\nname: x\nsandbox:\n  network_mode: blocklist\n  blocked_urls:\n    - arxiv.org/abs/2401.01234\n---\n\n# Task\nblocked_urls: nothing\n";
        let task = task_policy(md, TaskFormat::Markdown).unwrap();
        assert!(refuses(&task, "https://arxiv.org/abs/2401.01234v3"));
        assert!(!refuses(&task, "https://arxiv.org/abs/2402.00001"));
        assert!(task_policy("# no front matter\n", TaskFormat::Markdown).is_err());
    }

    #[test]
    fn a_task_leash_cannot_read_as_the_harness_does_is_refused_naming_the_field() {
        let bad_mode = task_policy("[sandbox]\nnetwork_mode = \"private\"\n", TaskFormat::Toml).unwrap_err();
        assert_eq!(bad_mode.entry, "sandbox.network_mode");
        assert!(bad_mode.message.contains("`private`") && bad_mode.message.contains("`denylist`"), "{bad_mode}");
        let ftp = "[sandbox]\nnetwork_mode = \"denylist\"\nblocked_urls = [\"ftp://arxiv.org/x\"]\n";
        assert_eq!(task_policy(ftp, TaskFormat::Toml).unwrap_err().entry, "sandbox.blocked_urls[0]");
        let not_a_list = "[sandbox]\nnetwork_mode = \"denylist\"\nblocked_hosts = \"a.org\"\n";
        assert_eq!(task_policy(not_a_list, TaskFormat::Toml).unwrap_err().entry, "sandbox.blocked_hosts");
    }
}
