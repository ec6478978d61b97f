//! Thin wrappers over the system calls the sandbox's child side makes, each around one small `unsafe` block. All of
//! them are async-signal-safe (no allocation, no locks, nothing from glibc beyond the system call itself), so the
//! cloned child may call them between `clone` and `execve` even when leash has many threads.

use std::ffi::CStr;
use std::mem::{size_of, zeroed};
use std::ptr;

use libc::{c_char, c_int, c_uint, c_ulong, c_void, pid_t};

/// An `errno` value.
pub(super) type Errno = i32;
/// The result of one system call.
pub(super) type SysResult<T> = Result<T, Errno>;

/// The calling thread's `errno` (reading it allocates nothing).
pub(super) fn errno() -> Errno {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

fn check(ret: c_int) -> SysResult<c_int> {
    if ret < 0 {
        Err(errno())
    } else {
        Ok(ret)
    }
}

fn check_long(ret: libc::c_long) -> SysResult<libc::c_long> {
    if ret < 0 {
        Err(errno())
    } else {
        Ok(ret)
    }
}

/// The calling thread's effective capabilities, the first 32 (`capget`, version 3: `CAP_SETUID` and `CAP_SETGID`
/// are among them).
pub(super) fn effective_caps() -> SysResult<u32> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    let mut header = Header { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
    let mut data = [Data::default(); 2];
    // SAFETY: version 3 takes two `Data` records, both valid for writing; pid 0 is the calling thread.
    check_long(unsafe { libc::syscall(libc::SYS_capget, &mut header as *mut Header, data.as_mut_ptr()) })?;
    Ok(data[0].effective)
}

/// `struct clone_args` of clone3(2), first version.
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
}

/// Forks with `flags` (namespace flags) by the raw clone3 (else clone) system call, so none of glibc's fork
/// handlers run: they take locks that another thread may have held at the moment of the copy. Returns 0 in the
/// child, which continues on a copy of this stack like after `fork`.
pub(super) fn raw_fork(flags: u64) -> SysResult<pid_t> {
    let mut args = CloneArgs { flags, exit_signal: libc::SIGCHLD as u64, ..CloneArgs::default() };
    // SAFETY: clone3 without a stack has fork semantics; `args` is valid and its size is passed.
    let ret = unsafe { libc::syscall(libc::SYS_clone3, &mut args as *mut CloneArgs, size_of::<CloneArgs>()) };
    match check_long(ret) {
        Ok(pid) => Ok(pid as pid_t),
        Err(libc::ENOSYS) => raw_clone(flags | libc::SIGCHLD as u64),
        Err(e) => Err(e),
    }
}

/// Runs `child(arg)` in a new process made with `flags` (`CLONE_VM` and namespace flags) on the stack below
/// `stack_top`, beside this one; its end signals SIGCHLD.
///
/// # Safety
/// `stack_top` is the 16-byte aligned end of memory that nothing else uses while the child runs; `child` may only
/// read memory it shares, must leave by `execve` or `exit`, and never returns or unwinds into this stack. With
/// `CLONE_VM` the child runs at the same time as the caller: the two must not write memory the other uses (`errno`
/// included: while both run, the system calls of one of them must not fail).
pub(super) unsafe fn spawn_on(
    stack_top: *mut c_void,
    child: extern "C" fn(*mut c_void) -> c_int,
    flags: c_int,
    arg: *mut c_void,
) -> SysResult<pid_t> {
    // SAFETY: the caller guarantees the stack and the child's conduct; glibc's clone wrapper runs no fork handlers.
    check(unsafe { libc::clone(child, stack_top, flags | libc::SIGCHLD, arg) })
}

/// The older clone(2) for kernels (or seccomp profiles) without clone3; a null stack means fork semantics.
fn raw_clone(flags: u64) -> SysResult<pid_t> {
    #[cfg(target_arch = "s390x")]
    // SAFETY: s390x takes (stack, flags, ...); null stack and null tid pointers give fork semantics.
    let ret = unsafe { libc::syscall(libc::SYS_clone, 0usize, flags as c_ulong, 0usize, 0usize, 0usize) };
    #[cfg(not(target_arch = "s390x"))]
    // SAFETY: other arches take (flags, stack, ...); null stack and null tid pointers give fork semantics.
    let ret = unsafe { libc::syscall(libc::SYS_clone, flags as c_ulong, 0usize, 0usize, 0usize, 0usize) };
    check_long(ret).map(|pid| pid as pid_t)
}

/// unshare(2).
pub(super) fn unshare(flags: c_int) -> SysResult<()> {
    // SAFETY: unshare takes no pointers.
    check(unsafe { libc::unshare(flags) }).map(drop)
}

/// mount(2) without filesystem data.
pub(super) fn mount(src: Option<&CStr>, target: &CStr, fstype: Option<&CStr>, flags: c_ulong) -> SysResult<()> {
    let src = src.map_or(ptr::null(), CStr::as_ptr);
    let fstype = fstype.map_or(ptr::null(), CStr::as_ptr);
    // SAFETY: every pointer is a NUL-terminated string or null, and data is null.
    check(unsafe { libc::mount(src, target.as_ptr(), fstype, flags, ptr::null()) }).map(drop)
}

