//! Policy files: YAML, TOML or JSON text → a raw tree with positions → a validated [`Policy`]. Unknown keys, bad entries
//! and mode mismatches are errors that name the entry, its line and column, and the rule broken, each with a
//! [`PolicyErrorKind`] a caller may match.
//!
//! The pipeline is "parse, don't validate": `yaml` and `toml` build one raw tree (`raw`); `validate` turns it
//! into `crate::spec::Network` sections (with `entries` for each list entry and `warn` for `leash check`);
//! `Policy::compile` is the only way from there to a policy. `inline` does the same for `--allow`/`--block`.

use std::fmt;

pub use attachment::{load_attachment, Attachment, Namespace};
pub use edit::{allow_host, EditError};
pub use presets::{newest_preset, preset_named, HostPreset, PresetUse, HOST_PRESETS};
pub use task::{task_policy, TaskFormat, TaskPolicy};

use crate::engine::Policy;

mod attachment;
mod codex;
mod credentials;
mod domains;
mod edit;
mod entries;
mod exceptions;
mod foreign;
mod gh_aw;
mod inline;
mod json;
mod methods;
mod presets;
mod raw;
mod sandbox_settings;
mod services;
mod spelling;
mod task;
mod toml;
mod validate;
mod warn;
mod yaml;

/// The syntax of a policy or attachment file, as its extension names it ([`Format::from_path`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `.yaml`, `.yml`.
    Yaml,
    /// `.toml`.
    Toml,
    /// `.json`: strict JSON (RFC 8259), the same document as its YAML spelling.
    Json,
}

impl Format {
    /// `.yaml`/`.yml` → YAML, `.toml` → TOML, `.json` → JSON.
    pub fn from_path(path: &std::path::Path) -> Option<Format> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "yaml" | "yml" => Some(Format::Yaml),
            "toml" => Some(Format::Toml),
            "json" => Some(Format::Json),
            _ => None,
        }
    }

    /// The text as the raw tree every check reads, with a position for every node.
    pub(crate) fn parse(self, text: &str) -> Result<raw::Node, PolicyError> {
        match self {
            Format::Yaml => yaml::parse(text),
            Format::Toml => toml::parse(text),
            Format::Json => json::parse(text),
        }
    }
}

/// What kind of problem a [`PolicyError`] is, for a caller that acts on it rather than printing it. The message
/// says the same for a person; the kind is what code may match (new kinds may be added).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PolicyErrorKind {
    /// The text is not valid YAML, TOML or JSON, or uses what a policy refuses: YAML tags, several documents, non-string
    /// keys, aliases to unknown anchors, nesting too deep, aliases that expand too far.
    Syntax,
    /// A key the section does not have (`colour`, `netwrk`).
    UnknownKey,
    /// A key given twice in one mapping (in TOML, found by the TOML parser).
    DuplicateKey,
    /// A required key is missing (`network`, `mode`), or the whole file is empty.
    MissingKey,
    /// A value of the wrong type: a string where a list is expected, a number where a string is, ...
    WrongType,
    /// A word that is not one the setting takes (`mode`, `inspect`, `provider_tools`).
    BadValue,
    /// A profile name with characters other than letters, digits, `-` and `_`.
    BadProfileName,
    /// A host entry, or the host part of a URL entry, that the list does not accept: uppercase, `*`, non-ASCII, an
    /// empty label, a port, an IPv6 or oddly spelled IP literal, a leading dot where none belongs, an IP address
    /// in `model_apis`, a character that is not a letter, digit, hyphen or dot (a path in `allowed_hosts`), ...
    BadHost,
    /// An entry written as a URL: a scheme (`https://`), a query (`?`) or a fragment (`#`); rules are `host` or
    /// `host/path`.
    BadUrl,
    /// The path of a URL entry: a space or control character, a malformed percent-escape, no leading `/`.
    BadPath,
    /// An `allow_destinations` entry that is not an address or a network (`10.0.0.0/8`).
    BadCidr,
    /// A port that is not 1-65535.
    BadPort,
    /// A method word that is not one: misspelt (`GTE`), in the wrong case (`get`), `CONNECT`, an empty `methods`,
    /// or methods on an entry that cannot list them (an IP address).
    BadMethod,
    /// An entry or list that belongs elsewhere: a list of the other mode (`blocked_urls` in an allowlist), a whole
    /// host or an IP address in `allowed_urls` (they go in `allowed_hosts`), `--allow` mixed with `--block`.
    WrongList,
    /// The profile asked for is not defined.
    UnknownProfile,
    /// A `services` entry that would not be a gate, or clashes: its target also reachable through the proxy, a
    /// loopback name allowed beside services, a listener on leash's own port or a transparent one.
    ServiceClash,
    /// One entry both allowed and blocked at the same specificity (`.x` in `allowed_hosts` and `x` in
    /// `blocked_urls`, or one path in `allowed_urls` and `blocked_urls`): which is meant cannot be told.
    Conflict,
}

