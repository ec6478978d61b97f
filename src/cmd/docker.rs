//! `leash docker run` and `leash docker attach`: a Docker container whose only way out is leash. The container runs
//! with `--network none` (only `lo`) and without NET_RAW/NET_ADMIN; leash binds its proxy's listener (and, for
//! `run`, the DNS stub's socket, named by `--dns 127.0.0.1`) inside the container's network namespace
//! (`leash_sandbox::bind_in_netns`) and serves them from outside, so no sidecar, bridge or internal network exists.
//! Tunnels the policy needs to see into are TLS-inspected with the run's CA, which the container trusts through the
//! environment (`SSL_CERT_FILE` and the like, pointing at `/run/leash/bundle.pem`).
//!
//! The start-up race (the container's command starting before the listener exists) is closed by a gate: leash sets
//! the entrypoint to `/bin/sh -c WAIT` with the real entrypoint and command as arguments; WAIT polls for a file in
//! a directory leash mounts read-only at `/run/leash` (beside the CA files), and `exec`s the real command once
//! leash has bound the sockets and created the file (or exits 125 after `GATE_STEPS` tries). The image therefore
//! needs `/bin/sh` and `sleep`. leash talks to a local Docker daemon only (it enters the container's namespace
//! through `/proc`), as root.

mod engine;
mod options;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leash_policy::Policy;
use leash_proxy::{AuditLog, Inspection, Limits, PolicyHandle, ProxyConfig, SystemResolver, UpstreamTrust};
use tokio::signal::unix::{signal, SignalKind};

use self::engine::{Engine, EngineError};
use self::options::RunOptions;
use crate::cli::{ContainerProxyArgs, DockerAttachArgs, DockerRunArgs, TlsArgs};
use crate::cmd::trust::{BUNDLE_VARS, NODE_VAR};
use crate::exit::Exit;
use crate::policy_file::{load_file, print_errors};

/// Where the proxy listens inside the container: its own loopback, the conventional proxy port (as `leash run`).
const PROXY_INSIDE: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 3128);
/// Where the DNS stub answers inside the container (`--dns 127.0.0.1` names it in the container's resolv.conf).
const DNS_INSIDE: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 53);
/// Where the gate directory is mounted (read-only) inside the container.
const GATE_MOUNT: &str = "/run/leash";
/// The file whose existence opens the gate.
const READY_FILE: &str = "ready";
/// The run's CA, and the system roots plus that CA, in the gate directory (so at `GATE_MOUNT` inside).
const CA_FILE: &str = "ca.pem";
const BUNDLE_FILE: &str = "bundle.pem";
/// The gate's tries, `GATE_STEP` apart: leash binds within a second of the start on an idle machine; 30 s covers a
/// loaded one. After that the container exits 125 without running its command.
const GATE_STEPS: u32 = 300;
const GATE_STEP: &str = "0.1";
/// How long leash waits for a started container to get its init pid (`docker start` has returned by then on any
/// sane daemon; the bound keeps a wedged one from hanging leash).
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Between two looks at a starting container: short, since the command is held at the gate meanwhile.
const START_POLL: Duration = Duration::from_millis(20);
/// Label on every container leash creates (`docker ps -a --filter label=leash.run` finds leftovers).
const LABEL: &str = "leash.run=1";
/// The proxy variables set for the container, upper- and lowercase; `NO_PROXY` is set empty (cleared).
const PROXY_VARS: [&str; 6] = ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"];

pub fn run(args: DockerRunArgs) -> Exit {
    if let Err(e) = leash_sandbox::harden_self() {
        eprintln!("leash: {e}");
        return Exit::SandboxFailed;
    }
    let opts = match checked_options(&args) {
        Ok(o) => o,
        Err(code) => return code,
    };
    let parts = match proxy_parts(&args.proxy) {
        Ok(parts) => parts,
        Err(code) => return code,
    };
    let trust = UpstreamTrust { system_roots: true, extra_ca_files: args.proxy.upstream_ca.clone() };
    let inspection = match Inspection::new(&trust) {
        Ok(i) => Arc::new(i),
        Err(e) => {
            eprintln!("leash: cannot set up TLS inspection: {e}");
            return Exit::Usage;
        }
    };
    // Signals are taken over before anything is created, so a Ctrl-C at any moment still removes the container.
    let gated = !args.no_start_gate;
    with_runtime(move |stop| run_container(opts, gated, parts, inspection, stop))
}

