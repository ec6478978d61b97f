//! `leash run` as a user meets it, beyond fetching (which tests/cli.rs covers): the exit status when the command
//! never runs, the environment it is given, signals sent to leash, and inline `--allow`/`--block` rules.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test's helpers fail it by panicking")]

mod common;

use common::{log_lines, sandbox_available, stderr, stdout};

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LEASH: &str = env!("CARGO_BIN_EXE_leash");

/// A command that would leave a mark if it ran.
fn marking(dir: &Path) -> (String, std::path::PathBuf) {
    let marker = dir.join("ran");
    (format!("touch {}", marker.display()), marker)
}

#[test]
fn an_invalid_policy_is_exit_2_and_the_command_never_runs() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("p.yaml");
    std::fs::write(&policy, "network:\n  mode: allowlist\n  blocked_urls: [192.0.2.1]\n").unwrap();
    let (script, marker) = marking(dir.path());
    let o = Command::new(LEASH)
        .args(["run", "--policy", policy.to_str().unwrap(), "--", "sh", "-c", &script])
        .output()
        .unwrap();
    // Not 1: that is an ordinary status of the wrapped command, and a script must not read a broken policy as one.
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("blocked_urls"), "{}", stderr(&o));
    assert!(!marker.exists(), "the command ran");
}

#[test]
fn a_run_with_no_policy_says_that_everything_is_refused() {
    if !sandbox_available() {
        return;
    }
    let o = Command::new(LEASH).args(["run", "--", "true"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("no policy") && stderr(&o).contains("every request is refused"), "{}", stderr(&o));
    let o = Command::new(LEASH).args(["run", "--allow", "docs.test", "--", "true"]).output().unwrap();
    assert!(!stderr(&o).contains("no policy"), "{}", stderr(&o));
}

#[test]
fn an_unreadable_upstream_ca_is_exit_2_and_the_command_never_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (script, marker) = marking(dir.path());
    let missing = dir.path().join("no-such-ca.pem");
    let o = Command::new(LEASH)
        .args(["run", "--allow", "docs.test", "--upstream-ca", missing.to_str().unwrap(), "--", "sh", "-c", &script])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("no-such-ca.pem"), "{}", stderr(&o));
    assert!(!marker.exists(), "the command ran");
}

#[test]
fn a_command_that_cannot_be_started_is_exit_125_and_says_so() {
    if !sandbox_available() {
        return;
    }
    let o = Command::new(LEASH).args(["run", "--", "/nonexistent/agent"]).output().unwrap();
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("the command was not run") && err.contains("/nonexistent/agent"), "{err}");
}

/// Installs a seccomp filter that refuses `unshare(CLONE_NEWNET)` (EPERM) to itself and everything it starts, then
/// runs its arguments: a host where the sandbox's network namespace cannot be made.
const NO_NETNS: &str = r#"
import ctypes, os, struct, sys
def op(code, k, jt=0, jf=0):
    return struct.pack("HBBI", code, jt, jf, k)
LD, JEQ, JSET, RET = 0x20, 0x15, 0x45, 0x06
prog = b"".join([
    op(LD, 4), op(JEQ, 0xC000003E, 1, 0), op(RET, 0x7FFF0000),   # not x86-64: allow
    op(LD, 0), op(JEQ, 272, 0, 2),                              # unshare(2)?
    op(LD, 16), op(JSET, 0x40000000, 1, 0),                     # CLONE_NEWNET in its flags?
    op(RET, 0x7FFF0000), op(RET, 0x00050000 | 1),               # allow / EPERM
])
class Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(38, 1, 0, 0, 0) == 0                          # PR_SET_NO_NEW_PRIVS
fprog = Fprog(len(prog) // 8, prog)
assert libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) == 0, ctypes.get_errno()  # PR_SET_SECCOMP, filter
os.execv(sys.argv[1], sys.argv[1:])
"#;

/// A sandbox whose network namespace cannot be made is not run, and the step that failed is what leash says: init
/// makes that namespace first, while leash (as root) may still be writing init's id maps, and leash's own write to an
/// init that has already ended must not be reported instead.
#[test]
fn a_network_namespace_that_cannot_be_made_is_exit_125_and_named() {
    if !sandbox_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (script, marker) = marking(dir.path());
    for _ in 0..5 {
        let o = Command::new("python3")
            .args(["-c", NO_NETNS, LEASH, "run", "--allow", "docs.test", "--", "sh", "-c", &script])
            .output()
            .unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(125), "{err}");
        assert!(err.contains("cannot create a network namespace") && err.contains("Operation not permitted"), "{err}");
        assert!(!marker.exists(), "the command ran");
    }
}

