//! What the host's filesystem and daemon say about the sources [`crate::options`] found: a bind source that resolves
//! to a runtime socket, to the kernel's interfaces or to one of leash's own files (or a directory above one), that
//! holds a host Unix socket or a mount of a kernel filesystem, a named volume created to bind a host path. Those are
//! refused like the options `options` refuses on their face.

use std::path::{Component, Path, PathBuf};

use crate::engine::{Engine, EngineError};
use crate::options::{self, RunOptions, Unsafe};

/// The kernel's own filesystems: a bind of one, of anything in one or of a directory holding one reaches the host
/// kernel (its sysctls, cgroups and their release agents, devices, namespaces, tracing, firmware variables), wherever
/// it is mounted.
const KERNEL_FILESYSTEMS: &[&str] = &[
    "proc",
    "sysfs",
    "devtmpfs",
    "devpts",
    "cgroup",
    "cgroup2",
    "debugfs",
    "tracefs",
    "securityfs",
    "bpf",
    "configfs",
    "fusectl",
    "pstore",
    "efivarfs",
    "binfmt_misc",
    "mqueue",
    "hugetlbfs",
    "nsfs",
    "resctrl",
    "selinuxfs",
    "smackfs",
    "xenfs",
    "rpc_pipefs",
    "nfsd",
];

/// What no bind may reach on this host, gathered once a run.
#[derive(Debug, Default)]
pub struct Guarded {
    /// The filesystem Unix sockets host processes listen on, resolved.
    pub sockets: Vec<PathBuf>,
    /// Where the kernel's own filesystems are mounted, and their type.
    pub kernel_mounts: Vec<(PathBuf, String)>,
    /// leash's own files for this run (resolved as far as they exist) and what each is: the policy file, the audit
    /// log, the secrets' files, the kept run logs, the control socket's directory.
    pub leash_files: Vec<(PathBuf, String)>,
}

impl Guarded {
    /// This host's sockets and kernel mounts, and `leash_files` (what each is, and its path, which need not exist
    /// yet: a directory above it is refused all the same).
    pub fn on_host(leash_files: Vec<(String, PathBuf)>) -> Guarded {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        Guarded {
            sockets: host_unix_sockets(),
            kernel_mounts: kernel_mounts(&mountinfo),
            leash_files: leash_files.into_iter().map(|(what, path)| (resolve(&path), what)).collect(),
        }
    }
}

