//! HTTP/1.1 message heads (RFC 9112), parsed strictly: CRLF line ends only, no obs-fold, no whitespace before `:`,
//! token header names, bounded size. Also the framing rules that decide where a body ends (RFC 9112 §6), refusing
//! the shapes used for request smuggling (CL+TE, differing Content-Lengths, a Transfer-Encoding other than chunked).
//!
//! The parser walks the buffer once, byte class by byte class, and refuses as soon as a byte can never be part of a
//! valid head, so garbage (a TLS hello sent to the plain port, say) is answered at once rather than at the timeout.
//!
//! Content-Length repeats: a request must carry exactly one Content-Length with one value, since the upstream reads
//! the request we forward verbatim and a lax one could read `5, 5` differently; a response may repeat an identical
//! value (RFC 9112 §6.3 allows it and some servers do), and differing values are refused both ways.

use super::bytes::{is_tchar, value_run, visible_run};
use super::Parsed;

/// The HTTP version of a head: leash speaks 1.0 and 1.1 (2 only inside inspected tunnels, through hyper).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// `HTTP/1.0`: no keep-alive unless asked, no chunked bodies.
    Http10,
    /// `HTTP/1.1`.
    Http11,
}

/// One header field: the name as sent, the value with surrounding whitespace trimmed.
#[derive(Clone, PartialEq, Eq)]
pub struct Header {
    /// The name, in the case it was sent in (compare with [`Header::is`]).
    pub name: FieldName,
    /// The value's bytes, which need not be UTF-8.
    pub value: FieldValue,
}

/// A field name's bytes (a token, so ASCII), kept inline up to 24 bytes (nearly every name): a head's fields then
/// cost no allocation each. Two per field, name and value, were about 20 of a plain request's 34 allocations
/// (bench/RESULTS.md, "Header fields inline").
pub type FieldName = smallvec::SmallVec<[u8; 24]>;

/// A field value, kept inline up to 32 bytes (most values: lengths, types, dates, hosts).
pub type FieldValue = smallvec::SmallVec<[u8; 32]>;

/// A request's head: its line and header fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// The method, a token, as sent.
    pub method: String,
    /// The request-target exactly as sent.
    pub target: String,
    /// The version on the request line.
    pub version: Version,
    /// In order, repeated fields kept.
    pub headers: Vec<Header>,
}

/// A response's head: its status line and header fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    /// The version on the status line.
    pub version: Version,
    /// The three-digit status code.
    pub status: u16,
    /// The reason phrase's bytes, possibly empty.
    pub reason: Vec<u8>,
    /// In order, repeated fields kept.
    pub headers: Vec<Header>,
}

/// How a message's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body.
    None,
    /// Exactly this many bytes.
    ContentLength(u64),
    /// `Transfer-Encoding: chunked`, up to the last chunk and trailers.
    Chunked,
    /// Response only: the body runs until the upstream closes.
    UntilClose,
}

/// A malformed head. Every variant is answered 400, except `TooLarge` (431).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    /// Longer than `Limits::max_head_bytes` before its blank line.
    #[error("header section larger than the bound")]
    TooLarge,
    /// A line ended by LF alone, which servers split differently.
    #[error("bare LF line ending")]
    BareLf,
    /// Not `METHOD SP target SP version`.
    #[error("malformed request line")]
    BadRequestLine,
    /// Not `version SP status SP reason`.
    #[error("malformed status line")]
    BadStatusLine,
    /// A version other than HTTP/1.0 and HTTP/1.1.
    #[error("unsupported HTTP version")]
    BadVersion,
    /// A line starting with whitespace, continuing the previous field (RFC 9112 §5.2 obsoletes it).
    #[error("obsolete line folding")]
    ObsFold,
    /// `Name :`, which servers read as two names or one.
    #[error("whitespace before `:` in a header")]
    SpaceBeforeColon,
    /// A field line that is no `name: value` (a name that is no token, a control byte in the value).
    #[error("malformed header line")]
    BadHeader,
    /// Both framings: the classic request smuggling shape.
    #[error("both Content-Length and Transfer-Encoding")]
    ContentLengthAndTransferEncoding,
    /// A transfer coding leash does not relay, or `chunked` not last.
    #[error("Transfer-Encoding other than `chunked`")]
    BadTransferEncoding,
    /// Content-Length values that differ, or one that is not a number.
    #[error("differing or invalid Content-Length")]
    BadContentLength,
}

