//! The kernel's `local` routes, read over rtnetlink: one dump request, then the kernel's answers until
//! `NLMSG_DONE`. Every length is checked before it is used, and a malformed answer is an error, never a guess. Plain
//! socket calls through rustix: no `unsafe`, and nothing of the sandbox crate (which reads routes for its own check).

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use leash_policy::Cidr;

/// A netlink message header: length, type, flags, sequence, port.
const NLMSG_HDR: usize = 16;
/// A `struct rtmsg`: family, lengths, tos, table, protocol, scope, type, flags.
const RTMSG_LEN: usize = 12;
/// Read size per `recv`: the kernel fills a dump's datagrams up to about a page; this holds several.
const RECV_BUF: usize = 64 * 1024;

/// Every route of type `local` in this thread's network namespace, IPv4 and IPv6, in every table: the addresses
/// the kernel delivers to this host rather than sends out. Each interface address has one (a /32 or /128), and so
/// has a whole prefix made local (AnyIP: `ip route add local 203.0.113.0/24 dev lo`), whose every address reaches a
/// listener on the wildcard address.
pub(super) fn local_routes() -> io::Result<Vec<Cidr>> {
    // All zero but the family, AF_UNSPEC (0): every table, every type.
    let request = [0u8; RTMSG_LEN];
    let mut out = Vec::new();
    for (kind, payload) in dump(libc::RTM_GETROUTE, &request)? {
        let Some(head) = payload.get(..RTMSG_LEN) else { return Err(malformed("route")) };
        if kind != libc::RTM_NEWROUTE || head[7] != libc::RTN_LOCAL {
            continue;
        }
        let (family, prefix) = (i32::from(head[0]), head[1]);
        // No destination attribute: the family's default route, made local (every address).
        let mut addr = match family {
            libc::AF_INET => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            libc::AF_INET6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            _ => continue,
        };
        for (attr, data) in attributes(&payload[RTMSG_LEN..])? {
            if attr == libc::RTA_DST {
                addr = ip_of(family, data).ok_or_else(|| malformed("route destination"))?;
            }
        }
        out.push(Cidr { addr, prefix });
    }
    Ok(out)
}

/// The address in an attribute's `data`, if it is one of `family`'s size.
fn ip_of(family: i32, data: &[u8]) -> Option<IpAddr> {
    match family {
        libc::AF_INET => <[u8; 4]>::try_from(data).ok().map(IpAddr::from),
        libc::AF_INET6 => <[u8; 16]>::try_from(data).ok().map(IpAddr::from),
        _ => None,
    }
}

/// One dump: send `msg_type` with `body`, collect (type, payload) of every answer until `NLMSG_DONE`.
fn dump(msg_type: u16, body: &[u8]) -> io::Result<Vec<(u16, Vec<u8>)>> {
    use rustix::net::{recv, send, socket_with, AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};
    // `None`: NETLINK_ROUTE.
    let socket = socket_with(AddressFamily::NETLINK, SocketType::RAW, SocketFlags::CLOEXEC, None)?;
    let flags = (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16;
    let len = u32::try_from(NLMSG_HDR + body.len()).map_err(|_| malformed("request"))?;
    let mut request = Vec::with_capacity(NLMSG_HDR + body.len());
    request.extend_from_slice(&len.to_ne_bytes());
    request.extend_from_slice(&msg_type.to_ne_bytes());
    request.extend_from_slice(&flags.to_ne_bytes());
    request.extend_from_slice(&1u32.to_ne_bytes());
    request.extend_from_slice(&0u32.to_ne_bytes());
    request.extend_from_slice(body);
    send(&socket, &request, SendFlags::empty())?;
    let mut messages = Vec::new();
    let mut buf = vec![0u8; RECV_BUF];
    loop {
        let (got, _) = recv(&socket, &mut buf[..], RecvFlags::empty())?;
        if got == 0 {
            return Err(malformed("dump (ended early)"));
        }
        if split_messages(&buf[..got], &mut messages)? {
            return Ok(messages);
        }
    }
}

/// The messages of one datagram appended to `out`; true once `NLMSG_DONE` came. An error message ends the dump.
fn split_messages(mut bytes: &[u8], out: &mut Vec<(u16, Vec<u8>)>) -> io::Result<bool> {
    while bytes.len() >= NLMSG_HDR {
        let len = u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
        let kind = u16::from_ne_bytes([bytes[4], bytes[5]]);
        if len < NLMSG_HDR || len > bytes.len() {
            return Err(malformed("message"));
        }
        let payload = &bytes[NLMSG_HDR..len];
        match i32::from(kind) {
            libc::NLMSG_DONE => return Ok(true),
            libc::NLMSG_ERROR => {
                let errno = payload.get(..4).map_or(0, |b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
                if errno != 0 {
                    return Err(io::Error::from_raw_os_error(-errno));
                }
            }
            _ => out.push((kind, payload.to_vec())),
        }
        bytes = bytes.get(align(len)..).unwrap_or_default();
    }
    Ok(false)
}

/// The (type, data) of each route attribute in `bytes`.
fn attributes(mut bytes: &[u8]) -> io::Result<Vec<(u16, &[u8])>> {
    let mut out = Vec::new();
    while bytes.len() >= 4 {
        let len = usize::from(u16::from_ne_bytes([bytes[0], bytes[1]]));
        // The top two bits are flags (nested, network byte order), not part of the type.
        let kind = u16::from_ne_bytes([bytes[2], bytes[3]]) & 0x3fff;
        if len < 4 || len > bytes.len() {
            return Err(malformed("attribute"));
        }
        out.push((kind, &bytes[4..len]));
        bytes = bytes.get(align(len)..).unwrap_or_default();
    }
    Ok(out)
}

/// Netlink pads every message and attribute to four bytes.
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
        let bytes = [8, 0, 1, 0, 10, 0, 0, 1, 5, 0, 4, 0, 7, 0, 0, 0];
        let attrs = attributes(&bytes).unwrap();
        assert_eq!(attrs, vec![(libc::RTA_DST, &[10, 0, 0, 1][..]), (libc::RTA_OIF, &[7][..])]);
        assert!(attributes(&[9, 0, 5, 0, 1]).is_err(), "a length past the end is malformed");
    }

    #[test]
    fn the_local_routes_hold_loopback_as_a_whole_prefix() {
        // Every namespace with `lo` up has `local 127.0.0.0/8` and `local 127.0.0.1` in its local table.
        let local = local_routes().unwrap();
        let net = |a: [u8; 4], prefix| Cidr { addr: IpAddr::from(a), prefix };
        assert!(local.contains(&net([127, 0, 0, 0], 8)), "{local:?}");
        assert!(local.contains(&net([127, 0, 0, 1], 32)), "{local:?}");
    }
}
