//! `leash attach` against real network namespaces: named ones (`ip netns add`), a CNI-style pod namespace with a
//! veth renamed `eth0`, a process's (`--pid`), the transparent mode's DNS stub, and `--dir` serving several at once.
//! Clients run inside the namespaces (`ip netns exec NS curl`), origins on the host's loopback. Needs root and
//! iproute2; without them each test says so and returns, and fails where `LEASH_REQUIRE_SANDBOX` is set (CI). Every
//! namespace, `/etc/netns` entry and leash process is removed by a guard, also when a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test's helpers fail it by panicking")]

mod common;

use common::{log_lines, origin, stderr};

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const LEASH: &str = env!("CARGO_BIN_EXE_leash");

/// Bound on waiting for leash to print a line, to exit, or for a `--dir` change to be served: the directory is
/// scanned every second and a namespace's disappearance polled every 0.25 s, so this is several times either.
const WAIT: Duration = Duration::from_secs(10);

/// curl's own bound on one request, so a wrong answer is a failure rather than a hang.
const CURL_MAX_TIME: &str = "5";

/// Root and `ip` are needed; otherwise say so loudly (and fail where CI requires namespaces).
fn can_attach(test: &str) -> bool {
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    let ip = Command::new("ip").arg("-V").output().is_ok();
    let why = [(!root, "not root"), (!ip, "`ip` (iproute2) is not installed")].into_iter().find(|(m, _)| *m);
    if let Some((_, why)) = why {
        assert!(std::env::var_os("LEASH_REQUIRE_SANDBOX").is_none(), "{test}: cannot run: {why}");
        {
            // Written past the test harness's capture: a skip must show where the results are read.
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: {test}: `leash attach` in network namespaces needs root and iproute2: {why}"
            );
        };
        return false;
    }
    true
}

/// A named network namespace (`ip netns add`) with `lo` up; deleted on drop (with its links and addresses).
struct Ns {
    name: String,
    deleted: bool,
}

impl Ns {
    fn add(tag: &str) -> Ns {
        let name = format!("lat{}{tag}", std::process::id());
        let _ = Command::new("ip").args(["netns", "del", &name]).stderr(Stdio::null()).status();
        ip(&["netns", "add", &name]);
        let ns = Ns { name, deleted: false };
        ip(&["-n", &ns.name, "link", "set", "lo", "up"]);
        ns
    }

    fn path(&self) -> String {
        format!("/run/netns/{}", self.name)
    }

    /// `ip -n NS ARGS...`
    fn ip(&self, args: &[&str]) {
        let mut all = vec!["-n", &self.name];
        all.extend_from_slice(args);
        ip(&all);
    }

    /// `ip netns del`, as an operator (or a CNI plugin) would.
    fn delete(&mut self) {
        ip(&["netns", "del", &self.name]);
        self.deleted = true;
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        if !self.deleted {
            let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
        }
    }
}

fn ip(args: &[&str]) {
    let o = Command::new("ip").args(args).output().unwrap();
    assert!(o.status.success(), "ip {args:?}: {}", stderr(&o));
}

/// A veth pair made inside the two namespaces (no name ever in the host's): `a_dev` in `a`, `b_dev` in `b`, both up.
fn veth(a: &Ns, a_dev: &str, b: &Ns, b_dev: &str) {
    ip(&["link", "add", "name", a_dev, "netns", &a.name, "type", "veth", "peer", "name", b_dev, "netns", &b.name]);
    a.ip(&["link", "set", a_dev, "up"]);
    b.ip(&["link", "set", b_dev, "up"]);
}

/// A leash process: its standard output read line by line, its standard error in a file; killed on drop.
struct Leash {
    child: Child,
    lines: mpsc::Receiver<String>,
    err: PathBuf,
    /// Its `listening inside` line, once [`attach`] has read it.
    ready: String,
}

