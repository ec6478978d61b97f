//! The sandbox's one error type. Every failure names the step of the set-up that failed (`Step`), the OS error, and
//! what the user can do about it, so `leash run` can print it as it is and exit without running the command.

use std::ffi::OsString;
use std::fmt;
use std::io;
use std::net::SocketAddrV4;
use std::path::PathBuf;

/// Why a sandbox could not be started or waited for. Whenever `Sandbox::spawn` returns one, the command never ran.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// This platform has no sandbox backend yet.
    #[error("the sandbox is not supported on {os}: `leash run` needs Linux namespaces for now")]
    Unsupported {
        /// The target's `std::env::consts::OS`.
        os: &'static str,
    },
    /// The spec asks for something the sandbox cannot do (a NUL byte in an argument, too many sockets).
    #[error("invalid sandbox spec: {0}")]
    InvalidSpec(String),
    /// The program is neither a path nor found on the child's `PATH`.
    #[error("cannot run `{}`: not found on the command's PATH `{}`", program.to_string_lossy(), path.to_string_lossy())]
    ProgramNotFound {
        /// The program as given.
        program: OsString,
        /// The `PATH` searched (the child's, else a default).
        path: OsString,
    },
    /// One step of the isolation failed; the message says which and how to fix it.
    #[error("cannot {step}: {source}{}", hint(step, source))]
    Setup {
        /// What was being done.
        step: Step,
        /// The OS error.
        source: io::Error,
    },
    /// The sandbox's init ended before it reported the command started.
    #[error("the sandbox's init ended before the command started ({0})")]
    InitDied(String),
    /// The containment self-test (`SandboxSpec::self_test`) found a way out of the sandbox, or ended without a
    /// verdict: the command did not run. The text says which probe got through.
    #[error("the containment self-test, run as the command in the sandbox, {0}")]
    SelfTest(String),
    /// A network namespace to bind in (`bind_in`, `bind_in_netns`) is not isolated: it is leash's own, or it holds
    /// an interface, a route out or an address that would give it another way out than leash's listener.
    #[error("the network namespace {netns} is not isolated: {why}")]
    NotIsolated {
        /// Which namespace.
        netns: crate::Netns,
        /// What was found.
        why: String,
    },
    /// Waiting for or signalling the sandbox failed.
    #[error("cannot {what} the sandbox: {source}")]
    Control {
        /// `wait for`, `signal`.
        what: &'static str,
        /// The OS error.
        source: io::Error,
    },
}

