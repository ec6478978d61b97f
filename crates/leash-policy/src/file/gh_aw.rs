//! The `network:` block of a GitHub Agentic Workflows (gh-aw) workflow, a `.md` file whose YAML front matter holds
//! it, read as a leash allowlist with a line per entry saying what it became.
//!
//! What gh-aw's entries mean, and how each is read here:
//! - no `network`, or `network: defaults`: gh-aw's infrastructure list (certificate revocation, Ubuntu mirrors, JSON
//!   schema) for the Actions runner. Leash lets the agent reach none of it: said so, nothing added.
//! - `network: {}` or `allowed: []`: nothing.
//! - a domain (`api.example.com`) covers its subdomains in gh-aw, and `*.example.org` covers `example.org` too: both
//!   are leash's `.example.org`.
//! - an ecosystem identifier (`python`, `node`, ...) becomes leash's preset of that registry (`+python`, ...),
//!   which is narrower than gh-aw's list (no mirrors, docs or installers): each line names what is left out. One
//!   leash has no preset for cannot be expressed.
//! - `https://`/`http://` entries allow one scheme only; leash's rules cover both, so they cannot be expressed.
//! - `blocked`: an entry that covers allowed entries whole drops them; one inside an allowed domain becomes a
//!   `blocked_urls` exception (both cover the name and every name under it); one on a preset's host cannot be
//!   expressed (a preset's exact host entry is more specific than any block entry on it).
//! - `engine`: gh-aw lets the engine reach its model API; the matching preset is added (`claude` → `+anthropic`).
//!
//! As for the other importers, whatever cannot be expressed is not guessed at: every such entry is named in one
//! error and nothing is loaded. Other `network` keys (`firewall`, ...) are listed as left alone.

use super::foreign::{error, section};
use super::presets::{self, HostPreset};
use super::raw::{Node, ScalarKind, Value};
use super::{PolicyError, PolicyErrorKind, TaskPolicy};

/// gh-aw's ecosystem identifiers leash has presets for: the presets, and what gh-aw's list has that they leave out.
const ECOSYSTEMS: &[(&str, &[&str], &str)] = &[
    ("python", &["python"], "conda, pip's docs and bootstrap hosts"),
    ("node", &["node"], "nodejs.org, npmjs.com's site, other registries and CDNs"),
    ("go", &["go"], "go.dev, golang.org, pkg.go.dev, goproxy.io, storage.googleapis.com"),
    ("rust", &["rust"], "rustup's hosts (sh.rustup.rs, static.rust-lang.org)"),
    ("github", &["github"], "`*.githubusercontent.com` (anyone's content), docs, LFS, the blog"),
    ("containers", &["docker-hub"], "ghcr.io, quay.io, mcr.microsoft.com, gcr.io, Kubernetes' downloads"),
    ("linux-distros", &["debian", "ubuntu", "alpine"], "Fedora, CentOS, Arch, openSUSE, Red Hat, apt.llvm.org"),
];

/// gh-aw's engines and the preset of the model API each reaches.
const ENGINES: &[(&str, &str)] = &[("claude", "anthropic"), ("codex", "openai"), ("gemini", "gemini")];

/// Whether a front matter is a gh-aw workflow's rather than a harness task's: it has gh-aw's top-level `network` or
/// `on` (the trigger every workflow has) and none of a task's `sandbox` or `agent` sections.
pub(crate) fn is_workflow(root: &Node) -> bool {
    let Value::Map(entries) = &root.value else { return false };
    let has = |key: &str| entries.iter().any(|(k, _)| k.name == key);
    (has("network") || has("on")) && section(root, "sandbox").is_none() && section(root, "agent").is_none()
}

/// Reads a workflow's front matter `root` as a policy: its text (YAML) and a line per entry.
pub(crate) fn workflow_policy(root: &Node) -> Result<TaskPolicy, PolicyError> {
    let mut import = Import::default();
    let network = match &root.value {
        Value::Map(entries) => entries.iter().find(|(k, _)| k.name == "network").map(|(_, v)| v),
        _ => None,
    };
    match network.map(|n| &n.value) {
        None => import.defaults("network (not given: gh-aw's `defaults`)"),
        Some(Value::Scalar(ScalarKind::Str, word)) if word == "defaults" => import.defaults("network: defaults"),
        Some(Value::Map(entries)) => {
            let allowed = strings(network, "allowed")?;
            let blocked = strings(network, "blocked")?;
            for (i, entry) in allowed.iter().enumerate() {
                import.allowed(&format!("network.allowed[{i}]"), entry);
            }
            for (i, entry) in blocked.iter().enumerate() {
                import.blocked(&format!("network.blocked[{i}]"), entry);
            }
            for (key, _) in entries.iter().filter(|(k, _)| k.name != "allowed" && k.name != "blocked") {
                import.became.push(format!("network.{} → left alone: gh-aw's own setting", key.name));
            }
        }
        Some(_) => {
            let message = "expected `defaults` or a mapping with `allowed` (and `blocked`)".to_owned();
            return Err(error(PolicyErrorKind::BadValue, "network", message));
        }
    }
    import.engine(root);
    import.finish()
}

