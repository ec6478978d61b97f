//! Handing the run's CA to a sandboxed command: the CA and a bundle (system roots + the CA) written to a private
//! directory readable by the command, the variables that make common clients trust them, and the directory removed
//! when the run ends.

use std::ffi::OsString;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use leash_proxy::Inspection;

use crate::shared::tls::write_public;

/// Variables that name a CA bundle for the clients that read them: OpenSSL (curl, Python's ssl, Ruby, wget), Python
/// requests, curl, git, pip, cargo, the AWS SDKs, gRPC, httplib2, gcloud, Nix, Deno. Each is pointed at the bundle
/// (an inherited one would point its client at roots without the run's CA, so inspected hosts would fail there).
pub const BUNDLE_VARS: [&str; 12] = [
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "PIP_CERT",
    "CARGO_HTTP_CAINFO",
    "AWS_CA_BUNDLE",
    "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH",
    "HTTPLIB2_CA_CERTS",
    "CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE",
    "NIX_SSL_CERT_FILE",
    "DENO_CERT",
];
/// The start of every CA directory's name, `leash-run-PID-NANOS` (see [`new_dir`], [`leftover_pid`]).
const DIR_PREFIX: &str = "leash-run-";
/// Node adds this file's CAs to its own roots, so it names the run's CA alone.
pub const NODE_VAR: &str = "NODE_EXTRA_CA_CERTS";

/// The written files; the directory is removed on drop.
pub struct CaFiles {
    dir: PathBuf,
    pub bundle: PathBuf,
    pub ca: PathBuf,
}

impl CaFiles {
    /// A new directory under /dev/shm or `TMPDIR` (mode 0755) for `ca.pem` and `bundle.pem`, which [`CaFiles::write`]
    /// writes later: the command's environment can name them before the CA exists.
    pub fn create() -> std::io::Result<CaFiles> {
        // In memory where there is a tmpfs for it: writing, then removing, a 200 kB bundle on a disk filesystem was a
        // tenth of `leash run`'s start-up.
        let base = leash_sandbox::scratch_dir();
        sweep_leftovers(&base);
        let dir = new_dir(&base).or_else(|_| new_dir(&std::env::temp_dir()))?;
        Ok(CaFiles { bundle: dir.join("bundle.pem"), ca: dir.join("ca.pem"), dir })
    }

    /// The directory both files are in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes the CA and the bundle, mode 0644: they hold no secret, and the command may run as another user id.
    pub fn write(&self, inspection: &Inspection) -> std::io::Result<()> {
        write_trust_files(inspection, &self.ca, &self.bundle)
    }

    /// The environment entries that point clients at these files.
    pub fn env(&self) -> Vec<(OsString, OsString)> {
        let mut env: Vec<(OsString, OsString)> =
            BUNDLE_VARS.iter().map(|v| ((*v).into(), self.bundle.clone().into_os_string())).collect();
        env.push((NODE_VAR.into(), self.ca.clone().into_os_string()));
        env
    }
}

impl Drop for CaFiles {
    fn drop(&mut self) {
        // Three system calls where nothing else was put there (the command, same uid, could have).
        let _ = (std::fs::remove_file(&self.ca), std::fs::remove_file(&self.bundle));
        if std::fs::remove_dir(&self.dir).is_err() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The run's CA at `ca` and the bundle (system roots plus the CA) at `bundle`, mode 0644: they hold no secret, and the
/// command (`leash run`) or the container's user (`leash docker run`) may be anyone.
pub fn write_trust_files(inspection: &Inspection, ca: &Path, bundle: &Path) -> std::io::Result<()> {
    write_public(ca, inspection.ca_pem())?;
    inspection.write_bundle(bundle)
}

/// Remove the CA directories of earlier runs whose leash is gone without removing them (killed with SIGKILL, say):
/// ours by name and owner, and no process of that id left. On a tmpfs each holds 200 kB of memory until a reboot.
fn sweep_leftovers(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else { return };
    let me = rustix::process::geteuid().as_raw();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(leftover_pid) else { continue };
        let ours = entry.metadata().is_ok_and(|m| m.is_dir() && std::os::unix::fs::MetadataExt::uid(&m) == me);
        if ours && !Path::new("/proc").join(pid.to_string()).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The leash pid in a CA directory's name (`leash-run-PID-NANOS`).
fn leftover_pid(name: &str) -> Option<u32> {
    let (pid, nanos) = name.strip_prefix(DIR_PREFIX)?.split_once('-')?;
    (nanos.len() == 8 && nanos.bytes().all(|b| b.is_ascii_hexdigit())).then_some(())?;
    pid.parse().ok()
}

/// A directory of our own: `create_dir` fails rather than reuse one that exists (another user's, say).
fn new_dir(base: &Path) -> std::io::Result<PathBuf> {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let dir = base.join(format!("{DIR_PREFIX}{}-{nanos:08x}", std::process::id()));
    std::fs::DirBuilder::new().mode(0o755).create(&dir)?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_leash_run_directories_name_a_pid() {
        assert_eq!(leftover_pid("leash-run-4242-0afd67b8"), Some(4242));
        for other in
            ["leash-run-4242", "leash-run-x-0afd67b8", "leash-run-4242-0afd67", "leash-run-1-zzzzzzzz", "tmux-0"]
        {
            assert_eq!(leftover_pid(other), None, "{other}");
        }
    }

    #[test]
    fn directories_of_dead_runs_are_swept_and_live_ones_kept() {
        let base = tempfile::tempdir().unwrap();
        // A pid above the kernel's maximum is never alive; our own is.
        let dead = base.path().join("leash-run-4194305-0afd67b8");
        let alive = base.path().join(format!("leash-run-{}-0afd67b8", std::process::id()));
        let unrelated = base.path().join("leash-run-notes");
        for dir in [&dead, &alive, &unrelated] {
            std::fs::create_dir(dir).unwrap();
            std::fs::write(dir.join("bundle.pem"), "x").unwrap();
        }
        sweep_leftovers(base.path());
        assert!(!dead.exists(), "a dead run's directory is removed");
        assert!(alive.exists() && unrelated.exists());
    }
}
