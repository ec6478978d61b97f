//! The attack suite's scene, made and removed by each test: two network namespaces joined by a veth pair. "world"
//! (10.200.0.2 and .3, fd00:200::2 and ::3, 169.254.169.254 on its loopback) holds an HTTP origin (ports 80 and
//! 8080), an HTTPS origin (443 and 8443, a certificate for `*.attack.test` from a test CA made here with openssl)
//! and a DNS server answering from a fixed table; "edge" (10.200.0.1, fd00:200::1) is where leash and the hostile
//! client run, with its own loopback origin on 127.0.0.1:80 and :443 (where a name rebound to 127.0.0.1 would lead).
//! leash runs in a mount namespace of its own (`ip netns exec`) whose `/etc/resolv.conf` names the world's DNS
//! server, so every lookup leash makes is a query the world logs. Every event — each query, each connection, each
//! request head — is a line in one log, which the tests read to show what a refusal never reached. Nothing here
//! touches the host's network or its `/etc/resolv.conf`.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The `leash` under test: this build's, or `LEASH_UNDER_TEST=/path/to/leash` (to show a test fails against the
/// build before its fix, as in `doors.rs`).
pub fn leash() -> String {
    std::env::var("LEASH_UNDER_TEST").unwrap_or_else(|_| env!("CARGO_BIN_EXE_leash").to_owned())
}

const WORLD_PY: &str = include_str!("world.py");
const CLIENT_PY: &str = include_str!("client.py");
/// Debian's interpreter: quick to start, as on CI.
const PYTHON: &str = "/usr/bin/python3";

pub const WORLD_V4: &str = "10.200.0.2";
/// A second world address that no policy lists in `allow_destinations`.
pub const HIDDEN_V4: &str = "10.200.0.3";
pub const WORLD_V6: &str = "fd00:200::2";
pub const METADATA: &str = "169.254.169.254";
/// A public (documentation-range) address some tests give leash's own namespace: not internal by range, only by
/// being leash's own.
pub const OWN_PUBLIC_V4: &str = "198.51.100.7";
/// Another public (documentation-range) address, given to leash's namespace only while leash runs, after it has
/// read its own addresses.
pub const ADDED_PUBLIC_V4: &str = "203.0.113.9";
/// Public (documentation-range) prefixes some tests make local to leash's namespace with a `local` route (AnyIP:
/// every address in them is the host's own, though no interface carries it), and an address in each.
pub const ANYIP_V4_NET: &str = "192.0.2.0/24";
pub const ANYIP_V4: &str = "192.0.2.77";
pub const ANYIP_V6_NET: &str = "2001:db8:1::/64";
pub const ANYIP_V6: &str = "2001:db8:1::77";
const EDGE_V4: &str = "10.200.0.1";
const EDGE_V6: &str = "fd00:200::1";

/// How long a server or leash may take to say it is ready.
const READY: Duration = Duration::from_secs(10);

/// The world's DNS table (`[[..], [..]]`: successive answers, for rebinding). Every other name is NXDOMAIN.
fn dns_table() -> Value {
    json!({
        "ok.attack.test": [WORLD_V4],
        "also.attack.test": [WORLD_V4],
        "denied.attack.test": [WORLD_V4],
        "lo.attack.test": ["127.0.0.1"],
        "meta.attack.test": [METADATA],
        "hidden.attack.test": [HIDDEN_V4],
        "mixed.attack.test": [WORLD_V4, "127.0.0.1"],
        "v6lo.attack.test": ["::1"],
        "v6hidden.attack.test": ["fd00:200::3"],
        "mapped.attack.test": ["::ffff:127.0.0.1"],
        "flip.attack.test": [[WORLD_V4], ["127.0.0.1"]],
        "self.attack.test": [OWN_PUBLIC_V4],
        "added.attack.test": [ADDED_PUBLIC_V4],
        "anyip.attack.test": [ANYIP_V4],
        "anyip6.attack.test": [ANYIP_V6],
    })
}

