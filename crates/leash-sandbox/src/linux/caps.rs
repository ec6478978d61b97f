//! The command's capabilities: which it keeps, and their dropping just before `execve` (`confine`). The command holds
//! every capability in its own user namespace until then; what it keeps after is Docker's default set but
//! `CAP_NET_RAW` (which would be worth nothing here: the network namespace is init's), in the bounding set, so a root
//! command keeps those and no more, and a command of another uid gets none at `execve`, as ever. `no_new_privs` goes
//! with it, so no set-uid or file-capability program can raise the set again; user namespaces, where a process would
//! start over with every capability, are kept from nesting by init (`init::limit_user_namespaces`).
//!
//! What this takes away: `CAP_SYS_ADMIN` above all (no mount namespace, cgroup namespace or mount of its own, so no
//! fresh mqueue, cgroup2, bpf or other filesystem exposing host kernel objects), `CAP_NET_ADMIN`, `CAP_SYS_PTRACE`,
//! `CAP_SYS_MODULE` and the rest. What is kept is what package managers and their scripts use to drop privileges and
//! own files (`apt-get` becomes `_apt`): a process cannot get it back.

use super::sys::{self, Errno};

/// The capabilities a command keeps (Docker's default list, `CAP_NET_RAW` aside).
pub(super) const KEPT: [u32; 13] = [
    CAP_CHOWN,
    CAP_DAC_OVERRIDE,
    CAP_FOWNER,
    CAP_FSETID,
    CAP_KILL,
    CAP_SETGID,
    CAP_SETUID,
    CAP_SETPCAP,
    CAP_NET_BIND_SERVICE,
    CAP_SYS_CHROOT,
    CAP_MKNOD,
    CAP_AUDIT_WRITE,
    CAP_SETFCAP,
];

const CAP_CHOWN: u32 = 0;
const CAP_DAC_OVERRIDE: u32 = 1;
const CAP_FOWNER: u32 = 3;
const CAP_FSETID: u32 = 4;
const CAP_KILL: u32 = 5;
const CAP_SETGID: u32 = 6;
const CAP_SETUID: u32 = 7;
const CAP_SETPCAP: u32 = 8;
const CAP_NET_BIND_SERVICE: u32 = 10;
const CAP_SYS_CHROOT: u32 = 18;
const CAP_MKNOD: u32 = 27;
const CAP_AUDIT_WRITE: u32 = 29;
const CAP_SETFCAP: u32 = 31;

/// One past the highest capability number any kernel may know; the kernel refuses numbers past its own last one
/// (`EINVAL`), which ends the walk earlier.
const CAP_LIMIT: u32 = 64;

/// The kept set as a mask, as `/proc/PID/status` shows it (`CapBnd`).
pub(super) const fn kept_mask() -> u64 {
    let mut mask = 0;
    let mut i = 0;
    while i < KEPT.len() {
        mask |= 1 << KEPT[i];
        i += 1;
    }
    mask
}

/// In the command's process, just before the seccomp filter and `execve`: every capability but the kept ones leaves
/// the bounding set, and `no_new_privs` is set. The permitted and effective sets `execve` computes are then the kept
/// ones for root, none for another uid; the inheritable and ambient sets are empty already (entering a user
/// namespace empties them), so nothing carries a dropped capability across `execve`.
pub(super) fn confine() -> Result<(), Errno> {
    let kept = kept_mask();
    for cap in 0..CAP_LIMIT {
        if kept & (1 << cap) != 0 {
            continue;
        }
        match sys::drop_bounding_capability(cap) {
            Ok(()) => {}
            Err(libc::EINVAL) => break,
            Err(errno) => return Err(errno),
        }
    }
    sys::set_no_new_privs()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kept_set_is_dockers_default_without_net_raw() {
        /// `CapBnd` of a `docker run` process with the default capabilities.
        const DOCKER_DEFAULT: u64 = 0xa804_25fb;
        const CAP_NET_RAW: u32 = 13;
        assert_eq!(kept_mask(), DOCKER_DEFAULT & !(1 << CAP_NET_RAW));
        for dropped in [21, 12, 19, 16, 2, 24] {
            assert_eq!(
                kept_mask() & (1 << dropped),
                0,
                "SYS_ADMIN, NET_ADMIN, SYS_PTRACE, SYS_MODULE, DAC_READ_SEARCH, SYS_RESOURCE"
            );
        }
    }
}
