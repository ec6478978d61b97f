//! A connection to an upstream, whichever way it was reached: plain TCP, or the TLS session with an `https://`
//! upstream proxy; and an inspected tunnel's TLS session over one. Dialing makes one (`dial.rs`), the pools keep idle
//! ones (`pool.rs`); both only need these types.

use std::io;
use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client;

use crate::conn::TlsIo;
use crate::pool::Quiet;

/// The TLS session with an `https://` upstream proxy.
pub(crate) type ProxySession = client::TlsStream<TlsIo<TcpStream>>;

/// An inspected tunnel's TLS session with its upstream (inside the session with an `https://` upstream proxy, if
/// there is one). Here, not in `inspect`, because the pool of the sessions tunnels leave clean (`Shared`) holds it.
pub(crate) type UpstreamTls = client::TlsStream<TlsIo<UpstreamIo>>;

impl Quiet for UpstreamTls {
    fn is_quiet(&mut self) -> bool {
        reads_nothing_now(self)
    }
}

/// A connection to an upstream: plain TCP (the destination, or an `http://` upstream proxy), or the TLS session
/// with an `https://` upstream proxy. Only the second needs user-space copies where TCP could be relayed by the
/// socket alone (`relay::tunnel`); everything else reads and writes either alike.
pub(crate) enum UpstreamIo {
    Tcp(TcpStream),
    Tls(Box<ProxySession>),
}

impl Quiet for UpstreamIo {
    /// A TLS session is polled once without waiting (see [`reads_nothing_now`]).
    fn is_quiet(&mut self) -> bool {
        match self {
            UpstreamIo::Tcp(tcp) => {
                let mut probe = [0u8; 1];
                matches!(tcp.try_read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
            }
            UpstreamIo::Tls(session) => reads_nothing_now(&mut **session),
        }
    }
}

/// Whether `io` has nothing to read now: polled once without waiting. A TLS session takes in the records that carry
/// no data (a session ticket) on the way, and reads a close or an error as something.
pub(crate) fn reads_nothing_now<R: AsyncRead + Unpin>(io: &mut R) -> bool {
    let mut probe = [0u8; 1];
    let mut buf = ReadBuf::new(&mut probe);
    let mut cx = Context::from_waker(std::task::Waker::noop());
    Pin::new(io).poll_read(&mut cx, &mut buf).is_pending()
}

impl AsyncRead for UpstreamIo {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamIo::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            UpstreamIo::Tls(s) => Pin::new(&mut **s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for UpstreamIo {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            UpstreamIo::Tcp(s) => Pin::new(s).poll_write(cx, data),
            UpstreamIo::Tls(s) => Pin::new(&mut **s).poll_write(cx, data),
        }
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            UpstreamIo::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            UpstreamIo::Tls(s) => Pin::new(&mut **s).poll_write_vectored(cx, bufs),
        }
    }
    fn is_write_vectored(&self) -> bool {
        match self {
            UpstreamIo::Tcp(s) => s.is_write_vectored(),
            UpstreamIo::Tls(s) => s.is_write_vectored(),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamIo::Tcp(s) => Pin::new(s).poll_flush(cx),
            UpstreamIo::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamIo::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            UpstreamIo::Tls(s) => Pin::new(&mut **s).poll_shutdown(cx),
        }
    }
}
