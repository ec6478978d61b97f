//! The `credentials` list and the `upstream_proxy` keys of a `network` section. Credentials: each entry a preset (`preset: anthropic`), optionally adjusted, or
//! a full entry (`name`, `hosts`, `env`, `header`). Every problem is reported with its entry; a secret is never
//! accepted in the file (there is no key for one).

use std::collections::HashSet;
use std::sync::Arc;

use super::entries::host_entry;
use super::raw::{Node, ScalarKind, Value};
use super::validate::{find, join, Checker, Fields};
use super::PolicyErrorKind::{BadHost, BadValue, DuplicateKey, MissingKey, WrongType};
use crate::credentials::{preset, preset_names, Credential, CredentialHost, HeaderForm, SecretSource};
use crate::spec::HostPattern;
use crate::upstream::{parse_proxy_url, BypassEntry, UpstreamProxy};

const CREDENTIAL_KEYS: &[&str] =
    &["preset", "name", "hosts", "env", "file", "header", "query", "scheme", "basic", "add", "plaintext"];

impl Checker {
    pub(super) fn credentials(&mut self, prefix: &str, items: &[Node]) -> Vec<Credential> {
        let mut out: Vec<Credential> = Vec::with_capacity(items.len());
        let (mut names, mut envs) = (HashSet::new(), HashSet::new());
        for (index, node) in items.iter().enumerate() {
            let entry = format!("{prefix}.credentials[{index}]");
            let Some(credential) = self.credential(&entry, node) else { continue };
            if !names.insert(credential.name.clone()) {
                let message = format!("a credential named `{}` is given twice; give one a `name`", credential.name);
                self.error(DuplicateKey, &entry, node.pos, message);
            }
            if !envs.insert(credential.env.clone()) {
                let message = format!("`{}` is the variable of two credentials", credential.env);
                self.error(DuplicateKey, &join(&entry, "env"), node.pos, message);
            }
            out.push(credential);
        }
        out
    }

    fn credential(&mut self, entry: &str, node: &Node) -> Option<Credential> {
        let fields = self.map(entry, node, CREDENTIAL_KEYS)?;
        let before = self.errors.len();
        let text = |c: &mut Self, key: &str| find(&fields, key).and_then(|(_, n)| c.string(&join(entry, key), n));
        let preset = match text(self, "preset") {
            Some(name) => match preset(name) {
                Some(p) => Some(p),
                None => {
                    let message = format!("`{name}` is not a preset; the presets are {}", preset_names());
                    self.error(BadValue, &join(entry, "preset"), node.pos, message);
                    return None;
                }
            },
            None => None,
        };
        let name = text(self, "name").map(str::to_owned).or(preset.map(|p| p.name.to_owned()));
        let env = text(self, "env").map(str::to_owned).or(preset.map(|p| p.env.to_owned()));
        let headers = match find(&fields, "header") {
            Some((_, n)) => self.credential_headers(&join(entry, "header"), n),
            None => preset.map(|p| p.headers.iter().map(|h| (*h).to_owned()).collect()),
        };
        let query = text(self, "query").map(str::to_owned).or(preset.and_then(|p| p.query.map(str::to_owned)));
        let before_hosts = self.errors.len();
        let hosts = match find(&fields, "hosts") {
            Some((_, n)) => self.credential_hosts(&join(entry, "hosts"), n),
            None => preset.map(|p| {
                p.hosts.iter().filter_map(|h| host_entry(h).ok()).filter_map(HostPattern::credential_host).collect()
            }),
        };
        let form = self.header_form(entry, &fields, preset.map(|p| (p.form)()));
        let add = self.flag(entry, &fields, "add");
        let plaintext = self.flag(entry, &fields, "plaintext");
        let file = text(self, "file").map(str::to_owned);
        let missing = |c: &mut Self, key: &str| {
            let message = format!("missing `{key}` (or a `preset` that gives it; the presets are {})", preset_names());
            c.error(MissingKey, &join(entry, key), node.pos, message);
        };
        let (Some(name), Some(env), Some(mut headers), Some(hosts)) = (name, env, headers, hosts) else {
            for key in ["name", "env", "header", "hosts"] {
                if find(&fields, key).is_none() && preset.is_none() {
                    missing(self, key);
                }
            }
            return None;
        };
        // An empty list is its own mistake; a list whose entries were all refused has said why already.
        let no_hosts = hosts.is_empty() && self.errors.len() == before_hosts;
        self.check_credential_words(entry, node, &name, &env, &headers, no_hosts);
        if let Some(q) = &query {
            self.check_query_name(entry, node, q);
        }
        if self.errors.len() > before || headers.is_empty() {
            return None;
        }
        let header = headers.remove(0);
        let source = match file {
            Some(path) => SecretSource::File(path),
            None => SecretSource::Env(env.clone()),
        };
        let also_headers = headers;
        Some(Credential {
            name: Arc::from(name),
            hosts,
            env,
            source,
            header,
            also_headers,
            query,
            form,
            add,
            plaintext,
        })
    }

