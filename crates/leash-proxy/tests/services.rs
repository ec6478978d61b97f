//! The policy's `services` over real sockets: a service's listener relays to its target and nothing else, each
//! connection (tcp) or request (http) on record with the service's name; an http service's paths are decided like
//! `allowed_urls` prefixes, and whatever it refuses — a path outside, a dot segment, an encoded slash, an absolute
//! URL, a CONNECT, a smuggling framing — never reaches the target.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test's helpers fail it by panicking")]

mod support;

use std::net::SocketAddr;

use leash_proxy::ServiceListener;
use support::client::exchange;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A listener on a free port of the host's loopback, for a service; and its address.
fn service_listener() -> (ServiceListener, SocketAddr) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    (ServiceListener::Tcp(l), addr)
}

/// A policy listing nothing but `service` (a YAML flow mapping, without braces).
fn with_service(service: &str) -> String {
    format!("network:\n  mode: allowlist\n  allowed_hosts: [allowed.test]\n  services:\n    - {{{service}}}\n")
}

/// `leash` serving one service named `name` (written in `entry`, with `LISTEN` for its port) on a fresh listener.
async fn serving(name: &str, entry: impl Fn(u16) -> String) -> (Leash, SocketAddr) {
    let (listener, addr) = service_listener();
    let leash = Leash::builder(&with_service(&entry(addr.port()))).service(name, listener).start().await;
    (leash, addr)
}