/// The options of `opts` that the host shows to be unsafe: bind sources (see [`unsafe_on_host`]) and named volumes
/// (see [`unsafe_volume`]), in that order.
pub fn unsafe_options(opts: &RunOptions, engine: &Engine, guarded: &Guarded) -> Vec<Unsafe> {
    let mut found: Vec<_> = opts.bind_sources.iter().filter_map(|(o, s)| unsafe_on_host(o, s, guarded)).collect();
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

/// A bind source that resolves (symlinks, `..`, relative paths; a missing tail as written, since Docker makes it) to
/// a runtime socket or a directory above one, to the kernel's interfaces, into or above a mount of a kernel
/// filesystem, into or above one of leash's own files, that is a Unix socket, or that holds one a host process
/// listens on: each is a way around the proxy or out of the container.
pub fn unsafe_on_host(option: &str, source: &str, guarded: &Guarded) -> Option<Unsafe> {
    let path = resolve(Path::new(source));
    let overlaps = |other: &Path| path.starts_with(other) || other.starts_with(&path);
    let text = path.to_string_lossy();
    let why = if options::reaches_runtime_socket(&text) {
        "its source resolves to the Docker socket (or a directory holding it)".to_owned()
    } else if options::reaches_kernel_interface(&text) {
        options::WHY_KERNEL.to_owned()
    } else if let Some((at, kind)) = guarded.kernel_mounts.iter().find(|(at, _)| overlaps(at)) {
        format!("it reaches the host's `{kind}` filesystem at `{}`, one of the kernel's interfaces", at.display())
    } else if let Some((file, what)) = guarded.leash_files.iter().find(|(file, _)| overlaps(file)) {
        format!("it reaches leash's own {what} `{}`, which the container must neither read nor change", file.display())
    } else if std::fs::metadata(&path).is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type())) {
        "its source is a host Unix socket, a way around the proxy".to_owned()
    } else if let Some(socket) = guarded.sockets.iter().find(|socket| socket.starts_with(&path)) {
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

/// The mount points of the kernel's own filesystems in a `/proc/PID/mountinfo` table, and their types. A line is
/// `ID PARENT MAJ:MIN ROOT MOUNT-POINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER-OPTIONS`, the mount point with
/// space, tab, line end and backslash written in octal (`\040`).
pub fn kernel_mounts(mountinfo: &str) -> Vec<(PathBuf, String)> {
    let mount = |line: &str| {
        let fields: Vec<&str> = line.split(' ').collect();
        let at = fields.get(4)?;
        let separator = fields.iter().position(|f| *f == "-")?;
        let kind = fields.get(separator + 1)?;
        KERNEL_FILESYSTEMS.contains(kind).then(|| (PathBuf::from(unescape_octal(at)), (*kind).to_owned()))
    };
    mountinfo.lines().filter_map(mount).collect()
}

/// A mountinfo field with its `\NNN` octal escapes undone.
fn unescape_octal(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let escape = bytes.get(at + 1..at + 4).filter(|_| bytes[at] == b'\\');
        match escape.and_then(|digits| u8::from_str_radix(std::str::from_utf8(digits).ok()?, 8).ok()) {
            Some(byte) => {
                out.push(byte);
                at += 4;
            }
            None => {
                out.push(bytes[at]);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `path` made absolute and resolved as the daemon will find it: the longest part that exists with its symlinks
/// followed, then the rest as written (`.` dropped, `..` taking one back), since Docker makes a missing `-v` source.
pub fn resolve(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut existing = absolute.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(existing) {
            return rest.iter().rev().fold(real, |mut out, part: &Component| {
                match part {
                    Component::ParentDir => {
                        out.pop();
                    }
                    Component::Normal(name) => out.push(name),
                    _ => {}
                }
                out
            });
        }
        match (existing.parent(), existing.components().next_back()) {
            (Some(parent), Some(last)) => {
                rest.push(last);
                existing = parent;
            }
            _ => return absolute,
        }
    }
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
            let host: Vec<_> =
                opts.bind_sources.iter().filter_map(|(o, s)| unsafe_on_host(o, s, &Guarded::default())).collect();
            let refused: Vec<_> = opts.unsafe_options.iter().chain(&host).collect();
            assert_eq!(refused.len(), 1, "{value}: {opts:?}");
            assert_eq!(refused[0].option, format!("--mount={value}"));
            assert!(refused[0].why.contains("Docker socket"), "{value}: {}", refused[0].why);
        }
    }

    /// The refusal of `-v SOURCE:/x` on the host, given `guarded`.
    fn on_host(source: &Path, guarded: &Guarded) -> Option<String> {
        unsafe_on_host("-v", &source.to_string_lossy(), guarded).map(|u| u.why)
    }

    #[test]
    fn a_source_that_links_into_the_kernels_interfaces_is_refused_on_the_host() {
        let dir = tempfile::tempdir().unwrap();
        for (name, target) in [("p", "/proc"), ("s", "/sys/fs"), ("d", "/dev"), ("root", "/")] {
            let link = dir.path().join(name);
            std::os::unix::fs::symlink(target, &link).unwrap();
            let why = on_host(&link, &Guarded::default()).unwrap_or_default();
            assert!(why.contains("kernel interfaces") || why.contains("Docker socket"), "{target}: {why}");
            // A missing path under the link resolves through it: Docker would make it there.
            let why = on_host(&link.join("missing/deeper"), &Guarded::default()).unwrap_or_default();
            assert_eq!(why.is_empty(), target == "/", "{target}/missing/deeper: {why}");
        }
        let plain = dir.path().join("plain");
        std::fs::create_dir(&plain).unwrap();
        assert_eq!(on_host(&plain, &Guarded::default()), None);
    }

    #[test]
    fn a_source_holding_or_inside_a_kernel_filesystem_mounted_elsewhere_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (holder, beside) = (dir.path().join("srv"), dir.path().join("data"));
        std::fs::create_dir(&holder).unwrap();
        std::fs::create_dir(&beside).unwrap();
        let holder = std::fs::canonicalize(holder).unwrap();
        let guarded =
            Guarded { kernel_mounts: vec![(holder.join("hostproc"), "proc".to_owned())], ..Guarded::default() };
        for source in [holder.clone(), holder.join("hostproc"), holder.join("hostproc/sys/kernel")] {
            let why = on_host(&source, &guarded).unwrap_or_default();
            assert!(why.contains("`proc` filesystem"), "{}: {why}", source.display());
        }
        assert_eq!(on_host(&beside, &guarded), None);
    }

    #[test]
    fn kernel_mounts_are_read_from_mountinfo_with_escapes_undone() {
        let table = "\
22 1 0:21 / /proc rw,nosuid shared:5 - proc proc rw
23 1 0:22 / /sys rw - sysfs sysfs rw
30 23 0:26 / /sys/fs/cgroup ro master:9 - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
40 1 8:1 / / rw - ext4 /dev/sda1 rw
41 1 0:40 / /srv/my\\040procs rw - proc proc rw
42 1 0:4 net:[4026532] /run/netns/a rw - nsfs nsfs rw
";
        let found: Vec<(String, String)> =
            kernel_mounts(table).into_iter().map(|(p, k)| (p.display().to_string(), k)).collect();
        let want = [
            ("/proc", "proc"),
            ("/sys", "sysfs"),
            ("/sys/fs/cgroup/memory", "cgroup"),
            ("/srv/my procs", "proc"),
            ("/run/netns/a", "nsfs"),
        ];
        assert_eq!(found, want.map(|(p, k)| (p.to_owned(), k.to_owned())));
        assert!(kernel_mounts("garbage\n1 2 3\n").is_empty());
    }

    #[test]
    fn a_source_that_is_inside_or_above_one_of_leashs_files_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("conf");
        std::fs::create_dir(&conf).unwrap();
        std::fs::write(conf.join("policy.yaml"), "").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&conf, &link).unwrap();
        let guarded = Guarded {
            leash_files: vec![
                (resolve(&conf.join("policy.yaml")), "policy file".to_owned()),
                // Not made yet: a directory above it is refused all the same.
                (resolve(&dir.path().join("state/leash/runs")), "kept run logs".to_owned()),
            ],
            ..Guarded::default()
        };
        for (source, what) in [
            (conf.join("policy.yaml"), "policy file"),
            (conf.clone(), "policy file"),
            (link.clone(), "policy file"),
            (conf.join("./"), "policy file"),
            (dir.path().to_path_buf(), "policy file"),
            (dir.path().join("state"), "kept run logs"),
            (dir.path().join("state/leash/runs/one-run"), "kept run logs"),
        ] {
            let why = on_host(&source, &guarded).unwrap_or_default();
            assert!(why.contains(&format!("leash's own {what}")), "{}: {why}", source.display());
        }
        for fine in [conf.join("other"), dir.path().join("stat"), dir.path().join("state/other")] {
            assert_eq!(on_host(&fine, &guarded), None, "{}", fine.display());
        }
    }

    #[test]
    fn resolve_follows_what_exists_and_keeps_the_rest_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(dir.path()).unwrap();
        std::os::unix::fs::symlink("/proc", dir.path().join("p")).unwrap();
        assert_eq!(resolve(&dir.path().join("p/missing/./x")), Path::new("/proc/missing/x"));
        assert_eq!(resolve(&dir.path().join("missing/../other")), real.join("other"));
        assert_eq!(resolve(Path::new("/")), Path::new("/"));
    }
}