impl Version {
    /// The version as it is written on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::Http10 => "HTTP/1.0",
            Version::Http11 => "HTTP/1.1",
        }
    }
}

/// Shown as text (`Name: value`, bytes that are not UTF-8 replaced), as the inline byte arrays would not be.
impl std::fmt::Debug for Header {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", format!("{}: {}", String::from_utf8_lossy(&self.name), String::from_utf8_lossy(&self.value)))
    }
}

impl Header {
    /// A field named `name` (a token) with `value`.
    pub fn new(name: &str, value: impl AsRef<[u8]>) -> Self {
        Self { name: FieldName::from_slice(name.as_bytes()), value: FieldValue::from_slice(value.as_ref()) }
    }

    /// Whether this field is named `name` (field names are case-insensitive).
    pub fn is(&self, name: &str) -> bool {
        self.name.eq_ignore_ascii_case(name.as_bytes())
    }

    /// The value as text, when it is UTF-8 (obs-text bytes may make it not).
    pub fn value_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.value).ok()
    }
}

impl RequestHead {
    /// Values of every header named `name` (case-insensitive), in order.
    pub fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        values(&self.headers, name)
    }

    /// Whether the client's connection stays open after this exchange: HTTP/1.1 without `Connection: close`.
    /// An HTTP/1.0 client is never kept (RFC 9112 §9.3: a proxy must not keep one alive).
    pub fn is_persistent(&self) -> bool {
        is_persistent(self.version, &self.headers)
    }
}

impl ResponseHead {
    /// Values of every header named `name` (case-insensitive), in order.
    pub fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        values(&self.headers, name)
    }

    /// Whether the upstream connection may be reused: HTTP/1.1 without `Connection: close`.
    pub fn is_persistent(&self) -> bool {
        is_persistent(self.version, &self.headers)
    }
}

/// Values of every field in `headers` named `name` (case-insensitive), in order.
pub fn values<'a>(headers: &'a [Header], name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
    headers.iter().filter(move |h| h.is(name)).map(|h| h.value.as_slice())
}

/// The options of every Connection field, in order, split on commas and trimmed, empty ones skipped (RFC 9110
/// §7.6.1); compare them case-insensitively. Each names a hop-by-hop field (or is `close`, `keep-alive`, ...).
pub fn connection_tokens(headers: &[Header]) -> impl Iterator<Item = &[u8]> + '_ {
    values(headers, "connection").flat_map(|v| v.split(|&b| b == b',')).map(trim_ows).filter(|t| !t.is_empty())
}

/// Whether the Connection fields list `token` (case-insensitive).
pub fn has_connection_token(headers: &[Header], token: &str) -> bool {
    connection_tokens(headers).any(|t| t.eq_ignore_ascii_case(token.as_bytes()))
}

/// The Upgrade header of a request that asks to switch protocols (`Connection: upgrade` + `Upgrade: ...`).
pub fn upgrade_value(head: &RequestHead) -> Option<&[u8]> {
    if !has_connection_token(&head.headers, "upgrade") {
        return None;
    }
    head.values("upgrade").next()
}

/// Whether `bytes` is a non-empty RFC 9110 token (method, field name, Connection option).
pub fn is_token(bytes: &[u8]) -> bool {
    !bytes.is_empty() && bytes.iter().all(|&b| is_tchar(b))
}

/// Parse a request head from the start of `buf`. `Done`'s length includes the final CRLF CRLF. `max` bounds the
/// whole head; leading empty lines (RFC 9112 §2.2 allows one CRLF) are skipped.
pub fn parse_request_head(buf: &[u8], max: usize) -> Parsed<RequestHead, HeadError> {
    complete_first(buf, max, request, |(method, target, version), headers| RequestHead {
        method: ascii_string(method),
        target: ascii_string(target),
        version,
        headers,
    })
}

/// Parse a response head from the start of `buf`.
pub fn parse_response_head(buf: &[u8], max: usize) -> Parsed<ResponseHead, HeadError> {
    complete_first(buf, max, response, |(version, status, reason), headers| ResponseHead {
        version,
        status,
        reason: reason.to_vec(),
        headers,
    })
}

/// A request's body framing (RFC 9112 §6.3).
pub fn request_framing(head: &RequestHead) -> Result<BodyFraming, HeadError> {
    Ok(match declared(&head.headers, head.version, Repeats::Refuse)? {
        Declared::Nothing => BodyFraming::None,
        Declared::Chunked => BodyFraming::Chunked,
        Declared::Length(n) => BodyFraming::ContentLength(n),
    })
}

