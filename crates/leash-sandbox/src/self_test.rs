//! The containment self-test's place in the sandbox ([`SandboxSpec::self_test`](crate::SandboxSpec::self_test)): a
//! program of the caller's (leash's own) started in the command's place, exactly as the command would start — the
//! same process, namespaces, uid, capabilities, seccomp filter, stdio, environment and working directory — which
//! writes its verdict on a pipe to the caller and, when it passed, executes the command in its own place. The
//! caller's `start` returns once the command's `execve` succeeded, as without a self-test; a self-test that found a
//! way out (or said nothing) ends the sandbox instead, and [`SandboxError::SelfTest`] carries what it wrote.
//!
//! What the program is given after its own arguments: `--`, the number of the pipe's descriptor (the only one it
//! inherits besides stdio, and closed at the command's `execve`), the command's program as a path, and the command's
//! whole argv (argv\[0\] included). [`Trampoline`] is that program's side.

use std::ffi::{CString, OsString};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;

use crate::SandboxError;

/// A self-test for the sandbox to run in the command's place (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct SelfTest {
    /// The program: a path (leash passes `/proc/self/exe`, its own program as it was when the sandbox was prepared,
    /// wherever the path it was started by leads inside).
    pub program: OsString,
    /// Its arguments (after argv\[0\], which is `program`); `--`, the report's descriptor and the command follow.
    pub args: Vec<OsString>,
}

/// What the self-test writes once it passed, just before it executes the command.
const PASSED: &[u8] = b"passed\n";
/// What follows [`PASSED`] when the command's `execve` failed, then the errno in decimal.
const EXEC_FAILED: &[u8] = b"exec failed: ";
/// The self-test's exit status when it refuses the command (nobody reads it: the caller ends the sandbox).
const REFUSED: i32 = 125;

/// The caller's judgement of what the self-test wrote (all of it, up to the end of the pipe): `Ok` once it passed and
/// the command's `execve` succeeded; the command's `execve` failure (as without a self-test); else the refusal.
pub(crate) fn judge(report: &[u8], program: &std::path::Path) -> Result<(), SandboxError> {
    let Some(after) = report.strip_prefix(PASSED) else {
        let said = String::from_utf8_lossy(report);
        return Err(SandboxError::SelfTest(match said.trim_end() {
            "" => "ended without a verdict (it could not run, or died)".to_owned(),
            open => format!("found a way around leash:\n{open}"),
        }));
    };
    if after.is_empty() {
        return Ok(());
    }
    let errno = after
        .strip_prefix(EXEC_FAILED)
        .and_then(|n| std::str::from_utf8(n).ok())
        .and_then(|n| n.trim_end().parse().ok())
        .unwrap_or(libc::EIO);
    let step = crate::Step::Exec(program.to_path_buf());
    Err(SandboxError::Setup { step, source: io::Error::from_raw_os_error(errno) })
}

/// The self-test program's side: what it was handed, its verdict, and the command it becomes.
#[derive(Debug)]
pub struct Trampoline {
    report: std::fs::File,
    program: CString,
    argv: Vec<CString>,
}

impl Trampoline {
    /// Takes what follows the program's own arguments (see the module docs): `--`, the report's descriptor, the
    /// command's program and argv. The descriptor must be an open pipe; it is this value's from now on.
    pub fn from_args(tail: &[OsString]) -> Result<Trampoline, String> {
        let [dashes, fd, program, argv @ ..] = tail else {
            return Err("expected `-- FD PROGRAM ARGV0 [ARG...]`".to_owned());
        };
        if dashes != "--" || argv.is_empty() {
            return Err("expected `-- FD PROGRAM ARGV0 [ARG...]`".to_owned());
        }
        let fd: i32 = fd.to_str().and_then(|n| n.parse().ok()).filter(|&n| n > 2).ok_or("bad descriptor")?;
        let report = take_pipe(fd).map_err(|e| format!("descriptor {fd}: {e}"))?;
        let c = |s: &OsString| CString::new(s.as_bytes()).map_err(|_| "a NUL byte in an argument".to_owned());
        Ok(Trampoline { report, program: c(program)?, argv: argv.iter().map(c).collect::<Result<_, _>>()? })
    }

