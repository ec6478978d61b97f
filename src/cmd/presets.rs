//! `leash policy presets [NAME]`: the host presets `allowed_hosts` takes (`+python`, `+github@1`), each with its
//! hosts; or one, with what clients fetch from each host. The table itself is the policy crate's
//! ([`leash_policy::HOST_PRESETS`]); this only prints it.

use leash_policy::{newest_preset, preset_named, HostPreset, HOST_PRESETS};

use crate::cli::PolicyPresetsArgs;
use crate::exit::{Exit, Failure};

pub fn show(args: &PolicyPresetsArgs) -> Result<Exit, Failure> {
    match &args.name {
        None => {
            for preset in HOST_PRESETS {
                let hosts: Vec<&str> = preset.hosts.iter().map(|(host, _)| *host).collect();
                println!("{:<16} {}{}", preset.spelled(), preset.about, newest_mark(preset));
                println!("{:<16} {}", "", hosts.join(", "));
            }
            println!(
                "\nWrite `+NAME` (the newest version) or `+NAME@VERSION` (pinned) in allowed_hosts or after --allow."
            );
        }
        Some(name) => {
            let preset = preset_named(name).map_err(|why| Failure::usage(format!("leash policy presets: {why}")))?;
            println!("{}: {}{}", preset.spelled(), preset.about, newest_mark(preset));
            let width = preset.hosts.iter().map(|(host, _)| host.len()).max().unwrap_or(0);
            for (host, purpose) in preset.hosts {
                println!("  {host:<width$}  {purpose}");
            }
        }
    }
    Ok(Exit::Ok)
}

/// " (what `+NAME` stands for)" on the newest version of a preset.
fn newest_mark(preset: &HostPreset) -> String {
    match newest_preset(preset.name) {
        Some(newest) if newest.version == preset.version => format!(" (what `+{}` stands for)", preset.name),
        _ => String::new(),
    }
}
