//! The containment self-test: from the process it runs in (a sandboxed command's uid and namespaces), every way out
//! that must be shut is tried, and leash's own listeners must answer. `leash probe` runs it for any sandbox or pod;
//! `leash run` runs it as the command would run before starting the command, in every containment (in the
//! user-namespace sandbox in the command's place, `cmd/probe.rs`), and refuses the run, naming the probe, when
//! anything got through.
//!
//! A probe passes when the attempt fails at once for a reason that means nothing left: `EPERM`/`EACCES` (a firewall's
//! drop, a seccomp or socket refusal), `ENETUNREACH`/`EHOSTUNREACH`/`EADDRNOTAVAIL` (no route), `EAFNOSUPPORT` (no
//! such family). It fails when the attempt succeeds, when a loopback port answers `ECONNREFUSED` (the packet reached
//! it: the loopback is open), or when a connection neither succeeds nor fails within [`CONNECT_WAIT`] (a packet went
//! out and nobody answered yet).
//!
//! Where the wall is outside the namespace ([`Wall::Outside`]: a namespace with routes out, served by `leash attach
//! --allow-routes`, whose traffic a Kubernetes NetworkPolicy or the host's firewall drops), a datagram sent or a SYN
//! left unanswered proves nothing either way: there a way out counts as open only when something answers — a TCP
//! connection accepted or reset, a DNS query answered. The canaries the operator names (`--canary`), addresses that
//! answer whenever they are reachable, are what makes that test bite.
//!
//! The outside addresses tried are documentation addresses (RFC 5737 `192.0.2.1`, RFC 3849 `2001:db8::1`), never
//! routed on the internet: a containment that works sends nothing there, and one that does not sends one SYN and one
//! datagram that no host answers.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::time::Duration;

/// The first argument `leash run`'s sandbox starts leash with in the command's place (`cmd/probe.rs`, `in_sandbox`);
/// `main` looks for it before parsing anything else. Not a subcommand a person types.
pub const IN_SANDBOX: &str = "__sandbox-self-test";

/// How long a connection may take before it counts as a packet that left: a firewall's drop or a missing route
/// fails at once, a loopback listener answers in microseconds.
const CONNECT_WAIT: Duration = Duration::from_millis(1500);

/// The outside addresses tried (documentation ranges, see the module docs), on a port a web server would use.
const OUTSIDE_V4: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)), 80);
const OUTSIDE_V6: SocketAddr = SocketAddr::new(IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)), 80);

/// Resolvers that answer on a sandbox's loopback whatever its resolv.conf says: Docker's embedded DNS and
/// systemd-resolved's stub.
const KNOWN_RESOLVERS: [Ipv4Addr; 2] = [Ipv4Addr::new(127, 0, 0, 11), Ipv4Addr::new(127, 0, 0, 53)];

/// What leash serves to the command, which must answer (and is not a way out), and what else the test needs to know
/// of the place it runs in.
#[derive(Debug, Clone, Default)]
pub struct Expected {
    /// leash's TCP listeners (the proxy, services).
    pub tcp: Vec<SocketAddr>,
    /// leash's UDP sockets (the DNS stub).
    pub udp: Vec<SocketAddr>,
    /// Outside TCP addresses that answer whenever they are reachable, tried besides the documentation addresses.
    pub canaries: Vec<SocketAddr>,
    /// Where what leaves is stopped, which decides what an attempt can tell.
    pub wall: Wall,
    /// The resolver configuration of the place probed (default: `/etc/resolv.conf`).
    pub resolv_conf: Option<PathBuf>,
    /// How leash's own TCP listeners are shown to answer.
    pub reach: Reach,
}

/// How leash's own TCP listeners ([`Expected::tcp`]) are shown to answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Reach {
    /// A connection to each: where a firewall or a namespace leash did not make stands between, it must let them
    /// through.
    #[default]
    Connect,
    /// Each is found listening in this namespace's table, and left alone: in leash's own sandbox, which binds them
    /// itself and where a connection would be one leash then serves (a TCP service's is relayed to its target and
    /// logged).
    Listed,
}

