//! Non-interference: nothing a sandboxed program can observe depends on a credential's real value. The same probe
//! programs run twice, against two real values of the same length (the placeholder the same), and must observe
//! exactly the same. The probes are an attacker's: an adaptive one guessing the value a character at a time through
//! a host that echoes what it receives, streamed over plain HTTP (the leak watch's hold was an oracle), the same
//! guesses streamed through an inspected HTTP/1.1 tunnel and an HTTP/2 stream; and a provider made to echo the key
//! and the attacker's guesses — in a body, a header's value and name, a trailer, a stream paced piece by piece, a
//! body ending in a guess, the key split across two chunks the second of which carries a chunk extension (`;x`, a
//! bare `;`, `;a=b`, a quoted value), a WebSocket message's fragments and a ping — over plain HTTP, inspected
//! HTTP/1.1 and HTTP/2 (the redactor's hold was one too).
//!
//! What a probe records: the status and bytes, and how they are cut — into phases (after each step the probe reads
//! until the bytes stop coming: a held byte shows up in a later phase), TLS records (read off the wire, so a write
//! of its own shows), HTTP/2 DATA frames — and for the adaptive attacker what it concluded.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use ::http::{HeaderMap, HeaderValue, Request, Response};
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::BodyExt;
use hyper::body::{Body as _, Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use leash_proxy::credentials::{Secret, Secrets};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio::time::{timeout_at, Instant};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::support::http::Wire;
use crate::support::*;

/// Two real values of the same length; each probe knows neither. After `sk-live-` they differ from the first
/// character on.
const VALUES: [&str; 2] = ["sk-live-0123456789abcdef01234567", "sk-live-fedcba9876543210fedcba98"];
/// The same length as the values, so an echo is replaced by it exactly.
const PLACEHOLDER: &str = "leash-provider-9f8e7d6c5b4a32109";
/// What the attacker knows the value starts with, and the characters it may go on with.
const KNOWN: &str = "sk-live-";
const ALPHABET: &str = "0123456789abcdef";
/// Guesses the fixed probes try: a start of each value, and each value but its last character.
const GUESSES: [&str; 4] =
    ["sk-live-0123", "sk-live-fedc", "sk-live-0123456789abcdef0123456", "sk-live-fedcba9876543210fedcba9"];

/// What the provider is made to echo, piece by piece: the key whole, the key split, the attacker's guesses ending a
/// piece (`\\n` stands for a line's end; see [`pieces`]).
const SCRIPT: &str = "key={key}\\n|half {key0}|{key1} rest\\n|sk-live-0123|\\n|sk-live-fedc| tail|{key}";

/// Chunk extensions the provider puts on the size line of each chunk after the first, so on the one that continues a
/// split key: a name alone, a bare `;`, a name and value, a quoted value holding `;` and an escaped quote.
const EXTENSIONS: [&str; 4] = [";x", ";", ";a=b", ";a=\"q;\\\"x\""];

/// What the provider echoes with chunk extensions: the key split inside it, then whole.
const EXTENDED_SCRIPT: &str = "key={key0}|{key1}\\n|{key}";

/// A phase ends when no byte came for this long after the last one...
const QUIET: Duration = Duration::from_millis(150);
/// ...or, when none came at all, after this long (a held byte).
const HELD: Duration = Duration::from_millis(800);

#[tokio::test]
async fn nothing_the_sandbox_observes_depends_on_the_real_value() {
    assert!(VALUES.iter().all(|v| v.len() == PLACEHOLDER.len()));
    let first = run(VALUES[0]).await;
    let second = run(VALUES[1]).await;
    // Every probe whose observations differ, at its first difference.
    let mut differ = Vec::new();
    for ((probe, a), (_, b)) in first.iter().zip(&second) {
        if let Some(at) = (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i)) {
            let line = |seen: &[String]| seen.get(at).cloned().unwrap_or_else(|| "(nothing)".to_owned());
            differ.push(format!("{probe}:\n    first value:  {}\n    second value: {}", line(a), line(b)));
        }
    }
    assert!(differ.is_empty(), "what the sandbox observes depends on the real value:\n  {}", differ.join("\n  "));
    let text: String = first.iter().flat_map(|(_, seen)| seen.iter().map(|l| format!("{l}\n"))).collect();
    assert!(!VALUES.iter().any(|v| text.contains(v)), "a value reached the client:\n{text}");
    assert!(text.contains(&format!("key={PLACEHOLDER}")), "the echo came back as the placeholder:\n{text}");
    // Split across two chunks, the second with an extension on its size line: the data is the placeholder's.
    let extended = format!("data \"key={PLACEHOLDER}\\n{PLACEHOLDER}\"");
    assert_eq!(text.matches(&extended).count(), 2 * EXTENSIONS.len(), "{extended} in:\n{text}");
    // The WebSocket probes were switched and followed (not refused), and the field named the key was renamed.
    assert_eq!(text.matches("ws: head \"HTTP/1.1 101").count(), 2, "{text}");
    assert!(text.contains(&format!("{PLACEHOLDER}: a field named the key")), "{text}");
    assert!(text.contains(&format!("\"{PLACEHOLDER}\"")), "the h2 field named the key: {text}");
}

