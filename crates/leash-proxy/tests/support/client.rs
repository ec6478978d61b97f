//! Clients: a raw TCP client that sends exactly the bytes a test writes (malformed and smuggling shapes, pipelines)
//! and reads responses back, and curl as a real-world client (absolute-form requests and CONNECT through `-x`).

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWriteExt};
use tokio::net::TcpStream;

use super::http::{Body, Head, Wire};
use super::within;

/// A response as a client received it.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub head: Head,
    pub body: Body,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.header(name)
    }
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.head.all(name)
    }
    pub fn text(&self) -> String {
        self.body.text()
    }
    /// The body's first line (a refusal's one-line explanation).
    pub fn first_line(&self) -> String {
        self.text().lines().next().unwrap_or_default().to_owned()
    }
    /// The value of `X-Leash-Reason`, or "" when absent.
    pub fn reason(&self) -> &str {
        self.header("x-leash-reason").unwrap_or("")
    }
}

/// A client connection that writes exactly what it is told.
pub struct Raw {
    pub wire: Wire<TcpStream>,
}

impl Raw {
    pub async fn connect(addr: SocketAddr) -> Raw {
        let stream = within("connect to leash", TcpStream::connect(addr)).await.expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        Raw { wire: Wire::new(stream) }
    }

    pub async fn send(&mut self, bytes: impl AsRef<[u8]>) {
        within("send", self.wire.io.write_all(bytes.as_ref())).await.expect("send to leash");
    }

    /// Like [`Raw::send`], reporting failure instead of failing (the peer may have closed).
    pub async fn try_send(&mut self, bytes: impl AsRef<[u8]>) -> io::Result<()> {
        within("send", self.wire.io.write_all(bytes.as_ref())).await
    }

    /// The next response (a 1xx is returned as such; call again for the final one).
    pub async fn response(&mut self) -> Resp {
        self.response_to("GET").await
    }

    /// The next response to a request with `method` (a HEAD response has no body).
    pub async fn response_to(&mut self, method: &str) -> Resp {
        within("a response from leash", read_response(&mut self.wire, method)).await.expect("read a response")
    }

    /// Read until leash closes the connection: `Ok(bytes)` on an orderly close (FIN), `Err` on a reset.
    pub async fn until_closed(&mut self) -> io::Result<Vec<u8>> {
        let mut got = std::mem::take(&mut self.wire.buf);
        within("leash to close the connection", async {
            loop {
                match self.wire.fill().await {
                    Ok(0) => return Ok(()),
                    Ok(_) => got.append(&mut self.wire.buf),
                    Err(e) => return Err(e),
                }
            }
        })
        .await?;
        Ok(got)
    }

    /// True if leash closed the connection within `limit` (with or without sending more bytes first).
    pub async fn closed_within(&mut self, limit: Duration) -> bool {
        let read = async {
            loop {
                match self.wire.fill().await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        };
        tokio::time::timeout(limit, read).await.is_ok()
    }
}

/// Read one response off `wire` (to a request with `method`: a HEAD response has no body).
pub async fn read_response<S: AsyncRead + Unpin>(wire: &mut Wire<S>, method: &str) -> io::Result<Resp> {
    let head = wire.head().await?.ok_or(io::ErrorKind::UnexpectedEof)?;
    let status = head.start.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let mut body = Body::new();
    let mut sink = |d: &[u8]| body.push(d);
    let bodiless = (100..200).contains(&status) || status == 204 || status == 304 || method == "HEAD";
    if bodiless {
    } else if head.has_token("transfer-encoding", "chunked") {
        wire.chunked(&mut sink).await?;
    } else if let Some(len) = head.header("content-length") {
        wire.exact(len.parse().map_err(|_| io::Error::other("bad content-length"))?, &mut sink).await?;
    } else {
        wire.read_to_close(&mut sink).await?;
    }
    Ok(Resp { status, head, body })
}

/// Send `bytes` on a fresh connection and read one response.
pub async fn exchange(addr: SocketAddr, bytes: impl AsRef<[u8]>) -> Resp {
    let mut c = Raw::connect(addr).await;
    c.send(bytes).await;
    c.response().await
}

/// `GET url HTTP/1.1` with the Host header a client would derive from `url`.
pub fn get(url: &str) -> String {
    request("GET", url, &[], "")
}

/// A request for `url` with a matching Host, `headers`, and `body` (with its Content-Length when not empty).
pub fn request(method: &str, url: &str, headers: &[&str], body: &str) -> String {
    let after = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = &after[..after.find(['/', '?']).unwrap_or(after.len())];
    let mut out = format!("{method} {url} HTTP/1.1\r\nHost: {authority}\r\n");
    for h in headers {
        out.push_str(h);
        out.push_str("\r\n");
    }
    if !body.is_empty() {
        out.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    out.push_str("\r\n");
    out.push_str(body);
    out
}

/// What curl got.
#[derive(Debug)]
pub struct CurlOut {
    /// The final response's status (0 if none).
    pub status: u16,
    /// The proxy's answer to CONNECT (0 if curl sent none).
    pub connect_status: u16,
    pub head: Head,
    pub body: Vec<u8>,
    pub stderr: String,
    pub exit: Option<i32>,
}

impl CurlOut {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Run curl through the proxy at `proxy` with `args` (URL included).
pub async fn curl(proxy: SocketAddr, args: &[&str]) -> CurlOut {
    let dir = tempfile::tempdir().expect("tempdir");
    let (heads, body) = (dir.path().join("heads"), dir.path().join("body"));
    let mut cmd = tokio::process::Command::new("curl");
    cmd.args(["-sS", "--max-time", "20", "--noproxy", "", "--suppress-connect-headers"])
        .args(["-x", &format!("http://{proxy}")])
        .arg("-D")
        .arg(&heads)
        .arg("-o")
        .arg(&body)
        .args(["-w", "%{http_code} %{http_connect}"])
        .args(args)
        .kill_on_drop(true);
    let out = within("curl", cmd.output()).await.expect("run curl");
    let codes = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut codes = codes.split_whitespace().map(|c| c.parse().unwrap_or(0));
    let heads_text = std::fs::read_to_string(&heads).unwrap_or_default();
    // With 1xx responses the file holds several heads; the last is the final response's.
    let last = heads_text.trim_end().rsplit("\r\n\r\n").next().unwrap_or_default().to_owned();
    let head = Head::parse(last.as_bytes());
    CurlOut {
        status: codes.next().unwrap_or(0),
        connect_status: codes.next().unwrap_or(0),
        head,
        body: std::fs::read(&body).unwrap_or_default(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        exit: out.status.code(),
    }
}

/// Read a response head and then exactly `event` as one chunk (the first event of an event stream); returns the
/// bytes read off `wire` for both.
pub async fn read_first_event<S: AsyncRead + Unpin>(wire: &mut Wire<S>, event: &[u8]) -> u64 {
    let head = within("the response head", wire.head()).await.expect("read the head").expect("a head");
    assert!(head.start.contains(" 200 "), "{}", head.raw);
    assert!(head.has_token("transfer-encoding", "chunked"), "{}", head.raw);
    let mut chunk = format!("{:x}\r\n", event.len()).into_bytes();
    chunk.extend_from_slice(event);
    chunk.extend_from_slice(b"\r\n");
    let mut got = Body::new();
    within("the first event", wire.exact(chunk.len() as u64, &mut |d| got.push(d))).await.expect("the first event");
    assert_eq!(got, Body::of(&chunk), "the first event, as one chunk");
    (head.raw.len() + 4 + chunk.len()) as u64
}
