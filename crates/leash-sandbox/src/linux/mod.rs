//! The Linux backend, parent side: prepares the plan, clones the init into new user and pid namespaces, receives
//! the sockets and the `execve` result over a SOCK_SEQPACKET pair, and later waits for, signals or kills the init.
//! The child side lives in `init`; the crate docs describe the namespaces.

mod caps;
mod connects;
mod cpus;
mod init;
mod kernel_fs;
mod netlink;
mod netns;
mod plan;
mod proto;
mod seccomp;
mod signals;
mod sys;
pub mod uid;

use std::fs;
use std::io::{self, Write};
use std::net::{TcpListener, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use libc::pid_t;

use self::plan::{IdMaps, IdRange, Plan};
use self::proto::{Msg, SpecFacts, RECORD_LEN};
use crate::error::Step;
use crate::{ExitStatus, SandboxError, SandboxSpec, MAX_SOCKETS};

pub(crate) use self::netlink::tcp_listeners;
pub(crate) use self::netns::{bind_in, bind_in_netns, netns_id, netns_interfaces, run_in_netns};
pub(crate) use self::signals::Forwarding;

/// The sandbox's init, seen from leash.
#[derive(Debug)]
pub(crate) struct Child {
    pid: pid_t,
    channel: OwnedFd,
    /// The lock also keeps `signal` from racing the reap.
    state: Mutex<Ended>,
}

/// How far the sandbox has ended.
#[derive(Debug, Default)]
struct Ended {
    /// The command's status, once init reported it (or died).
    status: Option<ExitStatus>,
    /// Init reaped (its pid may be reused), or left to be reaped once leash exits.
    reaped: bool,
}

/// A sandbox whose init is building its namespaces; see `Sandbox::prepare`.
#[derive(Debug)]
pub(crate) struct Pending {
    child: Child,
    facts: SpecFacts,
    /// Removed once init has mounted it.
    resolv: Option<TempFile>,
    /// The read end of the self-test's report (`SandboxSpec::self_test`).
    report: Option<OwnedFd>,
    /// What the init was cloned from, freed once the command runs: freeing it at once would write to heap pages the
    /// init still shares, and copying each one is about 60 µs of the init's wait for its ids and go-ahead.
    kept: Option<Kept>,
}

/// The plan and spec a [`Pending`] keeps (see its `kept`).
struct Kept {
    _plan: Plan,
    _spec: SandboxSpec,
}

impl std::fmt::Debug for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Kept")
    }
}

/// Clones the init, which builds the namespaces; see `Sandbox::prepare`.
pub(crate) fn prepare(spec: SandboxSpec) -> Result<Pending, SandboxError> {
    if spec.tcp_listeners.len() + spec.udp_sockets.len() > MAX_SOCKETS {
        return Err(SandboxError::InvalidSpec(format!("at most {MAX_SOCKETS} sockets can be handed out")));
    }
    let program = plan::resolve_program(&spec)?;
    let resolv = spec.resolv_conf.as_deref().map(TempFile::create).transpose()?.flatten();
    let (ours, theirs) = seqpacket_pair()?;
    let report = spec.self_test.as_ref().map(|_| report_pipe()).transpose()?;
    let report_fd = report.as_ref().map(|(_, write)| write.as_raw_fd());
    let plan = Plan::build(&spec, &program, resolv.as_ref().map(TempFile::path), (theirs.as_raw_fd(), report_fd))?;
    let facts = SpecFacts::new(&spec, &program);
    let pid = match sys::raw_fork((libc::CLONE_NEWUSER | libc::CLONE_NEWPID) as u64) {
        Ok(0) => init::run(&plan),
        Ok(pid) => pid,
        Err(errno) => return Err(setup(Step::CreateUserNamespace, io::Error::from_raw_os_error(errno))),
    };
    drop(theirs);
    // Only the command's process holds the write end now: the report ends with the self-test's `execve` or exit.
    let report = report.map(|(read, _)| read);
    if let Some(spread) = &plan.spread {
        spread.move_init(pid);
    }
    // From here an early return drops `child`, which kills and reaps the init.
    let child = Child { pid, channel: ours, state: Mutex::new(Ended::default()) };
    if plan.ids == IdRange::Full {
        // Init makes its network namespace before it waits for these maps: if that failed, init has said why and
        // ended, and what it said is the error (writing maps to an ended init fails for no reason of its own).
        map_init_ids(&child, &plan.outer_ids).map_err(|e| child.failure_said(&facts).unwrap_or(e))?;
    }
    // What init binds over the hidden paths: a missing one would read as "nothing to hide".
    if !fs::metadata("/dev/null").is_ok_and(|m| m.file_type().is_char_device()) {
        return Err(setup(Step::HidePath(PathBuf::from("/dev/null")), io::ErrorKind::NotFound.into()));
    }
    Ok(Pending { child, facts, resolv, report, kept: Some(Kept { _plan: plan, _spec: spec }) })
}