/// Every probe against a leash whose credential's real value is `value`; what each observed, in order.
async fn run(value: &str) -> Vec<(&'static str, Vec<String>)> {
    let s = Scene::start(value).await;
    let mut probes = Vec::new();
    let mut seen = Vec::new();
    let concluded = prefix_attack(&s, &mut seen).await;
    seen.push(format!("attacker concluded: {concluded:?}"));
    probes.push(("a character at a time through an echoing host over plain HTTP", std::mem::take(&mut seen)));
    for guess in GUESSES {
        streamed_guess_h1(&s, guess, &mut seen).await;
    }
    probes.push(("guesses streamed to an echoing host, inspected HTTP/1.1", std::mem::take(&mut seen)));
    streamed_guesses_h2(&s, &mut seen).await;
    probes.push(("guesses streamed to an echoing host, HTTP/2", std::mem::take(&mut seen)));
    for (door, name) in
        [(Door::Plain, "the provider's echo, plain HTTP"), (Door::Tls, "the provider's echo, inspected HTTP/1.1")]
    {
        provider_echo_h1(&s, door, &mut seen).await;
        for ending in GUESSES.iter().take(2).copied().chain(["{key}"]) {
            provider_body_ending_in(&s, door, ending, &mut seen).await;
        }
        for extension in EXTENSIONS {
            provider_echo_extended(&s, door, extension, &mut seen).await;
        }
        probes.push((name, std::mem::take(&mut seen)));
    }
    provider_echo_h2(&s, &mut seen).await;
    probes.push(("the provider's echo, HTTP/2", std::mem::take(&mut seen)));
    for (door, name) in
        [(Door::Plain, "the provider's echo, WebSocket"), (Door::Tls, "the provider's echo, WebSocket in TLS")]
    {
        provider_echo_websocket(&s, door, &mut seen).await;
        probes.push((name, std::mem::take(&mut seen)));
    }
    probes
}

// ---------------------------------------------------------------------------------------------------------------
// The probes
// ---------------------------------------------------------------------------------------------------------------

/// The adaptive attack on the leak watch's hold: a streamed plain-HTTP POST to a host that echoes what it receives, the
/// guess its body so far; if the guess does not come back at once, leash held it as a possible start of a credential. A
/// character at a time, up to three; what the attacker concluded the value starts with.
async fn prefix_attack(s: &Scene, seen: &mut Vec<String>) -> String {
    let mut known = KNOWN.to_owned();
    for _ in 0..3 {
        let mut next = None;
        for c in ALPHABET.chars() {
            let guess = format!("{known}{c}");
            let mut tcp = TcpStream::connect(s.leash.addr).await.unwrap();
            tcp.set_nodelay(true).unwrap();
            let url = format!("http://echo.test:{}/echo", s.plain);
            let head = format!(
                "POST {url} HTTP/1.1\r\nHost: echo.test:{}\r\nContent-Length: {}\r\n\r\n",
                s.plain,
                guess.len() + 1
            );
            tcp.write_all(head.as_bytes()).await.unwrap();
            seen.push(format!("guess {guess}: {}", head_of(&mut tcp).await));
            tcp.write_all(guess.as_bytes()).await.unwrap();
            let now = observe(&mut tcp).await;
            seen.push(format!("guess {guess}: at once {now}"));
            tcp.write_all(b"\n").await.unwrap();
            seen.push(format!("guess {guess}: then {}", until_end(&mut tcp).await));
            if !now.contains(&guess) && next.is_none() {
                next = Some(c);
            }
        }
        match next {
            Some(c) => known.push(c),
            None => break,
        }
    }
    known
}

