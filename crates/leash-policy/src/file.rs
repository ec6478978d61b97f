//! Policy files: YAML or TOML text → a raw tree with positions → a validated [`Policy`]. Unknown keys, bad entries
//! and mode mismatches are errors that name the entry, its line and column, and the rule broken.

use crate::engine::Policy;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Yaml,
    Toml,
}

impl Format {
    /// `.yaml`/`.yml` → YAML, `.toml` → TOML.
    pub fn from_path(_path: &std::path::Path) -> Option<Format> {
        todo!()
    }
}

/// One problem in a policy file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    /// Where: `network.allowed_hosts[2]`, `profiles.verifier.network.mode`, ...
    pub entry: String,
    pub line: Option<usize>,
    pub column: Option<usize>,
    /// Why, lower-case, user input in backticks.
    pub message: String,
}

/// A valid but surprising policy, for `leash check`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub entry: String,
    pub message: String,
}

pub struct Loaded {
    pub policy: Policy,
    pub warnings: Vec<Warning>,
}

/// Parse and validate the whole file (every profile), then build the policy of `profile` (the top level if None).
pub fn load(_text: &str, _format: Format, _profile: Option<&str>) -> Result<Loaded, Vec<PolicyError>> {
    todo!()
}
