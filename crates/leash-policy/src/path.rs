//! Path canonicalisation: cut the query at the first raw `?`, percent-decode until stable, `\` as `/`, drop
//! `;params` from each segment, collapse `//`, remove dot segments (RFC 3986 §5.2.4). Refuse control characters,
//! raw `#` and malformed escapes (checked on the raw text) and control characters produced by decoding.
//!
//! The canonical form is ASCII and idempotent (`canonicalize(c.as_str()) == c`): after decoding, the bytes that
//! would mean something else if read again — `%`, `?`, `#`, space, and every non-ASCII byte — are written back as
//! `%XX` with upper-case hex. So a raw `é` and `%C3%A9` are the same path, and a `%` left over from decoding
//! (`%2525zz` → `%25zz` → `%zz`, stable) stays a literal `%` that cannot spell anything else. Decoding stops after
//! [`MAX_DECODE_ROUNDS`]; a path still encoded after that is refused as a malformed escape.

/// Layers of percent-encoding undone before giving up. Real clients encode once (proxies and frameworks sometimes
/// twice); each round is a pass over the path, so an unbounded loop would let `%252525…` cost quadratic time.
pub const MAX_DECODE_ROUNDS: usize = 8;

/// A canonical path: starts with `/`, no query, no dot segments, no empty segments, decoded.
///
/// It also keeps what an allow prefix needs to know about the raw spelling (see [`CanonicalPath::literal_reading`]
/// and [`CanonicalPath::had_dot_segments`]). Equality and hashing look at the canonical text alone.
#[derive(Debug, Clone)]
pub struct CanonicalPath(String, Spelling);

/// How the raw path differs from its canonical form in ways a server might read otherwise.
#[derive(Debug, Clone, Default)]
struct Spelling {
    /// The raw path split on its raw `/` only, each segment decoded (an `%2F`, `%5C` or `\` kept inside it, as
    /// `%2F`/`%5C`; `;params` and empty segments kept); `None` when that is the canonical form itself.
    literal: Option<String>,
    /// A `.` or `..` segment (raw or encoded, with or without `;params`) was removed.
    dotted: bool,
}

impl PartialEq for CanonicalPath {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl Eq for CanonicalPath {}

impl std::hash::Hash for CanonicalPath {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl CanonicalPath {
    /// The canonical text, which rules are compared with (what servers would see after decoding it).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The root path `/`.
    pub fn root() -> CanonicalPath {
        CanonicalPath("/".to_owned(), Spelling::default())
    }

    /// The path as a server reads it that splits only on a raw `/` and keeps `;params`, empty segments and an
    /// encoded `/` or `\` as data (`/evil%2F..%2Frust-lang/x` stays one segment `evil%2F..%2Frust-lang` there, while
    /// leash's canonical form is `/rust-lang/x`). `None` when it equals [`CanonicalPath::as_str`]. A blocklist needs
    /// none of this (a different reading only over-blocks); an allow prefix must admit both readings.
    pub fn literal_reading(&self) -> Option<&str> {
        self.1.literal.as_deref()
    }

