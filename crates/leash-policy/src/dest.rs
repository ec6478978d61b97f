//! Destination check: which resolved addresses count as internal (loopback, private, link-local, CGNAT, ...), and
//! CIDRs for `allow_destinations`.
//!
//! Every IPv6 form that embeds an IPv4 address is internal whatever it embeds: a NAT64 or 6to4 gateway may carry it
//! to the embedded address, and telling which embedded addresses are safe is a game a filter loses.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An IPv4 or IPv6 network, e.g. `10.1.0.0/16`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    /// The network's first address (no bits set past the prefix once parsed).
    pub addr: IpAddr,
    /// How many leading bits name the network: 0-32 for IPv4, 0-128 for IPv6.
    pub prefix: u8,
}

impl Cidr {
    /// Whether `ip` lies in this network; an IPv4 address is never in an IPv6 network or the other way round.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                masked(u128::from(net.to_bits()), self.prefix, 32) == masked(u128::from(ip.to_bits()), self.prefix, 32)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                masked(net.to_bits(), self.prefix, 128) == masked(ip.to_bits(), self.prefix, 128)
            }
            _ => false,
        }
    }

    /// True for `0.0.0.0/0` and `::/0`, which exempt every address of their family.
    pub fn is_everything(&self) -> bool {
        self.prefix == 0
    }
}

/// The one address: a /32 or a /128.
impl From<IpAddr> for Cidr {
    fn from(addr: IpAddr) -> Self {
        Cidr { addr, prefix: if addr.is_ipv4() { 32 } else { 128 } }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// Why a text is not a [`Cidr`]; the message names the text in backticks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CidrError {
    /// The part before `/` is not an IPv4 or IPv6 address.
    #[error("`{0}` is not an IP address")]
    NotAnAddress(String),
    /// The part after `/` is not a number from 0 to the address's width.
    #[error("`/{text}` is not a prefix length; it is 0-{max}")]
    BadPrefix {
        /// The prefix as written.
        text: String,
        /// The address's width in bits.
        max: u8,
    },
    /// Bits are set after the prefix (`10.1.2.3/8`), more likely a typo than the network meant.
    #[error("`{text}` has bits set after the /{prefix} prefix; write the network address")]
    HostBits {
        /// The network as written.
        text: String,
        /// Its prefix length.
        prefix: u8,
    },
}

impl std::str::FromStr for Cidr {
    type Err = CidrError;

    /// `a.b.c.d/n`, `v6/n`, or a bare address (a /32 or /128). Host bits set below the prefix are refused: `10.1.2.3/8`
    /// more likely means a typo than `10.0.0.0/8`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (addr_text, prefix_text) = match s.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (s, None),
        };
        let addr: IpAddr = addr_text.parse().map_err(|_| CidrError::NotAnAddress(addr_text.to_owned()))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix_text {
            None => max,
            Some(p) => parse_prefix(p, max)?,
        };
        let cidr = Cidr { addr, prefix };
        let bits = match addr {
            IpAddr::V4(a) => u128::from(a.to_bits()),
            IpAddr::V6(a) => a.to_bits(),
        };
        if masked(bits, prefix, u32::from(max)) != bits {
            return Err(CidrError::HostBits { text: s.to_owned(), prefix });
        }
        Ok(cidr)
    }
}

/// True if `ip` is in a range leash never dials unless `allow_destinations` exempts it.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_internal_v4(v4),
        IpAddr::V6(v6) => is_internal_v6(v6),
    }
}

