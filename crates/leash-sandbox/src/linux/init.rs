//! The child side: code that runs in the cloned process, which is PID 1 of the sandbox's pid namespace. It builds
//! the namespaces, hands the sockets over, starts the command in its own nested user namespace, then reaps and
//! forwards signals until the command exits. Between `clone` and `execve` it only calls `sys` (no allocation, no
//! locks) and reads the parent-built `Plan`; it leaves by `_exit`, never by returning or unwinding.

use std::ffi::CStr;

use libc::{c_int, pid_t};

use super::kernel_fs::Cover;
use super::plan::{IdMaps, IdRange, Plan, MAX_KEPT_IN_SHM};
use super::proto::{self, ChildStep, Msg, Order, ORDER_LEN, RECORD_LEN};
use super::sys::{self, Errno};
use super::{caps, connects};

/// Backlog of each TCP listener inside: generous for bursts of connects; the kernel caps it at `somaxconn`.
const LISTEN_BACKLOG: c_int = 1024;
/// What init exits with when leash is gone (the command is then killed along with the namespace): 128 + SIGKILL.
const LEASH_GONE: c_int = 128 + libc::SIGKILL;
/// `si_code` of a signal the kernel sent (a terminal's SIGINT, SIGWINCH, SIGTSTP), as opposed to a process.
const SI_KERNEL: i32 = 0x80;
/// Where init makes the command's pseudo-terminal: the sandbox's own devpts (`own_devpts`).
const DEVPTS_PTMX: &CStr = c"/dev/pts/ptmx";
/// What a child exits with after reporting a failed step.
const FAILED: c_int = 127;
/// The IPv6 switch of the sandbox's network namespace: writing `all` sets `default` and every interface's too
/// (the kernel's ip-sysctl documentation); missing means the kernel has no IPv6.
const DISABLE_IPV6: &CStr = c"/proc/sys/net/ipv6/conf/all/disable_ipv6";
/// The limit on user namespaces made by each uid of init's user namespace, and below it (the kernel counts a new
/// namespace against every ancestor's limit): one, the command's own.
const MAX_USER_NAMESPACES: &CStr = c"/proc/sys/user/max_user_namespaces";

/// Where init mounts the sandbox's own POSIX shared memory (the host's would be shared with the host).
const SHM: &CStr = c"/dev/shm";
/// The empty file every hidden file is covered with: made on the sandbox's own /dev/shm, bound over each hidden
/// path read-only, and unlinked before the command starts, so only those read-only mounts reach it. A host file
/// (/dev/null) in its place would be the host's: a root command's `chown -R` of a directory with a hidden file in it
/// would change the host's /dev/null.
const HIDDEN_FILE: &CStr = c"/dev/shm/.leash-hidden";
/// What hides a file where the sandbox has no /dev/shm of its own: /dev/null, bound read-only (`chown` and `chmod`
/// through a read-only mount fail), the host's device but unchangeable through the mount.
const HIDDEN_FALLBACK: &CStr = c"/dev/null";

/// A failed step, small enough to live on the stack and travel as a record.
#[derive(Clone, Copy)]
struct Fail {
    step: ChildStep,
    index: u32,
    errno: Errno,
}

impl Fail {
    fn record(self) -> [u8; RECORD_LEN] {
        Msg::Failed { step: self.step, index: self.index, errno: self.errno }.encode()
    }
}

/// Maps an errno to a failure of `step` (at `index`).
fn at(step: ChildStep, index: usize) -> impl FnOnce(Errno) -> Fail {
    move |errno| Fail { step, index: index as u32, errno }
}

/// The init's whole life. Never returns.
pub(super) fn run(plan: &Plan) -> ! {
    let code = match setup(plan).and_then(|terminal| start_command(plan, terminal)) {
        Ok(started) => supervise(plan, started),
        Err(fail) => {
            // Nothing more can be done if leash is not listening.
            let _ = sys::send_with_fds(plan.channel, &fail.record(), &[]);
            FAILED
        }
    };
    sys::exit(code)
}

