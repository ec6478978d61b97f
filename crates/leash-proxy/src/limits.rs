//! Bounds on what a client or an upstream may make the proxy hold or wait for, with the reason for each default, and
//! the connection bound fitted to the descriptors the process may open.

use std::time::Duration;

/// Bounds on what a client or an upstream may make the proxy hold or wait for.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest request or response head (431 / 502 beyond).
    pub max_head_bytes: usize,
    /// From a head's first byte to its end (slowloris).
    pub head_timeout: Duration,
    /// A keep-alive client connection with no request in flight is closed after this.
    pub idle_timeout: Duration,
    /// From a tunnel's 200 to a complete ClientHello.
    pub client_hello_timeout: Duration,
    /// TCP connect to an upstream address.
    pub connect_timeout: Duration,
    /// From the request's end to the upstream's response head (504 beyond).
    pub response_timeout: Duration,
    /// Concurrent client connections; further ones wait in the listen backlog (or, while idle keep-alive
    /// connections can be closed to make room, are accepted).
    pub max_connections: usize,
    /// Concurrent connections from one client address (a `leash run` sandbox or a container is one client: every
    /// connection it makes comes from one address); a connection beyond is refused at once and takes no part of
    /// [`Limits::max_connections`]. `None`: [`Limits::connections_per_client`]'s default share.
    pub max_connections_per_client: Option<usize>,
    /// After shutdown is asked, how long in-flight requests and tunnels may take to finish.
    pub drain_timeout: Duration,
    /// Idle upstream connections kept per host for reuse.
    pub pool_per_host: usize,
    /// An idle pooled upstream connection older than this is dropped (servers close theirs after 5-75 s).
    pub pool_idle: Duration,
    /// Largest model API request body read to check for provider-side tools; a larger one is refused
    /// (`provider-tools`), never forwarded unread.
    pub max_model_body: usize,
}

/// [`Limits::max_model_body`] by default: 32 MiB, Anthropic's published Messages request limit (the largest of the
/// built-in APIs: Gemini's inline requests stop at 20 MB), so no request a provider accepts is refused for size. It
/// is held in memory, with its parsed form, once per concurrent model request — an agent runs a few.
pub const MAX_MODEL_BODY: usize = 32 * 1024 * 1024;

impl Default for Limits {
    fn default() -> Self {
        Self {
            // 64 KiB: more than any legitimate request head (browsers cap cookies well below it), small enough that
            // 10,000 connections stay bounded.
            max_head_bytes: 64 * 1024,
            head_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            client_hello_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
            response_timeout: Duration::from_secs(120),
            // Above the 10,000 concurrent connections the load test holds; each costs a few kB.
            max_connections: 16_384,
            max_connections_per_client: None,
            drain_timeout: Duration::from_secs(10),
            // wrk and agents open up to ~64 connections to one host; keeping that many warm is what makes
            // keep-alive forwarding fast.
            pool_per_host: 64,
            // Below the shortest common server keep-alive timeout (nginx 75 s, Apache 5 s is rarer and handled by the
            // stale-connection retry).
            pool_idle: Duration::from_secs(30),
            max_model_body: MAX_MODEL_BODY,
        }
    }
}

/// Descriptors one client connection may hold at once: its own socket and its upstream's (an inspected tunnel too).
pub const FDS_PER_CONNECTION: u64 = 2;

/// Descriptors kept back from client connections: the audit log, the listeners, resolver and DNS-stub sockets, CA
/// files, the runtime's epoll and wakers, and idle pooled upstream connections.
pub const FD_HEADROOM: u64 = 64;

impl Limits {
    /// These limits with [`Limits::max_connections`] lowered, if need be, to what `open_files` descriptors (the soft
    /// `RLIMIT_NOFILE`) can serve, so connections wait in the backlog instead of a request failing for want of a
    /// descriptor. Returns the limits and whether the bound was lowered.
    pub fn within_open_files(mut self, open_files: u64) -> (Self, bool) {
        let fit = connections_for_open_files(open_files);
        let lowered = fit < self.max_connections;
        self.max_connections = self.max_connections.min(fit);
        (self, lowered)
    }
}

impl Limits {
    /// The bound on one client's connections: [`Limits::max_connections_per_client`], or by default three quarters
    /// of [`Limits::max_connections`], so one client can never hold them all (a quarter is always left for the
    /// others) while the usual single client of `leash run` keeps most of them. At least one, at most the global bound.
    pub fn connections_per_client(&self) -> usize {
        let default = self.max_connections - self.max_connections / 4;
        self.max_connections_per_client.unwrap_or(default).clamp(1, self.max_connections.max(1))
    }
}

/// How many client connections `open_files` descriptors can serve: [`FD_HEADROOM`] kept back, [`FDS_PER_CONNECTION`]
/// each, and at least one (with fewer descriptors than the headroom the proxy is broken anyway; the one connection
/// at least makes the failure visible per request).
pub fn connections_for_open_files(open_files: u64) -> usize {
    let fit = open_files.saturating_sub(FD_HEADROOM) / FDS_PER_CONNECTION;
    usize::try_from(fit).unwrap_or(usize::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_fit_the_open_file_limit() {
        assert_eq!(connections_for_open_files(20_000), 9_968);
        assert_eq!(connections_for_open_files(1_024), 480);
        assert_eq!(connections_for_open_files(65), 1);
        assert_eq!(connections_for_open_files(0), 1);
        assert_eq!(connections_for_open_files(u64::MAX), usize::try_from(u64::MAX / 2 - 32).unwrap_or(usize::MAX));
    }

    #[test]
    fn the_connection_bound_is_lowered_only_when_descriptors_are_short() {
        let wanted = Limits::default().max_connections;
        let (limits, lowered) = Limits::default().within_open_files(20_000);
        assert_eq!((limits.max_connections, lowered), (9_968, true));
        let enough = 2 * 16_384 + FD_HEADROOM;
        let (limits, lowered) = Limits::default().within_open_files(enough);
        assert_eq!((limits.max_connections, lowered), (wanted, false));
        let (limits, lowered) = Limits::default().within_open_files(u64::MAX);
        assert_eq!((limits.max_connections, lowered), (wanted, false));
    }

    #[test]
    fn one_client_gets_three_quarters_of_the_bound_unless_told_otherwise() {
        let (fitted, _) = Limits::default().within_open_files(20_000);
        assert_eq!(fitted.connections_per_client(), 7_476);
        let small = |max, per| Limits { max_connections: max, max_connections_per_client: per, ..Limits::default() };
        assert_eq!(small(64, None).connections_per_client(), 48);
        assert_eq!(small(2, None).connections_per_client(), 2);
        assert_eq!(small(1, None).connections_per_client(), 1);
        assert_eq!(small(64, Some(10)).connections_per_client(), 10);
        assert_eq!(small(64, Some(1_000)).connections_per_client(), 64);
        assert_eq!(small(64, Some(0)).connections_per_client(), 1);
    }
}
