//! A stream with a read buffer: message heads are parsed from the buffer, bodies are served from it first, and what
//! follows a message (a pipelined request, a tunnel's first bytes) stays in it for the next step.

use std::io;
use std::io::IoSlice;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

use crate::relay::{Buf, COPY_BULK_BUF, RELAY_BUF};
use crate::wire::chunked::ChunkedScanner;
use crate::wire::Parsed;

/// Bytes asked of the socket per read while a head is being assembled.
const HEAD_READ: usize = 8 * 1024;

/// How long a connection (or an HTTP/2 stream) leash ends goes on reading, and discarding, what the client still
/// sends: until the client's end, at most `bytes`, `total`, and `idle` between two reads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Linger {
    pub bytes: u64,
    pub idle: Duration,
    pub total: Duration,
}

impl Linger {
    /// Nothing more is expected from the client (a refused tunnel, a request without a body): what it may have sent
    /// already, briefly.
    pub const BRIEF: Linger =
        Linger { bytes: 64 * 1024, idle: Duration::from_millis(500), total: Duration::from_millis(500) };

    /// The client may still be sending a request body leash answered without reading all of it (a refusal, a
    /// failure, an upstream's early answer). Clients such as Python's requests and httpx read a response only once
    /// their whole body is sent: cut off, they report a reset or wait for window instead of showing leash's answer.
    /// An uploading client sends without pauses, so 2 s of silence means it stopped; 1 GiB (some 30 times the
    /// largest model API body) and 30 s bound what one answered request can cost (about a second of decryption).
    pub const UNREAD_BODY: Linger =
        Linger { bytes: 1024 * 1024 * 1024, idle: Duration::from_secs(2), total: Duration::from_secs(30) };

    /// Read `source` and drop what it brings, until its end or one of the bounds.
    pub(crate) async fn discard(self, source: &mut impl Discarded) {
        let deadline = tokio::time::Instant::now() + self.total;
        let mut read = 0u64;
        while read < self.bytes {
            let wait = deadline.min(tokio::time::Instant::now() + self.idle);
            match tokio::time::timeout_at(wait, source.next_piece()).await {
                Ok(Some(n)) => read += n,
                _ => break,
            }
        }
    }
}

/// What leash reads only to drop it (a closing socket, the rest of an HTTP/2 request body).
pub(crate) trait Discarded {
    /// The length of the next piece read; `None` at the end or on an error.
    fn next_piece(&mut self) -> impl std::future::Future<Output = Option<u64>>;
}

/// A socket read only to be drained.
struct Drained<'a, S> {
    io: &'a mut S,
    sink: Vec<u8>,
}

impl<S: AsyncRead + Unpin> Discarded for Drained<'_, S> {
    async fn next_piece(&mut self) -> Option<u64> {
        match self.io.read(&mut self.sink).await {
            Ok(n) if n > 0 => Some(n as u64),
            _ => None,
        }
    }
}

/// Close in an orderly way: shut our side down (FIN; `close_notify` first over TLS), then discard what the client
/// still sends, within [`Linger::BRIEF`], until its end. Closing with unread bytes in the socket makes the kernel send
/// a reset, and a reset can destroy an answer before the client reads it.
pub(crate) async fn close_gracefully<S: AsyncRead + AsyncWrite + Unpin>(io: &mut S) {
    close_lingering(io, Linger::BRIEF).await;
}

/// [`close_gracefully`], reading what the client still sends within `linger`.
pub(crate) async fn close_lingering<S: AsyncRead + AsyncWrite + Unpin>(io: &mut S, linger: Linger) {
    let _ = io.shutdown().await;
    linger.discard(&mut Drained { io, sink: vec![0; DRAIN_READ] }).await;
}

/// Bytes asked of the socket per read while draining.
const DRAIN_READ: usize = 16 * 1024;

/// A buffer larger than this is released once empty, so idle keep-alive connections stay small.
const KEEP_CAPACITY: usize = 16 * 1024;

/// Empty read buffers kept for the next head. A connection gives its buffer back when it waits (an idle keep-alive
/// connection holds none) or goes back to the pool, and the next head read takes one here: asked of the allocator,
/// each 8 KiB buffer made glibc consolidate its small free chunks first, once for nearly every plain request
/// (bench/RESULTS.md, "Head buffers"). One list for the process, not one per thread: a connection's task moves
/// between workers, and per-thread lists filled on one and ran dry on the other. Bounded: at most 512 KiB kept.
const SPARE_BUFFERS: usize = 32;

static SPARE: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// An empty buffer, with room for a head if one is spare.
fn spare_buffer() -> Vec<u8> {
    SPARE.lock().unwrap_or_else(|p| p.into_inner()).pop().unwrap_or_default()
}

