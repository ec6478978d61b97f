//! `leash completions SHELL` and `leash man`: the shell completion script and the manual page, both generated from
//! the command-line definition in `cli.rs`, so they cannot fall behind `--help`.

use std::io::Write;

use clap::CommandFactory;

use crate::cli::Cli;
use crate::exit::{Exit, Failure};

/// The completion script for `shell` on stdout.
pub fn completions(shell: clap_complete::Shell) -> Result<Exit, Failure> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "leash", &mut out);
    print(&out)
}

/// A manual page on stdout: leash(1), or the page of the subcommand `path` names (`["docker", "run"]`); with
/// `dir`, every page written there as `NAME.1`, as `man` finds them.
pub fn man(path: &[String], dir: Option<&std::path::Path>) -> Result<Exit, Failure> {
    if let Some(dir) = dir {
        return write_all(dir);
    }
    let mut command = Cli::command();
    let mut name = String::from("leash");
    for word in path {
        let Some(sub) = command.find_subcommand(word).filter(|c| !c.is_hide_set()).cloned() else {
            let known: Vec<String> = pages().into_iter().map(|(n, _)| n).filter(|n| n != "leash").collect();
            let why = format!("no page for `{}`; the pages: {}", path.join(" "), known.join(", "));
            return Err(Failure::new(Exit::Usage, format!("leash man: {why}")));
        };
        name = format!("{name}-{}", sub.get_name());
        command = sub;
    }
    let mut out = Vec::new();
    clap_mangen::Man::new(command)
        .title(name)
        .render(&mut out)
        .map_err(|e| Failure::refused(format!("cannot render the manual page: {e}")))?;
    print(&out)
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
fn write_all(dir: &std::path::Path) -> Result<Exit, Failure> {
    let written = std::fs::create_dir_all(dir).and_then(|()| {
        let all = pages();
        for (name, command) in &all {
            let mut out = Vec::new();
            clap_mangen::Man::new(command.clone()).title(name.clone()).render(&mut out)?;
            std::fs::write(dir.join(format!("{name}.1")), out)?;
        }
        Ok(all.len())
    });
    let n =
        written.map_err(|e| Failure::usage(format!("cannot write the manual pages to `{}`: {e}", dir.display())))?;
    eprintln!("leash: wrote {n} manual pages to {}", dir.display());
    Ok(Exit::Ok)
}

fn print(bytes: &[u8]) -> Result<Exit, Failure> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(bytes)
        .and_then(|()| stdout.flush())
        .map(|()| Exit::Ok)
        .map_err(|e| Failure::refused(format!("cannot write to standard output: {e}")))
}
