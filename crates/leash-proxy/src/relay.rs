//! Byte relays: the tunnel relay (both directions at once, half-close passed on) and bounded copies for message
//! bodies. A relay holds no buffer while its socket is idle, so an idle tunnel costs only its task and sockets.
//!
//! Bulk bytes go through user space in large buffers, not through `splice(2)`: measured on loopback (bench/RESULTS.md,
//! "Tunnel relay and inspected streams"), a client downloading through the spliced relay spent 0.77 CPU-s/GB
//! receiving against 0.33 behind 1 MiB writes, which cost more than the copy saves: the whole machine spent 0.52
//! CPU-s/GB over direct with splice, 0.14 with 1 MiB copies. Tried again with a 1 MiB pipe (commit 0933005,
//! reverted; bench/RESULTS.md, "spliced CONNECT bulk tried with a 1 MiB pipe"):
//! leash's CPU fell from 0.37 to 0.27 CPU-s/GB, the client's rose from 0.55 to 0.85 and the upstream's from 1.10 to
//! 1.22 (the client's profile: softirq work in its context from 1 % to 22 %, likely its acknowledgements freeing the
//! spliced pages, which the upstream's sender could not reuse while they were pinned).

use std::cell::RefCell;
use std::future::poll_fn;
use std::io;
use std::net::Shutdown;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::Poll;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::TcpStream;

/// Size of one relay read for chatty traffic and body copies. 64 KiB is one loopback segment at most and lets a
/// small burst move in one syscall; buffers come from a per-thread free list so a busy tunnel does not allocate per
/// burst.
pub const RELAY_BUF: usize = 64 * 1024;

/// Size of one read once a direction carries bulk data (a read filled a [`RELAY_BUF`]). Measured on loopback: behind
/// 1 MiB writes the receiving client spent 0.33 CPU-s/GB, behind 256 KiB ones 0.52 (larger segments per wake-up).
pub const BULK_BUF: usize = 1024 * 1024;

/// Size of one read of a body copy, and of the transport under a TLS session, once a read filled a [`RELAY_BUF`].
/// Smaller than [`BULK_BUF`] because a TLS stream works through it three times (read-ahead, plaintext, records):
/// measured on an inspected 1 GiB download, 1 MiB buffers cost 0.95 CPU-s/GB against 0.67 at 256 KiB and 0.68 at
/// 64 KiB (cache misses); 256 KiB still moves a plain-HTTP body in large writes.
pub const COPY_BULK_BUF: usize = 256 * 1024;

/// Free buffers kept per worker thread and size: enough for the bursts in flight on one thread; of the larger sizes
/// fewer, so a thread keeps at most a few MiB after a bulk transfer ends.
const FREE_BUFFERS: usize = 16;
const FREE_LARGE_BUFFERS: usize = 4;

/// Bytes of buffers larger than [`RELAY_BUF`] in use at once, process-wide. Beyond it a bulk transfer goes on with
/// [`RELAY_BUF`] buffers: a client opening thousands of tunnels and reading slowly (each holding a full buffer in a
/// pending write) then costs at most this much, not 1 MiB per direction. 64 MiB serves 32 concurrent bulk tunnels
/// at full size, more than two cores can feed.
pub const LARGE_BUFFER_BUDGET: usize = 64 * 1024 * 1024;

/// Bytes of large buffers handed out and not yet dropped.
static LARGE_IN_USE: AtomicUsize = AtomicUsize::new(0);

/// Free lists by buffer size.
type FreeLists = RefCell<Vec<(usize, Vec<Box<[u8]>>)>>;

thread_local! {
    static FREE: FreeLists = const { RefCell::new(Vec::new()) };
}

/// A relay buffer, returned to this thread's free list (of its size) on drop.
pub struct Buf(Option<Box<[u8]>>);

impl Buf {
    /// A [`RELAY_BUF`] buffer.
    pub fn take() -> Self {
        Self::sized(RELAY_BUF)
    }

    /// A [`BULK_BUF`] buffer.
    pub fn take_bulk() -> Self {
        Self::sized(BULK_BUF)
    }

    /// A buffer of `size` bytes (one of the sizes above: each size has its own free list); a [`RELAY_BUF`] one
    /// instead when large buffers in use would pass [`LARGE_BUFFER_BUDGET`].
    pub fn sized(size: usize) -> Self {
        let size = if size > RELAY_BUF && !reserve_large(size) { RELAY_BUF } else { size };
        let reused =
            FREE.with(|f| f.borrow_mut().iter_mut().find(|(s, _)| *s == size).and_then(|(_, list)| list.pop()));
        Buf(Some(reused.unwrap_or_else(|| vec![0u8; size].into_boxed_slice())))
    }

    pub fn bytes(&mut self) -> &mut [u8] {
        self.0.as_deref_mut().unwrap_or(&mut [])
    }
}

/// Count `size` bytes against the large-buffer budget; false (nothing counted) if they do not fit.
fn reserve_large(size: usize) -> bool {
    let before = LARGE_IN_USE.fetch_add(size, Ordering::Relaxed);
    if before + size > LARGE_BUFFER_BUDGET {
        LARGE_IN_USE.fetch_sub(size, Ordering::Relaxed);
        return false;
    }
    true
}

