//! What this host's kernel delivers to itself: the destination check refuses it whatever DNS says, so a name pointing
//! at the machine itself (a public address included) cannot reach services bound on it.
//!
//! That is every `local` route of the kernel (its local table, read over rtnetlink: `netinfo/rtnetlink.rs`): each
//! interface address, and whole prefixes made local (AnyIP, `ip route add local 203.0.113.0/24 dev lo`), whose
//! every address reaches a listener on the wildcard address; plus every IPv6 interface address
//! (`/proc/net/if_inet6`, tentative ones too). The routes are read once and kept, not asked of the kernel for each
//! resolved address (a route lookup is a netlink round trip, 10-20 µs per address on every dial; a kept list costs
//! a scan of a few dozen entries).
//!
//! The list is read when the first upstream is checked (never at start-up) and kept until the kernel says it may
//! have changed: at that first read a netlink socket subscribes to address changes and route changes (IPv4 and
//! IPv6: a local route, AnyIP's or an address's own, which the kernel adds just after announcing the address, is a
//! route change). Every later use drains that socket without blocking — one `recv`, answered `EAGAIN` while nothing
//! changed — and re-reads the list if anything was reported, or if reports were lost (`ENOBUFS`: the socket's queue
//! overflowed) or the socket fails. Draining at the decision rather than in a task on the runtime leaves no window in
//! which the kernel has reported a change that a decision does not see, whatever the runtime (`leash run` serves on a
//! current-thread one). Where the subscription cannot be made, the list is read again for every use: never a list
//! that can no longer be refreshed.

mod rtnetlink;

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use leash_policy::Cidr;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, PoisonError};

/// Tells whether this host's addresses may have changed since it was last asked.
pub(crate) trait Watch: Send {
    /// Whether a change was reported since the last call, or reports may have been lost; consumes the reports.
    fn changed(&mut self) -> bool;
}

/// How to read the addresses, and how to subscribe to their changes (made once, at the first read).
type Read = Box<dyn Fn() -> Vec<Cidr> + Send + Sync>;
type Subscribe = Box<dyn Fn() -> io::Result<Box<dyn Watch>> + Send + Sync>;

/// This host's own addresses and local prefixes plus some fixed addresses (where the proxy listens), read on first
/// use and re-read after every reported change.
pub(crate) struct HostAddrs {
    extra: Vec<Cidr>,
    read: Read,
    subscribe: Subscribe,
    /// `None` until the first use.
    kept: Mutex<Option<Kept>>,
}

/// The last read, and what reports changes since it.
struct Kept {
    /// `None`: no subscription could be made, so every use reads again.
    watch: Option<Box<dyn Watch>>,
    addrs: Arc<[Cidr]>,
}

impl HostAddrs {
    /// What this process's network namespace delivers locally, plus `extra`. Nothing is read or subscribed until
    /// [`HostAddrs::get`].
    pub(crate) fn new(extra: Vec<Cidr>) -> Self {
        let subscribe: Subscribe = Box::new(|| Ok(Box::new(Netlink::subscribe()?) as Box<dyn Watch>));
        Self::with(extra, Box::new(local_addrs), subscribe)
    }

    fn with(extra: Vec<Cidr>, read: Read, subscribe: Subscribe) -> Self {
        Self { extra, read, subscribe, kept: Mutex::new(None) }
    }

    /// The current list: the kept one unless a change was reported since it was read.
    pub(crate) fn get(&self) -> Arc<[Cidr]> {
        // INVARIANT: the lock is held from draining the reports to storing the new list, so no caller can take the
        // old list after another one has consumed the report that made it stale.
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(Kept { watch: Some(watch), addrs }) = kept.as_mut() {
            if !watch.changed() {
                return Arc::clone(addrs);
            }
        }
        let watch = match kept.take() {
            Some(k) => k.watch,
            // First use: subscribe before reading, so a change made during the read is reported afterwards.
            None => match (self.subscribe)() {
                Ok(watch) => Some(watch),
                Err(e) => {
                    tracing::warn!("cannot watch this host's addresses ({e}); reading them for every upstream");
                    None
                }
            },
        };
        let mut addrs = (self.read)();
        addrs.extend_from_slice(&self.extra);
        let addrs: Arc<[Cidr]> = addrs.into();
        *kept = Some(Kept { watch, addrs: Arc::clone(&addrs) });
        addrs
    }
}

/// The netlink groups whose messages mean the list may be stale: address changes, and route changes (a local route
/// comes after its address's own message, and an AnyIP prefix is a route alone).
const GROUPS: u32 =
    (libc::RTMGRP_IPV4_IFADDR | libc::RTMGRP_IPV6_IFADDR | libc::RTMGRP_IPV4_ROUTE | libc::RTMGRP_IPV6_ROUTE) as u32;

