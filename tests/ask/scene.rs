//! The scene of an ask-mode test: a loopback origin, a policy file in ask mode that allows `ok.test` and names the
//! origin's port, a private (0700) directory for the control socket, and `leash run` started on a shell script with
//! `leash ask` (the real client) to list and answer its questions. Every wait is bounded by [`STEP`].

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{log_lines, origin};

pub const LEASH: &str = env!("CARGO_BIN_EXE_leash");

/// The longest any one step waits before the test fails instead of hanging: generous, the machine is shared.
pub const STEP: Duration = Duration::from_secs(30);

/// Between two looks at something a test waits for (a condition wait, bounded by [`STEP`]).
const POLL: Duration = Duration::from_millis(40);

/// The hosts a scene's `leash run` resolves to the origin.
const NAMES: [&str; 4] = ["ok.test", "new.test", "a.new.test", "b.new.test"];

/// A shell function the scripts fetch with: the body, then a line `GOT <url> <status> <x-leash-reason> <seconds>`.
const GET: &str =
    r#"get() { curl -sS --max-time 60 -w "\nGOT %{url} %{http_code} %header{x-leash-reason} %{time_total}\n" "$1"; }"#;

pub struct Scene {
    pub dir: tempfile::TempDir,
    /// The plain-HTTP origin's port.
    pub port: u16,
    pub policy: PathBuf,
    pub socket: PathBuf,
    pub log: PathBuf,
}

impl Scene {
    /// An ask-mode policy (`extra` lines added under `network:`) around a fresh origin.
    pub fn new(extra: &str) -> Scene {
        Scene::with_origin(origin(), |port| ask_policy(&[80, port], extra))
    }

    /// The scene around an origin on `port`, with the policy `policy(port)` says.
    pub fn with_origin(port: u16, policy: impl FnOnce(u16) -> String) -> Scene {
        let dir = tempfile::tempdir().unwrap();
        let private = dir.path().join("private");
        std::fs::create_dir(&private).unwrap();
        std::fs::set_permissions(&private, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
        let policy_path = dir.path().join("policy.yaml");
        std::fs::write(&policy_path, policy(port)).unwrap();
        let (socket, log) = (private.join("s.sock"), dir.path().join("audit.jsonl"));
        Scene { dir, port, policy: policy_path, socket, log }
    }

    /// `http://HOST:PORT/PATH` at the origin.
    pub fn url(&self, host: &str, path: &str) -> String {
        format!("http://{host}:{}{path}", self.port)
    }

    /// `leash run` of `script` (with `get URL` defined) in the scene's directory, its output into files; `args` go before
    /// the `--`.
    pub fn run(&self, args: &[&str], script: &str) -> Running {
        let mut cmd = Command::new(LEASH);
        cmd.args(self.leash_args(args)).args(["sh", "-c", &format!("{GET}\n{script}")]);
        let (out, err) = (self.dir.path().join("stdout"), self.dir.path().join("stderr"));
        // In the scene's directory: what a script writes there is the test's to read, and gone with it.
        cmd.current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap());
        Running { child: Some(cmd.spawn().unwrap()), out, err }
    }

    /// `leash run`'s arguments up to and including the `--`.
    pub fn leash_args(&self, args: &[&str]) -> Vec<String> {
        let mut all: Vec<String> = ["run", "--policy", path(&self.policy), "--ask-socket", path(&self.socket)]
            .into_iter()
            .map(str::to_owned)
            .collect();
        all.extend(["--log".to_owned(), path(&self.log).to_owned()]);
        all.extend(NAMES.iter().flat_map(|n| ["--resolve".to_owned(), format!("{n}:127.0.0.1")]));
        all.extend(args.iter().map(|a| (*a).to_owned()));
        all.push("--".to_owned());
        all
    }

