//! Rules by method over real sockets, through every door: plain HTTP, HTTP/1.1 and HTTP/2 inside an inspected
//! tunnel. A read-only host answers GET, HEAD and OPTIONS; POST reaches it only on the path a pattern names
//! (`*/*/git-upload-pack`); every other method, an unknown one or a lower-case spelling included, is refused with
//! `method-not-allowed` and never reaches the origin.

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Frame;

use super::h2::{h2_client, Frames, H2Origin};
use super::{decisions, Inspecting};
use crate::support::client::{Raw, Resp};
use crate::support::*;

/// `allowed.test` read-only but for POSTs to `*/*/git-upload-pack` under it.
fn forge(ports: u16, tunnel_port: u16) -> String {
    format!(
        "network:\n  mode: allowlist\n  allowed_hosts: ['read-only allowed.test']\n  \
         allowed_urls: ['POST allowed.test/*/*/git-upload-pack']\n  ports: [{ports}]\n  tunnel_ports: [{tunnel_port}]\n  \
         allow_destinations: [127.0.0.0/8]\n"
    )
}

const READ_ONLY: &str = "read-only allowed.test";
const FETCH: &str = "POST allowed.test/*/*/git-upload-pack";

/// A request with `method` to `path` on `allowed.test` at `port`, with an empty body.
fn raw(method: &str, target: &str, port: u16) -> String {
    format!("{method} {target} HTTP/1.1\r\nHost: allowed.test:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
}

/// `method target` through the plain proxy on a fresh connection; its response (a HEAD's without a body).
async fn send(w: &World, method: &str, target: &str) -> Resp {
    let mut c = Raw::connect(w.leash.addr).await;
    c.send(raw(method, target, w.port())).await;
    c.response_to(method).await
}

#[tokio::test]
async fn plain_http_read_only_host_refuses_other_methods_before_the_origin() {
    let w = World::new(|p| forge(p, 443)).await;
    let url = |path: &str| w.url("allowed.test", path);
    for method in ["GET", "HEAD", "OPTIONS"] {
        let r = send(&w, method, &url("/o/r")).await;
        assert_eq!(r.status, 200, "{method}: {}", r.text());
    }
    assert_eq!(send(&w, "POST", &url("/o/r/git-upload-pack")).await.status, 200);
    for method in ["POST", "PUT", "DELETE", "PROPFIND", "BREW", "get"] {
        let r = send(&w, method, &url("/o/r/git-receive-pack")).await;
        assert_refused(&r, 403, "method-not-allowed");
    }
    let seen: Vec<String> = w.up.requests().iter().map(|r| format!("{} {}", r.method, r.target)).collect();
    assert_eq!(seen, ["GET /o/r", "HEAD /o/r", "OPTIONS /o/r", "POST /o/r/git-upload-pack"]);
    let lines = w.leash.log_until("the last refusal", |v| v["method"] == "get").await;
    let refused: Vec<_> = decisions(&lines).into_iter().filter(|v| v["decision"] == "block").collect();
    assert_eq!(refused.len(), 6);
    for line in refused {
        assert_eq!((line["reason"].as_str(), line["rule"].as_str()), (Some("method-not-allowed"), Some(READ_ONLY)));
    }
    let fetch = decisions(&lines).into_iter().find(|v| v["method"] == "POST" && v["decision"] == "allow").cloned();
    assert_eq!(fetch.map(|v| v["rule"].clone()), Some(FETCH.into()));
}

#[tokio::test]
async fn inspected_http1_curl_reads_and_fetches_but_cannot_post_elsewhere() {
    let ca = TestCa::new();
    let tls = TlsUpstream::start(&ca).await;
    let t = Inspecting::with(ca, tls, |port| forge(80, port)).await;
    let cacert = t.ca_file();
    let get = curl(t.leash.addr, &["--cacert", &cacert, &t.url("allowed.test", "/o/r/info/refs")]).await;
    assert_eq!((get.connect_status, get.status), (200, 200), "{}", get.stderr);
    let fetch_url = t.url("allowed.test", "/o/r.git/git-upload-pack");
    let fetch = curl(t.leash.addr, &["--cacert", &cacert, "-d", "want", &fetch_url]).await;
    assert_eq!(fetch.status, 200, "{}", fetch.stderr);
    let push_url = t.url("allowed.test", "/o/r.git/git-receive-pack");
    let push = curl(t.leash.addr, &["--cacert", &cacert, "-d", "update", &push_url]).await;
    assert_eq!(push.status, 403, "{}", push.stderr);
    assert_eq!(push.head.header("x-leash-reason"), Some("method-not-allowed"));
    let put = curl(t.leash.addr, &["--cacert", &cacert, "-X", "PUT", &t.url("allowed.test", "/o/r")]).await;
    assert_eq!(put.head.header("x-leash-reason"), Some("method-not-allowed"));
    let targets: Vec<String> = t.tls.origin.requests().iter().map(|r| format!("{} {}", r.method, r.target)).collect();
    assert_eq!(targets, ["GET /o/r/info/refs", "POST /o/r.git/git-upload-pack"], "no refused request reached it");
    let lines = t.leash.log_until("the PUT's line", |v| v["method"] == "PUT").await;
    let d = decisions(&lines);
    let tunnels: Vec<_> = d.iter().filter(|v| v["method"] == "CONNECT").collect();
    assert!(tunnels.iter().all(|v| v["decision"] == "inspect" && v["rule"] == READ_ONLY), "{tunnels:?}");
    let push_line = d.iter().find(|v| v["path"] == "/o/r.git/git-receive-pack").expect("the push's line");
    assert_eq!(
        (push_line["decision"].as_str(), push_line["reason"].as_str()),
        (Some("block"), Some("method-not-allowed"))
    );
}

#[tokio::test]
async fn inspected_http2_streams_are_decided_by_their_method() {
    let ca = TestCa::new();
    let origin = H2Origin::start(&ca).await;
    let tls = TlsUpstream::start(&ca).await;
    let port = origin.port;
    let t = Inspecting::with(ca, tls, move |_| forge(80, port)).await;
    let mut send = h2_client(&t, &origin, "allowed.test").await;
    let authority = format!("allowed.test:{port}");
    let stream = |method: &str, path: &str| {
        let body = Frames::new(vec![Frame::data(Bytes::from_static(b"pack"))]);
        ::http::Request::builder().method(method).uri(format!("https://{authority}{path}")).body(body).unwrap()
    };
    let ok = within("GET stream", send.send_request(stream("GET", "/o/r/info/refs"))).await.unwrap();
    assert_eq!(ok.status(), 200);
    let refused = within("POST stream", send.send_request(stream("POST", "/o/r/git-receive-pack"))).await.unwrap();
    assert_eq!(refused.status(), 403);
    assert_eq!(refused.headers().get("x-leash-reason").unwrap(), "method-not-allowed");
    let text = refused.into_body().collect().await.unwrap().to_bytes();
    assert!(
        text.starts_with(b"leash: allowed.test/o/r/git-receive-pack refused by the egress policy (method-not-allowed)")
    );
    let odd = within("PROPFIND stream", send.send_request(stream("PROPFIND", "/o/r"))).await.unwrap();
    assert_eq!(odd.headers().get("x-leash-reason").unwrap(), "method-not-allowed");
    // The connection stays usable, and the pattern admits its POST.
    let fetch = within("upload-pack stream", send.send_request(stream("POST", "/o/r/git-upload-pack"))).await.unwrap();
    assert_eq!(fetch.status(), 200);
    let seen: Vec<String> = origin.seen().iter().map(|s| s.path.clone()).collect();
    assert_eq!(seen, ["/o/r/info/refs", "/o/r/git-upload-pack"]);
}

/// A WebSocket carries writes once its GET is answered: on a read-only host it is refused as a POST would be
/// (`method-not-allowed`, nothing reaching the origin), and where a POST is allowed it is relayed as before.
#[tokio::test]
async fn a_websocket_is_refused_where_only_reads_are_allowed_and_relayed_where_writes_are() {
    let switching =
        b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\nws-hello".to_vec();
    let up = Upstream::with(move |_| Reply::Raw(switching.clone())).await;
    let w = World::with(up, |p| {
        format!(
            "network:\n  mode: allowlist\n  allowed_hosts: ['read-only allowed.test', writes.test]\n  ports: [{p}]\n  \
             allow_destinations: [127.0.0.0/8]\n"
        )
    })
    .await;
    let lines = ["Connection: upgrade", "Upgrade: websocket"];
    let mut c = Raw::connect(w.leash.addr).await;
    c.send(crate::support::client::request("GET", &w.url("allowed.test", "/chat"), &lines, "")).await;
    let refused = c.response().await;
    assert_eq!((refused.status, refused.header("x-leash-reason")), (403, Some("method-not-allowed")));
    let d = w.leash.decision("/chat").await;
    assert_eq!((d["reason"].as_str(), d["rule"].as_str()), (Some("method-not-allowed"), Some(READ_ONLY)), "{d}");
    let mut c = Raw::connect(w.leash.addr).await;
    c.send(crate::support::client::request("GET", &w.url("writes.test", "/chat"), &lines, "")).await;
    let head = within("101", c.wire.head()).await.unwrap().unwrap();
    assert!(head.start.contains("101"), "{}", head.start);
    assert_eq!(w.up.requests().len(), 1, "only the allowed WebSocket reached the origin");
}
