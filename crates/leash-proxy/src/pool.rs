//! Idle upstream connections kept for reuse by plain-HTTP forwarding, keyed by the decided host, port and the
//! policy generation (so a reload never reuses a connection checked under the old policy).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::upstream_io::UpstreamIo;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PoolKey {
    pub host: Box<str>,
    pub port: u16,
    pub generation: u64,
}

struct Idle {
    stream: UpstreamIo,
    since: Instant,
}

/// The pool. A connection is taken out while in use, so one request owns it at a time.
pub struct Pool {
    idle: Mutex<HashMap<PoolKey, Vec<Idle>>>,
    per_host: usize,
    max_idle: Duration,
}

impl Pool {
    pub fn new(per_host: usize, max_idle: Duration) -> Self {
        Self { idle: Mutex::new(HashMap::new()), per_host, max_idle }
    }

    /// A live idle connection for `key`, newest first; stale or closed ones are dropped on the way.
    pub(crate) fn take(&self, key: &PoolKey) -> Option<UpstreamIo> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let list = idle.get_mut(key)?;
        while let Some(mut conn) = list.pop() {
            // An idle upstream connection must have nothing to read: data means a protocol error, EOF a close.
            if conn.since.elapsed() < self.max_idle && conn.stream.is_quiet() {
                return Some(conn.stream);
            }
        }
        None
    }

    /// Return a connection whose last response was read to its end.
    pub(crate) fn put(&self, key: PoolKey, stream: UpstreamIo) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let list = idle.entry(key).or_default();
        list.retain(|c| c.since.elapsed() < self.max_idle);
        if list.len() < self.per_host {
            list.push(Idle { stream, since: Instant::now() });
        }
    }
}
