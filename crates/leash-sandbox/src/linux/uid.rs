//! The per-uid containment, for where leash cannot make namespaces (a container without `CAP_SYS_ADMIN` or user
//! namespaces, a hosted sandbox): the command shares leash's network namespace and runs as another uid, and a
//! firewall in that namespace lets that uid reach exactly leash's listeners on the loopback, nothing else, over both
//! address families. This module runs a program as such a uid ([`RunAs`]), programs and removes the firewall
//! ([`Firewall`]) and says what the process may do ([`Capabilities`]). Knows nothing of policies: the ports come in.
//!
//! The firewall is programmed with the system's tools, `nft` where it works, else `iptables` and `ip6tables` (gVisor
//! has no nftables; its iptables matches the owner). The rules match the uid in the `output` hook: its packets to
//! 127.0.0.1 on leash's TCP and UDP ports are accepted; every other TCP packet it sends is rejected with an ICMP
//! "administratively prohibited" (its `connect` fails at once with `EHOSTUNREACH`; a plain drop would leave it
//! retrying until it times out, which a self-test could not tell from a packet that left), and every other packet
//! dropped (a local sender gets `EPERM` at once). Both rules count what they stop ([`Firewall::stopped`]), so the
//! self-test can check that its probes were stopped by these rules and by nothing else. Replies from leash's
//! sockets are leash's, not the uid's. The uid holds no capability, so it can neither list nor flush the rules.

use std::ffi::OsStr;
use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use super::{seccomp, sys};
use crate::SandboxError;

/// What leash may do here, as far as containment goes: read from its effective capabilities and user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// leash's effective uid is 0.
    pub root: bool,
    /// `CAP_NET_ADMIN`: a firewall can be programmed.
    pub net_admin: bool,
    /// `CAP_SYS_ADMIN`: namespaces and mounts can be made without a user namespace.
    pub sys_admin: bool,
    /// `CAP_SETUID` and `CAP_SETGID`: a program can be run as another user.
    pub set_ids: bool,
}

/// `CAP_SETGID`, `CAP_SETUID`, `CAP_NET_ADMIN`, `CAP_SYS_ADMIN` (linux/capability.h).
const CAP_SETGID: u32 = 6;
const CAP_SETUID: u32 = 7;
const CAP_NET_ADMIN: u32 = 12;
const CAP_SYS_ADMIN: u32 = 21;

impl Capabilities {
    /// leash's own.
    pub fn of_self() -> Capabilities {
        let caps = sys::effective_caps().unwrap_or(0);
        let has = |cap: u32| caps & (1 << cap) != 0;
        Capabilities {
            // SAFETY: geteuid cannot fail and touches no memory.
            root: unsafe { libc::geteuid() } == 0,
            net_admin: has(CAP_NET_ADMIN),
            sys_admin: has(CAP_SYS_ADMIN),
            set_ids: has(CAP_SETUID) && has(CAP_SETGID),
        }
    }
}

/// A user to run the command as: never root, never leash's own uid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunAs {
    /// The uid (real, effective, saved).
    pub uid: u32,
    /// The gid (real, effective, saved); no supplementary group.
    pub gid: u32,
}

