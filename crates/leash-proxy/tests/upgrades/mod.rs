//! What may follow a 101, against a real origin that honours `Upgrade: h2c` (hypercorn, driven by `h2c.py`): an
//! attacker asks an allowed path to switch to h2c, then sends an HTTP/2 stream for a path the policy refuses —
//! through the proxy, inside an inspected tunnel, and to an HTTP service with `paths`. On each door the refused path
//! must never reach the origin: leash drops the upgrade (the decision line says `upgrade_dropped`), the request is
//! answered as HTTP/1.1, and the HTTP/2 bytes that follow are no request leash reads (400). Python's `hypercorn` and
//! `h2` must be installed (`.ci/run` does); without them each test says so and passes, unless `LEASH_REQUIRE_H2C`
//! is set (CI sets it).

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::support::*;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/upgrades/h2c.py");
const HOST: &str = "h2c.test";

/// Whether hypercorn and h2 are there; a loud skip when not, a failure when CI requires them.
fn python_h2c() -> bool {
    let ok = std::process::Command::new("python3")
        .args(["-c", "import hypercorn, h2"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(std::env::var_os("LEASH_REQUIRE_H2C").is_none(), "python3 with hypercorn and h2 is required");
        eprintln!("SKIPPED: python3 with hypercorn and h2 not installed (pip install hypercorn h2)");
    }
    ok
}

/// hypercorn on a free loopback port, recording every request it serves.
struct H2cOrigin {
    port: u16,
    log: PathBuf,
    _child: Child,
    _dir: tempfile::TempDir,
}

impl H2cOrigin {
    /// Plain, or TLS with a leaf for [`HOST`] from `ca`.
    async fn start(ca: Option<&TestCa>) -> H2cOrigin {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("served");
        let mut cmd = Command::new("python3");
        cmd.arg(SCRIPT).arg("origin").arg(&log);
        if let Some(ca) = ca {
            let (cert, key) = ca.leaf_files(&[HOST], dir.path());
            cmd.arg(cert).arg(key);
        }
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::null()).kill_on_drop(true).spawn().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = within("hypercorn's port", lines.next_line()).await.unwrap().unwrap_or_default();
        let port = line.strip_prefix("port ").and_then(|p| p.parse().ok()).expect("the port line");
        H2cOrigin { port, log, _child: child, _dir: dir }
    }

    /// Every request served, `HTTP/<version> <path>` a line.
    fn served(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// The attack through `leash_port` (`mode`: proxy, tls, service) to the origin at `port`: `/ok` upgraded to h2c,
/// then a stream for `/secret`. What the client got back.
async fn attack(mode: &str, leash_port: u16, port: u16, cafile: Option<&Path>) -> Value {
    let mut cmd = Command::new("python3");
    cmd.arg(SCRIPT).args(["client", mode, &leash_port.to_string(), HOST, &port.to_string(), "/ok", "/secret"]);
    cmd.args(cafile);
    let out = within("the h2c client", cmd.stderr(Stdio::inherit()).kill_on_drop(true).output()).await.unwrap();
    assert!(out.status.success(), "the client failed: {}", String::from_utf8_lossy(&out.stdout));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The allowed request was answered as HTTP/1.1, the HTTP/2 bytes after it refused as no request, and the origin
/// served `/ok` over HTTP/1.1 and never `/secret`.
fn held(got: &Value, origin: &H2cOrigin) {
    let served = origin.served();
    assert!(!served.contains("/secret"), "the refused path reached the origin:\n{served}\n{got}");
    assert_eq!(served, "HTTP/1.1 /ok\n");
    assert_eq!(got["first"], 200, "the upgrade was not passed on: {got}");
    let after = got["after"].as_str().unwrap_or_default();
    assert!(after.starts_with("HTTP/1.1 400 "), "the HTTP/2 preface is no request leash reads: {got}");
}

/// The decision line for `/ok` names the upgrade leash dropped.
async fn dropped_on_record(leash: &Leash) {
    let line = leash.decision("/ok").await;
    assert_eq!(line["upgrade_dropped"], "h2c", "{line}");
}

#[tokio::test]
async fn h2c_through_the_proxy_cannot_reach_a_path_outside_allowed_urls() {
    if !python_h2c() {
        return;
    }
    let origin = H2cOrigin::start(None).await;
    let policy = format!(
        "network:\n  mode: allowlist\n  allowed_urls: [\"{HOST}/ok\"]\n  ports: [{}]\n  \
         allow_destinations: [127.0.0.0/8]\n",
        origin.port
    );
    let leash = Leash::start(&policy).await;
    let got = attack("proxy", leash.addr.port(), origin.port, None).await;
    held(&got, &origin);
    dropped_on_record(&leash).await;
}

#[tokio::test]
async fn h2c_inside_an_inspected_tunnel_cannot_reach_a_blocked_path() {
    if !python_h2c() {
        return;
    }
    let ca = TestCa::new();
    let origin = H2cOrigin::start(Some(&ca)).await;
    let policy = blocklist(&[&format!("{HOST}/secret")], &[80], &[origin.port]);
    let leash = Leash::builder(&policy).inspecting(&ca.pem).start().await;
    let got = attack("tls", leash.addr.port(), origin.port, leash.ca_path.as_deref()).await;
    held(&got, &origin);
    dropped_on_record(&leash).await;
}

#[tokio::test]
async fn h2c_to_an_http_service_cannot_reach_a_path_outside_its_paths() {
    if !python_h2c() {
        return;
    }
    let origin = H2cOrigin::start(None).await;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let listen = listener.local_addr().unwrap().port();
    let policy = format!(
        "network:\n  mode: allowlist\n  allowed_hosts: [allowed.test]\n  services:\n    - {{name: gw, listen: {listen}, \
         target: '127.0.0.1:{}', kind: http, paths: [/ok]}}\n",
        origin.port
    );
    let leash = Leash::builder(&policy).service("gw", leash_proxy::ServiceListener::Tcp(listener)).start().await;
    let got = attack("service", listen, origin.port, None).await;
    held(&got, &origin);
    dropped_on_record(&leash).await;
}

/// An origin that switches protocols whatever it was asked, then sends bytes of the new protocol.
async fn switching(to: &'static str) -> World {
    let raw = format!("HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: {to}\r\n\r\nafter-101");
    let up = Upstream::with(move |_| Reply::Raw(raw.clone().into_bytes())).await;
    World::with(up, |p| allowlist(&["allowed.test"], &[p], &[443])).await
}

#[tokio::test]
async fn a_101_the_request_did_not_ask_for_is_refused_and_nothing_after_it_relayed() {
    for (to, asked) in [("h2c", "Upgrade: h2c"), ("h2c", "Upgrade: websocket"), ("websocket", "X-Asked: nothing")] {
        let w = switching(to).await;
        let lines = ["Connection: upgrade", asked];
        let mut raw = Raw::connect(w.leash.addr).await;
        raw.send(crate::support::client::request("GET", &w.url("allowed.test", "/"), &lines, "")).await;
        let got = String::from_utf8_lossy(&raw.until_closed().await.unwrap()).into_owned();
        assert!(got.starts_with("HTTP/1.1 502 "), "{to} for `{asked}`: {got}");
        assert!(!got.contains("after-101"), "{to} for `{asked}`: {got}");
        let outcome = w.leash.log_until("the outcome", |l| l.get("error").is_some()).await;
        assert!(outcome.iter().any(|l| l["error"] == "bad-response"), "{outcome:#?}");
    }
}

#[tokio::test]
async fn http2_prior_knowledge_on_a_plain_connection_is_refused() {
    let w = World::new(|p| allowlist(&["allowed.test"], &[p], &[443])).await;
    let mut raw = Raw::connect(w.leash.addr).await;
    // The connection preface and an empty SETTINGS frame, as a client with prior knowledge of h2c opens.
    raw.send(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00").await;
    let got = String::from_utf8_lossy(&raw.until_closed().await.unwrap()).into_owned();
    assert!(got.starts_with("HTTP/1.1 400 "), "{got}");
    w.assert_nothing_reached().await;
}
