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

/// A manual page on stdout: leash(1), or the page of the subcommand `path` names (`["docker", "run"]`); with
/// `dir`, every page written there as `NAME.1`, as `man` finds them.
pub fn man(path: &[String], dir: Option<&std::path::Path>) -> Exit {
    if let Some(dir) = dir {
        return write_all(dir);
    }
    let mut command = Cli::command();
    let mut name = String::from("leash");
    for word in path {
        let Some(sub) = command.find_subcommand(word).filter(|c| !c.is_hide_set()).cloned() else {
            let known: Vec<String> = pages().into_iter().map(|(n, _)| n).filter(|n| n != "leash").collect();
            eprintln!("leash man: no page for `{}`; the pages: {}", path.join(" "), known.join(", "));
            return Exit::Usage;
        };
        name = format!("{name}-{}", sub.get_name());
        command = sub;
    }
    let mut out = Vec::new();
    match clap_mangen::Man::new(command).title(name).render(&mut out) {
        Ok(()) => print(&out),
        Err(e) => {
            eprintln!("leash: cannot render the manual page: {e}");
            Exit::Refused
        }
    }
}

/// Every page: leash(1) and one per subcommand not hidden, nested ones included (`leash-docker-run`).
fn pages() -> Vec<(String, clap::Command)> {
    fn walk(name: String, command: clap::Command, into: &mut Vec<(String, clap::Command)>) {
        let subs: Vec<clap::Command> = command.get_subcommands().filter(|c| !c.is_hide_set()).cloned().collect();
        into.push((name.clone(), command));
        for sub in subs.into_iter().filter(|s| s.get_name() != "help") {
            walk(format!("{name}-{}", sub.get_name()), sub, into);
        }
    }
    let mut all = Vec::new();
    walk("leash".to_owned(), Cli::command(), &mut all);
    all
}

/// `leash man --dir DIR`: each page as `DIR/NAME.1`; the count said on stderr.
fn write_all(dir: &std::path::Path) -> Exit {
    let written = std::fs::create_dir_all(dir).and_then(|()| {
        let all = pages();
        for (name, command) in &all {
            let mut out = Vec::new();
            clap_mangen::Man::new(command.clone()).title(name.clone()).render(&mut out)?;
            std::fs::write(dir.join(format!("{name}.1")), out)?;
        }
        Ok(all.len())
    });
    match written {
        Ok(n) => {
            eprintln!("leash: wrote {n} manual pages to {}", dir.display());
            Exit::Ok
        }
        Err(e) => {
            eprintln!("leash: cannot write the manual pages to `{}`: {e}", dir.display());
            Exit::Usage
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