impl RunAs {
    /// [`RunAs::apply`], in `netns` and, with `resolv_conf` (a file's path), in a mount namespace of its own whose
    /// /etc/resolv.conf is that file (the DNS stub in `netns`), which nothing else sees.
    pub fn apply_in(self, cmd: &mut Command, netns: &OwnNetns, resolv_conf: Option<std::ffi::CString>) {
        use std::os::fd::AsRawFd;
        let fd = netns.fd.as_raw_fd();
        // SAFETY: the closure runs in the forked child before `execve` and makes only async-signal-safe system calls
        // on memory prepared before the fork (`resolv_conf`); `fd` stays open in the parent until after the spawn.
        unsafe {
            cmd.pre_exec(move || {
                let fail = |errno: libc::c_int| io::Error::from_raw_os_error(errno);
                if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                    return Err(io::Error::last_os_error());
                }
                if let Some(source) = &resolv_conf {
                    sys::unshare(libc::CLONE_NEWNS).map_err(fail)?;
                    sys::mount(None, c"/", None, libc::MS_REC | libc::MS_PRIVATE).map_err(fail)?;
                    sys::mount(Some(source), c"/etc/resolv.conf", None, libc::MS_BIND).map_err(fail)?;
                }
                Ok(())
            });
        }
        self.apply(cmd);
    }

    /// `cmd` set to run as this user: no supplementary groups, the gid, then the uid (which drops every capability),
    /// `no_new_privs` (a set-uid program or a sudoers entry gains nothing), and the sandbox's seccomp filter without
    /// its connect hand-over (netfilter decides connections here; the filter still refuses `AF_VSOCK` and the other
    /// families that leave the namespace, Unix datagrams, terminal injection, io_uring and keyrings). The command
    /// starts a session of its own (no controlling terminal to inject into, its own process group).
    pub fn apply(self, cmd: &mut Command) {
        let filter = seccomp::program_without_connect_notify();
        let RunAs { uid, gid } = self;
        // SAFETY: the closure runs in the forked child before `execve` and makes only async-signal-safe system
        // calls on memory prepared before the fork (`filter`).
        unsafe {
            cmd.pre_exec(move || {
                let fail = |what: &str| io::Error::new(io::Error::last_os_error().kind(), what.to_owned());
                let check = |ret: libc::c_int, what: &str| if ret == 0 { Ok(()) } else { Err(fail(what)) };
                check(libc::setsid().min(0), "setsid")?;
                check(libc::setgroups(0, std::ptr::null()), "setgroups")?;
                check(libc::setresgid(gid, gid, gid), "setresgid")?;
                check(libc::setresuid(uid, uid, uid), "setresuid")?;
                check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")?;
                sys::install_plain_filter(&filter).map_err(io::Error::from_raw_os_error)
            })
        };
    }
}

/// A network namespace of leash's own making, holding only `lo` (up): where leash is root with `CAP_SYS_ADMIN` and
/// `CAP_NET_ADMIN` but cannot make a user namespace (a container's default seccomp profile), the command runs in it
/// as another uid ([`RunAs::apply_in`]) and leash serves its sockets there, as `leash attach` serves a namespace it
/// did not make. The namespace lives while this value does.
#[derive(Debug)]
pub struct OwnNetns {
    fd: std::os::fd::OwnedFd,
}

impl OwnNetns {
    /// Makes the namespace, from a thread of its own (the rest of leash stays in its namespace).
    pub fn create() -> Result<OwnNetns, SandboxError> {
        let made = std::thread::spawn(|| -> Result<std::os::fd::OwnedFd, (crate::Step, io::Error)> {
            let step = |step: crate::Step| move |errno: libc::c_int| (step, io::Error::from_raw_os_error(errno));
            sys::unshare(libc::CLONE_NEWNET).map_err(step(crate::Step::CreateNetworkNamespace))?;
            sys::loopback_up().map_err(step(crate::Step::LoopbackUp))?;
            let file = std::fs::File::open("/proc/thread-self/ns/net")
                .map_err(|e| (crate::Step::CreateNetworkNamespace, e))?;
            Ok(file.into())
        });
        match made.join() {
            Ok(Ok(fd)) => Ok(OwnNetns { fd }),
            Ok(Err((step, source))) => Err(SandboxError::Setup { step, source }),
            Err(_) => Err(SandboxError::InitDied("the thread making the network namespace panicked".into())),
        }
    }

    /// A path that names the namespace while this value lives (for `bind_in`).
    pub fn path(&self) -> std::path::PathBuf {
        use std::os::fd::AsRawFd;
        std::path::PathBuf::from(format!("/proc/{}/fd/{}", std::process::id(), self.fd.as_raw_fd()))
    }
}

/// `cmd` set to start a session of its own (its own process group, no controlling terminal), as the advisory
/// containment runs it, as leash's own user.
pub fn own_session(cmd: &mut Command) {
    // SAFETY: `setsid` is async-signal-safe and touches no memory.
    unsafe {
        cmd.pre_exec(|| if libc::setsid() < 0 { Err(io::Error::last_os_error()) } else { Ok(()) });
    }
}

