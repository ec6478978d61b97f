//! A container's life under leash: the `docker create` arguments (the user's options, then leash's: no network, no
//! network capabilities, the DNS stub, the proxy and CA environment, the gate), the start behind the gate, the
//! proxy served inside it until it ends, and its removal whatever happened; and for `attach`, a running container
//! of the user's served until it exits.

use std::time::{Duration, Instant};

use leash_proxy::ProxyConfig;

use crate::engine::{self, Engine, EngineError, State, Waiter};
use crate::gate::{self, Gate, BUNDLE_FILE, CA_FILE, GATE_MOUNT};
use crate::options::{self, RunOptions};
use crate::serve::{bind_inside, serve_until, StopSignals, DNS_INSIDE, PROXY_INSIDE};
use leash_proxy::inside::{Bound, Plan};

/// How long leash waits for a started container to get its init pid (`docker start` has returned by then on any
/// sane daemon; the bound keeps a wedged one from hanging leash).
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Between two looks at a starting container: short, since the command is held at the gate meanwhile.
const START_POLL: Duration = Duration::from_millis(20);
/// Label on every container leash creates (`docker ps -a --filter label=leash.run` finds leftovers).
const LABEL: &str = "leash.run=1";

/// How the container's command starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// Behind the gate: `/bin/sh -c WAIT leash-gate ARGV…`, ARGV the command Docker would have run.
    Gated(Vec<String>),
    /// As the user gave it (`--no-start-gate`).
    Ungated,
}

/// The variables that point the container's clients at the run's CA: those named by `bundle` at the bundle (system
/// roots plus the CA), those named by `ca` at the CA alone.
#[derive(Debug, Clone, Copy)]
pub struct TrustVars<'a> {
    /// Variables set to the bundle's path (`SSL_CERT_FILE`, `REQUESTS_CA_BUNDLE`, ...): they replace the roots.
    pub bundle: &'a [&'a str],
    /// Variables set to the CA's own path (`NODE_EXTRA_CA_CERTS`): they add to the roots.
    pub ca: &'a [&'a str],
}

/// Why the command the gate would `exec` is not known.
#[derive(Debug, thiserror::Error)]
pub enum ArgvError {
    /// The image is not available locally (`docker image inspect` failed): leash does not pull it.
    #[error(transparent)]
    ImageMissing(EngineError),
    /// Docker could not be asked.
    #[error(transparent)]
    Engine(EngineError),
    /// Neither the image nor the options give a command.
    #[error("the image `{image}` has no command and none was given")]
    NoCommand {
        /// The image, as given.
        image: String,
    },
}

/// Why the container did not run to its end with leash's proxy in place.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// `docker start`, or the `docker wait` for its status, failed.
    #[error(transparent)]
    Engine(EngineError),
    /// Docker could not say whether the container runs yet.
    #[error(transparent)]
    Inspect(EngineError),
    /// The container had no init pid within `START_TIMEOUT`.
    #[error("the container did not start within {secs}s")]
    TimedOut {
        /// How long leash waited.
        secs: u64,
    },
    /// The gated command ended before the gate opened (no `/bin/sh` in the image, most likely).
    #[error(
        "the container ended before leash's proxy was in place; does the image have /bin/sh? leash's start-up gate \
         needs it (or pass --no-start-gate)"
    )]
    EndedAtGate,
    /// The sockets could not be bound in the container's network namespace.
    #[error(transparent)]
    Bind(leash_sandbox::SandboxError),
    /// The ready file could not be created.
    #[error("cannot open the start-up gate: {0}; stopping the container")]
    OpenGate(std::io::Error),
}

/// The argv Docker would run (the image's entrypoint and command, or those given), for the gate to `exec`.
pub fn gated_argv(engine: &Engine, opts: &RunOptions) -> Result<Vec<String>, ArgvError> {
    let (image_entrypoint, image_cmd) = match engine.image_argv(&opts.image) {
        Ok(argv) => argv,
        Err(e) if matches!(&e, EngineError::Failed { call, .. } if call == "image inspect") => {
            return Err(ArgvError::ImageMissing(e))
        }
        Err(e) => return Err(ArgvError::Engine(e)),
    };
    let argv = options::container_argv(opts.entrypoint.as_deref(), &opts.command, &image_entrypoint, &image_cmd);
    if argv.is_empty() {
        return Err(ArgvError::NoCommand { image: opts.image.clone() });
    }
    Ok(argv)
}

