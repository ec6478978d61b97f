//! `leash run` as a user meets it, beyond fetching (which tests/cli.rs covers): the exit status when the command
//! never runs, the environment it is given, signals sent to leash, inline `--allow`/`--block` rules, and phases
//! (`--control`, `leash policy switch`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test's helpers fail it by panicking")]

mod common;

use common::{https_material, log_lines, origin, sandbox_available, stderr, stdout, HttpsOrigin};

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
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

/// The command's side of the phases test: it tries the control socket, opens a TLS session through a tunnel to
/// docs.test and a keep-alive connection to b.test, says `ready`, and after each step the test takes (a line on its
/// standard input) says what it sees.
const PHASES_SCRIPT: &str = r#"
import os, socket, ssl, sys
ctl_dir, ctl, ca, tls_port, plain_port = sys.argv[1:6]
proxy = ("127.0.0.1", 3128)
def answer(sock):
    head = b""
    while b"\r\n\r\n" not in head:
        got = sock.recv(1)
        if not got:
            raise ConnectionError("closed")
        head += got
    status = int(head.split(b" ")[1])
    length = [int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")]
    body = b""
    while length and len(body) < length[0]:
        body += sock.recv(length[0] - len(body))
    return status
def tunnel():
    t = socket.create_connection(proxy)
    t.sendall(f"CONNECT docs.test:{tls_port} HTTP/1.1\r\nHost: docs.test:{tls_port}\r\n\r\n".encode())
    status = answer(t)
    if status != 200:
        return status, None
    tls = ssl.create_default_context(cafile=ca).wrap_socket(t, server_hostname="docs.test")
    tls.sendall(b"GET /in HTTP/1.1\r\nHost: docs.test\r\n\r\n")
    return answer(tls), tls
print("listing:", sorted(os.listdir(ctl_dir)) if os.path.isdir(ctl_dir) else "no directory")
try:
    s = socket.socket(socket.AF_UNIX)
    s.connect(ctl)
    s.sendall(b'{"op":"status"}\n')
    print("control: reached", s.recv(4096))
except OSError as e:
    print("control: refused", e.errno)
status, held = tunnel()
plain = socket.create_connection(proxy)
get = f"GET http://b.test:{plain_port}/x HTTP/1.1\r\nHost: b.test:{plain_port}\r\n\r\n".encode()
plain.sendall(get)
print("setup: tunnel", status, "plain", answer(plain), flush=True)
sys.stdin.readline()
status, fresh = tunnel()
fresh.close()
print("after a bad switch: new tunnel", status, flush=True)
sys.stdin.readline()
held.settimeout(10)
try:
    held.sendall(b"GET /again HTTP/1.1\r\nHost: docs.test\r\n\r\n")
    print("locked: held tunnel answers", answer(held))
except (OSError, ConnectionError, ssl.SSLError) as e:
    print("locked: held tunnel closed", type(e).__name__)
print("locked: new tunnel", tunnel()[0])
plain.sendall(get)
print("locked: plain", answer(plain), flush=True)
"#;

#[test]
fn a_run_switched_to_a_locked_policy_cuts_what_it_refuses_and_its_command_cannot_switch() {
    if !sandbox_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ca = https_material(dir.path());
    let (tls, plain) = (HttpsOrigin::start(dir.path()), origin());
    let write = |name: &str, hosts: &str| {
        let text = format!(
            "network:\n  mode: allowlist\n  allowed_hosts: [{hosts}]\n  ports: [{plain}]\n  tunnel_ports: [{}]\n  \
             allow_destinations: [127.0.0.1/32]\n",
            tls.port
        );
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let (setup, locked, bad) =
        (write("setup.yaml", "docs.test, b.test"), write("locked.yaml", "b.test"), dir.path().join("bad.yaml"));
    std::fs::write(&bad, "network:\n  mode: allowlist\n  allowed_hosts: [\"not a host\"]\n").unwrap();
    let (ctl_dir, log, script) = (dir.path().join("ctl"), dir.path().join("audit.jsonl"), dir.path().join("phases.py"));
    let ctl = ctl_dir.join("s.sock");
    std::fs::write(&script, PHASES_SCRIPT).unwrap();
    let mut run = Command::new(LEASH)
        .args(["run", "--policy"])
        .arg(&setup)
        .arg("--control")
        .arg(&ctl)
        .args(["--resolve", "docs.test:127.0.0.1", "--resolve", "b.test:127.0.0.1", "--log"])
        .arg(&log)
        .arg("--")
        .arg("python3")
        .arg(&script)
        .args([&ctl_dir, &ctl, &ca])
        .args([tls.port.to_string(), plain.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut go = run.stdin.take().unwrap();
    let mut lines = BufReader::new(run.stdout.take().unwrap()).lines();
    let mut said = Vec::new();
    let mut until = |prefix: &str| loop {
        let line = lines.next().expect("the command said more").unwrap();
        said.push(line.clone());
        if line.starts_with(prefix) {
            return;
        }
    };
    until("setup:");
    let switch =
        |file: &Path| Command::new(LEASH).args(["policy", "switch", "--control"]).arg(&ctl).arg(file).output().unwrap();
    let refused = switch(&bad);
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("bad.yaml:3") && stderr(&refused).contains("policy in force stays"),
        "{}",
        stderr(&refused)
    );
    // A port the sandbox holds no transparent listener for needs another sandbox: refused, saying so.
    let wider = dir.path().join("wider.yaml");
    let text = std::fs::read_to_string(&setup).unwrap().replace("\n  ports: [", "\n  ports: [8089, ");
    std::fs::write(&wider, text).unwrap();
    let refused = switch(&wider);
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("listeners the sandbox was not built with (127.0.0.2:8089)"),
        "{}",
        stderr(&refused)
    );
    writeln!(go, "bad").unwrap();
    until("after a bad switch:");
    let switched = switch(&locked);
    assert_eq!(switched.status.code(), Some(0), "{}", stderr(&switched));
    assert!(stdout(&switched).contains("1 open connection(s)"), "{}", stdout(&switched));
    writeln!(go, "locked").unwrap();
    until("locked: plain");
    let status = run.wait().unwrap();
    let said = said.join("\n");
    assert_eq!(status.code(), Some(0), "{said}");
    assert!(
        said.contains("control: refused") && !said.contains("s.sock"),
        "the command cannot reach the socket: {said}"
    );
    assert!(said.contains("setup: tunnel 200 plain 200"), "{said}");
    assert!(said.contains("after a bad switch: new tunnel 200"), "the setup policy stayed in force: {said}");
    assert!(said.contains("locked: held tunnel closed"), "{said}");
    assert!(said.contains("locked: new tunnel 403"), "{said}");
    assert!(said.contains("locked: plain 200"), "{said}");
    let lines = log_lines(&log);
    let switches: Vec<_> = lines.iter().filter(|l| l["event"] == "policy-switch").collect();
    assert_eq!(switches.len(), 1, "one switch, the bad one refused: {lines:#?}");
    let line = switches[0];
    assert!(
        line["from"].as_str().unwrap().ends_with("setup.yaml") && line["to"].as_str().unwrap().ends_with("locked.yaml"),
        "{line}"
    );
    assert_eq!(
        (line["generation"].as_u64(), line["cut"].as_u64(), line["by"].as_str()),
        (Some(1), Some(1), Some("control-socket")),
        "{line}"
    );
    assert_eq!(line["to_sha256"].as_str().map(str::len), Some(64), "{line}");
    assert!(
        lines.iter().any(|l| l["error"] == "policy-switch"),
        "the held tunnel's outcome says why it ended: {lines:#?}"
    );
}

#[test]
fn a_command_of_another_uid_cannot_reach_the_control_socket_and_one_of_leashs_own_uid_is_refused_one() {
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| stdout(&o).trim() == "0");
    if !root {
        eprintln!("SKIPPED: not root; the --user control socket test did not run");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    // Every directory above the socket's own is open to the command's uid: only the socket's (0700) keeps it out.
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let ctl = dir.path().join("ctl/s.sock");
    let private = dir.path().join("private");
    std::fs::create_dir(&private).unwrap();
    let log = private.join("audit.jsonl");
    // In the advisory containment without --user the command would be leash's own uid.
    let o = Command::new(LEASH)
        .args(["run", "--advisory", "--allow", "a.test", "--control"])
        .arg(&ctl)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--control needs --user"), "{}", stderr(&o));
    let script = r#"import os, socket, sys
print("parent:", os.access(os.path.dirname(os.path.dirname(sys.argv[1])), os.X_OK))
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1]); print("control: reached")
except OSError as e:
    print("control: refused", e.errno)"#;
    let o = Command::new(LEASH)
        .args(["run", "--advisory", "--user", "4242", "--allow", "a.test", "--log"])
        .arg(&log)
        .arg("--control")
        .arg(&ctl)
        .args(["--", "python3", "-c", script])
        .arg(&ctl)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "parent: True\ncontrol: refused 13\n", "{}", stderr(&o));
}

