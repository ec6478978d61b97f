//! `refusals: as-not-found`: a refused request is answered as an origin answers a page it does not have, a refused
//! tunnel as an unreachable host; nothing in the answer names leash, the target or a rule, whichever rule refused
//! it (a differential: two refusals for different reasons, the same bytes). Each is still logged as a refusal.

use http_body_util::BodyExt;

use super::h2::{h2_client, H2Origin};
use super::{Inspecting, BLOCKED};
use crate::support::tls::{TestCa, TlsUpstream};
use crate::support::world::World;
use crate::support::*;

/// `policy` answering its refusals as an origin's missing pages.
fn unannounced(policy: String) -> String {
    format!("{policy}  refusals: as-not-found\n")
}

#[tokio::test]
async fn a_refused_plain_request_is_a_404_naming_nothing_and_is_still_logged_as_a_block() {
    let w =
        World::new(|port| unannounced(blocklist(&["blocked.test", "allowed.test/private/"], &[port], &[443]))).await;
    let by_path = w.get("allowed.test", "/private/report").await;
    let by_host = w.get("blocked.test", "/").await;
    assert_eq!(by_path.status, 404, "{}", by_path.head.raw);
    assert_eq!(by_path.header("x-leash-reason"), None);
    assert_eq!(by_path.header("content-type"), Some("text/html"));
    assert!(by_path.text().contains("<h1>404 Not Found</h1>"), "{}", by_path.text());
    for leak in ["leash", "private", "blocked", "rule", "policy"] {
        assert!(!by_path.text().to_lowercase().contains(leak), "`{leak}` in {}", by_path.text());
    }
    // A path rule and a host rule, refused for different reasons: the same answer, byte for byte.
    assert_eq!(
        (by_host.status, by_host.head.raw.clone(), by_host.text()),
        (404, by_path.head.raw.clone(), by_path.text())
    );
    w.assert_nothing_reached().await;
    let lines = w.leash.log_until("both refusals", |v| v["host"] == "blocked.test").await;
    let refused: Vec<&str> =
        lines.iter().filter(|v| v["decision"] == "block").filter_map(|v| v["reason"].as_str()).collect();
    assert_eq!(refused, ["rule", "rule"], "{lines:?}");
}

#[tokio::test]
async fn inside_an_inspected_tunnel_a_blocked_path_is_a_404_over_http1_and_http2_and_a_refused_tunnel_a_502() {
    let ca = TestCa::new();
    let origin = H2Origin::start(&ca).await;
    let tls = TlsUpstream::start(&ca).await;
    let port = origin.port;
    let t =
        Inspecting::with(ca, tls, move |h1| unannounced(blocklist(&[BLOCKED, "gone.test"], &[80], &[port, h1]))).await;
    let mut send = h2_client(&t, &origin, "allowed.test").await;
    let blocked = ::http::Request::get(format!("https://allowed.test:{port}/abs/2401.01234v2"))
        .body(super::h2::Frames::new(vec![]))
        .unwrap();
    let resp = within("blocked h2 stream", send.send_request(blocked)).await.unwrap();
    assert_eq!(resp.status(), 404);
    assert!(resp.headers().get("x-leash-reason").is_none(), "{:?}", resp.headers());
    let body = String::from_utf8_lossy(&resp.into_body().collect().await.unwrap().to_bytes()).into_owned();
    assert!(body.contains("<h1>404 Not Found</h1>") && !body.contains("leash"), "{body}");
    assert!(origin.seen().is_empty(), "the blocked stream never reached the origin");

    // HTTP/1.1 inside the tunnel, from curl trusting leash's CA.
    let ca_file = t.ca_file();
    let out = curl(t.leash.addr, &["--cacert", &ca_file, &t.url("allowed.test", "/abs/2401.01234")]).await;
    assert_eq!((out.connect_status, out.status), (200, 404), "{}", out.stderr);
    assert_eq!(out.head.header("x-leash-reason"), None);
    assert_eq!(out.text(), body, "the same page over HTTP/1.1 as over HTTP/2");

    // A tunnel to a refused host: answered as an unreachable host is (502), not as a refusal.
    let out = curl(t.leash.addr, &["--cacert", &ca_file, &t.url("gone.test", "/")]).await;
    assert_eq!((out.connect_status, out.status), (502, 0), "{}", out.stderr);
    let target = t.target("gone.test");
    let raw = client::exchange(t.leash.addr, format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n")).await;
    assert_eq!((raw.status, raw.header("x-leash-reason")), (502, None), "{}", raw.head.raw);
    assert!(raw.text().contains("<h1>502 Bad Gateway</h1>") && !raw.text().contains("leash"), "{}", raw.text());
    let lines = t.leash.log_until("the tunnel's refusal", |v| v["host"] == "gone.test").await;
    let tunnel = lines.iter().find(|v| v["host"] == "gone.test" && v.get("decision").is_some()).unwrap();
    assert_eq!((tunnel["decision"].as_str(), tunnel["reason"].as_str()), (Some("block"), Some("rule")), "{tunnel}");
}
