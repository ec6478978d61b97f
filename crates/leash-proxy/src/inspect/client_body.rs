//! A client's HTTP/2 request body, read to its end even when leash answers the stream before it ends: a refusal (the
//! policy, a model API body over the bound or not checkable, a credential bound elsewhere, found in the head or cut
//! off mid-body), a failure, or an upstream that answered early. RFC 9113 §8.1 lets a server that has sent its
//! complete response reset the stream with `NO_ERROR`, and h2 does so when the body is dropped unread; but httpx's
//! HTTP/2 client (the official model SDKs' transport) reads a response only once its whole body is sent, and on a
//! reset stream waits for flow-control window that never comes. So the rest of a body dropped before its end is read
//! and discarded in the background within [`Linger::UNREAD_BODY`] (nothing of it goes anywhere); only past that bound
//! is the stream reset.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};

use crate::conn::{Discarded, Linger};

/// A stream's request body; dropped before its end, the rest is discarded in the background (see the module docs).
pub(super) struct ClientBody(Option<Incoming>);

impl ClientBody {
    pub(super) fn new(body: Incoming) -> Self {
        Self(Some(body))
    }
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.0.as_mut() {
            Some(body) => Pin::new(body).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.0.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.0.as_ref().map_or_else(|| SizeHint::with_exact(0), Body::size_hint)
    }
}

impl Drop for ClientBody {
    fn drop(&mut self) {
        let Some(rest) = self.0.take().filter(|body| !body.is_end_stream()) else { return };
        // Outside a runtime (never, in leash: streams are served on it) the stream is simply reset.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { Linger::UNREAD_BODY.discard(&mut Rest(rest)).await });
        }
    }
}

/// The rest of a body, read only to be dropped. Each frame read gives its flow-control window back, so the client
/// can go on sending.
struct Rest(Incoming);

impl Discarded for Rest {
    async fn next_piece(&mut self) -> Option<u64> {
        match self.0.frame().await {
            Some(Ok(frame)) => Some(frame.data_ref().map_or(0, |data| data.len() as u64)),
            _ => None,
        }
    }
}
