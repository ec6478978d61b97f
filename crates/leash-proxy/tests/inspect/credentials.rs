//! Credentials on the way out, over real sockets: a fake provider (`models.test`) that answers 401 unless the real
//! key arrives and echoes the key it got, split across chunks or HTTP/2 frames. The client holds only the
//! placeholder: its requests succeed, the echo comes back as the placeholder, the placeholder sent anywhere else is
//! refused (`credential-leak`) before any byte reaches that host, a plain-HTTP request to the provider is refused
//! (`credential-plaintext`), and the audit log names the credential and never holds the secret.

use std::sync::{Arc, Mutex};

use ::http::{HeaderValue, Request, Response};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use leash_proxy::credentials::{Secret, Secrets};
use serde_json::Value;

use super::h2::Frames;
use super::Inspecting;
use crate::support::client::exchange;
use crate::support::origin::Reply;
use crate::support::*;

const SECRET: &str = "sk-real-0123456789abcdef";
/// The same length as the secret, so an echo is replaced by it exactly.
const PLACEHOLDER: &str = "leash-placeholder-abc123";

fn secrets() -> Secrets {
    Secrets::new(vec![Secret::new("provider", SECRET, PLACEHOLDER).unwrap()])
}

/// A blocklist with the provider's credential (`add` as given), whose one path rule has `other.allowed.test`
/// inspected: a tunnel leash does not inspect is opaque (the placeholder there is harmless; the key cannot be).
fn policy(port: u16, add: bool) -> String {
    format!(
        "network:\n  mode: blocklist\n  blocked_urls: [other.allowed.test/never/]\n  ports: [80]\n  tunnel_ports: [{port}]\n  \
         allow_destinations: [127.0.0.0/8]\n  credentials:\n    - name: provider\n      hosts: [models.test]\n      \
         env: PROVIDER_KEY\n      header: x-api-key\n      add: {add}\n"
    )
}

/// The fake provider: 401 unless `x-api-key` is the secret; then the key it got, echoed across three chunks.
fn provider(r: &Recorded) -> Reply {
    match r.header("x-api-key") {
        Some(SECRET) => Reply::Chunked {
            headers: vec![],
            chunks: vec![b"your key: sk-real-0".to_vec(), b"123456789a".to_vec(), b"bcdef, ok".to_vec()],
            trailers: vec![],
        },
        _ => Reply::Full { status: 401, headers: vec![], body: b"no key".to_vec() },
    }
}

async fn scene(add: bool) -> Inspecting {
    scene_with(add, provider).await
}

async fn scene_with(add: bool, handler: impl Fn(&Recorded) -> Reply + Send + Sync + 'static) -> Inspecting {
    let ca = TestCa::new();
    let tls = TlsUpstream::with(&ca, handler).await;
    let port = tls.port();
    let leash = Leash::builder(&policy(port, add)).inspecting(&ca.pem).secrets(secrets()).start().await;
    Inspecting { ca, tls, leash }
}

fn log_text(t: &Inspecting) -> String {
    std::fs::read_to_string(&t.leash.log_path).unwrap()
}

#[tokio::test]
async fn the_placeholder_becomes_the_key_on_the_way_out_and_the_echo_comes_back_as_the_placeholder() {
    let t = scene(false).await;
    let port = t.tls.port();
    let r = t
        .inner(
            "models.test",
            format!("GET /v1/messages HTTP/1.1\r\nHost: models.test:{port}\r\nx-api-key: {PLACEHOLDER}\r\n\r\n"),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), format!("your key: {PLACEHOLDER}, ok"), "the echoed key, split across chunks, is replaced");
    assert_eq!(t.tls.origin.requests()[0].header("x-api-key"), Some(SECRET));
    let line = t.leash.decision("/v1/messages").await;
    assert_eq!(line["credential"], "provider", "the line names the credential: {line}");
    assert!(!log_text(&t).contains(SECRET), "the audit log never holds the secret");
}