    fn check_credential_words(
        &mut self,
        entry: &str,
        node: &Node,
        name: &str,
        env: &str,
        headers: &[String],
        no_hosts: bool,
    ) {
        let word = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !word(name) {
            let message = format!("`{name}` is not a credential name; use letters, digits, `-` and `_`");
            self.error(BadValue, &join(entry, "name"), node.pos, message);
        }
        let env_ok = env.bytes().next().is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && env.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !env_ok {
            let message = format!("`{env}` is not an environment variable name");
            self.error(BadValue, &join(entry, "env"), node.pos, message);
        }
        let token =
            |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        for header in headers {
            if !token(header) || matches!(&**header, "host" | "content-length" | "transfer-encoding" | "connection") {
                let message = format!("`{header}` is not a header a credential may travel in");
                self.error(BadValue, &join(entry, "header"), node.pos, message);
            }
        }
        if headers.is_empty() {
            let message = "a credential needs at least one header".to_owned();
            self.error(MissingKey, &join(entry, "header"), node.pos, message);
        }
        if no_hosts {
            let message = "a credential needs at least one host".to_owned();
            self.error(MissingKey, &join(entry, "hosts"), node.pos, message);
        }
    }

    /// A query parameter's name: unreserved characters only (RFC 3986), so it is matched as written.
    fn check_query_name(&mut self, entry: &str, node: &Node, query: &str) {
        let unreserved = |b: u8| b.is_ascii_alphanumeric() || b"-._~".contains(&b);
        if query.is_empty() || !query.bytes().all(unreserved) {
            let message = format!("`{query}` is not a query parameter name; use letters, digits, `-`, `.`, `_`, `~`");
            self.error(BadValue, &join(entry, "query"), node.pos, message);
        }
    }

    /// `header: NAME` or `header: [NAME, ...]` (the first is where `add` puts it), lowercased.
    fn credential_headers(&mut self, entry: &str, node: &Node) -> Option<Vec<String>> {
        if let Value::Scalar(ScalarKind::Str, text) = &node.value {
            return Some(vec![text.to_ascii_lowercase()]);
        }
        let items = self.list(entry, node)?;
        let at = |index| move || format!("{entry}[{index}]");
        Some(
            items
                .iter()
                .enumerate()
                .filter_map(|(i, n)| self.item_string(n, at(i)))
                .map(str::to_ascii_lowercase)
                .collect(),
        )
    }

    fn credential_hosts(&mut self, entry: &str, node: &Node) -> Option<Vec<CredentialHost>> {
        let items = self.list(entry, node)?;
        let mut hosts = Vec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            let at = || format!("{entry}[{index}]");
            let Some(text) = self.item_string(item, at) else { continue };
            match host_entry(text).map(HostPattern::credential_host) {
                Ok(Some(host)) => match open_to_strangers(&host) {
                    Some(why) => {
                        self.error(BadHost, &at(), item.pos, format!("`{text}`: the secret would go there: {why}"))
                    }
                    None => hosts.push(host),
                },
                Ok(None) => {
                    let message =
                        format!("`{text}` is an address; a credential belongs to names (it is TLS-inspected)");
                    self.error(BadHost, &at(), item.pos, message);
                }
                Err(e) => self.error(e.kind, &at(), item.pos, e.message),
            }
        }
        Some(hosts)
    }

    /// `scheme: Bearer` or `basic: USER` (not both), else the preset's form, else the bare secret.
    fn header_form(&mut self, entry: &str, fields: &Fields<'_>, preset: Option<HeaderForm>) -> HeaderForm {
        let scheme = find(fields, "scheme").and_then(|(_, n)| self.string(&join(entry, "scheme"), n));
        let basic = find(fields, "basic").and_then(|(_, n)| self.string(&join(entry, "basic"), n));
        match (scheme, basic) {
            (Some(_), Some(_)) => {
                let (key, _) = find(fields, "basic").unzip();
                let pos = key.map(|k| k.pos).unwrap_or_default();
                self.error(BadValue, &join(entry, "basic"), pos, "give `scheme` or `basic`, not both".to_owned());
                HeaderForm::Bare
            }
            (Some(scheme), None) => HeaderForm::Scheme(scheme.to_owned()),
            (None, Some(user)) => HeaderForm::Basic(user.to_owned()),
            (None, None) => preset.unwrap_or(HeaderForm::Bare),
        }
    }

    pub(super) fn flag(&mut self, entry: &str, fields: &Fields<'_>, key: &str) -> bool {
        match find(fields, key) {
            None => false,
            Some((_, node)) => match &node.value {
                Value::Scalar(ScalarKind::Bool, text) => text.eq_ignore_ascii_case("true"),
                _ => {
                    self.error(
                        WrongType,
                        &join(entry, key),
                        node.pos,
                        format!("expected true or false, found {}", node.kind_name()),
                    );
                    false
                }
            },
        }
    }
}

