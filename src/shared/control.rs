//! The control socket of a running `leash run` or `leash proxy` (`--control PATH`): phases of a run. Over it the
//! policy in force is switched while the run goes on — set up online, then lock down — by `leash policy switch`, the
//! Python module, or any client speaking its protocol (one JSON object per line each way, docs/run.md "Phases").
//!
//! A switch is all or nothing: the new file is read and validated as `leash check` validates it, and checked against
//! what the run was built from at start (its credentials, its services, the listeners the sandbox holds, its CA);
//! anything wrong leaves the old policy in force and the caller told why. Only then is it put in force, in one swap
//! (each request decides on one snapshot), and every open tunnel and request in flight the new policy refuses is
//! cut (`leash_proxy::PolicyHandle::store`); a `policy-switch` line records it.
//!
//! The socket is a [`socket::Bound`] as ask mode's is: in a directory only leash's user may enter (mode 0700), which
//! the sandbox hides; under the uid containments the command runs as another uid, which cannot enter it.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use leash_policy::Policy;
use leash_proxy::audit::{SwitchEntry, SWITCH_EVENT};
use leash_proxy::{AuditLog, PolicyHandle, Swapped};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

use crate::exit::Failure;
use crate::policy_file::{check_same_resources, located};
use crate::shared::ask::protocol::line;
use crate::shared::ask::socket;

/// Longest request line leash reads; a longer one ends the connection.
const MAX_LINE: usize = 16 * 1024;

/// A client's request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Request {
    /// Put the policy in `policy` (an absolute path, read by leash) in force, with its `profile`'s network if given.
    Switch {
        /// The policy file.
        policy: PathBuf,
        /// The profile whose `network` to use.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        profile: Option<String>,
    },
    /// The policy in force.
    Status,
}

/// leash's reply to one request.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Reply {
    /// Whether the request was done.
    pub ok: bool,
    /// Why not, when it was not (every problem of a file, one per line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The policy in force now: its file (or `--allow/--block`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// Its SHA-256, hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Its generation: 0 at start, one more per switch (and per SIGHUP reload of `leash proxy`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
    /// After a switch: the open tunnels and requests in flight the new policy refused, cut.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut: Option<usize>,
}

/// The policy in force, as a switch line names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InForce {
    /// Its file, or `--allow/--block` for an inline policy.
    pub label: String,
    /// The SHA-256 of the file's bytes (of the inline arguments), hex.
    pub sha256: String,
    /// The file and profile a switch loaded it from (`None`: the policy leash started with).
    pub switched_to: Option<(PathBuf, Option<String>)>,
}

impl InForce {
    /// The policy in `path` as just reloaded (its bytes read again for the digest), `switched_to` kept.
    pub fn reloaded(path: &Path, switched_to: Option<(PathBuf, Option<String>)>) -> InForce {
        let bytes = std::fs::read(path).unwrap_or_default();
        InForce { label: shown(path), sha256: SwitchEntry::digest(&bytes), switched_to }
    }

    /// The policy leash started with: `file` (a policy or task file), else the inline `allow` and `block`.
    pub fn at_start(file: Option<&Path>, allow: &[String], block: &[String]) -> InForce {
        match file {
            Some(path) => {
                let bytes = std::fs::read(path).unwrap_or_default();
                InForce { label: shown(path), sha256: SwitchEntry::digest(&bytes), switched_to: None }
            }
            None => {
                let args: Vec<String> = allow
                    .iter()
                    .map(|a| format!("--allow {a}"))
                    .chain(block.iter().map(|b| format!("--block {b}")))
                    .collect();
                InForce {
                    label: "--allow/--block".into(),
                    sha256: SwitchEntry::digest(args.join("\n").as_bytes()),
                    switched_to: None,
                }
            }
        }
    }
}

/// What a new policy must keep of the one the run was built from, beyond its credentials and services: the
/// sandbox's listeners, its CA (`Ok` when the new policy fits; else why not).
pub type Fits = Box<dyn Fn(&Policy) -> Result<(), String> + Send + Sync>;

