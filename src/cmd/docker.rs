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
mod gate;
mod options;
mod serve;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leash_policy::Policy;
use leash_proxy::{AuditLog, Inspection, ProxyConfig, UpstreamTrust};

use self::engine::{Engine, EngineError};
use self::gate::{Gate, BUNDLE_FILE, CA_FILE, GATE_MOUNT};
use self::options::RunOptions;
use self::serve::{bind_inside, refuse_bind, serve_until, with_runtime, Inside, StopSignals, DNS_INSIDE, PROXY_INSIDE};
use crate::cli::{DockerAttachArgs, DockerRunArgs, TlsArgs};
use crate::exit::Exit;
use crate::shared::sandboxed::{config, proxy_parts, replay_deferred_log, Pins};
use crate::shared::trust::{BUNDLE_VARS, NODE_VAR};

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
    // The container's output reaches leash's standard error through the docker client.
    let parts = match proxy_parts(&args.proxy, true) {
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
    // Each socket is handed out of the container's namespace; a bound like `leash run`'s keeps that small.
    let transparent_ports = leash_proxy::transparent_ports(&policy, leash_sandbox::MAX_SOCKETS - 2);
    let audit = Arc::new(audit.with_container(&container.id));
    let config = config(policy, pins, audit.clone(), Some(inspection));
    let launch = Launch { interactive: opts.interactive, gated, transparent_ports };
    let exit = supervise(&container, &gate, launch, config, &mut stop).await;
    replay_deferred_log(&audit);
    exit
}

pub fn attach(args: DockerAttachArgs) -> Exit {
    if let Err(e) = leash_sandbox::harden_self() {
        eprintln!("leash: {e}");
        return Exit::SandboxFailed;
    }
    let parts = match proxy_parts(&args.proxy, false) {
        Ok(parts) => parts,
        Err(code) => return code,
    };
    let tls = TlsArgs {
        ca_cert_out: args.ca_cert_out.clone(),
        ca_bundle_out: args.ca_bundle_out.clone(),
        upstream_ca: args.proxy.upstream_ca.clone(),
    };
    let inspection = match crate::shared::tls::inspection(&tls) {
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
    let inside = match bind_inside(state.pid, None) {
        Ok(i) => i,
        Err(e) => return refuse_bind(&e, &state.network_mode),
    };
    let waiter = match engine.waiter(&state.id) {
        Ok(w) => w,
        Err(e) => return refuse_engine(&e),
    };
    let config = config(policy, pins, Arc::new(audit.with_container(&state.id)), Some(inspection));
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
    let sockets = if opts.bind_sources.is_empty() { Vec::new() } else { host_unix_sockets() };
    let host_unsafe: Vec<_> = opts.bind_sources.iter().filter_map(|(o, s)| unsafe_on_host(o, s, &sockets)).collect();
    opts.unsafe_options.extend(host_unsafe);
    let engine = Engine::new();
    let volume_unsafe: Vec<_> = opts.named_volumes.iter().filter_map(|(o, n)| unsafe_volume(&engine, o, n)).collect();
    opts.unsafe_options.extend(volume_unsafe);
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

/// A named volume that already exists and would bring a host path in: created with the local driver told to bind
/// a host path or device, or by another driver. The daemon is asked; when it cannot answer, the volume is refused
/// (leash does not guess). Without a `docker` program at all, the engine check that follows says so (exit 125).
fn unsafe_volume(engine: &Engine, option: &str, name: &str) -> Option<options::Unsafe> {
    let why = match engine.volume(name) {
        Ok(None) | Err(EngineError::Missing(_)) => return None,
        Ok(Some(facts)) => format!("the volume `{name}`: {}", facts.host_path()?),
        Err(e) => format!("the volume `{name}` could not be checked ({e})"),
    };
    Some(options::Unsafe { option: option.to_owned(), why })
}

/// A bind source that resolves (symlinks, `..`, relative paths) to a runtime socket or a directory above one, that
/// is a Unix socket, or that holds one a host process listens on: a host daemon inside the container is a way
/// around the proxy (the container cannot reach any other).
fn unsafe_on_host(option: &str, source: &str, host_sockets: &[PathBuf]) -> Option<options::Unsafe> {
    let path = std::fs::canonicalize(source).ok()?;
    let held = host_sockets.iter().find(|socket| socket.starts_with(&path));
    let why = if options::reaches_runtime_socket(&path.to_string_lossy()) {
        "its source resolves to the Docker socket (or a directory holding it)".to_owned()
    } else if std::fs::metadata(&path).is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type())) {
        "its source is a host Unix socket, a way around the proxy".to_owned()
    } else if let Some(socket) = held {
        format!("it holds the host Unix socket `{}`, a way around the proxy", socket.display())
    } else {
        return None;
    };
    Some(options::Unsafe { option: option.to_owned(), why })
}

/// The filesystem Unix sockets host processes listen on (`/proc/net/unix`, leash's network namespace), resolved.
fn host_unix_sockets() -> Vec<PathBuf> {
    let table = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().nth(7))
        .filter(|path| path.starts_with('/'))
        .filter_map(|path| std::fs::canonicalize(path).ok())
        .collect()
}

/// The policy, the `--resolve` pins and the audit log (not yet shared: the container ID is added once known).
type ProxyParts = (Policy, Pins, AuditLog);

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
            args.extend([gate::script(), "leash-gate".to_owned()]);
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

/// How `docker start` runs: attached with stdin (`-i`), whether the command waits at the gate, and the ports that
/// get a transparent listener inside.
#[derive(Debug, Clone)]
struct Launch {
    interactive: bool,
    gated: bool,
    transparent_ports: Vec<u16>,
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
    let inside = match bind_inside(pid, Some(&launch.transparent_ports)) {
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn leash_options_come_after_the_users_so_they_win() {
        let opts = options::scan(&["--env".into(), "HTTP_PROXY=x".into(), "img".into()]).unwrap();
        let gate = Gate { dir: std::path::PathBuf::from("/tmp/gate") };
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
    fn a_mount_in_any_spelling_whose_source_links_to_the_sockets_directory_is_refused_on_the_host() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink("/run", &link).unwrap();
        for value in [
            format!("TYPE=Bind,source={},target=/r", link.display()),
            format!("\"type=bind\",\"src={}\",dst=/r", link.display()),
            format!("type=bind,src={}/../link/,dst=/r", link.display()),
        ] {
            let opts = options::scan(&["--mount".into(), value.clone(), "img".into()]).unwrap();
            let host: Vec<_> = opts.bind_sources.iter().filter_map(|(o, s)| unsafe_on_host(o, s, &[])).collect();
            let refused: Vec<_> = opts.unsafe_options.iter().chain(&host).collect();
            assert_eq!(refused.len(), 1, "{value}: {opts:?}");
            assert_eq!(refused[0].option, format!("--mount={value}"));
            assert!(refused[0].why.contains("Docker socket"), "{value}: {}", refused[0].why);
        }
    }

    #[test]
    fn without_the_gate_the_users_entrypoint_and_command_are_passed_as_given() {
        let words = ["--entrypoint", "/app", "img", "serve", "--port", "1"].map(String::from);
        let opts = options::scan(&words).unwrap();
        let gate = Gate { dir: std::path::PathBuf::from("/tmp/gate") };
        let joined = create_args(&opts, &gate, &Start::Ungated, false).join(" ");
        assert!(joined.ends_with(":/run/leash:ro --entrypoint /app img serve --port 1"), "{joined}");
        assert!(!joined.contains("disable_ipv6"), "no IPv6 sysctls where the kernel has no IPv6: {joined}");
        std::mem::forget(gate);
    }
}
