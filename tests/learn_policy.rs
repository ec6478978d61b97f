//! The operator's loop, end to end with real programs: a session of curl and Python fetches runs under `leash run
//! --audit` with an empty audit policy (everything let through as `would-block`), `leash policy suggest` writes an
//! allowlist from its log, and the same session under that allowlist succeeds while any other host is refused.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test's helpers fail it by panicking")]

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{log_lines, sandbox_available, stderr, stdout};

const LEASH: &str = env!("CARGO_BIN_EXE_leash");
const NAMES: [&str; 4] = ["a.foo.co.uk", "b.foo.co.uk", "pkg.example.com", "other.example.org"];

/// The session: three hosts fetched, one with Python; each status printed.
fn session(port: u16) -> String {
    format!(
        "curl -s -o /dev/null -w '%{{http_code}} ' http://a.foo.co.uk:{port}/one; \
         curl -s -o /dev/null -w '%{{http_code}} ' http://b.foo.co.uk:{port}/two; \
         python3 -c 'import urllib.request as u; print(u.urlopen(\"http://pkg.example.com:{port}/simple/\").status)'"
    )
}

fn run(policy: &Path, log: &Path, audit: bool, script: &str) -> Output {
    let mut cmd = Command::new(LEASH);
    cmd.arg("run").args(["--policy", policy.to_str().unwrap(), "--log", log.to_str().unwrap()]);
    if audit {
        cmd.arg("--audit");
    }
    for name in NAMES {
        cmd.args(["--resolve", &format!("{name}:127.0.0.1")]);
    }
    cmd.args(["--", "sh", "-c", script]).output().unwrap()
}

#[test]
fn a_policy_learned_in_audit_mode_allows_the_session_and_nothing_else() {
    if !sandbox_available() {
        return;
    }
    let port = common::origin();
    let dir = tempfile::tempdir().unwrap();
    // The origins listen on this host's loopback: every policy here exempts it from the destination check.
    let exempt = "  allow_destinations: [127.0.0.0/8]\n";
    let draft = dir.path().join("draft.yaml");
    std::fs::write(&draft, format!("network:\n  mode: audit\n  ports: [{port}]\n{exempt}")).unwrap();
    let learned_log = dir.path().join("learn.jsonl");
    let o = run(&draft, &learned_log, false, &session(port));
    assert_eq!(stdout(&o), "200 200 200\n", "audit mode let the whole session through: {}", stderr(&o));
    let decisions: Vec<String> = log_lines(&learned_log)
        .iter()
        .filter(|l| l["method"] == "GET")
        .map(|l| format!("{} {}", l["decision"].as_str().unwrap(), l["reason"].as_str().unwrap()))
        .collect();
    assert_eq!(decisions, ["would-block not-allowed"; 3]);

    let suggested = dir.path().join("suggested.yaml");
    let s = Command::new(LEASH)
        .args(["policy", "suggest", learned_log.to_str().unwrap(), "--output", suggested.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(s.status.code(), Some(0), "{}", stderr(&s));
    let text = std::fs::read_to_string(&suggested).unwrap();
    assert!(text.contains(".foo.co.uk") && text.contains("pkg.example.com"), "{text}");
    let check = Command::new(LEASH).args(["check", suggested.to_str().unwrap()]).output().unwrap();
    assert_eq!(check.status.code(), Some(0), "{}", stderr(&check));

    let enforced = dir.path().join("enforced.yaml");
    std::fs::write(&enforced, format!("{text}{exempt}")).unwrap();
    let replay_log = dir.path().join("replay.jsonl");
    let other =
        format!("{}; curl -s -o /dev/null -w ' %{{http_code}}' http://other.example.org:{port}/", session(port));
    let o = run(&enforced, &replay_log, false, &other);
    assert_eq!(stdout(&o), "200 200 200\n 403", "the learned allowlist: the session passes, nothing else: {text}");
    let refused: Vec<String> = log_lines(&replay_log)
        .iter()
        .filter(|l| l["decision"] == "block")
        .map(|l| format!("{} {}", l["host"].as_str().unwrap(), l["reason"].as_str().unwrap()))
        .collect();
    assert_eq!(refused, ["other.example.org not-allowed"]);
}