async fn run_container(
    opts: RunOptions,
    gated: bool,
    (policy, pins, audit): ProxyParts,
    inspection: Arc<Inspection>,
    mut stop: StopSignals,
) -> Exit {
    let engine = Engine::new();
    if let Err(e) = engine.check() {
        return refuse_engine(&e);
    }
    let start = match gated.then(|| gated_argv(&engine, &opts)).transpose() {
        Ok(argv) => argv.map_or(Start::Ungated, Start::Gated),
        Err(code) => return code,
    };
    let gate = match Gate::create().and_then(|g| g.write_ca(&inspection).map(|()| g)) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("leash: cannot create the start-up gate and CA directory: {e}; the container was not created");
            return Exit::SandboxFailed;
        }
    };
    let ipv6_on_host = Path::new("/proc/sys/net/ipv6").exists();
    let container = match engine.create(&create_args(&opts, &gate, &start, ipv6_on_host)) {
        Ok(id) => Container { engine: engine.clone(), id },
        Err(e) => return refuse_engine(&e),
    };
    let config = config(policy, pins, Arc::new(audit.with_container(&container.id)), inspection);
    let launch = Launch { interactive: opts.interactive, gated };
    supervise(&container, &gate, launch, config, &mut stop).await
}

pub fn attach(args: DockerAttachArgs) -> Exit {
    if let Err(e) = leash_sandbox::harden_self() {
        eprintln!("leash: {e}");
        return Exit::SandboxFailed;
    }
    let parts = match proxy_parts(&args.proxy) {
        Ok(parts) => parts,
        Err(code) => return code,
    };
    let tls = TlsArgs {
        ca_cert_out: args.ca_cert_out.clone(),
        ca_bundle_out: args.ca_bundle_out.clone(),
        upstream_ca: args.proxy.upstream_ca.clone(),
    };
    let inspection = match crate::cmd::proxy::inspection(&tls) {
        Ok(i) => i,
        Err(code) => return code,
    };
    // Signals are taken over before the `listening` line, so a harness may stop leash as soon as it reads it.
    with_runtime(move |stop| attach_container(args.container, parts, inspection, stop))
}

/// Checks the container, binds inside it, and serves until it exits (its status) or a stop signal (0; the
/// container is left running, with no way out).
async fn attach_container(
    container: String,
    (policy, pins, audit): ProxyParts,
    inspection: Arc<Inspection>,
    mut stop: StopSignals,
) -> Exit {
    let engine = Engine::new();
    let state = match engine.check().and_then(|_| engine.state(&container)) {
        Ok(s) if s.running && s.pid != 0 => s,
        Ok(_) => {
            eprintln!("leash: container `{container}` is not running");
            return Exit::SandboxFailed;
        }
        Err(e) => return refuse_engine(&e),
    };
    let inside = match bind_inside(state.pid, false) {
        Ok(i) => i,
        Err(e) => return refuse_bind(&e, &state.network_mode),
    };
    let waiter = match engine.waiter(&state.id) {
        Ok(w) => w,
        Err(e) => return refuse_engine(&e),
    };
    let config = config(policy, pins, Arc::new(audit.with_container(&state.id)), inspection);
    println!("listening inside {} on {PROXY_INSIDE}", short(&state.id));
    let (tx, rx) = tokio::sync::oneshot::channel();
    let pid = waiter.pid();
    std::thread::spawn(move || {
        let _ = tx.send(waiter.finish());
    });
    match serve_until(inside, config, rx, &mut stop, None::<fn()>).await {
        Some(Ok(code)) => Exit::Command(u8::try_from(code).unwrap_or(255)),
        Some(Err(e)) => refuse_engine(&e),
        None => {
            engine::kill(pid);
            Exit::Ok
        }
    }
}

