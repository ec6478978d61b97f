//! A network namespace leash did not make, served: checked and bound inside (`leash_sandbox::bind_in` refuses one
//! with another way out), then watched until it is gone or emptied. `leash attach` serves one such namespace and
//! `leash attach --dir` many; both start from here, so neither subcommand imports the other.

use std::time::Duration;

use leash_docker::serve::bind_in_namespace;
use leash_policy::Policy;
use leash_proxy::inside::Plan;
use leash_sandbox::{Isolation, Netns};

use crate::exit::Exit;
use crate::shared::services;

/// How often leash looks whether the namespace it serves is still there.
const GONE_POLL: Duration = Duration::from_millis(250);

/// How often a named namespace is looked at for processes still in it.
const EMPTIED_POLL: Duration = Duration::from_secs(1);

/// A namespace to serve and how.
pub struct Target {
    pub netns: Netns,
    pub isolation: Isolation,
    pub listen: std::net::SocketAddrV4,
    pub transparent: bool,
}

/// What is bound inside a namespace, and which namespace it was.
pub struct Attached {
    pub inside: leash_proxy::inside::Bound,
    pub socket_files: services::SocketFiles,
    /// The namespace's device and inode when it was bound.
    pub id: (u64, u64),
}

/// Checks and binds inside `target`: the proxy's listener, the stub and transparent listeners if asked, and the
/// policy's services (ports on the listening address inside, Unix sockets at their paths). A namespace that is not
/// isolated, or any bind that fails, is exit 125 with the reason.
pub fn attach(target: &Target, policy: &Policy) -> Result<Attached, Exit> {
    let id = leash_sandbox::netns_id(&target.netns).map_err(|e| refuse(&e))?;
    let mut plan = Plan::proxy_at(target.listen).with_services(&services::ports(policy));
    if target.transparent {
        plan = plan.with_dns_and_transparent(policy, leash_sandbox::MAX_SOCKETS);
    }
    let inside = bind_in_namespace(&target.netns, &target.isolation, &plan).map_err(|e| refuse(&e))?;
    let (unix, socket_files) = services::bind_sockets(policy)?;
    services::announce(policy);
    Ok(Attached { inside: inside.with_services(unix), socket_files, id })
}

/// Completes once `netns` is no longer the namespace `id` names (its file removed or replaced, or its process
/// gone), with the reason.
pub async fn gone(netns: &Netns, id: (u64, u64)) -> String {
    loop {
        tokio::time::sleep(GONE_POLL).await;
        match leash_sandbox::netns_id(netns) {
            Ok(now) if now == id => continue,
            Ok(_) => return format!("the network namespace {netns} was replaced"),
            Err(_) => return format!("the network namespace {netns} is gone"),
        }
    }
}

/// `--until-empty`, for a namespace named by a path (one `ip netns add` made lives on with no process in it):
/// completes once processes have been seen in it and none is left — the microVM's QEMU or the container ended.
/// Never for a process's namespace (`--pid`), which [`gone`] watches already, nor for one that never had a process
/// (a tap namespace waiting for its VM). Opt-in: a one-off `ip netns exec NS curl` would otherwise end the serving.
pub async fn emptied(netns: &Netns, id: (u64, u64)) -> String {
    if matches!(netns, Netns::Process(_)) {
        return std::future::pending().await;
    }
    let mut seen = false;
    loop {
        tokio::time::sleep(EMPTIED_POLL).await;
        let inside = tokio::task::spawn_blocking(move || processes_in(id)).await.unwrap_or(1);
        match (inside, seen) {
            (0, true) => return format!("the last process in the network namespace {netns} exited"),
            (0, false) => {}
            (_, _) => seen = true,
        }
    }
}

/// How many processes are in the network namespace `id` now (their /proc/PID/ns/net is that namespace).
fn processes_in(id: (u64, u64)) -> usize {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir("/proc") else { return 1 };
    let pids =
        entries.filter_map(|e| e.ok()).filter(|e| e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()));
    let in_it =
        |e: &std::fs::DirEntry| std::fs::metadata(e.path().join("ns/net")).is_ok_and(|m| (m.dev(), m.ino()) == id);
    pids.filter(in_it).count()
}

fn refuse(e: &leash_sandbox::SandboxError) -> Exit {
    eprintln!("leash: not serving it: {e}");
    Exit::SandboxFailed
}

/// Makes leash non-dumpable (`leash_sandbox::harden_self`) before it binds anything in a namespace it does not
/// control: what runs there can neither ptrace leash nor read its memory, the CA key included.
pub fn harden() -> Result<(), Exit> {
    leash_sandbox::harden_self().map_err(|e| {
        eprintln!("leash: {e}");
        Exit::SandboxFailed
    })
}
