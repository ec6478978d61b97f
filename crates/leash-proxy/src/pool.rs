//! Idle upstream connections kept for reuse, keyed by the decided host, port and the policy generation (so a reload
//! never reuses a connection checked under the old policy): plain-HTTP forwarding's connections, and the upstream
//! TLS sessions inspected tunnels leave clean (`inspect`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PoolKey {
    pub host: Box<str>,
    pub port: u16,
    pub generation: u64,
}

/// A connection that can tell, without waiting, whether its idle upstream has sent anything since its last response.
pub(crate) trait Quiet {
    /// Nothing to read: data would be a protocol error, the end a closed connection.
    fn is_quiet(&mut self) -> bool;
}

struct Idle<T> {
    conn: T,
    since: Instant,
}

/// The pool. A connection is taken out while in use, so one request (one tunnel) owns it at a time.
pub struct Pool<T> {
    idle: Mutex<HashMap<PoolKey, Vec<Idle<T>>>>,
    per_host: usize,
    max_idle: Duration,
}

impl<T: Quiet> Pool<T> {
    pub fn new(per_host: usize, max_idle: Duration) -> Self {
        Self { idle: Mutex::new(HashMap::new()), per_host, max_idle }
    }

    /// A live idle connection for `key`, newest first; stale or closed ones are dropped on the way.
    pub(crate) fn take(&self, key: &PoolKey) -> Option<T> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let list = idle.get_mut(key)?;
        while let Some(mut idle) = list.pop() {
            if idle.since.elapsed() < self.max_idle && idle.conn.is_quiet() {
                return Some(idle.conn);
            }
        }
        None
    }

    /// Return a connection whose last response was read to its end.
    pub(crate) fn put(&self, key: PoolKey, conn: T) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let list = idle.entry(key).or_default();
        list.retain(|c| c.since.elapsed() < self.max_idle);
        if list.len() < self.per_host {
            list.push(Idle { conn, since: Instant::now() });
        }
    }
}