fn request(method: &str, target: &str) -> String {
    format!("{method} {target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
}

#[tokio::test]
async fn a_tcp_service_relays_bytes_to_its_target_with_one_line_per_connection() {
    let up = Upstream::start().await;
    let (leash, addr) =
        serving("mcp", |port| format!("name: mcp, listen: {port}, target: '127.0.0.1:{}'", up.port())).await;
    // Bytes are relayed as they are: not even an HTTP head is required, or read.
    let r = exchange(addr, "GET /anything?x=1 HTTP/1.1\r\nHost: whatever.test\r\nConnection: close\r\n\r\n").await;
    assert_eq!((r.status, r.text().as_str()), (200, "hello from upstream"));
    let seen = up.only_request();
    assert_eq!((seen.head.start.as_str(), seen.header("host")), ("GET /anything?x=1 HTTP/1.1", Some("whatever.test")));
    let line = leash.decision("mcp").await;
    assert_eq!(
        (&line["method"], &line["service"], &line["rule"]),
        (&"SERVICE".into(), &"mcp".into(), &"service:mcp".into())
    );
    assert_eq!(line["port"], addr.port());
    let outcome = leash.outcome(&line["id"]).await;
    assert!(outcome["bytes_up"].as_u64().unwrap() > 50 && outcome["bytes_down"].as_u64().unwrap() > 50, "{outcome}");
}

#[tokio::test]
async fn a_tcp_service_whose_target_is_down_closes_the_connection_and_says_why() {
    let dead = origin::dead_port().await;
    let (leash, addr) = serving("mcp", |port| format!("name: mcp, listen: {port}, target: '127.0.0.1:{dead}'")).await;
    let mut raw = Raw::connect(addr).await;
    assert!(raw.closed_within(STEP).await, "the client's connection is closed");
    let line = leash.decision("mcp").await;
    let outcome = leash.outcome(&line["id"]).await;
    assert_eq!((&outcome["status"], &outcome["error"]), (&502.into(), &"refused".into()), "{outcome}");
}

#[tokio::test]
async fn an_http_service_admits_only_its_paths_and_the_rest_never_reaches_the_target() {
    let up = Upstream::start().await;
    let (leash, addr) = serving("gw", |port| {
        format!("name: gw, listen: {port}, target: '127.0.0.1:{}', kind: http, paths: [/mcp, /v1/]", up.port())
    })
    .await;
    let r = exchange(addr, request("POST", "/mcp")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let seen = up.only_request();
    assert_eq!(seen.head.start, "POST /mcp HTTP/1.1");
    assert_eq!(seen.header("host"), Some(format!("127.0.0.1:{}", up.port()).as_str()), "the target's own Host");
    for (target, status, reason) in [
        ("/admin", 403, "not-allowed"),
        ("/mcpx", 403, "not-allowed"),
        ("/v1", 403, "not-allowed"),
        ("/mcp/../admin", 403, "not-allowed"),
        ("/mcp/x/../y", 403, "ambiguous-path"),
        ("/mcp%2F..%2Fadmin", 403, "not-allowed"),
        ("/mcp%2Fx", 403, "ambiguous-path"),
        ("/mcp/%zz", 400, "bad-request"),
        ("http://127.0.0.1/mcp", 400, "bad-request"),
    ] {
        let r = exchange(addr, request("GET", target)).await;
        assert_eq!(r.status, status, "{target}: {}", r.text());
        let line = leash.decision(target).await;
        assert_eq!((&line["decision"], &line["reason"]), (&"block".into(), &reason.into()), "{target}: {line}");
        assert_eq!((&line["host"], &line["service"]), (&"gw".into(), &"gw".into()));
    }
    let r = exchange(addr, format!("CONNECT 127.0.0.1:{} HTTP/1.1\r\nHost: x\r\n\r\n", up.port())).await;
    assert_eq!(r.status, 400, "a service is no proxy: {}", r.text());
    assert_eq!(up.requests().len(), 1, "nothing refused reached the target: {:#?}", up.requests());
    let allowed = leash.decision("/mcp").await;
    assert_eq!((&allowed["rule"], &allowed["method"]), (&"service:gw/mcp".into(), &"POST".into()));
    assert_eq!(leash.outcome(&allowed["id"]).await["status"], 200);
}

#[tokio::test]
async fn a_request_framed_two_ways_is_refused_before_the_target_sees_it() {
    let up = Upstream::start().await;
    let (_leash, addr) = serving("gw", |port| {
        format!("name: gw, listen: {port}, target: '127.0.0.1:{}', kind: http, paths: [/mcp]", up.port())
    })
    .await;
    // Content-Length and chunked together: a smuggling attempt, answered 400 by leash.
    let smuggle = "POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n\
                   0\r\n\r\nGET /admin HTTP/1.1\r\nHost: x\r\n\r\n";
    let r = exchange(addr, smuggle).await;
    assert_eq!(r.status, 400, "{}", r.text());
    up.assert_untouched().await;
}

#[tokio::test]
async fn keep_alive_requests_share_one_target_connection_each_decided() {
    let up = Upstream::start().await;
    let (leash, addr) = serving("gw", |port| {
        format!("name: gw, listen: {port}, target: '127.0.0.1:{}', kind: http, paths: [/a, /b]", up.port())
    })
    .await;
    let mut raw = Raw::connect(addr).await;
    raw.send("GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(raw.response().await.status, 200);
    assert_eq!(raw.response().await.status, 200);
    assert_eq!(up.connections().await, 1, "one target connection for the client's one");
    let (a, b) = (leash.decision("/a").await, leash.decision("/b").await);
    assert_ne!(a["id"], b["id"], "each request is its own line");
}

#[tokio::test]
async fn a_service_may_go_to_a_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("target.sock");
    let target = tokio::net::UnixListener::bind(&path).unwrap();
    tokio::spawn(async move {
        let (mut conn, _) = target.accept().await.unwrap();
        let mut buf = vec![0; 4096];
        let mut got = Vec::new();
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = conn.read(&mut buf).await.unwrap();
            got.extend_from_slice(&buf[..n]);
        }
        let host = String::from_utf8_lossy(&got).lines().find(|l| l.starts_with("Host:")).unwrap_or("").to_owned();
        let body = format!("unix says hi; {host}");
        let reply = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
        conn.write_all(reply.as_bytes()).await.unwrap();
    });
    let (leash, addr) =
        serving("tools", |port| format!("name: tools, listen: {port}, target: '{}', kind: http", path.display())).await;
    let r = exchange(addr, request("GET", "/list")).await;
    assert_eq!((r.status, r.text().as_str()), (200, "unix says hi; Host: localhost"));
    assert_eq!(leash.decision("/list").await["rule"], "service:tools");
}

#[tokio::test]
async fn a_service_listener_may_be_a_unix_socket() {
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("in.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let yaml = with_service(&format!("name: s, listen: '{}', target: '127.0.0.1:{}'", path.display(), up.port()));
    let leash = Leash::builder(&yaml).service("s", ServiceListener::Unix(listener)).start().await;
    let mut conn = tokio::net::UnixStream::connect(&path).await.unwrap();
    conn.write_all(request("GET", "/over-unix").as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    within("the relayed answer", async {
        let mut buf = [0; 1024];
        while !answer.ends_with(b"hello from upstream") {
            let n = conn.read(&mut buf).await.unwrap();
            assert_ne!(n, 0, "closed before the answer: {}", String::from_utf8_lossy(&answer));
            answer.extend_from_slice(&buf[..n]);
        }
    })
    .await;
    assert!(answer.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&answer));
    let line = leash.decision("s").await;
    assert_eq!((&line["port"], &line["client"]), (&0.into(), &"0.0.0.0:0".into()), "a Unix client has no address");
}

#[tokio::test]
async fn a_reload_changes_paths_for_the_next_connection_and_a_removed_service_is_refused() {
    let up = Upstream::start().await;
    let entry = |port: u16, paths: &str| {
        format!("name: gw, listen: {port}, target: '127.0.0.1:{}', kind: http, paths: [{paths}]", up.port())
    };
    let (leash, addr) = serving("gw", |port| entry(port, "/a")).await;
    assert_eq!(exchange(addr, request("GET", "/b")).await.status, 403);
    leash.reload(&with_service(&entry(addr.port(), "/a, /b")));
    assert_eq!(exchange(addr, request("GET", "/b")).await.status, 200);
    leash.reload("network:\n  mode: allowlist\n  allowed_hosts: [allowed.test]\n");
    let mut raw = Raw::connect(addr).await;
    assert!(raw.closed_within(STEP).await, "a service the policy no longer has is closed at once");
    let lines = leash.log_until("the refusal", |l| l["method"] == "SERVICE" && l["decision"] == "block").await;
    assert_eq!(lines.iter().filter(|l| l["path"] == "/b" && l["decision"] == "allow").count(), 1, "{lines:#?}");
    assert_eq!(up.requests().len(), 1);
}

/// A CONNECT to the proxy naming a service's loopback port, as a client that tunnels to its gateway whatever
/// `NO_PROXY` says sends it (benchflow's Gemini agent): its answer to CONNECT and the connection after it.
async fn tunnel_to(leash: &Leash, target: &str) -> (Raw, u16) {
    support::tls::connect(leash.addr, target).await
}

#[tokio::test]
async fn a_connect_to_a_services_loopback_port_reaches_the_service_and_is_logged_as_it() {
    let up = Upstream::start().await;
    let (leash, addr) =
        serving("gw", |port| format!("name: gw, listen: {port}, target: '127.0.0.1:{}'", up.port())).await;
    let port = addr.port();
    for spelling in ["localhost", "127.0.0.1", "[::1]"] {
        let (mut c, status) = tunnel_to(&leash, &format!("{spelling}:{port}")).await;
        assert_eq!(status, 200, "CONNECT {spelling}:{port}");
        c.send(format!("GET /v1/models HTTP/1.1\r\nHost: {spelling}:{port}\r\nConnection: close\r\n\r\n")).await;
        let r = c.response().await;
        assert_eq!((r.status, r.text().as_str()), (200, "hello from upstream"), "through {spelling}");
    }
    let service_lines = |log: &[serde_json::Value]| {
        log.iter().filter(|v| v["method"] == "SERVICE" && v["service"] == "gw" && v["decision"] == "allow").count()
    };
    let deadline = std::time::Instant::now() + STEP;
    while service_lines(&leash.log()) < 3 {
        assert!(std::time::Instant::now() < deadline, "each tunnel is one SERVICE line: {:?}", leash.log());
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(up.requests().len(), 3, "the three tunnels reached the service's target");
}

#[tokio::test]
async fn a_connect_to_an_http_service_is_decided_request_by_request_and_other_loopback_ports_stay_refused() {
    let up = Upstream::start().await;
    let (leash, addr) = serving("gw", |port| {
        format!("name: gw, listen: {port}, target: '127.0.0.1:{}', kind: http, paths: [/v1/]", up.port())
    })
    .await;
    let (mut c, status) = tunnel_to(&leash, &format!("localhost:{}", addr.port())).await;
    assert_eq!(status, 200);
    c.send(format!("GET /v1/models HTTP/1.1\r\nHost: localhost:{}\r\n\r\n", addr.port())).await;
    assert_eq!(c.response().await.status, 200);
    c.send(format!("GET /admin HTTP/1.1\r\nHost: localhost:{}\r\nConnection: close\r\n\r\n", addr.port())).await;
    let refused = c.response().await;
    assert_eq!((refused.status, refused.header("x-leash-reason")), (403, Some("not-allowed")));
    assert_eq!(up.requests().len(), 1, "the refused path never reached the target");
    // Loopback ports no service listens on, and other addresses, are what they always were: refused.
    for target in [format!("127.0.0.1:{}", up.port()), format!("127.0.0.2:{}", addr.port()), "10.0.0.1:443".to_owned()]
    {
        let (_, status) = tunnel_to(&leash, &target).await;
        assert_eq!(status, 403, "CONNECT {target}");
    }
}
