//! A boundary (`--boundary`) in the proxy: a host the run's blocklist would splice is read because the boundary
//! has a path rule on it, and the boundary's path is refused over HTTP/1.1 and HTTP/2, named in the audit line; a
//! reload cannot take the policy out of its boundary.

use http_body_util::BodyExt;

use super::h2::{h2_client, H2Origin};
use super::{Inspecting, BLOCKED};
use crate::support::tls::{TestCa, TlsUpstream};
use crate::support::*;

#[tokio::test]
async fn the_boundarys_path_rule_is_enforced_inside_tunnels_the_run_alone_would_splice_over_http1_and_http2() {
    let ca = TestCa::new();
    let origin = H2Origin::start(&ca).await;
    let tls = TlsUpstream::start(&ca).await;
    let (port, h1) = (origin.port, tls.port());
    let run = blocklist(&["other.test"], &[80], &[port, h1]);
    let boundary = blocklist(&[BLOCKED, "gone.test"], &[80], &[port, h1]);
    let leash = Leash::builder(&run).inspecting(&ca.pem).boundary(&boundary).start().await;
    let t = Inspecting { ca, tls, leash };

    let mut send = h2_client(&t, &origin, "allowed.test").await;
    let get = |path: &str| {
        ::http::Request::get(format!("https://allowed.test:{port}{path}")).body(super::h2::Frames::new(vec![])).unwrap()
    };
    let resp = within("blocked h2 stream", send.send_request(get("/abs/2401.01234v2"))).await.unwrap();
    assert_eq!(resp.status(), 403);
    assert_eq!(resp.headers().get("x-leash-reason").unwrap(), "boundary");
    let resp = within("allowed h2 stream", send.send_request(get("/list"))).await.unwrap();
    assert_eq!(resp.status(), 200, "the rest of the host is the run's: allowed");
    let _ = resp.into_body().collect().await.unwrap();
    let seen: Vec<String> = origin.seen().iter().map(|s| s.path.clone()).collect();
    assert_eq!(seen, ["/list"], "the refused stream never reached the origin");

    // HTTP/1.1 inside the tunnel, from curl trusting leash's CA.
    let ca_file = t.ca_file();
    let out = curl(t.leash.addr, &["--cacert", &ca_file, &t.url("allowed.test", "/abs/2401.01234")]).await;
    assert_eq!((out.connect_status, out.status), (200, 403), "{}", out.stderr);
    assert_eq!(out.head.header("x-leash-reason"), Some("boundary"));
    let out = curl(t.leash.addr, &["--cacert", &ca_file, &t.url("gone.test", "/")]).await;
    assert_eq!(out.connect_status, 403, "a host the boundary refuses is refused at CONNECT: {}", out.stderr);

    let lines = t.leash.log_until("the tunnel's refusal", |v| v["host"] == "gone.test").await;
    let refused: Vec<(&str, &str)> = lines
        .iter()
        .filter(|v| v["decision"] == "block")
        .map(|v| (v["reason"].as_str().unwrap(), v["rule"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(
        refused,
        [("boundary", BLOCKED), ("boundary", BLOCKED), ("boundary", "gone.test")],
        "each refusal names the boundary and its entry: {lines:?}"
    );
}

#[tokio::test]
async fn a_reload_stays_inside_the_boundary() {
    let ca = TestCa::new();
    let tls = TlsUpstream::start(&ca).await;
    let port = tls.port();
    let boundary = allowlist(&["allowed.test"], &[80], &[port]);
    let leash = Leash::builder(&allowlist(&["allowed.test"], &[80], &[port]))
        .inspecting(&ca.pem)
        .boundary(&boundary)
        .start()
        .await;
    let t = Inspecting { ca, tls, leash };
    // The new policy allows everything; the boundary still admits one host.
    t.leash.reload(&blocklist(&[], &[80], &[port]));
    let ca_file = t.ca_file();
    let out = curl(t.leash.addr, &["--cacert", &ca_file, &t.url("elsewhere.test", "/")]).await;
    assert_eq!(out.connect_status, 403, "{}", out.stderr);
    let out = curl(t.leash.addr, &["--cacert", &ca_file, &t.url("allowed.test", "/")]).await;
    assert_eq!(out.connect_status, 200, "the host both admit is spliced: {}", out.stderr);
    let lines = t.leash.log_until("the refusal", |v| v["host"] == "elsewhere.test").await;
    let refusal = lines.iter().find(|v| v["host"] == "elsewhere.test").unwrap();
    assert_eq!(refusal["reason"], "boundary", "{refusal}");
}
