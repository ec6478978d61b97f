//! leash's sandbox: runs a command in namespaces whose only way out is the sockets leash hands in, and hands those
//! sockets (bound *inside* the sandbox's network namespace) back to leash, which stays in the host's namespaces to
//! dial upstreams. No bridge process copies bytes. This is the only crate where `unsafe` may appear.
//!
//! # What the Linux backend sets up
//! leash `clone`s the sandbox's **init** with `CLONE_NEWUSER | CLONE_NEWPID` (always, also as root), which then
//! makes its network namespace (described below; first, because it takes longest and needs no ids), maps its ids (`0 <uid> 1`, `setgroups` denied; when leash is root, leash writes `0 0 65536` for it instead and
//! `setgroups` stays allowed, so programs inside can drop privileges: `linux/plan.rs`, `IdRange`, says why that is
//! safe), makes itself non-dumpable, creates a private **mount namespace**, a **network namespace** holding only
//! `lo` (set up, no route, no address but 127.0.0.0/8; IPv6 disabled through
//! `net.ipv6.conf.all.disable_ipv6`, which sets `default` and `lo` too, so no IPv6 at all, not even `::1`) and an
//! **IPC namespace** (SysV and POSIX message queues, semaphores, shared memory; a fresh mqueue filesystem on
//! /dev/mqueue), mounts its own **/proc** and a **devpts** instance of its own on /dev/pts (no host terminal in sight;
//! `/dev/ptmx` makes terminals there, and a terminal the command gets in place of the caller's is made there,
//! `stdio.rs`), makes the kernel's writable settings read-only (`/proc/sys`,
//! `/proc/sysrq-trigger`, `/proc/irq`, `/proc/bus`, `/proc/fs` and `/sys` with every mount below it: the command's uid
//! owns the sandbox's network namespace, and under root is the host's root for file permissions, so it could
//! otherwise turn IPv6 back on, or the host's sysctls and interrupt routing), mounts a **/dev/shm** of its own (the
//! host's POSIX shared memory out of sight), bind-mounts the given contents over `/etc/resolv.conf`, binds the
//! requested TCP listeners and UDP sockets and sends them to leash with `SCM_RIGHTS`, and until leash's go-ahead
//! hides `/dev/kmsg` (the host's kernel log), `/proc/keys` (the caller's keys by name) and the paths leash names (the
//! audit log) under an empty read-only file of the sandbox's own (never a host file such as /dev/null, which a
//! root command's `chown -R` would change), makes the host files leash reads during the run read-only (the hosts
//! file, trust roots), and **pins** every directory above those paths: each is bound onto itself, and `rename(2)`
//! refuses a mount point, so the command cannot move a directory away and put a file of its own where leash will
//! look; then it starts the command, which first enters a **second user namespace**
//! (mapping back to the caller's uid and gid, or the same full range), a **session** of its own (no controlling
//! terminal, its own process group) with a new **session keyring**, keeps only Docker's default **capabilities** but
//! `CAP_NET_RAW` in its bounding set with `no_new_privs` (`linux/caps.rs`), installs its **seccomp filter**, and
//! `execve`s. Before that, init has limited its user namespace to one child (the command's: a process in a new one
//! would hold every capability again) and covered each mount leash found of a filesystem showing host kernel objects
//! (a fresh mqueue, an empty tmpfs over another proc, read-only for cgroup, bpf, debugfs and the like:
//! `linux/kernel_fs.rs`).
//! That nesting is what makes
//! the set-up stick: the sandbox's mount and network namespaces belong to init's user namespace, so the command
//! cannot unmount the hidden paths, the resolv.conf or /proc, and it holds no capability over the sandbox's network
//! namespace (no `CAP_NET_RAW`, `CAP_NET_ADMIN`, `CAP_NET_BIND_SERVICE` there). The capabilities it keeps as root hold
//! only in its own namespace, and none of them makes a namespace or a mount. Any 127.0.0.0/8 address can be bound inside since the whole /8 is routed to `lo`.
//!
//! Init stays PID 1: it reaps orphans, makes the command's connections (below), forwards every signal it gets to
//! the command — a process's (leash's `Sandbox::signal`, or the SIGINT/SIGTERM/SIGHUP `forward_signals` passes on)
//! to the command, a terminal's (init shares leash's process group, the command does not) to the command's process
//! group, a terminal's stop as SIGSTOP — and when the command exits kills and reaps every process left in the pid
//! namespace, reports the command's status, and exits (tearing the namespaces down while leash goes on). It also
//! exits (ending the sandbox, whose processes the kernel then kills) if leash dies, and is killed by the kernel
//! (`PR_SET_PDEATHSIG`) when the thread that cloned it ends, even while busy. File descriptors other than stdio are
//! closed in init and marked close-on-exec for the command; stdio that is a socket is relayed, never handed over
//! (`stdio.rs`).
//!
//! # The self-test
//! With `SandboxSpec::self_test`, the command's process, once all of the above is in place, executes the caller's
//! self-test program first ([`self_test`]): it runs exactly as the command would, reports its verdict on a pipe the
//! caller reads (the only descriptor it inherits besides stdio), and executes the command when it passed. `start`
//! returns once the command's own `execve` succeeded; a self-test that found a way out ends the sandbox instead
//! ([`SandboxError::SelfTest`]), and the command never runs.
//!
//! # The seccomp filter, and Unix sockets
//! The filter (`linux/seccomp.rs` says each rule and why) refuses socket families that leave the network namespace
//! (`AF_VSOCK` reaches the hypervisor; only Unix, IPv4, IPv6 and netlink are allowed), Unix datagram sockets,
//! `TIOCSTI`/`TIOCLINUX`, io_uring, `request_key`, `add_key`, `keyctl` and `bpf`, and hands every `connect` to init. Init makes the connection
//! itself on a duplicate of the caller's socket, so what it checked is what is connected: a **filesystem Unix
//! socket** is reached only if it is named in `allow_unix_sockets` (the socket found there at start, held open,
//! while the path still names it) or listens in the sandbox's own network namespace (the command's own servers);
//! any other gets `ECONNREFUSED`, whatever path names
//! it — relative, linked into place, bound in another mount namespace, created after the sandbox started. Nothing
//! is looked for at start, so nothing can be missed. Abstract Unix sockets need nothing: they belong to a network
//! namespace, and the sandbox has its own. Costs: each `connect` is a round trip to init (microseconds); a
//! connection that would wait for a full backlog waits at most two seconds; 32-bit (i386, x32) system calls get
//! `ENOSYS`. Needs Linux 5.6 (user notification, `pidfd_getfd`, `openat2`); on an older kernel the command does not
//! start.
//!
//! # Threads and fork
//! `Sandbox::prepare` (and `spawn`) may be called from any thread of a multi-threaded process (a tokio runtime
//! included). All allocation happens before the raw `clone`; the child runs only raw system calls (no allocation, no
//! locks, no glibc `fork` handlers: it starts the command with `clone(CLONE_VM | CLONE_VFORK)` on a stack allocated
//! beforehand) until `execve`. The init is a copy of leash's memory at `prepare`; it is non-dumpable and its memory
//! belongs to leash's user namespace, so nothing in the sandbox can ptrace it or read `/proc/1/mem` — still, call
//! `prepare` before loading secrets where you can (`leash run` generates its CA after it).
//! Without root, init is dumpable for the few system calls that write its id maps (a non-dumpable process's /proc
//! files belong to root); nothing runs in the sandbox yet, but a same-user host process allowed to ptrace could
//! attach in that moment. With root, the command's memory (a copy of leash's, shared with the suspended init) is
//! dumpable for the one `setns` that joins its user namespace, which only root's own host processes could use.
//! While leash and init work side by side after the clone, init runs on leash's other CPUs (the scheduler would
//! queue it behind leash); it takes back the calling thread's affinity before the command starts, so the command
//! runs on exactly the CPUs of the thread that called `prepare`.
//! `Sandbox::forward_signals` installs process-wide handlers: don't also register SIGINT/SIGTERM/SIGHUP elsewhere
//! (for example with `tokio::signal`) while it is armed.
//!
//! # Another process's network namespace
//! `bind_in_netns` binds sockets inside the network namespace of a process leash did not start (a `--network none`
//! container's init, for `leash docker`): a dedicated thread `setns`es into it, refuses it unless it holds only `lo`
//! and is not leash's own, binds, and ends; the sockets stay in that namespace and leash serves them from its own.
//!
//! # What this crate does not do
//! It knows nothing of policies, HTTP or DNS: the caller serves the sockets (proxy, DNS stub, transparent
//! listeners), builds the command's whole environment and writes any CA bundle where the command can read it. It does
//! not restrict the filesystem beyond the hidden paths and the read-only kernel files above, nor limit resources.
#![warn(missing_docs)]

