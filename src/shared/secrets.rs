//! The credentials' secrets, read when leash starts, and what a sandboxed command sees instead: one placeholder per
//! credential, unique to the run and recognisable (`leash-NAME-…`), in the variable the entry names. A secret that
//! cannot be read, or is empty, stops leash before anything runs: a run without its credential would fail in a way
//! that looks like the provider's fault.

use std::ffi::OsString;
use std::io::Read;
use std::sync::Arc;

use leash_policy::{Policy, SecretSource};
use leash_proxy::credentials::{Secret, Secrets};

use crate::exit::Exit;

/// Placeholders have at least this many random hex digits after `leash-NAME-`.
const MIN_RANDOM_HEX: usize = 16;

/// Read every credential's secret and make its placeholder. Err: the message saying which could not be read.
pub fn read(policy: &Policy) -> Result<Secrets, String> {
    let mut secrets = Vec::with_capacity(policy.credentials().len());
    for c in policy.credentials() {
        let value = match &c.source {
            SecretSource::Env(var) => std::env::var(var).map_err(|_| {
                format!("credential `{}`: `{var}` is not set (or not UTF-8) in leash's environment", c.name)
            })?,
            SecretSource::File(path) => std::fs::read_to_string(path)
                .map_err(|e| format!("credential `{}`: cannot read `{path}`: {e}", c.name))?
                .trim_end_matches(['\n', '\r'])
                .to_owned(),
        };
        if value.trim().is_empty() {
            return Err(format!("credential `{}`: its secret ({}) is empty", c.name, source_text(&c.source)));
        }
        let placeholder = placeholder(&c.name, value.len())?;
        let secret = Secret::new(&c.name, &value, &placeholder)
            .ok_or_else(|| format!("credential `{}`: its secret cannot be told from a placeholder", c.name))?;
        secrets.push(secret);
    }
    Ok(Secrets::new(secrets))
}

/// The upstream proxy's `Proxy-Authorization` (Basic), from the variable the policy names (`user:password`); `None`
/// when there is no upstream proxy or it needs no credentials. A named variable that is missing or empty is an error.
pub fn upstream_auth(policy: &Policy) -> Result<Option<Arc<str>>, String> {
    let Some(var) = policy.upstream_proxy().and_then(|up| up.auth_env.as_deref()) else { return Ok(None) };
    match std::env::var(var) {
        Ok(value) if value.contains(':') && !value.trim().is_empty() => {
            Ok(Some(leash_proxy::credentials::basic_authorization(&value).into()))
        }
        _ => Err(format!("upstream_proxy_auth_env: `{var}` is not set to `user:password` in leash's environment")),
    }
}

/// [`upstream_auth`] for a command: the message on stderr and exit 2.
pub fn upstream_auth_or_exit(policy: &Policy) -> Result<Option<Arc<str>>, Exit> {
    upstream_auth(policy).map_err(|why| {
        eprintln!("leash: {why}; not starting without it");
        Exit::Usage
    })
}

/// [`read`] for a command: the message on stderr and exit 2 (the command never runs).
pub fn read_or_exit(policy: &Policy) -> Result<Secrets, Exit> {
    read(policy).map_err(|why| {
        eprintln!("leash: {why}; not starting without it");
        Exit::Usage
    })
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