/// Namespaces, mounts, network and sockets, in the order the crate docs give. Returns the slave side of the
/// command's pseudo-terminal, or -1 for none.
fn setup(plan: &Plan) -> Result<c_int, Fail> {
    // Init, and with it every process of its pid namespace, ends with the leash thread that cloned it, even one
    // killed outright or while init waits. Had leash gone before this call, the next read of the channel (the ids
    // mapped, or `Go`) reads its end.
    sys::set_parent_death_signal(libc::SIGKILL).map_err(at(ChildStep::Harden, 1))?;
    if let Some(spread) = &plan.spread {
        spread.leave_parent_cpu();
    }
    sys::close_all_except(plan.init_keeps()).map_err(at(ChildStep::CloseFds, 0))?;
    sys::set_signal_mask(&sys::sigset(true)).map_err(at(ChildStep::InitSignals, 0))?;
    // The network namespace first: it takes no ids (it belongs to init's user namespace whatever its maps say), and
    // making it is the longest step here, so it overlaps leash writing init's maps (as root) instead of following.
    sys::unshare(libc::CLONE_NEWNET).map_err(at(ChildStep::NetNs, 0))?;
    map_init_ids(plan)?;
    // INVARIANT: init is non-dumpable before anything else runs in the sandbox, so the command can neither
    // ptrace it nor read its memory (a copy of leash's).
    sys::set_non_dumpable().map_err(at(ChildStep::Harden, 0))?;
    sys::unshare(libc::CLONE_NEWNS).map_err(at(ChildStep::MountNs, 0))?;
    sys::mount(None, c"/", None, libc::MS_REC | libc::MS_PRIVATE).map_err(at(ChildStep::MountNs, 0))?;
    own_ipc_namespace()?;
    let proc_flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    sys::mount(Some(c"proc"), c"/proc", Some(c"proc"), proc_flags).map_err(at(ChildStep::MountProc, 0))?;
    own_devpts()?;
    // IPv6 off before `lo` comes up, so `::1` never exists (and is not added only to be removed).
    disable_ipv6()?;
    limit_user_namespaces()?;
    sys::loopback_up().map_err(at(ChildStep::LoopbackUp, 0))?;
    let sys_below_read_only = read_only_kernel_files()?;
    if let Some(source) = &plan.resolv_source {
        sys::mount(Some(source), c"/etc/resolv.conf", None, libc::MS_BIND).map_err(at(ChildStep::ResolvConf, 0))?;
    }
    // After the resolv.conf mount: its source may be in the host's /dev/shm.
    let hidden_source = own_shm(plan)?;
    let (master, slave) = match &plan.terminal {
        Some(t) => sys::open_pty(DEVPTS_PTMX, &t.settings, &t.size).map_err(at(ChildStep::Devpts, 1))?,
        None => (-1, -1),
    };
    hand_over_sockets(plan, master)?;
    // Leash writes the command's CA files meanwhile.
    hide_paths_until_go(plan, hidden_source, sys_below_read_only)?;
    if hidden_source == HIDDEN_FILE {
        sys::unlink(HIDDEN_FILE).map_err(at(ChildStep::OwnShm, 1))?;
    }
    // Leash moved init before it said go: the command now inherits leash's CPUs, not fewer.
    plan.spread.as_ref().map_or(Ok(()), |spread| spread.restore()).map_err(at(ChildStep::RestoreAffinity, 0))?;
    Ok(slave)
}

/// A devpts instance of the sandbox's own on /dev/pts, owned by init's user namespace: the host's terminals (the
/// caller's other sessions, under root every user's) are out of sight, and the command cannot unmount it. `/dev/ptmx`
/// makes terminals in it: since Linux 4.7 the device opens the `ptmx` of the devpts mounted at `pts` beside it (every
/// devpts mount is a new instance). Where there is no /dev/pts there is nothing of the host's to hide (and no
/// terminal can be made). `ptmxmode` lets any user inside make terminals; `mode` is the usual one of a terminal.
fn own_devpts() -> Result<(), Fail> {
    let flags = libc::MS_NOSUID | libc::MS_NOEXEC;
    match sys::mount_with(c"devpts", c"/dev/pts", c"devpts", flags, c"newinstance,ptmxmode=0666,mode=0620") {
        Ok(()) | Err(libc::ENOENT) => Ok(()),
        Err(errno) => Err(at(ChildStep::Devpts, 0)(errno)),
    }
}

/// Maps init's ids: init itself maps one, and waits for leash to map the full range (`IdRange`), which only a process
/// of the parent user namespace may.
fn map_init_ids(plan: &Plan) -> Result<(), Fail> {
    if plan.ids == IdRange::Single {
        return map_ids(
            plan,
            Proc::OwnFiles,
            &plan.outer_ids,
            [ChildStep::Setgroups, ChildStep::UidMap, ChildStep::GidMap],
        );
    }
    let mut record = [0u8; RECORD_LEN];
    let len = sys::recv_record(plan.channel, &mut record).map_err(at(ChildStep::UidMap, 0))?;
    match record.get(..len).and_then(Order::decode) {
        Some(Order::Mapped) => Ok(()),
        _ => Err(at(ChildStep::UidMap, 0)(libc::EPROTO)),
    }
}