/// Keep an emptied buffer of a head's size for the next head; others are freed. What it held stays out of reach:
/// the next owner sees only what it reads into it.
fn give_back(mut buf: Vec<u8>) {
    if !(HEAD_READ..=KEEP_CAPACITY).contains(&buf.capacity()) {
        return;
    }
    buf.clear();
    let mut spare = SPARE.lock().unwrap_or_else(|p| p.into_inner());
    if spare.len() < SPARE_BUFFERS {
        spare.push(buf);
    }
}

pub struct BufConn<S> {
    pub io: S,
    pub buf: Vec<u8>,
}

/// What a connection loop does after a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    KeepAlive,
    Close,
}

/// When a head parser is worth calling again after more bytes arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reparse {
    /// After every read (binary formats: a ClientHello can be refused on its fifth byte).
    EveryRead,
    /// Only once a read brings a line end, or the buffer passes `max` (HTTP heads). A head trickled in byte by byte
    /// then costs one parse per line instead of one per byte, so a slowloris client cannot make parsing quadratic.
    OnLineEnd { max: usize },
}

/// Why a head could not be read.
#[derive(Debug)]
pub enum ReadHeadError<E> {
    /// The peer closed before a head began: not an error.
    Closed,
    /// Nothing arrived within the idle timeout.
    Idle,
    /// A head began but did not complete in time.
    Timeout,
    /// The peer closed mid-head or the socket failed.
    Io(io::Error),
    /// The bytes can never be a valid head.
    Malformed(E),
}

impl<S: AsyncRead + AsyncWrite + Unpin> BufConn<S> {
    pub fn new(io: S) -> Self {
        Self { io, buf: Vec::new() }
    }

    /// Parse a head with `parse`, reading as needed: up to `idle` for its first byte, then `head_timeout` for all.
    pub async fn read_head<T, E>(
        &mut self,
        idle: Duration,
        head_timeout: Duration,
        reparse: Reparse,
        parse: impl FnMut(&[u8]) -> Parsed<T, E>,
    ) -> Result<T, ReadHeadError<E>> {
        if self.buf.is_empty() {
            self.release_spare();
        }
        self.source().read_head(idle, head_timeout, reparse, parse).await
    }

    /// The buffer and the stream as one reader, for body copies.
    pub fn source(&mut self) -> Source<'_, S> {
        Source { buf: &mut self.buf, io: &mut self.io }
    }

    fn release_spare(&mut self) {
        if self.buf.capacity() > KEEP_CAPACITY {
            self.buf = Vec::new();
        }
    }

    /// Let go of the read buffer if nothing is left in it, so a connection that waits holds none.
    pub fn release_if_empty(&mut self) {
        if self.buf.is_empty() {
            give_back(std::mem::take(&mut self.buf));
        }
    }

    /// The stream alone; its read buffer is given back for the next head, and what was left in it is dropped.
    pub fn into_io(self) -> S {
        give_back(self.buf);
        self.io
    }
}

/// A read buffer and (one half of) its stream: reads serve the buffer first. Body copies take one, so a request body
/// can stream up while the response streams down on the other half.
pub struct Source<'a, R> {
    pub buf: &'a mut Vec<u8>,
    pub io: &'a mut R,
}