impl Drop for Buf {
    fn drop(&mut self) {
        if let Some(b) = self.0.take() {
            let size = b.len();
            if size > RELAY_BUF {
                LARGE_IN_USE.fetch_sub(size, Ordering::Relaxed);
            }
            let keep = if size <= RELAY_BUF { FREE_BUFFERS } else { FREE_LARGE_BUFFERS };
            FREE.with(|f| {
                let mut f = f.borrow_mut();
                match f.iter_mut().find(|(s, _)| *s == size) {
                    Some((_, list)) if list.len() < keep => list.push(b),
                    Some(_) => {}
                    None => f.push((size, vec![b])),
                }
            });
        }
    }
}

/// Relay a tunnel until both directions end. Returns bytes client→upstream and upstream→client.
pub async fn tunnel(client: &mut TcpStream, upstream: &mut TcpStream) -> (u64, u64) {
    let moved = Moved::default();
    tunnel_counted(client, upstream, &moved).await;
    moved.get()
}

/// The bytes a relay has moved so far, each way: readable while it runs, and after it was dropped (a tunnel cut by a
/// new policy still says what it carried).
#[derive(Debug, Default)]
pub struct Moved {
    up: AtomicU64,
    down: AtomicU64,
}

impl Moved {
    /// Bytes client→upstream and upstream→client.
    pub fn get(&self) -> (u64, u64) {
        (self.up.load(Ordering::Relaxed), self.down.load(Ordering::Relaxed))
    }
}

/// [`tunnel`], counting into `moved` as it goes.
pub async fn tunnel_counted(client: &mut TcpStream, upstream: &mut TcpStream, moved: &Moved) {
    let (client_rd, client_wr) = client.split();
    let (upstream_rd, upstream_wr) = upstream.split();
    tokio::join!(one_way(client_rd, upstream_wr, &moved.up), one_way(upstream_rd, client_wr, &moved.down));
}

/// Relay a tunnel whose upstream is a stream the socket calls cannot see through (the TLS session with an `https://`
/// upstream proxy): both directions copied in user space, each write flushed (a TLS session holds it otherwise), the
/// half-close passed on as a shutdown (`close_notify`, then FIN). An error in either direction ends both. Unlike
/// [`tunnel`], each direction holds its buffer while idle: a TLS stream cannot be waited on without reading it.
pub async fn tunnel_stream<U>(client: &mut TcpStream, upstream: &mut U, moved: &Moved)
where
    U: AsyncRead + AsyncWrite + Unpin,
{
    let (client_rd, client_wr) = client.split();
    let (upstream_rd, upstream_wr) = tokio::io::split(upstream);
    // `try_join!` drops the other direction at the first error; the counters keep what each had moved.
    let _ = tokio::try_join!(
        copy_flushed(client_rd, upstream_wr, &moved.up),
        copy_flushed(upstream_rd, client_wr, &moved.down)
    );
}

/// Copy `from` to `to` until `from` ends, flushing each burst, then shut `to` down; `total` counts what was written.
async fn copy_flushed<R, W>(mut from: R, mut to: W, total: &AtomicU64) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = Buf::take();
    loop {
        let got = read_burst(&mut from, buf.bytes()).await?;
        if got == 0 {
            break;
        }
        to.write_all(&buf.bytes()[..got]).await?;
        to.flush().await?;
        total.fetch_add(got as u64, Ordering::Relaxed);
        grow_if_filled(&mut buf, got);
    }
    // Pass the half-close on: the peer sees the end and may still answer the other way.
    to.shutdown().await
}

/// One direction until it ends; `moved` counts what it wrote, after each burst.
async fn one_way(mut from: ReadHalf<'_>, mut to: WriteHalf<'_>, moved: &AtomicU64) {
    let mut total = 0u64;
    // Whether the last burst was bulk: the next one then starts with a bulk buffer.
    let mut bulk = false;
    loop {
        if from.as_ref().readable().await.is_err() {
            break;
        }
        // The buffer is taken only once the socket is readable and given back when it would block again.
        let mut buf = if bulk { Buf::take_bulk() } else { Buf::take() };
        let step = drain_ready(&mut from, &mut to, buf.bytes(), &mut total).await;
        moved.store(total, Ordering::Relaxed);
        match step {
            Ok(Step::Eof) => break,
            Ok(Step::Idle) => bulk = false,
            Ok(Step::Bulk) => bulk = true,
            Err(_) => {
                let _ = socket2::SockRef::from(to.as_ref()).shutdown(Shutdown::Both);
                let _ = socket2::SockRef::from(from.as_ref()).shutdown(Shutdown::Both);
                return;
            }
        }
    }
    // Pass the half-close on: the peer sees EOF and may still answer the other way.
    let _ = socket2::SockRef::from(to.as_ref()).shutdown(Shutdown::Write);
}

/// What one burst of reading found.
enum Step {
    Eof,
    /// The socket is drained.
    Idle,
    /// More is probably waiting, and a larger buffer pays.
    Bulk,
}

