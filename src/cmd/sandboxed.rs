//! What `leash run` and `leash docker` share: the policy (a file, or inline `--allow`/`--block`; with neither,
//! nothing is allowed), the `--resolve` pins, the audit log (standard error without `--log`), and the proxy's
//! configuration around them with TLS inspection on.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use leash_policy::Policy;
use leash_proxy::{AuditLog, Inspection, Limits, OwnAddrs, PolicyHandle, ProxyConfig, SystemResolver};

use crate::cli::SandboxProxyArgs;
use crate::exit::Exit;
use crate::policy_file::{load_file, print_errors};

/// `--resolve` answers, by name.
pub type Pins = HashMap<Box<str>, Vec<IpAddr>>;

/// The policy, the pins and the audit log (not yet shared: `leash docker` adds the container ID once known).
///
/// An invalid policy is exit 2, like a usage error: 1 is an ordinary status of the wrapped command.
pub fn proxy_parts(args: &SandboxProxyArgs) -> Result<(Policy, Pins, AuditLog), Exit> {
    let policy = match &args.policy {
        Some(path) => load_file(path, args.profile.as_deref()).map_err(|_| Exit::Usage)?.policy,
        None => Policy::from_inline(&args.allow, &args.block).map_err(|errors| {
            print_errors(Path::new("the command line"), &errors);
            Exit::Usage
        })?,
    };
    let pins = crate::cmd::proxy::parse_pins(&args.resolve)?;
    let audit = match &args.log {
        None => AuditLog::stderr(),
        Some(path) => AuditLog::open(path).map_err(|e| {
            eprintln!("leash: cannot open the audit log `{}`: {e}; not starting without it", path.display());
            Exit::Usage
        })?,
    };
    Ok((policy, pins, audit))
}

/// The proxy's configuration for a sandbox.
pub fn config(policy: Policy, pins: Pins, audit: Arc<AuditLog>, inspection: Arc<Inspection>) -> ProxyConfig {
    ProxyConfig {
        policy: PolicyHandle::new(policy),
        audit,
        resolver: Arc::new(SystemResolver::new(pins)),
        own_addrs: OwnAddrs::Host,
        limits: crate::fit_open_files(Limits::default()),
        inspection: Some(inspection),
    }
}
