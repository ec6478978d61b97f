//! The variables that point a client at leash's proxy: the proxy variables in both spellings (curl reads only the
//! lower-case `http_proxy`, most others the upper-case), Node's switch to honour them, and the CA variables. `leash
//! run` puts them in the command's environment; `leash proxy --env-file` writes the same ones for a shell to source,
//! so a client started beside the proxy trusts what a sandboxed one trusts.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use leash_policy::Policy;
use leash_proxy::{credentials::Secrets, Inspection};

use crate::cli::TlsArgs;
use crate::exit::Failure;
use crate::shared::sandboxed::mode_env;
use crate::shared::secrets::sandbox_env;
use crate::shared::services::no_proxy_env;
use crate::shared::tls::{write_atomically, write_public};
use crate::shared::trust::{BUNDLE_VARS, NODE_VAR};

/// `env` as a POSIX shell script of `export NAME='VALUE'` lines, with a first comment saying what it is for.
pub fn shell_script(comment: &str, env: &[(OsString, OsString)]) -> String {
    let mut out = format!("# {comment}\n");
    for (name, value) in env {
        let value = value.to_string_lossy().replace('\'', r"'\''");
        out.push_str(&format!("export {}='{value}'\n", name.to_string_lossy()));
    }
    out
}

/// `leash proxy --env-file FILE`: the variables `leash run` gives its command, for a client beside the proxy at
/// `proxy`: the proxy variables, the mode, the credentials' placeholders, `NO_PROXY` for the services' listeners,
/// and every CA variable, naming the CA and bundle written with `--ca-cert-out`/`--ca-bundle-out` or, where those
/// were not asked for, beside FILE (`FILE.ca.pem`, `FILE.bundle.pem`). Each file is written whole or not at all.
pub fn write_env_file(
    file: &Path,
    proxy: SocketAddr,
    (inspection, tls): (&Inspection, &TlsArgs),
    policy: &Policy,
    secrets: &Secrets,
) -> Result<(), Failure> {
    let beside = |suffix: &str| {
        let mut name = file.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    };
    let ca = tls.ca_cert_out.clone().unwrap_or_else(|| beside(".ca.pem"));
    let bundle = tls.ca_bundle_out.clone().unwrap_or_else(|| beside(".bundle.pem"));
    // The file is sourced from anywhere: a relative path would name another file in another directory.
    let absolute = |path: PathBuf| std::path::absolute(&path).unwrap_or(path);
    let (ca_named, bundle_named) = (absolute(ca.clone()), absolute(bundle.clone()));
    let failed = |path: &Path, e: std::io::Error| Failure::usage(format!("cannot write `{}`: {e}", path.display()));
    if tls.ca_cert_out.is_none() {
        write_atomically(&ca, &|tmp| write_public(tmp, inspection.ca_pem())).map_err(|e| failed(&ca, e))?;
    }
    if tls.ca_bundle_out.is_none() {
        write_atomically(&bundle, &|tmp| inspection.write_bundle(tmp)).map_err(|e| failed(&bundle, e))?;
    }
    // The same proxy variables every sandbox's command is given (`leash_proxy::inside`).
    let mut env = leash_proxy::inside::proxy_env(&format!("http://{proxy}"));
    let (mode_var, mode) = mode_env(policy);
    env.push((mode_var.into(), mode.into()));
    env.extend(BUNDLE_VARS.iter().map(|v| ((*v).into(), bundle_named.clone().into_os_string())));
    env.push((NODE_VAR.into(), ca_named.into_os_string()));
    env.extend(no_proxy_env(policy));
    sandbox_env(policy, secrets, &mut env);
    let shown = absolute(file.to_path_buf());
    let comment = format!("leash proxy on {proxy}: `. {}` points this shell's programs at it", shown.display());
    let script = shell_script(&comment, &env);
    write_atomically(file, &|tmp| std::fs::write(tmp, &script)).map_err(|e| failed(file, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_with_quotes_survives_the_shell() {
        let env = [(OsString::from("A"), OsString::from("it's $HOME `x`"))];
        let script = shell_script("test", &env);
        assert_eq!(script, "# test\nexport A='it'\\''s $HOME `x`'\n");
        let o = std::process::Command::new("sh").args(["-c", &format!("{script}printf %s \"$A\"")]).output();
        assert_eq!(o.map(|o| o.stdout).unwrap_or_default(), b"it's $HOME `x`");
    }
}