/// Where the traffic that must not leave is stopped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Wall {
    /// In the namespace itself: no route, or a firewall there (leash's per-uid rules). An attempt fails at once or
    /// something got out.
    #[default]
    Here,
    /// Outside it (a NetworkPolicy, the host's firewall): the namespace has routes out, so an attempt leaves and is
    /// dropped further on. Only an answer shows a way out.
    Outside,
}

/// One probe's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// What was tried, e.g. `tcp 192.0.2.1:80`.
    pub what: String,
    /// Whether it came out as it must.
    pub ok: bool,
    /// What happened: `EPERM`, `connected`, `no answer within 1.5s`, ...
    pub outcome: String,
}

/// Runs every probe; the failed ones say what got through.
pub fn run(expected: &Expected) -> Vec<Probe> {
    run_stepwise(expected, &mut |_| {}, &mut |_| {})
}

/// [`run`], calling `before` with each probe's name just before its attempt and `after` with its result: `leash run`
/// reads the firewall's counters around each attempt (`leash probe --stepwise`).
pub fn run_stepwise(expected: &Expected, before: &mut dyn FnMut(&str), after: &mut dyn FnMut(&Probe)) -> Vec<Probe> {
    let mut probes = Vec::new();
    let mut attempt = |what: String, make: &dyn Fn() -> (bool, String)| {
        before(&what);
        let (ok, outcome) = make();
        let probe = Probe { what, ok, outcome };
        after(&probe);
        probes.push(probe);
    };
    let judged = |outcome: io::Result<()>, loopback: bool| {
        let probe = shut(String::new(), outcome, loopback);
        (probe.ok, probe.outcome)
    };
    // Where no route leads, nothing can leave: said so, without an attempt (a kernel refusing for want of a route
    // answers as a firewall's reject would, and the self-test must tell the two apart).
    // The documentation addresses' routes are looked up once for the several probes that try each (every lookup from
    // leash's sandbox is a `connect` its init makes).
    let (v4, v6) = (std::cell::OnceCell::new(), std::cell::OnceCell::new());
    let route_to = |to: SocketAddr| match to {
        _ if to == OUTSIDE_V4 => *v4.get_or_init(|| has_route(OUTSIDE_V4)),
        _ if to == OUTSIDE_V6 => *v6.get_or_init(|| has_route(OUTSIDE_V6)),
        _ => has_route(to),
    };
    let routed = |what: &dyn Fn() -> io::Result<()>, to: SocketAddr| {
        if route_to(to) {
            judged(what(), false)
        } else {
            (true, NO_ROUTE.to_owned())
        }
    };
    let outside = expected.wall == Wall::Outside;
    for addr in [OUTSIDE_V4, OUTSIDE_V6] {
        if outside {
            attempt(format!("tcp {addr}"), &|| answered(tcp(addr)));
            continue;
        }
        attempt(format!("tcp {addr}"), &|| routed(&|| tcp(addr), addr));
        attempt(format!("udp {addr}"), &|| routed(&|| udp(addr), addr));
    }
    for &canary in &expected.canaries {
        match outside {
            true => attempt(format!("tcp canary {canary}"), &|| answered(tcp(canary))),
            false => attempt(format!("tcp canary {canary}"), &|| routed(&|| tcp(canary), canary)),
        }
    }
    if !outside {
        attempt("icmp echo 192.0.2.1".to_owned(), &|| routed(&|| icmp(OUTSIDE_V4.ip()), OUTSIDE_V4));
    }
    // Read only when a loopback resolver other than leash's is named: the table lists every UDP socket of every
    // namespace (a quarter of a millisecond here), and a sandbox's resolv.conf names leash's stub alone.
    let udp_bound = std::cell::OnceCell::new();
    let bound_at = |resolver: &SocketAddr| {
        udp_bound.get_or_init(|| bound_sockets(&[("net/udp", false), ("net/udp6", true)], None)).contains(resolver)
    };
    for resolver in resolvers(expected.resolv_conf.as_deref()).into_iter().filter(|r| !expected.udp.contains(r)) {
        // A datagram to a loopback address nothing is bound at goes nowhere: only a resolver there is a way out.
        if resolver.ip().is_loopback() && !bound_at(&resolver) {
            attempt(format!("udp resolver {resolver}"), &|| (true, "nothing there".to_owned()));
            continue;
        }
        match outside && !resolver.ip().is_loopback() {
            true => attempt(format!("dns resolver {resolver}"), &|| dns_answered(resolver)),
            false => attempt(format!("udp resolver {resolver}"), &|| routed(&|| udp(resolver), resolver)),
        }
    }
    let listening = loopback_listeners(&expected.tcp);
    for &addr in listening.iter().filter(|a| !expected.tcp.contains(a)) {
        attempt(format!("tcp listener {addr}"), &|| judged(tcp(addr), true));
    }
    for addr in &expected.tcp {
        attempt(format!("leash's listener {addr}"), &|| match expected.reach {
            Reach::Listed if listening.contains(addr) => (true, "listening".to_owned()),
            Reach::Listed => (false, "not listening here".to_owned()),
            Reach::Connect => match tcp(*addr) {
                Ok(()) => (true, "answers".to_owned()),
                Err(e) => (false, describe(&Err(e))),
            },
        });
    }
    probes
}