impl Leash {
    fn start(args: &[&str], dir: &Path) -> Leash {
        let err = dir.join(format!("leash-{}.err", next_tag()));
        let mut child = Command::new(LEASH)
            .arg("attach")
            .args(args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Leash { child, lines, err, ready: String::new() }
    }

    /// The next line of its standard output (bounded by [`WAIT`]), or the failure with its standard error.
    fn line(&mut self) -> String {
        match self.lines.recv_timeout(WAIT) {
            Ok(line) => line,
            Err(_) => panic!("no line from leash within {WAIT:?}; stderr: {}", self.stderr()),
        }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    /// Its exit status once it has exited (bounded by [`WAIT`]).
    fn exited(&mut self) -> ExitStatus {
        let deadline = Instant::now() + WAIT;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("leash did not exit within {WAIT:?}; stderr: {}", self.stderr());
    }

    fn terminate(&mut self) -> ExitStatus {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-s", "TERM", &pid]).status().unwrap().success());
        self.exited()
    }
}

impl Drop for Leash {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A distinct number per call in this process (names of stderr files).
fn next_tag() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// What `curl` got inside a namespace: its exit status, the HTTP status (`000` without an answer) and the body.
#[derive(Debug)]
struct Fetched {
    exit: Option<i32>,
    status: String,
    body: String,
}

/// `curl` run inside `ns`, through `proxy` (`None`: straight, ignoring any proxy), for `url`.
fn fetch(ns: &str, proxy: Option<&str>, url: &str) -> Fetched {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns, "curl", "-s", "--max-time", CURL_MAX_TIME, "-w", "\n%{http_code}"]);
    match proxy {
        Some(p) => cmd.args(["-x", p]),
        None => cmd.args(["--noproxy", "*"]),
    };
    let o = cmd.arg(url).env_remove("http_proxy").env_remove("HTTPS_PROXY").output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').unwrap_or(("", &text));
    Fetched { exit: o.status.code(), status: status.to_owned(), body: body.to_owned() }
}

const PROXY: &str = "http://127.0.0.1:3128";

/// Ask again (bounded by [`WAIT`]) until `ok` holds for what `fetch` got; the last answer either way.
fn eventually(what: &str, mut fetch: impl FnMut() -> Fetched, ok: impl Fn(&Fetched) -> bool) -> Fetched {
    let deadline = Instant::now() + WAIT;
    loop {
        let got = fetch();
        if ok(&got) {
            return got;
        }
        assert!(Instant::now() < deadline, "{what}: still {got:?} after {WAIT:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A policy allowing only `allowed.test` (or `host`) on port 80 and the origin's, to the host's loopback.
fn policy(dir: &Path, name: &str, host: &str, port: u16) -> PathBuf {
    let path = dir.join(name);
    let text = format!(
        "network:\n  mode: allowlist\n  allowed_hosts: [{host}]\n  ports: [80, {port}]\n  \
         allow_destinations: [127.0.0.0/8]\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

fn allowed_url(port: u16) -> String {
    format!("http://allowed.test:{port}/")
}

const RESOLVE: [&str; 2] = ["--resolve", "allowed.test:127.0.0.1"];

/// `leash attach` for one namespace with the allowed.test policy; waits for its `listening inside` line.
fn attach(extra: &[&str], dir: &Path, port: u16) -> Leash {
    let policy = policy(dir, "policy.yaml", "allowed.test", port);
    let log = dir.join("audit.jsonl");
    let mut args = vec!["--policy", policy.to_str().unwrap(), "--log", log.to_str().unwrap()];
    args.extend_from_slice(&RESOLVE);
    args.extend_from_slice(extra);
    let mut leash = Leash::start(&args, dir);
    leash.ready = leash.line();
    assert!(leash.ready.starts_with("listening inside "), "{}", leash.ready);
    leash
}

/// `leash attach` that must refuse: exit 125 and its standard error, which must say the namespace is not isolated.
fn refused(extra: &[&str]) -> String {
    let mut args = vec!["attach", "--allow", "allowed.test"];
    args.extend_from_slice(extra);
    let o = Command::new(LEASH).args(&args).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(125), "{args:?}: {err}");
    assert!(err.contains("not serving it") && err.contains("is not isolated"), "{args:?}: {err}");
    err
}

#[test]
fn a_named_namespace_is_served_and_leash_exits_0_once_it_is_deleted() {
    if !can_attach("a_named_namespace_is_served_and_leash_exits_0_once_it_is_deleted") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = origin();
    let mut ns = Ns::add("one");
    let mut leash = attach(&["--netns", &ns.path()], dir.path(), port);
    let ok = fetch(&ns.name, Some(PROXY), &allowed_url(port));
    assert_eq!((ok.status.as_str(), ok.body.as_str()), ("200", "origin"), "{ok:?}");
    let refused = fetch(&ns.name, Some(PROXY), &format!("http://other.test:{port}/"));
    assert_eq!(refused.status, "403", "{refused:?}");
    // The namespace has only `lo`: the origin on the host's loopback is not reachable without leash.
    let direct = fetch(&ns.name, None, &format!("http://127.0.0.1:{port}/"));
    assert_eq!(direct.status, "000", "reached the origin around leash: {direct:?}");
    let lines = log_lines(&dir.path().join("audit.jsonl"));
    let decisions: Vec<(&str, &str)> =
        lines.iter().filter_map(|l| Some((l.get("decision")?.as_str()?, l.get("host")?.as_str()?))).collect();
    assert_eq!(decisions, [("allow", "allowed.test"), ("block", "other.test")], "{lines:?}");
    let started = Instant::now();
    ns.delete();
    let status = leash.exited();
    assert_eq!(status.code(), Some(0), "{}", leash.stderr());
    assert!(started.elapsed() < Duration::from_secs(3), "took {:?} to notice", started.elapsed());
    assert!(leash.stderr().contains("is gone"), "{}", leash.stderr());
}

#[test]
fn until_empty_stops_once_the_last_process_in_the_namespace_has_exited() {
    if !can_attach("until_empty_stops_once_the_last_process_in_the_namespace_has_exited") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = origin();
    let ns = Ns::add("empty");
    let mut leash = attach(&["--netns", &ns.path(), "--until-empty"], dir.path(), port);
    // No process has been in it yet (a tap namespace waiting for its VM): still served a while later.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(leash.child.try_wait().unwrap().is_none(), "stopped before any process was in it: {}", leash.stderr());
    // A process lives in it (the VMM, say) and is served; once it has exited, nothing is left to serve.
    let mut vmm = Command::new("ip").args(["netns", "exec", &ns.name, "sleep", "3"]).spawn().unwrap();
    let ok = fetch(&ns.name, Some(PROXY), &allowed_url(port));
    assert_eq!(ok.status, "200", "{ok:?}");
    let _ = vmm.wait();
    let ended = Instant::now();
    let status = leash.exited();
    assert_eq!(status.code(), Some(0), "{}", leash.stderr());
    assert!(ended.elapsed() < Duration::from_secs(5), "took {:?} to notice", ended.elapsed());
    assert!(leash.stderr().contains("the last process in the network namespace"), "{}", leash.stderr());
}

#[test]
fn a_namespace_with_another_way_out_is_refused_with_the_reason() {
    if !can_attach("a_namespace_with_another_way_out_is_refused_with_the_reason") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (subject, peer) = (Ns::add("rs"), Ns::add("rp"));
    veth(&subject, "va", &peer, "vb");
    let netns = subject.path();
    let err = refused(&["--netns", &netns]);
    assert!(err.contains("interfaces other than `lo`: va"), "{err}");

    let with_va = ["--netns", netns.as_str(), "--interface", "va"];
    subject.ip(&["addr", "add", "198.18.0.2/24", "dev", "va"]);
    peer.ip(&["addr", "add", "198.18.0.1/24", "dev", "vb"]);
    subject.ip(&["route", "add", "default", "via", "198.18.0.1"]);
    let err = refused(&with_va);
    assert!(err.contains("route out: IPv4 a default route on `va`"), "{err}");
    subject.ip(&["route", "del", "default"]);

    subject.ip(&["route", "add", "10.99.0.0/16", "via", "198.18.0.1"]);
    let err = refused(&with_va);
    assert!(err.contains("route out: IPv4 a route through a gateway"), "{err}");
    subject.ip(&["route", "del", "10.99.0.0/16"]);

    // Any table, not only `main`.
    subject.ip(&["route", "add", "default", "via", "198.18.0.1", "table", "100"]);
    let err = refused(&with_va);
    assert!(err.contains("route out"), "{err}");
    subject.ip(&["route", "del", "default", "table", "100"]);

    subject.ip(&["-6", "route", "add", "default", "via", "fe80::1", "dev", "va"]);
    let err = refused(&with_va);
    assert!(err.contains("route out: IPv6 a default route"), "{err}");
    subject.ip(&["-6", "route", "del", "default", "via", "fe80::1", "dev", "va"]);

    subject.ip(&["addr", "add", "2001:db8::2/64", "dev", "va", "nodad"]);
    let err = refused(&with_va);
    assert!(err.contains("IPv6 address other than link-local: 2001:db8::2 on `va`"), "{err}");

    // With routes allowed (something else drops the traffic) the same namespace, a default route too, is served.
    subject.ip(&["route", "add", "default", "via", "198.18.0.1"]);
    let port = origin();
    let mut leash = attach(&["--netns", &netns, "--interface", "va", "--allow-routes"], dir.path(), port);
    let ok = fetch(&subject.name, Some(PROXY), &allowed_url(port));
    assert_eq!((ok.status.as_str(), ok.body.as_str()), ("200", "origin"), "{ok:?}");
    assert_eq!(leash.terminate().code(), Some(0), "{}", leash.stderr());
}

#[test]
fn leash_own_namespace_is_refused() {
    if !can_attach("leash_own_namespace_is_refused") {
        return;
    }
    // The test runs in the namespace leash runs in.
    let err = refused(&["--pid", &std::process::id().to_string()]);
    assert!(err.contains("leash's own network namespace"), "{err}");
    let err = refused(&["--netns", "/proc/self/ns/net"]);
    assert!(err.contains("leash's own network namespace"), "{err}");
}

#[test]
fn a_cni_style_pod_namespace_is_served_on_its_loopback_and_on_its_own_address() {
    if !can_attach("a_cni_style_pod_namespace_is_served_on_its_loopback_and_on_its_own_address") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = origin();
    let (pod, node) = (Ns::add("pod"), Ns::add("node"));
    // As a CNI bridge plugin does: a veth into the pod, renamed eth0 there, a /24, only its link route.
    ip(&[
        "link", "add", "name", "vpod", "netns", &pod.name, "type", "veth", "peer", "name", "vnode", "netns", &node.name,
    ]);
    pod.ip(&["link", "set", "vpod", "name", "eth0"]);
    pod.ip(&["addr", "add", "10.200.0.2/24", "dev", "eth0"]);
    pod.ip(&["link", "set", "eth0", "up"]);
    node.ip(&["addr", "add", "10.200.0.1/24", "dev", "vnode"]);
    node.ip(&["link", "set", "vnode", "up"]);

    let err = refused(&["--netns", &pod.path()]);
    assert!(err.contains("eth0"), "{err}");
    let on_lo = attach(&["--netns", &pod.path(), "--interface", "eth0"], dir.path(), port);
    let ok = fetch(&pod.name, Some(PROXY), &allowed_url(port));
    assert_eq!((ok.status.as_str(), ok.body.as_str()), ("200", "origin"), "{ok:?}");
    assert_eq!(fetch(&pod.name, Some(PROXY), &format!("http://other.test:{port}/")).status, "403");

    let listen = ["--netns", &pod.path(), "--interface", "eth0", "--listen", "10.200.0.2:3128"];
    let on_eth0 = attach(&listen, dir.path(), port);
    let ok = fetch(&pod.name, Some("http://10.200.0.2:3128"), &allowed_url(port));
    assert_eq!((ok.status.as_str(), ok.body.as_str()), ("200", "origin"), "{ok:?}");
    // From the node's side of the veth too: the pod's address is where a VM or sidecar would find it.
    let ok = fetch(&node.name, Some("http://10.200.0.2:3128"), &allowed_url(port));
    assert_eq!(ok.status, "200", "{ok:?}");
    drop((on_lo, on_eth0));
}

#[test]
fn attached_by_pid_leash_exits_0_once_the_process_is_gone() {
    if !can_attach("attached_by_pid_leash_exits_0_once_the_process_is_gone") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = origin();
    // A fresh anonymous namespace: `unshare -n` (execs into sh, then sleep: the same pid throughout).
    let script = "ip link set lo up && echo ready && exec sleep 30";
    let mut holder = Command::new("unshare").args(["-n", "sh", "-c", script]).stdout(Stdio::piped()).spawn().unwrap();
    let mut ready = String::new();
    BufReader::new(holder.stdout.take().unwrap()).read_line(&mut ready).unwrap();
    assert_eq!(ready, "ready\n");
    let pid = holder.id().to_string();
    let mut leash = attach(&["--pid", &pid], dir.path(), port);
    let inside = |url: &str| {
        let o = Command::new("nsenter")
            .args(["-t", &pid, "-n", "curl", "-s", "--max-time", CURL_MAX_TIME, "-x", PROXY, url])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    assert_eq!(inside(&allowed_url(port)), "origin");
    let _ = holder.kill();
    let _ = holder.wait();
    assert_eq!(leash.exited().code(), Some(0), "{}", leash.stderr());

    // `ip netns exec`: the named namespace stays, the process goes, and that ends the attachment too.
    let ns = Ns::add("pid");
    let mut sleeper = Command::new("ip").args(["netns", "exec", &ns.name, "sleep", "30"]).spawn().unwrap();
    let mut leash = attach(&["--pid", &sleeper.id().to_string()], dir.path(), port);
    let ok = fetch(&ns.name, Some(PROXY), &allowed_url(port));
    assert_eq!(ok.status, "200", "{ok:?}");
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert_eq!(leash.exited().code(), Some(0), "{}", leash.stderr());
    assert!(Path::new(&ns.path()).exists(), "the named namespace itself stays");
}

/// `/etc/netns/NAME/resolv.conf`, which `ip netns exec NAME` mounts over `/etc/resolv.conf`; removed on drop.
struct NsResolvConf(PathBuf);

impl NsResolvConf {
    fn write(ns: &Ns, text: &str) -> NsResolvConf {
        let dir = PathBuf::from("/etc/netns").join(&ns.name);
        std::fs::create_dir_all(&dir).unwrap();
        let guard = NsResolvConf(dir);
        std::fs::write(guard.0.join("resolv.conf"), text).unwrap();
        guard
    }
}

impl Drop for NsResolvConf {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        let _ = std::fs::remove_dir("/etc/netns");
    }
}

#[test]
fn transparent_attach_resolves_allowed_names_and_carries_programs_that_ignore_the_proxy() {
    if !can_attach("transparent_attach_resolves_allowed_names_and_carries_programs_that_ignore_the_proxy") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = origin();
    let ns = Ns::add("tr");
    let _resolv = NsResolvConf::write(&ns, "nameserver 127.0.0.1\n");
    let leash = attach(&["--netns", &ns.path(), "--transparent"], dir.path(), port);
    let ok = fetch(&ns.name, None, &allowed_url(port));
    assert_eq!((ok.status.as_str(), ok.body.as_str()), ("200", "origin"), "{ok:?}");
    let other = fetch(&ns.name, None, &format!("http://other.test:{port}/"));
    assert_eq!(other.exit, Some(6), "a refused name must not resolve: {other:?}");
    let lines = log_lines(&dir.path().join("audit.jsonl"));
    let dns: Vec<&str> = lines.iter().filter(|l| l["method"] == "DNS").filter_map(|l| l["host"].as_str()).collect();
    assert!(dns.contains(&"allowed.test") && dns.contains(&"other.test"), "{lines:?}");
    drop(leash);
}

/// An attachment file in `dir`.
fn attachment(dir: &Path, file: &str, ns: &Ns, policy: &str, pod: &str) {
    let text = format!("netns: {}\npolicy: {policy}\nlabels: {{pod: {pod}, namespace: test}}\n", ns.path());
    std::fs::write(dir.join(file), text).unwrap();
}

/// The `labels` of the audit lines that decided `host`, in order.
fn labels_of(log: &Path, host: &str) -> Vec<(String, String, String)> {
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
    let lines = log_lines(log);
    let decided = lines.iter().filter(|l| l.get("decision").is_some() && l["host"] == host);
    decided.map(|l| (text(&l["decision"]), text(&l["labels"]["pod"]), text(&l["labels"]["attachment"]))).collect()
}

#[test]
fn one_leash_serves_a_directory_of_attachments_as_they_come_change_and_go() {
    if !can_attach("one_leash_serves_a_directory_of_attachments_as_they_come_change_and_go") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("attachments");
    std::fs::create_dir(&dir).unwrap();
    let port = origin();
    let (a, mut b, c, open) = (Ns::add("da"), Ns::add("db"), Ns::add("dc"), Ns::add("do"));
    let other = Ns::add("dp");
    veth(&open, "va", &other, "vb");
    // The policies beside the directory, named relative to it (an attachment's paths are relative to its file).
    let policies = tmp.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    let (allow, deny) = ("../policies/allow.yaml", "../policies/deny.yaml");
    policy(&policies, "allow.yaml", "allowed.test", port);
    policy(&policies, "deny.yaml", "elsewhere.test", port);
    attachment(&dir, "a.yaml", &a, allow, "agent-a");
    attachment(&dir, "b.yaml", &b, deny, "agent-b");
    let log = tmp.path().join("audit.jsonl");
    let mut args = vec!["--dir", dir.to_str().unwrap(), "--log", log.to_str().unwrap()];
    args.extend_from_slice(&RESOLVE);
    let mut leash = Leash::start(&args, tmp.path());
    assert_eq!(leash.line(), format!("watching {}", dir.display()));
    let url = allowed_url(port);
    let get = |ns: &Ns| fetch(&ns.name, Some(PROXY), &url);
    eventually("a allowed", || get(&a), |f| f.status == "200" && f.body == "origin");
    eventually("b refused", || get(&b), |f| f.status == "403");
    let seen = labels_of(&log, "allowed.test");
    assert!(seen.contains(&("allow".into(), "agent-a".into(), "a.yaml".into())), "{seen:?}");
    assert!(seen.contains(&("block".into(), "agent-b".into(), "b.yaml".into())), "{seen:?}");

    // A third file, later: served within a few scans.
    attachment(&dir, "c.yaml", &c, allow, "agent-c");
    eventually("c served", || get(&c), |f| f.status == "200");
    // b's policy file changes (a different length, so the change shows even within one mtime tick).
    policy(&policies, "deny.yaml", "allowed.test", port);
    eventually("b's new policy", || get(&b), |f| f.status == "200");
    // c's file removed: its listener goes (connection refused), the others stay.
    std::fs::remove_file(dir.join("c.yaml")).unwrap();
    eventually("c no longer served", || get(&c), |f| f.exit == Some(7));

    // Broken files: each named on stderr, and the others keep serving.
    std::fs::write(dir.join("d-bad-key.yaml"), format!("netns: {}\npolicy: {allow}\ncolour: red\n", c.path())).unwrap();
    attachment(&dir, "e-no-policy.yaml", &c, "missing.yaml", "agent-e");
    attachment(&dir, "f-not-isolated.yaml", &open, allow, "agent-f");
    let deadline = Instant::now() + WAIT;
    let named =
        |err: &str| ["d-bad-key.yaml", "e-no-policy.yaml", "f-not-isolated.yaml"].iter().all(|f| err.contains(f));
    while !named(&leash.stderr()) {
        assert!(Instant::now() < deadline, "broken files not all named: {}", leash.stderr());
        std::thread::sleep(Duration::from_millis(200));
    }
    let err = leash.stderr();
    assert!(err.contains("unknown key `colour`") && err.contains("missing.yaml"), "{err}");
    assert!(err.contains("interfaces other than `lo`: va"), "{err}");
    assert_eq!(fetch(&open.name, Some(PROXY), &allowed_url(port)).exit, Some(7), "a refused namespace was served");
    assert_eq!(get(&a).status, "200");
    assert_eq!(get(&b).status, "200");

    // One namespace deleted: its attachment ends, the others keep serving.
    b.delete();
    let deadline = Instant::now() + WAIT;
    while !leash.stderr().contains("b.yaml`: the network namespace") {
        assert!(Instant::now() < deadline, "b's end not reported: {}", leash.stderr());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(get(&a).status, "200");
    let seen = labels_of(&log, "allowed.test");
    assert!(seen.contains(&("allow".into(), "agent-c".into(), "c.yaml".into())), "{seen:?}");
    assert!(seen.contains(&("allow".into(), "agent-b".into(), "b.yaml".into())), "{seen:?}");
    assert_eq!(leash.terminate().code(), Some(0), "{}", leash.stderr());
}

#[test]
fn dir_with_a_policy_or_a_namespace_option_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    for extra in [&["--policy", "p.yaml"][..], &["--allow", "x.test"], &["--netns", "/run/netns/x"], &["--pid", "1"]] {
        let o = Command::new(LEASH).args(["attach", "--dir", d]).args(extra).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("--dir"), "{extra:?}: {}", stderr(&o));
    }
}

#[test]
fn a_policy_file_beside_its_attachments_is_not_reported_as_a_broken_attachment() {
    if !can_attach("a_policy_file_beside_its_attachments_is_not_reported_as_a_broken_attachment") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = origin();
    let ns = Ns::add("bp");
    policy(dir.path(), "agent.yaml", "allowed.test", port);
    attachment(dir.path(), "pod.yaml", &ns, "agent.yaml", "agent");
    let d = dir.path().to_str().unwrap();
    let mut leash = Leash::start(&["--dir", d, RESOLVE[0], RESOLVE[1]], dir.path());
    leash.line();
    eventually("served", || fetch(&ns.name, Some(PROXY), &allowed_url(port)), |f| f.status == "200");
    let err = leash.stderr();
    assert!(!err.contains("agent.yaml`: "), "the policy file was read as an attachment: {err}");
}

#[test]
fn the_ready_line_for_a_pid_names_the_network_namespace_of_the_process() {
    if !can_attach("the_ready_line_for_a_pid_names_the_network_namespace_of_the_process") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ns = Ns::add("rl");
    let mut sleeper = Command::new("ip").args(["netns", "exec", &ns.name, "sleep", "30"]).spawn().unwrap();
    let pid = sleeper.id().to_string();
    let mut leash = attach(&["--pid", &pid], dir.path(), origin());
    let line = leash.ready.clone();
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert_eq!(leash.exited().code(), Some(0));
    assert_eq!(line, format!("listening inside the network namespace of process {pid} on 127.0.0.1:3128"));
}

#[test]
fn attach_asks_over_the_control_socket_and_refuses_ask_with_a_directory() {
    if !can_attach("attach_asks_over_the_control_socket_and_refuses_ask_with_a_directory") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let socket = dir.path().join("s.sock");
    let port = origin();
    let ns = Ns::add("ask");
    let extra = ["--netns", &ns.path(), "--ask", "--ask-socket", socket.to_str().unwrap()];
    let _leash = attach(&[&extra[..], &["--resolve", "new.test:127.0.0.1"]].concat(), dir.path(), port);
    let url = format!("http://new.test:{port}/asked");
    let (name, held) = (ns.name.clone(), url.clone());
    let fetching = std::thread::spawn(move || fetch(&name, Some(PROXY), &held));
    let ask = |args: &[&str]| {
        Command::new(LEASH).arg("ask").args(args).args(["--socket", socket.to_str().unwrap()]).output().unwrap()
    };
    let deadline = Instant::now() + WAIT;
    let id = loop {
        let pending: Vec<serde_json::Value> =
            serde_json::from_slice(&ask(&["list", "--json"]).stdout).unwrap_or_default();
        if let Some(q) = pending.iter().find(|q| q["host"] == "new.test") {
            break q["id"].to_string();
        }
        assert!(Instant::now() < deadline, "no question about new.test");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(ask(&["answer", &id, "once"]).status.success());
    let got = fetching.join().unwrap();
    assert_eq!((got.status.as_str(), got.body.as_str()), ("200", "origin"), "{got:?}");
    // Many namespaces would share one terminal and one socket: --ask is for one.
    let o = Command::new(LEASH).args(["attach", "--dir", dir.path().to_str().unwrap(), "--ask"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--ask is for one namespace"), "{}", stderr(&o));
}

/// What stands outside a pod in [`a_namespace_with_routes_is_probed_from_inside_and_refused_once_its_wall_is_gone`]:
/// a canary (TCP, answering whenever reached) and a resolver (UDP, answering any datagram) in the peer namespace,
/// as a cluster's services and its DNS stand beyond a NetworkPolicy. Killed on drop.
struct Outside(Child);

impl Outside {
    const SCRIPT: &'static str = "import socket, threading\n\
        t = socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
        t.bind(('198.19.0.1', 8080)); t.listen(16)\n\
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(('198.19.0.1', 53))\n\
        def answer():\n    while True:\n        data, peer = u.recvfrom(512); u.sendto(data[:2] + b'\\x81\\x80' + data[4:], peer)\n\
        threading.Thread(target=answer, daemon=True).start()\n\
        print('ready', flush=True)\n\
        while True:\n    t.accept()[0].close()\n";

    fn start(ns: &Ns) -> Outside {
        let mut child = Command::new("ip")
            .args(["netns", "exec", &ns.name, "python3", "-c", Self::SCRIPT])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut ready = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut ready).unwrap();
        assert_eq!(ready.trim(), "ready");
        Outside(child)
    }
}

impl Drop for Outside {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `nft` run inside `ns`.
fn nft_in(ns: &Ns, script: &str) {
    let o = Command::new("ip").args(["netns", "exec", &ns.name, "nft", "-f", "-"]).stdin(Stdio::piped()).spawn();
    let mut child = o.unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), script.as_bytes()).unwrap();
    assert!(child.wait().unwrap().success(), "nft in {}: {script}", ns.name);
}

#[test]
fn a_namespace_with_routes_is_probed_from_inside_and_refused_once_its_wall_is_gone() {
    if !can_attach("a_namespace_with_routes_is_probed_from_inside_and_refused_once_its_wall_is_gone") {
        return;
    }
    if Command::new("nft").arg("--version").output().is_err() {
        assert!(std::env::var_os("LEASH_REQUIRE_SANDBOX").is_none(), "nft (nftables) is needed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = origin();
    // A pod with a default route through its node, the node's side holding a service and a resolver; the pod's
    // programs resolve through it. The wall (a NetworkPolicy's drop) is on the node's side, where the pod cannot
    // see it: every packet the pod sends out leaves, and is dropped there.
    let (pod, node) = (Ns::add("wp"), Ns::add("wn"));
    veth(&pod, "vwp", &node, "vwn");
    pod.ip(&["addr", "add", "198.19.0.2/24", "dev", "vwp"]);
    node.ip(&["addr", "add", "198.19.0.1/24", "dev", "vwn"]);
    pod.ip(&["route", "add", "default", "via", "198.19.0.1"]);
    let _outside = Outside::start(&node);
    let _resolv = NsResolvConf::write(&pod, "nameserver 198.19.0.1\n");
    nft_in(
        &node,
        "table inet netpol {\n chain inbound {\n type filter hook input priority 0;\n iifname \"vwn\" drop\n }\n}\n",
    );

    let args = ["--netns", &pod.path(), "--interface", "vwp", "--allow-routes", "--canary", "198.19.0.1:8080"];
    let mut leash = attach(&args, dir.path(), port);
    let ok = fetch(&pod.name, Some(PROXY), &allowed_url(port));
    assert_eq!((ok.status.as_str(), ok.body.as_str()), ("200", "origin"), "{ok:?}");
    assert!(leash.stderr().contains("ok   tcp canary 198.19.0.1:8080: no answer"), "{}", leash.stderr());
    assert_eq!(leash.terminate().code(), Some(0), "{}", leash.stderr());

    // A second policy reopens egress: the canary answers, and so does the resolver. Refused, each named.
    nft_in(&node, "flush ruleset\n");
    let direct = fetch(&pod.name, None, "http://198.19.0.1:8080/");
    // Reached: the canary closes at once (curl: empty reply, or reset).
    assert!(matches!(direct.exit, Some(52 | 56)), "the wall is gone, the canary reached: {direct:?}");
    let mut command = Command::new(LEASH);
    command.args(["attach", "--allow", "allowed.test"]).args(args);
    let o = command.output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(125), "{err}");
    assert!(err.contains("found a way out"), "{err}");
    assert!(err.contains("OPEN tcp canary 198.19.0.1:8080: got through"), "{err}");
    assert!(err.contains("OPEN dns resolver 198.19.0.1:53: answered"), "{err}");
    assert!(!err.contains("OPEN leash's listener"), "leash's own listener answered: {err}");

    drop(leash);
}
