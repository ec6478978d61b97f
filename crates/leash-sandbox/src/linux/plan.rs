//! Everything the cloned child needs, computed and allocated in the parent before the clone: C strings for the
//! program, argv, envp and paths, the id-map lines, the socket addresses and descriptor numbers. The child only
//! reads this copy of leash's memory, so it never allocates.

use std::ffi::{CString, OsStr, OsString};
use std::net::SocketAddrV4;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use libc::{c_char, c_int};

use super::connects::AllowedSocket;
use super::cpus::Spread;
use super::sys;
use crate::{SandboxError, SandboxSpec};

/// The `PATH` searched when the command's environment has none (the usual login default).
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A null-terminated array of C strings, with the strings it points into.
pub(super) struct CStrings {
    _owned: Vec<CString>,
    ptrs: Vec<*const c_char>,
}

impl CStrings {
    fn new(owned: Vec<CString>) -> CStrings {
        let mut ptrs: Vec<*const c_char> = owned.iter().map(|s| s.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        CStrings { _owned: owned, ptrs }
    }

    /// The array to hand to `execve`.
    pub(super) fn as_ptrs(&self) -> &[*const c_char] {
        &self.ptrs
    }
}

/// Where the command runs between init's `clone` and its `execve`, in init's memory (see `init::start_command`).
pub(super) struct Stack {
    /// Where the mapping starts.
    base: *mut libc::c_void,
    /// The 16-byte aligned end: stacks grow down.
    top: *mut libc::c_void,
}

impl Stack {
    /// Far more than the command's set-up uses; pages never touched cost nothing.
    const LEN: usize = 256 * 1024;

    /// A mapping of its own, not the heap: a heap block this large may be reused memory that would have to be
    /// zeroed (64 page faults before the clone), and freed later it would write to pages the init still shares.
    fn new() -> Result<Stack, SandboxError> {
        // SAFETY: a fresh private anonymous mapping, at an address the kernel picks; nothing else refers to it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                Stack::LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            let source = std::io::Error::last_os_error();
            return Err(SandboxError::Setup { step: crate::Step::MapCommandStack, source });
        }
        let end = base.cast::<u8>().wrapping_add(Stack::LEN);
        let top = end.wrapping_sub(end as usize % 16).cast();
        Ok(Stack { base, top })
    }

    pub(super) fn top(&self) -> *mut libc::c_void {
        self.top
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: `base` is the mapping `new` made, of `LEN` bytes, unmapped once.
        unsafe { libc::munmap(self.base, Stack::LEN) };
    }
}

/// Most directories of the host's /dev/shm kept visible in the sandbox's own (init clones each before it mounts the
/// sandbox's /dev/shm, on its stack).
pub(super) const MAX_KEPT_IN_SHM: usize = 4;

/// The directories of `SandboxSpec::keep_in_shm`: each directly below /dev/shm (init makes it again in the sandbox's
/// own), at most [`MAX_KEPT_IN_SHM`].
fn kept_in_shm(paths: &[PathBuf]) -> Result<Vec<CString>, SandboxError> {
    if paths.len() > MAX_KEPT_IN_SHM {
        return Err(SandboxError::InvalidSpec(format!("at most {} directories kept in /dev/shm", MAX_KEPT_IN_SHM)));
    }
    let one_below = |p: &PathBuf| p.parent() == Some(Path::new("/dev/shm")) && p.file_name().is_some();
    if let Some(bad) = paths.iter().find(|p| !one_below(p)) {
        return Err(SandboxError::InvalidSpec(format!(
            "`{}` is not a directory directly below /dev/shm",
            bad.display()
        )));
    }
    paths.iter().map(|p| cstring(p.as_os_str().as_bytes(), "a path kept in /dev/shm")).collect()
}

/// The `uid_map` and `gid_map` lines for one user namespace.
pub(super) struct IdMaps {
    pub(super) uid_map: CString,
    pub(super) gid_map: CString,
}

/// How many ids, from 0, the sandbox's user namespaces map when leash is root: every account a distribution allocates
/// (system ones such as apt's `_apt`, users, `nobody` at 65534). Above lie the subordinate ranges (/etc/subuid) of
/// users' rootless containers, which stay unmapped.
pub(super) const FULL_RANGE: u32 = 65536;