/// Writes `setgroups` (deny, unless `IdRange::Full`), `uid_map`, `gid_map` of `whose` user namespace: init's own
/// (`IdRange::Single`: without privilege over the parent namespace a process may map only its own ids, its gid once
/// `setgroups` is denied), or the command's, which init writes from the parent namespace where it holds every
/// capability. A non-dumpable process's /proc files belong to root, so without root the memory is dumpable while
/// they are written (it inherited leash's non-dumpable flag; the command shares it until `execve`), and
/// non-dumpable again after. No process of the sandbox but init and the waiting command exists at that moment.
fn map_ids(plan: &Plan, whose: Proc, maps: &IdMaps, steps: [ChildStep; 3]) -> Result<(), Fail> {
    let [setgroups, uid_map, gid_map] = steps;
    if plan.dumpable_for_maps {
        sys::set_dumpable(true).map_err(at(setgroups, 0))?;
    }
    let mut buf = [0u8; PROC_PATH_LEN];
    if plan.ids == IdRange::Single {
        // A kernel without the file (gVisor's) has no such control to set: where the gid map then needs it, its
        // write below fails and says so.
        match sys::write_file(whose.file(&mut buf, b"setgroups", setgroups)?, b"deny") {
            Ok(()) | Err(libc::ENOENT) => {}
            Err(errno) => return Err(at(setgroups, 0)(errno)),
        }
    }
    sys::write_file(whose.file(&mut buf, b"uid_map", uid_map)?, maps.uid_map.as_bytes()).map_err(at(uid_map, 0))?;
    sys::write_file(whose.file(&mut buf, b"gid_map", gid_map)?, maps.gid_map.as_bytes()).map_err(at(gid_map, 0))?;
    if plan.dumpable_for_maps {
        sys::set_non_dumpable().map_err(at(ChildStep::Harden, 0))?;
    }
    Ok(())
}

/// Whose /proc files: the calling process's, or another's by pid (in the sandbox's /proc).
#[derive(Clone, Copy)]
enum Proc {
    OwnFiles,
    Of(pid_t),
}

impl Proc {
    /// `/proc/self/NAME` or `/proc/PID/NAME`, in `buf`.
    fn file<'a>(self, buf: &'a mut [u8; PROC_PATH_LEN], name: &[u8], step: ChildStep) -> Result<&'a CStr, Fail> {
        let path = match self {
            Proc::OwnFiles => proc_file(buf, b"self", name),
            Proc::Of(pid) => proc_file(buf, decimal(&mut [0u8; 10], pid), name),
        };
        path.ok_or(Fail { step, index: 0, errno: libc::ENAMETOOLONG })
    }
}

/// Makes /proc/sys, /proc/sysrq-trigger and /sys (with what is mounted below it) read-only, once IPv6 is off. The
/// command holds no capability, but its uid is leash's, the owner of the sandbox's network namespace: without this it
/// could turn that namespace's sysctls (IPv6 back on), and under root also the host's (kernel.*, vm.*) and the
/// sysrq trigger and sysfs files any root-owned process may write. A path that does not exist (no sysrq, no /sys
/// mounted) has nothing to protect. Returns whether every mount below /sys went read-only with it.
fn read_only_kernel_files() -> Result<bool, Fail> {
    let mut below_sys = false;
    for (index, path) in proto::READ_ONLY_PATHS.into_iter().enumerate() {
        // Files of the new /proc are no mount points: each is bound onto itself first. /sys is one, or, where
        // nothing is mounted there, a plain directory (EINVAL) with nothing to protect.
        let in_proc = path.to_bytes().starts_with(b"/proc/");
        let result = if in_proc {
            sys::mount(Some(path), path, None, libc::MS_BIND | libc::MS_REC).and_then(|()| sys::make_read_only(path))
        } else {
            sys::make_read_only(path)
        };
        match result {
            Ok(recursive) => below_sys |= recursive && !in_proc,
            Err(libc::ENOENT) => {}
            Err(libc::EINVAL) if !in_proc => {}
            Err(errno) => return Err(at(ChildStep::ReadOnly, index)(errno)),
        }
    }
    Ok(below_sys)
}

/// A new IPC namespace (SysV message queues, semaphores and shared memory, POSIX message queues), owned by init's
/// user namespace, and a fresh mqueue filesystem on /dev/mqueue where it exists, since the host's one shows the
/// host's queues. Everything made inside ends with the sandbox.
fn own_ipc_namespace() -> Result<(), Fail> {
    sys::unshare(libc::CLONE_NEWIPC).map_err(at(ChildStep::IpcNs, 0))?;
    let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    match sys::mount(Some(c"mqueue"), c"/dev/mqueue", Some(c"mqueue"), flags) {
        Ok(()) | Err(libc::ENOENT) => Ok(()),
        Err(errno) => Err(at(ChildStep::IpcNs, 1)(errno)),
    }
}