/// A step of setting up the sandbox, in the order they run. The `Display` form reads after "cannot ".
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Step {
    /// Writing the resolv.conf contents to a temporary file to bind-mount.
    WriteResolvConf(PathBuf),
    /// The socketpair between leash and the sandbox's init.
    CreateChannel,
    /// `clone` with `CLONE_NEWUSER | CLONE_NEWPID`.
    CreateUserNamespace,
    /// Closing the file descriptors the init inherited from leash.
    CloseInheritedFds,
    /// Making the init non-dumpable.
    HardenInit,
    /// Making leash itself non-dumpable (`harden_self`).
    HardenLeash,
    /// `setgroups`, `uid_map`, `gid_map` of the sandbox's user namespace (written by init, or by leash as root).
    MapIds(&'static str),
    /// `unshare(CLONE_NEWNS)` and making every mount private.
    CreateMountNamespace,
    /// `unshare(CLONE_NEWNET)`.
    CreateNetworkNamespace,
    /// Mounting the pid namespace's own /proc.
    MountProc,
    /// Setting `lo` up.
    LoopbackUp,
    /// `net.ipv6.conf.all.disable_ipv6` in the sandbox's network namespace.
    DisableIpv6,
    /// Making /proc/sys, /proc/sysrq-trigger or /sys read-only in the sandbox.
    MakeReadOnly(&'static str),
    /// Bind-mounting the resolv.conf contents over /etc/resolv.conf.
    MountResolvConf,
    /// Receiving from leash the paths to hide and the word to start the command.
    AwaitLeash,
    /// Covering a path the command must not reach (the audit log, `/dev/kmsg`) with an empty read-only file of the
    /// sandbox's own.
    HidePath(PathBuf),
    /// Making a host file leash reads during the run (the hosts file, trust roots) read-only in the sandbox.
    ReadOnlyPath(PathBuf),
    /// Pinning a directory above a path leash reads or writes during the run, so the command cannot rename it.
    PinDirectory(PathBuf),
    /// Mounting the sandbox's own /dev/shm (POSIX shared memory).
    MountShm,
    /// Programming the per-uid firewall (`uid::Firewall`).
    ProgramFirewall,
    /// Mapping the user the command runs as (`SandboxSpec::run_as`).
    MapOtherUser,
    /// Giving the init back leash's CPU affinity (it ran on leash's other CPUs while both built the sandbox), so the
    /// command inherits it.
    RestoreCpuAffinity,
    /// Binding a TCP listener inside the sandbox.
    BindTcp(SocketAddrV4),
    /// Binding a UDP socket inside the sandbox.
    BindUdp(SocketAddrV4),
    /// Handing the sockets to leash over SCM_RIGHTS.
    HandOverSockets,
    /// Blocking signals and creating the init's signalfd.
    InitSignals,
    /// Mapping the stack the command is cloned onto.
    MapCommandStack,
    /// Forking the command off the sandbox's init.
    ForkCommand,
    /// The command's own user namespace (which leaves it no capability over the sandbox's mounts and network).
    CreateCommandNamespace,
    /// `uid_map` and friends of the command's user namespace.
    MapCommandIds(&'static str),
    /// Putting the given stdin/stdout/stderr in place.
    RedirectStdio,
    /// `chdir` into the requested working directory.
    ChangeDir(PathBuf),
    /// `execve` of the command.
    Exec(PathBuf),
    /// Starting the containment self-test in the command's place (`SandboxSpec::self_test`).
    StartSelfTest,
    /// Opening a network namespace (`/proc/PID/ns/net`, or a path such as `/run/netns/NAME`).
    OpenNetns(crate::Netns),
    /// `setns` into another network namespace.
    EnterNetns(crate::Netns),
    /// Listing the interfaces of a network namespace.
    ListInterfaces,
    /// `unshare(CLONE_NEWIPC)`.
    CreateIpcNamespace,
    /// Mounting the IPC namespace's own mqueue filesystem on /dev/mqueue.
    MountMqueue,
    /// `setsid` for the command.
    NewSession,
    /// A new session keyring for the command.
    NewKeyring,
    /// Installing the command's seccomp filter.
    InstallSeccomp,
    /// Handing the seccomp filter's listener to init.
    HandOverSeccompListener,
    /// Checking that init can take a descriptor of the command's (`pidfd_getfd`).
    ProbePidfdGetfd,
    /// Dropping the command's capabilities but the kept ones from its bounding set, and setting `no_new_privs`.
    DropCapabilities,
    /// Letting no process inside create a user namespace beyond the command's (`user.max_user_namespaces`).
    LimitUserNamespaces,
    /// Reading leash's mount table for the mounts that show host kernel objects.
    ReadMountTable,
    /// Covering a mount that shows host kernel objects (a fresh filesystem on top, or read-only).
    CoverKernelMount(PathBuf),
    /// Mounting the sandbox's own devpts instance on /dev/pts.
    MountDevpts,
    /// Making the command's pseudo-terminal in the sandbox's devpts.
    OpenTerminal,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::WriteResolvConf(p) => write!(f, "write the sandbox's resolv.conf to `{}`", p.display()),
            Step::CreateChannel => f.write_str("create the socketpair to the sandbox"),
            Step::CreateUserNamespace => f.write_str("create a user namespace (with its pid namespace)"),
            Step::CloseInheritedFds => f.write_str("close the file descriptors inherited from leash"),
            Step::HardenInit => f.write_str("make the sandbox's init non-dumpable"),
            Step::HardenLeash => f.write_str("make leash non-dumpable"),
            Step::MapIds(file) => write!(f, "write the sandbox's /proc/self/{file}"),
            Step::CreateMountNamespace => f.write_str("create a private mount namespace"),
            Step::CreateNetworkNamespace => f.write_str("create a network namespace"),
            Step::MountProc => f.write_str("mount the sandbox's own /proc"),
            Step::LoopbackUp => f.write_str("set the sandbox's loopback interface up"),
            Step::DisableIpv6 => f.write_str("disable IPv6 in the sandbox's network namespace"),
            Step::MakeReadOnly(path) => write!(f, "make `{path}` read-only in the sandbox"),
            Step::MountResolvConf => f.write_str("bind-mount the sandbox's /etc/resolv.conf"),
            Step::AwaitLeash => f.write_str("receive the paths to hide and the go-ahead from leash"),
            Step::HidePath(p) => write!(f, "hide `{}` in the sandbox", p.display()),
            Step::ReadOnlyPath(p) => write!(f, "make `{}` read-only in the sandbox", p.display()),
            Step::PinDirectory(p) => write!(f, "pin the directory `{}` in the sandbox", p.display()),
            Step::MountShm => f.write_str("mount the sandbox's own /dev/shm"),
            Step::ProgramFirewall => f.write_str("program the per-uid firewall"),
            Step::MapOtherUser => f.write_str("map the command's user into its user namespace"),
            Step::RestoreCpuAffinity => f.write_str("give the sandbox's init back leash's CPU affinity"),
            Step::BindTcp(a) => write!(f, "bind TCP `{a}` inside the sandbox"),
            Step::BindUdp(a) => write!(f, "bind UDP `{a}` inside the sandbox"),
            Step::HandOverSockets => f.write_str("hand the sandbox's sockets to leash"),
            Step::InitSignals => f.write_str("set up signal handling in the sandbox's init"),
            Step::MapCommandStack => f.write_str("map the stack the command is cloned onto"),
            Step::ForkCommand => f.write_str("fork the command inside the sandbox"),
            Step::CreateCommandNamespace => f.write_str("create the command's user namespace"),
            Step::MapCommandIds(file) => write!(f, "write the command's /proc/self/{file}"),
            Step::RedirectStdio => f.write_str("set up the command's stdin, stdout and stderr"),
            Step::ChangeDir(p) => write!(f, "change to the working directory `{}`", p.display()),
            Step::Exec(p) => write!(f, "run `{}`", p.display()),
            Step::StartSelfTest => f.write_str(
                "start the containment self-test as the command (leash's program must be executable by its user)",
            ),
            Step::OpenNetns(netns) => write!(f, "open the network namespace {netns}"),
            Step::EnterNetns(netns) => write!(f, "enter the network namespace {netns}"),
            Step::ListInterfaces => f.write_str("list the network namespace's interfaces, routes and addresses"),
            Step::CreateIpcNamespace => f.write_str("create an IPC namespace"),
            Step::MountMqueue => f.write_str("mount the sandbox's own /dev/mqueue"),
            Step::NewSession => f.write_str("start the command in a session of its own"),
            Step::NewKeyring => f.write_str("give the command a session keyring of its own"),
            Step::InstallSeccomp => f.write_str("install the command's seccomp filter"),
            Step::HandOverSeccompListener => f.write_str("hand the seccomp filter's listener to the sandbox's init"),
            Step::ProbePidfdGetfd => f.write_str("take a descriptor of another process (pidfd_getfd)"),
            Step::DropCapabilities => f.write_str("drop the command's capabilities and set no_new_privs"),
            Step::LimitUserNamespaces => f.write_str("keep the command from creating user namespaces"),
            Step::ReadMountTable => f.write_str("read leash's mount table (/proc/self/mountinfo)"),
            Step::CoverKernelMount(p) => write!(f, "cover the kernel filesystem mounted on `{}`", p.display()),
            Step::MountDevpts => f.write_str("mount the sandbox's own devpts on /dev/pts"),
            Step::OpenTerminal => f.write_str("make the command's pseudo-terminal in the sandbox's /dev/pts"),
        }
    }
}

/// What to tell the user beyond the OS error, starting with "; " when there is something to say.
fn hint(step: &Step, source: &io::Error) -> &'static str {
    let denied = matches!(source.raw_os_error(), Some(libc::EPERM | libc::EACCES));
    match step {
        Step::CreateUserNamespace => match source.raw_os_error() {
            Some(libc::ENOSPC) => "; the user namespace limit is reached: raise `user.max_user_namespaces`",
            Some(libc::EINVAL | libc::ENOSYS) => {
                "; this kernel lacks user or pid namespaces (CONFIG_USER_NS, CONFIG_PID_NS)"
            }
            _ => {
                "; enable unprivileged user namespaces (`sysctl kernel.unprivileged_userns_clone=1`, \
                 `user.max_user_namespaces` > 0, on Ubuntu `kernel.apparmor_restrict_unprivileged_userns=0`) \
                 or run as root; in a container, allow namespace creation in its seccomp profile"
            }
        },
        Step::MapOtherUser => {
            "; an unprivileged leash maps one id only: another user for the command needs leash as root"
        }
        Step::MountProc if denied => {
            "; the host's /proc is partly hidden (as in a default container): run the container with \
             `--security-opt systempaths=unconfined` or give leash an unmasked /proc"
        }
        Step::CreateMountNamespace | Step::CreateNetworkNamespace | Step::CreateCommandNamespace if denied => {
            "; namespaces are restricted here (seccomp, AppArmor or a container runtime): allow them or run on the host"
        }
        Step::MapIds(_) | Step::MapCommandIds(_) if denied => {
            "; the kernel refused the uid/gid mapping: check AppArmor or LSM user namespace restrictions"
        }
        Step::OpenNetns(crate::Netns::Process(_)) if source.kind() == io::ErrorKind::NotFound => {
            "; the process has exited"
        }
        Step::OpenNetns(crate::Netns::Path(_)) if source.kind() == io::ErrorKind::NotFound => {
            "; no such file (`ip netns list` names the namespaces under /run/netns)"
        }
        Step::OpenNetns(_) | Step::EnterNetns(_) if denied => {
            "; entering another process's network namespace needs root (CAP_SYS_ADMIN and CAP_SYS_PTRACE)"
        }
        Step::BindTcp(_) | Step::BindUdp(_) => "; pass a loopback address (127.0.0.0/8) that no other socket uses",
        Step::InstallSeccomp | Step::ProbePidfdGetfd if source.raw_os_error() == Some(libc::ENOSYS) => {
            "; leash confines the command's connections with seccomp user notification and pidfd_getfd, which need \
             Linux 5.6 or later; without them it does not run the command"
        }
        Step::InstallSeccomp | Step::ProbePidfdGetfd if denied => {
            "; a seccomp filter or pidfd_getfd is refused here (a container's seccomp profile, or Yama's \
             ptrace_scope 3): allow them, or run leash on the host"
        }
        _ => "",
    }
}

