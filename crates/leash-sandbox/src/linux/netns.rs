//! Sockets bound inside *another* process's network namespace (a container's): a dedicated thread enters that
//! namespace with `setns`, checks it holds nothing but `lo`, binds the requested sockets there and ends, so no
//! thread of leash ever goes back to work in the foreign namespace. The sockets keep the namespace they were
//! created in; leash serves them from the host's. This is how `leash docker` reaches a `--network none` container
//! without a sidecar or a bridge.

use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::net::{SocketAddrV4, TcpListener, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;

use crate::error::Step;
use crate::{Isolation, Netns, SandboxError};

/// The interface every namespace has.
const LOOPBACK: &str = "lo";

/// Binds `tcp` listeners and `udp` sockets inside the network namespace of process `pid`, after checking that the
/// namespace holds no interface but `lo` and is not leash's own. Returned in the order asked, in blocking mode.
pub(crate) fn bind_in_netns(
    pid: u32,
    tcp: &[SocketAddrV4],
    udp: &[SocketAddrV4],
) -> Result<(Vec<TcpListener>, Vec<UdpSocket>), SandboxError> {
    bind_in(&Netns::Process(pid), &Isolation::default(), tcp, udp)
}

/// Binds `tcp` listeners and `udp` sockets inside `netns`, after checking it as `isolation` says (see
/// [`require_isolated`]) and that it is not leash's own. Returned in the order asked, in blocking mode.
pub(crate) fn bind_in(
    netns: &Netns,
    isolation: &Isolation,
    tcp: &[SocketAddrV4],
    udp: &[SocketAddrV4],
) -> Result<(Vec<TcpListener>, Vec<UdpSocket>), SandboxError> {
    let ns = open_foreign_netns(netns)?;
    let (tcp, udp, isolation, inside) = (tcp.to_vec(), udp.to_vec(), isolation.clone(), netns.clone());
    in_netns(netns, ns, move || {
        require_isolated(&inside, &isolation)?;
        let listeners = tcp
            .iter()
            .map(|a| TcpListener::bind(a).map_err(|e| setup(Step::BindTcp(*a), e)))
            .collect::<Result<Vec<_>, _>>()?;
        let sockets = udp
            .iter()
            .map(|a| UdpSocket::bind(a).map_err(|e| setup(Step::BindUdp(*a), e)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((listeners, sockets))
    })
}

/// Runs `work` on a thread inside `netns` (never leash's own) and returns what it returns: the containment self-test
/// of a namespace leash serves is run from inside it.
pub(crate) fn run_in_netns<T: Send + 'static>(
    netns: &Netns,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, SandboxError> {
    let ns = open_foreign_netns(netns)?;
    in_netns(netns, ns, move || Ok(work()))
}

/// The interface names in the network namespace of process `pid`, as seen from inside it.
pub(crate) fn netns_interfaces(pid: u32) -> Result<Vec<String>, SandboxError> {
    let netns = Netns::Process(pid);
    let ns = open_netns(&netns)?;
    in_netns(&netns, ns, || Ok(interfaces()?.into_iter().map(|(_, name)| name).collect()))
}

/// The device and inode of `netns`: the same pair while it is the same namespace, so a watcher can tell when a
/// path no longer names it (`ip netns delete`) or a process is gone.
pub(crate) fn netns_id(netns: &Netns) -> Result<(u64, u64), SandboxError> {
    let meta = std::fs::metadata(netns.file()).map_err(|e| setup(Step::OpenNetns(netns.clone()), e))?;
    Ok((meta.dev(), meta.ino()))
}

/// Opens the namespace and refuses leash's own (the check on interfaces would catch most hosts, but not one whose
/// only interface is `lo`).
fn open_foreign_netns(netns: &Netns) -> Result<File, SandboxError> {
    let ns = open_netns(netns)?;
    let theirs = ns.metadata().map_err(|e| setup(Step::OpenNetns(netns.clone()), e))?;
    let ours = std::fs::metadata("/proc/thread-self/ns/net").map_err(|e| setup(Step::OpenNetns(netns.clone()), e))?;
    if (theirs.dev(), theirs.ino()) == (ours.dev(), ours.ino()) {
        let why = "it is leash's own network namespace".into();
        return Err(SandboxError::NotIsolated { netns: netns.clone(), why });
    }
    Ok(ns)
}

fn open_netns(netns: &Netns) -> Result<File, SandboxError> {
    File::open(netns.file()).map_err(|e| setup(Step::OpenNetns(netns.clone()), e))
}

/// Runs `work` on a new thread that first joins the namespace `ns`; the thread ends with `work`.
fn in_netns<T: Send + 'static>(
    netns: &Netns,
    ns: File,
    work: impl FnOnce() -> Result<T, SandboxError> + Send + 'static,
) -> Result<T, SandboxError> {
    let entering = netns.clone();
    let thread = std::thread::Builder::new()
        .name("leash-netns".into())
        .spawn(move || {
            // SAFETY: setns takes a descriptor we own (open for the call's duration) and a namespace type; it
            // changes only this thread's network namespace, and this thread ends when `work` returns.
            let ret = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
            if ret != 0 {
                return Err(setup(Step::EnterNetns(entering), io::Error::last_os_error()));
            }
            drop(ns);
            work()
        })
        .map_err(|e| setup(Step::EnterNetns(netns.clone()), e))?;
    thread.join().unwrap_or_else(|_| Err(SandboxError::InitDied("the namespace thread panicked".into())))
}

/// Refuses a namespace that has another way out than leash's listener, as far as the namespace itself shows: an
/// interface other than `lo` and those `isolation` names; and, unless `isolation.allow_routes` (something else, a
/// NetworkPolicy or a firewall, drops the traffic), a route out (a default route, or one through a gateway, in any
/// table) or an IPv6 address other than link-local. Runs inside the namespace.
fn require_isolated(netns: &Netns, isolation: &Isolation) -> Result<(), SandboxError> {
    let refuse = |why: String| Err(SandboxError::NotIsolated { netns: netns.clone(), why });
    let names = interfaces()?;
    let unexpected: Vec<&str> = names
        .iter()
        .map(|(_, name)| name.as_str())
        .filter(|name| *name != LOOPBACK && !isolation.interfaces.iter().any(|i| i == name))
        .collect();
    if !unexpected.is_empty() {
        let told = match isolation.interfaces.is_empty() {
            true => "other than `lo`".to_owned(),
            false => format!("other than `lo` and {}", quoted(&isolation.interfaces)),
        };
        return refuse(format!("it has interfaces {told}: {}", unexpected.join(", ")));
    }
    if isolation.allow_routes {
        return Ok(());
    }
    let name_of = |index: Option<u32>| {
        let found = names.iter().find(|(i, _)| Some(*i) == index);
        found.map_or_else(|| "an unknown interface".to_owned(), |(_, name)| format!("`{name}`"))
    };
    let routes = super::netlink::routes().map_err(|e| setup(Step::ListInterfaces, e))?;
    if let Some(route) = routes.iter().find(|r| r.leads_out()) {
        let family = if i32::from(route.family) == libc::AF_INET6 { "IPv6" } else { "IPv4" };
        let what = if route.dst_len == 0 { "a default route" } else { "a route through a gateway" };
        return refuse(format!("it has a route out: {family} {what} on {}", name_of(route.oif)));
    }
    let addresses = super::netlink::addresses().map_err(|e| setup(Step::ListInterfaces, e))?;
    let global = addresses.iter().find(|(_, ip)| match ip {
        std::net::IpAddr::V6(v6) => !v6.is_loopback() && (v6.segments()[0] & 0xffc0) != 0xfe80,
        std::net::IpAddr::V4(_) => false,
    });
    if let Some((index, ip)) = global {
        return refuse(format!("it has an IPv6 address other than link-local: {ip} on {}", name_of(Some(*index))));
    }
    Ok(())
}

fn quoted(names: &[String]) -> String {
    names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
}

/// The calling thread's network namespace's interfaces, by index (glibc asks the kernel over netlink, in this
/// namespace).
fn interfaces() -> Result<Vec<(u32, String)>, SandboxError> {
    // SAFETY: if_nameindex takes no arguments and returns a heap array ending with a zero entry, or null.
    let list = unsafe { libc::if_nameindex() };
    if list.is_null() {
        return Err(setup(Step::ListInterfaces, io::Error::last_os_error()));
    }
    let mut names = Vec::new();
    let mut entry = list;
    // SAFETY: `entry` walks the array if_nameindex returned, stopping at its terminating zero entry; each
    // `if_name` is a NUL-terminated string owned by that array, copied before the array is freed below.
    unsafe {
        while (*entry).if_index != 0 && !(*entry).if_name.is_null() {
            names.push(((*entry).if_index, CStr::from_ptr((*entry).if_name).to_string_lossy().into_owned()));
            entry = entry.add(1);
        }
        libc::if_freenameindex(list);
    }
    Ok(names)
}

fn setup(step: Step, source: io::Error) -> SandboxError {
    SandboxError::Setup { step, source }
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn leash_own_namespace_is_refused() {
        match bind_in_netns(std::process::id(), &[], &[]) {
            Err(SandboxError::NotIsolated { why, .. }) => assert!(why.contains("own"), "{why}"),
            Err(SandboxError::Setup { step: Step::OpenNetns(_), .. }) => {
                {
                    // Written past the test harness's capture: a skip must show where the results are read.
                    use std::io::Write as _;
                    let _ = writeln!(std::io::stderr(), "SKIPPED: /proc/PID/ns/net cannot be opened here");
                }
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_missing_process_is_named_in_the_error() {
        let err = bind_in_netns(u32::MAX - 1, &[], &[]).unwrap_err();
        assert!(err.to_string().contains(&(u32::MAX - 1).to_string()), "{err}");
    }

    #[test]
    fn interfaces_of_leash_itself_include_loopback() {
        match netns_interfaces(std::process::id()) {
            Ok(names) => assert!(names.iter().any(|n| n == LOOPBACK), "{names:?}"),
            Err(SandboxError::Setup { step: Step::EnterNetns(_), source }) => {
                {
                    // Written past the test harness's capture: a skip must show where the results are read.
                    use std::io::Write as _;
                    let _ = writeln!(std::io::stderr(), "SKIPPED: setns needs CAP_SYS_ADMIN here ({source})");
                }
            }
            Err(e) => panic!("{e}"),
        }
    }
}
