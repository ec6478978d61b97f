//! `leash proxy`: load the policy, open the audit log, bind, print `listening on ADDR`, serve until SIGINT/SIGTERM,
//! reload on SIGHUP. With `--metrics`, also serve the Prometheus counters on the operator's address.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use leash_proxy::{AuditLog, Limits, Metrics, PolicyHandle, ProxyConfig, Swapped, SystemResolver};
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};

use crate::cli::ProxyArgs;
use crate::exit::{Exit, Failure};
use crate::policy_file::{check_same_resources, load_file, located};
use crate::shared::ask::{self, AskFront, PolicySource};
use crate::shared::client_env::write_env_file;
use crate::shared::control::{record_swap, Control, Fits, InForce, Peer};
use crate::shared::sandboxed::{audit_mode, parse_pins};
use crate::shared::secrets;
use crate::shared::services;
use crate::shared::tls::inspection;

pub fn run(args: ProxyArgs) -> Result<Exit, Failure> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = args.threads {
        builder.worker_threads(usize::from(threads));
    }
    let runtime =
        builder.enable_all().build().map_err(|e| Failure::refused(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(serve(args))
}

async fn serve(args: ProxyArgs) -> Result<Exit, Failure> {
    let policy = match (&args.policy, &args.task) {
        (Some(path), _) => load_file(path, args.profile.as_deref())?.policy,
        (None, Some(task)) => crate::policy_file::load_task(task)?.0.policy,
        (None, None) => crate::policy_file::inline(&args.allow, &args.block)?,
    };
    let policy = crate::policy_file::bounded(policy, args.boundary.as_deref())?;
    let policy = ask::ask_mode(audit_mode(policy, args.audit), &args.ask)?;
    let ask_socket = policy.asks().then(|| ask::bind_socket(&args.ask)).transpose()?;
    let control_socket = args.control.as_deref().map(|path| bind_control(path, &policy)).transpose()?;
    let secrets = Arc::new(secrets::read_or_exit(&policy)?);
    let placeholders = secrets::placeholder_lines(&policy, &secrets);
    let upstream_auth = secrets::upstream_auth_or_exit(&policy)?;
    let pins = parse_pins(&args.resolve)?;
    let audit = open_log(args.log.as_ref())?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| Failure::usage(format!("cannot listen on {}: {e}", args.listen)))?;
    let metrics_listener = bind_metrics(args.metrics, &listener).await?;
    let (service_sockets, socket_files) = bind_services(&policy, &listener, args.metrics)?;
    let inspection = inspection(&args.tls)?;
    // Said only where a tunnel may be inspected: with a policy that never inspects, no client needs the CA (the CA
    // is still made, for a policy a SIGHUP may load).
    if args.tls.ca_cert_out.is_none() && args.tls.ca_bundle_out.is_none() && policy.may_inspect() {
        tracing::info!("TLS inspection: the run's CA certificate is not written anywhere (--ca-cert-out FILE)");
    }
    if let (Some(file), Ok(addr)) = (&args.env_file, listener.local_addr()) {
        write_env_file(file, addr, (&inspection, &args.tls), &policy, &secrets)?;
    }
    let policy = PolicyHandle::new(policy);
    let mut config = ProxyConfig {
        policy: policy.clone(),
        audit,
        resolver: Arc::new(SystemResolver::new(pins)),
        own_addrs: leash_proxy::OwnAddrs::Host,
        limits: crate::shared::open_files::fit_open_files(Limits::default()),
        inspection: Some(inspection),
        metrics: Arc::default(),
        credentials: secrets,
        upstream_auth,
        bound: None,
        release_free_memory: Some(leash_sandbox::release_free_memory),
        ask: None,
    };
    let ask = ask_socket.map(|socket| ask_front(&args, socket, &config)).transpose()?.map(Arc::new);
    config.ask = ask.as_ref().map(|front| front.asking.clone());
    if let Some(front) = &ask {
        start_asking(front)?;
    }
    let start = InForce::at_start(args.policy.as_deref().or(args.task.as_deref()), &args.allow, &args.block);
    let control = control_socket.map(|socket| {
        let start = start.clone();
        // Every listener a policy may need is the proxy's own, and it always has a CA: services and credentials are
        // all a switch must keep (`check_same_resources`).
        let fits: Fits = Box::new(|_| Ok(()));
        Arc::new(Control::new(socket, (policy.clone(), config.audit.clone()), start, args.audit, fits))
    });
    if let Some(control) = &control {
        Control::serve(control).map_err(|e| Failure::refused(format!("cannot serve the control socket: {e}")))?;
    }
    let Signals { term, int, hup } = Signals::install();
    if let Ok(addr) = listener.local_addr() {
        // Clients are given the placeholders; the real values stay in this process.
        let mut out = std::io::stdout().lock();
        let mut lines = std::iter::once(format!("listening on {addr}")).chain(placeholders);
        let _ = lines.try_for_each(|l| writeln!(out, "{l}")).and_then(|()| out.flush());
    }
    if let Some(l) = metrics_listener {
        serve_metrics(l, &config.metrics, &policy);
    }
    let reloads = Reloads { policy, audit: config.audit.clone(), metrics: config.metrics.clone() };
    let modes = Modes { audit: args.audit, ask: args.ask.ask };
    let source = match (&args.policy, &args.task) {
        (Some(path), _) => Some(Source::Policy(path.clone(), args.profile.clone())),
        (None, Some(task)) => Some(Source::Task(task.clone())),
        (None, None) => None,
    };
    tokio::spawn(reload_on_hangup(reloads, hup, (source, modes), (control, start)));
    let listeners = leash_proxy::Listeners { proxy: listener, transparent: Vec::new(), services: service_sockets };
    let served = leash_proxy::serve_listeners(listeners, config, shutdown_signal(term, int)).await;
    drop(socket_files);
    if let Some(summary) = ask.as_ref().and_then(|front| front.summary()) {
        eprint!("{summary}");
    }
    served.map(|()| Exit::Ok).map_err(Failure::refused)
}

