//! The calling thread's network namespace read over rtnetlink: every route (all tables) and every address, as
//! much of each as the isolation check needs; and its TCP listeners over `sock_diag`, for the containment self-test. A dump request, then the kernel's answers until `NLMSG_DONE`; every
//! length is checked before it is used, and a malformed answer is an error, never a guess. (The proxy reads the
//! `local` routes for its destination check itself: it does not depend on this crate.)

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const NLMSG_HDR: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const RTM_GETROUTE: u16 = 26;
const RTM_NEWROUTE: u16 = 24;
const RTM_GETADDR: u16 = 22;
const RTM_NEWADDR: u16 = 20;
const RTN_UNICAST: u8 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const RTA_MULTIPATH: u16 = 9;
const RTA_VIA: u16 = 18;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;

/// A route, as the isolation check sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Route {
    pub family: u8,
    /// The destination's prefix length: 0 is a default route.
    pub dst_len: u8,
    /// A unicast route (not local, broadcast, multicast, blackhole, unreachable, prohibit).
    pub unicast: bool,
    /// It goes through a gateway (`RTA_GATEWAY`, `RTA_VIA`, or several next hops).
    pub via_gateway: bool,
    /// The output interface's index.
    pub oif: Option<u32>,
}

impl Route {
    /// A way out of the namespace beyond its attached links: a unicast default route, or one through a gateway.
    pub fn leads_out(&self) -> bool {
        self.unicast && (self.dst_len == 0 || self.via_gateway)
    }
}

/// Every route of the calling thread's network namespace, IPv4 and IPv6, in every table.
pub(crate) fn routes() -> io::Result<Vec<Route>> {
    // struct rtmsg, all zero but the family: every table, every type.
    let request = [libc::AF_UNSPEC as u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    let mut routes = Vec::new();
    for (kind, payload) in dump(RTM_GETROUTE, &request)? {
        if kind != RTM_NEWROUTE {
            continue;
        }
        let head = payload.get(..12).ok_or_else(|| malformed("route"))?;
        let mut route =
            Route { family: head[0], dst_len: head[1], unicast: head[7] == RTN_UNICAST, via_gateway: false, oif: None };
        for (attr, data) in attributes(&payload[12..])? {
            match attr {
                RTA_GATEWAY | RTA_VIA | RTA_MULTIPATH => route.via_gateway = true,
                RTA_OIF => route.oif = data.get(..4).map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]])),
                _ => {}
            }
        }
        routes.push(route);
    }
    Ok(routes)
}

/// The address in an attribute's `data`, if it is one of `family`'s size.
fn ip_of(family: i32, data: &[u8]) -> Option<IpAddr> {
    match (family, data.len()) {
        (libc::AF_INET, 4) => Some(IpAddr::V4(Ipv4Addr::new(data[0], data[1], data[2], data[3]))),
        (libc::AF_INET6, 16) => {
            let mut octets = [0u8; 16];
            octets.copy_from_slice(data);
            Some(IpAddr::V6(Ipv6Addr::from(octets)))
        }
        _ => None,
    }
}

/// Every address of the calling thread's network namespace, with its interface's index.
pub(crate) fn addresses() -> io::Result<Vec<(u32, IpAddr)>> {
    // struct ifaddrmsg, all zero: every family.
    let request = [0u8; 8];
    let mut out = Vec::new();
    for (kind, payload) in dump(RTM_GETADDR, &request)? {
        if kind != RTM_NEWADDR {
            continue;
        }
        let head = payload.get(..8).ok_or_else(|| malformed("address"))?;
        let index = u32::from_ne_bytes([head[4], head[5], head[6], head[7]]);
        let family = i32::from(head[0]);
        let mut address = None;
        for (attr, data) in attributes(&payload[8..])? {
            let Some(ip) = ip_of(family, data) else { continue };
            // IFA_LOCAL is the address itself where a peer address is also given; IFA_ADDRESS otherwise.
            if attr == IFA_LOCAL || (attr == IFA_ADDRESS && address.is_none()) {
                address = Some(ip);
            }
        }
        out.extend(address.map(|ip| (index, ip)));
    }
    Ok(out)
}

