//! What the host's filesystem and daemon say about the sources [`crate::options`] found: a bind source that resolves
//! to a runtime socket or holds a host Unix socket, a named volume created to bind a host path. Those are refused
//! like the options `options` refuses on their face.

use std::path::PathBuf;

use crate::engine::{Engine, EngineError};
use crate::options::{self, RunOptions, Unsafe};

/// The options of `opts` that the host shows to be unsafe: bind sources (see [`unsafe_on_host`]) and named volumes
/// (see [`unsafe_volume`]), in that order.
pub fn unsafe_options(opts: &RunOptions, engine: &Engine) -> Vec<Unsafe> {
    let sockets = if opts.bind_sources.is_empty() { Vec::new() } else { host_unix_sockets() };
    let mut found: Vec<_> = opts.bind_sources.iter().filter_map(|(o, s)| unsafe_on_host(o, s, &sockets)).collect();
    found.extend(opts.named_volumes.iter().filter_map(|(o, n)| unsafe_volume(engine, o, n)));
    found
}

/// A named volume that already exists and would bring a host path in: created with the local driver told to bind
/// a host path or device, or by another driver. The daemon is asked; when it cannot answer, the volume is refused
/// (leash does not guess). Without a `docker` program at all, the engine check that follows says so (exit 125).
pub fn unsafe_volume(engine: &Engine, option: &str, name: &str) -> Option<Unsafe> {
    let why = match engine.volume(name) {
        Ok(None) | Err(EngineError::Missing(_)) => return None,
        Ok(Some(facts)) => format!("the volume `{name}`: {}", facts.host_path()?),
        Err(e) => format!("the volume `{name}` could not be checked ({e})"),
    };
    Some(Unsafe { option: option.to_owned(), why })
}

/// A bind source that resolves (symlinks, `..`, relative paths) to a runtime socket or a directory above one, that
/// is a Unix socket, or that holds one a host process listens on: a host daemon inside the container is a way
/// around the proxy (the container cannot reach any other).
pub fn unsafe_on_host(option: &str, source: &str, host_sockets: &[PathBuf]) -> Option<Unsafe> {
    let path = std::fs::canonicalize(source).ok()?;
    let held = host_sockets.iter().find(|socket| socket.starts_with(&path));
    let why = if options::reaches_runtime_socket(&path.to_string_lossy()) {
        "its source resolves to the Docker socket (or a directory holding it)".to_owned()
    } else if std::fs::metadata(&path).is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type())) {
        "its source is a host Unix socket, a way around the proxy".to_owned()
    } else if let Some(socket) = held {
        format!("it holds the host Unix socket `{}`, a way around the proxy", socket.display())
    } else {
        return None;
    };
    Some(Unsafe { option: option.to_owned(), why })
}

/// The filesystem Unix sockets host processes listen on (`/proc/net/unix`, leash's network namespace), resolved.
pub fn host_unix_sockets() -> Vec<PathBuf> {
    let table = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().nth(7))
        .filter(|path| path.starts_with('/'))
        .filter_map(|path| std::fs::canonicalize(path).ok())
        .collect()
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn a_mount_in_any_spelling_whose_source_links_to_the_sockets_directory_is_refused_on_the_host() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink("/run", &link).unwrap();
        for value in [
            format!("TYPE=Bind,source={},target=/r", link.display()),
            format!("\"type=bind\",\"src={}\",dst=/r", link.display()),
            format!("type=bind,src={}/../link/,dst=/r", link.display()),
        ] {
            let opts = options::scan(&["--mount".into(), value.clone(), "img".into()]).unwrap();
            let host: Vec<_> = opts.bind_sources.iter().filter_map(|(o, s)| unsafe_on_host(o, s, &[])).collect();
            let refused: Vec<_> = opts.unsafe_options.iter().chain(&host).collect();
            assert_eq!(refused.len(), 1, "{value}: {opts:?}");
            assert_eq!(refused[0].option, format!("--mount={value}"));
            assert!(refused[0].why.contains("Docker socket"), "{value}: {}", refused[0].why);
        }
    }
}
