//! leash itself, in-process: `Leash::start(policy_yaml)` serves on 127.0.0.1:0 with a recording resolver and its
//! audit log in a tempdir; the test reads the log as JSON values, swaps the policy, and stops it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use leash_policy::{Format, Policy};
use leash_proxy::ask::Asking;
use leash_proxy::{AuditLog, Inspection, Limits, Metrics, PolicyHandle, ProxyConfig, UpstreamTrust};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::resolver::RecordingResolver;
use super::within;

/// Between two looks at the audit log while waiting for a line (a condition wait, bounded by [`super::STEP`]).
const LOG_POLL: Duration = Duration::from_millis(10);

/// Limits for tests: the defaults, with timeouts short enough that a test about them runs in seconds.
pub fn test_limits() -> Limits {
    Limits {
        head_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(10),
        client_hello_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(2),
        response_timeout: Duration::from_secs(10),
        drain_timeout: Duration::from_secs(3),
        ..Limits::default()
    }
}

/// Parse a YAML policy or fail the test with the engine's errors.
pub fn policy(yaml: &str) -> Policy {
    match leash_policy::load(yaml, Format::Yaml, None) {
        Ok(loaded) => loaded.policy,
        Err(errors) => panic!("test policy does not load: {errors:#?}\n{yaml}"),
    }
}

/// An allowlist of `hosts`, plain-HTTP `ports` and `tunnel_ports`, with loopback exempt from the destination check
/// (the origins listen there).
pub fn allowlist(hosts: &[&str], ports: &[u16], tunnel_ports: &[u16]) -> String {
    format!(
        "network:\n  mode: allowlist\n  allowed_hosts: {}\n  ports: {}\n  tunnel_ports: {}\n  allow_destinations: [127.0.0.0/8]\n",
        quoted(hosts),
        plain(ports),
        plain(tunnel_ports)
    )
}

/// A blocklist of `urls`, with loopback exempt from the destination check.
pub fn blocklist(urls: &[&str], ports: &[u16], tunnel_ports: &[u16]) -> String {
    format!(
        "network:\n  mode: blocklist\n  blocked_urls: {}\n  ports: {}\n  tunnel_ports: {}\n  allow_destinations: [127.0.0.0/8]\n",
        quoted(urls),
        plain(ports),
        plain(tunnel_ports)
    )
}

/// A YAML flow list of quoted strings.
pub fn quoted(items: &[&str]) -> String {
    let items: Vec<String> = items.iter().map(|i| format!("\"{i}\"")).collect();
    format!("[{}]", items.join(", "))
}

/// A YAML flow list of numbers.
pub fn plain(items: &[u16]) -> String {
    let items: Vec<String> = items.iter().map(u16::to_string).collect();
    format!("[{}]", items.join(", "))
}

/// Where the audit log goes.
pub enum Audit {
    /// `audit.jsonl` in the run's tempdir.
    TempFile,
    /// A given path (e.g. `/dev/full`, where every write fails).
    At(PathBuf),
}

pub struct Builder {
    yaml: String,
    limits: Limits,
    audit: Audit,
    /// PEM text of the CA upstreams are verified against; `Some` turns TLS inspection on.
    inspect_trusting: Option<String>,
    /// Ports to listen on transparently, at 127.0.0.2 (as `leash run` does at the DNS stub's address).
    transparent: Vec<u16>,
    /// The secrets of the policy's credentials.
    secrets: Arc<leash_proxy::credentials::Secrets>,
    /// `Proxy-Authorization` for the policy's upstream proxy.
    upstream_auth: Option<Arc<str>>,
    /// The policy's services' listeners, bound by the test.
    services: Vec<leash_proxy::ServiceSocket>,
    /// A connection bound shared with other proxies of the test.
    bound: Option<leash_proxy::ConnectionBound>,
    /// Ask mode's question timeout; `Some` gives the proxy someone to ask (the test answers through [`Leash::ask`]).
    ask_timeout: Option<Duration>,
    /// A boundary's YAML the policy is held inside (`--boundary`).
    boundary: Option<String>,
}

impl Builder {
    pub fn limits(mut self, f: impl FnOnce(&mut Limits)) -> Self {
        f(&mut self.limits);
        self
    }

    /// TLS inspection on, verifying upstreams against `ca_pem` only (never the system roots: tests stay offline).
    pub fn inspecting(mut self, ca_pem: &str) -> Self {
        self.inspect_trusting = Some(ca_pem.to_owned());
        self
    }