/// Scans the docker options, adds what the host's filesystem shows about bind sources, and refuses the unsafe
/// ones unless overridden.
fn checked_options(args: &DockerRunArgs) -> Result<RunOptions, Exit> {
    let mut opts = options::scan(&args.docker).map_err(|e| {
        eprintln!("leash: {e}");
        Exit::Usage
    })?;
    let host_unsafe: Vec<_> = opts.bind_sources.iter().filter_map(|(o, s)| unsafe_on_host(o, s)).collect();
    opts.unsafe_options.extend(host_unsafe);
    if opts.unsafe_options.is_empty() {
        return Ok(opts);
    }
    if args.danger_allow_unsafe_docker_options {
        for u in &opts.unsafe_options {
            eprintln!("leash: warning: `{}` lets the container around the policy ({})", u.option, u.why);
        }
        return Ok(opts);
    }
    for u in &opts.unsafe_options {
        eprintln!("leash: refusing `{}`: {}", u.option, u.why);
    }
    eprintln!("leash: the container was not created; --danger-allow-unsafe-docker-options runs it anyway, unprotected");
    Err(Exit::Usage)
}

/// A bind source that resolves (symlinks, `..`, relative paths) to a runtime socket or a directory above one, or
/// that is any Unix socket: a host daemon inside the container is a way around the proxy.
fn unsafe_on_host(option: &str, source: &str) -> Option<options::Unsafe> {
    let path = std::fs::canonicalize(source).ok()?;
    let why = if options::reaches_runtime_socket(&path.to_string_lossy()) {
        "its source resolves to the Docker socket (or a directory holding it)"
    } else if std::fs::metadata(&path).is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type())) {
        "its source is a host Unix socket, a way around the proxy"
    } else {
        return None;
    };
    Some(options::Unsafe { option: option.to_owned(), why: why.to_owned() })
}

/// The policy, the `--resolve` pins and the audit log (not yet shared: the container ID is added once known).
type ProxyParts = (Policy, std::collections::HashMap<Box<str>, Vec<std::net::IpAddr>>, AuditLog);

fn proxy_parts(args: &ContainerProxyArgs) -> Result<ProxyParts, Exit> {
    let policy = match &args.policy {
        Some(path) => load_file(path, args.profile.as_deref())?.policy,
        None => Policy::from_inline(&args.allow, &args.block).map_err(|errors| {
            print_errors(Path::new("the command line"), &errors);
            Exit::Usage
        })?,
    };
    let pins = crate::cmd::proxy::parse_pins(&args.resolve)?;
    let audit = match &args.log {
        None => AuditLog::stderr(),
        Some(path) => AuditLog::open(path).map_err(|e| {
            eprintln!("leash: cannot open the audit log `{}`: {e}; not starting without it", path.display());
            Exit::Usage
        })?,
    };
    Ok((policy, pins, audit))
}

fn config(
    policy: Policy,
    pins: std::collections::HashMap<Box<str>, Vec<std::net::IpAddr>>,
    audit: Arc<AuditLog>,
    inspection: Arc<Inspection>,
) -> ProxyConfig {
    ProxyConfig {
        policy: PolicyHandle::new(policy),
        audit,
        resolver: Arc::new(SystemResolver::new(pins)),
        own_addrs: leash_proxy::local_interface_addrs().into(),
        limits: Limits::default(),
        inspection: Some(inspection),
    }
}

/// How the container's command starts.
enum Start {
    /// Behind the gate: `/bin/sh -c WAIT leash-gate ARGV…`, ARGV the command Docker would have run.
    Gated(Vec<String>),
    /// As the user gave it (`--no-start-gate`).
    Ungated,
}