/// `sock_diag`'s request for sockets of a family (linux/sock_diag.h).
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// The kernel's TCP_LISTEN state, as a bit of `inet_diag_req_v2`'s `idiag_states`.
const TCPF_LISTEN: u32 = 1 << 10;
/// The length of `struct inet_diag_msg` up to the end of its socket id (family, state, timer, retransmits, then
/// `inet_diag_sockid`: source port, destination port, source and destination addresses, interface, cookie).
const INET_DIAG_MSG_ID_END: usize = 52;

/// The TCP listeners of the calling thread's network namespace, IPv4 and IPv6, at their bound addresses (a wildcard
/// as `0.0.0.0` or `::`), from `sock_diag`. Asked for listeners only, the kernel walks its table of listeners alone;
/// reading `/proc/net/tcp` walks every TCP socket of every namespace (8 ms on a host with a large table).
pub(crate) fn tcp_listeners() -> io::Result<Vec<SocketAddr>> {
    let mut found = Vec::new();
    for family in [libc::AF_INET, libc::AF_INET6] {
        // struct inet_diag_req_v2: family, protocol, extensions, padding, states, then a zeroed socket id.
        let mut request = [0u8; 56];
        request[0] = family as u8;
        request[1] = libc::IPPROTO_TCP as u8;
        request[4..8].copy_from_slice(&TCPF_LISTEN.to_ne_bytes());
        let answers = match dump_on(libc::NETLINK_SOCK_DIAG, SOCK_DIAG_BY_FAMILY, &request) {
            // A kernel without IPv6 has no IPv6 sockets to list.
            Err(e) if family == libc::AF_INET6 && e.raw_os_error() == Some(libc::ENOENT) => continue,
            other => other?,
        };
        for (kind, payload) in answers {
            if kind == SOCK_DIAG_BY_FAMILY {
                found.push(listener_of(&payload)?);
            }
        }
    }
    Ok(found)
}

/// The bound address of one `inet_diag_msg`.
fn listener_of(msg: &[u8]) -> io::Result<SocketAddr> {
    let id = msg.get(..INET_DIAG_MSG_ID_END).ok_or_else(|| malformed("inet_diag message"))?;
    let port = u16::from_be_bytes([id[4], id[5]]);
    let ip = match i32::from(id[0]) {
        libc::AF_INET => ip_of(libc::AF_INET, &id[8..12]),
        libc::AF_INET6 => ip_of(libc::AF_INET6, &id[8..24]),
        _ => None,
    };
    ip.map(|ip| SocketAddr::new(ip, port)).ok_or_else(|| malformed("inet_diag family"))
}

/// One rtnetlink dump (see [`dump_on`]).
fn dump(msg_type: u16, body: &[u8]) -> io::Result<Vec<(u16, Vec<u8>)>> {
    dump_on(libc::NETLINK_ROUTE, msg_type, body)
}

