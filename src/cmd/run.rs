//! `leash run -- CMD`: build the policy, start CMD in the sandbox with the proxy's listener bound inside it, serve
//! that listener from here (outside, where upstreams are reachable), and exit with CMD's status once it and every
//! process it left are gone and the audit log is complete.

use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;

use leash_proxy::{PolicyHandle, ProxyConfig, ServiceListener, ServiceSocket, TRANSPARENT_ADDR};
use leash_sandbox::{Sandbox, SandboxSpec};

use crate::cli::{RunArgs, TlsArgs};
use crate::exit::Exit;
use crate::shared::ask::{self, AskFront, PolicySource};
use crate::shared::client_env::{proxy_vars, PROXY_VARS};
use crate::shared::sandboxed::{
    config, hidden_files, keep_deferred_log, mode_env, proxy_parts, secret_files, Pins, ProxyParts, Secured,
};
use crate::shared::services;
use crate::shared::trust::{CaFiles, BUNDLE_VARS, NODE_VAR};

/// Where the proxy listens inside the sandbox (the conventional proxy port, on the sandbox's own loopback).
const PROXY_INSIDE: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 3128);

/// Where the DNS stub answers inside the sandbox: the sandbox's own loopback, as its resolv.conf says.
const DNS_INSIDE: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 53);

