//! The tunnel relay over real loopback sockets: every byte of large and odd-sized transfers arrives in order, on the
//! small-buffer path and the bulk one; half-closes pass each way; a reset mid-transfer ends both sides. (A spliced
//! bulk path was tried against these tests and not kept: it cut leash's CPU but cost the client more; bench/RESULTS.md.)

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::relay::tunnel;

/// Each test's bound on the whole exchange: a relay that loses a half-close or a byte hangs rather than fails.
const LIMIT: Duration = Duration::from_secs(20);

/// A client and an origin with the relay between them: (client end, origin end, the relay's byte counts).
async fn relayed() -> (TcpStream, TcpStream, JoinHandle<(u64, u64)>) {
    let front = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin_addr: SocketAddr = origin.local_addr().unwrap();
    let client = TcpStream::connect(front.local_addr().unwrap()).await.unwrap();
    let (mut accepted, _) = front.accept().await.unwrap();
    let relay = tokio::spawn(async move {
        let mut upstream = TcpStream::connect(origin_addr).await.unwrap();
        tunnel(&mut accepted, &mut upstream).await
    });
    let (origin_end, _) = origin.accept().await.unwrap();
    (client, origin_end, relay)
}

/// `n` bytes that differ from any shifted copy of themselves (a lost or repeated chunk shows).
fn pattern(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Send `data` in writes of `chunk` bytes, then half-close.
async fn send(mut to: tokio::net::tcp::OwnedWriteHalf, data: Vec<u8>, chunk: usize) {
    for piece in data.chunks(chunk) {
        to.write_all(piece).await.unwrap();
    }
    to.shutdown().await.unwrap();
}

async fn read_all(mut from: tokio::net::tcp::OwnedReadHalf) -> Vec<u8> {
    let mut got = Vec::new();
    from.read_to_end(&mut got).await.unwrap();
    got
}

/// Both directions at once, `up` bytes from the client and `down` from the origin; each side half-closes after
/// sending and reads to the end.
async fn exchange(up: usize, down: usize, chunk: usize) {
    let (client, origin, relay) = relayed().await;
    let (up_data, down_data) = (pattern(up, 7), pattern(down, 11));
    let (client_rd, client_wr) = client.into_split();
    let (origin_rd, origin_wr) = origin.into_split();
    let run = async {
        tokio::join!(
            send(client_wr, up_data.clone(), chunk),
            send(origin_wr, down_data.clone(), chunk),
            read_all(origin_rd),
            read_all(client_rd),
            relay,
        )
    };
    let (_, _, at_origin, at_client, counts) = tokio::time::timeout(LIMIT, run).await.expect("relay finished");
    assert!(at_origin == up_data, "up {up}: {} bytes arrived, not the ones sent", at_origin.len());
    assert!(at_client == down_data, "down {down}: {} bytes arrived, not the ones sent", at_client.len());
    assert_eq!(counts.unwrap(), (up as u64, down as u64), "byte counts");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_byte_of_large_and_odd_sized_transfers_arrives_in_order() {
    let sizes = [0, 1, 4095, 65_535, 65_536, 65_537, 1_048_575, 1_048_577, 3 * 1_048_576 + 12_345, 33_554_467];
    for (i, &size) in sizes.iter().enumerate() {
        // Odd write sizes so segments never line up with pages or buffers.
        let chunk = [1_000_003, 4_097, 65_537][i % 3];
        exchange(size / 3, size, chunk).await;
    }
}

/// Half-closes pass each way: one side ends its sending, the other still sends (a request, then a long answer), and
/// the reverse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_close_passes_each_way_and_the_other_direction_goes_on() {
    for client_first in [true, false] {
        let (client, origin, relay) = relayed().await;
        let (first, second) = if client_first { (client, origin) } else { (origin, client) };
        let (question, answer) = (pattern(70_001, 3), pattern(5 * 1_048_576 + 7, 5));
        let (first_rd, first_wr) = first.into_split();
        let (second_rd, second_wr) = second.into_split();
        let run = async {
            send(first_wr, question.clone(), 65_537).await;
            // The other side sees the end of the question before it answers a byte.
            let heard = read_all(second_rd).await;
            let (_, got, counts) = tokio::join!(send(second_wr, answer.clone(), 1_000_003), read_all(first_rd), relay);
            (heard, got, counts)
        };
        let (heard, got, counts) = tokio::time::timeout(LIMIT, run).await.expect("relay finished");
        assert!(heard == question, "client_first={client_first}: the question differs");
        assert!(got == answer, "client_first={client_first}: the answer after the half-close differs");
        let counts = counts.unwrap();
        let (sent_first, sent_second) = (question.len() as u64, answer.len() as u64);
        let expected = if client_first { (sent_first, sent_second) } else { (sent_second, sent_first) };
        assert_eq!(counts, expected, "client_first={client_first}");
    }
}

/// The origin resets the connection in the middle of a bulk answer: the client gets a prefix of what was sent and
/// then the end of its connection, and the relay finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_mid_transfer_ends_both_sides() {
    let (mut client, origin, relay) = relayed().await;
    let sent = pattern(6 << 20, 13);
    let run = async {
        let mut origin = origin;
        origin.write_all(&sent).await.unwrap();
        // SO_LINGER 0: closing sends a RST, and whatever the kernel still held is discarded.
        origin.set_zero_linger().unwrap();
        drop(origin);
        let mut got = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            match client.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        (got, relay.await.unwrap())
    };
    let (got, (_, down)) = tokio::time::timeout(LIMIT, run).await.expect("the reset ended the tunnel");
    assert!(got.len() <= sent.len() && got[..] == sent[..got.len()], "not a prefix of what was sent");
    assert_eq!(down, got.len() as u64, "the count is what reached the client");
}
