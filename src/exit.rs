//! Exit codes, one enum for every subcommand: 0 success or allowed, 1 invalid policy or refused, 2 usage errors and
//! files that cannot be read or written.

use std::process::ExitCode;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// The command did what was asked; `explain`: the request is allowed.
    Ok,
    /// `check`: the policy is invalid; `explain`: the request is refused; `proxy`: it could not run.
    Refused,
    /// Bad arguments, an unreadable policy file, a log that cannot be opened.
    Usage,
    /// `run`: the command's own status (128+N for a signal).
    Command(u8),
    /// `run`: the sandbox could not be set up, so the command did not run (as `env` and container runners use 125).
    SandboxFailed,
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        match e {
            Exit::Ok => ExitCode::SUCCESS,
            Exit::Refused => ExitCode::from(1),
            Exit::Usage => ExitCode::from(2),
            Exit::Command(code) => ExitCode::from(code),
            Exit::SandboxFailed => ExitCode::from(125),
        }
    }
}