/// What a probe says where no route leads to its destination.
pub const NO_ROUTE: &str = "no route to it";

/// Whether this namespace routes `to` anywhere: a UDP socket's `connect` looks the route up and sends nothing.
fn has_route(to: SocketAddr) -> bool {
    let local: SocketAddr = if to.is_ipv4() {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0)
    } else {
        SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0)
    };
    UdpSocket::bind(local).and_then(|s| s.connect(to)).is_ok()
}

/// Whether every probe passed.
pub fn contained(probes: &[Probe]) -> bool {
    probes.iter().all(|p| p.ok)
}

/// Where the wall is outside ([`Wall::Outside`]): a connection accepted, or reset by the far end, reached something
/// (a firewall's reset is told apart only by the addresses no host answers); silence or an unreachable verdict
/// passes.
fn answered(outcome: io::Result<()>) -> (bool, String) {
    const ECONNREFUSED: i32 = 111;
    match &outcome {
        Ok(()) => (false, describe(&outcome)),
        Err(e) if e.raw_os_error() == Some(ECONNREFUSED) => (false, "answered with a reset: it was reached".to_owned()),
        Err(e) if e.kind() == io::ErrorKind::TimedOut => (true, "no answer (dropped, or nobody there)".to_owned()),
        Err(_) => (true, describe(&outcome)),
    }
}

/// Where the wall is outside: a DNS query to `resolver` (the root's NS records), judged by whether an answer comes.
fn dns_answered(resolver: SocketAddr) -> (bool, String) {
    let asked = (|| {
        let local: SocketAddr =
            if resolver.is_ipv4() { "0.0.0.0:0".parse() } else { "[::]:0".parse() }.map_err(io::Error::other)?;
        let socket = UdpSocket::bind(local)?;
        socket.set_read_timeout(Some(CONNECT_WAIT))?;
        socket.connect(resolver)?;
        socket.send(&DNS_QUERY)?;
        let mut answer = [0u8; 512];
        socket.recv(&mut answer)
    })();
    match asked {
        Ok(_) => (false, "answered: queries get out".to_owned()),
        Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
            (true, "no answer (dropped, or nobody there)".to_owned())
        }
        Err(e) => (true, e.to_string()),
    }
}

