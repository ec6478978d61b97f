//! squid (Debian's) as the corporate proxy in front of the test origins, with Basic authentication: `leash proxy`
//! with `upstream_proxy` sends what it allows through squid (plain HTTP and a CONNECT tunnel), with the credentials
//! from its environment; what it refuses never reaches squid (its access log shows nothing); a tunnel squid refuses
//! (wrong credentials) is a 502 naming squid's status, with the cause in the audit log.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test's helpers fail it by panicking")]

mod common;

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{https_material, log_lines, origin, stderr, HttpsOrigin};

const LEASH: &str = env!("CARGO_BIN_EXE_leash");

/// squid on a free loopback port, authenticating `corp-user:s3cret`, resolving `docs.test` to 127.0.0.1 from its
/// own hosts file; stopped on drop.
struct Squid {
    child: Child,
    port: u16,
    access_log: std::path::PathBuf,
}

impl Squid {
    fn start(dir: &Path) -> Option<Squid> {
        if !Path::new("/usr/sbin/squid").exists() {
            assert!(std::env::var_os("LEASH_REQUIRE_SQUID").is_none(), "squid is not installed");
            {
                // Written past the test harness's capture: a skip must show where the results are read.
                use std::io::Write as _;
                let _ = writeln!(std::io::stderr(), "SKIPPED: squid is not installed (apt-get install squid)");
            }
            return None;
        }
        // squid drops to its own user: its files live in a directory that user can write.
        let dir = dir.join("squid");
        std::fs::create_dir(&dir).unwrap();
        Command::new("chmod").arg("777").arg(&dir).status().unwrap();
        let hash = Command::new("openssl").args(["passwd", "-apr1", "s3cret"]).output().unwrap();
        std::fs::write(dir.join("passwd"), format!("corp-user:{}", String::from_utf8_lossy(&hash.stdout))).unwrap();
        std::fs::write(dir.join("hosts"), "127.0.0.1 docs.test\n").unwrap();
        let port = free_port();
        let d = dir.display();
        let conf = format!(
            "http_port 127.0.0.1:{port}\npid_filename {d}/squid.pid\naccess_log stdio:{d}/access.log\n\
             cache_log {d}/cache.log\ncache deny all\ncache_mem 8 MB\nhosts_file {d}/hosts\ncoredump_dir {d}\n\
             auth_param basic program /usr/lib/squid/basic_ncsa_auth {d}/passwd\nauth_param basic realm corp\n\
             acl authed proxy_auth REQUIRED\nhttp_access allow authed\nhttp_access deny all\n\
             shutdown_lifetime 0 seconds\nlogfile_rotate 0\n"
        );
        std::fs::write(dir.join("squid.conf"), conf).unwrap();
        // A service name of its own: two squids at once would share their shared-memory segments' names.
        let child = Command::new("/usr/sbin/squid")
            .args(["-N", "-n", &format!("leash{port}"), "-f"])
            .arg(dir.join("squid.conf"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let squid = Squid { child, port, access_log: dir.join("access.log") };
        // Waits on squid's listener (bounded).
        for _ in 0..200 {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Some(squid);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("squid did not listen: {}", std::fs::read_to_string(dir.join("cache.log")).unwrap_or_default());
    }

    /// squid's access log (written when a request ends; read after the client is done).
    fn access(&self) -> String {
        for _ in 0..40 {
            let text = std::fs::read_to_string(&self.access_log).unwrap_or_default();
            if !text.is_empty() {
                return text;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        String::new()
    }
}

impl Drop for Squid {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `leash proxy` with `policy`, `CORP_PROXY` set to `auth`; its address and the child.
fn leash_proxy(policy: &Path, log: &Path, auth: &str) -> (Child, String) {
    let mut child = Command::new(LEASH)
        .args(["proxy", "--listen", "127.0.0.1:0", "--policy"])
        .arg(policy)
        .arg("--log")
        .arg(log)
        .env("CORP_PROXY", auth)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    (child, line.trim().strip_prefix("listening on ").unwrap().to_owned())
}

fn curl(proxy: &str, args: &[&str]) -> String {
    let o = Command::new("curl")
        .args(["-s", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}", "-x", &format!("http://{proxy}")])
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn policy(dir: &Path, squid: &Squid, ports: (u16, u16)) -> std::path::PathBuf {
    let path = dir.join("policy.yaml");
    let text = format!(
        "network:\n  mode: allowlist\n  allowed_hosts: [docs.test]\n  ports: [{}]\n  tunnel_ports: [{}]\n  \
         upstream_proxy: http://127.0.0.1:{}\n  upstream_proxy_auth_env: CORP_PROXY\n",
        ports.0, ports.1, squid.port
    );
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn leash_sends_what_it_allows_through_squid_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let Some(squid) = Squid::start(dir.path()) else { return };
    let http_port = origin();
    let ca = https_material(dir.path());
    let https = HttpsOrigin::start(dir.path());
    let policy = policy(dir.path(), &squid, (http_port, https.port));
    let log = dir.path().join("audit.jsonl");
    let (mut leash, addr) = leash_proxy(&policy, &log, "corp-user:s3cret");
    assert_eq!(curl(&addr, &[&format!("http://docs.test:{http_port}/plain")]), "200");
    let ca = ca.to_str().unwrap();
    assert_eq!(curl(&addr, &["--cacert", ca, &format!("https://docs.test:{}/tls", https.port)]), "200");
    assert_eq!(curl(&addr, &[&format!("http://other.test:{http_port}/refused")]), "403");
    let _ = leash.kill();
    let _ = leash.wait();
    let access = squid.access();
    assert!(access.contains(&format!("http://docs.test:{http_port}/plain")), "{access}");
    assert!(access.contains(&format!("CONNECT docs.test:{}", https.port)), "{access}");
    assert!(access.contains("corp-user"), "squid authenticated leash: {access}");
    assert!(!access.contains("other.test"), "a refused request reached squid: {access}");
}

#[test]
fn a_tunnel_squid_refuses_is_a_502_with_the_cause_on_record() {
    let dir = tempfile::tempdir().unwrap();
    let Some(squid) = Squid::start(dir.path()) else { return };
    let ca = https_material(dir.path());
    let https = HttpsOrigin::start(dir.path());
    let policy = policy(dir.path(), &squid, (80, https.port));
    let log = dir.path().join("audit.jsonl");
    let (mut leash, addr) = leash_proxy(&policy, &log, "corp-user:wrong");
    let url = format!("https://docs.test:{}/tls", https.port);
    let o = Command::new("curl")
        .args(["-s", "--max-time", "10", "-x", &format!("http://{addr}"), "--cacert", ca.to_str().unwrap(), &url])
        .output()
        .unwrap();
    assert!(!o.status.success(), "the tunnel failed: {}", stderr(&o));
    let _ = leash.kill();
    let _ = leash.wait();
    let outcome = log_lines(&log).into_iter().find(|l| l.get("status").is_some()).expect("an outcome line");
    assert_eq!((outcome["status"].as_u64(), outcome["error"].as_str()), (Some(502), Some("upstream-proxy")));
}

// squid as leash's only route: three network namespaces made by the test — leash's (and its client's), squid's, and
// the origins' — joined by two veth pairs, leash's to squid's and squid's to the origins'. Nothing routes from
// leash's namespace to the origins: whatever reaches them went through squid.

/// Addresses inside the test's own namespaces (198.18.0.0/15, the benchmarking range): leash's side of its link to
/// squid, squid's two sides, the origins' side.
const LEASH_SIDE: &str = "198.18.0.1";
const SQUID_FRONT: &str = "198.18.0.2";
const SQUID_BACK: &str = "198.18.0.5";
const ORIGIN: &str = "198.18.0.6";

/// Bound on every wait of these tests for a server in a namespace to listen.
const LISTEN_WAIT: Duration = Duration::from_secs(10);

/// The three namespaces, removed (with their links and addresses) on drop.
struct Net {
    leash: String,
    squid: String,
    origins: String,
}

impl Net {
    /// Make the namespaces, or say why not (not root, no `ip`, no squid) and return `None`.
    fn create(tag: &str) -> Option<Net> {
        let root = Command::new("id").arg("-u").output().map(|o| stdout_of(&o) == "0").unwrap_or(false);
        let missing = [(!root, "not root"), (!Path::new("/usr/sbin/squid").exists(), "squid is not installed")]
            .into_iter()
            .chain([(Command::new("ip").arg("-V").output().is_err(), "`ip` (iproute2) is not installed")])
            .find_map(|(missing, why)| missing.then_some(why));
        if let Some(why) = missing {
            assert!(std::env::var_os("LEASH_REQUIRE_SQUID").is_none(), "squid in namespaces cannot run: {why}");
            {
                // Written past the test harness's capture: a skip must show where the results are read.
                use std::io::Write as _;
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIPPED: squid in network namespaces needs root, iproute2 and squid: {why}"
                );
            };
            return None;
        }
        let name = |role: &str| format!("lsq{}{tag}{role}", std::process::id());
        let net = Net { leash: name("l"), squid: name("s"), origins: name("o") };
        for ns in [&net.leash, &net.squid, &net.origins] {
            ip(&["netns", "add", ns]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        net.link((&net.leash, LEASH_SIDE), (&net.squid, SQUID_FRONT));
        net.link((&net.squid, SQUID_BACK), (&net.origins, ORIGIN));
        Some(net)
    }

    /// A veth pair between two namespaces, made inside them (no name in the host's namespace), a /30 each side.
    fn link(&self, (a, a_addr): (&str, &str), (b, b_addr): (&str, &str)) {
        ip(&["link", "add", "name", "va", "netns", a, "type", "veth", "peer", "name", "vb", "netns", b]);
        for (ns, dev, addr) in [(a, "va", a_addr), (b, "vb", b_addr)] {
            ip(&["-n", ns, "addr", "add", &format!("{addr}/30"), "dev", dev]);
            ip(&["-n", ns, "link", "set", dev, "up"]);
        }
    }

    /// `program` run inside namespace `ns`.
    fn exec(ns: &str, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns, program]);
        cmd
    }

    /// Wait (bounded) until `addr:port` accepts a connection from inside `ns`.
    fn wait_listening(ns: &str, addr: &str, port: u16, what: &str) {
        let probe = format!("exec 3<>/dev/tcp/{addr}/{port}");
        let deadline = std::time::Instant::now() + LISTEN_WAIT;
        while std::time::Instant::now() < deadline {
            if Net::exec(ns, "bash").args(["-c", &probe]).stderr(Stdio::null()).status().is_ok_and(|s| s.success()) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("{what} did not listen on {addr}:{port} within {LISTEN_WAIT:?}");
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in [&self.leash, &self.squid, &self.origins] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

fn ip(args: &[&str]) {
    let o = Command::new("ip").args(args).output().unwrap();
    assert!(o.status.success(), "ip {args:?}: {}", stderr(&o));
}

fn stdout_of(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

/// A CA and one leaf for every name of these tests (the origins' names, and squid's address for its https_port),
/// made with openssl in `dir`; the leaf's key readable by squid's user.
fn namespace_material(dir: &Path) {
    let script = format!(
        r#"set -e
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem -days 2 \
  -subj /CN=leash-test-ca -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout leaf.key -out leaf.csr -subj /CN=docs.test \
  2>/dev/null
printf 'subjectAltName=DNS:docs.test,DNS:tls.test,DNS:denied.test,IP:{SQUID_FRONT}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' > ext.cnf
openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out leaf.pem -days 2 -extfile ext.cnf \
  2>/dev/null
chmod 644 leaf.key leaf.pem ca.pem
"#
    );
    let ok = Command::new("sh").args(["-c", &script]).current_dir(dir).status().unwrap();
    assert!(ok.success(), "openssl could not make the test certificates");
}

/// The origins, in their namespace: HTTP on port 80 answering `origin PATH`, HTTPS on 443 answering
/// `origin-tls PATH`; killed on drop.
struct NsOrigins(Child);

impl NsOrigins {
    fn start(net: &Net, dir: &Path) -> NsOrigins {
        let script = r#"
import http.server, ssl, threading
def handler(tag):
    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        def do_GET(self):
            body = (tag + " " + self.path).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        def log_message(self, *a):
            pass
    return H
plain = http.server.ThreadingHTTPServer(("0.0.0.0", 80), handler("origin"))
tls = http.server.ThreadingHTTPServer(("0.0.0.0", 443), handler("origin-tls"))
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain("leaf.pem", "leaf.key")
tls.socket = ctx.wrap_socket(tls.socket, server_side=True)
threading.Thread(target=plain.serve_forever, daemon=True).start()
tls.serve_forever()
"#;
        let child = Net::exec(&net.origins, "python3").args(["-c", script]).current_dir(dir).spawn().unwrap();
        let origins = NsOrigins(child);
        Net::wait_listening(&net.origins, ORIGIN, 80, "the HTTP origin");
        Net::wait_listening(&net.origins, ORIGIN, 443, "the HTTPS origin");
        origins
    }
}

impl Drop for NsOrigins {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// squid in its namespace: `http_port` 3128 and `https_port` 3129 (the leaf above) on its front address, Basic
/// authentication of `corp-user:s3cret`, the origins' names resolved from its own hosts file, `denied.test` denied
/// by an `http_access` rule; stopped on drop.
fn squid_in(net: &Net, dir: &Path) -> Squid {
    let sq = dir.join("squid");
    std::fs::create_dir(&sq).unwrap();
    Command::new("chmod").arg("777").arg(&sq).status().unwrap();
    let hash = Command::new("openssl").args(["passwd", "-apr1", "s3cret"]).output().unwrap();
    std::fs::write(sq.join("passwd"), format!("corp-user:{}", String::from_utf8_lossy(&hash.stdout))).unwrap();
    std::fs::write(sq.join("hosts"), format!("{ORIGIN} docs.test tls.test denied.test\n")).unwrap();
    let (d, t) = (sq.display(), dir.display());
    let conf = format!(
        "http_port {SQUID_FRONT}:3128\nhttps_port {SQUID_FRONT}:3129 tls-cert={t}/leaf.pem tls-key={t}/leaf.key\n\
         pid_filename {d}/squid.pid\naccess_log stdio:{d}/access.log\ncache_log {d}/cache.log\ncache deny all\n\
         cache_mem 8 MB\nhosts_file {d}/hosts\ncoredump_dir {d}\n\
         auth_param basic program /usr/lib/squid/basic_ncsa_auth {d}/passwd\nauth_param basic realm corp\n\
         acl authed proxy_auth REQUIRED\nacl denied dstdomain denied.test\nhttp_access deny denied\n\
         http_access allow authed\nhttp_access deny all\nshutdown_lifetime 0 seconds\nlogfile_rotate 0\n"
    );
    std::fs::write(sq.join("squid.conf"), conf).unwrap();
    let child = Net::exec(&net.squid, "/usr/sbin/squid")
        .args(["-N", "-n", &format!("leash{}", std::process::id()), "-f"])
        .arg(sq.join("squid.conf"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let squid = Squid { child, port: 3128, access_log: sq.join("access.log") };
    Net::wait_listening(&net.squid, SQUID_FRONT, 3128, "squid");
    Net::wait_listening(&net.squid, SQUID_FRONT, 3129, "squid's https_port");
    squid
}

/// `leash proxy` in leash's namespace with `policy` (written to `dir`), inspecting (its CA written out, the test CA
/// trusted upstream), `CORP_PROXY` set; its address, CA and audit log.
struct NsLeash {
    child: Child,
    addr: String,
    ca: std::path::PathBuf,
    log: std::path::PathBuf,
    ns: String,
}

impl NsLeash {
    fn start(net: &Net, dir: &Path, name: &str, policy: &str) -> NsLeash {
        let (path, ca, log) = (dir.join(format!("{name}.yaml")), dir.join(format!("{name}-ca.pem")), dir.join(name));
        std::fs::write(&path, policy).unwrap();
        let mut child = Net::exec(&net.leash, LEASH)
            .args(["proxy", "--listen", "127.0.0.1:0", "--policy"])
            .arg(&path)
            .arg("--log")
            .arg(&log)
            .arg("--ca-cert-out")
            .arg(&ca)
            .arg("--upstream-ca")
            .arg(dir.join("ca.pem"))
            .env("CORP_PROXY", "corp-user:s3cret")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let addr =
            line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("leash said {line:?}")).to_owned();
        // The client trusts leash's CA (inspected tunnels) and the test CA (spliced ones reach the origin's leaf).
        let bundle = dir.join(format!("{name}-bundle.pem"));
        let pems = [std::fs::read_to_string(&ca).unwrap(), std::fs::read_to_string(dir.join("ca.pem")).unwrap()];
        std::fs::write(&bundle, pems.join("\n")).unwrap();
        NsLeash { child, addr, ca: bundle, log, ns: net.leash.clone() }
    }

    /// curl through leash from leash's namespace: status and body.
    fn curl(&self, url: &str) -> (String, String) {
        let o = Net::exec(&self.ns, "curl")
            .args(["-s", "--max-time", "10", "-w", "\n%{http_code}", "-x", &format!("http://{}", self.addr)])
            .arg("--cacert")
            .arg(&self.ca)
            .arg(url)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        let (body, status) = text.rsplit_once('\n').unwrap_or(("", &text));
        (status.to_owned(), body.to_owned())
    }

    /// The audit log once leash has stopped.
    fn stop(mut self) -> Vec<serde_json::Value> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        log_lines(&self.log)
    }
}

/// The outcome line of the request whose decision line asked for `path`.
fn outcome_of<'a>(lines: &'a [serde_json::Value], path: &str) -> &'a serde_json::Value {
    let id = &lines.iter().find(|l| l["path"] == path).unwrap_or_else(|| panic!("no line for {path}: {lines:?}"))["id"];
    lines.iter().find(|l| &l["id"] == id && l.get("status").is_some()).expect("an outcome line")
}

fn ns_policy(proxy: &str) -> String {
    format!(
        "network:\n  mode: allowlist\n  allowed_hosts: [tls.test, denied.test]\n  allowed_urls: [docs.test/open/]\n  \
         upstream_proxy: {proxy}\n  upstream_proxy_auth_env: CORP_PROXY\n"
    )
}

#[test]
fn squid_in_its_own_namespace_is_leashs_only_route_and_leash_still_decides() {
    let Some(net) = Net::create("a") else { return };
    let dir = tempfile::tempdir().unwrap();
    namespace_material(dir.path());
    let _origins = NsOrigins::start(&net, dir.path());
    let squid = squid_in(&net, dir.path());
    let direct = Net::exec(&net.leash, "curl").args(["-s", "--max-time", "2", &format!("http://{ORIGIN}/")]).output();
    assert!(!direct.unwrap().status.success(), "leash's namespace reaches the origins without squid");
    let leash = NsLeash::start(&net, dir.path(), "http", &ns_policy(&format!("http://{SQUID_FRONT}:3128")));
    // Allowed: plain HTTP on an allowed path, a spliced tunnel, an inspected one (leash decides its path).
    assert_eq!(leash.curl("http://docs.test/open/plain"), ("200".into(), "origin /open/plain".into()));
    assert_eq!(leash.curl("https://tls.test/spliced"), ("200".into(), "origin-tls /spliced".into()));
    assert_eq!(leash.curl("https://docs.test/open/inspected"), ("200".into(), "origin-tls /open/inspected".into()));
    // Refused by leash, so never sent to squid: another host, a path outside the rule (plain and inside TLS).
    assert_eq!(leash.curl("http://other.test/refused").0, "403");
    assert_eq!(leash.curl("http://docs.test/closed-plain").0, "403");
    assert_eq!(leash.curl("https://docs.test/closed-tls").0, "403");
    // Allowed by leash, refused by squid's `http_access deny`: 502 naming squid's status and its error.
    let (status, body) = leash.curl("http://denied.test/squid-says-no");
    assert_eq!(status, "502", "{body}");
    assert!(body.contains(&format!("the upstream proxy `{SQUID_FRONT}:3128` answered 403")), "{body}");
    assert!(body.contains("X-Squid-Error: ERR_ACCESS_DENIED"), "{body}");
    let lines = leash.stop();
    let outcome = outcome_of(&lines, "/squid-says-no");
    assert_eq!((outcome["status"].as_u64(), outcome["error"].as_str()), (Some(502), Some("upstream-proxy")));
    let answer = outcome["upstream_proxy_answer"].as_str().unwrap_or_default();
    assert!(answer.contains("answered 403") && answer.contains("ERR_ACCESS_DENIED"), "the log says why: {outcome}");
    let access = squid.access();
    for seen in ["http://docs.test/open/plain", "CONNECT tls.test:443", "CONNECT docs.test:443", "corp-user"] {
        assert!(access.contains(seen), "squid's log lacks {seen}: {access}");
    }
    for never in ["other.test", "closed-plain"] {
        assert!(!access.contains(never), "a request leash refused reached squid ({never}): {access}");
    }
}

#[test]
fn an_https_squid_carries_leashs_requests_inside_tls() {
    let Some(net) = Net::create("b") else { return };
    let dir = tempfile::tempdir().unwrap();
    namespace_material(dir.path());
    let _origins = NsOrigins::start(&net, dir.path());
    let squid = squid_in(&net, dir.path());
    let ca = dir.path().join("ca.pem");
    let policy =
        format!("{}  upstream_proxy_ca: {}\n", ns_policy(&format!("https://{SQUID_FRONT}:3129")), ca.display());
    let leash = NsLeash::start(&net, dir.path(), "https", &policy);
    assert_eq!(leash.curl("http://docs.test/open/plain-in-tls"), ("200".into(), "origin /open/plain-in-tls".into()));
    assert_eq!(leash.curl("https://tls.test/tls-in-tls"), ("200".into(), "origin-tls /tls-in-tls".into()));
    let inspected = leash.curl("https://docs.test/open/inspected-in-tls");
    assert_eq!(inspected, ("200".into(), "origin-tls /open/inspected-in-tls".into()));
    assert_eq!(leash.curl("https://docs.test/closed-tls").0, "403");
    let (status, body) = leash.curl("http://denied.test/no");
    assert_eq!(status, "502", "{body}");
    drop(leash.stop());
    let access = squid.access();
    assert!(
        access.contains("http://docs.test/open/plain-in-tls") && access.contains("CONNECT tls.test:443"),
        "{access}"
    );
}

#[test]
fn check_refuses_an_upstream_proxy_ca_that_is_missing_or_holds_no_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let (policy, bad) = (dir.path().join("p.yaml"), dir.path().join("bad.pem"));
    std::fs::write(&bad, "not a certificate\n").unwrap();
    for (ca, says) in [(dir.path().join("missing.pem"), "cannot read"), (bad, "holds no usable PEM certificate")] {
        let text = format!("{}  upstream_proxy_ca: {}\n", ns_policy("https://proxy.corp.test:3129"), ca.display());
        std::fs::write(&policy, text).unwrap();
        let o = Command::new(LEASH).arg("check").arg(&policy).output().unwrap();
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        assert!(stderr(&o).contains("network.upstream_proxy_ca") && stderr(&o).contains(says), "{}", stderr(&o));
    }
}