/// mount(2) with filesystem options (`data`, a NUL-terminated string).
pub(super) fn mount_with(src: &CStr, target: &CStr, fstype: &CStr, flags: c_ulong, data: &CStr) -> SysResult<()> {
    // SAFETY: every pointer is a NUL-terminated string; the filesystem reads `data` as a string of options.
    let ret = unsafe { libc::mount(src.as_ptr(), target.as_ptr(), fstype.as_ptr(), flags, data.as_ptr().cast()) };
    check(ret).map(drop)
}

/// A new pseudo-terminal of the devpts instance whose `ptmx` is at `ptmx`: (master, slave), both close-on-exec and
/// neither the caller's controlling terminal, the slave unlocked and opened through the master (`TIOCGPTPEER`, no
/// path looked up), with `settings` and `size`.
pub(super) fn open_pty(ptmx: &CStr, settings: &libc::termios, size: &libc::winsize) -> SysResult<(c_int, c_int)> {
    let master = open(ptmx, libc::O_RDWR | libc::O_NOCTTY)?;
    let slave = pty_peer(master, settings, size);
    if slave.is_err() {
        close(master);
    }
    slave.map(|slave| (master, slave))
}

fn pty_peer(master: c_int, settings: &libc::termios, size: &libc::winsize) -> SysResult<c_int> {
    let unlock: c_int = 0;
    // SAFETY: TIOCSPTLCK reads one int.
    check(unsafe { libc::ioctl(master, libc::TIOCSPTLCK, &unlock) })?;
    // SAFETY: TIOCGPTPEER takes the open flags as its integer argument and returns a new descriptor.
    let slave =
        check(unsafe { libc::ioctl(master, libc::TIOCGPTPEER, libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC) })?;
    // SAFETY: tcsetattr only reads `settings` (no allocation, no lock); TIOCSWINSZ reads one winsize.
    let set = check(unsafe { libc::tcsetattr(slave, libc::TCSANOW, settings) })
        .and_then(|_| check(unsafe { libc::ioctl(slave, libc::TIOCSWINSZ, size) }));
    if let Err(errno) = set {
        close(slave);
        return Err(errno);
    }
    Ok(slave)
}

/// `struct mount_attr` of mount_setattr(2), first version.
#[repr(C)]
#[derive(Default)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// `MOUNT_ATTR_RDONLY` of mount_setattr(2).
const MOUNT_ATTR_RDONLY: u64 = 0x1;

/// Makes the mount at `path`, and every mount below it, read-only: mount_setattr(2) with `AT_RECURSIVE`, or on a
/// kernel older than 5.12 a read-only bind remount of that one mount, keeping the flags it has (a mount namespace
/// owned by a user namespace may add `ro` but not drop `nosuid`, `nodev`, `noexec` or the atime flags). True when
/// the mounts below went read-only too.
pub(super) fn make_read_only(path: &CStr) -> SysResult<bool> {
    let mut attr = MountAttr { attr_set: MOUNT_ATTR_RDONLY, ..MountAttr::default() };
    let flags = libc::AT_RECURSIVE as c_uint;
    // SAFETY: `path` is NUL-terminated; `attr` is a valid mount_attr of the size passed.
    let ret = unsafe {
        libc::syscall(libc::SYS_mount_setattr, libc::AT_FDCWD, path.as_ptr(), flags, &mut attr, size_of::<MountAttr>())
    };
    match check_long(ret) {
        Err(libc::ENOSYS) => {}
        other => return other.map(|_| true),
    }
    // SAFETY: statfs64 is plain data, filled by the kernel.
    let mut stat: libc::statfs64 = unsafe { zeroed() };
    // SAFETY: `path` is NUL-terminated and `stat` is valid for writes.
    check(unsafe { libc::statfs64(path.as_ptr(), &mut stat) })?;
    let kept = [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ];
    let has = stat.f_flags as c_ulong;
    let flags = kept.iter().filter(|(st, _)| has & st != 0).fold(0, |acc, (_, ms)| acc | ms);
    mount(None, path, None, libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | flags).map(|()| false)
}

/// open(2), always with `O_CLOEXEC`.
pub(super) fn open(path: &CStr, flags: c_int) -> SysResult<c_int> {
    // SAFETY: `path` is NUL-terminated; no mode is needed without O_CREAT.
    check(unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) })
}

/// Creates the empty file `path` with permissions `mode`; fails if anything is there already (`O_EXCL`, which
/// follows no symlink).
pub(super) fn create_empty(path: &CStr, mode: libc::mode_t) -> SysResult<()> {
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: `path` is NUL-terminated; `mode` is passed as the variadic third argument O_CREAT reads.
    let fd = check(unsafe { libc::open(path.as_ptr(), flags, mode as c_uint) })?;
    close(fd);
    Ok(())
}