/// Which ids the sandbox's two user namespaces map (see `IdRange::of_caller`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum IdRange {
    /// One id: inner 0 is leash's uid and gid, `setgroups` denied; init writes its own maps and the command's.
    Single,
    /// Ids 0..`FULL_RANGE` onto themselves, `setgroups` allowed. Only a process of the parent namespace may write
    /// such a map: leash writes init's, and init the command's (`init::start_command`).
    Full,
}

/// The child's whole programme.
pub(super) struct Plan {
    /// What the command's process executes: the command, or the self-test in its place (`SandboxSpec::self_test`).
    pub(super) program: CString,
    /// The write end of the self-test's report pipe, which the command's process keeps across the self-test's
    /// `execve`; -1 without a self-test.
    pub(super) report: c_int,
    pub(super) argv: CStrings,
    pub(super) envp: CStrings,
    pub(super) cwd: Option<CString>,
    /// Which ids both namespaces map.
    pub(super) ids: IdRange,
    /// The sandbox's namespace: inner 0 is leash's uid and gid (or the full range).
    pub(super) outer_ids: IdMaps,
    /// The command's namespace: the caller's uid and gid again, mapped onto the sandbox's 0 (or the full range).
    pub(super) inner_ids: IdMaps,
    pub(super) resolv_source: Option<CString>,
    /// The uid and gid the command runs as in its user namespace (`SandboxSpec::run_as`).
    pub(super) run_as: Option<(u32, u32)>,
    /// Directories of the host's /dev/shm moved into the sandbox's own (`SandboxSpec::keep_in_shm`).
    pub(super) kept_in_shm: Vec<CString>,
    pub(super) tcp: Vec<libc::sockaddr_in>,
    pub(super) udp: Vec<libc::sockaddr_in>,
    /// The command's stdin, stdout, stderr: duplicates numbered >= 3, or `None` to inherit.
    stdio: [Option<OwnedFd>; 3],
    /// The pseudo-terminal init makes for the command (`SandboxSpec::terminal`).
    pub(super) terminal: Option<crate::Terminal>,
    pub(super) channel: c_int,
    pub(super) command_stack: Stack,
    /// Whether the id maps need a dumpable moment (see `init::map_ids`): only without root, whose /proc files
    /// stay writable while non-dumpable.
    pub(super) dumpable_for_maps: bool,
    /// Where the init runs while leash works beside it; `None` with a single CPU.
    pub(super) spread: Option<Spread>,
    /// The command's seccomp filter (`seccomp`).
    pub(super) filter: Vec<libc::sock_filter>,
    /// The host's Unix sockets the command may connect to (`SandboxSpec::allow_unix_sockets`, as found at start).
    pub(super) allowed_sockets: Vec<AllowedSocket>,
    /// The descriptors init keeps, sorted (see `init_keeps`).
    keeps: Vec<c_int>,
}