/// The self-test's report pipe (`crate::self_test`): leash's read end, and the write end, numbered 3 or above
/// (stdio's numbers are the command's own).
fn report_pipe() -> Result<(OwnedFd, OwnedFd), SandboxError> {
    let failed = |errno: sys::Errno| setup(Step::StartSelfTest, io::Error::from_raw_os_error(errno));
    let (read, write) = sys::pipe().map_err(failed)?;
    // SAFETY: both descriptors are fresh from `pipe2` and owned by nothing else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(read), OwnedFd::from_raw_fd(write)) };
    if write.as_raw_fd() > 2 {
        return Ok((read, write));
    }
    let moved = rustix::io::fcntl_dupfd_cloexec(&write, 3).map_err(|e| failed(e.raw_os_error()))?;
    Ok((read, moved))
}

/// Reads the self-test's report to its end (its `execve` of the command, or its exit) and judges it.
fn await_self_test(report: OwnedFd, facts: &SpecFacts) -> Result<(), SandboxError> {
    use std::io::Read;
    let mut said = Vec::new();
    std::fs::File::from(report)
        .read_to_end(&mut said)
        .map_err(|source| SandboxError::Control { what: "read the self-test of", source })?;
    crate::self_test::judge(&said, &facts.program)
}

/// Writes init's id maps from leash's user namespace, the parent of init's (`IdRange::Full`), then tells init.
fn map_init_ids(child: &Child, maps: &IdMaps) -> Result<(), SandboxError> {
    for (name, map) in [("uid_map", &maps.uid_map), ("gid_map", &maps.gid_map)] {
        fs::write(format!("/proc/{}/{name}", child.pid), map.as_bytes()).map_err(|e| setup(Step::MapIds(name), e))?;
    }
    sys::send_with_fds(child.channel.as_raw_fd(), &proto::MAPPED, &[])
        .map_err(|errno| SandboxError::Control { what: "write to", source: io::Error::from_raw_os_error(errno) })
}

impl Pending {
    /// Hands init the paths to hide, the mounts to cover and the go-ahead, runs `meanwhile`, then waits for the
    /// sockets and the command's `execve`. The mount table is read here, while init builds the sandbox.
    pub(crate) fn start_with<T>(
        mut self,
        meanwhile: impl FnOnce() -> T,
    ) -> Result<(Child, crate::Handed, T), SandboxError> {
        let covered = kernel_fs::scan().map_err(|e| setup(Step::ReadMountTable, e))?;
        self.facts.covered = covered.iter().map(|(_, path)| path.clone()).collect();
        for record in proto::orders(&self.facts, &covered) {
            match sys::send_with_fds(self.child.channel.as_raw_fd(), &record, &[]) {
                Ok(()) => {}
                // Init is gone: the handshake below reads why.
                Err(libc::EPIPE | libc::ECONNRESET) => break,
                Err(errno) => {
                    return Err(SandboxError::Control { what: "write to", source: io::Error::from_raw_os_error(errno) })
                }
            }
        }
        let value = meanwhile();
        let handed = self.child.handshake(&self.facts, &mut self.resolv)?;
        // The self-test runs in the command's place (its `execve` was the one reported): the command's comes after.
        if let Some(report) = self.report.take() {
            await_self_test(report, &self.facts)?;
        }
        drop(self.kept.take());
        Ok((self.child, handed, value))
    }
}

