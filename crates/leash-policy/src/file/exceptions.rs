//! The checks on a policy that holds rules of both kinds: an allowlist's `blocked_urls`, a blocklist's
//! `allowed_hosts` and `allowed_urls`. Each is an exception decided against the mode's own rules by specificity (the
//! engine's one order); what makes such a policy mean nothing clear is an error here:
//! - one entry both allowed and blocked at the same specificity (`.x` allowed and `x` blocked, or one path in both
//!   lists): which is meant cannot be told, and picking one silently would hide the mistake;
//! - an address in a blocklist's `allowed_hosts`: a blocklist refuses every IP literal, and an exception cannot
//!   re-admit one.
//!
//! What is valid but does nothing (an exception inside no rule of the other kind) is a warning (`warn.rs`).

use std::borrow::Cow;

use super::raw::{Node, Pos, Value};
use super::validate::{find, Checker, Fields};
use super::PolicyErrorKind::{Conflict, WrongList};
use crate::decision::Mode;
use crate::fasthash::FastMap;
use crate::spec::{HostPattern, HostRule, Network, UrlRule};

impl Checker {
    /// Every error that comes from mixing the two kinds in one section.
    pub(super) fn exceptions_hold(&mut self, prefix: &str, net: &Network, fields: &Fields<'_>) {
        let at = |list: &str, index: usize| entry_pos(fields, list, index);
        for rule in &net.exception_hosts {
            if let HostPattern::Ipv4(_) = rule.pattern {
                let message = format!(
                    "`{}` is an IP address: a blocklist refuses every IP literal, and an exception cannot re-admit one",
                    rule.text
                );
                let entry = format!("{prefix}.allowed_hosts[{}]", rule.index);
                self.error(WrongList, &entry, at("allowed_hosts", rule.index), message);
            }
        }
        let (allow_hosts, allow_urls, block_urls) = match net.mode {
            Mode::Allowlist => (&net.hosts, &net.urls, &net.exception_urls),
            Mode::Blocklist => (&net.exception_hosts, &net.exception_urls, &net.urls),
        };
        for (allowed, list, index, blocked) in ties(allow_hosts, allow_urls, block_urls) {
            let message = format!(
                "`{allowed}` is allowed and `{}` ({prefix}.blocked_urls[{}]) blocked at the same specificity, so which \
                 one decides cannot be told; remove one (a more specific entry of either kind is an exception)",
                blocked.text, blocked.index
            );
            self.error(Conflict, &format!("{prefix}.{list}[{index}]"), at(list, index), message);
        }
    }
}

/// Each allow entry that ties with a block entry: `.x` with the host entry `x`, a path with the same path
/// (block paths compare case-insensitively, so equal when lowered). As (its text, its list, its index, the block
/// entry).
fn ties<'n>(
    allow_hosts: &'n [HostRule],
    allow_urls: &'n [UrlRule],
    block_urls: &'n [UrlRule],
) -> Vec<(&'n str, &'static str, usize, &'n UrlRule)> {
    let mut block_hosts: FastMap<&str, &UrlRule> = FastMap::default();
    let mut block_paths: FastMap<(&str, Cow<'_, str>), &UrlRule> = FastMap::default();
    for rule in block_urls {
        match &rule.path {
            None => block_hosts.entry(rule.host.as_str()).or_insert(rule),
            Some(path) => block_paths.entry((rule.host.as_str(), lower(path.as_str()))).or_insert(rule),
        };
    }
    let mut out = Vec::new();
    for rule in allow_hosts {
        if let HostPattern::Subtree(name) = &rule.pattern {
            if let Some(blocked) = block_hosts.get(name.as_str()) {
                out.push((&*rule.text, "allowed_hosts", rule.index, *blocked));
            }
        }
    }
    for rule in allow_urls {
        let Some(path) = &rule.path else { continue };
        if let Some(blocked) = block_paths.get(&(rule.host.as_str(), lower(path.as_str()))) {
            out.push((&*rule.text, "allowed_urls", rule.index, *blocked));
        }
    }
    out
}

fn lower(path: &str) -> Cow<'_, str> {
    match path.bytes().any(|b| b.is_ascii_uppercase()) {
        true => Cow::Owned(path.to_ascii_lowercase()),
        false => Cow::Borrowed(path),
    }
}

/// Where entry `index` of list `name` is written (the list's own place if the entry cannot be found).
fn entry_pos(fields: &Fields<'_>, name: &str, index: usize) -> Pos {
    let Some((key, node)) = find(fields, name) else { return Pos::default() };
    match &node.value {
        Value::Seq(items) => items.get(index).map_or(key.pos, |item: &Node| item.pos),
        _ => key.pos,
    }
}
