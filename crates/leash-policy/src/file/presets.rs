//! Host presets: named, versioned bundles of `allowed_hosts` entries (a package registry and its file hosts, a source
//! forge, a model API), written `+NAME` or `+NAME@VERSION` beside hosts in `allowed_hosts` (and `--allow`) and
//! expanded here, in the file layer, into ordinary exact-host entries. The engine never sees a preset: each host a
//! preset adds is a rule whose text names where it came from (`files.pythonhosted.org (+python@1)`), which is what
//! `leash explain` and the audit log print when it decides.
//!
//! Why `+`: an entry must stay a plain scalar in YAML and a string in TOML and JSON, and must never be readable as a
//! host or a host with a port. `+` is not a hostname character, is not one of YAML's indicators (`@` and `` ` `` are
//! reserved, `- @python` does not parse; `!`, `&`, `*`, `%` have meanings), and the spelling has no `:` (so
//! nothing reads `preset:python` as a host and a port). `@VERSION` pins a version, as package managers spell it.
//!
//! Versions: a preset's hosts are fixed for each version, forever. A change makes a new version; `+NAME` is the
//! newest this leash knows (`leash check` says which), `+NAME@1` stays what it is. Every host is exact: no entry of
//! a preset covers a name anyone can register under (a test checks them against the public-suffix list).

use std::sync::Arc;

use super::entries::EntryError;
use super::PolicyErrorKind::{BadHost, BadValue};
use crate::host::parse_host;
use crate::spec::{HostPattern, HostRule};

/// One version of a named bundle of hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostPreset {
    /// The name written after `+` (`python`).
    pub name: &'static str,
    /// The version written after `@`; versions start at 1.
    pub version: u32,
    /// What the bundle is for, in a few words.
    pub about: &'static str,
    /// Each host it allows (exactly that name), and what clients fetch there.
    pub hosts: &'static [(&'static str, &'static str)],
}

impl HostPreset {
    /// `+python@1`.
    pub fn spelled(&self) -> String {
        format!("+{}@{}", self.name, self.version)
    }
}

/// Every preset version leash knows, oldest version of each first. Entries are never edited once released: a change
/// is a new entry with the next version.
pub const HOST_PRESETS: &[HostPreset] = &[
    HostPreset {
        name: "python",
        version: 1,
        about: "PyPI: what pip, uv and poetry install from",
        hosts: &[
            ("pypi.org", "the package index (/simple/, the JSON API)"),
            ("files.pythonhosted.org", "the wheels and sdists the index links to"),
        ],
    },
    HostPreset {
        name: "node",
        version: 1,
        about: "the npm registry: what npm, pnpm and yarn install from",
        hosts: &[
            ("registry.npmjs.org", "npm's and pnpm's registry: metadata and tarballs"),
            ("registry.yarnpkg.com", "yarn's default name for the same registry"),
        ],
    },
    HostPreset {
        name: "rust",
        version: 1,
        about: "crates.io: what cargo fetches crates from",
        hosts: &[
            ("index.crates.io", "the sparse index cargo reads"),
            ("static.crates.io", "the crate files the index points to"),
            ("crates.io", "the registry API (cargo search, older cargo's downloads)"),
        ],
    },
    HostPreset {
        name: "go",
        version: 1,
        about: "the Go module mirror and checksum database (the go command's defaults)",
        hosts: &[
            ("proxy.golang.org", "GOPROXY: modules and Go toolchains"),
            ("sum.golang.org", "GOSUMDB: the checksum database"),
        ],
    },
    HostPreset {
        name: "debian",
        version: 1,
        about: "Debian's apt repositories",
        hosts: &[
            ("deb.debian.org", "the archive and debian-security, on Debian's CDN"),
            ("security.debian.org", "the security archive under its older name"),
        ],
    },
    HostPreset {
        name: "ubuntu",
        version: 1,
        about: "Ubuntu's apt repositories",
        hosts: &[
            ("archive.ubuntu.com", "the archive (amd64, i386)"),
            ("security.ubuntu.com", "security updates (amd64, i386)"),
            ("ports.ubuntu.com", "the archive and security updates of other architectures (arm64, ...)"),
        ],
    },
    HostPreset {
        name: "alpine",
        version: 1,
        about: "Alpine's apk repositories",
        hosts: &[("dl-cdn.alpinelinux.org", "the package repositories, on Alpine's CDN")],
    },
    HostPreset {
        name: "github",
        version: 1,
        about: "GitHub: cloning, archives, raw files, release downloads and the API (every public repository, and \
                any the agent holds a token for)",
        hosts: &[
            ("github.com", "git over HTTPS, the web pages, release download links"),
            ("api.github.com", "the REST and GraphQL API (gh, actions)"),
            ("codeload.github.com", "archive downloads (tarballs and zips of a ref)"),
            ("raw.githubusercontent.com", "raw files of a repository"),
            ("objects.githubusercontent.com", "release assets (where github.com's download links redirect)"),
            ("release-assets.githubusercontent.com", "release assets (the newer redirect target)"),
        ],
    },
    HostPreset {
        name: "docker-hub",
        version: 1,
        about: "Docker Hub's registry: pulling images",
        hosts: &[
            ("registry-1.docker.io", "the registry API (manifests)"),
            ("auth.docker.io", "the token service the registry sends clients to"),
            ("production.cloudflare.docker.com", "image layers, where the registry redirects blob downloads"),
        ],
    },
    HostPreset {
        name: "anthropic",
        version: 1,
        about: "Anthropic's API",
        hosts: &[("api.anthropic.com", "the Messages API")],
    },
    HostPreset {
        name: "openai",
        version: 1,
        about: "OpenAI's API",
        hosts: &[("api.openai.com", "the Responses and Chat Completions APIs")],
    },
    HostPreset {
        name: "gemini",
        version: 1,
        about: "Google's Gemini API",
        hosts: &[("generativelanguage.googleapis.com", "the Gemini API")],
    },
];