    /// True if canonicalising removed a dot segment. Servers remove them before or after decoding, or not at all,
    /// so such a path has no one reading an allow prefix could vouch for.
    pub fn had_dot_segments(&self) -> bool {
        self.1.dotted
    }
}

impl std::fmt::Display for CanonicalPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a request target's path is malformed (always answered 400, reason `bad-request`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// A byte below 0x20 or DEL in the target as sent.
    #[error("control character in the request target")]
    ControlChar,
    /// A `#`, which a client never sends and a server may cut at.
    #[error("raw `#` (fragment) in the request target")]
    Fragment,
    /// A `%` not followed by two hex digits.
    #[error("malformed percent-escape in the request target")]
    BadEscape,
    /// An escape that decodes to a control character (`%00`, `%0a`).
    #[error("control character produced by percent-decoding")]
    DecodedControlChar,
    /// A path that does not begin with `/` (nor is empty).
    #[error("request target path does not start with `/`")]
    NotAbsolute,
}

/// Canonicalise a raw `path[?query]` (as it appears after the authority in the request target; empty means `/`).
pub fn canonicalize(raw: &str) -> Result<CanonicalPath, PathError> {
    check_raw(raw.as_bytes())?;
    let path = raw.split_once('?').map_or(raw, |(path, _query)| path);
    if path.is_empty() {
        return Ok(CanonicalPath::root());
    }
    if !path.starts_with('/') {
        return Err(PathError::NotAbsolute);
    }
    if already_canonical(path.as_bytes()) {
        return Ok(CanonicalPath(path.to_owned(), Spelling::default()));
    }
    let decoded = decode_until_stable(path.as_bytes())?;
    let (segments, dotted) = remove_dot_segments(&decoded);
    let canonical = encode_special(&segments);
    let literal = literal_reading(path.as_bytes())?;
    let literal = (literal != canonical).then_some(literal);
    Ok(CanonicalPath(canonical, Spelling { literal, dotted }))
}

/// The raw path split on raw `/` only; each segment decoded and written back with `/` and `\` escaped, so it
/// stays one segment (see [`CanonicalPath::literal_reading`]).
fn literal_reading(path: &[u8]) -> Result<String, PathError> {
    let mut out = String::with_capacity(path.len());
    for raw in path.split(|&b| b == b'/').skip(1) {
        let decoded = if raw.contains(&b'%') { decode_until_stable(raw)? } else { raw.to_vec() };
        out.push('/');
        out.push_str(&encode_special(&decoded).replace('/', "%2F").replace('\\', "%5C"));
    }
    Ok(out)
}

/// True if canonicalising `path` (checked, query cut) would change nothing: ASCII, nothing to decode or
/// translate (`%`, `\\`, `;`), no empty segment but a trailing one, no dot segment. Most real paths are; this
/// skips the copying passes for them.
fn already_canonical(path: &[u8]) -> bool {
    if path.iter().any(|&b| !b.is_ascii() || matches!(b, b'%' | b'\\' | b';')) {
        return false;
    }
    let mut segments = path.split(|&b| b == b'/').skip(1).peekable();
    while let Some(segment) = segments.next() {
        let last = segments.peek().is_none();
        if matches!(segment, b"." | b"..") || (segment.is_empty() && !last) {
            return false;
        }
    }
    true
}

/// Checks on the raw target, query included: control characters (and space), a raw `#`, malformed escapes.
fn check_raw(raw: &[u8]) -> Result<(), PathError> {
    for (i, &b) in raw.iter().enumerate() {
        match b {
            0x00..=0x20 | 0x7f => return Err(PathError::ControlChar),
            b'#' => return Err(PathError::Fragment),
            b'%' if escape_at(raw, i).is_none() => return Err(PathError::BadEscape),
            _ => {}
        }
    }
    Ok(())
}

/// The byte a valid `%XX` at `i` stands for.
fn escape_at(bytes: &[u8], i: usize) -> Option<u8> {
    let hi = hex_value(*bytes.get(i + 1)?)?;
    let lo = hex_value(*bytes.get(i + 2)?)?;
    Some(hi << 4 | lo)
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Decode every valid `%XX` round after round until none is left; a lone `%` after the first round is literal.
fn decode_until_stable(path: &[u8]) -> Result<Vec<u8>, PathError> {
    let mut current = path.to_vec();
    for _ in 0..MAX_DECODE_ROUNDS {
        if !current.iter().enumerate().any(|(i, &b)| b == b'%' && escape_at(&current, i).is_some()) {
            return Ok(current);
        }
        current = decode_once(&current);
        if current.iter().any(|&b| b < 0x20 || b == 0x7f) {
            return Err(PathError::DecodedControlChar);
        }
    }
    let still_encoded = current.iter().enumerate().any(|(i, &b)| b == b'%' && escape_at(&current, i).is_some());
    if still_encoded {
        return Err(PathError::BadEscape);
    }
    Ok(current)
}

fn decode_once(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match escape_at(bytes, i).filter(|_| bytes[i] == b'%') {
            Some(b) => {
                out.push(b);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    out
}

/// `\` as `/`, `;params` dropped from each segment, empty segments collapsed, dot segments removed (never above the
/// root). A path ending in `/`, `.` or `..` keeps a trailing slash, as RFC 3986 §5.2.4 does. Also says whether a dot
/// segment was removed.
fn remove_dot_segments(decoded: &[u8]) -> (Vec<u8>, bool) {
    let unified: Vec<u8> = decoded.iter().map(|&b| if b == b'\\' { b'/' } else { b }).collect();
    let mut segments: Vec<&[u8]> = Vec::new();
    let mut trailing_slash = false;
    let mut dotted = false;
    for raw_segment in unified.split(|&b| b == b'/').skip(1) {
        let segment = raw_segment.split(|&b| b == b';').next().unwrap_or(&[]);
        trailing_slash = true;
        match segment {
            b"" => {}
            b"." => dotted = true,
            b".." => {
                dotted = true;
                segments.pop();
            }
            _ => {
                segments.push(segment);
                trailing_slash = false;
            }
        }
    }
    let mut out = Vec::with_capacity(unified.len());
    for segment in &segments {
        out.push(b'/');
        out.extend_from_slice(segment);
    }
    if trailing_slash || out.is_empty() {
        out.push(b'/');
    }
    (out, dotted)
}

/// Write back as `%XX` the bytes that a second reading would treat specially, so the form is ASCII and idempotent.
fn encode_special(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii() && !matches!(b, b'%' | b'?' | b'#' | b' ') {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(raw: &str) -> String {
        canonicalize(raw).unwrap().0
    }

    #[test]
    fn respellings_collapse() {
        assert_eq!(canon(""), "/");
        assert_eq!(canon("?x=1"), "/");
        assert_eq!(canon("/a/b?c=%2F/../x"), "/a/b");
        assert_eq!(canon("/a/./b/../c"), "/a/c");
        assert_eq!(canon("/a/%2e%2E/b"), "/b");
        assert_eq!(canon("/a%2fb"), "/a/b");
        assert_eq!(canon("//a///b"), "/a/b");
        assert_eq!(canon("/%61bs"), "/abs");
        assert_eq!(canon("/a;x=1/b;y"), "/a/b");
        assert_eq!(canon("/a\\b"), "/a/b");
        assert_eq!(canon("/a%5cb"), "/a/b");
        assert_eq!(canon("/a%252fb"), "/a/b");
        assert_eq!(canon("/../../a"), "/a");
        assert_eq!(canon("/a/.."), "/");
        assert_eq!(canon("/a/b/."), "/a/b/");
        assert_eq!(canon("/a/..;/b"), "/b");
        assert_eq!(canon("/a/"), "/a/");
        assert_eq!(canon("/a%3fb"), "/a%3Fb");
        assert_eq!(canon("/a%23b"), "/a%23b");
        assert_eq!(canon("/a%20b"), "/a%20b");
        assert_eq!(canon("/é"), "/%C3%A9");
        assert_eq!(canon("/%c3%a9"), "/%C3%A9");
        assert_eq!(canon("/%ff"), "/%FF");
        assert_eq!(canon("/a%2525zz"), "/a%25zz");
    }

    #[test]
    fn canonical_form_is_idempotent_on_samples() {
        for raw in ["/a%2525zz", "/a%3fb", "/%ff%20x", "/a/b/", "/é/../x"] {
            let once = canon(raw);
            assert_eq!(canon(&once), once, "{raw}");
        }
    }

    #[test]
    fn bad_targets_are_refused() {
        assert_eq!(canonicalize("/a b").unwrap_err(), PathError::ControlChar);
        assert_eq!(canonicalize("/a\tb").unwrap_err(), PathError::ControlChar);
        assert_eq!(canonicalize("/a\x7f").unwrap_err(), PathError::ControlChar);
        assert_eq!(canonicalize("/a#b").unwrap_err(), PathError::Fragment);
        assert_eq!(canonicalize("/a?b#c").unwrap_err(), PathError::Fragment);
        assert_eq!(canonicalize("/a%zz").unwrap_err(), PathError::BadEscape);
        assert_eq!(canonicalize("/a%2").unwrap_err(), PathError::BadEscape);
        assert_eq!(canonicalize("/a?q=%").unwrap_err(), PathError::BadEscape);
        assert_eq!(canonicalize("/a%00").unwrap_err(), PathError::DecodedControlChar);
        assert_eq!(canonicalize("/a%7F").unwrap_err(), PathError::DecodedControlChar);
        assert_eq!(canonicalize("/a%250a").unwrap_err(), PathError::DecodedControlChar);
        assert_eq!(canonicalize("a/b").unwrap_err(), PathError::NotAbsolute);
        // `%` + `25`×k + `41` takes k+1 rounds to become `A`.
        let layered = |k: usize| format!("/%{}41", "25".repeat(k));
        assert_eq!(canon(&layered(MAX_DECODE_ROUNDS - 1)), "/A");
        assert_eq!(canonicalize(&layered(MAX_DECODE_ROUNDS)).unwrap_err(), PathError::BadEscape);
    }
}
