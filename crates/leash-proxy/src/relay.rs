//! Byte relays: the spliced tunnel (both directions at once, half-close passed on) and bounded copies for message
//! bodies. A relay holds no buffer while its socket is idle, so an idle tunnel costs only its task and sockets.

use std::cell::RefCell;
use std::io;
use std::net::Shutdown;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
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
    loop {
        if from.readable().await.is_err() {
            break;
        }
        let mut buf = Buf::take();
        match drain_ready(from, to, buf.bytes(), &mut total).await {
            Ok(true) => break,
            Ok(false) => continue,
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

/// Move what is readable now. `Ok(true)` on EOF, `Ok(false)` when the socket would block again.
async fn drain_ready(from: &TcpStream, to: &TcpStream, buf: &mut [u8], total: &mut u64) -> io::Result<bool> {
    loop {
        match from.try_read(buf) {
            Ok(0) => return Ok(true),
            Ok(n) => {
                write_all(to, &buf[..n]).await?;
                *total += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
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