/// A tmpfs of the sandbox's own on /dev/shm (POSIX shared memory, `shm_open`): the host's is shared by every process
/// of the host, so the command could read and write other programs' segments there. The directories of the host's
/// /dev/shm the command must still see (`SandboxSpec::keep_in_shm`: the run's CA files) are moved into it, read-only,
/// at the same paths. It also holds the empty file hidden paths are covered with ([`HIDDEN_FILE`]), which is
/// returned; without a /dev/shm, [`HIDDEN_FALLBACK`].
fn own_shm(plan: &Plan) -> Result<&'static CStr, Fail> {
    let mut trees = [-1; MAX_KEPT_IN_SHM];
    for (i, path) in plan.kept_in_shm.iter().enumerate().take(MAX_KEPT_IN_SHM) {
        trees[i] = sys::open_tree_clone(path).map_err(at(ChildStep::OwnShm, 2))?;
    }
    let flags = libc::MS_NOSUID | libc::MS_NODEV;
    match sys::mount_with(c"tmpfs", SHM, c"tmpfs", flags, c"mode=1777") {
        Ok(()) => {}
        Err(libc::ENOENT) => return Ok(HIDDEN_FALLBACK),
        Err(errno) => return Err(at(ChildStep::OwnShm, 0)(errno)),
    }
    sys::create_empty(HIDDEN_FILE, 0o444).map_err(at(ChildStep::OwnShm, 1))?;
    for (path, tree) in plan.kept_in_shm.iter().zip(trees) {
        sys::mkdir(path, 0o755)
            .and_then(|()| sys::move_mount_onto(tree, path))
            .and_then(|()| sys::make_read_only(path).map(drop))
            .map_err(at(ChildStep::OwnShm, 3))?;
        sys::close(tree);
    }
    Ok(HIDDEN_FILE)
}

/// No process inside creates a user namespace but the command's own: in a new one a process starts over with every
/// capability (the bounding set included), and with them could make a cgroup namespace and mount its cgroup
/// filesystem, which is the host's hierarchy, or any other filesystem a user namespace may mount. The limit is
/// init's namespace's own (the host's stays), and /proc/sys is read-only to the command.
fn limit_user_namespaces() -> Result<(), Fail> {
    sys::write_file(MAX_USER_NAMESPACES, b"1").map_err(at(ChildStep::UserNsLimit, 0))
}

fn disable_ipv6() -> Result<(), Fail> {
    match sys::write_file(DISABLE_IPV6, b"1") {
        Ok(()) | Err(libc::ENOENT) => Ok(()),
        Err(errno) => Err(at(ChildStep::DisableIpv6, 0)(errno)),
    }
}

/// Carries out leash's orders until it says `Go`: hides each path it names (the audit log, `/dev/kmsg`) under
/// `hidden_source`, makes the host files it names read-only, covers each mount it names (`kernel_fs`) and pins the
/// directories it names. A path gone since, or one this user cannot even look up (so cannot open either), is skipped.
fn hide_paths_until_go(plan: &Plan, hidden_source: &CStr, sys_below_read_only: bool) -> Result<(), Fail> {
    let mut record = [0u8; ORDER_LEN];
    let (mut hidden, mut read_only, mut covered, mut pinned) = (0, 0, 0, 0);
    let skip_gone = |result: Result<(), Errno>| match result {
        Err(libc::ENOENT | libc::EACCES) => Ok(()),
        other => other,
    };
    loop {
        let len = sys::recv_record(plan.channel, &mut record).map_err(at(ChildStep::AwaitGo, 0))?;
        match record.get(..len).and_then(Order::decode) {
            Some(Order::Go) => return Ok(()),
            Some(Order::Hide(paths)) => {
                for path in proto::hidden_paths(paths) {
                    skip_gone(hide(path, hidden_source)).map_err(at(ChildStep::HidePath, hidden))?;
                    hidden += 1;
                }
            }
            Some(Order::ReadOnly(paths)) => {
                for path in proto::hidden_paths(paths) {
                    skip_gone(bind_read_only(path)).map_err(at(ChildStep::ReadOnlyPath, read_only))?;
                    read_only += 1;
                }
            }
            Some(Order::Cover(mounts)) => {
                for (cover, path) in proto::covered_mounts(mounts) {
                    skip_gone(cover_mount(cover, path, sys_below_read_only))
                        .map_err(at(ChildStep::CoverMount, covered))?;
                    covered += 1;
                }
            }
            Some(Order::Pin(dirs)) => {
                for dir in proto::hidden_paths(dirs) {
                    // INVARIANT: every directory above a path leash uses after the command starts is a mount point
                    // here, which `rename(2)` and `rmdir(2)` refuse (`EBUSY`): the path keeps naming leash's file.
                    // The bind is recursive, so it copies every mount below, the ones just made included.
                    let result = sys::mount(Some(dir), dir, None, libc::MS_BIND | libc::MS_REC);
                    skip_gone(result).map_err(at(ChildStep::PinDir, pinned))?;
                    pinned += 1;
                }
            }
            // Leash gone (end of file) or a record it never sends now.
            Some(Order::Mapped) | None => return Err(at(ChildStep::AwaitGo, 0)(libc::EPROTO)),
        }
    }
}

