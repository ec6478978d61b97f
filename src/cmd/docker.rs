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
//!
//! The work is `leash_docker`'s; this file turns arguments into its calls and its errors into messages and exit
//! codes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use leash_docker::container::{
    self, gated_argv, ArgvError, AttachError, Container, Launch, Start, StartError, TrustVars,
};
use leash_docker::engine::{Engine, EngineError};
use leash_docker::gate::Gate;
use leash_docker::host::Guarded;
use leash_docker::options::{self, RunOptions};
use leash_docker::serve::{StopSignals, PROXY_INSIDE};
use leash_policy::Policy;
use leash_proxy::inside::Plan;
use leash_proxy::{Inspection, UpstreamTrust};

use crate::cli::{DockerAttachArgs, DockerRunArgs, SandboxProxyArgs};
use crate::exit::{Exit, Failure};
use crate::shared::ask::socket::Bound;
use crate::shared::sandboxed::{
    config, keep_deferred_log, mode_env, proxy_parts, runs_dir, secret_files, with_stop_signals, ProxyParts,
};
use crate::shared::secrets::placeholder_env;
use crate::shared::services;
use crate::shared::trust::{write_trust_files, BUNDLE_VARS, NODE_VAR};

/// The CA variables the container gets: the same as `leash run`'s command.
const TRUST_VARS: TrustVars = TrustVars { bundle: &BUNDLE_VARS, ca: &[NODE_VAR] };

pub fn run(args: DockerRunArgs) -> Result<Exit, Failure> {
    leash_sandbox::harden_self().map_err(Failure::sandbox_failed)?;
    let opts = options::scan(&args.docker).map_err(Failure::usage)?;
    // The container's output reaches leash's standard error through the docker client.
    let parts = proxy_parts(&args.proxy, true)?;
    // INVARIANT: ask mode's control socket exists before the binds are checked, so the check knows its directory:
    // a container that reached it would answer its own questions.
    let ask_socket = parts.policy.asks().then(|| crate::shared::ask::bind_socket(&args.proxy.ask)).transpose()?;
    // Only bind sources are checked against the host: without one, nothing of it is read.
    let guarded = if opts.bind_sources.is_empty() {
        Guarded::default()
    } else {
        Guarded::on_host(leash_files(&args.proxy, &parts.policy, ask_socket.as_ref()))
    };
    let opts = checked_options(opts, &guarded, args.danger_allow_unsafe_docker_options)?;
    let trust = UpstreamTrust { system_roots: true, extra_ca_files: args.proxy.upstream_ca.clone() };
    let inspection = Inspection::new(&trust)
        .map(Arc::new)
        .map_err(|e| Failure::usage(format!("cannot set up TLS inspection: {e}")))?;
    // Signals are taken over before anything is created, so a Ctrl-C at any moment still removes the container.
    let (gated, quiet) = (!args.no_start_gate, args.quiet);
    let ask = (args.proxy, ask_socket);
    with_stop_signals(move |stop| run_container(opts, (gated, quiet), (parts, ask), inspection, stop))
}

/// Ask mode's arguments and, when the policy asks, its control socket, bound.
type AskParts = (SandboxProxyArgs, Option<Bound>);

