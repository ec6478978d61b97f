//! The origin servers behind leash: raw tokio, so they can answer exactly what a test scripts — well-formed replies,
//! repeated `Set-Cookie`, chunked and huge streamed bodies, close-delimited bodies, silence (504), resets (502) —
//! and record every connection and request, so a test can prove a refused request never reached one.

use std::collections::HashSet;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

pub use super::http::Body;
use super::http::{Head, Wire};
use super::within;

/// A silent origin holds the connection at most this long (longer than any test's response timeout).
const SILENT_HOLD: Duration = Duration::from_secs(20);

/// Between two events of a [`Reply::Events`] stream after its gate opened (a paced stream, as SSE keep-alives are).
const EVENT_PACE: Duration = Duration::from_millis(10);

/// Bytes per write when an origin streams a large body.
const STREAM_PIECE: usize = 64 * 1024;

/// One request as the origin received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Which accepted connection carried it (0-based).
    pub conn: usize,
    pub method: String,
    pub target: String,
    pub version: String,
    pub head: Head,
    pub body: Body,
    pub chunked: bool,
    pub trailers: Vec<String>,
    /// The TLS server name, for a TLS origin.
    pub sni: Option<String>,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.header(name)
    }
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.head.all(name)
    }
}

/// What the origin answers.
#[derive(Clone)]
pub enum Reply {
    /// A response with these headers and a Content-Length body.
    Full { status: u16, headers: Vec<(String, String)>, body: Vec<u8> },
    /// These bytes exactly; the connection stays open for the next request.
    Raw(Vec<u8>),
    /// These bytes, then close (a close-delimited body).
    RawThenClose(Vec<u8>),
    /// A chunked response: these chunks, then these trailers.
    Chunked { headers: Vec<(String, String)>, chunks: Vec<Vec<u8>>, trailers: Vec<(String, String)> },
    /// `len` bytes of [`pattern`], streamed, Content-Length or chunked.
    Pattern { len: u64, chunked: bool },
    /// `first`, then wait for `gate`, then `rest` (Content-Length of both): proves the proxy streams.
    Gated { first: Vec<u8>, gate: Arc<Notify>, rest: Vec<u8> },
    /// A chunked `200` whose first chunk is `first`; once `gate` opens, `next` as a chunk every few milliseconds
    /// until a write fails (an event stream whose reader went away and whose proxy closed it).
    Events { first: Vec<u8>, gate: Arc<Notify>, next: Vec<u8> },
    /// Never answer; hold the connection (for 504).
    Silent,
    /// Reset the connection (RST) without answering (for 502).
    Reset,
}

impl Reply {
    pub fn ok(body: impl Into<Vec<u8>>) -> Reply {
        Reply::Full { status: 200, headers: Vec::new(), body: body.into() }
    }

    pub fn with_headers(headers: &[(&str, &str)], body: impl Into<Vec<u8>>) -> Reply {
        let headers = headers.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect();
        Reply::Full { status: 200, headers, body: body.into() }
    }
}

/// Decides the reply to each request.
pub type Handler = Arc<dyn Fn(&Recorded) -> Reply + Send + Sync>;

/// `len` bytes starting at `offset` of the test pattern: byte i is i mod 251 (a prime, so it never lines up
/// with buffer sizes and a dropped or repeated piece changes the hash).
pub fn pattern(offset: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|i| ((offset + i) % 251) as u8).collect()
}

/// What a receiver of `len` pattern bytes must end up with.
pub fn pattern_body(len: u64) -> Body {
    let mut body = Body::new();
    let mut at = 0u64;
    while at < len {
        let n = (len - at).min(STREAM_PIECE as u64) as usize;
        body.push(&pattern(at, n));
        at += n as u64;
    }
    body
}

/// Shared by plain and TLS origins: the accepted connections, the requests, the reply script.
pub struct Origin {
    pub addr: SocketAddr,
    peers: watch::Sender<Vec<SocketAddr>>,
    barriers: Mutex<HashSet<SocketAddr>>,
    requests: Mutex<Vec<Recorded>>,
    body_bytes: watch::Sender<u64>,
    handler: Handler,
}

impl Origin {
    pub async fn bind(handler: Handler) -> (TcpListener, Arc<Origin>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind origin");
        let addr = listener.local_addr().expect("origin address");
        let origin = Origin {
            addr,
            peers: watch::channel(Vec::new()).0,
            barriers: Mutex::new(HashSet::new()),
            requests: Mutex::new(Vec::new()),
            body_bytes: watch::channel(0).0,
            handler,
        };
        (listener, Arc::new(origin))
    }

