//! `leash run -- CMD`: build the policy, start CMD in the sandbox with the proxy's listener bound inside it, serve
//! that listener from here (outside, where upstreams are reachable), and exit with CMD's status once it and every
//! process it left are gone and the audit log is complete.

use std::ffi::OsString;
use std::sync::Arc;

use leash_proxy::inside::{Bound, Plan, NODE_PROXY_VAR, PROXY_INSIDE, PROXY_VARS};
use leash_proxy::ProxyConfig;
use leash_sandbox::{Sandbox, SandboxSpec};

use crate::cli::{Containment, RunArgs, TlsArgs};
use crate::exit::{Exit, Failure};
use crate::shared::ask::{self, socket, AskFront, PolicySource};
use crate::shared::control::{Control, Fits, InForce};
use crate::shared::sandboxed::{
    config, hidden_files, host_inputs, keep_deferred_log, mode_env, proxy_parts, secret_files, Pins, ProxyParts,
    Secured,
};
use crate::shared::services;
use crate::shared::trust::{CaFiles, BUNDLE_VARS, NODE_VAR};

mod uid;

pub fn run(args: RunArgs) -> Result<Exit, Failure> {
    leash_sandbox::harden_self().map_err(Failure::sandbox_failed)?;
    let mode = if args.advisory { Containment::Advisory } else { args.containment };
    let user = args.user.as_deref().map(uid::parse_user).transpose()?;
    match mode {
        Containment::Userns => match in_user_namespaces(&args, user)? {
            Attempt::Done(exit) => Ok(exit),
            Attempt::NotHere(e) => Err(not_run(e)),
        },
        Containment::Auto => match in_user_namespaces(&args, user)? {
            Attempt::Done(exit) => Ok(exit),
            Attempt::NotHere(e) => uid::fall_back(&args, user, &e),
        },
        Containment::Netns | Containment::UidFirewall | Containment::Advisory => uid::run(&args, user, mode),
    }
}

/// How a try at the user-namespace sandbox ended, when it did not fail: the command ran, or the sandbox could not be
/// set up here and nothing ran.
enum Attempt {
    Done(Exit),
    NotHere(leash_sandbox::SandboxError),
}

/// A sandbox that could not be set up: `NotHere` when this platform refuses the namespaces it needs (another
/// containment may do), else the failure.
fn not_here(e: leash_sandbox::SandboxError) -> Result<Attempt, Failure> {
    if e.is_refused_here() {
        Ok(Attempt::NotHere(e))
    } else {
        Err(not_run(e))
    }
}