#[tokio::test]
async fn without_a_placeholder_nothing_is_added_unless_the_entry_says_so() {
    let t = scene(false).await;
    let r = t.get("models.test", "/v1/models").await;
    assert_eq!(r.status, 401, "the client's request went as it was: {}", r.text());
    let t = scene(true).await;
    let r = t.get("models.test", "/v1/models").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(t.tls.origin.requests()[0].header("x-api-key"), Some(SECRET));
}

#[tokio::test]
async fn the_placeholder_sent_anywhere_else_is_refused_as_a_leak() {
    let t = scene(false).await;
    let port = t.tls.port();
    let in_url = t.get("other.allowed.test", &format!("/collect?k={PLACEHOLDER}")).await;
    assert_refused(&in_url, 403, "credential-leak");
    let in_header = t
        .inner(
            "other.allowed.test",
            format!(
                "GET /x HTTP/1.1\r\nHost: other.allowed.test:{port}\r\nAuthorization: Bearer {PLACEHOLDER}\r\n\r\n"
            ),
        )
        .await;
    assert_refused(&in_header, 403, "credential-leak");
    assert!(t.tls.origin.requests().is_empty(), "nothing reached the other host");
    let line = t.leash.decision("/collect?k=leash-placeholder-abc123").await;
    assert_eq!((line["decision"].as_str(), line["reason"].as_str()), (Some("block"), Some("credential-leak")));
}

#[tokio::test]
async fn a_plain_http_request_to_the_credentials_host_is_refused() {
    let t = scene(false).await;
    let r = exchange(t.leash.addr, "GET http://models.test/v1 HTTP/1.1\r\nHost: models.test\r\n\r\n").await;
    assert_refused(&r, 403, "credential-plaintext");
    let leak = format!("GET http://elsewhere.test/?k={PLACEHOLDER} HTTP/1.1\r\nHost: elsewhere.test\r\n\r\n");
    assert_refused(&exchange(t.leash.addr, leak).await, 403, "credential-leak");
    t.leash.resolver.assert_never_asked();
}

/// An HTTP/2 provider: the key it got, echoed across two DATA frames (split inside the key), or 401.
async fn h2_provider(ca: &TestCa, seen: Arc<Mutex<Vec<String>>>) -> u16 {
    let answer = move |req: Request<Incoming>| {
        let seen = seen.clone();
        async move {
            let key = req.headers().get("x-api-key").and_then(|v| v.to_str().ok()).unwrap_or("");
            seen.lock().unwrap().push(key.to_owned());
            let frames = match key == SECRET {
                true => vec![Frame::data(Bytes::from("key=sk-real-01234")), Frame::data(Bytes::from("56789abcdef."))],
                false => vec![Frame::data(Bytes::from("no key"))],
            };
            Ok::<_, std::convert::Infallible>(Response::new(Frames::new(frames)))
        }
    };
    crate::support::tls::serve_h2_tls(ca, &["models.test"], answer).await.0
}

#[tokio::test]
async fn every_http2_stream_gets_the_key_and_its_echo_is_replaced_across_frames() {
    let ca = TestCa::new();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let port = h2_provider(&ca, seen.clone()).await;
    let tls = TlsUpstream::start(&ca).await;
    let leash = Leash::builder(&policy(port, false)).inspecting(&ca.pem).secrets(secrets()).start().await;
    let t = Inspecting { ca, tls, leash };
    let (c, status) = crate::support::tls::connect(t.leash.addr, &format!("models.test:{port}")).await;
    assert_eq!(status, 200);
    let connector = tokio_rustls::TlsConnector::from(Arc::new(t.client_config(&[b"h2"])));
    let name = rustls::pki_types::ServerName::try_from("models.test").unwrap();
    let stream = within("handshake", connector.connect(name, c.wire.io)).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);
    for _ in 0..2 {
        let req = Request::get(format!("https://models.test:{port}/v1/models"))
            .header("x-api-key", HeaderValue::from_static(PLACEHOLDER))
            .body(Empty::<Bytes>::new())
            .unwrap();
        let resp = within("h2 response", send.send_request(req)).await.unwrap();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, format!("key={PLACEHOLDER}.").as_bytes(), "the echo across two frames is the placeholder");
    }
    assert_eq!(*seen.lock().unwrap(), [SECRET, SECRET], "each stream carried the real key");
    assert!(!log_text(&t).contains(SECRET));
}

