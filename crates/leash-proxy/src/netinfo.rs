//! This host's own addresses, read from procfs: the destination check refuses them whatever DNS says, so a name
//! pointing at the machine itself (a public address included) cannot reach services bound on it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Every local IPv4 and IPv6 interface address this process's network namespace has. Unreadable procfs yields an
/// empty list (the internal ranges are refused regardless).
pub(crate) fn local_interface_addrs() -> Vec<IpAddr> {
    let mut addrs = ipv4_from_fib_trie(&std::fs::read_to_string("/proc/net/fib_trie").unwrap_or_default());
    addrs.extend(ipv6_from_if_inet6(&std::fs::read_to_string("/proc/net/if_inet6").unwrap_or_default()));
    addrs.sort();
    addrs.dedup();
    addrs
}

/// `/proc/net/fib_trie` lists each local address as a leaf line followed by `/32 host LOCAL`.
fn ipv4_from_fib_trie(text: &str) -> Vec<IpAddr> {
    let mut out = Vec::new();
    let mut last: Option<Ipv4Addr> = None;
    for line in text.lines() {
        let t = line.trim_start_matches([' ', '|', '+', '-']).trim();
        if let Ok(ip) = t.parse::<Ipv4Addr>() {
            last = Some(ip);
        } else if t.contains("/32 host LOCAL") {
            if let Some(ip) = last {
                out.push(IpAddr::V4(ip));
            }
        }
    }
    out
}

/// `/proc/net/if_inet6`: one address per line, 32 hex digits first.
fn ipv6_from_if_inet6(text: &str) -> Vec<IpAddr> {
    text.lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter_map(|hex| u128::from_str_radix(hex, 16).ok())
        .map(|bits| IpAddr::V6(Ipv6Addr::from(bits)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_local_leaves_of_fib_trie() {
        let text = "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 0.0.0.0\n        /0 universe UNICAST\n     |-- 203.0.113.7\n        /32 host LOCAL\n     |-- 203.0.113.255\n        /32 link BROADCAST\n";
        assert_eq!(ipv4_from_fib_trie(text), vec![IpAddr::V4(Ipv4Addr::new(203, 0, 113, 7))]);
    }

    #[test]
    fn reads_if_inet6() {
        let text = "00000000000000000000000000000001 01 80 10 80       lo\n";
        assert_eq!(ipv6_from_if_inet6(text), vec![IpAddr::V6(Ipv6Addr::LOCALHOST)]);
    }
}
