//! What `leash run` and `leash docker` share (and, for the `--resolve` pins, `leash proxy`): the policy (a file, or inline `--allow`/`--block`; with neither,
//! nothing is allowed), the `--resolve` pins, the audit log (standard error without `--log`, after the command where
//! it shares that), and the proxy's configuration around them with TLS inspection on.

use std::collections::HashMap;
use std::net::IpAddr;

use std::sync::Arc;

use leash_policy::Policy;
use leash_proxy::credentials::Secrets;
use leash_proxy::{AuditLog, Inspection, Limits, OwnAddrs, PolicyHandle, ProxyConfig, SystemResolver};

use crate::cli::SandboxProxyArgs;
use crate::exit::{Exit, Failure};
use crate::policy_file::load_file;

/// `--resolve` answers, by name.
pub type Pins = HashMap<Box<str>, Vec<IpAddr>>;

/// The `--resolve NAME:IP` pins; a malformed one is exit 2.
pub fn parse_pins(specs: &[String]) -> Result<Pins, Failure> {
    let mut pins = Pins::new();
    for spec in specs {
        let (name, ip) = leash_proxy::resolve::parse_pin(spec).map_err(|e| Failure::usage(format!("--resolve {e}")))?;
        pins.entry(name).or_default().push(ip);
    }
    Ok(pins)
}

/// The policy, the pins and the audit log (not yet shared: `leash docker` adds the container ID once known).
/// Without `--log`, the log goes to standard error; where the sandboxed command shares it (`stderr_shared`), it is
/// kept aside until [`keep_deferred_log`]: lines written there while the command runs could be forged, interleaved
/// or read away by it.
///
/// An invalid policy is exit 2, like a usage error: 1 is an ordinary status of the wrapped command.
pub fn proxy_parts(args: &SandboxProxyArgs, stderr_shared: bool) -> Result<ProxyParts, Failure> {
    let policy = match (&args.policy, &args.task) {
        (Some(path), _) => load_file(path, args.profile.as_deref()).map_err(|f| f.with_exit(Exit::Usage))?.policy,
        (None, Some(task)) => crate::policy_file::load_task(task).map_err(|f| f.with_exit(Exit::Usage))?.0.policy,
        (None, None) => crate::policy_file::inline(&args.allow, &args.block)?,
    };
    let policy = crate::policy_file::bounded(policy, args.boundary.as_deref())?;
    if args.policy.is_none() && args.task.is_none() && args.allow.is_empty() && args.block.is_empty() {
        tracing::warn!("no policy (--policy FILE, --allow HOST or --block RULE): every request is refused");
    }
    let policy = audit_mode(policy, args.audit);
    let policy = crate::shared::ask::ask_mode(policy, &args.ask)?;
    let secrets = Arc::new(crate::shared::secrets::read_or_exit(&policy)?);
    let upstream_auth = crate::shared::secrets::upstream_auth_or_exit(&policy)?;
    let pins = parse_pins(&args.resolve)?;
    let audit = match &args.log {
        None if stderr_shared => AuditLog::deferred(&leash_sandbox::scratch_dir()).map_err(|e| {
            Failure::sandbox_failed(format!("cannot keep the audit log until the command ends: {e}; pass --log FILE"))
        })?,
        None => AuditLog::stderr(),
        Some(path) => AuditLog::open(path).map_err(|e| {
            Failure::usage(format!("cannot open the audit log `{}`: {e}; not starting without it", path.display()))
        })?,
    };
    Ok(ProxyParts { policy, pins, audit, secrets: Secured { secrets, upstream_auth } })
}

/// What a sandbox's proxy is made of, read before anything of the sandbox exists: the policy, the `--resolve` pins,
/// the audit log (not yet shared: `leash docker` adds the container ID once known) and the credentials' secrets.
pub struct ProxyParts {
    pub policy: Policy,
    pub pins: Pins,
    pub audit: AuditLog,
    pub secrets: Secured,
}

/// What leash read at start that the sandbox must never hold: the credentials' secrets and the upstream proxy's
/// `Proxy-Authorization`.
pub struct Secured {
    pub secrets: Arc<Secrets>,
    pub upstream_auth: Option<Arc<str>>,
}

/// Keeps a deferred log (a run without `--log`) once nothing of the sandbox runs any more: in a file of its own
/// under [`runs_dir`], whose path is said on stderr (unless `quiet`); its lines on stderr only where no such file can
/// be written, so nothing is lost. A run that logged nothing leaves no file.
pub fn keep_deferred_log(audit: &AuditLog, quiet: bool) {
    let kept = runs_dir().ok_or_else(|| "neither XDG_STATE_HOME nor HOME is set".to_owned()).and_then(|dir| {
        save_deferred(audit, &dir).map_err(|e| format!("cannot write it under `{}`: {e}", dir.display()))
    });
    match kept {
        Ok(Some(path)) if !quiet => eprintln!("leash: the audit log of this run is in {}", path.display()),
        Ok(_) => {}
        Err(why) => {
            eprintln!("leash: the audit log is not kept in a file ({why}); here are its lines:");
            if let Err(e) = audit.replay_deferred(&mut std::io::stderr().lock()) {
                eprintln!("leash: cannot write the audit log to standard error: {e}");
            }
        }
    }
}

