//! leash's policy engine: facts in, decision out.
//!
//! This crate parses and validates policy files (YAML, TOML or JSON), canonicalises hosts and paths, classifies IP
//! literals and internal addresses, and decides requests. It is pure: it does no I/O of any kind — no sockets, no
//! DNS, no clock, no files (callers read the file and hand over its text), no async runtime. That is what makes it
//! easy to test exhaustively and what lets `leash explain` give exactly the proxy's answer.
//!
//! What it does not do: read requests off the wire, resolve names, dial, log. The proxy crate does those and calls in
//! here at each step (see ARCHITECTURE.md, "Life of a request").
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod admission;
pub mod boundary;
pub mod credentials;
pub mod decision;
pub mod dest;
pub mod engine;
mod fasthash;
pub mod file;
pub mod hints;
pub mod host;
mod matcher;
pub mod method;
mod method_rules;
pub mod open_suffix;
pub mod path;
mod pattern;
mod question;
pub mod reason;
pub mod services;
mod spec;
pub mod upstream;
pub mod url;

pub use admission::{Admission, Route, Treatment, Tunnel};
pub use credentials::{Credential, CredentialHost, HeaderForm, SecretSource};
pub use decision::{ClientHelloFacts, Decision, Mode, ProviderTools, Refusals, Request, Scheme, Verdict, Via};
pub use dest::{is_internal, Cidr, CidrError};
pub use engine::{Boundary, Overruled, Policy};
pub use file::{
    allow_host, load, load_attachment, newest_preset, preset_named, task_policy, Attachment, EditError, Format,
    HostPreset, Loaded, Namespace, PolicyError, PolicyErrorKind, PresetUse, TaskFormat, TaskPolicy, Warning,
    HOST_PRESETS,
};
pub use hints::{Hint, PortList, Refused, RequestKind};
pub use host::{parse_authority, parse_host, parse_port, Authority, Host, HostError, Name};
pub use method::{Methods, KNOWN_METHODS, READ_ONLY};
pub use path::{canonicalize, CanonicalPath, PathError};
pub use question::{Question, TlsInspection};
pub use reason::Reason;
pub use services::{Service, ServiceKind, ServiceListen, ServiceTarget};
pub use spec::DEFAULT_MODEL_APIS;
pub use upstream::{BypassEntry, UpstreamProxy};
pub use url::{parse_absolute_target, AbsoluteTarget, TargetError};
