//! leash's proxy over real sockets.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use support::*;

#[tokio::test]
async fn allowlist_exact_host_is_forwarded() {
    let up = Upstream::start().await;
    let leash = Leash::start(&allowlist(&["allowed.test"], &[up.port()], &[443])).await;
    let r = support::client::exchange(
        leash.addr,
        get(&format!("http://allowed.test:{}/x", up.port())),
    )
    .await;
    assert_eq!(r.status, 200);
}
