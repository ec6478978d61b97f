//! `leash attach --dir DIR`: one leash serving many network namespaces (a node agent's shape). Every attachment
//! file in DIR (`*.yaml`, `*.yml`, `*.toml`: a namespace, a policy, where to listen, labels) is served with its own
//! policy; DIR is looked at every second: a new file is attached, a changed one (or a changed policy file it names)
//! is applied — the policy reloaded in place when only it changed, the namespace attached again otherwise — and a
//! removed one, or one whose namespace is gone, stops being served. A broken file is reported once per version and
//! skipped; the others keep running. Every audit line carries its attachment's labels (and `attachment`, the file's
//! name).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use leash_docker::serve::StopSignals;
use leash_policy::{Attachment, Format, Namespace, Policy};
use leash_proxy::{AuditLog, ConnectionBound, Inspection, PolicyHandle};
use leash_sandbox::{Isolation, Netns};

use crate::cli::{AttachArgs, TlsArgs};
use crate::exit::{Exit, Failure};
use crate::shared::attach::{attach, gone, harden, Target};
use crate::shared::sandboxed::{audit_mode, config, parse_pins, with_stop_signals, Pins, Secured};

/// How often DIR (and the policy files its attachments name) is looked at.
const SCAN_EVERY: Duration = Duration::from_secs(1);

/// Where an attachment's proxy listens when its file does not say.
const DEFAULT_LISTEN: std::net::SocketAddrV4 = std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 3128);

pub fn run(dir: &Path, args: AttachArgs) -> Result<Exit, Failure> {
    harden()?;
    refuse_policy_options(&args)?;
    if !dir.is_dir() {
        return Err(usage(&format!("`{}` is not a directory", dir.display())));
    }
    let pins = parse_pins(&args.proxy.resolve)?;
    let tls = TlsArgs { ca_cert_out: None, ca_bundle_out: None, upstream_ca: args.proxy.upstream_ca.clone() };
    let inspection = crate::shared::tls::inspection(&tls)?;
    let boundary = args.proxy.boundary.as_deref().map(crate::policy_file::load_boundary).transpose()?;
    let agent = Agent {
        dir: dir.to_owned(),
        log: args.proxy.log.clone(),
        audit: args.proxy.audit,
        boundary,
        pins,
        inspection,
        bound: node_bound(),
        next_scope: std::sync::atomic::AtomicU32::new(1),
    };
    with_stop_signals(move |mut stop| async move {
        println!("watching {}", agent.dir.display());
        agent.watch(&mut stop).await;
        Ok(Exit::Ok)
    })
}

/// What every attachment shares.
struct Agent {
    dir: PathBuf,
    /// The audit log file every attachment appends to (standard error without one).
    log: Option<PathBuf>,
    /// `--audit`: every attachment's policy in audit mode.
    audit: bool,
    /// `--boundary`: every attachment's policy is held inside it.
    boundary: Option<Arc<leash_policy::Boundary>>,
    pins: Pins,
    /// One CA for the node: each attachment may write it where its file says.
    inspection: Arc<Inspection>,
    /// One connection bound for the node, each attachment a scope of it (see [`node_bound`]).
    bound: ConnectionBound,
    /// The scope the next attachment gets.
    next_scope: std::sync::atomic::AtomicU32,
}

/// The node's connection bound: what the open-file limit serves, shared by every attachment, and a quarter of it
/// per client — a pod (its loopback clients are one client of its attachment) can never hold the node's
/// connections, and its neighbours keep theirs.
fn node_bound() -> ConnectionBound {
    let limits = crate::shared::open_files::fit_open_files(leash_proxy::Limits::default());
    let per_pod = (limits.max_connections / 4).max(1);
    let limits = leash_proxy::Limits { max_connections_per_client: Some(per_pod), ..limits };
    ConnectionBound::new(&limits, Arc::default(), Some(leash_sandbox::release_free_memory))
}