pub fn run(args: RunArgs) -> Exit {
    if let Err(e) = leash_sandbox::harden_self() {
        eprintln!("leash: {e}");
        return Exit::SandboxFailed;
    }
    let ProxyParts { policy, pins, audit, secrets } = match proxy_parts(&args.proxy, true) {
        Ok(parts) => parts,
        Err(code) => return code,
    };
    let audit = Arc::new(audit);
    let ask_socket = match policy.asks().then(|| ask::bind_socket(&args.proxy.ask)).transpose() {
        Ok(socket) => socket,
        Err(code) => return code,
    };
    // The CA files are named now, so the command's environment can point at them; they are written while the
    // sandbox's namespaces are built, and exist before the command starts. A policy that never inspects needs no
    // CA (an `--upstream-ca` is still read, so a bad one is refused as always).
    let needs_ca = policy.may_inspect();
    if !needs_ca {
        if let Err(code) = check_upstream_ca(&args) {
            return code;
        }
    }
    let ca_files = match needs_ca.then(CaFiles::create).transpose() {
        Ok(files) => files,
        Err(e) => {
            eprintln!("leash: the command was not run: cannot create the run's CA directory: {e}");
            return Exit::SandboxFailed;
        }
    };
    let asks = policy.asks().then_some(args.proxy.ask.ask_timeout);
    let mut spec = spec(&args, ca_files.is_some(), mode_env(&policy), asks);
    spec.hide_paths.extend(secret_files(&policy));
    // The caller's own consoles (a virtual console, a serial line): the command holds a pseudo-terminal instead.
    spec.hide_paths.extend(crate::shared::consoles::callers_terminals());
    // INVARIANT: the control socket's directory is not visible inside: the command cannot even see the questions.
    spec.hide_paths.extend(ask_socket.iter().filter_map(|s| std::fs::canonicalize(s.dir()).ok()));
    spec.env.extend(ca_files.iter().flat_map(CaFiles::env));
    crate::shared::secrets::sandbox_env(&policy, &secrets.secrets, &mut spec.env);
    // The services' sockets exist before the sandbox does: it is let connect to exactly those files.
    let (unix_services, socket_files) = match services::bind_sockets(&policy) {
        Ok(bound) => bound,
        Err(code) => return code,
    };
    spec.allow_unix_sockets.extend(socket_files.paths().iter().cloned());
    let service_ports = services::ports(&policy);
    let room = leash_sandbox::MAX_SOCKETS.saturating_sub(2 + service_ports.len());
    let ports = leash_proxy::transparent_ports(&policy, room);
    let listeners =
        Listening { transparent: ports.len(), services: service_ports.iter().map(|(n, _)| n.clone()).collect() };
    spec.tcp_listeners.extend(ports.into_iter().map(|p| SocketAddrV4::new(TRANSPARENT_ADDR, p)));
    spec.tcp_listeners.extend(service_ports.iter().map(|(_, p)| SocketAddrV4::new(Ipv4Addr::LOCALHOST, *p)));
    services::announce(&policy);
    spec.env.extend(services::no_proxy_env(&policy));
    // A signal sent once the command runs but before forwarding is armed waits, rather than ending leash (with the
    // caller's terminal raw, below). Taken before any other thread exists (the relays', the runtime's blocking pool),
    // which inherits it, so only the main thread ever takes those signals.
    let hold = leash_sandbox::hold_forwarded_signals().map_err(|e| tracing::warn!("{e}")).ok();
    // A socket on leash's stdio is the host network namespace's, a terminal the caller's: the command gets a pipe
    // or a pseudo-terminal of its own instead.
    let mut relay = match leash_sandbox::relay_stdio(&mut spec) {
        Ok(relay) => relay,
        Err(e) => {
            eprintln!("leash: the command was not run: cannot relay its stdio: {e}");
            return Exit::SandboxFailed;
        }
    };
    // The init is cloned before the CA's key exists, so its copy of leash's memory never holds it.
    let pending = match Sandbox::prepare(spec) {
        Ok(p) => p,
        Err(e) => return not_run(e),
    };
    // On an early return, dropping `pending` ends the init: the command never starts.
    let mut config = match proxy_config(&args, (policy, pins, secrets), audit.clone(), ca_files.as_ref()) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let ask = ask_socket.map(|socket| Arc::new(ask_front(&args, socket, &config)));
    config.ask = ask.as_ref().map(|front| front.asking.clone());
    // The runtime is built while the init starts the command. One thread: starting, waking and ending worker
    // threads was a sixth of `leash run -- true` (6.7 -> 5.7 ms), and one sandbox's traffic fits one core (tunnels are
    // spliced by the kernel; bench/RESULTS.md has the figures from inside `leash run`).
    let runtime = || tokio::runtime::Builder::new_current_thread().enable_all().build();
    let (mut sandbox, runtime) = match pending.start_with(runtime) {
        Ok(started) => started,
        Err(e) => return not_run(e),
    };
    // The command's terminal was made inside the sandbox: from now on it reaches the caller's.
    if let Err(e) = relay.attach(&mut sandbox) {
        eprintln!("leash: cannot relay the command's terminal: {e}; stopping the command");
        return finish(sandbox.signal(9).and_then(|()| sandbox.wait()));
    }
    let runtime = match runtime {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("leash: cannot start the async runtime: {e}; stopping the command");
            return finish(sandbox.signal(9).and_then(|()| sandbox.wait()));
        }
    };
    if let Some(front) = &ask {
        if let Err(e) = start_asking(front, &relay, &runtime) {
            eprintln!("leash: ask mode: cannot serve the control socket: {e}; stopping the command");
            return finish(sandbox.signal(9).and_then(|()| sandbox.wait()));
        }
    }
    let policy = config.policy.clone();
    let exit = supervise(sandbox, (config, listeners, unix_services), (hold, relay), runtime);
    keep_deferred_log(&audit, args.quiet);
    crate::shared::summary::print(&audit, &policy, args.quiet);
    if let Some(summary) = ask.as_ref().and_then(|front| front.summary()).filter(|_| !args.quiet) {
        eprint!("{summary}");
    }
    drop(ask);
    drop(ca_files);
    drop(socket_files);
    exit
}

/// Ask mode's front ends for the run: the bound control socket, and the policy file an `always` answer changes.
fn ask_front(args: &RunArgs, socket: ask::socket::Bound, config: &ProxyConfig) -> AskFront {
    let source = PolicySource {
        file: args.proxy.policy.clone().map(|path| (path, args.proxy.profile.clone())),
        ask_flag: args.proxy.ask.ask,
    };
    AskFront::new(&args.proxy.ask, socket, config.policy.clone(), source, config.metrics.clone())
}

