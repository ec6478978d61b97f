//! The real-socket harness: in-process origins (plain and TLS, with a per-run test CA), a resolver that records
//! every name it is asked, leash itself on port 0 with its audit log in a tempdir, and clients (raw TCP, curl,
//! reqwest, rustls). Everything binds 127.0.0.1:0 and waits on events, never on fixed sleeps; every wait is bounded.

#![allow(dead_code, reason = "each test uses a part of the harness")]

pub mod client;
pub mod hello;
pub mod http;
pub mod leash;
pub mod origin;
pub mod resolver;
pub mod tls;
pub mod world;

use std::future::Future;
use std::time::Duration;

#[allow(unused_imports, reason = "each test uses a part of the harness")]
pub use client::{curl, get, Raw, Resp};
#[allow(unused_imports, reason = "each test uses a part of the harness")]
pub use hello::{client_hello, HelloSpec};
#[allow(unused_imports, reason = "each test uses a part of the harness")]
pub use leash::{allowlist, blocklist, Leash};
#[allow(unused_imports, reason = "each test uses a part of the harness")]
pub use origin::{pattern, Body, Recorded, Reply, Upstream};
#[allow(unused_imports, reason = "each test uses a part of the harness")]
pub use resolver::RecordingResolver;
#[allow(unused_imports, reason = "each test uses a part of the harness")]
pub use tls::{TestCa, TlsUpstream};
#[allow(unused_imports, reason = "each test uses a part of the harness")]
pub use world::{assert_refused, World};

/// The longest any single step of a test may take before the test fails instead of hanging. Generous: the machine
/// is shared with other builds, and debug builds move 64 MiB bodies slowly.
pub const STEP: Duration = Duration::from_secs(30);

/// Await `f`, failing the test if it takes longer than [`STEP`].
pub async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    match tokio::time::timeout(STEP, f).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {STEP:?}: {what}"),
    }
}

/// Await `f` for at most `limit`; `None` if it did not finish (for "this must not happen yet" checks).
pub async fn before<T>(limit: Duration, f: impl Future<Output = T>) -> Option<T> {
    tokio::time::timeout(limit, f).await.ok()
}

/// A listener on 127.0.0.2 at `port`, the port of a server of this test on 127.0.0.1 (a transparent listener, a
/// server the name is moved to). The port was free on 127.0.0.1 only: a test that has just ended may still hold
/// 127.0.0.2 at the same number while its runtime winds down (its 127.0.0.1 server closed first, and the kernel gave
/// the number out again), so a taken address is tried again for a few seconds before the test fails.
pub async fn bind_second_loopback(port: u16) -> tokio::net::TcpListener {
    for _ in 0..50 {
        match tokio::net::TcpListener::bind(("127.0.0.2", port)).await {
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => tokio::time::sleep(Duration::from_millis(100)).await,
            bound => return bound.unwrap_or_else(|e| panic!("bind 127.0.0.2:{port}: {e}")),
        }
    }
    panic!("127.0.0.2:{port} stayed taken for 5 s")
}