/// Test CA and a leaf for `*.attack.test` (the world's HTTPS origin).
const CERTS: &str = r#"set -e
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem -days 2 \
  -subj /CN=attack-test-ca -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout leaf.key -out leaf.csr -subj /CN=ok.attack.test 2>/dev/null
printf 'subjectAltName=DNS:*.attack.test\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' > ext.cnf
openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out leaf.pem -days 2 -extfile ext.cnf 2>/dev/null
"#;

pub struct Scene {
    pub edge: String,
    world: String,
    pub dir: tempfile::TempDir,
    log: PathBuf,
    children: Vec<Child>,
}

/// A running `leash proxy` in the edge namespace.
pub struct Proxy {
    pub addr: String,
    /// The run's CA, for clients of inspected tunnels.
    pub ca: PathBuf,
    pub log: PathBuf,
}

impl Scene {
    /// The scene with the world's servers running, or a loud skip where namespaces cannot be made.
    pub fn new() -> Option<Scene> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = format!("{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("events.log");
        let mut scene =
            Scene { edge: format!("latk-edge-{n}"), world: format!("latk-world-{n}"), dir, log, children: Vec::new() };
        if let Err(why) = scene.build() {
            return skip(&why);
        }
        let ok = Command::new("sh").args(["-c", CERTS]).current_dir(scene.dir.path()).status().unwrap();
        assert!(ok.success(), "openssl could not make the test certificates");
        scene.file("dns.json", &dns_table().to_string());
        scene.file("world.py", WORLD_PY);
        scene.file("client.py", CLIENT_PY);
        scene.file("resolv.conf", &format!("nameserver {WORLD_V4}\noptions timeout:2 attempts:1\n"));
        let (world, edge) = (scene.world.clone(), scene.edge.clone());
        scene.serve(&world, &["world"]);
        scene.serve(&edge, &["edge"]);
        Some(scene)
    }

