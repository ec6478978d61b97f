//! TLS inspection over real sockets: leash with its per-run CA in front of an HTTPS origin signed by the
//! test CA; clients (curl, rustls, hyper's HTTP/2, Python's strict ssl) trusting leash's CA. Every refused request
//! is shown never to reach the origin.

mod boundary;
mod credential_attacks;
mod credentials;
mod early_answers;
mod exceptions;
mod h2;
mod kept_sessions;
mod methods;
mod non_interference;
mod provider_tools;
mod unannounced;

use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio_rustls::client::TlsStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::support::bind_second_loopback;
use crate::support::client::{read_first_event, read_response};
use crate::support::http::Wire;
use crate::support::origin::pattern_body;
use crate::support::tls::connect;
use crate::support::*;
use crate::{FIRST_EVENT, KEEP_ALIVE};

/// The path rule most tests refuse; `allowed.test` is inspected because of it.
const BLOCKED: &str = "allowed.test/abs/2401.01234";

/// leash inspecting in front of an HTTPS origin.
pub struct Inspecting {
    pub ca: TestCa,
    pub tls: TlsUpstream,
    pub leash: Leash,
}

impl Inspecting {
    /// A blocklist of `rules` over an origin answering `hello over tls to <sni>`.
    pub async fn blocking(rules: &[&str]) -> Inspecting {
        let ca = TestCa::new();
        let tls = TlsUpstream::start(&ca).await;
        Inspecting::with(ca, tls, |port| blocklist(rules, &[80], &[port])).await
    }

    pub async fn with(ca: TestCa, tls: TlsUpstream, policy: impl FnOnce(u16) -> String) -> Inspecting {
        let leash = Leash::builder(&policy(tls.port())).inspecting(&ca.pem).start().await;
        Inspecting { ca, tls, leash }
    }

    pub fn target(&self, host: &str) -> String {
        format!("{host}:{}", self.tls.port())
    }

    pub fn url(&self, host: &str, path: &str) -> String {
        format!("https://{}{path}", self.target(host))
    }

    pub fn ca_file(&self) -> String {
        self.leash.ca_path.as_ref().expect("inspecting").to_str().unwrap().to_owned()
    }

    /// A rustls client trusting leash's CA only, offering `alpn`.
    pub fn client_config(&self, alpn: &[&[u8]]) -> ClientConfig {
        let mut roots = RootCertStore::empty();
        let pem = self.leash.inspection.as_ref().unwrap().ca_pem().to_owned();
        let der = pem::parse(pem).unwrap().into_contents();
        roots.add(CertificateDer::from(der)).unwrap();
        let mut cfg = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        cfg
    }

    /// CONNECT to `host` and complete TLS as `host`, trusting leash's CA.
    pub async fn tunnel(&self, host: &str, alpn: &[&[u8]]) -> TlsStream<tokio::net::TcpStream> {
        let (c, status) = connect(self.leash.addr, &self.target(host)).await;
        assert_eq!(status, 200);
        let name = ServerName::try_from(host.to_owned()).unwrap();
        let connector = TlsConnector::from(Arc::new(self.client_config(alpn)));
        within("TLS handshake with leash", connector.connect(name, c.wire.io)).await.expect("handshake")
    }

    /// These bytes inside a tunnel to `host`; the response.
    pub async fn inner(&self, host: &str, raw: impl AsRef<[u8]>) -> Resp {
        let mut tls = self.tunnel(host, &[b"http/1.1"]).await;
        tls.write_all(raw.as_ref()).await.unwrap();
        tls.flush().await.unwrap();
        let mut wire = Wire::new(tls);
        within("response inside the tunnel", read_response(&mut wire, "GET")).await.expect("response")
    }

    /// `GET target` with `Host: host` inside a tunnel to `host`.
    pub async fn get(&self, host: &str, target: &str) -> Resp {
        self.inner(host, format!("GET {target} HTTP/1.1\r\nHost: {host}:{}\r\n\r\n", self.tls.port())).await
    }

    /// The inner requests the origin received, by target.
    fn origin_targets(&self) -> Vec<String> {
        self.tls.origin.requests().into_iter().map(|r| r.target).collect()
    }
}

/// The decision lines (not outcomes) of the log.
fn decisions(lines: &[Value]) -> Vec<&Value> {
    lines.iter().filter(|v| v.get("decision").is_some()).collect()
}