/// Makes leash the reaper of every process its children leave (`PR_SET_CHILD_SUBREAPER`): an orphan of the
/// command's becomes leash's child, not init's, so [`end_descendants`] finds it.
pub fn become_subreaper() -> io::Result<()> {
    // SAFETY: a prctl that takes an integer and touches no memory.
    match unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Sends `signal` to process group `group` (the command's: it started a session of its own).
pub fn signal_group(group: u32, signal: i32) {
    let Ok(group) = libc::pid_t::try_from(group) else { return };
    // SAFETY: kill(2) with a negative pid signals a process group; it touches no memory.
    unsafe { libc::kill(-group, signal) };
}

/// Most rounds of killing and reaping leash's remaining children (a process forking as fast as it is killed).
const END_ROUNDS: usize = 100;

/// Kills every process left that is leash's child (with [`become_subreaper`], every process the command left) and
/// reaps them, until none is left.
pub fn end_descendants() {
    let own = std::process::id().to_string();
    for _ in 0..END_ROUNDS {
        let children: Vec<libc::pid_t> = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<libc::pid_t>().ok()))
            .filter(|pid| parent_of(*pid).is_some_and(|ppid| ppid == own))
            .collect();
        if children.is_empty() {
            return;
        }
        for pid in children {
            // SAFETY: kill(2) and waitpid(2) on a child of this process; neither touches memory but the status.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
        }
    }
}

/// Kills every process whose real uid is `uid` (the command's, which is its own), until none is left: what the
/// command left that also left its process group and escaped [`end_descendants`] (where the platform has no
/// subreaper, gVisor's), before the rules that held it back go.
pub fn end_processes_of(uid: u32) {
    for _ in 0..END_ROUNDS {
        let theirs: Vec<libc::pid_t> = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<libc::pid_t>().ok()))
            .filter(|pid| real_uid_of(*pid) == Some(uid))
            .collect();
        if theirs.is_empty() {
            return;
        }
        for pid in theirs {
            // SAFETY: kill(2) touches no memory; a pid reused since is another process of the same uid.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// The real uid in `/proc/PID/status`.
fn real_uid_of(pid: libc::pid_t) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The parent pid in `/proc/PID/stat` (the field after the parenthesised name, which may hold anything).
fn parent_of(pid: libc::pid_t) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.get(stat.rfind(')')? + 1..)?;
    after.split_whitespace().nth(1).map(str::to_owned)
}

/// Where a firewall leash programmed lives, removed when this value drops.
#[derive(Debug)]
pub struct Firewall {
    backend: Backend,
    name: String,
    uid: u32,
    ipv6: bool,
}

/// Which tool programs the rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `nft`: one `inet` table, both families.
    Nft,
    /// `iptables` and `ip6tables`: a chain of leash's in each `filter` table's `OUTPUT`.
    Iptables,
}

/// What the firewall admits for the uid: TCP and UDP ports on 127.0.0.1.
#[derive(Debug, Clone, Default)]
pub struct Admitted {
    /// leash's TCP listeners (the proxy, services).
    pub tcp: Vec<u16>,
    /// leash's UDP sockets (the DNS stub).
    pub udp: Vec<u16>,
}

/// A deliberate flaw in the rules, for the self-test's own tests (debug builds only; see `Firewall::install`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flaw {
    /// An extra rule accepting every packet of the uid to addresses outside the loopback.
    ExtraAccept,
    /// Rules for IPv4 only, while IPv6 is up.
    Ipv4Only,
    /// Every packet of the uid on the loopback accepted, not only leash's ports.
    AllLoopback,
}

impl Flaw {
    /// The flaw `LEASH_DANGER_TEST_FIREWALL_FLAW` names, in a debug build; never in a release build.
    pub fn from_env() -> Option<Flaw> {
        if !cfg!(debug_assertions) {
            return None;
        }
        match std::env::var("LEASH_DANGER_TEST_FIREWALL_FLAW").ok()?.as_str() {
            "extra-accept" => Some(Flaw::ExtraAccept),
            "ipv4-only" => Some(Flaw::Ipv4Only),
            "all-loopback" => Some(Flaw::AllLoopback),
            _ => None,
        }
    }
}

/// Whether this namespace has IPv6 (any address at all, `::1` included).
pub fn ipv6_up() -> bool {
    std::fs::read_to_string("/proc/net/if_inet6").is_ok_and(|s| !s.trim().is_empty())
}

