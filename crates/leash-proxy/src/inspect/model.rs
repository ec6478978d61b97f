//! The model API gate of an inspected tunnel: a request to a model host whose provider-side tools the
//! policy filters has its body read whole (bounded), checked by [`crate::provider_tools`], and forwarded unchanged,
//! forwarded stripped, or refused. What cannot be checked — a body that is not JSON, is compressed, is larger than
//! the bound, or a WebSocket whose messages follow the upgrade — is refused, never passed unread. Responses are not
//! touched: they stream as for any request. [`h1`](super::h1) and [`h2`](super::h2) call in here.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use leash_policy::{Decision, ProviderTools, Reason, Verdict};
use tokio::io::AsyncWrite;

use crate::audit::refusal;
use crate::provider_tools::{filter, Outcome};

/// What becomes of a model API request with a body.
#[derive(Debug)]
pub(super) enum Gate {
    /// Forward this body; `stripped` lists what was removed from it (empty: it is the body as sent).
    Forward { body: Bytes, stripped: Vec<String> },
    /// Refuse with 403 `provider-tools`; the text says why.
    Refuse(String),
}

/// Check a whole body under `mode`.
pub(super) fn judge(body: Bytes, mode: ProviderTools) -> Gate {
    match filter(&body, mode) {
        Ok(Outcome::Unchanged) => Gate::Forward { body, stripped: Vec::new() },
        Ok(Outcome::Stripped { body, removed }) => Gate::Forward { body: Bytes::from(body), stripped: removed },
        Ok(Outcome::Refused { tools }) => Gate::Refuse(format!(
            "the policy refuses provider-side tools in model API requests (provider_tools: {}): {}",
            mode.as_str(),
            tools.join("; ")
        )),
        Err(e) => Gate::Refuse(format!("{e}; {UNCHECKED}")),
    }
}

/// Why an unreadable body is refused rather than forwarded.
const UNCHECKED: &str = "leash reads model API request bodies for provider-side tools and refuses what it cannot read";

/// The problem with the request's `Content-Encoding` values, if any: anything but `identity` is not read.
pub(super) fn encoding_problem<'a>(values: impl Iterator<Item = &'a [u8]>) -> Option<String> {
    for value in values {
        let value = String::from_utf8_lossy(value);
        let other = value.split(',').map(str::trim).find(|t| !t.eq_ignore_ascii_case("identity"));
        if let Some(coding) = other {
            return Some(format!(
                "the body is `{coding}`-encoded (Content-Encoding), which leash does not read; send model API \
                 requests uncompressed"
            ));
        }
    }
    None
}

/// The refusal text for a body over the bound.
pub(super) fn too_large(max: usize) -> String {
    format!("the body is larger than {max} bytes, the most leash reads; {UNCHECKED}")
}

/// The refusal text for a WebSocket upgrade to a model host.
pub(super) const UPGRADE: &str =
    "a WebSocket upgrade to a model API carries messages leash does not read (provider-side tools among them)";

/// The decision logged for a forwarded body: the policy's, or `allow provider-tools-stripped` when something went.
pub(super) fn forwarded(d: &Decision, stripped: &[String]) -> Decision {
    match stripped.is_empty() {
        true => d.clone(),
        false => Decision { verdict: Verdict::Allow, reason: Reason::ProviderToolsStripped, rule: d.rule.clone() },
    }
}

/// The decision logged for a refused one.
pub(super) fn refused() -> Decision {
    refusal(Reason::ProviderTools)
}

/// The payload of a chunked body already checked by the chunked scanner (so well formed); trailers are dropped.
/// `None` if it is not well formed after all.
pub(super) fn dechunk(raw: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(raw.len());
    let mut rest = raw;
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
        let size_text = rest[..line_end].split(|b| *b == b';').next()?;
        let size = usize::from_str_radix(std::str::from_utf8(size_text).ok()?, 16).ok()?;
        rest = rest.get(line_end + 2..)?;
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(rest.get(..size)?);
        rest = rest.get(size.checked_add(2)?..)?;
    }
}

/// A writer into memory that fails once more than `cap` bytes are written (a body read to be checked).
pub(super) struct Capped {
    pub buf: Vec<u8>,
    cap: usize,
    /// Set when a write went past the cap.
    pub over: bool,
}

impl Capped {
    pub fn new(cap: usize) -> Self {
        Self { buf: Vec::new(), cap, over: false }
    }
}

impl AsyncWrite for Capped {
    fn poll_write(mut self: Pin<&mut Self>, _: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        if self.buf.len().saturating_add(data.len()) > self.cap {
            self.over = true;
            return Poll::Ready(Err(io::Error::other("body larger than the bound")));
        }
        self.buf.extend_from_slice(data);
        Poll::Ready(Ok(data.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dechunk_reads_sizes_extensions_and_stops_at_the_last_chunk() {
        assert_eq!(dechunk(b"5\r\nhello\r\n6;x=1\r\n world\r\n0\r\nT: v\r\n\r\n").unwrap(), b"hello world");
        assert_eq!(dechunk(b"0\r\n\r\n").unwrap(), b"");
        assert_eq!(dechunk(b"5\r\nhel"), None);
        assert_eq!(dechunk(b"zz\r\n"), None);
    }

    #[test]
    fn only_identity_is_read() {
        let none: [&[u8]; 0] = [];
        assert_eq!(encoding_problem(none.into_iter()), None);
        assert_eq!(encoding_problem([&b"identity"[..], b" IDENTITY "].into_iter()), None);
        assert!(encoding_problem([&b"gzip"[..]].into_iter()).unwrap().contains("`gzip`-encoded"));
        assert!(encoding_problem([&b"identity, br"[..]].into_iter()).unwrap().contains("`br`"));
        assert!(encoding_problem([&b""[..]].into_iter()).is_some(), "an empty coding is not identity");
    }

    #[test]
    fn judge_forwards_strips_and_refuses() {
        let plain = Bytes::from_static(br#"{"model":"m","tools":[]}"#);
        let Gate::Forward { body, stripped } = judge(plain.clone(), ProviderTools::Strip) else { panic!() };
        assert_eq!((body, stripped.len()), (plain, 0), "unchanged bodies go byte for byte");
        let search = Bytes::from_static(br#"{"model":"m","web_search_options":{}}"#);
        let Gate::Forward { body, stripped } = judge(search.clone(), ProviderTools::Strip) else { panic!() };
        assert_eq!((&body[..], stripped.len()), (&br#"{"model":"m"}"#[..], 1));
        let Gate::Refuse(why) = judge(search, ProviderTools::Refuse) else { panic!() };
        assert!(why.contains("(provider_tools: refuse): web_search_options"), "{why}");
        let Gate::Refuse(why) = judge(Bytes::from_static(b"a=1"), ProviderTools::Strip) else { panic!() };
        assert!(why.starts_with("the body is not JSON"), "{why}");
    }
}