/// The command in a sandbox of user namespaces of its own (`--containment userns`).
fn in_user_namespaces(args: &RunArgs, user: Option<leash_sandbox::uid::RunAs>) -> Result<Attempt, Failure> {
    if let Some(user) = user {
        uid::check_user(user)?;
    }
    let ProxyParts { policy, pins, audit, secrets } = proxy_parts(&args.proxy, true)?;
    let audit = Arc::new(audit);
    // INVARIANT: what an `always` answer reads and writes is held before the command runs, never reached by a path
    // it could change.
    let ask_source = policy.asks().then(|| hold_policy(args)).transpose()?;
    let ask_socket = policy.asks().then(|| ask::bind_socket(&args.proxy.ask)).transpose()?;
    let control_socket = bind_control(args, &policy)?;
    // The CA files are named now, so the command's environment can point at them; they are written while the
    // sandbox's namespaces are built, and exist before the command starts. A policy that never inspects needs no
    // CA (an `--upstream-ca` is still read, so a bad one is refused as always).
    let needs_ca = policy.may_inspect();
    if !needs_ca {
        check_upstream_ca(args)?;
    }
    let ca_files = create_ca_files(needs_ca)?;
    let asks = policy.asks().then_some(args.proxy.ask.ask_timeout);
    // What the command is given: the proxy on the sandbox's loopback, the DNS stub, a transparent listener per port
    // the policy allows and a listener per service port, as many as the sandbox hands back.
    let plan = Plan::proxy_at(PROXY_INSIDE)
        .with_services(&services::ports(&policy))
        .with_dns_and_transparent(&policy, leash_sandbox::MAX_SOCKETS);
    let mut spec = spec(args, &plan, ca_files.is_some(), mode_env(&policy), asks);
    add_test_flaw(&mut spec);
    spec.run_as = user.map(|u| (u.uid, u.gid));
    spec.hide_paths.extend(secret_files(&policy));
    // The caller's own consoles (a virtual console, a serial line): the command holds a pseudo-terminal instead.
    spec.hide_paths.extend(crate::shared::consoles::callers_terminals());
    // INVARIANT: the control socket's directory is not visible inside: the command cannot even see the questions.
    spec.hide_paths.extend(ask_socket.iter().filter_map(|s| std::fs::canonicalize(s.dir()).ok()));
    // INVARIANT: the control socket's directory (`--control`) is not visible inside: the command cannot switch the policy.
    spec.hide_paths.extend(control_socket.iter().filter_map(|s| std::fs::canonicalize(s.dir()).ok()));
    spec.env.extend(ca_files.iter().flat_map(CaFiles::env));
    // The sandbox has a /dev/shm of its own: the CA's directory, where it is below the host's, is kept visible there.
    let in_shm = |dir: &&std::path::Path| dir.parent() == Some(std::path::Path::new("/dev/shm"));
    spec.keep_in_shm.extend(ca_files.iter().map(CaFiles::dir).filter(in_shm).map(std::path::Path::to_path_buf));
    crate::shared::secrets::sandbox_env(&policy, &secrets.secrets, &mut spec.env);
    // The services' sockets exist before the sandbox does: it is let connect to exactly those files.
    let (unix_services, socket_files) = services::bind_sockets(&policy)?;
    spec.allow_unix_sockets.extend(socket_files.paths().iter().cloned());
    services::announce(&policy);
    spec.env.extend(services::no_proxy_env(&policy));
    // A signal sent once the command runs but before forwarding is armed waits, rather than ending leash (with the
    // caller's terminal raw, below). Taken before any other thread exists (the relays', the runtime's blocking pool),
    // which inherits it, so only the main thread ever takes those signals.
    let hold = leash_sandbox::hold_forwarded_signals().map_err(|e| tracing::warn!("{e}")).ok();
    // A socket on leash's stdio is the host network namespace's, a terminal the caller's: the command gets a pipe
    // or a pseudo-terminal of its own instead.
    let mut relay = leash_sandbox::relay_stdio(&mut spec)
        .map_err(|e| Failure::sandbox_failed(format!("the command was not run: cannot relay its stdio: {e}")))?;
    // The init is cloned before the CA's key exists, so its copy of leash's memory never holds it.
    let pending = match Sandbox::prepare(spec) {
        Ok(p) => p,
        Err(e) => return not_here(e),
    };
    // On an early return, dropping `pending` ends the init: the command never starts.
    let mut config = proxy_config(args, (policy, pins, secrets), audit.clone(), ca_files.as_ref())?;
    let ask = ask_socket.zip(ask_source).map(|(socket, source)| Arc::new(ask_front(args, socket, source, &config)));
    let sandbox_plan = |policy: &leash_policy::Policy| {
        Plan::proxy_at(PROXY_INSIDE)
            .with_services(&services::ports(policy))
            .with_dns_and_transparent(policy, leash_sandbox::MAX_SOCKETS)
    };
    let control = control_socket
        .map(|socket| make_control(args, socket, &config, fits_run(sandbox_plan, &plan, ca_files.is_some())));
    config.ask = ask.as_ref().map(|front| front.asking.clone());
    // The runtime is built while the init starts the command. One thread: starting, waking and ending worker
    // threads was a sixth of `leash run -- true` (6.7 -> 5.7 ms), and one sandbox's traffic fits one core (tunnels are
    // spliced by the kernel; bench/RESULTS.md has the figures from inside `leash run`).
    let runtime = || tokio::runtime::Builder::new_current_thread().enable_all().build();
    let (mut sandbox, runtime) = match pending.start_with(runtime) {
        Ok(started) => started,
        Err(e) => return not_here(e),
    };
    // The command's terminal was made inside the sandbox: from now on it reaches the caller's.
    if let Err(e) = relay.attach(&mut sandbox) {
        return Err(stop(&sandbox, format!("cannot relay the command's terminal: {e}")));
    }
    let runtime = runtime.map_err(|e| stop(&sandbox, format!("cannot start the async runtime: {e}")))?;
    if let Some(front) = &ask {
        if let Err(e) = start_asking(front, &relay, &runtime) {
            return Err(stop(&sandbox, format!("ask mode: cannot serve the control socket: {e}")));
        }
    }
    if let Some(control) = &control {
        let _entered = runtime.enter();
        if let Err(e) = Control::serve(control) {
            return Err(stop(&sandbox, format!("cannot serve the control socket: {e}")));
        }
    }
    let policy = config.policy.clone();
    // A failure once the command ran is said before the summary of what it did.
    let exit =
        supervise(sandbox, (config, &plan, unix_services), (hold, relay), runtime).unwrap_or_else(Failure::report);
    keep_deferred_log(&audit, args.quiet);
    crate::shared::summary::print(&audit, &policy, args.quiet);
    if let Some(summary) = ask.as_ref().and_then(|front| front.summary()).filter(|_| !args.quiet) {
        eprint!("{summary}");
    }
    drop(ask);
    drop(control);
    drop(ca_files);
    drop(socket_files);
    Ok(Attempt::Done(exit))
}