impl Firewall {
    /// Programs the rules for `uid`, admitting `admitted`: with `nft` where it answers, else with `iptables` (and
    /// `ip6tables` where IPv6 is up). Refused, naming the tool, where neither can be used.
    pub fn install(uid: u32, admitted: &Admitted, flaw: Option<Flaw>) -> Result<Firewall, SandboxError> {
        let name = format!("leash-{}", std::process::id());
        let ipv6 = ipv6_up();
        let backend = if tool_works("nft", &["list", "tables"]) {
            Backend::Nft
        } else if tool_works("iptables", &["-w", "-S", "OUTPUT"]) {
            if ipv6 && !tool_works("ip6tables", &["-w", "-S", "OUTPUT"]) {
                return Err(refused("IPv6 is up but `ip6tables` cannot be run (install it, or turn IPv6 off)"));
            }
            Backend::Iptables
        } else {
            return Err(refused(
                "neither `nft` nor `iptables` can be run here (install nftables or iptables in the image)",
            ));
        };
        let firewall = Firewall { backend, name, uid, ipv6 };
        let installed = match backend {
            Backend::Nft => firewall.install_nft(admitted, flaw),
            Backend::Iptables => firewall.install_iptables(admitted, flaw),
        };
        match installed {
            Ok(()) => Ok(firewall),
            Err(e) => {
                drop(firewall);
                Err(e)
            }
        }
    }

    /// The tool that programmed the rules.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    fn install_nft(&self, admitted: &Admitted, flaw: Option<Flaw>) -> Result<(), SandboxError> {
        let ipv4_only = flaw == Some(Flaw::Ipv4Only);
        let (family, unreachable) =
            if ipv4_only { ("ip", "icmp type admin-prohibited") } else { ("inet", "icmpx type admin-prohibited") };
        let mut rules = Vec::new();
        match flaw {
            Some(Flaw::ExtraAccept) => rules.push("ip daddr != 127.0.0.0/8 accept".to_owned()),
            Some(Flaw::AllLoopback) => rules.push("oifname \"lo\" accept".to_owned()),
            _ => {}
        }
        for (proto, ports) in [("tcp", &admitted.tcp), ("udp", &admitted.udp)] {
            if !ports.is_empty() {
                let set = ports.iter().map(u16::to_string).collect::<Vec<_>>().join(", ");
                rules.push(format!("oifname \"lo\" ip daddr 127.0.0.1 {proto} dport {{ {set} }} accept"));
            }
        }
        rules.push(format!("meta l4proto tcp counter reject with {unreachable}"));
        rules.push("counter drop".to_owned());
        let body: String = rules.iter().map(|r| format!("    {r}\n")).collect();
        // Only packets of the uid's own sockets go to its chain: a packet of no socket (an ICMP error, a reset the
        // kernel sends for a closed port) is nobody's, and stays the namespace's business.
        let script = format!(
            "table {family} {name} {{\n  chain uid {{\n{body}  }}\n  chain output {{\n    type filter hook output priority \
             filter; policy accept;\n    meta skuid {uid} jump uid\n  }}\n}}\n",
            name = self.name,
            uid = self.uid
        );
        run_tool("nft", &["-f", "-"], Some(&script))
    }

    fn install_iptables(&self, admitted: &Admitted, flaw: Option<Flaw>) -> Result<(), SandboxError> {
        let (chain, uid) = (self.name.as_str(), self.uid.to_string());
        run_tool("iptables", &["-w", "-N", chain], None)?;
        match flaw {
            Some(Flaw::ExtraAccept) => {
                run_tool("iptables", &["-w", "-A", chain, "!", "-d", "127.0.0.0/8", "-j", "ACCEPT"], None)?
            }
            Some(Flaw::AllLoopback) => run_tool("iptables", &["-w", "-A", chain, "-o", "lo", "-j", "ACCEPT"], None)?,
            _ => {}
        }
        for (proto, ports) in [("tcp", &admitted.tcp), ("udp", &admitted.udp)] {
            for port in ports.iter().map(u16::to_string) {
                let rule =
                    ["-w", "-A", chain, "-o", "lo", "-d", "127.0.0.1", "-p", proto, "--dport", &port, "-j", "ACCEPT"];
                run_tool("iptables", &rule, None)?;
            }
        }
        let stop = |tool: &str, reject_with: &str| -> Result<(), SandboxError> {
            // gVisor's iptables has no REJECT: there TCP is dropped too (its `connect` then waits, and the self-test
            // reads the counters to tell that from a packet that left).
            let reject = ["-w", "-A", chain, "-p", "tcp", "-j", "REJECT", "--reject-with", reject_with];
            if run_tool(tool, &reject, None).is_err() {
                eprintln!("leash: `{tool}` has no REJECT here: the uid's TCP is dropped instead");
            }
            run_tool(tool, &["-w", "-A", chain, "-j", "DROP"], None)?;
            run_tool(tool, &["-w", "-I", "OUTPUT", "1", "-m", "owner", "--uid-owner", &uid, "-j", chain], None)
        };
        stop("iptables", "icmp-admin-prohibited")?;
        if self.ipv6 && flaw != Some(Flaw::Ipv4Only) {
            run_tool("ip6tables", &["-w", "-N", chain], None)?;
            stop("ip6tables", "icmp6-adm-prohibited")?;
        }
        Ok(())
    }

    /// How many packets the rules have stopped (rejected or dropped) so far, over both families.
    pub fn stopped(&self) -> Result<u64, SandboxError> {
        match self.backend {
            Backend::Nft => {
                let mut total = 0;
                for family in ["inet", "ip"] {
                    if let Ok(listing) = tool_output("nft", &["list", "table", family, &self.name]) {
                        total += counted(&listing, "packets");
                    }
                }
                Ok(total)
            }
            Backend::Iptables => {
                let mut total = 0;
                for tool in ["iptables", "ip6tables"] {
                    if let Ok(listing) = tool_output(tool, &["-w", "-L", &self.name, "-v", "-n", "-x"]) {
                        // `pkts bytes target ...` per rule; the stopping ones are REJECT and DROP.
                        total += listing
                            .lines()
                            .map(|l| l.split_whitespace().collect::<Vec<_>>())
                            .filter(|f| matches!(f.get(2), Some(&"REJECT" | &"DROP")))
                            .filter_map(|f| f.first().and_then(|n| n.parse::<u64>().ok()))
                            .sum::<u64>();
                    }
                }
                Ok(total)
            }
        }
    }

    /// Removes the rules (also done on drop). Errors are reported, the rest still removed.
    pub fn remove(&self) -> Result<(), SandboxError> {
        match self.backend {
            Backend::Nft => {
                let mut result = Ok(());
                for family in ["inet", "ip"] {
                    if tool_works("nft", &["list", "table", family, &self.name]) {
                        result = result.and(run_tool("nft", &["delete", "table", family, &self.name], None));
                    }
                }
                result
            }
            Backend::Iptables => {
                let uid = self.uid.to_string();
                let mut result = Ok(());
                for tool in ["iptables", "ip6tables"] {
                    if !tool_works(tool, &["-w", "-S", &self.name]) {
                        continue;
                    }
                    let jump = ["-w", "-D", "OUTPUT", "-m", "owner", "--uid-owner", &uid, "-j", &self.name];
                    while tool_works(tool, &jump) {}
                    result = result.and(run_tool(tool, &["-w", "-F", &self.name], None));
                    result = result.and(run_tool(tool, &["-w", "-X", &self.name], None));
                }
                result
            }
        }
    }
}

