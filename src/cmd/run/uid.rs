//! `leash run` where leash cannot make namespaces (docs/inside.md): the command runs as `--user` in leash's own
//! network namespace. In the `uid-firewall` containment a firewall lets that uid reach exactly leash's listeners
//! on the loopback, and a self-test from that uid must find every other way shut before the command starts; in the
//! `advisory` one the command is only pointed at the proxy, and every audit line and the summary say it could have
//! ignored it. Either way leash serves the proxy (and the services' listeners) on 127.0.0.1, the command gets the
//! same variables as in a sandbox, every process it leaves is ended with it, and the rules are removed at the end.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;

use leash_proxy::inside::{Bound, Plan, PROXY_INSIDE};
use leash_proxy::ProxyConfig;
use leash_sandbox::uid::{Admitted, Capabilities, Firewall, Flaw, OwnNetns, RunAs};

use super::{
    bind_control, check_upstream_ca, child_env, create_ca_files, fits_run, inherited_env, make_control, proxy_config,
};
use crate::cli::{Containment, RunArgs};
use crate::exit::{Exit, Failure};
use crate::shared::control::Control;
use crate::shared::sandboxed::{keep_deferred_log, mode_env, proxy_parts, ProxyParts};
use crate::shared::services;
use crate::shared::trust::CaFiles;

/// `USER`, `UID` or `UID:GID` as `--user` takes it: a name is looked up in /etc/passwd (its uid and primary gid); a
/// bare uid takes its passwd entry's gid, or the same number.
pub fn parse_user(spec: &str) -> Result<RunAs, Failure> {
    let usage = |why: String| Failure::usage(format!("--user `{spec}`: {why}"));
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let entry = |matches: &dyn Fn(&[&str]) -> bool| -> Option<(u32, u32)> {
        passwd
            .lines()
            .map(|l| l.split(':').collect::<Vec<_>>())
            .find(|f| f.len() > 3 && matches(f))
            .and_then(|f| Some((f.get(2)?.parse().ok()?, f.get(3)?.parse().ok()?)))
    };
    let (uid, gid) = match spec.split_once(':') {
        Some((uid, gid)) => {
            let uid = uid.parse().map_err(|_| usage("UID:GID takes numbers".into()))?;
            (uid, gid.parse().map_err(|_| usage("UID:GID takes numbers".into()))?)
        }
        None => match spec.parse::<u32>() {
            Ok(uid) => (uid, entry(&|f| f[2] == spec).map_or(uid, |(_, gid)| gid)),
            Err(_) => entry(&|f| f[0] == spec).ok_or_else(|| usage("no such user in /etc/passwd".into()))?,
        },
    };
    Ok(RunAs { uid, gid })
}

/// Where user namespaces could not be made (`why`) and `--containment auto` was asked: the per-uid firewall where
/// leash may program one and run a program as another user, else a refusal naming what each containment needs.
pub fn fall_back(args: &RunArgs, user: Option<RunAs>, why: &leash_sandbox::SandboxError) -> Result<Exit, Failure> {
    let caps = Capabilities::of_self();
    let firewall_ok = caps.root && caps.net_admin && caps.set_ids;
    match user {
        Some(user) if firewall_ok && caps.sys_admin => {
            eprintln!(
                "leash: containment: user namespaces cannot be made here ({why}); using netns: the command runs as \
                 uid {} in a network namespace of leash's holding only `lo`",
                user.uid
            );
            run(args, Some(user), Containment::Netns)
        }
        Some(user) if firewall_ok => {
            eprintln!(
                "leash: containment: user namespaces cannot be made here ({why}); using uid-firewall: the command runs \
                 as uid {} behind a firewall in this network namespace",
                user.uid
            );
            run(args, Some(user), Containment::UidFirewall)
        }
        _ => Err(Failure::sandbox_failed(format!(
            "the command was not run: no containment can be set up here\n  userns: {why}\n  netns: {}\n  \
             uid-firewall: {}\n  advisory: `--advisory` runs the command pointed at the proxy, which it could ignore \
             (every audit line says so)",
            netns_needs(caps, user),
            firewall_needs(caps, user)
        ))),
    }
}

