//! Init's side of the seccomp filter: every `connect` the command's processes make is made by init instead, on a
//! duplicate of the caller's socket, and its result returned. Letting the call go on in the caller
//! (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`) would not be safe: between init's look and the kernel's, another thread
//! could swap the address in memory or the socket behind the descriptor number. Init reads both once, and
//! connects what it read.
//!
//! A connection to a **filesystem Unix socket** is made only to a socket listed in `allow_unix_sockets` (the one
//! found there at start, held open so its inode number goes to no other file, while the path still names it) or
//! to one that listens in the sandbox's own network namespace (the command's own servers, found with
//! `sock_diag`). The path is resolved as the caller sees it (its root and working directory, under
//! `/proc/PID/`), opened `O_PATH`, checked, and connected through `/proc/self/fd/N`, so what was checked is what is
//! connected. Every other one gets `ECONNREFUSED`, as if nothing listened there: a socket of the host's, bound by
//! a relative path, linked into place, in another mount namespace or created after the sandbox started. Any other
//! address (TCP to the proxy, abstract Unix names, which belong to the network namespace) is connected as asked.
//!
//! Runs in init, between its polls: raw system calls only, no allocation. Init never blocks on anything the command
//! controls: a connection that would wait (a full backlog, a reading of the caller's memory that waits on its page
//! fault handler) waits at most `CONNECT_WAIT` of init's own clock, a SIGALRM that interrupts the wait, whatever
//! the caller's socket says. The socket's file description is shared with the command, which may change its flags
//! and options at any moment from another thread: init sets nothing on it and relies on nothing read from it for
//! its own progress (`O_NONBLOCK` and `SO_SNDTIMEO` only make the caller's own connect return sooner).

use std::ffi::CStr;

use libc::{c_int, pid_t};

use super::sys::{self, Errno};

/// The longest init waits for one connection to complete (a listener with a full backlog); past it the caller gets
/// what a socket with that `SO_SNDTIMEO` gets (`EAGAIN` for Unix, `EINPROGRESS` for TCP).
const CONNECT_WAIT: libc::timeval = libc::timeval { tv_sec: 2, tv_usec: 0 };
/// After `CONNECT_WAIT`, SIGALRM comes again this often: one that landed just before init entered the wait (and
/// interrupted nothing) is followed by another that does.
const ALARM_AGAIN: libc::timeval = libc::timeval { tv_sec: 0, tv_usec: 50_000 };
const DISARMED: libc::timeval = libc::timeval { tv_sec: 0, tv_usec: 0 };

/// Lets init's deadline interrupt its waits (see the module docs); called once, before the first `answer_one`.
pub(super) fn arm_deadlines() -> Result<(), Errno> {
    sys::interrupt_on_alarm()
}
/// `sizeof(struct sockaddr_storage)`: the kernel refuses longer addresses with `EINVAL`.
const MAX_ADDR: usize = 128;
/// `offsetof(struct sockaddr_un, sun_path)`.
const SUN_PATH: usize = 2;

/// A socket file's identity: device and inode as `stat` gives them.
pub(super) type SocketId = (u64, u64);

/// A host socket the operator allowed (`--allow-unix-socket`), as found at start. The held `O_PATH` descriptor keeps
/// the file's inode alive, so its number cannot go to another file while the sandbox runs (a filesystem hands a
/// freed inode number to the next file: an identity recorded once would then name an unrelated socket).
pub(super) struct AllowedSocket {
    pub(super) id: SocketId,
    /// The path the operator named, as leash's mount namespace (init's copy of it) resolves it.
    pub(super) path: std::ffi::CString,
    pub(super) held: std::os::fd::OwnedFd,
}

impl AllowedSocket {
    /// Whether `id` is this socket, and the operator's path still names it (not gone, nor replaced).
    fn is(&self, id: SocketId) -> bool {
        id == self.id && sys::stat(&self.path).is_ok_and(|st| (st.st_dev, st.st_ino) == self.id)
    }
}

