//! The DNS stub inside `leash run`: a UDP server on the sandbox's own loopback that never forwards anything
//! anywhere. A name the policy lets through (see [`leash_policy::Policy::name_is_reachable`]) is answered with
//! [`TRANSPARENT_ADDR`], where leash listens for programs that ignore the proxy variables; `localhost` with
//! 127.0.0.1; every other name at once with NXDOMAIN, so a refused lookup fails fast instead of timing out. The bytes
//! are read and written by [`crate::wire::dns`]; this file moves datagrams, asks the current policy and puts each
//! lookup on record: every refused name is an audit line (method `DNS`) and a warning, like a refused request; an
//! allowed one is a line at most once per name per answer TTL, so a busy resolver does not flood the log. An allowed
//! name whose line cannot be written is answered REFUSED, as a request whose decision cannot be logged is refused.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leash_policy::{Decision, Host, Question, Reason, TlsInspection, Verdict};
use tokio::net::UdpSocket;

use crate::audit::{AuditLog, LOOKUP_METHOD};
use crate::gate::{write_decision, Asked, Extras};
use crate::policy_handle::PolicyHandle;
use crate::wire::dns::{respond_recording, Answer, NotAHost, ANSWER_TTL};

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
/// arrives (so a SIGHUP reload applies to the next lookup) and putting it on record in `audit`. Malformed queries are
/// answered or dropped by the wire code and never end the server; only a receive error that is no per-datagram
/// failure does.
pub async fn serve_dns(
    socket: UdpSocket,
    policy: PolicyHandle,
    audit: Arc<AuditLog>,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    tokio::pin!(shutdown);
    let mut buf = vec![0u8; MAX_QUERY];
    let mut record = Record { audit, allowed_lately: HashMap::new() };
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
        let Some(query) = buf.get(..len) else { continue };
        let mut not_a_host = None;
        let decide = |host: &Host| answer(&policy, &mut record, host, peer);
        let reply = respond_recording(query, decide, |shown, why| not_a_host = Some((shown.to_owned(), why)));
        if let Some((shown, why)) = not_a_host {
            record.not_a_host(&shown, why, peer);
        }
        if let Some(reply) = reply {
            send(&socket, &reply, peer).await;
        }
    }
}

/// How long an allowed name's line stands for its lookups: the answer's TTL, during which a client's cache (or the
/// stub) answers again without the answer changing.
const ALLOWED_LINE_STANDS: Duration = Duration::from_secs(ANSWER_TTL as u64);
/// Most names remembered as logged lately; past it the memory is cleared (a line more, never a line less).
const ALLOWED_LATELY_MAX: usize = 4096;

/// The audit log, and when each allowed name was last put on it.
struct Record {
    audit: Arc<AuditLog>,
    allowed_lately: HashMap<Box<str>, Instant>,
}

impl Record {
    /// Writes the line for a lookup of `name` decided `d`; false when the log cannot be written.
    fn lookup(&mut self, name: &str, d: &Decision, peer: SocketAddr) -> bool {
        let recent = self.allowed_lately.get(name).is_some_and(|at| at.elapsed() < ALLOWED_LINE_STANDS);
        if d.verdict != Verdict::Block && recent {
            return true;
        }
        let asked = Asked { method: LOOKUP_METHOD, host: name, port: 53, path: None };
        if write_decision(&self.audit, self.audit.next_id(), &asked, d, Some(peer), Extras::default()).is_err() {
            return false;
        }
        if d.verdict != Verdict::Block {
            if self.allowed_lately.len() >= ALLOWED_LATELY_MAX {
                self.allowed_lately.clear();
            }
            self.allowed_lately.insert(name.into(), Instant::now());
        }
        true
    }

    /// Writes the refusal of a lookup for a name that is no host (an IP-literal spelling, `_srv._tcp.x`, a name with
    /// a space, a quote or a control byte): answered NXDOMAIN like any refused name, and on record like one.
    fn not_a_host(&mut self, shown: &str, why: NotAHost, peer: SocketAddr) {
        let reason = match why {
            NotAHost::IpLiteral => Reason::IpLiteral,
            NotAHost::Malformed => Reason::BadHost,
        };
        let refused = Decision { verdict: Verdict::Block, reason, rule: None };
        // The answer is NXDOMAIN whether or not the line is written: nothing is given that a line must stand for.
        let _ = self.lookup(shown, &refused, peer);
    }
}

/// The stub's answer for one valid host name under the current policy, put on record.
fn answer(policy: &PolicyHandle, record: &mut Record, host: &Host, peer: SocketAddr) -> Answer {
    if host.as_str() == "localhost" {
        return Answer::Exists(Ipv4Addr::LOCALHOST);
    }
    // INVARIANT: the stub has no upstream; a name is answered from the policy alone and never resolved.
    let decision = policy.current().decide(&Question::Lookup { host }, TlsInspection::Unavailable);
    let logged = record.lookup(&host.as_str(), &decision, peer);
    match (decision.verdict, logged) {
        (Verdict::Block, _) => Answer::NoSuchName,
        // INVARIANT: a lookup whose line cannot be written gets no address.
        (_, false) => Answer::Refused,
        (_, true) => Answer::Exists(TRANSPARENT_ADDR),
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
