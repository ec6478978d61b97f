//! Upstream TLS sessions kept across inspected tunnels: a session a tunnel leaves clean carries the next tunnel to
//! the same host (no lookup, dial or handshake), each tunnel and request still decided and logged; a session is
//! never shared by two open tunnels, never given to a client offering HTTP/2, another host, or a tunnel decided under
//! a newer policy, and one the origin closed is not used.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::{decisions, Inspecting, BLOCKED};
use crate::support::client::read_response;
use crate::support::http::Wire;
use crate::support::tls::connect;
use crate::support::*;

/// `allowed.test` and `other.allowed.test` are both inspected (each has a path rule).
const OTHER_BLOCKED: &str = "other.allowed.test/abs/2401.01234";

async fn scene() -> Inspecting {
    Inspecting::blocking(&[BLOCKED, OTHER_BLOCKED]).await
}

/// Wait until `n` tunnels have their outcome lines (a tunnel's session is kept before its client is closed, and
/// its outcome logged after): the log then.
async fn tunnels_ended(t: &Inspecting, n: usize) -> Vec<Value> {
    let ended = |lines: &[Value]| {
        let tunnels: Vec<&Value> = decisions(lines).into_iter().filter(|v| v["method"] == "CONNECT").collect();
        let outcome = |id: &Value| lines.iter().any(|v| v["id"] == *id && v.get("status").is_some());
        tunnels.len() >= n && tunnels.iter().all(|d| outcome(&d["id"]))
    };
    let what = format!("{n} tunnels' outcome lines");
    within(&what, async {
        loop {
            let lines = t.leash.log();
            if ended(&lines) {
                return lines;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
}

/// `GET path` in a tunnel of its own to `host`, offering HTTP/1.1; the status, once the tunnel has ended.
async fn get_and_end(t: &Inspecting, host: &str, path: &str, ended: usize) -> u16 {
    let status = t.get(host, path).await.status;
    tunnels_ended(t, ended).await;
    status
}

#[tokio::test]
async fn a_session_a_tunnel_left_clean_carries_the_next_tunnel_and_both_are_logged() {
    let t = scene().await;
    assert_eq!(get_and_end(&t, "allowed.test", "/one", 1).await, 200);
    assert_eq!(get_and_end(&t, "allowed.test", "/two", 2).await, 200);
    // The path rule still holds in the tunnel that took the kept session.
    assert_eq!(get_and_end(&t, "allowed.test", "/abs/2401.01234", 3).await, 403);
    assert_eq!(t.tls.connections().await, 1, "one upstream connection for the three tunnels");
    assert_eq!(t.tls.handshakes().len(), 1, "one upstream handshake");
    let got = t.tls.origin.requests();
    assert_eq!(got.iter().map(|r| (r.target.as_str(), r.conn)).collect::<Vec<_>>(), [("/one", 0), ("/two", 0)]);
    let lines = t.leash.log();
    let d = decisions(&lines);
    let words: Vec<_> = d.iter().map(|v| (v["method"].as_str().unwrap(), v["decision"].as_str().unwrap())).collect();
    let expected = [("CONNECT", "inspect"), ("GET", "allow")];
    assert_eq!(words, [expected[0], expected[1], expected[0], expected[1], expected[0], ("GET", "block")]);
    let ids: std::collections::BTreeSet<_> = d.iter().map(|v| v["id"].as_u64().unwrap()).collect();
    assert_eq!(ids.len(), 6, "every tunnel and request has an id of its own: {lines:#?}");
}

#[tokio::test]
async fn two_open_tunnels_never_share_a_session() {
    let t = scene().await;
    assert_eq!(get_and_end(&t, "allowed.test", "/first", 1).await, 200);
    // Both tunnels are open before either sends: one takes the kept session, the other dials.
    let a = t.tunnel("allowed.test", &[b"http/1.1"]).await;
    let b = t.tunnel("allowed.test", &[b"http/1.1"]).await;
    let host = t.target("allowed.test");
    let mut statuses = Vec::new();
    for (tls, path) in [(a, "/a"), (b, "/b")] {
        let mut wire = Wire::new(tls);
        let get = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n");
        wire.io.write_all(get.as_bytes()).await.unwrap();
        wire.io.flush().await.unwrap();
        statuses.push(within("the response", read_response(&mut wire, "GET")).await.unwrap().status);
    }
    assert_eq!(statuses, [200, 200]);
    assert_eq!(t.tls.connections().await, 2);
    let conns: std::collections::BTreeSet<_> = t.tls.origin.requests().iter().skip(1).map(|r| r.conn).collect();
    assert_eq!(conns.len(), 2, "the open tunnels' requests came on two connections");
}

#[tokio::test]
async fn a_client_offering_http2_and_a_tunnel_to_another_host_get_sessions_of_their_own() {
    let t = scene().await;
    assert_eq!(get_and_end(&t, "allowed.test", "/first", 1).await, 200);
    // Another host: the kept session was made (and its certificate verified) for `allowed.test` only.
    assert_eq!(get_and_end(&t, "other.allowed.test", "/other", 2).await, 200);
    assert_eq!(t.tls.connections().await, 2);
    // A client offering HTTP/2 is dialled a session of its own, offering the upstream HTTP/2 too.
    let mut wire = Wire::new(t.tunnel("allowed.test", &[b"h2", b"http/1.1"]).await);
    let get = format!("GET /h2-offered HTTP/1.1\r\nHost: {}\r\n\r\n", t.target("allowed.test"));
    wire.io.write_all(get.as_bytes()).await.unwrap();
    wire.io.flush().await.unwrap();
    assert_eq!(within("the response", read_response(&mut wire, "GET")).await.unwrap().status, 200);
    assert_eq!(t.tls.connections().await, 3);
    let snis: Vec<_> = t.tls.handshakes().into_iter().flatten().collect();
    assert_eq!(snis, ["allowed.test", "other.allowed.test", "allowed.test"]);
}

#[tokio::test]
async fn a_reload_leaves_the_sessions_kept_under_the_old_policy_unused() {
    let t = scene().await;
    assert_eq!(get_and_end(&t, "allowed.test", "/before", 1).await, 200);
    t.leash.reload(&blocklist(&[BLOCKED, OTHER_BLOCKED, "allowed.test/private/"], &[80], &[t.tls.port()]));
    assert_eq!(get_and_end(&t, "allowed.test", "/after", 2).await, 200);
    assert_eq!(t.tls.connections().await, 2, "the tunnel decided under the new policy dialled");
}

#[tokio::test]
async fn a_kept_session_the_origin_closed_is_not_used() {
    // The origin answers and then closes, without saying so: leash keeps the session, finds it closed when the next
    // tunnel comes, and dials (or, if the close is still on its way, finds it stale and dials once more).
    let ca = TestCa::new();
    let answer_then_close = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec();
    let tls = TlsUpstream::with(&ca, move |_| Reply::RawThenClose(answer_then_close.clone())).await;
    let t = Inspecting::with(ca, tls, |p| blocklist(&[BLOCKED], &[80], &[p])).await;
    assert_eq!(get_and_end(&t, "allowed.test", "/one", 1).await, 200);
    let r = t.get("allowed.test", "/two").await;
    assert_eq!((r.status, r.text()), (200, "ok".to_owned()));
    assert_eq!(t.tls.connections().await, 2);
    assert_eq!(t.tls.origin.requests().iter().map(|r| r.conn).collect::<Vec<_>>(), [0, 1]);
}

#[tokio::test]
async fn a_tunnel_whose_line_cannot_be_written_sends_nothing_on_a_kept_session() {
    // The session a tunnel left clean is there to take; the next tunnel's line cannot be written (the log was
    // deleted), so it must be refused before the session carries a byte of its client's.
    let t = scene().await;
    assert_eq!(get_and_end(&t, "allowed.test", "/logged", 1).await, 200);
    std::fs::remove_file(&t.leash.log_path).unwrap();
    let r = t.get("allowed.test", "/unlogged").await;
    assert_refused(&r, 503, "audit-failed");
    assert_eq!(t.origin_targets(), ["/logged"], "nothing went up unlogged");
    // The session was not spent on the refusal: once the log is back, the next tunnel is served on it.
    t.leash.audit.reopen().unwrap();
    assert_eq!(t.get("allowed.test", "/after").await.status, 200);
    assert_eq!(t.tls.connections().await, 1);
}

/// An HTTPS origin for `allowed.test` that answers `/first` and then, 100 ms later, sends a second response nobody
/// asked for on the same connection; any other path is answered `the answer to <path>`. Returns its port and how
/// many connections it accepted.
async fn origin_sending_a_late_extra_response(ca: &TestCa) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let acceptor = TlsAcceptor::from(Arc::new(ca.server_config(&["allowed.test"])));
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                let mut wire = Wire::new(tls);
                while let Ok(Some(head)) = wire.head().await {
                    let target = head.start.split(' ').nth(1).unwrap_or("").to_owned();
                    let answer =
                        |body: &str| format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len());
                    let own =
                        if target == "/first" { answer("ok") } else { answer(&format!("the answer to {target}")) };
                    if wire.io.write_all(own.as_bytes()).await.and(wire.io.flush().await).is_err() {
                        return;
                    }
                    if target == "/first" {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        let extra = answer("smuggled");
                        let _ = wire.io.write_all(extra.as_bytes()).await.and(wire.io.flush().await);
                    }
                }
            });
        }
    });
    (port, accepted)
}

