//! Fairness under pressure, over real sockets with a small connection bound: one greedy client cannot keep another
//! (from another loopback address: all of 127/8 is loopback) from being answered; a client is refused beyond its
//! own bound; idle keep-alive connections are closed, the greediest client's first, when the global bound is near;
//! a service's connections count like the proxy's.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test's helpers fail it by panicking")]

mod support;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use support::http::Wire;
use support::*;
use tokio::net::{TcpSocket, TcpStream};

/// A generous bound on "answered promptly" (behaviour, not speed: the machine may be busy).
const PROMPTLY: Duration = Duration::from_secs(5);

/// A raw client connection from `source` (a loopback address) to `to`.
async fn connect_from(source: [u8; 4], to: SocketAddr) -> Raw {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(IpAddr::from(source), 0)).unwrap();
    let stream: TcpStream = within("connect to leash", socket.connect(to)).await.unwrap();
    stream.set_nodelay(true).unwrap();
    Raw { wire: Wire::new(stream) }
}

/// `n` connections from `source`, each after one request answered 200 (held idle, keep-alive), plus how many of
/// the attempts were refused with leash's per-client 503 instead.
async fn hold(source: [u8; 4], to: SocketAddr, url: &str, n: usize) -> (Vec<Raw>, usize) {
    let (mut held, mut refused) = (Vec::new(), 0);
    for _ in 0..n {
        let mut c = connect_from(source, to).await;
        c.send(get(url)).await;
        let r = c.response().await;
        match r.status {
            200 => held.push(c),
            503 if r.text().contains("per-client connection limit") => refused += 1,
            other => panic!("a held connection got {other}: {}", r.text()),
        }
    }
    (held, refused)
}

async fn leash_with(up: &Upstream, max: usize, per_client: Option<usize>) -> Leash {
    Leash::builder(&allowlist(&["allowed.test"], &[up.port()], &[443]))
        .limits(|l| {
            l.max_connections = max;
            l.max_connections_per_client = per_client;
        })
        .start()
        .await
}

#[tokio::test]
async fn a_greedy_client_does_not_keep_another_from_being_answered() {
    let up = Upstream::start().await;
    let leash = leash_with(&up, 64, None).await;
    let url = format!("http://allowed.test:{}/", up.port());
    // As many as it can: 64, the whole bound; it gets its share, three quarters.
    let (held, refused) = hold([127, 0, 0, 1], leash.addr, &url, 64).await;
    assert_eq!((held.len(), refused), (48, 16));
    let mut other = connect_from([127, 0, 0, 2], leash.addr).await;
    other.send(get(&url)).await;
    let answered = before(PROMPTLY, other.response()).await.expect("the other client was not answered");
    assert_eq!(answered.status, 200);
    drop(held);
}