#[tokio::test]
async fn a_body_carrying_the_placeholder_elsewhere_is_cut_off_before_it_and_refused() {
    let t = scene(false).await;
    let port = t.tls.port();
    let body = format!("{{\"note\":\"x\",\"key\":\"{PLACEHOLDER}\"}}");
    let raw = format!(
        "POST /upload HTTP/1.1\r\nHost: other.allowed.test:{port}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let r = t.inner("other.allowed.test", raw).await;
    assert_refused(&r, 403, "credential-leak");
    for seen in t.tls.origin.requests() {
        assert!(!seen.body.text().contains(PLACEHOLDER), "the placeholder reached the other host");
    }
    let lines = t.leash.log_until("the leak's block line", |l| l["reason"] == "credential-leak").await;
    let ids: Vec<&Value> = lines.iter().filter(|l| l["path"] == "/upload").map(|l| &l["id"]).collect();
    assert_eq!(ids.len(), 2, "an allow line, then the block line under the same id: {lines:?}");
    assert_eq!(ids[0], ids[1]);
}

#[tokio::test]
async fn a_plain_http_body_carrying_the_value_is_refused_too() {
    let t = scene(false).await;
    let up = Upstream::start().await;
    let yaml = policy(t.tls.port(), false).replace("ports: [80]", &format!("ports: [{}]", up.port()));
    t.leash.reload(&yaml);
    let body = format!("token={SECRET}&more=1");
    let raw = format!(
        "POST http://elsewhere.test:{p}/form HTTP/1.1\r\nHost: elsewhere.test:{p}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len(),
        p = up.port()
    );
    assert_refused(&exchange(t.leash.addr, raw).await, 403, "credential-leak");
    for seen in up.requests() {
        assert!(!seen.body.text().contains(SECRET), "the value reached the other host");
    }
}

#[tokio::test]
async fn an_http2_stream_whose_body_carries_the_placeholder_elsewhere_is_refused() {
    let ca = TestCa::new();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let port = h2_provider(&ca, seen).await;
    let tls = TlsUpstream::start(&ca).await;
    // `models.test` is the credential's host; here the h2 origin stands for another host under that name's port,
    // so the credential belongs to a name the request does not go to.
    let yaml = policy(port, false)
        .replace("hosts: [models.test]", "hosts: [api.provider.test]")
        .replace("  ports: [80]", "  inspect: all\n  ports: [80]");
    let leash = Leash::builder(&yaml).inspecting(&ca.pem).secrets(secrets()).start().await;
    let t = Inspecting { ca, tls, leash };
    let (c, status) = crate::support::tls::connect(t.leash.addr, &format!("models.test:{port}")).await;
    assert_eq!(status, 200);
    let connector = tokio_rustls::TlsConnector::from(Arc::new(t.client_config(&[b"h2"])));
    let name = rustls::pki_types::ServerName::try_from("models.test").unwrap();
    let stream = within("handshake", connector.connect(name, c.wire.io)).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);
    let body = Frames::new(vec![Frame::data(Bytes::from(format!("leak={PLACEHOLDER}")))]);
    let req = Request::post(format!("https://models.test:{port}/v1/upload")).body(body).unwrap();
    let resp = within("h2 response", send.send_request(req)).await.unwrap();
    assert_eq!(resp.status(), 403);
    assert_eq!(resp.headers()["x-leash-reason"], "credential-leak");
}