/// What the netns containment still needs here.
fn netns_needs(caps: Capabilities, user: Option<RunAs>) -> String {
    let network = "CAP_SYS_ADMIN and CAP_NET_ADMIN (`docker run --cap-add SYS_ADMIN --cap-add NET_ADMIN`)";
    still_needed(caps, user, (caps.sys_admin && caps.net_admin, network))
}

/// What the per-uid firewall still needs here.
fn firewall_needs(caps: Capabilities, user: Option<RunAs>) -> String {
    still_needed(caps, user, (caps.net_admin, "CAP_NET_ADMIN (`docker run --cap-add NET_ADMIN`)"))
}

/// `needs ...`: root, the network capabilities `(has, named)`, the id capabilities, a user for the command.
fn still_needed(caps: Capabilities, user: Option<RunAs>, (has, named): (bool, &'static str)) -> String {
    let wanted = [
        (caps.root, "leash running as root"),
        (has, named),
        (caps.set_ids, "CAP_SETUID and CAP_SETGID"),
        (user.is_some(), "`--user UID` for the command"),
    ];
    let missing: Vec<&str> = wanted.iter().filter(|(ok, _)| !ok).map(|(_, what)| *what).collect();
    format!("needs {}", missing.join(", "))
}

/// The command as `user` in leash's network namespace, behind the firewall (`UidFirewall`) or not (`Advisory`).
pub fn run(args: &RunArgs, user: Option<RunAs>, mode: Containment) -> Result<Exit, Failure> {
    let firewalled = mode == Containment::UidFirewall;
    let in_netns = mode == Containment::Netns;
    let user = match (user, firewalled || in_netns) {
        (Some(user), _) => Some(user),
        (None, true) => {
            return Err(Failure::sandbox_failed(format!(
                "the command was not run: the {} containment needs `--user UID` for the command",
                mode.word()
            )))
        }
        (None, false) => None,
    };
    if let Some(user) = user {
        check_user(user)?;
    }
    if !args.allow_unix_socket.is_empty() {
        return Err(Failure::usage(
            "--allow-unix-socket is for the userns containment: here the command reaches Unix sockets by their \
             permissions",
        ));
    }
    let ProxyParts { policy, pins, audit, secrets } = proxy_parts(&args.proxy, true)?;
    if let Some(user) = user {
        unreadable_by(user, &leash_files(args, &policy))?;
    }
    if args.control.is_some() && user.is_none() {
        // Its directory is closed to every uid but leash's, which is the command's here.
        return Err(Failure::usage(
            "--control needs --user here: the command would run as leash's own uid and reach the socket",
        ));
    }
    let control_socket = bind_control(args, &policy)?;
    // Every line says which containment stood behind it, and an advisory one that it enforced nothing.
    let audit = Arc::new(audit.with_containment(mode.word()));
    let mut plan = Plan::proxy_at(PROXY_INSIDE).with_services(&services::ports(&policy));
    if in_netns {
        plan = plan.with_dns_and_transparent(&policy, leash_sandbox::MAX_SOCKETS);
    }
    let (bound, own_netns) = if in_netns { bind_in_own_netns(&plan)? } else { (bind_here(&plan)?, None) };
    let (unix_services, socket_files) = services::bind_sockets(&policy)?;
    let needs_ca = policy.may_inspect();
    if !needs_ca {
        check_upstream_ca(args)?;
    }
    let ca_files = create_ca_files(needs_ca)?;
    let mut env = child_env(inherited_env(args), &plan, ca_files.is_some(), mode_env(&policy));
    env.extend(ca_files.iter().flat_map(CaFiles::env));
    crate::shared::secrets::sandbox_env(&policy, &secrets.secrets, &mut env);
    env.extend(services::no_proxy_env(&policy));
    services::announce(&policy);
    let config = proxy_config(args, (policy, pins, secrets), audit.clone(), ca_files.as_ref())?;
    let firewall = match (firewalled, user) {
        (true, Some(user)) => Some(arm(user, &plan)?),
        _ => None,
    };
    let netns = match (&own_netns, user) {
        (Some(netns), Some(user)) => Some((netns, netns_self_test(user, &plan, netns)?)),
        _ => None,
    };
    if mode == Containment::Advisory {
        eprintln!(
            "leash: advisory: the command is only pointed at the proxy and could go around it; nothing is enforced"
        );
    }
    let plan_of = move |policy: &leash_policy::Policy| {
        let plan = Plan::proxy_at(PROXY_INSIDE).with_services(&services::ports(policy));
        if in_netns {
            return plan.with_dns_and_transparent(policy, leash_sandbox::MAX_SOCKETS);
        }
        plan
    };
    let control =
        control_socket.map(|socket| make_control(args, socket, &config, fits_run(plan_of, &plan, ca_files.is_some())));
    let policy = config.policy.clone();
    let user_netns = (user, netns.as_ref().map(|(n, r)| (*n, r.c_path())));
    // A failure once the command was to start is said before the summary.
    let exit = serve_while(args, user_netns, env, bound.with_services(unix_services), (config, control.as_ref()))
        .unwrap_or_else(Failure::report);
    drop(control);
    drop(netns);
    drop(firewall);
    keep_deferred_log(&audit, args.quiet);
    crate::shared::summary::print(&audit, &policy, args.quiet);
    if mode == Containment::Advisory && !args.quiet {
        eprintln!("leash: advisory run: nothing kept the command from going around the proxy");
    }
    drop(ca_files);
    drop(socket_files);
    Ok(exit)
}

/// The command's uid must be neither root nor leash's own: either would be leash's peer (the firewall's rules, its
/// files, its signals).
pub(super) fn check_user(user: RunAs) -> Result<(), Failure> {
    let own = rustix::process::geteuid().as_raw();
    if user.uid == 0 || user.uid == own {
        return Err(Failure::sandbox_failed(format!(
            "the command was not run: --user {} is {}: the command must run as another, unprivileged uid",
            user.uid,
            if user.uid == 0 { "root" } else { "leash's own uid" }
        )));
    }
    Ok(())
}

/// The files of leash's the command must not read: the policy, the audit log, the secrets' files.
fn leash_files(args: &RunArgs, policy: &leash_policy::Policy) -> Vec<std::path::PathBuf> {
    let mut files: Vec<std::path::PathBuf> = args.proxy.policy.iter().chain(&args.proxy.log).cloned().collect();
    files.extend(crate::shared::sandboxed::secret_files(policy));
    files
}

/// Refuses to start when `user` could read any of `files`: by the mode, owner and group of the file and of every
/// directory above it (the command has no supplementary group).
fn unreadable_by(user: RunAs, files: &[std::path::PathBuf]) -> Result<(), Failure> {
    for file in files {
        let Ok(file) = std::fs::canonicalize(file) else { continue };
        if readable_by(user, &file) {
            return Err(Failure::sandbox_failed(format!(
                "the command was not run: uid {} could read `{}`: leash's files must be its own (chmod go-rwx the \
                 file, or a directory above it)",
                user.uid,
                file.display()
            )));
        }
    }
    Ok(())
}

/// Whether `user` may read `file` (absolute): each directory above searchable, the file readable.
fn readable_by(user: RunAs, file: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let may = |path: &std::path::Path, bit: u32| {
        std::fs::metadata(path).is_ok_and(|m| {
            let mode = m.mode();
            let class = if m.uid() == user.uid {
                mode >> 6
            } else if m.gid() == user.gid {
                mode >> 3
            } else {
                mode
            };
            class & bit != 0
        })
    };
    let searchable = file.ancestors().skip(1).all(|dir| may(dir, 0o1));
    searchable && may(file, 0o4)
}

/// The plan's listeners, bound here on the loopback.
fn bind_here(plan: &Plan) -> Result<Bound, Failure> {
    let mut tcp = Vec::new();
    for addr in plan.tcp() {
        let listener = std::net::TcpListener::bind(addr).map_err(|e| {
            Failure::sandbox_failed(format!("the command was not run: cannot listen on {addr} here: {e}"))
        })?;
        tcp.push(listener);
    }
    plan.take(tcp, Vec::new()).map_err(not_run)
}

/// The command was not run, for `why`.
fn not_run(why: impl std::fmt::Display) -> Failure {
    Failure::sandbox_failed(format!("the command was not run: {why}"))
}

/// A network namespace of leash's own, holding only `lo`, with the plan's sockets bound in it (the stub and the
/// transparent listeners among them, as `leash attach --transparent` serves a namespace).
fn bind_in_own_netns(plan: &Plan) -> Result<(Bound, Option<OwnNetns>), Failure> {
    let netns = OwnNetns::create().map_err(not_run)?;
    let inside = leash_sandbox::Netns::Path(netns.path());
    let sockets = leash_sandbox::bind_in(&inside, &leash_sandbox::Isolation::default(), &plan.tcp(), &plan.udp())
        .map_err(not_run)?;
    let bound = plan.take(sockets.tcp, sockets.udp).map_err(not_run)?;
    Ok((bound, Some(netns)))
}

/// The resolv.conf the command's mount namespace shows in the netns containment: the stub in its namespace. Removed
/// when dropped (the command's mount holds the file).
struct ResolvFile(std::path::PathBuf);

impl ResolvFile {
    fn write() -> std::io::Result<ResolvFile> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let path = leash_sandbox::scratch_dir().join(format!("leash-resolv-netns-{}.conf", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o644).open(&path)?;
        file.write_all(super::resolv_conf(None).as_bytes())?;
        Ok(ResolvFile(path))
    }

    fn c_path(&self) -> std::ffi::CString {
        use std::os::unix::ffi::OsStrExt as _;
        std::ffi::CString::new(self.0.as_os_str().as_bytes()).unwrap_or_default()
    }
}

impl Drop for ResolvFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The self-test in the netns containment: `leash probe` as `user` in `netns`, which holds only `lo`; every way out
/// must be shut and leash's listeners answer. Returns the resolv.conf for the command.
fn netns_self_test(user: RunAs, plan: &Plan, netns: &OwnNetns) -> Result<ResolvFile, Failure> {
    let refuse = |why: String| self_test_refusal(user, &why);
    let exe = std::env::current_exe().map_err(|e| refuse(format!("cannot find leash's own program: {e}")))?;
    let mut probe = Command::new(exe);
    probe.args(["probe", "--quiet"]).env_clear();
    for addr in plan.tcp() {
        probe.arg("--expect").arg(addr.to_string());
    }
    for addr in plan.udp() {
        probe.arg("--expect-udp").arg(addr.to_string());
    }
    user.apply_in(&mut probe, netns, None);
    let out = probe.output().map_err(|e| refuse(format!("could not run: {e}")))?;
    if !out.status.success() {
        return Err(refuse(format!("found a way around leash:\n{}", String::from_utf8_lossy(&out.stdout))));
    }
    ResolvFile::write().map_err(|e| refuse(format!("cannot write the command's resolv.conf: {e}")))
}

/// The firewall for `user`, then the self-test from that uid; any way out it finds refuses the run, naming it.
fn arm(user: RunAs, plan: &Plan) -> Result<Firewall, Failure> {
    let ports: Vec<u16> = plan.tcp().iter().map(|a| a.port()).collect();
    let admitted = Admitted { tcp: ports, udp: Vec::new() };
    let firewall = Firewall::install(user.uid, &admitted, Flaw::from_env()).map_err(not_run)?;
    let expect: Vec<SocketAddr> = plan.tcp().into_iter().map(SocketAddr::V4).collect();
    if let Err(refused) = self_test(user, &expect, &firewall) {
        // Said now, before the rules are removed (a failure to remove them is said after it).
        return Err(Failure::new(refused.report(), ""));
    }
    Ok(firewall)
}

/// `leash probe --stepwise`, run as `user` exactly as the command will run, leash reading its firewall's counters
/// around each attempt. A way out refuses the run (exit 125, naming the probe), and so does a refusal the firewall's
/// counters did not see (another rule, or none, refused it: what stops a probe today may not stop the command
/// tomorrow). Where the firewall could only drop TCP (gVisor has no `REJECT`), a TCP attempt is left unanswered:
/// it passes when leash's rules counted its packets, which a drop ends.
fn self_test(user: RunAs, expect: &[SocketAddr], firewall: &Firewall) -> Result<(), Failure> {
    use std::io::{BufRead, BufReader, Write};
    let refuse = |why: String| self_test_refusal(user, &why);
    let exe = std::env::current_exe().map_err(|e| refuse(format!("cannot find leash's own program: {e}")))?;
    let mut probe = Command::new(exe);
    probe.args(["probe", "--stepwise"]).env_clear();
    probe.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped());
    for addr in expect {
        probe.arg("--expect").arg(addr.to_string());
    }
    user.apply(&mut probe);
    let mut child = probe.spawn().map_err(|e| refuse(format!("could not run: {e}")))?;
    let (Some(mut go), Some(out)) = (child.stdin.take(), child.stdout.take()) else {
        let _ = child.kill();
        return Err(refuse("could not talk to the probe".into()));
    };
    let counted = || firewall.stopped().map_err(|e| format!("cannot read the firewall's counters: {e}"));
    let mut found = Vec::new();
    let mut lines = BufReader::new(out).lines();
    let mut judge = || -> Result<(), String> {
        while let Some(line) = lines.next().transpose().map_err(|e| e.to_string())? {
            if line.strip_prefix("STEP ").is_none() {
                continue;
            }
            let before = counted()?;
            go.write_all(b"\n").and_then(|()| go.flush()).map_err(|e| e.to_string())?;
            let result = lines.next().transpose().map_err(|e| e.to_string())?.unwrap_or_default();
            let stopped_here = counted()? > before;
            if let Some(why) = verdict(&result, stopped_here) {
                found.push(format!("{result} ({why})"));
            }
        }
        Ok(())
    };
    let judged = judge();
    let _ = child.wait();
    judged.map_err(&refuse)?;
    if found.is_empty() {
        return Ok(());
    }
    let listed: String = found.iter().map(|l| format!("\n  {l}")).collect();
    Err(refuse(format!("found a way around leash:{listed}")))
}

