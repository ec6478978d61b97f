//! The accept loop and the per-connection loop: bounded concurrency, globally and per client ([`crate::fair`]), one
//! request head at a time (keep-alive and pipelining, each request decided on its own), CONNECT handed to the
//! tunnel, clean shutdown that lets in-flight work finish within the drain timeout.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit};

use crate::config::ProxyConfig;
use crate::conn::{BufConn, Next, ReadHeadError};
use crate::fair::{Admitted, ConnectionBound, Held};
use crate::forward;
use crate::limits::Limits;
use crate::request::{close_after, refuse_unreadable};
use crate::service::Listening;
use crate::shared::Shared;
use crate::tunnel;
use crate::wire::http_head::{HeadError, RequestHead};

/// The first byte of a TLS record carrying a handshake: what a transparent listener's TLS clients send first.
const TLS_HANDSHAKE: u8 = 0x16;
/// Bytes asked for when telling TLS from HTTP on a transparent listener (the rest of the head follows).
const TLS_PROBE: usize = 4096;

/// After a failed accept (out of file descriptors, say), wait this long before the next, instead of spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// At shutdown, how long a connection waits for the head of a request that may already be on its way: bytes the
/// client sent before the signal are in the socket buffer and read at once, so this only has to cover scheduling;
/// an idle keep-alive connection is closed after it.
const SHUTDOWN_HEAD_GRACE: Duration = Duration::from_millis(100);

/// How a listener's connections arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    /// Clients that use leash as their proxy (absolute-form requests, CONNECT).
    Proxy,
    /// Clients that connected to an allowed name's sandbox address on this port, unaware of any proxy: TLS is
    /// decided like a CONNECT to `<SNI host>:<port>`, plain HTTP like `http://<Host><target>` on this port.
    Transparent(u16),
}

/// Serve the forward proxy on `listener` until `shutdown` completes, then let in-flight requests finish (at most
/// `limits.drain_timeout`) and flush the audit log.
pub async fn serve(listener: TcpListener, config: ProxyConfig, shutdown: impl Future<Output = ()>) -> io::Result<()> {
    serve_with_transparent(listener, Vec::new(), config, shutdown).await
}

/// [`serve`], plus transparent listeners (`leash run`: bound on the address the DNS stub gives allowed names, one
/// per allowed port), all sharing one connection bound, upstream pool and audit log.
pub async fn serve_with_transparent(
    listener: TcpListener,
    transparent: Vec<TcpListener>,
    config: ProxyConfig,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    serve_listeners(Listeners { proxy: listener, transparent, services: Vec::new() }, config, shutdown).await
}

/// Every listener one proxy serves.
pub struct Listeners {
    /// Where clients that use leash as their proxy connect.
    pub proxy: TcpListener,
    /// Where programs unaware of any proxy connect (`leash run`'s allowed names resolve there), one per port.
    pub transparent: Vec<TcpListener>,
    /// The policy's `services`, each relayed to its target (see [`crate::service`]).
    pub services: Vec<crate::service::ServiceSocket>,
}