/// `source` (an empty file) over a file, read-only; an empty read-only tmpfs over a directory (the audit logs of
/// earlier runs). The kind is looked up first: a bind onto a directory fails only after the kernel has copied the
/// mount, and discarding that copy waits for an expedited RCU grace period (a tenth of a millisecond on `leash
/// run`'s clock).
fn hide(path: &CStr, source: &CStr) -> Result<(), Errno> {
    if sys::stat(path)?.st_mode & libc::S_IFMT == libc::S_IFDIR {
        return cover_mount(Some(Cover::Empty), path, false);
    }
    match sys::mount(Some(source), path, None, libc::MS_BIND) {
        // Made a directory since (by the host: the command has not started).
        Err(libc::ENOTDIR) => cover_mount(Some(Cover::Empty), path, false),
        Err(errno) => Err(errno),
        // Read-only, so neither a write nor `chown` or `chmod` through it changes the file it shows.
        Ok(()) => sys::make_read_only(path).map(drop),
    }
}

/// Binds `path` onto itself (with every mount below it) and makes that read-only.
fn bind_read_only(path: &CStr) -> Result<(), Errno> {
    sys::mount(Some(path), path, None, libc::MS_BIND | libc::MS_REC)?;
    sys::make_read_only(path).map(drop)
}

/// Covers one mount that shows host kernel objects, as `cover` says; a mount no longer there has nothing to show.
fn cover_mount(cover: Option<Cover>, path: &CStr, sys_below_read_only: bool) -> Result<(), Errno> {
    let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    let read_only = |path| match sys::make_read_only(path) {
        Err(libc::EINVAL) => Ok(()),
        other => other.map(drop),
    };
    match cover {
        Some(Cover::FreshMqueue) => sys::mount(Some(c"mqueue"), path, Some(c"mqueue"), flags),
        Some(Cover::Empty) => sys::mount(Some(c"tmpfs"), path, Some(c"tmpfs"), flags | libc::MS_RDONLY),
        Some(Cover::BelowSys) if sys_below_read_only => Ok(()),
        Some(Cover::ReadOnly | Cover::BelowSys) => read_only(path),
        None => Err(libc::EPROTO),
    }
}

/// Binds every socket, sends them all to leash in one record, and closes init's copies.
fn hand_over_sockets(plan: &Plan, terminal: c_int) -> Result<(), Fail> {
    let mut fds = [-1; crate::MAX_SOCKETS + 1];
    let mut len = 0;
    let result = bind_all(plan, &mut fds, &mut len).and_then(|()| {
        // The terminal's master goes last, and is closed below with the sockets: init never holds it.
        if terminal >= 0 {
            let slot = fds.get_mut(len).ok_or(Fail { step: ChildStep::HandOver, index: 0, errno: libc::EINVAL })?;
            *slot = terminal;
            len += 1;
        }
        let sent = fds.get(..len).unwrap_or_default();
        sys::send_with_fds(plan.channel, &Msg::Sockets.encode(), sent).map_err(at(ChildStep::HandOver, 0))
    });
    for &fd in fds.get(..len).unwrap_or_default() {
        sys::close(fd);
    }
    result
}

fn bind_all(plan: &Plan, fds: &mut [c_int], len: &mut usize) -> Result<(), Fail> {
    let tcp = plan.tcp.iter().map(|a| (a, libc::SOCK_STREAM, ChildStep::BindTcp));
    let udp = plan.udp.iter().map(|a| (a, libc::SOCK_DGRAM, ChildStep::BindUdp));
    let indexed = tcp.enumerate().chain(udp.enumerate());
    for (i, (addr, kind, step)) in indexed {
        let fd = sys::socket(libc::AF_INET, kind).map_err(at(step, i))?;
        let slot = fds.get_mut(*len).ok_or(Fail { step: ChildStep::HandOver, index: 0, errno: libc::EINVAL })?;
        *slot = fd;
        *len += 1;
        sys::bind(fd, addr).map_err(at(step, i))?;
        if kind == libc::SOCK_STREAM {
            sys::listen(fd, LISTEN_BACKLOG).map_err(at(step, i))?;
        }
    }
    Ok(())
}

