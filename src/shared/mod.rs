//! Helpers several subcommands share, so that no subcommand imports another: the sandboxed commands' policy, pins,
//! audit log and proxy configuration ([`sandboxed`]), the run's TLS inspection and its files ([`tls`]), and the CA
//! handed to a sandboxed command ([`trust`]), audit logs read back ([`audit_read`]), and the refusals summed up at
//! the end of a sandboxed run ([`summary`]).

pub mod ask;
pub mod attach;
pub mod audit_read;
pub mod client_env;
pub mod consoles;
pub mod control;
pub mod open_files;
pub mod probe;
pub mod sandboxed;
pub mod secrets;
pub mod services;
pub mod summary;
pub mod tls;
pub mod trust;
