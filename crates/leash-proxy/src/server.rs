//! The accept loop and the per-connection loop: bounded concurrency, one request head at a time (keep-alive and
//! pipelining, each request decided on its own), CONNECT handed to the tunnel, clean shutdown that lets in-flight
//! work finish within the drain timeout.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWrite;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

use crate::audit::refusal;
use crate::config::ProxyConfig;
use crate::conn::{BufConn, ReadHeadError, Reparse};
use crate::forward::{self, reply, Next};
use crate::refusal::Response;
use crate::shared::{Attempt, Shared};
use crate::tunnel;
use crate::wire::http_head::{parse_request_head, HeadError};

/// After a failed accept (out of file descriptors, say), wait this long before the next, instead of spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Serve the forward proxy on `listener` until `shutdown` completes, then let in-flight requests finish (at most
/// `limits.drain_timeout`) and flush the audit log.
pub async fn serve(listener: TcpListener, config: ProxyConfig, shutdown: impl Future<Output = ()>) -> io::Result<()> {
    let local = listener.local_addr()?;
    let max = config.limits.max_connections;
    let drain = config.limits.drain_timeout;
    let shared = Arc::new(Shared::new(config, &[local]));
    let permits = Arc::new(Semaphore::new(max));
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => p.map_err(io::Error::other)?,
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let (sh, stop) = (shared.clone(), stop_rx.clone());
        tokio::spawn(async move {
            connection(&sh, stream, peer, stop).await;
            drop(permit);
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    // Every connection holds a permit: having them all back means every connection has ended.
    let all = u32::try_from(max).unwrap_or(u32::MAX);
    if tokio::time::timeout(drain, permits.acquire_many(all)).await.is_err() {
        tracing::warn!("shutdown: connections still open after {drain:?}; closing them");
    }
    shared.cfg.audit.flush().map_err(io::Error::other)
}

/// One client connection: requests until it closes, goes idle, breaks a rule that ends it, or shutdown.
async fn connection(sh: &Arc<Shared>, stream: TcpStream, peer: SocketAddr, mut stop: watch::Receiver<bool>) {
    let _ = stream.set_nodelay(true);
    let mut client = BufConn::new(stream);
    let limits = &sh.cfg.limits;
    loop {
        let max = limits.max_head_bytes;
        let read = client.read_head(limits.idle_timeout, limits.head_timeout, Reparse::OnLineEnd { max }, |b| {
            parse_request_head(b, max)
        });
        let head = tokio::select! {
            r = read => r,
            _ = stop.changed() => return,
        };
        let head = match head {
            Ok(head) => head,
            Err(e) => return refuse_unreadable(sh, &mut client, e, peer).await,
        };
        if head.method == "CONNECT" {
            return tunnel::handle(sh, client, &head, peer).await;
        }
        if forward::handle(sh, &mut client, &head, peer).await == Next::Close || *stop.borrow() {
            return;
        }
    }
}

/// A head that could not be read: malformed ones get 400 (431 when too large) and a log line; the rest just close.
pub(crate) async fn refuse_unreadable<S: AsyncWrite + Unpin>(
    sh: &Shared,
    client: &mut BufConn<S>,
    e: ReadHeadError<HeadError>,
    peer: SocketAddr,
) {
    let (status, why) = match e {
        ReadHeadError::Malformed(HeadError::TooLarge) => (431, HeadError::TooLarge.to_string()),
        ReadHeadError::Malformed(e) => (400, e.to_string()),
        ReadHeadError::Timeout => (408, "request head not received in time".to_owned()),
        ReadHeadError::Closed | ReadHeadError::Idle | ReadHeadError::Io(_) => return,
    };
    let id = sh.cfg.audit.next_id();
    let attempt = Attempt { id, method: "-", host: "", port: 0, path: None, peer };
    let mut response = Response::bad_request(status, &why);
    if status == 408 {
        response.body = format!("leash: {why}\n");
    } else if sh.log_decision(&attempt, &refusal(leash_policy::Reason::BadRequest)).is_err() {
        response = Response::audit_failed();
    }
    reply(client, &response, false).await;
}