impl<R: AsyncRead + Unpin> Source<'_, R> {
    /// Read one more chunk from the stream into the buffer; 0 means end of stream.
    pub async fn fill(&mut self, at_least: usize) -> io::Result<usize> {
        if self.buf.capacity() == 0 {
            *self.buf = spare_buffer();
        }
        self.buf.reserve(at_least);
        self.io.read_buf(self.buf).await
    }

    /// Parse a head with `parse`, reading as needed: up to `idle` for its first byte, then `head_timeout` for all.
    pub async fn read_head<T, E>(
        &mut self,
        idle: Duration,
        head_timeout: Duration,
        reparse: Reparse,
        mut parse: impl FnMut(&[u8]) -> Parsed<T, E>,
    ) -> Result<T, ReadHeadError<E>> {
        if self.buf.is_empty() {
            match tokio::time::timeout(idle, self.fill(HEAD_READ)).await {
                Ok(Ok(0)) => return Err(ReadHeadError::Closed),
                Err(_) => return Err(ReadHeadError::Idle),
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(ReadHeadError::Io(e)),
            }
        }
        let deadline = tokio::time::Instant::now() + head_timeout;
        let mut worth_parsing = true;
        loop {
            if worth_parsing {
                match parse(self.buf) {
                    Parsed::Done(value, used) => {
                        self.buf.drain(..used);
                        return Ok(value);
                    }
                    Parsed::Refuse(e) => return Err(ReadHeadError::Malformed(e)),
                    Parsed::NeedMore => {}
                }
            }
            let before = self.buf.len();
            match tokio::time::timeout_at(deadline, self.fill(HEAD_READ)).await {
                Ok(Ok(0)) => return Err(ReadHeadError::Io(io::ErrorKind::UnexpectedEof.into())),
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(ReadHeadError::Io(e)),
                Err(_) => return Err(ReadHeadError::Timeout),
            }
            worth_parsing = match reparse {
                Reparse::EveryRead => true,
                Reparse::OnLineEnd { max } => self.buf.len() > max || self.buf[before..].contains(&b'\n'),
            };
        }
    }

    /// Copy exactly `n` body bytes to `to`; the bytes after them stay in the buffer.
    pub async fn copy_exact<W: AsyncWrite + Unpin + ?Sized>(&mut self, to: &mut W, n: u64) -> io::Result<u64> {
        let from_buf = usize::try_from(n).unwrap_or(usize::MAX).min(self.buf.len());
        to.write_all(&self.buf[..from_buf]).await?;
        self.buf.drain(..from_buf);
        crate::relay::copy_exact(self.io, to, n - from_buf as u64).await?;
        Ok(n)
    }

    /// Relay a chunked body verbatim to `to`, stopping exactly at its end; returns the bytes relayed.
    pub async fn relay_chunked<W: AsyncWrite + Unpin + ?Sized>(&mut self, to: &mut W) -> io::Result<u64> {
        let mut scanner = ChunkedScanner::new();
        let mut total = 0u64;
        loop {
            if self.buf.is_empty() {
                self.buf.reserve(RELAY_BUF);
                if self.io.read_buf(self.buf).await? == 0 {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
            }
            let used = scanner.feed(self.buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            to.write_all(&self.buf[..used]).await?;
            self.buf.drain(..used);
            total += used as u64;
            if scanner.is_done() {
                return Ok(total);
            }
        }
    }

    /// Copy everything until the stream ends (a close-delimited response).
    pub async fn copy_to_end<W: AsyncWrite + Unpin + ?Sized>(&mut self, to: &mut W) -> io::Result<u64> {
        let pre = self.buf.len() as u64;
        to.write_all(self.buf).await?;
        self.buf.clear();
        Ok(pre + crate::relay::copy_to_end(self.io, to).await?)
    }
}

/// Reads serve the buffer first, then the socket.
impl<S: AsyncRead + Unpin> AsyncRead for BufConn<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, out: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if !self.buf.is_empty() {
            let n = self.buf.len().min(out.remaining());
            out.put_slice(&self.buf[..n]);
            self.buf.drain(..n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.io).poll_read(cx, out)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for BufConn<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, data)
    }
    // Vectored writes pass through: a TLS session flushes all its pending records in one `writev`.
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// The transport under a TLS session. rustls asks its transport for at most one record (≈ 16 KiB) per read, so a bulk
/// transfer would cost a syscall per record; this reads as much as is queued (a [`RELAY_BUF`], or a
/// [`COPY_BULK_BUF`] once a read filled one) and serves rustls from memory. The buffer is held only while it has unread
/// bytes, so an idle session holds none. Writes pass through, vectored.
pub struct TlsIo<S> {
    io: S,
    ahead: Option<Buf>,
    start: usize,
    end: usize,
    /// The last read filled its buffer: the next one uses a bulk buffer.
    bulk: bool,
}

impl<S> TlsIo<S> {
    pub fn new(io: S) -> Self {
        Self { io, ahead: None, start: 0, end: 0, bulk: false }
    }

    /// The transport.
    pub fn get_ref(&self) -> &S {
        &self.io
    }

    /// The transport.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.io
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for TlsIo<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, out: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.start == this.end {
            let mut buf = match this.ahead.take() {
                Some(buf) => buf,
                None if this.bulk => Buf::sized(COPY_BULK_BUF),
                None => Buf::take(),
            };
            let mut rb = ReadBuf::new(buf.bytes());
            // On Pending the buffer goes back to the free list: nothing is held while the socket is idle.
            ready!(Pin::new(&mut this.io).poll_read(cx, &mut rb))?;
            let n = rb.filled().len();
            this.bulk = n == rb.capacity();
            if n == 0 {
                return Poll::Ready(Ok(()));
            }
            (this.ahead, this.start, this.end) = (Some(buf), 0, n);
        }
        let Some(buf) = this.ahead.as_mut() else { return Poll::Ready(Ok(())) };
        let n = (this.end - this.start).min(out.remaining());
        out.put_slice(&buf.bytes()[this.start..this.start + n]);
        this.start += n;
        if this.start == this.end {
            this.ahead = None;
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for TlsIo<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, data)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{Discarded, Linger};