/// Starts the command and waits for its `execve`: the close-on-exec pipe reads empty on success, or carries the
/// failure record. Returns the command's pid, init's signalfd and the listener of the command's seccomp filter.
///
/// The command shares init's memory (on its own stack) until `execve`: copying an address space only to drop it at
/// `execve` was a tenth of `leash run`'s start-up. It starts in a user namespace of its own, whose ids init maps from
/// the parent namespace while the command waits for the go-ahead (`go`); init then only waits for the `execve`.
///
/// INVARIANT: once the command runs on its own, init makes no call that can fail until the `execve` is over: the two
/// share their memory, `errno` included.
fn start_command(plan: &Plan, terminal: c_int) -> Result<Started, Fail> {
    probe_pidfd_getfd(plan)?;
    let signals = sys::signalfd(&sys::sigset(true)).map_err(at(ChildStep::InitSignals, 0))?;
    // The command starts with every disposition reset and no signal blocked (`command_setup`).
    connects::arm_deadlines().map_err(at(ChildStep::InitSignals, 1))?;
    let (read_end, write_end) = sys::pipe().map_err(at(ChildStep::ForkCommand, 0))?;
    let (listener_in, listener_out) = sys::seqpacket_pair().map_err(at(ChildStep::ForkCommand, 0))?;
    let (go_in, go_out) = sys::pipe().map_err(at(ChildStep::ForkCommand, 0))?;
    let mut start = CommandStart { plan, write_end, listener_out, terminal, go: go_in };
    let arg: *mut CommandStart = &mut start;
    // INVARIANT: a second user namespace leaves the command no capability over the sandbox's mount and network
    // namespaces, which init's namespace owns: it cannot unmount or mount there, and a mount namespace it creates
    // copies every mount made above locked. (A mount namespace of its own would cost a copy of the mount table at
    // start and its teardown at exit, and lock nothing more.)
    let flags = libc::CLONE_VM | libc::CLONE_NEWUSER;
    // SAFETY: the plan's stack is used by nothing else; `start` lives on init's stack, which stays put until the
    // command's `execve` (init waits for it below); `command_entry` only reads shared memory and leaves by `execve`
    // or `exit`; it waits in a read until `go` (a blocked read writes no `errno`), and after `go` init makes no call
    // that can fail (see above).
    let pid = unsafe { sys::spawn_on(plan.command_stack.top(), command_entry, flags, arg.cast()) }
        .map_err(at(ChildStep::CommandNs, 0))?;
    sys::close(go_in);
    sys::close(write_end);
    sys::close(listener_out);
    // Init never reads or writes stdio: the command's output reaches its end when the command and its children
    // are done, not when init (which leash does not wait for) has finished exiting. Where leash started with stdio
    // closed, init's own descriptors may hold those numbers: they stay.
    let own = [plan.channel, signals, read_end, listener_in];
    let inherited = (0..3).filter(|fd| !own.contains(fd));
    // Nor does it hold the command's terminal: the relay's end of file is the command's last holder gone.
    // Nor the self-test's report: its end is the self-test's `execve` of the command, or its exit.
    let duplicates = (0..3).map(|i| plan.stdio_fd(i)).chain([terminal, plan.report]).filter(|&fd| fd >= 0);
    for fd in inherited.chain(duplicates) {
        sys::close(fd);
    }
    let steps = [ChildStep::CommandSetgroups, ChildStep::CommandUidMap, ChildStep::CommandGidMap];
    let go = map_ids(plan, Proc::Of(pid), &plan.inner_ids, steps)
        .and_then(|()| sys::write_all(go_out, b"g").map_err(at(ChildStep::ForkCommand, 0)));
    sys::close(go_out);
    if let Err(fail) = go {
        let _ = sys::kill(pid, libc::SIGKILL);
        let _ = sys::waitpid(pid, 0);
        sys::close(read_end);
        return Err(fail);
    }
    let mut record = [0u8; RECORD_LEN];
    let read = sys::read(read_end, &mut record);
    sys::close(read_end);
    match read {
        Ok(0) => {
            // The command sent its filter's listener before its `execve` succeeded.
            let listener = sys::recv_fd(listener_in).map_err(at(ChildStep::Seccomp, 1));
            sys::close(listener_in);
            let listener = listener?;
            // A connect waits for init: on a kernel that can, it hands init the CPU at once. An older one queues a
            // wake-up as for any descriptor (slower, as correct).
            let _ = sys::notif_sync_wake_up(listener);
            sys::send_with_fds(plan.channel, &Msg::ExecOk.encode(), &[])
                .map(|()| Started { command: pid, signals, listener })
                .map_err(at(ChildStep::HandOver, 0))
        }
        _ => {
            let _ = sys::waitpid(pid, 0);
            match Msg::decode(&record) {
                Some(Msg::Failed { step, index, errno }) => Err(Fail { step, index, errno }),
                _ => Err(Fail { step: ChildStep::Exec, index: 0, errno: libc::EIO }),
            }
        }
    }
}

/// What init watches once the command runs.
struct Started {
    command: pid_t,
    signals: c_int,
    /// Where the command's `connect` calls arrive (`connects`).
    listener: c_int,
}

/// Init makes every connection for the command with `pidfd_getfd` (Linux 5.6); on an older kernel the sandbox
/// cannot confine Unix sockets, and the command does not start.
fn probe_pidfd_getfd(plan: &Plan) -> Result<(), Fail> {
    let pidfd = sys::pidfd_open(1, false).map_err(at(ChildStep::Seccomp, 2))?;
    let copy = sys::pidfd_getfd(pidfd, plan.channel);
    sys::close(pidfd);
    sys::close(copy.map_err(at(ChildStep::Seccomp, 2))?);
    Ok(())
}

/// What the command's process starts with.
struct CommandStart<'a> {
    plan: &'a Plan,
    /// Where a failure record goes; closed by a successful `execve`.
    write_end: c_int,
    /// Where the seccomp filter's listener goes, for init.
    listener_out: c_int,
    /// The slave side of the command's pseudo-terminal, or -1.
    terminal: c_int,
    /// Reads one byte once init has mapped the command's ids.
    go: c_int,
}

