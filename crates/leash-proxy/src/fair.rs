//! Fairness under pressure: the global connection bound, a bound per client address below it, closing idle
//! keep-alive connections (the greediest client's, oldest first) when the global bound is near so that new clients
//! are still accepted, and giving memory back once a burst of connections has closed.
//!
//! A client is a peer address: for `leash proxy`, each machine or container that uses it; inside one `leash run`
//! sandbox (or one attached container) every connection comes from one address, so the bound there is per sandbox.
//! A connection over its client's bound is refused before it takes a part of the global bound: a proxy client gets
//! a `503` (it speaks HTTP to leash, so it can show why), a transparent or service client is closed (it may speak
//! TLS or anything else; bytes it cannot read would help no one).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::conn::close_gracefully;
use crate::limits::Limits;
use crate::refusal::Response;

/// Below this many free connections per [`PRESSURE_SHARE`] of the bound, every accept closes one idle keep-alive
/// connection: an eighth is room enough for a burst of new clients, and small enough that idle connections are kept
/// as long as nobody needs their place.
const PRESSURE_SHARE: usize = 8;

/// A connection idle for less than this is not closed to make room: a keep-alive client sends its next request
/// right after the last response, and a new connection's first request is usually in flight. A second separates
/// those from connections a client keeps for later, and bounds how long a new client may wait for room.
const RECLAIM_MIN_IDLE: Duration = Duration::from_secs(1);

/// With no free connection and none idle long enough to close, look again after this long (or as soon as a
/// connection ends). Short beside [`RECLAIM_MIN_IDLE`], long enough not to spin.
const RECLAIM_RETRY: Duration = Duration::from_millis(100);

/// Refusals over a client's bound being written at once; beyond, the connection is closed without a word, so a
/// client that keeps opening connections cannot make leash hold more than this many extra sockets.
const REFUSALS_IN_FLIGHT: usize = 64;

/// How long writing a refusal may take (a client that does not read it is not waited for).
const REFUSAL_WRITE: Duration = Duration::from_secs(1);

/// Give memory back once the open connections fall to a quarter of their peak, if that peak was at least this many
/// (about 20 MB at the ≈ 20 kB a held connection costs: below, a trim's walk over the heap is not worth it).
const TRIM_AFTER: usize = 1024;

/// Wait this long after the fall before trimming, so the rest of a burst closes first and one trim serves it.
const TRIM_SETTLE: Duration = Duration::from_millis(500);

/// The connection bounds of one proxy, shared by all its listeners.
pub(crate) struct Fair {
    /// One permit per connection of the global bound.
    permits: Arc<Semaphore>,
    max: usize,
    per_client: usize,
    state: Mutex<State>,
    /// Refusals being written ([`REFUSALS_IN_FLIGHT`]).
    refusals: Arc<Semaphore>,
    /// A trim is scheduled: one at a time.
    trimming: Arc<AtomicBool>,
    /// What gives free heap memory back to the system (see [`crate::ProxyConfig::release_free_memory`]).
    release_free_memory: Option<fn()>,
    /// Where refusals and reclaimed connections are counted.
    metrics: Arc<crate::metrics::Metrics>,
}

/// A client: its address, within one scope (an attachment of `leash attach --dir`; 0 for a proxy alone), so the
/// loopback clients of two pods are two clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct ClientKey {
    scope: u32,
    ip: IpAddr,
}

impl std::fmt::Display for ClientKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.scope {
            0 => write!(f, "{}", self.ip),
            scope => write!(f, "{} (attachment {scope})", self.ip),
        }
    }
}

#[derive(Default)]
struct State {
    clients: HashMap<ClientKey, Client>,
    /// Connections open now, and their peak since the last trim.
    open: usize,
    peak: usize,
    /// Numbers idle periods in the order they began: a client's first idle entry is its oldest.
    next_idle: u64,
}

#[derive(Default)]
struct Client {
    open: usize,
    /// Connections waiting for their next request head, by when they began to wait.
    idle: BTreeMap<u64, Idle>,
    /// A refusal of this client has been reported since it last had no connection (one warning per episode).
    warned: bool,
}

