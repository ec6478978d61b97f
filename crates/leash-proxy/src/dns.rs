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
use tokio::sync::watch;

use crate::ask::{Asking, Ruling, Settlement};
use crate::audit::{AuditLog, LOOKUP_METHOD};
use crate::gate::{ruled, write_decision, Asked, Extras};
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
///
/// In ask mode (`ask`), a name no rule admits is answered (its line says `ask`: the request that follows is held and
/// asked), unless a person refused it for the run; a lookup of a name a question is open about waits for the answer,
/// in a task of its own, so other lookups are answered meanwhile.
pub async fn serve_dns(
    socket: UdpSocket,
    policy: PolicyHandle,
    audit: Arc<AuditLog>,
    ask: Option<Arc<Asking>>,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    tokio::pin!(shutdown);
    let socket = Arc::new(socket);
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
        let (mut not_a_host, mut held) = (None, None);
        let decide = |host: &Host| match answer(&policy, &mut record, ask.as_deref(), host, peer) {
            Lookup::Answered(answer) => answer,
            Lookup::Held(waiting) => {
                held = Some((host.as_str().into_owned(), waiting));
                Answer::Refused
            }
        };
        let reply = respond_recording(query, decide, |shown, why| not_a_host = Some((shown.to_owned(), why)));
        if let Some((shown, why)) = not_a_host {
            record.not_a_host(&shown, why, peer);
        }
        match (held, reply) {
            (Some((name, waiting)), _) => {
                let waited = Waited { name, waiting, query: query.to_vec(), peer, audit: record.audit.clone() };
                tokio::spawn(waited.answer(socket.clone(), ask.clone()));
            }
            (None, Some(reply)) => send(&socket, &reply, peer).await,
            (None, None) => {}
        }
    }
}

/// How the stub answers a lookup: now, or once the question open about its name is answered.
enum Lookup {
    Answered(Answer),
    Held(watch::Receiver<Option<Settlement>>),
}

/// A lookup waiting with a held request for the person's answer about its name.
struct Waited {
    name: String,
    waiting: watch::Receiver<Option<Settlement>>,
    query: Vec<u8>,
    peer: SocketAddr,
    audit: Arc<AuditLog>,
}

impl Waited {
    /// Wait for the answer (bounded by the question's own timeout), put the lookup on record as it was decided, and
    /// reply: the transparent address when allowed, NXDOMAIN when refused.
    async fn answer(mut self, socket: Arc<UdpSocket>, ask: Option<Arc<Asking>>) {
        let started = Instant::now();
        let bound = ask.as_ref().map_or(Duration::ZERO, |a| a.timeout()) + Duration::from_secs(1);
        let answered = tokio::time::timeout(bound, self.waiting.wait_for(Option::is_some)).await;
        // The watch's guard is let go here, before any await.
        let settlement = answered.ok().and_then(|r| r.ok().and_then(|s| *s)).unwrap_or(Settlement::TIMED_OUT);
        let ruling = Ruling { settlement, waited: started.elapsed() };
        let decision = ruled(ruling);
        let asked = Asked { method: LOOKUP_METHOD, host: &self.name, port: 53, path: None };
        let extras = Extras { ruling: Some(ruling), ..Extras::default() };
        let logged = write_decision(&self.audit, self.audit.next_id(), &asked, &decision, Some(self.peer), extras);
        let answer = match (decision.verdict, logged) {
            (Verdict::Block, _) => Answer::NoSuchName,
            (_, Err(_)) => Answer::Refused,
            (_, Ok(())) => Answer::Exists(TRANSPARENT_ADDR),
        };
        if let Some(reply) = respond_recording(&self.query, |_| answer, |_, _| {}) {
            send(&socket, &reply, self.peer).await;
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
    fn lookup(&mut self, name: &str, d: &Decision, peer: SocketAddr, ruling: Option<Ruling>) -> bool {
        let recent = self.allowed_lately.get(name).is_some_and(|at| at.elapsed() < ALLOWED_LINE_STANDS);
        if d.verdict != Verdict::Block && recent {
            return true;
        }
        let asked = Asked { method: LOOKUP_METHOD, host: name, port: 53, path: None };
        let extras = Extras { ruling, ..Extras::default() };
        if write_decision(&self.audit, self.audit.next_id(), &asked, d, Some(peer), extras).is_err() {
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
        let _ = self.lookup(shown, &refused, peer, None);
    }
}

/// The stub's answer for one valid host name under the current policy (and in ask mode, the answers given so far),
/// put on record.
fn answer(policy: &PolicyHandle, record: &mut Record, ask: Option<&Asking>, host: &Host, peer: SocketAddr) -> Lookup {
    if host.as_str() == "localhost" {
        return Lookup::Answered(Answer::Exists(Ipv4Addr::LOCALHOST));
    }
    // INVARIANT: the stub has no upstream; a name is answered from the policy alone and never resolved.
    let snap = policy.current();
    let decision = snap.decide(&Question::Lookup { host }, TlsInspection::Unavailable);
    let name = host.as_str();
    let (decision, ruling) = match ask.filter(|_| snap.may_ask(&decision)) {
        None => (decision, None),
        Some(asking) => match asked_lookup(asking, &name) {
            Ok(decided) => decided,
            Err(waiting) => return Lookup::Held(waiting),
        },
    };
    let logged = record.lookup(&name, &decision, peer, ruling);
    Lookup::Answered(match (decision.verdict, logged) {
        (Verdict::Block, _) => Answer::NoSuchName,
        // INVARIANT: a lookup whose line cannot be written gets no address.
        (_, false) => Answer::Refused,
        (_, true) => Answer::Exists(TRANSPARENT_ADDR),
    })
}

/// Ask mode: a lookup of a name no rule admits, as the answers so far decide it — a person's run-wide answer, the
/// open question to wait on (`Err`), or else answered (`ask`) so the request that follows can be held and asked.
fn asked_lookup(
    asking: &Asking,
    name: &str,
) -> Result<(Decision, Option<Ruling>), watch::Receiver<Option<Settlement>>> {
    if let Some(settlement) = asking.settled(name) {
        let ruling = Ruling { settlement, waited: Duration::ZERO };
        return Ok((ruled(ruling), Some(ruling)));
    }
    if let Some(waiting) = asking.waiting_on(name) {
        return Err(waiting);
    }
    Ok((Decision { verdict: Verdict::Allow, reason: Reason::Ask, rule: None }, None))
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
