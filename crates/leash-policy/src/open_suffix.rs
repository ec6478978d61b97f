//! Names anyone can register under. A wildcard entry whose domain is itself a public suffix (`.workers.dev`,
//! `.s3.amazonaws.com`, `.blob.core.windows.net`, `.githubusercontent.com`, `.ngrok-free.app`, and `.co.uk` alike)
//! covers names their owners hand to any customer: what the agent sends there may reach a stranger. The public-suffix
//! list (compiled in, the `psl` crate) says which names are suffixes; its private section lists the providers'.
//!
//! Only an entry that *is* a suffix is found: one above a suffix (`.amazonaws.com`, over `s3.amazonaws.com`) is
//! not, since the compiled list can be asked about a name but not walked.

/// Who lets anyone register under a suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenSuffix {
    /// A registry's (`co.uk`, `com`): the list's ICANN section.
    Registry,
    /// A provider's (`workers.dev`, `s3.amazonaws.com`): the list's private section.
    Provider,
}

/// Whether `name` (lower-case, no trailing dot) is a public suffix, and whose.
pub fn open_suffix(name: &str) -> Option<OpenSuffix> {
    let suffix = psl::suffix(name.as_bytes()).filter(psl::Suffix::is_known)?;
    if suffix.as_bytes() != name.as_bytes() {
        return None;
    }
    match suffix.typ() {
        Some(psl::Type::Private) => Some(OpenSuffix::Provider),
        _ => Some(OpenSuffix::Registry),
    }
}

/// Why a `.name` entry is open, for a warning or an error.
pub fn why_open(name: &str, kind: OpenSuffix) -> String {
    match kind {
        OpenSuffix::Provider => format!(
            "anyone can register a name under `{name}` (a provider's public suffix): what is sent there may reach a \
             stranger; list the exact hosts you mean"
        ),
        OpenSuffix::Registry => {
            format!("`{name}` is a public suffix: this covers every site registered under it; list the sites you mean")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_and_registry_suffixes_are_found_and_ordinary_domains_are_not() {
        for name in
            ["workers.dev", "s3.amazonaws.com", "blob.core.windows.net", "githubusercontent.com", "ngrok-free.app"]
        {
            assert_eq!(open_suffix(name), Some(OpenSuffix::Provider), "{name}");
        }
        assert_eq!(open_suffix("co.uk"), Some(OpenSuffix::Registry));
        assert_eq!(open_suffix("com"), Some(OpenSuffix::Registry));
        for name in
            ["github.com", "pypi.org", "raw.githubusercontent.com", "bbc.co.uk", "corp.internal", "amazonaws.com"]
        {
            assert_eq!(open_suffix(name), None, "{name}");
        }
    }

    #[test]
    fn check_warns_of_an_allowed_wildcard_over_one_and_refuses_it_for_a_credential() {
        let policy = "network:\n  mode: allowlist\n  allowed_hosts: [.workers.dev, .example.com, .co.uk]\n";
        let loaded = crate::load(policy, crate::Format::Yaml, None).unwrap();
        let warned: Vec<&str> = loaded.warnings.iter().map(|w| w.entry.as_str()).collect();
        assert_eq!(warned, ["network.allowed_hosts[0]", "network.allowed_hosts[2]"], "{:?}", loaded.warnings);
        assert!(loaded.warnings[0].message.contains("anyone can register a name under `workers.dev`"));
        let credential = "network:\n  mode: allowlist\n  allowed_hosts: [api.example.com]\n  credentials:\n    \
                          - {name: k, hosts: [.githubusercontent.com], env: K, header: Authorization}\n";
        let errors = crate::load(credential, crate::Format::Yaml, None).err().unwrap_or_default();
        assert!(
            errors.iter().any(
                |e| e.entry == "network.credentials[0].hosts[0]" && e.message.contains("the secret would go there")
            ),
            "{errors:?}"
        );
        for preset in crate::credentials::PRESETS {
            for host in preset.hosts {
                let name = host.trim_start_matches('.');
                assert!(!host.starts_with('.') || open_suffix(name).is_none(), "preset {}: {host}", preset.name);
            }
        }
    }
}