/// Answers one notification from `listener`. A notification whose caller is gone is dropped.
pub(super) fn answer_one(listener: c_int, allowed: &[AllowedSocket]) {
    let Ok(notif) = sys::notif_recv(listener) else { return };
    // Unarmed, the connection is still made, but without init's bound: refused instead.
    let armed = sys::set_alarm(CONNECT_WAIT, ALARM_AGAIN);
    let result = armed.and_then(|()| connect_for(listener, &notif, allowed));
    let _ = sys::set_alarm(DISARMED, DISARMED);
    let result = match result {
        Ok(()) => 0,
        Err(errno) => -errno,
    };
    // ENOENT: the caller was interrupted or killed meanwhile; nothing waits for the answer.
    let _ = sys::notif_send(listener, notif.id, result);
}

/// Makes the connection `notif` asks for, on a duplicate of the caller's socket.
fn connect_for(listener: c_int, notif: &libc::seccomp_notif, allowed: &[AllowedSocket]) -> Result<(), Errno> {
    if notif.data.nr != libc::SYS_connect as c_int {
        return Err(libc::ENOSYS);
    }
    let [fd, addr_ptr, addr_len, ..] = notif.data.args;
    let len = addr_len as u32 as i32;
    if !(0..=MAX_ADDR as i32).contains(&len) {
        return Err(libc::EINVAL);
    }
    let pid = notif.pid as pid_t;
    let pidfd = open_caller(pid)?;
    let socket = sys::pidfd_getfd(pidfd, fd as u32 as c_int);
    sys::close(pidfd);
    let socket = socket?;
    let result = read_and_connect(listener, notif, pid, socket, addr_ptr, len as usize, allowed);
    sys::close(socket);
    result
}

/// A pidfd for the calling thread `tid`, whose descriptor table holds the socket: the thread itself
/// (`PIDFD_THREAD`), or before Linux 6.9 its thread group (threads share one table unless one unshared it, and such a
/// thread's connections then fail).
fn open_caller(tid: pid_t) -> Result<c_int, Errno> {
    match sys::pidfd_open(tid, true) {
        Err(libc::EINVAL) => sys::pidfd_open(thread_group(tid)?, false),
        other => other,
    }
}

/// The thread group (process) of thread `tid`, from `/proc/TID/status`.
fn thread_group(tid: pid_t) -> Result<pid_t, Errno> {
    let mut path = PathBuf64::new();
    path.push(b"/proc/");
    path.push_number(tid as u64);
    path.push(b"/status");
    let fd = sys::open(path.as_cstr()?, libc::O_RDONLY)?;
    let mut buf = [0u8; 1024];
    let read = sys::read(fd, &mut buf);
    sys::close(fd);
    tgid_in(buf.get(..read?).unwrap_or_default()).ok_or(libc::ESRCH)
}

/// The `Tgid:` field of a `/proc/PID/status` text (it comes in the first few lines).
fn tgid_in(status: &[u8]) -> Option<pid_t> {
    let line = status.split(|&b| b == b'\n').find_map(|l| l.strip_prefix(b"Tgid:"))?;
    let digits = line.iter().skip_while(|b| b.is_ascii_whitespace()).take_while(|b| b.is_ascii_digit());
    digits.fold(None, |n: Option<pid_t>, &d| Some(n.unwrap_or(0).checked_mul(10)? + pid_t::from(d - b'0')))
}

fn read_and_connect(
    listener: c_int,
    notif: &libc::seccomp_notif,
    pid: pid_t,
    socket: c_int,
    addr_ptr: u64,
    len: usize,
    allowed: &[AllowedSocket],
) -> Result<(), Errno> {
    let mut addr = [0u8; MAX_ADDR];
    let addr = addr.get_mut(..len).ok_or(libc::EINVAL)?;
    sys::read_remote(pid, addr_ptr, addr)?;
    // The pid was read before the pidfd was opened: still waiting means it was the caller's.
    if !sys::notif_id_valid(listener, notif.id) {
        return Err(libc::ESRCH);
    }
    let domain = sys::getsockopt_int(socket, libc::SOL_SOCKET, libc::SO_DOMAIN)?;
    match filesystem_path(domain, addr) {
        Some(path) => connect_unix_path(pid, socket, path, allowed),
        None => connect_bounded(domain, socket, addr),
    }
}