    /// Also listen transparently on 127.0.0.2:`port` (the origins are on 127.0.0.1, so the same port is free).
    pub fn transparent(mut self, port: u16) -> Self {
        self.transparent.push(port);
        self
    }

    /// `user:password` for the policy's upstream proxy, as leash reads it at start.
    pub fn upstream_auth(mut self, user_password: &str) -> Self {
        self.upstream_auth = Some(leash_proxy::credentials::basic_authorization(user_password).into());
        self
    }

    /// The credentials' secrets and placeholders, as leash reads them at start.
    pub fn secrets(mut self, secrets: leash_proxy::credentials::Secrets) -> Self {
        self.secrets = Arc::new(secrets);
        self
    }

    /// Serve the policy's service `name` on `listener` (bound by the test, so its port can be in the policy).
    pub fn service(mut self, name: &str, listener: leash_proxy::ServiceListener) -> Self {
        self.services.push(leash_proxy::ServiceSocket { name: Arc::from(name), listener });
        self
    }

    /// Serve under `bound`, shared with other proxies (as `leash attach --dir` does per attachment).
    pub fn bound(mut self, bound: leash_proxy::ConnectionBound) -> Self {
        self.bound = Some(bound);
        self
    }

    /// Ask mode on: requests the (`mode: ask`) policy refuses as `not-allowed` are held until the test answers them
    /// through [`Leash::ask`], or `timeout` passes.
    pub fn asking(mut self, timeout: Duration) -> Self {
        self.ask_timeout = Some(timeout);
        self
    }

    /// Hold the policy inside the boundary `yaml` (as `--boundary FILE` does).
    pub fn boundary(mut self, yaml: &str) -> Self {
        self.boundary = Some(yaml.to_owned());
        self
    }

    pub fn audit_at(mut self, path: &Path) -> Self {
        self.audit = Audit::At(path.to_owned());
        self
    }