/// [`serve`] on all of `listeners`, sharing one connection bound, upstream pool and audit log.
pub async fn serve_listeners(
    listeners: Listeners,
    config: ProxyConfig,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let mut listening = vec![listeners.proxy.local_addr()?];
    let mut tcp = vec![(listeners.proxy, Entry::Proxy)];
    for l in listeners.transparent {
        let local = l.local_addr()?;
        listening.push(local);
        tcp.push((l, Entry::Transparent(local.port())));
    }
    let services = listeners
        .services
        .into_iter()
        .map(|s| Ok((s.name, Listening::new(s.listener)?)))
        .collect::<io::Result<Vec<_>>>()?;
    let fair = config
        .bound
        .clone()
        .unwrap_or_else(|| ConnectionBound::new(&config.limits, config.metrics.clone(), config.release_free_memory));
    let drain = config.limits.drain_timeout;
    let shared = Arc::new(Shared::new(config, &listening));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut accepting: Vec<_> = tcp
        .into_iter()
        .map(|(l, entry)| tokio::spawn(accept_loop(l, entry, shared.clone(), fair.clone(), stop_rx.clone())))
        .collect();
    for (name, l) in services {
        accepting.push(tokio::spawn(service_accept_loop(l, name, shared.clone(), fair.clone(), stop_rx.clone())));
    }
    accepting.push(tokio::spawn(retire_pools_on_swap(shared.clone(), stop_rx.clone())));
    shutdown.await;
    let _ = stop_tx.send(true);
    // Nobody is left to answer a question (the sandbox has ended, or the operator stops leash): each request held on
    // one is refused now, rather than keeping the drain, and the person, waiting for its timeout.
    if let Some(asking) = &shared.cfg.ask {
        asking.time_out_all();
    }
    for task in accepting {
        let _ = task.await;
    }
    // Every connection holds a permit: having them all back means every connection has ended.
    if !fair.all_closed(drain).await {
        tracing::warn!("shutdown: connections still open after {drain:?}; closing them");
    }
    shared.cfg.audit.flush().map_err(io::Error::other)
}

/// Until shutdown: when a new policy comes into force, close the idle upstream connections kept under the old one
/// (none would be taken again: the pools are keyed by generation).
async fn retire_pools_on_swap(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut changes = shared.cfg.policy.changes();
    loop {
        tokio::select! {
            changed = changes.changed() => if changed.is_err() { return },
            _ = stop.changed() => return,
        }
        let generation = *changes.borrow_and_update();
        let retired = shared.pool.retire_before(generation) + shared.inspected.retire_before(generation);
        if retired > 0 {
            tracing::debug!("policy generation {generation}: closed {retired} idle upstream connection(s)");
        }
    }
}

/// Accept on a service's listener until shutdown; each connection holds a permit of the shared bound and counts
/// against its client's (a Unix-socket service's clients are one client: they have no address).
async fn service_accept_loop(
    listener: Listening,
    name: Arc<str>,
    shared: Arc<Shared>,
    fair: ConnectionBound,
    mut stop: watch::Receiver<bool>,
) {
    let mut held = None;
    let accept = || async {
        let accepted = listener.accept().await?;
        let peer = accepted.peer;
        Ok((accepted, peer))
    };
    // Over its client's bound, closed: a service's client may speak anything, so an HTTP refusal would mean nothing.
    while let Ok((accepted, _, admitted)) = admit_next(&fair, &mut stop, &mut held, accept, drop).await {
        let (sh, name) = (shared.clone(), name.clone());
        tokio::spawn(async move {
            crate::service::connection(&sh, &name, accepted).await;
            drop(admitted);
        });
    }
}

/// Accept on one listener until shutdown; each connection holds a permit of the shared bound and counts against its
/// client's. A connection over its client's bound is refused (a 503 to a proxy client, closed on a transparent
/// listener, whose client may speak TLS) and the permit kept for the next.
async fn accept_loop(
    listener: TcpListener,
    entry: Entry,
    shared: Arc<Shared>,
    fair: ConnectionBound,
    mut stop: watch::Receiver<bool>,
) {
    let mut held = None;
    loop {
        let refuse = |stream| fair.refuse(stream, entry == Entry::Proxy);
        match admit_next(&fair, &mut stop, &mut held, || listener.accept(), refuse).await {
            Ok((stream, peer, admitted)) => {
                let (sh, stop) = (shared.clone(), stop.clone());
                tokio::spawn(async move { connection(&sh, stream, peer, entry, stop, admitted).await });
            }
            Err(Some(permit)) => return drain_backlog(listener, entry, &shared, &fair, &stop, permit),
            Err(None) => return,
        }
    }
}

