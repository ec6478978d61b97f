//! The zero-copy half of the tunnel relay: bulk bytes of a pass-through tunnel go socket → pipe → socket with
//! `splice(2)`, so they never enter user space. Only [`crate::relay::tunnel`] uses it, and only once a direction
//! carries bulk data (a read filled a small buffer); chatty traffic keeps the copy path, which moves a small message
//! in one `recvfrom` and one `sendto`. Nothing here looks at the bytes: a tunnel whose bytes something must see
//! (inspection, an upstream proxy over TLS) never comes here.
//!
//! A pipe is held only while bytes are in flight: it goes back to a per-thread pool, empty, as soon as the socket
//! has nothing more to read, so an idle tunnel holds none. Pipes count against the relay's large-buffer budget.
//! Anything that keeps a pipe from being made (the fd limit, the per-user pipe quota refusing the larger size) or
//! a socket that cannot be spliced leaves the direction on the copy path.

use std::cell::RefCell;
use std::io;
use std::os::fd::{AsFd, OwnedFd};

use rustix::pipe::{fcntl_setpipe_size, pipe_with, splice, PipeFlags, SpliceFlags};
use tokio::io::Interest;
use tokio::net::TcpStream;

use crate::relay::{release_large, reserve_large, Step, BULK_BUF, RELAY_BUF};

/// Capacity of a relay pipe: as large as a bulk copy buffer. With the default 64 KiB pipe each splice carries at
/// most 16 pages, and the receiver gets the stream in that many small segments (bench/RESULTS.md, issue 28).
/// Linux's default `pipe-max-size` is 1 MiB, so an unprivileged proxy can ask for it.
pub(crate) const PIPE_SIZE: usize = BULK_BUF;

/// Empty pipes kept per worker thread for the next bulk burst: a pipe costs two descriptors and a `pipe2` +
/// `fcntl` to make, and a few concurrent bulk tunnels per thread is what two cores can feed.
const FREE_PIPES: usize = 4;

/// Bytes that went through a pipe, for the tests to see that the splice path was taken.
#[cfg(test)]
pub(crate) static SPLICED_BYTES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

thread_local! {
    static FREE: RefCell<Vec<Pipe>> = const { RefCell::new(Vec::new()) };
}

/// What one spliced burst came to.
pub(crate) enum Spliced {
    /// The burst ended as the copy path's would have.
    Done(io::Result<Step>),
    /// No pipe now (budget, descriptors, pipe quota): copy this burst.
    NoPipe,
    /// These sockets cannot be spliced (`EINVAL` before any byte moved): copy from now on.
    Unsupported,
}

/// Move what `from` has readable now to `to` through a pipe, then give the pipe back. Like the copy path's burst: a
/// burst of at least [`RELAY_BUF`] is bulk, the end of the stream is [`Step::Eof`] once every byte in the pipe has
/// been written.
pub(crate) async fn burst(from: &TcpStream, to: &TcpStream, total: &mut u64) -> Spliced {
    let Some(pipe) = Pipe::take() else { return Spliced::NoPipe };
    let result = pump(from, to, &pipe, total).await;
    release_large(PIPE_SIZE);
    match result {
        Err(Error::Unsupported) => {
            pipe.give_back();
            Spliced::Unsupported
        }
        // The pipe may still hold bytes: dropped, which closes it.
        Err(Error::Io(e)) => Spliced::Done(Err(e)),
        Ok(step) => {
            pipe.give_back();
            Spliced::Done(Ok(step))
        }
    }
}

enum Error {
    Unsupported,
    Io(io::Error),
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Io(e)
    }
}

/// Fill the pipe from `from` with what is readable, empty it into `to`, until `from` would block or ends. The pipe
/// is empty whenever this returns `Ok`.
async fn pump(from: &TcpStream, to: &TcpStream, pipe: &Pipe, total: &mut u64) -> Result<Step, Error> {
    let mut moved = 0usize;
    loop {
        let filled = match from.try_io(Interest::READABLE, || fill(from, pipe)) {
            Ok(0) => return Ok(Step::Eof),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return Ok(if moved >= RELAY_BUF { Step::Bulk } else { Step::Idle });
            }
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && moved == 0 => return Err(Error::Unsupported),
            Err(e) => return Err(e.into()),
        };
        empty(pipe, to, filled).await?;
        #[cfg(test)]
        SPLICED_BYTES.fetch_add(filled as u64, std::sync::atomic::Ordering::Relaxed);
        *total += filled as u64;
        moved += filled;
    }
}

/// One `splice` from the socket into the (empty) pipe: what is queued, up to the pipe's capacity. Because the pipe
/// is empty, `EAGAIN` can only mean the socket has nothing (a full pipe would say the same).
fn fill(from: &TcpStream, pipe: &Pipe) -> io::Result<usize> {
    Ok(splice(from.as_fd(), None, pipe.write.as_fd(), None, PIPE_SIZE, SpliceFlags::MOVE | SpliceFlags::NONBLOCK)?)
}

/// Write all `n` bytes in the pipe to `to`, waiting for it to take them. No `SPLICE_F_MORE`: within one call the
/// kernel already marks every segment but the last with `MSG_MORE`, and on the last it would hold back a partial
/// segment that nothing may follow (a request in a chatty protocol) until more data or a timer pushes it.
async fn empty(pipe: &Pipe, to: &TcpStream, mut n: usize) -> io::Result<()> {
    while n > 0 {
        to.writable().await?;
        let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
        match to.try_io(Interest::WRITABLE, || Ok(splice(pipe.read.as_fd(), None, to.as_fd(), None, n, flags)?)) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(w) => n -= w,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A pipe of [`PIPE_SIZE`]; counted against the large-buffer budget from [`Pipe::take`] until its burst ends.
struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
}

impl Pipe {
    /// A pipe from this thread's pool, or a new one; `None` if the budget is spent or none can be made.
    fn take() -> Option<Self> {
        if !reserve_large(PIPE_SIZE) {
            return None;
        }
        let pipe = FREE.with(|f| f.borrow_mut().pop()).or_else(Self::open);
        if pipe.is_none() {
            release_large(PIPE_SIZE);
        }
        pipe
    }

    fn open() -> Option<Self> {
        let (read, write) = pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK).ok()?;
        // A smaller pipe would cut the stream into small segments: copying is cheaper then (module doc).
        match fcntl_setpipe_size(&write, PIPE_SIZE) {
            Ok(size) if size >= PIPE_SIZE => Some(Pipe { read, write }),
            _ => None,
        }
    }

    /// Return an empty pipe to the pool (closed if the pool is full).
    fn give_back(self) {
        FREE.with(|f| {
            let mut f = f.borrow_mut();
            if f.len() < FREE_PIPES {
                f.push(self);
            }
        });
    }
}
