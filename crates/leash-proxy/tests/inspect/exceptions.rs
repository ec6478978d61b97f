//! Exceptions enforced over real sockets, through every door: plain HTTP, a tunnel decided on its SNI alone (spliced:
//! the client verifies the origin's own certificate), and inspected HTTP/1.1 and HTTP/2 where a path rule of the other
//! kind decides some of a host's paths. Whatever is refused never reaches the origin.

use http_body_util::BodyExt;

use super::h2::{h2_client, Frames, H2Origin};
use super::Inspecting;
use crate::support::client::exchange;
use crate::support::leash::plain;
use crate::support::tls::{https_get, Writes};
use crate::support::*;

/// "Everything but `allowed.test`, except `sub.allowed.test` and the public pages of `allowed.test`."
fn internet_but(ports: &[u16], tunnel_ports: &[u16]) -> String {
    format!(
        "network:\n  mode: blocklist\n  blocked_urls: [allowed.test]\n  allowed_hosts: [sub.allowed.test]\n  \
         allowed_urls: [allowed.test/public/]\n  ports: {}\n  tunnel_ports: {}\n  allow_destinations: [127.0.0.0/8]\n",
        plain(ports),
        plain(tunnel_ports)
    )
}

/// "`allowed.test` and its subdomains, but not their admin pages nor `other.allowed.test`; and `bl.test`."
fn allowed_but(ports: &[u16], tunnel_ports: &[u16]) -> String {
    format!(
        "network:\n  mode: allowlist\n  allowed_hosts: [.allowed.test, bl.test]\n  \
         blocked_urls: [allowed.test/admin, other.allowed.test]\n  ports: {}\n  tunnel_ports: {}\n  \
         allow_destinations: [127.0.0.0/8]\n",
        plain(ports),
        plain(tunnel_ports)
    )
}

#[tokio::test]
async fn plain_http_is_decided_by_the_most_specific_entry_of_either_kind() {
    let w = World::new(|port| internet_but(&[port], &[443])).await;
    assert_eq!(w.get("sub.allowed.test", "/x").await.status, 200);
    assert_eq!(w.get("allowed.test", "/public/page").await.status, 200);
    assert_eq!(w.get("bl.test", "/").await.status, 200);
    assert_refused(&w.get("allowed.test", "/private").await, 403, "rule");
    assert_refused(&w.get("other.allowed.test", "/public/page").await, 403, "rule");
    // Under the exception only once decoded: a server may read it elsewhere, so it is refused.
    assert_refused(&w.get("allowed.test", "/public%2Fpage").await, 403, "ambiguous-path");
    let reached: Vec<String> = w.up.requests().into_iter().map(|r| r.target).collect();
    assert_eq!(reached, ["/x", "/public/page", "/"], "only the allowed requests reached the origin");
    let lines = w.leash.log_until("the last refusal", |v| v["reason"] == "ambiguous-path").await;
    let rule_of = |path: &str| {
        let line = lines.iter().find(|v| v["path"] == path && v.get("decision").is_some()).expect("its line");
        (line["decision"].as_str().map(str::to_owned), line["rule"].as_str().map(str::to_owned))
    };
    assert_eq!(rule_of("/x"), (Some("allow".into()), Some("sub.allowed.test".into())));
    assert_eq!(rule_of("/public/page"), (Some("allow".into()), Some("allowed.test/public/".into())));
    assert_eq!(rule_of("/private"), (Some("block".into()), Some("allowed.test".into())));

    let w = World::new(|port| allowed_but(&[port], &[443])).await;
    assert_eq!(w.get("allowed.test", "/ok").await.status, 200);
    assert_eq!(w.get("a.b.c.allowed.test", "/admin/x").await.status, 403, "a block path covers subdomains");
    assert_refused(&w.get("allowed.test", "/Admin/users").await, 403, "rule");
    assert_refused(&w.get("other.allowed.test", "/").await, 403, "rule");
    assert_refused(&w.get("models.test", "/").await, 403, "not-allowed");
    let raw =
        format!("GET {} HTTP/1.1\r\nHost: allowed.test:{}\r\n\r\n", w.url("allowed.test", "/x/../admin"), w.port());
    assert_refused(&exchange(w.leash.addr, raw).await, 403, "rule");
    assert_eq!(w.up.requests().into_iter().map(|r| r.target).collect::<Vec<_>>(), ["/ok"]);
}