struct Idle {
    since: Instant,
    close: Arc<Notify>,
}

/// A connection admitted: its part of the global bound and of its client's. Dropping it ends both.
pub(crate) struct Admitted {
    fair: Arc<Fair>,
    client: ClientKey,
    _permit: OwnedSemaphorePermit,
}

/// What an open client connection holds until it ends, whichever task serves it: its place in the connection bounds
/// and its count in `leash_connections_open`. A tunnel hands it to the small task that relays its bytes (so it lives
/// here, below both the accept loop and the tunnel).
pub(crate) struct Held {
    pub admitted: Admitted,
    _open: crate::metrics::OpenConnection,
}

impl Held {
    pub(crate) fn new(admitted: Admitted, open: crate::metrics::OpenConnection) -> Self {
        Held { admitted, _open: open }
    }
}

/// A connection registered as idle until dropped; [`IdleGuard::closing`] completes when leash wants its place.
pub(crate) struct IdleGuard<'a> {
    admitted: &'a Admitted,
    seq: u64,
    close: Arc<Notify>,
}

/// The connection bound a proxy serves under: its own, or a share of one several proxies use (`leash attach --dir`:
/// one bound for the node, each attachment a scope of its own, so one pod's clients are never another's and no pod
/// can hold more than its client bound of the node's connections).
#[derive(Clone)]
pub struct ConnectionBound {
    pub(crate) fair: Arc<Fair>,
    pub(crate) scope: u32,
}

impl ConnectionBound {
    /// A bound of `limits.max_connections`, `limits.connections_per_client()` per client, counted in `metrics`;
    /// after a burst of connections, `release_free_memory` (if any) gives the memory they held back.
    pub fn new(
        limits: &Limits,
        metrics: Arc<crate::metrics::Metrics>,
        release_free_memory: Option<fn()>,
    ) -> ConnectionBound {
        ConnectionBound { fair: Fair::new(limits, metrics, release_free_memory), scope: 0 }
    }

    /// The same bound for another proxy, whose clients are its own (scope 0 is [`ConnectionBound::new`]'s).
    pub fn scope(&self, scope: u32) -> ConnectionBound {
        ConnectionBound { fair: self.fair.clone(), scope }
    }

    /// A part of the global bound for the next connection (see [`Fair::permit`]).
    pub(crate) async fn permit(&self, stop: &mut watch::Receiver<bool>) -> Option<OwnedSemaphorePermit> {
        self.fair.permit(stop).await
    }

    /// A permit if one is free now (see [`Fair::try_permit`]).
    pub(crate) fn try_permit(&self) -> Option<OwnedSemaphorePermit> {
        self.fair.try_permit()
    }

    /// Refuse a connection over its client's bound (see [`Fair::refuse`]).
    pub(crate) fn refuse(&self, stream: TcpStream, http: bool) {
        self.fair.refuse(stream, http);
    }

    /// Count a connection from `peer` of this scope against its client's bound (see [`Fair::admit`]).
    pub(crate) fn admit(&self, peer: IpAddr, permit: OwnedSemaphorePermit) -> Result<Admitted, OwnedSemaphorePermit> {
        self.fair.admit(self.scope, peer, permit)
    }

    /// Wait until every connection of this scope has ended, at most `drain`; false if some were still open.
    pub(crate) async fn all_closed(&self, drain: Duration) -> bool {
        if self.scope == 0 {
            return self.fair.all_closed(drain).await;
        }
        let scope = self.scope;
        let closed = async {
            while self.fair.lock().clients.keys().any(|k| k.scope == scope) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(drain, closed).await.is_ok()
    }
}

impl Fair {
    pub fn new(limits: &Limits, metrics: Arc<crate::metrics::Metrics>, release_free_memory: Option<fn()>) -> Arc<Self> {
        Arc::new(Self {
            permits: Arc::new(Semaphore::new(limits.max_connections)),
            max: limits.max_connections,
            per_client: limits.connections_per_client(),
            state: Mutex::default(),
            refusals: Arc::new(Semaphore::new(REFUSALS_IN_FLIGHT)),
            trimming: Arc::default(),
            release_free_memory,
            metrics,
        })
    }

