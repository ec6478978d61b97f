//! The `leash` binary as a user meets it: `check`, `explain` and `proxy` run as real processes, with real files,
//! real signals and curl as the client.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test's helpers fail it by panicking")]

mod common;

use common::{
    decided, https_material, log_lines, lookups_and_decisions, origin, sandbox_available, stderr, stdout, HttpsOrigin,
};

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const LEASH: &str = env!("CARGO_BIN_EXE_leash");

fn leash(args: &[&str]) -> Output {
    Command::new(LEASH).args(args).env("RUST_LOG", "warn").output().expect("run leash")
}

/// `leash check --task PATH` succeeds and says each of `lines` (what each field became).
fn check_task_says(path: &str, lines: &[&str]) {
    let o = leash(&["check", "--task", path]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for line in lines {
        assert!(stdout(&o).contains(line), "`{line}` in:\n{}", stdout(&o));
    }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

const BLOCKLIST: &str =
    "network:\n  mode: blocklist\n  blocked_urls:\n    - arxiv.org/abs/2401.01234\n    - api.semanticscholar.org\n";

// ---- check

#[test]
fn check_accepts_the_shipped_examples() {
    // Every policy file in examples/, so a new example cannot ship unchecked.
    let mut examples: Vec<String> = std::fs::read_dir("examples")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".yaml") || name.ends_with(".toml"))
        .map(|name| format!("examples/{name}"))
        .collect();
    examples.sort();
    assert!(examples.len() >= 6, "{examples:?}");
    for f in &examples {
        // A harness's task file (examples/task.toml) is checked as one.
        let o = if f.starts_with("examples/task.") { leash(&["check", "--task", f]) } else { leash(&["check", f]) };
        assert_eq!(o.status.code(), Some(0), "{f}: {}", stderr(&o));
        assert!(stdout(&o).contains("valid"), "{f}");
    }
    let services = leash(&["check", "examples/services.yaml"]);
    assert!(stdout(&services).contains("service mcp: port 8080 -> 127.0.0.1:9000 (http, only /mcp"), "{services:?}");
}

#[test]
fn check_names_method_and_pattern_mistakes_and_explain_decides_by_method() {
    let dir = tempfile::tempdir().unwrap();
    let bad = write(
        dir.path(),
        "bad.yaml",
        "network:\n  mode: allowlist\n  methods: [GET, Haed]\n  allowed_hosts:\n    - get api.example.com\n    \
         - GTE docs.rs\n  allowed_urls:\n    - POST github.com/**/git-upload-pack\n",
    );
    let o = leash(&["check", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let err = stderr(&o);
    for expected in [
        "bad.yaml:3:18: network.methods: unknown method `Haed`; did you mean `HEAD`?",
        "bad.yaml:5:7: network.allowed_hosts[0]: `get` is not `GET`: method names are case-sensitive",
        "bad.yaml:6:7: network.allowed_hosts[1]: unknown method `GTE`; did you mean `GET`?",
        "bad.yaml:8:7: network.allowed_urls[0]: `github.com/**/git-upload-pack` has `**`",
    ] {
        assert!(err.contains(expected), "missing {expected:?} in:\n{err}");
    }
    let policy = "examples/read-only.yaml";
    let explain = |args: &[&str]| leash(&[&["explain", "--policy", policy][..], args].concat());
    let push = explain(&["POST", "https://github.com/o/r.git/git-receive-pack"]);
    assert_eq!(push.status.code(), Some(1), "{push:?}");
    let out = stdout(&push);
    assert!(out.starts_with("block method-not-allowed github.com\n"), "{out}");
    assert!(out.contains("decided on method `POST` and canonical path `/o/r.git/git-receive-pack`"), "{out}");
    assert!(out.contains("entries that list none admit `GET HEAD OPTIONS` (network.methods)"), "{out}");
    let fetch = explain(&["POST", "https://github.com/o/r.git/git-upload-pack"]);
    assert_eq!(fetch.status.code(), Some(0));
    assert!(stdout(&fetch).starts_with("allow rule POST github.com/*/*/git-upload-pack\n"), "{}", stdout(&fetch));
    let read = explain(&["https://github.com/o/r"]);
    assert!(stdout(&read).starts_with("allow rule github.com\n"), "a URL alone is a GET: {}", stdout(&read));
    let lower = explain(&["get", "https://github.com/o/r"]);
    assert!(stdout(&lower).contains("`get` (method names are case-sensitive)"), "{}", stdout(&lower));
    let tunnel = explain(&["CONNECT", "github.com:443"]);
    assert!(stdout(&tunnel).starts_with("inspect rule github.com\n"), "{}", stdout(&tunnel));
}

#[test]
fn check_reports_every_bad_entry_with_its_line_and_column_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "bad.yaml",
        "network:\n  mode: allowlist\n  allowed_hosts:\n    - ok.example.com\n    - Example.com\n    - https://x.com\n  colour: red\n",
    );
    let o = leash(&["check", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains(":5:7: network.allowed_hosts[1]:"), "{err}");
    assert!(err.contains("network.allowed_hosts[2]"), "{err}");
    assert!(err.contains("colour"), "{err}");
    assert!(err.contains("3 errors"), "{err}");
}

#[test]
fn check_warns_of_a_secret_not_here_and_still_refuses_one_that_is_here_and_unusable() {
    // A lint in CI has no secrets: a credential whose variable is unset or whose file is missing is a warning, exit 0
    // (it used to fail the lint). A secret that is here and leash could not use stays an error.
    let dir = tempfile::tempdir().unwrap();
    let missing_file = dir.path().join("no-such-token");
    let text = format!(
        "network:\n  mode: allowlist\n  allowed_hosts: [api.anthropic.com, api.example.org]\n  credentials:\n    \
         - preset: anthropic\n    - name: t\n      hosts: [api.example.org]\n      env: T_KEY\n      file: {}\n      \
         header: authorization\n",
        missing_file.display()
    );
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, text).unwrap();
    let check = |key: Option<&str>| {
        let mut cmd = Command::new(LEASH);
        cmd.args(["check", policy.to_str().unwrap()]).env_remove("ANTHROPIC_API_KEY");
        if let Some(key) = key {
            cmd.env("ANTHROPIC_API_KEY", key);
        }
        cmd.output().unwrap()
    };
    let o = check(None);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("warning:") && stderr(&o).contains("`ANTHROPIC_API_KEY` is not set"), "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot read") && stderr(&o).contains("no-such-token"), "{}", stderr(&o));
    assert!(stdout(&o).contains("valid"), "{}", stdout(&o));
    let o = check(Some("sk-ant-with an inner space-0123456789"));
    assert_eq!(o.status.code(), Some(1), "a secret here that leash cannot use: {}", stderr(&o));
    assert!(!stderr(&o).contains("inner space-0123"), "the value is never printed: {}", stderr(&o));
}

#[test]
fn a_blocked_prefix_with_a_trailing_slash_blocks_the_page_and_its_next_version() {
    // A task file's `arxiv.org/abs/2401.01234/` passed `check` and blocked neither the page nor its v2.
    for url in
        ["https://arxiv.org/abs/2401.01234", "https://arxiv.org/abs/2401.01234v2", "http://arxiv.org/abs/2401.01234/"]
    {
        let o = leash(&["explain", "--block", "arxiv.org/abs/2401.01234/", url]);
        assert_eq!(o.status.code(), Some(1), "{url} refused: {}", stdout(&o));
    }
    let o = leash(&["explain", "--block", "arxiv.org/abs/2401.01234/", "https://arxiv.org/abs/2401.99999"]);
    assert_eq!(o.status.code(), Some(0), "another paper: {}", stdout(&o));
}

/// A benchflow task as its authors write it: the harness's own keys beside the network ones.
const BENCHFLOW_TASK: &str =
    "[task]\nname = \"replicate\"\ndescription = \"no peeking\"\n\n[agent]\ntimeout_sec = 600\n\n\
[sandbox]\nnetwork_mode = \"denylist\"\ncpus = 2\nmemory_mb = 4096\n\
blocked_urls = [\"https://arxiv.org/abs/2401.01234/\", \"https://github.com/org/paper-code?tab=readme\"]\n\
blocked_hosts = [\"api.semanticscholar.org\"]\n";

