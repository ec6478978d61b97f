//! The credentials' secrets, read when leash starts, and what a sandboxed command sees instead: one placeholder per
//! credential, unique to the run and recognisable (`leash-NAME-…`), in the variable the entry names. A secret that
//! cannot be read, is empty, or is not one clean token (see [`unusable`]) stops leash before anything runs: a run
//! without its credential would fail in a way that looks like the provider's fault, and a secret leash cannot match
//! exactly as the provider reads it would slip past the leak watch and the redactor.

use std::ffi::OsString;
use std::io::Read;
use std::sync::Arc;

use leash_policy::{Policy, SecretSource};
use leash_proxy::credentials::{Secret, Secrets};

use crate::exit::Failure;

/// Placeholders have at least this many random hex digits after `leash-NAME-`.
const MIN_RANDOM_HEX: usize = 16;

/// A secret shorter than this could occur in ordinary text by chance (and be "found" or "redacted" there); every
/// common API token is longer (Gemini's keys 39 bytes, GitHub's 40 and more).
const MIN_SECRET_BYTES: usize = 16;

/// Read every credential's secret and make its placeholder. Err: the message saying which could not be read.
pub fn read(policy: &Policy) -> Result<Secrets, String> {
    read_those_here(policy, false).map(|(secrets, _)| secrets)
}

/// What `leash check` reads: every secret that is here checked as [`read`] checks it; one whose variable is unset or
/// whose file cannot be read is only named (a lint run without the secrets, in CI, is no error), returned as the
/// messages that say which.
pub fn check_those_here(policy: &Policy) -> Result<Vec<String>, String> {
    read_those_here(policy, true).map(|(_, missing)| missing)
}

/// [`read`]; with `skip_missing`, a secret that is not here is left out and named instead of refused.
fn read_those_here(policy: &Policy, skip_missing: bool) -> Result<(Secrets, Vec<String>), String> {
    let mut secrets = Vec::with_capacity(policy.credentials().len());
    let mut missing = Vec::new();
    for c in policy.credentials() {
        let value = match &c.source {
            SecretSource::Env(var) => match std::env::var(var) {
                Ok(value) => value,
                Err(_) => {
                    let why =
                        format!("credential `{}`: `{var}` is not set (or not UTF-8) in leash's environment", c.name);
                    if skip_missing {
                        missing.push(why);
                        continue;
                    }
                    return Err(why);
                }
            },
            SecretSource::File(path) => {
                let text = match std::fs::read_to_string(path) {
                    Ok(text) => text,
                    Err(e) => {
                        let why = format!("credential `{}`: cannot read `{path}`: {e}", c.name);
                        if skip_missing {
                            missing.push(why);
                            continue;
                        }
                        return Err(why);
                    }
                };
                // One final line end, as `echo` writes it, is not part of the secret; anything more is.
                let line = text.strip_suffix('\n').map(|t| t.strip_suffix('\r').unwrap_or(t));
                line.unwrap_or(&text).to_owned()
            }
        };
        if value.trim().is_empty() {
            return Err(format!("credential `{}`: its secret ({}) is empty", c.name, source_text(&c.source)));
        }
        let in_query = c.query.as_ref().filter(|_| !value.bytes().all(unreserved));
        let why = unusable(&value).or_else(|| in_query.map(|q| query_unusable(q)));
        if let Some(why) = why {
            return Err(format!("credential `{}`: its secret ({}) {why}", c.name, source_text(&c.source)));
        }
        let placeholder = placeholder(&c.name, value.len())?;
        let secret = Secret::new(&c.name, &value, &placeholder)
            .ok_or_else(|| format!("credential `{}`: its secret cannot be told from a placeholder", c.name))?;
        secrets.push(secret);
    }
    // The upstream proxy's `user:password` is a secret too: looked for in requests, kept out of the sandbox, masked
    // and redacted where it could come back. (Too short to be told from ordinary text, it is only kept out. Missing,
    // it is [`upstream_auth`]'s to report: `leash check` does not ask for it.)
    let upstream = upstream_user_password(policy).ok().flatten();
    if let Some(user_password) = upstream.filter(|v| v.len() >= MIN_SECRET_BYTES) {
        let placeholder = placeholder("upstream-proxy", user_password.len())?;
        secrets.extend(Secret::upstream_proxy(&user_password, &placeholder));
    }
    Ok((Secrets::new(secrets), missing))
}

