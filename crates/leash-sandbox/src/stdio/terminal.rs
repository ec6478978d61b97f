//! The pseudo-terminal that stands in for the caller's terminal (`relay_stdio`): the caller's settings and window size
//! read for it, kept at the caller's window size, and the caller's terminal made raw and put back.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};

/// Where the SIGWINCH handler writes (the write end of a pipe), or -1 before `follow_window_size`.
static WINCH: AtomicI32 = AtomicI32::new(-1);

/// Whether this process's group is the terminal's foreground one (a background job's is not).
pub(super) fn in_foreground(fd: BorrowedFd<'_>) -> bool {
    // SAFETY: tcgetpgrp and getpgrp take no pointers.
    unsafe { libc::tcgetpgrp(fd.as_raw_fd()) == libc::getpgrp() }
}

/// Whether the terminal is this process's controlling terminal and another process group its foreground one: changing
/// its settings would then stop this process (SIGTTOU). A terminal that is not the controlling one is never.
pub(super) fn in_background(fd: BorrowedFd<'_>) -> bool {
    // SAFETY: tcgetpgrp and getpgrp take no pointers; tcgetpgrp fails (-1) for a terminal that is not ours.
    unsafe {
        let foreground = libc::tcgetpgrp(fd.as_raw_fd());
        foreground >= 0 && foreground != libc::getpgrp()
    }
}

/// The terminal's settings (tcgetattr).
pub(super) fn settings(fd: BorrowedFd<'_>) -> io::Result<libc::termios> {
    // SAFETY: termios is plain data, filled by tcgetattr.
    let mut t: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: `t` is valid for writes.
    if unsafe { libc::tcgetattr(fd.as_raw_fd(), &mut t) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(t)
}

/// Sets the terminal's settings once its pending output is written (tcsetattr, `TCSADRAIN`).
pub(super) fn set(fd: BorrowedFd<'_>, t: &libc::termios) -> io::Result<()> {
    // SAFETY: `t` is a valid termios, only read.
    if unsafe { libc::tcsetattr(fd.as_raw_fd(), libc::TCSADRAIN, t) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `saved` made raw (cfmakeraw: bytes pass as typed, no echo, no signals from keys) and set on the terminal.
pub(super) fn make_raw(fd: BorrowedFd<'_>, mut saved: libc::termios) -> io::Result<()> {
    // SAFETY: `saved` is a valid termios, changed in place.
    unsafe { libc::cfmakeraw(&mut saved) };
    set(fd, &saved)
}

pub(super) fn window_size(fd: BorrowedFd<'_>) -> io::Result<libc::winsize> {
    let mut size = libc::winsize { ws_row: 0, ws_col: 0, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCGWINSZ fills one winsize.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGWINSZ, &mut size) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(size)
}

/// From now on, each SIGWINCH (the caller's terminal was resized) copies `caller`'s window size to `master`; the
/// kernel then signals the command's foreground process group. It is copied once at the start too: the size the
/// terminal was made with was read before the sandbox started. One relay per process: a later call takes over.
pub(super) fn follow_window_size(caller: OwnedFd, master: OwnedFd) -> io::Result<()> {
    let (read, write) = io::pipe()?;
    let old = WINCH.swap(OwnedFd::from(write).into_raw_fd(), Ordering::SeqCst);
    if old >= 0 {
        // SAFETY: the previous write end, ours and no longer reachable from the handler.
        drop(unsafe { OwnedFd::from_raw_fd(old) });
    }
    // SAFETY: sigaction is plain data; the handler only reads an atomic and calls write(2), async-signal-safe.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_winch as extern "C" fn(libc::c_int) as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        if libc::sigaction(libc::SIGWINCH, &action, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    let copy_size = move || {
        if let Ok(size) = window_size(caller.as_fd()) {
            // SAFETY: TIOCSWINSZ reads one winsize.
            unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &size) };
        }
    };
    copy_size();
    super::spawn_quiet(move || {
        let mut read = read;
        let mut byte = [0u8; 1];
        while io::Read::read(&mut read, &mut byte).is_ok_and(|n| n > 0) {
            copy_size();
        }
    })
    .map(drop)
}

extern "C" fn on_winch(_: libc::c_int) {
    let fd = WINCH.load(Ordering::SeqCst);
    if fd >= 0 {
        // SAFETY: writes one byte from a static; a full pipe (resizes not yet taken) just drops it.
        unsafe { libc::write(fd, b"w".as_ptr().cast(), 1) };
    }
}