mod error;
#[cfg(target_os = "linux")]
mod linux;
mod memory;
#[cfg(unix)]
pub mod self_test;
mod stdio;
#[cfg(not(target_os = "linux"))]
mod unsupported;

#[cfg(target_os = "linux")]
use linux as imp;
/// The per-uid containment: a command as another uid behind a firewall in leash's own network namespace.
#[cfg(target_os = "linux")]
pub use linux::uid;
#[cfg(not(target_os = "linux"))]
use unsupported as imp;

pub use error::{SandboxError, Step};
pub use memory::release_free_memory;
pub use stdio::{relay_stdio, OwnLines, Prompter, StdioRelay, Terminal};

use std::ffi::OsString;
use std::net::{SocketAddrV4, TcpListener, UdpSocket};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::PathBuf;

/// What init hands leash: the TCP listeners, the UDP sockets, the master side of the command's pseudo-terminal.
pub(crate) type Handed = (Vec<TcpListener>, Vec<UdpSocket>, Option<OwnedFd>);

/// Most TCP listeners plus UDP sockets one sandbox hands out (bounds the SCM_RIGHTS buffer in the child).
pub const MAX_SOCKETS: usize = 16;

/// What to run and what to hand out. `Default` is an empty spec: no program, no environment, no sockets.
#[derive(Debug, Default)]
pub struct SandboxSpec {
    /// A path, or a name looked up on the `PATH` in `env` (else a standard default).
    pub program: OsString,
    /// Arguments after argv\[0\] (which is `program`).
    pub args: Vec<OsString>,
    /// The command's whole environment; leash's own is neither read nor changed.
    pub env: Vec<(OsString, OsString)>,
    /// Working directory; `None` keeps leash's.
    pub cwd: Option<PathBuf>,
    /// TCP listeners to bind inside, e.g. `127.0.0.1:3128`; returned in `Sandbox::tcp` in this order.
    pub tcp_listeners: Vec<SocketAddrV4>,
    /// UDP sockets to bind inside, e.g. `127.0.0.1:53`; returned in `Sandbox::udp` in this order.
    pub udp_sockets: Vec<SocketAddrV4>,
    /// Contents for /etc/resolv.conf inside (e.g. `nameserver 127.0.0.1`); `None` leaves the host's. Where the host
    /// has no /etc/resolv.conf nothing is mounted: glibc then asks 127.0.0.1 anyway.
    pub resolv_conf: Option<String>,
    /// Filesystem Unix sockets of the host's the command may connect to; it reaches no other but its own (see the
    /// crate docs).
    pub allow_unix_sockets: Vec<PathBuf>,
    /// Files the command must neither read nor write (the audit log): each is covered inside by an empty read-only
    /// file of the sandbox's own (a directory by an empty read-only tmpfs). Every directory above it is pinned (see
    /// the crate docs): the command can neither rename nor remove any of them, so the path leash uses keeps naming
    /// leash's file.
    pub hide_paths: Vec<PathBuf>,
    /// Host files leash reads while the command runs and that decide where it connects or whom it trusts (the hosts
    /// file, the resolver's configuration, trust roots): each is bound read-only onto itself inside (a directory with
    /// everything below it), and every directory above it pinned, so a command running as root cannot change them.
    pub read_only_paths: Vec<PathBuf>,
    /// Directories directly below the host's /dev/shm the command must still see once the sandbox has a /dev/shm of
    /// its own (the run's CA files, which leash writes there while the sandbox is set up): each is shown read-only at
    /// the same path inside. At most four.
    pub keep_in_shm: Vec<PathBuf>,
    /// The uid and gid the command runs as, inside its user namespace (which maps them to the same host ids): no
    /// supplementary group, no capability. Only where leash is root (an unprivileged leash maps one id); `None` keeps
    /// the caller's.
    pub run_as: Option<(u32, u32)>,
    /// The command's stdin; `None` inherits leash's. Never a socket (see [`relay_stdio`]).
    pub stdin: Option<OwnedFd>,
    /// The command's stdout; `None` inherits leash's.
    pub stdout: Option<OwnedFd>,
    /// The command's stderr; `None` inherits leash's.
    pub stderr: Option<OwnedFd>,
    /// A containment self-test to run in the command's place first, as the command would run ([`self_test`]): the
    /// command starts only once it passed. `None`: the command starts at once.
    #[cfg(unix)]
    pub self_test: Option<self_test::SelfTest>,
    /// A pseudo-terminal for the command, made by init in the sandbox's devpts: its controlling terminal, in the
    /// session of its own it starts (`TIOCSCTTY`), and the stdio it stands in for; [`relay_stdio`] asks for one when
    /// leash's stdio is a terminal, and [`StdioRelay::attach`] relays it. `None`: no controlling terminal.
    pub terminal: Option<Terminal>,
}

