//! Finds the host's filesystem Unix sockets to mask inside the sandbox (run in the parent, before the clone): every
//! path bound in leash's network namespace (`/proc/thread-self/net/unix`) plus a bounded walk of the directories
//! daemons put sockets in. The crate docs say what this does and does not cover.

use std::collections::{HashSet, VecDeque};
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

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
fn walk(roots: &[(&str, usize)], budget: usize) -> Vec<PathBuf> {
    let mut queue: VecDeque<(PathBuf, usize, usize)> = roots
        .iter()
        .filter(|(root, _)| fs::symlink_metadata(root).is_ok_and(|m| m.is_dir()))
        .map(|&(root, depth)| (PathBuf::from(root), 0, depth))
        .collect();
    let mut found = Vec::new();
    let mut visited = 0;
    while let Some((dir, level, depth)) = queue.pop_front() {
        let Ok(entries) = fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            visited += 1;
            if visited > budget {
                return found;
            }
            let Ok(kind) = entry.file_type() else { continue };
            if kind.is_socket() {
                found.push(entry.path());
            } else if kind.is_dir() && level + 1 < depth {
                queue.push_back((entry.path(), level + 1, depth));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

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