#[test]
fn a_sandbox_runtimes_settings_are_read_as_they_are_and_what_cannot_be_expressed_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    // sandbox-runtime's ~/.srt-settings.json as its users write it: filesystem rules beside the network ones.
    let srt = write(
        dir.path(),
        "srt-settings.json",
        r#"{"network": {"allowedDomains": ["pypi.org", "*.pythonhosted.org", "github.com"],
             "deniedDomains": ["github.com"], "allowLocalBinding": false},
            "filesystem": {"denyRead": ["~/.ssh"], "allowWrite": ["."]}}"#,
    );
    let path = srt.to_str().unwrap();
    let as_policy = leash(&["check", path]);
    assert_eq!(as_policy.status.code(), Some(1));
    assert!(stderr(&as_policy).contains(&format!("read it as it is with --task {path}")), "{}", stderr(&as_policy));
    check_task_says(
        path,
        &[
            "network.allowedDomains[1] `*.pythonhosted.org` → allowed_hosts: .pythonhosted.org (every name under \
         pythonhosted.org, and pythonhosted.org itself, which `*.` leaves out)",
            "network.deniedDomains[0] `github.com` → github.com left out of allowed_hosts",
            "network.allowLocalBinding → left alone",
            "valid (allowlist)",
        ],
    );
    let explain = |url: &str| leash(&["explain", "--task", path, url]).status.code();
    assert_eq!(explain("https://files.pythonhosted.org/packages/x.whl"), Some(0));
    assert_eq!(explain("https://github.com/org/repo"), Some(1), "denied wins, as in the runtime");
    assert_eq!(explain("https://example.org/"), Some(1));

    // Claude Code's settings.json with a denied name inside an allowed wildcard: a `blocked_urls` exception.
    let claude = write(
        dir.path(),
        "settings.json",
        r#"{"permissions": {"deny": ["WebFetch(domain:jira.corp.example)"]},
            "sandbox": {"enabled": true, "network": {"allowedDomains": ["*.corp.example"]}}}"#,
    );
    let path = claude.to_str().unwrap();
    let o = leash(&["check", "--task", path]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(
            "permissions.deny[0] `jira.corp.example` → blocked_urls: jira.corp.example (an exception inside the \
             allowed `*.corp.example`"
        ),
        "{}",
        stdout(&o)
    );
    let explain = |url: &str| leash(&["explain", "--task", path, url]);
    let refused = explain("http://jira.corp.example/browse/X-1");
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stdout(&refused).contains("refused by exception `jira.corp.example` inside allowed `.corp.example`"),
        "{}",
        stdout(&refused)
    );
    assert_eq!(explain("https://wiki.corp.example/").status.code(), Some(0));
    // Denying the very name leash's `.corp.example` widens `*.corp.example` to cannot be expressed: refused, named.
    let apex = write(
        dir.path(),
        "apex.json",
        r#"{"network": {"allowedDomains": ["*.corp.example"], "deniedDomains": ["corp.example"]}}"#,
    );
    let o = leash(&["check", "--task", apex.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(
        stderr(&o).contains(
            "network: cannot be expressed as a leash policy: network.deniedDomains[0] `corp.example`: the name \
             leash's `.corp.example` for the allowed `*.corp.example` admits too"
        ),
        "{}",
        stderr(&o)
    );
}

// ---- presets

#[test]
fn check_names_each_preset_with_the_version_it_stands_for_and_the_hosts_it_added() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "p.yaml",
        "network:\n  mode: allowlist\n  allowed_hosts:\n    - +python\n    - +github@1\n    - api.example.com\n\
         profiles:\n  build:\n    network: { mode: allowlist, allowed_hosts: [+rust] }\n",
    );
    let o = leash(&["check", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for line in [
        "network.allowed_hosts[0] `+python` is +python@1 (the newest; pin it with `+python@1`): adds pypi.org, \
         files.pythonhosted.org",
        "network.allowed_hosts[1] `+github@1` is +github@1: adds github.com, api.github.com, codeload.github.com",
        "profiles.build.network.allowed_hosts[0] `+rust` is +rust@1 (the newest; pin it with `+rust@1`): adds \
         index.crates.io, static.crates.io, crates.io",
    ] {
        assert!(stdout(&o).contains(line), "`{line}` in:\n{}", stdout(&o));
    }
    // The same in TOML and JSON, where every entry is a quoted string.
    let toml = write(dir.path(), "p.toml", "[network]\nmode = \"allowlist\"\nallowed_hosts = [\"+python@1\"]\n");
    let json = write(dir.path(), "p.json", r#"{"network": {"mode": "allowlist", "allowed_hosts": ["+node"]}}"#);
    assert!(stdout(&leash(&["check", toml.to_str().unwrap()])).contains("`+python@1` is +python@1: adds pypi.org"));
    assert!(stdout(&leash(&["check", json.to_str().unwrap()])).contains("`+node` is +node@1"));
}

#[test]
fn a_mistyped_preset_or_version_is_an_error_with_what_was_meant() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "p.yaml",
        "network:\n  mode: allowlist\n  allowed_hosts: [+pyhton, +python@2, +kubernetes]\n  model_apis: [+openai]\n",
    );
    let o = leash(&["check", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    for said in [
        ":3:19: network.allowed_hosts[0]: `+pyhton` is not a preset; did you mean `+python`?",
        "network.allowed_hosts[1]: `+python@2`: `python` has no version `2`; did you mean `+python@1`?",
        "network.allowed_hosts[2]: `+kubernetes` is not a preset; the presets are `+python`, `+node`",
        "network.model_apis[0]: `+openai` is a preset; presets go in `allowed_hosts`",
    ] {
        assert!(stderr(&o).contains(said), "`{said}` in:\n{}", stderr(&o));
    }
    let o = leash(&["explain", "--allow", "+pyhton", "https://pypi.org/"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--allow[0]: `+pyhton` is not a preset; did you mean `+python`?"), "{o:?}");
}

#[test]
fn explain_names_the_preset_whose_host_decides_and_refuses_what_it_leaves_out() {
    let policy = "network:\n  mode: allowlist\n  allowed_hosts: [+python]\n";
    let (code, out) = explain(policy, &["https://files.pythonhosted.org/packages/x.whl"]);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(out.lines().next(), Some("allow rule files.pythonhosted.org (+python@1)"));
    for outside in ["https://upload.pypi.org/legacy/", "https://pythonhosted.org/", "https://x.files.pythonhosted.org/"]
    {
        assert_eq!(explain(policy, &[outside]).0, Some(1), "{outside}: presets add exact hosts");
    }
    // The user's own entry for a host a preset also adds is the one named.
    let both = "network:\n  mode: allowlist\n  allowed_hosts: [+python, pypi.org]\n";
    assert_eq!(explain(both, &["https://pypi.org/simple/"]).1.lines().next(), Some("allow rule pypi.org"));
    // A host a preset has, refused by a policy that names only some of it: the preset is the hint.
    let o = leash(&["explain", "--allow", "pypi.org", "https://files.pythonhosted.org/packages/x.whl"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("hint: `files.pythonhosted.org` is one of the preset +python@1's hosts"), "{o:?}");
    let o = leash(&["explain", "--allow", "+github", "https://codeload.github.com/o/r/tar.gz/main"]);
    assert_eq!(stdout(&o).lines().next(), Some("allow rule codeload.github.com (+github@1)"), "{o:?}");
}

#[test]
fn policy_presets_lists_every_preset_and_shows_one_with_what_each_host_is_for() {
    let o = leash(&["policy", "presets"]);
    assert_eq!(o.status.code(), Some(0));
    for said in
        ["+python@1", "pypi.org, files.pythonhosted.org", "+docker-hub@1", "+gemini@1", "(what `+rust` stands for)"]
    {
        assert!(stdout(&o).contains(said), "`{said}` in:\n{}", stdout(&o));
    }
    let o = leash(&["policy", "presets", "+rust"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).starts_with("+rust@1: crates.io"), "{}", stdout(&o));
    assert!(stdout(&o).contains("  index.crates.io   the sparse index cargo reads"), "{}", stdout(&o));
    let o = leash(&["policy", "presets", "rsut"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("did you mean `+rust`?"), "{}", stderr(&o));
    let help = stdout(&leash(&["policy", "presets", "--help"]));
    assert!(help.contains("allowed_hosts: [+python@1, +github, api.example.com]"), "{help}");
}

#[test]
fn a_github_agentic_workflow_is_read_with_its_ecosystems_as_presets() {
    let dir = tempfile::tempdir().unwrap();
    let md = write(
        dir.path(),
        "triage.md",
        "---\non:\n  issues:\n    types: [opened]\nengine: claude\nnetwork:\n  allowed:\n    - defaults\n    - python\n    \
         - \"api.example.com\"\n---\n\n# Triage\n\nLabel the issue.\n",
    );
    let path = md.to_str().unwrap();
    check_task_says(
        path,
        &[
            "network.allowed[0] `defaults` → nothing",
            "network.allowed[1] `python` → allowed_hosts: +python@1 (pypi.org, files.pythonhosted.org); narrower than \
         gh-aw's `python`",
            "network.allowed[2] `api.example.com` → allowed_hosts: .api.example.com",
            "engine `claude` → allowed_hosts: +anthropic@1",
            "`+python@1` is +python@1: adds pypi.org, files.pythonhosted.org",
            "valid (allowlist)",
        ],
    );
    let explain = |url: &str| leash(&["explain", "--task", path, url]).status.code();
    assert_eq!(explain("https://files.pythonhosted.org/x.whl"), Some(0));
    assert_eq!(explain("https://eu.api.example.com/"), Some(0), "gh-aw's domains cover their subdomains");
    assert_eq!(explain("https://archive.ubuntu.com/"), Some(1));
    let java = write(dir.path(), "java.md", "---\non: daily\nnetwork:\n  allowed: [defaults, java]\n---\n");
    let o = leash(&["check", "--task", java.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("network.allowed[1] `java`: leash has no preset for gh-aw's `java`"), "{o:?}");
}

#[test]
fn a_codex_config_is_read_with_its_network_proxy_domains() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        dir.path(),
        "config.toml",
        "model = \"gpt-5-codex\"\napproval_policy = \"on-request\"\nsandbox_mode = \"workspace-write\"\n\n\
         [sandbox_workspace_write]\nnetwork_access = true\n\n[features.network_proxy]\nenabled = true\n\
         domains = { \"**.pypi.org\" = \"allow\", \"files.pythonhosted.org\" = \"allow\", \"evil.example\" = \"deny\" }\n",
    );
    let path = config.to_str().unwrap();
    let as_policy = leash(&["check", path]);
    assert_eq!(as_policy.status.code(), Some(1));
    assert!(stderr(&as_policy).contains(&format!("read it as it is with --task {path}")), "{}", stderr(&as_policy));
    check_task_says(
        path,
        &[
            "sandbox_mode = `workspace-write`: with sandbox_workspace_write.network_access = true: the network on",
            "features.network_proxy → its domains decide (deny wins)",
            "`**.pypi.org` → allowed_hosts: .pypi.org (pypi.org and every name under it)",
            "valid (allowlist)",
        ],
    );
    let explain = |url: &str| leash(&["explain", "--task", path, url]).status.code();
    assert_eq!(explain("https://test.pypi.org/simple/"), Some(0));
    assert_eq!(explain("https://evil.example/"), Some(1));
    let limited = write(
        dir.path(),
        "limited.toml",
        "sandbox_mode = \"danger-full-access\"\n[features.network_proxy]\nenabled = true\nmode = \"limited\"\n",
    );
    let o = leash(&["check", "--task", limited.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("`limited` (GET, HEAD and OPTIONS only)"), "{o:?}");
}

/// A package index on the host's loopback that answers as PyPI does for one project: `/simple/NAME/` (asked of
/// pypi.org) links its wheel on files.pythonhosted.org, `/packages/...` serves that wheel.
fn local_pypi(dir: &Path) -> (common::Served, u16) {
    let script = r#"
import http.server, io, zipfile
def wheel():
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("leash_preset_probe/__init__.py", "")
        info = "leash_preset_probe-1.0.dist-info/"
        z.writestr(info + "METADATA", "Metadata-Version: 2.1\nName: leash-preset-probe\nVersion: 1.0\n")
        z.writestr(info + "WHEEL", "Wheel-Version: 1.0\nGenerator: leash-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(info + "RECORD", "")
    return out.getvalue()
WHEEL = wheel()
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        port = self.server.server_address[1]
        host = self.headers.get("Host", "")
        if self.path.startswith("/simple/leash-preset-probe/") and host == f"pypi.org:{port}":
            name = "leash_preset_probe-1.0-py3-none-any.whl"
            body = f'<a href="http://files.pythonhosted.org:{port}/packages/{name}">{name}</a>'.encode()
            kind = "text/html"
        elif self.path.startswith("/packages/") and host == f"files.pythonhosted.org:{port}":
            body, kind = WHEEL, "application/octet-stream"
        else:
            self.send_response(404); self.send_header("Content-Length", "0"); self.end_headers(); return
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"#;
    common::Served::start(Command::new("python3").args(["-c", script]).current_dir(dir))
}

#[test]
fn pip_installs_through_the_python_preset_and_hosts_outside_it_are_refused() {
    let pip = Command::new("python3").args(["-m", "pip", "--version"]).output();
    if !pip.is_ok_and(|o| o.status.success()) {
        eprintln!("SKIPPED: no pip for python3 on this machine");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (_index, port) = local_pypi(dir.path());
    let policy = write(
        dir.path(),
        "p.yaml",
        &format!(
            "network:\n  mode: allowlist\n  allowed_hosts: [+python]\n  ports: [{port}]\n  \
             allow_destinations: [127.0.0.1/32]\n"
        ),
    );
    let log = dir.path().join("audit.jsonl");
    let resolve = ["--resolve", "pypi.org:127.0.0.1", "--resolve", "files.pythonhosted.org:127.0.0.1"];
    let resolve_more = ["--resolve", "upload.pypi.org:127.0.0.1", "--resolve", "pythonhosted.org:127.0.0.1"];
    let proxy = Proxy::start(&policy, &log, &[&resolve[..], &resolve_more].concat());
    let out = dir.path().join("out");
    let o = Command::new("python3")
        .args(["-m", "pip", "download", "--isolated", "--no-deps", "--no-cache-dir", "--disable-pip-version-check"])
        .args(["--retries", "0", "--timeout", "10", "-d"])
        .arg(&out)
        .args(["--index-url", &format!("http://pypi.org:{port}/simple/")])
        .args(["--trusted-host", "pypi.org", "--trusted-host", "files.pythonhosted.org"])
        .args(["--proxy", &format!("http://{}", proxy.addr), "leash-preset-probe"])
        .output()
        .unwrap();
    assert!(o.status.success(), "pip: {}{}", stdout(&o), stderr(&o));
    assert!(out.join("leash_preset_probe-1.0-py3-none-any.whl").exists());
    // A sibling of the preset's hosts (PyPI's upload host) and the parent of its file host are not in it.
    assert_eq!(proxy.curl(&format!("http://upload.pypi.org:{port}/simple/leash-preset-probe/")), "403");
    assert_eq!(proxy.curl(&format!("http://pythonhosted.org:{port}/packages/")), "403");
    proxy.signal("TERM");
    assert_eq!(proxy.wait_with_stderr().0, Some(0));
    let lines = log_lines(&log);
    let rule =
        |host: &str| lines.iter().find(|l| l["host"] == host && l["decision"] == "allow").map(|l| l["rule"].clone());
    assert_eq!(rule("pypi.org"), Some("pypi.org (+python@1)".into()), "{lines:?}");
    assert_eq!(rule("files.pythonhosted.org"), Some("files.pythonhosted.org (+python@1)".into()), "{lines:?}");
    let refused: Vec<_> = lines.iter().filter(|l| l["decision"] == "block").map(|l| &l["host"]).collect();
    assert_eq!(refused, ["upload.pypi.org", "pythonhosted.org"], "{lines:?}");
}

/// A server on the host's loopback that answers as many hosts at once: `GET /PATH` asked of `HOST:PORT` serves the file
/// `root/HOST/PATH` (`index` for a directory), anything else 404; so a request reaching a file reached it under that
/// file's host name.
fn files_by_host(root: &Path) -> (common::Served, u16) {
    let script = r#"
import http.server, os, sys
ROOT = sys.argv[1]
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        host = self.headers.get("Host", "").rsplit(":", 1)[0]
        path = os.path.normpath(os.path.join(ROOT, host, self.path.split("?")[0].lstrip("/")))
        if os.path.isdir(path):
            path = os.path.join(path, "index")
        if not path.startswith(ROOT + "/") or not os.path.isfile(path):
            self.send_response(404); self.send_header("Content-Length", "0"); self.end_headers(); return
        body = open(path, "rb").read()
        self.send_response(200)
        self.send_header("Content-Type", "application/json" if path.endswith("index") else "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"#;
    common::Served::start(Command::new("python3").args(["-c", script]).arg(root))
}

/// A preset's allowlist on `port`, with the loopback (where [`files_by_host`] listens) exempt, and a proxy under it
/// that resolves each of `names` to the loopback.
fn preset_proxy(dir: &Path, preset: &str, port: u16, names: &[&str]) -> (Proxy, PathBuf) {
    let policy = write(
        dir,
        "preset.yaml",
        &format!(
            "network:\n  mode: allowlist\n  allowed_hosts: [{preset}]\n  ports: [{port}]\n  \
             allow_destinations: [127.0.0.1/32]\n"
        ),
    );
    let log = dir.join("audit.jsonl");
    let resolve: Vec<String> = names.iter().flat_map(|n| ["--resolve".to_owned(), format!("{n}:127.0.0.1")]).collect();
    let resolve: Vec<&str> = resolve.iter().map(String::as_str).collect();
    (Proxy::start(&policy, &log, &resolve), log)
}

/// `(decision, host, rule)` of each request line of an audit log, outcomes left out.
fn decisions(log: &Path) -> Vec<(String, String, String)> {
    let text = |l: &serde_json::Value, k: &str| l[k].as_str().unwrap_or_default().to_owned();
    log_lines(log)
        .iter()
        .filter(|l| l.get("status").is_none())
        .map(|l| (text(l, "decision"), text(l, "host"), text(l, "rule")))
        .collect()
}

#[test]
fn npm_fetches_through_the_node_preset_and_hosts_outside_it_are_refused() {
    if !Command::new("npm").arg("--version").output().is_ok_and(|o| o.status.success()) {
        eprintln!("SKIPPED: no npm on this machine");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("hosts");
    let (_server, port) = files_by_host(&root);
    // The package as the npm registry serves it: its document, and its tarball (package/package.json).
    let package = root.join("registry.npmjs.org/leash-preset-probe");
    std::fs::create_dir_all(package.join("-")).unwrap();
    let tarball = format!("http://registry.npmjs.org:{port}/leash-preset-probe/-/leash-preset-probe-1.0.0.tgz");
    let document = format!(
        r#"{{"name":"leash-preset-probe","dist-tags":{{"latest":"1.0.0"}},"versions":{{"1.0.0":{{"name":"leash-preset-probe","version":"1.0.0","dist":{{"tarball":"{tarball}"}}}}}}}}"#
    );
    std::fs::write(package.join("index"), document).unwrap();
    let made = Command::new("python3")
        .args(["-c", "import io, sys, tarfile\nwith tarfile.open(sys.argv[1], 'w:gz') as t:\n    data = b'{\"name\": \"leash-preset-probe\", \"version\": \"1.0.0\"}'\n    info = tarfile.TarInfo('package/package.json'); info.size = len(data)\n    t.addfile(info, io.BytesIO(data))\n"])
        .arg(package.join("-/leash-preset-probe-1.0.0.tgz"))
        .status()
        .unwrap();
    assert!(made.success());
    let names = ["registry.npmjs.org", "npmjs.org", "registry.npmjs.com"];
    let (proxy, log) = preset_proxy(dir.path(), "+node", port, &names);
    let (userrc, globalrc) = (write(dir.path(), "npmrc", ""), write(dir.path(), "global-npmrc", ""));
    let o = Command::new("npm")
        .args(["pack", "leash-preset-probe@1.0.0", "--registry", &format!("http://registry.npmjs.org:{port}/")])
        .args(["--proxy", &format!("http://{}", proxy.addr), "--no-audit", "--no-fund", "--no-update-notifier"])
        .arg("--cache")
        .arg(dir.path().join("npm-cache"))
        .env("npm_config_userconfig", &userrc)
        .env("npm_config_globalconfig", &globalrc)
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "npm: {}{}", stdout(&o), stderr(&o));
    assert!(dir.path().join("leash-preset-probe-1.0.0.tgz").exists(), "{}", stdout(&o));
    // The registry's parent and its other name are not in the preset.
    assert_eq!(proxy.curl(&format!("http://npmjs.org:{port}/leash-preset-probe")), "403");
    assert_eq!(proxy.curl(&format!("http://registry.npmjs.com:{port}/leash-preset-probe")), "403");
    proxy.signal("TERM");
    assert_eq!(proxy.wait_with_stderr().0, Some(0));
    let rule = "registry.npmjs.org (+node@1)".to_owned();
    let seen = decisions(&log);
    assert!(seen.iter().filter(|d| d.1 == "registry.npmjs.org").count() >= 2, "document and tarball: {seen:?}");
    for (decision, host, used) in &seen {
        match host.as_str() {
            "registry.npmjs.org" => assert_eq!((decision.as_str(), used), ("allow", &rule), "{seen:?}"),
            _ => assert_eq!(decision, "block", "{seen:?}"),
        }
    }
}

#[test]
fn cargo_fetches_through_the_rust_preset_and_hosts_outside_it_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("hosts");
    let (_server, port) = files_by_host(&root);
    // A sparse registry as crates.io serves one: config.json and the index on index.crates.io, the crate file on
    // static.crates.io, its checksum in the index.
    let script = r#"
import hashlib, io, json, os, sys, tarfile
root, port = sys.argv[1], sys.argv[2]
crate = io.BytesIO()
with tarfile.open(fileobj=crate, mode="w:gz") as t:
    for name, data in [("leash-preset-probe-0.1.0/Cargo.toml",
                        b'[package]\nname = "leash-preset-probe"\nversion = "0.1.0"\nedition = "2021"\n'),
                       ("leash-preset-probe-0.1.0/src/lib.rs", b"")]:
        info = tarfile.TarInfo(name); info.size = len(data); t.addfile(info, io.BytesIO(data))
data = crate.getvalue()
os.makedirs(f"{root}/index.crates.io/le/as")
os.makedirs(f"{root}/static.crates.io/crates/leash-preset-probe/0.1.0")
open(f"{root}/static.crates.io/crates/leash-preset-probe/0.1.0/download", "wb").write(data)
config = {"dl": f"http://static.crates.io:{port}/crates", "api": f"http://crates.io:{port}"}
open(f"{root}/index.crates.io/config.json", "w").write(json.dumps(config))
line = {"name": "leash-preset-probe", "vers": "0.1.0", "deps": [], "cksum": hashlib.sha256(data).hexdigest(),
        "features": {}, "yanked": False}
open(f"{root}/index.crates.io/le/as/leash-preset-probe", "w").write(json.dumps(line) + "\n")
"#;
    let made = Command::new("python3").args(["-c", script]).arg(&root).arg(port.to_string()).status().unwrap();
    assert!(made.success());
    let names = ["index.crates.io", "static.crates.io", "crates.io", "doc.crates.io"];
    let (proxy, log) = preset_proxy(dir.path(), "+rust", port, &names);
    let (home, project) = (dir.path().join("cargo-home"), dir.path().join("project"));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(project.join("src")).unwrap();
    let config = format!(
        "[source.crates-io]\nreplace-with = \"mirror\"\n[source.mirror]\nregistry = \"sparse+http://index.crates.io:{port}/\"\n\
         [http]\nproxy = \"http://{}\"\n[net]\nretry = 0\n",
        proxy.addr
    );
    write(&home, "config.toml", &config);
    let manifest = "[package]\nname = \"probe-user\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\
                    [dependencies]\nleash-preset-probe = \"0.1.0\"\n";
    write(&project, "Cargo.toml", manifest);
    write(&project.join("src"), "lib.rs", "");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let o = Command::new(cargo)
        .arg("fetch")
        .current_dir(&project)
        .env("CARGO_HOME", &home)
        .env_remove("CARGO_HTTP_PROXY")
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .unwrap();
    assert!(o.status.success(), "cargo: {}", stderr(&o));
    assert!(stderr(&o).contains("Downloaded leash-preset-probe v0.1.0"), "{}", stderr(&o));
    assert_eq!(proxy.curl(&format!("http://doc.crates.io:{port}/config.json")), "403");
    proxy.signal("TERM");
    assert_eq!(proxy.wait_with_stderr().0, Some(0));
    let seen = decisions(&log);
    for (host, rule) in
        [("index.crates.io", "index.crates.io (+rust@1)"), ("static.crates.io", "static.crates.io (+rust@1)")]
    {
        assert!(seen.iter().any(|d| d == &("allow".into(), host.into(), rule.into())), "{host}: {seen:?}");
    }
    assert!(seen.contains(&("block".into(), "doc.crates.io".into(), String::new())), "{seen:?}");
}

#[test]
fn a_tunnel_to_a_preset_host_passes_under_its_rule_and_one_outside_the_preset_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ca = common::https_material_for(dir.path(), &["codeload.github.com"]);
    let origin = HttpsOrigin::start(dir.path());
    let policy = write(
        dir.path(),
        "p.yaml",
        &format!(
            "network:\n  mode: allowlist\n  allowed_hosts: [+github@1]\n  tunnel_ports: [{}]\n  \
             allow_destinations: [127.0.0.1/32]\n",
            origin.port
        ),
    );
    let log = dir.path().join("audit.jsonl");
    let resolve = ["--resolve", "codeload.github.com:127.0.0.1", "--resolve", "gist.github.com:127.0.0.1"];
    let proxy = Proxy::start(&policy, &log, &resolve);
    let curl = |host: &str| {
        let o = Command::new("curl")
            .args(["-s", "--max-time", "10", "--cacert", ca.to_str().unwrap(), "-x", &format!("http://{}", proxy.addr)])
            .args(["-w", " %{http_connect}"])
            .arg(format!("https://{host}:{}/octo/probe/tar.gz/main", origin.port))
            .output()
            .unwrap();
        stdout(&o)
    };
    assert_eq!(curl("codeload.github.com"), "origin-tls /octo/probe/tar.gz/main 200");
    assert_eq!(curl("gist.github.com"), " 403");
    proxy.signal("TERM");
    assert_eq!(proxy.wait_with_stderr().0, Some(0));
    let seen = decisions(&log);
    let allowed = ("allow".to_owned(), "codeload.github.com".to_owned(), "codeload.github.com (+github@1)".to_owned());
    assert!(seen.contains(&allowed), "{seen:?}");
    assert!(seen.contains(&("block".into(), "gist.github.com".into(), String::new())), "{seen:?}");
}

#[test]
fn git_clones_through_the_github_preset_and_hosts_outside_it_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("hosts");
    let (_server, port) = files_by_host(&root);
    // A repository served as github.com serves one to git over HTTP (the dumb protocol: its files as they are).
    let script = "set -e; git init -q work; cd work; echo hello > README; git add README; \
                  git -c user.name=t -c user.email=t@example.com commit -qm first; \
                  git clone -q --bare . ../hosts/github.com/octo/probe.git; \
                  cd ../hosts/github.com/octo/probe.git; git update-server-info";
    let made =
        Command::new("sh").args(["-c", script]).current_dir(dir.path()).env("GIT_CONFIG_GLOBAL", "/dev/null").status();
    assert!(made.unwrap().success());
    let (proxy, log) = preset_proxy(dir.path(), "+github@1", port, &["github.com", "gist.github.com"]);
    let o = Command::new("git")
        .args(["-c", &format!("http.proxy=http://{}", proxy.addr), "clone", "-q"])
        .arg(format!("http://github.com:{port}/octo/probe.git"))
        .arg(dir.path().join("clone"))
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .unwrap();
    assert!(o.status.success(), "git: {}", stderr(&o));
    assert_eq!(std::fs::read_to_string(dir.path().join("clone/README")).unwrap(), "hello\n");
    assert_eq!(proxy.curl(&format!("http://gist.github.com:{port}/octo/probe.git/info/refs")), "403");
    proxy.signal("TERM");
    assert_eq!(proxy.wait_with_stderr().0, Some(0));
    let seen = decisions(&log);
    assert!(
        seen.iter().any(|d| d == &("allow".into(), "github.com".into(), "github.com (+github@1)".into())),
        "{seen:?}"
    );
    assert!(seen.contains(&("block".into(), "gist.github.com".into(), String::new())), "{seen:?}");
}

#[test]
fn a_harness_task_is_read_as_it_is_with_what_each_field_became() {
    let dir = tempfile::tempdir().unwrap();
    let task = dir.path().join("task.toml");
    std::fs::write(&task, BENCHFLOW_TASK).unwrap();
    // As a policy file it is not one (its keys are the harness's): `--task` reads it as the harness does.
    let as_policy = leash(&["check", task.to_str().unwrap()]);
    assert_eq!(as_policy.status.code(), Some(1));
    assert!(stderr(&as_policy).contains("read it as it is with --task"), "{}", stderr(&as_policy));
    let o = leash(&["check", "--task", task.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let said = stdout(&o);
    for line in [
        "sandbox.network_mode = `denylist` → mode: blocklist",
        "sandbox.blocked_hosts[0] → blocked_urls: api.semanticscholar.org (and every subdomain)",
        "sandbox.blocked_urls[0] → blocked_urls: arxiv.org/abs/2401.01234/ (the scheme dropped",
        "sandbox.blocked_urls[1] → blocked_urls: github.com/org/paper-code (the scheme dropped: blocked over http and \
         https; the query ignored",
        "valid (blocklist)",
    ] {
        assert!(said.contains(line), "`{line}` in:\n{said}");
    }
    let explain = |url: &str| leash(&["explain", "--task", task.to_str().unwrap(), url]).status.code();
    for refused in [
        "https://arxiv.org/abs/2401.01234",
        "http://arxiv.org/abs/2401.01234v2",
        "https://github.com/org/paper-code/tree/main",
        "https://x.api.semanticscholar.org/",
    ] {
        assert_eq!(explain(refused), Some(1), "{refused}");
    }
    for allowed in ["https://arxiv.org/abs/2312.00001", "https://pypi.org/simple/", "https://github.com/org/other"] {
        assert_eq!(explain(allowed), Some(0), "{allowed}");
    }
    // The same in a task.md's front matter, and a mode leash cannot read as the harness does, named.
    let md = dir.path().join("task.md");
    std::fs::write(&md, "---\nagent:\n  network_mode: allowlist\n  allowed_hosts: [pypi.org]\n---\n# The task\n")
        .unwrap();
    assert_eq!(leash(&["explain", "--task", md.to_str().unwrap(), "https://pypi.org/simple/"]).status.code(), Some(0));
    assert_eq!(leash(&["explain", "--task", md.to_str().unwrap(), "https://example.com/"]).status.code(), Some(1));
    std::fs::write(&task, "[sandbox]\nnetwork_mode = \"offline\"\n").unwrap();
    let o = leash(&["check", "--task", task.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("sandbox.network_mode: `offline` is not a network mode"), "{}", stderr(&o));
    assert_eq!(
        leash(&["explain", "--task", task.to_str().unwrap(), "https://a.org/"]).status.code(),
        Some(2),
        "a task that does not load is 2 there"
    );
}

#[test]
fn run_reads_a_harness_task_and_hides_it_inside() {
    if !sandbox_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let task = dir.path().join("task.toml");
    std::fs::write(&task, BENCHFLOW_TASK).unwrap();
    let script = format!(
        "curl -s -o /dev/null -w '%{{http_code}}\\n' http://arxiv.org/abs/2401.01234v2; cat {} | wc -c",
        task.display()
    );
    let o = Command::new(LEASH)
        .args(["run", "--task", task.to_str().unwrap(), "--", "sh", "-c", &script])
        .output()
        .unwrap();
    assert_eq!(stdout(&o), "403\n0\n", "refused by the task's rule; the task unreadable inside: {}", stderr(&o));
}

#[test]
fn check_exits_2_on_unreadable_files_and_unknown_extensions() {
    let o = leash(&["check", "/nonexistent/policy.yaml"]);
    assert_eq!(o.status.code(), Some(2));
    // Said once, by `main`, whatever helper found it.
    assert_eq!(
        stderr(&o),
        "leash: cannot read policy `/nonexistent/policy.yaml`: No such file or directory (os error 2)\n"
    );
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "policy.ini", "[network]\nmode = allowlist\n");
    let o = leash(&["check", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains(".yaml, .yml, .toml or .json"), "{}", stderr(&o));
}

#[test]
fn explain_says_how_an_unannounced_refusal_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "quiet.yaml",
        "network:\n  mode: blocklist\n  blocked_urls: [arxiv.org/abs/2401.01234]\n  refusals: as-not-found\n",
    );
    let o = leash(&["explain", "--policy", p.to_str().unwrap(), "https://arxiv.org/abs/2401.01234v2"]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("answered as a missing page (refusals: as-not-found): 404 Not Found"),
        "{}",
        stdout(&o)
    );
    let allowed = leash(&["explain", "--policy", p.to_str().unwrap(), "https://arxiv.org/abs/2401.99999"]);
    assert!(!stdout(&allowed).contains("missing page"), "only refusals: {}", stdout(&allowed));
    let announced = leash(&["explain", "--block", "arxiv.org/abs/2401.01234", "https://arxiv.org/abs/2401.01234"]);
    assert!(!stdout(&announced).contains("missing page"), "{}", stdout(&announced));
}

#[test]
fn a_json_policy_is_checked_and_decides_as_its_yaml_spelling_and_strict_json_is_required() {
    let dir = tempfile::tempdir().unwrap();
    let json = "{\n  \"network\": {\n    \"mode\": \"blocklist\",\n    \"blocked_urls\": [\"arxiv.org/abs/2401.01234\"]\n  }\n}\n";
    let p = write(dir.path(), "policy.json", json);
    let path = p.to_str().unwrap();
    let o = leash(&["check", path]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("valid (blocklist)"), "{}", stdout(&o));
    let refused = leash(&["explain", "--policy", path, "https://arxiv.org/abs/2401.01234v2"]);
    assert_eq!(refused.status.code(), Some(1), "{}", stdout(&refused));
    let allowed = leash(&["explain", "--policy", path, "https://arxiv.org/abs/2401.99999"]);
    assert_eq!(allowed.status.code(), Some(0), "{}", stdout(&allowed));

    // What YAML would take and JSON does not: refused with its place.
    let trailing = write(dir.path(), "trailing.json", "{\"network\": {\"mode\": \"allowlist\",\n}}\n");
    let o = leash(&["check", trailing.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("trailing.json:2:1: ") && stderr(&o).contains("not JSON"), "{}", stderr(&o));
    // A mistake in a valid JSON document is named like one in YAML, with its line.
    let unknown = write(dir.path(), "unknown.json", "{\"network\": {\"mode\": \"allowlist\",\n \"allowed_host\": []}}");
    let o = leash(&["check", unknown.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("unknown.json:2:2: network.allowed_host: unknown key"), "{}", stderr(&o));
    // Twice the same key: JSON parsers disagree on which wins, so neither does.
    let twice = write(dir.path(), "twice.json", "{\"network\": {\"mode\": \"allowlist\", \"mode\": \"blocklist\"}}");
    let o = leash(&["check", twice.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "a duplicate key is an error: {}", stderr(&o));
}

#[test]
fn check_warns_about_an_allowlist_that_allows_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "empty.yaml", "network:\n  mode: allowlist\n  allowed_hosts: []\n");
    let o = leash(&["check", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stderr(&o).contains("warning"), "{}", stderr(&o));
}

#[test]
fn a_wildcard_or_regular_expression_in_a_path_rule_is_refused_not_silently_matching_nothing() {
    // `arxiv.org/abs/*` used to be `valid` and block nothing: `*` was a literal character of the prefix.
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "glob.yaml", "network:\n  mode: blocklist\n  blocked_urls:\n    - arxiv.org/abs/*\n");
    let o = leash(&["check", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(stderr(&o).contains(":4:7: network.blocked_urls[0]: `arxiv.org/abs/*` has a `*`"), "{}", stderr(&o));
    assert!(stderr(&o).contains("`arxiv.org/abs/` already covers every path under it"), "{}", stderr(&o));
    // The inline flags take the same entries, and say the same.
    for rule in ["arxiv.org/abs/*", "arxiv.org/abs/**", "arxiv.org/^abs/", "arxiv.org/abs/.*$"] {
        let o = leash(&["explain", "--block", rule, "http://arxiv.org/abs/2401.01234"]);
        assert_eq!(o.status.code(), Some(2), "{rule}: {o:?}");
        assert!(stderr(&o).contains("arxiv.org/abs/"), "{rule}: {}", stderr(&o));
    }
    // What the message suggests does what was meant.
    let o = leash(&["explain", "--block", "arxiv.org/abs/", "http://arxiv.org/abs/2401.01234"]);
    assert_eq!((o.status.code(), stdout(&o).lines().next()), (Some(1), Some("block rule arxiv.org/abs/")));
}

#[test]
fn common_slips_get_the_fix_in_the_message() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "slip.yaml", "network:\n  mode: allowlist\n  allowed_host: [pypi.org]\n");
    let o = leash(&["check", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("unknown key `allowed_host`; did you mean `allowed_hosts`?"), "{}", stderr(&o));
    // `--allow` takes hosts; a path there points to allowed_urls.
    let o = leash(&["explain", "--allow", "github.com/rust-lang/", "https://github.com/rust-lang/cargo"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("`allowed_urls: [github.com/rust-lang/]`"), "{}", stderr(&o));
    assert!(stderr(&o).contains("`--allow github.com`"), "{}", stderr(&o));
    // A profile names a part of a policy file: beside inline rules it used to be ignored silently.
    for inline in [["--allow", "a.test"], ["--block", "a.test"]] {
        let o = leash(&[&["explain", "--profile", "x"], &inline[..], &["http://a.test/"]].concat());
        assert_eq!(o.status.code(), Some(2), "{inline:?}: {o:?}");
        assert!(stderr(&o).contains("--profile"), "{}", stderr(&o));
        let o = leash(&[&["run", "--profile", "x"], &inline[..], &["--", "true"]].concat());
        assert_eq!(o.status.code(), Some(2), "{inline:?}: {o:?}");
        assert!(stderr(&o).contains("--profile"), "{}", stderr(&o));
    }
}

// ---- explain

fn explain(policy: &str, request: &[&str]) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "p.yaml", policy);
    let mut args = vec!["explain", "--policy", p.to_str().unwrap()];
    args.extend_from_slice(request);
    let o = leash(&args);
    (o.status.code(), stdout(&o))
}

#[test]
fn explain_names_the_most_specific_rule_and_exits_1_when_refused() {
    let (code, out) = explain(BLOCKLIST, &["http://arxiv.org/abs/2401.01234v2"]);
    assert_eq!(code, Some(1));
    assert_eq!(out.lines().next(), Some("block rule arxiv.org/abs/2401.01234"));
    let (code, out) = explain(BLOCKLIST, &["GET", "http://arxiv.org/abs/2402.00001"]);
    assert_eq!(code, Some(0));
    assert_eq!(out.lines().next(), Some("allow default"));
    assert!(out.contains("resolves"), "explains the destination check that follows: {out}");
}

#[test]
fn check_and_explain_take_an_ask_mode_policy() {
    let ask = "network:\n  mode: ask\n  allowed_hosts: [api.example.com]\n";
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "ask.yaml", ask);
    let o = leash(&["check", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("valid (ask: an allowlist that holds"), "{}", stdout(&o));
    let (code, out) = explain(ask, &["http://other.example.com/"]);
    assert_eq!(code, Some(1), "refused unless a person allows it: {out}");
    assert_eq!(out.lines().next(), Some("block not-allowed"));
    assert!(out.contains("\n  held: a person is asked (ask mode)"), "{out}");
    // A blocked path inside an allowed host is a refusal by rule: never held for a person.
    let with_blocked = format!("{ask}  blocked_urls: [api.example.com/admin]\n");
    let (code, out) = explain(&with_blocked, &["http://api.example.com/admin/users"]);
    assert_eq!(code, Some(1), "{out}");
    assert_eq!(out.lines().next(), Some("block rule api.example.com/admin"));
    assert!(!out.contains("held"), "{out}");
    // The same entry allowed and blocked is an error naming both.
    let tie = "network:\n  mode: ask\n  allowed_hosts: [.example.com]\n  blocked_urls: [example.com]\n";
    let o = leash(&["check", write(dir.path(), "bad.yaml", tie).to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains(
            "network.allowed_hosts[0]: `.example.com` is allowed and `example.com` (network.blocked_urls[0]) blocked \
             at the same specificity"
        ),
        "{}",
        stderr(&o)
    );
}

/// "The internet, but not `corp.example`, except `jira.corp.example` and the public pages."
const INTERNET_BUT_CORP: &str = "network:\n  mode: blocklist\n  blocked_urls: [corp.example]\n  \
                                 allowed_hosts: [jira.corp.example]\n  allowed_urls: [corp.example/public/]\n";

/// "PyPI, but not this one project."
const PYPI_BUT_ONE: &str =
    "network:\n  mode: allowlist\n  allowed_hosts: [pypi.org]\n  blocked_urls: [pypi.org/project/evil]\n";

#[test]
fn check_and_explain_show_which_rule_decided_with_exceptions_in_either_mode() {
    let dir = tempfile::tempdir().unwrap();
    for policy in [INTERNET_BUT_CORP, PYPI_BUT_ONE] {
        let o = leash(&["check", write(dir.path(), "p.yaml", policy).to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(stderr(&o).is_empty(), "no warning: {}", stderr(&o));
    }
    let (code, out) = explain(INTERNET_BUT_CORP, &["http://jira.corp.example/browse/X-1"]);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(out.lines().next(), Some("allow rule jira.corp.example"));
    assert!(
        out.contains("\n  allowed by exception `jira.corp.example` inside blocked `corp.example`: the more specific"),
        "{out}"
    );
    // An https URL to it is decided on its SNI, unread, and says which rule did.
    let (code, out) = explain(INTERNET_BUT_CORP, &["https://jira.corp.example/"]);
    assert_eq!((code, out.lines().next()), (Some(0), Some("allow rule jira.corp.example")), "{out}");
    assert!(out.contains("decided on its TLS server name") && out.contains("allowed by exception"), "{out}");
    let (code, out) = explain(INTERNET_BUT_CORP, &["http://mail.corp.example/"]);
    assert_eq!((code, out.lines().next()), (Some(1), Some("block rule corp.example")), "{out}");
    assert!(!out.contains("exception"), "{out}");
    let (code, out) = explain(PYPI_BUT_ONE, &["http://pypi.org/project/evil/"]);
    assert_eq!((code, out.lines().next()), (Some(1), Some("block rule pypi.org/project/evil")), "{out}");
    assert!(out.contains("refused by exception `pypi.org/project/evil` inside allowed `pypi.org`"), "{out}");
    if leash_proxy::TLS_INSPECTION {
        let (code, out) = explain(INTERNET_BUT_CORP, &["CONNECT", "corp.example:443"]);
        assert_eq!((code, out.lines().next()), (Some(0), Some("inspect rule corp.example/public/")), "{out}");
        assert!(
            out.contains(
                "`corp.example/public/` is an exception inside the blocked `corp.example`: the paths it names are \
                 allowed, so the tunnel is inspected"
            ),
            "{out}"
        );
        let (code, out) = explain(PYPI_BUT_ONE, &["https://pypi.org/project/evil"]);
        assert_eq!((code, out.lines().next()), (Some(1), Some("block rule pypi.org/project/evil")), "{out}");
        assert!(out.contains("TLS-inspected") && out.contains("refused by exception"), "{out}");
    }
}

#[test]
fn explain_connect_to_a_host_with_path_rules_says_what_the_proxy_does() {
    let (code, out) = explain(BLOCKLIST, &["CONNECT", "arxiv.org:443"]);
    let first = out.lines().next().unwrap_or_default().to_owned();
    if leash_proxy::TLS_INSPECTION {
        assert_eq!((code, first.as_str()), (Some(0), "inspect default"));
    } else {
        assert_eq!((code, first.as_str()), (Some(1), "block needs-inspection"));
    }
    let (code, out) = explain(BLOCKLIST, &["CONNECT", "api.semanticscholar.org:443"]);
    assert_eq!((code, out.lines().next()), (Some(1), Some("block rule api.semanticscholar.org")));
}

/// A policy with services: an HTTP one limited to /mcp and a TCP one on a Unix socket.
const SERVICES: &str = "network:\n  mode: allowlist\n  allowed_hosts: [docs.test]\n  services:\n    \
    - {name: mcp, listen: 8080, target: '127.0.0.1:9000', kind: http, paths: [/mcp]}\n    \
    - {name: tools, listen: /run/leash-tools.sock, target: /var/run/tools.sock}\n";

#[test]
fn explain_decides_a_request_on_a_service_as_the_service_would() {
    let (code, out) = explain(SERVICES, &["POST", "http://localhost:8080/mcp/call"]);
    assert_eq!((code, out.lines().next()), (Some(0), Some("allow rule service:mcp/mcp")), "{out}");
    assert!(out.contains("service `mcp`: listens on port 8080 in the sandbox, relayed to 127.0.0.1:9000"), "{out}");
    let (code, out) = explain(SERVICES, &["http://127.0.0.1:8080/admin"]);
    assert_eq!((code, out.lines().next()), (Some(1), Some("block not-allowed")), "{out}");
    let (code, out) = explain(SERVICES, &["service:tools"]);
    assert_eq!((code, out.lines().next()), (Some(0), Some("allow rule service:tools")), "{out}");
    assert!(out.contains("a TCP service"), "{out}");
    // A port that is no service's is a request through the proxy, decided by its rules.
    let (code, out) = explain(SERVICES, &["http://localhost:8081/mcp"]);
    assert_eq!((code, out.lines().next()), (Some(1), Some("block port")), "{out}");
}

#[test]
fn check_lists_the_services_and_the_upstream_proxy() {
    let dir = tempfile::tempdir().unwrap();
    let with_proxy = format!("{SERVICES}  upstream_proxy: http://proxy.corp.test:3128\n");
    let o = leash(&["check", write(dir.path(), "s.yaml", &with_proxy).to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("  allowed requests go out through the upstream proxy http://proxy.corp.test:3128"), "{out}");
    assert!(out.contains("  service mcp: port 8080 -> 127.0.0.1:9000 (http, only /mcp, each request logged)"), "{out}");
    assert!(out.contains("  service tools: /run/leash-tools.sock -> /var/run/tools.sock (tcp"), "{out}");
}

#[test]
fn explain_refuses_ip_literals_and_rejects_usage_errors() {
    let (code, out) = explain(BLOCKLIST, &["http://0x7f000001/"]);
    assert_eq!((code, out.lines().next()), (Some(1), Some("block ip-literal")));
    let (code, _) = explain(BLOCKLIST, &["not-a-url"]);
    assert_eq!(code, Some(2));
}

#[test]
fn explain_exits_2_not_1_when_the_policy_does_not_load() {
    // 1 means "refused": a script asking explain must never read a broken policy, or a wrong profile, as one.
    let (code, out) = explain("network:\n  mode: allowlist\n  blocked_urls: [192.0.2.1]\n", &["http://x.test/"]);
    assert_eq!((code, out.as_str()), (Some(2), ""));
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "p.yaml", BLOCKLIST);
    let o = leash(&["explain", "--policy", p.to_str().unwrap(), "--profile", "nope", "http://x.test/"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("nope"), "{}", stderr(&o));
}

#[test]
fn explain_says_a_model_api_is_inspected_and_its_bodies_read_plain_http_too() {
    let policy = "network:\n  mode: allowlist\n  allowed_hosts: [api.openai.com, gw.test]\n  model_apis: [gw.test]\n";
    let (code, out) = explain(policy, &["CONNECT", "gw.test:443"]);
    assert_eq!((code, out.lines().next()), (Some(0), Some("inspect rule gw.test")));
    assert!(out.contains("`gw.test` is a model API (provider_tools: strip)"), "{out}");
    let (code, out) = explain(policy, &["POST", "https://api.openai.com/v1/responses"]);
    assert_eq!((code, out.lines().next()), (Some(0), Some("allow rule api.openai.com")));
    assert!(out.contains("provider-side tools (web search, web fetch, remote MCP, search grounding) are stripped"));
    let (code, out) = explain(policy, &["http://api.openai.com/v1/responses"]);
    assert_eq!((code, out.lines().next()), (Some(0), Some("allow rule api.openai.com")));
    assert!(out.contains("each request body is read (JSON, uncompressed, bounded)"), "{out}");
    let allow = format!("{policy}  provider_tools: allow\n");
    let (code, out) = explain(&allow, &["CONNECT", "api.openai.com:443"]);
    assert_eq!((code, out.lines().next()), (Some(0), Some("allow rule api.openai.com")));
    assert!(!out.contains("model API"), "{out}");
}

#[test]
fn explain_uses_the_profile_asked_for() {
    let (code, out) = explain(
        "network:\n  mode: allowlist\n  allowed_hosts: [pypi.org]\nprofiles:\n  open:\n    network: { mode: blocklist, blocked_urls: [] }\n",
        &["--profile", "open", "http://example.org/"],
    );
    assert_eq!((code, out.lines().next()), (Some(0), Some("allow default")));
}

#[test]
fn explain_takes_inline_rules_as_run_does_and_agrees_with_the_same_policy_file() {
    let inline = |args: &[&str]| {
        let o = leash(&[&["explain"], args].concat());
        (o.status.code(), stdout(&o).lines().next().unwrap_or_default().to_owned())
    };
    let file = |policy: &str, url: &str| {
        let (code, out) = explain(policy, &[url]);
        (code, out.lines().next().unwrap_or_default().to_owned())
    };
    let allow = "network:\n  mode: allowlist\n  allowed_hosts: [pypi.org, .pythonhosted.org]\n";
    for url in ["https://files.pythonhosted.org/x.whl", "http://pypi.org/simple/", "https://evil.test/"] {
        assert_eq!(inline(&["--allow", "pypi.org", "--allow", ".pythonhosted.org", url]), file(allow, url), "{url}");
    }
    let block = "network:\n  mode: blocklist\n  blocked_urls: [arxiv.org/abs/]\n";
    for url in ["http://arxiv.org/abs/2401.01234", "http://arxiv.org/list/"] {
        assert_eq!(inline(&["--block", "arxiv.org/abs/", url]), file(block, url), "{url}");
    }
    assert_eq!(inline(&["--allow", "bad host", "http://x.test/"]).0, Some(2), "an invalid rule is a usage error");
    assert_eq!(inline(&["http://x.test/"]).0, Some(2), "a policy or a rule is required");
}

// ---- proxy

/// An allowlist of `host` on `port`, with the host's loopback (where the tests' origins listen) exempt.
fn loopback_allowlist(host: &str, port: u16) -> String {
    format!("network:\n  mode: allowlist\n  allowed_hosts: [{host}]\n  ports: [{port}]\n  allow_destinations: [127.0.0.1/32]\n")
}

struct Proxy {
    child: Child,
    addr: String,
}

impl Proxy {
    fn start(policy: &Path, log: &Path, extra: &[&str]) -> Proxy {
        Proxy::start_with(&[&["--policy", policy.to_str().unwrap()], extra].concat(), log)
    }

    /// `leash proxy ARGS` on a free port, its audit log at `log`.
    fn start_with(args: &[&str], log: &Path) -> Proxy {
        Proxy::start_in(Path::new("."), args, log)
    }

    /// [`Proxy::start_with`], started in the directory `cwd`.
    fn start_in(cwd: &Path, args: &[&str], log: &Path) -> Proxy {
        let mut child = Command::new(LEASH)
            .current_dir(cwd)
            .args(["proxy", "--listen", "127.0.0.1:0", "--log"])
            .arg(log)
            .args(args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let addr = line.trim().strip_prefix("listening on ").expect("listening line").to_owned();
        Proxy { child, addr }
    }

    fn curl(&self, url: &str) -> String {
        let o = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", "-x"])
            .arg(format!("http://{}", self.addr))
            .arg(url)
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn signal(&self, sig: &str) {
        Command::new("kill").args(["-s", sig, &self.child.id().to_string()]).status().unwrap();
    }

    /// Wait for the exit, then return the status and everything leash wrote on stderr.
    fn wait_with_stderr(mut self) -> (Option<i32>, String) {
        let mut err = self.child.stderr.take().unwrap();
        let code = self.wait();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut err, &mut text).unwrap();
        (code, text)
    }

    fn wait(&mut self) -> Option<i32> {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        panic!("leash proxy did not exit after the signal");
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn version_names_the_commit_it_was_built_from() {
    let o = leash(&["--version"]);
    assert_eq!(o.status.code(), Some(0));
    let out = stdout(&o);
    let head = Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).output().unwrap();
    let head = String::from_utf8_lossy(&head.stdout).trim().to_owned();
    assert!(out.starts_with(&format!("leash {} (", env!("CARGO_PKG_VERSION"))), "{out}");
    // A git checkout (as here and on CI) names its commit; the binary may be one commit behind a fresh commit only
    // if cargo did not rebuild, which `rerun-if-changed` on the index prevents.
    assert!(head.is_empty() || out.contains(&head), "`{out}` names {head}");
}

#[test]
fn the_ca_hint_is_given_only_where_a_tunnel_may_be_inspected() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    let hint = "the run's CA certificate is not written anywhere";
    for (policy, inspects) in [
        ("network:\n  mode: allowlist\n  allowed_hosts: [pypi.org]\n", false),
        ("network:\n  mode: allowlist\n  allowed_urls: [github.com/rust-lang/]\n", true),
        ("network:\n  mode: blocklist\n  blocked_urls: [refused.test]\n", true),
    ] {
        let path = write(dir.path(), "p.yaml", policy);
        let proxy = Proxy::start(&path, &log, &[]);
        // Served (its signal handling in place) once it answers.
        assert_eq!(proxy.curl("http://refused.test/"), "403");
        proxy.signal("TERM");
        let (code, stderr) = proxy.wait_with_stderr();
        assert_eq!(code, Some(0), "{stderr}");
        assert_eq!(stderr.contains(hint), inspects, "{policy}: {stderr}");
    }
}

#[test]
fn proxy_allows_refuses_and_logs_then_stops_cleanly_on_sigterm() {
    let port = origin();
    let dir = tempfile::tempdir().unwrap();
    let policy = write(dir.path(), "p.yaml", &loopback_allowlist("docs.test", port));
    let log = dir.path().join("audit.jsonl");
    let proxy = Proxy::start(&policy, &log, &["--resolve", "docs.test:127.0.0.1"]);
    assert_eq!(proxy.curl(&format!("http://docs.test:{port}/a")), "200");
    assert_eq!(proxy.curl(&format!("http://other.test:{port}/b?secret=1")), "403");
    proxy.signal("TERM");
    assert_eq!(proxy.wait_with_stderr().0, Some(0));
    let lines = log_lines(&log);
    assert_eq!(lines.len(), 3, "allow + outcome + block: {lines:?}");
    assert_eq!(lines[0]["decision"], "allow");
    assert_eq!(lines[1]["status"], 200);
    assert_eq!(lines[2]["reason"], "not-allowed");
    assert_eq!(lines[2]["path"], "/b?secret=1", "refused requests keep their query");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&log).unwrap().permissions().mode() & 0o777, 0o600);
}

/// The generation a control socket says is in force.
fn generation(control: &Path) -> Option<u64> {
    use std::io::Write as _;
    let mut stream = std::os::unix::net::UnixStream::connect(control).ok()?;
    stream.write_all(b"{\"op\":\"status\"}\n").ok()?;
    let mut reply = String::new();
    BufReader::new(stream).read_line(&mut reply).ok()?;
    serde_json::from_str::<serde_json::Value>(&reply).ok()?["generation"].as_u64()
}

#[test]
fn a_proxy_switched_over_its_control_socket_stays_switched_after_a_sighup() {
    let port = origin();
    let dir = tempfile::tempdir().unwrap();
    let setup = write(dir.path(), "setup.yaml", &loopback_allowlist("docs.test, b.test", port));
    let locked = write(dir.path(), "locked.yaml", &loopback_allowlist("b.test", port));
    let (control, log) = (dir.path().join("ctl/s.sock"), dir.path().join("audit.jsonl"));
    let pins = ["--resolve", "docs.test:127.0.0.1", "--resolve", "b.test:127.0.0.1"];
    let proxy = Proxy::start(&setup, &log, &[&["--control", control.to_str().unwrap()], &pins[..]].concat());
    assert_eq!(proxy.curl(&format!("http://docs.test:{port}/setup")), "200");
    let o = leash(&["policy", "switch", "--control", control.to_str().unwrap(), locked.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("(generation 1)"), "{}", stdout(&o));
    assert_eq!(proxy.curl(&format!("http://docs.test:{port}/locked")), "403");
    assert_eq!(proxy.curl(&format!("http://b.test:{port}/locked")), "200");
    // A log rotation's SIGHUP reloads the file switched to, not the one leash started with.
    proxy.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    while generation(&control) != Some(2) {
        assert!(Instant::now() < deadline, "the SIGHUP reload never came");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(proxy.curl(&format!("http://docs.test:{port}/reloaded")), "403", "still locked after the SIGHUP");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(control.parent().unwrap()).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "only leash's user may reach the socket");
    proxy.signal("TERM");
    assert_eq!(proxy.wait_with_stderr().0, Some(0));
    assert!(!control.exists(), "the socket is removed at the end");
    let switches: Vec<(String, String, String, u64)> = log_lines(&log)
        .iter()
        .filter(|l| l["event"] == "policy-switch")
        .map(|l| {
            let name = |k: &str| l[k].as_str().unwrap().rsplit('/').next().unwrap().to_owned();
            (l["by"].as_str().unwrap().to_owned(), name("from"), name("to"), l["generation"].as_u64().unwrap())
        })
        .collect();
    let want = [("control-socket", "setup.yaml", "locked.yaml", 1), ("sighup", "locked.yaml", "locked.yaml", 2)];
    let want: Vec<_> =
        want.iter().map(|(b, f, t, g)| ((*b).to_owned(), (*f).to_owned(), (*t).to_owned(), *g)).collect();
    assert_eq!(switches, want, "both swaps on record");
    // Ask mode's `always` writes the file leash started with: no switching there.
    let other = dir.path().join("ctl2/s.sock");
    let o = leash(&[
        "proxy",
        "--listen",
        "127.0.0.1:0",
        "--ask",
        "--allow",
        "a.test",
        "--control",
        other.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(stderr(&o).contains("ask mode"), "{}", stderr(&o));
}

#[test]
fn proxy_takes_inline_rules_like_the_other_commands_and_a_sighup_keeps_them() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    let proxy = Proxy::start_with(&["--allow", "docs.test", "--resolve", "docs.test:127.0.0.1"], &log);
    // Allowed by the rule, then refused at the destination check (loopback is not exempt inline): the rule decided.
    assert_eq!(proxy.curl("http://docs.test/a"), "403");
    assert_eq!(proxy.curl("http://other.test/b"), "403");
    proxy.signal("HUP");
    assert_eq!(proxy.curl("http://other.test/c"), "403", "still serving the same rules after SIGHUP");
    proxy.signal("TERM");
    let (code, stderr) = proxy.wait_with_stderr();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("nothing to reload"), "{stderr}");
    let reasons: Vec<String> =
        log_lines(&log).iter().map(|l| l["reason"].as_str().unwrap_or_default().to_owned()).collect();
    assert_eq!(reasons, ["internal-destination", "not-allowed", "not-allowed"], "{reasons:?}");
    // Mixed modes, a profile beside inline rules, and neither policy nor rules are usage errors.
    for args in [&["--allow", "a.test", "--block", "b.test"][..], &["--profile", "x", "--allow", "a.test"], &[]] {
        let o = leash(&[&["proxy", "--listen", "127.0.0.1:0"], args].concat());
        assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
    }
}

#[test]
fn proxy_says_on_stderr_why_it_refused_and_why_a_reload_failed_then_stops_on_sigint() {
    let port = origin();
    let dir = tempfile::tempdir().unwrap();
    let policy = write(dir.path(), "p.yaml", &loopback_allowlist("docs.test", port));
    let log = dir.path().join("audit.jsonl");
    let proxy = Proxy::start(&policy, &log, &["--resolve", "docs.test:127.0.0.1"]);
    assert_eq!(proxy.curl(&format!("http://other.test:{port}/x")), "403");
    write(dir.path(), "p.yaml", "network:\n  mode: allowlist\n  blocked_urls: [192.0.2.1]\n");
    proxy.signal("HUP");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(proxy.curl(&format!("http://docs.test:{port}/y")), "200", "the old policy is kept");
    proxy.signal("INT");
    let (code, err) = proxy.wait_with_stderr();
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("other.test") && err.contains("not-allowed"), "a warning per refusal: {err}");
    assert!(err.contains("blocked_urls"), "the reload failure says which entry: {err}");
    assert_eq!(log_lines(&log).iter().filter(|l| l.get("decision").is_some()).count(), 2, "both requests logged");
}

#[test]
fn proxy_reopens_its_audit_log_on_sighup_after_logrotate_moved_it() {
    let port = origin();
    let dir = tempfile::tempdir().unwrap();
    let policy = write(dir.path(), "p.yaml", &loopback_allowlist("one.test", port));
    let (log, rotated) = (dir.path().join("audit.jsonl"), dir.path().join("audit.jsonl.1"));
    let proxy = Proxy::start(&policy, &log, &["--resolve", "one.test:127.0.0.1"]);
    assert_eq!(proxy.curl(&format!("http://one.test:{port}/before")), "200");
    std::fs::rename(&log, &rotated).unwrap();
    proxy.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !log.exists() {
        assert!(Instant::now() < deadline, "the log was not reopened");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(proxy.curl(&format!("http://one.test:{port}/after")), "200");
    let paths =
        |p: &Path| log_lines(p).iter().filter_map(|l| l["path"].as_str().map(str::to_owned)).collect::<Vec<_>>();
    assert_eq!(paths(&rotated), ["/before"]);
    assert_eq!(paths(&log), ["/after"]);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&log).unwrap().permissions().mode() & 0o777, 0o600);
}

#[test]
fn proxy_reloads_on_sighup_and_keeps_the_old_policy_when_the_new_one_is_invalid() {
    let port = origin();
    let dir = tempfile::tempdir().unwrap();
    let policy = write(dir.path(), "p.yaml", &loopback_allowlist("one.test", port));
    let log = dir.path().join("audit.jsonl");
    let proxy = Proxy::start(&policy, &log, &["--resolve", "one.test:127.0.0.1", "--resolve", "two.test:127.0.0.1"]);
    assert_eq!(proxy.curl(&format!("http://two.test:{port}/")), "403");
    write(dir.path(), "p.yaml", &loopback_allowlist("two.test", port));
    proxy.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    while proxy.curl(&format!("http://two.test:{port}/")) != "200" {
        assert!(Instant::now() < deadline, "reload did not take effect");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(proxy.curl(&format!("http://one.test:{port}/")), "403");
    write(dir.path(), "p.yaml", "network:\n  mode: nonsense\n");
    proxy.signal("HUP");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(proxy.curl(&format!("http://two.test:{port}/")), "200", "an invalid file keeps the old policy");
}

#[test]
fn proxy_does_not_start_without_its_audit_log() {
    let dir = tempfile::tempdir().unwrap();
    let policy = write(dir.path(), "p.yaml", BLOCKLIST);
    let o = Command::new(LEASH)
        .args([
            "proxy",
            "--policy",
            policy.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--log",
            "/nonexistent-dir/audit.jsonl",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("audit log"), "{}", stderr(&o));
    assert!(!stdout(&o).contains("listening"));
}

/// The names of a process's threads that serve connections (tokio's workers).
fn worker_threads(pid: u32) -> usize {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    let comm = |t: std::fs::DirEntry| std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
    tasks.filter_map(Result::ok).map(comm).filter(|name| name.trim() == "tokio-rt-worker").count()
}

#[test]
fn proxy_serves_on_as_many_threads_as_it_is_told() {
    let port = origin();
    let dir = tempfile::tempdir().unwrap();
    let policy = write(dir.path(), "p.yaml", &loopback_allowlist("docs.test", port));
    for threads in [1, 3] {
        let log = dir.path().join(format!("audit-{threads}.jsonl"));
        let n = threads.to_string();
        let proxy = Proxy::start(&policy, &log, &["--resolve", "docs.test:127.0.0.1", "--threads", &n]);
        assert_eq!(proxy.curl(&format!("http://docs.test:{port}/x")), "200");
        assert_eq!(worker_threads(proxy.child.id()), threads);
    }
    let o = leash(&["proxy", "--allow", "docs.test", "--threads", "0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--threads"), "{}", stderr(&o));
}

#[test]
fn proxy_refuses_an_invalid_policy_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let policy = write(dir.path(), "p.yaml", "network:\n  mode: allowlist\n  blocked_urls: [192.0.2.1]\n");
    let o = Command::new(LEASH)
        .args(["proxy", "--policy", policy.to_str().unwrap(), "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("blocked_urls"), "{}", stderr(&o));
}

/// The binary's relative relocations are packed (build.rs) wherever the toolchain can: on a glibc of 2.36 or later
/// with binutils' `ld` (this repository's machines), the binary has a `RELR` table, which starts it ~0.3 ms sooner.
#[test]
fn the_binary_packs_its_relative_relocations_where_glibc_can() {
    let glibc = Command::new("getconf").arg("GNU_LIBC_VERSION").output().map(|o| stdout(&o)).unwrap_or_default();
    let version = glibc
        .trim()
        .strip_prefix("glibc ")
        .and_then(|v| v.split_once('.'))
        .map(|(major, minor)| (major.parse::<u32>().unwrap_or(0), minor.parse::<u32>().unwrap_or(0)));
    if !cfg!(all(target_os = "linux", target_env = "gnu")) || version.is_none_or(|v| v < (2, 36)) {
        return;
    }
    let Ok(dynamic) = Command::new("readelf").args(["--dynamic", LEASH]).output() else { return };
    assert!(stdout(&dynamic).contains("(RELR)"), "no packed relocations:\n{}", stdout(&dynamic));
}

#[test]
fn every_subcommand_help_teaches_with_an_example() {
    for sub in
        [&["proxy"][..], &["check"], &["explain"], &["run"], &["docker"], &["docker", "run"], &["docker", "attach"]]
    {
        let o = leash(&[sub, &["--help"]].concat());
        assert_eq!(o.status.code(), Some(0));
        assert!(stdout(&o).contains("Example"), "{sub:?} --help has an example");
    }
}

// ---- run

fn run_policy(dir: &Path, port: u16) -> PathBuf {
    write(dir, "run.yaml", &loopback_allowlist("docs.test", port))
}

/// Start an origin on the host's loopback, run `sh -c SCRIPT(port)` under `leash run` with an allowlist naming
/// `docs.test` (pinned to that origin), and return what it printed and the audit log.
fn leash_run(script: impl Fn(u16) -> String) -> (Output, Vec<serde_json::Value>) {
    let port = origin();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    let policy = run_policy(dir.path(), port);
    let o = Command::new(LEASH)
        .args(["run", "--policy", policy.to_str().unwrap(), "--resolve", "docs.test:127.0.0.1", "--log"])
        .arg(&log)
        .args(["--", "sh", "-c", &script(port)])
        .output()
        .unwrap();
    (o, log_lines(&log))
}

#[test]
fn run_fetches_through_the_proxy_refuses_the_rest_and_propagates_the_exit_status() {
    if !sandbox_available() {
        return;
    }
    let (o, lines) = leash_run(|port| {
        format!(
            "curl -s http://docs.test:{port}/ok; echo; \
             curl -s -o /dev/null -w '%{{http_code}}\\n' http://evil.test:{port}/x; \
             exit 7"
        )
    });
    assert_eq!(o.status.code(), Some(7), "stderr: {}", stderr(&o));
    assert_eq!(stdout(&o), "origin\n403\n");
    let decisions: Vec<_> = lines.iter().filter(|l| l.get("decision").is_some()).collect();
    assert_eq!(decisions.len(), 2, "{lines:?}");
    assert_eq!(decisions[0]["decision"], "allow");
    assert_eq!(decisions[1]["reason"], "not-allowed");
}

#[test]
fn run_leaves_no_direct_way_out() {
    if !sandbox_available() {
        return;
    }
    // The origin listens on the host's loopback; inside, 127.0.0.1 is the sandbox's own, where nothing but the
    // proxy listens. A direct fetch that ignores the proxy variables, and a lookup of a refused name, must both fail.
    let (o, _) = leash_run(|port| {
        format!(
            "curl -s --noproxy '*' --max-time 5 http://127.0.0.1:{port}/ && echo DIRECT-REACHED; \
             getent hosts evil.test && echo DNS-ANSWERED; \
             ip -o addr 2>/dev/null | grep -v ' lo ' && echo OTHER-INTERFACE; \
             exit 0"
        )
    });
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    let out = stdout(&o);
    assert!(!out.contains("DIRECT-REACHED") && !out.contains("origin"), "{out}");
    assert!(!out.contains("DNS-ANSWERED"), "{out}");
    assert!(!out.contains("OTHER-INTERFACE"), "{out}");
}

/// Inside the sandbox: an allowed name, a refused one (the error code and the time it took), `localhost`.
const LOOKUPS: &str = r#"
import socket, time
print(sorted({a[4][0] for a in socket.getaddrinfo("docs.test", 80, proto=socket.IPPROTO_TCP)}))
start = time.monotonic()
try:
    socket.getaddrinfo("evil.test", 80)
    print("evil.test RESOLVED")
except socket.gaierror as e:
    print("evil.test", "NONAME" if e.errno == socket.EAI_NONAME else e, round(time.monotonic() - start, 1))
print(socket.getaddrinfo("localhost", 80, socket.AF_INET)[0][4][0])
"#;

#[test]
fn run_answers_allowed_names_with_a_sandbox_address_and_refused_ones_at_once() {
    if !sandbox_available() {
        return;
    }
    let started = Instant::now();
    let (o, lines) = leash_run(|_| {
        format!("getent hosts docs.test; getent hosts DOCS.test.; timeout 20 python3 -c '{LOOKUPS}'; exit 0")
    });
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    let out = stdout(&o);
    let mut out_lines = out.lines();
    assert_eq!(
        out_lines.next().map(|l| l.split_whitespace().collect::<Vec<_>>()),
        Some(vec!["127.0.0.2", "docs.test"])
    );
    assert!(out_lines.next().is_some_and(|l| l.starts_with("127.0.0.2 ")), "{out}");
    assert_eq!(out_lines.next(), Some("['127.0.0.2']"), "AAAA gets no answer: {out}");
    // NXDOMAIN (EAI_NONAME), not a time-out (EAI_AGAIN): the stub answered.
    let refused = out_lines.next().unwrap_or_default();
    assert!(refused.starts_with("evil.test NONAME "), "{out}");
    eprintln!("a refused lookup took {} s; the whole run {:?}", &refused[17..], started.elapsed());
    assert_eq!(out_lines.next(), Some("127.0.0.1"), "{out}");
    // Every refused lookup is on record (each query: A, and AAAA where asked), the allowed name once while its
    // answer stands (two getents and Python's lookup), `localhost` not at all; there was no request.
    let (lookups, decisions) = lookups_and_decisions(&lines);
    assert!(decisions.is_empty(), "{lines:?}");
    let looked_up = decided(&lookups);
    let (allowed, refused): (Vec<_>, Vec<_>) = looked_up.iter().partition(|(d, _)| d == "allow");
    assert_eq!(allowed, [&("allow".to_owned(), "docs.test".to_owned())], "{looked_up:?}");
    assert!(!refused.is_empty() && refused.iter().all(|(d, h)| d == "block" && h == "evil.test"), "{looked_up:?}");
}

/// Raw DNS queries to the stub for names that are no host name, each label as bytes; prints each answer's rcode.
const ODD_LOOKUPS: &str = r#"
import socket, struct
names = [[b"_ldap", b"_tcp", b"evil", b"test"], [b"a b", b"test"], [b"q\"uote", b"test"], [b"back\\slash", b"test"],
         [b"ctl\x01", b"test"], [b"\xc3\xa9t\xc3\xa9", b"test"], [b"127", b"0", b"0", b"1"]]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(5)
for i, labels in enumerate(names):
    q = struct.pack(">HHHHHH", i, 0x0100, 1, 0, 0, 0) + b"".join(bytes([len(l)]) + l for l in labels) + b"\0\0\x01\0\x01"
    s.sendto(q, ("127.0.0.1", 53))
    print(s.recv(512)[3] & 15)
"#;

#[test]
fn run_puts_every_refused_lookup_on_record_also_names_that_are_no_host_name() {
    if !sandbox_available() {
        return;
    }
    let (o, lines) = leash_run(|_| format!("timeout 20 python3 -c '{ODD_LOOKUPS}'"));
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert_eq!(stdout(&o), "3\n".repeat(7), "NXDOMAIN for each: {}", stderr(&o));
    let (lookups, _) = lookups_and_decisions(&lines);
    let recorded: Vec<(String, String, String)> = lookups
        .iter()
        .map(|l| {
            let text = |k: &str| l[k].as_str().unwrap_or_default().to_owned();
            (text("decision"), text("reason"), text("host"))
        })
        .collect();
    let block = |reason: &str, host: &str| ("block".to_owned(), reason.to_owned(), host.to_owned());
    assert_eq!(
        recorded,
        [
            block("bad-host", "_ldap._tcp.evil.test"),
            block("bad-host", "a\\032b.test"),
            block("bad-host", "q\"uote.test"),
            block("bad-host", "back\\092slash.test"),
            block("bad-host", "ctl\\001.test"),
            block("bad-host", "\\195\\169t\\195\\169.test"),
            block("ip-literal", "127.0.0.1"),
        ],
        "{lines:?}"
    );
}

#[test]
fn run_reports_a_signal_death_as_128_plus_n_and_ends_leftover_processes() {
    if !sandbox_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("leftover.pid");
    // A duration no other run of this test (nor any other program) uses, so the search below finds only ours.
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let sleep = format!("sleep 300.{nanos:09}");
    let o = Command::new(LEASH)
        .args(["run", "--", "sh", "-c"])
        .arg(format!("{sleep} & echo $! > {}; kill -9 $$", marker.display()))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(137), "stderr: {}", stderr(&o));
    // The leftover `sleep` was in the sandbox's PID namespace: no process on the host still runs it once leash has
    // returned (its pid inside is not a host pid, so look for it by its command line).
    let ps = Command::new("pgrep").args(["-af", &format!("^{sleep}$")]).output().unwrap();
    assert!(String::from_utf8_lossy(&ps.stdout).trim().is_empty(), "a leftover process survived: {ps:?}");
}

#[test]
fn run_works_when_started_with_stdin_and_stdout_closed() {
    if !sandbox_available() {
        return;
    }
    // leash's own descriptors then take the numbers 0 and 1: nothing may mistake them for stdio.
    let script = format!("exec 0<&- 1>&-; exec {LEASH} run -- sh -c 'echo inside >&2; exit 3'");
    let o = Command::new("sh").args(["-c", &script]).output().unwrap();
    assert_eq!(o.status.code(), Some(3), "stderr: {}", stderr(&o));
    assert!(stderr(&o).contains("inside"), "stderr: {}", stderr(&o));
}

#[test]
fn run_with_an_inline_allowlist_and_blocklist_mixed_is_an_error() {
    let o = leash(&["run", "--allow", "a.test", "--block", "b.test", "--", "true"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--block"), "{}", stderr(&o));
}

fn inspected_policy(dir: &Path, port: u16) -> PathBuf {
    write(
        dir,
        "inspect.yaml",
        &format!(
            "network:\n  mode: blocklist\n  blocked_urls: [docs.test/secret]\n  tunnel_ports: [{port}]\n  allow_destinations: [127.0.0.1/32]\n"
        ),
    )
}

#[test]
fn proxy_inspects_https_with_the_run_ca_and_writes_only_certificates() {
    let dir = tempfile::tempdir().unwrap();
    let upstream_ca = https_material(dir.path());
    let origin = HttpsOrigin::start(dir.path());
    let out = tempfile::tempdir().unwrap();
    let (ca, bundle, log) = (out.path().join("ca.pem"), out.path().join("bundle.pem"), out.path().join("audit.jsonl"));
    let policy = inspected_policy(dir.path(), origin.port);
    let args = ["--resolve", "docs.test:127.0.0.1", "--upstream-ca", upstream_ca.to_str().unwrap(), "--ca-cert-out"];
    let proxy = Proxy::start(
        &policy,
        &log,
        &[&args[..], &[ca.to_str().unwrap(), "--ca-bundle-out", bundle.to_str().unwrap()]].concat(),
    );
    let get = |path: &str| {
        let o = Command::new("curl")
            .args(["-s", "--max-time", "10", "--cacert", ca.to_str().unwrap(), "-x", &format!("http://{}", proxy.addr)])
            .arg(format!("https://docs.test:{}{path}", origin.port))
            .output()
            .unwrap();
        stdout(&o)
    };
    assert_eq!(get("/ok"), "origin-tls /ok");
    assert!(get("/secret/x").starts_with("leash: docs.test/secret/x refused by the egress policy (rule)"));
    // The CA file holds one certificate; the bundle holds the system roots and ends with the run's CA.
    let ca_text = std::fs::read_to_string(&ca).unwrap();
    assert_eq!(ca_text.matches("BEGIN CERTIFICATE").count(), 1);
    let bundle_text = std::fs::read_to_string(&bundle).unwrap();
    assert!(bundle_text.ends_with(&ca_text) && bundle_text.matches("BEGIN CERTIFICATE").count() > 1);
    // INVARIANT check: nothing leash wrote holds a private key.
    for entry in std::fs::read_dir(out.path()).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        assert!(!text.contains("PRIVATE KEY"), "a file leash wrote holds a key");
    }
    let lines = log_lines(&log);
    assert!(lines.iter().any(|l| l["decision"] == "inspect"), "{lines:?}");
    assert!(lines.iter().any(|l| l["path"] == "/secret/x" && l["decision"] == "block"), "{lines:?}");
}

#[test]
fn proxy_env_file_points_curl_and_requests_at_the_proxy_and_its_ca_when_sourced() {
    // `export SSL_CERT_FILE=...` alone failed with curl (it reads the lower-case proxy variable, and needs
    // CURL_CA_BUNDLE on some builds) and requests (REQUESTS_CA_BUNDLE): the file carries every variable run sets.
    let dir = tempfile::tempdir().unwrap();
    let upstream_ca = https_material(dir.path());
    let origin = HttpsOrigin::start(dir.path());
    let out = tempfile::tempdir().unwrap();
    let (env_file, log) = (out.path().join("leash.env"), out.path().join("audit.jsonl"));
    let policy = inspected_policy(dir.path(), origin.port);
    let args = ["--resolve", "docs.test:127.0.0.1", "--upstream-ca", upstream_ca.to_str().unwrap(), "--env-file"];
    let proxy = Proxy::start(&policy, &log, &[&args[..], &[env_file.to_str().unwrap()]].concat());
    let script = std::fs::read_to_string(&env_file).unwrap();
    assert!(script.contains(&format!("export http_proxy='http://{}'", proxy.addr)), "{script}");
    for var in ["http_proxy", "HTTPS_PROXY", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "LEASH"] {
        assert!(script.contains(&format!("export {var}")), "{var} in {script}");
    }
    let in_shell = |client: &str| {
        let program = format!(". '{}' && {client}", env_file.display());
        let o = Command::new("sh").args(["-c", &program]).env_clear().env("PATH", "/usr/bin:/bin").output().unwrap();
        (stdout(&o), stderr(&o))
    };
    let url = |path: &str| format!("https://docs.test:{}{path}", origin.port);
    let curl = |path: &str| in_shell(&format!("curl -sS --max-time 10 {}", url(path)));
    assert_eq!(curl("/ok").0, "origin-tls /ok", "{:?}", curl("/ok"));
    assert!(curl("/secret/x").0.starts_with("leash: docs.test/secret/x refused"), "{:?}", curl("/secret/x"));
    let requests = |path: &str| {
        in_shell(&format!(
            "python3 -c 'import requests; r = requests.get(\"{}\", timeout=10); print(r.status_code, r.text)'",
            url(path)
        ))
    };
    assert_eq!(requests("/ok").0.trim(), "200 origin-tls /ok", "{:?}", requests("/ok"));
    assert!(requests("/secret/x").0.starts_with("403 leash:"), "{:?}", requests("/secret/x"));
    assert!(std::fs::read_to_string(out.path().join("leash.env.ca.pem")).unwrap().contains("BEGIN CERTIFICATE"));
    let lines = log_lines(&log);
    assert!(lines.iter().any(|l| l["path"] == "/secret/x" && l["decision"] == "block"), "{lines:?}");
}

#[test]
fn an_env_file_named_relatively_is_sourced_from_any_directory() {
    // It used to name `leash.env.bundle.pem` as written: after `. ./leash.env`, an HTTPS client started in another
    // directory found no bundle.
    let dir = tempfile::tempdir().unwrap();
    let upstream_ca = https_material(dir.path());
    let origin = HttpsOrigin::start(dir.path());
    let out = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let (policy, log) = (inspected_policy(dir.path(), origin.port), out.path().join("audit.jsonl"));
    let args = ["--policy", policy.to_str().unwrap(), "--resolve", "docs.test:127.0.0.1"];
    let args = [&args[..], &["--upstream-ca", upstream_ca.to_str().unwrap(), "--env-file", "leash.env"]].concat();
    let _proxy = Proxy::start_in(out.path(), &args, &log);
    let script = std::fs::read_to_string(out.path().join("leash.env")).unwrap();
    for line in script.lines().filter(|l| l.contains("CA_") || l.contains("CERT")) {
        let value = line.split_once('=').unwrap().1.trim_matches('\'');
        assert!(Path::new(value).is_absolute() && Path::new(value).exists(), "{line}");
    }
    let program = format!(
        ". '{}' && cd '{}' && curl -sS --max-time 10 https://docs.test:{}/ok",
        out.path().join("leash.env").display(),
        elsewhere.path().display(),
        origin.port
    );
    let o = Command::new("sh").args(["-c", &program]).env_clear().env("PATH", "/usr/bin:/bin").output().unwrap();
    assert_eq!(stdout(&o), "origin-tls /ok", "{}", stderr(&o));
}

#[test]
fn proxy_refuses_to_start_with_an_unreadable_upstream_ca() {
    let dir = tempfile::tempdir().unwrap();
    let policy = inspected_policy(dir.path(), 443);
    let o = leash(&["proxy", "--policy", policy.to_str().unwrap(), "--upstream-ca", "/nonexistent/ca.pem"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("cannot set up TLS inspection"), "{}", stderr(&o));
}

#[test]
fn run_gives_the_command_the_run_ca_so_refusals_inside_tls_are_readable() {
    if !sandbox_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let upstream_ca = https_material(dir.path());
    let origin = HttpsOrigin::start(dir.path());
    let policy = inspected_policy(dir.path(), origin.port);
    let port = origin.port;
    // curl reads HTTPS_PROXY and CURL_CA_BUNDLE from the environment leash gives it; python reads SSL_CERT_FILE.
    let script = format!(
        "curl -s https://docs.test:{port}/ok; echo; curl -s https://docs.test:{port}/secret/x | head -1; \
         python3 -c 'import os; print(os.environ[\"NODE_EXTRA_CA_CERTS\"].endswith(\"ca.pem\"), \
         os.environ[\"SSL_CERT_FILE\"] == os.environ[\"REQUESTS_CA_BUNDLE\"] == os.environ[\"GIT_SSL_CAINFO\"])'"
    );
    let o = Command::new(LEASH)
        .args(["run", "--policy", policy.to_str().unwrap(), "--resolve", "docs.test:127.0.0.1", "--upstream-ca"])
        .arg(&upstream_ca)
        .args(["--", "sh", "-c", &script])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "origin-tls /ok\nleash: docs.test/secret/x refused by the egress policy (rule)\nTrue True\n",
        "stderr: {}",
        stderr(&o)
    );
}

#[test]
fn run_proxy_unaware_clients_reach_allowed_names_through_the_transparent_listener() {
    if !sandbox_available() {
        return;
    }
    // `--noproxy '*'`: curl ignores the proxy variables, resolves through the DNS stub and connects to the sandbox
    // address, where leash decides on the Host header exactly as for a proxied request.
    let (o, lines) = leash_run(|port| {
        format!(
            "curl -s --noproxy '*' http://docs.test:{port}/direct; echo; \
             curl -s --noproxy '*' -o /dev/null -w '%{{http_code}}\\n' -H 'Host: evil.test:{port}' http://docs.test:{port}/; \
             curl -s --noproxy '*' --max-time 5 http://evil.test:{port}/ >/dev/null; echo \"refused name: curl exit $?\""
        )
    });
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert_eq!(stdout(&o), "origin\n403\nrefused name: curl exit 6\n", "stderr: {}", stderr(&o));
    let (lookups, decisions) = lookups_and_decisions(&lines);
    let looked_up = decided(&lookups);
    assert!(looked_up.contains(&("allow".to_owned(), "docs.test".to_owned())), "{looked_up:?}");
    assert!(looked_up.contains(&("block".to_owned(), "evil.test".to_owned())), "the refused lookup: {looked_up:?}");
    assert_eq!(decisions.len(), 2, "{lines:?}");
    assert_eq!((decisions[0]["decision"].as_str(), decisions[0]["host"].as_str()), (Some("allow"), Some("docs.test")));
    assert_eq!(
        (decisions[1]["reason"].as_str(), decisions[1]["host"].as_str()),
        (Some("not-allowed"), Some("evil.test"))
    );
}

#[test]
fn run_proxy_unaware_https_is_decided_on_the_sni_and_inspected_where_the_policy_says() {
    if !sandbox_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let upstream_ca = https_material(dir.path());
    let origin = HttpsOrigin::start(dir.path());
    let policy = inspected_policy(dir.path(), origin.port);
    let port = origin.port;
    let script = format!(
        "unset HTTPS_PROXY https_proxy ALL_PROXY all_proxy; \
         curl -s https://docs.test:{port}/ok; echo; curl -s https://docs.test:{port}/secret/x | head -1"
    );
    let log = dir.path().join("audit.jsonl");
    let o = Command::new(LEASH)
        .args(["run", "--policy", policy.to_str().unwrap(), "--resolve", "docs.test:127.0.0.1", "--upstream-ca"])
        .arg(&upstream_ca)
        .arg("--log")
        .arg(&log)
        .args(["--", "sh", "-c", &script])
        .output()
        .unwrap();
    assert_eq!(
        stdout(&o),
        "origin-tls /ok\nleash: docs.test/secret/x refused by the egress policy (rule)\n",
        "stderr: {}",
        stderr(&o)
    );
    let lines = log_lines(&log);
    assert!(lines.iter().any(|l| l["method"] == "CONNECT" && l["decision"] == "inspect" && l["host"] == "docs.test"));
}

#[test]
fn run_python_urllib_requests_and_node_fetch_work_with_the_environment_alone() {
    if !sandbox_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let upstream_ca = https_material(dir.path());
    let origin = HttpsOrigin::start(dir.path());
    let policy = inspected_policy(dir.path(), origin.port);
    let port = origin.port;
    // Python's urllib (SSL_CERT_FILE) and requests (REQUESTS_CA_BUNDLE) go through the proxy variables; Node's fetch
    // (v20 ignores proxy variables) goes through the DNS stub and the transparent listener, trusting
    // NODE_EXTRA_CA_CERTS. None is told anything but the environment leash sets.
    let python = format!(
        r#"
import urllib.request, urllib.error
print(urllib.request.urlopen("https://docs.test:{port}/ok", timeout=10).read().decode())
try:
    urllib.request.urlopen("https://docs.test:{port}/secret/x", timeout=10)
except urllib.error.HTTPError as e:
    print(e.code, e.headers["X-Leash-Reason"])
try:
    import requests
except ImportError:
    print("MISSING python3-requests")
else:
    r = requests.get("https://docs.test:{port}/req", timeout=10)
    print(r.status_code, r.text)
"#
    );
    let node = format!(
        "if command -v node >/dev/null; then node -e 'fetch(\"https://docs.test:{port}/node\").then(r => r.text()).then(console.log)'; else echo 'MISSING node'; fi"
    );
    let script = format!("python3 -c '{}' && {node}", python.replace('\'', "'\\''"));
    let o = Command::new(LEASH)
        .args(["run", "--policy", policy.to_str().unwrap(), "--resolve", "docs.test:127.0.0.1", "--upstream-ca"])
        .arg(&upstream_ca)
        .args(["--", "sh", "-c", &script])
        .output()
        .unwrap();
    // A client missing here fails the test (CI installs them) unless LEASH_ALLOW_MISSING_CLIENTS=1 says to skip it.
    let out = stdout(&o);
    let missing: Vec<&str> = out.lines().filter_map(|l| l.strip_prefix("MISSING ")).collect();
    if !missing.is_empty() {
        assert_eq!(
            std::env::var("LEASH_ALLOW_MISSING_CLIENTS").as_deref(),
            Ok("1"),
            "clients missing: {missing:?} (install them, or set LEASH_ALLOW_MISSING_CLIENTS=1 to skip them)"
        );
        {
            // Written past the test harness's capture: a skip must show where the results are read.
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "SKIPPED: {missing:?} not installed; their fetches were not tried");
        }
    }
    let expected = [
        ("", "origin-tls /ok"),
        ("", "403 rule"),
        ("python3-requests", "200 origin-tls /req"),
        ("node", "origin-tls /node"),
    ];
    let want: String = expected
        .iter()
        .map(
            |(client, line)| if missing.contains(client) { format!("MISSING {client}\n") } else { format!("{line}\n") },
        )
        .collect();
    assert_eq!(out, want, "stderr: {}", stderr(&o));
}

#[test]
fn explain_piped_into_a_reader_that_went_away_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("p.yaml");
    std::fs::write(&policy, "network:\n  mode: blocklist\n  blocked_urls: [x.test]\n").unwrap();
    // The reader is gone before explain prints (as with `| head -1` on a long output): like any Unix filter, it ends
    // on SIGPIPE, with no panic on stderr.
    // The pipe's reading end is closed before leash starts, so its first write always meets a closed pipe (dropping
    // it after the spawn raced the write, which a fast leash could finish first).
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_leash"))
        .args(["explain", "--policy", policy.to_str().unwrap(), "https://example.org/"])
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked") && !err.contains("Broken pipe"), "{err}");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(o.status.signal(), Some(13), "ended by SIGPIPE: {:?}", o.status);
}

// ---- completions and the manual page

#[test]
fn bash_completes_subcommands_and_options_from_the_generated_script() {
    let script = stdout(&leash(&["completions", "bash"]));
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "leash.bash", &script);
    // bash sources the script and completes as it would at a prompt: `leash ru<TAB>`, `leash run --allow-u<TAB>`.
    let complete = |words: &str| {
        let line = format!("leash {words}");
        let program = format!(
            "source {}; COMP_WORDS=({line}); COMP_CWORD=$((${{#COMP_WORDS[@]}}-1)); COMP_LINE='{line}'; \
             COMP_POINT=${{#COMP_LINE}}; _leash leash \"${{COMP_WORDS[-1]}}\" \"${{COMP_WORDS[-2]}}\"; \
             printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            path.display()
        );
        let o = Command::new("bash").args(["--norc", "-c", &program]).output().unwrap();
        assert!(o.status.success(), "{o:?}");
        stdout(&o).lines().map(str::to_owned).collect::<Vec<_>>()
    };
    assert_eq!(complete("ru"), ["run"]);
    assert_eq!(complete("run --allow-u"), ["--allow-unix-socket"]);
    assert!(complete("completions ''").contains(&"fish".to_owned()));
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let o = leash(&["completions", shell]);
        assert_eq!(o.status.code(), Some(0), "{shell}");
        assert!(stdout(&o).contains("allow-unix-socket"), "{shell}: every option is in the script");
    }
    assert_eq!(leash(&["completions", "tcsh"]).status.code(), Some(2), "an unknown shell is a usage error");
}

#[test]
fn every_subcommand_has_its_own_manual_page_and_each_renders_with_man() {
    let o = leash(&["man"]);
    assert_eq!(o.status.code(), Some(0));
    let top = stdout(&o);
    assert!(top.contains(".TH leash 1 ") && top.contains("leash\\-run"), "leash(1), naming its subcommands: {top}");
    assert!(!top.contains(".TH leash-run"), "leash(1) is one page, not every page at once");
    let dir = tempfile::tempdir().unwrap();
    let o = leash(&["man", "--dir", dir.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for name in ["leash", "leash-proxy", "leash-check", "leash-run", "leash-docker-run", "leash-attach", "leash-policy"]
    {
        let page = std::fs::read_to_string(dir.path().join(format!("{name}.1"))).unwrap_or_default();
        assert!(page.contains(&format!(".TH {name} 1")), "{name}.1 written, its own page: {page:.200}");
    }
    assert!(!dir.path().join("leash-help.1").exists(), "no page for clap's help subcommand");
    let o = leash(&["man", "docker", "run"]);
    assert!(stdout(&o).contains(".TH leash-docker-run 1"), "{}", stderr(&o));
    let o = leash(&["man", "nosuch"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no page for `nosuch`") && stderr(&o).contains("leash-run"), "{}", stderr(&o));
    let page = stdout(&leash(&["man", "run"]));
    assert!(page.contains(".TH leash-run 1"), "{page:.200}");
    assert!(page.contains("allow\\-unix\\-socket"), "options are documented");
    let rendered = Command::new("man")
        .args(["-l", "-"])
        .env("MANWIDTH", "100")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let Ok(mut man) = rendered else {
        assert!(std::env::var_os("LEASH_ALLOW_MISSING_CLIENTS").is_some(), "man is not installed");
        return;
    };
    std::io::Write::write_all(&mut man.stdin.take().unwrap(), page.as_bytes()).unwrap();
    let out = man.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("SYNOPSIS") && text.contains("--allow-unix-socket"), "{text}");
}

// ---- the docs' commands

/// Every `leash check` and `leash explain` line of a shell block in README.md and docs/ with concrete arguments (no
/// placeholder in capitals such as FILE or URL), as written there.
fn documented_commands() -> Vec<(String, Vec<String>)> {
    let mut files = vec![PathBuf::from("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir("docs").unwrap().map(|e| e.unwrap().path()).collect();
    docs.sort();
    files.extend(docs.into_iter().filter(|p| p.extension().is_some_and(|e| e == "md")));
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let mut in_shell = false;
        for line in text.lines() {
            if line.starts_with("```") {
                in_shell = line == "```sh";
                continue;
            }
            let command = line.split("  #").next().unwrap_or_default().trim();
            let Some(rest) = command.strip_prefix("leash ").or_else(|| command.strip_prefix("$leash ")) else {
                continue;
            };
            let words: Vec<String> = rest.split_whitespace().map(str::to_owned).collect();
            let concrete = !words.iter().any(|w| w.chars().any(|c| c.is_ascii_uppercase()) && !w.starts_with("http"));
            if in_shell && concrete && matches!(words.first().map(String::as_str), Some("check" | "explain")) {
                found.push((format!("{}: leash {rest}", file.display()), words));
            }
        }
    }
    found
}

#[test]
fn the_check_and_explain_commands_the_docs_show_run_as_shown() {
    let commands = documented_commands();
    assert!(commands.len() >= 2, "{commands:?}");
    for (place, words) in commands {
        let o = Command::new(LEASH).args(&words).output().unwrap();
        // 0 valid or allowed, 1 refused; 2 would be a usage error the docs teach.
        assert!(matches!(o.status.code(), Some(0 | 1)), "{place}: {o:?}");
    }
}

#[test]
fn what_the_docs_say_about_shared_options_and_exit_statuses_holds() {
    // docs/commands.md: `--resolve` is for the commands that serve; explain decides before DNS and refuses it.
    let o = leash(&["explain", "--resolve", "a.test:127.0.0.1", "--allow", "a.test", "http://a.test/"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    // docs/services.md: a policy whose service target is also allowed through the proxy is invalid: check exits 1.
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "svc.yaml",
        "network:\n  mode: allowlist\n  allowed_hosts: [gw.test]\n  services:\n    - {name: gw, listen: 8080, target: gw.test:9000}\n",
    );
    let o = leash(&["check", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    // docs/model-apis.md: plain HTTP to a model host is filtered, not refused.
    let o = leash(&["explain", "--allow", "api.openai.com", "POST", "http://api.openai.com/v1/responses"]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(stdout(&o).contains("its provider-side tools"), "{}", stdout(&o));
}