/// An attachment being served.
struct Running {
    /// The file as it was when attached, to tell a change.
    version: Version,
    /// The policy file it uses, and that file's version, to reload in place.
    policy_file: PathBuf,
    policy_version: Version,
    profile: Option<String>,
    policy: PolicyHandle,
    /// Ends the serving.
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

/// A file's modification time and length: a change in either is a new version.
type Version = Option<(SystemTime, u64)>;

fn version(path: &Path) -> Version {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

impl Agent {
    async fn watch(&self, stop: &mut StopSignals) {
        let mut running: HashMap<PathBuf, Running> = HashMap::new();
        // Broken versions reported already: reported again only once they change.
        let mut broken: HashMap<PathBuf, Version> = HashMap::new();
        loop {
            self.scan(&mut running, &mut broken).await;
            tokio::select! {
                () = tokio::time::sleep(SCAN_EVERY) => {}
                () = stop.recv() => break,
            }
        }
        for (path, r) in running {
            stop_serving(&path, r, "leash is stopping").await;
        }
    }

    /// One look at DIR: attach what is new or changed, reload changed policies, drop what is gone or ended.
    async fn scan(&self, running: &mut HashMap<PathBuf, Running>, broken: &mut HashMap<PathBuf, Version>) {
        let files = attachment_files(&self.dir);
        let gone_files: Vec<PathBuf> = running.keys().filter(|p| !files.contains(p)).cloned().collect();
        for path in gone_files {
            if let Some(r) = running.remove(&path) {
                stop_serving(&path, r, "its file was removed").await;
            }
        }
        broken.retain(|p, _| files.contains(p));
        let ended: Vec<PathBuf> =
            running.iter().filter(|(_, r)| r.task.is_finished()).map(|(p, _)| p.clone()).collect();
        for path in ended {
            running.remove(&path);
            // Attached again only once the file changes: its namespace is gone.
            broken.insert(path.clone(), version(&path));
        }
        for path in files {
            let now = version(&path);
            if let Some(r) = running.get_mut(&path) {
                if r.version == now {
                    reload_if_changed(&path, r, self.audit);
                    continue;
                }
                if let Some(r) = running.remove(&path) {
                    stop_serving(&path, r, "its file changed").await;
                }
            }
            if broken.get(&path) == Some(&now) {
                continue;
            }
            match self.start(&path, now) {
                Ok(Some(r)) => {
                    broken.remove(&path);
                    running.insert(path, r);
                }
                // A policy file: looked at again only once it changes, and never reported.
                Ok(None) => {
                    broken.insert(path, now);
                }
                Err(why) => {
                    tracing::error!("attachment `{}`: {why}; skipped until it changes", path.display());
                    broken.insert(path, now);
                }
            }
        }
    }

    /// Read, check and attach one file. `Ok(None)`: it is no attachment but a policy file (one with a top-level
    /// `network`), kept beside the attachments that name it.
    fn start(&self, path: &Path, file_version: Version) -> Result<Option<Running>, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read it: {e}"))?;
        let format = Format::from_path(path).ok_or("unknown extension")?;
        let a = match leash_policy::load_attachment(&text, format) {
            Ok(a) => a,
            Err(errors) if errors.iter().any(|e| e.entry == "network") => return Ok(None),
            Err(errors) => {
                let list: Vec<String> = errors.iter().map(|e| crate::policy_file::located(path, e)).collect();
                return Err(list.join("; "));
            }
        };
        let base = path.parent().unwrap_or(Path::new("."));
        let policy_file = base.join(&a.policy);
        let policy_version = version(&policy_file);
        let policy = load_policy(&policy_file, a.profile.as_deref(), self.audit)?;
        let policy = match &self.boundary {
            Some(boundary) => policy.within(boundary.clone()).map_err(|problems| problems.join("; "))?,
            None => policy,
        };
        let secrets = crate::shared::secrets::read(&policy).map_err(|e| e.to_string())?;
        let upstream_auth = crate::shared::secrets::upstream_auth(&policy)?;
        if let Some(out) = &a.ca_cert_out {
            std::fs::write(base.join(out), self.inspection.ca_pem()).map_err(|e| format!("cannot write {out}: {e}"))?;
        }
        let target = target(&a, base);
        // The reason is said at once, on its own line; the attachment's line refers to it.
        let attached = attach(&target, &policy).map_err(|failure| {
            failure.report();
            "not attached (the reason is above)".to_owned()
        })?;
        let audit = self.audit_log(path, &a)?;
        let secured = Secured { secrets: Arc::new(secrets), upstream_auth };
        let mut cfg = config((policy, self.pins.clone(), secured), Arc::new(audit), Some(self.inspection.clone()));
        let scope = self.next_scope.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        cfg.bound = Some(self.bound.scope(scope));
        let handle = cfg.policy.clone();
        tracing::info!(
            "attachment `{}`: serving the network namespace {} on {}",
            path.display(),
            target.netns,
            target.listen
        );
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (netns, id) = (target.netns.clone(), attached.id);
        let shown = path.display().to_string();
        let task = tokio::spawn(async move {
            let socket_files = attached.socket_files;
            let ended = async move {
                tokio::select! {
                    _ = stop_rx => {}
                    why = gone(&netns, id) => tracing::info!("attachment `{shown}`: {why}; stopped serving it"),
                }
            };
            attached.inside.serve(cfg, ended).await;
            drop(socket_files);
        });
        let profile = a.profile.clone();
        let policy = handle;
        Ok(Some(Running {
            version: file_version,
            policy_file,
            policy_version,
            profile,
            policy,
            stop: Some(stop_tx),
            task,
        }))
    }

    /// The attachment's own handle on the shared log, labelled.
    fn audit_log(&self, path: &Path, a: &Attachment) -> Result<AuditLog, String> {
        let mut labels: BTreeMap<String, String> = a.labels.clone();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        labels.insert("attachment".to_owned(), name);
        let log = match &self.log {
            Some(file) => AuditLog::open(file).map_err(|e| format!("cannot open the audit log: {e}"))?,
            None => AuditLog::stderr(),
        };
        Ok(log.with_labels(labels))
    }
}

fn target(a: &Attachment, base: &Path) -> Target {
    let netns = match &a.namespace {
        Namespace::Path(p) => Netns::Path(base.join(p)),
        Namespace::Pid(pid) => Netns::Process(*pid),
    };
    Target {
        netns,
        isolation: Isolation { interfaces: a.interfaces.clone(), allow_routes: a.allow_routes },
        canaries: a.canaries.clone(),
        listen: a.listen.unwrap_or(DEFAULT_LISTEN),
        transparent: a.transparent,
    }
}

fn load_policy(path: &Path, profile: Option<&str>, audit: bool) -> Result<Policy, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("cannot read the policy `{}`: {e}", path.display()))?;
    let format = Format::from_path(path).ok_or_else(|| format!("`{}`: unknown extension", path.display()))?;
    let loaded = leash_policy::load(&text, format, profile)
        .map_err(|errors| errors.iter().map(|e| crate::policy_file::located(path, e)).collect::<Vec<_>>().join("; "))?;
    leash_proxy::tls::check_upstream_proxy(&loaded.policy).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(audit_mode(loaded.policy, audit))
}