/// The argv Docker would run (the image's entrypoint and command, or those given), for the gate to `exec`.
fn gated_argv(engine: &Engine, opts: &RunOptions) -> Result<Vec<String>, Exit> {
    let (image_entrypoint, image_cmd) = match engine.image_argv(&opts.image) {
        Ok(argv) => argv,
        Err(e) if matches!(&e, EngineError::Failed { call, .. } if call == "image inspect") => {
            eprintln!("leash: {e}");
            eprintln!(
                "leash: build or pull the image first (leash reads its command to start it behind the gate; \
                 --no-start-gate lets Docker pull it)"
            );
            return Err(Exit::SandboxFailed);
        }
        Err(e) => return Err(refuse_engine(&e)),
    };
    let argv = options::container_argv(opts.entrypoint.as_deref(), &opts.command, &image_entrypoint, &image_cmd);
    if argv.is_empty() {
        eprintln!("leash: the image `{}` has no command and none was given", opts.image);
        return Err(Exit::Usage);
    }
    Ok(argv)
}

/// `docker create` arguments: the user's options, then leash's (later ones win): no network, no network
/// capabilities, no IPv6 (Docker disables it on a `none` network already; said again so no daemon setting brings it
/// back, where the kernel has IPv6 at all: the sysctls exist only then), the DNS stub, the proxy and CA environment,
/// the gate, and the gate's wrapper as entrypoint around the real argv.
fn create_args(opts: &RunOptions, gate: &Gate, start: &Start, ipv6_on_host: bool) -> Vec<String> {
    let url = format!("http://{PROXY_INSIDE}");
    let mut args = opts.passthrough.clone();
    args.extend(
        ["--label", LABEL, "--network", "none", "--cap-drop", "NET_RAW", "--cap-drop", "NET_ADMIN"].map(String::from),
    );
    args.extend(["--dns".to_owned(), DNS_INSIDE.ip().to_string()]);
    if ipv6_on_host {
        for scope in ["all", "default", "lo"] {
            args.extend(["--sysctl".to_owned(), format!("net.ipv6.conf.{scope}.disable_ipv6=1")]);
        }
    }
    for var in PROXY_VARS {
        args.extend(["--env".to_owned(), format!("{var}={url}")]);
    }
    args.extend(["--env", "NO_PROXY=", "--env", "no_proxy=", "--env", "NODE_USE_ENV_PROXY=1"].map(String::from));
    for var in BUNDLE_VARS {
        args.extend(["--env".to_owned(), format!("{var}={GATE_MOUNT}/{BUNDLE_FILE}")]);
    }
    args.extend(["--env".to_owned(), format!("{NODE_VAR}={GATE_MOUNT}/{CA_FILE}")]);
    args.extend(["--volume".to_owned(), format!("{}:{GATE_MOUNT}:ro", gate.dir.display())]);
    match start {
        Start::Gated(argv) => {
            args.extend(["--entrypoint", "/bin/sh", opts.image.as_str(), "-c"].map(String::from));
            args.extend([gate_script(), "leash-gate".to_owned()]);
            args.extend(argv.iter().cloned());
        }
        Start::Ungated => {
            if let Some(entrypoint) = &opts.entrypoint {
                args.extend(["--entrypoint".to_owned(), entrypoint.clone()]);
            }
            args.push(opts.image.clone());
            args.extend(opts.command.iter().cloned());
        }
    }
    args
}

/// Waits for the ready file (bounded), then runs the real command in its place.
fn gate_script() -> String {
    format!(
        "i=0; while [ ! -e {GATE_MOUNT}/{READY_FILE} ]; do i=$((i+1)); \
         if [ $i -gt {GATE_STEPS} ]; then echo 'leash: the proxy did not come up; not running the command' >&2; \
         exit 125; fi; sleep {GATE_STEP}; done; exec \"$@\""
    )
}

/// Start the container, bind the listener inside once it runs, open the gate, serve until it ends; its status.
async fn supervise(
    container: &Container,
    gate: &Gate,
    launch: Launch,
    config: ProxyConfig,
    stop: &mut StopSignals,
) -> Exit {
    let (mut start, inside) = match start_behind_gate(container, gate, launch) {
        Ok(started) => started,
        Err(code) => return code,
    };
    if let Some(inside) = inside {
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let _ = tx.send(start.wait());
        });
        let (stopper, id) = (container.engine.clone(), container.id.clone());
        let stop_container = move || {
            std::thread::spawn(move || stopper.stop(&id).map_err(|e| tracing::warn!("{e}")));
        };
        serve_until(inside, config, rx, stop, Some(stop_container)).await;
    } else {
        let _ = start.wait();
    }
    match container.engine.exit_code(&container.id) {
        Ok(code) => Exit::Command(u8::try_from(code).unwrap_or(255)),
        Err(e) => refuse_engine(&e),
    }
}

