//! The two shapes a request takes inside leash — an HTTP/1.1 head leash parsed itself ([`RequestHead`], its body
//! still on the client's connection) and an HTTP/2 stream as hyper hands it over (`http`'s parts and hyper's body) —
//! seen through one pair of traits, so each step of the admission sequence (`admit.rs`: credentials, the model API
//! gate, the leak check) and the redaction of a response's fields are written once for both. What differs is only
//! how a field is stored and how a body is read off the wire.

use std::borrow::Cow;
use std::future::Future;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Body;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::config::Limits;
use crate::conn::BufConn;
use crate::credentials::Redactor;
use crate::headers;
use crate::model::{self, Unread};
use crate::wire::http_head::{upgrade_value, BodyFraming, Header, RequestHead};

/// A message's fields, by name and value, whichever version carries them. Names compare case-insensitively.
pub(crate) trait Fields {
    /// Every field, name and value, in order.
    fn each(&self) -> impl Iterator<Item = (&[u8], &[u8])>;
    /// The values of the field `name`.
    fn values_of<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]>;
    /// Every value of `name` that `rewrite` returns a new value for replaced by it; true if one was.
    fn rewrite(&mut self, name: &str, rewrite: impl FnMut(&[u8]) -> Option<Vec<u8>>) -> bool;
    /// `name: value` added after the others; false when it cannot be written.
    fn add(&mut self, name: &str, value: Vec<u8>) -> bool;
    /// `name` (as HTTP/1.1 writes it) set to `value` alone, in place of any value it had.
    fn set(&mut self, name: &str, value: &'static str);
    /// Every value of `name` removed.
    fn remove(&mut self, name: &str);
    /// A response's fields from a credential's host as the client gets them: the value echoed in a name or a value
    /// turned back into the placeholder ([`headers::redact_field`]). A field that cannot be written redacted is
    /// dropped, never passed on as it came.
    fn redact(&mut self, redactor: &Redactor);
}

/// A request as the admission sequence reads and rewrites it.
pub(crate) trait Outgoing: Fields {
    /// The method.
    fn method(&self) -> &str;
    /// The target as the client sent it: a path and query (or a whole URL, for plain HTTP).
    fn target(&self) -> &str;
    /// The protocol the request asks to switch to (HTTP/1.1's `Upgrade` under `Connection: upgrade`), if any.
    fn upgrade(&self) -> Option<&[u8]>;
}

/// A request's body as the admission sequence sees it before it goes up: the model API gate reads it whole.
pub(crate) trait RequestBody {
    /// No body follows the head.
    fn is_empty(&self) -> bool;
    /// The length the head declares, when it declares one.
    fn declared(&self) -> Option<u64>;
    /// The whole body, at most `limits.max_model_body` bytes, arriving within the response timeout.
    fn read_whole(&mut self, limits: &Limits) -> impl Future<Output = Result<Bytes, Unread>> + Send;
}

impl Fields for Vec<Header> {
    fn each(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.iter().map(|h| (h.name.as_bytes(), h.value.as_slice()))
    }

    fn values_of<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> {
        crate::wire::http_head::values(self, name)
    }

    fn rewrite(&mut self, name: &str, mut rewrite: impl FnMut(&[u8]) -> Option<Vec<u8>>) -> bool {
        let mut used = false;
        for h in self.iter_mut().filter(|h| h.is(name)) {
            if let Some(value) = rewrite(&h.value) {
                h.value = value;
                used = true;
            }
        }
        used
    }

    fn add(&mut self, name: &str, value: Vec<u8>) -> bool {
        self.push(Header { name: name.to_owned(), value });
        true
    }

    fn set(&mut self, name: &str, value: &'static str) {
        self.retain(|h| !h.is(name));
        self.push(Header { name: name.to_owned(), value: value.as_bytes().to_vec() });
    }

    fn remove(&mut self, name: &str) {
        self.retain(|h| !h.is(name));
    }