/// One dump over netlink `protocol`: send `msg_type` with `body`, collect (type, payload) of every answer until
/// `NLMSG_DONE`.
fn dump_on(protocol: i32, msg_type: u16, body: &[u8]) -> io::Result<Vec<(u16, Vec<u8>)>> {
    // SAFETY: socket takes plain integer arguments and returns a new descriptor or -1.
    let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, protocol) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by socket and is owned by nothing else.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    let flags = (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16;
    let len = u32::try_from(NLMSG_HDR + body.len()).map_err(|_| malformed("request"))?;
    let mut request = Vec::with_capacity(NLMSG_HDR + body.len());
    request.extend_from_slice(&len.to_ne_bytes());
    request.extend_from_slice(&msg_type.to_ne_bytes());
    request.extend_from_slice(&flags.to_ne_bytes());
    request.extend_from_slice(&1u32.to_ne_bytes());
    request.extend_from_slice(&0u32.to_ne_bytes());
    request.extend_from_slice(body);
    // SAFETY: sends `request.len()` initialised bytes from a live buffer on the socket we own.
    let sent = unsafe { libc::send(socket.as_raw_fd(), request.as_ptr().cast(), request.len(), 0) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut messages = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // SAFETY: receives at most `buf.len()` bytes into the live buffer we own.
        let got = unsafe { libc::recv(socket.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        let got = usize::try_from(got).map_err(|_| io::Error::last_os_error())?;
        if got == 0 {
            return Err(malformed("dump (ended early)"));
        }
        let mut at = 0;
        while at + NLMSG_HDR <= got {
            let len = u32::from_ne_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]) as usize;
            let kind = u16::from_ne_bytes([buf[at + 4], buf[at + 5]]);
            if len < NLMSG_HDR || at + len > got {
                return Err(malformed("message"));
            }
            let payload = &buf[at + NLMSG_HDR..at + len];
            match kind {
                NLMSG_DONE => return Ok(messages),
                NLMSG_ERROR => {
                    let errno = payload.get(..4).map_or(0, |b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
                    if errno != 0 {
                        return Err(io::Error::from_raw_os_error(-errno));
                    }
                }
                _ => messages.push((kind, payload.to_vec())),
            }
            at += align(len);
        }
    }
}

/// The (type, data) of each route attribute in `bytes`.
fn attributes(mut bytes: &[u8]) -> io::Result<Vec<(u16, &[u8])>> {
    let mut out = Vec::new();
    while bytes.len() >= 4 {
        let len = usize::from(u16::from_ne_bytes([bytes[0], bytes[1]]));
        let kind = u16::from_ne_bytes([bytes[2], bytes[3]]) & 0x3fff;
        if len < 4 || len > bytes.len() {
            return Err(malformed("attribute"));
        }
        out.push((kind, &bytes[4..len]));
        bytes = bytes.get(align(len)..).unwrap_or_default();
    }
    Ok(out)
}

fn align(len: usize) -> usize {
    (len + 3) & !3
}

fn malformed(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("malformed rtnetlink {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_are_split_on_their_aligned_lengths() {
        let bytes = [8, 0, 5, 0, 10, 0, 0, 1, 5, 0, 4, 0, 7, 0, 0, 0];
        let attrs = attributes(&bytes).unwrap();
        assert_eq!(attrs, vec![(RTA_GATEWAY, &[10, 0, 0, 1][..]), (RTA_OIF, &[7][..])]);
        assert!(attributes(&[9, 0, 5, 0, 1]).is_err(), "a length past the end is malformed");
    }

    #[test]
    fn only_default_and_gateway_routes_lead_out() {
        let link = Route { family: 2, dst_len: 30, unicast: true, via_gateway: false, oif: Some(2) };
        assert!(!link.leads_out());
        assert!(Route { dst_len: 0, ..link.clone() }.leads_out());
        assert!(Route { via_gateway: true, ..link.clone() }.leads_out());
        assert!(!Route { dst_len: 0, unicast: false, ..link }.leads_out(), "a default blackhole leads nowhere");
    }

    #[test]
    fn a_tcp_listener_is_listed_at_its_address_and_gone_once_closed() {
        let listener = std::net::TcpListener::bind("127.0.0.94:0").unwrap();
        let at = listener.local_addr().unwrap();
        let connected = std::net::TcpStream::connect(at).unwrap();
        let listed = tcp_listeners().unwrap();
        assert!(listed.contains(&at), "{at} in {listed:?}");
        assert!(!listed.contains(&connected.local_addr().unwrap()), "a connection is no listener");
        drop(listener);
        assert!(!tcp_listeners().unwrap().contains(&at));
        let v6 = std::net::TcpListener::bind("[::1]:0");
        if let Ok(v6) = v6 {
            assert!(tcp_listeners().unwrap().contains(&v6.local_addr().unwrap()), "IPv6 too");
        }
    }

    #[test]
    fn this_namespace_can_be_read() {
        // Whatever the host has, loopback's address is there and every route parses.
        let addresses = addresses().unwrap();
        assert!(addresses.iter().any(|(_, ip)| ip.is_loopback()), "{addresses:?}");
        routes().unwrap();
    }
}