/// How `docker start` runs: attached with stdin (`-i`), and whether the command waits at the gate.
#[derive(Debug, Clone, Copy)]
struct Launch {
    interactive: bool,
    gated: bool,
}

/// `docker start --attach`, then, once the container's init runs (held at the gate), the sockets bound inside and
/// the gate opened. Returns the attached `docker start` and the sockets to serve; no sockets when an ungated
/// container ended before leash could bind (nothing to serve, its status still counts).
fn start_behind_gate(
    container: &Container,
    gate: &Gate,
    launch: Launch,
) -> Result<(std::process::Child, Option<Inside>), Exit> {
    let engine = &container.engine;
    let mut start = engine.start_attached(&container.id, launch.interactive).map_err(|e| refuse_engine(&e))?;
    let pid = match init_pid(engine, &container.id, &mut start) {
        Ok(Some(pid)) => pid,
        Ok(None) if !launch.gated => return Ok((start, None)),
        Ok(None) => {
            eprintln!(
                "leash: the container ended before leash's proxy was in place; does the image have /bin/sh? \
                 leash's start-up gate needs it (or pass --no-start-gate)"
            );
            return Err(Exit::SandboxFailed);
        }
        Err(why) => {
            eprintln!("leash: {why}");
            return Err(Exit::SandboxFailed);
        }
    };
    let inside = match bind_inside(pid, true) {
        Ok(inside) => inside,
        Err(_) if !launch.gated && ended_soon(engine, &container.id, &mut start) => return Ok((start, None)),
        Err(e) => return Err(refuse_bind(&e, "none")),
    };
    gate.open().map_err(|e| {
        eprintln!("leash: cannot open the start-up gate: {e}; stopping the container");
        Exit::SandboxFailed
    })?;
    Ok((start, Some(inside)))
}

/// Whether a container whose namespace could not be entered has ended (Docker may take a moment to notice).
fn ended_soon(engine: &Engine, id: &str, start: &mut std::process::Child) -> bool {
    /// Docker notices an exited init within milliseconds; a second is ample.
    const NOTICE: Duration = Duration::from_secs(1);
    let deadline = Instant::now() + NOTICE;
    while Instant::now() < deadline {
        if matches!(start.try_wait(), Ok(Some(_))) || engine.state(id).is_ok_and(|s| !s.running) {
            return true;
        }
        std::thread::sleep(START_POLL);
    }
    false
}

/// The container's init pid once it runs; `None` when it ends first, an error after `START_TIMEOUT`.
fn init_pid(engine: &Engine, id: &str, start: &mut std::process::Child) -> Result<Option<u32>, String> {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(Some(_)) = start.try_wait() {
            return Ok(None);
        }
        let state = engine.state(id).map_err(|e| e.to_string())?;
        if state.running && state.pid != 0 {
            return Ok(Some(state.pid));
        }
        if Instant::now() > deadline {
            return Err(format!("the container did not start within {}s", START_TIMEOUT.as_secs()));
        }
        std::thread::sleep(START_POLL);
    }
}

/// The sockets leash serves inside a container: the proxy's listener, and the DNS stub's socket (`run` only).
struct Inside {
    proxy: std::net::TcpListener,
    dns: Option<std::net::UdpSocket>,
}

/// Binds the proxy's listener (and with `dns` the stub's socket) inside the network namespace of `pid`, which must
/// hold only `lo`.
fn bind_inside(pid: u32, dns: bool) -> Result<Inside, leash_sandbox::SandboxError> {
    let udp: &[SocketAddrV4] = if dns { &[DNS_INSIDE] } else { &[] };
    let mut sockets = leash_sandbox::bind_in_netns(pid, &[PROXY_INSIDE], udp)?;
    let proxy =
        sockets.tcp.pop().ok_or_else(|| leash_sandbox::SandboxError::InvalidSpec("no listener was bound".into()))?;
    Ok(Inside { proxy, dns: sockets.udp.pop() })
}

