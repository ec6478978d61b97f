//! What `leash run` says about refusals once the command has ended: a count, a line per refused destination with its
//! reason, and the hint that points at the likely slip in the policy (`leash explain` gives the same hints). Every
//! refusal here is decided before any upstream is dialed, so no test needs the internet.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test's helpers fail it by panicking")]

mod common;

use common::{origin, sandbox_available, stderr, stdout};

use std::path::Path;
use std::process::{Command, Output};

const LEASH: &str = env!("CARGO_BIN_EXE_leash");

/// Where these runs keep their audit logs (`XDG_STATE_HOME`): the tests' scratch directory, not the caller's home.
fn state_home() -> std::path::PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("run-summary-state-{}", std::process::id()))
}

/// `leash run OPTIONS -- sh -c SCRIPT`.
fn leash_run(options: &[&str], script: &str) -> Output {
    let mut run = Command::new(LEASH);
    run.arg("run").args(options).args(["--", "sh", "-c", script]).env("XDG_STATE_HOME", state_home());
    run.output().unwrap()
}

/// The audit log a run without `--log` kept, by the path it named on stderr.
fn kept_log(o: &Output) -> String {
    let err = stderr(o);
    let line =
        err.lines().find_map(|l| l.strip_prefix("leash: the audit log of this run is in ")).unwrap_or_else(|| {
            panic!("no kept log named: {err}");
        });
    assert!(line.starts_with(state_home().join("leash/runs/").to_str().unwrap()), "{line}");
    std::fs::read_to_string(line).unwrap()
}

/// A curl through the run's proxy that prints only the status (000 when a tunnel was refused).
fn curl(url: &str) -> String {
    format!("curl -s -o /dev/null -w '%{{http_code}}\\n' {url}; ")
}

/// The summary: standard error from its first line on (after the line naming the kept audit log).
fn summary(o: &Output) -> String {
    let err = stderr(o);
    let after_log = err.find("leash: the audit log of this run is in ").map_or(0, |at| at + 1);
    err[after_log..].find("leash: ").map(|at| err[after_log + at..].to_owned()).unwrap_or_default()
}