/// The run refused by the self-test as `user`, for `why`.
fn self_test_refusal(user: RunAs, why: &str) -> Failure {
    not_run(format!("the containment self-test, as uid {}, {why}", user.uid))
}

/// What is wrong with one probe's line, given whether leash's rules stopped a packet during it; `None` for a pass.
fn verdict(line: &str, stopped_here: bool) -> Option<&'static str> {
    let refused_by_firewall = line.contains("(os error 1)") || line.contains("(os error 113)");
    let unanswered = line.contains("no answer within");
    // A listener of this namespace's own is reached through the loopback, which loses nothing: a SYN left
    // unanswered there was dropped (gVisor keeps no counters to say by which rule).
    let local = line.contains(" tcp listener ");
    match line.starts_with("ok") {
        true if refused_by_firewall && !stopped_here => Some("refused, but not by leash's rules"),
        true => None,
        false if unanswered && (stopped_here || local) => None,
        false if unanswered => Some("unanswered, and leash's rules saw nothing: it may have left"),
        false => Some("got through"),
    }
}

/// Starts the command (as `user`) and serves `bound` until it exits; SIGINT, SIGTERM and SIGHUP are passed on to
/// its process group; every process it left is ended with it.
fn serve_while(
    args: &RunArgs,
    (user, netns): (Option<RunAs>, Option<(&OwnNetns, std::ffi::CString)>),
    env: Vec<(OsString, OsString)>,
    bound: Bound,
    (config, control): (ProxyConfig, Option<&Arc<Control>>),
) -> Result<Exit, Failure> {
    let mut command = args.command.iter();
    let mut cmd = Command::new(command.next().cloned().unwrap_or_default());
    cmd.args(command).env_clear().envs(env);
    match (user, netns) {
        (Some(user), Some((netns, resolv))) => user.apply_in(&mut cmd, netns, Some(resolv)),
        (Some(user), None) => user.apply(&mut cmd),
        (None, _) => leash_sandbox::uid::own_session(&mut cmd),
    }
    // Where the platform has no subreaper (gVisor's), what the command leaves is found by its uid instead, below.
    if let Err(e) = leash_sandbox::uid::become_subreaper() {
        tracing::debug!("no subreaper here ({e}): the command's leftovers are found by their uid");
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| not_run(format!("cannot start the async runtime: {e}")))?;
    if let Some(control) = control {
        let _entered = runtime.enter();
        Control::serve(control).map_err(|e| not_run(format!("cannot serve the control socket: {e}")))?;
    }
    let mut child =
        cmd.spawn().map_err(|e| not_run(format!("cannot start `{}`: {e}", args.command[0].to_string_lossy())))?;
    let group = child.id();
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let status = runtime.block_on(async move {
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(bound.serve(config, async move {
            let _ = stop_rx.await;
        }));
        let status = forward_signals_until(group, rx).await;
        let _ = stop_tx.send(());
        let _ = serving.await;
        status
    });
    runtime.shutdown_background();
    leash_sandbox::uid::end_descendants();
    if let Some(user) = user {
        leash_sandbox::uid::end_processes_of(user.uid);
        leash_sandbox::uid::end_descendants();
    }
    match status {
        Some(Ok(status)) => Ok(Exit::Command(exit_code(status))),
        _ => Err(Failure::sandbox_failed("lost track of the command")),
    }
}