/// The upstream proxy's `Proxy-Authorization` (Basic), from the variable the policy names (`user:password`); `None`
/// when there is no upstream proxy or it needs no credentials. A named variable that is missing or empty is an error.
pub fn upstream_auth(policy: &Policy) -> Result<Option<Arc<str>>, String> {
    let user_password = upstream_user_password(policy)?;
    Ok(user_password.map(|value| leash_proxy::credentials::basic_authorization(&value).into()))
}

/// The upstream proxy's `user:password`, from the variable the policy names.
fn upstream_user_password(policy: &Policy) -> Result<Option<String>, String> {
    let Some(var) = policy.upstream_proxy().and_then(|up| up.auth_env.as_deref()) else { return Ok(None) };
    match std::env::var(var) {
        Ok(value) if value.contains(':') && !value.trim().is_empty() => Ok(Some(value)),
        _ => Err(format!("upstream_proxy_auth_env: `{var}` is not set to `user:password` in leash's environment")),
    }
}

/// [`upstream_auth`] for a command: the message on stderr and exit 2.
pub fn upstream_auth_or_exit(policy: &Policy) -> Result<Option<Arc<str>>, Failure> {
    upstream_auth(policy).map_err(|why| Failure::usage(format!("{why}; not starting without it")))
}

/// [`read`] for a command: the message on stderr and exit 2 (the command never runs).
pub fn read_or_exit(policy: &Policy) -> Result<Secrets, Failure> {
    read(policy).map_err(|why| Failure::usage(format!("{why}; not starting without it")))
}

/// Why a secret cannot be used as it is, if it cannot (never quoting it). leash matches the value byte for byte,
/// while a provider trims whitespace and a header cannot hold a line end: such a secret would reach the provider in
/// a form the leak watch and the redactor do not know.
fn unusable(value: &str) -> Option<String> {
    if value.starts_with(char::is_whitespace) || value.ends_with(char::is_whitespace) {
        return Some("begins or ends with whitespace; remove it where the secret is stored".to_owned());
    }
    if value.contains(['\n', '\r']) {
        return Some("has more than one line; a secret is one line".to_owned());
    }
    if value.contains(char::is_control) {
        return Some("holds a control character".to_owned());
    }
    if value.contains(char::is_whitespace) {
        return Some("holds whitespace; a secret is one token".to_owned());
    }
    if !value.is_ascii() {
        return Some(
            "holds a character outside ASCII (a byte-order mark, a zero-width or non-breaking space, a letter): a \
             provider may quote it back in another encoding, which the redactor would not know; remove it where the \
             secret is stored"
                .to_owned(),
        );
    }
    if value.contains(['"', '\\']) {
        return Some(
            "holds `\"` or `\\`, which a JSON answer quotes back escaped, a form the redactor would not know"
                .to_owned(),
        );
    }
    (value.len() < MIN_SECRET_BYTES).then(|| {
        format!(
            "is {} bytes long; a secret this short could be ordinary text (at least {MIN_SECRET_BYTES})",
            value.len()
        )
    })
}

/// A byte a query parameter carries as it is (RFC 3986 unreserved). leash writes a secret into `?NAME=` unencoded
/// (its redactor knows that form only), so a secret for a `query` entry must be made of these.
fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~".contains(&b)
}

fn query_unusable(query: &str) -> String {
    format!("holds characters a query parameter cannot carry as they are (`{query}`: letters, digits, `-._~` only)")
}

fn source_text(source: &SecretSource) -> String {
    match source {
        SecretSource::Env(var) => format!("`{var}`"),
        SecretSource::File(path) => format!("`{path}`"),
    }
}

/// `leash-NAME-` and random hex, as long as the secret where it can be (an echoed secret is then replaced by the
/// placeholder itself, length for length), never shorter than `MIN_RANDOM_HEX` digits of randomness.
fn placeholder(name: &str, secret_len: usize) -> Result<String, String> {
    let prefix = format!("leash-{name}-");
    let digits = secret_len.saturating_sub(prefix.len()).max(MIN_RANDOM_HEX);
    let mut random = vec![0u8; digits.div_ceil(2)];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut random))
        .map_err(|e| format!("cannot read /dev/urandom for a placeholder: {e}"))?;
    let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("{prefix}{}", &hex[..digits]))
}

