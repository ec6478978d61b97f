//! The messages over the SOCK_SEQPACKET pair between leash and the sandbox's init. From init: fixed 16-byte records
//! (tag, step, index, value), so the child builds them on its stack; the sockets travel as SCM_RIGHTS on the
//! `Sockets` record. From leash: first `Mapped` when leash writes init's id maps (`plan::IdRange::Full`), then, once,
//! the paths to hide, the host files to make read-only, the mounts to cover (`kernel_fs`) and the directories to pin,
//! in that order, in records of at most `ORDER_LEN` bytes (a tag, then NUL-terminated paths, each mount's after the
//! byte that says how to cover it), and then `Go`, which lets init start the command.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::kernel_fs::Cover;
use crate::error::Step;
use crate::SandboxSpec;

/// Size of every record.
pub(super) const RECORD_LEN: usize = 16;

/// Largest record leash sends init; init receives into a buffer of this size on its stack.
pub(super) const ORDER_LEN: usize = 16 * 1024;

/// What a record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Msg {
    /// The sockets are attached, in spec order (TCP first, then UDP), then the master side of the command's
    /// pseudo-terminal if the spec asks for one.
    Sockets,
    /// The command's `execve` succeeded.
    ExecOk,
    /// A step failed: which, at which index (hidden path or socket), with which errno.
    Failed { step: ChildStep, index: u32, errno: i32 },
    /// The command ended with this raw wait status.
    Exit { status: i32 },
}

const TAG_SOCKETS: u32 = 1;
const TAG_EXEC_OK: u32 = 2;
const TAG_FAILED: u32 = 3;
const TAG_EXIT: u32 = 4;