#[tokio::test]
async fn a_client_is_refused_beyond_its_bound_until_one_of_its_connections_closes() {
    let up = Upstream::start().await;
    let leash = leash_with(&up, 64, Some(10)).await;
    let url = format!("http://allowed.test:{}/", up.port());
    let (mut held, refused) = hold([127, 0, 0, 1], leash.addr, &url, 10).await;
    assert_eq!((held.len(), refused), (10, 0));
    let mut over = connect_from([127, 0, 0, 1], leash.addr).await;
    let r = over.response().await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.header("connection"), Some("close"));
    assert!(r.text().starts_with("leash: connection refused"), "{}", r.text());
    assert!(over.closed_within(PROMPTLY).await, "the refused connection stays open");
    let counted = leash.metrics.render(0);
    assert!(counted.contains("\nleash_connections_over_client_limit_total 1\n"), "{counted}");
    // Its held connections still work, and another address has its own bound.
    held[0].send(get(&url)).await;
    assert_eq!(held[0].response().await.status, 200);
    let (others, refused) = hold([127, 0, 0, 2], leash.addr, &url, 10).await;
    assert_eq!((others.len(), refused), (10, 0));
    // One of its connections closes: it may open one again.
    drop(held.pop());
    let again = within("room again", async {
        loop {
            let mut c = connect_from([127, 0, 0, 1], leash.addr).await;
            c.send(get(&url)).await;
            if let Some(r) = before(PROMPTLY, c.response()).await.filter(|r| r.status == 200) {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    assert_eq!(again.await.status, 200);
}

#[tokio::test]
async fn idle_keep_alive_connections_make_room_for_a_new_client_greediest_first() {
    let up = Upstream::start().await;
    let leash = leash_with(&up, 16, None).await;
    let url = format!("http://allowed.test:{}/", up.port());
    let (mut greedy, _) = hold([127, 0, 0, 1], leash.addr, &url, 12).await;
    let (mut modest, _) = hold([127, 0, 0, 3], leash.addr, &url, 4).await;
    assert_eq!((greedy.len(), modest.len()), (12, 4), "the bound is full");
    // A new client: served, though every connection is taken, once idle ones have been closed to make room.
    let mut newcomer = connect_from([127, 0, 0, 2], leash.addr).await;
    newcomer.send(get(&url)).await;
    let answered = before(PROMPTLY, newcomer.response()).await.expect("the new client was not answered");
    assert_eq!(answered.status, 200);
    // The room came from the client holding the most: the modest one keeps every connection.
    for c in &mut modest {
        c.send(get(&url)).await;
        assert_eq!(c.response().await.status, 200, "a connection of the modest client was closed");
    }
    let mut closed = 0;
    for c in &mut greedy {
        closed += usize::from(c.closed_within(Duration::from_millis(50)).await);
    }
    assert!(closed >= 1, "none of the greedy client's idle connections was closed");
    let counted = leash.metrics.render(0);
    assert!(!counted.contains("\nleash_idle_connections_closed_total 0\n"), "the closing is counted: {counted}");
}

#[tokio::test]
async fn a_connection_mid_request_is_not_closed_to_make_room() {
    let up = Upstream::start().await;
    let leash = leash_with(&up, 8, Some(8)).await;
    let url = format!("http://allowed.test:{}/", up.port());
    // Eight connections each in the middle of a request head: none is idle, none may be closed.
    let mut busy = Vec::new();
    for _ in 0..8 {
        let mut c = connect_from([127, 0, 0, 1], leash.addr).await;
        c.send(format!("GET {url} HTTP/1.1\r\n")).await;
        busy.push(c);
    }
    let mut newcomer = connect_from([127, 0, 0, 2], leash.addr).await;
    newcomer.send(get(&url)).await;
    assert!(before(Duration::from_millis(1500), newcomer.response()).await.is_none(), "served beyond the bound");
    for c in &mut busy {
        c.send(format!("Host: allowed.test:{}\r\n\r\n", up.port())).await;
        assert_eq!(c.response().await.status, 200, "a request in progress was cut off");
    }
    drop(busy);
    assert_eq!(newcomer.response().await.status, 200, "served once connections left");
}

#[tokio::test]
async fn service_connections_count_against_their_clients_bound() {
    let up = Upstream::start().await;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let policy = format!(
        "network:\n  mode: allowlist\n  allowed_hosts: [allowed.test]\n  services:\n    - {{name: mcp, listen: {}, target: '127.0.0.1:{}'}}\n",
        addr.port(),
        up.port()
    );
    let leash = Leash::builder(&policy)
        .limits(|l| {
            l.max_connections = 16;
            l.max_connections_per_client = Some(3);
        })
        .service("mcp", leash_proxy::ServiceListener::Tcp(listener))
        .start()
        .await;
    let request = "GET /x HTTP/1.1\r\nHost: whatever.test\r\n\r\n";
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut c = connect_from([127, 0, 0, 1], addr).await;
        c.send(request).await;
        assert_eq!(c.response().await.status, 200);
        held.push(c);
    }
    // The fourth from the same address is closed unanswered (a service's client may not speak HTTP).
    let mut over = connect_from([127, 0, 0, 1], addr).await;
    let _ = over.try_send(request).await;
    assert!(over.closed_within(PROMPTLY).await, "a fourth service connection was kept");
    assert!(over.wire.buf.is_empty(), "the refused service connection got bytes");
    let mut other = connect_from([127, 0, 0, 2], addr).await;
    other.send(request).await;
    assert_eq!(before(PROMPTLY, other.response()).await.expect("another client was not answered").status, 200);
    drop((held, leash));
}

#[tokio::test]
async fn proxies_sharing_a_bound_each_get_their_own_clients_within_it() {
    // One bound of 8 for two proxies (two pods of one `leash attach --dir`), 3 per client: both pods' clients come
    // from 127.0.0.1, each its own pod's client.
    let up = Upstream::start().await;
    let limits = leash_proxy::Limits { max_connections: 8, max_connections_per_client: Some(3), ..Default::default() };
    let node = leash_proxy::ConnectionBound::new(&limits, std::sync::Arc::default(), None);
    let policy = allowlist(&["allowed.test"], &[up.port()], &[443]);
    let pod_a = Leash::builder(&policy).bound(node.scope(1)).start().await;
    let pod_b = Leash::builder(&policy).bound(node.scope(2)).start().await;
    let url = format!("http://allowed.test:{}/", up.port());
    let (held_a, refused_a) = hold([127, 0, 0, 1], pod_a.addr, &url, 5).await;
    assert_eq!((held_a.len(), refused_a), (3, 2), "pod a holds its client's bound, no more");
    let (held_b, refused_b) = hold([127, 0, 0, 1], pod_b.addr, &url, 3).await;
    assert_eq!((held_b.len(), refused_b), (3, 0), "pod b's client is not pod a's, though both are 127.0.0.1");
    // The node's bound is shared: with 6 of 8 taken, a third pod's client gets what is left, and beyond it a
    // connection is served only once leash has closed an idle one somewhere on the node to make room.
    let pod_c = Leash::builder(&policy).bound(node.scope(3)).start().await;
    let (mut held_c, _) = hold([127, 0, 0, 1], pod_c.addr, &url, 2).await;
    assert_eq!(held_c.len(), 2);
    let mut ninth = connect_from([127, 0, 0, 1], pod_c.addr).await;
    ninth.send(get(&url)).await;
    let answered = before(PROMPTLY, ninth.response()).await.expect("the ninth connection was never served");
    assert_eq!(answered.status, 200);
    let (mut held_a, mut held_b) = (held_a, held_b);
    let mut closed = 0;
    for c in held_a.iter_mut().chain(held_b.iter_mut()).chain(held_c.iter_mut()) {
        closed += usize::from(c.closed_within(Duration::from_millis(50)).await);
    }
    assert!(closed >= 1, "nine connections open at once under a node bound of 8");
    drop((held_a, held_b, held_c));
}