/// Serve the control socket on the run's runtime and put questions to the person at the terminal, when there is
/// one the command's terminal is relayed from; say where questions are answered.
fn start_asking(
    front: &Arc<AskFront>,
    relay: &leash_sandbox::StdioRelay,
    runtime: &tokio::runtime::Runtime,
) -> std::io::Result<()> {
    let _entered = runtime.enter();
    ask::socket::Bound::serve(front)?;
    let prompter = relay.prompter();
    front.announce(prompter.is_some());
    if let Some(prompter) = prompter {
        ask::terminal::spawn(front.clone(), prompter)?;
    }
    Ok(())
}

/// The run's CA, its files for the command, and the proxy's configuration around them; without CA files, no
/// inspection (a tunnel that would need it is refused). An unusable `--upstream-ca` is exit 2, like a usage error.
fn proxy_config(
    args: &RunArgs,
    parts: (leash_policy::Policy, Pins, Secured),
    audit: Arc<leash_proxy::AuditLog>,
    ca_files: Option<&CaFiles>,
) -> Result<ProxyConfig, Exit> {
    let Some(ca_files) = ca_files else { return Ok(config(parts, audit, None)) };
    let tls = TlsArgs { ca_cert_out: None, ca_bundle_out: None, upstream_ca: args.proxy.upstream_ca.clone() };
    let inspection = crate::shared::tls::inspection(&tls)?;
    if let Err(e) = ca_files.write(&inspection) {
        eprintln!("leash: the command was not run: cannot write the run's CA files: {e}");
        return Err(Exit::SandboxFailed);
    }
    Ok(config(parts, audit, Some(inspection)))
}

/// Refuses an unusable `--upstream-ca` (exit 2, as when the CA is made) where no CA is made.
fn check_upstream_ca(args: &RunArgs) -> Result<(), Exit> {
    let trust = leash_proxy::UpstreamTrust { system_roots: true, extra_ca_files: args.proxy.upstream_ca.clone() };
    trust.check().map_err(|e| {
        eprintln!("leash: cannot set up TLS inspection: {e}");
        Exit::Usage
    })
}

fn not_run(e: leash_sandbox::SandboxError) -> Exit {
    eprintln!("leash: the command was not run: {e}");
    Exit::SandboxFailed
}

/// The sandbox: CMD, its environment, the proxy's listener inside, the DNS stub's socket and a resolv.conf that points
/// at it, on the sandbox's own loopback (refused names fail at once; no lookup ever reaches a real resolver). `asks`:
/// ask mode's question timeout, in seconds, when the policy asks.
fn spec(args: &RunArgs, with_ca: bool, mode: (String, String), asks: Option<u64>) -> SandboxSpec {
    let mut command = args.command.iter();
    let mut spec = SandboxSpec::new(command.next().cloned().unwrap_or_default());
    spec.args = command.cloned().collect();
    spec.env = child_env(inherited_env(args), with_ca, mode);
    spec.tcp_listeners = vec![PROXY_INSIDE];
    spec.udp_sockets = vec![DNS_INSIDE];
    spec.resolv_conf = Some(resolv_conf(asks));
    spec.allow_unix_sockets = args.allow_unix_socket.clone();
    // INVARIANT: the audit log file is not reachable from inside; leash keeps the only handle that writes it.
    spec.hide_paths = hidden_files(&args.proxy);
    spec
}

/// The longest a resolver waits for the stub's answer, in seconds: glibc reads no longer `timeout` than 30.
const LOOKUP_WAIT_MAX: u64 = 30;

