//! `--boundary FILE` (and LEASH_BOUNDARY) as an operator meets it: `explain` names the boundary when it decided,
//! `check --within` names each entry a boundary would refuse, a boundary that holds more than rules is refused, and
//! `leash proxy` and `leash run` refuse what the boundary refuses — after a SIGHUP reload too — with `boundary` in
//! the audit line.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test's helpers fail it by panicking")]

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{log_lines, origin, sandbox_available, stderr, stdout};

const LEASH: &str = env!("CARGO_BIN_EXE_leash");

/// The organisation's boundary: only the corp's hosts and a package index.
const BOUNDARY: &str = "network:\n  mode: allowlist\n  allowed_hosts: [.corp.test, pypi.test]\n";

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn leash(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(LEASH);
    cmd.args(args).env("RUST_LOG", "warn").env_remove("LEASH_BOUNDARY");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// A boundary admitting the corp's hosts on the loopback origin's `port` (tests resolve them to 127.0.0.1).
fn corp_boundary(dir: &Path, port: u16) -> PathBuf {
    let text = format!(
        "network:\n  mode: allowlist\n  allowed_hosts: [.corp.test]\n  ports: [{port}]\n  allow_destinations: [127.0.0.1/32]\n"
    );
    write(dir, "org.yaml", &text)
}

fn boundary_file(dir: &Path) -> PathBuf {
    write(dir, "org.yaml", BOUNDARY)
}

#[test]
fn explain_names_the_boundary_when_it_decided_and_the_run_when_it_did() {
    let dir = tempfile::tempdir().unwrap();
    let org = boundary_file(dir.path());
    let run =
        write(dir.path(), "run.yaml", "network:\n  mode: allowlist\n  allowed_hosts: [jira.corp.test, evil.test]\n");
    let explain = |url: &str, env: &[(&str, &str)], flag: bool| {
        let mut args = vec!["explain", "--policy", run.to_str().unwrap()];
        if flag {
            args.extend(["--boundary", org.to_str().unwrap()]);
        }
        args.push(url);
        leash(&args, env)
    };
    let o = explain("http://evil.test/", &[], true);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.starts_with("block boundary"), "{out}");
    assert!(out.contains("the boundary") && out.contains("org.yaml"), "{out}");
    let o = explain("http://jira.corp.test/", &[], true);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(stdout(&o).starts_with("allow rule jira.corp.test"), "{}", stdout(&o));
    assert!(stdout(&o).contains("within the boundary"), "{}", stdout(&o));
    // From the environment, as an organisation sets it for every command.
    let o = explain("http://evil.test/", &[("LEASH_BOUNDARY", org.to_str().unwrap())], false);
    assert!(stdout(&o).starts_with("block boundary"), "{}", stdout(&o));
    let o = explain("http://evil.test/", &[], false);
    assert!(stdout(&o).starts_with("allow rule evil.test"), "without a boundary the run decides: {}", stdout(&o));
}

#[test]
fn check_within_names_every_entry_the_boundary_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let org = boundary_file(dir.path());
    let wide = write(
        dir.path(),
        "wide.yaml",
        "network:\n  mode: allowlist\n  allowed_hosts: [jira.corp.test, evil.test, .pypi.test]\n  allowed_urls: [paste.test/raw]\n",
    );
    let o = leash(&["check", "--within", org.to_str().unwrap(), wide.to_str().unwrap()], &[]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("evil.test: outside the boundary") && err.contains("paste.test/raw: outside"), "{err}");
    assert!(
        err.contains(".pypi.test: wider than the boundary"),
        "a subtree the boundary admits only at its top: {err}"
    );
    assert!(!err.contains("jira.corp.test"), "inside: {err}");
    let narrow = write(dir.path(), "narrow.yaml", "network:\n  mode: allowlist\n  allowed_hosts: [jira.corp.test]\n");
    let o = leash(&["check", "--within", org.to_str().unwrap(), narrow.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("within the boundary"), "{}", stdout(&o));
    let blocklist = write(dir.path(), "bl.yaml", "network:\n  mode: blocklist\n  blocked_urls: [x.test]\n");
    let o = leash(&["check", "--within", org.to_str().unwrap(), blocklist.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stderr(&o).contains("only the boundary's hosts pass"), "{}", stderr(&o));
}

#[test]
fn a_boundary_that_holds_more_than_rules_or_does_not_load_stops_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let audit = write(dir.path(), "audit.yaml", "network:\n  mode: audit\n  allowed_hosts: [a.test]\n");
    let broken = write(dir.path(), "broken.yaml", "network:\n  mode: allowlist\n  alowed_hosts: [a.test]\n");
    for (boundary, says) in
        [(&audit, "always enforced"), (&broken, "alowed_hosts"), (&dir.path().join("none.yaml"), "none.yaml")]
    {
        let b = boundary.to_str().unwrap();
        for args in [
            &["explain", "--boundary", b, "--allow", "a.test", "http://a.test/"][..],
            &["proxy", "--boundary", b, "--allow", "a.test", "--listen", "127.0.0.1:0"],
            &["run", "--boundary", b, "--allow", "a.test", "--", "true"],
        ] {
            let o = leash(args, &[]);
            assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
            assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
            assert!(!stdout(&o).contains("listening"), "nothing served: {}", stdout(&o));
        }
    }
}

/// `leash proxy` on a free port with `args`, its log at `log`; killed when dropped.
struct Proxy(std::process::Child, String);

