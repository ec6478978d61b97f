//! The policy's `services` as a user meets them: the operator's own MCP server (python's http.server on the host's
//! loopback) and a Unix-socket server on the host, reached from `leash run` through the sandbox's own listeners and
//! from a sandbox served by `leash proxy`, with curl and python as clients; what the audit log, the run's summary,
//! `leash policy suggest` and `leash check` say about them. Only loopback is used: the host's and the sandbox's own.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test's helpers fail it by panicking")]

mod common;

use common::{log_lines, sandbox_available, stderr, stdout, Served};

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const LEASH: &str = env!("CARGO_BIN_EXE_leash");

/// Seconds a whole `leash run` (or a one-shot leash command) may take before `timeout` ends it: every client inside
/// has its own shorter bound, so only a hung leash gets near this.
const RUN_LIMIT_SECS: &str = "60";

/// Bound on waiting for a line from `leash proxy` (its `listening on`, a reload's message).
const PROXY_WAIT: Duration = Duration::from_secs(20);

/// The JSON-RPC call an MCP client makes first.
const TOOLS_LIST: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;

/// An MCP-style server on `argv[2]` (default 127.0.0.1): `POST /mcp` answers a JSON-RPC call (`tools/list` lists one tool), `GET /admin` is 200
/// "secret admin", anything else 404. Every request's method and path is appended to `argv[1]` before it is answered.
const MCP_SERVER: &str = r#"
import http.server, json, sys
SEEN = sys.argv[1]
ADDR = sys.argv[2] if len(sys.argv) > 2 else "127.0.0.1"
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def reply(self, status, body, ctype):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def seen(self):
        with open(SEEN, "a") as f:
            f.write(self.command + " " + self.path + "\n")
    def do_POST(self):
        self.seen()
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.path != "/mcp":
            return self.reply(404, b"no such endpoint", "text/plain")
        call = json.loads(raw)
        if call.get("method") == "tools/list":
            tool = {"name": "search_docs", "description": "search the docs", "inputSchema": {"type": "object"}}
            out = {"jsonrpc": "2.0", "id": call.get("id"), "result": {"tools": [tool]}}
        else:
            out = {"jsonrpc": "2.0", "id": call.get("id"), "error": {"code": -32601, "message": "method not found"}}
        self.reply(200, json.dumps(out).encode(), "application/json")
    def do_GET(self):
        self.seen()
        if self.path == "/admin":
            return self.reply(200, b"secret admin", "text/plain")
        self.reply(404, b"no such page", "text/plain")
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer((ADDR, 0), H)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"#;

/// An MCP client run inside the sandbox with python's urllib, which honours the proxy variables leash sets: it reaches
/// the service's listener only because of `NO_PROXY`. Prints the answer to the `tools/list` call.
const URLLIB_CLIENT: &str = r#"
import json, urllib.request
call = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
r = urllib.request.Request("http://127.0.0.1:8080/mcp", data=call, headers={"content-type": "application/json"})
print(urllib.request.urlopen(r, timeout=10).read().decode())
"#;

/// An HTTP server on the Unix socket `argv[1]` answering every GET with `unix says PATH`; prints 0 once listening.
const UNIX_SERVER: &str = r#"
import http.server, socketserver, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = ("unix says " + self.path).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def address_string(self):
        return "unix"
    def log_message(self, *a):
        pass
class S(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
srv = S(sys.argv[1], H)
print(0, flush=True)
srv.serve_forever()
"#;

/// A client run inside the sandbox: a GET over the Unix socket `argv[1]` (prints the body), then a connect to the
/// Unix socket `argv[2]` (prints `connected` or `refused`).
const UNIX_CLIENT: &str = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(10)
s.connect(sys.argv[1])
s.sendall(b"GET /raw HTTP/1.0\r\nHost: x\r\n\r\n")
data = b""
while True:
    chunk = s.recv(4096)
    if not chunk:
        break
    data += chunk
print(data.split(b"\r\n\r\n", 1)[1].decode())
d = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
d.settimeout(10)
try:
    d.connect(sys.argv[2])
    print("connected")
except OSError:
    print("refused")
"#;

/// The interpreter behind `python3`, resolved once: a version manager's shim may fork, and a server started through
/// it would outlive the kill that ends the test.
fn python() -> &'static str {
    static PYTHON: OnceLock<String> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let o = Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).output().unwrap();
        String::from_utf8(o.stdout).unwrap().trim().to_owned()
    })
}