/// A command's environment with every credential's variable holding its placeholder, and any other variable whose
/// value holds a real secret changed to hold the placeholder instead: the real value is never in the sandbox.
pub fn sandbox_env(policy: &Policy, secrets: &Secrets, env: &mut Vec<(OsString, OsString)>) {
    // The upstream proxy's credentials are leash's to send: the sandbox talks to leash, never to the proxy.
    if let Some(var) = policy.upstream_proxy().and_then(|up| up.auth_env.as_deref()) {
        env.retain(|(k, _)| k != var);
    }
    for c in policy.credentials() {
        let Some(secret) = secrets.get(&c.name) else { continue };
        env.retain(|(k, _)| k != c.env.as_str());
        env.push((c.env.clone().into(), secret.placeholder().into()));
    }
    for (_, value) in env.iter_mut() {
        if let Some(text) = value.to_str() {
            if let Some(masked) = secrets.masked(text) {
                *value = masked.into();
            }
        }
    }
}

/// The credentials' variables and placeholders, for a container's `--env` (set after the caller's own options, so a
/// real value given with `-e` is overridden).
pub fn placeholder_env(policy: &Policy, secrets: &Secrets) -> Vec<(String, String)> {
    let placeholder = |name: &str| secrets.get(name).map(|s| s.placeholder().to_owned());
    policy.credentials().iter().filter_map(|c| Some((c.env.clone(), placeholder(&c.name)?))).collect()
}

/// The variables of leash's environment whose values hold a real secret, with the placeholder in its place: set for
/// the `docker` client, which fills a name-only `-e NAME` from its own environment.
pub fn masked_env(secrets: &Secrets) -> Vec<(OsString, OsString)> {
    std::env::vars_os().filter_map(|(k, v)| Some((k, secrets.masked(v.to_str()?)?.into()))).collect()
}

/// What `leash proxy` prints for its clients: `credential NAME: VAR=PLACEHOLDER` per credential.
pub fn placeholder_lines(policy: &Policy, secrets: &Secrets) -> Vec<String> {
    let placeholder = |name: &str| secrets.get(name).map(Secret::placeholder).unwrap_or_default().to_owned();
    policy.credentials().iter().map(|c| format!("credential {}: {}={}", c.name, c.env, placeholder(&c.name))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_one_clean_token_of_sixteen_bytes_or_more() {
        assert_eq!(unusable("sk-ant-0123456789abcdef"), None);
        assert_eq!(unusable("0123456789abcdef"), None, "sixteen bytes is enough");
        for bad in [
            "sk-ant-0123456789abcdef ",
            " sk-ant-0123456789abcdef",
            "sk-ant-0123456789\nabcdef",
            "sk-ant-0123\t456789abcdef",
        ] {
            assert!(unusable(bad).is_some(), "{bad:?}");
        }
        assert!(unusable("0123456789abcde").unwrap().contains("15 bytes long"));
        assert!(unusable("sk-ant-0123456789\u{7f}abcdef").unwrap().contains("control character"));
        // What a provider may quote back in another form: inner spaces, invisible or non-ASCII characters, and what
        // JSON escapes.
        assert!(unusable("sk-ant-0123 456789abcdef").unwrap().contains("holds whitespace"));
        assert!(unusable("sk-ant-0123\u{a0}456789abcdef").unwrap().contains("holds whitespace"));
        for bad in ["\u{feff}sk-ant-0123456789abcdef", "sk-ant-0123\u{200b}456789abcdef", "sk-ant-0123456789abcdé"] {
            assert!(unusable(bad).unwrap().contains("outside ASCII"), "{bad:?}");
        }
        for bad in ["sk-ant-0123\"456789abcdef", "sk-ant-0123\\456789abcdef"] {
            assert!(unusable(bad).unwrap().contains("JSON"), "{bad:?}");
        }
    }

    #[test]
    fn a_placeholder_has_the_secrets_length_when_it_can_and_is_random() {
        let a = placeholder("anthropic", 60).unwrap();
        let b = placeholder("anthropic", 60).unwrap();
        assert_eq!(a.len(), 60);
        assert!(a.starts_with("leash-anthropic-"));
        assert_ne!(a, b);
        let short = placeholder("x", 4).unwrap();
        assert_eq!(short.len(), "leash-x-".len() + MIN_RANDOM_HEX);
    }
}
