//! TLS inspection as every subcommand that inspects sets it up: a new CA for the run, upstream trust, and the CA
//! (or bundle) written where asked, as files readable by everyone and never seen half-written.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use leash_proxy::{Inspection, UpstreamTrust};

use crate::cli::TlsArgs;
use crate::exit::Failure;

/// [`inspection`] for a command whose clients it does not start (`leash attach`, `leash docker attach`): the CA
/// written to `--ca-cert-out` and the bundle to `--ca-bundle-out`, for the caller to hand them.
pub fn inspection_for_clients(
    ca_cert_out: Option<&Path>,
    ca_bundle_out: Option<&Path>,
    upstream_ca: &[PathBuf],
) -> Result<Arc<Inspection>, Failure> {
    let args = TlsArgs {
        ca_cert_out: ca_cert_out.map(Path::to_owned),
        ca_bundle_out: ca_bundle_out.map(Path::to_owned),
        upstream_ca: upstream_ca.to_vec(),
    };
    inspection(&args)
}

/// TLS inspection: a new CA for this run, upstream trust, and the CA (or bundle) written where asked. Any failure
/// stops leash: a policy with path rules cannot be enforced over HTTPS without it.
pub fn inspection(args: &TlsArgs) -> Result<Arc<Inspection>, Failure> {
    let trust = UpstreamTrust { system_roots: true, extra_ca_files: args.upstream_ca.clone() };
    let inspection =
        Inspection::new(&trust).map_err(|e| Failure::usage(format!("cannot set up TLS inspection: {e}")))?;
    let written = |path: &Path, result: std::io::Result<()>| {
        result.map_err(|e| Failure::usage(format!("cannot write `{}`: {e}", path.display())))
    };
    if let Some(path) = &args.ca_cert_out {
        written(path, write_atomically(path, &|tmp| write_public(tmp, inspection.ca_pem())))?;
    }
    if let Some(path) = &args.ca_bundle_out {
        written(path, write_atomically(path, &|tmp| inspection.write_bundle(tmp)))?;
    }
    if let Some(path) = &args.ca_cert_out {
        tracing::info!("TLS inspection: the run's CA certificate is in `{}`", path.display());
    }
    Ok(Arc::new(inspection))
}

/// Write a certificate file with `write` (which leaves it readable by everyone: it holds no secret), atomically: a
/// reader polling for it never sees half a file.
pub fn write_atomically(path: &Path, write: &dyn Fn(&Path) -> std::io::Result<()>) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp-{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    write(&tmp).and_then(|()| std::fs::rename(&tmp, path)).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// `text` in a new file at `path`, mode 0644.
pub fn write_public(path: &Path, text: &str) -> std::io::Result<()> {
    std::fs::write(path, text)?;
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o644))
}