impl Checker {
    /// `upstream_proxy`, `upstream_proxy_auth_env`, `upstream_proxy_bypass` and `upstream_proxy_ca` of a `network`
    /// section. The CA file is named here and read by the caller (this crate reads no files).
    pub(super) fn upstream_proxy(&mut self, prefix: &str, fields: &Fields<'_>) -> Option<UpstreamProxy> {
        let text = |c: &mut Self, key: &str| find(fields, key).and_then(|(_, n)| c.string(&join(prefix, key), n));
        let url = text(self, "upstream_proxy");
        let auth_env = text(self, "upstream_proxy_auth_env").map(str::to_owned);
        let ca_file = text(self, "upstream_proxy_ca").map(str::to_owned);
        let bypass =
            find(fields, "upstream_proxy_bypass").map(|(_, n)| self.bypass(&join(prefix, "upstream_proxy_bypass"), n));
        let Some(url) = url else {
            for key in ["upstream_proxy_auth_env", "upstream_proxy_bypass", "upstream_proxy_ca"] {
                if let Some((k, _)) = find(fields, key) {
                    let message = format!("`{key}` needs an `upstream_proxy`");
                    self.error(MissingKey, &join(prefix, key), k.pos, message);
                }
            }
            return None;
        };
        let pos = find(fields, "upstream_proxy").map(|(_, n)| n.pos).unwrap_or_default();
        let url = match parse_proxy_url(url) {
            Ok(url) => url,
            Err(e) => {
                self.error(BadValue, &join(prefix, "upstream_proxy"), pos, e.to_string());
                return None;
            }
        };
        if let (Some(path), Some((_, node))) = (&ca_file, find(fields, "upstream_proxy_ca")) {
            let why = match (url.tls, path.trim().is_empty()) {
                (false, _) => Some(format!("`{path}`: a CA is for an https:// upstream proxy; this one is http://")),
                (true, true) => Some("an empty path; name a PEM file of CA certificates".to_owned()),
                (true, false) => None,
            };
            if let Some(message) = why {
                self.error(BadValue, &join(prefix, "upstream_proxy_ca"), node.pos, message);
                return None;
            }
        }
        let bypass = bypass.flatten().unwrap_or_default();
        Some(UpstreamProxy { host: url.host, port: url.port, tls: url.tls, ca_file, auth_env, bypass })
    }

    fn bypass(&mut self, entry: &str, node: &Node) -> Option<Vec<BypassEntry>> {
        let items = self.list(entry, node)?;
        let mut out = Vec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            let at = || format!("{entry}[{index}]");
            let Some(text) = self.item_string(item, at) else { continue };
            match host_entry(text) {
                Ok(HostPattern::Exact(n)) => out.push(BypassEntry::Exact(n)),
                Ok(HostPattern::Subtree(n)) => out.push(BypassEntry::Subtree(n)),
                Ok(HostPattern::Ipv4(_)) => {
                    let message = format!("`{text}` is an address; leash refuses IP literals, so list names");
                    self.error(BadHost, &at(), item.pos, message);
                }
                Err(e) => self.error(e.kind, &at(), item.pos, e.message),
            }
        }
        Some(out)
    }
}

/// Why a credential may not be bound to `host`: a wildcard over names anyone can register
/// ([`crate::open_suffix`]).
fn open_to_strangers(host: &CredentialHost) -> Option<String> {
    let CredentialHost::Subtree(name) = host else { return None };
    crate::open_suffix::open_suffix(name.as_str()).map(|kind| crate::open_suffix::why_open(name.as_str(), kind))
}
