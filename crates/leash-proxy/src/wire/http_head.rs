//! HTTP/1.1 message heads (RFC 9112), parsed strictly: CRLF line ends only, no obs-fold, no whitespace before `:`,
//! token header names, bounded size. Also the framing rules that decide where a body ends (RFC 9112 §6), refusing
//! the shapes used for request smuggling (CL+TE, differing Content-Lengths, a Transfer-Encoding other than chunked).

use super::Parsed;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    Http10,
    Http11,
}

/// One header field: the name as sent, the value with surrounding whitespace trimmed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub name: String,
    pub value: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    pub method: String,
    /// The request-target exactly as sent.
    pub target: String,
    pub version: Version,
    /// In order, repeated fields kept.
    pub headers: Vec<Header>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    pub version: Version,
    pub status: u16,
    pub reason: Vec<u8>,
    pub headers: Vec<Header>,
}

/// How a message's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    None,
    ContentLength(u64),
    Chunked,
    /// Response only: the body runs until the upstream closes.
    UntilClose,
}

/// A malformed head. Every variant is answered 400, except `TooLarge` (431).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    #[error("header section larger than the bound")]
    TooLarge,
    #[error("bare LF line ending")]
    BareLf,
    #[error("malformed request line")]
    BadRequestLine,
    #[error("malformed status line")]
    BadStatusLine,
    #[error("unsupported HTTP version")]
    BadVersion,
    #[error("obsolete line folding")]
    ObsFold,
    #[error("whitespace before `:` in a header")]
    SpaceBeforeColon,
    #[error("malformed header line")]
    BadHeader,
    #[error("both Content-Length and Transfer-Encoding")]
    ContentLengthAndTransferEncoding,
    #[error("Transfer-Encoding other than `chunked`")]
    BadTransferEncoding,
    #[error("differing or invalid Content-Length")]
    BadContentLength,
}

impl RequestHead {
    /// Values of every header named `name` (case-insensitive), in order.
    pub fn values<'a>(&'a self, _name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        std::iter::empty()
    }
}

/// Parse a request head from the start of `buf`. `Done`'s length includes the final CRLF CRLF. `max` bounds the
/// whole head; leading empty lines (RFC 9112 §2.2 allows one CRLF) are skipped.
pub fn parse_request_head(_buf: &[u8], _max: usize) -> Parsed<RequestHead, HeadError> {
    todo!()
}

/// Parse a response head from the start of `buf`.
pub fn parse_response_head(_buf: &[u8], _max: usize) -> Parsed<ResponseHead, HeadError> {
    todo!()
}

/// A request's body framing (RFC 9112 §6.3).
pub fn request_framing(_head: &RequestHead) -> Result<BodyFraming, HeadError> {
    todo!()
}

/// A response's body framing, given the request method (HEAD, CONNECT) and status (1xx, 204, 304).
pub fn response_framing(
    _head: &ResponseHead,
    _request_method: &str,
) -> Result<BodyFraming, HeadError> {
    todo!()
}
