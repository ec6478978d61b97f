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
        let now = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let list = idle.get_mut(key)?;
        while let Some(mut idle) = list.pop() {
            if now.duration_since(idle.since) < self.max_idle && idle.conn.is_quiet() {
                return Some(idle.conn);
            }
        }
        None
    }

    /// Drop every idle connection kept under a policy older than `generation` (none would be taken again): called
    /// when a new policy comes into force, so no upstream connection made under the old one stays open.
    pub(crate) fn retire_before(&self, generation: u64) -> usize {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let before: usize = idle.values().map(Vec::len).sum();
        idle.retain(|key, _| key.generation >= generation);
        before - idle.values().map(Vec::len).sum::<usize>()
    }

    /// Return a connection whose last response was read to its end.
    pub(crate) fn put(&self, key: PoolKey, conn: T) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        // Read under the lock, so that each list is in the order of its entries' times.
        let now = Instant::now();
        let list = idle.entry(key).or_default();
        // Put in the order they came back, the list is oldest first: the stale ones are a prefix, found without
        // reading the clock for each (one read per entry was 2 % of a plain request's CPU with 64 kept).
        let stale = list.partition_point(|c| now.duration_since(c.since) >= self.max_idle);
        list.drain(..stale);
        if list.len() < self.per_host {
            list.push(Idle { conn, since: now });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Pool, PoolKey, Quiet};

    /// A connection that is quiet unless told it was closed.
    #[derive(Debug, PartialEq)]
    struct Conn(u32, bool);

    impl Quiet for Conn {
        fn is_quiet(&mut self) -> bool {
            self.1
        }
    }

    fn key(host: &str) -> PoolKey {
        PoolKey { host: host.into(), port: 443, generation: 0 }
    }

    #[test]
    fn the_newest_live_connection_is_taken_and_stale_or_closed_ones_are_dropped() {
        // A second between the puts below and the takes is far more than they need, however loaded the machine.
        let pool = Pool::new(8, Duration::from_secs(1));
        pool.put(key("a"), Conn(1, true));
        pool.put(key("a"), Conn(2, true));
        std::thread::sleep(Duration::from_millis(1100));
        // 1 and 2 are stale now: putting 3 drops them, so the pool's bound counts live ones only.
        pool.put(key("a"), Conn(3, true));
        pool.put(key("a"), Conn(4, false));
        pool.put(key("b"), Conn(5, true));
        assert_eq!(pool.idle.lock().unwrap()[&key("a")].len(), 2);
        // 4 was closed by its upstream: dropped on the way to 3.
        assert_eq!(pool.take(&key("a")), Some(Conn(3, true)));
        assert_eq!(pool.take(&key("a")), None);
        assert_eq!(pool.take(&key("b")), Some(Conn(5, true)));
    }

    #[test]
    fn no_connection_older_than_the_idle_limit_is_taken() {
        let pool = Pool::new(8, Duration::from_millis(100));
        pool.put(key("a"), Conn(1, true));
        std::thread::sleep(Duration::from_millis(150));
        assert_eq!(pool.take(&key("a")), None);
    }

    #[test]
    fn a_new_policy_retires_every_connection_kept_under_an_older_one() {
        let pool = Pool::new(8, Duration::from_secs(30));
        let (old, new) = (key("a"), PoolKey { generation: 1, ..key("a") });
        pool.put(old.clone(), Conn(1, true));
        pool.put(old.clone(), Conn(2, true));
        pool.put(new.clone(), Conn(3, true));
        assert_eq!(pool.retire_before(1), 2);
        assert_eq!(pool.take(&old), None);
        assert_eq!(pool.take(&new), Some(Conn(3, true)));
    }

    #[test]
    fn a_host_keeps_at_most_its_share() {
        let pool = Pool::new(2, Duration::from_secs(30));
        for n in 0..4 {
            pool.put(key("a"), Conn(n, true));
        }
        assert_eq!(pool.take(&key("a")), Some(Conn(1, true)));
        assert_eq!(pool.take(&key("a")), Some(Conn(0, true)));
        assert_eq!(pool.take(&key("a")), None);
    }
}
