//! What `leash run` says about refusals once the command has ended: a count, a line per refused destination with its
//! reason, and the hint that points at the likely slip in the policy (`leash explain` gives the same hints). Every
//! refusal here is decided before any upstream is dialed, so no test needs the internet.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test's helpers fail it by panicking")]

mod common;

use common::{origin, sandbox_available, stderr, stdout};

use std::path::Path;
use std::process::{Command, Output};

const LEASH: &str = env!("CARGO_BIN_EXE_leash");

/// `leash run OPTIONS -- sh -c SCRIPT`.
fn leash_run(options: &[&str], script: &str) -> Output {
    Command::new(LEASH).arg("run").args(options).args(["--", "sh", "-c", script]).output().unwrap()
}

/// A curl through the run's proxy that prints only the status (000 when a tunnel was refused).
fn curl(url: &str) -> String {
    format!("curl -s -o /dev/null -w '%{{http_code}}\\n' {url}; ")
}

/// The summary: standard error from its first line on.
fn summary(o: &Output) -> String {
    let err = stderr(o);
    err.find("leash: ").map(|at| err[at..].to_owned()).unwrap_or_default()
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
    // The audit log (kept until the command ended) comes first, whole; the summary closes standard error.
    let err = stderr(&o);
    let (log_end, summary_at) = (err.rfind("\"reason\":\"not-allowed\"").unwrap(), err.find("leash: 2").unwrap());
    assert!(log_end < summary_at, "{err}");
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
    assert!(err.contains("\"reason\":\"not-allowed\""), "the audit log is still replayed: {err}");
    assert!(!err.contains("refused\n") && !err.contains("hint:"), "{err}");
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