/// A response's body framing, given the request method (HEAD, CONNECT) and status (1xx, 204, 304).
///
/// A Transfer-Encoding other than `chunked` is refused rather than read until close (RFC 9112 §6.3 rule 4 would
/// allow that): the proxy relays bodies in their original framing and would hand the client a coding it cannot
/// check, and such responses are rare enough that refusing costs nothing.
pub fn response_framing(head: &ResponseHead, request_method: &str) -> Result<BodyFraming, HeadError> {
    let status = head.status;
    let bodiless = request_method == "HEAD" || (100..200).contains(&status) || status == 204 || status == 304;
    if bodiless || (request_method == "CONNECT" && (200..300).contains(&status)) {
        return Ok(BodyFraming::None);
    }
    Ok(match declared(&head.headers, head.version, Repeats::AllowIdentical)? {
        Declared::Nothing => BodyFraming::UntilClose,
        Declared::Chunked => BodyFraming::Chunked,
        Declared::Length(n) => BodyFraming::ContentLength(n),
    })
}

/// Why parsing stopped short of a value.
enum Stop {
    NeedMore,
    Refuse(HeadError),
}

impl From<HeadError> for Stop {
    fn from(e: HeadError) -> Self {
        Stop::Refuse(e)
    }
}

type Step<T> = Result<T, Stop>;

/// Validate and locate in one pass, noting where each field lies but allocating nothing (a head still arriving is
/// re-read on every call, so that path must be cheap); build the owned head only once it is complete.
fn complete_first<'a, L, H>(
    buf: &'a [u8],
    max: usize,
    parse: fn(&mut Scan<'a>, &mut Fields<'a>) -> Step<L>,
    build: impl FnOnce(L, Vec<Header>) -> H,
) -> Parsed<H, HeadError> {
    let mut s = Scan { buf: buf.get(..max).unwrap_or(buf), pos: 0 };
    let mut fields = Fields::new();
    match parse(&mut s, &mut fields) {
        Ok(line) => Parsed::Done(build(line, fields.into_headers()), s.pos),
        Err(Stop::Refuse(e)) => Parsed::Refuse(e),
        Err(Stop::NeedMore) if buf.len() > max => Parsed::Refuse(HeadError::TooLarge),
        Err(Stop::NeedMore) => Parsed::NeedMore,
    }
}

/// Fields noted on the stack: enough for nearly every head; more spill into a vector.
const INLINE_FIELDS: usize = 64;

/// Where each field's name and trimmed value lie, in order.
struct Fields<'a> {
    inline: [(&'a [u8], &'a [u8]); INLINE_FIELDS],
    len: usize,
    spill: Vec<(&'a [u8], &'a [u8])>,
}

impl<'a> Fields<'a> {
    fn new() -> Self {
        Self { inline: [(&[], &[]); INLINE_FIELDS], len: 0, spill: Vec::new() }
    }

    fn push(&mut self, name: &'a [u8], value: &'a [u8]) {
        match self.inline.get_mut(self.len) {
            Some(slot) => *slot = (name, value),
            None => self.spill.push((name, value)),
        }
        self.len += 1;
    }

    fn into_headers(self) -> Vec<Header> {
        let inline = self.inline.iter().take(self.len);
        inline
            .chain(self.spill.iter())
            .map(|&(name, value)| Header { name: FieldName::from_slice(name), value: FieldValue::from_slice(value) })
            .collect()
    }
}

/// A request head: an optional empty line (RFC 9112 §2.2 tolerates one CRLF; a second is refused), the request
/// line, the header section.
fn request<'a>(s: &mut Scan<'a>, fields: &mut Fields<'a>) -> Step<(&'a [u8], &'a [u8], Version)> {
    if s.peek()? == b'\r' {
        s.crlf(HeadError::BadRequestLine)?;
    }
    let line = request_line(s)?;
    header_section(s, fields)?;
    Ok(line)
}

fn response<'a>(s: &mut Scan<'a>, fields: &mut Fields<'a>) -> Step<(Version, u16, &'a [u8])> {
    let line = status_line(s)?;
    header_section(s, fields)?;
    Ok(line)
}

