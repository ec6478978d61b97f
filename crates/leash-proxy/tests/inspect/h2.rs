//! HTTP/2 through an inspected tunnel: a hyper HTTP/2 origin (ALPN `h2`, test CA) that records each stream and
//! answers with a body and gRPC-style trailers; a hyper HTTP/2 client inside a tunnel trusting leash's CA.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};

use ::http::{HeaderMap, HeaderValue, Request, Response};
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio_rustls::TlsAcceptor;

use super::{Inspecting, BLOCKED};
use crate::support::origin::Resettable;
use crate::support::*;

/// A stream as the HTTP/2 origin saw it.
#[derive(Debug, Clone)]
pub(super) struct Seen {
    pub(super) path: String,
    pub(super) authority: String,
    pub(super) body: Vec<u8>,
    pub(super) trailers: Option<HeaderMap>,
}

/// An HTTP/2-only origin; answers `h2 <path>` with a `grpc-status: 0` trailer.
pub(super) struct H2Origin {
    pub(super) port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl H2Origin {
    pub(super) async fn start(ca: &TestCa) -> H2Origin {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let names = ["allowed.test", "other.allowed.test", "models.test"];
        let (port, task) = crate::support::tls::serve_h2_tls(ca, &names, move |req| answer(req, s.clone())).await;
        H2Origin { port, seen, task }
    }

    pub(super) fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for H2Origin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn answer(req: Request<Incoming>, seen: Arc<Mutex<Vec<Seen>>>) -> Result<Response<Frames>, Infallible> {
    let path = req.uri().path().to_owned();
    let authority = req.uri().authority().map(|a| a.to_string()).unwrap_or_default();
    let collected = req.into_body().collect().await.unwrap();
    let trailers = collected.trailers().cloned();
    let body = collected.to_bytes().to_vec();
    seen.lock().unwrap().push(Seen { path: path.clone(), authority, body, trailers });
    let mut trailer = HeaderMap::new();
    trailer.insert("grpc-status", HeaderValue::from_static("0"));
    Ok(Response::new(Frames::new(vec![Frame::data(Bytes::from(format!("h2 {path}"))), Frame::trailers(trailer)])))
}

/// A body of given frames (data, then trailers), like a gRPC response or request.
pub struct Frames(VecDeque<Frame<Bytes>>);

impl Frames {
    pub fn new(frames: Vec<Frame<Bytes>>) -> Frames {
        Frames(frames.into())
    }
}

impl hyper::body::Body for Frames {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.0.pop_front().map(Ok))
    }
}

/// An inspecting leash in front of the HTTP/2 origin (`allowed.test` inspected by [`BLOCKED`]).
async fn scene() -> (H2Origin, Inspecting) {
    let ca = TestCa::new();
    let origin = H2Origin::start(&ca).await;
    let tls = TlsUpstream::start(&ca).await;
    let port = origin.port;
    let t = Inspecting::with(ca, tls, move |_| blocklist(&[BLOCKED], &[80], &[port])).await;
    (origin, t)
}

/// An HTTP/2 client inside a tunnel to `host` at the origin's port.
pub(super) async fn h2_client(
    t: &Inspecting,
    origin: &H2Origin,
    host: &str,
) -> hyper::client::conn::http2::SendRequest<Frames> {
    let (c, status) = crate::support::tls::connect(t.leash.addr, &format!("{host}:{}", origin.port)).await;
    assert_eq!(status, 200);
    let connector = tokio_rustls::TlsConnector::from(Arc::new(t.client_config(&[b"h2", b"http/1.1"])));
    let name = rustls::pki_types::ServerName::try_from(host.to_owned()).unwrap();
    let tls = within("handshake", connector.connect(name, c.wire.io)).await.unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]), "h2 agreed end to end");
    let (send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls)).await.unwrap();
    tokio::spawn(conn);
    send
}

fn req(origin: &H2Origin, authority: &str, path: &str, body: Frames) -> Request<Frames> {
    let _ = origin;
    Request::post(format!("https://{authority}{path}")).header("content-type", "application/grpc").body(body).unwrap()
}

#[tokio::test]
async fn h2_streams_are_decided_one_by_one_and_trailers_pass_both_ways() {
    let (origin, t) = scene().await;
    let mut send = h2_client(&t, &origin, "allowed.test").await;
    let authority = format!("allowed.test:{}", origin.port);
    let mut trailer = HeaderMap::new();
    trailer.insert("grpc-timeout", HeaderValue::from_static("5S"));
    let body = Frames::new(vec![Frame::data(Bytes::from_static(b"ping")), Frame::trailers(trailer)]);
    let resp =
        within("allowed stream", send.send_request(req(&origin, &authority, "/svc/Method", body))).await.unwrap();
    assert_eq!(resp.status(), 200);
    let got = resp.into_body().collect().await.unwrap();
    assert_eq!(got.trailers().and_then(|t| t.get("grpc-status")), Some(&HeaderValue::from_static("0")));
    assert_eq!(got.to_bytes(), "h2 /svc/Method");
    // On the same connection, a blocked stream gets leash's 403 and the connection stays usable.
    let blocked = req(&origin, &authority, "/abs/2401.01234", Frames::new(vec![]));
    let resp = within("blocked stream", send.send_request(blocked)).await.unwrap();
    assert_eq!(resp.status(), 403);
    assert_eq!(resp.headers().get("x-leash-reason").unwrap(), "rule");
    let text = resp.into_body().collect().await.unwrap().to_bytes();
    assert!(text.starts_with(b"leash: allowed.test/abs/2401.01234 refused by the egress policy (rule)"));
    let again =
        within("third stream", send.send_request(req(&origin, &authority, "/after", Frames::new(vec![])))).await;
    assert_eq!(again.unwrap().status(), 200);
    let seen = origin.seen();
    assert_eq!(seen.iter().map(|s| s.path.as_str()).collect::<Vec<_>>(), ["/svc/Method", "/after"]);
    assert_eq!(seen[0].body, b"ping");
    assert_eq!(seen[0].authority, authority);
    let trailers = seen[0].trailers.as_ref().expect("request trailers reached the origin");
    assert_eq!(trailers.get("grpc-timeout").unwrap(), "5S");
}