/// A policy file that changed is loaded again and put in place; an invalid one keeps the old policy (and says so).
/// Credentials are read at attach time, so a policy whose credentials differ is not taken: change the attachment
/// file to attach again.
fn reload_if_changed(path: &Path, r: &mut Running, audit: bool) {
    let now = version(&r.policy_file);
    if now == r.policy_version {
        return;
    }
    // Recorded as seen whatever happens, so a broken policy is reported once.
    r.policy_version = now;
    match load_policy(&r.policy_file, r.profile.as_deref(), audit) {
        Ok(p) if p.credentials() == r.policy.current().credentials() => match r.policy.store(p) {
            Ok(_) => tracing::info!("attachment `{}`: reloaded its policy", path.display()),
            Err(why) => tracing::error!("attachment `{}`: keeping the old policy: {why}", path.display()),
        },
        Ok(_) => tracing::error!("attachment `{}`: its policy's credentials changed; keeping the old", path.display()),
        Err(why) => tracing::error!("attachment `{}`: keeping the old policy: {why}", path.display()),
    }
}

async fn stop_serving(path: &Path, mut r: Running, why: &str) {
    if let Some(stop) = r.stop.take() {
        let _ = stop.send(());
    }
    let _ = r.task.await;
    tracing::info!("attachment `{}`: {why}; stopped serving it", path.display());
}

/// The attachment files in `dir`, sorted.
fn attachment_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && Format::from_path(p).is_some())
        .collect();
    files.sort();
    files
}

/// Refuses proxy options that `--dir` takes from each attachment file instead.
pub fn refuse_policy_options(args: &AttachArgs) -> Result<(), Failure> {
    let p = &args.proxy;
    if p.policy.is_some() || !p.allow.is_empty() || !p.block.is_empty() || p.profile.is_some() {
        return Err(usage("with --dir, each attachment file names its policy: drop --policy, --allow and --block"));
    }
    if args.netns.is_some() || args.pid.is_some() || args.ca_cert_out.is_some() || args.ca_bundle_out.is_some() {
        return Err(usage("with --dir, each attachment file names its namespace and CA files"));
    }
    if p.ask.ask || p.ask.ask_socket.is_some() {
        // Many namespaces would share one terminal and one socket's questions: not offered. An attachment whose
        // policy says `mode: ask` is served as an allowlist (nobody is asked; `not-allowed` is refused).
        return Err(usage("--ask is for one namespace (--netns or --pid), not --dir"));
    }
    Ok(())
}

fn usage(why: &str) -> Failure {
    Failure::new(Exit::Usage, format!("leash attach: {why}"))
}
