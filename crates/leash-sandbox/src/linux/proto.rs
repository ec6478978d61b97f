//! The messages the sandbox's init sends leash over their SOCK_SEQPACKET pair: fixed 16-byte records (tag, step,
//! index, value), so the child builds them on its stack. The sockets travel as SCM_RIGHTS on the `Sockets` record.

use std::path::PathBuf;

use crate::error::Step;
use crate::SandboxSpec;

/// Size of every record.
pub(super) const RECORD_LEN: usize = 16;

/// What a record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Msg {
    /// The sockets are attached, in spec order (TCP first, then UDP).
    Sockets,
    /// The command's `execve` succeeded.
    ExecOk,
    /// A step failed: which, at which index (mask or socket), with which errno.
    Failed { step: ChildStep, index: u32, errno: i32 },
    /// The command ended with this raw wait status.
    Exit { status: i32 },
}

const TAG_SOCKETS: u32 = 1;
const TAG_EXEC_OK: u32 = 2;
const TAG_FAILED: u32 = 3;
const TAG_EXIT: u32 = 4;

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
    ResolvConf,
    MaskSocket,
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
}

impl ChildStep {
    const ALL: [ChildStep; 24] = [
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
        ChildStep::ResolvConf,
        ChildStep::MaskSocket,
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
            ChildStep::ResolvConf => Step::MountResolvConf,
            ChildStep::MaskSocket => Step::MaskUnixSocket(spec.masks.get(index).cloned().unwrap_or_default()),
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
            ChildStep::Exec => Step::Exec(spec.program.clone()),
        }
    }
}

/// What the parent keeps of the spec to name a failed step.
#[derive(Debug, Default)]
pub(super) struct SpecFacts {
    pub(super) program: PathBuf,
    pub(super) cwd: Option<PathBuf>,
    pub(super) masks: Vec<PathBuf>,
    pub(super) tcp: Vec<std::net::SocketAddrV4>,
    pub(super) udp: Vec<std::net::SocketAddrV4>,
}

impl SpecFacts {
    pub(super) fn new(spec: &SandboxSpec, program: PathBuf, masks: Vec<PathBuf>) -> SpecFacts {
        SpecFacts {
            program,
            cwd: spec.cwd.clone(),
            masks,
            tcp: spec.tcp_listeners.clone(),
            udp: spec.udp_sockets.clone(),
        }
    }
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
}