/// `--control`'s socket, bound; not with ask mode, whose `always` answers write the file the proxy started with.
fn bind_control(path: &std::path::Path, policy: &leash_policy::Policy) -> Result<ask::socket::Bound, Failure> {
    if policy.asks() {
        return Err(Failure::usage(
            "--control cannot be used in ask mode: its `always` answers write the policy file leash started with",
        ));
    }
    Control::bind(path)
}

/// Ask mode's front ends for the proxy: the bound control socket, and the policy file an `always` answer changes.
fn ask_front(args: &ProxyArgs, socket: ask::socket::Bound, config: &ProxyConfig) -> Result<AskFront, Failure> {
    let source = PolicySource::hold(args.policy.as_deref(), args.profile.as_deref(), args.ask.ask)?;
    Ok(AskFront::new(&args.ask, socket, config.policy.clone(), source, config.metrics.clone()))
}

/// Serve the control socket, and ask at leash's own terminal when it has one (no command shares it here).
fn start_asking(front: &Arc<AskFront>) -> Result<(), Failure> {
    let fail = |e: std::io::Error| Failure::refused(format!("ask mode: cannot serve the control socket: {e}"));
    ask::socket::Bound::serve(front).map_err(fail)?;
    let prompter = leash_sandbox::Prompter::direct();
    front.announce(prompter.is_some());
    if let Some(prompter) = prompter {
        ask::terminal::spawn(front.clone(), prompter).map_err(fail)?;
    }
    Ok(())
}

/// The modes the command line turns on, kept for every policy a SIGHUP loads.
#[derive(Clone, Copy)]
struct Modes {
    audit: bool,
    ask: bool,
}

/// The audit log: the file given (mode 0600, appended), else standard output. Failing to open it stops leash.
pub(crate) fn open_log(path: Option<&PathBuf>) -> Result<Arc<AuditLog>, Failure> {
    match path {
        None => Ok(Arc::new(AuditLog::stdout())),
        Some(p) => AuditLog::open(p).map(Arc::new).map_err(|e| {
            Failure::usage(format!("cannot open the audit log `{}`: {e}; not starting without it", p.display()))
        }),
    }
}