/// The command's process, from `clone` to `execve` (or `exit` after reporting a failure).
extern "C" fn command_entry(arg: *mut libc::c_void) -> c_int {
    // SAFETY: `arg` is init's `CommandStart`, alive until this process's `execve` or exit (init waits for either).
    let start = unsafe { &*(arg as *const CommandStart) };
    let mut go = [0u8; 1];
    let fail = match sys::read(start.go, &mut go) {
        Ok(1) => command(start),
        // Init could not map the ids and kills this process; nothing else closes the pipe empty.
        _ => Fail { step: ChildStep::CommandNs, index: 4, errno: libc::EPROTO },
    };
    let _ = sys::write_all(start.write_end, &fail.record());
    sys::exit(FAILED)
}

/// In the command's process: nested namespaces, session, stdio, signals, cwd, descriptors, the seccomp filter, then
/// `execve`. Returns only the failure.
fn command(start: &CommandStart) -> Fail {
    let plan = start.plan;
    match command_setup(start).and_then(|()| confine(start)) {
        Ok(()) => Fail {
            step: ChildStep::Exec,
            // What ran in the command's place: the command (0), or the self-test (1).
            index: u32::from(plan.report >= 0),
            errno: sys::execve(&plan.program, plan.argv.as_ptrs(), plan.envp.as_ptrs()),
        },
        Err(fail) => fail,
    }
}

fn command_setup(start: &CommandStart) -> Result<(), Fail> {
    let plan = start.plan;
    // INVARIANT: the command has a session of its own: the caller's terminal is never its controlling terminal (no
    // TIOCSTI into it, no TIOCSETD or termios of the caller's: a terminal is a pseudo-terminal of leash's), and a
    // process group of its own, so `kill(0, ...)` reaches nothing of the caller's. Init forwards a terminal's
    // signals instead.
    sys::setsid().map_err(at(ChildStep::NewSession, 0))?;
    // INVARIANT: a keyring of its own: the caller's session keyring holds the caller's keys.
    sys::join_new_session_keyring().map_err(at(ChildStep::NewSession, 1))?;
    // A pseudo-terminal of the sandbox's devpts, never the caller's terminal: what the command does to it stays there.
    if start.terminal >= 0 {
        sys::take_controlling_terminal(start.terminal).map_err(at(ChildStep::NewSession, 2))?;
    }
    for target in 0..3 {
        let fd = if plan.on_terminal(target as usize) { start.terminal } else { plan.stdio_fd(target as usize) };
        if fd >= 0 {
            sys::dup2(fd, target).map_err(at(ChildStep::RedirectStdio, target as usize))?;
        }
    }
    sys::reset_signal_dispositions();
    sys::set_signal_mask(&sys::sigset(false)).map_err(at(ChildStep::InitSignals, 0))?;
    if let Some(cwd) = &plan.cwd {
        sys::chdir(cwd).map_err(at(ChildStep::ChangeDir, 0))?;
    }
    sys::cloexec_from_3().map_err(at(ChildStep::CloseFds, 0))?;
    // The self-test's report is the one descriptor the self-test inherits; it closes it before the command runs.
    if plan.report >= 0 {
        sys::keep_on_exec(plan.report).map_err(at(ChildStep::CloseFds, 1))?;
    }
    Ok(())
}

/// Room for `/proc/PID/gid_map` and its NUL.
const PROC_PATH_LEN: usize = 32;

/// `pid` in decimal, at the end of `digits` (no allocation).
fn decimal(digits: &mut [u8; 10], pid: pid_t) -> &[u8] {
    let mut rest = pid.unsigned_abs();
    let mut len = 0;
    for slot in digits.iter_mut().rev() {
        *slot = b'0' + (rest % 10) as u8;
        rest /= 10;
        len += 1;
        if rest == 0 {
            break;
        }
    }
    digits.get(digits.len() - len..).unwrap_or_default()
}

/// `/proc/DIR/NAME`, NUL-terminated, in `buf` (no allocation); `None` if it does not fit.
fn proc_file<'a>(buf: &'a mut [u8; PROC_PATH_LEN], dir: &[u8], name: &[u8]) -> Option<&'a CStr> {
    let mut end = 0;
    for &byte in b"/proc/".iter().chain(dir).chain(b"/").chain(name).chain(b"\0") {
        *buf.get_mut(end)? = byte;
        end += 1;
    }
    CStr::from_bytes_with_nul(buf.get(..end)?).ok()
}

