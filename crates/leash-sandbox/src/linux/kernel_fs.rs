//! Filesystems that show the host's kernel objects, wherever the host's mount table has them: the sandbox's mount
//! namespace starts as a copy of leash's, so a second mqueue mount shows the host's message queues, a cgroup mount
//! the host's cgroups, a bpf mount the host's pinned maps, a devpts mount the host's terminals, wherever they are. leash reads its mount table while init
//! builds the sandbox and names each such mount to init (`proto::Order::Cover`), which covers it before the command
//! starts (`Cover` says how). The command cannot mount another one: it holds no `CAP_SYS_ADMIN` (`caps`), and the
//! IPC, pid and network namespaces are init's.

use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

/// How init covers a mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Cover {
    /// An mqueue filesystem of the sandbox's own IPC namespace on top (as on /dev/mqueue).
    FreshMqueue = b'q',
    /// An empty read-only tmpfs on top: a proc filesystem of another pid namespace (the host's processes, and its
    /// writable kernel settings), a devpts (the host's terminals) anywhere but on /dev/pts.
    Empty = b'e',
    /// Read-only, with every mount below: objects are made by writing (`mkdir` of a cgroup, a binfmt rule, a
    /// hugetlbfs file, a debugfs or tracefs switch).
    ReadOnly = b'r',
    /// Below /sys, which init makes read-only with every mount below it: only where the kernel cannot do that
    /// (before Linux 5.12) is each made read-only on its own.
    BelowSys = b's',
}

impl Cover {
    pub(super) fn from_byte(byte: u8) -> Option<Cover> {
        [Cover::FreshMqueue, Cover::Empty, Cover::ReadOnly, Cover::BelowSys].into_iter().find(|c| *c as u8 == byte)
    }
}

/// Filesystem types whose files are host kernel objects or switches, made read-only wherever they are mounted.
const READ_ONLY_TYPES: [&str; 15] = [
    "sysfs",
    "cgroup",
    "cgroup2",
    "bpf",
    "debugfs",
    "tracefs",
    "securityfs",
    "binfmt_misc",
    "fusectl",
    "pstore",
    "configfs",
    "hugetlbfs",
    "efivarfs",
    "selinuxfs",
    "rpc_pipefs",
];

/// The mounts of leash's mount namespace that init covers, in the table's order (a mount before those below it).
pub(super) fn scan() -> std::io::Result<Vec<(Cover, PathBuf)>> {
    Ok(covers(&std::fs::read("/proc/self/mountinfo")?))
}

/// What to cover in a mountinfo table (proc(5): `ID PARENT MAJ:MIN ROOT MOUNT-POINT OPTIONS [TAGS...] - TYPE ...`),
/// read as bytes: a mount point need not be UTF-8.
fn covers(table: &[u8]) -> Vec<(Cover, PathBuf)> {
    table
        .split(|&b| b == b'\n')
        .filter_map(|line| {
            let mut fields = line.split(|&b| b == b' ');
            let point = fields.nth(4)?;
            let kind = std::str::from_utf8(fields.skip_while(|f| *f != b"-").nth(1)?).ok()?;
            let path = PathBuf::from(std::ffi::OsString::from_vec(unescape(point)));
            cover_for(kind, &path).map(|cover| (cover, path))
        })
        .collect()
}

fn cover_for(kind: &str, path: &std::path::Path) -> Option<Cover> {
    // The sandbox mounts its own /proc over the host's (hiding every mount below it), its own mqueue on /dev/mqueue
    // and its own devpts on /dev/pts.
    if path.starts_with("/proc") {
        return None;
    }
    match kind {
        "mqueue" if path != std::path::Path::new("/dev/mqueue") => Some(Cover::FreshMqueue),
        "proc" => Some(Cover::Empty),
        "devpts" if path != std::path::Path::new("/dev/pts") => Some(Cover::Empty),
        _ if path == std::path::Path::new("/sys") => None,
        _ if READ_ONLY_TYPES.contains(&kind) && path.starts_with("/sys") => Some(Cover::BelowSys),
        _ if READ_ONLY_TYPES.contains(&kind) => Some(Cover::ReadOnly),
        _ => None,
    }
}

/// A mount point as the kernel escapes it: space, tab, newline and backslash as three octal digits.
fn unescape(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let octal = bytes.get(i + 1..i + 4).filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) if b == b'\\' => {
                out.push(d.iter().fold(0u8, |acc, c| acc.wrapping_mul(8).wrapping_add(c - b'0')));
                i += 4;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mount_of_a_kernel_object_filesystem_is_covered_but_those_the_sandbox_replaces() {
        let table = b"\
22 1 0:21 / /proc rw,nosuid - proc proc rw
23 22 0:22 / /proc/sys/fs/binfmt_misc rw - binfmt_misc binfmt_misc rw
24 1 0:23 / /sys rw,nosuid shared:7 - sysfs sysfs rw
25 24 0:24 / /sys/fs/cgroup rw shared:8 master:1 - cgroup2 cgroup2 rw
26 1 0:25 / /dev/mqueue rw - mqueue mqueue rw
27 1 0:25 / /run/other\\040queues rw - mqueue mqueue rw
28 1 0:26 / /srv/cg rw - cgroup2 cgroup2 rw
29 1 0:21 / /host/proc rw - proc proc rw
30 1 0:27 / /dev/hugepages rw - hugetlbfs hugetlbfs rw
31 1 0:28 / /home rw - ext4 /dev/sda2 rw
32 1 0:29 / /srv/sysfs rw - sysfs sysfs rw
33 1 0:30 / /srv/\xff-latin1 rw - mqueue mqueue rw
34 24 0:31 / /dev/pts rw - devpts devpts rw,mode=600
35 1 0:31 / /srv/chroot/dev/pts rw - devpts devpts rw,mode=600
";
        let got = covers(table);
        let want = [
            (Cover::BelowSys, "/sys/fs/cgroup"),
            (Cover::FreshMqueue, "/run/other queues"),
            (Cover::ReadOnly, "/srv/cg"),
            (Cover::Empty, "/host/proc"),
            (Cover::ReadOnly, "/dev/hugepages"),
            (Cover::ReadOnly, "/srv/sysfs"),
        ];
        let mut want: Vec<_> = want.map(|(c, p)| (c, PathBuf::from(p))).to_vec();
        want.push((Cover::FreshMqueue, PathBuf::from(std::ffi::OsString::from_vec(b"/srv/\xff-latin1".to_vec()))));
        want.push((Cover::Empty, PathBuf::from("/srv/chroot/dev/pts")));
        assert_eq!(got, want);
        for cover in [Cover::FreshMqueue, Cover::Empty, Cover::ReadOnly, Cover::BelowSys] {
            assert_eq!(Cover::from_byte(cover as u8), Some(cover));
        }
    }

    #[test]
    fn escaped_mount_points_read_back_exactly() {
        assert_eq!(unescape(br"/a\040b\011c\012d\134e"), b"/a b\tc\nd\\e");
        assert_eq!(unescape(br"/x\04"), br"/x\04", "a short escape stays as it is");
        assert_eq!(unescape(br"/x\9999"), br"/x\9999");
    }
}