/// One run's control socket and what a switch acts on.
pub struct Control {
    policy: PolicyHandle,
    audit: Arc<AuditLog>,
    in_force: Mutex<InForce>,
    /// `--audit`: every policy put in force is in audit mode.
    audit_flag: bool,
    fits: Fits,
    socket: socket::Bound,
}

/// Who asked for a switch, as the kernel says on the socket.
#[derive(Debug, Clone, Copy, Default)]
pub struct Peer {
    /// Its uid.
    pub uid: Option<u32>,
    /// Its pid (the kernel may not say).
    pub pid: Option<i32>,
}

impl Control {
    /// The socket at `path`, bound before anything of the sandbox exists (its directory is then hidden inside); its
    /// directory is made (0700) when missing and must be this user's alone.
    pub fn bind(path: &Path) -> Result<socket::Bound, Failure> {
        socket::Bound::bind(path).map_err(|e| {
            Failure::usage(format!("--control: cannot listen on the control socket `{}`: {e}", path.display()))
        })
    }

    /// A control over `policy`, writing its lines to `audit`; `fits` says whether a new policy fits the run.
    pub fn new(
        socket: socket::Bound,
        (policy, audit): (PolicyHandle, Arc<AuditLog>),
        start: InForce,
        audit_flag: bool,
        fits: Fits,
    ) -> Control {
        Control { policy, audit, in_force: Mutex::new(start), audit_flag, fits, socket }
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        self.socket.path()
    }

    /// The policy in force.
    pub fn in_force(&self) -> InForce {
        self.in_force.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Serve the socket on the current runtime until leash ends (spawned); once. Says where it is (stderr).
    pub fn serve(control: &Arc<Control>) -> io::Result<()> {
        let Some(listener) = control.socket.take_listener() else { return Ok(()) };
        let listener = UnixListener::from_std(listener)?;
        let control = control.clone();
        tracing::info!("control socket: {} (`leash policy switch`)", control.path().display());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve_client(stream, control.clone()));
            }
        });
        Ok(())
    }

    /// Put the policy in `path` in force (see the module's doc); the reply says what happened.
    pub fn switch(&self, path: &Path, profile: Option<&str>, by: Peer) -> Reply {
        // One switch at a time: each is checked against the policy it replaces.
        let mut in_force = self.in_force.lock().unwrap_or_else(|p| p.into_inner());
        let (policy, sha256) = match self.load(path, profile) {
            Ok(loaded) => loaded,
            Err(why) => {
                tracing::error!("policy switch to `{}` refused; the policy in force stays: {why}", path.display());
                return Reply { ok: false, error: Some(why), ..Reply::default() };
            }
        };
        let swapped = match self.policy.store(policy) {
            Ok(swapped) => swapped,
            Err(why) => {
                tracing::error!("policy switch to `{}` refused; the policy in force stays: {why}", path.display());
                return Reply { ok: false, error: Some(why), ..Reply::default() };
            }
        };
        let to =
            InForce { label: shown(path), sha256, switched_to: Some((path.to_path_buf(), profile.map(str::to_owned))) };
        let recorded = record_swap(&self.audit, (&in_force, &to), swapped, ("control-socket", by));
        tracing::warn!(
            "policy switched to `{}` (generation {}): {} open connection(s) it refuses cut",
            to.label,
            swapped.generation,
            swapped.cut
        );
        let reply = Reply {
            ok: true,
            error: recorded.err().map(|e| format!("switched, but the audit line could not be written: {e}")),
            policy: Some(to.label.clone()),
            sha256: Some(to.sha256.clone()),
            generation: Some(swapped.generation),
            cut: Some(swapped.cut),
        };
        *in_force = to;
        reply
    }

    /// A SIGHUP reloaded the policy in force from its file, now `to` (the next switch's line names it).
    pub fn reloaded(&self, to: InForce) {
        *self.in_force.lock().unwrap_or_else(|p| p.into_inner()) = to;
    }

    /// The policy in `path`, validated as `leash check` validates it and checked against the run; with its digest.
    fn load(&self, path: &Path, profile: Option<&str>) -> Result<(Policy, String), String> {
        if !path.is_absolute() {
            return Err(format!("`{}`: give the policy file's absolute path (leash reads it)", path.display()));
        }
        let bytes = std::fs::read(path).map_err(|e| format!("cannot read policy `{}`: {e}", path.display()))?;
        let text = std::str::from_utf8(&bytes).map_err(|_| format!("`{}` is not UTF-8 text", path.display()))?;
        let format = leash_policy::Format::from_path(path)
            .ok_or_else(|| format!("`{}`: a policy file ends in .yaml, .yml, .toml or .json", path.display()))?;
        let loaded = leash_policy::load(text, format, profile)
            .map_err(|errors| errors.iter().map(|e| located(path, e)).collect::<Vec<_>>().join("\n"))?;
        let mut policy = loaded.policy;
        leash_proxy::tls::check_upstream_proxy(&policy)
            .map_err(|e| format!("{}: network.upstream_proxy_ca: {e}", path.display()))?;
        if self.audit_flag {
            policy = policy.into_audit();
        }
        if policy.asks() {
            return Err("the new policy is in ask mode: a switch cannot start asking (nobody was set up to answer); \
                        use an allowlist"
                .into());
        }
        let running = self.policy.current();
        check_same_resources(&running, &policy)?;
        (self.fits)(&policy)?;
        Ok((policy, SwitchEntry::digest(&bytes)))
    }
}

