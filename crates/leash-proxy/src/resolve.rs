//! Name resolution behind a trait, so tests can count what reaches the resolver and `--resolve` can pin a name.
//! The proxy calls it only for names the policy allowed, once per upstream connection.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use leash_policy::Name;

/// A boxed resolution future.
pub type ResolveFuture<'a> = Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send + 'a>>;

/// Resolves an allowed name to the addresses the destination check will examine.
pub trait Resolve: Send + Sync + 'static {
    /// Every address of `name` (`port` for resolvers that care, such as getaddrinfo's hints); an error for none.
    fn resolve<'a>(&'a self, name: &'a Name, port: u16) -> ResolveFuture<'a>;
}

/// How long a system answer is reused. getaddrinfo costs a thread hop and file reads (`/etc/hosts`, nsswitch) on
/// every call — most of a tunnel's set-up time — while answers stay valid for far longer than this. Reuse is safe
/// for the destination check: it runs on every request, on exactly the addresses that will be dialed.
const CACHE_TTL: Duration = Duration::from_secs(5);

/// Names kept in the cache at most; beyond it the cache is cleared (a burst of distinct names gains nothing).
const CACHE_MAX: usize = 4096;

/// A cached answer and when it was obtained.
type Answer = (Vec<IpAddr>, Instant);

/// The system resolver (getaddrinfo on tokio's blocking pool), with `--resolve` pins consulted first and answers
/// reused for `CACHE_TTL`.
#[derive(Debug, Default)]
pub struct SystemResolver {
    pins: HashMap<Box<str>, Vec<IpAddr>>,
    cache: Mutex<HashMap<Box<str>, Answer>>,
}

impl SystemResolver {
    /// `pins`: name → addresses, answered without any lookup (like curl's `--resolve`).
    pub fn new(pins: HashMap<Box<str>, Vec<IpAddr>>) -> Self {
        Self { pins, cache: Mutex::default() }
    }

    fn cached(&self, name: &str) -> Option<Vec<IpAddr>> {
        let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache.get(name).filter(|(_, at)| at.elapsed() < CACHE_TTL).map(|(addrs, _)| addrs.clone())
    }

    fn remember(&self, name: &str, addrs: &[IpAddr]) {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= CACHE_MAX {
            cache.clear();
        }
        cache.insert(name.into(), (addrs.to_vec(), Instant::now()));
    }
}

impl Resolve for SystemResolver {
    fn resolve<'a>(&'a self, name: &'a Name, port: u16) -> ResolveFuture<'a> {
        Box::pin(async move {
            if let Some(addrs) = self.pins.get(name.as_str()) {
                return Ok(addrs.clone());
            }
            if let Some(addrs) = self.cached(name.as_str()) {
                return Ok(addrs);
            }
            // INVARIANT: only a validated `Name` reaches getaddrinfo, never an IP-literal spelling.
            let addrs = tokio::net::lookup_host((name.as_str(), port)).await?;
            let mut ips: Vec<IpAddr> = addrs.map(|a| a.ip()).collect();
            ips.dedup();
            self.remember(name.as_str(), &ips);
            Ok(ips)
        })
    }
}

/// Why a `--resolve` pin was refused; its text names the part of the pin at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PinError {
    /// No `:` between a host and an address.
    #[error("`{0}` is not HOST:ADDR")]
    NotHostAndAddress(String),
    /// The host part is no valid host.
    #[error("`{host}`: {error}")]
    BadHost {
        /// The host part as written.
        host: String,
        /// What is wrong with it.
        error: leash_policy::HostError,
    },
    /// The host part is an address: only names are resolved, so only names are pinned.
    #[error("`{0}` is an IP literal; pin a name")]
    IpLiteral(String),
    /// The address part does not parse.
    #[error("`{0}` is not an IP address")]
    BadAddress(String),
}

/// Parse a `--resolve HOST:ADDR` pin (`ADDR` IPv4, or IPv6 in brackets or bare).
pub fn parse_pin(spec: &str) -> Result<(Box<str>, IpAddr), PinError> {
    let (host, addr) = spec.split_once(':').ok_or_else(|| PinError::NotHostAndAddress(spec.to_owned()))?;
    let name = leash_policy::parse_host(host).map_err(|error| PinError::BadHost { host: host.to_owned(), error })?;
    let leash_policy::Host::Name(name) = name else {
        return Err(PinError::IpLiteral(host.to_owned()));
    };
    let addr = addr.trim_start_matches('[').trim_end_matches(']');
    let ip: IpAddr = addr.parse().map_err(|_| PinError::BadAddress(addr.to_owned()))?;
    Ok((name.as_str().into(), ip))
}
