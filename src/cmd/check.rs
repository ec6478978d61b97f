//! `leash check FILE`: validate every part of a policy file (every profile), print every error with its place, and
//! warn about policies that are valid but surprising.

use std::path::Path;
use std::sync::Arc;

use leash_policy::{Boundary, Mode, Policy, ServiceKind};

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
    let within = args.within.as_deref().map(crate::policy_file::load_boundary).transpose()?;
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
    if let Some(boundary) = &within {
        check_within(args.file, &loaded.policy, boundary)?;
    }
    println!("{}: valid ({mode})", args.file.display());
    for line in preset_lines(&loaded.presets).into_iter().chain(reach_lines(&loaded.policy)) {
        println!("  {line}");
    }
    if let Some(boundary) = &within {
        println!("  within the boundary {}", boundary.label());
    }
    Ok(Exit::Ok)
}

/// `--within BOUNDARY`: every entry of the policy that allows what the boundary refuses is an error (a run under
/// the boundary would refuse it: the entry is a promise the policy cannot keep), one that the boundary admits only in
/// part a warning, and so is a blocklist the boundary's allowlist caps. Its services must be the boundary's.
fn check_within(file: &Path, policy: &Policy, boundary: &Arc<Boundary>) -> Result<(), Failure> {
    let (file, label) = (file.display(), boundary.label());
    if boundary.caps_a_blocklist(policy) {
        eprintln!(
            "warning: {file}: a blocklist allows every host it does not block, and the boundary {label} is an \
             allowlist: under it, only the boundary's hosts pass"
        );
    }
    let mut errors: Vec<String> = Vec::new();
    for outside in boundary.outside(policy) {
        let by = &outside.refused_by;
        let entry = by.rule.as_ref().map_or(String::new(), |r| format!(" by `{r}`"));
        let why = format!("refused there ({}{entry})", by.reason);
        match outside.whole {
            true => errors.push(format!("{file}: {}: outside the boundary {label}: {why}", outside.entry)),
            false => eprintln!(
                "warning: {file}: {}: wider than the boundary {label}: some of its subdomains are {why}",
                outside.entry
            ),
        }
    }
    errors.extend(boundary.services_outside(policy).into_iter().map(|p| format!("{file}: {p}")));
    match errors.is_empty() {
        true => Ok(()),
        false => Err(Failure::new(Exit::Refused, errors.join("\n"))),
    }
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