impl SandboxSpec {
    /// A spec that runs `program` with no arguments and an empty environment.
    pub fn new(program: impl Into<OsString>) -> Self {
        SandboxSpec { program: program.into(), ..SandboxSpec::default() }
    }
}

/// How the command ended. `code()` is what leash exits with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// It called `exit` with this status.
    Exited(i32),
    /// A signal ended it.
    Signaled(i32),
}

impl ExitStatus {
    /// The shell's convention: the exit status, or 128 + the signal number.
    pub fn code(self) -> i32 {
        match self {
            ExitStatus::Exited(code) => code,
            ExitStatus::Signaled(signal) => 128 + signal,
        }
    }
}

/// A running sandbox. Dropping it without `wait` kills everything in it.
#[derive(Debug)]
pub struct Sandbox {
    /// The TCP listeners bound inside, in `SandboxSpec::tcp_listeners` order, in blocking mode (call
    /// `set_nonblocking(true)` before handing one to tokio).
    pub tcp: Vec<TcpListener>,
    /// The UDP sockets bound inside, in `SandboxSpec::udp_sockets` order.
    pub udp: Vec<UdpSocket>,
    /// The master side of the command's pseudo-terminal (`SandboxSpec::terminal`), until `StdioRelay::attach` takes it.
    terminal: Option<OwnedFd>,
    child: imp::Child,
}