async fn run_container(
    opts: RunOptions,
    (gated, quiet): (bool, bool),
    (ProxyParts { policy, pins, audit, secrets }, (proxy_args, ask_socket)): (ProxyParts, AskParts),
    inspection: Arc<Inspection>,
    mut stop: StopSignals,
) -> Result<Exit, Failure> {
    let engine = Engine::new().with_env(crate::shared::secrets::masked_env(&secrets.secrets));
    engine.check().map_err(|e| refuse_engine(&e))?;
    let argv = gated.then(|| gated_argv(&engine, &opts)).transpose().map_err(refuse_argv)?;
    let start = argv.map_or(Start::Ungated, Start::Gated);
    let with_ca = |gate: Gate| write_trust_files(&inspection, &gate.ca_path(), &gate.bundle_path()).map(|()| gate);
    let gate = Gate::create().and_then(with_ca).map_err(|e| {
        Failure::sandbox_failed(format!(
            "cannot create the start-up gate and CA directory: {e}; the container was not created"
        ))
    })?;
    let ipv6_on_host = Path::new("/proc/sys/net/ipv6").exists();
    let mut env = vec![mode_env(&policy)];
    env.extend(placeholder_env(&policy, &secrets.secrets));
    env.extend(services::no_proxy_env(&policy).into_iter().map(|(k, v)| (lossy(k), lossy(v))));
    let (unix_services, mounts) = services::bind_sockets_in(&policy, &gate.dir)?;
    let create_args = container::create_args(&opts, &gate, &start, ipv6_on_host, TRUST_VARS, &env, &mounts);
    let container = Container::create(engine, &create_args).map_err(|e| refuse_engine(&e))?;
    // Each socket is handed out of the container's namespace; a bound like `leash run`'s keeps that small.
    let plan = Plan::proxy_at(PROXY_INSIDE)
        .with_services(&services::ports(&policy))
        .with_dns_and_transparent(&policy, leash_sandbox::MAX_SOCKETS);
    services::announce(&policy);
    let audit = Arc::new(audit.with_container(container.id()));
    let mut config = config((policy, pins, secrets), audit.clone(), Some(inspection));
    // The container shares leash's terminal through the docker client: questions go to the control socket only.
    let ask = match crate::shared::ask::start_for(&proxy_args, &mut config, None, ask_socket) {
        Ok(ask) => ask,
        // Said now, before the container is removed (a failure to remove it is said after it).
        Err(failure) => return Err(Failure::new(failure.report(), "")),
    };
    let launch = Launch { interactive: opts.interactive, gated, plan };
    let policy = config.policy.clone();
    // A failure once the container was started is said before the summary of what it did.
    let exit = match container::supervise(&container, &gate, launch, (config, unix_services), &mut stop).await {
        Ok(code) => Exit::Command(u8::try_from(code).unwrap_or(255)),
        Err(e) => refuse_start(e).report(),
    };
    keep_deferred_log(&audit, quiet);
    crate::shared::summary::print(&audit, &policy, quiet);
    if let Some(summary) = ask.as_ref().and_then(|front| front.summary()).filter(|_| !quiet) {
        eprint!("{summary}");
    }
    Ok(exit)
}

/// An `OsString` as the container's environment takes it.
fn lossy(s: std::ffi::OsString) -> String {
    s.to_string_lossy().into_owned()
}

pub fn attach(args: DockerAttachArgs) -> Result<Exit, Failure> {
    leash_sandbox::harden_self().map_err(Failure::sandbox_failed)?;
    let parts = proxy_parts(&args.proxy, false)?;
    let (ca_out, bundle_out) = (args.ca_cert_out.as_deref(), args.ca_bundle_out.as_deref());
    let inspection = crate::shared::tls::inspection_for_clients(ca_out, bundle_out, &args.proxy.upstream_ca)?;
    // Signals are taken over before the `listening` line, so a harness may stop leash as soon as it reads it.
    with_stop_signals(move |stop| attach_container(args.container, parts, inspection, stop))
}

/// Checks the container, binds inside it, and serves until it exits (its status) or a stop signal (0; the
/// container is left running, with no way out).
async fn attach_container(
    container: String,
    ProxyParts { policy, pins, audit, secrets }: ProxyParts,
    inspection: Arc<Inspection>,
    mut stop: StopSignals,
) -> Result<Exit, Failure> {
    // A running container's mounts are fixed: its services' Unix sockets cannot be put there.
    for s in policy.services().iter().filter(|s| matches!(s.listen, leash_policy::ServiceListen::Socket(_))) {
        tracing::warn!(
            "service {}: a Unix socket cannot be added to a running container; use leash docker run",
            s.name
        );
    }
    let attached = container::attach(&Engine::new(), &container, &services::ports(&policy)).map_err(|e| match e {
        AttachError::Engine(e) => refuse_engine(&e),
        AttachError::Bind { source, network_mode } => refuse_bind(&source, &network_mode),
        e @ AttachError::NotRunning { .. } => Failure::sandbox_failed(e),
    })?;
    let audit = Arc::new(audit.with_container(attached.id()));
    let config = config((policy, pins, secrets), audit, Some(inspection));
    println!("listening inside {} on {PROXY_INSIDE}", container::short(attached.id()));
    match attached.serve(config, &mut stop).await {
        Ok(Some(code)) => Ok(Exit::Command(u8::try_from(code).unwrap_or(255))),
        Ok(None) => Ok(Exit::Ok),
        Err(e) => Err(refuse_engine(&e)),
    }
}

