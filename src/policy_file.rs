//! Reading a policy file for any subcommand: the format from the extension, the text from disk, the errors printed
//! the same way everywhere (`FILE:LINE:COLUMN: ENTRY: MESSAGE`).

use std::path::Path;

use leash_policy::{load, Format, Loaded, PolicyError};

use crate::exit::Exit;

/// Load `path` (and `profile`), printing every problem. `Err` carries the exit code to use.
pub fn load_file(path: &Path, profile: Option<&str>) -> Result<Loaded, Exit> {
    let text = read(path)?;
    let format = format_of(path)?;
    let loaded = load(&text, format, profile).map_err(|errors| {
        print_errors(path, &errors);
        Exit::Refused
    })?;
    // `upstream_proxy_ca` names a file the policy crate does not read: read it now, so a bad one is a load error.
    leash_proxy::tls::check_upstream_proxy(&loaded.policy).map_err(|e| {
        eprintln!("{}: network.upstream_proxy_ca: {e}", path.display());
        Exit::Refused
    })?;
    Ok(loaded)
}

/// The policy of `--allow`/`--block`, or its errors printed (as `the command line:ENTRY: MESSAGE`) and exit 2.
pub fn inline(allow: &[String], block: &[String]) -> Result<leash_policy::Policy, Exit> {
    leash_policy::Policy::from_inline(allow, block).map_err(|errors| {
        print_errors(Path::new("the command line"), &errors);
        Exit::Usage
    })
}

/// The file's text, or a printed error and exit 2.
pub fn read(path: &Path) -> Result<String, Exit> {
    std::fs::read_to_string(path).map_err(|e| {
        eprintln!("leash: cannot read policy `{}`: {e}", path.display());
        Exit::Usage
    })
}

pub fn format_of(path: &Path) -> Result<Format, Exit> {
    Format::from_path(path).ok_or_else(|| {
        eprintln!("leash: cannot tell the format of `{}`: policy files end in .yaml, .yml or .toml", path.display());
        Exit::Usage
    })
}

pub fn print_errors(path: &Path, errors: &[PolicyError]) {
    for e in errors {
        eprintln!("{}", located(path, e));
    }
    let n = errors.len();
    eprintln!("leash: `{}` is invalid ({n} error{})", path.display(), if n == 1 { "" } else { "s" });
}

/// `FILE:LINE:COLUMN: ENTRY: MESSAGE`, the shape editors and CI annotate.
pub fn located(path: &Path, e: &PolicyError) -> String {
    let place = match (e.line, e.column) {
        (Some(l), Some(c)) => format!("{}:{l}:{c}", path.display()),
        (Some(l), None) => format!("{}:{l}", path.display()),
        _ => path.display().to_string(),
    };
    format!("{place}: {}: {}", e.entry, e.message)
}

/// Add `entry` to the policy file's `allowed_hosts` keeping its comments, validate, write atomically; the new policy.
pub fn allow_always(path: &Path, profile: Option<&str>, entry: &str) -> Result<Loaded, String> {
    let _ = (path, profile, entry);
    Err("writing the policy file is not available yet".to_owned())
}