    fn redact(&mut self, redactor: &Redactor) {
        for h in self.iter_mut() {
            let (name, value) = headers::redact_field(redactor, h.name.as_bytes(), &h.value);
            let (name, value) = (String::from_utf8_lossy(&name).into_owned(), value.into_owned());
            (h.name, h.value) = (name, value);
        }
    }
}

impl Fields for HeaderMap {
    fn each(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.iter().map(|(k, v)| (k.as_str().as_bytes(), v.as_bytes()))
    }

    fn values_of<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> {
        self.get_all(name).into_iter().map(HeaderValue::as_bytes)
    }

    fn rewrite(&mut self, name: &str, mut rewrite: impl FnMut(&[u8]) -> Option<Vec<u8>>) -> bool {
        let Ok(name) = HeaderName::from_bytes(name.as_bytes()) else { return false };
        let values: Vec<HeaderValue> = self.get_all(&name).iter().cloned().collect();
        if values.is_empty() {
            return false;
        }
        let mut used = false;
        self.remove(&name);
        for value in values {
            // A value that cannot be a field value stays as it was.
            let new = match rewrite(value.as_bytes()).and_then(|v| HeaderValue::from_bytes(&v).ok()) {
                Some(new) => {
                    used = true;
                    new
                }
                None => value,
            };
            self.append(name.clone(), new);
        }
        used
    }

    fn add(&mut self, name: &str, value: Vec<u8>) -> bool {
        let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_bytes(&value)) else {
            return false;
        };
        self.append(name, value);
        true
    }

    fn set(&mut self, name: &str, value: &'static str) {
        if let Ok(name) = HeaderName::from_bytes(name.as_bytes()) {
            self.insert(name, HeaderValue::from_static(value));
        }
    }

    fn remove(&mut self, name: &str) {
        HeaderMap::remove(self, name);
    }

    fn redact(&mut self, redactor: &Redactor) {
        let untouched = |name: &HeaderName, value: &HeaderValue| {
            let (n, v) = headers::redact_field(redactor, name.as_str().as_bytes(), value.as_bytes());
            matches!((n, v), (Cow::Borrowed(_), Cow::Borrowed(_)))
        };
        // Nearly every response holds no echo: its fields are searched, not copied.
        if self.iter().all(|(name, value)| untouched(name, value)) {
            return;
        }
        let mut out = HeaderMap::with_capacity(self.len());
        for (name, value) in self.iter() {
            let (n, v) = headers::redact_field(redactor, name.as_str().as_bytes(), value.as_bytes());
            if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(&n), HeaderValue::from_bytes(&v)) {
                out.append(n, v);
            }
        }
        *self = out;
    }
}

impl Fields for http::request::Parts {
    fn each(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.headers.each()
    }

    fn values_of<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> {
        self.headers.values_of(name)
    }

    fn rewrite(&mut self, name: &str, rewrite: impl FnMut(&[u8]) -> Option<Vec<u8>>) -> bool {
        self.headers.rewrite(name, rewrite)
    }

    fn add(&mut self, name: &str, value: Vec<u8>) -> bool {
        self.headers.add(name, value)
    }

    fn set(&mut self, name: &str, value: &'static str) {
        self.headers.set(name, value)
    }

    fn remove(&mut self, name: &str) {
        Fields::remove(&mut self.headers, name)
    }

    fn redact(&mut self, redactor: &Redactor) {
        self.headers.redact(redactor)
    }
}

impl Outgoing for http::request::Parts {
    fn method(&self) -> &str {
        self.method.as_str()
    }

    fn target(&self) -> &str {
        self.uri.path_and_query().map_or("/", |p| p.as_str())
    }

    /// HTTP/2 has no `Upgrade` (RFC 9113 §8.6).
    fn upgrade(&self) -> Option<&[u8]> {
        None
    }
}