/// A DNS query for the root's NS records: the header (id 0x4c45, recursion desired, one question) and `. NS IN`.
const DNS_QUERY: [u8; 17] = [0x4c, 0x45, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1];

/// A way out that must be shut: passes on an immediate refusal that means nothing left (on the loopback,
/// `ECONNREFUSED` means the packet reached the port: it fails there).
fn shut(what: String, outcome: io::Result<()>, loopback: bool) -> Probe {
    let ok = match &outcome {
        Ok(()) => false,
        Err(e) => match e.raw_os_error() {
            Some(libc_errno) => shut_errno(libc_errno, loopback),
            None => false,
        },
    };
    Probe { what, ok, outcome: describe(&outcome) }
}

/// The errnos that mean the attempt left nothing behind it.
fn shut_errno(errno: i32, loopback: bool) -> bool {
    const EPERM: i32 = 1;
    const EACCES: i32 = 13;
    const EAFNOSUPPORT: i32 = 97;
    const EADDRNOTAVAIL: i32 = 99;
    const ENETUNREACH: i32 = 101;
    const ECONNREFUSED: i32 = 111;
    const EHOSTUNREACH: i32 = 113;
    match errno {
        EPERM | EACCES | EAFNOSUPPORT | EADDRNOTAVAIL | ENETUNREACH | EHOSTUNREACH => true,
        ECONNREFUSED => !loopback,
        _ => false,
    }
}

fn describe(outcome: &io::Result<()>) -> String {
    match outcome {
        Ok(()) => "got through".to_owned(),
        Err(e) if e.kind() == io::ErrorKind::TimedOut => format!("no answer within {}s", CONNECT_WAIT.as_secs_f32()),
        Err(e) => e.to_string(),
    }
}

fn tcp(addr: SocketAddr) -> io::Result<()> {
    TcpStream::connect_timeout(&addr, CONNECT_WAIT).map(drop)
}

/// A datagram sent (a DNS query's header is enough for a resolver's port; nothing is read back).
fn udp(addr: SocketAddr) -> io::Result<()> {
    let local: SocketAddr =
        if addr.is_ipv4() { "0.0.0.0:0".parse() } else { "[::]:0".parse() }.map_err(io::Error::other)?;
    let socket = UdpSocket::bind(local)?;
    socket.send_to(&DNS_QUERY, addr).map(drop)
}

/// An ICMP echo through a ping socket (`SOCK_DGRAM`, `IPPROTO_ICMP`), as an unprivileged `ping` sends it.
fn icmp(to: IpAddr) -> io::Result<()> {
    use rustix::net::{AddressFamily, SocketType};
    let socket = rustix::net::socket(AddressFamily::INET, SocketType::DGRAM, Some(rustix::net::ipproto::ICMP))?;
    let echo = [8u8, 0, 0xf7, 0xfe, 0, 1, 0, 0];
    let IpAddr::V4(v4) = to else { return Err(io::Error::other("not IPv4")) };
    let addr = rustix::net::SocketAddrV4::new(v4, 0);
    rustix::net::sendto(&socket, &echo, rustix::net::SendFlags::empty(), &addr).map(drop).map_err(Into::into)
}

/// The nameservers of /etc/resolv.conf, and the resolvers sandboxes commonly run on their loopback, port 53.
fn resolvers(conf: Option<&std::path::Path>) -> Vec<SocketAddr> {
    let conf = std::fs::read_to_string(conf.unwrap_or("/etc/resolv.conf".as_ref())).unwrap_or_default();
    let named = conf.lines().filter_map(|l| l.trim().strip_prefix("nameserver")).filter_map(|a| a.trim().parse().ok());
    let mut all: Vec<SocketAddr> =
        named.chain(KNOWN_RESOLVERS.map(IpAddr::V4)).map(|ip: IpAddr| SocketAddr::new(ip, 53)).collect();
    all.sort();
    all.dedup();
    all
}