    /// The self-test found a way out: says which (`report`, one line per probe) and ends this process; the command
    /// never runs.
    pub fn refuse(mut self, report: &str) -> ! {
        let _ = self.report.write_all(report.as_bytes());
        std::process::exit(REFUSED)
    }

    /// The self-test passed: says so and executes the command, as the sandbox would have (signals as the sandbox left
    /// them: the Rust runtime's ignored SIGPIPE put back; the report's descriptor closed by the `execve`). Returns only
    /// if the `execve` failed, after saying that too.
    pub fn pass(mut self) -> io::Error {
        if let Err(e) = self.report.write_all(PASSED) {
            return e;
        }
        let error = exec(&self.program, &self.argv);
        let errno = error.raw_os_error().unwrap_or(libc::EIO);
        let mut said = EXEC_FAILED.to_vec();
        said.extend_from_slice(format!("{errno}\n").as_bytes());
        let _ = self.report.write_all(&said);
        error
    }
}

/// The pipe at `fd`, checked to be one, marked close-on-exec.
fn take_pipe(fd: i32) -> io::Result<std::fs::File> {
    use std::os::fd::FromRawFd;
    use std::os::unix::fs::FileTypeExt;
    // SAFETY: F_GETFD only reads the flags of `fd`, and fails with EBADF if it is not open.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is open (above), and `from_args`, the only caller, is where the program takes it over: the
    // sandbox handed it to this program for this use alone, and nothing else in the program names it.
    let file = unsafe { std::fs::File::from_raw_fd(fd) };
    if !file.metadata()?.file_type().is_fifo() {
        // Not the sandbox's pipe: left open, as found.
        std::mem::forget(file);
        return Err(io::Error::other("not a pipe"));
    }
    // SAFETY: F_SETFD on an open descriptor.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(file)
}

/// `execv` with SIGPIPE's default action back (Rust's runtime ignores it, and an ignored signal stays ignored across
/// `execve`).
fn exec(program: &CString, argv: &[CString]) -> io::Error {
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    // SAFETY: installs the default disposition, no handler.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    // SAFETY: `program` and every pointer in `ptrs` are NUL-terminated strings alive for this call; `ptrs` ends with
    // a null pointer; the environment is the process's own (`environ`).
    unsafe { libc::execv(program.as_ptr(), ptrs.as_ptr()) };
    io::Error::last_os_error()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verdict_is_read_from_what_the_self_test_wrote() {
        let program = std::path::Path::new("/bin/true");
        assert!(judge(b"passed\n", program).is_ok());
        let open = judge(b"OPEN tcp listener 127.0.0.9:9: got through\n", program).unwrap_err().to_string();
        assert!(open.contains("found a way around leash:\nOPEN tcp listener 127.0.0.9:9: got through"), "{open}");
        assert!(!open.ends_with('\n'), "{open:?}");
        let silent = judge(b"", program).unwrap_err().to_string();
        assert!(silent.contains("ended without a verdict"), "{silent}");
        let exec = judge(b"passed\nexec failed: 13\n", program).unwrap_err();
        assert!(matches!(&exec, SandboxError::Setup { source, .. } if source.raw_os_error() == Some(13)), "{exec}");
    }

    #[test]
    fn the_trampoline_takes_only_what_the_sandbox_hands_it() {
        let os = |s: &[&str]| s.iter().map(OsString::from).collect::<Vec<_>>();
        assert!(Trampoline::from_args(&os(&["--", "2", "/bin/true", "true"])).is_err(), "stdio is never the report");
        assert!(Trampoline::from_args(&os(&["-x", "9", "/bin/true", "true"])).is_err());
        assert!(Trampoline::from_args(&os(&["--", "9", "/bin/true"])).is_err(), "argv[0] is required");
        let file = std::fs::File::open("/proc/self/exe").unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&file).to_string();
        let not_a_pipe = Trampoline::from_args(&os(&["--", &fd, "/bin/true", "true"])).unwrap_err();
        assert!(not_a_pipe.contains("not a pipe"), "{not_a_pipe}");
    }
}