/// The internal IPv4 ranges, as (network, prefix).
const INTERNAL_V4: [([u8; 4], u8); 13] = [
    ([0, 0, 0, 0], 8),          // "this network"
    ([10, 0, 0, 0], 8),         // RFC 1918
    ([100, 64, 0, 0], 10),      // CGNAT
    ([127, 0, 0, 0], 8),        // loopback
    ([169, 254, 0, 0], 16),     // link-local, cloud metadata
    ([172, 16, 0, 0], 12),      // RFC 1918
    ([192, 0, 0, 0], 24),       // IETF protocol assignments
    ([192, 168, 0, 0], 16),     // RFC 1918
    ([198, 18, 0, 0], 15),      // benchmarking
    ([224, 0, 0, 0], 4),        // multicast
    ([240, 0, 0, 0], 4),        // reserved
    ([255, 255, 255, 255], 32), // broadcast (inside 240/4, listed for the reader)
    ([168, 63, 129, 16], 32),   // a cloud platform's host endpoint
];

/// The internal IPv6 ranges, as (network, prefix).
const INTERNAL_V6: [(u128, u8); 14] = [
    (0, 128),                                        // unspecified `::`
    (1, 128),                                        // loopback `::1`
    (0, 96),                                         // IPv4-compatible ::/96
    (0xffff_0000_0000, 96),                          // IPv4-mapped ::ffff:0:0/96
    (0xffff_0000_0000_0000, 96),                     // IPv4-translated ::ffff:0:0:0/96
    (0x0064_ff9b_0000_0000_0000_0000_0000_0000, 96), // NAT64
    (0x0064_ff9b_0001_0000_0000_0000_0000_0000, 48), // NAT64 local use
    (0x0100_0000_0000_0000_0000_0000_0000_0000, 64), // discard
    (0x2001_0000_0000_0000_0000_0000_0000_0000, 32), // Teredo
    (0x2002_0000_0000_0000_0000_0000_0000_0000, 16), // 6to4
    (0xfc00_0000_0000_0000_0000_0000_0000_0000, 7),  // unique local
    (0xfe80_0000_0000_0000_0000_0000_0000_0000, 10), // link-local
    (0xfec0_0000_0000_0000_0000_0000_0000_0000, 10), // site-local (deprecated)
    (0xff00_0000_0000_0000_0000_0000_0000_0000, 8),  // multicast
];

fn is_internal_v4(ip: Ipv4Addr) -> bool {
    let bits = u128::from(ip.to_bits());
    INTERNAL_V4
        .iter()
        .any(|(net, prefix)| masked(u128::from(u32::from_be_bytes(*net)), *prefix, 32) == masked(bits, *prefix, 32))
}

fn is_internal_v6(ip: Ipv6Addr) -> bool {
    let bits = ip.to_bits();
    INTERNAL_V6.iter().any(|(net, prefix)| masked(*net, *prefix, 128) == masked(bits, *prefix, 128))
}

/// `bits` (an address `width` bits wide) with everything after the first `prefix` bits cleared.
fn masked(bits: u128, prefix: u8, width: u32) -> u128 {
    let keep = u32::from(prefix).min(width);
    if keep == 0 {
        return 0;
    }
    let mask = (u128::MAX << (width - keep)) & (u128::MAX >> (128 - width));
    bits & mask
}

fn parse_prefix(text: &str, max: u8) -> Result<u8, CidrError> {
    let ok = !text.is_empty() && text.len() <= 3 && text.bytes().all(|b| b.is_ascii_digit());
    match text.parse::<u8>() {
        Ok(p) if ok && p <= max => Ok(p),
        _ => Err(CidrError::BadPrefix { text: text.to_owned(), max }),
    }
}

/// Public DNS services whose names spell an address (`1-2-3-4.sslip.io`, `10.0.0.1.nip.io` answer `1.2.3.4`,
/// `10.0.0.1`): any subdomain of one of these reaches whatever address its labels say. A blocklist refuses every IP
/// literal, so such a name is refused too (`ip-literal`): it is an IP literal in another spelling. An allowlist
/// decides them by its entries like any name (allowing `.nip.io` allows every address it spells).
pub const ADDRESS_NAME_SUFFIXES: [&str; 7] =
    ["sslip.io", "nip.io", "xip.io", "nip.direct", "traefik.me", "backname.io", "local.gd"];