/// The run's CA directory, where the policy may inspect (`needed`).
fn create_ca_files(needed: bool) -> Result<Option<CaFiles>, Failure> {
    needed.then(CaFiles::create).transpose().map_err(|e| {
        Failure::sandbox_failed(format!("the command was not run: cannot create the run's CA directory: {e}"))
    })
}

/// Ends a command that started, after a failure of leash's own (`why`): the failure, with the command's status (or
/// exit 125 where leash lost track of it).
fn stop(sandbox: &Sandbox, why: String) -> Failure {
    let said = format!("leash: {why}; stopping the command");
    match finish(sandbox.signal(9).and_then(|()| sandbox.wait())) {
        Ok(exit) => Failure::new(exit, said),
        Err(lost) => Failure::new(Exit::SandboxFailed, format!("{said}\n{lost}")),
    }
}

/// `--control`'s socket, bound before anything of the sandbox exists (its directory is hidden inside); not in ask
/// mode, whose `always` answers write the policy file the run started with.
pub(super) fn bind_control(args: &RunArgs, policy: &leash_policy::Policy) -> Result<Option<socket::Bound>, Failure> {
    let Some(path) = &args.control else { return Ok(None) };
    if policy.asks() {
        return Err(Failure::usage(
            "--control cannot be used in ask mode: its `always` answers write the policy file the run started with",
        ));
    }
    Control::bind(path).map(Some)
}

/// The run's control: switches of `config`'s policy, on its audit log, that `fits` the run.
pub(super) fn make_control(args: &RunArgs, socket: socket::Bound, config: &ProxyConfig, fits: Fits) -> Arc<Control> {
    let proxy = &args.proxy;
    let start = InForce::at_start(proxy.policy.as_deref().or(proxy.task.as_deref()), &proxy.allow, &proxy.block);
    Arc::new(Control::new(socket, (config.policy.clone(), config.audit.clone()), start, proxy.audit, fits))
}

/// What a new policy must keep of a run built from `bound` (the listeners `plan_of` lays out for a policy): it may
/// need fewer transparent listeners, never one the sandbox does not hold (services and credentials are checked
/// apart); and it inspects TLS only where the run has a CA (`has_ca`), which the command trusts from its start.
pub(super) fn fits_run(
    plan_of: impl Fn(&leash_policy::Policy) -> Plan + Send + Sync + 'static,
    bound: &Plan,
    has_ca: bool,
) -> Fits {
    let (tcp, udp) = (bound.tcp(), bound.udp());
    Box::new(move |new| {
        let wanted = plan_of(new);
        let missing: Vec<String> = wanted.tcp().iter().filter(|a| !tcp.contains(a)).map(ToString::to_string).collect();
        if !missing.is_empty() || wanted.udp().iter().any(|a| !udp.contains(a)) {
            return Err(format!(
                "its ports need listeners the sandbox was not built with ({}): start a new run with it",
                missing.join(", ")
            ));
        }
        if new.may_inspect() && !has_ca {
            return Err("it inspects TLS, and this run has no CA (its first policy never inspects), which the \
                        command would have to trust from its start: start a new run with it"
                .into());
        }
        Ok(())
    })
}

