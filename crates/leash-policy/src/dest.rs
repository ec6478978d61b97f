//! Destination check: which resolved addresses count as internal (loopback, private, link-local, CGNAT, ...), and
//! CIDRs for `allow_destinations`.

use std::net::IpAddr;

/// An IPv4 or IPv6 network, e.g. `10.1.0.0/16`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl Cidr {
    pub fn contains(&self, _ip: IpAddr) -> bool {
        todo!()
    }
}

impl std::str::FromStr for Cidr {
    type Err = String;
    fn from_str(_s: &str) -> Result<Self, Self::Err> {
        todo!()
    }
}

/// True if `ip` is in a range leash never dials unless `allow_destinations` exempts it.
pub fn is_internal(_ip: IpAddr) -> bool {
    todo!()
}
