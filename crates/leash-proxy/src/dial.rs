//! Reaching an upstream: resolve an allowed name once, run the destination check on every address, and dial only
//! the addresses that passed — never a second lookup, so a DNS answer cannot change between check and connect.

use crate::audit::UpstreamFailure;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use leash_policy::{Host, Policy, Reason};
use tokio::net::TcpStream;

use crate::shared::Shared;

/// Why no upstream connection was made.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    /// The destination check refused the resolved addresses: a refusal (403), not a failure.
    #[error("the name resolves to an internal address")]
    Refused(Reason),
    #[error("cannot resolve `{0}`: {1}")]
    Resolve(String, io::Error),
    #[error("cannot connect: {0}")]
    Connect(io::Error),
    #[error("connect timed out")]
    Timeout,
}

impl DialError {
    /// Why the dial failed, for the outcome's `error` (`None` for a refusal, which is no failure).
    pub fn cause(&self) -> Option<UpstreamFailure> {
        match self {
            DialError::Refused(_) => None,
            DialError::Resolve(..) => Some(UpstreamFailure::CannotResolve),
            DialError::Connect(e) => Some(UpstreamFailure::of_io(e)),
            DialError::Timeout => Some(UpstreamFailure::TimedOut),
        }
    }

    /// The status an allowed request gets for this failure.
    pub fn status(&self) -> u16 {
        match self {
            DialError::Refused(_) => 403,
            DialError::Timeout => 504,
            DialError::Resolve(..) | DialError::Connect(_) => 502,
        }
    }
}

/// The checked addresses of an allowed host: resolved once (by `sh`'s resolver) and passed by the destination check.
pub async fn resolve_checked(sh: &Shared, policy: &Policy, host: &Host, port: u16) -> Result<Vec<IpAddr>, DialError> {
    let addrs = match host {
        // INVARIANT: a name reaches the resolver only after the policy allowed it; literals never do.
        Host::Name(name) => {
            sh.cfg.resolver.resolve(name, port).await.map_err(|e| DialError::Resolve(name.as_str().to_owned(), e))?
        }
        Host::Ipv4(ip) => vec![IpAddr::V4(*ip)],
        Host::IpLiteral(_) => return Err(DialError::Refused(Reason::IpLiteral)),
    };
    // The host's own addresses as they are now, after the lookup (which may have taken seconds).
    policy.check_destination(&addrs, &sh.own()).map_err(DialError::Refused)?;
    Ok(addrs)
}

/// Connect to the first checked address that answers.
pub async fn connect_checked(addrs: &[IpAddr], port: u16, timeout: Duration) -> Result<TcpStream, DialError> {
    let mut last = DialError::Connect(io::Error::new(io::ErrorKind::NotFound, "no address"));
    for ip in addrs {
        // INVARIANT: `addrs` passed `check_destination`; this is the only place upstream sockets are opened.
        match tokio::time::timeout(timeout, TcpStream::connect(SocketAddr::new(*ip, port))).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Ok(Err(e)) => last = DialError::Connect(e),
            Err(_) => last = DialError::Timeout,
        }
    }
    Err(last)
}