/// `runs` and its parent `leash` are directories, not symlinks: an earlier run's command could have made them point
/// anywhere, to be hidden (a tmpfs over it) in every later run, or written into.
fn is_real_dir(runs: &std::path::Path) -> bool {
    let plain = |p: &std::path::Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_dir());
    plain(runs) && runs.parent().is_some_and(plain)
}

/// Where runs without `--log` keep their audit logs: `$XDG_STATE_HOME/leash/runs`, by default
/// `~/.local/state/leash/runs`. Hidden inside every later run (see [`hidden_files`]): under a blocklist, an earlier
/// run's refusals say what the task must not see.
pub fn runs_dir() -> Option<std::path::PathBuf> {
    let set = |name| std::env::var_os(name).filter(|v| !v.is_empty()).map(std::path::PathBuf::from);
    let state = set("XDG_STATE_HOME").or_else(|| set("HOME").map(|home| home.join(".local/state")))?;
    Some(state.join("leash/runs"))
}

/// The deferred lines in a new file (mode 0600) in `dir` (made 0700), named by the time and leash's pid; `None` when
/// there were none (the file is removed).
fn save_deferred(audit: &AuditLog, dir: &std::path::Path) -> std::io::Result<Option<std::path::PathBuf>> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    // Nothing to keep: no directory made, no file created only to be removed (a run's end is on its start-up's
    // clock: `leash run -- true`).
    if audit.deferred_is_empty() {
        return Ok(None);
    }
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    if !is_real_dir(dir) {
        return Err(std::io::Error::other("it or its parent `leash` is not a plain directory (a symlink?)"));
    }
    let stamp: String = leash_proxy::audit::now_rfc3339().chars().take(19).filter(|c| *c != ':').collect();
    let path = dir.join(format!("{stamp}Z-{}.jsonl", std::process::id()));
    // `create_new` (O_EXCL) follows no symlink at the path.
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path)?;
    audit.replay_deferred(&mut file)?;
    if file.metadata()?.len() == 0 {
        drop(file);
        std::fs::remove_file(&path)?;
        return Ok(None);
    }
    file.sync_all()?;
    Ok(Some(path))
}

/// The files the command must not reach, by their absolute paths: the audit log (it exists: it was opened), the
/// policy file, which may say where secrets live and, under a blocklist, what the task must not see, and the audit
/// logs earlier runs kept ([`runs_dir`]), which say the same.
pub fn hidden_files(args: &SandboxProxyArgs) -> Vec<std::path::PathBuf> {
    let runs = runs_dir().filter(|dir| is_real_dir(dir));
    let files = args.log.iter().chain(&args.policy).chain(&args.task).chain(&runs);
    files.filter_map(|p| std::fs::canonicalize(p).ok()).collect()
}

/// The host files that decide where leash connects and whom it trusts, which it reads while a command runs (glibc
/// reads the hosts file and its module list at each lookup, the resolver's configuration when it changes; a trust
/// root file named by the environment or `upstream_ca`): those a process of this uid could change, to be read-only
/// inside, with every directory above them pinned (`SandboxSpec::read_only_paths`). As root that is every one (the
/// command is root on the host's files); otherwise only those the caller could write or rename, which a system's own
/// are not. One inside another is left to the outer one. The trust roots leash inspects with are also read before
/// the command starts (`Inspection::load_system_roots`), so this is the second wall for them; it also keeps a
/// poisoned file from outliving the run.
pub fn host_inputs(upstream_ca: &[std::path::PathBuf]) -> Vec<std::path::PathBuf> {
    let from_env = ["SSL_CERT_FILE", "SSL_CERT_DIR"].into_iter().filter_map(std::env::var_os).map(Into::into);
    let named = HOST_INPUTS.iter().map(std::path::PathBuf::from).chain(from_env).chain(upstream_ca.iter().cloned());
    let root = rustix::process::geteuid().is_root();
    let mut found: Vec<std::path::PathBuf> = named
        .filter_map(|p| std::fs::canonicalize(p).ok())
        // The sandbox covers /etc/resolv.conf with its own: the host's is out of reach where that is the file; a
        // link's target (systemd's stub file, say) is not.
        .filter(|p| p != std::path::Path::new("/etc/resolv.conf"))
        .filter(|p| root || changeable_here(p))
        .collect();
    found.sort();
    found.dedup();
    let outer = found.clone();
    found.retain(|p| !outer.iter().any(|o| o != p && p.starts_with(o)));
    found
}