/// `docker create` arguments: the user's options, then leash's (later ones win): no network, no network
/// capabilities, no IPv6 (Docker disables it on a `none` network already; said again so no daemon setting brings it
/// back, where the kernel has IPv6 at all: the sysctls exist only then), the DNS stub, the proxy and CA environment,
/// the gate, and the gate's wrapper as entrypoint around the real argv.
/// `env` is set in the container too, after everything else (leash's mode variable).
pub fn create_args(
    opts: &RunOptions,
    gate: &Gate,
    start: &Start,
    ipv6_on_host: bool,
    trust: TrustVars,
    env: &[(String, String)],
    mounts: &[(std::path::PathBuf, std::path::PathBuf)],
) -> Vec<String> {
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
    // The proxy's variables as every way in gives them (`leash_proxy::inside`), but NO_PROXY, set empty below.
    for (var, value) in Plan::proxy_at(PROXY_INSIDE).proxy_env() {
        args.extend(["--env".to_owned(), format!("{}={}", var.to_string_lossy(), value.to_string_lossy())]);
    }
    args.extend(["--env", "NO_PROXY=", "--env", "no_proxy="].map(String::from));
    for var in trust.bundle {
        args.extend(["--env".to_owned(), format!("{var}={GATE_MOUNT}/{BUNDLE_FILE}")]);
    }
    for var in trust.ca {
        args.extend(["--env".to_owned(), format!("{var}={GATE_MOUNT}/{CA_FILE}")]);
    }
    for (name, value) in env {
        args.extend(["--env".to_owned(), format!("{name}={value}")]);
    }
    args.extend(["--volume".to_owned(), format!("{}:{GATE_MOUNT}:ro", gate.dir.display())]);
    // The services' Unix sockets: bound by leash on the host, each mounted where its service listens inside.
    for (host, inside) in mounts {
        args.extend(["--mount".to_owned(), format!("type=bind,src={},dst={}", host.display(), inside.display())]);
    }
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

/// A container leash created: removed (`docker rm --force`) when dropped, whatever happened.
pub struct Container {
    engine: Engine,
    id: String,
}

impl Container {
    /// `docker create ARGS` (see [`create_args`]).
    pub fn create(engine: Engine, args: &[String]) -> Result<Container, EngineError> {
        let id = engine.create(args)?;
        Ok(Container { engine, id })
    }

    /// The full container ID.
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        // Drop cannot return the error, and a container left behind must not go unsaid.
        if let Err(e) = self.engine.remove(&self.id) {
            eprintln!("leash: could not remove container {}: {e}", short(&self.id));
        }
    }
}

/// The first 12 digits of a container ID, as Docker shows it.
pub fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

/// How `docker start` runs: attached with stdin (`-i`), whether the command waits at the gate, and what is bound
/// inside.
#[derive(Debug, Clone)]
pub struct Launch {
    /// `docker start -i`: the terminal's input goes to the container.
    pub interactive: bool,
    /// The command waits at the gate until leash's sockets are bound inside.
    pub gated: bool,
    /// What the container is given: the proxy, the DNS stub, the transparent listeners (for programs that ignore the
    /// proxy variables), the services that listen on a port inside.
    pub plan: Plan,
}

/// Start the container, bind the listener inside once it runs, open the gate, serve until it ends; its status.
pub async fn supervise(
    container: &Container,
    gate: &Gate,
    launch: Launch,
    (config, unix_services): (ProxyConfig, Vec<leash_proxy::ServiceSocket>),
    stop: &mut StopSignals,
) -> Result<i32, StartError> {
    let (mut start, inside) = start_behind_gate(container, gate, launch)?;
    if let Some(inside) = inside {
        let inside = inside.with_services(unix_services);
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
    container.engine.exit_code(&container.id).map_err(StartError::Engine)
}

/// `docker start --attach`, then, once the container's init runs (held at the gate), the sockets bound inside and
/// the gate opened. Returns the attached `docker start` and the sockets to serve; no sockets when an ungated
/// container ended before leash could bind (nothing to serve, its status still counts).
fn start_behind_gate(
    container: &Container,
    gate: &Gate,
    launch: Launch,
) -> Result<(std::process::Child, Option<Bound>), StartError> {
    let engine = &container.engine;
    let mut start = engine.start_attached(&container.id, launch.interactive).map_err(StartError::Engine)?;
    let pid = match init_pid(engine, &container.id, &mut start)? {
        Some(pid) => pid,
        None if !launch.gated => return Ok((start, None)),
        None => return Err(StartError::EndedAtGate),
    };
    let inside = match bind_inside(pid, &launch.plan) {
        Ok(inside) => inside,
        Err(_) if !launch.gated && ended_soon(engine, &container.id, &mut start) => return Ok((start, None)),
        Err(e) => return Err(StartError::Bind(e)),
    };
    gate.open().map_err(StartError::OpenGate)?;
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
fn init_pid(engine: &Engine, id: &str, start: &mut std::process::Child) -> Result<Option<u32>, StartError> {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(Some(_)) = start.try_wait() {
            return Ok(None);
        }
        let state = engine.state(id).map_err(StartError::Inspect)?;
        if state.running && state.pid != 0 {
            return Ok(Some(state.pid));
        }
        if Instant::now() > deadline {
            return Err(StartError::TimedOut { secs: START_TIMEOUT.as_secs() });
        }
        std::thread::sleep(START_POLL);
    }
}

/// Why a running container could not be attached to.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// Docker is absent, refuses this user, failed, or does not know the container.
    #[error(transparent)]
    Engine(EngineError),
    /// The container exists but does not run.
    #[error("container `{container}` is not running")]
    NotRunning {
        /// The container, as named.
        container: String,
    },
    /// The sockets could not be bound in its network namespace (a network other than `none`, most likely).
    #[error("{source}")]
    Bind {
        /// Why binding failed.
        source: leash_sandbox::SandboxError,
        /// The container's network mode, which the caller names when it is not `none`.
        network_mode: String,
    },
}