/// The command's environment, as `env -0` prints it inside the sandbox under the rules `policy` (run's options),
/// with `inherited` set in leash's own.
fn sandbox_env(policy: &[&str], inherited: &[(&str, &str)]) -> HashMap<String, String> {
    let o = Command::new(LEASH)
        .arg("run")
        .args(policy)
        .args(["--", "env", "-0"])
        .envs(inherited.iter().copied())
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    stdout(&o).split('\0').filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
}

#[test]
fn every_proxy_variable_names_the_proxy_no_proxy_is_removed_and_ca_variables_name_the_run_bundle() {
    if !sandbox_available() {
        return;
    }
    // A path rule: tunnels to docs.test are inspected, so the run has a CA.
    let env = sandbox_env(
        &["--block", "docs.test/private"],
        &[
            ("LEASH_NETWORK_MODE", "none-of-your-business"),
            ("NO_PROXY", "docs.test"),
            ("no_proxy", "*"),
            ("HTTPS_PROXY", "http://elsewhere.test:8080"),
            ("all_proxy", "socks5://elsewhere.test:1080"),
            ("SSL_CERT_FILE", "/etc/ssl/certs/ca-certificates.crt"),
            ("AWS_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt"),
            ("LEASH_TEST_KEPT", "yes"),
        ],
    );
    for var in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"] {
        assert_eq!(env.get(var).map(String::as_str), Some("http://127.0.0.1:3128"), "{var}");
    }
    assert!(!env.contains_key("NO_PROXY") && !env.contains_key("no_proxy"), "an exemption survived: {env:?}");
    assert_eq!(env.get("NODE_USE_ENV_PROXY").map(String::as_str), Some("1"));
    assert_eq!(env.get("LEASH_NETWORK_MODE").map(String::as_str), Some("blocklist"), "the mode, never the rules");
    assert!(!env.values().any(|v| v.contains("docs.test/private")), "a rule leaked into the environment");
    assert_eq!(env.get("LEASH_TEST_KEPT").map(String::as_str), Some("yes"), "other variables are kept");
    let bundle = env.get("SSL_CERT_FILE").expect("SSL_CERT_FILE").clone();
    assert!(bundle.ends_with("bundle.pem"), "{bundle}");
    for var in
        ["REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "PIP_CERT", "AWS_CA_BUNDLE", "CARGO_HTTP_CAINFO"]
    {
        assert_eq!(env.get(var), Some(&bundle), "{var}");
    }
    let ca = env.get("NODE_EXTRA_CA_CERTS").expect("NODE_EXTRA_CA_CERTS");
    assert!(ca.ends_with("ca.pem"), "{ca}");
    // The files are gone once the run is over.
    assert!(!Path::new(&bundle).exists() && !Path::new(ca).exists(), "the run's CA files were left behind");
}

#[test]
fn a_policy_that_never_inspects_makes_no_ca_and_leaves_the_callers_trust_alone() {
    if !sandbox_available() {
        return;
    }
    let system = "/etc/ssl/certs/ca-certificates.crt";
    let env = sandbox_env(&["--allow", "docs.test"], &[("SSL_CERT_FILE", system), ("NO_PROXY", "docs.test")]);
    assert_eq!(env.get("SSL_CERT_FILE").map(String::as_str), Some(system), "the caller's own trust is kept");
    assert_eq!(env.get("LEASH_NETWORK_MODE").map(String::as_str), Some("allowlist"));
    let run_files: Vec<_> = env.iter().filter(|(_, v)| v.contains("leash-run-")).collect();
    assert!(run_files.is_empty(), "variables name a run CA that was never made: {run_files:?}");
    assert_eq!(env.get("HTTPS_PROXY").map(String::as_str), Some("http://127.0.0.1:3128"));
    assert!(!env.contains_key("NO_PROXY"), "an exemption survived: {env:?}");
}