/// The files and directories of [`host_inputs`] every system may have: glibc's (the hosts file, the name-service
/// modules, the resolver's configuration) and the trust roots' directories OpenSSL and the distributions use (where
/// rustls-native-certs and openssl-probe look).
const HOST_INPUTS: [&str; 5] = ["/etc/hosts", "/etc/nsswitch.conf", "/etc/resolv.conf", "/etc/ssl", "/etc/pki"];

/// Whether this uid could change `path`: write it, or rename it or a directory above it (write a directory above).
fn changeable_here(path: &std::path::Path) -> bool {
    let writable = |p: &std::path::Path| rustix::fs::access(p, rustix::fs::Access::WRITE_OK).is_ok();
    writable(path) || path.ancestors().skip(1).any(writable)
}

/// The files credentials' secrets are read from: hidden inside like the policy file (they exist: leash read them).
pub fn secret_files(policy: &Policy) -> Vec<std::path::PathBuf> {
    let files = policy.credentials().iter().filter_map(|c| match &c.source {
        leash_policy::SecretSource::File(path) => std::fs::canonicalize(path).ok(),
        leash_policy::SecretSource::Env(_) => None,
    });
    files.collect()
}

/// What tells the command it runs behind leash, and in which mode (never the rules), so an agent can say "the network
/// policy refused this" instead of retrying: `allowlist`, `blocklist`, `audit` or `ask` (a request may be held while
/// a person is asked).
pub const MODE_VAR: &str = "LEASH_NETWORK_MODE";

/// `policy`, in audit mode when `--audit` asks for it; either way an audit-mode policy is announced, because it
/// enforces only the destination rules.
pub fn audit_mode(policy: Policy, audit: bool) -> Policy {
    let policy = if audit { policy.into_audit() } else { policy };
    if let Some(up) = policy.upstream_proxy() {
        tracing::warn!(
            "upstream proxy {}: names are resolved there, so leash cannot refuse a name that resolves to an internal \
             address for requests through it (names, IP literals, ports, paths and credentials are still decided by \
             leash); that check is now the upstream proxy's job",
            up.authority()
        );
    }
    if policy.audits() {
        tracing::warn!(
            "audit mode: what the policy's host and path rules would refuse is let through and logged as \
             would-block (ports, IP literals and internal destinations are still refused)"
        );
    }
    policy
}

/// [`MODE_VAR`] and its value for `policy`.
pub fn mode_env(policy: &Policy) -> (String, String) {
    let mode = match policy.mode() {
        _ if policy.audits() => "audit",
        _ if policy.asks() => "ask",
        leash_policy::Mode::Allowlist => "allowlist",
        leash_policy::Mode::Blocklist => "blocklist",
    };
    (MODE_VAR.to_owned(), mode.to_owned())
}

/// The proxy's configuration for a sandbox.
pub fn config(
    (policy, pins, secured): (Policy, Pins, Secured),
    audit: Arc<AuditLog>,
    inspection: Option<Arc<Inspection>>,
) -> ProxyConfig {
    ProxyConfig {
        policy: PolicyHandle::new(policy),
        audit,
        resolver: Arc::new(SystemResolver::new(pins)),
        own_addrs: OwnAddrs::Host,
        limits: crate::shared::open_files::fit_open_files(Limits::default()),
        inspection,
        metrics: Arc::default(),
        credentials: secured.secrets,
        upstream_auth: secured.upstream_auth,
        bound: None,
        release_free_memory: Some(leash_sandbox::release_free_memory),
        ask: None,
    }
}

/// Runs `work` on a new runtime with SIGINT, SIGTERM and SIGHUP taken over (before `work` says it is ready, so a
/// harness may stop leash as soon as it reads that).
pub fn with_stop_signals<F: std::future::Future<Output = Result<Exit, Failure>>>(
    work: impl FnOnce(leash_docker::serve::StopSignals) -> F,
) -> Result<Exit, Failure> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::sandbox_failed(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(async move {
        let stop = leash_docker::serve::StopSignals::install()
            .map_err(|e| Failure::sandbox_failed(format!("cannot install the SIGINT/SIGTERM/SIGHUP handlers: {e}")))?;
        work(stop).await
    })
}

#[cfg(test)]
mod tests {
    use leash_policy::{load, Format};

    use super::*;

    #[test]
    fn the_mode_variable_names_each_mode() {
        for (mode, announced) in
            [("allowlist", "allowlist"), ("blocklist", "blocklist"), ("audit", "audit"), ("ask", "ask")]
        {
            let policy = load(&format!("network:\n  mode: {mode}\n"), Format::Yaml, None).unwrap().policy;
            assert_eq!(mode_env(&policy), (MODE_VAR.to_owned(), announced.to_owned()));
        }
    }
}