/// Reports read per drain at most; past that the list is re-read anyway and the rest waits for the next drain.
const DRAIN_MAX: usize = 64;

/// A non-blocking `NETLINK_ROUTE` socket subscribed to [`GROUPS`].
struct Netlink(OwnedFd);

impl Netlink {
    fn subscribe() -> io::Result<Self> {
        use rustix::net::{bind, netlink::SocketAddrNetlink, socket_with, AddressFamily, SocketFlags, SocketType};
        // `None`: NETLINK_ROUTE.
        let flags = SocketFlags::CLOEXEC | SocketFlags::NONBLOCK;
        let fd = socket_with(AddressFamily::NETLINK, SocketType::RAW, flags, None)?;
        bind(&fd, &SocketAddrNetlink::new(0, GROUPS))?;
        Ok(Self(fd))
    }
}

impl Watch for Netlink {
    fn changed(&mut self) -> bool {
        use rustix::io::Errno;
        use rustix::net::{recv, RecvFlags};
        // The messages' content does not matter, only that one came: TRUNC consumes each whole whatever its size.
        let mut buf = [0u8; 64];
        let mut changed = false;
        for _ in 0..DRAIN_MAX {
            match recv(&self.0, &mut buf, RecvFlags::DONTWAIT | RecvFlags::TRUNC) {
                Ok(_) => changed = true,
                Err(Errno::AGAIN) => return changed,
                Err(Errno::INTR) => {}
                // The queue overflowed: reports were lost. Drain what came after.
                Err(Errno::NOBUFS) => changed = true,
                // Anything else: nothing can be known; re-read (for every use, while it lasts).
                Err(_) => return true,
            }
        }
        true
    }
}

/// Every `local` route of this process's network namespace (IPv4 and IPv6, whole prefixes included) and every IPv6
/// interface address. Where rtnetlink cannot be read, the IPv4 local routes `/proc/net/fib_trie` lists stand in (a
/// warning says so); unreadable procfs adds nothing (the internal ranges are refused regardless).
fn local_addrs() -> Vec<Cidr> {
    let mut own: Vec<Cidr> = match rtnetlink::local_routes() {
        Ok(routes) => routes,
        Err(e) => {
            tracing::warn!("cannot read this host's local routes ({e}); taking the IPv4 ones from /proc/net/fib_trie");
            ipv4_from_fib_trie(&std::fs::read_to_string("/proc/net/fib_trie").unwrap_or_default())
        }
    };
    let v6 = ipv6_from_if_inet6(&std::fs::read_to_string("/proc/net/if_inet6").unwrap_or_default());
    own.extend(v6.into_iter().map(Cidr::from));
    own.sort_by_key(|c| (c.addr, c.prefix));
    own.dedup();
    own
}