/// One guess streamed to the echoing host inside an inspected tunnel: the records and bytes at once and after.
async fn streamed_guess_h1(s: &Scene, guess: &str, seen: &mut Vec<String>) {
    let (mut tls, records) = s.tunnel("other.allowed.test", s.tls, b"http/1.1").await;
    let head = format!(
        "POST /echo HTTP/1.1\r\nHost: other.allowed.test:{}\r\nContent-Length: {}\r\n\r\n",
        s.tls,
        guess.len() + 1
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.flush().await.unwrap();
    seen.push(format!("h1 guess {guess}: {} {}", head_of(&mut tls).await, records.take()));
    tls.write_all(guess.as_bytes()).await.unwrap();
    tls.flush().await.unwrap();
    seen.push(format!("h1 guess {guess}: at once {} {}", observe(&mut tls).await, records.take()));
    tls.write_all(b"\n").await.unwrap();
    tls.flush().await.unwrap();
    seen.push(format!("h1 guess {guess}: then {} {}", until_end(&mut tls).await, records.take()));
}

/// The guesses as DATA frames of HTTP/2 streams to the echoing host: the frames that come back at once and after.
async fn streamed_guesses_h2(s: &Scene, seen: &mut Vec<String>) {
    let mut send = s.h2_client("other.allowed.test").await;
    for guess in GUESSES {
        let (tx, rx) = mpsc::unbounded_channel();
        let req = Request::post(format!("https://other.allowed.test:{}/echo", s.h2)).body(Channel(rx)).unwrap();
        let resp = within("h2 echo response", send.send_request(req)).await.unwrap();
        let status = resp.status();
        let mut body = resp.into_body();
        tx.send(Frame::data(Bytes::from(guess))).unwrap();
        seen.push(format!("h2 guess {guess}: {status}, at once {}", frames(&mut body).await));
        tx.send(Frame::data(Bytes::from("\n"))).unwrap();
        drop(tx);
        seen.push(format!("h2 guess {guess}: then {}", frames(&mut body).await));
    }
}

/// How the client reaches the provider over HTTP/1.1.
#[derive(Debug, Clone, Copy)]
enum Door {
    Plain,
    Tls,
}

/// The provider, made to echo the key in a header, in pieces of a chunked body paced one step at a time (whole,
/// split inside the key, the attacker's guesses ending a piece), and in a trailer.
async fn provider_echo_h1(s: &Scene, door: Door, seen: &mut Vec<String>) {
    let mut io = s.provider(door).await;
    io.write_all(provider_request(s, door, SCRIPT, false).as_bytes()).await.unwrap();
    io.flush().await.unwrap();
    seen.push(format!("{door:?} echo: head {} {}", head_of(&mut io).await, io.records()));
    for step in 0..=SCRIPT.split('|').count() {
        s.go.add_permits(1);
        seen.push(format!("{door:?} echo: step {step} {} {}", observe(&mut io).await, io.records()));
    }
    seen.push(format!("{door:?} echo: end {} {}", until_end(&mut io).await, io.records()));
}

/// The provider, made to echo the key split across two chunks whose second carries `extension` on its size line
/// (and every later one): the bytes as they come, paced, and the body's data, framing taken out.
async fn provider_echo_extended(s: &Scene, door: Door, extension: &str, seen: &mut Vec<String>) {
    let mut io = s.provider(door).await;
    let request = provider_request(s, door, EXTENDED_SCRIPT, false);
    let request = request.replace("\r\n\r\n", &format!("\r\nx-extension: {extension}\r\n\r\n"));
    io.write_all(request.as_bytes()).await.unwrap();
    io.flush().await.unwrap();
    let name = format!("{door:?} extension {extension}");
    seen.push(format!("{name}: head {} {}", head_of(&mut io).await, io.records()));
    let mut body = Vec::new();
    for step in 0..=EXTENDED_SCRIPT.split('|').count() {
        s.go.add_permits(1);
        seen.push(format!("{name}: step {step} {} {}", observe_into(&mut io, &mut body).await, io.records()));
    }
    seen.push(format!("{name}: data {:?}", String::from_utf8_lossy(&dechunk(&body))));
}

/// The data of a chunked body (extensions and trailers dropped), as far as it is whole.
fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut data = Vec::new();
    while let Some(end) = body.windows(2).position(|w| w == b"\r\n") {
        let line = String::from_utf8_lossy(&body[..end]);
        let size = usize::from_str_radix(line.split(';').next().unwrap_or_default(), 16).unwrap_or(0);
        let rest = &body[end + 2..];
        if size == 0 || rest.len() < size {
            break;
        }
        data.extend_from_slice(&rest[..size]);
        body = rest.get(size + 2..).unwrap_or_default();
    }
    data
}