/// Start `leash run -- sh -c SCRIPT`, wait until the command prints `ready`, send `signal` to leash itself, and
/// return the command's output and leash's exit status.
fn signalled(signal: &str, script: &str) -> (String, Option<i32>) {
    let mut child = Command::new(LEASH)
        .args(["run", "--", "sh", "-c", script])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    assert!(Command::new("kill").args(["-s", signal, &child.id().to_string()]).status().unwrap().success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("leash run did not end after {signal}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    (rest, status.code())
}

#[test]
fn sigint_sigterm_and_sighup_sent_to_leash_reach_the_command() {
    if !sandbox_available() {
        return;
    }
    for (signal, code) in [("INT", 3), ("TERM", 4), ("HUP", 5)] {
        let script =
            format!("trap 'echo got-{signal}; exit {code}' {signal}; echo ready; while :; do sleep 0.05; done");
        let (out, status) = signalled(signal, &script);
        assert_eq!(out, format!("got-{signal}\n"), "{signal}");
        assert_eq!(status, Some(code), "{signal}: leash exits with the command's status");
    }
}

#[test]
fn a_command_killed_by_a_forwarded_signal_is_reported_as_128_plus_n() {
    if !sandbox_available() {
        return;
    }
    let (out, status) = signalled("TERM", "echo ready; while :; do sleep 0.05; done");
    assert_eq!(out, "");
    assert_eq!(status, Some(128 + 15));
}

#[test]
fn inline_allow_and_block_rules_decide_the_run() {
    if !sandbox_available() {
        return;
    }
    // The origin is on the host's loopback and inline rules cannot exempt it, so nothing is fetched here; what
    // shows the rules took effect is the reason each refusal gives.
    let dir = tempfile::tempdir().unwrap();
    let fetch = |rule: &str, host: &str, target: &str| {
        let log = dir.path().join(format!("{}-{target}.jsonl", rule.trim_start_matches('-')));
        let o = Command::new(LEASH)
            .args(["run", rule, host, "--resolve", &format!("{target}:127.0.0.1"), "--log"])
            .arg(&log)
            .args(["--", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", &format!("http://{target}/x")])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let reasons: Vec<String> = log_lines(&log)
            .iter()
            .filter(|l| l.get("decision").is_some())
            .map(|l| format!("{} {}", l["decision"].as_str().unwrap(), l["reason"].as_str().unwrap()))
            .collect();
        (stdout(&o), reasons)
    };
    // --allow: the named host passes the name check and is then refused only for where it resolves.
    assert_eq!(fetch("--allow", "docs.test", "docs.test"), ("403".into(), vec!["block internal-destination".into()]));
    assert_eq!(fetch("--allow", "docs.test", "evil.test"), ("403".into(), vec!["block not-allowed".into()]));
    // --block: the named host is refused by the rule; any other is allowed by name.
    assert_eq!(fetch("--block", "evil.test", "evil.test"), ("403".into(), vec!["block rule".into()]));
    assert_eq!(fetch("--block", "evil.test", "docs.test"), ("403".into(), vec!["block internal-destination".into()]));
}

#[test]
fn a_quiet_command_leaves_stderr_to_itself() {
    if !sandbox_available() {
        return;
    }
    // leash run shares the terminal with the command: with no request made, nothing of leash's belongs there.
    let o = Command::new(LEASH)
        .args(["run", "--allow", "docs.test", "--", "sh", "-c", "echo out; echo err >&2"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert_eq!((stdout(&o).as_str(), stderr(&o).as_str()), ("out\n", "err\n"));
}

#[test]
fn audit_mode_lets_the_command_reach_what_the_policy_would_refuse_and_says_so() {
    if !sandbox_available() {
        return;
    }
    let port = common::origin();
    let dir = tempfile::tempdir().unwrap();
    let (policy, log) = (dir.path().join("p.yaml"), dir.path().join("audit.jsonl"));
    let text = format!(
        "network:\n  mode: allowlist\n  allowed_hosts: [docs.test]\n  ports: [{port}]\n  allow_destinations: [127.0.0.0/8]\n"
    );
    std::fs::write(&policy, text).unwrap();
    let script = format!(
        "echo \"mode=$LEASH_NETWORK_MODE\"; \
         curl -s -o /dev/null -w '%{{http_code}} ' http://other.test:{port}/learned; \
         curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{port}/literal"
    );
    let o = Command::new(LEASH)
        .args(["run", "--audit", "--policy", policy.to_str().unwrap(), "--resolve", "other.test:127.0.0.1", "--log"])
        .arg(&log)
        .args(["--", "sh", "-c", &script])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // Let through what the rules would refuse; an IP literal stays refused.
    assert_eq!(stdout(&o), "mode=audit\n200 403", "{}", stderr(&o));
    assert!(stderr(&o).contains("audit mode"), "leash says it runs in audit mode: {}", stderr(&o));
    let lines = log_lines(&log);
    let decided: Vec<String> = lines
        .iter()
        .filter(|l| l.get("decision").is_some() && l["method"] != "DNS")
        .map(|l| {
            format!(
                "{} {} {}",
                l["path"].as_str().unwrap(),
                l["decision"].as_str().unwrap(),
                l["reason"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(decided, ["/learned would-block not-allowed", "/literal block ip-literal"]);
}