impl Plan {
    /// Builds the plan; `channel` is the child's end of the socketpair.
    /// `report`: the write end of the self-test's pipe, when `spec` asks for one (its number is the self-test's
    /// argument).
    pub(super) fn build(
        spec: &SandboxSpec,
        program: &Path,
        resolv_source: Option<&Path>,
        (channel, report): (c_int, Option<c_int>),
    ) -> Result<Plan, SandboxError> {
        let mut argv = vec![cstring(spec.program.as_bytes(), "the program")?];
        for arg in &spec.args {
            argv.push(cstring(arg.as_bytes(), "an argument")?);
        }
        let mut executed = cstring(program.as_os_str().as_bytes(), "the program")?;
        if let (Some(test), Some(fd)) = (&spec.self_test, report) {
            // The self-test runs in the command's place, given the report's descriptor and the command itself.
            let mut before = vec![cstring(test.program.as_bytes(), "the self-test's program")?];
            for arg in &test.args {
                before.push(cstring(arg.as_bytes(), "a self-test argument")?);
            }
            before.extend([c"--".to_owned(), cstring(fd.to_string().as_bytes(), "a descriptor")?, executed]);
            argv = before.into_iter().chain(argv).collect();
            executed = cstring(test.program.as_bytes(), "the self-test's program")?;
        }
        let envp = spec
            .env
            .iter()
            .map(|(k, v)| cstring(&[k.as_bytes(), b"=", v.as_bytes()].concat(), "an environment variable"))
            .collect::<Result<Vec<_>, _>>()?;
        let ids = IdRange::of_caller();
        if spec.run_as.is_some() && ids == IdRange::Single {
            // The map another user needs is one only root's leash may write (another containment may do).
            let source = std::io::Error::from_raw_os_error(libc::EPERM);
            return Err(SandboxError::Setup { step: crate::Step::MapOtherUser, source });
        }
        if spec.run_as.is_some_and(|(uid, gid)| uid >= FULL_RANGE || gid >= FULL_RANGE) {
            return Err(SandboxError::InvalidSpec(format!("the command's user must be below {FULL_RANGE}")));
        }
        let (outer_ids, inner_ids) = match ids {
            IdRange::Single => {
                (id_maps(0, current_uid(), 0, current_gid(), 1), id_maps(current_uid(), 0, current_gid(), 0, 1))
            }
            IdRange::Full => (id_maps(0, 0, 0, 0, FULL_RANGE), id_maps(0, 0, 0, 0, FULL_RANGE)),
        };
        let allowed_sockets: Vec<AllowedSocket> = spec.allow_unix_sockets.iter().filter_map(|p| allowed(p)).collect();
        let stdio = [dup(&spec.stdin)?, dup(&spec.stdout)?, dup(&spec.stderr)?];
        let mut keeps: Vec<c_int> = std::iter::once(channel)
            .chain(report)
            .chain(stdio.iter().flatten().map(AsRawFd::as_raw_fd))
            .chain(allowed_sockets.iter().map(|a| a.held.as_raw_fd()))
            .collect();
        keeps.sort_unstable();
        Ok(Plan {
            program: executed,
            report: report.unwrap_or(-1),
            argv: CStrings::new(argv),
            envp: CStrings::new(envp),
            cwd: spec.cwd.as_deref().map(|p| cstring(p.as_os_str().as_bytes(), "the working directory")).transpose()?,
            ids,
            outer_ids,
            inner_ids,
            resolv_source: resolv_source
                .map(|p| cstring(p.as_os_str().as_bytes(), "the resolv.conf path"))
                .transpose()?,
            kept_in_shm: kept_in_shm(&spec.keep_in_shm)?,
            run_as: spec.run_as,
            tcp: spec.tcp_listeners.iter().map(sockaddr).collect(),
            udp: spec.udp_sockets.iter().map(sockaddr).collect(),
            stdio,
            terminal: spec.terminal,
            channel,
            command_stack: Stack::new()?,
            dumpable_for_maps: current_uid() != 0,
            spread: Spread::of_caller(),
            filter: super::seccomp::program(),
            allowed_sockets,
            keeps,
        })
    }

    /// The descriptor to put at 0, 1, 2, or -1 to inherit.
    pub(super) fn stdio_fd(&self, index: usize) -> c_int {
        self.stdio.get(index).and_then(Option::as_ref).map_or(-1, AsRawFd::as_raw_fd)
    }

    /// Whether stdin, stdout or stderr (`index`) is the pseudo-terminal init makes.
    pub(super) fn on_terminal(&self, index: usize) -> bool {
        self.terminal.is_some_and(|t| t.stdio.get(index) == Some(&true))
    }

    /// The descriptors the init must keep open, sorted (the channel, the stdio duplicates, the allowed sockets).
    pub(super) fn init_keeps(&self) -> &[c_int] {
        &self.keeps
    }
}

/// `CAP_SETGID` and `CAP_SETUID`: the bits of capabilities(7) a process needs to write a map of more than its own
/// id into a child user namespace.
const CAP_SETGID: u32 = 6;
const CAP_SETUID: u32 = 7;

impl IdRange {
    /// `Full` when leash is root (real and effective uid 0) in the initial user namespace with `CAP_SETUID` and
    /// `CAP_SETGID`, else `Single`. Without those nothing more than one id can be mapped (short of the set-uid
    /// `newuidmap`, which leash does not use), and `setgroups` must be denied before an unprivileged `gid_map`.
    ///
    /// Why `Full` gives the command nothing outside its namespaces: capabilities stay bound to user namespaces, and
    /// the command holds them only in its own, nested one, as with `Single`; the sandbox's mount, network, IPC and
    /// pid namespaces still belong to init's, so the mounts, the hidden paths and read-only kernel files stand, and
    /// the seccomp filter is the same. What the wider map changes is which files and groups those capabilities
    /// reach: the kernel honours them on a file whose owner and group are both mapped (root's alone before, every
    /// uid and gid below `FULL_RANGE` now), `setgroups` takes any group below it, and a process inside may become any
    /// of those users (apt's `_apt`). A root caller's command is already the host's root for every root-owned file,
    /// so it could already plant a set-uid binary, a cron job or a sudoers line for the host to run: the wider map
    /// gives it no power it lacked. Ids from `FULL_RANGE` up (other users' subordinate ranges) stay out of reach.
    fn of_caller() -> IdRange {
        // SAFETY: getuid cannot fail and takes no arguments.
        let root = unsafe { libc::getuid() } == 0 && current_uid() == 0;
        if root && in_initial_user_namespace() && may_map_ids() {
            IdRange::Full
        } else {
            IdRange::Single
        }
    }
}