/// The provider's answer, one Content-Length body written at once, ending in `ending`.
async fn provider_body_ending_in(s: &Scene, door: Door, ending: &str, seen: &mut Vec<String>) {
    let mut io = s.provider(door).await;
    io.write_all(provider_request(s, door, &format!("says {ending}"), true).as_bytes()).await.unwrap();
    io.flush().await.unwrap();
    seen.push(format!("{door:?} ending in {ending}: {} {}", until_end(&mut io).await, io.records()));
}

/// The provider over HTTP/2: the key in a field, in DATA frames paced one step at a time, and in a trailer.
async fn provider_echo_h2(s: &Scene, seen: &mut Vec<String>) {
    let mut send = s.h2_client("models.test").await;
    let req = Request::get(format!("https://models.test:{}/say", s.h2))
        .header("x-api-key", PLACEHOLDER)
        .header("x-script", SCRIPT)
        .body(Channel(mpsc::unbounded_channel().1))
        .unwrap();
    let resp = within("h2 provider response", send.send_request(req)).await.unwrap();
    let mut names: Vec<&str> = resp.headers().keys().map(::http::HeaderName::as_str).collect();
    names.sort_unstable();
    seen.push(format!("h2 echo: {} x-echo {:?} fields {names:?}", resp.status(), resp.headers().get("x-echo")));
    let mut body = resp.into_body();
    for step in 0..=SCRIPT.split('|').count() {
        s.go.add_permits(1);
        seen.push(format!("h2 echo: step {step} {}", frames(&mut body).await));
    }
}

/// The provider after a WebSocket upgrade: one text message whose fragments are the script's pieces (the key whole,
/// split inside it, the attacker's guesses ending a fragment), one fragment per step, then a ping with the key.
async fn provider_echo_websocket(s: &Scene, door: Door, seen: &mut Vec<String>) {
    let mut io = s.provider(door).await;
    let upgrade = "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\
                   Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n";
    let request = provider_request(s, door, SCRIPT, false).replace("Connection: close\r\n", upgrade);
    io.write_all(request.replace("/say", "/ws").as_bytes()).await.unwrap();
    io.flush().await.unwrap();
    seen.push(format!("{door:?} ws: head {} {}", head_of(&mut io).await, io.records()));
    for step in 0..=SCRIPT.split('|').count() {
        s.go.add_permits(1);
        seen.push(format!("{door:?} ws: step {step} {} {}", observe(&mut io).await, io.records()));
    }
}

fn provider_request(s: &Scene, door: Door, script: &str, length: bool) -> String {
    let (target, port) = match door {
        Door::Plain => (format!("http://models.test:{}/say", s.plain), s.plain),
        Door::Tls => ("/say".to_owned(), s.tls),
    };
    let length = if length { "x-length: 1\r\n" } else { "" };
    format!(
        "GET {target} HTTP/1.1\r\nHost: models.test:{port}\r\nx-api-key: {PLACEHOLDER}\r\nx-script: {script}\r\n\
         {length}Connection: close\r\n\r\n"
    )
}

// ---------------------------------------------------------------------------------------------------------------
// Observing: phases, records, frames
// ---------------------------------------------------------------------------------------------------------------