/// Every TCP listener a process here could connect to, IPv4 and IPv6: one bound to an address, at that address; one
/// bound to the wildcard, at the loopback. From the kernel's `sock_diag` (`leash_sandbox::tcp_listeners`), trusted
/// only when it lists something and every listener of leash's (`own`) is among what it lists; else from
/// `/proc/net/tcp` and `/proc/net/tcp6`, which every kernel has (gVisor's too) but which cost milliseconds to read on
/// a host with many sockets.
fn loopback_listeners(own: &[SocketAddr]) -> Vec<SocketAddr> {
    /// The kernel's LISTEN state in `/proc/net/tcp`.
    const LISTEN: &str = "0A";
    let mut listed: Vec<SocketAddr> = leash_sandbox::tcp_listeners()
        .unwrap_or_default()
        .into_iter()
        .map(|at| SocketAddr::new(loopback_if_wildcard(at.ip()), at.port()))
        .collect();
    if listed.is_empty() || !own.iter().all(|addr| listed.contains(addr)) {
        return bound_sockets(&[("net/tcp", false), ("net/tcp6", true)], Some(LISTEN));
    }
    listed.sort();
    listed.dedup();
    listed
}

/// The loopback address of `ip`'s family where `ip` is the wildcard: what a listener bound there is reached at.
fn loopback_if_wildcard(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) if v4.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(v6) if v6.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        other => other,
    }
}

/// The local addresses of the sockets in the kernel's `tables` (in `state`, if given), as [`listening_at`] says.
/// Read through `/proc/thread-self`: `/proc/net` is the main thread's namespace, and `leash attach` probes from a
/// thread that entered another.
fn bound_sockets(tables: &[(&str, bool)], state: Option<&str>) -> Vec<SocketAddr> {
    let mut found = Vec::new();
    for (file, v6) in tables {
        let table = std::fs::read_to_string(std::path::Path::new("/proc/thread-self").join(file)).unwrap_or_default();
        for line in table.lines().skip(1) {
            // `sl local_address rem_address st ...`.
            let fields: Vec<&str> = line.split_whitespace().collect();
            if state.is_some_and(|st| fields.get(3) != Some(&st)) {
                continue;
            }
            if let Some(addr) = fields.get(1).and_then(|a| listening_at(a, *v6)) {
                found.push(addr);
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

/// `ADDR:PORT` as the kernel's tables write it (the address as 32-bit words in host order, hex), the wildcard
/// turned into the loopback.
fn listening_at(field: &str, v6: bool) -> Option<SocketAddr> {
    let (addr, port) = field.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let words: Vec<u32> = (0..addr.len() / 8)
        .map(|i| addr.get(8 * i..8 * i + 8).and_then(|w| u32::from_str_radix(w, 16).ok()))
        .collect::<Option<_>>()?;
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let ip = match (v6, bytes.len()) {
        (false, 4) => IpAddr::V4(Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3])),
        (true, 16) => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(bytes.as_slice()).ok()?)),
        _ => return None,
    };
    Some(SocketAddr::new(loopback_if_wildcard(ip), port))
}

/// The probes as lines for a person: one per probe, `ok` or `OPEN`, what, what happened.
pub fn report(probes: &[Probe]) -> String {
    probes.iter().map(line).collect()
}

