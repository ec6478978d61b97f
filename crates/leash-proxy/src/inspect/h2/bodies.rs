//! HTTP/2 bodies as they pass an inspected tunnel, frame by frame (data and trailers, no buffering beyond the
//! watches' windows): a request body watched for credentials bound to other hosts ([`WatchedBody`]), a response
//! body with the host's own credential turned back into its placeholder ([`Redacted`]). The HTTP/1.1 relay does the
//! same through `credentials::Filtered` writers; the watches themselves are one ([`LeakWatch`], [`Redactor`]).

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame};

use super::BoxError;
use crate::credentials::{LeakFound, LeakWatch, Redactor};
use crate::headers::Redact;

/// A request body going up through a [`LeakWatch`]: a credential found ends it with an error (the stream is reset
/// upstream, nothing of the credential sent) and is noted in `found`.
pub(super) struct WatchedBody<B> {
    inner: B,
    watch: LeakWatch,
    found: Arc<Mutex<Option<Arc<str>>>>,
    held_trailers: Option<Frame<Bytes>>,
    ended: bool,
}

impl<B> WatchedBody<B> {
    /// `inner` watched by `watch`; the credential found goes into `found`.
    pub(super) fn new(inner: B, watch: LeakWatch, found: Arc<Mutex<Option<Arc<str>>>>) -> Self {
        WatchedBody { inner, watch, found, held_trailers: None, ended: false }
    }

    /// Stop the body at credential `name`.
    fn leaked(&mut self, name: Arc<str>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        *self.found.lock().unwrap_or_else(|p| p.into_inner()) = Some(name.clone());
        Poll::Ready(Some(Err(Box::new(LeakFound(name)))))
    }

    /// Trailers end the data: searched whole, then what the watch held goes first and the trailers after it.
    fn trailers(&mut self, trailers: Frame<Bytes>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let fields = trailers.trailers_ref().into_iter().flatten();
        let leaked = fields.into_iter().find_map(|(k, v)| {
            self.watch.found_in(k.as_str().as_bytes()).or_else(|| self.watch.found_in(v.as_bytes()))
        });
        if let Some(name) = leaked {
            return self.leaked(name);
        }
        let rest = self.watch.finish();
        if rest.is_empty() {
            return Poll::Ready(Some(Ok(trailers)));
        }
        self.held_trailers = Some(trailers);
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(rest)))))
    }
}

impl<B: Body<Data = Bytes, Error = BoxError> + Unpin> Body for WatchedBody<B> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(trailers) = self.held_trailers.take() {
            return Poll::Ready(Some(Ok(trailers)));
        }
        if self.ended {
            return Poll::Ready(None);
        }
        let frame = match ready!(Pin::new(&mut self.inner).poll_frame(cx)) {
            None => {
                self.ended = true;
                let rest = self.watch.finish();
                return Poll::Ready((!rest.is_empty()).then(|| Ok(Frame::data(Bytes::from(rest)))));
            }
            Some(Err(e)) => return Poll::Ready(Some(Err(e))),
            Some(Ok(frame)) => frame,
        };
        match frame.into_data() {
            Ok(data) => match self.watch.pass(&data, true) {
                Ok(now) => Poll::Ready(Some(Ok(Frame::data(Bytes::from(now))))),
                Err(name) => self.leaked(name),
            },
            Err(trailers) => self.trailers(trailers),
        }
    }
}

/// A response body with a credential's value, wherever it is echoed, turned back into its placeholder (across DATA
/// frames: the [`Redactor`]'s window is held until the next frame, and passed on at the end).
pub(super) struct Redacted<B> {
    inner: B,
    redactor: Redactor,
    ended: bool,
    /// Trailers that arrived while held bytes were still to go.
    trailers: Option<Frame<Bytes>>,
}

impl<B> Redacted<B> {
    /// `inner` passed through `redactor`.
    pub(super) fn new(inner: B, redactor: Redactor) -> Self {
        Redacted { inner, redactor, ended: false, trailers: None }
    }

    /// Trailers end the data: redacted as fields are ([`Redact`]); what is held goes first, then the
    /// trailers on the next poll.
    fn trailers<E>(&mut self, mut trailers: Frame<Bytes>) -> Poll<Option<Result<Frame<Bytes>, E>>> {
        if let Some(fields) = trailers.trailers_mut() {
            fields.redact(&self.redactor);
        }
        let held = self.redactor.finish();
        if held.is_empty() {
            return Poll::Ready(Some(Ok(trailers)));
        }
        self.trailers = Some(trailers);
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(held)))))
    }

    /// The body's end: what is held goes.
    fn end<E>(&mut self) -> Poll<Option<Result<Frame<Bytes>, E>>> {
        self.ended = true;
        let held = self.redactor.finish();
        match held.is_empty() {
            true => Poll::Ready(None),
            false => Poll::Ready(Some(Ok(Frame::data(Bytes::from(held))))),
        }
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for Redacted<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        if let Some(trailers) = self.trailers.take() {
            return Poll::Ready(Some(Ok(trailers)));
        }
        if self.ended {
            return Poll::Ready(None);
        }
        loop {
            return match Pin::new(&mut self.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        let passed = self.redactor.push(&data, true);
                        // All held (the window): nothing goes until the next frame, and no empty DATA frame meanwhile.
                        if passed.is_empty() {
                            continue;
                        }
                        Poll::Ready(Some(Ok(Frame::data(Bytes::from(passed)))))
                    }
                    Err(trailers) => self.trailers(trailers),
                },
                Poll::Ready(None) => self.end(),
                other => other,
            };
        }
    }
}