/// The signals leash acts on, installed before the `listening on` line: a harness may signal leash as soon as it
/// reads that line, and a signal that came before its handler would end leash (SIGHUP) or skip the drain.
struct Signals {
    term: std::io::Result<tokio::signal::unix::Signal>,
    int: std::io::Result<tokio::signal::unix::Signal>,
    hup: std::io::Result<tokio::signal::unix::Signal>,
}

impl Signals {
    fn install() -> Signals {
        Signals {
            term: signal(SignalKind::terminate()),
            int: signal(SignalKind::interrupt()),
            hup: signal(SignalKind::hangup()),
        }
    }
}

/// Completes on SIGINT or SIGTERM.
async fn shutdown_signal(
    term: std::io::Result<tokio::signal::unix::Signal>,
    int: std::io::Result<tokio::signal::unix::Signal>,
) {
    match (term, int) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {},
                _ = int.recv() => {},
            }
        }
        _ => {
            tracing::error!("cannot install signal handlers; stop leash with SIGKILL");
            std::future::pending::<()>().await;
        }
    }
    tracing::info!("shutting down: finishing in-flight requests");
}

/// What a SIGHUP acts on: the policy in force, the audit log to reopen, the counters of reloads.
struct Reloads {
    policy: PolicyHandle,
    audit: Arc<AuditLog>,
    metrics: Arc<Metrics>,
}

/// On SIGHUP, reopen the audit log file and load the policy file again (if there is one: an inline policy stays);
/// a valid file replaces the policy atomically, an invalid one keeps the old. `--audit` and `--ask` hold for every
/// policy loaded.
async fn reload_on_hangup(
    reloads: Reloads,
    hup: std::io::Result<tokio::signal::unix::Signal>,
    (source, modes): (Option<Source>, Modes),
    (control, mut in_force): (Option<Arc<Control>>, InForce),
) {
    let Reloads { policy, audit, metrics } = reloads;
    let Ok(mut hup) = hup else {
        tracing::warn!("cannot install the SIGHUP handler; policy reload is unavailable");
        return;
    };
    while hup.recv().await.is_some() {
        // The log file is reopened too (after logrotate moved it), as daemons do on SIGHUP.
        if let Err(e) = audit.reopen() {
            tracing::error!("{e}; writing on to the file already open");
        }
        // After a switch, the file switched to is the one in force: a SIGHUP (logrotate's) must not undo the switch.
        let switched = control.as_ref().and_then(|c| c.in_force().switched_to).map(|(p, prof)| Source::Policy(p, prof));
        let Some(source) = switched.as_ref().or(source.as_ref()) else {
            tracing::info!("the policy came from --allow/--block: nothing to reload");
            continue;
        };
        let (path, reloaded) = match source {
            Source::Policy(path, profile) => (path, reload(path, profile.as_deref())),
            Source::Task(task) => (
                task,
                crate::policy_file::load_task(task).map(|(l, _)| l.policy).map_err(|failure| {
                    // Said in full (every line, with its place) before the one line saying the old policy stays.
                    eprintln!("{failure}");
                    "the task is unreadable as a policy (said above)".to_owned()
                }),
            ),
        };
        let reloaded = reloaded.and_then(|p| with_modes(p, modes));
        let running = policy.current();
        match reloaded.and_then(|p| check_same_resources(&running, &p).map(|()| p)).and_then(|p| policy.store(p)) {
            Ok(swapped) => {
                metrics.count_reload(true);
                tracing::info!(
                    "reloaded the policy from `{}`: {} open connection(s) it refuses cut",
                    path.display(),
                    swapped.cut
                );
                in_force = record_reload(&audit, (control.as_deref(), in_force), path, swapped);
            }
            Err(why) => {
                metrics.count_reload(false);
                tracing::error!("keeping the old policy: {why}");
            }
        }
    }
}

/// Write a SIGHUP reload's `policy-switch` line (it may have cut connections, whose outcomes say so); the policy in
/// force now, which `control` (if any) also learns.
fn record_reload(
    audit: &AuditLog,
    (control, before): (Option<&Control>, InForce),
    path: &Path,
    swapped: Swapped,
) -> InForce {
    let from = control.map_or(before, Control::in_force);
    let to = InForce::reloaded(path, from.switched_to.clone());
    if let Err(e) = record_swap(audit, (&from, &to), swapped, ("sighup", Peer::default())) {
        tracing::error!("{e}");
    }
    if let Some(control) = control {
        control.reloaded(to.clone());
    }
    to
}

