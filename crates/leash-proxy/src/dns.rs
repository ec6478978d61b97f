//! The DNS stub inside `leash run`: a UDP server on the sandbox's own loopback that never forwards anything
//! anywhere. A name the policy lets through (see [`leash_policy::Policy::name_is_reachable`]) is answered with
//! [`TRANSPARENT_ADDR`], where leash listens for programs that ignore the proxy variables; `localhost` with
//! 127.0.0.1; every other name at once with NXDOMAIN, so a refused lookup fails fast instead of timing out. The bytes
//! are read and written by [`crate::wire::dns`]; this file only moves datagrams and asks the current policy.

use std::future::Future;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};

use leash_policy::Host;
use tokio::net::UdpSocket;

use crate::config::PolicyHandle;
use crate::wire::dns::{respond, Answer};

/// The sandbox-local address allowed names resolve to: inside the sandbox's own loopback (so nothing outside can be
/// reached through it), and not 127.0.0.1, so the transparent listeners on the allowed ports never collide with a
/// program's own servers or the proxy on 127.0.0.1.
pub const TRANSPARENT_ADDR: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

/// The ports that get a transparent listener at [`TRANSPARENT_ADDR`]: 80, 443 and every port the policy lets a
/// request or tunnel name, at most `room` of them (the sandbox hands out a bounded number of sockets).
pub fn transparent_ports(policy: &leash_policy::Policy, room: usize) -> Vec<u16> {
    let mut ports: Vec<u16> = [80, 443].into_iter().chain(policy.ports().iter().copied()).collect();
    ports.extend(policy.tunnel_ports());
    ports.sort_unstable();
    ports.dedup();
    if ports.len() > room {
        tracing::warn!("only {room} ports get a transparent listener; proxy-unaware clients reach no other port");
        ports.truncate(room);
    }
    ports
}

/// Receive buffer for one query. Real queries are under 600 bytes (a long name and an OPT record with a cookie);
/// anything longer is cut here and then answered FORMERR.
const MAX_QUERY: usize = 4096;

/// Answer queries on `socket` until `shutdown` completes, deciding each on the policy as it is when the query
/// arrives (so a SIGHUP reload applies to the next lookup). Malformed queries are answered or dropped by the wire
/// code and never end the server; only a receive error that is no per-datagram failure does.
pub async fn serve_dns(socket: UdpSocket, policy: PolicyHandle, shutdown: impl Future<Output = ()>) -> io::Result<()> {
    tokio::pin!(shutdown);
    let mut buf = vec![0u8; MAX_QUERY];
    loop {
        let received = tokio::select! {
            () = &mut shutdown => return Ok(()),
            received = socket.recv_from(&mut buf) => received,
        };
        let (len, peer) = match received {
            Ok(r) => r,
            Err(e) if is_transient(&e) => continue,
            Err(e) => return Err(e),
        };
        if let Some(reply) = buf.get(..len).and_then(|query| respond(query, |host| answer(&policy, host))) {
            send(&socket, &reply, peer).await;
        }
    }
}

/// The stub's answer for one valid host name under the current policy.
fn answer(policy: &PolicyHandle, host: &Host) -> Answer {
    if host.as_str() == "localhost" {
        return Answer::Exists(Ipv4Addr::LOCALHOST);
    }
    // INVARIANT: the stub has no upstream; a name is answered from the policy alone and never resolved.
    match policy.current().name_is_reachable(host) {
        true => Answer::Exists(TRANSPARENT_ADDR),
        false => {
            tracing::debug!(name = %host.as_str(), "dns: NXDOMAIN for a name the policy refuses");
            Answer::NoSuchName
        }
    }
}

async fn send(socket: &UdpSocket, reply: &[u8], peer: SocketAddr) {
    if let Err(e) = socket.send_to(reply, peer).await {
        tracing::debug!("dns: reply to {peer} not sent: {e}");
    }
}

/// Errors a UDP receive reports for one datagram or an earlier send (an ICMP port-unreachable from a client that
/// went away), after which the socket keeps working.
fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
            | io::ErrorKind::HostUnreachable
            | io::ErrorKind::NetworkUnreachable
    )
}

#[cfg(test)]
mod tests;