/// A position in the head being parsed.
struct Scan<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Scan<'a> {
    /// The next byte, or `NeedMore` at the end of the buffer.
    fn peek(&self) -> Step<u8> {
        self.buf.get(self.pos).copied().ok_or(Stop::NeedMore)
    }

    /// Consume the longest run of bytes of one class (one pass, no per-byte bookkeeping).
    fn take_while(&mut self, class: impl Fn(u8) -> bool) -> &'a [u8] {
        self.take_run(|rest| rest.iter().position(|&b| !class(b)).unwrap_or(rest.len()))
    }

    /// Consume the run whose length `run` measures (one of the word-at-a-time scans).
    fn take_run(&mut self, run: impl Fn(&[u8]) -> usize) -> &'a [u8] {
        let rest = self.buf.get(self.pos..).unwrap_or_default();
        let len = run(rest);
        self.pos += len;
        rest.get(..len).unwrap_or_default()
    }

    /// Refuse at the current byte: `BareLf` if it is a LF, else `otherwise` (`NeedMore` at the end of the buffer).
    fn reject<T>(&self, otherwise: HeadError) -> Step<T> {
        match self.peek()? {
            b'\n' => Err(HeadError::BareLf.into()),
            _ => Err(otherwise.into()),
        }
    }

    /// Consume the byte `want`, or refuse as [`Scan::reject`] does.
    fn expect(&mut self, want: u8, otherwise: HeadError) -> Step<()> {
        if self.peek()? != want {
            return self.reject(otherwise);
        }
        self.pos += 1;
        Ok(())
    }

    /// Consume a CRLF; a lone LF is `BareLf`, anything else (a bare CR included) is `otherwise`.
    fn crlf(&mut self, otherwise: HeadError) -> Step<()> {
        self.expect(b'\r', otherwise.clone())?;
        match self.peek()? {
            b'\n' => {
                self.pos += 1;
                Ok(())
            }
            _ => Err(otherwise.into()),
        }
    }
}

/// `method SP request-target SP HTTP-version CRLF`, single spaces, a visible-ASCII target.
fn request_line<'a>(s: &mut Scan<'a>) -> Step<(&'a [u8], &'a [u8], Version)> {
    let method = s.take_while(is_tchar);
    if method.is_empty() {
        return s.reject(HeadError::BadRequestLine);
    }
    s.expect(b' ', HeadError::BadRequestLine)?;
    let target = s.take_run(visible_run);
    if target.is_empty() {
        return s.reject(HeadError::BadRequestLine);
    }
    s.expect(b' ', HeadError::BadRequestLine)?;
    let version = version(s, HeadError::BadRequestLine)?;
    s.crlf(HeadError::BadRequestLine)?;
    Ok((method, target, version))
}

/// `HTTP-version SP 3DIGIT [SP reason] CRLF`. The space before an empty reason may be missing (`HTTP/1.1 200`),
/// as some servers send it. Any code from 100 to 999 is taken: codes above 599 have no meaning but do occur (999
/// from some sites), and the client deserves to see them; codes below 100 have no class and are refused.
fn status_line<'a>(s: &mut Scan<'a>) -> Step<(Version, u16, &'a [u8])> {
    let version = version(s, HeadError::BadStatusLine)?;
    s.expect(b' ', HeadError::BadStatusLine)?;
    let mut status = 0u16;
    for _ in 0..3 {
        let digit = s.peek()?;
        if !digit.is_ascii_digit() {
            return s.reject(HeadError::BadStatusLine);
        }
        s.pos += 1;
        status = status * 10 + u16::from(digit - b'0');
    }
    if status < 100 {
        return Err(HeadError::BadStatusLine.into());
    }
    let reason = if s.peek()? == b' ' {
        s.pos += 1;
        s.take_run(value_run)
    } else {
        &[]
    };
    s.crlf(HeadError::BadStatusLine)?;
    Ok((version, status, reason))
}

/// `HTTP/1.0` or `HTTP/1.1`; refused as soon as the bytes seen can no longer become either. No field at all (an
/// extra space) is a malformed `line`, not a version.
fn version(s: &mut Scan<'_>, line: HeadError) -> Step<Version> {
    const HTTP10: &[u8] = b"HTTP/1.0";
    const HTTP11: &[u8] = b"HTTP/1.1";
    let field = s.take_run(visible_run);
    if field.is_empty() {
        return s.reject(line);
    }
    if s.pos == s.buf.len() {
        let could_be = |v: &[u8]| v.starts_with(field);
        return Err(if could_be(HTTP10) || could_be(HTTP11) { Stop::NeedMore } else { HeadError::BadVersion.into() });
    }
    match field {
        HTTP10 => Ok(Version::Http10),
        HTTP11 => Ok(Version::Http11),
        _ => Err(HeadError::BadVersion.into()),
    }
}