/// Says why the sockets could not be bound inside; exit 125.
fn refuse_bind(e: &leash_sandbox::SandboxError, network_mode: &str) -> Exit {
    match e {
        leash_sandbox::SandboxError::NotIsolated { .. } => {
            eprintln!("leash: refusing the container: {e} (network `{network_mode}`; start it with `--network none`)")
        }
        _ => eprintln!("leash: {e}"),
    }
    Exit::SandboxFailed
}

/// Serves the proxy on `listener` until `ended` resolves (its value returned) or a stop signal arrives. On a signal,
/// `on_signal` runs (stopping the container) and serving goes on until `ended`; without `on_signal` serving stops
/// at once and the result is `None`. Then drains in-flight requests and flushes the log.
async fn serve_until<T>(
    inside: Inside,
    config: ProxyConfig,
    mut ended: tokio::sync::oneshot::Receiver<T>,
    stop: &mut StopSignals,
    on_signal: Option<impl FnOnce()>,
) -> Option<T> {
    let audit = config.audit.clone();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let _dns_running = inside.dns.and_then(|socket| serve_dns(socket, config.policy.clone()));
    let listener = inside.proxy;
    let listener = listener.set_nonblocking(true).and_then(|()| tokio::net::TcpListener::from_std(listener));
    let proxy = match listener {
        Ok(l) => Some(tokio::spawn(leash_proxy::serve(l, config, async move {
            let _ = stop_rx.await;
        }))),
        Err(e) => {
            tracing::error!("cannot serve the container's listener: {e}");
            None
        }
    };
    let result = tokio::select! {
        r = &mut ended => r.ok(),
        () = stop.recv() => match on_signal {
            Some(f) => {
                f();
                (&mut ended).await.ok()
            }
            None => None,
        }
    };
    let _ = stop_tx.send(());
    if let Some(proxy) = proxy {
        if let Ok(Err(e)) = proxy.await {
            tracing::error!("proxy: {e}");
        }
    }
    if let Err(e) = audit.flush() {
        tracing::error!("{e}");
    }
    result
}

/// Serves the DNS stub on `socket` until the returned sender is dropped. A stub that cannot run only means lookups
/// fail inside, which opens nothing, so that is a warning.
fn serve_dns(socket: std::net::UdpSocket, policy: PolicyHandle) -> Option<tokio::sync::oneshot::Sender<()>> {
    let socket = socket.set_nonblocking(true).and_then(|()| tokio::net::UdpSocket::from_std(socket));
    let socket = match socket {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("dns: no stub resolver in the container ({e}); name lookups there will fail");
            return None;
        }
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let shutdown = async move {
            let _ = stopped.await;
        };
        if let Err(e) = leash_proxy::serve_dns(socket, policy, shutdown).await {
            tracing::error!("dns: {e}");
        }
    });
    Some(stop)
}

/// SIGINT, SIGTERM and SIGHUP (a closed terminal), taken over for the whole run: they stop the container (run) or
/// the serving (attach) instead of killing leash, which then cleans up.
struct StopSignals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn install() -> std::io::Result<StopSignals> {
        Ok(StopSignals {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// The next stop signal (one that arrived before the call included).
    async fn recv(&mut self) {
        tokio::select! {
            _ = self.int.recv() => {},
            _ = self.term.recv() => {},
            _ = self.hup.recv() => {},
        }
    }
}

/// Runs `work` on a new runtime with SIGINT and SIGTERM taken over.
fn with_runtime<F: std::future::Future<Output = Exit>>(work: impl FnOnce(StopSignals) -> F) -> Exit {
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("leash: cannot start the async runtime: {e}");
            return Exit::SandboxFailed;
        }
    };
    runtime.block_on(async move {
        match StopSignals::install() {
            Ok(stop) => work(stop).await,
            Err(e) => {
                eprintln!("leash: cannot install the SIGINT/SIGTERM/SIGHUP handlers: {e}");
                Exit::SandboxFailed
            }
        }
    })
}

