//! Path canonicalisation: cut the query at the first raw `?`, percent-decode until stable, `\` as `/`, drop
//! `;params` from each segment, collapse `//`, remove dot segments (RFC 3986 §5.2.4). Refuse control characters,
//! raw `#` and malformed escapes (checked on the raw text) and control characters produced by decoding.

/// A canonical path: starts with `/`, no query, no dot segments, no empty segments, decoded.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CanonicalPath(String);

impl CanonicalPath {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Why a request target's path is malformed (always answered 400, reason `bad-request`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("control character in the request target")]
    ControlChar,
    #[error("raw `#` (fragment) in the request target")]
    Fragment,
    #[error("malformed percent-escape in the request target")]
    BadEscape,
    #[error("control character produced by percent-decoding")]
    DecodedControlChar,
    #[error("request target path does not start with `/`")]
    NotAbsolute,
}

/// Canonicalise a raw `path[?query]` (as it appears after the authority in the request target; empty means `/`).
pub fn canonicalize(_raw: &str) -> Result<CanonicalPath, PathError> {
    todo!()
}