#[tokio::test]
async fn curl_blocked_path_gets_403_sibling_path_200_and_the_log_says_inspect() {
    let t = Inspecting::blocking(&[BLOCKED]).await;
    let ca = t.ca_file();
    let out = curl(t.leash.addr, &["--cacert", &ca, &t.url("allowed.test", "/abs/2401.01234v2")]).await;
    assert_eq!((out.connect_status, out.status), (200, 403), "{}", out.stderr);
    assert_eq!(out.head.header("x-leash-reason"), Some("rule"));
    assert_eq!(
        out.text().lines().next(),
        Some("leash: allowed.test/abs/2401.01234v2 refused by the egress policy (rule)")
    );
    let ok = curl(t.leash.addr, &["--cacert", &ca, &t.url("allowed.test", "/abs/2401.99999?x=1")]).await;
    assert_eq!(ok.status, 200, "{}", ok.stderr);
    assert_eq!(ok.text(), "hello over tls to allowed.test");
    assert_eq!(t.origin_targets(), ["/abs/2401.99999?x=1"], "only the allowed request reached the origin");
    let lines = t.leash.log_until("the allowed request's line", |v| v["path"] == "/abs/2401.99999").await;
    let d = decisions(&lines);
    let tunnels: Vec<_> = d.iter().filter(|v| v["method"] == "CONNECT").collect();
    assert_eq!(tunnels.len(), 2);
    assert!(tunnels.iter().all(|v| v["decision"] == "inspect" && v["reason"] == "default"), "{tunnels:?}");
    let blocked = d.iter().find(|v| v["path"] == "/abs/2401.01234v2").expect("blocked line");
    assert_eq!((blocked["decision"].as_str(), blocked["rule"].as_str()), (Some("block"), Some(BLOCKED)));
    assert_eq!(blocked["method"], "GET");
    // The allowed line drops the query (it may carry secrets); the outcome line follows with its status.
    let allowed = d.iter().find(|v| v["path"] == "/abs/2401.99999").expect("allowed line, query dropped");
    assert_eq!(allowed["decision"], "allow");
    assert_eq!(t.leash.outcome(&allowed["id"]).await["status"], 200);
}

#[tokio::test]
async fn every_spelling_of_the_blocked_path_is_refused_inside_tls() {
    let t = Inspecting::blocking(&[BLOCKED]).await;
    let spellings = [
        "/abs/2401.01234",
        "/abs/./2401.01234",
        "/x/../abs/2401.01234",
        "/x/%2e%2e/abs/2401.01234",
        "/abs%2f2401.01234",
        "/abs%2F2401.01234",
        "//abs//2401.01234",
        "/%61bs/2401.01234",
        "/ABS/2401.01234",
        "/abs;v=1/2401.01234",
        "/abs\\2401.01234",
        "/abs%5c2401.01234",
        "/abs/2401.01234?download=1",
        "/abs/%252e%252e/abs/2401.01234",
        "/abs/2401.01234%3Fx",
    ];
    for path in spellings {
        let r = t.get("allowed.test", path).await;
        assert!(r.status == 403 || r.status == 400, "{path} got {}: {}", r.status, r.text());
        if r.status == 403 {
            assert_refused(&r, 403, "rule");
        }
    }
    let fragment = t.get("allowed.test", "/abs/2401.01234#frag").await;
    assert_refused(&fragment, 400, "bad-request");
    assert!(t.origin_targets().is_empty(), "no spelling reached the origin: {:?}", t.origin_targets());
}

#[tokio::test]
async fn deep_subdomain_gets_a_leaf_for_exactly_its_name() {
    let t = Inspecting::blocking(&[BLOCKED]).await;
    let out = curl(t.leash.addr, &["--cacert", &t.ca_file(), &t.url("a.b.c.allowed.test", "/deep")]).await;
    assert_eq!(out.status, 200, "curl verified a leaf for a.b.c.allowed.test: {}", out.stderr);
    assert_eq!(out.text(), "hello over tls to a.b.c.allowed.test");
    let tunnel = t.tunnel("a.b.c.allowed.test", &[b"http/1.1"]).await;
    let certs = tunnel.get_ref().1.peer_certificates().unwrap().to_vec();
    let text = openssl_text(&certs[0]);
    assert!(text.contains("DNS:a.b.c.allowed.test"), "{text}");
    assert!(!text.contains('*'), "no wildcard: {text}");
    for needed in ["TLS Web Server Authentication", "Authority Key Identifier", "Subject Key Identifier", "CA:FALSE"] {
        assert!(text.contains(needed), "leaf lacks {needed}: {text}");
    }
}

