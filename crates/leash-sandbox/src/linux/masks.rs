//! Finds the host's filesystem Unix sockets to mask inside the sandbox (run in the parent, before the clone): every
//! path bound in leash's network namespace (`/proc/thread-self/net/unix`) plus a bounded walk of the directories
//! daemons put sockets in. The crate docs say what this does and does not cover.

use std::collections::{HashSet, VecDeque};
use std::ffi::OsStr;
use std::fs;
use std::mem::MaybeUninit;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, RawDir};

use crate::MASK_WALK_BUDGET;

/// Where daemons and containers put their sockets, and how many levels deep to look. /run holds deep trees
/// (`/run/containerd/.../*.sock`, `/run/user/1000/podman/podman.sock`) and is small; the temporary directories can
/// be huge, and their sockets sit at most in a directory of their own (`/tmp/.X11-unix/X0`, `/tmp/tmux-0/default`,
/// `/tmp/ssh-XXXX/agent.1`). A root that is a link (/var/run -> /run) is skipped.
const WALK_ROOTS: [(&str, usize); 5] = [("/run", 6), ("/var/run", 6), ("/tmp", 2), ("/var/tmp", 2), ("/dev/shm", 2)];
/// The kernel's list of the calling thread's network namespace's Unix sockets.
const PROC_NET_UNIX: &str = "/proc/thread-self/net/unix";

/// The sockets to mask: existing socket files not among `allowed` (compared by device and inode), one path each.
pub(super) fn sockets_to_mask(allowed: &[PathBuf]) -> Vec<PathBuf> {
    let allowed: HashSet<(u64, u64)> = allowed.iter().filter_map(|p| socket_id(p)).collect();
    let mut seen = HashSet::new();
    bound_paths()
        .into_iter()
        .chain(walk(&WALK_ROOTS, MASK_WALK_BUDGET))
        .filter(|path| socket_id(path).is_some_and(|id| !allowed.contains(&id) && seen.insert(id)))
        .collect()
}

/// (device, inode) of a socket file, following links; `None` for anything else.
fn socket_id(path: &Path) -> Option<(u64, u64)> {
    let meta = fs::metadata(path).ok()?;
    meta.file_type().is_socket().then(|| (meta.dev(), meta.ino()))
}

/// The filesystem paths in /proc/net/unix (abstract names start with `@` and need no mask).
fn bound_paths() -> Vec<PathBuf> {
    fs::read_to_string(PROC_NET_UNIX).map(|text| parse_proc_net_unix(&text)).unwrap_or_default()
}

/// Parses the table: a header line, then seven columns of hex and numbers (no `/` in them) and an optional path,
/// which may hold spaces.
fn parse_proc_net_unix(text: &str) -> Vec<PathBuf> {
    text.lines().skip(1).filter_map(|line| line.find(" /").and_then(|i| line.get(i + 1..))).map(PathBuf::from).collect()
}

/// Breadth-first walk of each root to its depth, visiting at most `budget` entries in all; never follows links.
/// It runs at every sandbox start, so it reads each directory with `getdents64` into one reused buffer, allocating
/// only for the paths it keeps (std's `read_dir` allocated per entry and cost about twice as much).
fn walk(roots: &[(&str, usize)], budget: usize) -> Vec<PathBuf> {
    let mut queue: VecDeque<(PathBuf, usize, usize)> = roots
        .iter()
        .filter(|(root, _)| fs::symlink_metadata(root).is_ok_and(|m| m.is_dir()))
        .map(|&(root, depth)| (PathBuf::from(root), 0, depth))
        .collect();
    let mut buf = vec![MaybeUninit::<u8>::uninit(); 32 * 1024];
    let mut found = Vec::new();
    let mut visited = 0;
    while let Some((dir, level, depth)) = queue.pop_front() {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let Ok(fd) = rfs::openat(rfs::CWD, &dir, flags, Mode::empty()) else { continue };
        let mut entries = RawDir::new(&fd, &mut buf);
        while let Some(Ok(entry)) = entries.next() {
            let name = entry.file_name();
            if matches!(name.to_bytes(), b"." | b"..") {
                continue;
            }
            visited += 1;
            if visited > budget {
                return found;
            }
            // Some filesystems leave the type out of the listing: ask, without following a link.
            let kind = match entry.file_type() {
                FileType::Unknown => match rfs::statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(stat) => FileType::from_raw_mode(stat.st_mode),
                    Err(_) => continue,
                },
                kind => kind,
            };
            let path = || dir.join(OsStr::from_bytes(name.to_bytes()));
            match kind {
                FileType::Socket => found.push(path()),
                FileType::Directory if level + 1 < depth => queue.push_back((path(), level + 1, depth)),
                _ => {}
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::net::UnixListener;

    #[test]
    fn the_walk_finds_sockets_to_its_depth_never_through_links_and_stops_at_its_budget() {
        let root = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let r = root.path();
        fs::create_dir_all(r.join("a/b")).unwrap();
        let _listeners: Vec<UnixListener> =
            [r.join("top.sock"), r.join("a/one-down.sock"), r.join("a/b/too-deep.sock")]
                .iter()
                .chain([elsewhere.path().join("behind-link.sock")].iter())
                .map(|p| UnixListener::bind(p).unwrap())
                .collect();
        std::os::unix::fs::symlink(elsewhere.path(), r.join("link")).unwrap();
        let root_str = r.to_str().unwrap();
        let mut found = walk(&[(root_str, 2)], MASK_WALK_BUDGET);
        found.sort();
        assert_eq!(found, vec![r.join("a/one-down.sock"), r.join("top.sock")]);
        let deeper = walk(&[(root_str, 3)], MASK_WALK_BUDGET);
        assert!(deeper.contains(&r.join("a/b/too-deep.sock")), "{deeper:?}");
        assert!(walk(&[(root_str, 3)], 1).len() <= 1, "the budget bounds the entries visited");
        assert!(walk(&[(elsewhere.path().to_str().unwrap(), 1)], MASK_WALK_BUDGET).len() == 1);
    }

    #[test]
    fn proc_net_unix_yields_only_filesystem_paths() {
        let table = "Num       RefCount Protocol Flags    Type St Inode Path\n\
                     0000000000000000: 00000002 00000000 00010000 0001 01  4192 /var/run/docker.sock\n\
                     0000000000000000: 00000002 00000000 00010000 0001 01  4193 /tmp/a b.sock\n\
                     0000000000000000: 00000003 00000000 00000000 0001 03  4207\n\
                     0000000000000000: 00000002 00000000 00010000 0001 01  4300 @/tmp/.X11-unix/X0\n";
        assert_eq!(
            parse_proc_net_unix(table),
            vec![PathBuf::from("/var/run/docker.sock"), PathBuf::from("/tmp/a b.sock")]
        );
    }
}
