//! What the binary's test suites share (`tests/cli.rs`, `tests/docker.rs`, `tests/run.rs`): origins on the host's
//! loopback (plain HTTP, and HTTPS with a throw-away CA made by openssl), output and audit-log readers, the check
//! that namespaces can be made. Each suite uses a part.
#![allow(dead_code, reason = "each suite uses a part")]

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The audit log's lines; each must be JSON.
pub fn log_lines(log: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines().map(|l| serde_json::from_str(l).expect("every log line is JSON")).collect()
}

/// The audit log's decision lines, split into the DNS stub's lookups (method `DNS`) and every other decision.
pub fn lookups_and_decisions(lines: &[serde_json::Value]) -> (Vec<&serde_json::Value>, Vec<&serde_json::Value>) {
    lines.iter().filter(|l| l.get("decision").is_some()).partition(|l| l["method"] == "DNS")
}

/// `(decision, host)` of each line.
pub fn decided(lines: &[&serde_json::Value]) -> Vec<(String, String)> {
    let text = |l: &serde_json::Value, k: &str| l[k].as_str().unwrap_or_default().to_owned();
    lines.iter().map(|l| (text(l, "decision"), text(l, "host"))).collect()
}

/// An HTTP origin on the host's loopback answering every request with 200 "origin".
pub fn origin() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    if line == "\r\n" {
                        let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\norigin");
                    }
                }
            });
        }
    });
    port
}

/// A test CA and a leaf for `docs.test`, made with openssl in `dir`; returns the CA's PEM path.
pub fn https_material(dir: &Path) -> PathBuf {
    https_material_for(dir, &["docs.test"])
}

/// [`https_material`] with a leaf (`leaf.pem`, `leaf.key`) for each of `names`.
pub fn https_material_for(dir: &Path, names: &[&str]) -> PathBuf {
    let san: Vec<String> = names.iter().map(|n| format!("DNS:{n}")).collect();
    let script = r#"set -e
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem -days 2 \
  -subj /CN=leash-test-ca -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout leaf.key -out leaf.csr -subj /CN=docs.test \
  2>/dev/null
printf 'subjectAltName=%s\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' "$1" > ext.cnf
openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out leaf.pem -days 2 -extfile ext.cnf \
  2>/dev/null
"#;
    let ok = Command::new("sh").args(["-c", script, "sh", &san.join(",")]).current_dir(dir).status().unwrap();
    assert!(ok.success(), "openssl could not make the test certificates");
    dir.join("ca.pem")
}

/// An HTTPS origin on the host's loopback (Python's http.server with the leaf from [`https_material`]) answering
/// `origin-tls PATH`, counting the connections it accepts (before any TLS: what was dialled, whatever came of it);
/// killed on drop.
pub struct HttpsOrigin {
    _server: Served,
    pub port: u16,
    dir: std::path::PathBuf,
}

impl HttpsOrigin {
    pub fn start(dir: &Path) -> HttpsOrigin {
        let script = r#"
import http.server, ssl
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = ("origin-tls " + self.path).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
class Counting(http.server.ThreadingHTTPServer):
    def get_request(self):
        sock, addr = self.socket.accept()
        with open("accepts", "a") as f:
            f.write("accepted\n")
        return ctx.wrap_socket(sock, server_side=True), addr
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain("leaf.pem", "leaf.key")
srv = Counting(("127.0.0.1", 0), H)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"#;
        let (_server, port) = Served::start(Command::new("python3").args(["-c", script]).current_dir(dir));
        HttpsOrigin { _server, port, dir: dir.to_path_buf() }
    }

    /// The connections accepted so far.
    pub fn accepts(&self) -> usize {
        std::fs::read_to_string(self.dir.join("accepts")).unwrap_or_default().lines().count()
    }
}

/// A server a test runs as a child process, which prints the port it listens on as its first line; killed and
/// reaped when dropped.
pub struct Served(Child);

impl Served {
    /// Start `cmd` (its standard output piped) and read the port it prints.
    pub fn start(cmd: &mut Command) -> (Served, u16) {
        let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line.trim().parse().unwrap_or_else(|_| panic!("no port from {cmd:?}: {line:?}"));
        (Served(child), port)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Namespaces are needed; where the kernel refuses them the test says so loudly, and fails when CI requires them.
pub fn sandbox_available() -> bool {
    let ok = Command::new("unshare").args(["-rn", "true"]).status().map(|s| s.success()).unwrap_or(false);
    if !ok {
        assert!(
            std::env::var_os("LEASH_REQUIRE_SANDBOX").is_none(),
            "namespaces unavailable but LEASH_REQUIRE_SANDBOX is set"
        );
        {
            // Written past the test harness's capture: a skip must show where the results are read.
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: this kernel refuses user/network namespaces; `leash run` tests did not run"
            );
        };
    }
    ok
}

/// A fake model provider over HTTPS on the host's loopback (the leaf from [`https_material`], `docs.test`): 401 unless
/// `x-api-key` is `key`; then 200 with `your key: <the key it got>`, an API that quotes the key back. Every key it
/// was sent is appended to `seen` (one per line). Killed on drop.
pub struct FakeProvider {
    _server: Served,
    pub port: u16,
}

impl FakeProvider {
    pub fn start(dir: &Path, key: &str, seen: &Path) -> FakeProvider {
        let script = r#"
import http.server, ssl, sys
KEY, SEEN = sys.argv[1], sys.argv[2]
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def answer(self):
        got = self.headers.get("x-api-key", "")
        n = int(self.headers.get("content-length") or 0)
        self.rfile.read(n)
        with open(SEEN, "a") as f:
            f.write(got + "\n")
        status, body = (200, ("your key: " + got).encode()) if got == KEY else (401, b"no valid key")
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST = answer
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain("leaf.pem", "leaf.key")
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"#;
        let (_server, port) =
            Served::start(Command::new("python3").args(["-c", script, key]).arg(seen).current_dir(dir));
        FakeProvider { _server, port }
    }
}

/// Docker answers and the image `image` is built from Debian packages (tests/docker/build-image.sh, with `packages`
/// besides its own; nothing is done when it exists), or why not.
pub fn docker_image(image: &str, packages: &str) -> Result<(), String> {
    let info = Command::new("docker").args(["info", "--format", "{{.ServerVersion}}"]).output();
    match info {
        Ok(o) if o.status.success() => {}
        Ok(o) => return Err(format!("`docker info` failed: {}", String::from_utf8_lossy(&o.stderr).trim())),
        Err(e) => return Err(format!("no docker: {e}")),
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/docker/build-image.sh");
    let built = Command::new(&script)
        .env("LEASH_TEST_IMAGE", image)
        .env("LEASH_TEST_IMAGE_PACKAGES", packages)
        .output()
        .map_err(|e| e.to_string())?;
    if !built.status.success() {
        return Err(format!("build-image.sh failed: {}", String::from_utf8_lossy(&built.stderr)));
    }
    Ok(())
}
