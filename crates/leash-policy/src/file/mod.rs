//! Policy files: YAML or TOML text → a raw tree with positions → a validated [`Policy`]. Unknown keys, bad entries
//! and mode mismatches are errors that name the entry, its line and column, and the rule broken.
//!
//! The pipeline is "parse, don't validate": [`yaml`] and [`toml`] build one raw tree ([`raw`]); [`validate`] turns it
//! into [`crate::spec::Network`] sections (with [`entries`] for each list entry and [`warn`] for `leash check`);
//! [`Policy::compile`] is the only way from there to a policy. [`inline`] does the same for `--allow`/`--block`.

use std::fmt;

use crate::engine::Policy;

mod entries;
mod inline;
mod raw;
mod toml;
mod validate;
mod warn;
mod yaml;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Yaml,
    Toml,
}

impl Format {
    /// `.yaml`/`.yml` → YAML, `.toml` → TOML.
    pub fn from_path(path: &std::path::Path) -> Option<Format> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "yaml" | "yml" => Some(Format::Yaml),
            "toml" => Some(Format::Toml),
            _ => None,
        }
    }
}

/// One problem in a policy file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    /// Where: `network.allowed_hosts[2]`, `profiles.verifier.network.mode`, ... (empty for a syntax error, which
    /// has a position but no entry yet).
    pub entry: String,
    pub line: Option<usize>,
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
    pub entry: String,
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.entry, self.message)
    }
}

pub struct Loaded {
    pub policy: Policy,
    pub warnings: Vec<Warning>,
}

/// Parse and validate the whole file (every profile), then build the policy of `profile` (the top level if None).
pub fn load(text: &str, format: Format, profile: Option<&str>) -> Result<Loaded, Vec<PolicyError>> {
    let root = match format {
        Format::Yaml => yaml::parse(text),
        Format::Toml => toml::parse(text),
    }
    .map_err(|e| vec![e])?;
    let checked = validate::document(&root);
    let mut errors = checked.errors;
    let names: Vec<String> = checked.profiles.iter().map(|(n, _)| n.clone()).collect();
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
            Ok(Loaded { policy: Policy::compile(network), warnings: checked.warnings })
        }
        // A section with errors has no network; its errors are in `errors`.
        _ => Err(errors),
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
    PolicyError { entry: "profiles".to_owned(), line: at.map(|p| p.line), column: at.map(|p| p.column), message }
}