/// A sandbox being set up: its init builds the namespaces while the caller prepares what the command will need
/// (files its environment names, say). The command starts only at [`PendingSandbox::start`]; dropping this value
/// instead ends the init, and nothing ever ran.
#[derive(Debug)]
pub struct PendingSandbox {
    inner: imp::Pending,
}

impl PendingSandbox {
    /// Hides the paths asked for, binds the sockets inside, and starts the command. Returns once the command's
    /// `execve` succeeded; on any error nothing runs and nothing is left behind.
    pub fn start(self) -> Result<Sandbox, SandboxError> {
        self.start_with(|| ()).map(|(sandbox, ())| sandbox)
    }

    /// [`PendingSandbox::start`], running `meanwhile` in this thread while the init starts the command (after the
    /// go-ahead, before the command's `execve` is confirmed). Its result is dropped if the start fails.
    pub fn start_with<T>(self, meanwhile: impl FnOnce() -> T) -> Result<(Sandbox, T), SandboxError> {
        let (child, (tcp, udp, terminal), value) = self.inner.start_with(meanwhile)?;
        Ok((Sandbox { tcp, udp, terminal, child }, value))
    }
}

impl Sandbox {
    /// Sets up the namespaces, binds the sockets inside, and starts the command: [`Sandbox::prepare`] then
    /// [`PendingSandbox::start`]. Returns once the command's `execve` succeeded; on any error nothing runs and
    /// nothing is left behind.
    pub fn spawn(spec: SandboxSpec) -> Result<Sandbox, SandboxError> {
        Sandbox::prepare(spec)?.start()
    }

    /// Clones the sandbox's init, which starts building the namespaces; returns without waiting for it. A failure the init meets is reported by `start`. Everything the
    /// command needs from outside (its environment, its program) is fixed here.
    ///
    /// The sandbox ends (every process in it killed) when the thread that called this exits, as when leash dies:
    /// keep that thread until the sandbox has been waited for. A stdin, stdout or stderr that is a socket is refused
    /// (see [`relay_stdio`]).
    pub fn prepare(spec: SandboxSpec) -> Result<PendingSandbox, SandboxError> {
        stdio::check_no_socket(&spec)?;
        imp::prepare(spec).map(|inner| PendingSandbox { inner })
    }

    /// The host pid of the sandbox's init (the command's parent, PID 1 inside).
    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// The master side of the command's pseudo-terminal, once.
    pub(crate) fn take_terminal(&mut self) -> Option<OwnedFd> {
        self.terminal.take()
    }

    /// Sends `signal` to the command (through init). A no-op once the sandbox has been waited for.
    pub fn signal(&self, signal: i32) -> Result<(), SandboxError> {
        self.child.signal(signal)
    }

