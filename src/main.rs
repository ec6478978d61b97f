//! The `leash` binary: parses the command line and hands each subcommand its resources. All behaviour lives in the
//! crates; this file only wires them and turns outcomes into exit codes.
#![forbid(unsafe_code)]

mod cli;
mod cmd;
mod exit;
mod policy_file;
mod shared;

use std::process::ExitCode;

use clap::Parser;

use crate::exit::Failure;
use tracing_subscriber::filter::LevelFilter;

fn main() -> ExitCode {
    let mut args = std::env::args_os();
    if args.nth(1).is_some_and(|first| first == shared::probe::IN_SANDBOX) {
        // The sandbox's self-test, in the command's place: before anything that the command would inherit.
        return cmd::probe::in_sandbox(&args.collect::<Vec<_>>());
    }
    let cli = if std::env::args_os().nth(1).is_some_and(|first| first == "run") {
        let cli::RunOnly { command: cli::RunCommand::Run(args) } = cli::RunOnly::parse();
        cli::Cli { command: cli::Command::Run(args) }
    } else {
        cli::Cli::parse()
    };
    // A wrapped command shares leash's terminal: there, only warnings (refusals among them) are leash's to print.
    let wraps_a_command = matches!(
        cli.command,
        cli::Command::Run(_) | cli::Command::Docker(cli::DockerArgs { command: cli::DockerCommand::Run(_) })
    );
    // `--quiet` is quiet: errors only (a refusal's warning, the summary and the rest are left out).
    let quiet = matches!(&cli.command, cli::Command::Run(args) if args.quiet);
    init_logging(match (quiet, wraps_a_command) {
        (true, _) => LevelFilter::ERROR,
        (false, true) => LevelFilter::WARN,
        (false, false) => LevelFilter::INFO,
    });
    // Commands that only print end quietly when their reader goes away (`| head`), as Unix filters do.
    if matches!(
        cli.command,
        cli::Command::Check(_)
            | cli::Command::Explain(_)
            | cli::Command::Log(_)
            | cli::Command::Policy(_)
            | cli::Command::Completions { .. }
            | cli::Command::Man { .. }
    ) {
        leash_sandbox::die_on_closed_stdout();
    }
    shared::open_files::raise_fd_limit();
    let code = match cli.command {
        cli::Command::Proxy(args) => cmd::proxy::run(args).unwrap_or_else(Failure::report),
        cli::Command::Check(args) => cmd::check::run(&args).unwrap_or_else(Failure::report),
        cli::Command::Explain(args) => cmd::explain::run(&args).unwrap_or_else(Failure::report),
        cli::Command::Run(args) => cmd::run::run(args).unwrap_or_else(Failure::report),
        cli::Command::Docker(cli::DockerArgs { command: cli::DockerCommand::Run(args) }) => {
            cmd::docker::run(args).unwrap_or_else(Failure::report)
        }
        cli::Command::Docker(cli::DockerArgs { command: cli::DockerCommand::Attach(args) }) => {
            cmd::docker::attach(args).unwrap_or_else(Failure::report)
        }
        cli::Command::Attach(args) => match args.dir.clone() {
            Some(dir) => cmd::attach_dir::run(&dir, args).unwrap_or_else(Failure::report),
            None => cmd::attach::run(args).unwrap_or_else(Failure::report),
        },
        cli::Command::Log(cli::LogArgs { command: cli::LogCommand::Summary(args) }) => {
            cmd::log::summary(&args).unwrap_or_else(Failure::report)
        }
        cli::Command::Policy(cli::PolicyArgs { command: cli::PolicyCommand::Suggest(args) }) => {
            cmd::policy::suggest(&args).unwrap_or_else(Failure::report)
        }
        cli::Command::Policy(cli::PolicyArgs { command: cli::PolicyCommand::Presets(args) }) => {
            cmd::presets::show(&args).unwrap_or_else(Failure::report)
        }
        cli::Command::Policy(cli::PolicyArgs { command: cli::PolicyCommand::Switch(args) }) => {
            cmd::switch::run(&args).unwrap_or_else(Failure::report)
        }
        cli::Command::Ask(args) => cmd::ask::run(args).unwrap_or_else(Failure::report),
        cli::Command::Probe(args) => cmd::probe::run(&args).unwrap_or_else(Failure::report),
        cli::Command::Completions { shell } => cmd::docs::completions(shell).unwrap_or_else(Failure::report),
        cli::Command::Man { command, dir } => cmd::docs::man(&command, dir.as_deref()).unwrap_or_else(Failure::report),
    };
    code.into()
}

/// Diagnostics and refusal warnings go to stderr, filtered by `RUST_LOG` (else by `default`). Without `RUST_LOG`
/// no directive is parsed: parsing one compiles its grammar's regular expressions, a twentieth of a millisecond of
/// every `leash run`.
fn init_logging(default: LevelFilter) {
    let from_env = std::env::var_os("RUST_LOG")
        .filter(|v| !v.is_empty())
        .and_then(|_| tracing_subscriber::EnvFilter::try_from_default_env().ok());
    let filter = from_env.unwrap_or_else(|| tracing_subscriber::EnvFilter::default().add_directive(default.into()));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Through the command's terminal relay while there is one, so a line never lands in a question.
        .with_writer(|| leash_sandbox::OwnLines)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .without_time()
        .init();
}
