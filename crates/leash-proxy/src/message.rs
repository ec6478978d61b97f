//! The two shapes a request takes inside leash — an HTTP/1.1 head leash parsed itself ([`RequestHead`], its body
//! still on the client's connection) and an HTTP/2 stream as hyper hands it over (`http`'s parts and hyper's body) —
//! seen through one set of traits, so each step of the admission sequence (`admit.rs`: credentials, the model API
//! gate, the leak check) is written once for both. What differs is only how a field is stored and how a body is read
//! off the wire (the bodies are `model.rs`'s: [`RequestBody`] is implemented there, where bodies are read).

use std::borrow::Cow;
use std::future::Future;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};

use crate::limits::Limits;
use crate::wire::http_head::{upgrade_value, Header, RequestHead};

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
    /// Why a body could not be read whole; its text is the refusal's.
    type Unread: std::fmt::Display;
    /// The whole body, at most `limits.max_model_body` bytes, arriving within the response timeout.
    fn read_whole(&mut self, limits: &Limits) -> impl Future<Output = Result<Bytes, Self::Unread>> + Send;
}

impl Fields for Vec<Header> {
    fn each(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.iter().map(|h| (h.name.as_slice(), h.value.as_slice()))
    }

    fn values_of<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> {
        crate::wire::http_head::values(self, name)
    }

    fn rewrite(&mut self, name: &str, mut rewrite: impl FnMut(&[u8]) -> Option<Vec<u8>>) -> bool {
        let mut used = false;
        for h in self.iter_mut().filter(|h| h.is(name)) {
            if let Some(value) = rewrite(&h.value) {
                h.value = value.into();
                used = true;
            }
        }
        used
    }

    fn add(&mut self, name: &str, value: Vec<u8>) -> bool {
        // The value moved, not copied: a credential's value is longer than a value kept inline.
        self.push(Header { name: name.as_bytes().into(), value: value.into() });
        true
    }

    fn set(&mut self, name: &str, value: &'static str) {
        self.retain(|h| !h.is(name));
        self.push(Header::new(name, value));
    }

    fn remove(&mut self, name: &str) {
        self.retain(|h| !h.is(name));
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