/// Read until the bytes stop coming (see [`QUIET`], [`HELD`]); what came, and whether the stream ended.
async fn observe<R: AsyncRead + Unpin>(r: &mut R) -> String {
    observe_into(r, &mut Vec::new()).await
}

/// [`observe`], the bytes that came also appended to `all`.
async fn observe_into<R: AsyncRead + Unpin>(r: &mut R, all: &mut Vec<u8>) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let mut deadline = Instant::now() + HELD;
    let mut ended = "";
    loop {
        match timeout_at(deadline, r.read(&mut buf)).await {
            Err(_) => break,
            Ok(Ok(0)) | Ok(Err(_)) => {
                ended = " (ended)";
                break;
            }
            Ok(Ok(n)) => {
                got.extend_from_slice(&buf[..n]);
                deadline = Instant::now() + QUIET;
            }
        }
    }
    all.extend_from_slice(&got);
    format!("{:?}{ended}", String::from_utf8_lossy(&got))
}

/// Read a response head (the origins answer before any body byte comes or goes: a point both runs reach alike).
async fn head_of<R: AsyncRead + Unpin>(r: &mut R) -> String {
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        match within("a response head", r.read(&mut byte)).await {
            Ok(1) => got.push(byte[0]),
            _ => break,
        }
    }
    format!("{:?}", String::from_utf8_lossy(&got))
}

/// Read until a chunked body's end, or the connection's (leash closes it after a `Connection: close` exchange).
async fn until_end<R: AsyncRead + Unpin>(r: &mut R) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    while !got.ends_with(b"0\r\n\r\n") {
        match within("the rest of the response", r.read(&mut buf)).await {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    format!("{:?}", String::from_utf8_lossy(&got))
}

/// The frames of a response body until they stop coming: each DATA frame's bytes, and trailers.
async fn frames(body: &mut Incoming) -> String {
    let mut out = Vec::new();
    let mut deadline = Instant::now() + HELD;
    loop {
        match timeout_at(deadline, body.frame()).await {
            Err(_) => break,
            Ok(None) => {
                out.push("(ended)".to_owned());
                break;
            }
            Ok(Some(Err(e))) => {
                out.push(format!("(error {e})"));
                break;
            }
            Ok(Some(Ok(frame))) => {
                match frame.into_data() {
                    Ok(data) => out.push(format!("data {:?}", String::from_utf8_lossy(&data))),
                    Err(frame) => out.push(format!("trailers {:?}", frame.trailers_ref())),
                }
                deadline = Instant::now() + QUIET;
            }
        }
    }
    format!("[{}]", out.join(", "))
}

/// The TLS records a tapped connection received since last asked: type and length of each.
#[derive(Clone, Default)]
struct Records(Arc<Mutex<(bool, Vec<String>)>>);

impl Records {
    /// From now on (after the handshake) records are noted.
    fn arm(&self) {
        let mut r = self.0.lock().unwrap();
        (r.0, r.1) = (true, Vec::new());
    }

    fn take(&self) -> String {
        format!("records {:?}", std::mem::take(&mut self.0.lock().unwrap().1))
    }
}

/// A TCP stream whose received bytes are read as TLS records: where leash's writes were cut shows.
struct Tap {
    io: TcpStream,
    records: Records,
    /// The header of the record under way (up to 5 bytes), and the bytes of its body still to come.
    header: Vec<u8>,
    body_left: usize,
}

impl Tap {
    fn see(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.body_left > 0 {
                let n = self.body_left.min(bytes.len());
                (self.body_left, bytes) = (self.body_left - n, &bytes[n..]);
                continue;
            }
            let n = (5 - self.header.len()).min(bytes.len());
            self.header.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            if self.header.len() == 5 {
                self.body_left = usize::from(u16::from_be_bytes([self.header[3], self.header[4]]));
                let mut r = self.records.0.lock().unwrap();
                if r.0 {
                    r.1.push(format!("{}:{}", self.header[0], self.body_left));
                }
                self.header.clear();
            }
        }
    }
}

impl AsyncRead for Tap {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        let new = buf.filled()[before..].to_vec();
        self.see(&new);
        polled
    }
}

impl AsyncWrite for Tap {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, data)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

type TlsTap = tokio_rustls::client::TlsStream<Tap>;