/// Whether `name` (canonical) is a proper subdomain of one of [`ADDRESS_NAME_SUFFIXES`]: a name that spells an
/// address. The service's own name (`sslip.io`, its web site) is not.
pub fn embeds_an_address(name: &str) -> bool {
    ADDRESS_NAME_SUFFIXES.iter().any(|suffix| {
        name.len() > suffix.len() + 1
            && name.ends_with(suffix)
            && name.as_bytes().get(name.len() - suffix.len() - 1) == Some(&b'.')
    })
}

#[cfg(test)]
mod tests {

    #[test]
    fn names_that_spell_an_address_are_told_from_their_services_own_and_from_look_alikes() {
        for name in ["1-2-3-4.sslip.io", "10.0.0.1.nip.io", "app.192-168-1-1.traefik.me", "c0a80101.nip.io"] {
            assert!(embeds_an_address(name), "{name}");
        }
        for name in ["sslip.io", "nip.io", "notsslip.io", "sslip.io.example.com", "pypi.org"] {
            assert!(!embeds_an_address(name), "{name}");
        }
    }

    use super::*;

    fn internal(s: &str) -> bool {
        is_internal(s.parse().unwrap())
    }

    #[test]
    fn internal_ranges() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.255",
            "0.0.0.0",
            "0.1.2.3",
            "224.0.0.1",
            "239.255.255.255",
            "255.255.255.255",
            "240.0.0.1",
            "198.18.0.1",
            "198.19.255.255",
            "192.0.0.8",
            "168.63.129.16",
            "::1",
            "::",
            "fe80::1",
            "febf::1",
            "fec0::1",
            "fc00::1",
            "fdff::1",
            "100::1",
            "ff02::1",
            "::ffff:8.8.8.8",
            "::ffff:0:8.8.8.8",
            "::8.8.8.8",
            "64:ff9b::8.8.8.8",
            "64:ff9b:1::1",
            "2002:808:808::1",
            "2001:0:1::1",
        ] {
            assert!(internal(ip), "{ip} should be internal");
        }
    }

    #[test]
    fn public_and_documentation_ranges_are_not_internal() {
        for ip in [
            "8.8.8.8",
            "172.32.0.1",
            "172.15.255.255",
            "100.128.0.1",
            "192.0.2.1",
            "198.51.100.1",
            "203.0.113.1",
            "198.20.0.1",
            "168.63.129.17",
            "192.0.1.1",
            "2001:db8::1",
            "2606:4700::1",
            "2001:1::1",
            "fe00::1",
        ] {
            assert!(!internal(ip), "{ip} should not be internal");
        }
    }

    #[test]
    fn cidrs_parse_and_contain() {
        let c: Cidr = "10.1.0.0/16".parse().unwrap();
        assert!(c.contains("10.1.200.3".parse().unwrap()));
        assert!(!c.contains("10.2.0.1".parse().unwrap()));
        assert!(!c.contains("::ffff:10.1.0.1".parse().unwrap()));
        let c: Cidr = "127.0.0.1".parse().unwrap();
        assert_eq!(c.prefix, 32);
        let c: Cidr = "fd00::/8".parse().unwrap();
        assert!(c.contains("fd12::1".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.is_everything() && all.contains("1.2.3.4".parse().unwrap()));
        assert_eq!("::/0".parse::<Cidr>().unwrap().to_string(), "::/0");
        let err = |s: &str| s.parse::<Cidr>().unwrap_err();
        assert_eq!(err("x/8"), CidrError::NotAnAddress("x".to_owned()));
        assert_eq!(err("10.0.0.0/33").to_string(), "`/33` is not a prefix length; it is 0-32");
        assert_eq!(err("::/1x").to_string(), "`/1x` is not a prefix length; it is 0-128");
        assert_eq!(
            err("10.1.2.3/8").to_string(),
            "`10.1.2.3/8` has bits set after the /8 prefix; write the network address"
        );
        for bad in ["10.1.2.3/8", "10.0.0.0/33", "10.0.0.0/", "10.0.0.0/+8", "example.com/8", "::1/129", "fd00::1/8"] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }
}