/// One problem in a policy file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    /// What kind of problem it is.
    pub kind: PolicyErrorKind,
    /// Where: `network.allowed_hosts[2]`, `profiles.verifier.network.mode`, ... (empty for a syntax error, which
    /// has a position but no entry yet).
    pub entry: String,
    /// The line in the file, from 1, when known.
    pub line: Option<usize>,
    /// The column in that line, from 1, when known.
    pub column: Option<usize>,
    /// Why, lower-case, user input in backticks.
    pub message: String,
}

impl fmt::Display for PolicyError {
    /// `line 4, column 7: network.allowed_hosts[2]: <message>`; parts that are unknown are left out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.column) {
            (Some(line), Some(column)) => write!(f, "line {line}, column {column}: ")?,
            (Some(line), None) => write!(f, "line {line}: ")?,
            _ => {}
        }
        if !self.entry.is_empty() {
            write!(f, "{}: ", self.entry)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for PolicyError {}

/// A valid but surprising policy, for `leash check`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// The entry it is about (`network.allowed_hosts[3]`).
    pub entry: String,
    /// What is surprising, and what was likely meant.
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.entry, self.message)
    }
}

/// A policy file loaded: the policy, and what `leash check` would warn about in it.
pub struct Loaded {
    /// The policy, ready to decide.
    pub policy: Policy,
    /// Valid but surprising entries, in the order of the file.
    pub warnings: Vec<Warning>,
    /// The presets every section names in `allowed_hosts` (each with its entry: `profiles.x.network.allowed_hosts[0]`),
    /// in the order of the file; `leash check` says what each added.
    pub presets: Vec<PresetUse>,
}

/// Parse and validate the whole file (every profile), then build the policy of `profile` (the top level if None).
pub fn load(text: &str, format: Format, profile: Option<&str>) -> Result<Loaded, Vec<PolicyError>> {
    let root = format.parse(text).map_err(|e| vec![e])?;
    let checked = validate::document(&root);
    let mut errors = checked.errors;
    let names: Vec<String> = checked.profiles.iter().map(|(n, _)| n.clone()).collect();
    let presets = checked.presets;
    let chosen = match profile {
        None => checked.top,
        Some(name) => match checked.profiles.into_iter().find(|(n, _)| n == name) {
            Some((_, network)) => network,
            None => {
                errors.push(unknown_profile(name, &names, checked.profiles_pos));
                None
            }
        },
    };
    // Checks run section by section; report in file order. Stable, so one position keeps its checks' order.
    errors.sort_by_key(|e| (e.line, e.column));
    match chosen {
        Some(network) if errors.is_empty() => {
            let policy = Policy::compile(network);
            let mut warnings = checked.warnings;
            warnings.extend(warn::unused_credentials(profile, &policy));
            warnings.extend(warn::upstream_proxy(profile, &policy));
            Ok(Loaded { policy, warnings, presets })
        }
        // A section with errors has no network; its errors are in `errors`.
        _ => Err(errors),
    }
}

/// An error at a position of the text, before any entry is known (the parsers' syntax errors).
fn at_position(kind: PolicyErrorKind, at: raw::Pos, message: &str) -> PolicyError {
    PolicyError {
        kind,
        entry: String::new(),
        line: Some(at.line),
        column: Some(at.column),
        message: message.to_owned(),
    }
}

fn unknown_profile(name: &str, known: &[String], at: Option<raw::Pos>) -> PolicyError {
    let message = match known {
        [] => format!("no profile `{name}`: the policy defines no profiles"),
        _ => {
            let list = known.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ");
            format!("no profile `{name}`; the policy defines {list}")
        }
    };
    PolicyError {
        kind: PolicyErrorKind::UnknownProfile,
        entry: "profiles".to_owned(),
        line: at.map(|p| p.line),
        column: at.map(|p| p.column),
        message,
    }
}