impl Proxy {
    fn start(args: &[&str], log: &Path) -> Proxy {
        let mut child = Command::new(LEASH)
            .args(["proxy", "--listen", "127.0.0.1:0", "--log"])
            .arg(log)
            .args(args)
            .env_remove("LEASH_BOUNDARY")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let addr = line.trim().strip_prefix("listening on ").expect("listening line").to_owned();
        Proxy(child, addr)
    }

    fn curl(&self, url: &str) -> String {
        let o = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", "-x", &self.1, url])
            .output()
            .unwrap();
        stdout(&o)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_proxy_refuses_what_the_boundary_refuses_before_and_after_a_reload() {
    let port = origin();
    let dir = tempfile::tempdir().unwrap();
    let org = corp_boundary(dir.path(), port);
    let loopback = |hosts: &str| {
        format!("network:\n  mode: allowlist\n  allowed_hosts: [{hosts}]\n  ports: [{port}]\n  allow_destinations: [127.0.0.1/32]\n")
    };
    let run = write(dir.path(), "run.yaml", &loopback("jira.corp.test, evil.test"));
    let log = dir.path().join("audit.jsonl");
    let pins = ["--resolve", "jira.corp.test:127.0.0.1", "--resolve", "evil.test:127.0.0.1"];
    let args = [&["--policy", run.to_str().unwrap(), "--boundary", org.to_str().unwrap()][..], &pins[..]].concat();
    let proxy = Proxy::start(&args, &log);
    assert_eq!(proxy.curl(&format!("http://jira.corp.test:{port}/")), "200");
    assert_eq!(proxy.curl(&format!("http://evil.test:{port}/a")), "403");
    // The run's file widened and reloaded: still inside the boundary.
    write(dir.path(), "run.yaml", &loopback("jira.corp.test, evil.test, .test"));
    Command::new("kill").args(["-s", "HUP", &proxy.0.id().to_string()]).status().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(proxy.curl(&format!("http://evil.test:{port}/b")), "403");
    let deadline = Instant::now() + Duration::from_secs(10);
    let refused = loop {
        let lines = log_lines(&log);
        let refused: Vec<(String, String)> = lines
            .iter()
            .filter(|l| l["decision"] == "block")
            .map(|l| (l["path"].as_str().unwrap_or("").to_owned(), l["reason"].as_str().unwrap_or("").to_owned()))
            .collect();
        if refused.len() >= 2 || Instant::now() > deadline {
            break refused;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(refused, [("/a".to_owned(), "boundary".to_owned()), ("/b".to_owned(), "boundary".to_owned())]);
}

#[test]
fn a_sandboxed_command_cannot_reach_what_the_boundary_refuses() {
    if !sandbox_available() {
        return;
    }
    let port = origin();
    let dir = tempfile::tempdir().unwrap();
    let org = corp_boundary(dir.path(), port);
    let run = write(
        dir.path(),
        "run.yaml",
        &format!("network:\n  mode: blocklist\n  blocked_urls: []\n  ports: [{port}]\n  allow_destinations: [127.0.0.1/32]\n"),
    );
    let log = dir.path().join("audit.jsonl");
    let script = format!(
        "curl -s -o /dev/null -w '%{{http_code}} ' http://jira.corp.test:{port}/; \
         curl -s -o /dev/null -w '%{{http_code}}' http://evil.test:{port}/"
    );
    let o = Command::new(LEASH)
        .args(["run", "--policy", run.to_str().unwrap(), "--log", log.to_str().unwrap()])
        .args(["--resolve", "jira.corp.test:127.0.0.1", "--resolve", "evil.test:127.0.0.1"])
        .env("LEASH_BOUNDARY", &org)
        .args(["--", "sh", "-c", &script])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "200 403", "{}", stderr(&o));
    let reasons: Vec<String> = log_lines(&log)
        .iter()
        .filter(|l| l["host"] == "evil.test" && l["decision"] == "block")
        .map(|l| l["reason"].as_str().unwrap().to_owned())
        .collect();
    assert!(reasons.iter().all(|r| r == "boundary") && !reasons.is_empty(), "{reasons:?}");
}

#[test]
fn a_policy_switch_stays_inside_the_boundary() {
    let port = origin();
    let dir = tempfile::tempdir().unwrap();
    let org = corp_boundary(dir.path(), port);
    let run = write(dir.path(), "run.yaml", "network:\n  mode: allowlist\n  allowed_hosts: [jira.corp.test]\n");
    let open = write(
        dir.path(),
        "open.yaml",
        &format!("network:\n  mode: blocklist\n  blocked_urls: []\n  ports: [{port}]\n  allow_destinations: [127.0.0.1/32]\n"),
    );
    let (log, control) = (dir.path().join("audit.jsonl"), dir.path().join("ctl").join("ctl.sock"));
    let args = [
        "--policy",
        run.to_str().unwrap(),
        "--boundary",
        org.to_str().unwrap(),
        "--control",
        control.to_str().unwrap(),
        "--resolve",
        "evil.test:127.0.0.1",
        "--resolve",
        "wiki.corp.test:127.0.0.1",
    ];
    let proxy = Proxy::start(&args, &log);
    assert_eq!(proxy.curl(&format!("http://wiki.corp.test:{port}/")), "403", "the run's own policy refuses it");
    let o = leash(&["policy", "switch", "--control", control.to_str().unwrap(), open.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(proxy.curl(&format!("http://wiki.corp.test:{port}/")), "200", "the switch widened the run's policy");
    assert_eq!(proxy.curl(&format!("http://evil.test:{port}/")), "403", "but not past the boundary");
}