/// An HTTP/1.1 request's body, still on the client's connection: read off it as its head frames it.
pub(crate) struct H1Body<'a, S> {
    /// The client's connection, the body's bytes next on it.
    pub client: &'a mut BufConn<S>,
    /// The request's head (whether the client waits for `100 Continue`).
    pub head: &'a RequestHead,
    /// How the body is delimited.
    pub framing: BodyFraming,
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send> RequestBody for H1Body<'_, S> {
    fn is_empty(&self) -> bool {
        matches!(self.framing, BodyFraming::None | BodyFraming::ContentLength(0))
    }

    fn declared(&self) -> Option<u64> {
        match self.framing {
            BodyFraming::ContentLength(n) => Some(n),
            _ => None,
        }
    }

    async fn read_whole(&mut self, limits: &Limits) -> Result<Bytes, Unread> {
        model::read_body(limits, self.client, self.head, self.framing).await.map(Bytes::from)
    }
}

/// An HTTP/2 stream's body as hyper hands it over (or a wrapper of it: `inspect/client_body.rs`).
pub(crate) struct H2Body<B> {
    /// The body; `None` once the gate read it.
    pub body: Option<B>,
    /// The length the stream's `content-length` declares.
    declared: Option<u64>,
}

impl<B> H2Body<B> {
    /// The body of a stream whose fields are `parts`.
    pub fn new(parts: &http::request::Parts, body: B) -> Self {
        let length = parts.headers.get(http::header::CONTENT_LENGTH);
        let declared = length.and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        H2Body { body: Some(body), declared }
    }
}

impl<B> RequestBody for H2Body<B>
where
    B: Body<Data = Bytes, Error = hyper::Error> + Send,
{
    fn is_empty(&self) -> bool {
        self.body.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn declared(&self) -> Option<u64> {
        self.declared
    }

    async fn read_whole(&mut self, limits: &Limits) -> Result<Bytes, Unread> {
        let Some(body) = self.body.take() else { return Ok(Bytes::new()) };
        let max = limits.max_model_body;
        // The client sends its body at its own pace; as long as leash would wait for an upstream's answer, no longer.
        let collected = tokio::time::timeout(limits.response_timeout, Limited::new(body, max).collect()).await;
        match collected {
            Err(_) => Err(Unread::Late),
            Ok(Err(e)) if e.is::<LengthLimitError>() => Err(Unread::TooLarge(max)),
            Ok(Err(e)) => Err(Unread::Stream(e)),
            Ok(Ok(collected)) => Ok(collected.to_bytes()),
        }
    }
}

/// A head that may still be the client's own: copied at the first change (most requests carry no credential).
impl Fields for Cow<'_, RequestHead> {
    fn each(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.headers.each()
    }

    fn values_of<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> {
        self.headers.values_of(name)
    }

    fn rewrite(&mut self, name: &str, rewrite: impl FnMut(&[u8]) -> Option<Vec<u8>>) -> bool {
        if self.headers.values_of(name).next().is_none() {
            return false;
        }
        self.to_mut().headers.rewrite(name, rewrite)
    }

    fn add(&mut self, name: &str, value: Vec<u8>) -> bool {
        self.to_mut().headers.add(name, value)
    }

    fn set(&mut self, name: &str, value: &'static str) {
        self.to_mut().headers.set(name, value)
    }

    fn remove(&mut self, name: &str) {
        if self.headers.values_of(name).next().is_some() {
            Fields::remove(&mut self.to_mut().headers, name);
        }
    }

    fn redact(&mut self, redactor: &Redactor) {
        self.to_mut().headers.redact(redactor)
    }
}

impl Outgoing for Cow<'_, RequestHead> {
    fn method(&self) -> &str {
        &self.method
    }

    fn target(&self) -> &str {
        &self.target
    }

    fn upgrade(&self) -> Option<&[u8]> {
        upgrade_value(self)
    }
}
