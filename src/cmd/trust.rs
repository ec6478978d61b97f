//! Handing the run's CA to a sandboxed command: the CA and a bundle (system roots + the CA) written to a private
//! directory readable by the command, the variables that make common clients trust them, and the directory removed
//! when the run ends.

use std::ffi::OsString;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use leash_proxy::Inspection;

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
/// Where the files go when `TMPDIR` is not set: a tmpfs on Linux.
const SHM: &str = "/dev/shm";
/// Node adds this file's CAs to its own roots, so it names the run's CA alone.
pub const NODE_VAR: &str = "NODE_EXTRA_CA_CERTS";

/// The written files; the directory is removed on drop.
pub struct CaFiles {
    dir: PathBuf,
    pub bundle: PathBuf,
    pub ca: PathBuf,
}

impl CaFiles {
    /// Write `ca.pem` and `bundle.pem` into a new directory under /dev/shm or `TMPDIR` (mode 0755, files
    /// 0644: they hold no secret, and the command may run as another user id).
    pub fn write(inspection: &Inspection) -> std::io::Result<CaFiles> {
        // In memory where there is a tmpfs for it: writing, then removing, a 200 kB bundle on a disk filesystem was a
        // tenth of `leash run`'s start-up. TMPDIR, when set, is the user's choice and wins.
        let base = match std::env::var_os("TMPDIR") {
            None if Path::new(SHM).is_dir() => PathBuf::from(SHM),
            _ => std::env::temp_dir(),
        };
        let dir = new_dir(&base).or_else(|_| new_dir(&std::env::temp_dir()))?;
        let files = CaFiles { bundle: dir.join("bundle.pem"), ca: dir.join("ca.pem"), dir };
        write_public(&files.ca, inspection.ca_pem())?;
        write_public(&files.bundle, &inspection.bundle_pem())?;
        Ok(files)
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
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A directory of our own: `create_dir` fails rather than reuse one that exists (another user's, say).
fn new_dir(base: &Path) -> std::io::Result<PathBuf> {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let dir = base.join(format!("leash-run-{}-{nanos:08x}", std::process::id()));
    std::fs::DirBuilder::new().mode(0o755).create(&dir)?;
    Ok(dir)
}

fn write_public(path: &Path, text: &str) -> std::io::Result<()> {
    std::fs::write(path, text)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644))
}