/// The policy file an `always` answer changes, held now.
fn hold_policy(args: &RunArgs) -> Result<PolicySource, Failure> {
    PolicySource::hold(args.proxy.policy.as_deref(), args.proxy.profile.as_deref(), args.proxy.ask.ask)
}

/// Ask mode's front ends for the run: the bound control socket, and the policy file an `always` answer changes.
fn ask_front(args: &RunArgs, socket: ask::socket::Bound, source: PolicySource, config: &ProxyConfig) -> AskFront {
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
) -> Result<ProxyConfig, Failure> {
    let Some(ca_files) = ca_files else { return Ok(config(parts, audit, None)) };
    let tls = TlsArgs { ca_cert_out: None, ca_bundle_out: None, upstream_ca: args.proxy.upstream_ca.clone() };
    let inspection = crate::shared::tls::inspection(&tls)?;
    // INVARIANT: the roots upstreams are verified against are read before the command starts.
    inspection.load_system_roots();
    ca_files.write(&inspection).map_err(|e| {
        Failure::sandbox_failed(format!("the command was not run: cannot write the run's CA files: {e}"))
    })?;
    Ok(config(parts, audit, Some(inspection)))
}

/// Refuses an unusable `--upstream-ca` (exit 2, as when the CA is made) where no CA is made.
fn check_upstream_ca(args: &RunArgs) -> Result<(), Failure> {
    let trust = leash_proxy::UpstreamTrust { system_roots: true, extra_ca_files: args.proxy.upstream_ca.clone() };
    trust.check().map_err(|e| Failure::usage(format!("cannot set up TLS inspection: {e}")))
}

fn not_run(e: leash_sandbox::SandboxError) -> Failure {
    Failure::sandbox_failed(format!("the command was not run: {e}"))
}

/// The sandbox: CMD, its environment, the proxy's listener inside, the DNS stub's socket and a resolv.conf that points
/// at it, on the sandbox's own loopback (refused names fail at once; no lookup ever reaches a real resolver). `asks`:
/// ask mode's question timeout, in seconds, when the policy asks.
fn spec(args: &RunArgs, plan: &Plan, with_ca: bool, mode: (String, String), asks: Option<u64>) -> SandboxSpec {
    let mut command = args.command.iter();
    let mut spec = SandboxSpec::new(command.next().cloned().unwrap_or_default());
    spec.args = command.cloned().collect();
    spec.env = child_env(inherited_env(args), plan, with_ca, mode);
    spec.tcp_listeners = plan.tcp();
    spec.udp_sockets = plan.udp();
    spec.resolv_conf = Some(resolv_conf(asks));
    spec.allow_unix_sockets = args.allow_unix_socket.clone();
    // INVARIANT: the audit log file is not reachable from inside; leash keeps the only handle that writes it.
    spec.hide_paths = hidden_files(&args.proxy);
    // INVARIANT: what leash reads during the run to decide where it connects and whom it trusts, the command cannot
    // change (as root it could otherwise: a line in /etc/hosts, a CA in the system bundle).
    spec.read_only_paths = host_inputs(&args.proxy.upstream_ca);
    spec.self_test = Some(self_test(plan));
    spec
}

/// The containment self-test, run by the sandbox in the command's place (`leash __sandbox-self-test`, leash's own
/// program as it was at start), expecting the plan's listeners and sockets.
fn self_test(plan: &Plan) -> leash_sandbox::self_test::SelfTest {
    let mut args: Vec<OsString> = vec![crate::shared::probe::IN_SANDBOX.into()];
    for addr in plan.tcp() {
        args.extend(["--expect".into(), addr.to_string().into()]);
    }
    for addr in plan.udp() {
        args.extend(["--expect-udp".into(), addr.to_string().into()]);
    }
    leash_sandbox::self_test::SelfTest { program: "/proc/self/exe".into(), args }
}

/// Where `LEASH_DANGER_TEST_SANDBOX_FLAW=stray-listener` binds a listener leash does not serve.
const STRAY_LISTENER: std::net::SocketAddrV4 =
    std::net::SocketAddrV4::new(std::net::Ipv4Addr::new(127, 0, 0, 99), 4999);