/// A connection to the provider through one door: plain, or a tapped TLS tunnel.
enum ProviderIo {
    Plain(TcpStream),
    Tls(Box<TlsTap>, Records),
}

impl ProviderIo {
    fn records(&self) -> String {
        match self {
            ProviderIo::Plain(_) => String::new(),
            ProviderIo::Tls(_, records) => records.take(),
        }
    }
}

impl AsyncRead for ProviderIo {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            ProviderIo::Plain(io) => Pin::new(io).poll_read(cx, buf),
            ProviderIo::Tls(io, _) => Pin::new(io).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ProviderIo {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            ProviderIo::Plain(io) => Pin::new(io).poll_write(cx, data),
            ProviderIo::Tls(io, _) => Pin::new(io).poll_write(cx, data),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            ProviderIo::Plain(io) => Pin::new(io).poll_flush(cx),
            ProviderIo::Tls(io, _) => Pin::new(io).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            ProviderIo::Plain(io) => Pin::new(io).poll_shutdown(cx),
            ProviderIo::Tls(io, _) => Pin::new(io).poll_shutdown(cx),
        }
    }
}

/// A request or response body fed from a channel, one frame per message.
struct Channel(mpsc::UnboundedReceiver<Frame<Bytes>>);

impl hyper::body::Body for Channel {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|f| f.map(Ok))
    }
}

// ---------------------------------------------------------------------------------------------------------------
// The scene: leash with one credential (`models.test`, plain HTTP allowed too), and one origin per door
// ---------------------------------------------------------------------------------------------------------------

struct Scene {
    /// The origins' CA (they hold its leaves).
    _ca: TestCa,
    leash: Leash,
    /// The plain-HTTP origin's port (`echo.test`, `models.test`), the HTTPS one's and the HTTP/2 one's.
    plain: u16,
    tls: u16,
    h2: u16,
    /// One permit: the provider writes its next piece.
    go: Arc<Semaphore>,
}

impl Scene {
    async fn start(value: &str) -> Scene {
        let ca = TestCa::new();
        let go = Arc::new(Semaphore::new(0));
        let plain = serve_h1(None, go.clone()).await;
        let tls = serve_h1(Some(ca.server_config(&["models.test", "other.allowed.test"])), go.clone()).await;
        let h2 = serve_h2(&ca, go.clone()).await;
        let yaml = format!(
            "network:\n  mode: blocklist\n  blocked_urls: [other.allowed.test/never/]\n  ports: [{plain}]\n  \
             tunnel_ports: [{tls}, {h2}]\n  allow_destinations: [127.0.0.0/8]\n  credentials:\n    - name: provider\n      \
             hosts: [models.test]\n      env: PROVIDER_KEY\n      header: x-api-key\n      plaintext: true\n"
        );
        let secrets = Secrets::new(vec![Secret::new("provider", value, PLACEHOLDER).unwrap()]);
        let leash = Leash::builder(&yaml).inspecting(&ca.pem).secrets(secrets).start().await;
        Scene { _ca: ca, leash, plain, tls, h2, go }
    }

    /// A TLS tunnel to `host:port` through leash, on a tapped connection armed once the handshake is done.
    async fn tunnel(&self, host: &str, port: u16, alpn: &[u8]) -> (TlsTap, Records) {
        let (c, status) = crate::support::tls::connect(self.leash.addr, &format!("{host}:{port}")).await;
        assert_eq!(status, 200);
        let records = Records::default();
        let tap = Tap { io: c.wire.io, records: records.clone(), header: Vec::new(), body_left: 0 };
        let connector = TlsConnector::from(Arc::new(self.client_config(alpn)));
        let name = ServerName::try_from(host.to_owned()).unwrap();
        let tls = within("handshake", connector.connect(name, tap)).await.unwrap();
        // From here on the records are the same in every run (the handshake's carry a certificate made per run).
        records.arm();
        (tls, records)
    }

    /// A client trusting leash's CA only, offering `alpn`.
    fn client_config(&self, alpn: &[u8]) -> rustls::ClientConfig {
        let mut roots = rustls::RootCertStore::empty();
        let pem = self.leash.inspection.as_ref().unwrap().ca_pem().to_owned();
        roots.add(rustls::pki_types::CertificateDer::from(pem::parse(pem).unwrap().into_contents())).unwrap();
        let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        cfg.alpn_protocols = vec![alpn.to_vec()];
        cfg
    }