/// `OPEN_TREE_CLONE` of open_tree(2): a detached copy of the mount tree at the path.
const OPEN_TREE_CLONE: c_uint = 0x1;
/// `MOVE_MOUNT_F_EMPTY_PATH` of move_mount(2): the source is the descriptor itself.
const MOVE_MOUNT_F_EMPTY_PATH: c_uint = 0x4;

/// open_tree(2) with `OPEN_TREE_CLONE`: a descriptor of a detached copy of what is at `path` (a bind mount not yet
/// attached anywhere), close-on-exec.
pub(super) fn open_tree_clone(path: &CStr) -> SysResult<c_int> {
    let flags = OPEN_TREE_CLONE | libc::O_CLOEXEC as c_uint;
    // SAFETY: `path` is NUL-terminated; the call takes no other pointer.
    let ret = unsafe { libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, path.as_ptr(), flags) };
    check_long(ret).map(|fd| fd as c_int)
}

/// move_mount(2) of the detached tree `tree` (from [`open_tree_clone`]) onto `target`.
pub(super) fn move_mount_onto(tree: c_int, target: &CStr) -> SysResult<()> {
    // SAFETY: both paths are NUL-terminated (the empty one names `tree` itself).
    let ret = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree,
            c"".as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    check_long(ret).map(drop)
}

/// mkdir(2).
pub(super) fn mkdir(path: &CStr, mode: libc::mode_t) -> SysResult<()> {
    // SAFETY: `path` is NUL-terminated.
    check(unsafe { libc::mkdir(path.as_ptr(), mode) }).map(drop)
}

/// No supplementary group, then `gid` and `uid` as the real, effective and saved ids (which empties the permitted
/// and effective capabilities of a process leaving uid 0).
pub(super) fn set_user(uid: libc::uid_t, gid: libc::gid_t) -> SysResult<()> {
    // SAFETY: setgroups with an empty list reads no memory; the id calls take integers only.
    check(unsafe { libc::setgroups(0, std::ptr::null()) })?;
    // SAFETY: as above.
    check(unsafe { libc::setresgid(gid, gid, gid) })?;
    // SAFETY: as above.
    check(unsafe { libc::setresuid(uid, uid, uid) }).map(drop)
}

/// unlink(2).
pub(super) fn unlink(path: &CStr) -> SysResult<()> {
    // SAFETY: `path` is NUL-terminated.
    check(unsafe { libc::unlink(path.as_ptr()) }).map(drop)
}

/// close(2); errors are of no use to the caller.
pub(super) fn close(fd: c_int) {
    // SAFETY: closing a descriptor this side owns.
    unsafe { libc::close(fd) };
}