/// A port nothing listens on now: bound to 127.0.0.1:0, then closed.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `N` distinct free ports: every listener is held until all are chosen (one at a time, the kernel may hand the
/// same port out twice, and a proxy whose service names its own port refuses to start).
fn free_ports<const N: usize>() -> [u16; N] {
    let held: Vec<TcpListener> = (0..N).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    std::array::from_fn(|i| held[i].local_addr().unwrap().port())
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// The MCP server, on the host's loopback; killed on drop.
struct Mcp {
    _server: Served,
    port: u16,
    seen: PathBuf,
}

impl Mcp {
    fn start(dir: &Path, name: &str) -> Mcp {
        Mcp::start_on(dir, name, "127.0.0.1")
    }

    fn start_on(dir: &Path, name: &str, addr: &str) -> Mcp {
        let script = write(dir, &format!("{name}.py"), MCP_SERVER);
        let seen = dir.join(format!("{name}.seen"));
        std::fs::write(&seen, "").unwrap();
        let (_server, port) = Served::start(Command::new(python()).arg(script).arg(&seen).arg(addr));
        Mcp { _server, port, seen }
    }

    /// `METHOD PATH` of every request the server was sent.
    fn seen(&self) -> Vec<String> {
        std::fs::read_to_string(&self.seen).unwrap().lines().map(str::to_owned).collect()
    }
}

/// The Unix-socket server at `path`, on the host; killed on drop.
fn unix_server(dir: &Path, path: &Path) -> Served {
    let script = write(dir, "unix_server.py", UNIX_SERVER);
    Served::start(Command::new(python()).arg(script).arg(path)).0
}

/// An allowlist of `example.test` (nothing here resolves it) with `services` (YAML list items, indented 4).
fn policy(dir: &Path, services: &str) -> PathBuf {
    policy_with(dir, "  allowed_hosts: [example.test]\n", services)
}

/// An allowlist with `rules` (lines of the `network` section, indented 2) and `services`.
fn policy_with(dir: &Path, rules: &str, services: &str) -> PathBuf {
    write(dir, "policy.yaml", &format!("network:\n  mode: allowlist\n{rules}  services:\n{services}"))
}

/// `leash run --policy POLICY --log LOG -- sh -c SCRIPT`, ended by `timeout` if it hangs.
fn leash_run(policy: &Path, log: &Path, script: &str) -> Output {
    Command::new("timeout")
        .args(["-k", "5", RUN_LIMIT_SECS, LEASH, "run", "--policy"])
        .arg(policy)
        .arg("--log")
        .arg(log)
        .args(["--", "sh", "-c", script])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

/// A one-shot leash command (`check`, `policy suggest`, a proxy that must refuse to start), ended if it hangs.
fn leash(args: &[&str]) -> Output {
    Command::new("timeout")
        .args(["-k", "5", RUN_LIMIT_SECS, LEASH])
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

/// A curl that prints the status then curl's own exit code (`000 7`: the connection was refused).
fn curl_status(args: &str) -> String {
    format!("curl -s -o /dev/null -w '%{{http_code}}' --max-time 10 {args}; echo \" $?\"; ")
}

/// curl POSTing the `tools/list` call to `url`, printing the answer on a line of its own.
fn curl_tools_list(url: &str) -> String {
    format!("curl -s --max-time 10 -H 'content-type: application/json' -d '{TOOLS_LIST}' {url}; echo; ")
}

/// The audit log's decision lines (no DNS lookups).
fn decisions(lines: &[serde_json::Value]) -> Vec<&serde_json::Value> {
    lines.iter().filter(|l| l.get("decision").is_some() && l["method"] != "DNS").collect()
}

/// The outcome line of decision `id`.
fn outcome(lines: &[serde_json::Value], id: &serde_json::Value) -> serde_json::Value {
    let found = lines.iter().find(|l| l["id"] == *id && l.get("decision").is_none());
    found.unwrap_or_else(|| panic!("no outcome line for id {id}: {lines:?}")).clone()
}

/// `method path decision reason rule service` of a decision line, for comparing whole lists.
fn shown(l: &serde_json::Value) -> String {
    let field = |k: &str| l[k].as_str().unwrap_or("-").to_owned();
    ["method", "path", "decision", "reason", "rule", "service"].map(field).join(" ")
}

/// Asserts the answer to [`TOOLS_LIST`]: the one tool the MCP server has.
fn assert_tools_list(answer: &str) {
    let v: serde_json::Value = serde_json::from_str(answer).unwrap_or_else(|_| panic!("not JSON: {answer:?}"));
    assert_eq!((v["jsonrpc"].as_str(), v["id"].as_i64()), (Some("2.0"), Some(1)), "{v}");
    assert_eq!(v["result"]["tools"][0]["name"], "search_docs", "{v}");
}

// ---- leash run, TCP services

#[test]
fn run_tcp_service_relays_an_mcp_json_rpc_call_from_curl_and_python_and_logs_each_connection() {
    if !sandbox_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mcp = Mcp::start(dir.path(), "mcp");
    let policy = policy(dir.path(), &format!("    - {{name: mcp, listen: 8080, target: '127.0.0.1:{}'}}\n", mcp.port));
    let log = dir.path().join("audit.jsonl");
    let client = write(dir.path(), "client.py", URLLIB_CLIENT);
    let script = format!(
        "echo \"$NO_PROXY|$no_proxy\"; {} {} {}",
        curl_tools_list("http://127.0.0.1:8080/mcp"),
        python(),
        client.display()
    );
    let o = leash_run(&policy, &log, &script);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let out: Vec<&str> = out.lines().collect();
    assert_eq!(out.len(), 3, "{out:?} {}", stderr(&o));
    assert_eq!(out[0], "localhost,127.0.0.1|localhost,127.0.0.1");
    assert_tools_list(out[1]);
    assert_tools_list(out[2]);
    assert_eq!(mcp.seen(), ["POST /mcp", "POST /mcp"]);
    let lines = log_lines(&log);
    let decided = decisions(&lines);
    assert_eq!(decided.len(), 2, "one line per connection: {lines:?}");
    for d in decided {
        assert_eq!(
            (d["method"].as_str(), d["host"].as_str(), d["port"].as_u64()),
            (Some("SERVICE"), Some("mcp"), Some(8080))
        );
        assert_eq!(
            (d["decision"].as_str(), d["rule"].as_str(), d["service"].as_str()),
            (Some("allow"), Some("service:mcp"), Some("mcp"))
        );
        assert!(d["path"].is_null(), "{d}");
        assert!(d["client"].as_str().unwrap().starts_with("127.0.0.1:"), "{d}");
        let done = outcome(&lines, &d["id"]);
        assert!(done.get("error").is_none(), "{done}");
        assert!(done["bytes_up"].as_u64().unwrap() > TOOLS_LIST.len() as u64, "{done}");
        assert!(done["bytes_down"].as_u64().unwrap() > 0, "{done}");
    }
}

#[test]
fn run_a_neighbouring_host_port_and_the_target_itself_stay_unreachable_but_through_the_service() {
    if !sandbox_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mcp = Mcp::start(dir.path(), "mcp");
    let neighbour = Mcp::start(dir.path(), "neighbour");
    let (n, t) = (neighbour.port, mcp.port);
    // The neighbour's port is in `ports`, so what refuses it through the proxy is where it is, not its port.
    let rules = format!("  allowed_hosts: [example.test]\n  ports: [80, {n}]\n");
    let policy =
        policy_with(dir.path(), &rules, &format!("    - {{name: mcp, listen: 8080, target: '127.0.0.1:{t}'}}\n"));
    let log = dir.path().join("audit.jsonl");
    // Directly: the sandbox's loopback is its own, nothing listens there on these ports. Through the proxy (NO_PROXY
    // dropped so curl uses it): an IP literal, or a name not allowed.
    let script = [
        curl_status(&format!("--noproxy '*' http://127.0.0.1:{n}/admin")),
        curl_status(&format!("--noproxy '*' http://127.0.0.1:{t}/admin")),
        format!("(unset NO_PROXY no_proxy; {})\n", curl_status(&format!("http://127.0.0.1:{n}/admin"))),
        format!("(unset NO_PROXY no_proxy; {})\n", curl_status(&format!("http://localhost:{n}/admin"))),
        curl_status("http://127.0.0.1:8080/admin"),
    ]
    .concat();
    let o = leash_run(&policy, &log, &script);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // curl's 7 is "could not connect"; the last is the service, whose TCP relay lets every path through.
    assert_eq!(stdout(&o), "000 7\n000 7\n403 0\n403 0\n200 0\n", "{}", stderr(&o));
    assert!(neighbour.seen().is_empty(), "the neighbour was reached: {:?}", neighbour.seen());
    assert_eq!(mcp.seen(), ["GET /admin"], "only the service's connection reached the target");
    let lines = log_lines(&log);
    let refused: Vec<_> = decisions(&lines).into_iter().filter(|l| l["decision"] == "block").collect();
    let refused: Vec<String> = refused.into_iter().map(shown).collect();
    assert_eq!(refused, ["GET /admin block ip-literal - -", "GET /admin block not-allowed - -"]);
    assert!(decisions(&lines).iter().all(|l| l["port"] == n || l["service"] == "mcp"), "{lines:?}");
}

#[test]
fn run_http_service_passes_only_its_paths_and_the_server_never_sees_the_rest() {
    if !sandbox_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mcp = Mcp::start(dir.path(), "mcp");
    let entry =
        format!("    - {{name: mcp, listen: 8080, target: '127.0.0.1:{}', kind: http, paths: [/mcp]}}\n", mcp.port);
    let policy = policy(dir.path(), &entry);
    let log = dir.path().join("audit.jsonl");
    let script = [
        curl_tools_list("http://127.0.0.1:8080/mcp"),
        curl_status("http://127.0.0.1:8080/admin"),
        curl_status("--path-as-is http://127.0.0.1:8080/mcp/../admin"),
        curl_status("--path-as-is http://127.0.0.1:8080/mcp/%2e%2e/admin"),
        curl_status("http://127.0.0.1:8080/mcpx"),
        "curl -s --max-time 10 http://127.0.0.1:8080/admin; echo".to_owned(),
    ]
    .concat();
    let o = leash_run(&policy, &log, &script);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let (answer, rest) = out.split_once('\n').unwrap();
    assert_tools_list(answer);
    let (statuses, body) = rest.split_at(rest.match_indices('\n').nth(3).map_or(0, |(at, _)| at + 1));
    assert_eq!(statuses, "403 0\n403 0\n403 0\n403 0\n", "{}", stderr(&o));
    assert!(body.starts_with("leash: mcp/admin refused by the egress policy (not-allowed)"), "{body}");
    assert!(!body.contains("secret"), "{body}");
    assert_eq!(mcp.seen(), ["POST /mcp"], "a refused path reached the server");
    let lines = log_lines(&log);
    let decided: Vec<String> = decisions(&lines).into_iter().map(shown).collect();
    assert_eq!(decided[0], "POST /mcp allow rule service:mcp/mcp mcp");
    assert_eq!(decided[1], "GET /admin block not-allowed - mcp");
    for (line, path) in decided[2..4].iter().zip(["/mcp/../admin", "/mcp/%2e%2e/admin"]) {
        let refused = [format!("GET {path} block not-allowed - mcp"), format!("GET {path} block ambiguous-path - mcp")];
        assert!(refused.contains(line), "{line}");
    }
    assert_eq!(decided[4..], ["GET /mcpx block not-allowed - mcp", "GET /admin block not-allowed - mcp"]);
    let first = decisions(&lines)[0]["id"].clone();
    assert_eq!(outcome(&lines, &first)["status"], 200);
}

#[test]
fn run_a_client_that_tunnels_to_the_gateway_through_the_proxy_reaches_the_service_and_its_paths_only() {
    // Gemini's client sends its gateway a CONNECT through the proxy whatever NO_PROXY says: curl --proxytunnel with
    // no NO_PROXY does the same.
    if !sandbox_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mcp = Mcp::start(dir.path(), "mcp");
    let entry =
        format!("    - {{name: mcp, listen: 8080, target: '127.0.0.1:{}', kind: http, paths: [/mcp]}}\n", mcp.port);
    let policy = policy(dir.path(), &entry);
    let log = dir.path().join("audit.jsonl");
    let tunneled = "--proxytunnel --noproxy '' -x \"$HTTP_PROXY\"";
    let script = [
        format!("curl -s --max-time 10 {tunneled} -H 'content-type: application/json' -d '{TOOLS_LIST}' http://127.0.0.1:8080/mcp; echo; "),
        curl_status(&format!("{tunneled} http://localhost:8080/admin")),
        curl_status(&format!("{tunneled} http://127.0.0.1:{}/mcp", mcp.port)),
    ]
    .concat();
    let o = leash_run(&policy, &log, &script);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let (answer, statuses) = out.split_once('\n').unwrap();
    assert_tools_list(answer);
    // The refused path inside the tunnel: 403 from the service's gate; the server's own port: the CONNECT refused.
    let statuses: Vec<&str> = statuses.lines().collect();
    assert_eq!(statuses[0], "403 0", "{}", stderr(&o));
    assert!(statuses[1].starts_with("403 ") || statuses[1].starts_with("000 "), "{statuses:?}");
    assert_eq!(mcp.seen(), ["POST /mcp"], "only the service's path reached the server");
    let lines = log_lines(&log);
    let decided: Vec<String> = decisions(&lines).into_iter().map(shown).collect();
    assert_eq!(decided[0], "POST /mcp allow rule service:mcp/mcp mcp", "{decided:?}");
    assert_eq!(decided[1], "GET /admin block not-allowed - mcp", "{decided:?}");
    assert!(decided[2].starts_with("CONNECT "), "the gateway's own port is not a service: {decided:?}");
}

/// A client run inside the sandbox on one connection to 127.0.0.1:8080: an allowed request followed by a refused
/// one, pipelined in one write, then the same after a chunked body, then a request framed both ways; prints the
/// statuses it got back (and `secret` if the admin page came back).
const PIPELINING_CLIENT: &str = r#"
import re, socket
def raw(data):
    s = socket.create_connection(("127.0.0.1", 8080), timeout=10)
    s.sendall(data)
    out = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        out += chunk
    print(" ".join(m.decode() for pair in re.findall(rb"HTTP/1\.[01] (\d{3})|(secret)", out) for m in pair if m))
raw(b"GET /mcp HTTP/1.1\r\nHost: x\r\n\r\nGET /admin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
raw(b"POST /mcp/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    b"GET /admin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
raw(b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    b"GET /admin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
"#;

#[test]
fn run_http_service_decides_every_request_on_a_kept_alive_connection_and_carries_a_large_body() {
    if !sandbox_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mcp = Mcp::start(dir.path(), "mcp");
    let entry =
        format!("    - {{name: mcp, listen: 8080, target: '127.0.0.1:{}', kind: http, paths: [/mcp]}}\n", mcp.port);
    let policy = policy(dir.path(), &entry);
    let log = dir.path().join("audit.jsonl");
    // A 1 MiB JSON-RPC call: the body must reach the server whole.
    let big =
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{"pad":"{}"}}}}"#, "x".repeat(1 << 20));
    let call = write(dir.path(), "call.json", &big);
    let client = write(dir.path(), "pipelining.py", PIPELINING_CLIENT);
    let script = format!(
        "curl -s --max-time 10 -H 'content-type: application/json' --data-binary @{} http://127.0.0.1:8080/mcp; echo; \
         curl -s -o /dev/null -w '%{{http_code}} %{{num_connects}}\\n' --max-time 10 \
           http://127.0.0.1:8080/mcp/a -o /dev/null http://127.0.0.1:8080/admin; {} {}",
        call.display(),
        python(),
        client.display()
    );
    let o = leash_run(&policy, &log, &script);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let out: Vec<&str> = out.lines().collect();
    assert_tools_list(out[0]);
    // curl's second transfer reused the first's connection (no new connect) and was refused on it.
    assert_eq!(out[1..3], ["404 1", "403 0"], "{}", stderr(&o));
    assert_eq!(out[3], "404 403");
    // python's http.server does not read chunked bodies: what it answers after the first is its own affair; what
    // matters is that leash refused the request that followed the body.
    assert!(out[4].starts_with("404") && out[4].ends_with("403"), "{}", out[4]);
    assert_eq!(out[5], "400", "both Content-Length and Transfer-Encoding");
    assert!(!mcp.seen().iter().any(|s| s.contains("admin")), "{:?}", mcp.seen());
    let lines = log_lines(&log);
    let first = decisions(&lines)[0]["id"].clone();
    assert!(outcome(&lines, &first)["bytes_up"].as_u64().unwrap() > 1 << 20, "{lines:?}");
}

#[test]
fn run_service_whose_target_is_down_gives_502_or_a_closed_connection_and_an_error_line() {
    if !sandbox_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let down = free_port();
    let entries = format!(
        "    - {{name: raw, listen: 8080, target: '127.0.0.1:{down}'}}\n    \
         - {{name: web, listen: 8081, target: '127.0.0.1:{down}', kind: http}}\n"
    );
    let policy = policy(dir.path(), &entries);
    let log = dir.path().join("audit.jsonl");
    let script = [curl_status("http://127.0.0.1:8080/x"), curl_status("http://127.0.0.1:8081/x")].concat();
    let o = leash_run(&policy, &log, &script);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let (raw, web) = out.split_once('\n').unwrap();
    // The TCP relay accepted, then closed: curl's 52 (empty reply) or 56 (connection reset).
    assert!(raw == "000 52" || raw == "000 56", "{raw}");
    assert_eq!(web, "502 0\n");
    let lines = log_lines(&log);
    for d in decisions(&lines) {
        assert_eq!(d["decision"], "allow", "{d}");
        let done = outcome(&lines, &d["id"]);
        assert!(done["error"].as_str().is_some_and(|e| !e.is_empty()), "{done}");
    }
    assert_eq!(decisions(&lines).len(), 2, "{lines:?}");
}

// ---- leash run, Unix-socket services

#[test]
fn run_unix_socket_service_reaches_the_host_socket_only_through_its_listener_and_removes_it() {
    if !sandbox_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (listen, target) = (dir.path().join("in.sock"), dir.path().join("server.sock"));
    let _server = unix_server(dir.path(), &target);
    let entry = format!("    - {{name: tools, listen: {}, target: {}}}\n", listen.display(), target.display());
    let policy = policy(dir.path(), &entry);
    let log = dir.path().join("audit.jsonl");
    let client = write(dir.path(), "client.py", UNIX_CLIENT);
    let script = format!(
        "test -S {l} && echo socket; curl -s --max-time 10 --unix-socket {l} http://tools/curl; echo; {py} {c} {l} {t}",
        l = listen.display(),
        t = target.display(),
        py = python(),
        c = client.display()
    );
    let o = leash_run(&policy, &log, &script);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // The host's own socket stays closed to the command: only the listener leash made is let through.
    assert_eq!(stdout(&o), "socket\nunix says /curl\nunix says /raw\nrefused\n", "{}", stderr(&o));
    assert!(!listen.exists(), "the listening socket was left behind");
    assert!(target.exists(), "the host's socket is not leash's to remove");
    let lines = log_lines(&log);
    let decided = decisions(&lines);
    assert_eq!(decided.len(), 2, "{lines:?}");
    for d in decided {
        assert_eq!(
            (d["method"].as_str(), d["port"].as_u64(), d["service"].as_str()),
            (Some("SERVICE"), Some(0), Some("tools"))
        );
        assert_eq!(d["client"], "0.0.0.0:0");
        let done = outcome(&lines, &d["id"]);
        assert!(done.get("error").is_none() && done["bytes_down"].as_u64().unwrap() > 0, "{done}");
    }
}

#[test]
fn run_refuses_to_start_where_something_already_is_at_a_listen_path_and_leaves_it() {
    let dir = tempfile::tempdir().unwrap();
    let listen = write(dir.path(), "in.sock", "someone else's file\n");
    let entry = format!("    - {{name: tools, listen: {}, target: /nonexistent/server.sock}}\n", listen.display());
    let policy = policy(dir.path(), &entry);
    let marker = dir.path().join("ran");
    let o = leash_run(&policy, &dir.path().join("audit.jsonl"), &format!("touch {}", marker.display()));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("tools") && stderr(&o).contains(listen.to_str().unwrap()), "{}", stderr(&o));
    assert!(!marker.exists(), "the command ran");
    assert_eq!(std::fs::read_to_string(&listen).unwrap(), "someone else's file\n", "the file was touched");
}

// ---- the summary and the log readers

#[test]
fn run_summary_names_a_refused_service_request_and_policy_suggest_allows_no_service_name() {
    if !sandbox_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mcp = Mcp::start(dir.path(), "mcp");
    // An allowed host beside the services, so that `suggest` has a host to suggest: on 127.0.0.2, which the
    // policy may reach without opening the services' target (127.0.0.1) around them.
    let docs = Mcp::start_on(dir.path(), "docs", "127.0.0.2");
    let rules =
        format!("  allowed_hosts: [docs.test]\n  ports: [{}]\n  allow_destinations: [127.0.0.2/32]\n", docs.port);
    let entries = format!(
        "    - {{name: mcp, listen: 8080, target: '127.0.0.1:{p}'}}\n    \
         - {{name: gw, listen: 8081, target: '127.0.0.1:{p}', kind: http, paths: [/v1/]}}\n",
        p = mcp.port
    );
    let policy = policy_with(dir.path(), &rules, &entries);
    let log = dir.path().join("audit.jsonl");
    let script = [
        curl_tools_list("http://127.0.0.1:8080/mcp"),
        curl_status("http://127.0.0.1:8081/admin"),
        curl_status("http://127.0.0.1:8081/v1/x"),
        curl_status(&format!("http://docs.test:{}/admin", docs.port)),
    ]
    .concat();
    let o = Command::new("timeout")
        .args(["-k", "5", RUN_LIMIT_SECS, LEASH, "run", "--resolve", "docs.test:127.0.0.2", "--policy"])
        .arg(&policy)
        .arg("--log")
        .arg(&log)
        .args(["--", "sh", "-c", &script])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).ends_with("403 0\n404 0\n200 0\n"), "{}", stdout(&o));
    let err = stderr(&o);
    let summary = &err[err.find("leash: 1 request").unwrap_or_else(|| panic!("no summary: {err}"))..];
    assert!(summary.contains("gw") && summary.contains("/admin") && summary.contains("not-allowed"), "{summary}");
    assert!(
        !summary.contains("mcp") && !summary.contains("docs.test"),
        "an allowed request is in the summary: {summary}"
    );

    let suggest = leash(&["policy", "suggest", log.to_str().unwrap()]);
    assert_eq!(suggest.status.code(), Some(0), "{}", stderr(&suggest));
    let suggested = stdout(&suggest);
    let rules: Vec<&str> = suggested.lines().filter(|l| !l.trim_start().starts_with('#')).collect();
    assert!(rules.iter().any(|l| l.contains("docs.test")), "{suggested}");
    assert!(!rules.iter().any(|l| l.contains("gw") || l.contains("mcp") || l.contains("service")), "{suggested}");
    let out = write(dir.path(), "suggested.yaml", &suggested);
    let checked = leash(&["check", out.to_str().unwrap()]);
    assert_eq!(checked.status.code(), Some(0), "{}", stderr(&checked));

    let summary = stdout(&leash(&["log", "summary", log.to_str().unwrap()]));
    assert!(summary.contains("service:gw") && summary.contains("service:mcp"), "{summary}");
}