    async fn provider(&self, door: Door) -> ProviderIo {
        match door {
            Door::Plain => {
                let tcp = TcpStream::connect(self.leash.addr).await.unwrap();
                tcp.set_nodelay(true).unwrap();
                ProviderIo::Plain(tcp)
            }
            Door::Tls => {
                let (tls, records) = self.tunnel("models.test", self.tls, b"http/1.1").await;
                ProviderIo::Tls(Box::new(tls), records)
            }
        }
    }

    async fn h2_client(&self, host: &str) -> hyper::client::conn::http2::SendRequest<Channel> {
        let (tls, _) = self.tunnel(host, self.h2, b"h2").await;
        let (send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls)).await.unwrap();
        tokio::spawn(conn);
        send
    }
}

/// `script` (pieces split by `|`) with the key the provider received put in: `{key}` whole, `{key0}` and `{key1}`
/// its first ten characters and the rest; `\\n` a line's end.
fn pieces(script: &str, key: &str) -> Vec<String> {
    let (k0, k1) = key.split_at(10.min(key.len()));
    let piece = |p: &str| p.replace("{key}", key).replace("{key0}", k0).replace("{key1}", k1).replace("\\n", "\n");
    script.split('|').map(piece).collect()
}

/// An HTTP/1.1 origin (TLS when `config` is given) answering `/echo` with the body it receives, chunk by chunk as it
/// comes, and `/say` as the provider: `x-script`'s pieces, one per permit of `go`, in a chunked body (`X-Echo` the
/// key, in the head and a trailer), or all at once with a Content-Length when the request has `x-length`.
async fn serve_h1(config: Option<rustls::ServerConfig>, go: Arc<Semaphore>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let acceptor = config.map(|mut c| {
        c.alpn_protocols = vec![b"http/1.1".to_vec()];
        TlsAcceptor::from(Arc::new(c))
    });
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, go) = (acceptor.clone(), go.clone());
            tokio::spawn(async move {
                match acceptor {
                    Some(a) => {
                        if let Ok(tls) = a.accept(tcp).await {
                            answer_h1(Wire::new(tls), go).await;
                        }
                    }
                    None => answer_h1(Wire::new(tcp), go).await,
                }
            });
        }
    });
    port
}

async fn answer_h1<S: AsyncRead + AsyncWrite + Unpin>(mut wire: Wire<S>, go: Arc<Semaphore>) {
    while let Ok(Some(head)) = wire.head().await {
        let target = head.start.split(' ').nth(1).unwrap_or_default().to_owned();
        let key = head.header("x-api-key").unwrap_or_default().to_owned();
        let result = if target.ends_with("/ws") {
            let pieces = pieces(head.header("x-script").unwrap_or_default(), &key);
            websocket_h1(&mut wire.io, &key, &pieces, &go).await
        } else if target.ends_with("/echo") {
            let length: usize = head.header("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
            echo_h1(&mut wire, length).await
        } else {
            let pieces = pieces(head.header("x-script").unwrap_or_default(), &key);
            match head.header("x-length") {
                Some(_) => {
                    let body = pieces.concat();
                    let response = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len());
                    wire.io.write_all(response.as_bytes()).await
                }
                None => {
                    let extension = head.header("x-extension").unwrap_or_default();
                    paced_h1(&mut wire.io, (&key, extension), &pieces, &go).await
                }
            }
        };
        if result.and(wire.io.flush().await).is_err() {
            return;
        }
    }
}

async fn echo_h1<S: AsyncRead + AsyncWrite + Unpin>(wire: &mut Wire<S>, mut left: usize) -> std::io::Result<()> {
    wire.io.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n").await?;
    wire.io.flush().await?;
    while left > 0 {
        if wire.buf.is_empty() && wire.fill().await? == 0 {
            return Ok(());
        }
        let n = left.min(wire.buf.len());
        let piece: Vec<u8> = wire.buf.drain(..n).collect();
        left -= n;
        wire.io.write_all(&[format!("{n:x}\r\n").as_bytes(), &piece, b"\r\n"].concat()).await?;
        wire.io.flush().await?;
    }
    wire.io.write_all(b"0\r\n\r\n").await
}