    /// A source giving `piece` bytes every `every`, `pieces` times (forever when `None`), counting what was taken.
    struct Paced {
        every: Duration,
        piece: u64,
        pieces: Option<u32>,
        taken: u32,
    }

    impl Discarded for Paced {
        async fn next_piece(&mut self) -> Option<u64> {
            if self.pieces.is_some_and(|n| self.taken == n) {
                return None;
            }
            tokio::time::sleep(self.every).await;
            self.taken += 1;
            Some(self.piece)
        }
    }

    const MS: Duration = Duration::from_millis(1);

    /// A buffer a connection gave back may serve the next connection's head, which then sees only its own bytes in
    /// it: not what the first connection left unread, nor what it read before.
    #[tokio::test(flavor = "current_thread")]
    async fn a_given_back_buffer_shows_the_next_connection_only_its_own_bytes() {
        use tokio::io::AsyncWriteExt;

        use super::{BufConn, Reparse};
        use crate::wire::Parsed;

        async fn read_line(conn: &mut BufConn<tokio::io::DuplexStream>) -> Vec<u8> {
            let line = |b: &[u8]| match b.iter().position(|&c| c == b'\n') {
                Some(end) => Parsed::Done(b[..=end].to_vec(), end + 1),
                None => Parsed::NeedMore,
            };
            let (idle, head) = (Duration::from_secs(5), Duration::from_secs(5));
            let read = conn.read_head::<_, ()>(idle, head, Reparse::EveryRead, line).await;
            read.unwrap_or_else(|_| panic!("no line"))
        }

        let (mut peer, io) = tokio::io::duplex(64 * 1024);
        let mut first = BufConn::new(io);
        peer.write_all(&[b's'; 4000]).await.unwrap();
        peer.write_all(b"\nLEFT UNREAD\n").await.unwrap();
        assert_eq!(read_line(&mut first).await.len(), 4001);
        assert_eq!(first.buf, b"LEFT UNREAD\n");
        first.into_io();

        let (mut peer, io) = tokio::io::duplex(64 * 1024);
        let mut second = BufConn::new(io);
        peer.write_all(b"GET / HTTP/1.1\n").await.unwrap();
        assert_eq!(read_line(&mut second).await, b"GET / HTTP/1.1\n");
        assert!(second.buf.is_empty(), "{:?}", String::from_utf8_lossy(&second.buf));
        second.release_if_empty();
        assert_eq!(second.buf.capacity(), 0, "a waiting connection holds no buffer");
    }

    async fn discard(linger: Linger, mut source: Paced) -> (u32, Duration) {
        let start = Instant::now();
        linger.discard(&mut source).await;
        (source.taken, start.elapsed())
    }

    #[tokio::test]
    async fn discarding_stops_at_the_end_of_what_comes() {
        let linger = Linger { bytes: 1 << 20, idle: 1000 * MS, total: 5000 * MS };
        let (taken, took) = discard(linger, Paced { every: MS, piece: 10, pieces: Some(3), taken: 0 }).await;
        assert_eq!(taken, 3);
        assert!(took < 1000 * MS, "{took:?}");
    }

    #[tokio::test]
    async fn discarding_stops_after_the_bytes_bound() {
        let linger = Linger { bytes: 100, idle: 1000 * MS, total: 5000 * MS };
        let (taken, _) = discard(linger, Paced { every: MS, piece: 10, pieces: None, taken: 0 }).await;
        assert_eq!(taken, 10, "100 bytes in pieces of 10, not one more read");
    }

    #[tokio::test]
    async fn discarding_stops_after_silence_and_after_the_total_time() {
        let silent = Linger { bytes: 1 << 20, idle: 50 * MS, total: 5000 * MS };
        let (taken, took) = discard(silent, Paced { every: 1000 * MS, piece: 1, pieces: None, taken: 0 }).await;
        assert_eq!(taken, 0);
        assert!(took >= 50 * MS && took < 1000 * MS, "stopped after the idle bound: {took:?}");
        let trickle = Linger { bytes: 1 << 20, idle: 100 * MS, total: 300 * MS };
        let (taken, took) = discard(trickle, Paced { every: 10 * MS, piece: 1, pieces: None, taken: 0 }).await;
        assert!(taken > 1, "a steady trickle is read");
        assert!(took >= 300 * MS && took < 2000 * MS, "but no longer than the total bound: {took:?}");
    }
}