/// Waits for `ended`, passing SIGINT, SIGTERM and SIGHUP on to process group `group` meanwhile.
async fn forward_signals_until(
    group: u32,
    mut ended: tokio::sync::oneshot::Receiver<std::io::Result<std::process::ExitStatus>>,
) -> Option<std::io::Result<std::process::ExitStatus>> {
    use tokio::signal::unix::{signal, Signal, SignalKind};
    async fn next(signal: &mut Option<Signal>) -> Option<()> {
        match signal {
            Some(s) => s.recv().await,
            None => std::future::pending().await,
        }
    }
    let (mut int, mut term, mut hup) =
        (signal(SignalKind::interrupt()).ok(), signal(SignalKind::terminate()).ok(), signal(SignalKind::hangup()).ok());
    loop {
        tokio::select! {
            status = &mut ended => return status.ok(),
            Some(()) = next(&mut int) => leash_sandbox::uid::signal_group(group, libc_signal::INT),
            Some(()) = next(&mut term) => leash_sandbox::uid::signal_group(group, libc_signal::TERM),
            Some(()) = next(&mut hup) => leash_sandbox::uid::signal_group(group, libc_signal::HUP),
        }
    }
}

/// The signals passed on, by number.
mod libc_signal {
    pub const HUP: i32 = 1;
    pub const INT: i32 = 2;
    pub const TERM: i32 = 15;
}