// ---- leash proxy

/// `leash proxy` on `127.0.0.1:PORT`, its standard output and error read line by line; killed on drop.
struct Proxy {
    child: Child,
    out: Receiver<String>,
    err: Receiver<String>,
}

impl Proxy {
    fn start(policy: &Path, log: &Path, port: u16) -> Proxy {
        let mut child = Command::new(LEASH)
            .args(["proxy", "--policy", policy.to_str().unwrap(), "--listen", &format!("127.0.0.1:{port}"), "--log"])
            .arg(log)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (out, err) = (lines(child.stdout.take().unwrap()), lines(child.stderr.take().unwrap()));
        let proxy = Proxy { child, out, err };
        let ready = proxy.out.recv_timeout(PROXY_WAIT).expect("leash proxy said nothing");
        assert_eq!(ready, format!("listening on 127.0.0.1:{port}"));
        proxy
    }

    /// Send SIGHUP and wait for the stderr line that says how the reload went.
    fn reload(&self) -> String {
        Command::new("kill").args(["-s", "HUP", &self.child.id().to_string()]).status().unwrap();
        let deadline = Instant::now() + PROXY_WAIT;
        while let Ok(line) = self.err.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            if line.contains("reloaded the policy") || line.contains("keeping the old policy") {
                return line;
            }
        }
        panic!("leash proxy did not say how the reload went");
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The lines `from` produces, read by a thread of its own.
fn lines(from: impl std::io::Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// A curl from the host (where a sandbox served by the proxy stands) that prints the status, or `000` when the
/// connection failed.
fn host_curl(args: &[&str]) -> String {
    let o = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", "--noproxy", "*"])
        .args(args)
        .output()
        .unwrap();
    stdout(&o)
}

#[test]
fn proxy_serves_a_service_on_its_own_address_and_logs_each_request() {
    let dir = tempfile::tempdir().unwrap();
    let mcp = Mcp::start(dir.path(), "mcp");
    let [proxy_port, service_port] = free_ports();
    let entry = format!(
        "    - {{name: mcp, listen: {service_port}, target: '127.0.0.1:{}', kind: http, paths: [/mcp]}}\n",
        mcp.port
    );
    let policy = policy(dir.path(), &entry);
    let log = dir.path().join("audit.jsonl");
    let _proxy = Proxy::start(&policy, &log, proxy_port);
    let url = format!("http://127.0.0.1:{service_port}");
    let o = Command::new("curl")
        .args(["-s", "--max-time", "10", "--noproxy", "*", "-H", "content-type: application/json", "-d", TOOLS_LIST])
        .arg(format!("{url}/mcp"))
        .output()
        .unwrap();
    assert_tools_list(&stdout(&o));
    assert_eq!(host_curl(&[&format!("{url}/admin")]), "403");
    assert_eq!(mcp.seen(), ["POST /mcp"]);
    let lines = log_lines(&log);
    let decided: Vec<String> = decisions(&lines).into_iter().map(shown).collect();
    assert_eq!(decided, ["POST /mcp allow rule service:mcp/mcp mcp", "GET /admin block not-allowed - mcp"]);
    assert!(decisions(&lines).iter().all(|d| d["port"] == service_port), "{lines:?}");
}

#[test]
fn proxy_refuses_to_start_with_a_service_on_its_own_port() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let policy = policy(dir.path(), &format!("    - {{name: mcp, listen: {port}, target: '127.0.0.1:9'}}\n"));
    let log = dir.path().join("audit.jsonl");
    let listen = format!("127.0.0.1:{port}");
    let o =
        leash(&["proxy", "--policy", policy.to_str().unwrap(), "--listen", &listen, "--log", log.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("mcp") && stderr(&o).contains(&listen), "{}", stderr(&o));
    assert!(!stdout(&o).contains("listening on"), "{}", stdout(&o));
}

#[test]
fn proxy_reload_applies_new_paths_to_the_next_connection_but_refuses_to_move_a_listener() {
    let dir = tempfile::tempdir().unwrap();
    let mcp = Mcp::start(dir.path(), "mcp");
    let [proxy_port, service_port, elsewhere] = free_ports();
    let entry = |listen: u16, paths: &str| {
        format!(
            "    - {{name: mcp, listen: {listen}, target: '127.0.0.1:{}', kind: http, paths: [{paths}]}}\n",
            mcp.port
        )
    };
    let policy = policy(dir.path(), &entry(service_port, "/mcp"));
    let log = dir.path().join("audit.jsonl");
    let proxy = Proxy::start(&policy, &log, proxy_port);
    let admin = format!("http://127.0.0.1:{service_port}/admin");
    assert_eq!(host_curl(&[&admin]), "403");

    std::fs::write(&policy, std::fs::read_to_string(&policy).unwrap().replace("[/mcp]", "[/mcp, /admin]")).unwrap();
    assert!(proxy.reload().contains("reloaded the policy"));
    assert_eq!(host_curl(&[&admin]), "200", "the new paths apply to the next connection");

    let moved = std::fs::read_to_string(&policy)
        .unwrap()
        .replace(&format!("listen: {service_port}"), &format!("listen: {elsewhere}"));
    std::fs::write(&policy, moved).unwrap();
    let said = proxy.reload();
    assert!(said.contains("keeping the old policy") && said.contains("services"), "{said}");
    assert_eq!(host_curl(&[&admin]), "200", "the old listener and policy stay");
    assert_eq!(host_curl(&[&format!("http://127.0.0.1:{elsewhere}/admin")]), "000", "nothing listens at the new port");
    assert_eq!(mcp.seen(), ["GET /admin", "GET /admin"]);
}

// ---- policies leash refuses

/// Policies whose services break a rule, with what `check` must name: the entry and a word of the reason.
fn bad_policies() -> [(&'static str, &'static str, &'static str); 4] {
    [
        (
            "network:\n  mode: allowlist\n  allowed_hosts: [gw.corp.test]\n  services:\n    \
             - {name: gw, listen: 8081, target: 'gw.corp.test:4000'}\n",
            "network.services[0].target",
            "allowed through the proxy",
        ),
        (
            "network:\n  mode: allowlist\n  allowed_hosts: [localhost]\n  services:\n    \
             - {name: gw, listen: 8081, target: '127.0.0.1:4000'}\n",
            "network.allowed_hosts",
            "localhost",
        ),
        (
            "network:\n  mode: allowlist\n  allowed_hosts: [a.test]\n  services:\n    \
             - {name: gw, listen: 443, target: '127.0.0.1:4000'}\n",
            "network.services[0].listen",
            "transparent listener",
        ),
        (
            "network:\n  mode: allowlist\n  allowed_hosts: [a.test]\n  services:\n    \
             - {name: dns, listen: 8053, target: '8.8.8.8:53'}\n",
            "network.services[0].target",
            "not on the host's loopback or a private network",
        ),
    ]
}

#[test]
fn check_names_each_bad_service_entry_and_why_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    for (text, entry, why) in bad_policies() {
        let p = write(dir.path(), "bad.yaml", text);
        let o = leash(&["check", p.to_str().unwrap()]);
        // 1 is `check`'s "invalid" (docs/commands.md); 2 is for a file it cannot read.
        assert_eq!(o.status.code(), Some(1), "{text}: {}", stderr(&o));
        assert!(stderr(&o).contains(entry) && stderr(&o).contains(why), "{text}: {}", stderr(&o));
    }
}

#[test]
fn run_with_a_bad_service_policy_is_exit_2_and_never_runs_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    for (text, entry, _) in bad_policies() {
        let p = write(dir.path(), "bad.yaml", text);
        let o = leash_run(&p, &dir.path().join("audit.jsonl"), &format!("touch {}", marker.display()));
        assert_eq!(o.status.code(), Some(2), "{text}: {}", stderr(&o));
        assert!(stderr(&o).contains(entry), "{text}: {}", stderr(&o));
        assert!(!marker.exists(), "the command ran under {text}");
    }
}

#[test]
fn check_reports_every_bad_service_entry_at_once() {
    // A parse-level mistake (a public target) beside gate-level ones (a duplicate name, leash's own port, a target
    // allowed through the proxy): each is reported, as `check` does for every other entry.
    let dir = tempfile::tempdir().unwrap();
    let text = "network:\n  mode: allowlist\n  allowed_hosts: [gw.corp.test]\n  services:\n    \
                - {name: gw, listen: 8081, target: 'gw.corp.test:4000'}\n    \
                - {name: pub, listen: 8082, target: '8.8.8.8:53'}\n    \
                - {name: gw, listen: 3128, target: '127.0.0.1:4000'}\n";
    let p = write(dir.path(), "bad.yaml", text);
    let o = leash(&["check", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    for entry in ["services[0].target", "services[1].target", "services[2].name", "services[2].listen"] {
        assert!(err.contains(entry), "{entry} not reported: {err}");
    }
}

#[test]
fn check_locates_a_loopback_name_in_allowed_hosts_on_its_own_line() {
    let dir = tempfile::tempdir().unwrap();
    let text = "network:\n  mode: allowlist\n  allowed_hosts:\n    - a.test\n    - localhost\n  services:\n    \
                - {name: gw, listen: 8081, target: '127.0.0.1:4000'}\n";
    let p = write(dir.path(), "bad.yaml", text);
    let o = leash(&["check", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    // `localhost` is on line 5 (the list on line 3); line 7 is the service.
    let err = stderr(&o);
    assert!(err.contains("bad.yaml:5:7: network.allowed_hosts[1]: `localhost`"), "{err}");
}