/// The next connection `accept` gives, admitted: a permit of the global bound (the one `held` over from a refusal,
/// or a new one) and a place in its client's bound; one over its client's bound goes to `refuse` and the loop goes
/// on. At shutdown, `Err` with the permit taken for it, if any (for the backlog drain).
async fn admit_next<S, F, Fut>(
    fair: &ConnectionBound,
    stop: &mut watch::Receiver<bool>,
    held: &mut Option<OwnedSemaphorePermit>,
    mut accept: F,
    refuse: impl Fn(S),
) -> Result<(S, SocketAddr, Admitted), Option<OwnedSemaphorePermit>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = io::Result<(S, SocketAddr)>>,
{
    loop {
        let permit = match held.take() {
            Some(p) => p,
            None => fair.permit(stop).await.ok_or(None)?,
        };
        let (stream, peer) = tokio::select! {
            accepted = accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    *held = Some(permit);
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            _ = stop.changed() => return Err(Some(permit)),
        };
        match fair.admit(peer.ip(), permit) {
            Ok(admitted) => return Ok((stream, peer, admitted)),
            Err(permit) => {
                refuse(stream);
                *held = Some(permit);
            }
        }
    }
}

/// At shutdown: serve the connections the kernel already completed (their clients sent requests before the
/// signal) instead of resetting them with the listener; the first uses the permit already taken. Accepts directly
/// on the socket: the runtime may not have seen their readiness yet.
fn drain_backlog(
    listener: TcpListener,
    entry: Entry,
    shared: &Arc<Shared>,
    fair: &ConnectionBound,
    stop: &watch::Receiver<bool>,
    permit: OwnedSemaphorePermit,
) {
    let Ok(listener) = listener.into_std() else { return };
    let mut permit = Some(permit);
    while let Ok((stream, peer)) = listener.accept() {
        let Some(held) = permit.take().or_else(|| fair.try_permit()) else { return };
        let admitted = match fair.admit(peer.ip(), held) {
            Ok(a) => a,
            Err(held) => {
                permit = Some(held);
                continue;
            }
        };
        let Ok(stream) = stream.set_nonblocking(true).and_then(|()| TcpStream::from_std(stream)) else { continue };
        let (sh, stop) = (shared.clone(), stop.clone());
        tokio::spawn(async move { connection(&sh, stream, peer, entry, stop, admitted).await });
    }
}

/// One client connection: requests until it closes, goes idle, breaks a rule that ends it, or shutdown. While it
/// waits for a request head it holds no read buffer and may be closed to make room ([`wait_idle`]).
async fn connection(
    sh: &Arc<Shared>,
    stream: TcpStream,
    peer: SocketAddr,
    entry: Entry,
    mut stop: watch::Receiver<bool>,
    admitted: Admitted,
) {
    let held = Held::new(admitted, sh.cfg.metrics.connection_opened());
    let _ = stream.set_nodelay(true);
    let mut client = BufConn::new(stream);
    let limits = &sh.cfg.limits;
    if let Entry::Transparent(port) = entry {
        if wait_idle(&mut client, &held.admitted, limits.idle_timeout, &mut stop).await == Idle::Close {
            return;
        }
        match tokio::time::timeout(limits.idle_timeout, client.source().fill(TLS_PROBE)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return,
        }
        if client.buf[0] == TLS_HANDSHAKE {
            return tunnel::transparent(sh, client, port, peer, held).await;
        }
    }
    loop {
        if wait_idle(&mut client, &held.admitted, limits.idle_timeout, &mut stop).await == Idle::Close {
            return;
        }
        let Some(head) = read_head_or_stop(&mut client, limits, &mut stop).await else { return };
        let mut head = match head {
            Ok(head) => head,
            Err(e) => return refuse_unreadable(sh, &mut client, e, peer).await,
        };
        if let Entry::Transparent(port) = entry {
            head.target = absolute_for_transparent(&head, port);
        }
        if entry == Entry::Proxy && is_readiness(&head) {
            if answer_ready(&mut client, &head).await.is_err() {
                return;
            }
            continue;
        }
        if head.method == "CONNECT" {
            return tunnel::handle(sh, client, &head, peer, held).await;
        }
        if forward::handle(sh, &mut client, &head, peer).await == Next::Close {
            return close_after(&mut client, &head).await;
        }
        if *stop.borrow() {
            return;
        }
    }
}