/// `openssl x509 -text` of a DER certificate.
fn openssl_text(der: &CertificateDer<'_>) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leaf.der");
    std::fs::write(&path, der.as_ref()).unwrap();
    let out = std::process::Command::new("openssl")
        .args(["x509", "-inform", "DER", "-noout", "-text", "-in"])
        .arg(&path)
        .output()
        .expect("openssl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn python_strict_x509_verification_accepts_the_leaf() {
    // Python 3.13's default context adds VERIFY_X509_STRICT; set it explicitly so any Python checks the same.
    let t = Inspecting::blocking(&[BLOCKED]).await;
    let script = r#"
import socket, ssl, sys
proxy_port, port, ca = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
ctx = ssl.create_default_context(cafile=ca)
ctx.verify_flags |= ssl.VERIFY_X509_STRICT
s = socket.create_connection(("127.0.0.1", proxy_port), timeout=20)
s.sendall(f"CONNECT allowed.test:{port} HTTP/1.1\r\nHost: allowed.test:{port}\r\n\r\n".encode())
assert s.recv(4096).startswith(b"HTTP/1.1 200"), "CONNECT"
t = ctx.wrap_socket(s, server_hostname="allowed.test")
t.sendall(f"GET /py HTTP/1.1\r\nHost: allowed.test:{port}\r\nConnection: close\r\n\r\n".encode())
data = b""
while chunk := t.recv(65536):
    data += chunk
print(data.split(b"\r\n")[0].decode())
"#;
    let out = tokio::process::Command::new("python3")
        .args(["-c", script, &t.leash.addr.port().to_string(), &t.tls.port().to_string(), &t.ca_file()])
        .output();
    let out = within("python3", out).await.expect("python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("HTTP/1.1 200 "), "{stdout} / stderr: {}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test]
async fn host_header_naming_another_host_is_refused() {
    let t = Inspecting::blocking(&[BLOCKED]).await;
    let port = t.tls.port();
    for host in ["other.allowed.test".to_owned(), format!("evil.test:{port}"), format!("allowed.test:{}", port + 1)] {
        let r = t.inner("allowed.test", format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n")).await;
        assert_refused(&r, 403, "host-mismatch");
    }
    let none = t.inner("allowed.test", "GET / HTTP/1.1\r\n\r\n").await;
    assert_refused(&none, 403, "host-mismatch");
    let absolute =
        t.inner("allowed.test", format!("GET https://evil.test/ HTTP/1.1\r\nHost: allowed.test:{port}\r\n\r\n")).await;
    assert_refused(&absolute, 400, "bad-request");
    assert!(t.origin_targets().is_empty());
    assert_eq!(t.leash.resolver.asked().iter().filter(|n| *n == "evil.test").count(), 0, "evil.test never resolved");
    // The refusal's line names the tunnel's host as it is (it used to read `allowed.testhttps:`), the target as sent.
    let lines = t.leash.log();
    let refused = lines.iter().find(|l| l["path"] == "https://evil.test/").expect("the refusal's line");
    assert_eq!((refused["host"].as_str(), refused["port"].as_u64()), (Some("allowed.test"), Some(u64::from(port))));
}

/// RFC 9112 §3.2.2: a server accepts a request in absolute form. Inside a tunnel, one naming the tunnel's own host
/// and port is decided on its path like any other (it used to be 400), and reaches the origin in origin form.
#[tokio::test]
async fn absolute_form_naming_the_tunnels_own_host_is_decided_on_its_path() {
    let t = Inspecting::blocking(&[BLOCKED]).await;
    let port = t.tls.port();
    let own =
        |path: &str| format!("GET https://allowed.test:{port}{path} HTTP/1.1\r\nHost: allowed.test:{port}\r\n\r\n");
    let ok = t.inner("allowed.test", own("/pub/x?y=1")).await;
    assert_eq!(ok.status, 200, "{}", ok.body.text());
    let blocked = t.inner("allowed.test", own("/abs/2401.01234v2")).await;
    assert_refused(&blocked, 403, "rule");
    assert_eq!(t.origin_targets(), ["/pub/x?y=1"], "the origin got the allowed one, in origin form");
    let other_port = t
        .inner(
            "allowed.test",
            format!("GET https://allowed.test:{}/pub/x HTTP/1.1\r\nHost: allowed.test:{port}\r\n\r\n", port + 1),
        )
        .await;
    assert_refused(&other_port, 400, "bad-request");
    let plain = t
        .inner(
            "allowed.test",
            format!("GET http://allowed.test:{port}/pub/x HTTP/1.1\r\nHost: allowed.test:{port}\r\n\r\n"),
        )
        .await;
    assert_refused(&plain, 400, "bad-request");
}

#[tokio::test]
async fn keep_alive_decides_each_request_on_one_connection() {
    let t = Inspecting::blocking(&[BLOCKED]).await;
    let mut tls = t.tunnel("allowed.test", &[b"http/1.1"]).await;
    let host = t.target("allowed.test");
    let three = format!(
        "GET /one HTTP/1.1\r\nHost: {host}\r\n\r\nGET /abs/2401.01234 HTTP/1.1\r\nHost: {host}\r\n\r\nGET /three HTTP/1.1\r\nHost: {host}\r\n\r\n"
    );
    tls.write_all(three.as_bytes()).await.unwrap();
    tls.flush().await.unwrap();
    let mut wire = Wire::new(tls);
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(within("pipelined response", read_response(&mut wire, "GET")).await.unwrap().status);
    }
    assert_eq!(got, [200, 403, 200]);
    assert_eq!(t.origin_targets(), ["/one", "/three"]);
    assert_eq!(t.tls.connections().await, 1, "one upstream session carried both allowed requests");
}

#[tokio::test]
async fn repeated_set_cookie_headers_survive_in_order() {
    let ca = TestCa::new();
    let tls =
        TlsUpstream::with(&ca, |_| Reply::with_headers(&[("Set-Cookie", "a=1"), ("Set-Cookie", "b=2")], "ok")).await;
    let t = Inspecting::with(ca, tls, |p| blocklist(&[BLOCKED], &[80], &[p])).await;
    let r = t.get("allowed.test", "/cookies").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.all("set-cookie"), ["a=1", "b=2"]);
}

#[tokio::test]
async fn large_chunked_bodies_stream_both_ways() {
    const DOWN: u64 = 8 * 1024 * 1024;
    let ca = TestCa::new();
    let tls = TlsUpstream::with(&ca, |_| Reply::Pattern { len: DOWN, chunked: true }).await;
    let t = Inspecting::with(ca, tls, |p| blocklist(&[BLOCKED], &[80], &[p])).await;
    let up = vec![b'u'; 3 * 1024 * 1024];
    let host = t.target("allowed.test");
    let mut tls = t.tunnel("allowed.test", &[b"http/1.1"]).await;
    let head = format!("POST /upload HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n");
    tls.write_all(head.as_bytes()).await.unwrap();
    for piece in up.chunks(100_000) {
        tls.write_all(format!("{:x}\r\n", piece.len()).as_bytes()).await.unwrap();
        tls.write_all(piece).await.unwrap();
        tls.write_all(b"\r\n").await.unwrap();
    }
    tls.write_all(b"0\r\n\r\n").await.unwrap();
    tls.flush().await.unwrap();
    let mut wire = Wire::new(tls);
    let r = within("large response", read_response(&mut wire, "POST")).await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.body, pattern_body(DOWN), "the response arrived whole and in order");
    let got = t.tls.origin.requests();
    assert_eq!(got[0].body, Body::of(&up), "the request body arrived whole");
    assert!(got[0].chunked);
}