/// One probe's line of [`report`].
pub fn line(p: &Probe) -> String {
    format!("{} {}: {}\n", if p.ok { "ok  " } else { "OPEN" }, p.what, p.outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_open_loopback_port_fails_the_probe_and_a_refused_outside_one_passes() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let open = listener.local_addr().unwrap();
        let probe = shut(format!("tcp loopback {open}"), tcp(open), true);
        assert!(!probe.ok, "{probe:?}");
        drop(listener);
        let refused = shut("closed".into(), tcp(open), true);
        assert!(!refused.ok, "ECONNREFUSED on the loopback means the port was reached: {refused:?}");
        let outside = shut("outside".into(), Err(io::Error::from_raw_os_error(111)), false);
        assert!(outside.ok, "a refusal from outside left nothing open");
        let eperm = shut("dropped".into(), Err(io::Error::from_raw_os_error(1)), true);
        assert!(eperm.ok);
        let timeout = shut("silent".into(), Err(io::ErrorKind::TimedOut.into()), false);
        assert!(!timeout.ok, "a connection left unanswered may have left");
    }

    #[test]
    fn with_the_wall_outside_only_an_answer_is_a_way_out() {
        assert!(!answered(Ok(())).0, "a connection accepted");
        assert!(!answered(Err(io::Error::from_raw_os_error(111))).0, "a reset from the far end");
        assert!(answered(Err(io::ErrorKind::TimedOut.into())).0, "silence: dropped on the way");
        assert!(answered(Err(io::Error::from_raw_os_error(101))).0, "no route");
        assert!(answered(Err(io::Error::from_raw_os_error(113))).0, "an unreachable verdict from a router");
    }

    #[test]
    fn a_resolver_that_answers_is_a_way_out_and_one_that_is_silent_is_not() {
        let resolver = UdpSocket::bind("127.0.0.1:0").unwrap();
        let at = resolver.local_addr().unwrap();
        let answering = std::thread::spawn(move || {
            let mut query = [0u8; 512];
            let (n, from) = resolver.recv_from(&mut query).unwrap();
            assert_eq!(&query[..n], &DNS_QUERY, "a real query was asked");
            resolver.send_to(&query[..n], from).unwrap();
            resolver
        });
        assert!(!dns_answered(at).0, "an answer came back");
        let silent = answering.join().unwrap();
        assert!(dns_answered(silent.local_addr().unwrap()).0, "no answer within the wait");
    }

    // `run` itself is tried only inside namespaces the tests make (tests/inside.rs, tests/attacks/doors.rs): here
    // it would send its probes to the documentation addresses from the host.
    #[test]
    fn a_listening_loopback_port_is_found_in_the_kernels_table() {
        // An address of the loopback no other test binds: a port freed here and taken by another test at once
        // would otherwise still be listed.
        let listener = std::net::TcpListener::bind("127.0.0.93:0").unwrap();
        let addr = listener.local_addr().unwrap();
        assert!(loopback_listeners(&[addr]).contains(&addr), "{addr} listed");
        let wildcard = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
        let at = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), wildcard.local_addr().unwrap().port());
        assert!(loopback_listeners(&[addr]).contains(&at), "the wildcard listener is reached at the loopback");
        let from_proc = bound_sockets(&[("net/tcp", false), ("net/tcp6", true)], Some("0A"));
        assert!(from_proc.contains(&addr) && from_proc.contains(&at), "the kernel's tables say the same");
        drop(listener);
        // Closed once no process holds it: a child another test is starting may hold a copy until its `execve`.
        let closed = (0..200).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            !loopback_listeners(&[]).contains(&addr)
        });
        assert!(closed, "{addr} no longer listening");
        let gone = loopback_listeners(&[addr]);
        assert!(!gone.contains(&addr), "a listener of leash's that is gone is not listed from the tables either");
    }

    #[test]
    fn the_kernels_addresses_read_back() {
        let v4 = format!("{:08X}:0C38", u32::from_ne_bytes([127, 0, 0, 2]));
        assert_eq!(listening_at(&v4, false), Some("127.0.0.2:3128".parse().unwrap()));
        assert_eq!(listening_at("00000000:0050", false), Some("127.0.0.1:80".parse().unwrap()));
        let one: String = [0u32, 0, 0, u32::from_ne_bytes([0, 0, 0, 1])].iter().map(|w| format!("{w:08X}")).collect();
        assert_eq!(listening_at(&format!("{one}:01BB"), true), Some("[::1]:443".parse().unwrap()));
        assert_eq!(listening_at("zz:1", false), None);
    }
}
