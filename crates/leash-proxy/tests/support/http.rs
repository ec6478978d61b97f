//! A small, lenient HTTP/1.1 reader for the harness's own ends (origins and clients): it records what arrives
//! exactly as sent — headers in order, repeats kept — and does not judge it; judging is the proxy's job.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt};

/// Longest head the harness reads (the proxy's bound is smaller; this only keeps a broken test from eating memory).
const MAX_HEAD: usize = 1024 * 1024;

/// How much of a body is kept in memory; longer bodies are only counted and hashed.
pub const BODY_KEEP: usize = 1024 * 1024;

/// A message head: its first line and its fields, as sent.
#[derive(Debug, Clone, Default)]
pub struct Head {
    pub start: String,
    pub headers: Vec<(String, String)>,
    pub raw: String,
}

impl Head {
    /// The first value of `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.all(name).into_iter().next()
    }

    /// Every value of `name`, in order.
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.headers.iter().filter(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str()).collect()
    }

    pub fn has_token(&self, name: &str, token: &str) -> bool {
        self.all(name).iter().flat_map(|v| v.split(',')).any(|t| t.trim().eq_ignore_ascii_case(token))
    }

    pub fn parse(raw: &[u8]) -> Head {
        let text = String::from_utf8_lossy(raw).into_owned();
        let mut lines = text.split("\r\n");
        let start = lines.next().unwrap_or_default().to_owned();
        let headers = lines
            .filter(|l| !l.is_empty())
            .map(|l| match l.split_once(':') {
                Some((n, v)) => (n.to_owned(), v.trim().to_owned()),
                None => (l.to_owned(), String::new()),
            })
            .collect();
        Head { start, headers, raw: text }
    }
}

/// A body as received: its length, a hash of all of it, and its first [`BODY_KEEP`] bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Body {
    pub len: u64,
    pub hash: u64,
    pub bytes: Vec<u8>,
}

impl Body {
    pub fn of(data: &[u8]) -> Body {
        let mut b = Body::new();
        b.push(data);
        b
    }

    pub fn new() -> Body {
        Body { len: 0, hash: FNV_OFFSET, bytes: Vec::new() }
    }

    pub fn push(&mut self, data: &[u8]) {
        for &byte in data {
            self.hash = (self.hash ^ u64::from(byte)).wrapping_mul(FNV_PRIME);
        }
        self.len += data.len() as u64;
        let room = BODY_KEEP.saturating_sub(self.bytes.len());
        self.bytes.extend_from_slice(&data[..room.min(data.len())]);
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0100_0000_01b3;

/// A stream with a read buffer.
pub struct Wire<S> {
    pub io: S,
    pub buf: Vec<u8>,
}

impl<S: AsyncRead + Unpin> Wire<S> {
    pub fn new(io: S) -> Self {
        Self { io, buf: Vec::new() }
    }

    /// Read more; 0 at end of stream.
    pub async fn fill(&mut self) -> io::Result<usize> {
        let mut chunk = vec![0u8; 64 * 1024];
        let n = self.io.read(&mut chunk).await?;
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n)
    }

    /// The next head, or `None` if the stream ended cleanly before one began.
    pub async fn head(&mut self) -> io::Result<Option<Head>> {
        loop {
            if let Some(end) = find(&self.buf, b"\r\n\r\n") {
                let raw: Vec<u8> = self.buf.drain(..end + 4).collect();
                return Ok(Some(Head::parse(&raw[..end])));
            }
            if self.buf.len() > MAX_HEAD {
                return Err(io::Error::other("head too large"));
            }
            if self.fill().await? == 0 {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
    }

    /// Exactly `n` body bytes, fed to `sink` as they arrive.
    pub async fn exact(&mut self, mut n: u64, sink: &mut (dyn FnMut(&[u8]) + Send)) -> io::Result<()> {
        while n > 0 {
            if self.buf.is_empty() && self.fill().await? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            let take = self.buf.len().min(usize::try_from(n).unwrap_or(usize::MAX));
            sink(&self.buf[..take]);
            self.buf.drain(..take);
            n -= take as u64;
        }
        Ok(())
    }

    /// A chunked body, decoded into `sink`; returns the trailer lines.
    pub async fn chunked(&mut self, sink: &mut (dyn FnMut(&[u8]) + Send)) -> io::Result<Vec<String>> {
        loop {
            let line = self.line().await?;
            let size = line.split(';').next().unwrap_or_default().trim();
            let size = u64::from_str_radix(size, 16).map_err(|_| io::Error::other(format!("bad chunk `{line}`")))?;
            if size == 0 {
                let mut trailers = Vec::new();
                loop {
                    let t = self.line().await?;
                    if t.is_empty() {
                        return Ok(trailers);
                    }
                    trailers.push(t);
                }
            }
            self.exact(size, sink).await?;
            if !self.line().await?.is_empty() {
                return Err(io::Error::other("chunk data not followed by CRLF"));
            }
        }
    }

    /// Everything until the peer closes.
    pub async fn read_to_close(&mut self, sink: &mut (dyn FnMut(&[u8]) + Send)) -> io::Result<()> {
        loop {
            if !self.buf.is_empty() {
                sink(&self.buf);
                self.buf.clear();
            }
            if self.fill().await? == 0 {
                return Ok(());
            }
        }
    }

    async fn line(&mut self) -> io::Result<String> {
        loop {
            if let Some(end) = find(&self.buf, b"\r\n") {
                let raw: Vec<u8> = self.buf.drain(..end + 2).collect();
                return Ok(String::from_utf8_lossy(&raw[..end]).into_owned());
            }
            if self.fill().await? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
    }
}

pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