/// Docker is absent, refuses this user or failed: nothing runs unprotected, exit 125 (as `leash run`).
fn refuse_engine(e: &EngineError) -> Exit {
    /// Docker's words when the socket refuses this user.
    const DENIED: &str = "permission denied";
    eprintln!("leash: {e}");
    if matches!(e, EngineError::Failed { message, .. } if message.contains(DENIED)) {
        eprintln!(
            "leash: this user may not use the Docker daemon; leash docker needs root (it enters the container's \
             network namespace)"
        );
    }
    Exit::SandboxFailed
}

fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

/// A container leash created: removed (`docker rm --force`) when dropped, whatever happened.
struct Container {
    engine: Engine,
    id: String,
}

impl Drop for Container {
    fn drop(&mut self) {
        if let Err(e) = self.engine.remove(&self.id) {
            eprintln!("leash: could not remove container {}: {e}", short(&self.id));
        }
    }
}

/// The start-up gate: a private host directory mounted read-only in the container; `open` creates the ready file.
/// Removed when dropped.
struct Gate {
    dir: PathBuf,
}

impl Gate {
    fn create() -> std::io::Result<Gate> {
        use std::os::unix::fs::DirBuilderExt;
        /// Tells apart the gates of several runs of one process (tests).
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("leash-docker-{}-{n}", std::process::id()));
        // 0755: the container's user, whoever it is, must be able to see the ready file; nothing in it is secret.
        std::fs::DirBuilder::new().mode(0o755).create(&dir)?;
        Ok(Gate { dir })
    }

    fn open(&self) -> std::io::Result<()> {
        std::fs::write(self.dir.join(READY_FILE), b"")
    }

    /// The run's CA and the bundle, 0644 (no secret in them; the container's user may be anyone).
    fn write_ca(&self, inspection: &Inspection) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        for (name, pem) in [(CA_FILE, inspection.ca_pem().to_owned()), (BUNDLE_FILE, inspection.bundle_pem())] {
            let path = self.dir.join(name);
            std::fs::write(&path, pem)?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))?;
        }
        Ok(())
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn leash_options_come_after_the_users_so_they_win() {
        let opts = options::scan(&["--env".into(), "HTTP_PROXY=x".into(), "img".into()]).unwrap();
        let gate = Gate { dir: PathBuf::from("/tmp/gate") };
        let args = create_args(&opts, &gate, &Start::Gated(vec!["/bin/app".into(), "--flag".into()]), true);
        let joined = args.join(" ");
        let user = joined.find("HTTP_PROXY=x").unwrap();
        let ours = joined.find("HTTP_PROXY=http://127.0.0.1:3128").unwrap();
        assert!(user < ours, "{joined}");
        assert!(joined.contains("--network none --cap-drop NET_RAW --cap-drop NET_ADMIN --dns 127.0.0.1"), "{joined}");
        assert!(joined.contains("--sysctl net.ipv6.conf.all.disable_ipv6=1"), "{joined}");
        assert!(joined.contains("--volume /tmp/gate:/run/leash:ro --entrypoint /bin/sh img -c "), "{joined}");
        assert!(joined.ends_with(" leash-gate /bin/app --flag"), "{joined}");
        std::mem::forget(gate);
    }

    #[test]
    fn without_the_gate_the_users_entrypoint_and_command_are_passed_as_given() {
        let words = ["--entrypoint", "/app", "img", "serve", "--port", "1"].map(String::from);
        let opts = options::scan(&words).unwrap();
        let gate = Gate { dir: PathBuf::from("/tmp/gate") };
        let joined = create_args(&opts, &gate, &Start::Ungated, false).join(" ");
        assert!(joined.ends_with(":/run/leash:ro --entrypoint /app img serve --port 1"), "{joined}");
        assert!(!joined.contains("disable_ipv6"), "no IPv6 sysctls where the kernel has no IPv6: {joined}");
        std::mem::forget(gate);
    }

    #[test]
    fn the_gate_script_is_bounded_and_execs_the_command() {
        let script = gate_script();
        assert!(script.contains("-gt 300") && script.contains("exit 125") && script.ends_with("exec \"$@\""));
    }
}