/// The newest version of `name`, if it is a preset.
pub fn newest_preset(name: &str) -> Option<&'static HostPreset> {
    HOST_PRESETS.iter().filter(|p| p.name == name).max_by_key(|p| p.version)
}

/// The preset version `text` names, written as in a policy (`+python`, `+python@1`) or without the `+`; the error
/// says what exists (the nearest name, the versions there are).
pub fn preset_named(text: &str) -> Result<&'static HostPreset, String> {
    let spelled = if is_preset(text) { text.to_owned() } else { format!("+{text}") };
    lookup(&spelled).map_err(|e| e.message)
}

/// A preset a policy section used: where, as written, and the version it stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PresetUse {
    /// The entry it was written in (`network.allowed_hosts[0]`, `--allow[1]`).
    pub entry: String,
    /// The entry as written (`+python`, `+python@1`).
    pub written: String,
    /// The version it stands for.
    pub preset: &'static HostPreset,
}

/// Whether `text` is written as a preset (it starts with `+`), so it is not to be read as a host.
pub(crate) fn is_preset(text: &str) -> bool {
    text.starts_with('+')
}

/// `+NAME` or `+NAME@VERSION` → the preset version it names, or an error that says what exists.
pub(crate) fn lookup(text: &str) -> Result<&'static HostPreset, EntryError> {
    let spelled = text.strip_prefix('+').unwrap_or(text);
    let (name, version) = match spelled.split_once('@') {
        Some((name, version)) => (name, Some(version)),
        None => (spelled, None),
    };
    let Some(newest) = newest_preset(name) else {
        return Err(EntryError { kind: BadValue, message: unknown_name(text, name) });
    };
    let Some(version) = version else { return Ok(newest) };
    let found = version.parse::<u32>().ok().filter(|_| version.bytes().all(|b| b.is_ascii_digit()));
    match found.and_then(|v| HOST_PRESETS.iter().find(|p| p.name == name && p.version == v)) {
        Some(preset) => Ok(preset),
        None => {
            let versions: Vec<String> =
                HOST_PRESETS.iter().filter(|p| p.name == name).map(|p| format!("`+{name}@{}`", p.version)).collect();
            let what = match version {
                "" => "no version follows `@`".to_owned(),
                _ => format!("`{name}` has no version `{version}`"),
            };
            let message =
                format!("`{text}`: {what}; did you mean {}? (`+{name}` is the newest)", versions.join(" or "));
            Err(EntryError { kind: BadValue, message })
        }
    }
}

