//! The Docker engine as `leash docker` drives it: each call a `docker` CLI child process with a time bound (a hung
//! daemon never hangs leash), its failure a typed error carrying what Docker said. Only this module runs `docker`.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// `docker version`, `inspect`, `rm`: answered by a healthy daemon in well under a second; a minute covers a
/// loaded machine.
pub const QUICK: Duration = Duration::from_secs(60);
/// `docker create` may unpack a large image first.
pub const CREATE: Duration = Duration::from_secs(300);
/// `docker stop`'s grace before it kills the container (Docker's own default).
pub const STOP_GRACE_SECS: u32 = 10;

/// The `docker` program: `LEASH_DOCKER` when set (tests point it at a wrapper), else `docker` on the PATH.
#[derive(Debug, Clone)]
pub struct Engine {
    program: OsString,
    /// Variables set for every `docker` call in place of leash's own: a name-only `-e NAME` is filled from the
    /// docker client's environment, so a variable holding a secret must reach the client masked.
    env: Vec<(OsString, OsString)>,
}

/// What a container is doing, from `docker inspect`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    /// The full container ID.
    pub id: String,
    /// The host pid of the container's init; 0 when it is not running.
    pub pid: u32,
    /// `State.Running`.
    pub running: bool,
    /// `HostConfig.NetworkMode`: `none` for a container without a network.
    pub network_mode: String,
}

/// A `docker` call that did not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// No `docker` program could be started.
    #[error("cannot run `docker` ({0}): is Docker installed and on the PATH?")]
    Missing(std::io::Error),
    /// It ran and failed; `message` is its standard error.
    #[error("`docker {call}` failed: {message}")]
    Failed {
        /// The subcommand (`create`, `start`, ...).
        call: String,
        /// What it printed on standard error.
        message: String,
    },
    /// It did not finish in time and was killed.
    #[error("`docker {call}` did not finish in {}s", after.as_secs())]
    TimedOut {
        /// The subcommand.
        call: String,
        /// Its time bound.
        after: Duration,
    },
    /// Its output was not what this Docker version should print.
    #[error("`docker {call}` printed `{output}`")]
    Unexpected {
        /// The subcommand.
        call: String,
        /// What it printed.
        output: String,
    },
}

impl Default for Engine {
    fn default() -> Self {
        Self::new()
    }
}

impl Engine {
    /// The `docker` on the PATH, or the program `LEASH_DOCKER` names (the tests point it at a missing or failing
    /// one).
    pub fn new() -> Self {
        Engine { program: std::env::var_os("LEASH_DOCKER").unwrap_or_else(|| "docker".into()), env: Vec::new() }
    }

    /// This engine, running `docker` with `env` set over leash's environment (masked secrets).
    pub fn with_env(mut self, env: Vec<(OsString, OsString)>) -> Self {
        self.env = env;
        self
    }

    /// A `docker` command with the engine's environment.
    fn docker(&self) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    /// The daemon answers and this user may use it.
    pub fn check(&self) -> Result<String, EngineError> {
        self.call(&["version", "--format", "{{.Server.Version}}"], QUICK)
    }

    /// The image's entrypoint and CMD (empty when unset); fails when the image is not available locally.
    pub fn image_argv(&self, image: &str) -> Result<(Vec<String>, Vec<String>), EngineError> {
        let format = "{{json .Config.Entrypoint}}\n{{json .Config.Cmd}}";
        let out = self.call(&["image", "inspect", "--format", format, "--", image], QUICK)?;
        let mut lines = out.lines().map(serde_json::from_str::<Option<Vec<String>>>);
        match (lines.next(), lines.next()) {
            (Some(Ok(entrypoint)), Some(Ok(cmd))) => Ok((entrypoint.unwrap_or_default(), cmd.unwrap_or_default())),
            _ => Err(EngineError::Unexpected { call: "image inspect".into(), output: out }),
        }
    }

