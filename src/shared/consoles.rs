//! The caller's own terminals that are not pseudo-terminals — a virtual console, a serial line — hidden inside
//! `leash run` (each covered by /dev/null, as the audit log is). The sandbox's /dev/pts is its own, so no
//! pseudo-terminal of the caller's is in sight; but a person logged in on a virtual console owns its device
//! (`/dev/tty3`, crw--w---- theirs), and a command running with their uid could open it by path: write to their screen
//! past the relay's filter, draw over leash's question, or read the keys typed in answer to it. So leash hides:
//!
//! - each of its stdin, stdout and stderr that is such a terminal (whoever the caller is, root too), and for a virtual
//!   console the devices that show or are it too: `/dev/tty0` (the console in front), `/dev/console`, and its
//!   `/dev/vcsN`, `/dev/vcsaN`, `/dev/vcsuN` (the screen's contents);
//! - for a caller other than root, every console, virtual console or serial line in /dev the caller owns.
//!
//! A root caller's command is still root on the host's other consoles (docs/security.md, limits): root owns them all,
//! and hiding every one would cost a mount each on every run.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// The terminals to hide for this process's caller (see the module docs), found under `/dev`.
pub fn callers_terminals() -> Vec<PathBuf> {
    let stdio: Vec<PathBuf> = (0..3).filter_map(|fd| std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()).collect();
    hidden_terminals(Path::new("/dev"), &stdio, rustix::process::getuid().as_raw())
}

/// The terminals to hide when leash's stdio are the files `stdio` and its uid is `uid`, in the device directory `dev`.
fn hidden_terminals(dev: &Path, stdio: &[PathBuf], uid: u32) -> Vec<PathBuf> {
    let mut hidden = Vec::new();
    let console = |p: &Path| p.file_name().is_some_and(|n| is_terminal_name(&n.to_string_lossy()));
    for path in stdio.iter().filter(|p| p.parent() == Some(dev) && console(p) && is_char_device(p)) {
        hidden.push(path.clone());
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if let Some(n) = name.strip_prefix("tty").filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) {
            let shown =
                ["tty0".to_owned(), "console".to_owned(), format!("vcs{n}"), format!("vcsa{n}"), format!("vcsu{n}")];
            hidden.extend(shown.iter().map(|s| dev.join(s)).filter(|p| is_char_device(p)));
        }
    }
    if uid != 0 {
        let entries = std::fs::read_dir(dev).into_iter().flatten().flatten();
        let owned = entries.filter(|e| {
            is_terminal_name(&e.file_name().to_string_lossy())
                && e.metadata().is_ok_and(|m| m.file_type().is_char_device() && m.uid() == uid)
        });
        hidden.extend(owned.map(|e| e.path()));
    }
    hidden.sort();
    hidden.dedup();
    hidden
}

/// A console, virtual console, serial line or a console's screen by its name in /dev (not `/dev/tty`, which is
/// whatever terminal controls the process that opens it: inside, the command's own).
fn is_terminal_name(name: &str) -> bool {
    name == "console" || (name.starts_with("tty") && name != "tty") || name.starts_with("vcs")
}

fn is_char_device(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_char_device())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// A device directory with consoles, serial lines and a pseudo-terminal, some owned by `nobody`; `None` where
    /// this process may not make device files (not root): said loudly.
    fn devices() -> Option<tempfile::TempDir> {
        let dir = tempfile::tempdir().unwrap();
        let made = |name: &str, major: u32, minor: u32, owner: u32| {
            let path = dir.path().join(name);
            let ok = Command::new("mknod").arg(&path).args(["c", &major.to_string(), &minor.to_string()]).status();
            ok.is_ok_and(|s| s.success()) && std::os::unix::fs::chown(&path, Some(owner), None).is_ok()
        };
        let all = [
            ("tty0", 4, 0, 0),
            ("tty7", 4, 7, 0),
            ("console", 5, 1, 0),
            ("vcs7", 7, 7, 0),
            ("vcsa7", 7, 135, 0),
            ("tty8", 4, 8, 65534),
            ("ttyS0", 4, 64, 65534),
            ("tty", 5, 0, 0),
            ("null", 1, 3, 65534),
        ];
        if !all.iter().all(|(n, major, minor, owner)| made(n, *major, *minor, *owner)) {
            assert!(std::env::var_os("LEASH_REQUIRE_SANDBOX").is_none(), "cannot make device files");
            eprintln!("SKIPPED: cannot make device files (not root); the console-hiding test did not run");
            return None;
        }
        std::fs::create_dir(dir.path().join("pts")).unwrap();
        std::fs::write(dir.path().join("pts/3"), "").unwrap();
        Some(dir)
    }

    #[test]
    fn a_console_callers_own_terminal_and_what_shows_it_are_hidden() {
        let Some(dir) = devices() else { return };
        let dev = dir.path();
        let names = |paths: Vec<PathBuf>| -> Vec<String> {
            paths.iter().map(|p| p.strip_prefix(dev).unwrap().display().to_string()).collect()
        };
        // Root on virtual console 7: that console, the console in front and the system console, its screen's
        // contents; not another console, not /dev/tty.
        assert_eq!(names(hidden_terminals(dev, &[dev.join("tty7")], 0)), ["console", "tty0", "tty7", "vcs7", "vcsa7"]);
        // Root on a pseudo-terminal: nothing (the sandbox's /dev/pts is its own).
        assert!(hidden_terminals(dev, &[dev.join("pts/3"), dev.join("null")], 0).is_empty());
        // `nobody`, wherever it runs: the terminals it owns (its console and a serial line), not its other devices.
        assert_eq!(names(hidden_terminals(dev, &[dev.join("pts/3")], 65534)), ["tty8", "ttyS0"]);
    }
}