/// Header lines up to and including the empty line that ends the head, each noted in `fields`.
fn header_section<'a>(s: &mut Scan<'a>, fields: &mut Fields<'a>) -> Step<()> {
    loop {
        match s.peek()? {
            b'\r' => return s.crlf(HeadError::BadHeader),
            b'\n' => return Err(HeadError::BareLf.into()),
            // A line that starts with whitespace continues the previous one (obs-fold, RFC 9112 §5.2).
            b' ' | b'\t' => return Err(HeadError::ObsFold.into()),
            _ => {
                let (name, value) = header_line(s)?;
                fields.push(name, value);
            }
        }
    }
}

/// `field-name ":" OWS field-value OWS CRLF`.
fn header_line<'a>(s: &mut Scan<'a>) -> Step<(&'a [u8], &'a [u8])> {
    let name = s.take_while(is_tchar);
    match s.peek()? {
        b':' if !name.is_empty() => s.pos += 1,
        b' ' | b'\t' if !name.is_empty() => return Err(HeadError::SpaceBeforeColon.into()),
        _ => return s.reject(HeadError::BadHeader),
    }
    let value = s.take_run(value_run);
    s.crlf(HeadError::BadHeader)?;
    Ok((name, trim_ows(value)))
}

/// What the framing fields of a message declare, checked against each other.
enum Declared {
    Nothing,
    Chunked,
    Length(u64),
}

/// Whether identical repeated Content-Length values are taken as one.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Repeats {
    Refuse,
    AllowIdentical,
}

/// RFC 9112 §6.1-6.3, strictly: Transfer-Encoding must be exactly one field saying `chunked`, on HTTP/1.1 only
/// (an HTTP/1.0 message carrying it has faulty framing, §6.1), and never beside a Content-Length.
fn declared(headers: &[Header], version: Version, repeats: Repeats) -> Result<Declared, HeadError> {
    let mut codings = values(headers, "transfer-encoding");
    let has_length = headers.iter().any(|h| h.is("content-length"));
    match codings.next() {
        Some(_) if has_length => Err(HeadError::ContentLengthAndTransferEncoding),
        Some(coding) => {
            let chunked = coding.eq_ignore_ascii_case(b"chunked");
            if !chunked || codings.next().is_some() || version == Version::Http10 {
                return Err(HeadError::BadTransferEncoding);
            }
            Ok(Declared::Chunked)
        }
        None if has_length => content_length(headers, repeats).map(Declared::Length),
        None => Ok(Declared::Nothing),
    }
}

/// The Content-Length, from every field and comma-separated element; all must agree.
fn content_length(headers: &[Header], repeats: Repeats) -> Result<u64, HeadError> {
    let mut found = None;
    let mut count = 0usize;
    for element in values(headers, "content-length").flat_map(|v| v.split(|&b| b == b',')) {
        let n = parse_decimal(trim_ows(element)).ok_or(HeadError::BadContentLength)?;
        if found.is_some_and(|f| f != n) {
            return Err(HeadError::BadContentLength);
        }
        found = Some(n);
        count += 1;
    }
    if count > 1 && repeats == Repeats::Refuse {
        return Err(HeadError::BadContentLength);
    }
    found.ok_or(HeadError::BadContentLength)
}

/// `1*DIGIT` as a `u64`: no sign, no whitespace, no overflow.
fn parse_decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &d| {
        let digit = d.is_ascii_digit().then(|| u64::from(d - b'0'))?;
        n.checked_mul(10)?.checked_add(digit)
    })
}

fn is_persistent(version: Version, headers: &[Header]) -> bool {
    version == Version::Http11 && !has_connection_token(headers, "close")
}

fn trim_ows(bytes: &[u8]) -> &[u8] {
    let is_ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = bytes.iter().position(|b| !is_ows(b)).unwrap_or(bytes.len());
    let end = bytes.iter().rposition(|b| !is_ows(b)).map_or(start, |i| i + 1);
    bytes.get(start..end).unwrap_or_default()
}

/// Bytes already checked to be ASCII, as a `String`.
fn ascii_string(bytes: &[u8]) -> String {
    std::str::from_utf8(bytes).map(str::to_owned).unwrap_or_default()
}

#[cfg(test)]
mod tests;