/// The user-namespace sandbox runs the containment self-test in the command's place, as the command, before the
/// command: a hole in the sandbox (a debug build's test hook: one more listener on its loopback, which leash holds
/// and never serves) refuses the run, naming the probe that got through, and the command never runs. The same run
/// without the hole goes ahead.
#[test]
fn a_listener_in_the_sandbox_that_is_not_leashs_is_found_by_the_self_test_and_refuses_the_run() {
    if !sandbox_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (script, marker) = marking(dir.path());
    let run = |flaw: Option<&str>| {
        let mut leash = Command::new(LEASH);
        leash.args(["run", "--containment", "userns", "--allow", "docs.test", "--", "sh", "-c", &script]);
        if let Some(flaw) = flaw {
            leash.env("LEASH_DANGER_TEST_SANDBOX_FLAW", flaw);
        }
        leash.output().unwrap()
    };
    let o = run(Some("stray-listener"));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(125), "{err}");
    assert!(err.contains("leash: the command was not run: the containment self-test"), "{err}");
    assert!(err.contains("OPEN tcp listener 127.0.0.99:4999"), "the probe is named: {err}");
    assert!(!marker.exists(), "the command ran");
    let o = run(None);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(marker.exists(), "the command did not run without the hole");
}

/// Refusals of `--user` and of containments that need one, made before anything is set up: each names what is
/// wrong, with its exit status, and the command never runs.
#[test]
fn a_user_or_containment_that_cannot_be_used_is_refused_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let (script, marker) = marking(dir.path());
    let cases: [(&[&str], i32, &str); 5] = [
        (&["--user", "no-such-user-here"], 2, "leash: --user `no-such-user-here`: no such user in /etc/passwd"),
        (&["--user", "1000:x"], 2, "leash: --user `1000:x`: UID:GID takes numbers"),
        (
            &["--containment", "netns"],
            125,
            "leash: the command was not run: the netns containment needs `--user UID` for the command",
        ),
        (
            &["--containment", "uid-firewall", "--user", "0"],
            125,
            "leash: the command was not run: --user 0 is root: the command must run as another, unprivileged uid",
        ),
        (
            &["--advisory", "--allow-unix-socket", "/run/x.sock"],
            2,
            "leash: --allow-unix-socket is for the userns containment: here the command reaches Unix sockets by their \
             permissions",
        ),
    ];
    for (options, code, said) in cases {
        let o = Command::new(LEASH)
            .arg("run")
            .args(options)
            .args(["--allow", "docs.test", "--", "sh", "-c", &script])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(code), "{options:?}: {}", stderr(&o));
        assert_eq!(stderr(&o).lines().filter(|l| *l == said).count(), 1, "{options:?}, said once: {}", stderr(&o));
        assert!(!marker.exists(), "{options:?}: the command ran");
    }
}
