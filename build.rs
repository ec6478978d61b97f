//! Names the commit a binary was built from, for `leash --version`: `git describe` of the source tree when it is a
//! git checkout (with `-dirty` for uncommitted changes), else `unknown` (a source tarball, no git).

use std::process::Command;

fn main() {
    let commit = Command::new("git")
        .args(["describe", "--always", "--dirty", "--abbrev=12"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=LEASH_COMMIT={commit}");
    // Again when HEAD moves or the index changes (a commit, a checkout, staged edits); not on every edit.
    for path in [".git/HEAD", ".git/index"] {
        println!("cargo:rerun-if-changed={path}");
    }
}