/// `/proc/net/fib_trie` lists each local route as a leaf line (its network) followed by `/N host LOCAL`.
fn ipv4_from_fib_trie(text: &str) -> Vec<Cidr> {
    let mut out = Vec::new();
    let mut last: Option<Ipv4Addr> = None;
    for line in text.lines() {
        let t = line.trim_start_matches([' ', '|', '+', '-']).trim();
        if let Ok(ip) = t.parse::<Ipv4Addr>() {
            last = Some(ip);
        } else if let Some(prefix) = t.strip_suffix(" host LOCAL").and_then(|p| p.strip_prefix('/')) {
            if let (Some(ip), Ok(prefix @ 0..=32)) = (last, prefix.parse::<u8>()) {
                out.push(Cidr { addr: IpAddr::V4(ip), prefix });
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
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use super::*;

    /// One address as a /32.
    fn one(a: [u8; 4]) -> Cidr {
        Cidr::from(IpAddr::from(a))
    }

    /// A watch whose reports the test makes.
    struct Reported(Arc<AtomicBool>);

    impl Watch for Reported {
        fn changed(&mut self) -> bool {
            self.0.swap(false, Ordering::SeqCst)
        }
    }

    /// The host's addresses as the test sets them, what was done in which order, and the report flag.
    #[derive(Clone, Default)]
    struct Host {
        addrs: Arc<Mutex<Vec<Cidr>>>,
        /// `s` for each subscription, `r` for each read.
        calls: Arc<Mutex<String>>,
        report: Arc<AtomicBool>,
    }

    impl Host {
        fn addrs(&self, extra: &[IpAddr], subscribable: bool) -> HostAddrs {
            let (h, h2) = (self.clone(), self.clone());
            let read: Read = Box::new(move || {
                h.calls.lock().unwrap().push('r');
                h.addrs.lock().unwrap().clone()
            });
            let subscribe: Subscribe = Box::new(move || {
                h2.calls.lock().unwrap().push('s');
                if subscribable {
                    Ok(Box::new(Reported(Arc::clone(&h2.report))) as Box<dyn Watch>)
                } else {
                    Err(io::Error::from(io::ErrorKind::PermissionDenied))
                }
            });
            HostAddrs::with(extra.iter().copied().map(Cidr::from).collect(), read, subscribe)
        }

        fn add(&self, ip: [u8; 4], report: bool) {
            self.addrs.lock().unwrap().push(one(ip));
            self.report.store(report, Ordering::SeqCst);
        }

        fn calls(&self) -> String {
            self.calls.lock().unwrap().clone()
        }
    }

    #[test]
    fn nothing_is_read_or_subscribed_before_the_first_use() {
        let host = Host::default();
        let addrs = host.addrs(&[], true);
        assert_eq!(host.calls(), "");
        addrs.get();
        assert_eq!(host.calls(), "sr", "subscribed before reading, so a change during the read is reported");
    }

    #[test]
    fn the_list_is_kept_until_a_change_is_reported_and_then_read_again() {
        let host = Host::default();
        host.add([192, 0, 2, 1], false);
        let listening = IpAddr::from([198, 51, 100, 1]);
        let addrs = host.addrs(&[listening], true);
        assert_eq!(*addrs.get(), [one([192, 0, 2, 1]), Cidr::from(listening)]);
        // A change the kernel did not report (none would go unreported) is not seen: the list is kept.
        host.add([192, 0, 2, 2], false);
        assert_eq!(addrs.get().len(), 2);
        assert_eq!(host.calls(), "sr");
        host.add([203, 0, 113, 9], true);
        let now = addrs.get();
        assert!(now.contains(&one([203, 0, 113, 9])) && now.contains(&Cidr::from(listening)), "{now:?}");
        assert_eq!(host.calls(), "srr", "one subscription, one read per report");
        addrs.get();
        assert_eq!(host.calls(), "srr");
    }

    #[test]
    fn without_a_subscription_every_use_reads_again() {
        let host = Host::default();
        let addrs = host.addrs(&[], false);
        assert_eq!(addrs.get().len(), 0);
        host.add([203, 0, 113, 9], false);
        assert_eq!(*addrs.get(), [one([203, 0, 113, 9])]);
        assert_eq!(host.calls(), "srr", "subscribing is tried once; reading is not skipped");
    }

    #[test]
    fn concurrent_users_never_take_a_list_older_than_a_consumed_report() {
        // Many threads, each seeing the report flag raised before its call, must all get the new address: the
        // one that consumes the report reads again before any other can take the kept list.
        let host = Host::default();
        let addrs = Arc::new(host.addrs(&[], true));
        addrs.get();
        host.add([203, 0, 113, 9], true);
        let stale = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (addrs, stale) = (Arc::clone(&addrs), Arc::clone(&stale));
                std::thread::spawn(move || {
                    if !addrs.get().contains(&one([203, 0, 113, 9])) {
                        stale.fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(stale.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn the_netlink_watch_subscribes_and_drains_without_blocking() {
        let mut watch = Netlink::subscribe().unwrap();
        // Another process could change this host's addresses meanwhile; that would be reported, so the test only
        // asserts that an idle socket is drained without blocking and keeps answering.
        let _ = watch.changed();
        let _ = watch.changed();
    }

    #[test]
    fn reads_local_leaves_of_fib_trie_whole_prefixes_included() {
        let text = "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 0.0.0.0\n        /0 universe UNICAST\n     +-- 127.0.0.0/8 2 0 2\n        |-- 127.0.0.0\n           /8 host LOCAL\n     |-- 203.0.113.0\n        /24 host LOCAL\n     |-- 203.0.113.7\n        /32 host LOCAL\n     |-- 203.0.113.255\n        /32 link BROADCAST\n";
        let net = |a: [u8; 4], prefix| Cidr { addr: IpAddr::from(a), prefix };
        assert_eq!(
            ipv4_from_fib_trie(text),
            vec![net([127, 0, 0, 0], 8), net([203, 0, 113, 0], 24), one([203, 0, 113, 7])]
        );
    }

    #[test]
    fn this_hosts_local_routes_are_read_as_whole_prefixes() {
        // Every namespace with `lo` up has `local 127.0.0.0/8` in its local table, a prefix, not an address.
        let own = local_addrs();
        assert!(own.contains(&Cidr { addr: IpAddr::from([127, 0, 0, 0]), prefix: 8 }), "{own:?}");
        assert!(own.iter().any(|c| c.contains(IpAddr::from([127, 9, 9, 9]))), "{own:?}");
    }

    #[test]
    fn reads_if_inet6() {
        let text = "00000000000000000000000000000001 01 80 10 80       lo\n";
        assert_eq!(ipv6_from_if_inet6(text), vec![IpAddr::V6(Ipv6Addr::LOCALHOST)]);
    }
}