/// The path of the proxy's readiness endpoint: a harness polls it until leash serves (benchflow's `GET /healthz`).
const READINESS_PATH: &str = "/healthz";

/// Whether `head` asks the proxy itself whether it is ready: `GET` or `HEAD` of [`READINESS_PATH`] in origin form,
/// which no proxied request is (a proxy's requests name their host). It is no request to decide: never logged, never
/// counted as a refusal.
fn is_readiness(head: &RequestHead) -> bool {
    matches!(head.method.as_str(), "GET" | "HEAD") && head.target == READINESS_PATH
}

/// `200 ok`, keeping the connection (a poller may ask again on it).
async fn answer_ready(client: &mut BufConn<TcpStream>, head: &RequestHead) -> io::Result<()> {
    use tokio::io::AsyncWriteExt as _;
    let body = if head.method == "HEAD" { "" } else { "ok\n" };
    let answer = format!("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 3\r\n\r\n{body}");
    client.write_all(answer.as_bytes()).await?;
    client.flush().await
}

/// The next request head, or `None` when shutdown closes the connection first: a head already arriving when
/// shutdown begins was sent before it and is read, briefly, as is one on a connection first served after it began
/// (accepted just before, or drained after). Its own function: the pinned read, held across several waits, kept its
/// place in `connection`'s future in every state, a tunnel's included, for as long as the connection was open.
async fn read_head_or_stop(
    client: &mut BufConn<TcpStream>,
    limits: &Limits,
    stop: &mut watch::Receiver<bool>,
) -> Option<Result<RequestHead, ReadHeadError<HeadError>>> {
    let read = crate::request::read_request_head(client, limits);
    tokio::pin!(read);
    if *stop.borrow() {
        return tokio::time::timeout(SHUTDOWN_HEAD_GRACE, &mut read).await.ok();
    }
    tokio::select! {
        r = &mut read => Some(r),
        _ = stop.changed() => tokio::time::timeout(SHUTDOWN_HEAD_GRACE, &mut read).await.ok(),
    }
}

/// How an idle wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Idle {
    /// Bytes arrived, or shutdown began (a head may be on its way: the caller reads it, briefly), or the buffer
    /// already holds the next head's start (pipelining): read the head.
    Read,
    /// Nothing within the idle timeout, or leash closes it to make room for another connection.
    Close,
}

/// Before a request head: if nothing of it is buffered yet, drop the read buffer (an idle keep-alive connection
/// then costs no buffer) and wait for the first byte as an idle connection that may be closed to make room.
async fn wait_idle(
    client: &mut BufConn<TcpStream>,
    admitted: &Admitted,
    idle_timeout: Duration,
    stop: &mut watch::Receiver<bool>,
) -> Idle {
    if !client.buf.is_empty() || *stop.borrow() {
        return Idle::Read;
    }
    client.release_if_empty();
    let idle = admitted.idle();
    let waited = tokio::time::timeout(idle_timeout, async {
        tokio::select! {
            _ = client.io.readable() => Idle::Read,
            _ = stop.changed() => Idle::Read,
            () = idle.closing() => Idle::Close,
        }
    });
    waited.await.unwrap_or(Idle::Close)
}

/// The absolute-form target an origin-form request to a transparent listener stands for: `http://<Host's
/// host>:<listener port><target>`. The Host's own port must then agree (`forward`'s Host check); a request without
/// a usable Host is left as it is, and `forward` refuses it (400: not absolute-form).
fn absolute_for_transparent(head: &RequestHead, port: u16) -> String {
    if !head.target.starts_with('/') {
        return head.target.clone();
    }
    let host = head.values("host").next().and_then(|v| std::str::from_utf8(v).ok());
    match host.and_then(|h| leash_policy::parse_authority(h).ok()) {
        Some(authority) => format!("http://{}:{port}{}", authority.host.as_str(), head.target),
        None => head.target.clone(),
    }
}
