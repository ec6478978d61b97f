//! The usual scene of a plain-HTTP test: one origin, leash in front of it with a policy that names the origin's
//! port, and helpers that read as "send this, expect that, and nothing reached the origin or the resolver".

use super::client::{exchange, get, Resp};
use super::leash::Leash;
use super::origin::Upstream;

pub struct World {
    pub up: Upstream,
    pub leash: Leash,
}

impl World {
    /// An origin answering `hello from upstream`, and leash serving `policy(origin_port)`.
    pub async fn new(policy: impl FnOnce(u16) -> String) -> World {
        World::with(Upstream::start().await, policy).await
    }

    /// `up`, and leash serving `policy(up_port)`.
    pub async fn with(up: Upstream, policy: impl FnOnce(u16) -> String) -> World {
        let leash = Leash::start(&policy(up.port())).await;
        World { up, leash }
    }

    pub fn port(&self) -> u16 {
        self.up.port()
    }

    /// `http://host:PORT{path}` at the origin's port.
    pub fn url(&self, host: &str, path: &str) -> String {
        format!("http://{host}:{}{path}", self.port())
    }

    /// `GET http://host:PORT{path}` with a matching Host, on a fresh connection.
    pub async fn get(&self, host: &str, path: &str) -> Resp {
        exchange(self.leash.addr, get(&self.url(host, path))).await
    }

    /// These bytes on a fresh connection; one response back.
    pub async fn send(&self, raw: impl AsRef<[u8]>) -> Resp {
        exchange(self.leash.addr, raw).await
    }

    /// The origin saw no connection and the resolver no name.
    pub async fn assert_nothing_reached(&self) {
        self.up.assert_untouched().await;
        self.leash.resolver.assert_never_asked();
    }
}

/// Assert a refusal by leash: `status`, `X-Leash-Reason: reason`.
#[track_caller]
pub fn assert_refused(r: &Resp, status: u16, reason: &str) {
    assert_eq!(
        (r.status, r.reason()),
        (status, reason),
        "expected {status} ({reason}); got:\n{}\n{}",
        r.head.raw,
        r.text()
    );
}
