//! Byte relays: the spliced tunnel (both directions at once, half-close passed on) and bounded copies for message
//! bodies. A relay holds no buffer while its socket is idle, so an idle tunnel costs only its task and sockets.

use std::cell::RefCell;
use std::io;
use std::net::Shutdown;

use std::os::fd::OwnedFd;

use rustix::pipe::{fcntl_setpipe_size, pipe_with, splice, PipeFlags, SpliceFlags};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, Interest};
use tokio::net::TcpStream;

/// Size of one relay read. 64 KiB matches the default TCP window growth steps and lets a bulk transfer move in few
/// syscalls; buffers come from a per-thread free list so a busy tunnel does not allocate per burst.
pub const RELAY_BUF: usize = 64 * 1024;

/// Free buffers kept per worker thread: enough for the bursts in flight on one thread.
const FREE_BUFFERS: usize = 16;

thread_local! {
    static FREE: RefCell<Vec<Box<[u8]>>> = const { RefCell::new(Vec::new()) };
}

/// A relay buffer, returned to this thread's free list on drop.
pub struct Buf(Option<Box<[u8]>>);

impl Buf {
    pub fn take() -> Self {
        let reused = FREE.with(|f| f.borrow_mut().pop());
        Buf(Some(reused.unwrap_or_else(|| vec![0u8; RELAY_BUF].into_boxed_slice())))
    }

    pub fn bytes(&mut self) -> &mut [u8] {
        self.0.as_deref_mut().unwrap_or(&mut [])
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        if let Some(b) = self.0.take() {
            FREE.with(|f| {
                let mut f = f.borrow_mut();
                if f.len() < FREE_BUFFERS {
                    f.push(b);
                }
            });
        }
    }
}

/// Relay a spliced tunnel until both directions end. Returns bytes client→upstream and upstream→client.
pub async fn tunnel(client: &TcpStream, upstream: &TcpStream) -> (u64, u64) {
    let (up, down) = tokio::join!(one_way(client, upstream), one_way(upstream, client));
    (up.unwrap_or_else(|e| e.0), down.unwrap_or_else(|e| e.0))
}

/// Bytes moved before an error ended a direction.
struct Partial(u64);

async fn one_way(from: &TcpStream, to: &TcpStream) -> Result<u64, Partial> {
    let mut total = 0u64;
    let mut splicer: Option<Splicer> = None;
    loop {
        if from.readable().await.is_err() {
            break;
        }
        let step = match &splicer {
            Some(pipe) => pipe.pump(from, to, &mut total).await,
            None => {
                let mut buf = Buf::take();
                drain_ready(from, to, buf.bytes(), &mut total).await
            }
        };
        match step {
            Ok(Step::Eof) => break,
            Ok(Step::Idle) => {}
            // A read filled the whole buffer: this is a bulk transfer, move it without copying through user space.
            Ok(Step::Bulk) if splicer.is_none() => splicer = Splicer::new().ok(),
            Ok(Step::Bulk) => {}
            Err(_) => {
                let _ = socket2::SockRef::from(to).shutdown(Shutdown::Both);
                let _ = socket2::SockRef::from(from).shutdown(Shutdown::Both);
                return Err(Partial(total));
            }
        }
    }
    // Pass the half-close on: the peer sees EOF and may still answer the other way.
    let _ = socket2::SockRef::from(to).shutdown(Shutdown::Write);
    Ok(total)
}

/// What one burst of reading found.
enum Step {
    Eof,
    /// The socket would block again.
    Idle,
    /// A read filled the buffer: more is probably waiting.
    Bulk,
}

/// Move what is readable now through a user-space buffer.
async fn drain_ready(from: &TcpStream, to: &TcpStream, buf: &mut [u8], total: &mut u64) -> io::Result<Step> {
    loop {
        match from.try_read(buf) {
            Ok(0) => return Ok(Step::Eof),
            Ok(n) => {
                write_all(to, &buf[..n]).await?;
                *total += n as u64;
                if n == buf.len() {
                    return Ok(Step::Bulk);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Step::Idle),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Bytes asked of one splice; the pipe is sized to hold them.
const SPLICE_CHUNK: usize = 256 * 1024;

/// A pipe for zero-copy relaying (`splice(2)` socket → pipe → socket), made only once a direction carries bulk
/// data, so idle and chatty tunnels spend no file descriptors on it.
struct Splicer {
    read: OwnedFd,
    write: OwnedFd,
}

impl Splicer {
    fn new() -> io::Result<Self> {
        let (read, write) = pipe_with(PipeFlags::NONBLOCK | PipeFlags::CLOEXEC)?;
        // A larger pipe means fewer syscalls per megabyte; failing to grow it only costs speed.
        let _ = fcntl_setpipe_size(&write, SPLICE_CHUNK);
        Ok(Self { read, write })
    }

    /// Splice what is readable now. The pipe is empty between calls, so EAGAIN on the way in means the socket is.
    async fn pump(&self, from: &TcpStream, to: &TcpStream, total: &mut u64) -> io::Result<Step> {
        let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
        loop {
            let moved = from.try_io(Interest::READABLE, || {
                splice(from, None, &self.write, None, SPLICE_CHUNK, flags).map_err(io::Error::from)
            });
            let mut left = match moved {
                Ok(0) => return Ok(Step::Eof),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Step::Idle),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            *total += left as u64;
            while left > 0 {
                let out = to.try_io(Interest::WRITABLE, || {
                    splice(&self.read, None, to, None, left, flags).map_err(io::Error::from)
                });
                match out {
                    Ok(n) => left -= n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => to.writable().await?,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
}

async fn write_all(to: &TcpStream, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        to.writable().await?;
        match to.try_write(data) {
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
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
        let got = from.read(&mut buf.bytes()[..want]).await?;
        if got == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        to.write_all(&buf.bytes()[..got]).await?;
        n -= got as u64;
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
        let got = from.read(buf.bytes()).await?;
        if got == 0 {
            return Ok(total);
        }
        to.write_all(&buf.bytes()[..got]).await?;
        total += got as u64;
    }
}