    /// Accept one connection; `None` for the harness's own barrier connections. Returns the connection's index.
    pub async fn accept(&self, listener: &TcpListener) -> Option<(TcpStream, usize)> {
        let (stream, peer) = listener.accept().await.ok()?;
        let barrier = self.barriers.lock().unwrap().contains(&peer);
        let mut index = 0;
        self.peers.send_modify(|p| {
            p.push(peer);
            index = p.len();
        });
        if barrier {
            return None;
        }
        let _ = stream.set_nodelay(true);
        Some((stream, self.count_before(index)))
    }

    fn count_before(&self, index: usize) -> usize {
        let barriers = self.barriers.lock().unwrap();
        self.peers.borrow().iter().take(index - 1).filter(|p| !barriers.contains(p)).count()
    }

    /// Connections accepted so far, counted only after every connection made before this call was accepted:
    /// a connection from the harness itself goes through the same accept queue and is waited for.
    pub async fn connections(&self) -> usize {
        let socket = TcpSocket::new_v4().expect("socket");
        socket.bind("127.0.0.1:0".parse().unwrap()).expect("bind barrier");
        let local = socket.local_addr().expect("barrier address");
        self.barriers.lock().unwrap().insert(local);
        let _conn = within("origin barrier connect", socket.connect(self.addr)).await.expect("barrier connect");
        let mut rx = self.peers.subscribe();
        within("origin barrier accept", rx.wait_for(|p| p.contains(&local))).await.expect("origin alive");
        let barriers = self.barriers.lock().unwrap();
        let peers = self.peers.borrow();
        peers.iter().filter(|p| !barriers.contains(p)).count()
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }

    /// Wait until the origin has received at least `n` body bytes in all (streaming checks).
    pub async fn body_bytes_at_least(&self, n: u64) {
        let mut rx = self.body_bytes.subscribe();
        within("origin to receive body bytes", rx.wait_for(|got| *got >= n)).await.expect("origin alive");
    }

    /// Serve HTTP/1.1 requests on one connection until it closes or a reply ends it.
    pub async fn serve<S>(&self, io: S, conn: usize, sni: Option<String>)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + Resettable,
    {
        let mut wire = Wire::new(io);
        while let Ok(Some(head)) = wire.head().await {
            let Ok(recorded) = self.read_request(&mut wire, head, conn, sni.clone()).await else {
                return;
            };
            self.requests.lock().unwrap().push(recorded.clone());
            let reply = (self.handler)(&recorded);
            match write_reply(&mut wire, reply).await {
                Ok(true) => {}
                _ => return,
            }
        }
    }

    async fn read_request<S>(
        &self,
        wire: &mut Wire<S>,
        head: Head,
        conn: usize,
        sni: Option<String>,
    ) -> io::Result<Recorded>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let mut parts = head.start.splitn(3, ' ');
        let (method, target, version) = (
            parts.next().unwrap_or("").to_owned(),
            parts.next().unwrap_or("").to_owned(),
            parts.next().unwrap_or("").to_owned(),
        );
        if head.has_token("expect", "100-continue") {
            wire.io.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
        }
        let mut body = Body::new();
        let progress = &self.body_bytes;
        let mut sink = |data: &[u8]| {
            body.push(data);
            progress.send_modify(|n| *n += data.len() as u64);
        };
        let chunked = head.has_token("transfer-encoding", "chunked");
        let mut trailers = Vec::new();
        if chunked {
            trailers = wire.chunked(&mut sink).await?;
        } else if let Some(len) = head.header("content-length") {
            let len = len.parse().map_err(|_| io::Error::other("bad content-length"))?;
            wire.exact(len, &mut sink).await?;
        }
        Ok(Recorded { conn, method, target, version, head, body, chunked, trailers, sni })
    }
}

/// A connection the origin can reset (RST instead of FIN).
pub trait Resettable {
    fn reset(&self);
}

impl Resettable for TcpStream {
    fn reset(&self) {
        let _ = socket2::SockRef::from(self).set_linger(Some(Duration::ZERO));
    }
}

