//! Exit codes, one enum for every subcommand: 0 success or allowed, 1 invalid policy or refused, 2 usage errors and
//! files that cannot be read or written. And [`Failure`], what a subcommand returns when it fails: the message
//! `main` prints once, with the code.

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

/// A failure a subcommand (or a helper on its way) reports: the message `main` prints once on stderr, and the exit
/// code. The message is the text as users see it, prefix included (`leash: ...`, `leash attach: ...`, or a policy
/// error's `FILE:LINE:COLUMN: ...`), and may hold several lines; an empty one prints nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    exit: Exit,
    message: String,
}

impl Failure {
    /// `message` as it is (its own prefix, or none), with `exit`.
    pub fn new(exit: Exit, message: impl Into<String>) -> Failure {
        Failure { exit, message: message.into() }
    }

    /// `leash: MESSAGE` and exit 2: bad arguments, a file that cannot be read or written.
    pub fn usage(message: impl std::fmt::Display) -> Failure {
        Failure::new(Exit::Usage, format!("leash: {message}"))
    }

    /// `leash: MESSAGE` and exit 1: an invalid policy, a proxy that could not run.
    pub fn refused(message: impl std::fmt::Display) -> Failure {
        Failure::new(Exit::Refused, format!("leash: {message}"))
    }

    /// `leash: MESSAGE` and exit 125: the sandbox could not be set up, so the command did not run.
    pub fn sandbox_failed(message: impl std::fmt::Display) -> Failure {
        Failure::new(Exit::SandboxFailed, format!("leash: {message}"))
    }

    /// The same message with another exit code (`run` maps an invalid policy's 1 to 2: 1 is the command's own).
    pub fn with_exit(self, exit: Exit) -> Failure {
        Failure { exit, ..self }
    }

    /// Prints the message on stderr (once: this takes the failure) and gives the exit code.
    pub fn report(self) -> Exit {
        if !self.message.is_empty() {
            eprintln!("{self}");
        }
        self.exit
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_shows_its_message_as_users_see_it_and_keeps_its_exit_code() {
        let f = Failure::usage("cannot read policy `p.yaml`: No such file or directory (os error 2)");
        assert_eq!(f.to_string(), "leash: cannot read policy `p.yaml`: No such file or directory (os error 2)");
        assert_eq!(f.exit, Exit::Usage);
        assert_eq!(Failure::refused("x"), Failure::new(Exit::Refused, "leash: x"));
        assert_eq!(Failure::sandbox_failed("x"), Failure::new(Exit::SandboxFailed, "leash: x"));
        let lines = Failure::new(Exit::Refused, "p.yaml:2:3: network.mode: bad\nleash: `p.yaml` is invalid (1 error)");
        assert_eq!(lines.to_string().lines().count(), 2, "a multi-line message is kept whole");
        let mapped = lines.clone().with_exit(Exit::Usage);
        assert_eq!((mapped.exit, mapped.to_string()), (Exit::Usage, lines.to_string()));
        assert_eq!(Failure::new(Exit::Usage, "").report(), Exit::Usage, "an empty message prints nothing");
        assert_eq!(ExitCode::from(Failure::sandbox_failed("x").report()), ExitCode::from(125));
    }
}
