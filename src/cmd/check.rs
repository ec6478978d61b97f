//! `leash check FILE`: validate every part of a policy file (every profile), print every error with its place, and
//! warn about policies that are valid but surprising.

use leash_policy::Mode;

use crate::cli::CheckArgs;
use crate::exit::Exit;
use crate::policy_file::load_file;

pub fn run(args: &CheckArgs) -> Exit {
    let loaded = match load_file(&args.file, None) {
        Ok(l) => l,
        Err(code) => return code,
    };
    for w in &loaded.warnings {
        eprintln!("warning: {}: {}: {}", args.file.display(), w.entry, w.message);
    }
    // Each credential's secret must be readable and non-empty here, as it must be when leash starts.
    if let Err(why) = crate::shared::secrets::read(&loaded.policy) {
        eprintln!("{}: {why}; leash would not start with this policy", args.file.display());
        return Exit::Refused;
    }
    let mode = match loaded.policy.mode() {
        _ if loaded.policy.audits() => "audit: an allowlist that logs what it would refuse as would-block",
        Mode::Allowlist => "allowlist",
        Mode::Blocklist => "blocklist",
    };
    println!("{}: valid ({mode})", args.file.display());
    Exit::Ok
}