/// Write a reply; `Ok(true)` if the connection may carry another request.
async fn write_reply<S>(wire: &mut Wire<S>, reply: Reply) -> io::Result<bool>
where
    S: AsyncRead + AsyncWrite + Unpin + Resettable,
{
    let io = &mut wire.io;
    match reply {
        Reply::Full { status, headers, body } => {
            let mut out = format!("HTTP/1.1 {status} Whatever\r\n");
            for (n, v) in &headers {
                out.push_str(&format!("{n}: {v}\r\n"));
            }
            out.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
            let mut bytes = out.into_bytes();
            bytes.extend_from_slice(&body);
            io.write_all(&bytes).await?;
        }
        Reply::Raw(bytes) => io.write_all(&bytes).await?,
        Reply::RawThenClose(bytes) => {
            io.write_all(&bytes).await?;
            io.shutdown().await?;
            return Ok(false);
        }
        Reply::Chunked { headers, chunks, trailers } => {
            let mut out = String::from("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n");
            for (n, v) in &headers {
                out.push_str(&format!("{n}: {v}\r\n"));
            }
            out.push_str("\r\n");
            io.write_all(out.as_bytes()).await?;
            for chunk in chunks {
                io.write_all(format!("{:x}\r\n", chunk.len()).as_bytes()).await?;
                io.write_all(&chunk).await?;
                io.write_all(b"\r\n").await?;
            }
            let mut end = String::from("0\r\n");
            for (n, v) in &trailers {
                end.push_str(&format!("{n}: {v}\r\n"));
            }
            end.push_str("\r\n");
            io.write_all(end.as_bytes()).await?;
        }
        Reply::Pattern { len, chunked } => stream_pattern(io, len, chunked).await?,
        Reply::Gated { first, gate, rest } => {
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", first.len() + rest.len());
            io.write_all(head.as_bytes()).await?;
            io.write_all(&first).await?;
            io.flush().await?;
            within("the test to open the gate", gate.notified()).await;
            io.write_all(&rest).await?;
        }
        Reply::Events { first, gate, next } => {
            io.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
                .await?;
            io.write_all(&chunk(&first)).await?;
            io.flush().await?;
            within("the test to open the gate", gate.notified()).await;
            let next = chunk(&next);
            let ended = within("the proxy to close the event stream", async {
                loop {
                    if let Err(e) = io.write_all(&next).await.and(io.flush().await) {
                        return e;
                    }
                    tokio::time::sleep(EVENT_PACE).await;
                }
            });
            return Err(ended.await);
        }
        Reply::Silent => {
            // Hold until the proxy gives up (closes) or the hold ends.
            let _ =
                tokio::time::timeout(SILENT_HOLD, async { while matches!(wire.fill().await, Ok(n) if n > 0) {} }).await;
            return Ok(false);
        }
        Reply::Reset => {
            io.reset();
            return Ok(false);
        }
    }
    io.flush().await?;
    Ok(true)
}

/// `data` as one chunk of a chunked body.
fn chunk(data: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out
}

async fn stream_pattern<S: AsyncWrite + Unpin>(io: &mut S, len: u64, chunked: bool) -> io::Result<()> {
    let head = if chunked {
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_owned()
    } else {
        format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n\r\n")
    };
    io.write_all(head.as_bytes()).await?;
    let mut at = 0u64;
    while at < len {
        let n = (len - at).min(STREAM_PIECE as u64) as usize;
        let piece = pattern(at, n);
        if chunked {
            io.write_all(format!("{n:x}\r\n").as_bytes()).await?;
            io.write_all(&piece).await?;
            io.write_all(b"\r\n").await?;
        } else {
            io.write_all(&piece).await?;
        }
        at += n as u64;
    }
    if chunked {
        io.write_all(b"0\r\n\r\n").await?;
    }
    Ok(())
}

/// A plain-HTTP origin on 127.0.0.1:0.
pub struct Upstream {
    pub origin: Arc<Origin>,
    task: JoinHandle<()>,
}

impl Upstream {
    /// An origin that answers every request `200 hello from upstream`.
    pub async fn start() -> Upstream {
        Upstream::with(|_| Reply::ok("hello from upstream")).await
    }

    /// An origin that answers each request with `handler`'s reply.
    pub async fn with(handler: impl Fn(&Recorded) -> Reply + Send + Sync + 'static) -> Upstream {
        let (listener, origin) = Origin::bind(Arc::new(handler)).await;
        let o = origin.clone();
        let task = tokio::spawn(async move {
            loop {
                if let Some((stream, conn)) = o.accept(&listener).await {
                    let o = o.clone();
                    tokio::spawn(async move { o.serve(stream, conn, None).await });
                }
            }
        });
        Upstream { origin, task }
    }

    pub fn addr(&self) -> SocketAddr {
        self.origin.addr
    }

    pub fn port(&self) -> u16 {
        self.origin.addr.port()
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.origin.requests()
    }

    /// The only request received (fails the test if there were others or none).
    pub fn only_request(&self) -> Recorded {
        let mut all = self.requests();
        assert_eq!(all.len(), 1, "the upstream should have received exactly one request: {all:#?}");
        all.remove(0)
    }

    pub async fn connections(&self) -> usize {
        self.origin.connections().await
    }

    /// Nothing reached this origin: no connection was even opened.
    pub async fn assert_untouched(&self) {
        assert_eq!(self.connections().await, 0, "no connection should have reached the upstream");
        assert!(self.requests().is_empty(), "no request should have reached the upstream");
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A port on 127.0.0.1 where nothing listens (connections are refused).
pub async fn dead_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    listener.local_addr().expect("address").port()
}
