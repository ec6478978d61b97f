//! The command's standard descriptors when they are sockets. A socket belongs to the network namespace it was made
//! in: one handed to leash as stdin, stdout or stderr (systemd's `StandardOutput=socket`, inetd-style launchers,
//! harnesses that wire stdio to sockets) is the host's, and with it the command could `sendto` any host datagram
//! socket by path or abstract name (`/dev/log`, journald) or, for UDP, any address the host reaches, with no
//! `connect` for init to see. So no socket is ever handed over: `relay_socket_stdio` puts a pipe in its place and
//! copies between the two from a thread of leash's, and `Sandbox::prepare` refuses a spec whose command would still
//! get one (`check_no_socket`). Descriptors above 2 are never inherited (init closes them).

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::thread::JoinHandle;

use crate::{SandboxError, SandboxSpec};

/// What one read from either side carries at most: a pipe's default capacity, and a datagram leash sends whole.
const CHUNK: usize = 64 * 1024;

/// The relays `relay_socket_stdio` started.
#[derive(Debug, Default)]
pub struct StdioRelay {
    /// stdout's and stderr's: they end when every process of the sandbox is gone (the pipe's end of file).
    outputs: Vec<JoinHandle<()>>,
}

impl StdioRelay {
    /// Waits until everything the command wrote to a relayed stdout or stderr has been passed on: call it once the
    /// sandbox has ended (before that, it waits for the end). A relayed stdin is left to end with the process.
    pub fn finish(self) {
        for relay in self.outputs {
            let _ = relay.join();
        }
    }
}

/// For each of leash's stdin, stdout and stderr (where `spec` has none of its own) that is a socket: a pipe
/// becomes the command's descriptor, and a thread copies between the pipe and the socket (each chunk of output
/// one `send`, so a datagram socket gets datagrams). The threads block every signal, so signals sent to leash
/// still reach the thread that waits for them. Nothing is done, and no thread started, when none is a socket.
pub fn relay_socket_stdio(spec: &mut SandboxSpec) -> io::Result<StdioRelay> {
    let mut relay = StdioRelay::default();
    if spec.stdin.is_none() && is_socket(io::stdin().as_fd()) {
        let (read, write) = io::pipe()?;
        let socket = File::from(io::stdin().as_fd().try_clone_to_owned()?);
        spawn_quiet(move || copy(socket, File::from(OwnedFd::from(write))))?;
        spec.stdin = Some(OwnedFd::from(read));
    }
    let (stdout, stderr) = (io::stdout(), io::stderr());
    let outputs = [(&mut spec.stdout, stdout.as_fd()), (&mut spec.stderr, stderr.as_fd())];
    for (slot, fd) in outputs {
        if slot.is_none() && is_socket(fd) {
            let (read, write) = io::pipe()?;
            let socket = File::from(fd.try_clone_to_owned()?);
            relay.outputs.push(spawn_quiet(move || copy(File::from(OwnedFd::from(read)), socket))?);
            *slot = Some(OwnedFd::from(write));
        }
    }
    Ok(relay)
}

/// Refuses a command whose stdin, stdout or stderr would be a socket (see the module docs).
pub(crate) fn check_no_socket(spec: &SandboxSpec) -> Result<(), SandboxError> {
    let own = [spec.stdin.as_ref(), spec.stdout.as_ref(), spec.stderr.as_ref()];
    let (stdin, stdout, stderr) = (io::stdin(), io::stdout(), io::stderr());
    let inherited = [stdin.as_fd(), stdout.as_fd(), stderr.as_fd()];
    for ((name, own), inherited) in ["stdin", "stdout", "stderr"].into_iter().zip(own).zip(inherited) {
        if is_socket(own.map_or(inherited, AsFd::as_fd)) {
            return Err(SandboxError::InvalidSpec(format!(
                "the command's {name} would be a socket of the host's network namespace: relay it through a pipe \
                 (`relay_socket_stdio`)"
            )));
        }
    }
    Ok(())
}

/// Whether `fd` is a socket; a closed descriptor is not.
fn is_socket(fd: BorrowedFd<'_>) -> bool {
    rustix::fs::fstat(fd)
        .is_ok_and(|st| rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Socket)
}

/// Copies until end of file or an error on either side (a reader gone, a socket closed): each chunk read is one
/// write.
fn copy(mut from: File, mut to: File) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        match from.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if to.write_all(buf.get(..n).unwrap_or_default()).is_err() {
                    return;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// A thread with every signal blocked.
fn spawn_quiet(work: impl FnOnce() + Send + 'static) -> io::Result<JoinHandle<()>> {
    // SAFETY: sigset_t is plain data, filled by sigfillset; pthread_sigmask only reads `all` and writes `old`.
    let (all, mut old) = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        (all, std::mem::zeroed::<libc::sigset_t>())
    };
    // SAFETY: both sets are initialised; the new thread inherits the mask, which is then put back here.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old) };
    let spawned = std::thread::Builder::new().name("leash-stdio".into()).spawn(work);
    // SAFETY: `old` was filled by the call above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    spawned
}
