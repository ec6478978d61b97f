//! `leash completions SHELL` and `leash man`: the shell completion script and the manual page, both generated from
//! the command-line definition in `cli.rs`, so they cannot fall behind `--help`.

use std::io::Write;

use clap::CommandFactory;

use crate::cli::Cli;
use crate::exit::Exit;

/// The completion script for `shell` on stdout.
pub fn completions(shell: clap_complete::Shell) -> Exit {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "leash", &mut out);
    print(&out)
}

/// The manual page, `leash(1)` with every subcommand's options, on stdout.
pub fn man() -> Exit {
    let mut out = Vec::new();
    let rendered = clap_mangen::Man::new(Cli::command()).render(&mut out);
    let subcommands = Cli::command().get_subcommands().cloned().collect::<Vec<_>>();
    let with_subcommands = rendered.and_then(|()| {
        subcommands.into_iter().filter(|c| !c.is_hide_set()).try_for_each(|sub| {
            let name = format!("leash-{}", sub.get_name());
            writeln!(out)?;
            clap_mangen::Man::new(sub).title(name).render(&mut out)
        })
    });
    match with_subcommands {
        Ok(()) => print(&out),
        Err(e) => {
            eprintln!("leash: cannot render the manual page: {e}");
            Exit::Refused
        }
    }
}

fn print(bytes: &[u8]) -> Exit {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => Exit::Ok,
        Err(e) => {
            eprintln!("leash: cannot write to standard output: {e}");
            Exit::Refused
        }
    }
}