impl SandboxError {
    /// True when this platform refuses what the user-namespace sandbox needs: namespaces (see
    /// [`SandboxError::is_unavailable`]), or the seccomp user notification and `pidfd_getfd` its connects go through
    /// (a container's seccomp profile refuses `pidfd_getfd` without `CAP_SYS_PTRACE`). Another containment may do.
    pub fn is_refused_here(&self) -> bool {
        let seccomp_refused = match self {
            SandboxError::Setup { step: Step::InstallSeccomp | Step::ProbePidfdGetfd, source } => {
                matches!(source.raw_os_error(), Some(libc::EPERM | libc::EACCES | libc::ENOSYS))
            }
            _ => false,
        };
        seccomp_refused || self.is_unavailable()
    }

    /// True when the error means the kernel or platform refuses namespaces at all (tests skip on this).
    pub fn is_unavailable(&self) -> bool {
        match self {
            SandboxError::Unsupported { .. } => true,
            SandboxError::Setup { step, source } => {
                let refused = matches!(
                    source.raw_os_error(),
                    Some(libc::EPERM | libc::EACCES | libc::ENOSPC | libc::EINVAL | libc::ENOSYS)
                );
                refused
                    && matches!(
                        step,
                        Step::CreateUserNamespace
                            | Step::MapIds(_)
                            | Step::MapOtherUser
                            | Step::CreateMountNamespace
                            | Step::CreateNetworkNamespace
                            | Step::MountProc
                            | Step::CreateCommandNamespace
                            | Step::MapCommandIds(_)
                    )
            }
            _ => false,
        }
    }
}