/// Drops the command's capabilities but the kept ones (`caps`), installs the seccomp filter and hands its listener to
/// init.
fn confine(start: &CommandStart) -> Result<(), Fail> {
    // INVARIANT: the command keeps no capability that mounts or makes namespaces, and no user namespace can give one
    // back (`limit_user_namespaces`).
    caps::confine().map_err(at(ChildStep::Capabilities, 0))?;
    // The user `--user` names, in the command's own user namespace (its full range, as only root's leash maps):
    // after the bounding set is cut, which takes a capability the new uid no longer has.
    if let Some((uid, gid)) = start.plan.run_as {
        sys::set_user(uid, gid).map_err(at(ChildStep::Capabilities, 1))?;
    }
    let listener = sys::install_filter(&start.plan.filter).map_err(at(ChildStep::Seccomp, 0))?;
    let sent = sys::send_with_fds(start.listener_out, b"L", &[listener]).map_err(at(ChildStep::Seccomp, 1));
    sys::close(listener);
    sent
}

/// Init's loop: reap every child, make the connections the command asks for, forward signals, end when the command
/// ends or leash goes. When the command ends, init ends every process left before it reports: once leash reads the
/// status, nothing of the sandbox runs, and init's own exit (which tears the namespaces down) goes on beside
/// leash's.
fn supervise(plan: &Plan, started: Started) -> c_int {
    let Started { command, signals, listener } = started;
    let channel = plan.channel;
    let mut fds = [
        libc::pollfd { fd: channel, events: libc::POLLIN, revents: 0 },
        libc::pollfd { fd: signals, events: libc::POLLIN, revents: 0 },
        libc::pollfd { fd: listener, events: libc::POLLIN, revents: 0 },
    ];
    loop {
        fds.iter_mut().for_each(|p| p.revents = 0);
        if sys::poll(&mut fds).is_err() || fds[0].revents != 0 {
            // Leash never writes after the hand-over: readable or hung up means it is gone.
            return LEASH_GONE;
        }
        if fds[2].revents & libc::POLLIN != 0 {
            connects::answer_one(listener, &plan.allowed_sockets);
        } else if fds[2].revents != 0 {
            // No process is left under the filter: nothing more will come.
            fds[2].fd = -1;
        }
        if fds[1].revents == 0 {
            continue;
        }
        let Ok(info) = sys::read_signal(signals) else { continue };
        let signal = info.ssi_signo as c_int;
        if signal == libc::SIGCHLD {
            if let Some(status) = reap(command) {
                end_every_other_process();
                let _ = sys::send_with_fds(channel, &Msg::Exit { status }.encode(), &[]);
                return shell_code(status);
            }
        } else {
            // A terminal's signal (SI_KERNEL) went to a process group: it goes to the command's; a process's to the
            // command.
            let target = if info.ssi_code == SI_KERNEL { -command } else { command };
            let _ = sys::kill(target, forwarded(signal));
        }
    }
}

/// What init passes on for a signal it got: a process's (leash's `Sandbox::signal`, the caller's shell) or the
/// terminal's, which no longer reach the command, in a session of its own. The terminal's stop signals would be
/// dropped by the kernel for a process group with no parent in its session: the command is stopped outright, and
/// the SIGCONT that `fg` sends leash and init continues it.
fn forwarded(signal: c_int) -> c_int {
    match signal {
        libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU => libc::SIGSTOP,
        other => other,
    }
}

/// Reaps every exited child; returns the command's raw status if it was among them.
fn reap(command: pid_t) -> Option<c_int> {
    let mut found = None;
    while let Ok((pid, status)) = sys::waitpid(-1, libc::WNOHANG) {
        if pid == 0 {
            break;
        }
        if pid == command {
            found = Some(status);
        }
    }
    found
}

/// Kills every process in the sandbox but init and reaps them, until init has no child left. Each round kills again,
/// so a process forked while the last one was dying goes too; orphans come to init (PID 1), so no child left means no
/// process left.
fn end_every_other_process() {
    loop {
        // ESRCH (nothing left to kill) is fine: the wait below then finds no child.
        let _ = sys::kill(-1, libc::SIGKILL);
        if sys::waitpid(-1, 0).is_err() {
            return;
        }
    }
}

/// A raw wait status as a shell exit code (128 + signal for a signal death).
fn shell_code(status: c_int) -> c_int {
    if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        libc::WEXITSTATUS(status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_file_names_a_pids_file_or_nothing() {
        let mut buf = [0u8; PROC_PATH_LEN];
        let mut digits = [0u8; 10];
        assert_eq!(proc_file(&mut buf, decimal(&mut digits, 4_194_304), b"gid_map"), Some(c"/proc/4194304/gid_map"));
        assert_eq!(proc_file(&mut buf, decimal(&mut digits, 7), b"uid_map"), Some(c"/proc/7/uid_map"));
        assert_eq!(proc_file(&mut buf, decimal(&mut digits, 0), b"x"), Some(c"/proc/0/x"));
        assert_eq!(proc_file(&mut buf, b"self", b"setgroups"), Some(c"/proc/self/setgroups"));
        assert_eq!(proc_file(&mut buf, b"1", &[b'n'; 40]), None, "too long for the buffer");
        assert_eq!(decimal(&mut digits, i32::MAX), b"2147483647");
    }
}
