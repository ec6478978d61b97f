//! The `credentials` section: secrets the sandbox never holds. Each entry names the hosts a credential belongs to,
//! where leash reads the secret (an environment variable of its own, or a file — never the secret itself), the
//! variable through which the sandbox sees a placeholder instead, and the header the credential travels in. Presets
//! give the common cases in one line. This module is pure: it says what an entry means; reading the secret, making
//! the placeholder and putting the secret on requests are the binary's and the proxy's.

use std::sync::Arc;

use crate::host::Name;

/// One validated `credentials` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    /// What the audit log names when the credential is used: the entry's `name`, else its preset's.
    pub name: Arc<str>,
    /// The hosts it belongs to, as `allowed_hosts` entries say them (`x`, or `.x` for it and every subdomain).
    pub hosts: Vec<CredentialHost>,
    /// The variable the sandboxed command sees, holding a placeholder (`ANTHROPIC_API_KEY`).
    pub env: String,
    /// Where leash reads the real value.
    pub source: SecretSource,
    /// The header it travels in (lowercase): the placeholder is replaced there, and `add` writes it there.
    pub header: String,
    /// Further headers the placeholder is replaced in (lowercase): a provider's official clients differ in where
    /// they send the key (Anthropic's send `x-api-key` or `Authorization: Bearer`).
    pub also_headers: Vec<String>,
    /// A query parameter the placeholder is replaced in (Gemini's `?key=`), if any.
    pub query: Option<String>,
    /// How a header leash adds is written: `Bearer ` before the secret, Basic with this user, or the bare secret.
    pub form: HeaderForm,
    /// Add the header to a request that has none (else only a placeholder the request carries is replaced).
    pub add: bool,
    /// A gateway on a private network may take it over plain HTTP; otherwise such a request is refused.
    pub plaintext: bool,
}

impl Credential {
    /// Every header the placeholder is replaced in: [`Credential::header`] first.
    pub fn headers(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.header.as_str()).chain(self.also_headers.iter().map(String::as_str))
    }
}

/// A host entry of a credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialHost {
    /// `host`: that name only.
    Exact(Name),
    /// `.host`: the name and every name under it.
    Subtree(Name),
}

impl CredentialHost {
    /// Whether this entry covers `name`.
    pub fn covers(&self, name: &str) -> bool {
        match self {
            CredentialHost::Exact(n) => n.as_str() == name,
            CredentialHost::Subtree(n) => {
                name == n.as_str() || name.strip_suffix(n.as_str()).is_some_and(|head| head.ends_with('.'))
            }
        }
    }
}

/// Where a secret is read when leash starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// An environment variable of leash's own process.
    Env(String),
    /// A file leash can read (one line; a trailing newline is not part of the secret).
    File(String),
}

/// How a header leash adds is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderForm {
    /// The secret alone (`x-api-key: SECRET`).
    Bare,
    /// `Bearer SECRET` (or another scheme word).
    Scheme(String),
    /// HTTP Basic with this user and the secret as password (`x-access-token:SECRET`, as git sends a token).
    Basic(String),
}

/// A preset: the hosts, variable and header of a common credential.
pub(crate) struct Preset {
    pub(crate) name: &'static str,
    pub(crate) hosts: &'static [&'static str],
    pub(crate) env: &'static str,
    /// Every header the provider's current official clients send the key in; the first is where `add` puts it.
    pub(crate) headers: &'static [&'static str],
    /// The query parameter its clients may send the key in.
    pub(crate) query: Option<&'static str>,
    pub(crate) form: fn() -> HeaderForm,
}

/// The presets an entry names with `preset:`.
pub(crate) const PRESETS: &[Preset] = &[
    Preset {
        name: "anthropic",
        hosts: &["api.anthropic.com"],
        env: "ANTHROPIC_API_KEY",
        // The Python SDK sends `Authorization: Bearer` (for `api_key` as for `auth_token`); others `x-api-key`.
        headers: &["x-api-key", "authorization"],
        query: None,
        form: || HeaderForm::Bare,
    },
    Preset {
        name: "openai",
        hosts: &["api.openai.com"],
        env: "OPENAI_API_KEY",
        headers: &["authorization"],
        query: None,
        form: || HeaderForm::Scheme("Bearer".to_owned()),
    },
    Preset {
        name: "gemini",
        hosts: &["generativelanguage.googleapis.com"],
        env: "GEMINI_API_KEY",
        // google-genai sends the header; the REST API's examples (and older clients) put the key in `?key=`.
        headers: &["x-goog-api-key"],
        query: Some("key"),
        form: || HeaderForm::Bare,
    },
    // git over HTTPS sends a token as Basic's password; the REST API takes `Authorization: Bearer`. Either way the
    // placeholder is in `authorization` and is replaced there.
    Preset {
        name: "github",
        hosts: &["github.com", "api.github.com"],
        env: "GITHUB_TOKEN",
        headers: &["authorization"],
        query: None,
        form: || HeaderForm::Basic("x-access-token".to_owned()),
    },
];

pub(crate) fn preset(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}

/// The preset names, for messages.
pub(crate) fn preset_names() -> String {
    PRESETS.iter().map(|p| format!("`{}`", p.name)).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::parse_host;

    fn name(text: &str) -> Name {
        match parse_host(text) {
            Ok(crate::Host::Name(n)) => n,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn a_subtree_entry_covers_the_name_and_its_subdomains_only() {
        let host = CredentialHost::Subtree(name("example.org"));
        assert!(host.covers("example.org") && host.covers("api.example.org"));
        assert!(!host.covers("notexample.org") && !host.covers("example.org.evil"));
        let exact = CredentialHost::Exact(name("example.org"));
        assert!(exact.covers("example.org") && !exact.covers("api.example.org"));
    }

    #[test]
    fn every_preset_names_valid_hosts() {
        for p in PRESETS {
            for h in p.hosts {
                assert!(matches!(parse_host(h), Ok(crate::Host::Name(_))), "{}: {h}", p.name);
            }
        }
    }
}