/// Where the policy a SIGHUP reloads comes from.
enum Source {
    /// `--policy FILE [--profile NAME]`.
    Policy(PathBuf, Option<String>),
    /// `--task FILE`.
    Task(PathBuf),
}

/// `policy` with the modes the command line turned on.
fn with_modes(policy: leash_policy::Policy, modes: Modes) -> Result<leash_policy::Policy, String> {
    let policy = if modes.audit { policy.into_audit() } else { policy };
    match modes.ask {
        true => policy.into_ask().ok_or_else(|| "--ask needs an allowlist, and the file is not one".to_owned()),
        false => Ok(policy),
    }
}

fn reload(path: &std::path::Path, profile: Option<&str>) -> Result<leash_policy::Policy, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
    let format = leash_policy::Format::from_path(path).ok_or("unknown file extension")?;
    match leash_policy::load(&text, format, profile) {
        Ok(l) => Ok(l.policy),
        Err(errors) => Err(errors.iter().map(|e| located(path, e)).collect::<Vec<_>>().join("; ")),
    }
}

/// Bind `--metrics`, if given. The address is the operator's: the proxy's own, where clients are sent, is refused.
async fn bind_metrics(addr: Option<SocketAddr>, proxy: &TcpListener) -> Result<Option<TcpListener>, Failure> {
    let Some(addr) = addr else { return Ok(None) };
    if let Some(listening) = proxy.local_addr().ok().filter(|l| overlaps(addr, *l)) {
        return Err(Failure::usage(format!(
            "--metrics `{addr}` would be the proxy's own address ({listening}); give the metrics another"
        )));
    }
    TcpListener::bind(addr)
        .await
        .map(Some)
        .map_err(|e| Failure::usage(format!("cannot serve metrics on `{addr}`: {e}")))
}

/// Whether sockets bound at `a` and `b` would take each other's connections: one port, one address or every one.
fn overlaps(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port() && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

/// The policy's services, bound: each port on the proxy's own address (where the sandboxes it serves reach it),
/// each Unix socket at its path. A port the proxy or the metrics already take is exit 2.
fn bind_services(
    policy: &leash_policy::Policy,
    proxy: &TcpListener,
    metrics: Option<SocketAddr>,
) -> Result<(Vec<leash_proxy::ServiceSocket>, services::SocketFiles), Failure> {
    let proxy = proxy.local_addr().map_err(|e| Failure::usage(format!("cannot read the proxy's own address: {e}")))?;
    let mut sockets = Vec::new();
    for (name, port) in services::ports(policy) {
        let addr = SocketAddr::new(proxy.ip(), port);
        if overlaps(addr, proxy) || metrics.is_some_and(|m| overlaps(addr, m)) {
            return Err(Failure::usage(format!(
                "service `{name}` would listen on {addr}, which the proxy or its metrics take already"
            )));
        }
        let listener = std::net::TcpListener::bind(addr)
            .map_err(|e| Failure::usage(format!("service `{name}`: cannot listen on {addr}: {e}")))?;
        tracing::info!("service {name}: listening on {addr}");
        sockets.push(leash_proxy::ServiceSocket { name, listener: leash_proxy::ServiceListener::Tcp(listener) });
    }
    let (unix, files) = services::bind_sockets(policy)?;
    sockets.extend(unix);
    services::announce(policy);
    Ok((sockets, files))
}

/// Print `metrics on ADDR` (after the `listening on` line) and serve the metrics until leash exits.
fn serve_metrics(listener: TcpListener, metrics: &Arc<Metrics>, policy: &PolicyHandle) {
    if let Ok(addr) = listener.local_addr() {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "metrics on {addr}").and_then(|()| out.flush());
    }
    let serving = leash_proxy::serve_metrics(listener, metrics.clone(), policy.clone(), std::future::pending());
    tokio::spawn(serving);
}