    /// An existing named volume's driver and options (`None` when there is no such volume: Docker will create it
    /// empty, with the local driver).
    pub fn volume(&self, name: &str) -> Result<Option<VolumeFacts>, EngineError> {
        let format = "{{json .Driver}}\n{{json .Options}}";
        let out = match self.call(&["volume", "inspect", "--format", format, "--", name], QUICK) {
            Ok(out) => out,
            Err(EngineError::Failed { message, .. }) if message.to_lowercase().contains("no such volume") => {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
        let mut lines = out.lines();
        let driver = lines.next().and_then(|l| serde_json::from_str::<String>(l).ok());
        let options = lines.next().and_then(|l| serde_json::from_str::<Option<BTreeMap<String, String>>>(l).ok());
        match (driver, options) {
            (Some(driver), Some(options)) => {
                Ok(Some(VolumeFacts { driver, options: options.unwrap_or_default().into_iter().collect() }))
            }
            _ => Err(EngineError::Unexpected { call: "volume inspect".into(), output: out }),
        }
    }

    /// `docker create ARGS`; returns the new container's ID.
    pub fn create(&self, args: &[String]) -> Result<String, EngineError> {
        let mut all = vec!["create"];
        all.extend(args.iter().map(String::as_str));
        let id = self.call(&all, CREATE)?;
        match id.lines().last() {
            Some(id) if !id.is_empty() && id.bytes().all(|b| b.is_ascii_hexdigit()) => Ok(id.to_owned()),
            _ => Err(EngineError::Unexpected { call: "create".into(), output: id }),
        }
    }

    /// `docker start --attach [--interactive] ID` with leash's standard streams: returns when the container ends.
    pub fn start_attached(&self, id: &str, interactive: bool) -> Result<Child, EngineError> {
        let mut cmd = self.docker();
        cmd.args(["start", "--attach"]);
        if interactive {
            cmd.arg("--interactive");
        } else {
            cmd.stdin(Stdio::null());
        }
        cmd.arg(id).spawn().map_err(EngineError::Missing)
    }

    /// What `docker container inspect` says of `container` now: its id, init pid, whether it runs, its network.
    pub fn state(&self, container: &str) -> Result<State, EngineError> {
        let format = "{{.Id}} {{.State.Pid}} {{.State.Running}} {{.HostConfig.NetworkMode}}";
        let out = self.call(&["container", "inspect", "--format", format, "--", container], QUICK)?;
        parse_state(&out).ok_or(EngineError::Unexpected { call: "inspect".into(), output: out })
    }

    /// The container's exit status once it has stopped (`docker wait`).
    pub fn exit_code(&self, id: &str) -> Result<i32, EngineError> {
        let out = self.call(&["wait", id], QUICK)?;
        out.trim().parse().map_err(|_| EngineError::Unexpected { call: "wait".into(), output: out })
    }

    /// `docker wait ID` started, not awaited: `leash docker attach` serves until it ends, or kills it on a signal.
    pub fn waiter(&self, id: &str) -> Result<Waiter, EngineError> {
        let child = self
            .docker()
            .args(["wait", id])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(EngineError::Missing)?;
        Ok(Waiter { child })
    }

    /// `docker stop`: the container's stop signal, then SIGKILL after the grace.
    pub fn stop(&self, id: &str) -> Result<(), EngineError> {
        let grace = STOP_GRACE_SECS.to_string();
        self.call(&["stop", "--time", &grace, id], QUICK + Duration::from_secs(STOP_GRACE_SECS.into())).map(drop)
    }

    /// `docker rm --force`: stops and removes it, whatever its state.
    pub fn remove(&self, id: &str) -> Result<(), EngineError> {
        self.call(&["rm", "--force", id], QUICK).map(drop)
    }

    /// Runs `docker ARGS`, returns its trimmed standard output; killed after `limit`.
    fn call(&self, args: &[&str], limit: Duration) -> Result<String, EngineError> {
        let name = args.iter().take(2).copied().collect::<Vec<_>>().join(" ");
        let child = self
            .docker()
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(EngineError::Missing)?;
        let output = bounded(child, limit).ok_or(EngineError::TimedOut { call: name.clone(), after: limit })?;
        let output = output.map_err(EngineError::Missing)?;
        if output.status.success() {
            return Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned());
        }
        let message = String::from_utf8_lossy(&output.stderr).trim().to_owned();
        Err(EngineError::Failed { call: name, message })
    }
}

/// What `docker volume inspect` says of a volume that could bring a host path in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeFacts {
    /// The volume driver (`local` for Docker's own).
    pub driver: String,
    /// The driver options it was created with (`type`, `o`, `device` for the local driver).
    pub options: Vec<(String, String)>,
}

