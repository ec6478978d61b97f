//! The stub over real sockets: a UDP socket on 127.0.0.1:0 served by [`serve_dns`], real queries from another socket,
//! answers decided on the policy in force (reloads included), garbage that never stops the server, a clean shutdown.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used, reason = "a failed expectation in a test is a panic")]

use std::time::Duration;

use leash_policy::Policy;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::*;

/// How long a test waits for an answer that must come; the stub answers in microseconds.
const REPLY_WAIT: Duration = Duration::from_secs(5);

const NOERROR: u8 = 0;
const NXDOMAIN: u8 = 3;
const FORMERR: u8 = 1;

struct Stub {
    addr: SocketAddr,
    client: UdpSocket,
    policy: PolicyHandle,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<io::Result<()>>,
}

/// Serve an inline allowlist (`allow`) on a fresh socket, and a client socket to query it.
async fn stub(allow: &[&str]) -> Stub {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    let policy = PolicyHandle::new(allowlist(allow));
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve_dns(socket, policy.clone(), async move {
        let _ = stopped.await;
    }));
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    Stub { addr, client, policy, stop: Some(stop), task }
}

fn allowlist(hosts: &[&str]) -> Policy {
    let hosts: Vec<String> = hosts.iter().map(|h| (*h).to_owned()).collect();
    Policy::from_inline(&hosts, &[]).unwrap()
}

/// A recursion-desired query for `name` of `qtype`.
fn query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
    let mut q = id.to_be_bytes().to_vec();
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.') {
        q.push(u8::try_from(label.len()).unwrap());
        q.extend_from_slice(label.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&[0, 1]);
    q
}

/// What came back: the response code and the A records' addresses.
#[derive(Debug, PartialEq)]
struct Reply {
    rcode: u8,
    addrs: Vec<Ipv4Addr>,
}

impl Stub {
    async fn send(&self, datagram: &[u8]) {
        self.client.send_to(datagram, self.addr).await.unwrap();
    }

    /// Ask for `name` and wait for the response carrying this query's id (skipping answers to earlier garbage).
    async fn ask(&self, id: u16, name: &str, qtype: u16) -> Reply {
        let q = query(id, name, qtype);
        self.send(&q).await;
        let mut buf = [0u8; 1024];
        loop {
            let len = tokio::time::timeout(REPLY_WAIT, self.client.recv(&mut buf)).await.expect("an answer").unwrap();
            if buf[..2] == q[..2] {
                return parse_reply(&buf[..len], q.len());
            }
        }
    }

    async fn stop(mut self) -> io::Result<()> {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(REPLY_WAIT, self.task).await.expect("the server stops").unwrap()
    }
}

/// The response code and A records of a response to a query `question_end` bytes long (answers follow the echoed
/// question, each 16 bytes with the address last).
fn parse_reply(r: &[u8], question_end: usize) -> Reply {
    let answers = usize::from(u16::from_be_bytes([r[6], r[7]]));
    let addrs = (0..answers)
        .map(|i| {
            let at = question_end + 16 * i + 12;
            Ipv4Addr::new(r[at], r[at + 1], r[at + 2], r[at + 3])
        })
        .collect();
    Reply { rcode: r[3] & 0x0f, addrs }
}

fn reply(rcode: u8, addrs: &[Ipv4Addr]) -> Reply {
    Reply { rcode, addrs: addrs.to_vec() }
}

#[tokio::test]
async fn allowed_names_get_the_transparent_address_and_refused_ones_nxdomain() {
    let s = stub(&["allowed.test", ".pypi.test"]).await;
    assert_eq!(s.ask(1, "allowed.test", 1).await, reply(NOERROR, &[TRANSPARENT_ADDR]));
    assert_eq!(s.ask(2, "Files.PyPI.test", 1).await, reply(NOERROR, &[TRANSPARENT_ADDR]));
    assert_eq!(s.ask(3, "evil.test", 1).await, reply(NXDOMAIN, &[]));
    assert_eq!(s.ask(4, "allowed.test", 28).await, reply(NOERROR, &[]), "AAAA: NODATA");
    assert_eq!(s.ask(5, "evil.test", 28).await, reply(NXDOMAIN, &[]));
    assert_eq!(s.ask(6, "127.0.0.1", 1).await, reply(NXDOMAIN, &[]), "IP literals are never names");
    assert_eq!(s.ask(7, "0x7f000001", 1).await, reply(NXDOMAIN, &[]));
    s.stop().await.unwrap();
}

#[tokio::test]
async fn localhost_is_answered_under_any_policy() {
    let s = stub(&[]).await;
    assert_eq!(s.ask(1, "localhost", 1).await, reply(NOERROR, &[Ipv4Addr::LOCALHOST]));
    assert_eq!(s.ask(2, "LocalHost", 28).await, reply(NOERROR, &[]));
    assert_eq!(s.ask(3, "anything.test", 1).await, reply(NXDOMAIN, &[]));
    s.stop().await.unwrap();
}

#[tokio::test]
async fn garbage_never_stops_the_server() {
    let s = stub(&["allowed.test"]).await;
    let mut pointer = query(9, "x", 1);
    pointer.splice(12..15, [0xc0, 0x0c]);
    let mut response = query(9, "allowed.test", 1);
    response[2] |= 0x80;
    for garbage in [&[][..], &[0xff; 5], &[0; 12], &[0xab; 700], &pointer, &response, &[0xff; 5000]] {
        s.send(garbage).await;
    }
    assert_eq!(s.ask(10, "allowed.test", 1).await, reply(NOERROR, &[TRANSPARENT_ADDR]));
    // A malformed query with a header gets FORMERR, with its id (the server answers in order, so every reply to the
    // garbage above came before query 10's).
    s.send(&pointer).await;
    let mut buf = [0u8; 512];
    let len = tokio::time::timeout(REPLY_WAIT, s.client.recv(&mut buf)).await.unwrap().unwrap();
    assert_eq!((&buf[..2], buf[3] & 0x0f, len), (&[0, 9][..], FORMERR, 12), "{:?}", &buf[..len]);
    s.stop().await.unwrap();
}

#[tokio::test]
async fn a_reload_applies_to_the_next_lookup() {
    let s = stub(&["allowed.test"]).await;
    assert_eq!(s.ask(1, "new.test", 1).await, reply(NXDOMAIN, &[]));
    s.policy.store(allowlist(&["new.test"]));
    assert_eq!(s.ask(2, "new.test", 1).await, reply(NOERROR, &[TRANSPARENT_ADDR]));
    assert_eq!(s.ask(3, "allowed.test", 1).await, reply(NXDOMAIN, &[]));
    s.stop().await.unwrap();
}
