//! Absolute-form request targets (`http://host[:port]/path?query`), as a forward proxy receives them.

use crate::engine::Scheme;
use crate::host::{Authority, HostError};
use crate::path::{CanonicalPath, PathError};

/// An absolute-form target split into its parts. `path_and_query` is the raw text after the authority (`/` when it
/// was empty), forwarded verbatim; `path` is its canonical form, decided on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AbsoluteTarget<'a> {
    pub scheme: Scheme,
    pub authority: Authority,
    /// The authority exactly as written in the target.
    pub authority_raw: &'a str,
    pub path_and_query: &'a str,
    pub path: CanonicalPath,
}

impl AbsoluteTarget<'_> {
    /// The port named or the scheme's default (80 for http, 443 for https, 0 for other schemes).
    pub fn port(&self) -> u16 {
        todo!()
    }
}

/// Why a request target is unacceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// Origin-form (`/path`) or anything without `scheme://`: 400.
    #[error("request target is not in absolute form (`http://host/path`)")]
    NotAbsolute,
    /// 403 `bad-host`.
    #[error("bad host: {0}")]
    Host(#[from] HostError),
    /// 400 `bad-request`.
    #[error("bad path: {0}")]
    Path(#[from] PathError),
}

/// Parse an absolute-form request target. The scheme is matched case-insensitively.
pub fn parse_absolute_target(_raw: &str) -> Result<AbsoluteTarget<'_>, TargetError> {
    todo!()
}
