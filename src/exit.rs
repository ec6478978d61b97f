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
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        match e {
            Exit::Ok => ExitCode::SUCCESS,
            Exit::Refused => ExitCode::from(1),
            Exit::Usage => ExitCode::from(2),
        }
    }
}