/// write(2) until all of `data` is written.
pub(super) fn write_all(fd: c_int, mut data: &[u8]) -> SysResult<()> {
    while !data.is_empty() {
        // SAFETY: `data` is valid for its length.
        match check_long(unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) } as libc::c_long) {
            Ok(n) => data = data.get(n as usize..).unwrap_or_default(),
            Err(libc::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes `data` to an existing file (procfs and sysctl files).
pub(super) fn write_file(path: &CStr, data: &[u8]) -> SysResult<()> {
    let fd = open(path, libc::O_WRONLY)?;
    let result = write_all(fd, data);
    close(fd);
    result
}

/// read(2), retried on EINTR.
pub(super) fn read(fd: c_int, buf: &mut [u8]) -> SysResult<usize> {
    loop {
        // SAFETY: `buf` is valid for writes of its length.
        match check_long(unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) } as libc::c_long) {
            Ok(n) => return Ok(n as usize),
            Err(libc::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
}

/// Receives one SOCK_SEQPACKET record into `buf`; `Ok(0)` at end of file. A record longer than `buf` is an error
/// (`EMSGSIZE`), not silently cut.
pub(super) fn recv_record(fd: c_int, buf: &mut [u8]) -> SysResult<usize> {
    loop {
        // SAFETY: `buf` is valid for writes of its length; MSG_TRUNC makes the call return the record's real length.
        let ret = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_TRUNC) };
        match check_long(ret as libc::c_long) {
            Ok(n) if n as usize > buf.len() => return Err(libc::EMSGSIZE),
            Ok(n) => return Ok(n as usize),
            Err(libc::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
}

/// close_range(2) over `first..=last` with `flags`, falling back to a loop where the kernel lacks it.
fn close_range(first: c_uint, last: c_uint, flags: c_uint) -> SysResult<()> {
    if first > last {
        return Ok(());
    }
    // SAFETY: close_range takes no pointers.
    let ret = unsafe { libc::syscall(libc::SYS_close_range, first, last, flags) };
    match check_long(ret) {
        Ok(_) => Ok(()),
        Err(libc::ENOSYS | libc::EINVAL) => {
            for fd in first..=last.min(open_max()) {
                if flags & libc::CLOSE_RANGE_CLOEXEC != 0 {
                    // SAFETY: F_SETFD on a descriptor that may not be open only fails with EBADF.
                    unsafe { libc::fcntl(fd as c_int, libc::F_SETFD, libc::FD_CLOEXEC) };
                } else {
                    close(fd as c_int);
                }
            }
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// The highest descriptor number the fallback loop visits (the soft RLIMIT_NOFILE, capped).
fn open_max() -> c_uint {
    /// Upper bound for the fallback loop when the limit is huge or unlimited.
    const CAP: c_uint = 1 << 20;
    // SAFETY: getrlimit writes one struct we own.
    let mut lim: libc::rlimit = unsafe { zeroed() };
    // SAFETY: `lim` is a valid rlimit to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return CAP;
    }
    (lim.rlim_cur.min(CAP as libc::rlim_t)) as c_uint
}

/// Closes every descriptor from 3 up except those in `keep` (which must be sorted and all >= 3).
pub(super) fn close_all_except(keep: &[c_int]) -> SysResult<()> {
    let mut first: c_uint = 3;
    for &fd in keep {
        let fd = fd as c_uint;
        if fd > first {
            close_range(first, fd - 1, 0)?;
        }
        first = first.max(fd + 1);
    }
    close_range(first, c_uint::MAX, 0)
}

/// Marks every descriptor from 3 up close-on-exec.
pub(super) fn cloexec_from_3() -> SysResult<()> {
    close_range(3, c_uint::MAX, libc::CLOSE_RANGE_CLOEXEC)
}

/// Clears `fd`'s close-on-exec flag: the next `execve` keeps it.
pub(super) fn keep_on_exec(fd: c_int) -> SysResult<()> {
    // SAFETY: F_SETFD takes integers only.
    check(unsafe { libc::fcntl(fd, libc::F_SETFD, 0) }).map(drop)
}

/// The calling thread's CPU affinity (sched_getaffinity(2)).
pub(super) fn affinity() -> SysResult<libc::cpu_set_t> {
    // SAFETY: cpu_set_t is plain data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { zeroed() };
    let size = size_of::<libc::cpu_set_t>();
    // SAFETY: the kernel writes at most `size` bytes into `set`.
    check_long(unsafe { libc::syscall(libc::SYS_sched_getaffinity, 0, size, &mut set as *mut libc::cpu_set_t) })
        .map(|_| set)
}

/// sched_setaffinity(2) of `pid` (0: the calling thread).
pub(super) fn set_affinity(pid: pid_t, set: &libc::cpu_set_t) -> SysResult<()> {
    let size = size_of::<libc::cpu_set_t>();
    // SAFETY: the kernel reads at most `size` bytes of `set`.
    check_long(unsafe { libc::syscall(libc::SYS_sched_setaffinity, pid, size, set as *const libc::cpu_set_t) })
        .map(drop)
}

/// The CPU the caller runs on (getcpu(2)).
pub(super) fn current_cpu() -> SysResult<u32> {
    let mut cpu: c_uint = 0;
    let no_node = ptr::null_mut::<c_uint>();
    // SAFETY: getcpu writes one unsigned int; the node and cache pointers may be null.
    check_long(unsafe { libc::syscall(libc::SYS_getcpu, &mut cpu as *mut c_uint, no_node, ptr::null_mut::<c_void>()) })
        .map(|_| cpu)
}

/// prctl(PR_SET_DUMPABLE, 0).
pub(super) fn set_non_dumpable() -> SysResult<()> {
    set_dumpable(false)
}

/// prctl(PR_SET_DUMPABLE).
pub(super) fn set_dumpable(dumpable: bool) -> SysResult<()> {
    let flag = c_ulong::from(dumpable);
    // SAFETY: PR_SET_DUMPABLE takes integers only.
    check(unsafe { libc::prctl(libc::PR_SET_DUMPABLE, flag, 0 as c_ulong, 0 as c_ulong, 0 as c_ulong) }).map(drop)
}

/// prctl(PR_CAPBSET_DROP): `cap` leaves the calling thread's bounding set (`EINVAL` past the kernel's last one).
pub(super) fn drop_bounding_capability(cap: u32) -> SysResult<()> {
    // SAFETY: PR_CAPBSET_DROP takes integers only.
    check(unsafe { libc::prctl(libc::PR_CAPBSET_DROP, c_ulong::from(cap), 0 as c_ulong, 0 as c_ulong, 0 as c_ulong) })
        .map(drop)
}

/// prctl(PR_SET_NO_NEW_PRIVS): no `execve` from here on grants privileges (set-uid bits, file capabilities).
pub(super) fn set_no_new_privs() -> SysResult<()> {
    // SAFETY: PR_SET_NO_NEW_PRIVS takes integers only.
    check(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as c_ulong, 0 as c_ulong, 0 as c_ulong, 0 as c_ulong) })
        .map(drop)
}

/// A full or empty signal set.
pub(super) fn sigset(full: bool) -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigfillset/sigemptyset initialise it fully.
    unsafe {
        let mut set: libc::sigset_t = zeroed();
        if full {
            libc::sigfillset(&mut set);
        } else {
            libc::sigemptyset(&mut set);
        }
        set
    }
}

/// sigprocmask(SIG_SETMASK).
pub(super) fn set_signal_mask(set: &libc::sigset_t) -> SysResult<()> {
    // SAFETY: `set` is an initialised sigset_t; the old mask is not wanted.
    check(unsafe { libc::sigprocmask(libc::SIG_SETMASK, set, ptr::null_mut()) }).map(drop)
}

/// signalfd(2) for `set`, close-on-exec.
pub(super) fn signalfd(set: &libc::sigset_t) -> SysResult<c_int> {
    // SAFETY: `set` is an initialised sigset_t.
    check(unsafe { libc::signalfd(-1, set, libc::SFD_CLOEXEC) })
}

/// Reads one signal from a signalfd.
pub(super) fn read_signal(fd: c_int) -> SysResult<libc::signalfd_siginfo> {
    // SAFETY: signalfd_siginfo is plain data, fully written by a successful read.
    let mut info: libc::signalfd_siginfo = unsafe { zeroed() };
    // SAFETY: the buffer is the struct itself, valid for its size.
    let buf = unsafe {
        std::slice::from_raw_parts_mut(
            (&mut info as *mut libc::signalfd_siginfo).cast::<u8>(),
            size_of::<libc::signalfd_siginfo>(),
        )
    };
    match read(fd, buf)? {
        n if n == size_of::<libc::signalfd_siginfo>() => Ok(info),
        _ => Err(libc::EIO),
    }
}

/// Sets every catchable signal's disposition back to the default (leash ignores SIGPIPE, for one).
pub(super) fn reset_signal_dispositions() {
    for signal in 1..libc::SIGRTMAX() {
        if signal != libc::SIGKILL && signal != libc::SIGSTOP {
            // SAFETY: SIG_DFL is always a valid disposition; errors (reserved signals) are ignored.
            unsafe { libc::signal(signal, libc::SIG_DFL) };
        }
    }
}

/// poll(2) with no time-out, retried on EINTR.
pub(super) fn poll(fds: &mut [libc::pollfd]) -> SysResult<()> {
    loop {
        // SAFETY: `fds` is valid for its length.
        match check(unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) }) {
            Ok(_) => return Ok(()),
            Err(libc::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
}

/// waitpid(2), retried on EINTR; returns (pid, raw status), pid 0 when WNOHANG found nothing.
pub(super) fn waitpid(pid: pid_t, flags: c_int) -> SysResult<(pid_t, c_int)> {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid out-pointer.
        match check(unsafe { libc::waitpid(pid, &mut status, flags) }) {
            Ok(found) => return Ok((found, status)),
            Err(libc::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
}

/// kill(2).
pub(super) fn kill(pid: pid_t, signal: c_int) -> SysResult<()> {
    // SAFETY: kill takes integers only.
    check(unsafe { libc::kill(pid, signal) }).map(drop)
}

/// dup2(2).
pub(super) fn dup2(old: c_int, new: c_int) -> SysResult<()> {
    // SAFETY: dup2 takes integers only.
    check(unsafe { libc::dup2(old, new) }).map(drop)
}

/// chdir(2).
pub(super) fn chdir(path: &CStr) -> SysResult<()> {
    // SAFETY: `path` is NUL-terminated.
    check(unsafe { libc::chdir(path.as_ptr()) }).map(drop)
}

/// execve(2); returns only on failure.
pub(super) fn execve(path: &CStr, argv: &[*const c_char], envp: &[*const c_char]) -> Errno {
    // SAFETY: `argv` and `envp` are null-terminated arrays of NUL-terminated strings that outlive the call.
    unsafe { libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
    errno()
}

/// pipe2(O_CLOEXEC): (read end, write end).
pub(super) fn pipe() -> SysResult<(c_int, c_int)> {
    let mut fds = [-1; 2];
    // SAFETY: `fds` has room for the two descriptors.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    Ok((fds[0], fds[1]))
}

/// A close-on-exec socket.
pub(super) fn socket(domain: c_int, kind: c_int) -> SysResult<c_int> {
    // SAFETY: socket takes integers only.
    check(unsafe { libc::socket(domain, kind | libc::SOCK_CLOEXEC, 0) })
}

/// bind(2) to an IPv4 address.
pub(super) fn bind(fd: c_int, addr: &libc::sockaddr_in) -> SysResult<()> {
    let len = size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: `addr` is a valid sockaddr_in of `len` bytes.
    check(unsafe { libc::bind(fd, (addr as *const libc::sockaddr_in).cast(), len) }).map(drop)
}

/// listen(2).
pub(super) fn listen(fd: c_int, backlog: c_int) -> SysResult<()> {
    // SAFETY: listen takes integers only.
    check(unsafe { libc::listen(fd, backlog) }).map(drop)
}

/// Sets `lo` up with SIOCSIFFLAGS (the kernel then gives it 127.0.0.1/8).
pub(super) fn loopback_up() -> SysResult<()> {
    let fd = socket(libc::AF_INET, libc::SOCK_DGRAM)?;
    // SAFETY: ifreq is plain data; all zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { zeroed() };
    req.ifr_name[0] = b'l' as c_char;
    req.ifr_name[1] = b'o' as c_char;
    // SAFETY: SIOCGIFFLAGS fills the flags member of a valid ifreq naming `lo`.
    let result = check(unsafe { libc::ioctl(fd, libc::SIOCGIFFLAGS as _, &mut req) }).and_then(|_| {
        // SAFETY: the union's flags member was just written by SIOCGIFFLAGS.
        unsafe { req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short };
        // SAFETY: SIOCSIFFLAGS reads a valid ifreq naming `lo`.
        check(unsafe { libc::ioctl(fd, libc::SIOCSIFFLAGS as _, &req) })
    });
    close(fd);
    result.map(drop)
}

/// Sends `data` with `fds` attached (SCM_RIGHTS), without SIGPIPE.
pub(super) fn send_with_fds(fd: c_int, data: &[u8], fds: &[c_int]) -> SysResult<()> {
    /// Room for the control message: a cmsghdr plus `MAX_SOCKETS` descriptors, 8-byte aligned.
    const CMSG_WORDS: usize = (size_of::<libc::cmsghdr>() + 4 * crate::MAX_SOCKETS) / 8 + 2;
    let mut control = [0u64; CMSG_WORDS];
    let fds_len = size_of::<c_int>() * fds.len().min(crate::MAX_SOCKETS);
    let mut iov = libc::iovec { iov_base: data.as_ptr() as *mut c_void, iov_len: data.len() };
    // SAFETY: msghdr is plain data; all zeroes is a valid value.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if fds_len > 0 {
        msg.msg_control = control.as_mut_ptr().cast();
        // SAFETY: CMSG_SPACE is arithmetic on its argument.
        msg.msg_controllen = unsafe { libc::CMSG_SPACE(fds_len as c_uint) } as _;
        // SAFETY: the control buffer is aligned and holds CMSG_SPACE(fds_len) bytes (checked by CMSG_WORDS), so
        // the first header and its data lie inside it; `fds` holds at least `fds_len` bytes.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(fds_len as c_uint) as _;
            ptr::copy_nonoverlapping(fds.as_ptr().cast::<u8>(), libc::CMSG_DATA(cmsg), fds_len);
        }
    }
    loop {
        // SAFETY: `msg` points at live buffers set up above.
        match check_long(unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL) } as libc::c_long) {
            Ok(_) => return Ok(()),
            Err(libc::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
}

/// setsid(2): a new session and process group, with no controlling terminal.
pub(super) fn setsid() -> SysResult<()> {
    // SAFETY: setsid takes no arguments.
    check(unsafe { libc::setsid() }).map(drop)
}

/// ioctl(TIOCSCTTY): the terminal `fd` becomes the controlling terminal of the caller's session (it leads one).
pub(super) fn take_controlling_terminal(fd: c_int) -> SysResult<()> {
    // SAFETY: TIOCSCTTY takes an integer argument (0: do not steal it from another session).
    check(unsafe { libc::ioctl(fd, libc::TIOCSCTTY as _, 0) }).map(drop)
}

/// keyctl(KEYCTL_JOIN_SESSION_KEYRING, NULL): a new anonymous session keyring for the caller. A kernel without
/// keyrings (ENOSYS) has none to share either.
pub(super) fn join_new_session_keyring() -> SysResult<()> {
    const KEYCTL_JOIN_SESSION_KEYRING: libc::c_long = 1;
    // SAFETY: a null name asks for a new anonymous keyring; no other pointer is passed.
    match check_long(unsafe { libc::syscall(libc::SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, ptr::null::<c_char>()) }) {
        Ok(_) | Err(libc::ENOSYS) => Ok(()),
        Err(e) => Err(e),
    }
}

/// seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER): installs `program` on the calling thread
/// and returns the close-on-exec listener for its user notifications. Needs `CAP_SYS_ADMIN` in the caller's user
/// namespace (or no_new_privs).
pub(super) fn install_filter(program: &[libc::sock_filter]) -> SysResult<c_int> {
    let prog = libc::sock_fprog { len: program.len() as u16, filter: program.as_ptr() as *mut libc::sock_filter };
    // SAFETY: `prog` points at `program`, valid for its length, which the kernel copies.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
            &prog as *const libc::sock_fprog,
        )
    };
    check_long(ret).map(|fd| fd as c_int)
}

/// seccomp(SECCOMP_SET_MODE_FILTER) without a listener: installs `program` (which notifies nothing) on the calling
/// thread. Needs no_new_privs (or `CAP_SYS_ADMIN`).
pub(super) fn install_plain_filter(program: &[libc::sock_filter]) -> SysResult<()> {
    let prog = libc::sock_fprog { len: program.len() as u16, filter: program.as_ptr() as *mut libc::sock_filter };
    // SAFETY: `prog` points at `program`, valid for its length, which the kernel copies.
    let ret =
        unsafe { libc::syscall(libc::SYS_seccomp, libc::SECCOMP_SET_MODE_FILTER, 0, &prog as *const libc::sock_fprog) };
    check_long(ret).map(drop)
}

/// pidfd_open(2), close-on-exec by default; `thread` asks for `PIDFD_THREAD` (Linux 6.9), which also takes a thread
/// that is not its group's leader.
pub(super) fn pidfd_open(pid: pid_t, thread: bool) -> SysResult<c_int> {
    /// `PIDFD_THREAD`, which is `O_EXCL`.
    const PIDFD_THREAD: c_uint = libc::O_EXCL as c_uint;
    let flags = if thread { PIDFD_THREAD } else { 0 };
    // SAFETY: pidfd_open takes integers only.
    check_long(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, flags) }).map(|fd| fd as c_int)
}

/// pidfd_getfd(2): a close-on-exec duplicate of descriptor `fd` of the process behind `pidfd`.
pub(super) fn pidfd_getfd(pidfd: c_int, fd: c_int) -> SysResult<c_int> {
    // SAFETY: pidfd_getfd takes integers only.
    check_long(unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd, fd, 0) }).map(|fd| fd as c_int)
}