/// The sandbox's resolv.conf: the stub on its loopback, asked once. The stub answers at once, refused names too, so
/// one second only bounds a stub that is gone; but in ask mode (`asks`: the question timeout) a lookup of a name a
/// question is open about is answered when the person answers, and a resolver that gave up after a second would
/// fail a name the person then allows: it waits as long as the question may (and a second more, as the stub does).
fn resolv_conf(asks: Option<u64>) -> String {
    let wait = asks.map_or(1, |timeout| timeout.saturating_add(1).clamp(1, LOOKUP_WAIT_MAX));
    format!("nameserver 127.0.0.1\noptions attempts:1 timeout:{wait}\n")
}

/// What `--clean-env` keeps of leash's environment: what programs need to run and to show text, and nothing that
/// names a secret or a way out (tokens, API keys, SSH_AUTH_SOCK, cloud credentials).
const CLEAN_ENV: [&str; 10] = ["PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "COLORTERM", "LANG", "TZ", "TMPDIR"];

/// leash's environment, or with `--clean-env` only `CLEAN_ENV`, `LC_*` and `--keep-env`.
fn inherited_env(args: &RunArgs) -> Vec<(OsString, OsString)> {
    let kept = |name: &OsString| {
        let name = name.to_string_lossy();
        CLEAN_ENV.contains(&name.as_ref()) || name.starts_with("LC_") || args.keep_env.iter().any(|k| *k == name)
    };
    std::env::vars_os().filter(|(k, _)| !args.clean_env || kept(k)).collect()
}

/// leash's environment with every proxy variable pointing at the proxy inside and `NO_PROXY` removed; with the
/// run's CA files (`with_ca`), the CA variables are left to name them; and the mode variable (`mode_env`) set.
fn child_env(
    inherited: Vec<(OsString, OsString)>,
    with_ca: bool,
    (mode_var, mode): (String, String),
) -> Vec<(OsString, OsString)> {
    let url = format!("http://{PROXY_INSIDE}");
    // Inherited CA variables would point clients elsewhere than the run's bundle; they are replaced. Without a CA,
    // tunnels are spliced and the caller's own trust settings stay right.
    let replaced = |k: &OsString| {
        PROXY_VARS.iter().any(|v| k == v)
            || k == "NODE_USE_ENV_PROXY"
            || *k == *mode_var
            || (with_ca && (BUNDLE_VARS.iter().any(|v| k == v) || k == NODE_VAR))
    };
    let mut env: Vec<(OsString, OsString)> = inherited.into_iter().filter(|(k, _)| !replaced(k)).collect();
    env.extend(proxy_vars(&url));
    env.push((mode_var.into(), mode.into()));
    env
}

/// How the TCP listeners the sandbox hands back are laid out after the proxy's: this many transparent ones, then one
/// per service port, by name.
struct Listening {
    transparent: usize,
    services: Vec<Arc<str>>,
}

/// Serve the proxy on the sandbox's listener (and the transparent and service ones) until the command has exited,
/// then drain, flush and report.
fn supervise(
    mut sandbox: Sandbox,
    (config, layout, unix_services): (ProxyConfig, Listening, Vec<ServiceSocket>),
    (hold, relay): (Option<leash_sandbox::SignalHold>, leash_sandbox::StdioRelay),
    runtime: tokio::runtime::Runtime,
) -> Exit {
    let mut tcp = std::mem::take(&mut sandbox.tcp).into_iter();
    let listener = tcp.next();
    let transparent: Vec<_> = tcp.by_ref().take(layout.transparent).collect();
    let mut services: Vec<ServiceSocket> = layout
        .services
        .into_iter()
        .zip(tcp)
        .map(|(name, l)| ServiceSocket { name, listener: ServiceListener::Tcp(l) })
        .collect();
    services.extend(unix_services);
    let dns_socket = sandbox.udp.pop();
    let forwarding = sandbox.forward_signals().map_err(|e| tracing::warn!("signals are not forwarded: {e}"));
    // Armed: a signal held since the spawn is delivered now, and forwarded.
    drop(hold);
    let served = Served { listener, transparent, services, dns_socket };
    let status = runtime.block_on(serve_until_exit(&sandbox, served, config));
    // Every connection is finished and logged: the blocking pool's threads (name lookups) need not be waited for.
    runtime.shutdown_background();
    let exit = match status {
        // Init is tearing the sandbox's namespaces down; leash need not wait for that to exit.
        Ok(s) => {
            sandbox.detach();
            Exit::Command(u8::try_from(s.code()).unwrap_or(255))
        }
        Err(e) => {
            // Dropping the sandbox ends it.
            drop(sandbox);
            finish(Err(e))
        }
    };
    // All the command wrote is passed on (before leash's own records follow it) and the caller's terminal put back
    // while signals are still forwarded, not fatal.
    relay.finish();
    drop(forwarding);
    exit
}

/// The sockets a run serves.
struct Served {
    listener: Option<std::net::TcpListener>,
    transparent: Vec<std::net::TcpListener>,
    services: Vec<ServiceSocket>,
    dns_socket: Option<std::net::UdpSocket>,
}

/// The proxy, the transparent and service listeners and the DNS stub, served until the sandbox reports its end.
async fn serve_until_exit(
    sandbox: &Sandbox,
    served: Served,
    config: ProxyConfig,
) -> Result<leash_sandbox::ExitStatus, leash_sandbox::SandboxError> {
    let listener = served
        .listener
        .and_then(on_runtime)
        .ok_or_else(|| leash_sandbox::SandboxError::InitDied("no proxy listener".into()))?;
    let transparent = served.transparent.into_iter().filter_map(on_runtime).collect();
    let dns_stop = start_dns(served.dns_socket, config.policy.clone(), config.audit.clone(), config.ask.clone());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let listeners = leash_proxy::Listeners { proxy: listener, transparent, services: served.services };
    let proxy = tokio::spawn(leash_proxy::serve_listeners(listeners, config, async move {
        let _ = stop_rx.await;
    }));
    let status = sandbox.wait_async().await;
    drop(dns_stop);
    let _ = stop_tx.send(());
    if let Ok(Err(e)) = proxy.await {
        tracing::error!("proxy: {e}");
    }
    status
}

/// A listener the sandbox handed over, registered with the runtime; `None` if it cannot be.
fn on_runtime(listener: std::net::TcpListener) -> Option<tokio::net::TcpListener> {
    listener.set_nonblocking(true).ok()?;
    tokio::net::TcpListener::from_std(listener).ok()
}

/// Serve the DNS stub on the sandbox's UDP socket until the returned sender is dropped (when the command has exited).
/// Without it lookups would fail, which opens nothing, so a missing socket is only warned about.
fn start_dns(
    socket: Option<std::net::UdpSocket>,
    policy: PolicyHandle,
    audit: Arc<leash_proxy::AuditLog>,
    ask: Option<Arc<leash_proxy::ask::Asking>>,
) -> Option<tokio::sync::oneshot::Sender<()>> {
    let socket =
        socket.filter(|s| s.set_nonblocking(true).is_ok()).and_then(|s| tokio::net::UdpSocket::from_std(s).ok());
    let Some(socket) = socket else {
        tracing::warn!("dns: no stub resolver in the sandbox; name lookups there will fail");
        return None;
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let shutdown = async move {
        let _ = stopped.await;
    };
    tokio::spawn(async move {
        if let Err(e) = leash_proxy::serve_dns(socket, policy, audit, ask, shutdown).await {
            tracing::error!("dns: {e}");
        }
    });
    Some(stop)
}

fn finish(status: Result<leash_sandbox::ExitStatus, leash_sandbox::SandboxError>) -> Exit {
    match status {
        Ok(s) => Exit::Command(u8::try_from(s.code()).unwrap_or(255)),
        Err(e) => {
            eprintln!("leash: {e}");
            Exit::SandboxFailed
        }
    }
}