/// The path of a filesystem Unix address (up to its first NUL, as the kernel reads it); `None` for any other.
fn filesystem_path(domain: c_int, addr: &[u8]) -> Option<&[u8]> {
    let family = u16::from_ne_bytes([*addr.first()?, *addr.get(1)?]);
    let path = addr.get(SUN_PATH..)?;
    let path = path.split(|&b| b == 0).next()?;
    (domain == libc::AF_UNIX && family == libc::AF_UNIX as u16 && !path.is_empty()).then_some(path)
}

/// Resolves `path` as process `pid` sees it, and connects `socket` to it if it is an allowed or inside socket.
fn connect_unix_path(pid: pid_t, socket: c_int, path: &[u8], allowed: &[AllowedSocket]) -> Result<(), Errno> {
    let absolute = path.first() == Some(&b'/');
    let mut base = PathBuf64::new();
    base.push(b"/proc/");
    base.push_number(pid as u64);
    base.push(if absolute { b"/root" } else { b"/cwd" });
    let dir = sys::open(base.as_cstr()?, libc::O_PATH | libc::O_DIRECTORY)?;
    let mut name = [0u8; MAX_ADDR + 1];
    name.get_mut(..path.len()).ok_or(libc::ENAMETOOLONG)?.copy_from_slice(path);
    let name = CStr::from_bytes_until_nul(&name).map_err(|_| libc::EINVAL)?;
    // Under the caller's root, as its absolute paths and links resolve; no /proc magic links, which would resolve
    // as init's.
    let resolve = if absolute { libc::RESOLVE_IN_ROOT } else { 0 } | libc::RESOLVE_NO_MAGICLINKS;
    let target = sys::open_path_at(dir, name, resolve);
    sys::close(dir);
    let target = target?;
    let result = check_and_connect(socket, target, allowed);
    sys::close(target);
    result
}

fn check_and_connect(socket: c_int, target: c_int, allowed: &[AllowedSocket]) -> Result<(), Errno> {
    let st = sys::fstat(target)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(libc::ECONNREFUSED);
    }
    let id = (st.st_dev, st.st_ino);
    // INVARIANT: a filesystem Unix socket is connected only if allowed or listening inside the sandbox.
    if !allowed.iter().any(|a| a.is(id)) && !listens_inside(id) {
        return Err(libc::ECONNREFUSED);
    }
    let mut via = PathBuf64::new();
    via.push(&(libc::AF_UNIX as u16).to_ne_bytes());
    via.push(b"/proc/self/fd/");
    via.push_number(target as u64);
    connect_bounded(libc::AF_UNIX, socket, via.bytes_with_nul())
}

/// connect(2), interrupted by init's deadline (`answer_one`) if it waits that long: the caller then gets what a
/// socket whose `SO_SNDTIMEO` ran out gets, `EAGAIN` for a Unix socket and `EINPROGRESS` for TCP (whose connection
/// goes on in the background, as it would).
fn connect_bounded(domain: c_int, socket: c_int, addr: &[u8]) -> Result<(), Errno> {
    match sys::connect(socket, addr) {
        Err(libc::EINTR) if domain == libc::AF_UNIX => Err(libc::EAGAIN),
        Err(libc::EINTR) => Err(libc::EINPROGRESS),
        other => other,
    }
}

/// Whether a Unix socket bound to the file `id` listens in the caller's (init's, the sandbox's) network namespace:
/// a `sock_diag` dump of the listening Unix sockets with their files' device and inode. Any failure is "no".
fn listens_inside((dev, ino): SocketId) -> bool {
    let Ok(fd) = sys::netlink_socket(libc::NETLINK_SOCK_DIAG) else { return false };
    let found = sys::send(fd, &diag_request()).is_ok() && dump_has(fd, kernel_dev(dev), ino);
    sys::close(fd);
    found
}

