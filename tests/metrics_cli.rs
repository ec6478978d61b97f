//! `leash proxy --metrics` as an operator meets it: the real binary, curl through the proxy, curl scraping the
//! metrics address it printed; and the addresses it refuses to serve them on.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test's helpers fail it by panicking")]

mod common;

use common::{origin, stderr};

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const LEASH: &str = env!("CARGO_BIN_EXE_leash");

/// An allowlist of `docs.test` on `port`, with the host's loopback (where the origin listens) exempt.
fn policy(dir: &Path, port: u16) -> PathBuf {
    let path = dir.join("policy.yaml");
    let yaml = format!(
        "network:\n  mode: allowlist\n  allowed_hosts: [docs.test]\n  ports: [{port}]\n  allow_destinations: [127.0.0.1/32]\n"
    );
    std::fs::write(&path, yaml).unwrap();
    path
}

/// `leash proxy` with its metrics on a free port; killed when dropped.
struct Proxy {
    child: Child,
    /// Where clients send requests.
    addr: String,
    /// Where the metrics are scraped.
    metrics: String,
}

impl Proxy {
    fn start(policy: &Path, log: &Path) -> Proxy {
        let mut child = Command::new(LEASH)
            .args(["proxy", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--resolve", "docs.test:127.0.0.1"])
            .arg("--policy")
            .arg(policy)
            .arg("--log")
            .arg(log)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut next = |prefix: &str| lines.next().unwrap().unwrap().strip_prefix(prefix).expect(prefix).to_owned();
        let addr = next("listening on ");
        let metrics = next("metrics on ");
        Proxy { child, addr, metrics }
    }

    /// The status curl gets for `url` through the proxy.
    fn curl(&self, url: &str) -> String {
        let proxy = format!("http://{}", self.addr);
        curl(&["-s", "-o", "/dev/null", "-w", "%{http_code}", "-x", &proxy, url])
    }

    /// `/metrics`, scraped with curl, failing on any answer but 200; with the Content-Type header line first.
    fn scrape(&self) -> String {
        curl(&["-sf", "-w", "%{content_type}\n", &format!("http://{}/metrics", self.metrics)])
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn curl(args: &[&str]) -> String {
    let o = Command::new("curl").args(["--max-time", "10", "--noproxy", ""]).args(args).output().unwrap();
    assert!(o.status.success(), "curl {args:?}: {}", stderr(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn proxy_serves_its_decision_counters_at_the_metrics_address() {
    let port = origin();
    let dir = tempfile::tempdir().unwrap();
    let proxy = Proxy::start(&policy(dir.path(), port), &dir.path().join("audit.jsonl"));
    assert_eq!(proxy.curl(&format!("http://docs.test:{port}/a")), "200");
    assert_eq!(proxy.curl(&format!("http://docs.test:{port}/b")), "200");
    assert_eq!(proxy.curl(&format!("http://other.test:{port}/")), "403");
    let text = proxy.scrape();
    for line in [
        "leash_decisions_total{kind=\"http\",decision=\"allow\",reason=\"rule\"} 2\n",
        "leash_decisions_total{kind=\"http\",decision=\"block\",reason=\"not-allowed\"} 1\n",
        "# TYPE leash_decisions_total counter\n",
        "leash_policy_generation 0\n",
        "text/plain; version=0.0.4; charset=utf-8\n",
    ] {
        assert!(text.contains(line), "no `{}` in\n{text}", line.trim_end());
    }
    let other = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", &format!("http://{}/", proxy.metrics)])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&other.stdout), "404");
}

#[test]
fn proxy_refuses_a_metrics_address_it_cannot_or_must_not_serve() {
    let dir = tempfile::tempdir().unwrap();
    let policy = policy(dir.path(), 80);
    let refused = |metrics: &str, listen: &str| {
        let o = Command::new(LEASH)
            .args(["proxy", "--listen", listen, "--metrics", metrics, "--log"])
            .arg(dir.path().join("audit.jsonl"))
            .arg("--policy")
            .arg(&policy)
            .output()
            .unwrap();
        (o.status.code(), stderr(&o))
    };
    let (code, err) = refused("not-an-address", "127.0.0.1:0");
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--metrics"), "{err}");
    // The proxy's own address is where its clients are sent: the metrics never share it.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    drop(taken);
    let (code, err) = refused(&format!("0.0.0.0:{port}"), &format!("127.0.0.1:{port}"));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("the proxy's own address"), "{err}");
}

#[test]
fn policy_reloads_are_counted_by_outcome() {
    let port = origin();
    let dir = tempfile::tempdir().unwrap();
    let policy = policy(dir.path(), port);
    let proxy = Proxy::start(&policy, &dir.path().join("audit.jsonl"));
    let hangup = || {
        let pid = proxy.child.id().to_string();
        assert!(Command::new("kill").args(["-HUP", &pid]).status().unwrap().success());
    };
    // Waits on the counter itself (bounded): the reload happens on leash's own time after the signal.
    let wait_for = |line: &str| {
        for _ in 0..200 {
            if proxy.scrape().contains(line) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        panic!("no `{line}` in\n{}", proxy.scrape());
    };
    hangup();
    wait_for("leash_policy_reloads_total{outcome=\"applied\"} 1\n");
    std::fs::write(&policy, "network:\n  mode: nonsense\n").unwrap();
    hangup();
    wait_for("leash_policy_reloads_total{outcome=\"refused\"} 1\n");
    assert!(proxy.scrape().contains("leash_policy_generation 1\n"), "the invalid file changed nothing");
}