/// The shell's convention: the exit status, or 128 + the signal.
fn exit_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(255),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(255),
        (None, None) => 255,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_passes_only_when_leashs_rules_stopped_what_they_are_said_to_have_stopped() {
        let dropped = "ok   udp 192.0.2.1:80: Operation not permitted (os error 1)";
        assert_eq!(verdict(dropped, true), None);
        assert!(verdict(dropped, false).is_some(), "refused by another rule, or none");
        let rejected = "ok   tcp 192.0.2.1:80: No route to host (os error 113)";
        assert_eq!(verdict(rejected, true), None);
        assert!(verdict(rejected, false).is_some());
        let silent = "OPEN tcp listener 127.0.0.1:9999: no answer within 1.5s";
        assert_eq!(verdict(silent, true), None, "a drop counted by leash's rules (gVisor has no REJECT)");
        assert_eq!(
            verdict(silent, false),
            None,
            "dropped on the loopback, which loses nothing (gVisor counts nothing)"
        );
        let outside = "OPEN tcp 192.0.2.1:80: no answer within 1.5s";
        assert!(verdict(outside, false).is_some(), "unanswered and unseen: it may have left");
        assert_eq!(verdict(outside, true), None);
        assert!(verdict("OPEN udp 192.0.2.1:80: got through", true).is_some(), "through is through");
        assert_eq!(verdict("ok   tcp 192.0.2.1:80: no route to it", false), None);
        assert_eq!(verdict("ok   leash's listener 127.0.0.1:3128: answers", false), None);
    }

    #[test]
    fn a_user_is_a_name_a_uid_or_uid_and_gid() {
        assert_eq!(parse_user("1000:2000").unwrap(), RunAs { uid: 1000, gid: 2000 });
        assert_eq!(parse_user("4242").unwrap(), RunAs { uid: 4242, gid: 4242 }, "no passwd entry: the same number");
        assert_eq!(parse_user("root").unwrap(), RunAs { uid: 0, gid: 0 });
        assert!(parse_user("no-such-user-here").is_err());
        assert!(parse_user("1000:x").is_err());
    }
}