/// Whether this process's user namespace is the initial one, which maps every id onto itself: the namespace's inode
/// is the initial one's fixed number (`PROC_USER_INIT_INO`, the same since Linux 3.8; systemd's `namespace_is_init`
/// relies on it too). One `stat`, where reading both id maps cost two procfs reads before the clone. A kernel that
/// numbered it otherwise would make leash map one id, never more.
fn in_initial_user_namespace() -> bool {
    const PROC_USER_INIT_INO: u64 = 0xEFFF_FFFD;
    std::fs::metadata("/proc/self/ns/user").is_ok_and(|m| m.ino() == PROC_USER_INIT_INO)
}

/// Whether the calling thread (which clones the init) holds `CAP_SETUID` and `CAP_SETGID` (`capget`, no procfs).
fn may_map_ids() -> bool {
    let needed = (1u32 << CAP_SETUID) | (1u32 << CAP_SETGID);
    sys::effective_caps().is_ok_and(|effective| effective & needed == needed)
}

/// Finds `program` the way `execvp` would, on the command's own `PATH`.
pub(super) fn resolve_program(spec: &SandboxSpec) -> Result<PathBuf, SandboxError> {
    let program = Path::new(&spec.program);
    if spec.program.is_empty() {
        return Err(SandboxError::InvalidSpec("the program is empty".into()));
    }
    if spec.program.as_bytes().contains(&b'/') {
        return Ok(program.to_path_buf());
    }
    let path = spec
        .env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map_or_else(|| OsString::from(DEFAULT_PATH), |(_, v)| v.clone());
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
        .ok_or(SandboxError::ProgramNotFound { program: spec.program.clone(), path })
}

/// A socket file, following links, held open (`O_PATH`); `None` for anything else (a missing path allows nothing).
fn allowed(path: &Path) -> Option<AllowedSocket> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
    let opened = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_PATH).open(path).ok()?;
    // Numbered >= 3, like the stdio duplicates: init closes 0, 1 and 2.
    let held = opened.try_clone().ok()?;
    let meta = held.metadata().ok()?;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    meta.file_type().is_socket().then(|| AllowedSocket { id: (meta.dev(), meta.ino()), path, held: held.into() })
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn cstring(bytes: &[u8], what: &str) -> Result<CString, SandboxError> {
    CString::new(bytes).map_err(|_| {
        let shown = OsStr::from_bytes(bytes).to_string_lossy();
        SandboxError::InvalidSpec(format!("{what} `{shown}` contains a NUL byte"))
    })
}

fn id_maps(inner_uid: u32, outer_uid: u32, inner_gid: u32, outer_gid: u32, count: u32) -> IdMaps {
    // Cannot fail: formatted numbers contain no NUL byte.
    let line = |inner: u32, outer: u32| CString::new(format!("{inner} {outer} {count}\n")).unwrap_or_default();
    IdMaps { uid_map: line(inner_uid, outer_uid), gid_map: line(inner_gid, outer_gid) }
}

fn sockaddr(addr: &SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: addr.port().to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from(*addr.ip()).to_be() },
        sin_zero: [0; 8],
    }
}

/// A close-on-exec duplicate numbered >= 3, so putting it at 0, 1 or 2 never clobbers another one.
fn dup(fd: &Option<OwnedFd>) -> Result<Option<OwnedFd>, SandboxError> {
    fd.as_ref()
        .map(OwnedFd::try_clone)
        .transpose()
        .map_err(|e| SandboxError::InvalidSpec(format!("cannot duplicate a stdio descriptor: {e}")))
}

fn current_uid() -> u32 {
    // SAFETY: geteuid cannot fail and takes no arguments.
    unsafe { libc::geteuid() }
}

fn current_gid() -> u32 {
    // SAFETY: getegid cannot fail and takes no arguments.
    unsafe { libc::getegid() }
}