#[tokio::test]
async fn upstream_with_an_untrusted_certificate_gets_502_upstream_tls() {
    // The origin's certificate comes from a CA leash was not told to trust.
    let trusted = TestCa::new();
    let stranger = TestCa::new();
    let tls = TlsUpstream::start(&stranger).await;
    let leash = Leash::builder(&blocklist(&[BLOCKED], &[80], &[tls.port()])).inspecting(&trusted.pem).start().await;
    let t = Inspecting { ca: trusted, tls, leash };
    let r = t.get("allowed.test", "/x").await;
    assert_refused(&r, 502, "upstream-tls");
    assert!(r.text().contains("failed TLS verification"), "{}", r.text());
    assert!(t.tls.origin.requests().is_empty(), "no request was sent over the unverified session");
    // The tunnel is logged (`inspect`) before it is dialled; the certificate failure adds a block line, same id.
    let lines = t.leash.log_until("the upstream-tls line", |v| v["reason"] == "upstream-tls").await;
    let d = decisions(&lines);
    assert_eq!(d.iter().map(|v| v["decision"].as_str().unwrap()).collect::<Vec<_>>(), ["inspect", "block"]);
    assert_eq!((d[1]["id"].clone(), d[1]["host"].as_str()), (d[0]["id"].clone(), Some("allowed.test")));
}

#[tokio::test]
async fn a_chain_verified_for_one_name_is_refused_for_another_on_every_connection() {
    // leash remembers the upstream chains it verified (tls/verified.rs); the memory is keyed by the name too. The
    // origin resumes no session, so each tunnel's upstream handshake sends and verifies its chain.
    let ca = TestCa::new();
    let tls = TlsUpstream::for_names_without_resumption(&ca, &["good.test"]).await;
    let policy = |p: u16| {
        format!(
            "network:\n  mode: allowlist\n  allowed_hosts: [good.test, other.test]\n  tunnel_ports: [{p}]\n  inspect: all\n  allow_destinations: [127.0.0.0/8]\n"
        )
    };
    let t = Inspecting::with(ca, tls, policy).await;
    for path in ["/one", "/two"] {
        let r = t.get("good.test", path).await;
        assert_eq!((r.status, r.text()), (200, "hello over tls to good.test".to_owned()));
    }
    assert_eq!(t.tls.handshakes(), [Some("good.test".to_owned()), Some("good.test".to_owned())], "two full handshakes");
    // The same chain, from the same origin, for a name it does not cover.
    for path in ["/three", "/four"] {
        let r = t.get("other.test", path).await;
        assert_refused(&r, 502, "upstream-tls");
    }
    assert_eq!(t.origin_targets(), ["/one", "/two"], "nothing was sent over the sessions that failed verification");
    let lines = t.leash.log();
    let refused: Vec<_> = decisions(&lines).into_iter().filter(|v| v["reason"] == "upstream-tls").collect();
    assert_eq!(refused.len(), 2, "each refusal was logged before its 502: {lines:#?}");
    assert!(refused.iter().all(|v| v["host"] == "other.test"), "{refused:#?}");
}

/// An inspected tunnel to an origin that answers its first request with `Connection: close`, so the next request
/// on the tunnel dials the upstream again; returns the tunnel after that first request.
async fn tunnel_after_a_closing_response(t: &Inspecting) -> Wire<TlsStream<tokio::net::TcpStream>> {
    let mut wire = Wire::new(t.tunnel("allowed.test", &[b"http/1.1"]).await);
    let first = format!("GET /first HTTP/1.1\r\nHost: {}\r\n\r\n", t.target("allowed.test"));
    wire.io.write_all(first.as_bytes()).await.unwrap();
    wire.io.flush().await.unwrap();
    assert_eq!(within("the first response", read_response(&mut wire, "GET")).await.unwrap().status, 200);
    wire
}

async fn closing_origin_scene() -> Inspecting {
    let ca = TestCa::new();
    let closing = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 5\r\n\r\nfirst".to_vec();
    let tls = TlsUpstream::with(&ca, move |_| Reply::RawThenClose(closing.clone())).await;
    Inspecting::with(ca, tls, |p| blocklist(&[BLOCKED], &[80], &[p])).await
}

/// `GET /second` on `wire`; the response.
async fn second_request(t: &Inspecting, wire: &mut Wire<TlsStream<tokio::net::TcpStream>>) -> Resp {
    let second = format!("GET /second HTTP/1.1\r\nHost: {}\r\n\r\n", t.target("allowed.test"));
    wire.io.write_all(second.as_bytes()).await.unwrap();
    wire.io.flush().await.unwrap();
    within("the second response", read_response(wire, "GET")).await.unwrap()
}

