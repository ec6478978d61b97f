//! Runs a command in the sandbox with leash's own environment and exits with its status: a manual check and the
//! start-up benchmark's subject (`sandbox_run true` beside `unshare -rn true`).
//!
//! `cargo run --release -p leash-sandbox --example sandbox_run -- CMD [ARGS...]`

use std::process::ExitCode;

use leash_sandbox::{harden_self, Sandbox, SandboxSpec};

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let Some(program) = args.next() else {
        eprintln!("usage: sandbox_run CMD [ARGS...]");
        return ExitCode::from(2);
    };
    let mut spec = SandboxSpec::new(program);
    spec.args = args.collect();
    spec.env = std::env::vars_os().collect();
    let run = || -> Result<i32, leash_sandbox::SandboxError> {
        harden_self()?;
        let sandbox = Sandbox::spawn(spec)?;
        let _forwarding = sandbox.forward_signals()?;
        Ok(sandbox.wait()?.code())
    };
    match run() {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            eprintln!("sandbox_run: {e}");
            ExitCode::from(125)
        }
    }
}