/// The switch to a WebSocket, then `pieces` as the fragments of one text message (a permit each), then a ping
/// carrying the key; unmasked, as a server's frames are.
async fn websocket_h1<S: AsyncWrite + Unpin>(
    io: &mut S,
    key: &str,
    pieces: &[String],
    go: &Semaphore,
) -> std::io::Result<()> {
    let switch = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                  Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n";
    io.write_all(switch.as_bytes()).await?;
    io.flush().await?;
    let frame = |fin: bool, opcode: u8, payload: &[u8]| {
        let mut f = vec![u8::from(fin) << 7 | opcode, u8::try_from(payload.len()).unwrap()];
        f.extend_from_slice(payload);
        f
    };
    for (i, piece) in pieces.iter().enumerate() {
        go.acquire().await.unwrap().forget();
        let opcode = if i == 0 { 1 } else { 0 };
        io.write_all(&frame(i + 1 == pieces.len(), opcode, piece.as_bytes())).await?;
        io.flush().await?;
    }
    go.acquire().await.unwrap().forget();
    io.write_all(&frame(true, 9, key.as_bytes())).await?;
    io.flush().await
}

/// The key in the head, `pieces` as chunks (one per permit; every chunk after the first with `extension` on its size
/// line), the key in a trailer.
async fn paced_h1<S: AsyncWrite + Unpin>(
    io: &mut S,
    (key, extension): (&str, &str),
    pieces: &[String],
    go: &Semaphore,
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 200 OK\r\nX-Echo: {key}\r\n{key}: a field named the key\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    io.write_all(head.as_bytes()).await?;
    io.flush().await?;
    for (i, piece) in pieces.iter().enumerate() {
        go.acquire().await.unwrap().forget();
        let extension = if i == 0 { "" } else { extension };
        io.write_all(format!("{:x}{extension}\r\n{piece}\r\n", piece.len()).as_bytes()).await?;
        io.flush().await?;
    }
    go.acquire().await.unwrap().forget();
    io.write_all(format!("0\r\nX-Echo: {key}\r\n\r\n").as_bytes()).await
}

type ResBody = BoxBody<Bytes, hyper::Error>;

/// The HTTP/2 origin: `/echo` streams back the request body frame by frame; `/say` is the provider, as in
/// [`serve_h1`] (the key in an `x-echo` field and trailer, the pieces as DATA frames, one per permit).
async fn serve_h2(ca: &TestCa, go: Arc<Semaphore>) -> u16 {
    crate::support::tls::serve_h2_tls(ca, &["models.test", "other.allowed.test"], move |req| answer_h2(req, go.clone()))
        .await
        .0
}

async fn answer_h2(req: Request<Incoming>, go: Arc<Semaphore>) -> Result<Response<ResBody>, Infallible> {
    if req.uri().path() == "/echo" {
        return Ok(Response::new(req.into_body().boxed()));
    }
    let key = req.headers().get("x-api-key").map(|v| v.to_str().unwrap_or_default().to_owned()).unwrap_or_default();
    let script = req.headers().get("x-script").and_then(|v| v.to_str().ok()).unwrap_or_default();
    let pieces = pieces(script, &key);
    let (tx, rx) = mpsc::unbounded_channel();
    let trailer_key = key.clone();
    tokio::spawn(async move {
        for piece in pieces {
            go.acquire().await.unwrap().forget();
            let _ = tx.send(Frame::data(Bytes::from(piece)));
        }
        go.acquire().await.unwrap().forget();
        let mut trailers = HeaderMap::new();
        trailers.insert("x-echo", HeaderValue::from_str(&trailer_key).unwrap());
        let _ = tx.send(Frame::trailers(trailers));
    });
    let mut response = Response::new(Channel(rx).map_err(|never| match never {}).boxed());
    response.headers_mut().insert("x-echo", HeaderValue::from_str(&key).unwrap());
    if let Ok(name) = ::http::HeaderName::from_bytes(key.as_bytes()) {
        response.headers_mut().insert(name, HeaderValue::from_static("a field named the key"));
    }
    assert!(!response.body().is_end_stream());
    Ok(response)
}