/// The decision lines of `path`: the allow line, then the re-dial's block line under the same id.
fn allow_then_block<'a>(lines: &'a [Value], path: &str, reason: &str) -> Vec<&'a Value> {
    let d: Vec<_> = decisions(lines).into_iter().filter(|v| v["path"] == path).collect();
    assert_eq!(d.len(), 2, "{lines:#?}");
    assert_eq!(d[0]["decision"], "allow");
    assert_eq!((d[1]["decision"].as_str(), d[1]["reason"].as_str()), (Some("block"), Some(reason)));
    assert_eq!(d[1]["id"], d[0]["id"]);
    d
}

#[tokio::test]
async fn a_destination_refused_on_a_redial_inside_a_tunnel_gets_the_standard_403() {
    // Regression: the re-dial's refusal came out as a 403 without `X-Leash-Reason` saying the upstream failed, and
    // the log said `allow` with outcome 403.
    let t = closing_origin_scene().await;
    let mut wire = tunnel_after_a_closing_response(&t).await;
    t.leash.resolver.insert("allowed.test", &["10.0.0.1"]);
    let r = second_request(&t, &mut wire).await;
    assert_refused(&r, 403, "internal-destination");
    assert_eq!(r.first_line(), "leash: allowed.test/second refused by the egress policy (internal-destination)");
    assert_eq!(t.origin_targets(), ["/first"]);
    assert_eq!(t.tls.connections().await, 1, "the refused address was never dialled");
    let lines = t.leash.log_until("the re-dial's refusal", |v| v["reason"] == "internal-destination").await;
    allow_then_block(&lines, "/second", "internal-destination");
}

#[tokio::test]
async fn an_untrusted_certificate_on_a_redial_inside_a_tunnel_gets_502_upstream_tls() {
    // Regression: the re-dial's certificate failure was a 502 without `X-Leash-Reason` and logged as an outcome only.
    let t = closing_origin_scene().await;
    let mut wire = tunnel_after_a_closing_response(&t).await;
    // The name now leads to a server at the same port whose certificate comes from a CA leash does not trust.
    let stranger = TestCa::new();
    let acceptor = TlsAcceptor::from(Arc::new(stranger.server_config(&["allowed.test"])));
    let listener = bind_second_loopback(t.tls.port()).await;
    let impostor = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        acceptor.accept(tcp).await.is_err()
    });
    t.leash.resolver.insert("allowed.test", &["127.0.0.2"]);
    let r = second_request(&t, &mut wire).await;
    assert_refused(&r, 502, "upstream-tls");
    assert!(r.text().contains("failed TLS verification"), "{}", r.text());
    assert!(within("the impostor's handshake", impostor).await.unwrap(), "leash refused the impostor's certificate");
    let lines = t.leash.log_until("the re-dial's refusal", |v| v["reason"] == "upstream-tls").await;
    let d = allow_then_block(&lines, "/second", "upstream-tls");
    assert_eq!(d[1]["method"], "GET");
}

#[tokio::test]
async fn audit_write_failure_opens_no_upstream_connection_for_an_inspected_tunnel() {
    // Regression: an inspected tunnel dialled its upstream and completed TLS with it before writing its line.
    let ca = TestCa::new();
    let tls = TlsUpstream::start(&ca).await;
    let leash = Leash::builder(&blocklist(&[BLOCKED], &[80], &[tls.port()]))
        .inspecting(&ca.pem)
        .audit_at(std::path::Path::new("/dev/full"))
        .start()
        .await;
    let t = Inspecting { ca, tls, leash };
    assert_refused(&t.get("allowed.test", "/x").await, 503, "audit-failed");
    t.tls.assert_untouched().await;
}

#[tokio::test]
async fn an_inspected_name_resolving_to_an_unexempted_loopback_address_gets_403_inside_tls() {
    // Every other inspection test exempts all of 127.0.0.0/8; here only the origin's 127.0.0.1 is.
    let ca = TestCa::new();
    let tls = TlsUpstream::start(&ca).await;
    let port = tls.port();
    let policy = format!(
        "network:\n  mode: blocklist\n  blocked_urls: [\"{BLOCKED}\"]\n  ports: [80]\n  tunnel_ports: [{port}]\n  allow_destinations: [127.0.0.1/32]\n"
    );
    let t = Inspecting::with(ca, tls, |_| policy).await;
    // Something listens where the name now leads, to show it is never dialled.
    let listener = bind_second_loopback(port).await;
    t.leash.resolver.insert("allowed.test", &["127.0.0.2"]);
    let r = t.get("allowed.test", "/x").await;
    assert_refused(&r, 403, "internal-destination");
    assert_eq!(r.first_line(), "leash: allowed.test/x refused by the egress policy (internal-destination)");
    let d = t.leash.decision("allowed.test").await;
    assert_eq!((d["decision"].as_str(), d["reason"].as_str()), (Some("block"), Some("internal-destination")));
    t.tls.assert_untouched().await;
    // A connection of our own is the first the listener accepts: none came before it.
    let probe = tokio::net::TcpStream::connect(("127.0.0.2", port)).await.unwrap();
    let (_, from) = within("the probe", listener.accept()).await.unwrap();
    assert_eq!(from, probe.local_addr().unwrap(), "nothing dialled the internal address");
}