/// leash's own files for this run, which no bind may reach (what each is, and its path): the policy file, the audit
/// log, the credentials' secret files, the kept run logs' directory, the upstream CAs and ask mode's control socket's
/// directory. A container that could read them would learn the secrets and what the policy hides; one that could
/// change them would rewrite the policy an `always` answer reloads, the log, or the CAs a later run trusts.
fn leash_files(args: &SandboxProxyArgs, policy: &Policy, ask: Option<&Bound>) -> Vec<(String, PathBuf)> {
    fn named(what: &'static str) -> impl Fn(&PathBuf) -> (String, PathBuf) {
        move |path| (what.to_owned(), path.clone())
    }
    let mut files: Vec<_> = args.policy.iter().map(named("policy file")).collect();
    files.extend(args.log.iter().map(named("audit log")));
    files.extend(secret_files(policy).iter().map(named("secret file")));
    files.extend(runs_dir().iter().map(named("kept run logs")));
    files.extend(args.upstream_ca.iter().map(named("upstream CA")));
    files.extend(ask.map(|socket| socket.dir().to_path_buf()).iter().map(named("control socket's directory")));
    files
}

/// Adds what the host shows about bind sources to the options' own refusals, and refuses the unsafe ones unless
/// overridden.
fn checked_options(mut opts: RunOptions, guarded: &Guarded, danger: bool) -> Result<RunOptions, Failure> {
    let host_unsafe = leash_docker::host::unsafe_options(&opts, &Engine::new(), guarded);
    opts.unsafe_options.extend(host_unsafe);
    if opts.unsafe_options.is_empty() {
        return Ok(opts);
    }
    if danger {
        for u in &opts.unsafe_options {
            eprintln!("leash: warning: `{}` lets the container around the policy ({})", u.option, u.why);
        }
        return Ok(opts);
    }
    let refusals: String =
        opts.unsafe_options.iter().map(|u| format!("leash: refusing `{}`: {}\n", u.option, u.why)).collect();
    Err(Failure::new(
        Exit::Usage,
        format!(
            "{refusals}leash: the container was not created; --danger-allow-unsafe-docker-options runs it anyway, \
             unprotected"
        ),
    ))
}

/// The gate's command, or why there is none: an image that is not there gets a hint, a command-less one is a usage
/// error.
fn refuse_argv(e: ArgvError) -> Failure {
    match e {
        ArgvError::ImageMissing(e) => Failure::sandbox_failed(format!(
            "{e}\nleash: build or pull the image first (leash reads its command to start it behind the gate; \
             --no-start-gate lets Docker pull it)"
        )),
        ArgvError::Engine(e) => refuse_engine(&e),
        e @ ArgvError::NoCommand { .. } => Failure::usage(e),
    }
}

/// The container did not run to its end behind the proxy: exit 125, nothing ran unprotected.
fn refuse_start(e: StartError) -> Failure {
    match e {
        StartError::Engine(e) => refuse_engine(&e),
        StartError::Bind(e) => refuse_bind(&e, "none"),
        e => Failure::sandbox_failed(e),
    }
}

/// Docker is absent, refuses this user or failed: nothing runs unprotected, exit 125 (as `leash run`).
fn refuse_engine(e: &EngineError) -> Failure {
    /// Docker's words when the socket refuses this user.
    const DENIED: &str = "permission denied";
    if matches!(e, EngineError::Failed { message, .. } if message.contains(DENIED)) {
        return Failure::sandbox_failed(format!(
            "{e}\nleash: this user may not use the Docker daemon; leash docker needs root (it enters the container's \
             network namespace)"
        ));
    }
    Failure::sandbox_failed(e)
}

/// Says why the sockets could not be bound inside; exit 125.
fn refuse_bind(e: &leash_sandbox::SandboxError, network_mode: &str) -> Failure {
    match e {
        leash_sandbox::SandboxError::NotIsolated { .. } => Failure::sandbox_failed(format!(
            "refusing the container: {e} (network `{network_mode}`; start it with `--network none`)"
        )),
        _ => Failure::sandbox_failed(e),
    }
}