    fn build(&self) -> Result<(), String> {
        let (e, w) = (&self.edge, &self.world);
        ip(&["netns", "add", e])?;
        ip(&["netns", "add", w])?;
        ip(&["link", "add", "latk-e", "netns", e, "type", "veth", "peer", "name", "latk-w", "netns", w])?;
        for (ns, dev, v4, v6) in [(e, "latk-e", EDGE_V4, EDGE_V6), (w, "latk-w", WORLD_V4, WORLD_V6)] {
            ip(&["-n", ns, "addr", "add", &format!("{v4}/24"), "dev", dev])?;
            ip(&["-n", ns, "addr", "add", &format!("{v6}/64"), "dev", dev, "nodad"])?;
            ip(&["-n", ns, "link", "set", dev, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        ip(&["-n", w, "addr", "add", &format!("{HIDDEN_V4}/24"), "dev", "latk-w"])?;
        ip(&["-n", w, "addr", "add", "fd00:200::3/64", "dev", "latk-w", "nodad"])?;
        ip(&["-n", w, "addr", "add", &format!("{METADATA}/32"), "dev", "lo"])?;
        ip(&["-n", e, "route", "add", &format!("{METADATA}/32"), "dev", "latk-e"])?;
        Ok(())
    }

    pub fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `world.py ROLE` in namespace `ns`, once it says ready.
    pub fn serve(&mut self, ns: &str, args: &[&str]) {
        let script = self.path("world.py");
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns, PYTHON])
            .arg(&script)
            .arg(args[0])
            .arg(&self.log)
            .arg(self.dir.path())
            .args(&args[1..])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        self.children.push(child);
        assert_eq!(line.trim(), "ready", "world.py {args:?} did not start");
    }

    /// A command in the edge namespace whose `/etc/resolv.conf` names the world's DNS server.
    pub fn in_edge(&self, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.edge, "sh", "-c", "mount --bind \"$0\" /etc/resolv.conf && exec \"$@\""])
            .arg(self.path("resolv.conf"))
            .arg(program);
        cmd
    }

    /// `leash proxy` with this policy (YAML) in the edge namespace: inspection CA written out, the world's CA
    /// trusted upstream.
    pub fn proxy(&mut self, policy: &str) -> Proxy {
        let policy = self.file("policy.yaml", policy);
        let (ca, log) = (self.path("leash-ca.pem"), self.path("audit.jsonl"));
        let mut child = self
            .in_edge(&leash())
            .args(["proxy", "--listen", "127.0.0.1:0", "--policy"])
            .arg(&policy)
            .arg("--log")
            .arg(&log)
            .arg("--ca-cert-out")
            .arg(&ca)
            .arg("--upstream-ca")
            .arg(self.path("ca.pem"))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        let started = Instant::now();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        assert!(started.elapsed() < READY, "leash took too long to start");
        self.children.push(child);
        let addr = line.trim().strip_prefix("listening on ").expect("leash's listening line").to_owned();
        Proxy { addr, ca, log }
    }

    /// Each probe (see client.py) on a new connection to the proxy, from the edge namespace.
    pub fn probe(&self, proxy: &Proxy, probes: &[Value]) -> Vec<Value> {
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.edge, "timeout", "50", PYTHON])
            .arg(self.path("client.py"))
            .arg(&proxy.addr)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(Value::from(probes.to_vec()).to_string().as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "client.py failed");
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Every event line so far.
    pub fn events(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log).unwrap_or_default().lines().map(str::to_owned).collect()
    }

    /// Names the world's DNS server was asked, with the query type (`ok.attack.test A`).
    pub fn queries(&self) -> Vec<String> {
        self.events().iter().filter_map(|l| l.strip_prefix("world dns ").map(str::to_owned)).collect()
    }

    /// Connections and request heads any origin saw (world or edge loopback), and relay connections.
    pub fn origin_events(&self) -> Vec<String> {
        self.events().into_iter().filter(|l| !l.starts_with("world dns ")).collect()
    }

    /// INVARIANT check: a refused name never reached DNS.
    pub fn assert_never_resolved(&self, names: &[&str]) {
        let queries = self.queries();
        for name in names {
            assert!(!queries.iter().any(|q| q.split(' ').next() == Some(name)), "`{name}` was resolved: {queries:?}");
        }
    }

    pub fn assert_no_lookup(&self) {
        assert_eq!(self.queries(), Vec::<String>::new(), "nothing should have been resolved");
    }

    pub fn assert_origin_untouched(&self) {
        assert_eq!(self.origin_events(), Vec::<String>::new(), "an origin saw a refused request");
    }

    /// Request heads the origins saw (`world req 80 GET /a HTTP/1.1 | ok.attack.test`).
    pub fn requests(&self) -> Vec<String> {
        self.events().into_iter().filter(|l| l.contains(" req ")).collect()
    }

    /// The audit log's lines.
    pub fn audit(&self, proxy: &Proxy) -> Vec<Value> {
        let text = std::fs::read_to_string(&proxy.log).unwrap_or_default();
        text.lines().map(|l| serde_json::from_str(l).expect("every log line is JSON")).collect()
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = ip(&["netns", "del", &self.edge]);
        let _ = ip(&["netns", "del", &self.world]);
    }
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("cannot run `ip`: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("`ip {}` failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Skips the calling test loudly, or fails it when CI requires namespaces (`LEASH_REQUIRE_SANDBOX=1`).
pub fn skip<T>(why: &dyn std::fmt::Display) -> Option<T> {
    if std::env::var_os("LEASH_REQUIRE_SANDBOX").is_some_and(|v| v == "1") {
        panic!("LEASH_REQUIRE_SANDBOX=1 but the attack suite's namespaces cannot be made here: {why}");
    }
    {
        // Written past the test harness's capture: a skip must show where the results are read.
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "\n!!!!!!!! SKIPPED: attack test cannot make its namespaces here: {why} !!!!!!!!\n"
        );
    };
    None
}

/// The path of a file in the scene's directory as text, for probes.
pub fn text(p: &Path) -> String {
    p.to_str().unwrap().to_owned()
}
