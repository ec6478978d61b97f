//! `leash run --allow HOST --block RULE`: a policy from the command line, validated entry by entry as the file's
//! lists are (`--allow` as `allowed_hosts`, presets included, `--block` as `blocked_urls`), with the default ports.

use std::sync::Arc;

use super::entries::EntryError;
use super::entries::{host_entry, url_entry, List, UrlEntry};
use super::presets;
use super::{PolicyError, PolicyErrorKind};
use crate::decision::Mode;
use crate::engine::Policy;
use crate::spec::{HostRule, Network, UrlRule};

impl Policy {
    /// An allowlist of `allow` or a blocklist of `block`; both empty is an allowlist that allows nothing, both
    /// non-empty is an error (the two modes cannot be mixed). Errors name `--allow[0]`, `--block[1]`, ...
    pub fn from_inline(allow: &[String], block: &[String]) -> Result<Policy, Vec<PolicyError>> {
        if !allow.is_empty() && !block.is_empty() {
            let message = "`--allow` and `--block` cannot be mixed: an allowlist refuses everything not allowed, a \
                           blocklist allows everything not blocked; choose one"
                .to_owned();
            let kind = PolicyErrorKind::WrongList;
            return Err(vec![PolicyError { kind, entry: "--block[0]".to_owned(), line: None, column: None, message }]);
        }
        let mut errors = Vec::new();
        let mut network = Network::empty(if block.is_empty() { Mode::Allowlist } else { Mode::Blocklist });
        for (index, text) in allow.iter().enumerate() {
            if presets::is_preset(text) {
                match presets::lookup(text) {
                    Ok(preset) => network.hosts.extend(presets::rules(preset, index)),
                    Err(e) => errors.push(inline_error("--allow", index, e)),
                }
                continue;
            }
            match host_entry(text) {
                Ok(pattern) => network.hosts.push(HostRule { pattern, text: Arc::from(text.as_str()), index }),
                Err(e) => errors.push(inline_error("--allow", index, allow_error(text, e))),
            }
        }
        for (index, text) in block.iter().enumerate() {
            if presets::is_preset(text) {
                let e = presets::not_here(text, "--block");
                errors.push(inline_error("--block", index, e));
                continue;
            }
            match url_entry(text, List::BlockedUrls) {
                Ok(UrlEntry::Rule(rule)) => network.urls.push(UrlRule { index, ..rule }),
                // Already refused as an IP literal; nothing to add.
                Ok(UrlEntry::Ipv4) => {}
                Err(e) => errors.push(inline_error("--block", index, e)),
            }
        }
        match errors.is_empty() {
            true => Ok(Policy::compile(network)),
            false => Err(errors),
        }
    }
}

/// An `--allow` entry with a path says where path rules go, instead of only "has `/`".
fn allow_error(text: &str, e: EntryError) -> EntryError {
    match text.split_once('/') {
        Some((host, path)) if !host.is_empty() && !text.contains("://") => EntryError {
            kind: PolicyErrorKind::WrongList,
            message: format!(
                "`{text}` has a path; `--allow` takes hosts. Allow only some paths with a policy file's \
                 `allowed_urls: [{host}/{path}]` (the host is then TLS-inspected), or the whole host with `--allow {host}`"
            ),
        },
        _ => e,
    }
}

fn inline_error(flag: &str, index: usize, e: EntryError) -> PolicyError {
    PolicyError { kind: e.kind, entry: format!("{flag}[{index}]"), line: None, column: None, message: e.message }
}