#[tokio::test]
async fn tunnel_refused_on_its_sni_is_answered_403_inside_tls() {
    // The CONNECT names an allowed host, the ClientHello another: refused on the SNI, said inside TLS.
    let ca = TestCa::new();
    let tls = TlsUpstream::start(&ca).await;
    let t = Inspecting::with(ca, tls, |p| allowlist(&["allowed.test"], &[80], &[p])).await;
    let (c, status) = connect(t.leash.addr, &t.target("allowed.test")).await;
    assert_eq!(status, 200);
    let connector = TlsConnector::from(Arc::new(t.client_config(&[b"h2", b"http/1.1"])));
    let name = ServerName::try_from("other.allowed.test".to_owned()).unwrap();
    let mut tls = within("handshake", connector.connect(name, c.wire.io)).await.expect("leash answers inside TLS");
    tls.write_all(b"GET /page HTTP/1.1\r\nHost: other.allowed.test\r\n\r\n").await.unwrap();
    tls.flush().await.unwrap();
    let r = within("answer", read_response(&mut Wire::new(tls), "GET")).await.unwrap();
    assert_refused(&r, 403, "host-mismatch");
    assert_eq!(
        r.text().lines().next(),
        Some("leash: other.allowed.test/page refused by the egress policy (host-mismatch)")
    );
    t.tls.assert_untouched().await;
    t.leash.resolver.assert_never_asked();
}

#[tokio::test]
async fn client_not_trusting_the_ca_sees_a_failed_handshake_and_nothing_goes_up() {
    let t = Inspecting::blocking(&[BLOCKED]).await;
    // curl with the origin's CA only (not leash's): the handshake with leash's leaf fails.
    let dir = tempfile::tempdir().unwrap();
    let origin_ca = t.ca.pem_file(dir.path());
    let out = curl(t.leash.addr, &["--cacert", origin_ca.to_str().unwrap(), &t.url("allowed.test", "/x")]).await;
    assert_eq!(out.status, 0);
    assert_eq!(out.exit, Some(60), "curl: peer certificate cannot be authenticated: {}", out.stderr);
    assert!(t.tls.origin.requests().is_empty());
}

#[tokio::test]
async fn hosts_without_path_rules_stay_spliced() {
    // Only bl.test carries a path rule: allowed.test's tunnel is spliced, the client sees the origin's certificate.
    let ca = TestCa::new();
    let tls = TlsUpstream::start(&ca).await;
    let t = Inspecting::with(ca, tls, |p| blocklist(&["bl.test/abs/1"], &[80], &[p])).await;
    let dir = tempfile::tempdir().unwrap();
    let origin_ca = t.ca.pem_file(dir.path());
    let out = curl(t.leash.addr, &["--cacert", origin_ca.to_str().unwrap(), &t.url("allowed.test", "/")]).await;
    assert_eq!(out.status, 200, "{}", out.stderr);
    assert_eq!(t.leash.decision("allowed.test").await["decision"], "allow");
    assert_eq!(t.leash.inspection.as_ref().unwrap().ca().cached_leaves(), 0, "no leaf was issued");
}

#[tokio::test]
async fn inspect_all_intercepts_every_allowed_tunnel() {
    let ca = TestCa::new();
    let tls = TlsUpstream::start(&ca).await;
    let policy = |p: u16| {
        format!(
            "network:\n  mode: allowlist\n  allowed_hosts: [allowed.test]\n  tunnel_ports: [{p}]\n  inspect: all\n  allow_destinations: [127.0.0.0/8]\n"
        )
    };
    let t = Inspecting::with(ca, tls, policy).await;
    let out = curl(t.leash.addr, &["--cacert", &t.ca_file(), &t.url("allowed.test", "/all")]).await;
    assert_eq!(out.status, 200, "{}", out.stderr);
    let d = t.leash.decision("/all").await;
    assert_eq!(d["decision"], "allow");
    let tunnel = t.leash.decision("allowed.test").await;
    assert_eq!(tunnel["decision"], "inspect");
}

#[tokio::test]
async fn allowed_urls_admit_only_their_prefix_at_a_slash_boundary() {
    let ca = TestCa::new();
    let tls = TlsUpstream::start(&ca).await;
    let policy = |p: u16| {
        format!(
            "network:\n  mode: allowlist\n  allowed_urls: [allowed.test/rust-lang]\n  tunnel_ports: [{p}]\n  allow_destinations: [127.0.0.0/8]\n"
        )
    };
    let t = Inspecting::with(ca, tls, policy).await;
    assert_eq!(t.get("allowed.test", "/rust-lang/cargo").await.status, 200);
    assert_eq!(t.get("allowed.test", "/rust-lang").await.status, 200);
    assert_refused(&t.get("allowed.test", "/rust-lang-evil/x").await, 403, "not-allowed");
    assert_refused(&t.get("allowed.test", "/Rust-Lang/cargo").await, 403, "not-allowed");
    assert_refused(&t.get("allowed.test", "/").await, 403, "not-allowed");
    assert_eq!(t.origin_targets(), ["/rust-lang/cargo", "/rust-lang"]);
}