#[tokio::test]
async fn a_chunked_body_with_the_value_split_across_chunks_is_cut_off_and_refused() {
    let t = scene(false).await;
    let port = t.tls.port();
    let (a, b) = SECRET.split_at(9);
    let raw = format!(
        "POST /upload HTTP/1.1\r\nHost: other.allowed.test:{port}\r\nTransfer-Encoding: chunked\r\n\r\n\
         {:x}\r\nk={a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
        a.len() + 2,
        b.len()
    );
    let r = t.inner("other.allowed.test", raw).await;
    assert_refused(&r, 403, "credential-leak");
    for seen in t.tls.origin.requests() {
        assert!(!seen.body.text().contains(b), "the rest of the value reached the other host");
    }
}

/// A provider that echoes the key it got in a header, a Location, the body and a trailer.
fn echoing(r: &Recorded) -> Reply {
    let key = r.header("x-api-key").unwrap_or("").to_owned();
    Reply::Chunked {
        headers: vec![("X-Echo".into(), key.clone()), ("Location".into(), format!("https://elsewhere.test/?k={key}"))],
        chunks: vec![format!("body {key}").into_bytes()],
        trailers: vec![("x-key".into(), key)],
    }
}

#[tokio::test]
async fn an_echo_in_a_header_a_location_or_a_trailer_comes_back_as_the_placeholder_and_nothing_is_compressed() {
    let t = scene_with(false, echoing).await;
    let port = t.tls.port();
    let mut tls = t.tunnel("models.test", &[b"http/1.1"]).await;
    let request = format!(
        "GET /v1 HTTP/1.1\r\nHost: models.test:{port}\r\nx-api-key: {PLACEHOLDER}\r\nAccept-Encoding: gzip\r\n\
         Connection: close\r\n\r\n"
    );
    tokio::io::AsyncWriteExt::write_all(&mut tls, request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    let _ = within("the whole response", tokio::io::AsyncReadExt::read_to_end(&mut tls, &mut raw)).await;
    let text = String::from_utf8_lossy(&raw);
    assert!(!text.contains(SECRET), "the real value reached the client:\n{text}");
    for place in ["X-Echo: ", "k=", "body ", "x-key: "] {
        assert!(text.contains(&format!("{place}{PLACEHOLDER}")), "no placeholder after `{place}`:\n{text}");
    }
    let sent = &t.tls.origin.requests()[0];
    assert_eq!(sent.header("x-api-key"), Some(SECRET));
    assert_eq!(sent.header("accept-encoding"), Some("identity"), "a compressed echo could not be redacted");
}

#[tokio::test]
async fn a_query_parameter_entry_gets_the_key_in_the_url_sent_and_the_log_never_names_it() {
    let up = Upstream::start().await;
    let yaml = format!(
        "network:\n  mode: blocklist\n  blocked_urls: []\n  ports: [{}]\n  allow_destinations: [127.0.0.0/8]\n  \
         credentials:\n    - name: provider\n      hosts: [gw.test]\n      env: PROVIDER_KEY\n      header: x-api-key\n      \
         query: key\n      plaintext: true\n",
        up.port()
    );
    let leash = Leash::builder(&yaml).secrets(secrets()).start().await;
    let raw = format!(
        "GET http://gw.test:{p}/v1/m?alt=json&key={PLACEHOLDER}&note={PLACEHOLDER} HTTP/1.1\r\nHost: gw.test:{p}\r\n\r\n",
        p = up.port()
    );
    let r = exchange(leash.addr, raw).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let seen = up.requests();
    assert_eq!(seen[0].target, format!("/v1/m?alt=json&key={SECRET}&note={PLACEHOLDER}"), "only `key` gets it");
    assert_eq!(seen[0].header("accept-encoding"), Some("identity"), "an echo must come back readable");
    let log = std::fs::read_to_string(&leash.log_path).unwrap();
    assert!(!log.contains(SECRET), "the URL the log names has no query: {log}");
    assert!(log.contains("\"credential\":\"provider\""), "{log}");
}
