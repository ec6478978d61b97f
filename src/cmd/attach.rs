//! `leash attach`: serve leash's proxy inside a network namespace leash did not make — a microVM's tap namespace, a
//! pod's, another runtime's container — by binding the listener there and serving it from leash's own namespace.
//! The namespace is checked first (`leash_sandbox::bind_in`): one with another way out is refused. It is served
//! until a stop signal, or until it is gone. With `--dir`, many namespaces at once ([`super::attach_dir`]).

use std::sync::Arc;
use std::time::Duration;

use leash_docker::serve::{bind_in_namespace, serve_until, StopSignals};
use leash_policy::Policy;
use leash_proxy::Inspection;
use leash_sandbox::{Isolation, Netns};

use crate::cli::AttachArgs;
use crate::exit::Exit;
use crate::shared::sandboxed::{config, proxy_parts, with_stop_signals, ProxyParts};
use crate::shared::services;

/// How often leash looks whether the namespace it serves is still there.
const GONE_POLL: Duration = Duration::from_millis(250);

pub fn run(args: AttachArgs) -> Exit {
    if let Err(e) = leash_sandbox::harden_self() {
        eprintln!("leash: {e}");
        return Exit::SandboxFailed;
    }
    if let Some(dir) = args.dir.clone() {
        return super::attach_dir::run(&dir, args);
    }
    let netns = match (&args.netns, args.pid) {
        (Some(path), _) => Netns::Path(path.clone()),
        (None, Some(pid)) => Netns::Process(pid),
        (None, None) => return usage("give --netns PATH, --pid PID or --dir DIR"),
    };
    let parts = match proxy_parts(&args.proxy, false) {
        Ok(parts) => parts,
        Err(code) => return code,
    };
    let (ca_out, bundle_out) = (args.ca_cert_out.as_deref(), args.ca_bundle_out.as_deref());
    let inspection = match crate::shared::tls::inspection_for_clients(ca_out, bundle_out, &args.proxy.upstream_ca) {
        Ok(i) => i,
        Err(code) => return code,
    };
    let target = Target { netns, isolation: isolation(&args), listen: args.listen, transparent: args.transparent };
    let until_empty = args.until_empty;
    with_stop_signals(move |mut stop| async move { serve(target, until_empty, parts, inspection, &mut stop).await })
}

/// A namespace to serve and how.
pub struct Target {
    pub netns: Netns,
    pub isolation: Isolation,
    pub listen: std::net::SocketAddrV4,
    pub transparent: bool,
}

pub fn isolation(args: &AttachArgs) -> Isolation {
    Isolation { interfaces: args.interfaces.clone(), allow_routes: args.allow_routes }
}

/// Bind inside `target`, say so, and serve until a stop signal or the namespace is gone.
async fn serve(
    target: Target,
    until_empty: bool,
    parts: ProxyParts,
    inspection: Arc<Inspection>,
    stop: &mut StopSignals,
) -> Exit {
    let ProxyParts { policy, pins, audit, secrets } = parts;
    let attached = match attach(&target, &policy) {
        Ok(a) => a,
        Err(code) => return code,
    };
    let config = config((policy, pins, secrets), Arc::new(audit), Some(inspection));
    println!("listening inside the network namespace {} on {}", target.netns, target.listen);
    let (gone_tx, gone_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let why = tokio::select! {
            why = gone(&target.netns, attached.id) => why,
            why = emptied(&target.netns, attached.id), if until_empty => why,
        };
        let _ = gone_tx.send(why);
    });
    if let Some(why) = serve_until(attached.inside, config, gone_rx, stop, None::<fn()>).await {
        tracing::info!("{why}; stopped serving it");
    }
    drop(attached.socket_files);
    Exit::Ok
}

/// What is bound inside a namespace, and which namespace it was.
pub struct Attached {
    pub inside: leash_docker::serve::Inside,
    pub socket_files: services::SocketFiles,
    /// The namespace's device and inode when it was bound.
    pub id: (u64, u64),
}

/// Checks and binds inside `target`: the proxy's listener, the stub and transparent listeners if asked, and the
/// policy's services (ports on the listening address inside, Unix sockets at their paths). A namespace that is not
/// isolated, or any bind that fails, is exit 125 with the reason.
pub fn attach(target: &Target, policy: &Policy) -> Result<Attached, Exit> {
    let id = leash_sandbox::netns_id(&target.netns).map_err(|e| refuse(&e))?;
    let transparent = target.transparent.then(|| leash_proxy::transparent_ports(policy, leash_sandbox::MAX_SOCKETS));
    let service_ports = services::ports(policy);
    let inside =
        bind_in_namespace(&target.netns, &target.isolation, target.listen, transparent.as_deref(), &service_ports)
            .map_err(|e| refuse(&e))?;
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

/// How often a named namespace is looked at for processes still in it.
const EMPTIED_POLL: Duration = Duration::from_secs(1);

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

fn usage(why: &str) -> Exit {
    eprintln!("leash attach: {why}");
    Exit::Usage
}

/// Refuses proxy options that `--dir` takes from each attachment file instead.
pub fn refuse_policy_options(args: &AttachArgs) -> Result<(), Exit> {
    let p = &args.proxy;
    if p.policy.is_some() || !p.allow.is_empty() || !p.block.is_empty() || p.profile.is_some() {
        return Err(usage("with --dir, each attachment file names its policy: drop --policy, --allow and --block"));
    }
    if args.netns.is_some() || args.pid.is_some() || args.ca_cert_out.is_some() || args.ca_bundle_out.is_some() {
        return Err(usage("with --dir, each attachment file names its namespace and CA files"));
    }
    Ok(())
}
