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
            eprintln!("SKIPPED: squid is not installed (apt-get install squid)");
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
