//! A network namespace leash did not make, served: checked and bound inside (`leash_sandbox::bind_in` refuses one
//! with another way out), then watched until it is gone or emptied. `leash attach` serves one such namespace and
//! `leash attach --dir` many; both start from here, so neither subcommand imports the other.

use std::time::Duration;

use leash_docker::serve::bind_in_namespace;
use leash_policy::Policy;
use leash_proxy::inside::Plan;
use leash_sandbox::{Isolation, Netns};

use crate::exit::Failure;
use crate::shared::{probe, services};

/// How often leash looks whether the namespace it serves is still there.
const GONE_POLL: Duration = Duration::from_millis(250);

/// How often a named namespace is looked at for processes still in it.
const EMPTIED_POLL: Duration = Duration::from_secs(1);

/// A namespace to serve and how.
pub struct Target {
    pub netns: Netns,
    pub isolation: Isolation,
    /// With routes allowed: outside addresses the self-test must not reach (see [`probe::Wall::Outside`]).
    pub canaries: Vec<std::net::SocketAddr>,
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
/// isolated, or any bind that fails, is exit 125 with the reason. One served with routes allowed, where leash
/// cannot see the wall, is first probed from inside ([`self_test`]).
pub fn attach(target: &Target, policy: &Policy) -> Result<Attached, Failure> {
    let id = leash_sandbox::netns_id(&target.netns).map_err(|e| refuse(&e))?;
    let mut plan = Plan::proxy_at(target.listen).with_services(&services::ports(policy));
    if target.transparent {
        plan = plan.with_dns_and_transparent(policy, leash_sandbox::MAX_SOCKETS);
    }
    let inside = bind_in_namespace(&target.netns, &target.isolation, &plan).map_err(|e| refuse(&e))?;
    if target.isolation.allow_routes {
        self_test(target, &plan)?;
    }
    let (unix, socket_files) = services::bind_sockets(policy)?;
    services::announce(policy);
    Ok(Attached { inside: inside.with_services(unix), socket_files, id })
}

/// The containment self-test of a namespace with routes out ([`probe::Wall::Outside`]), from a thread inside it,
/// after leash's listeners are bound there (they must answer): anything outside that answers — a canary, a
/// resolver, a documentation address a middlebox answers for — or a listener on its loopback that is not leash's
/// refuses the namespace, naming each probe. This is what catches a second NetworkPolicy that reopened egress.
fn self_test(target: &Target, plan: &Plan) -> Result<(), Failure> {
    let expected = probe::Expected {
        tcp: plan.tcp().into_iter().map(std::net::SocketAddr::V4).collect(),
        udp: plan.udp().into_iter().map(std::net::SocketAddr::V4).collect(),
        canaries: target.canaries.clone(),
        wall: probe::Wall::Outside,
        resolv_conf: resolv_conf_of(&target.netns),
        reach: probe::Reach::Connect,
    };
    let probes = leash_sandbox::run_in_netns(&target.netns, move || probe::run(&expected)).map_err(|e| refuse(&e))?;
    tracing::info!("containment self-test of {}:\n{}", target.netns, probe::report(&probes));
    if probe::contained(&probes) {
        return Ok(());
    }
    let open: Vec<probe::Probe> = probes.into_iter().filter(|p| !p.ok).collect();
    Err(Failure::sandbox_failed(format!(
        "not serving it: the network namespace {} has routes out and its self-test found a way out that something \
         outside should have dropped:\n{}",
        target.netns,
        probe::report(&open).trim_end()
    )))
}

/// The resolver configuration the namespace's programs read: `ip netns exec NAME`'s `/etc/netns/NAME/resolv.conf`
/// for a named namespace, the process's own for `--pid`; `/etc/resolv.conf` where neither is there.
fn resolv_conf_of(netns: &Netns) -> Option<std::path::PathBuf> {
    let candidate = match netns {
        Netns::Process(pid) => std::path::PathBuf::from(format!("/proc/{pid}/root/etc/resolv.conf")),
        Netns::Path(path) => {
            let named = path.parent().is_some_and(|dir| dir == std::path::Path::new("/run/netns"));
            let name = path.file_name().filter(|_| named)?;
            std::path::Path::new("/etc/netns").join(name).join("resolv.conf")
        }
    };
    candidate.exists().then_some(candidate)
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

fn refuse(e: &leash_sandbox::SandboxError) -> Failure {
    Failure::sandbox_failed(format!("not serving it: {e}"))
}

/// Makes leash non-dumpable (`leash_sandbox::harden_self`) before it binds anything in a namespace it does not
/// control: what runs there can neither ptrace leash nor read its memory, the CA key included.
pub fn harden() -> Result<(), Failure> {
    leash_sandbox::harden_self().map_err(Failure::sandbox_failed)
}