    /// A part of the global bound, for the next connection to accept; `None` at shutdown. When none is free, idle
    /// keep-alive connections are closed to make one, so accepting goes on while any can be.
    pub async fn permit(&self, stop: &mut watch::Receiver<bool>) -> Option<OwnedSemaphorePermit> {
        loop {
            if let Ok(permit) = self.permits.clone().try_acquire_owned() {
                if self.permits.available_permits() < self.max / PRESSURE_SHARE {
                    self.reclaim_one();
                }
                return Some(permit);
            }
            self.reclaim_one();
            tokio::select! {
                p = self.permits.clone().acquire_owned() => return p.ok(),
                _ = tokio::time::sleep(RECLAIM_RETRY) => {}
                _ = stop.changed() => return None,
            }
        }
    }

    /// A permit if one is free now (shutdown's backlog drain).
    pub fn try_permit(&self) -> Option<OwnedSemaphorePermit> {
        self.permits.clone().try_acquire_owned().ok()
    }

    /// Count a connection from `peer` against its client's bound; `None` if the client already holds its bound (the
    /// permit is handed back, for the next connection).
    pub fn admit(
        self: &Arc<Self>,
        scope: u32,
        peer: IpAddr,
        permit: OwnedSemaphorePermit,
    ) -> Result<Admitted, OwnedSemaphorePermit> {
        let client = ClientKey { scope, ip: peer.to_canonical() };
        let mut state = self.lock();
        let entry = state.clients.entry(client).or_default();
        if entry.open >= self.per_client {
            if !std::mem::replace(&mut entry.warned, true) {
                tracing::warn!(
                    "client {client} holds its limit of {} connections; further ones are refused until some close",
                    self.per_client
                );
            }
            self.metrics.count_over_client_bound();
            return Err(permit);
        }
        entry.open += 1;
        state.open += 1;
        state.peak = state.peak.max(state.open);
        Ok(Admitted { fair: self.clone(), client, _permit: permit })
    }

    /// Refuse a connection over its client's bound: a 503 if `http` (written on a task of its own, at most
    /// [`REFUSALS_IN_FLIGHT`] at once), else, or when too many are being written, closed at once.
    pub fn refuse(&self, mut stream: TcpStream, http: bool) {
        let Some(slot) = self.refusals.clone().try_acquire_owned().ok().filter(|_| http) else { return };
        let response = over_client_bound(self.per_client).to_bytes(false);
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            if let Ok(Ok(())) = tokio::time::timeout(REFUSAL_WRITE, stream.write_all(&response)).await {
                close_gracefully(&mut stream).await;
            }
            drop(slot);
        });
    }

    /// Wait until every connection has ended, at most `drain`; false if some were still open.
    pub async fn all_closed(&self, drain: Duration) -> bool {
        let all = u32::try_from(self.max).unwrap_or(u32::MAX);
        tokio::time::timeout(drain, self.permits.acquire_many(all)).await.is_ok()
    }

    /// Close one idle connection, if any has been idle long enough: the oldest of the client holding the most
    /// connections. True if one was told to close.
    fn reclaim_one(&self) -> bool {
        let now = Instant::now();
        let mut state = self.lock();
        let ripe = |c: &Client| c.idle.first_key_value().is_some_and(|(_, i)| now - i.since >= RECLAIM_MIN_IDLE);
        let greediest = state.clients.iter_mut().filter(|(_, c)| ripe(c)).max_by_key(|(_, c)| c.open);
        let Some((client, c)) = greediest else { return false };
        let Some((_, idle)) = c.idle.pop_first() else { return false };
        tracing::debug!("connections near their limit: closing an idle keep-alive connection of {client}");
        idle.close.notify_one();
        self.metrics.count_idle_reclaimed();
        true
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding it; a poisoned lock still holds consistent counts.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// After a connection ended: once a burst has fallen to a quarter of its peak, give its memory back.
    fn maybe_trim(&self, state: &mut State) {
        let Some(release) = self.release_free_memory else { return };
        if state.peak < TRIM_AFTER || state.open > state.peak / 4 || self.trimming.swap(true, Ordering::AcqRel) {
            return;
        }
        state.peak = state.open;
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(trim_later(self.trimming.clone(), release))),
            Err(_) => self.trimming.store(false, Ordering::Release),
        }
    }
}