impl Drop for Firewall {
    fn drop(&mut self) {
        if let Err(e) = self.remove() {
            eprintln!("leash: cannot remove the firewall rules `{}`: {e}", self.name);
        }
    }
}

/// The sum of the numbers after each `word` in `listing` (nft's `counter packets N bytes M`).
fn counted(listing: &str, word: &str) -> u64 {
    let words: Vec<&str> = listing.split_whitespace().collect();
    words.windows(2).filter(|w| w[0] == word).filter_map(|w| w[1].parse::<u64>().ok()).sum()
}

/// What `tool args` printed, when it succeeded.
fn tool_output(tool: &str, args: &[&str]) -> io::Result<String> {
    let out = Command::new(tool).args(args).stdin(Stdio::null()).stderr(Stdio::null()).output()?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(io::Error::other(format!("`{tool}` failed")))
    }
}

fn refused(why: &str) -> SandboxError {
    SandboxError::Setup { step: crate::Step::ProgramFirewall, source: io::Error::other(why.to_owned()) }
}

/// Whether `tool args` runs and exits 0 (quietly).
fn tool_works(tool: &str, args: &[&str]) -> bool {
    Command::new(tool)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `tool args` (with `input` on its stdin); an error names the tool and says what it printed.
fn run_tool(tool: &str, args: &[&str], input: Option<&str>) -> Result<(), SandboxError> {
    use std::io::Write as _;
    let mut child = Command::new(tool)
        .args(args.iter().map(OsStr::new))
        .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| refused(&format!("cannot run `{tool}`: {e}")))?;
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin.write_all(text.as_bytes()).map_err(|e| refused(&format!("`{tool}`: {e}")))?;
    }
    let out = child.wait_with_output().map_err(|e| refused(&format!("`{tool}`: {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        let said = String::from_utf8_lossy(&out.stderr);
        Err(refused(&format!("`{tool} {}` failed: {}", args.join(" "), said.trim())))
    }
}