/// What the workflow allows so far, and what was said about it.
#[derive(Default)]
struct Import {
    /// `.domain` entries (gh-aw's domains cover their subdomains), with the entry that gave each.
    domains: Vec<(String, String)>,
    /// Presets, with the entry that gave each.
    presets: Vec<(String, &'static HostPreset)>,
    /// `blocked` entries inside an allowed domain: `blocked_urls` exceptions.
    exceptions: Vec<String>,
    became: Vec<String>,
    unexpressible: Vec<String>,
}

impl Import {
    fn defaults(&mut self, label: &str) {
        self.became.push(format!(
            "{label} → nothing: gh-aw's infrastructure hosts (certificate revocation, Ubuntu mirrors, JSON schema) \
             are the Actions runner's; leash lets the agent reach none of them"
        ));
    }

    fn allowed(&mut self, label: &str, entry: &str) {
        let entry = entry.trim().to_ascii_lowercase();
        if entry == "defaults" {
            return self.defaults(&format!("{label} `defaults`"));
        }
        match read(&entry) {
            Read::Ecosystem(name) => match ECOSYSTEMS.iter().find(|(e, _, _)| *e == name) {
                Some((_, names, left_out)) => {
                    let mut added = Vec::new();
                    for preset in names.iter().filter_map(|n| presets::newest_preset(n)) {
                        let hosts: Vec<&str> = preset.hosts.iter().map(|(h, _)| *h).collect();
                        added.push(format!("{} ({})", preset.spelled(), hosts.join(", ")));
                        self.presets.push((label.to_owned(), preset));
                    }
                    self.became.push(format!(
                        "{label} `{entry}` → allowed_hosts: {}; narrower than gh-aw's `{entry}`, which also has {left_out}",
                        added.join(", ")
                    ));
                }
                None => self.unexpressible.push(format!(
                    "{label} `{entry}`: leash has no preset for gh-aw's `{entry}` ecosystem; list the hosts you need"
                )),
            },
            Read::Domain(domain) => {
                self.became.push(format!(
                    "{label} `{entry}` → allowed_hosts: .{domain} ({domain} and every name under it, as gh-aw reads it)"
                ));
                self.domains.push((label.to_owned(), domain));
            }
            Read::Not(why) => self.unexpressible.push(format!("{label} `{entry}`: {why}")),
        }
    }

    fn blocked(&mut self, label: &str, entry: &str) {
        let entry = entry.trim().to_ascii_lowercase();
        let domain = match read(&entry) {
            Read::Domain(domain) => domain,
            Read::Ecosystem(name) => {
                let before = self.presets.len();
                let mapped: &[&str] = ECOSYSTEMS.iter().find(|(e, _, _)| *e == name).map_or(&[], |(_, n, _)| n);
                self.presets.retain(|(_, p)| !mapped.contains(&p.name));
                self.became.push(match before - self.presets.len() {
                    0 => format!("{label} `{entry}` → refused already (not allowed)"),
                    _ => format!("{label} `{entry}` → its presets left out of allowed_hosts"),
                });
                return;
            }
            Read::Not(why) => return self.unexpressible.push(format!("{label} `{entry}`: {why}")),
        };
        let under = |name: &str, parent: &str| name == parent || name.ends_with(&format!(".{parent}"));
        if let Some((_, p)) = self.presets.iter().find(|(_, p)| p.hosts.iter().any(|(h, _)| under(h, &domain))) {
            let why = format!(
                "an exception to the preset {}, whose exact host entries are more specific than a block entry on them",
                p.spelled()
            );
            return self.unexpressible.push(format!("{label} `{entry}`: {why}"));
        }
        if let Some((_, wider)) = self.domains.iter().find(|(_, a)| under(&domain, a) && *a != domain) {
            self.became.push(format!(
                "{label} `{entry}` → blocked_urls: {domain} (an exception inside the allowed `.{wider}`)"
            ));
            self.exceptions.push(domain.clone());
            // Blocked wins in gh-aw: allowed entries under it go, as below.
            self.domains.retain(|(_, a)| !under(a, &domain));
            return;
        }
        let before = self.domains.len();
        self.domains.retain(|(_, a)| !under(a, &domain));
        self.became.push(match before - self.domains.len() {
            0 => format!("{label} `{entry}` → refused already (no allowed entry covers it)"),
            n => format!("{label} `{entry}` → {n} allowed entr{} under it left out", if n == 1 { "y" } else { "ies" }),
        });
    }