fn write_policy(dir: &Path, text: &str) -> String {
    let path = dir.join("policy.yaml");
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

const SUBDOMAIN_HINT: &str =
    "      hint: did you mean `.example.test`? `example.test` covers only itself, not its subdomains\n";

#[test]
fn a_subdomain_of_an_exact_entry_is_summed_up_after_the_log_with_the_dotted_entry_as_hint() {
    if !sandbox_available() {
        return;
    }
    let script = format!("{}{}exit 3", curl("http://api.example.test/x"), curl("https://api.example.test/"));
    let o = leash_run(&["--allow", "example.test"], &script);
    assert_eq!(o.status.code(), Some(3), "the command's status, summary or not: {}", stderr(&o));
    assert_eq!(stdout(&o), "403\n000\n");
    assert_eq!(
        summary(&o),
        format!(
            "leash: 2 requests refused\n  \
             1 × HTTP api.example.test:80/x: not-allowed\n{SUBDOMAIN_HINT}  \
             1 × CONNECT api.example.test:443: not-allowed\n  \
             to learn a policy from what the command does: run it again with --audit --log audit.jsonl, then \
             `leash policy suggest audit.jsonl`\n"
        )
    );
    // The audit log (kept until the command ended) is in a file of its own, named before the summary; no raw JSON
    // line on standard error, and the summary closes it.
    let err = stderr(&o);
    assert_eq!(kept_log(&o).matches("\"reason\":\"not-allowed\"").count(), 2, "{err}");
    assert!(!err.contains("{\""), "{err}");
    let (named_at, summary_at) = (err.find("the audit log of this run is in").unwrap(), err.find("leash: 2").unwrap());
    assert!(named_at < summary_at, "{err}");
}

#[test]
fn a_port_outside_the_policy_names_ports_or_tunnel_ports() {
    if !sandbox_available() {
        return;
    }
    let script = format!("{}{}", curl("http://example.test:8080/y"), curl("https://example.test:8443/"));
    let o = leash_run(&["--allow", "example.test"], &script);
    assert_eq!(stdout(&o), "403\n000\n", "{}", stderr(&o));
    assert_eq!(
        summary(&o),
        "leash: 2 requests refused\n  \
         1 × HTTP example.test:8080/y: port\n      \
         hint: port 8080 is not in `ports` [80, 443], the ports a plain-HTTP request may name\n  \
         1 × CONNECT example.test:8443: port\n      \
         hint: port 8443 is not in `tunnel_ports` [443], the ports a CONNECT (https) may name\n"
    );
}

#[test]
fn a_refusal_on_a_path_rule_says_it_was_the_path() {
    if !sandbox_available() {
        return;
    }
    let script = curl("http://example.test/private/x").repeat(2);
    let o = leash_run(&["--block", "example.test/private"], &script);
    assert_eq!(stdout(&o), "403\n403\n");
    assert_eq!(
        summary(&o),
        "leash: 2 requests refused\n  \
         2 × HTTP example.test:80 (e.g. /private/x): rule\n      \
         hint: the blocked_urls path rule `example.test/private` refused this path; other paths on `example.test` \
         are allowed\n"
    );
    // An allowlist's path rules: the host is allowed on some paths only.
    let dir = tempfile::tempdir().unwrap();
    let policy = write_policy(dir.path(), "network:\n  mode: allowlist\n  allowed_urls: [example.test/docs/]\n");
    let o = leash_run(&["--policy", &policy], &curl("http://example.test/admin"));
    assert_eq!(stdout(&o), "403\n");
    assert_eq!(
        summary(&o),
        "leash: 1 request refused\n  \
         1 × HTTP example.test:80/admin: not-allowed\n      \
         hint: `example.test` is allowed on some paths only, by allowed_urls path rules such as \
         `example.test/docs/`; this path is under none of them\n  \
         to learn a policy from what the command does: run it again with --audit --log audit.jsonl, then \
         `leash policy suggest audit.jsonl`\n"
    );
}

#[test]
fn quiet_prints_no_summary_and_keeps_the_log() {
    if !sandbox_available() {
        return;
    }
    let o = leash_run(&["--allow", "example.test", "--quiet"], &curl("http://api.example.test/x"));
    assert_eq!(stdout(&o), "403\n");
    let err = stderr(&o);
    assert!(!err.contains("refused\n") && !err.contains("hint:") && !err.contains("{\""), "{err}");
    assert!(!err.contains("audit log of this run"), "quiet: {err}");
    // Nor a warning: the refusal's own line (` WARN refused GET ...`) used to be printed under --quiet.
    assert_eq!(err, "", "quiet prints nothing but errors");
    // The log is still kept: the newest file under the runs directory holds the refusal.
    let runs = state_home().join("leash/runs");
    let newest = std::fs::read_dir(&runs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .max_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).unwrap());
    let kept = std::fs::read_to_string(newest.unwrap()).unwrap();
    assert!(kept.contains("\"host\":\"api.example.test\""), "{kept}");
}

#[test]
fn a_run_with_nothing_refused_prints_no_summary() {
    if !sandbox_available() {
        return;
    }
    let port = origin();
    let dir = tempfile::tempdir().unwrap();
    let policy = write_policy(
        dir.path(),
        &format!(
            "network:\n  mode: allowlist\n  allowed_hosts: [example.test]\n  ports: [{port}]\n  \
             allow_destinations: [127.0.0.1/32]\n"
        ),
    );
    let log = dir.path().join("audit.jsonl");
    let o = leash_run(
        &["--policy", &policy, "--resolve", "example.test:127.0.0.1", "--log", log.to_str().unwrap()],
        &curl(&format!("http://example.test:{port}/")),
    );
    assert_eq!((o.status.code(), stdout(&o).as_str()), (Some(0), "200\n"), "{}", stderr(&o));
    assert_eq!(stderr(&o), "", "nothing refused, nothing to say");
}