/// Regression, inside TLS: a client hanging up in the middle of an inspected HTTP/1.1
/// response (an SSE stream it closed after one event) was logged `status 502, bytes 0/0`. The outcome keeps the
/// upstream's status and the bytes relayed each way before the hang-up.
#[tokio::test]
async fn a_client_hanging_up_mid_response_inside_tls_is_recorded_with_the_upstreams_status_and_bytes() {
    let ca = TestCa::new();
    let gate = Arc::new(tokio::sync::Notify::new());
    let g = gate.clone();
    let events =
        move |_: &Recorded| Reply::Events { first: FIRST_EVENT.to_vec(), gate: g.clone(), next: KEEP_ALIVE.to_vec() };
    let tls = TlsUpstream::with(&ca, events).await;
    let t = Inspecting::with(ca, tls, |p| blocklist(&[BLOCKED], &[80], &[p])).await;
    let mut tls = t.tunnel("allowed.test", &[b"http/1.1"]).await;
    let head =
        format!("GET /events HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\n\r\n", t.target("allowed.test"));
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.flush().await.unwrap();
    let mut wire = Wire::new(tls);
    let received = read_first_event(&mut wire, FIRST_EVENT).await;
    drop(wire);
    // The stream goes on (keep-alives) to a client that is gone.
    gate.notify_one();
    let d = t.leash.decision("/events").await;
    let o = t.leash.outcome(&d["id"]).await;
    let requests = t.tls.origin.requests();
    assert_eq!(requests.len(), 1, "{requests:#?}");
    let sent_up = requests[0].head.raw.len() as u64 + 4;
    assert_eq!((o["status"].as_u64(), o["bytes_up"].as_u64()), (Some(200), Some(sent_up)), "{o}");
    assert!(o["bytes_down"].as_u64().unwrap() >= received, "at least what the client read ({received}): {o}");
}

#[tokio::test]
async fn websocket_upgrade_is_decided_then_relayed() {
    let ca = TestCa::new();
    let switching =
        b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\nws-hello".to_vec();
    let tls = TlsUpstream::with(&ca, move |_| Reply::Raw(switching.clone())).await;
    let t = Inspecting::with(ca, tls, |p| blocklist(&[BLOCKED], &[80], &[p])).await;
    let host = t.target("allowed.test");
    let upgrade = "Connection: upgrade\r\nUpgrade: websocket";
    let refused =
        t.inner("allowed.test", format!("GET /abs/2401.01234 HTTP/1.1\r\nHost: {host}\r\n{upgrade}\r\n\r\n")).await;
    assert_refused(&refused, 403, "rule");
    let mut tls = t.tunnel("allowed.test", &[b"http/1.1"]).await;
    let head = format!("GET /chat HTTP/1.1\r\nHost: {host}\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n");
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.flush().await.unwrap();
    let mut wire = Wire::new(tls);
    let h = within("101", wire.head()).await.unwrap().unwrap();
    assert!(h.start.contains("101"), "{}", h.start);
    while wire.buf.len() < b"ws-hello".len() {
        within("relayed bytes", wire.fill()).await.unwrap();
    }
    assert_eq!(&wire.buf[..], b"ws-hello");
    assert_eq!(t.origin_targets(), ["/chat"]);
}

#[tokio::test]
async fn leaf_issuance_is_reused_across_tunnels() {
    let t = Inspecting::blocking(&[BLOCKED]).await;
    let a = t.tunnel("allowed.test", &[b"http/1.1"]).await;
    let b = t.tunnel("allowed.test", &[b"http/1.1"]).await;
    let leaf = |s: &TlsStream<tokio::net::TcpStream>| s.get_ref().1.peer_certificates().unwrap()[0].clone();
    assert_eq!(leaf(&a), leaf(&b), "the cached leaf is served again");
    assert_eq!(t.leash.inspection.as_ref().unwrap().ca().cached_leaves(), 1);
    tokio::time::sleep(Duration::from_millis(10)).await;
}

// ---------------------------------------------------------------------------------------------------------------
// Transparent listeners (`leash run`'s sandbox address for proxy-unaware clients): the same decisions, no CONNECT
// ---------------------------------------------------------------------------------------------------------------

/// leash inspecting, with a transparent listener at 127.0.0.2 on the HTTPS origin's port.
async fn transparent_scene(policy: impl FnOnce(u16) -> String) -> Inspecting {
    let ca = TestCa::new();
    let tls = TlsUpstream::start(&ca).await;
    let port = tls.port();
    let leash = Leash::builder(&policy(port)).inspecting(&ca.pem).transparent(port).start().await;
    Inspecting { ca, tls, leash }
}

/// Connect straight to the transparent listener (no CONNECT) and complete TLS as `sni`.
async fn transparent_tls(t: &Inspecting, sni: &str) -> std::io::Result<TlsStream<tokio::net::TcpStream>> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.2", t.tls.port())).await.unwrap();
    let connector = TlsConnector::from(Arc::new(t.client_config(&[b"http/1.1"])));
    within("handshake", connector.connect(ServerName::try_from(sni.to_owned()).unwrap(), tcp)).await
}

#[tokio::test]
async fn transparent_tls_is_decided_on_the_sni_and_inspected() {
    let t = transparent_scene(|p| blocklist(&[BLOCKED], &[80], &[p])).await;
    let mut tls = transparent_tls(&t, "allowed.test").await.expect("leash's leaf for the SNI");
    let port = t.tls.port();
    let two = format!(
        "GET /fine HTTP/1.1\r\nHost: allowed.test:{port}\r\n\r\nGET /abs/2401.01234 HTTP/1.1\r\nHost: allowed.test:{port}\r\n\r\n"
    );
    tls.write_all(two.as_bytes()).await.unwrap();
    tls.flush().await.unwrap();
    let mut wire = Wire::new(tls);
    assert_eq!(within("first", read_response(&mut wire, "GET")).await.unwrap().status, 200);
    assert_refused(&within("second", read_response(&mut wire, "GET")).await.unwrap(), 403, "rule");
    assert_eq!(t.origin_targets(), ["/fine"]);
    assert_eq!(t.leash.decision("allowed.test").await["decision"], "inspect");
}