    pub async fn start(self) -> Leash {
        let dir = tempfile::tempdir().expect("tempdir");
        let log_path = match self.audit {
            Audit::TempFile => dir.path().join("audit.jsonl"),
            Audit::At(p) => p,
        };
        let audit = Arc::new(AuditLog::open(&log_path).expect("open audit log"));
        let resolver = Arc::new(RecordingResolver::new());
        let bounded = |p: Policy| match &self.boundary {
            Some(b) => p.within(Arc::new(leash_policy::Boundary::new(policy(b), "boundary.yaml").unwrap())).unwrap(),
            None => p,
        };
        let handle = PolicyHandle::new(bounded(policy(&self.yaml)));
        let metrics = Arc::new(Metrics::default());
        let inspection = self.inspect_trusting.map(|pem| {
            let upstream_ca = dir.path().join("upstream-ca.pem");
            std::fs::write(&upstream_ca, pem).expect("write upstream CA");
            let trust = UpstreamTrust { system_roots: false, extra_ca_files: vec![upstream_ca] };
            Arc::new(Inspection::new(&trust).expect("inspection"))
        });
        let ask = self.ask_timeout.map(|timeout| Arc::new(Asking::new(timeout, metrics.clone())));
        let ca_path = inspection.as_ref().map(|i| {
            let path = dir.path().join("leash-ca.pem");
            std::fs::write(&path, i.ca_pem()).expect("write leash CA");
            path
        });
        let config = ProxyConfig {
            policy: handle.clone(),
            audit: audit.clone(),
            resolver: resolver.clone(),
            own_addrs: leash_proxy::OwnAddrs::Given(Arc::from(Vec::new())),
            limits: self.limits,
            inspection: inspection.clone(),
            metrics: metrics.clone(),
            credentials: self.secrets.clone(),
            upstream_auth: self.upstream_auth.clone(),
            bound: self.bound,
            release_free_memory: None,
            ask: ask.clone(),
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let (stop, stopped) = oneshot::channel::<()>();
        let mut transparent = Vec::new();
        for port in &self.transparent {
            transparent.push(super::bind_second_loopback(*port).await);
        }
        let listeners = leash_proxy::Listeners { proxy: listener, transparent, services: self.services };
        let task = tokio::spawn(leash_proxy::serve_listeners(listeners, config, async move {
            let _ = stopped.await;
        }));
        Leash {
            addr,
            resolver,
            policy: handle,
            metrics,
            audit,
            log_path,
            inspection,
            ca_path,
            ask,
            _dir: dir,
            stop: Some(stop),
            task: Some(task),
        }
    }
}

/// A running proxy.
pub struct Leash {
    pub addr: SocketAddr,
    pub resolver: Arc<RecordingResolver>,
    pub policy: PolicyHandle,
    /// The proxy's counters, as `leash proxy --metrics` serves them.
    pub metrics: Arc<Metrics>,
    /// The audit log the proxy writes (at `log_path`), for what `leash proxy`'s SIGHUP does to it (`reopen`).
    pub audit: Arc<AuditLog>,
    pub log_path: PathBuf,
    /// TLS inspection, when the builder turned it on.
    pub inspection: Option<Arc<Inspection>>,
    /// leash's CA certificate (PEM file), when inspecting: what clients trust.
    pub ca_path: Option<PathBuf>,
    /// Ask mode's questions, when the builder turned it on: the test lists and answers them.
    pub ask: Option<Arc<Asking>>,
    _dir: tempfile::TempDir,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl Leash {
    /// A client configuration trusting this leash's CA alone (it must be inspecting).
    pub fn trusting_client(&self) -> rustls::ClientConfig {
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        let pem = std::fs::read(self.ca_path.as_ref().expect("an inspecting leash")).unwrap();
        roots.add(rustls::pki_types::CertificateDer::from_pem_slice(&pem).unwrap()).unwrap();
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth()
    }

    /// Serve `yaml` with the test limits.
    pub async fn start(yaml: &str) -> Leash {
        Leash::builder(yaml).start().await
    }

    pub fn builder(yaml: &str) -> Builder {
        Builder {
            yaml: yaml.to_owned(),
            limits: test_limits(),
            audit: Audit::TempFile,
            inspect_trusting: None,
            transparent: Vec::new(),
            secrets: Arc::default(),
            upstream_auth: None,
            services: Vec::new(),
            bound: None,
            ask_timeout: None,
            boundary: None,
        }
    }

    /// `http://ADDR`, for clients' proxy settings.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Replace the policy (what SIGHUP and `leash policy switch` do): what it did, open connections cut included.
    pub fn reload(&self, yaml: &str) -> leash_proxy::Swapped {
        self.policy.store(policy(yaml)).unwrap()
    }

    /// The audit log's lines so far.
    pub fn log(&self) -> Vec<Value> {
        read_log(&self.log_path)
    }

    /// Wait until the log holds a line for which `pred` holds; returns the whole log then.
    pub async fn log_until(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
        within(what, async {
            loop {
                let lines = self.log();
                if lines.iter().any(&pred) {
                    return lines;
                }
                tokio::time::sleep(LOG_POLL).await;
            }
        })
        .await
    }

    /// The decision line of the request whose `path` (or, for tunnels, `host`) is `key` — waiting for it.
    pub async fn decision(&self, key: &str) -> Value {
        let is =
            |v: &Value| v.get("decision").is_some() && (v["path"] == key || (v["path"].is_null() && v["host"] == key));
        let lines = self.log_until(&format!("a decision line for `{key}`"), is).await;
        lines.into_iter().find(is).unwrap()
    }

    /// The outcome line of request `id` — waiting for it.
    pub async fn outcome(&self, id: &Value) -> Value {
        let is = |v: &Value| v["id"] == *id && v.get("status").is_some();
        let lines = self.log_until("an outcome line", is).await;
        lines.into_iter().find(is).unwrap()
    }

    /// Shut down (in-flight work finishes, the log is flushed) and return the log.
    pub async fn stop(mut self) -> Vec<Value> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let served = within("leash to shut down", task).await.expect("serve task");
            served.expect("serve returned an error");
        }
        // Nothing writes now: a line without its end would be one leash cut.
        let text = std::fs::read_to_string(&self.log_path).unwrap_or_default();
        assert!(text.is_empty() || text.ends_with('\n'), "the log ends inside a line: {text}");
        self.log()
    }
}

impl Drop for Leash {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

pub fn read_log(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    // Only whole lines: leash writes each line in one `write`, but a read beside it can end inside that line (ext4
    // and tmpfs make a write's bytes visible page by page: a line across a page boundary is seen cut at it).
    let whole = text.rfind('\n').map_or("", |end| &text[..=end]);
    whole
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("audit line is not JSON ({e}): {l}")))
        .collect()
}
