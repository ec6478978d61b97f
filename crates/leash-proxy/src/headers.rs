//! Header rewriting for forwarded messages: hop-by-hop fields removed (RFC 9110 §7.6.1), including every field the
//! Connection header names; everything else kept in order, repeated fields (several `Set-Cookie`) included. And the
//! one redaction of a response field from a credential's host, for HTTP/1.1 and HTTP/2 alike.

use std::borrow::Cow;

use smallvec::SmallVec;

use crate::credentials::Redactor;
use crate::wire::http_head::{connection_tokens, FieldName, FieldValue, Header};

/// Fields that describe one connection, never forwarded. `Transfer-Encoding` is kept: bodies are relayed in their
/// original framing. `Proxy-Authorization` is for leash, not the upstream.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "upgrade",
    "trailer",
];

/// Fields that frame the message leash relays: kept even when the Connection header names them. Dropping one while
/// relaying the body by it would let the upstream frame the body differently, and read a request smuggled inside it
/// that leash never decided (`Connection: Content-Length`; found by tests/attacks.rs).
const FRAMING: [&str; 2] = ["content-length", "transfer-encoding"];

/// Append every end-to-end header to `out` as `Name: value\r\n`, skipping hop-by-hop ones, those the Connection
/// header names, and those in `skip` (lowercase). Compares without allocating: this runs for every forwarded head.
pub fn write_end_to_end(out: &mut Vec<u8>, headers: &[Header], skip: &[&str]) {
    // On the stack: nearly every response names one token (`keep-alive`), and a `Vec` was an allocation each.
    let named: SmallVec<[&[u8]; 4]> = connection_tokens(headers).collect();
    for h in headers {
        let name = h.name.as_slice();
        let is = |n: &[u8]| name.eq_ignore_ascii_case(n);
        let framing = FRAMING.iter().any(|n| is(n.as_bytes()));
        let dropped =
            HOP_BY_HOP.iter().chain(skip).any(|n| is(n.as_bytes())) || (!framing && named.iter().any(|n| is(n)));
        if dropped {
            continue;
        }
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(&h.value);
        out.extend_from_slice(b"\r\n");
    }
}

/// A response field (or trailer) from a credential's host as the client gets it: the value echoed in its name or in
/// its value turned back into the placeholder. The one rule for HTTP/1.1 heads and HTTP/2 fields and trailers.
pub(crate) fn redact_field<'a>(redactor: &Redactor, name: &'a [u8], value: &'a [u8]) -> (Cow<'a, [u8]>, Cow<'a, [u8]>) {
    let redacted = |bytes: &'a [u8]| {
        let out = redactor.redact_all(bytes);
        if out == bytes {
            Cow::Borrowed(bytes)
        } else {
            Cow::Owned(out)
        }
    };
    (redacted(name), redacted(value))
}

/// A response's fields from a credential's host as the client gets them: the value echoed in a name or a value turned
/// back into the placeholder ([`redact_field`]), for an HTTP/1.1 head and HTTP/2 fields and trailers alike.
pub(crate) trait Redact {
    /// Redact every field in place.
    fn redact(&mut self, redactor: &Redactor);
}

impl Redact for Vec<Header> {
    fn redact(&mut self, redactor: &Redactor) {
        for h in self.iter_mut() {
            let (name, value) = redact_field(redactor, &h.name, &h.value);
            (h.name, h.value) = (FieldName::from_slice(&name), FieldValue::from_slice(&value));
        }
    }
}

/// A field that cannot be written redacted is dropped, never passed on as it came.
impl Redact for http::HeaderMap {
    fn redact(&mut self, redactor: &Redactor) {
        let untouched = |name: &http::HeaderName, value: &http::HeaderValue| {
            let (n, v) = redact_field(redactor, name.as_str().as_bytes(), value.as_bytes());
            matches!((n, v), (Cow::Borrowed(_), Cow::Borrowed(_)))
        };
        // Nearly every response holds no echo: its fields are searched, not copied.
        if self.iter().all(|(name, value)| untouched(name, value)) {
            return;
        }
        let mut out = http::HeaderMap::with_capacity(self.len());
        for (name, value) in self.iter() {
            let (n, v) = redact_field(redactor, name.as_str().as_bytes(), value.as_bytes());
            if let (Ok(n), Ok(v)) = (http::HeaderName::from_bytes(&n), http::HeaderValue::from_bytes(&v)) {
                out.append(n, v);
            }
        }
        *self = out;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(name: &str, value: &str) -> Header {
        Header::new(name, value)
    }

    #[test]
    fn drops_hop_by_hop_and_connection_named_fields_keeps_repeats_in_order() {
        let headers = vec![
            h("Set-Cookie", "a=1"),
            h("Connection", "keep-alive, X-Secret"),
            h("X-Secret", "s"),
            h("Keep-Alive", "timeout=5"),
            h("Set-Cookie", "b=2"),
            h("Transfer-Encoding", "chunked"),
        ];
        let mut out = Vec::new();
        write_end_to_end(&mut out, &headers, &[]);
        assert_eq!(
            String::from_utf8(out).unwrap_or_default(),
            "Set-Cookie: a=1\r\nSet-Cookie: b=2\r\nTransfer-Encoding: chunked\r\n"
        );
    }

    #[test]
    fn keeps_framing_fields_the_connection_header_names() {
        let headers = vec![
            h("Content-Length", "5"),
            h("Connection", "Content-Length, transfer-encoding, X-A"),
            h("Transfer-Encoding", "chunked"),
            h("X-A", "a"),
        ];
        let mut out = Vec::new();
        write_end_to_end(&mut out, &headers, &[]);
        assert_eq!(String::from_utf8(out).unwrap_or_default(), "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n");
    }
}
