//! Credentials with real clients beyond an SDK's one header: git clones and pushes over HTTPS (smart HTTP, `git
//! http-backend` behind a server that demands HTTP Basic with the real token) from inside `leash run`, with the token
//! in the remote URL or from a credential helper, while the sandbox holds only the placeholder; and curl speaks
//! HTTP/2 to a provider that speaks nothing else, its placeholder replaced and the quoted key turned back.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test's helpers fail it by panicking")]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{https_material, log_lines, sandbox_available, stderr, stdout, Served};

const LEASH: &str = env!("CARGO_BIN_EXE_leash");
const TOKEN: &str = "ghp_real7f3a9c2e1b5d4f6a8091a2b3c4d5e6f7a8";
const KEY: &str = "sk-ant-real-7f3a9c2e1b5d4f6a8091a2b3c4d5e6f7";

/// git reads no configuration but what a test gives it, and never prompts.
const GIT_ENV: [(&str, &str); 3] =
    [("GIT_CONFIG_NOSYSTEM", "1"), ("GIT_CONFIG_GLOBAL", "/dev/null"), ("GIT_TERMINAL_PROMPT", "0")];

/// A policy whose only credential is `entry` (a YAML flow mapping) on `docs.test`, the port inspected and loopback
/// allowed as a destination (the servers live on the host's loopback).
fn policy(dir: &Path, port: u16, entry: &str) -> PathBuf {
    let path = dir.join("policy.yaml");
    let text = format!(
        "network:\n  mode: blocklist\n  blocked_urls: []\n  ports: [80, {port}]\n  tunnel_ports: [{port}]\n  \
         allow_destinations: [127.0.0.0/8]\n  credentials:\n    - {entry}\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

fn git(dir: &Path, args: &[&str]) -> String {
    let o = Command::new("git").args(args).current_dir(dir).envs(GIT_ENV).output().unwrap();
    assert!(o.status.success(), "git {args:?}: {}", stderr(&o));
    stdout(&o)
}

/// `leash run` of `script` under `policy`, with `var=secret` in leash's environment.
fn leash_run(policy: &Path, log: &Path, ca: &Path, var: &str, secret: &str, script: &str) -> Output {
    Command::new(LEASH)
        .args(["run", "--policy", policy.to_str().unwrap(), "--log", log.to_str().unwrap()])
        .args(["--upstream-ca", ca.to_str().unwrap(), "--resolve", "docs.test:127.0.0.1", "--", "sh", "-c", script])
        .env(var, secret)
        .envs(GIT_ENV)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// A git server over HTTPS on the host's loopback (the `docs.test` leaf from [`https_material`]): `git http-backend`
/// as CGI behind Python's http.server, serving the bare repositories under `dir/repos`, pushes included. Every
/// request must carry HTTP Basic whose password is `token`, else 401 with `WWW-Authenticate: Basic` (git then asks
/// again with its credentials). Each request is appended to `seen` as `METHOD PATH PASSWORD` (`-` when none came).
/// Killed on drop.
struct GitServer {
    _server: Served,
    port: u16,
}

impl GitServer {
    fn start(dir: &Path, token: &str, seen: &Path) -> GitServer {
        let script = r#"
import base64, http.server, os, ssl, subprocess, sys
TOKEN, ROOT, SEEN = sys.argv[1], sys.argv[2], sys.argv[3]
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def body(self):
        if self.headers.get("transfer-encoding", "").lower() != "chunked":
            return self.rfile.read(int(self.headers.get("content-length") or 0))
        data = b""
        while True:
            size = int(self.rfile.readline().split(b";")[0], 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return data
            data += self.rfile.read(size)
            self.rfile.readline()
    def reply(self, status, headers, data):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def serve(self):
        data = self.body()
        auth, password = self.headers.get("authorization", ""), "-"
        if auth[:6].lower() == "basic ":
            try:
                password = base64.b64decode(auth[6:]).decode().partition(":")[2]
            except Exception:
                password = "undecodable:" + auth
        path, _, query = self.path.partition("?")
        with open(SEEN, "a") as f:
            f.write("%s %s %s\n" % (self.command, path, password))
        if password != TOKEN:
            return self.reply(401, [("WWW-Authenticate", 'Basic realm="git"')], b"who are you?\n")
        env = {"PATH": os.environ["PATH"], "HOME": ROOT, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
               "GIT_PROJECT_ROOT": ROOT, "GIT_HTTP_EXPORT_ALL": "1", "REMOTE_USER": "x-access-token",
               "REMOTE_ADDR": "127.0.0.1", "PATH_INFO": path, "QUERY_STRING": query,
               "REQUEST_METHOD": self.command, "CONTENT_TYPE": self.headers.get("content-type", ""),
               "CONTENT_LENGTH": str(len(data))}
        for k, v in self.headers.items():
            k = "HTTP_" + k.upper().replace("-", "_")
            if k not in ("HTTP_AUTHORIZATION", "HTTP_CONTENT_TYPE", "HTTP_CONTENT_LENGTH"):
                env[k] = v
        out = subprocess.run(["git", "http-backend"], input=data, env=env, capture_output=True).stdout
        head, sep, rest = out.partition(b"\r\n\r\n")
        if not sep:
            head, sep, rest = out.partition(b"\n\n")
        status, headers = 200, []
        for line in head.decode().splitlines():
            k, _, v = line.partition(":")
            if k.lower() == "status":
                status = int(v.split()[0])
            else:
                headers.append((k, v.strip()))
        self.reply(status, headers, rest)
    do_GET = do_POST = serve
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain("leaf.pem", "leaf.key")
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"#;
        let mut cmd = Command::new("python3");
        cmd.args(["-c", script, token]).arg(dir.join("repos")).arg(seen).current_dir(dir);
        let (_server, port) = Served::start(&mut cmd);
        GitServer { _server, port }
    }
}

/// A bare `repos/repo.git` in `dir` with one commit, `first`, on `main`.
fn seeded_repository(dir: &Path) -> PathBuf {
    let bare = dir.join("repos/repo.git");
    std::fs::create_dir_all(&bare).unwrap();
    git(&bare, &["init", "-q", "--bare", "-b", "main"]);
    let seed = dir.join("seed");
    std::fs::create_dir(&seed).unwrap();
    git(&seed, &["init", "-q", "-b", "main"]);
    git(&seed, &["-c", "user.name=seed", "-c", "user.email=seed@test", "commit", "-q", "--allow-empty", "-m", "first"]);
    git(&seed, &["push", "-q", bare.to_str().unwrap(), "main"]);
    bare
}

/// What the git server saw: `(method path, password)` per request.
fn seen_requests(seen: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(seen).unwrap_or_default();
    text.lines()
        .map(|l| {
            let (request, password) = l.rsplit_once(' ').unwrap();
            (request.to_owned(), password.to_owned())
        })
        .collect()
}

/// Clones over HTTPS with `clone` (a shell command line cloning into `work`), commits, pushes back, and checks what
/// every side saw: the push landed, the server got the real token on each authenticated request and never the
/// placeholder, and nothing inside or printed or logged holds the real token. Returns the placeholder and what the
/// clone's `.git/config` says.
fn clone_commit_push(test: &str, clone: impl Fn(u16) -> String) -> (String, String) {
    if !sandbox_available() {
        return (String::new(), String::new());
    }
    let dir = tempfile::tempdir().unwrap();
    let ca = https_material(dir.path());
    let bare = seeded_repository(dir.path());
    let seen = dir.path().join("seen");
    let server = GitServer::start(dir.path(), TOKEN, &seen);
    let port = server.port;
    let policy = policy(dir.path(), port, "{ preset: github, hosts: [docs.test] }");
    let log = dir.path().join("audit.jsonl");
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let script = format!(
        r#"set -e
echo "env=$GITHUB_TOKEN"
cd {work}
{clone}
cd clone
git log --format=%s main
git -c user.name=agent -c user.email=agent@test commit -q --allow-empty -m {test}
git push -q origin main
echo pushed
grep -c "$GITHUB_TOKEN" .git/config || true
grep -c "{TOKEN}" .git/config /proc/self/environ || true
"#,
        work = work.display(),
        clone = clone(port),
    );
    let o = leash_run(&policy, &log, &ca, "GITHUB_TOKEN", TOKEN, &script);
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}\nserver saw: {:?}", seen_requests(&seen));
    let placeholder = out.lines().next().unwrap().strip_prefix("env=").unwrap().to_owned();
    assert!(placeholder.starts_with("leash-github-") && placeholder.len() == TOKEN.len(), "{placeholder}");
    let config = std::fs::read_to_string(work.join("clone/.git/config")).unwrap();
    let in_config = config.matches(placeholder.as_str()).count();
    let rest: Vec<&str> = out.lines().skip(1).collect();
    let expected = [
        "first".to_owned(),
        "pushed".to_owned(),
        in_config.to_string(),
        ".git/config:0".to_owned(),
        "/proc/self/environ:0".to_owned(),
    ];
    assert_eq!(rest, expected, "the clone saw the seeded commit and pushed; nothing inside holds the real token");
    assert_eq!(git(&bare, &["log", "--format=%s", "main"]), format!("{test}\nfirst\n"), "the push landed");

    let requests = seen_requests(&seen);
    for (request, password) in &requests {
        assert!(password == "-" || password == TOKEN, "{request} came with {password:?}: {requests:?}");
    }
    let authenticated: Vec<&str> = requests.iter().filter(|(_, p)| p == TOKEN).map(|(r, _)| r.as_str()).collect();
    for request in ["GET /repo.git/info/refs", "POST /repo.git/git-upload-pack", "POST /repo.git/git-receive-pack"] {
        assert!(authenticated.contains(&request), "{request} never came with the real token: {requests:?}");
    }
    assert!(!std::fs::read_to_string(&seen).unwrap().contains(&placeholder), "the placeholder reached the server");

    assert!(!out.contains(TOKEN) && !err.contains(TOKEN), "nothing leash or the command printed holds the token");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains(TOKEN), "the audit log never holds the token");
    let with_credential = log_lines(&log).iter().filter(|l| l["credential"] == "github").count();
    assert!(with_credential >= authenticated.len(), "every authenticated request is logged as such: {text}");
    (placeholder, config)
}

#[test]
fn git_clones_and_pushes_with_the_placeholder_in_the_remote_url() {
    let (placeholder, config) = clone_commit_push("from-url", |port| {
        format!("git clone -q \"https://x-access-token:$GITHUB_TOKEN@docs.test:{port}/repo.git\" clone")
    });
    if placeholder.is_empty() {
        return;
    }
    assert!(
        config.contains(&format!("url = https://x-access-token:{placeholder}@docs.test:")),
        "the remote URL holds the placeholder: {config}"
    );
}

#[test]
fn git_clones_and_pushes_with_a_credential_helper_that_prints_the_placeholder() {
    let (placeholder, config) = clone_commit_push("from-helper", |port| {
        format!(
            "git clone -q -c 'credential.helper=!f() {{ echo username=x-access-token; echo password=$GITHUB_TOKEN; \
             }}; f' https://docs.test:{port}/repo.git clone"
        )
    });
    if placeholder.is_empty() {
        return;
    }
    assert!(!config.contains(&placeholder), "the helper is read at each use, nothing stored: {config}");
    assert!(config.contains("password=$GITHUB_TOKEN"), "{config}");
}

/// A fake model provider that speaks only HTTP/2 over TLS (Node's `http2` module, the `docs.test` leaf from
/// [`https_material`]; an HTTP/1.1 client is turned away): 401 unless `x-api-key` is `key`; then 200 quoting the key
/// back in two DATA frames that split it. Each request is appended to `seen` as `HTTP-VERSION METHOD KEY`. Killed on
/// drop.
struct H2Provider {
    _server: Served,
    port: u16,
}

impl H2Provider {
    fn start(dir: &Path, key: &str, seen: &Path) -> H2Provider {
        let script = r#"
const fs = require("fs"), http2 = require("http2");
const [key, seen] = process.argv.slice(1);
const options = { key: fs.readFileSync("leaf.key"), cert: fs.readFileSync("leaf.pem") };
const srv = http2.createSecureServer(options, (req, res) => {
  const got = req.headers["x-api-key"] || "";
  fs.appendFileSync(seen, req.httpVersion + " " + req.method + " " + got + "\n");
  req.resume();
  req.on("end", () => {
    if (got !== key) {
      res.writeHead(401);
      return res.end("no valid key");
    }
    res.writeHead(200, { "content-type": "text/plain" });
    res.write("your key: " + got.slice(0, 9));
    setTimeout(() => res.end(got.slice(9)), 50);
  });
});
srv.listen(0, "127.0.0.1", () => console.log(srv.address().port));
"#;
        let (_server, port) = Served::start(Command::new("node").args(["-e", script, key]).arg(seen).current_dir(dir));
        H2Provider { _server, port }
    }
}

#[test]
fn curl_over_http2_carries_the_real_key_and_sees_only_the_placeholder() {
    if !sandbox_available() {
        return;
    }
    let curl = Command::new("curl").arg("-V").output().unwrap();
    assert!(stdout(&curl).lines().any(|l| l.starts_with("Features:") && l.contains(" HTTP2")), "{}", stdout(&curl));
    let dir = tempfile::tempdir().unwrap();
    let ca = https_material(dir.path());
    let seen = dir.path().join("seen");
    let provider = H2Provider::start(dir.path(), KEY, &seen);
    let port = provider.port;
    let policy = policy(dir.path(), port, "{ preset: anthropic, hosts: [docs.test] }");
    let log = dir.path().join("audit.jsonl");
    let script = format!(
        r#"echo "env=$ANTHROPIC_API_KEY"
curl -sS --http2 -w '\n%{{http_code}} HTTP/%{{http_version}}\n' -H "x-api-key: $ANTHROPIC_API_KEY" \
  https://docs.test:{port}/v1/models
curl -sS --http2 -w '\n%{{http_code}} HTTP/%{{http_version}}\n' -H "x-api-key: $ANTHROPIC_API_KEY" \
  -d '{{"model":"m"}}' https://docs.test:{port}/v1/messages
"#
    );
    let o = leash_run(&policy, &log, &ca, "ANTHROPIC_API_KEY", KEY, &script);
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    let placeholder = out.lines().next().unwrap().strip_prefix("env=").unwrap();
    assert!(placeholder.starts_with("leash-anthropic-") && placeholder.len() == KEY.len(), "{placeholder}");
    let quoted = format!("your key: {placeholder}");
    let expected = [quoted.as_str(), "200 HTTP/2", quoted.as_str(), "200 HTTP/2"];
    assert_eq!(
        out.lines().skip(1).collect::<Vec<_>>(),
        expected,
        "HTTP/2 both ways, the quoted key turned back\n{err}"
    );
    let seen = std::fs::read_to_string(&seen).unwrap();
    assert_eq!(seen, format!("2.0 GET {KEY}\n2.0 POST {KEY}\n"), "the provider got the key, over HTTP/2");
    assert!(!out.contains(KEY) && !err.contains(KEY), "nothing leash or the command printed holds the key");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains(KEY), "the audit log never holds the key");
    let with_credential = log_lines(&log).iter().filter(|l| l["credential"] == "anthropic").count();
    assert_eq!(with_credential, 2, "{text}");
}

/// Rules by method with a real git: the server read-only but for `POST */git-upload-pack` (smart HTTP's fetch), so
/// `git clone` and `git fetch` work and `git push` (a POST to `git-receive-pack`) is refused inside the inspected
/// tunnel, logged as `method-not-allowed`, and never reaches the server.
#[test]
fn git_clones_and_fetches_but_cannot_push_through_a_read_only_host() {
    if !sandbox_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ca = https_material(dir.path());
    let bare = seeded_repository(dir.path());
    let seen = dir.path().join("seen");
    let server = GitServer::start(dir.path(), TOKEN, &seen);
    let port = server.port;
    let policy = dir.path().join("policy.yaml");
    let text = format!(
        "network:\n  mode: allowlist\n  allowed_hosts: ['read-only docs.test']\n  \
         allowed_urls: ['POST docs.test/*/git-upload-pack']\n  ports: [80]\n  tunnel_ports: [{port}]\n  \
         allow_destinations: [127.0.0.0/8]\n"
    );
    std::fs::write(&policy, text).unwrap();
    let log = dir.path().join("audit.jsonl");
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let script = format!(
        r#"set -e
cd {work}
git clone -q "https://x-access-token:{TOKEN}@docs.test:{port}/repo.git" clone
cd clone
git fetch -q origin
git log --format=%s origin/main
git -c user.name=agent -c user.email=agent@test commit -q --allow-empty -m pushed
if git push -q origin main 2>push.err; then echo pushed; else echo refused; fi
grep -c 403 push.err || true
"#,
        work = work.display(),
    );
    // No credential entry here: the token is the URL's own, and leash only decides.
    let o = leash_run(&policy, &log, &ca, "LEASH_TEST_UNUSED", "-", &script);
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}\nserver saw: {:?}", seen_requests(&seen));
    assert_eq!(out.lines().collect::<Vec<_>>(), ["first", "refused", "1"], "clone and fetch worked, push did not");
    assert_eq!(git(&bare, &["log", "--format=%s", "main"]), "first\n", "nothing landed");
    let requests: Vec<String> = seen_requests(&seen).into_iter().map(|(r, _)| r).collect();
    assert!(requests.iter().any(|r| r == "POST /repo.git/git-upload-pack"), "{requests:?}");
    assert!(requests.iter().any(|r| r == "GET /repo.git/info/refs"), "push's discovery is a GET: {requests:?}");
    assert!(!requests.iter().any(|r| r.contains("git-receive-pack") && r.starts_with("POST")), "{requests:?}");
    let refused: Vec<_> = log_lines(&log).into_iter().filter(|l| l["decision"] == "block").collect();
    assert_eq!(refused.len(), 1, "only the push: {refused:?}");
    let push = &refused[0];
    assert_eq!((push["method"].as_str(), push["path"].as_str()), (Some("POST"), Some("/repo.git/git-receive-pack")));
    assert_eq!(
        (push["reason"].as_str(), push["rule"].as_str()),
        (Some("method-not-allowed"), Some("read-only docs.test"))
    );
}