/// A running container with leash's sockets bound inside it and a `docker wait` on it; not yet served.
pub struct Attached {
    state: State,
    inside: Bound,
    waiter: Waiter,
}

/// Checks that Docker answers and `container` runs, binds the proxy's listener (and a listener per service port,
/// by name) inside its network namespace (which must hold only `lo`), and starts waiting for it to exit.
pub fn attach(
    engine: &Engine,
    container: &str,
    service_ports: &[(std::sync::Arc<str>, u16)],
) -> Result<Attached, AttachError> {
    let state = match engine.check().and_then(|_| engine.state(container)) {
        Ok(s) if s.running && s.pid != 0 => s,
        Ok(_) => return Err(AttachError::NotRunning { container: container.to_owned() }),
        Err(e) => return Err(AttachError::Engine(e)),
    };
    let plan = Plan::proxy_at(PROXY_INSIDE).with_services(service_ports);
    let inside = bind_inside(state.pid, &plan)
        .map_err(|source| AttachError::Bind { source, network_mode: state.network_mode.clone() })?;
    let waiter = engine.waiter(&state.id).map_err(AttachError::Engine)?;
    Ok(Attached { state, inside, waiter })
}

impl Attached {
    /// The container's full ID.
    pub fn id(&self) -> &str {
        &self.state.id
    }

    /// Serves the proxy inside until the container exits (`Some` of its status) or a stop signal comes (`None`; the
    /// container is left running, with no way out).
    pub async fn serve(self, config: ProxyConfig, stop: &mut StopSignals) -> Result<Option<i32>, EngineError> {
        let Attached { state: _, inside, waiter } = self;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let pid = waiter.pid();
        std::thread::spawn(move || {
            let _ = tx.send(waiter.finish());
        });
        match serve_until(inside, config, rx, stop, None::<fn()>).await {
            Some(Ok(code)) => Ok(Some(code)),
            Some(Err(e)) => Err(e),
            None => {
                engine::kill(pid);
                Ok(None)
            }
        }
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    /// The variables the binary passes (its CA files' list).
    const TRUST: TrustVars =
        TrustVars { bundle: &["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"], ca: &["NODE_EXTRA_CA_CERTS"] };

    #[test]
    fn leash_options_come_after_the_users_so_they_win() {
        let opts = options::scan(&["--env".into(), "HTTP_PROXY=x".into(), "img".into()]).unwrap();
        let gate = Gate { dir: std::path::PathBuf::from("/tmp/gate") };
        let mode = [("LEASH_NETWORK_MODE".to_owned(), "allowlist".to_owned())];
        let args =
            create_args(&opts, &gate, &Start::Gated(vec!["/bin/app".into(), "--flag".into()]), true, TRUST, &mode, &[]);
        let joined = args.join(" ");
        let user = joined.find("HTTP_PROXY=x").unwrap();
        let ours = joined.find("HTTP_PROXY=http://127.0.0.1:3128").unwrap();
        assert!(user < ours, "{joined}");
        assert!(joined.contains("--network none --cap-drop NET_RAW --cap-drop NET_ADMIN --dns 127.0.0.1"), "{joined}");
        assert!(joined.contains("--sysctl net.ipv6.conf.all.disable_ipv6=1"), "{joined}");
        assert!(joined.contains("--volume /tmp/gate:/run/leash:ro --entrypoint /bin/sh img -c "), "{joined}");
        assert!(joined.ends_with(" leash-gate /bin/app --flag"), "{joined}");
        assert!(joined.contains("--env SSL_CERT_FILE=/run/leash/bundle.pem"), "{joined}");
        assert!(joined.contains("--env LEASH_NETWORK_MODE=allowlist --volume"), "the mode, after the user's: {joined}");
        assert!(joined.contains("--env NODE_EXTRA_CA_CERTS=/run/leash/ca.pem"), "{joined}");
        std::mem::forget(gate);
    }

    #[test]
    fn without_the_gate_the_users_entrypoint_and_command_are_passed_as_given() {
        let words = ["--entrypoint", "/app", "img", "serve", "--port", "1"].map(String::from);
        let opts = options::scan(&words).unwrap();
        let gate = Gate { dir: std::path::PathBuf::from("/tmp/gate") };
        let joined = create_args(&opts, &gate, &Start::Ungated, false, TRUST, &[], &[]).join(" ");
        assert!(joined.ends_with(":/run/leash:ro --entrypoint /app img serve --port 1"), "{joined}");
        assert!(!joined.contains("disable_ipv6"), "no IPv6 sysctls where the kernel has no IPv6: {joined}");
        std::mem::forget(gate);
    }
}