impl VolumeFacts {
    /// Why mounting this volume would bring a host path in, if it would: a driver other than `local`, or a local
    /// volume created to mount a host path or device (`o=bind`, `device=…`).
    pub fn host_path(&self) -> Option<String> {
        if !crate::options::is_local_driver(&self.driver) {
            return Some(format!("its driver `{}` can mount host paths leash cannot check", self.driver));
        }
        let (key, value) = self.options.iter().find(|(k, v)| crate::options::binds_host_path(k, v))?;
        Some(format!("it was created with `{key}={value}`, which mounts a host path or device"))
    }
}

/// A running `docker wait`.
pub struct Waiter {
    child: Child,
}

impl Waiter {
    /// Its pid, to `kill` it from another thread while `finish` blocks on it.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Blocks until the container stops; its exit status.
    pub fn finish(self) -> Result<i32, EngineError> {
        let output = self.child.wait_with_output().map_err(EngineError::Missing)?;
        let out = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        if !output.status.success() {
            let message = String::from_utf8_lossy(&output.stderr).trim().to_owned();
            return Err(EngineError::Failed { call: "wait".into(), message });
        }
        out.parse().map_err(|_| EngineError::Unexpected { call: "wait".into(), output: out })
    }
}

/// SIGKILL to a `docker` child of ours that another thread is still waiting for (so its pid cannot be reused).
pub fn kill(pid: u32) {
    if let Some(pid) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
}

/// The child's output, or `None` (and the child killed) when it takes longer than `limit`.
fn bounded(child: Child, limit: Duration) -> Option<std::io::Result<Output>> {
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let received = rx.recv_timeout(limit).ok();
    if received.is_none() {
        kill(pid);
    }
    received
}

fn parse_state(out: &str) -> Option<State> {
    let mut fields = out.split_whitespace();
    let id = fields.next()?.to_owned();
    let pid = fields.next()?.parse().ok()?;
    let running = fields.next()? == "true";
    let network_mode = fields.next().unwrap_or_default().to_owned();
    Some(State { id, pid, running, network_mode })
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn volumes_that_bring_a_host_path_are_named() {
        let facts = |driver: &str, options: &[(&str, &str)]| VolumeFacts {
            driver: driver.to_owned(),
            options: options.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
        };
        assert_eq!(facts("local", &[]).host_path(), None);
        assert_eq!(facts("local", &[("type", "tmpfs"), ("o", "size=100m")]).host_path(), None);
        let bound = facts("local", &[("type", "none"), ("o", "bind"), ("device", "/var/run")]).host_path().unwrap();
        assert!(bound.contains("device=/var/run") || bound.contains("o=bind"), "{bound}");
        assert!(facts("local", &[("o", "rbind,ro")]).host_path().is_some());
        assert!(facts("local", &[("DEVICE", "/dev/sda1")]).host_path().is_some());
        assert!(facts("rexray", &[]).host_path().unwrap().contains("rexray"));
    }

    #[test]
    fn inspect_output_is_parsed() {
        let s = parse_state("abc123 4242 true none").unwrap();
        assert_eq!(s, State { id: "abc123".into(), pid: 4242, running: true, network_mode: "none".into() });
        assert!(parse_state("abc 0 false").is_some_and(|s| !s.running && s.network_mode.is_empty()));
        assert!(parse_state("abc x true none").is_none());
    }

    #[test]
    fn a_missing_docker_is_reported_as_missing() {
        let engine = Engine { program: "/nonexistent/docker".into(), env: Vec::new() };
        assert!(matches!(engine.check(), Err(EngineError::Missing(_))));
    }

    #[test]
    fn a_hung_call_is_killed_at_its_bound() {
        let engine = Engine { program: "sleep".into(), env: Vec::new() };
        let started = std::time::Instant::now();
        assert!(matches!(engine.call(&["30"], Duration::from_millis(200)), Err(EngineError::TimedOut { .. })));
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
