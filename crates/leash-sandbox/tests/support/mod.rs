//! Helpers that read "run this script in a sandbox with these sockets, expect this": a `Run` builder over
//! `SandboxSpec`, captured output, and the loud skip (a failure under `LEASH_REQUIRE_SANDBOX=1`) where the kernel
//! refuses namespaces.

pub mod host;

use std::ffi::OsString;
use std::io::{BufRead, BufReader, PipeReader, Read};
use std::net::SocketAddrV4;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::Duration;

use leash_sandbox::{ExitStatus, Sandbox, SandboxSpec};

/// The command's `PATH`: system directories only, so `python3` is Debian's (quick to start, as on CI).
pub const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// How long a command may run before `Running::finish` kills it.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// What a finished run left.
#[derive(Debug)]
pub struct Outcome {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// A sandbox still running, with its output streams.
pub struct Running {
    pub sandbox: Sandbox,
    /// Lines of stdout as they come (for scripts that say "ready").
    pub stdout: BufReader<PipeReader>,
    stderr: JoinHandle<String>,
}

impl Running {
    /// The next stdout line, without its newline.
    pub fn line(&mut self) -> String {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        line.trim_end().to_string()
    }

    /// Waits for the end and collects the rest of the output. A command still running after `DEADLINE` is
    /// killed, so a broken test fails instead of hanging.
    pub fn finish(mut self) -> Outcome {
        let (done, deadline) = std::sync::mpsc::channel::<()>();
        let sandbox = &self.sandbox;
        let status = std::thread::scope(|scope| {
            scope.spawn(move || {
                if deadline.recv_timeout(DEADLINE).is_err() {
                    sandbox.signal(libc::SIGKILL).unwrap();
                }
            });
            let status = sandbox.wait().unwrap();
            let _ = done.send(());
            status
        });
        let mut stdout = String::new();
        self.stdout.read_to_string(&mut stdout).unwrap();
        Outcome { status, stdout, stderr: self.stderr.join().unwrap() }
    }
}

/// A sandbox spec being built.
pub struct Run {
    pub spec: SandboxSpec,
}

/// `bash -c SCRIPT` with a minimal environment.
pub fn sh(script: &str) -> Run {
    let mut spec = SandboxSpec::new("bash");
    spec.args = vec!["-c".into(), script.into()];
    spec.env = vec![("PATH".into(), PATH.into()), ("LANG".into(), "C.UTF-8".into())];
    Run { spec }
}

/// `python3 -c CODE` with the same environment.
pub fn python(code: &str) -> Run {
    let mut run = sh("");
    run.spec.program = "python3".into();
    run.spec.args = vec!["-c".into(), code.into()];
    run
}

impl Run {
    pub fn tcp(mut self, addr: &str) -> Run {
        self.spec.tcp_listeners.push(addr.parse::<SocketAddrV4>().unwrap());
        self
    }

    pub fn udp(mut self, addr: &str) -> Run {
        self.spec.udp_sockets.push(addr.parse::<SocketAddrV4>().unwrap());
        self
    }

    pub fn resolv_conf(mut self, contents: &str) -> Run {
        self.spec.resolv_conf = Some(contents.to_string());
        self
    }

    pub fn allow_unix(mut self, path: impl Into<PathBuf>) -> Run {
        self.spec.allow_unix_sockets.push(path.into());
        self
    }

    pub fn env(mut self, key: &str, value: &str) -> Run {
        self.spec.env.push((OsString::from(key), OsString::from(value)));
        self
    }

    /// Starts it with stdout and stderr captured; `None` when skipped (see `skip`).
    pub fn start(mut self) -> Option<Running> {
        // Pipes: a socket as stdio is refused (the command would hold a socket of the host's namespace).
        let (stdout_ours, stdout) = std::io::pipe().unwrap();
        let (mut stderr_ours, stderr) = std::io::pipe().unwrap();
        self.spec.stdout = Some(OwnedFd::from(stdout));
        self.spec.stderr = Some(OwnedFd::from(stderr));
        let sandbox = spawn_or_skip(self.spec)?;
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            stderr_ours.read_to_string(&mut text).unwrap();
            text
        });
        Some(Running { sandbox, stdout: BufReader::new(stdout_ours), stderr })
    }

    /// Runs it to the end; `None` when skipped.
    pub fn output(self) -> Option<Outcome> {
        Some(self.start()?.finish())
    }

    /// Runs it and expects exit 0, returning stdout.
    pub fn success(self) -> Option<String> {
        let out = self.output()?;
        assert_eq!(out.status, ExitStatus::Exited(0), "stdout: {}\nstderr: {}", out.stdout, out.stderr);
        Some(out.stdout)
    }
}

/// `Sandbox::spawn`, or a loud skip where the kernel refuses namespaces.
pub fn spawn_or_skip(spec: SandboxSpec) -> Option<Sandbox> {
    match Sandbox::spawn(spec) {
        Ok(sandbox) => Some(sandbox),
        Err(e) if e.is_unavailable() => skip(&e),
        Err(e) => panic!("spawn failed: {e}"),
    }
}

/// Skips the calling test with a message no one can miss, or fails it when CI requires the sandbox.
pub fn skip<T>(why: &dyn std::fmt::Display) -> Option<T> {
    if std::env::var_os("LEASH_REQUIRE_SANDBOX").is_some_and(|v| v == "1") {
        panic!("LEASH_REQUIRE_SANDBOX=1 but the sandbox cannot run here: {why}");
    }
    {
        // Written past the test harness's capture: a skip must show where the results are read.
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "\n!!!!!!!! SKIPPED: sandbox test cannot run here: {why} !!!!!!!!\n");
    }
    None
}
