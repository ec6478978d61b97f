//! The backend for platforms without one yet (macOS and others): `prepare` refuses with `Unsupported`, so `leash run`
//! never starts a command unprotected. A real backend (for example macOS's sandbox profiles) replaces this module
//! behind the same functions and `Child` methods.

use std::net::{SocketAddrV4, TcpListener, UdpSocket};

use crate::{ExitStatus, SandboxError, SandboxSpec};

/// No sandbox can exist here, so no value of this type can either.
#[derive(Debug)]
pub(crate) enum Child {}

/// Nothing to disarm.
#[derive(Debug)]
pub(crate) struct Forwarding;

/// No sandbox being set up either.
#[derive(Debug)]
pub(crate) enum Pending {}

pub(crate) fn prepare(_spec: SandboxSpec) -> Result<Pending, SandboxError> {
    Err(SandboxError::Unsupported { os: std::env::consts::OS })
}

impl Pending {
    pub(crate) fn start_with<T>(
        self,
        _meanwhile: impl FnOnce() -> T,
    ) -> Result<(Child, crate::Handed, T), SandboxError> {
        match self {}
    }
}

pub(crate) fn bind_in(
    _netns: &crate::Netns,
    _isolation: &crate::Isolation,
    _tcp: &[SocketAddrV4],
    _udp: &[SocketAddrV4],
) -> Result<(Vec<TcpListener>, Vec<UdpSocket>), SandboxError> {
    Err(SandboxError::Unsupported { os: std::env::consts::OS })
}

pub(crate) fn netns_id(_netns: &crate::Netns) -> Result<(u64, u64), SandboxError> {
    Err(SandboxError::Unsupported { os: std::env::consts::OS })
}

pub(crate) fn bind_in_netns(
    _pid: u32,
    _tcp: &[SocketAddrV4],
    _udp: &[SocketAddrV4],
) -> Result<(Vec<TcpListener>, Vec<UdpSocket>), SandboxError> {
    Err(SandboxError::Unsupported { os: std::env::consts::OS })
}

pub(crate) fn run_in_netns<T: Send + 'static>(
    _netns: &crate::Netns,
    _work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, SandboxError> {
    Err(SandboxError::Unsupported { os: std::env::consts::OS })
}

pub(crate) fn netns_interfaces(_pid: u32) -> Result<Vec<String>, SandboxError> {
    Err(SandboxError::Unsupported { os: std::env::consts::OS })
}

#[derive(Debug)]
pub(crate) struct Hold;

pub(crate) fn hold_forwarded_signals() -> Result<Hold, SandboxError> {
    Err(SandboxError::Unsupported { os: std::env::consts::OS })
}

pub(crate) fn forward_signals(child: &Child) -> Result<Forwarding, SandboxError> {
    match *child {}
}

pub(crate) fn die_on_closed_stdout() {}

pub(crate) fn tcp_listeners() -> std::io::Result<Vec<std::net::SocketAddr>> {
    Err(std::io::ErrorKind::Unsupported.into())
}

pub(crate) fn harden_self() -> Result<(), SandboxError> {
    Err(SandboxError::Unsupported { os: std::env::consts::OS })
}

impl Child {
    pub(crate) fn pid(&self) -> u32 {
        match *self {}
    }

    pub(crate) fn signal(&self, _signal: i32) -> Result<(), SandboxError> {
        match *self {}
    }

    pub(crate) fn wait(&self) -> Result<ExitStatus, SandboxError> {
        match *self {}
    }

    pub(crate) fn exit_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        match *self {}
    }

    pub(crate) fn detach(self) {
        match self {}
    }
}