/// Sleep [`TRIM_SETTLE`], then give free heap memory back on a blocking thread (the walk takes milliseconds).
async fn trim_later(trimming: Arc<AtomicBool>, release: fn()) {
    tokio::time::sleep(TRIM_SETTLE).await;
    let _ = tokio::task::spawn_blocking(release).await;
    trimming.store(false, Ordering::Release);
}

impl Admitted {
    /// Register this connection as idle (waiting for its next request head) while the guard lives.
    pub fn idle(&self) -> IdleGuard<'_> {
        let close = Arc::new(Notify::new());
        let mut state = self.fair.lock();
        let seq = state.next_idle;
        state.next_idle += 1;
        if let Some(c) = state.clients.get_mut(&self.client) {
            c.idle.insert(seq, Idle { since: Instant::now(), close: close.clone() });
        }
        IdleGuard { admitted: self, seq, close }
    }
}

impl IdleGuard<'_> {
    /// Completes when leash closes this idle connection to make room for another.
    pub async fn closing(&self) {
        self.close.notified().await;
    }
}

impl Drop for IdleGuard<'_> {
    fn drop(&mut self) {
        let mut state = self.admitted.fair.lock();
        if let Some(c) = state.clients.get_mut(&self.admitted.client) {
            c.idle.remove(&self.seq);
        }
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let fair = &self.fair;
        let mut state = fair.lock();
        if let Some(c) = state.clients.get_mut(&self.client) {
            c.open -= 1;
            if c.open == 0 {
                state.clients.remove(&self.client);
            }
        }
        state.open -= 1;
        fair.maybe_trim(&mut state);
    }
}

/// The 503 a proxy client gets for a connection over its bound.
fn over_client_bound(per_client: usize) -> Response {
    let body = format!(
        "leash: connection refused: this client already holds leash's per-client connection limit \
         ({per_client} connections); close some and retry\n"
    );
    Response { status: 503, reason: None, body }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    fn fair(max: usize, per_client: usize) -> Arc<Fair> {
        let limits = Limits { max_connections: max, max_connections_per_client: Some(per_client), ..Limits::default() };
        Fair::new(&limits, Arc::default(), None)
    }

    fn admit(fair: &Arc<Fair>, ip: IpAddr) -> Option<Admitted> {
        let permit = fair.try_permit()?;
        fair.admit(0, ip, permit).ok()
    }

    #[test]
    fn a_client_over_its_bound_is_refused_and_its_permit_handed_back() {
        let fair = fair(8, 2);
        let (a, b) = (IpAddr::from([192, 0, 2, 1]), IpAddr::from([192, 0, 2, 2]));
        let (first, second) = (admit(&fair, a), admit(&fair, a));
        assert!(first.is_some() && second.is_some());
        let permit = fair.try_permit().unwrap();
        let permit = fair.admit(0, a, permit).err().expect("a third connection from one client is refused");
        assert_eq!(fair.permits.available_permits(), 5, "the refused connection's permit is not lost");
        assert!(fair.admit(0, b, permit).is_ok(), "another client has its own bound");
        drop(first);
        assert!(admit(&fair, a).is_some(), "room again once one of its connections closed");
    }

    #[test]
    fn an_ipv4_mapped_address_is_the_same_client() {
        let fair = fair(8, 1);
        let _held = admit(&fair, IpAddr::from([192, 0, 2, 1])).unwrap();
        let mapped = IpAddr::V6(Ipv4Addr::new(192, 0, 2, 1).to_ipv6_mapped());
        assert!(admit(&fair, mapped).is_none());
    }

    #[test]
    fn only_connections_idle_long_enough_are_closed_to_make_room() {
        let fair = fair(8, 8);
        let held = admit(&fair, IpAddr::from([192, 0, 2, 1])).unwrap();
        let _idle = held.idle();
        assert!(!fair.reclaim_one(), "a connection idle for less than {RECLAIM_MIN_IDLE:?} was closed");
    }
}
