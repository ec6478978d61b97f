//! Forwarding leash's SIGINT, SIGTERM and SIGHUP to the sandbox's init (which passes them to the command). The
//! handler is process-wide and async-signal-safe: it reads one atomic and calls `kill`.

use std::fmt;
use std::io;
use std::mem::zeroed;
use std::sync::atomic::{AtomicI32, Ordering};

use libc::c_int;

use crate::SandboxError;

/// The signals forwarded.
const FORWARDED: [c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// The init to forward to; 0 when disarmed. One sandbox at a time: the last armed wins.
static TARGET: AtomicI32 = AtomicI32::new(0);

/// Armed forwarding; dropping it restores the handlers found when it was armed.
pub(crate) struct Forwarding {
    previous: [libc::sigaction; 3],
    pid: i32,
}

impl fmt::Debug for Forwarding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Forwarding").field("pid", &self.pid).finish_non_exhaustive()
    }
}

/// Arms forwarding to `pid`.
pub(super) fn arm(pid: i32) -> Result<Forwarding, SandboxError> {
    TARGET.store(pid, Ordering::SeqCst);
    // SAFETY: sigaction is plain data; all zeroes is a valid (default) value, overwritten below.
    let mut previous: [libc::sigaction; 3] = unsafe { zeroed() };
    for (signal, old) in FORWARDED.iter().zip(previous.iter_mut()) {
        // SAFETY: sigaction is plain data; the fields that matter are set next.
        let mut action: libc::sigaction = unsafe { zeroed() };
        action.sa_sigaction = handler as *const () as libc::sighandler_t;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        // SAFETY: `action` is initialised, `old` is valid for writes, and the handler is async-signal-safe.
        if unsafe { libc::sigaction(*signal, &action, old) } != 0 {
            return Err(SandboxError::Control { what: "forward signals to", source: io::Error::last_os_error() });
        }
    }
    Ok(Forwarding { previous, pid })
}

/// The forwarded signals blocked in this thread; dropping it restores the mask found.
pub(crate) struct Hold {
    previous: libc::sigset_t,
}

impl fmt::Debug for Hold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hold").finish_non_exhaustive()
    }
}

/// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread.
pub(super) fn hold() -> Result<Hold, SandboxError> {
    // SAFETY: sigset_t is plain data, initialised by sigemptyset before use; `previous` is written by the call.
    unsafe {
        let mut set: libc::sigset_t = zeroed();
        libc::sigemptyset(&mut set);
        for signal in FORWARDED {
            libc::sigaddset(&mut set, signal);
        }
        let mut previous: libc::sigset_t = zeroed();
        match libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut previous) {
            0 => Ok(Hold { previous }),
            errno => Err(SandboxError::Control {
                what: "hold the forwarded signals of",
                source: io::Error::from_raw_os_error(errno),
            }),
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        // SAFETY: `previous` is the mask pthread_sigmask returned.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.previous, std::ptr::null_mut()) };
    }
}

/// Disarms forwarding to `pid` (before it is reaped, so the pid cannot have been reused).
pub(super) fn disarm(pid: i32) {
    let _ = TARGET.compare_exchange(pid, 0, Ordering::SeqCst, Ordering::SeqCst);
}

impl Drop for Forwarding {
    fn drop(&mut self) {
        disarm(self.pid);
        for (signal, old) in FORWARDED.iter().zip(self.previous.iter()) {
            // SAFETY: `old` is the action sigaction returned when arming.
            unsafe { libc::sigaction(*signal, old, std::ptr::null_mut()) };
        }
    }
}

/// Forwards a signal a process sent (si_code <= 0) and any SIGHUP (a hang-up goes to the session leader only); a
/// terminal's SIGINT reached the sandbox's init too (it shares leash's process group), which passes it to the
/// command's, and is dropped here so leash lives on.
extern "C" fn handler(signal: c_int, info: *mut libc::siginfo_t, _context: *mut libc::c_void) {
    // SAFETY: with SA_SIGINFO the kernel passes a valid siginfo_t (null checked anyway).
    let code = if info.is_null() { 0 } else { unsafe { (*info).si_code } };
    let target = TARGET.load(Ordering::SeqCst);
    if target > 0 && (code <= 0 || signal == libc::SIGHUP) {
        // SAFETY: errno is thread-local; saving and restoring it keeps the interrupted code's value.
        unsafe {
            let saved = *libc::__errno_location();
            libc::kill(target, signal);
            *libc::__errno_location() = saved;
        }
    }
}
