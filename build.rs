//! Names the commit a binary was built from, for `leash --version`: `git describe` of the source tree when it is a
//! git checkout (with `-dirty` for uncommitted changes), else `unknown` (a source tarball, no git). On Linux with
//! glibc, also packs the binary's relative relocations where the toolchain can ([`pack_relative_relocs`]).

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
    if pack_relative_relocs() {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// Whether to link `leash` with packed relative relocations (RELR). The static-pie (`.cargo/config.toml`) relocates
/// itself before `main`: its ~10,700 relative relocations took a 257 KB table, read from the file on every start,
/// where packed they take 3 KB, and `leash run -- true` starts about 0.3 ms sooner (bench/RESULTS.md). Only for a
/// native build whose glibc is 2.36 or later (older static start code ignores the packed table and would leave the
/// binary unrelocated) and whose linker knows the option (binutils 2.38 on); anything else links as before.
fn pack_relative_relocs() -> bool {
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    if var("CARGO_CFG_TARGET_OS") != "linux" || var("CARGO_CFG_TARGET_ENV") != "gnu" || var("TARGET") != var("HOST") {
        return false;
    }
    let output = |program: &str, args: &[&str]| {
        Command::new(program).args(args).output().ok().map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
    };
    let glibc = output("getconf", &["GNU_LIBC_VERSION"]).unwrap_or_default();
    let at_least_2_36 = glibc
        .trim()
        .strip_prefix("glibc ")
        .and_then(|v| v.split_once('.'))
        .and_then(|(major, minor)| Some((major.parse::<u32>().ok()?, minor.parse::<u32>().ok()?)))
        .is_some_and(|version| version >= (2, 36));
    let linker = var("RUSTC_LINKER");
    let linker = if linker.is_empty() { "cc".to_owned() } else { linker };
    at_least_2_36 && output(&linker, &["-Wl,--help"]).is_some_and(|help| help.contains("pack-relative-relocs"))
}