/// A deliberate hole in the sandbox, for the self-test's own test, in a debug build only (never in a release
/// build): `LEASH_DANGER_TEST_SANDBOX_FLAW=stray-listener` has the sandbox bind one more listener on its loopback,
/// which leash holds and never serves, as something on the loopback that is not leash's proxy would be.
fn add_test_flaw(spec: &mut SandboxSpec) {
    if cfg!(debug_assertions)
        && std::env::var_os("LEASH_DANGER_TEST_SANDBOX_FLAW").is_some_and(|f| f == "stray-listener")
    {
        spec.tcp_listeners.push(STRAY_LISTENER);
    }
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
    plan: &Plan,
    with_ca: bool,
    (mode_var, mode): (String, String),
) -> Vec<(OsString, OsString)> {
    // Inherited CA variables would point clients elsewhere than the run's bundle; they are replaced. Without a CA,
    // tunnels are spliced and the caller's own trust settings stay right.
    let replaced = |k: &OsString| {
        PROXY_VARS.iter().any(|v| k == v)
            || k == NODE_PROXY_VAR
            || *k == *mode_var
            || (with_ca && (BUNDLE_VARS.iter().any(|v| k == v) || k == NODE_VAR))
    };
    let mut env: Vec<(OsString, OsString)> = inherited.into_iter().filter(|(k, _)| !replaced(k)).collect();
    env.extend(plan.proxy_env());
    env.push((mode_var.into(), mode.into()));
    env
}

/// Serve the plan's sockets, which the sandbox handed back, until the command has exited, then drain, flush and
/// report.
fn supervise(
    mut sandbox: Sandbox,
    (config, plan, unix_services): (ProxyConfig, &Plan, Vec<leash_proxy::ServiceSocket>),
    (hold, relay): (Option<leash_sandbox::SignalHold>, leash_sandbox::StdioRelay),
    runtime: tokio::runtime::Runtime,
) -> Result<Exit, Failure> {
    let (mut tcp, udp) = (std::mem::take(&mut sandbox.tcp), std::mem::take(&mut sandbox.udp));
    // A test flaw's listener (`add_test_flaw`), past the plan's, is held unserved until the command ends.
    let _stray = tcp.split_off(plan.tcp().len().min(tcp.len()));
    let bound = plan.take(tcp, udp).map(|bound| bound.with_services(unix_services));
    let forwarding = sandbox.forward_signals().map_err(|e| tracing::warn!("signals are not forwarded: {e}"));
    // Armed: a signal held since the spawn is delivered now, and forwarded.
    drop(hold);
    let status = match bound {
        Ok(bound) => runtime.block_on(serve_until_exit(&sandbox, bound, config)),
        Err(e) => Err(leash_sandbox::SandboxError::InitDied(e.to_string())),
    };
    // Every connection is finished and logged: the blocking pool's threads (name lookups) need not be waited for.
    runtime.shutdown_background();
    let exit = match status {
        // Init is tearing the sandbox's namespaces down; leash need not wait for that to exit.
        Ok(s) => {
            sandbox.detach();
            Ok(Exit::Command(u8::try_from(s.code()).unwrap_or(255)))
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

/// The proxy, the transparent and service listeners and the DNS stub, served until the sandbox reports its end.
async fn serve_until_exit(
    sandbox: &Sandbox,
    bound: Bound,
    config: ProxyConfig,
) -> Result<leash_sandbox::ExitStatus, leash_sandbox::SandboxError> {
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(bound.serve(config, async move {
        let _ = stop_rx.await;
    }));
    let status = sandbox.wait_async().await;
    let _ = stop_tx.send(());
    if let Err(e) = serving.await {
        tracing::error!("proxy: {e}");
    }
    status
}

fn finish(status: Result<leash_sandbox::ExitStatus, leash_sandbox::SandboxError>) -> Result<Exit, Failure> {
    match status {
        Ok(s) => Ok(Exit::Command(u8::try_from(s.code()).unwrap_or(255))),
        Err(e) => Err(Failure::sandbox_failed(e)),
    }
}