/// `GET path` in a tunnel of its own to `allowed.test:port`, offering HTTP/1.1.
async fn get_at(t: &Inspecting, port: u16, path: &str) -> Resp {
    let (c, status) = connect(t.leash.addr, &format!("allowed.test:{port}")).await;
    assert_eq!(status, 200);
    let name = ServerName::try_from("allowed.test").unwrap();
    let connector = TlsConnector::from(Arc::new(t.client_config(&[b"http/1.1"])));
    let mut tls = within("TLS through leash", connector.connect(name, c.wire.io)).await.unwrap();
    let get = format!("GET {path} HTTP/1.1\r\nHost: allowed.test:{port}\r\n\r\n");
    tls.write_all(get.as_bytes()).await.unwrap();
    tls.flush().await.unwrap();
    within("the response", read_response(&mut Wire::new(tls), "GET")).await.unwrap()
}

#[tokio::test]
async fn bytes_an_origin_sends_after_its_response_never_answer_the_next_tunnel() {
    // A response followed, later, by a second one nobody asked for (an origin desynchronised, or steered into it by
    // the tunnel before): the session is kept clean, but when the next tunnel comes it has something to read, so it
    // is dropped, and that tunnel's request is answered by its own response.
    let ca = TestCa::new();
    let (port, accepted) = origin_sending_a_late_extra_response(&ca).await;
    let t =
        Inspecting::with(ca, TlsUpstream::start(&TestCa::new()).await, |p| blocklist(&[BLOCKED], &[80], &[p, port]))
            .await;
    let first = get_at(&t, port, "/first").await;
    assert_eq!((first.status, first.text()), (200, "ok".to_owned()));
    tunnels_ended(&t, 1).await;
    // The extra response reaches leash's kept session.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = get_at(&t, port, "/second").await;
    assert_eq!((second.status, second.text()), (200, "the answer to /second".to_owned()));
    assert_eq!(accepted.load(Ordering::SeqCst), 2, "the session with bytes waiting was not used");
}