    /// Until the guard drops, SIGINT, SIGTERM and SIGHUP sent to leash by a process are forwarded to the command.
    /// A SIGINT from the terminal is not forwarded (the init, in leash's process group, got it too and passes it on)
    /// but no longer kills leash, so leash outlives the command and reports its status.
    pub fn forward_signals(&self) -> Result<SignalForwarding, SandboxError> {
        imp::forward_signals(&self.child).map(|inner| SignalForwarding { _inner: inner })
    }

    /// Blocks until the command exits and every other process in the sandbox is gone; returns the command's status.
    /// Safe to call from one thread while another calls `signal`; later calls return the same status. The init may
    /// still be tearing the namespaces down: dropping the sandbox waits for that (see [`Sandbox::detach`]).
    pub fn wait(&self) -> Result<ExitStatus, SandboxError> {
        self.child.wait()
    }

    /// A descriptor that becomes readable when the sandbox has ended, for an event loop to watch: [`Sandbox::wait`]
    /// then returns at once. Only poll it; reading it is `wait`'s.
    pub fn exit_fd(&self) -> BorrowedFd<'_> {
        self.child.exit_fd()
    }

    /// [`Sandbox::wait`] on a tokio runtime, without a thread blocked aside: the runtime watches [`Sandbox::exit_fd`].
    #[cfg(feature = "tokio")]
    pub async fn wait_async(&self) -> Result<ExitStatus, SandboxError> {
        let fd = self.exit_fd();
        let watch = |source: std::io::Error| SandboxError::Control { what: "watch", source };
        // SAFETY: a `BorrowedFd` is open, and names the same open file, for as long as the `AsyncFd` that holds it
        // (both live in this call, within the borrow of `self`).
        let ended = unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
            .map_err(|e| watch(e.into()))?;
        ended.readable().await.map_err(watch)?.retain_ready();
        drop(ended);
        self.wait()
    }

    /// Drops an ended sandbox without waiting for its init to finish exiting (tearing down its namespaces takes a
    /// few hundred microseconds): for a process about to exit, after [`Sandbox::wait`] returned. The init is then a
    /// zombie until this process exits, when the kernel hands it to a reaper. Before `wait` returned, this is a plain
    /// drop: the sandbox is ended and its init reaped.
    pub fn detach(self) {
        self.child.detach()
    }
}

/// Armed signal forwarding (see `Sandbox::forward_signals`); dropping it restores the previous handlers.
#[derive(Debug)]
pub struct SignalForwarding {
    _inner: imp::Forwarding,
}

/// Sockets bound inside another process's network namespace by [`bind_in_netns`], in the order asked, in blocking
/// mode.
#[derive(Debug)]
pub struct NetnsSockets {
    /// The TCP listeners.
    pub tcp: Vec<TcpListener>,
    /// The UDP sockets.
    pub udp: Vec<UdpSocket>,
}

/// A network namespace leash did not make: a process's, or one a path names (`/run/netns/NAME`, a bind mount,
/// `/proc/PID/ns/net`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Netns {
    /// The namespace process `pid` is in (through `/proc/PID/ns/net`, checked to still be that process's).
    Process(u32),
    /// The namespace a file names.
    Path(PathBuf),
}

impl Netns {
    /// The namespace's file.
    pub fn file(&self) -> PathBuf {
        match self {
            Netns::Process(pid) => PathBuf::from(format!("/proc/{pid}/ns/net")),
            Netns::Path(path) => path.clone(),
        }
    }
}

impl std::fmt::Display for Netns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Netns::Process(pid) => write!(f, "of process {pid}"),
            Netns::Path(path) => write!(f, "`{}`", path.display()),
        }
    }
}

/// What a namespace leash serves may hold besides `lo` (see [`bind_in`]). The default: nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Isolation {
    /// Interfaces expected there (a microVM's tap, a pod's veth): any other is refused.
    pub interfaces: Vec<String>,
    /// Serve even with a route out or an IPv6 address other than link-local, because something else drops that
    /// traffic (a Kubernetes NetworkPolicy, a firewall): leash then cannot vouch for being the only way out.
    pub allow_routes: bool,
}

/// Binds TCP listeners and UDP sockets inside `netns`, for leash to serve from its own namespace. A dedicated thread
/// enters the namespace, refuses it ([`SandboxError::NotIsolated`]) if it is leash's own, holds an interface other
/// than `lo` and those `isolation` names, or (unless `isolation.allow_routes`) has a route out — a default route
/// or one through a gateway, in any table — or an IPv6 address other than link-local; then binds, and ends. Needs
/// root (`CAP_SYS_ADMIN` to enter the namespace).
pub fn bind_in(
    netns: &Netns,
    isolation: &Isolation,
    tcp: &[SocketAddrV4],
    udp: &[SocketAddrV4],
) -> Result<NetnsSockets, SandboxError> {
    imp::bind_in(netns, isolation, tcp, udp).map(|(tcp, udp)| NetnsSockets { tcp, udp })
}