#[tokio::test]
async fn a_tunnel_no_path_rule_can_decide_otherwise_is_decided_on_its_sni_and_spliced() {
    let ca = TestCa::new();
    let tls = TlsUpstream::start(&ca).await;
    let t = Inspecting::with(ca, tls, |port| internet_but(&[80], &[port])).await;
    // The client verifies the origin's own certificate: leash did not terminate TLS.
    let spliced =
        https_get(t.leash.addr, &t.target("sub.allowed.test"), "sub.allowed.test", t.ca.client_config(), Writes::Whole)
            .await
            .expect("a spliced tunnel to the exception");
    assert_eq!((spliced.status, spliced.text()), (200, "hello over tls to sub.allowed.test".to_owned()));
    assert_eq!(t.tls.handshakes(), [Some("sub.allowed.test".to_owned())]);
    // A name inside the blocked entry and outside every exception is refused at the CONNECT.
    let (_, status) = crate::support::tls::connect(t.leash.addr, &t.target("other.allowed.test")).await;
    assert_eq!(status, 403);
    let lines = t.leash.log_until("the refused tunnel", |v| v["host"] == "other.allowed.test").await;
    let tunnel = lines.iter().find(|v| v["host"] == "sub.allowed.test" && v["method"] == "CONNECT").unwrap();
    assert_eq!((tunnel["decision"].as_str(), tunnel["rule"].as_str()), (Some("allow"), Some("sub.allowed.test")));
    assert_eq!(t.tls.handshakes().len(), 1, "the refused tunnel reached no origin");
}

#[tokio::test]
async fn a_path_exception_inside_a_blocked_host_is_inspected_and_decided_request_by_request() {
    let ca = TestCa::new();
    let tls = TlsUpstream::start(&ca).await;
    let t = Inspecting::with(ca, tls, |port| internet_but(&[80], &[port])).await;
    let ca_file = t.ca_file();
    let ok = curl(t.leash.addr, &["--cacert", &ca_file, &t.url("allowed.test", "/public/a")]).await;
    assert_eq!((ok.connect_status, ok.status), (200, 200), "{}", ok.stderr);
    let no = curl(t.leash.addr, &["--cacert", &ca_file, &t.url("allowed.test", "/private")]).await;
    assert_eq!(no.status, 403, "{}", no.stderr);
    assert_eq!(no.head.header("x-leash-reason"), Some("rule"));
    assert_refused(&t.get("allowed.test", "/public%2Fa").await, 403, "ambiguous-path");
    assert_eq!(t.origin_targets(), ["/public/a"]);
    let lines = t.leash.log_until("the last refusal", |v| v["reason"] == "ambiguous-path").await;
    let tunnel = lines.iter().find(|v| v["method"] == "CONNECT").unwrap();
    assert_eq!((tunnel["decision"].as_str(), tunnel["rule"].as_str()), (Some("inspect"), Some("allowed.test/public/")));
}

#[tokio::test]
async fn an_allowed_host_with_a_blocked_path_is_inspected_and_the_path_refused_whatever_its_spelling() {
    let ca = TestCa::new();
    let tls = TlsUpstream::start(&ca).await;
    let t = Inspecting::with(ca, tls, |port| allowed_but(&[80], &[port])).await;
    assert_eq!(t.get("allowed.test", "/ok").await.status, 200);
    for path in ["/admin", "/ADMIN/x", "/x/../admin/y", "/%61dmin", "/admin;v=1/x", "//admin"] {
        assert_refused(&t.get("allowed.test", path).await, 403, "rule");
    }
    // A blocked path covers the subdomains: they are inspected too.
    assert_refused(&t.get("sub.allowed.test", "/admin/x").await, 403, "rule");
    assert_eq!(t.get("sub.allowed.test", "/ok").await.status, 200);
    // A name no path rule of the other kind touches is spliced, its origin's certificate verified by the client.
    let spliced = https_get(t.leash.addr, &t.target("bl.test"), "bl.test", t.ca.client_config(), Writes::Whole)
        .await
        .expect("spliced");
    assert_eq!(spliced.status, 200);
    assert_eq!(t.tls.handshakes().last(), Some(&Some("bl.test".to_owned())));
    let (_, status) = crate::support::tls::connect(t.leash.addr, &t.target("other.allowed.test")).await;
    assert_eq!(status, 403);
    assert_eq!(t.origin_targets(), ["/ok", "/ok", "/"]);
}

#[tokio::test]
async fn h2_streams_on_one_connection_are_decided_by_the_most_specific_entry() {
    let ca = TestCa::new();
    let origin = H2Origin::start(&ca).await;
    let tls = TlsUpstream::start(&ca).await;
    let port = origin.port;
    let t = Inspecting::with(ca, tls, move |_| internet_but(&[80], &[port])).await;
    let mut send = h2_client(&t, &origin, "allowed.test").await;
    let authority = format!("allowed.test:{port}");
    let get =
        |path: &str| ::http::Request::get(format!("https://{authority}{path}")).body(Frames::new(vec![])).unwrap();
    let ok = within("allowed stream", send.send_request(get("/public/a"))).await.unwrap();
    assert_eq!(ok.status(), 200);
    assert_eq!(ok.into_body().collect().await.unwrap().to_bytes(), "h2 /public/a");
    let no = within("refused stream", send.send_request(get("/private"))).await.unwrap();
    assert_eq!(no.status(), 403);
    assert_eq!(no.headers().get("x-leash-reason").unwrap(), "rule");
    let again = within("allowed again", send.send_request(get("/public/b"))).await.unwrap();
    assert_eq!(again.status(), 200);
    let seen: Vec<String> = origin.seen().into_iter().map(|s| s.path).collect();
    assert_eq!(seen, ["/public/a", "/public/b"]);
}