#[tokio::test]
async fn transparent_tls_to_a_refused_name_gets_403_inside_tls_and_is_never_resolved() {
    let t = transparent_scene(|p| allowlist(&["allowed.test"], &[80], &[p])).await;
    let mut tls = transparent_tls(&t, "evil.test").await.expect("leash answers inside TLS");
    tls.write_all(b"GET /x HTTP/1.1\r\nHost: evil.test\r\n\r\n").await.unwrap();
    tls.flush().await.unwrap();
    let r = within("answer", read_response(&mut Wire::new(tls), "GET")).await.unwrap();
    assert_refused(&r, 403, "not-allowed");
    t.tls.assert_untouched().await;
    t.leash.resolver.assert_never_asked();
}

#[tokio::test]
async fn transparent_tls_without_sni_is_closed() {
    let t = transparent_scene(|p| allowlist(&["allowed.test"], &[80], &[p])).await;
    let mut c = Raw::connect(std::net::SocketAddr::from(([127, 0, 0, 2], t.tls.port()))).await;
    c.send(HelloSpec::no_sni().bytes()).await;
    assert!(c.until_closed().await.unwrap().is_empty(), "no SNI: closed without a byte");
    let d = t.leash.log_until("the refusal", |v| v["reason"] == "no-sni").await;
    assert!(!d.is_empty());
    t.tls.assert_untouched().await;
    t.leash.resolver.assert_never_asked();
}

#[tokio::test]
async fn a_policy_reload_applies_to_the_next_request_inside_an_open_tunnel() {
    let t = Inspecting::blocking(&[BLOCKED]).await;
    let port = t.tls.port();
    let get = |path: &str| format!("GET {path} HTTP/1.1\r\nHost: allowed.test:{port}\r\n\r\n");
    let mut tls = t.tunnel("allowed.test", &[b"http/1.1"]).await;
    tls.write_all(get("/later-blocked").as_bytes()).await.unwrap();
    tls.flush().await.unwrap();
    let mut wire = Wire::new(tls);
    assert_eq!(within("before the reload", read_response(&mut wire, "GET")).await.unwrap().status, 200);
    t.leash.reload(&blocklist(&[BLOCKED, "allowed.test/later-blocked"], &[80], &[port]));
    wire.io.write_all(get("/later-blocked").as_bytes()).await.unwrap();
    wire.io.flush().await.unwrap();
    assert_refused(&within("after the reload", read_response(&mut wire, "GET")).await.unwrap(), 403, "rule");
    assert_eq!(t.origin_targets(), ["/later-blocked"], "only the request before the reload went up");
}

/// A blocked path on an inspected host whose upstream cannot be reached is still decided and logged: the tunnel's
/// TLS is completed and each request answered on its own path (it used to be a 502 at once, and the path, blocked
/// or not, left no line). An allowed path gets the failure.
#[tokio::test]
async fn an_unreachable_upstream_still_gets_each_request_decided_and_logged_on_its_path() {
    let ca = TestCa::new();
    let tls = TlsUpstream::start(&ca).await;
    let dead = crate::support::origin::dead_port().await;
    let t = Inspecting::with(ca, tls, |_| blocklist(&[BLOCKED], &[80], &[dead])).await;
    let (c, status) = connect(t.leash.addr, &format!("allowed.test:{dead}")).await;
    assert_eq!(status, 200);
    let connector = TlsConnector::from(Arc::new(t.client_config(&[b"http/1.1"])));
    let name = ServerName::try_from("allowed.test").unwrap();
    let tls = within("handshake", connector.connect(name, c.wire.io)).await.expect("handshake");
    let mut wire = Wire::new(tls);
    let ask = |path: &str| format!("GET {path} HTTP/1.1\r\nHost: allowed.test:{dead}\r\n\r\n");
    wire.io.write_all(ask("/abs/2401.01234v2").as_bytes()).await.unwrap();
    let refused = within("the refusal", read_response(&mut wire, "GET")).await.expect("response");
    assert_eq!(refused.status, 403, "the blocked path is refused, not failed");
    wire.io.write_all(ask("/open").as_bytes()).await.unwrap();
    let failed = within("the failure", read_response(&mut wire, "GET")).await.expect("response");
    assert_eq!(failed.status, 502, "an allowed path gets the upstream's failure");
    let lines = t.leash.log();
    let blocked: Vec<&Value> = lines.iter().filter(|l| l["path"] == "/abs/2401.01234v2").collect();
    assert_eq!(blocked.len(), 1, "{lines:#?}");
    assert_eq!((blocked[0]["decision"].as_str(), blocked[0]["reason"].as_str()), (Some("block"), Some("rule")));
    let open = lines.iter().find(|l| l["path"] == "/open" && l.get("decision").is_some()).expect("the allowed path");
    let outcome = lines.iter().find(|l| l["id"] == open["id"] && l.get("status").is_some()).expect("its outcome");
    assert_eq!((outcome["status"].as_u64(), outcome["error"].as_str()), (Some(502), Some("refused")), "{outcome}");
}