#[tokio::test]
async fn h2_authority_naming_another_host_is_refused() {
    // HTTP/2 connection coalescing / domain fronting: a stream for another host on this tunnel.
    let (origin, t) = scene().await;
    let mut send = h2_client(&t, &origin, "allowed.test").await;
    let other = format!("other.allowed.test:{}", origin.port);
    let resp =
        within("fronted stream", send.send_request(req(&origin, &other, "/", Frames::new(vec![])))).await.unwrap();
    assert_eq!(resp.status(), 403);
    assert_eq!(resp.headers().get("x-leash-reason").unwrap(), "host-mismatch");
    assert!(origin.seen().is_empty());
}

/// An HTTPS origin that agrees to `h2`, then resets the connection right after the handshake; `reset` fires once it
/// has.
async fn resetting_h2_origin(ca: &TestCa) -> (u16, oneshot::Receiver<()>) {
    let mut config = ca.server_config(&["allowed.test"]);
    config.alpn_protocols = vec![b"h2".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (reset, on_reset) = oneshot::channel();
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let tls = acceptor.accept(tcp).await.unwrap();
        tls.reset();
        drop(tls);
        let _ = reset.send(());
    });
    (port, on_reset)
}

/// A client connection whose reads wait for `gate` first.
struct ReadAfter {
    inner: TcpStream,
    gate: Option<oneshot::Receiver<()>>,
}

impl AsyncRead for ReadAfter {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        if let Some(gate) = self.gate.as_mut() {
            let _ = ready!(Pin::new(gate).poll(cx));
            self.gate = None;
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for ReadAfter {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[tokio::test]
async fn h2_upstream_failing_its_handshake_gets_502_streams_and_a_502_tunnel_outcome() {
    // Regression: leash closed the client's connection without an answer and logged the tunnel's outcome as 200.
    let ca = TestCa::new();
    let (port, reset) = resetting_h2_origin(&ca).await;
    let tls = TlsUpstream::start(&ca).await;
    let t = Inspecting::with(ca, tls, move |_| blocklist(&[BLOCKED], &[80], &[port])).await;
    let authority = format!("allowed.test:{port}");
    let (c, status) = crate::support::tls::connect(t.leash.addr, &authority).await;
    assert_eq!(status, 200);
    // The client reads leash's handshake only once the origin has reset: leash's HTTP/2 preface meets a dead socket.
    let io = ReadAfter { inner: c.wire.io, gate: Some(reset) };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(t.client_config(&[b"h2"])));
    let name = rustls::pki_types::ServerName::try_from("allowed.test").unwrap();
    let tls = within("handshake", connector.connect(name, io)).await.unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls)).await.unwrap();
    let client_task = tokio::spawn(conn);
    let get = |path: &str| Request::get(format!("https://{authority}{path}")).body(Frames::new(vec![])).unwrap();
    let resp = within("allowed stream", send.send_request(get("/x"))).await.unwrap();
    assert_eq!(resp.status(), 502);
    let text = resp.into_body().collect().await.unwrap().to_bytes();
    let expected = format!("leash: upstream `{authority}` failed (HTTP/2 handshake failed");
    assert!(text.starts_with(expected.as_bytes()), "{text:?}");
    let resp = within("blocked stream", send.send_request(get("/abs/2401.01234"))).await.unwrap();
    assert_eq!(resp.status(), 403);
    assert_eq!(resp.headers().get("x-leash-reason").unwrap(), "rule");
    // The client goes away (its last stream and sender dropped): the tunnel ends and its outcome is logged.
    drop((resp, send));
    let _ = within("the client connection to end", client_task).await;
    let stream = t.leash.decision("/x").await;
    assert_eq!(
        (stream["decision"].as_str(), t.leash.outcome(&stream["id"]).await["status"].as_u64()),
        (Some("allow"), Some(502))
    );
    let tunnel = t.leash.decision("allowed.test").await;
    assert_eq!(tunnel["decision"], "inspect");
    assert_eq!(t.leash.outcome(&tunnel["id"]).await["status"], 502, "the tunnel's outcome says its upstream failed");
}
