//! Name resolution behind a trait, so tests can count what reaches the resolver and `--resolve` can pin a name.
//! The proxy calls it only for names the policy allowed, once per upstream connection.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;

use leash_policy::Name;

/// A boxed resolution future.
pub type ResolveFuture<'a> = Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send + 'a>>;

/// Resolves an allowed name to the addresses the destination check will examine.
pub trait Resolve: Send + Sync + 'static {
    fn resolve<'a>(&'a self, name: &'a Name, port: u16) -> ResolveFuture<'a>;
}

/// The system resolver (getaddrinfo on tokio's blocking pool), with `--resolve` pins consulted first.
#[derive(Debug, Default, Clone)]
pub struct SystemResolver {
    pins: HashMap<Box<str>, Vec<IpAddr>>,
}

impl SystemResolver {
    /// `pins`: name → addresses, answered without any lookup (like curl's `--resolve`).
    pub fn new(pins: HashMap<Box<str>, Vec<IpAddr>>) -> Self {
        Self { pins }
    }
}

impl Resolve for SystemResolver {
    fn resolve<'a>(&'a self, name: &'a Name, port: u16) -> ResolveFuture<'a> {
        Box::pin(async move {
            if let Some(addrs) = self.pins.get(name.as_str()) {
                return Ok(addrs.clone());
            }
            // INVARIANT: only a validated `Name` reaches getaddrinfo, never an IP-literal spelling.
            let addrs = tokio::net::lookup_host((name.as_str(), port)).await?;
            let mut ips: Vec<IpAddr> = addrs.map(|a| a.ip()).collect();
            ips.dedup();
            Ok(ips)
        })
    }
}

/// Parse a `--resolve HOST:ADDR` pin (`ADDR` IPv4, or IPv6 in brackets or bare).
pub fn parse_pin(spec: &str) -> Result<(Box<str>, IpAddr), String> {
    let (host, addr) = spec
        .split_once(':')
        .ok_or_else(|| format!("`{spec}` is not HOST:ADDR"))?;
    let name = leash_policy::parse_host(host).map_err(|e| format!("`{host}`: {e}"))?;
    let leash_policy::Host::Name(name) = name else {
        return Err(format!("`{host}` is an IP literal; pin a name"));
    };
    let addr = addr.trim_start_matches('[').trim_end_matches(']');
    let ip: IpAddr = addr
        .parse()
        .map_err(|_| format!("`{addr}` is not an IP address"))?;
    Ok((name.as_str().into(), ip))
}
