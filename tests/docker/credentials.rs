//! `leash docker run` with a `credentials` entry: the container is given the placeholder in the credential's
//! variable, its request to the fake provider (on the host's loopback, over inspected HTTPS) carries the real key
//! out, the key the provider quotes back arrives as the placeholder, and nothing leash prints or logs holds the real
//! value. Beside it, the end-of-run summary of what was refused, which `leash docker run` prints as `leash run` does.

use std::process::Command;

use super::{assert_no_new_network, bounded, docker_ready, label, leftovers, networks, IMAGE, LEASH};
use crate::common::{https_material, log_lines, stderr, stdout, FakeProvider};

const SECRET: &str = "sk-ant-real-7f3a9c2e1b5d4f6a8091a2b3c4d5e6f7";

#[test]
fn docker_run_gives_the_container_a_placeholder_and_its_requests_carry_the_real_key() {
    if !docker_ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let upstream_ca = https_material(dir.path());
    let seen = dir.path().join("seen");
    let provider = FakeProvider::start(dir.path(), SECRET, &seen);
    let port = provider.port;
    let policy = dir.path().join("credentials.yaml");
    let text = format!(
        "network:\n  mode: blocklist\n  blocked_urls: []\n  tunnel_ports: [{port}]\n  \
         allow_destinations: [127.0.0.0/8]\n  credentials:\n    - preset: anthropic\n      hosts: [docs.test]\n"
    );
    std::fs::write(&policy, text).unwrap();
    let log = dir.path().join("audit.jsonl");
    let script = format!(
        "echo \"env=$ANTHROPIC_API_KEY\"; \
         curl -s -H \"x-api-key: $ANTHROPIC_API_KEY\" https://docs.test:{port}/v1/messages; echo; \
         grep -c '{SECRET}' /proc/self/environ || true; echo \"copy=$KEY_COPY\""
    );
    let label = label("credentials");
    let nets = networks();
    let o = bounded(
        Command::new(LEASH)
            .args(["docker", "run", "--policy"])
            .arg(&policy)
            .args(["--resolve", "docs.test:127.0.0.1", "--upstream-ca"])
            .arg(&upstream_ca)
            .arg("--log")
            .arg(&log)
            // A name-only `-e` is filled from the docker client's environment: a copy of the key must reach it
            // masked.
            .args(["--label", &label, "-e", "KEY_COPY", IMAGE, "sh", "-c", &script])
            .env("ANTHROPIC_API_KEY", SECRET)
            .env("KEY_COPY", SECRET),
    );
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    let lines: Vec<&str> = out.lines().collect();
    let placeholder = lines[0].strip_prefix("env=").unwrap();
    assert!(placeholder.starts_with("leash-anthropic-") && placeholder.len() == SECRET.len(), "{out}");
    let quoted = format!("your key: {placeholder}");
    let copy = format!("copy={placeholder}");
    assert_eq!(
        lines[1..],
        [quoted.as_str(), "0", copy.as_str()],
        "the request got through, the quoted key is the placeholder, the container's \
         environment holds no real key"
    );
    assert_eq!(std::fs::read_to_string(&seen).unwrap(), format!("{SECRET}\n"), "the provider got the real key");
    assert!(!out.contains(SECRET) && !err.contains(SECRET), "nothing leash or the container printed holds the key");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains(SECRET), "the audit log never holds the key");
    let with_credential: Vec<_> = log_lines(&log).into_iter().filter(|l| l["credential"] == "anthropic").collect();
    assert_eq!(with_credential.len(), 1, "{text}");
    assert_eq!(with_credential[0]["decision"], "allow", "{text}");
    assert_eq!(leftovers(&label), "", "a container was left behind");
    assert_no_new_network(&nets);
}

/// The end-of-run summary is `leash docker run`'s too: after the container ends, the refused destination with its
/// count, reason and hint on stderr (and none with `--quiet`).
#[test]
fn docker_run_ends_with_the_summary_of_what_was_refused() {
    if !docker_ready() {
        return;
    }
    let run = |quiet: bool| {
        let label = label(if quiet { "summary-quiet" } else { "summary" });
        let mut cmd = Command::new(LEASH);
        cmd.args(["docker", "run", "--allow", "example.test"]);
        if quiet {
            cmd.arg("--quiet");
        }
        let script = "curl -s -o /dev/null -w '%{http_code}' http://api.example.test/";
        let o = bounded(cmd.args(["--label", &label, IMAGE, "sh", "-c", script]));
        assert_eq!(leftovers(&label), "", "a container was left behind");
        o
    };
    let o = run(false);
    assert_eq!(stdout(&o), "403", "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("leash: 1 request refused"), "{err}");
    assert!(err.contains("api.example.test") && err.contains("not-allowed"), "{err}");
    assert!(err.contains("did you mean `.example.test`?"), "{err}");
    let quiet = run(true);
    assert!(!stderr(&quiet).contains("requests refused") && !stderr(&quiet).contains("request refused"));
}