    /// gh-aw lets the engine reach its model API: the matching preset, unless the workflow names none.
    fn engine(&mut self, root: &Node) {
        let Value::Map(entries) = &root.value else { return };
        let Some((_, node)) = entries.iter().find(|(k, _)| k.name == "engine") else { return };
        let id = match &node.value {
            Value::Scalar(ScalarKind::Str, id) => Some(id.as_str()),
            Value::Map(fields) => fields.iter().find(|(k, _)| k.name == "id").and_then(|(_, v)| match &v.value {
                Value::Scalar(ScalarKind::Str, id) => Some(id.as_str()),
                _ => None,
            }),
            _ => None,
        };
        let Some(id) = id else { return };
        match ENGINES.iter().find(|(e, _)| *e == id).and_then(|(_, p)| presets::newest_preset(p)) {
            Some(preset) => {
                self.became.push(format!(
                    "engine `{id}` → allowed_hosts: {} ({}), the model API gh-aw lets the engine reach",
                    preset.spelled(),
                    preset.hosts.iter().map(|(h, _)| *h).collect::<Vec<_>>().join(", ")
                ));
                self.presets.push(("engine".to_owned(), preset));
            }
            None => self.became.push(format!(
                "engine `{id}` → nothing added: leash has no preset for its model API; list its host in the policy"
            )),
        }
    }