#[test]
fn explain_gives_the_same_hint_for_a_subdomain_of_an_exact_entry() {
    let o =
        Command::new(LEASH).args(["explain", "--allow", "example.test", "https://api.example.test/"]).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "refused: {}", stderr(&o));
    let out = stdout(&o);
    assert!(out.starts_with("block not-allowed\n"), "{out}");
    assert!(out.ends_with(&format!("\n  {}", SUBDOMAIN_HINT.trim_start())), "{out}");
    // An allowed request gets no hint.
    let o = Command::new(LEASH)
        .args(["explain", "--allow", ".example.test", "https://api.example.test/"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert!(!stdout(&o).contains("hint:"), "{}", stdout(&o));
}

#[test]
fn audit_mode_needs_no_draft_policy_and_what_it_learns_becomes_the_suggestion() {
    if !sandbox_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    let o = leash_run(&["--audit", "--log", log.to_str().unwrap()], &curl("http://learned.test/x"));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(summary(&o).contains("would-block not-allowed"), "{}", stderr(&o));
    assert!(!summary(&o).contains("to learn a policy"), "already learning: {}", stderr(&o));
    let o = Command::new(LEASH).args(["policy", "suggest"]).arg(&log).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).lines().any(|l| l.trim_start().starts_with("- learned.test ")), "{}", stdout(&o));
}

#[test]
fn a_kept_log_is_hidden_from_every_later_runs_command() {
    // Under a blocklist an earlier run's refusals say what the task must not see.
    if !sandbox_available() {
        return;
    }
    let first = leash_run(&["--block", "secret-paper.test"], &curl("http://secret-paper.test/abs/1"));
    let kept = kept_log(&first);
    assert!(kept.contains("secret-paper.test"), "{kept}");
    let runs = state_home().join("leash/runs");
    let o = leash_run(&["--allow", "example.test"], &format!("ls -A {0}; cat {0}/* 2>&1; true", runs.display()));
    assert!(!stdout(&o).contains("secret-paper"), "{}", stdout(&o));
    assert!(!stdout(&o).contains(".jsonl"), "the directory is empty inside: {}", stdout(&o));
}

#[test]
fn a_run_that_made_no_request_makes_no_log_file_nor_directory_and_names_none() {
    if !sandbox_available() {
        return;
    }
    // A state directory of its own: other tests keep their logs in the shared one meanwhile.
    let state = tempfile::tempdir().unwrap();
    let run = |script: &str| {
        let mut run = Command::new(LEASH);
        run.args(["run", "--allow", "example.test", "--", "sh", "-c", script]).env("XDG_STATE_HOME", state.path());
        run.output().unwrap()
    };
    let o = run("true");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!stderr(&o).contains("audit log of this run"), "{}", stderr(&o));
    let runs = state.path().join("leash/runs");
    let files = || std::fs::read_dir(&runs).map(|d| d.count()).unwrap_or(0);
    assert!(!runs.exists(), "nothing made under the state directory for a run with nothing to record");
    // One request, and the file is there.
    let o = run(&curl("http://elsewhere.test/"));
    assert!(stderr(&o).contains("audit log of this run is in"), "{}", stderr(&o));
    assert_eq!(files(), 1);
}

#[test]
fn an_allowed_host_whose_upstream_fails_is_named_in_the_summary() {
    if !sandbox_available() {
        return;
    }
    // git said `gnutls_handshake() failed` and nothing of leash's said why: the summary names the host and cause.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dir = tempfile::tempdir().unwrap();
    let policy = write_policy(
        dir.path(),
        &format!(
            "network:\n  mode: allowlist\n  allowed_hosts: [down.test]\n  ports: [{closed}]\n  \
             allow_destinations: [127.0.0.1/32]\n"
        ),
    );
    let o = leash_run(
        &["--policy", &policy, "--resolve", "down.test:127.0.0.1"],
        &curl(&format!("http://down.test:{closed}/")),
    );
    assert_eq!(stdout(&o), "502\n", "{}", stderr(&o));
    let said = stderr(&o);
    assert!(said.contains("leash: 1 allowed request(s) failed upstream"), "{said}");
    assert!(said.contains(&format!("1 × down.test:{closed}: refused")), "{said}");
}