/// The device and inode of `netns` now: a different pair (or an error) later means the path no longer names it,
/// or the process is gone.
pub fn netns_id(netns: &Netns) -> Result<(u64, u64), SandboxError> {
    imp::netns_id(netns)
}

/// Binds TCP listeners and UDP sockets inside the network namespace of process `pid` (a `--network none`
/// container's init, say), for leash to serve from its own namespace. A dedicated thread enters the namespace,
/// refuses it unless it holds no interface but `lo` and is not leash's own ([`SandboxError::NotIsolated`]), binds,
/// and ends. Needs root (`CAP_SYS_ADMIN` to enter the namespace).
pub fn bind_in_netns(pid: u32, tcp: &[SocketAddrV4], udp: &[SocketAddrV4]) -> Result<NetnsSockets, SandboxError> {
    imp::bind_in_netns(pid, tcp, udp).map(|(tcp, udp)| NetnsSockets { tcp, udp })
}

/// Runs `work` on a dedicated thread that has entered `netns` (refused if it is leash's own), and returns its result;
/// the thread ends with `work`, so no other thread of leash works in that namespace. Needs `CAP_SYS_ADMIN`.
pub fn run_in_netns<T: Send + 'static>(
    netns: &Netns,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, SandboxError> {
    imp::run_in_netns(netns, work)
}

/// The TCP listeners of the calling thread's network namespace, IPv4 and IPv6, at their bound addresses (a wildcard
/// as `0.0.0.0` or `::`), as the kernel's `sock_diag` lists them: only its table of listeners is walked, where
/// reading `/proc/net/tcp` walks every TCP socket of every namespace (milliseconds on a busy host).
pub fn tcp_listeners() -> std::io::Result<Vec<std::net::SocketAddr>> {
    imp::tcp_listeners()
}

/// The interfaces of the network namespace of process `pid`, as listed from inside it.
pub fn netns_interfaces(pid: u32) -> Result<Vec<String>, SandboxError> {
    imp::netns_interfaces(pid)
}

/// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread until the returned guard is dropped. Take it before
/// [`Sandbox::spawn`] (or [`PendingSandbox::start`]) and drop it once [`Sandbox::forward_signals`] is armed: a signal
/// sent in between (the command may already be running) then waits, and is forwarded, instead of ending leash with
/// its default action. Call it while the calling thread is the process's only one (else another thread takes the
/// signal). The sandbox's init sets its own mask, so the command starts with none blocked.
pub fn hold_forwarded_signals() -> Result<SignalHold, SandboxError> {
    imp::hold_forwarded_signals().map(|inner| SignalHold { _inner: inner })
}

/// Held signals (see [`hold_forwarded_signals`]); dropping it restores the thread's previous mask, delivering them.
#[derive(Debug)]
pub struct SignalHold {
    _inner: imp::Hold,
}

/// Where short-lived files for a sandbox's command go (the resolv.conf to mount, `leash run`'s CA files): /dev/shm
/// where it is a directory, a tmpfs, since creating and removing files on a disk filesystem's /tmp was a measurable
/// part of a start; `TMPDIR`, when set, is the user's choice and wins; else the temporary directory.
pub fn scratch_dir() -> PathBuf {
    match std::env::var_os("TMPDIR") {
        None if std::path::Path::new("/dev/shm").is_dir() => PathBuf::from("/dev/shm"),
        _ => std::env::temp_dir(),
    }
}

/// Lets `SIGPIPE` end the process, as it ends other Unix filters (`leash explain ... | head -1`): Rust ignores it, so
/// printing to a closed pipe would panic instead. Only for commands that do nothing but print: a proxy must see a
/// closed socket as an error, never die of it.
pub fn die_on_closed_stdout() {
    imp::die_on_closed_stdout();
}

/// Makes leash non-dumpable (`PR_SET_DUMPABLE` 0): no core dumps, and only a process with `CAP_SYS_PTRACE` over
/// leash's user namespace may ptrace it or read its `/proc/PID/mem`. Call it first thing in `main`.
pub fn harden_self() -> Result<(), SandboxError> {
    imp::harden_self()
}