/// Reads `buf.len()` bytes at `addr` in process `pid`'s memory (process_vm_readv(2)); a short read is `EFAULT`.
pub(super) fn read_remote(pid: pid_t, addr: u64, buf: &mut [u8]) -> SysResult<()> {
    if buf.is_empty() {
        return Ok(());
    }
    let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let remote = libc::iovec { iov_base: addr as usize as *mut c_void, iov_len: buf.len() };
    // SAFETY: `local` describes `buf`, valid for writes of its length; the remote range is only read by the kernel.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    match check_long(n as libc::c_long)? {
        n if n as usize == buf.len() => Ok(()),
        _ => Err(libc::EFAULT),
    }
}

/// getsockopt(2) of an `int` option.
pub(super) fn getsockopt_int(fd: c_int, level: c_int, name: c_int) -> SysResult<c_int> {
    let mut value: c_int = 0;
    let mut len = size_of::<c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` are valid out-pointers of the sizes given.
    check(unsafe { libc::getsockopt(fd, level, name, (&mut value as *mut c_int).cast(), &mut len) })?;
    Ok(value)
}

/// prctl(PR_SET_PDEATHSIG): `signal` is sent to the caller when the thread that created it exits.
pub(super) fn set_parent_death_signal(signal: c_int) -> SysResult<()> {
    // SAFETY: PR_SET_PDEATHSIG takes integers only.
    check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, signal as c_ulong, 0 as c_ulong, 0 as c_ulong, 0 as c_ulong) })
        .map(drop)
}

/// Does nothing: its only use is that a blocking call it lands in returns `EINTR`.
extern "C" fn on_alarm(_: c_int) {}

/// Lets SIGALRM interrupt the caller's blocking calls: a handler that does nothing, without `SA_RESTART` (so the
/// interrupted call returns `EINTR`, not restarted), and SIGALRM unblocked.
pub(super) fn interrupt_on_alarm() -> SysResult<()> {
    // SAFETY: sigaction is plain data; all zeroes is an empty mask and no flags.
    let mut action: libc::sigaction = unsafe { zeroed() };
    action.sa_sigaction = on_alarm as extern "C" fn(c_int) as libc::sighandler_t;
    // SAFETY: `action` is a valid sigaction whose handler is async-signal-safe (it does nothing).
    check(unsafe { libc::sigaction(libc::SIGALRM, &action, ptr::null_mut()) })?;
    let mut alarm = sigset(false);
    // SAFETY: `alarm` is an initialised sigset_t; SIGALRM is a valid signal.
    unsafe { libc::sigaddset(&mut alarm, libc::SIGALRM) };
    // SAFETY: `alarm` is an initialised sigset_t; the old mask is not wanted.
    check(unsafe { libc::sigprocmask(libc::SIG_UNBLOCK, &alarm, ptr::null_mut()) }).map(drop)
}

/// setitimer(ITIMER_REAL): SIGALRM after `first`, then every `then`; zero `first` disarms it.
pub(super) fn set_alarm(first: libc::timeval, then: libc::timeval) -> SysResult<()> {
    let timer = libc::itimerval { it_interval: then, it_value: first };
    // SAFETY: `timer` is a valid itimerval; the old value is not wanted.
    check(unsafe { libc::setitimer(libc::ITIMER_REAL, &timer, ptr::null_mut()) }).map(drop)
}

/// connect(2) with raw address bytes (at most a `sockaddr_storage`, as the kernel takes).
pub(super) fn connect(fd: c_int, addr: &[u8]) -> SysResult<()> {
    // SAFETY: `addr` is valid for reads of its length; the kernel copies it before use.
    check(unsafe { libc::connect(fd, addr.as_ptr().cast(), addr.len() as libc::socklen_t) }).map(drop)
}

/// openat2(2) of `path` under `dir` with `O_PATH | O_CLOEXEC` and the given `RESOLVE_*` flags.
pub(super) fn open_path_at(dir: c_int, path: &CStr, resolve: u64) -> SysResult<c_int> {
    // SAFETY: open_how is plain data; all zeroes is a valid value, set below.
    let mut how: libc::open_how = unsafe { zeroed() };
    how.flags = (libc::O_PATH | libc::O_CLOEXEC) as u64;
    how.resolve = resolve;
    // SAFETY: `path` is NUL-terminated and `how` is a valid open_how of the size passed.
    let ret = unsafe {
        libc::syscall(libc::SYS_openat2, dir, path.as_ptr(), &how as *const libc::open_how, size_of::<libc::open_how>())
    };
    check_long(ret).map(|fd| fd as c_int)
}

/// stat(2), following links.
pub(super) fn stat(path: &CStr) -> SysResult<libc::stat> {
    // SAFETY: stat is plain data, filled by the kernel.
    let mut st: libc::stat = unsafe { zeroed() };
    // SAFETY: `path` is NUL-terminated and `st` is valid for writes.
    check(unsafe { libc::stat(path.as_ptr(), &mut st) })?;
    Ok(st)
}

/// fstat(2).
pub(super) fn fstat(fd: c_int) -> SysResult<libc::stat> {
    // SAFETY: stat is plain data, filled by the kernel.
    let mut st: libc::stat = unsafe { zeroed() };
    // SAFETY: `st` is valid for writes.
    check(unsafe { libc::fstat(fd, &mut st) })?;
    Ok(st)
}

/// SECCOMP_IOCTL_NOTIF_RECV: the next notification (the kernel wants the struct zeroed).
pub(super) fn notif_recv(listener: c_int) -> SysResult<libc::seccomp_notif> {
    // SAFETY: seccomp_notif is plain data; all zeroes is what the kernel requires on entry.
    let mut notif: libc::seccomp_notif = unsafe { zeroed() };
    // SAFETY: `notif` is a valid seccomp_notif for the kernel to fill.
    check(unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_RECV as _, &mut notif) })?;
    Ok(notif)
}

/// SECCOMP_IOCTL_NOTIF_ID_VALID: whether the notification's task still waits (so its pid is still its own).
pub(super) fn notif_id_valid(listener: c_int, id: u64) -> bool {
    // SAFETY: the ioctl reads one u64.
    unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_ID_VALID as _, &id) == 0 }
}

/// SECCOMP_IOCTL_NOTIF_SEND: the system call's result, `error` being 0 or a negative errno.
pub(super) fn notif_send(listener: c_int, id: u64, error: i32) -> SysResult<()> {
    let resp = libc::seccomp_notif_resp { id, val: 0, error, flags: 0 };
    // SAFETY: `resp` is a valid seccomp_notif_resp, only read by the kernel.
    check(unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_SEND as _, &resp) }).map(drop)
}

/// SECCOMP_IOCTL_NOTIF_SET_FLAGS with `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP` (Linux 6.6): the kernel switches
/// straight to the waiting supervisor, on the caller's CPU, instead of queueing a wake-up.
pub(super) fn notif_sync_wake_up(listener: c_int) -> SysResult<()> {
    const SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP: u64 = 1;
    // SAFETY: the ioctl takes the flags by value.
    check(unsafe {
        libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS as _, SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP)
    })
    .map(drop)
}

/// A close-on-exec netlink socket of `protocol`.
pub(super) fn netlink_socket(protocol: c_int) -> SysResult<c_int> {
    // SAFETY: socket takes integers only.
    check(unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, protocol) })
}

/// send(2) of one datagram.
pub(super) fn send(fd: c_int, data: &[u8]) -> SysResult<()> {
    // SAFETY: `data` is valid for reads of its length.
    check_long(unsafe { libc::send(fd, data.as_ptr().cast(), data.len(), 0) } as libc::c_long).map(drop)
}

/// A close-on-exec SOCK_SEQPACKET pair.
pub(super) fn seqpacket_pair() -> SysResult<(c_int, c_int)> {
    let mut fds = [-1; 2];
    // SAFETY: `fds` has room for the two descriptors.
    check(unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) })?;
    Ok((fds[0], fds[1]))
}

/// Receives one record's single attached descriptor (close-on-exec); `EPROTO` when none came.
pub(super) fn recv_fd(fd: c_int) -> SysResult<c_int> {
    /// Room for a cmsghdr and one descriptor, 8-byte aligned.
    const CMSG_WORDS: usize = size_of::<libc::cmsghdr>() / 8 + 2;
    let mut control = [0u64; CMSG_WORDS];
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec { iov_base: byte.as_mut_ptr().cast(), iov_len: byte.len() };
    // SAFETY: msghdr is plain data; all zeroes is a valid value.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of::<[u64; CMSG_WORDS]>() as _;
    // SAFETY: `msg` points at live buffers of the sizes it states.
    check_long(unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_CMSG_CLOEXEC) } as libc::c_long)?;
    // SAFETY: the kernel filled the control buffer within msg_controllen; a SCM_RIGHTS payload holds descriptors.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null() || (*cmsg).cmsg_level != libc::SOL_SOCKET || (*cmsg).cmsg_type != libc::SCM_RIGHTS {
            return Err(libc::EPROTO);
        }
        Ok(libc::CMSG_DATA(cmsg).cast::<c_int>().read_unaligned())
    }
}

/// Ends the process at once, running no destructor and no atexit handler.
pub(super) fn exit(code: c_int) -> ! {
    // SAFETY: _exit never returns and touches no Rust state.
    unsafe { libc::_exit(code) }
}
