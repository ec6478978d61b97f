//! The stub over real sockets: a UDP socket on 127.0.0.1:0 served by [`serve_dns`], real queries from another socket,
//! answers decided on the policy in force (reloads included), garbage that never stops the server, a clean shutdown.

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

const REFUSED: u8 = 5;

struct Stub {
    addr: SocketAddr,
    client: UdpSocket,
    policy: PolicyHandle,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<io::Result<()>>,
    /// The audit log's file, and the directory that holds it for as long as the stub lives.
    log: std::path::PathBuf,
    _dir: Option<tempfile::TempDir>,
}

/// Serve an inline allowlist (`allow`) on a fresh socket, logging to a fresh file, and a client socket to query it.
async fn stub(allow: &[&str]) -> Stub {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    let audit = Arc::new(AuditLog::open(&log).unwrap());
    serve(allow, audit, log, Some(dir)).await
}

async fn serve(allow: &[&str], audit: Arc<AuditLog>, log: std::path::PathBuf, dir: Option<tempfile::TempDir>) -> Stub {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    let policy = PolicyHandle::new(allowlist(allow));
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve_dns(socket, policy.clone(), audit, None, async move {
        let _ = stopped.await;
    }));
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    Stub { addr, client, policy, stop: Some(stop), task, log, _dir: dir }
}

/// The log's lines as (decision, host, reason), each checked to be a `DNS` line on port 53 from the client.
fn lines(s: &Stub) -> Vec<(String, String, String)> {
    let client = s.client.local_addr().unwrap().to_string();
    std::fs::read_to_string(&s.log)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            assert_eq!((v["method"].as_str(), v["port"].as_u64()), (Some("DNS"), Some(53)), "{l}");
            assert_eq!(v["client"].as_str(), Some(client.as_str()), "{l}");
            let text = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
            (text("decision"), text("host"), text("reason"))
        })
        .collect()
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
    s.policy.store(allowlist(&["new.test"])).unwrap();
    assert_eq!(s.ask(2, "new.test", 1).await, reply(NOERROR, &[TRANSPARENT_ADDR]));
    assert_eq!(s.ask(3, "allowed.test", 1).await, reply(NXDOMAIN, &[]));
    s.stop().await.unwrap();
}

#[tokio::test]
async fn every_refused_lookup_is_on_record_and_an_allowed_name_once_per_ttl() {
    let s = stub(&["allowed.test"]).await;
    assert_eq!(s.ask(1, "evil.test", 1).await, reply(NXDOMAIN, &[]));
    assert_eq!(s.ask(2, "evil.test", 28).await, reply(NXDOMAIN, &[]));
    assert_eq!(s.ask(3, "allowed.test", 1).await, reply(NOERROR, &[TRANSPARENT_ADDR]));
    assert_eq!(s.ask(4, "allowed.test", 28).await, reply(NOERROR, &[]));
    assert_eq!(s.ask(5, "localhost", 1).await, reply(NOERROR, &[Ipv4Addr::LOCALHOST]));
    let got = lines(&s);
    let line = |d: &str, h: &str, r: &str| (d.to_owned(), h.to_owned(), r.to_owned());
    assert_eq!(
        got,
        vec![
            line("block", "evil.test", "not-allowed"),
            line("block", "evil.test", "not-allowed"),
            line("allow", "allowed.test", "rule"),
        ],
        "every refusal; the allowed name once while its answer stands; localhost is no decision"
    );
    s.stop().await.unwrap();
}

#[tokio::test]
async fn an_allowed_name_whose_line_cannot_be_written_gets_no_address() {
    let full = std::path::PathBuf::from("/dev/full");
    let Ok(audit) = AuditLog::open(&full) else { return };
    let s = serve(&["allowed.test"], Arc::new(audit), full, None).await;
    assert_eq!(s.ask(1, "allowed.test", 1).await, reply(REFUSED, &[]));
    assert_eq!(s.ask(2, "evil.test", 1).await, reply(NXDOMAIN, &[]), "a refused name is refused either way");
    s.stop().await.unwrap();
}