/// The rules a preset entry adds: each of its hosts, exactly, with a text naming the preset.
pub(crate) fn rules(preset: &HostPreset, index: usize) -> Vec<HostRule> {
    let spelled = preset.spelled();
    preset
        .hosts
        .iter()
        .filter_map(|(host, _)| match parse_host(host) {
            Ok(crate::host::Host::Name(name)) => Some(HostRule {
                pattern: HostPattern::Exact(name),
                text: Arc::from(format!("{host} ({spelled})")),
                index,
            }),
            // Every preset host is a name: `every_preset_host_is_an_exact_registrable_name` checks it.
            _ => None,
        })
        .collect()
}

/// `+pyhton` → "did you mean `+python`?"; a word like no preset → the list of presets.
fn unknown_name(text: &str, name: &str) -> String {
    let mut names: Vec<&str> = HOST_PRESETS.iter().map(|p| p.name).collect();
    names.dedup();
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') {
        let message = format!("`{text}` is not a preset: a preset is `+NAME` or `+NAME@VERSION`");
        return format!("{message}; the presets are {}", listed(&names));
    }
    match super::spelling::closest(name, &names) {
        Some(close) => {
            format!("`{text}` is not a preset; did you mean `+{close}`? (`leash policy presets` lists them)")
        }
        None => format!("`{text}` is not a preset; the presets are {}", listed(&names)),
    }
}

fn listed(names: &[&str]) -> String {
    names.iter().map(|n| format!("`+{n}`")).collect::<Vec<_>>().join(", ")
}

/// A `+` entry somewhere presets are not taken (`model_apis`, `allowed_urls`, a blocklist), said plainly.
pub(crate) fn not_here(text: &str, list: &str) -> EntryError {
    EntryError {
        kind: BadHost,
        message: format!("`{text}` is a preset; presets go in `allowed_hosts` (or `--allow`), not in `{list}`"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::entries::host_entry;

    #[test]
    fn every_preset_host_is_an_exact_registrable_name() {
        for preset in HOST_PRESETS {
            assert!(!preset.hosts.is_empty(), "{}", preset.spelled());
            assert_eq!(rules(preset, 0).len(), preset.hosts.len(), "{}", preset.spelled());
            for (host, purpose) in preset.hosts {
                assert!(matches!(host_entry(host), Ok(HostPattern::Exact(_))), "{host}");
                assert!(crate::open_suffix::open_suffix(host).is_none(), "{host} is a public suffix");
                assert!(!purpose.is_empty(), "{host}");
            }
        }
    }

    #[test]
    fn each_name_and_version_is_defined_once_and_versions_count_from_one() {
        for (i, a) in HOST_PRESETS.iter().enumerate() {
            assert!(HOST_PRESETS[..i].iter().all(|b| (a.name, a.version) != (b.name, b.version)), "{}", a.spelled());
            let versions = HOST_PRESETS.iter().filter(|p| p.name == a.name).count();
            assert!(a.version >= 1 && a.version as usize <= versions, "{}", a.spelled());
        }
    }

    #[test]
    fn names_and_versions_are_looked_up_and_mistakes_get_the_nearest_name() {
        assert_eq!(lookup("+python").unwrap().spelled(), "+python@1");
        assert_eq!(lookup("+python@1").unwrap().spelled(), "+python@1");
        let err = |t| lookup(t).unwrap_err().message;
        assert_eq!(
            err("+pyhton"),
            "`+pyhton` is not a preset; did you mean `+python`? (`leash policy presets` lists them)"
        );
        assert_eq!(
            err("+python@7"),
            "`+python@7`: `python` has no version `7`; did you mean `+python@1`? (`+python` is the newest)"
        );
        assert!(err("+python@v1").contains("no version `v1`"));
        assert!(err("+python@").contains("`+python@`: no version follows `@`; did you mean `+python@1`?"));
        assert!(err("+kubernetes").contains("the presets are `+python`, `+node`"));
        assert!(err("+").contains("a preset is `+NAME` or `+NAME@VERSION`"));
        assert!(err("+Python").contains("a preset is `+NAME`"));
        assert_eq!(lookup("+pyhton").unwrap_err().kind, BadValue);
    }

    #[test]
    fn a_preset_becomes_exact_rules_naming_it() {
        let texts: Vec<String> = rules(lookup("+python").unwrap(), 3).iter().map(|r| r.text.to_string()).collect();
        assert_eq!(texts, ["pypi.org (+python@1)", "files.pythonhosted.org (+python@1)"]);
        assert!(rules(lookup("+python").unwrap(), 3).iter().all(|r| r.index == 3));
    }
}