// sock_diag constants (linux/sock_diag.h, linux/unix_diag.h).
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const UDIAG_SHOW_VFS: u32 = 0x2;
const UNIX_DIAG_VFS: u16 = 1;
const TCP_LISTEN: u32 = 10;
const NLMSG_HEADER: usize = 16;
/// `struct unix_diag_msg`.
const DIAG_MSG: usize = 16;

/// An `NLM_F_DUMP` request for the listening Unix sockets with `UDIAG_SHOW_VFS`: a netlink header and a
/// `struct unix_diag_req`.
fn diag_request() -> [u8; NLMSG_HEADER + 24] {
    let mut req = [0u8; NLMSG_HEADER + 24];
    let flags = (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16;
    req[0..4].copy_from_slice(&((NLMSG_HEADER + 24) as u32).to_ne_bytes());
    req[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    req[6..8].copy_from_slice(&flags.to_ne_bytes());
    req[16] = libc::AF_UNIX as u8;
    req[20..24].copy_from_slice(&(1u32 << TCP_LISTEN).to_ne_bytes());
    req[28..32].copy_from_slice(&UDIAG_SHOW_VFS.to_ne_bytes());
    req
}

/// Reads the dump to its end; true if a socket's file is (`dev`, `ino`) (the kernel gives the inode's low 32 bits
/// and the device in its own encoding).
fn dump_has(fd: c_int, dev: u32, ino: u64) -> bool {
    let mut buf = [0u8; 16 * 1024];
    let mut found = false;
    loop {
        let Ok(n) = sys::read(fd, &mut buf) else { return false };
        let mut msgs = buf.get(..n).unwrap_or_default();
        while msgs.len() >= NLMSG_HEADER {
            let len = u32_at(msgs, 0) as usize;
            let kind = u16::from_ne_bytes([msgs[4], msgs[5]]);
            if len < NLMSG_HEADER || len > msgs.len() || kind == libc::NLMSG_ERROR as u16 {
                return false;
            }
            if kind == libc::NLMSG_DONE as u16 {
                return found;
            }
            found |= msgs.get(NLMSG_HEADER + DIAG_MSG..len).is_some_and(|attrs| vfs_is(attrs, dev, ino));
            msgs = msgs.get(align4(len)..).unwrap_or_default();
        }
        if n == 0 {
            return false;
        }
    }
}

/// Whether the `UNIX_DIAG_VFS` attribute among `attrs` names (`dev`, `ino`).
fn vfs_is(mut attrs: &[u8], dev: u32, ino: u64) -> bool {
    while attrs.len() >= 4 {
        let len = u16::from_ne_bytes([attrs[0], attrs[1]]) as usize;
        let kind = u16::from_ne_bytes([attrs[2], attrs[3]]);
        if len < 4 || len > attrs.len() {
            return false;
        }
        if kind == UNIX_DIAG_VFS && len >= 12 {
            return u32_at(attrs, 4) as u64 == ino & 0xffff_ffff && u32_at(attrs, 8) == dev;
        }
        attrs = attrs.get(align4(len)..).unwrap_or_default();
    }
    false
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    bytes.get(at..at + 4).and_then(|b| b.try_into().ok()).map_or(0, u32::from_ne_bytes)
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// `stat`'s device number in the kernel's internal encoding (major in the high 12 bits, minor in the low 20), which
/// `sock_diag` reports.
fn kernel_dev(dev: u64) -> u32 {
    (libc::major(dev) << 20) | (libc::minor(dev) & 0xf_ffff)
}

/// A path or address built on the stack: at most 64 bytes plus a NUL (`/proc/<pid>/root`, `/proc/self/fd/<n>`).
struct PathBuf64 {
    bytes: [u8; 80],
    len: usize,
}

impl PathBuf64 {
    fn new() -> Self {
        PathBuf64 { bytes: [0; 80], len: 0 }
    }

    fn push(&mut self, part: &[u8]) {
        let end = (self.len + part.len()).min(self.bytes.len() - 1);
        let take = end - self.len;
        self.bytes[self.len..end].copy_from_slice(&part[..take]);
        self.len = end;
    }

    fn push_number(&mut self, mut n: u64) {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        self.push(&digits[i..]);
    }

    fn as_cstr(&self) -> Result<&CStr, Errno> {
        CStr::from_bytes_with_nul(self.bytes_with_nul()).map_err(|_| libc::EINVAL)
    }

    fn bytes_with_nul(&self) -> &[u8] {
        &self.bytes[..=self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unix_addr(path: &[u8]) -> Vec<u8> {
        let mut a = (libc::AF_UNIX as u16).to_ne_bytes().to_vec();
        a.extend_from_slice(path);
        a
    }

    #[test]
    fn only_named_unix_addresses_are_filesystem_paths() {
        assert_eq!(filesystem_path(libc::AF_UNIX, &unix_addr(b"/run/x.sock\0")), Some(&b"/run/x.sock"[..]));
        assert_eq!(filesystem_path(libc::AF_UNIX, &unix_addr(b"rel.sock")), Some(&b"rel.sock"[..]), "no NUL");
        assert_eq!(filesystem_path(libc::AF_UNIX, &unix_addr(b"\0abstract")), None);
        assert_eq!(filesystem_path(libc::AF_UNIX, &unix_addr(b"")), None, "unnamed");
        assert_eq!(filesystem_path(libc::AF_INET, &unix_addr(b"/run/x.sock")), None, "not a Unix socket");
        let mut inet = (libc::AF_INET as u16).to_ne_bytes().to_vec();
        inet.extend_from_slice(b"/run/x");
        assert_eq!(filesystem_path(libc::AF_UNIX, &inet), None, "the kernel refuses that family itself");
    }

    #[test]
    fn the_thread_group_is_read_from_status() {
        let status = b"Name:\tpython3\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\nNgid:\t0\nPid:\t4250\n";
        assert_eq!(tgid_in(status), Some(4242));
        assert_eq!(tgid_in(b"Name:\tx\nPid:\t1\n"), None);
        assert_eq!(tgid_in(b"Tgid:\t\n"), None);
        let own = std::process::id() as pid_t;
        assert_eq!(thread_group(own), Ok(own));
    }

    #[test]
    fn stack_paths_hold_numbers_and_stop_short_of_overflow() {
        let mut p = PathBuf64::new();
        p.push(b"/proc/");
        p.push_number(4_294_967_295);
        p.push(b"/cwd");
        assert_eq!(p.as_cstr().unwrap().to_bytes(), b"/proc/4294967295/cwd");
        let mut long = PathBuf64::new();
        long.push(&[b'a'; 200]);
        assert_eq!(long.bytes_with_nul().len(), 80, "cut, still NUL-terminated");
    }

    #[test]
    fn the_vfs_attribute_is_matched_on_device_and_inode() {
        let mut attrs = Vec::new();
        attrs.extend_from_slice(&8u16.to_ne_bytes());
        attrs.extend_from_slice(&0u16.to_ne_bytes());
        attrs.extend_from_slice(b"name");
        attrs.extend_from_slice(&12u16.to_ne_bytes());
        attrs.extend_from_slice(&UNIX_DIAG_VFS.to_ne_bytes());
        attrs.extend_from_slice(&77u32.to_ne_bytes());
        attrs.extend_from_slice(&kernel_dev(libc::makedev(8, 1)).to_ne_bytes());
        assert!(vfs_is(&attrs, kernel_dev(libc::makedev(8, 1)), 77));
        assert!(!vfs_is(&attrs, kernel_dev(libc::makedev(8, 2)), 77));
        assert!(!vfs_is(&attrs, kernel_dev(libc::makedev(8, 1)), 78));
        assert!(!vfs_is(&attrs[..10], kernel_dev(libc::makedev(8, 1)), 77), "a cut attribute is no match");
    }
}
