//! Helpers several subcommands share, so that no subcommand imports another: the sandboxed commands' policy, pins,
//! audit log and proxy configuration ([`sandboxed`]), the run's TLS inspection and its files ([`tls`]), and the CA
//! handed to a sandboxed command ([`trust`]), and audit logs read back ([`audit_read`]).

pub mod audit_read;
pub mod sandboxed;
pub mod tls;
pub mod trust;
