//! The start-up gate: the container's command is held by a small shell loop until leash has bound its sockets
//! inside, then `exec`ed in its place. The gate is a private host directory mounted read-only in the container,
//! which also carries the run's CA files.

use std::path::PathBuf;

/// Where the gate directory is mounted (read-only) inside the container.
pub const GATE_MOUNT: &str = "/run/leash";
/// The file whose existence opens the gate.
const READY_FILE: &str = "ready";
/// The run's CA alone, in the gate directory (so at [`GATE_MOUNT`] inside), for clients that add it to their roots.
pub const CA_FILE: &str = "ca.pem";
/// The system roots plus the run's CA, for clients that take one bundle in place of the roots.
pub const BUNDLE_FILE: &str = "bundle.pem";
/// The gate's tries, `GATE_STEP` apart: leash binds within a second of the start on an idle machine; 30 s covers a
/// loaded one. After that the container exits 125 without running its command.
const GATE_STEPS: u32 = 300;
const GATE_STEP: &str = "0.1";

/// Waits for the ready file (bounded), then runs the real command in its place.
pub fn script() -> String {
    format!(
        "i=0; while [ ! -e {GATE_MOUNT}/{READY_FILE} ]; do i=$((i+1)); \
         if [ $i -gt {GATE_STEPS} ]; then echo 'leash: the proxy did not come up; not running the command' >&2; \
         exit 125; fi; sleep {GATE_STEP}; done; exec \"$@\""
    )
}

/// The start-up gate: a private host directory mounted read-only in the container; `open` creates the ready file.
/// Removed when dropped.
pub struct Gate {
    /// The directory on the host (mounted at [`GATE_MOUNT`] inside).
    pub dir: PathBuf,
}

impl Gate {
    /// A new gate directory under `TMPDIR`, mode 0755, closed.
    pub fn create() -> std::io::Result<Gate> {
        use std::os::unix::fs::DirBuilderExt;
        /// Tells apart the gates of several runs of one process (tests).
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("leash-docker-{}-{n}", std::process::id()));
        // 0755: the container's user, whoever it is, must be able to see the ready file; nothing in it is secret.
        std::fs::DirBuilder::new().mode(0o755).create(&dir)?;
        Ok(Gate { dir })
    }

    /// Opens the gate: the command held behind it runs.
    pub fn open(&self) -> std::io::Result<()> {
        std::fs::write(self.dir.join(READY_FILE), b"")
    }

    /// Where the run's CA goes (`CA_FILE` inside): the caller writes it, mode 0644 (no secret in it; the
    /// container's user may be anyone).
    pub fn ca_path(&self) -> PathBuf {
        self.dir.join(CA_FILE)
    }

    /// Where the bundle (system roots plus the run's CA) goes (`BUNDLE_FILE` inside), mode 0644 as the CA.
    pub fn bundle_path(&self) -> PathBuf {
        self.dir.join(BUNDLE_FILE)
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn the_gate_script_is_bounded_and_execs_the_command() {
        let script = script();
        assert!(script.contains("-gt 300") && script.contains("exit 125") && script.ends_with("exec \"$@\""));
    }
}