pub(crate) use self::signals::Hold;

/// Blocks the forwarded signals in this thread until the guard drops.
pub(crate) fn hold_forwarded_signals() -> Result<Hold, SandboxError> {
    signals::hold()
}

/// Arms signal forwarding to `child`.
pub(crate) fn forward_signals(child: &Child) -> Result<Forwarding, SandboxError> {
    signals::arm(child.pid)
}

/// Makes leash non-dumpable.
pub(crate) fn die_on_closed_stdout() {
    // SAFETY: installs the default disposition, no handler; called from `main` before any other thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

pub(crate) fn harden_self() -> Result<(), SandboxError> {
    sys::set_non_dumpable().map_err(|errno| setup(Step::HardenLeash, io::Error::from_raw_os_error(errno)))
}

fn setup(step: Step, source: io::Error) -> SandboxError {
    SandboxError::Setup { step, source }
}

impl Child {
    pub(crate) fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// Reads records until `execve` succeeded; takes the sockets (and the terminal) on the way and removes the
    /// resolv.conf file once it is mounted. Any failure leaves `self` to be killed and reaped by `Drop`.
    fn handshake(&self, facts: &SpecFacts, resolv: &mut Option<TempFile>) -> Result<crate::Handed, SandboxError> {
        let mut sockets = None;
        loop {
            let (msg, fds) = recv_record(self.channel.as_raw_fd(), false)?;
            match msg {
                Some(Msg::Sockets) if sockets.is_none() => {
                    *resolv = None;
                    sockets = Some(split_sockets(fds, facts)?);
                }
                Some(Msg::ExecOk) => {
                    return sockets.ok_or_else(|| SandboxError::InitDied("no sockets were handed over".into()));
                }
                Some(Msg::Failed { step, index, errno }) => {
                    return Err(setup(step.describe(index, facts), io::Error::from_raw_os_error(errno)));
                }
                None => return Err(SandboxError::InitDied(self.reap_now())),
                Some(other) => return Err(SandboxError::InitDied(format!("unexpected record {other:?}"))),
            }
        }
    }

    /// The failure init reported, if a record of one is waiting (never waits for one).
    fn failure_said(&self, facts: &SpecFacts) -> Option<SandboxError> {
        match recv_record(self.channel.as_raw_fd(), true) {
            Ok((Some(Msg::Failed { step, index, errno }), _)) => {
                Some(setup(step.describe(index, facts), io::Error::from_raw_os_error(errno)))
            }
            _ => None,
        }
    }

    /// After an early end: reap the init and describe how it ended.
    fn reap_now(&self) -> String {
        let mut state = self.lock();
        match self.reap(&mut state) {
            Ok(status) => {
                state.status = Some(status);
                format!("exit status {}", status.code())
            }
            Err(e) => e.to_string(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Ended> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn signal(&self, signal: i32) -> Result<(), SandboxError> {
        let state = self.lock();
        if state.status.is_some() || state.reaped {
            return Ok(());
        }
        sys::kill(self.pid, signal)
            .map_err(|errno| SandboxError::Control { what: "signal", source: io::Error::from_raw_os_error(errno) })
    }

    /// Readable once init has reported the command's status, or died.
    pub(crate) fn exit_fd(&self) -> BorrowedFd<'_> {
        self.channel.as_fd()
    }

    /// Waits for the channel without the lock (so `signal` stays usable meanwhile), then reads the status under it.
    /// Init reports only once every other process of the sandbox is gone; it is reaped later (see `Drop`), as its own
    /// exit, which tears the namespaces down, need not hold leash up.
    pub(crate) fn wait(&self) -> Result<ExitStatus, SandboxError> {
        wait_readable(self.channel.as_raw_fd())?;
        let mut state = self.lock();
        if let Some(status) = state.status {
            return Ok(status);
        }
        let status = match recv_record(self.channel.as_raw_fd(), true) {
            Ok((Some(Msg::Exit { status }), _)) => exit_status(status),
            // Init died without a report (killed): its own end is the command's.
            _ => self.reap(&mut state)?,
        };
        state.status = Some(status);
        Ok(status)
    }

    /// Leaves an ended init to the kernel: it stays a zombie until this process exits (or is reaped by `Drop` if
    /// the process goes on). Before the end is known, nothing changes: `Drop` kills and reaps as always.
    pub(crate) fn detach(self) {
        let mut state = self.lock();
        if state.status.is_some() && !state.reaped {
            signals::disarm(self.pid);
            state.reaped = true;
        }
    }

    /// Reaps init (disarming signal forwarding first, so no signal can reach a reused pid) and returns how it ended.
    fn reap(&self, state: &mut Ended) -> Result<ExitStatus, SandboxError> {
        signals::disarm(self.pid);
        let (_, raw) = sys::waitpid(self.pid, 0)
            .map_err(|errno| SandboxError::Control { what: "wait for", source: io::Error::from_raw_os_error(errno) })?;
        state.reaped = true;
        Ok(exit_status(raw))
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        if state.reaped {
            return;
        }
        signals::disarm(self.pid);
        // After its report init is exiting on its own; before it, this ends the sandbox.
        if state.status.is_none() {
            let _ = sys::kill(self.pid, libc::SIGKILL);
        }
        let _ = sys::waitpid(self.pid, 0);
    }
}

/// Blocks until `fd` is readable (or hung up).
fn wait_readable(fd: RawFd) -> Result<(), SandboxError> {
    let mut fds = [libc::pollfd { fd, events: libc::POLLIN, revents: 0 }];
    sys::poll(&mut fds)
        .map_err(|errno| SandboxError::Control { what: "wait for", source: io::Error::from_raw_os_error(errno) })
}

fn exit_status(raw: i32) -> ExitStatus {
    if libc::WIFSIGNALED(raw) {
        ExitStatus::Signaled(libc::WTERMSIG(raw))
    } else {
        ExitStatus::Exited(libc::WEXITSTATUS(raw))
    }
}

/// Turns the handed-over descriptors into the std socket types, TCP first, then the terminal's master if asked for.
fn split_sockets(fds: Vec<OwnedFd>, facts: &SpecFacts) -> Result<crate::Handed, SandboxError> {
    let (tcp, udp) = (facts.tcp.len(), facts.udp.len());
    let expected = tcp + udp + usize::from(facts.terminal);
    if fds.len() != expected {
        let got = fds.len();
        return Err(SandboxError::InitDied(format!("{got} descriptors were handed over, {expected} expected")));
    }
    let mut fds = fds.into_iter();
    let listeners = fds.by_ref().take(tcp).map(TcpListener::from).collect();
    let sockets = fds.by_ref().take(udp).map(UdpSocket::from).collect();
    Ok((listeners, sockets, fds.next()))
}

/// A close-on-exec SOCK_SEQPACKET pair: record boundaries, and end-of-file when the other side is gone.
fn seqpacket_pair() -> Result<(OwnedFd, OwnedFd), SandboxError> {
    let (a, b) =
        sys::seqpacket_pair().map_err(|errno| setup(Step::CreateChannel, io::Error::from_raw_os_error(errno)))?;
    // SAFETY: socketpair succeeded, so both descriptors are open and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(a), OwnedFd::from_raw_fd(b)) })
}

/// Receives one record with any descriptors attached (close-on-exec); `Ok((None, _))` at end of file.
fn recv_record(fd: RawFd, dont_wait: bool) -> Result<(Option<Msg>, Vec<OwnedFd>), SandboxError> {
    /// Room for a cmsghdr and `MAX_SOCKETS` descriptors and a terminal's, 8-byte aligned.
    const CONTROL_WORDS: usize = (std::mem::size_of::<libc::cmsghdr>() + 4 * (MAX_SOCKETS + 1)) / 8 + 2;
    let mut data = [0u8; RECORD_LEN + 1];
    let mut control = [0u64; CONTROL_WORDS];
    let mut iov = libc::iovec { iov_base: data.as_mut_ptr().cast(), iov_len: data.len() };
    // SAFETY: msghdr is plain data; all zeroes is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    let flags = libc::MSG_CMSG_CLOEXEC | if dont_wait { libc::MSG_DONTWAIT } else { 0 };
    // An init that exits with our orders still unread leaves ECONNRESET pending on our end, and a SOCK_SEQPACKET
    // receive reports that error before any queued record: the `Failed` record that says why would be lost. The
    // error is reported once, so one retry reads what init sent, then end of file.
    let mut reset_seen = false;
    let n = loop {
        // SAFETY: `msg` points at live buffers of the sizes it states.
        let n = unsafe { libc::recvmsg(fd, &mut msg, flags) };
        if n >= 0 {
            break n;
        }
        match sys::errno() {
            libc::EINTR => {}
            libc::ECONNRESET if !reset_seen => reset_seen = true,
            _ => break n,
        }
    };
    if n < 0 {
        let source = io::Error::last_os_error();
        return Err(SandboxError::Control { what: "read from", source });
    }
    let fds = take_fds(&msg);
    if n == 0 {
        return Ok((None, fds));
    }
    match Msg::decode(data.get(..n as usize).unwrap_or_default()) {
        Some(record) => Ok((Some(record), fds)),
        None => Err(SandboxError::InitDied("a malformed record arrived from the sandbox".into())),
    }
}

/// The SCM_RIGHTS descriptors of a received message, now owned.
fn take_fds(msg: &libc::msghdr) -> Vec<OwnedFd> {
    let mut fds = Vec::new();
    // SAFETY: CMSG_FIRSTHDR/CMSG_NXTHDR walk the control buffer the kernel filled, within msg_controllen; each
    // SCM_RIGHTS payload holds (cmsg_len - CMSG_LEN(0)) / 4 descriptors that the kernel installed for us.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let count = ((*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / std::mem::size_of::<RawFd>();
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                for i in 0..count {
                    fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            cmsg = libc::CMSG_NXTHDR(msg, cmsg);
        }
    }
    fds
}

/// A file holding resolv.conf contents for the init to bind-mount; removed on drop (once mounted, the mount keeps
/// the contents). `None` when the host has no /etc/resolv.conf to mount over.
#[derive(Debug)]
struct TempFile {
    path: PathBuf,
}

impl TempFile {
    fn create(contents: &str) -> Result<Option<TempFile>, SandboxError> {
        /// Tells apart the files of several sandboxes started by one process.
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        if fs::metadata("/etc/resolv.conf").is_err() {
            return Ok(None);
        }
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = crate::scratch_dir().join(format!("leash-resolv-{}-{n}.conf", std::process::id()));
        let _ = fs::remove_file(&path);
        let write = || -> io::Result<()> {
            let mut file = fs::OpenOptions::new().write(true).create_new(true).mode(0o644).open(&path)?;
            file.write_all(contents.as_bytes())
        };
        match write() {
            Ok(()) => Ok(Some(TempFile { path })),
            Err(e) => Err(setup(Step::WriteResolvConf(path), e)),
        }
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {

    use super::proto::{ChildStep, Msg};
    use super::*;

    #[test]
    fn a_failure_record_is_read_although_init_left_orders_unread() {
        let (ours, theirs) = seqpacket_pair().unwrap();
        sys::send_with_fds(ours.as_raw_fd(), &proto::orders(&proto::SpecFacts::default(), &[])[0], &[]).unwrap();
        let failed = Msg::Failed { step: ChildStep::BindTcp, index: 1, errno: libc::EADDRINUSE };
        sys::send_with_fds(theirs.as_raw_fd(), &failed.encode(), &[]).unwrap();
        // Closing with our order unread sets ECONNRESET on our end, which the kernel reports before the record.
        drop(theirs);
        assert_eq!(recv_record(ours.as_raw_fd(), false).unwrap().0, Some(failed));
        assert_eq!(recv_record(ours.as_raw_fd(), false).unwrap().0, None, "then end of file");
    }
}