    fn finish(self) -> Result<TaskPolicy, PolicyError> {
        if !self.unexpressible.is_empty() {
            let message = format!("cannot be expressed as a leash policy: {}", self.unexpressible.join("; "));
            return Err(error(PolicyErrorKind::BadValue, "network", message));
        }
        let mut entries: Vec<String> = Vec::new();
        for (_, preset) in &self.presets {
            let spelled = preset.spelled();
            if !entries.contains(&spelled) {
                entries.push(spelled);
            }
        }
        entries.extend(self.domains.iter().map(|(_, d)| format!(".{d}")));
        let mut text = String::from("network:\n  mode: allowlist\n  allowed_hosts:");
        text.push_str(if entries.is_empty() { " []\n" } else { "\n" });
        for entry in &entries {
            text.push_str(&format!("    - '{entry}'\n"));
        }
        if !self.exceptions.is_empty() {
            text.push_str("  blocked_urls:\n");
            for host in &self.exceptions {
                text.push_str(&format!("    - '{host}'\n"));
            }
        }
        let mut became = vec!["network → mode: allowlist (what `allowed` does not name is refused)".to_owned()];
        became.extend(self.became);
        Ok(TaskPolicy { text, became })
    }
}

/// One `allowed`/`blocked` entry.
enum Read {
    /// A word without a dot: an ecosystem identifier.
    Ecosystem(String),
    /// A domain, from `example.com` or `*.example.com`.
    Domain(String),
    /// Something leash cannot express, and why.
    Not(String),
}

fn read(entry: &str) -> Read {
    if entry.starts_with("https://") || entry.starts_with("http://") {
        return Read::Not("one scheme only; leash's rules cover http and https alike".into());
    }
    let name = entry.strip_prefix("*.").unwrap_or(entry).trim_end_matches('.');
    if name == "localhost" || name.parse::<std::net::IpAddr>().is_ok() || name.contains(':') {
        return Read::Not("the loopback or an address: leash refuses those (a `services:` entry serves one)".into());
    }
    if name.contains('*') || name.is_empty() {
        return Read::Not("a wildcard leash cannot read (only a leading `*.` is)".into());
    }
    if !name.contains('.') {
        return Read::Ecosystem(name.to_owned());
    }
    Read::Domain(name.to_owned())
}

/// The strings at `key` of the `network` mapping; anything but a list of strings names the field.
fn strings(network: Option<&Node>, key: &str) -> Result<Vec<String>, PolicyError> {
    super::foreign::strings(network, key, &format!("network.{key}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::task::{task_policy, TaskFormat};
    use crate::{load, parse_absolute_target, Format, Question, TlsInspection, Verdict};

    fn import(front: &str) -> Result<TaskPolicy, PolicyError> {
        task_policy(&format!("---\non: daily\n{front}---\n\n# Do the thing\n"), TaskFormat::Markdown)
    }

    fn allowed(task: &TaskPolicy, url: &str) -> bool {
        let policy = load(&task.text, Format::Yaml, None).unwrap().policy;
        let target = parse_absolute_target(url).unwrap();
        policy.decide(&Question::of_url(&target), TlsInspection::Available).verdict == Verdict::Allow
    }

    #[test]
    fn ecosystems_become_presets_and_domains_cover_their_subdomains() {
        let task = import(
            "engine: claude\nnetwork:\n  allowed: [defaults, python, node, \"api.example.com\", \"*.example.org\"]\n  \
             firewall: true\n",
        )
        .unwrap();
        for (url, want) in [
            ("https://pypi.org/simple/", true),
            ("https://files.pythonhosted.org/x.whl", true),
            ("https://registry.npmjs.org/left-pad", true),
            ("https://api.example.com/v1", true),
            ("https://eu.api.example.com/v1", true),
            ("https://example.org/", true),
            ("https://a.example.org/", true),
            ("https://api.anthropic.com/v1/messages", true),
            ("https://example.com/", false),
            ("https://conda.anaconda.org/", false),
            ("https://archive.ubuntu.com/", false),
        ] {
            assert_eq!(allowed(&task, url), want, "{url}\n{}", task.text);
        }
        let lines = task.became.join("\n");
        for said in [
            "network.allowed[0] `defaults` → nothing: gh-aw's infrastructure hosts",
            "network.allowed[1] `python` → allowed_hosts: +python@1 (pypi.org, files.pythonhosted.org); narrower",
            "network.allowed[3] `api.example.com` → allowed_hosts: .api.example.com",
            "network.allowed[4] `*.example.org` → allowed_hosts: .example.org",
            "engine `claude` → allowed_hosts: +anthropic@1",
            "network.firewall → left alone",
        ] {
            assert!(lines.contains(said), "{said}\n{lines}");
        }
    }

    #[test]
    fn defaults_and_an_empty_network_allow_nothing() {
        for front in ["network: defaults\n", "", "network: {}\n", "network:\n  allowed: []\n"] {
            let task = import(front).unwrap();
            assert!(!allowed(&task, "https://archive.ubuntu.com/"), "{front}");
            assert!(!allowed(&task, "https://pypi.org/"), "{front}");
        }
        assert!(import("").unwrap().became.iter().any(|l| l.contains("not given: gh-aw's `defaults`")));
    }

    #[test]
    fn blocked_entries_drop_what_they_cover_and_become_exceptions_inside_an_allowed_domain() {
        let task =
            import("network:\n  allowed: [python, node, docs.example.com]\n  blocked: [node, example.com]\n").unwrap();
        assert!(allowed(&task, "https://pypi.org/simple/"));
        assert!(!allowed(&task, "https://registry.npmjs.org/x"));
        assert!(!allowed(&task, "https://docs.example.com/"));
        let e = import(
            "network:\n  allowed: [\"*.corp.example\", python, java, \"https://a.example\", localhost]\n  \
             blocked: [jira.corp.example, files.pythonhosted.org]\n",
        )
        .unwrap_err();
        for named in [
            "network.allowed[2] `java`: leash has no preset",
            "network.allowed[3] `https://a.example`: one scheme only",
            "network.allowed[4] `localhost`: the loopback",
            "network.blocked[1] `files.pythonhosted.org`: an exception to the preset +python@1",
        ] {
            assert!(e.message.contains(named), "{named}: {e}");
        }
        assert!(!e.message.contains("jira.corp.example"), "an exception inside a domain is expressed: {e}");
        let task =
            import("network:\n  allowed: [\"*.corp.example\", x.jira.corp.example]\n  blocked: [jira.corp.example]\n")
                .unwrap();
        assert!(allowed(&task, "https://wiki.corp.example/") && allowed(&task, "https://corp.example/"));
        for refused in ["https://jira.corp.example/", "https://a.jira.corp.example/", "https://x.jira.corp.example/"] {
            assert!(!allowed(&task, refused), "{refused}\n{}", task.text);
        }
        assert!(
            task.became.iter().any(|l| {
                l
                == "network.blocked[0] `jira.corp.example` → blocked_urls: jira.corp.example (an exception inside the \
                    allowed `.corp.example`)"
            }),
            "{:?}",
            task.became
        );
    }

    #[test]
    fn a_benchflow_task_md_is_still_read_as_a_task() {
        let md = "---\nsandbox:\n  network_mode: allowlist\n  allowed_hosts: [pypi.org]\n---\n";
        let task = task_policy(md, TaskFormat::Markdown).unwrap();
        assert!(task.became[0].starts_with("sandbox.network_mode"), "{:?}", task.became);
        let wrong = import("network: everything\n").unwrap_err();
        assert_eq!(wrong.entry, "network");
    }
}
