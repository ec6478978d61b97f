//! `leash check FILE`: validate every part of a policy file (every profile), print every error with its place, and
//! warn about policies that are valid but surprising.

use leash_policy::{Mode, ServiceKind};

use crate::cli::CheckArgs;
use crate::exit::{Exit, Failure};
use crate::policy_file::load_file;

pub fn run(args: &CheckArgs) -> Result<Exit, Failure> {
    let (file, loaded) = match (&args.file, &args.task) {
        (Some(file), _) => (file, load_file(file, None)?),
        (None, Some(task)) => {
            let (l, became) = crate::policy_file::load_task(task)?;
            println!("{}: read as a task:", task.display());
            for line in became {
                println!("  {line}");
            }
            (task, l)
        }
        (None, None) => return Ok(Exit::Usage),
    };
    let args = Checked { file };
    for w in &loaded.warnings {
        eprintln!("warning: {}: {}: {}", args.file.display(), w.entry, w.message);
    }
    // Each credential's secret that is here must be usable, as it must be when leash starts; one that is not here
    // (a lint in CI has no secrets) is a warning: leash would not start without it.
    match crate::shared::secrets::check_those_here(&loaded.policy) {
        Ok(missing) => {
            for why in missing {
                eprintln!("warning: {}: {why}; leash will not start until it is", args.file.display());
            }
        }
        Err(why) => {
            let message = format!("{}: {why}; leash would not start with this policy", args.file.display());
            return Err(Failure::new(Exit::Refused, message));
        }
    }
    let mode = match loaded.policy.mode() {
        _ if loaded.policy.audits() => "audit: an allowlist that logs what it would refuse as would-block",
        _ if loaded.policy.asks() => {
            "ask: an allowlist that holds what it refuses as not-allowed while a person is asked"
        }
        Mode::Allowlist => "allowlist",
        Mode::Blocklist => "blocklist",
    };
    println!("{}: valid ({mode})", args.file.display());
    for line in preset_lines(&loaded.presets).into_iter().chain(reach_lines(&loaded.policy)) {
        println!("  {line}");
    }
    Ok(Exit::Ok)
}

/// The file checked, under the name the messages use.
struct Checked<'a> {
    file: &'a std::path::Path,
}

/// What each preset in `allowed_hosts` added: its version (said when the entry does not pin one) and its hosts.
fn preset_lines(presets: &[leash_policy::PresetUse]) -> Vec<String> {
    presets
        .iter()
        .map(|used| {
            let hosts: Vec<&str> = used.preset.hosts.iter().map(|(host, _)| *host).collect();
            let version = match used.written.contains('@') {
                true => String::new(),
                false => format!(" (the newest; pin it with `{}`)", used.preset.spelled()),
            };
            format!(
                "{} `{}` is {}{version}: adds {}",
                used.entry,
                used.written,
                used.preset.spelled(),
                hosts.join(", ")
            )
        })
        .collect()
}

/// What the policy reaches besides the proxy's rules: the upstream proxy requests go out through, and each service.
fn reach_lines(policy: &leash_policy::Policy) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(up) = policy.upstream_proxy() {
        let bypass = match up.bypass.len() {
            0 => String::new(),
            n => format!(", {n} destination(s) reached directly (upstream_proxy_bypass)"),
        };
        lines.push(format!("allowed requests go out through the upstream proxy {}{bypass}", up.url()));
    }
    for s in policy.services() {
        let kind = match &s.kind {
            ServiceKind::Tcp => "tcp, every connection logged".to_owned(),
            ServiceKind::Http { paths } if paths.is_empty() => "http, every path, each request logged".to_owned(),
            ServiceKind::Http { paths } => {
                let paths: Vec<&str> = paths.iter().map(|p| p.as_str()).collect();
                format!("http, only {}, each request logged", paths.join(" "))
            }
        };
        lines.push(format!("service {}: {} -> {} ({kind})", s.name, s.listen.shown(), s.target.shown()));
    }
    lines
}
