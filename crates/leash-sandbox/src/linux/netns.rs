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
use crate::SandboxError;

/// The only interface an isolated namespace may hold.
const LOOPBACK: &str = "lo";

/// Binds `tcp` listeners and `udp` sockets inside the network namespace of process `pid`, after checking that the
/// namespace holds no interface but `lo` and is not leash's own. Returned in the order asked, in blocking mode.
pub(crate) fn bind_in_netns(
    pid: u32,
    tcp: &[SocketAddrV4],
    udp: &[SocketAddrV4],
) -> Result<(Vec<TcpListener>, Vec<UdpSocket>), SandboxError> {
    let ns = open_foreign_netns(pid)?;
    let (tcp, udp) = (tcp.to_vec(), udp.to_vec());
    in_netns(pid, ns, move || {
        require_only_loopback(pid)?;
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

/// The interface names in the network namespace of process `pid`, as seen from inside it.
pub(crate) fn netns_interfaces(pid: u32) -> Result<Vec<String>, SandboxError> {
    let ns = open_netns(pid)?;
    in_netns(pid, ns, interfaces)
}

/// Opens `/proc/PID/ns/net` and refuses leash's own namespace (the check on interfaces would catch most hosts,
/// but not one whose only interface is `lo`).
fn open_foreign_netns(pid: u32) -> Result<File, SandboxError> {
    let ns = open_netns(pid)?;
    let theirs = ns.metadata().map_err(|e| setup(Step::OpenNetns(pid), e))?;
    let ours = std::fs::metadata("/proc/thread-self/ns/net").map_err(|e| setup(Step::OpenNetns(pid), e))?;
    if (theirs.dev(), theirs.ino()) == (ours.dev(), ours.ino()) {
        return Err(SandboxError::NotIsolated { pid, why: "it is leash's own network namespace".into() });
    }
    Ok(ns)
}

fn open_netns(pid: u32) -> Result<File, SandboxError> {
    File::open(format!("/proc/{pid}/ns/net")).map_err(|e| setup(Step::OpenNetns(pid), e))
}

/// Runs `work` on a new thread that first joins the namespace `ns`; the thread ends with `work`.
fn in_netns<T: Send + 'static>(
    pid: u32,
    ns: File,
    work: impl FnOnce() -> Result<T, SandboxError> + Send + 'static,
) -> Result<T, SandboxError> {
    let thread = std::thread::Builder::new()
        .name("leash-netns".into())
        .spawn(move || {
            // SAFETY: setns takes a descriptor we own (open for the call's duration) and a namespace type; it
            // changes only this thread's network namespace, and this thread ends when `work` returns.
            let ret = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
            if ret != 0 {
                return Err(setup(Step::EnterNetns(pid), io::Error::last_os_error()));
            }
            drop(ns);
            work()
        })
        .map_err(|e| setup(Step::EnterNetns(pid), e))?;
    thread.join().unwrap_or_else(|_| Err(SandboxError::InitDied("the namespace thread panicked".into())))
}

fn require_only_loopback(pid: u32) -> Result<(), SandboxError> {
    let others: Vec<String> = interfaces()?.into_iter().filter(|name| name != LOOPBACK).collect();
    if others.is_empty() {
        return Ok(());
    }
    let why = format!("it has interfaces other than `lo`: {}", others.join(", "));
    Err(SandboxError::NotIsolated { pid, why })
}

/// The calling thread's network namespace's interfaces (glibc asks the kernel over netlink, in this namespace).
fn interfaces() -> Result<Vec<String>, SandboxError> {
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
            names.push(CStr::from_ptr((*entry).if_name).to_string_lossy().into_owned());
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
                eprintln!("SKIPPED: /proc/PID/ns/net cannot be opened here")
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
                eprintln!("SKIPPED: setns needs CAP_SYS_ADMIN here ({source})")
            }
            Err(e) => panic!("{e}"),
        }
    }
}