    /// The shell script prelude [`Scene::run`] puts before a script (for a test that runs `leash` itself).
    pub fn prelude() -> &'static str {
        GET
    }

    /// `leash ask ARGS --socket SOCKET`.
    pub fn ask(&self, args: &[&str]) -> Output {
        Command::new(LEASH).arg("ask").args(args).args(["--socket", path(&self.socket)]).output().unwrap()
    }

    /// `leash ask list --json`: the questions open now.
    pub fn pending(&self) -> Vec<Value> {
        if !self.socket.exists() {
            return Vec::new();
        }
        let o = self.ask(&["list", "--json"]);
        assert!(o.status.success(), "leash ask list: {}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    }

    /// Wait until the question about `host` has `waiting` requests on it; the question.
    pub fn question(&self, host: &str, waiting: u64) -> Value {
        let found = until(&format!("a question about {host} with {waiting} waiting"), || {
            self.pending().into_iter().find(|q| q["host"] == host && q["waiting"] == waiting)
        });
        // One question per host, whatever else is open.
        assert_eq!(self.pending().iter().filter(|q| q["host"] == host).count(), 1);
        found
    }

    /// `leash ask answer ID WORD [--scope SCOPE]`, which must be taken.
    pub fn answer(&self, question: &Value, word: &str, scope: Option<&str>) {
        let o = self.try_answer(question, word, scope);
        assert!(o.status.success(), "leash ask answer {word}: {}", String::from_utf8_lossy(&o.stderr));
    }

    /// `leash ask answer ID WORD [--scope SCOPE]`, taken or not.
    pub fn try_answer(&self, question: &Value, word: &str, scope: Option<&str>) -> Output {
        let id = question["id"].to_string();
        let mut args = vec!["answer", id.as_str(), word];
        args.extend(scope.iter().flat_map(|s| ["--scope", s]));
        self.ask(&args)
    }

    /// The audit log's decision lines other than the DNS stub's, in order.
    pub fn decisions(&self) -> Vec<Value> {
        let lines = log_lines(&self.log);
        lines.into_iter().filter(|l| l.get("decision").is_some() && l["method"] != "DNS").collect()
    }

    /// The decision line of the request for `path`.
    pub fn decision(&self, path: &str) -> Value {
        let lines = self.decisions();
        lines.iter().find(|l| l["path"] == path).cloned().unwrap_or_else(|| panic!("no line for {path}: {lines:#?}"))
    }
}

/// A `mode: ask` policy allowing `ok.test` on `ports`, loopback exempt from the destination check, and `extra`
/// (lines under `network:`).
pub fn ask_policy(ports: &[u16], extra: &str) -> String {
    let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
    format!(
        "# Ask mode for the tests.\nnetwork:\n  mode: ask\n  allowed_hosts: [ok.test]\n  ports: [{}]\n  allow_destinations: [127.0.0.1/32]\n{extra}",
        ports.join(", ")
    )
}

pub fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Call `probe` until it finds something, for at most [`STEP`].
pub fn until<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + STEP;
    loop {
        if let Some(found) = probe() {
            return found;
        }
        assert!(Instant::now() < deadline, "timed out after {STEP:?} waiting for {what}");
        std::thread::sleep(POLL);
    }
}

/// A `leash run` going on; killed if the test ends before it does.
pub struct Running {
    child: Option<Child>,
    out: PathBuf,
    err: PathBuf,
}

/// How a run ended: its exit code and what it printed.
pub struct Ended {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Running {
    /// What the command has printed so far.
    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    /// Wait (bounded) for the run to end.
    pub fn finish(mut self) -> Ended {
        let mut child = self.child.take().unwrap();
        let status = until("leash run to end", || child.try_wait().unwrap());
        let stdout = std::fs::read_to_string(&self.out).unwrap();
        let stderr = std::fs::read_to_string(&self.err).unwrap();
        Ended { code: status.code(), stdout, stderr }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// One fetch by the script's `get`: what curl saw.
#[derive(Debug, Clone)]
pub struct Got {
    pub url: String,
    pub status: u16,
    /// `X-Leash-Reason`, empty when there was none.
    pub reason: String,
    pub secs: f64,
    pub body: String,
}

impl Ended {
    /// Each fetch the script's `get` made, in order.
    pub fn fetched(&self) -> Vec<Got> {
        let mut got = Vec::new();
        let mut body = String::new();
        for line in self.stdout.split_inclusive('\n') {
            let Some(rest) = line.trim_end().strip_prefix("GOT ") else {
                body.push_str(line);
                continue;
            };
            let words: Vec<&str> = rest.split(' ').collect();
            let [url, status, reason, secs] = words[..] else { panic!("a GOT line of four words: {line}") };
            let body = std::mem::take(&mut body).trim_end_matches('\n').to_owned();
            got.push(Got {
                url: url.to_owned(),
                status: status.parse().unwrap(),
                reason: reason.to_owned(),
                secs: secs.parse().unwrap(),
                body,
            });
        }
        got
    }

    /// The fetch of `url`, which must be the only one.
    pub fn got(&self, url: &str) -> Got {
        let all = self.fetched();
        let mut of = all.iter().filter(|g| g.url == url);
        let got = of.next().unwrap_or_else(|| panic!("no fetch of {url}:\n{}\n{}", self.stdout, self.stderr)).clone();
        assert!(of.next().is_none(), "{url} fetched more than once");
        got
    }
}
