//! The policy's `services` as the sandboxed commands and `leash proxy` open them: the TCP ports to bind where the
//! sandbox reaches them, and the Unix sockets leash binds itself (the files are removed when the run ends).

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use leash_policy::{Policy, ServiceListen};
use leash_proxy::{ServiceListener, ServiceSocket};

use crate::exit::Failure;

/// The services that listen on a TCP port, as (name, port), in the policy's order.
pub fn ports(policy: &Policy) -> Vec<(Arc<str>, u16)> {
    let port = |s: &leash_policy::Service| match s.listen {
        ServiceListen::Port(port) => Some((s.name.clone(), port)),
        ServiceListen::Socket(_) => None,
    };
    policy.services().iter().filter_map(port).collect()
}

/// The files of the services' Unix sockets: removed when this is dropped.
#[derive(Default)]
pub struct SocketFiles {
    paths: Vec<PathBuf>,
}

impl SocketFiles {
    /// The paths bound, for a sandbox that must be let connect to them.
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }
}

impl Drop for SocketFiles {
    fn drop(&mut self) {
        for path in &self.paths {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Binds every service's Unix socket at its path (mode 0600: the command runs as leash's user). Something already
/// at a path is not replaced: it may be another program's socket or a file; that is exit 2 with the path named.
pub fn bind_sockets(policy: &Policy) -> Result<(Vec<ServiceSocket>, SocketFiles), Failure> {
    let (mut sockets, mut files) = (Vec::new(), SocketFiles::default());
    for service in policy.services() {
        let ServiceListen::Socket(path) = &service.listen else { continue };
        let listener = bind(path, 0o600).map_err(|why| {
            Failure::usage(format!("service `{}`: cannot listen on `{}`: {why}", service.name, path.display()))
        })?;
        files.paths.push(path.clone());
        sockets.push(ServiceSocket { name: service.name.clone(), listener: ServiceListener::Unix(listener) });
    }
    Ok((sockets, files))
}

/// A bind mount: a path on the host, and where it appears inside a container.
pub type Mount = (PathBuf, PathBuf);

/// For a container (`leash docker run`): every service's Unix socket bound in `dir` (leash's own directory for the
/// run, removed with it), mode 0666 because the container's user may be any; with the mounts that put each where
/// its service listens inside, as (host path, container path).
pub fn bind_sockets_in(policy: &Policy, dir: &Path) -> Result<(Vec<ServiceSocket>, Vec<Mount>), Failure> {
    let (mut sockets, mut mounts) = (Vec::new(), Vec::new());
    for service in policy.services() {
        let ServiceListen::Socket(inside) = &service.listen else { continue };
        let host = dir.join(format!("service-{}.sock", service.name));
        let listener = bind(&host, 0o666).map_err(|why| {
            Failure::sandbox_failed(format!("service `{}`: cannot listen on `{}`: {why}", service.name, host.display()))
        })?;
        sockets.push(ServiceSocket { name: service.name.clone(), listener: ServiceListener::Unix(listener) });
        mounts.push((host, inside.clone()));
    }
    Ok((sockets, mounts))
}

/// A Unix socket bound at `path` with `mode`, refusing to replace anything already there.
fn bind(path: &Path, mode: u32) -> Result<UnixListener, String> {
    if std::fs::symlink_metadata(path).is_ok() {
        return Err("something is there already; remove it, or name another path".to_owned());
    }
    let listener = UnixListener::bind(path).map_err(|e| e.to_string())?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(|e| e.to_string())?;
    Ok(listener)
}

/// One line per service for the operator, at start: where it listens and where it goes.
pub fn announce(policy: &Policy) {
    for s in policy.services() {
        tracing::info!("service {}: {} -> {}", s.name, s.listen.shown(), s.target.shown());
    }
}

/// With services, `NO_PROXY` for the sandbox's own loopback: clients reach the services' listeners there directly
/// (through the proxy they would be refused as IP literals or internal names). Nothing else is on that loopback but
/// leash's own listeners, so the exemption opens nothing; without services, leash sets no `NO_PROXY` at all.
pub fn no_proxy_env(policy: &Policy) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    if policy.services().is_empty() {
        return Vec::new();
    }
    let value = std::ffi::OsString::from("localhost,127.0.0.1");
    vec![("NO_PROXY".into(), value.clone()), ("no_proxy".into(), value)]
}