/// Write the `policy-switch` line of a swap `from` one policy `to` another, asked for `by` (`control-socket` and the
/// peer, or `sighup`).
pub fn record_swap(
    audit: &AuditLog,
    (from, to): (&InForce, &InForce),
    swapped: Swapped,
    (by, peer): (&str, Peer),
) -> Result<(), leash_proxy::audit::AuditError> {
    let line = SwitchEntry {
        time: leash_proxy::audit::now_rfc3339().into(),
        event: SWITCH_EVENT.into(),
        from: from.label.as_str().into(),
        from_sha256: from.sha256.as_str().into(),
        to: to.label.as_str().into(),
        to_sha256: to.sha256.as_str().into(),
        generation: swapped.generation,
        by: by.into(),
        by_uid: peer.uid,
        by_pid: peer.pid,
        cut: swapped.cut,
    };
    audit.switch(&line)
}

/// A path as a line names it.
fn shown(path: &Path) -> String {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()).display().to_string()
}

/// Serve one client: a reply per request line.
async fn serve_client(stream: UnixStream, control: Arc<Control>) {
    let peer = stream.peer_cred().map(|c| Peer { uid: Some(c.uid()), pid: c.pid() }).unwrap_or_default();
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    while let Ok(Some(text)) = lines.next_line().await {
        if text.len() > MAX_LINE {
            return;
        }
        let reply = match serde_json::from_str::<Request>(&text) {
            Err(e) => Reply { ok: false, error: Some(format!("not a request: {e}")), ..Reply::default() },
            Ok(Request::Status) => {
                let (in_force, now) = (control.in_force(), control.policy.current());
                Reply {
                    ok: true,
                    policy: Some(in_force.label),
                    sha256: Some(in_force.sha256),
                    generation: Some(now.generation),
                    ..Reply::default()
                }
            }
            Ok(Request::Switch { policy, profile }) => {
                // Reading and validating a file blocks: off the runtime's thread (one serves the whole run).
                let control = control.clone();
                let switched =
                    tokio::task::spawn_blocking(move || control.switch(&policy, profile.as_deref(), peer)).await;
                switched.unwrap_or_else(|e| Reply { ok: false, error: Some(e.to_string()), ..Reply::default() })
            }
        };
        if write.write_all(line(&reply).as_bytes()).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_read_as_the_docs_write_them() {
        let switch: Request = serde_json::from_str(r#"{"op":"switch","policy":"/etc/leash/locked.yaml"}"#).unwrap();
        assert_eq!(switch, Request::Switch { policy: "/etc/leash/locked.yaml".into(), profile: None });
        let status: Request = serde_json::from_str(r#"{"op":"status"}"#).unwrap();
        assert_eq!(status, Request::Status);
        let reply = Reply { ok: true, generation: Some(1), cut: Some(2), ..Reply::default() };
        assert_eq!(line(&reply), "{\"ok\":true,\"generation\":1,\"cut\":2}\n");
    }
}