/// Move what is readable now through a user-space buffer. A burst that moved at least [`RELAY_BUF`] is bulk: the next
/// one starts with a bulk buffer. Reads go through tokio's `poll_read`, which takes a short read as proof the socket
/// is drained (epoll is edge-triggered), so a small message costs one `recvfrom`, not a second one that says EAGAIN.
async fn drain_ready(
    from: &mut ReadHalf<'_>,
    to: &mut WriteHalf<'_>,
    buf: &mut [u8],
    total: &mut u64,
) -> io::Result<Step> {
    let mut moved = 0usize;
    loop {
        let n = match poll_once(from, buf).await {
            None => return Ok(if moved >= RELAY_BUF { Step::Bulk } else { Step::Idle }),
            Some(r) => r?,
        };
        if n == 0 {
            return Ok(Step::Eof);
        }
        to.write_all(&buf[..n]).await?;
        *total += n as u64;
        moved += n;
        match n == buf.len() {
            // A small buffer that filled: come back with a bulk one.
            true if buf.len() < BULK_BUF => return Ok(Step::Bulk),
            true => {}
            // A short read drained the socket (tokio cleared its readiness).
            false => return Ok(if moved >= RELAY_BUF { Step::Bulk } else { Step::Idle }),
        }
    }
}

/// One read attempt: `None` if nothing is readable now (the caller then waits without holding its buffer).
async fn poll_once<R: AsyncRead + Unpin + ?Sized>(from: &mut R, buf: &mut [u8]) -> Option<io::Result<usize>> {
    poll_fn(|cx| {
        let mut rb = ReadBuf::new(buf);
        match Pin::new(&mut *from).poll_read(cx, &mut rb) {
            Poll::Ready(Ok(())) => Poll::Ready(Some(Ok(rb.filled().len()))),
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e))),
            // A wake-up registered here is at most spurious.
            Poll::Pending => Poll::Ready(None),
        }
    })
    .await
}

/// Read what `from` has now into `buf`: the first read waits, the following ones take only what is ready without
/// waiting, so one write can carry many reads' worth (a TLS stream yields one record per read). 0 means the end.
async fn read_burst<R: AsyncRead + Unpin + ?Sized>(from: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = from.read(buf).await?;
    if got == 0 {
        return Ok(0);
    }
    while got < buf.len() {
        match poll_once(from, &mut buf[got..]).await {
            // Nothing more now (or the end, which the next read reports): write what we have.
            None | Some(Ok(0)) => break,
            Some(Ok(n)) => got += n,
            Some(Err(e)) => return Err(e),
        }
    }
    Ok(got)
}

/// Copy exactly `n` bytes from `from` to `to` (a Content-Length body). Errors if `from` ends early.
pub async fn copy_exact<R, W>(from: &mut R, to: &mut W, mut n: u64) -> io::Result<u64>
where
    R: AsyncRead + Unpin + ?Sized,
    W: AsyncWrite + Unpin + ?Sized,
{
    let total = n;
    let mut buf = Buf::take();
    while n > 0 {
        let want = buf.bytes().len().min(usize::try_from(n).unwrap_or(usize::MAX));
        let got = read_burst(from, &mut buf.bytes()[..want]).await?;
        if got == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        to.write_all(&buf.bytes()[..got]).await?;
        n -= got as u64;
        grow_if_filled(&mut buf, got);
    }
    Ok(total)
}

/// Copy until `from` ends (a close-delimited response body).
pub async fn copy_to_end<R, W>(from: &mut R, to: &mut W) -> io::Result<u64>
where
    R: AsyncRead + Unpin + ?Sized,
    W: AsyncWrite + Unpin + ?Sized,
{
    let mut total = 0u64;
    let mut buf = Buf::take();
    loop {
        let got = read_burst(from, buf.bytes()).await?;
        if got == 0 {
            return Ok(total);
        }
        to.write_all(&buf.bytes()[..got]).await?;
        total += got as u64;
        grow_if_filled(&mut buf, got);
    }
}

/// A body copy whose burst filled a small buffer is bulk: continue with a larger buffer (fewer, larger writes).
fn grow_if_filled(buf: &mut Buf, got: usize) {
    if got == RELAY_BUF && buf.bytes().len() == RELAY_BUF {
        *buf = Buf::sized(COPY_BULK_BUF);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_buffers_stay_within_the_budget_and_fall_back_to_small_ones() {
        let count = LARGE_BUFFER_BUDGET / BULK_BUF + 1;
        let mut held: Vec<Buf> = (0..count).map(|_| Buf::take_bulk()).collect();
        let large: usize = held.iter_mut().map(|b| b.bytes().len()).filter(|&n| n > RELAY_BUF).sum();
        assert!(large <= LARGE_BUFFER_BUDGET, "{large} bytes of large buffers");
        assert!(held.iter_mut().any(|b| b.bytes().len() == RELAY_BUF), "past the budget a small buffer is given");
        drop(held);
        assert_eq!(Buf::take_bulk().bytes().len(), BULK_BUF, "dropped buffers give their budget back");
    }
}