/// What leash tells init.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Order<'a> {
    /// Hide these paths: NUL-terminated, back to back.
    Hide(&'a [u8]),
    /// Start the command: everything it needs outside the sandbox is in place.
    Go,
    /// Init's id maps are written: go on setting up.
    Mapped,
    /// Cover these mounts: each a `kernel_fs::Cover` byte and a NUL-terminated path, back to back.
    Cover(&'a [u8]),
    /// Make these host files read-only inside: NUL-terminated, back to back.
    ReadOnly(&'a [u8]),
    /// Pin these directories (bind each onto itself, so it cannot be renamed inside): NUL-terminated, shallowest
    /// first.
    Pin(&'a [u8]),
}

const ORDER_HIDE: u32 = 1;
const ORDER_GO: u32 = 2;
const ORDER_MAPPED: u32 = 3;
const ORDER_COVER: u32 = 4;
const ORDER_READ_ONLY: u32 = 5;
const ORDER_PIN: u32 = 6;

/// The record that tells init its id maps are written.
pub(super) const MAPPED: [u8; 4] = ORDER_MAPPED.to_ne_bytes();

impl<'a> Order<'a> {
    /// Parses a record; `None` for anything malformed (a hide record must end with a NUL).
    pub(super) fn decode(bytes: &'a [u8]) -> Option<Order<'a>> {
        let tag = u32::from_ne_bytes(bytes.get(..4)?.try_into().ok()?);
        let rest = bytes.get(4..)?;
        match tag {
            ORDER_HIDE if rest.last() == Some(&0) => Some(Order::Hide(rest)),
            ORDER_GO if rest.is_empty() => Some(Order::Go),
            ORDER_MAPPED if rest.is_empty() => Some(Order::Mapped),
            ORDER_COVER if rest.last() == Some(&0) => Some(Order::Cover(rest)),
            ORDER_READ_ONLY if rest.last() == Some(&0) => Some(Order::ReadOnly(rest)),
            ORDER_PIN if rest.last() == Some(&0) => Some(Order::Pin(rest)),
            _ => None,
        }
    }
}

/// The records that hand init the paths to hide, the files to make read-only, the mounts to cover, the directories
/// to pin, then `Go`. The pins come last: each copies the mounts below it (`MS_REC`), so what was hidden, made
/// read-only or covered before is so in the copy too, and a process whose working directory is in the original tree
/// finds it there as well. Every path fits a record (the kernel's `PATH_MAX` is far below `ORDER_LEN`); one holding
/// a NUL byte cannot name a file (leash takes paths from its arguments, the kernel's mount table escapes none).
pub(super) fn orders(facts: &SpecFacts, covered: &[(Cover, PathBuf)]) -> Vec<Vec<u8>> {
    let mut records = Vec::new();
    pack(&mut records, ORDER_HIDE, plain(&facts.hidden));
    pack(&mut records, ORDER_READ_ONLY, plain(&facts.read_only));
    pack(&mut records, ORDER_COVER, covered.iter().map(|(c, p)| (Some(*c as u8), p.as_os_str().as_bytes())));
    pack(&mut records, ORDER_PIN, plain(&facts.pinned));
    records.push(ORDER_GO.to_ne_bytes().to_vec());
    records
}

/// Paths as entries without a leading byte.
fn plain(paths: &[PathBuf]) -> impl Iterator<Item = (Option<u8>, &[u8])> {
    paths.iter().map(|p| (None, p.as_os_str().as_bytes()))
}

/// Appends records tagged `tag` holding every entry: its leading byte if any, the path, a NUL.
fn pack<'a>(records: &mut Vec<Vec<u8>>, tag: u32, entries: impl Iterator<Item = (Option<u8>, &'a [u8])>) {
    let mut current = tag.to_ne_bytes().to_vec();
    for (lead, path) in entries {
        if current.len() + path.len() + 2 > ORDER_LEN && current.len() > 4 {
            records.push(std::mem::replace(&mut current, tag.to_ne_bytes().to_vec()));
        }
        current.extend(lead);
        current.extend_from_slice(path);
        current.push(0);
    }
    if current.len() > 4 {
        records.push(current);
    }
}

/// The mounts of a `Cover` record's payload; an unknown cover byte reads `None` (init then refuses to go on).
pub(super) fn covered_mounts(payload: &[u8]) -> impl Iterator<Item = (Option<Cover>, &std::ffi::CStr)> {
    hidden_paths(payload).map(|entry| match entry.to_bytes_with_nul().split_first() {
        Some((&lead, rest)) => (Cover::from_byte(lead), std::ffi::CStr::from_bytes_with_nul(rest).unwrap_or(c"")),
        None => (None, c""),
    })
}

/// The paths of a `Mask` record's payload.
pub(super) fn hidden_paths(payload: &[u8]) -> impl Iterator<Item = &std::ffi::CStr> {
    payload.split_inclusive(|&b| b == 0).filter_map(|p| std::ffi::CStr::from_bytes_with_nul(p).ok())
}

impl Msg {
    /// The record's bytes.
    pub(super) fn encode(self) -> [u8; RECORD_LEN] {
        let (tag, step, index, value) = match self {
            Msg::Sockets => (TAG_SOCKETS, 0, 0, 0),
            Msg::ExecOk => (TAG_EXEC_OK, 0, 0, 0),
            Msg::Failed { step, index, errno } => (TAG_FAILED, step as u32, index, errno),
            Msg::Exit { status } => (TAG_EXIT, 0, 0, status),
        };
        let mut out = [0u8; RECORD_LEN];
        out[0..4].copy_from_slice(&tag.to_ne_bytes());
        out[4..8].copy_from_slice(&step.to_ne_bytes());
        out[8..12].copy_from_slice(&index.to_ne_bytes());
        out[12..16].copy_from_slice(&value.to_ne_bytes());
        out
    }

    /// Parses a record; `None` for anything malformed.
    pub(super) fn decode(bytes: &[u8]) -> Option<Msg> {
        let word = |i: usize| -> Option<[u8; 4]> { bytes.get(i..i + 4)?.try_into().ok() };
        if bytes.len() != RECORD_LEN {
            return None;
        }
        let tag = u32::from_ne_bytes(word(0)?);
        let step = u32::from_ne_bytes(word(4)?);
        let index = u32::from_ne_bytes(word(8)?);
        let value = i32::from_ne_bytes(word(12)?);
        match tag {
            TAG_SOCKETS => Some(Msg::Sockets),
            TAG_EXEC_OK => Some(Msg::ExecOk),
            TAG_FAILED => Some(Msg::Failed { step: ChildStep::from_u32(step)?, index, errno: value }),
            TAG_EXIT => Some(Msg::Exit { status: value }),
            _ => None,
        }
    }
}

/// The steps the child side can fail at; `Step` carries the details the parent fills in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub(super) enum ChildStep {
    CloseFds = 1,
    Harden,
    Setgroups,
    UidMap,
    GidMap,
    MountNs,
    NetNs,
    MountProc,
    LoopbackUp,
    DisableIpv6,
    ReadOnly,
    ResolvConf,
    AwaitGo,
    HidePath,
    RestoreAffinity,
    BindTcp,
    BindUdp,
    HandOver,
    InitSignals,
    ForkCommand,
    CommandNs,
    CommandSetgroups,
    CommandUidMap,
    CommandGidMap,
    RedirectStdio,
    ChangeDir,
    Exec,
    IpcNs,
    NewSession,
    Seccomp,
    Capabilities,
    UserNsLimit,
    CoverMount,
    Devpts,
    ReadOnlyPath,
    PinDir,
    OwnShm,
}

impl ChildStep {
    const ALL: [ChildStep; 37] = [
        ChildStep::CloseFds,
        ChildStep::Harden,
        ChildStep::Setgroups,
        ChildStep::UidMap,
        ChildStep::GidMap,
        ChildStep::MountNs,
        ChildStep::NetNs,
        ChildStep::MountProc,
        ChildStep::LoopbackUp,
        ChildStep::DisableIpv6,
        ChildStep::ReadOnly,
        ChildStep::ResolvConf,
        ChildStep::AwaitGo,
        ChildStep::HidePath,
        ChildStep::RestoreAffinity,
        ChildStep::BindTcp,
        ChildStep::BindUdp,
        ChildStep::HandOver,
        ChildStep::InitSignals,
        ChildStep::ForkCommand,
        ChildStep::CommandNs,
        ChildStep::CommandSetgroups,
        ChildStep::CommandUidMap,
        ChildStep::CommandGidMap,
        ChildStep::RedirectStdio,
        ChildStep::ChangeDir,
        ChildStep::Exec,
        ChildStep::IpcNs,
        ChildStep::NewSession,
        ChildStep::Seccomp,
        ChildStep::Capabilities,
        ChildStep::UserNsLimit,
        ChildStep::CoverMount,
        ChildStep::Devpts,
        ChildStep::ReadOnlyPath,
        ChildStep::PinDir,
        ChildStep::OwnShm,
    ];

    fn from_u32(code: u32) -> Option<ChildStep> {
        ChildStep::ALL.into_iter().find(|step| *step as u32 == code)
    }

    /// The public step, with the path or address the index points at.
    pub(super) fn describe(self, index: u32, spec: &SpecFacts) -> Step {
        let index = index as usize;
        match self {
            ChildStep::CloseFds => Step::CloseInheritedFds,
            ChildStep::Harden => Step::HardenInit,
            ChildStep::Setgroups => Step::MapIds("setgroups"),
            ChildStep::UidMap => Step::MapIds("uid_map"),
            ChildStep::GidMap => Step::MapIds("gid_map"),
            ChildStep::MountNs => Step::CreateMountNamespace,
            ChildStep::NetNs => Step::CreateNetworkNamespace,
            ChildStep::MountProc => Step::MountProc,
            ChildStep::LoopbackUp => Step::LoopbackUp,
            ChildStep::DisableIpv6 => Step::DisableIpv6,
            ChildStep::ReadOnly => Step::MakeReadOnly(
                READ_ONLY_PATHS.get(index).map_or("/proc/sys", |p| p.to_str().unwrap_or("/proc/sys")),
            ),
            ChildStep::ResolvConf => Step::MountResolvConf,
            ChildStep::AwaitGo => Step::AwaitLeash,
            ChildStep::HidePath => Step::HidePath(spec.hidden.get(index).cloned().unwrap_or_default()),
            ChildStep::RestoreAffinity => Step::RestoreCpuAffinity,
            ChildStep::BindTcp => spec.tcp.get(index).map_or(Step::HandOverSockets, |a| Step::BindTcp(*a)),
            ChildStep::BindUdp => spec.udp.get(index).map_or(Step::HandOverSockets, |a| Step::BindUdp(*a)),
            ChildStep::HandOver => Step::HandOverSockets,
            ChildStep::InitSignals => Step::InitSignals,
            ChildStep::ForkCommand => Step::ForkCommand,
            ChildStep::CommandNs => Step::CreateCommandNamespace,
            ChildStep::CommandSetgroups => Step::MapCommandIds("setgroups"),
            ChildStep::CommandUidMap => Step::MapCommandIds("uid_map"),
            ChildStep::CommandGidMap => Step::MapCommandIds("gid_map"),
            ChildStep::RedirectStdio => Step::RedirectStdio,
            ChildStep::ChangeDir => Step::ChangeDir(spec.cwd.clone().unwrap_or_default()),
            ChildStep::Exec if index == 1 => Step::StartSelfTest,
            ChildStep::Exec => Step::Exec(spec.program.clone()),
            ChildStep::IpcNs if index == 0 => Step::CreateIpcNamespace,
            ChildStep::IpcNs => Step::MountMqueue,
            ChildStep::NewSession if index == 0 => Step::NewSession,
            ChildStep::NewSession => Step::NewKeyring,
            ChildStep::Seccomp => match index {
                0 => Step::InstallSeccomp,
                1 => Step::HandOverSeccompListener,
                _ => Step::ProbePidfdGetfd,
            },
            ChildStep::Capabilities => Step::DropCapabilities,
            ChildStep::UserNsLimit => Step::LimitUserNamespaces,
            ChildStep::CoverMount => Step::CoverKernelMount(spec.covered.get(index).cloned().unwrap_or_default()),
            ChildStep::ReadOnlyPath => Step::ReadOnlyPath(spec.read_only.get(index).cloned().unwrap_or_default()),
            ChildStep::PinDir => Step::PinDirectory(spec.pinned.get(index).cloned().unwrap_or_default()),
            ChildStep::OwnShm => Step::MountShm,
            ChildStep::Devpts if index == 0 => Step::MountDevpts,
            ChildStep::Devpts => Step::OpenTerminal,
        }
    }
}

/// What init makes read-only in the sandbox, in order (`init::read_only_kernel_files`): the kernel's settings that a
/// root-owned process may write (the host's, when leash runs as root), interrupt routing among them.
pub(super) const READ_ONLY_PATHS: [&std::ffi::CStr; 6] =
    [c"/proc/sys", c"/proc/sysrq-trigger", c"/proc/irq", c"/proc/bus", c"/proc/fs", c"/sys"];

/// Kernel files init hides with the paths leash asks for: `/dev/kmsg` writes lines into the host's
/// kernel log; `/proc/keys` lists every key and keyring the uid may view, the caller's among them (their
/// descriptions, and the ids a keyring call would take; those calls are refused anyway).
const HIDDEN_KERNEL_FILES: [&str; 2] = ["/dev/kmsg", "/proc/keys"];

/// What the parent keeps of the spec to name a failed step.
#[derive(Debug, Default)]
pub(super) struct SpecFacts {
    pub(super) program: PathBuf,
    pub(super) cwd: Option<PathBuf>,
    /// The paths hidden on leash's orders (the audit log).
    pub(super) hidden: Vec<PathBuf>,
    pub(super) tcp: Vec<std::net::SocketAddrV4>,
    pub(super) udp: Vec<std::net::SocketAddrV4>,
    /// The host files made read-only on leash's orders (what decides where leash connects and whom it trusts).
    pub(super) read_only: Vec<PathBuf>,
    /// The directories pinned: every one above a hidden or read-only path (see [`pinned_dirs`]).
    pub(super) pinned: Vec<PathBuf>,
    /// The mounts init covers (`kernel_fs`), filled in once leash has read its mount table.
    pub(super) covered: Vec<PathBuf>,
    /// Whether init hands over a terminal's master side after the sockets.
    pub(super) terminal: bool,
}

impl SpecFacts {
    pub(super) fn new(spec: &SandboxSpec, program: &Path) -> SpecFacts {
        SpecFacts {
            program: program.to_path_buf(),
            cwd: spec.cwd.clone(),
            hidden: spec.hide_paths.iter().cloned().chain(HIDDEN_KERNEL_FILES.map(PathBuf::from)).collect(),
            read_only: spec.read_only_paths.clone(),
            pinned: pinned_dirs(spec.hide_paths.iter().chain(&spec.read_only_paths))
                .into_iter()
                // A path hidden or made read-only is a mount point itself: no pin needed.
                .filter(|dir| !spec.hide_paths.contains(dir) && !spec.read_only_paths.contains(dir))
                .collect(),
            tcp: spec.tcp_listeners.clone(),
            udp: spec.udp_sockets.clone(),
            covered: Vec::new(),
            terminal: spec.terminal.is_some(),
        }
    }
}

/// Where the kernel's own filesystems are mounted: nothing below is a file leash reads later, and nothing there is
/// pinned.
const KERNEL_TREES: [&str; 3] = ["/proc", "/sys", "/dev"];

/// Every directory above `paths` (absolute, as leash found them), but `/` and the kernel's trees, each once and
/// shallowest first. Pinned inside, none of them can be renamed or removed by the command (`rename(2)` refuses a
/// mount point with `EBUSY` in the namespace that has the mount), so none of the paths can come to name a file the
/// command put there: what leash reads or writes by path after the command starts, it reaches through these.
pub(super) fn pinned_dirs<'a>(paths: impl Iterator<Item = &'a PathBuf>) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = paths
        .filter(|p| p.is_absolute())
        .filter(|p| !KERNEL_TREES.iter().any(|tree| p.starts_with(tree)))
        .flat_map(|p| p.ancestors().skip(1).map(Path::to_path_buf).collect::<Vec<_>>())
        .filter(|dir| dir.parent().is_some())
        .collect();
    dirs.sort_by(|a, b| a.components().count().cmp(&b.components().count()).then_with(|| a.cmp(b)));
    dirs.dedup();
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_record_round_trips() {
        let mut msgs = vec![Msg::Sockets, Msg::ExecOk, Msg::Exit { status: 0x8b }];
        msgs.extend(ChildStep::ALL.iter().map(|&step| Msg::Failed { step, index: 3, errno: libc::EPERM }));
        for msg in msgs {
            assert_eq!(Msg::decode(&msg.encode()), Some(msg));
        }
        assert_eq!(Msg::decode(&[0u8; RECORD_LEN]), None);
        assert_eq!(Msg::decode(&[1u8; 3]), None);
    }

    #[test]
    fn hide_orders_carry_every_path_once_in_order_then_go() {
        let hidden: Vec<PathBuf> =
            (0..2000).map(|i| PathBuf::from(format!("/home/u/logs/audit-{i:05}.jsonl"))).collect();
        let read_only: Vec<PathBuf> = (0..300).map(|i| PathBuf::from(format!("/etc/ssl/certs/{i:05}.pem"))).collect();
        let pinned = pinned_dirs(hidden.iter().chain(&read_only));
        let covered: Vec<(Cover, PathBuf)> =
            (0..1500).map(|i| (Cover::ReadOnly, PathBuf::from(format!("/srv/cgroups/tenant-{i:05}")))).collect();
        let facts = SpecFacts { hidden: hidden.clone(), read_only: read_only.clone(), pinned, ..SpecFacts::default() };
        let records = orders(&facts, &covered);
        assert!(records.len() > 2, "2000 paths need several records");
        assert!(records.iter().all(|r| r.len() <= ORDER_LEN));
        assert_eq!(records.last().map(|r| Order::decode(r)), Some(Some(Order::Go)));
        let (mut got, mut got_covered, mut got_read_only, mut got_pinned) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut kinds = Vec::new();
        let path = |p: &std::ffi::CStr| PathBuf::from(std::ffi::OsStr::from_bytes(p.to_bytes()));
        for record in &records[..records.len() - 1] {
            match Order::decode(record) {
                Some(Order::Hide(payload)) => {
                    kinds.push("hide");
                    got.extend(hidden_paths(payload).map(path));
                }
                Some(Order::ReadOnly(payload)) => {
                    kinds.push("read-only");
                    got_read_only.extend(hidden_paths(payload).map(path));
                }
                Some(Order::Cover(payload)) => {
                    kinds.push("cover");
                    got_covered.extend(covered_mounts(payload).map(|(c, p)| (c.unwrap(), path(p))));
                }
                Some(Order::Pin(payload)) => {
                    kinds.push("pin");
                    got_pinned.extend(hidden_paths(payload).map(path));
                }
                other => panic!("not a hide, read-only, cover or pin record: {other:?}"),
            }
        }
        assert_eq!(got, hidden);
        assert_eq!(got_read_only, read_only);
        assert_eq!(got_covered, covered);
        let pinned: Vec<PathBuf> =
            ["/etc", "/home", "/etc/ssl", "/home/u", "/etc/ssl/certs", "/home/u/logs"].map(PathBuf::from).to_vec();
        assert_eq!(got_pinned, pinned, "every directory above, once, shallowest first");
        kinds.dedup();
        assert_eq!(kinds, ["hide", "read-only", "cover", "pin"], "pins last: they copy what was mounted before");
        let nothing = orders(&SpecFacts::default(), &[]);
        assert_eq!(nothing, vec![ORDER_GO.to_ne_bytes().to_vec()], "nothing to hide: only Go");
        assert_eq!(Order::decode(&MAPPED), Some(Order::Mapped));
    }

    #[test]
    fn pinned_directories_leave_out_the_root_and_the_kernels_trees() {
        let paths: Vec<PathBuf> =
            ["/var/log/a.jsonl", "/var/log/b.jsonl", "/dev/kmsg", "/proc/keys", "/sys/x/y", "/top", "relative/x"]
                .into_iter()
                .map(PathBuf::from)
                .collect();
        assert_eq!(pinned_dirs(paths.iter()), [PathBuf::from("/var"), PathBuf::from("/var/log")]);
    }

    #[test]
    fn malformed_orders_are_refused() {
        let mut unterminated = ORDER_HIDE.to_ne_bytes().to_vec();
        unterminated.extend_from_slice(b"/run/x");
        for bad in [
            &b""[..],
            &[9, 0, 0, 0][..],
            &unterminated[..],
            &[2, 0, 0, 0, 1][..],
            &[3, 0, 0, 0, 0][..],
            &[6, 0, 0, 0, b'/'][..],
        ] {
            assert_eq!(Order::decode(bad), None, "{bad:?}");
        }
    }
}
