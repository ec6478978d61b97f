//! TLS for the tunnel tests: a test CA made by rcgen for each run, an HTTPS origin with a certificate for the test
//! names, and a rustls client that opens a CONNECT tunnel through leash — optionally writing its ClientHello in
//! small pieces with pauses, or in many small TLS records, to prove the peek reassembles them.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio::time::Sleep;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::client::{read_response, Raw, Resp};
use super::http::Wire;
use super::origin::{Origin, Recorded, Reply, Resettable};
use super::within;

/// Names the HTTPS origin's certificate covers.
pub const TLS_NAMES: &[&str] = &[
    "allowed.test",
    "a.b.c.allowed.test",
    "other.allowed.test",
    "sub.allowed.test",
    "bl.test",
    "models.test",
    "127.0.0.1",
];

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A certificate authority that exists for one test run.
pub struct TestCa {
    pub pem: String,
    der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
}

impl TestCa {
    pub fn new() -> TestCa {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(rcgen::DnType::CommonName, "leash test CA");
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
        let cert = params.self_signed(&key).expect("CA certificate");
        TestCa { pem: cert.pem(), der: cert.der().clone(), issuer: Issuer::new(params, key) }
    }

    /// A leaf certificate chain and key for `names` (DNS names or IP addresses).
    pub fn leaf(&self, names: &[&str]) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
        let key = KeyPair::generate().expect("leaf key");
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let params = CertificateParams::new(names).expect("leaf params");
        let cert = params.signed_by(&key, &self.issuer).expect("leaf certificate");
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        (vec![cert.der().clone(), self.der.clone()], key)
    }

    /// A leaf for `names` as PEM files in `dir` (for a server leash does not run in-process): the chain and the key.
    pub fn leaf_files(&self, names: &[&str], dir: &Path) -> (PathBuf, PathBuf) {
        let (chain, key) = self.leaf(names);
        let chain: Vec<pem::Pem> = chain.iter().map(|c| pem::Pem::new("CERTIFICATE", c.to_vec())).collect();
        let (cert_path, key_path) = (dir.join("leaf.pem"), dir.join("leaf.key"));
        std::fs::write(&cert_path, pem::encode_many(&chain)).expect("write leaf");
        std::fs::write(&key_path, pem::encode(&pem::Pem::new("PRIVATE KEY", key.secret_der().to_vec()))).expect("key");
        (cert_path, key_path)
    }

    /// An HTTP/1.1 server configuration with a leaf for `names`.
    pub fn server_config(&self, names: &[&str]) -> ServerConfig {
        let (chain, key) = self.leaf(names);
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .expect("server certificate");
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        config
    }

    /// A client configuration that trusts this CA only.
    pub fn client_config(&self) -> ClientConfig {
        let mut roots = RootCertStore::empty();
        roots.add(self.der.clone()).expect("add CA");
        ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_root_certificates(roots)
            .with_no_client_auth()
    }

    /// Write the CA certificate as PEM into `dir` (for curl's `--cacert`).
    pub fn pem_file(&self, dir: &Path) -> PathBuf {
        let path = dir.join("ca.pem");
        std::fs::write(&path, &self.pem).expect("write CA");
        path
    }

    /// A reqwest client through `proxy` that trusts this CA only.
    pub fn reqwest(&self, proxy: SocketAddr) -> reqwest::Client {
        reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(self.pem.as_bytes()).expect("CA for reqwest"))
            .proxy(reqwest::Proxy::all(format!("http://{proxy}")).expect("proxy"))
            .timeout(super::STEP)
            .build()
            .expect("reqwest client")
    }
}

impl Resettable for tokio_rustls::server::TlsStream<TcpStream> {
    fn reset(&self) {
        self.get_ref().0.reset();
    }
}

/// An HTTPS origin on 127.0.0.1:0 whose certificate covers [`TLS_NAMES`]; answers `hello over tls to <sni>`.
pub struct TlsUpstream {
    pub origin: Arc<Origin>,
    handshakes: Arc<Mutex<Vec<Option<String>>>>,
    task: JoinHandle<()>,
}

impl TlsUpstream {
    pub async fn start(ca: &TestCa) -> TlsUpstream {
        let handler = |r: &Recorded| Reply::ok(format!("hello over tls to {}", r.sni.as_deref().unwrap_or("-")));
        TlsUpstream::with(ca, handler).await
    }

    /// An HTTPS origin answering with `handler`.
    pub async fn with(ca: &TestCa, handler: impl Fn(&Recorded) -> Reply + Send + Sync + 'static) -> TlsUpstream {
        TlsUpstream::serving(ca.server_config(TLS_NAMES), handler).await
    }

    /// An HTTPS origin whose certificate covers `names` only, that resumes no session and answers each request with
    /// `Connection: close`: every tunnel to it makes a session of its own (none is left clean for the next tunnel to
    /// take), each in a full handshake, its chain sent and verified each time (as with the benchmark's nginx).
    pub async fn for_names_without_resumption(ca: &TestCa, names: &[&str]) -> TlsUpstream {
        let mut config = ca.server_config(names);
        config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        config.send_tls13_tickets = 0;
        let handler = |r: &Recorded| {
            let hello = format!("hello over tls to {}", r.sni.as_deref().unwrap_or("-"));
            Reply::with_headers(&[("Connection", "close")], hello)
        };
        TlsUpstream::serving(config, handler).await
    }

    async fn serving(
        config: ServerConfig,
        handler: impl Fn(&Recorded) -> Reply + Send + Sync + 'static,
    ) -> TlsUpstream {
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let (listener, origin) = Origin::bind(Arc::new(handler)).await;
        let handshakes = Arc::new(Mutex::new(Vec::new()));
        let (o, h) = (origin.clone(), handshakes.clone());
        let task = tokio::spawn(async move {
            loop {
                let Some((stream, conn)) = o.accept(&listener).await else {
                    continue;
                };
                let (o, h, acceptor) = (o.clone(), h.clone(), acceptor.clone());
                tokio::spawn(async move {
                    let Ok(Ok(tls)) = tokio::time::timeout(super::STEP, acceptor.accept(stream)).await else {
                        return;
                    };
                    let sni = tls.get_ref().1.server_name().map(str::to_owned);
                    h.lock().unwrap().push(sni.clone());
                    o.serve(tls, conn, sni).await;
                });
            }
        });
        TlsUpstream { origin, handshakes, task }
    }

    pub fn port(&self) -> u16 {
        self.origin.addr.port()
    }

    /// The server names of the completed handshakes, in order.
    pub fn handshakes(&self) -> Vec<Option<String>> {
        self.handshakes.lock().unwrap().clone()
    }

    pub async fn connections(&self) -> usize {
        self.origin.connections().await
    }

    pub async fn assert_untouched(&self) {
        assert_eq!(self.connections().await, 0, "no connection should have reached the TLS upstream");
        assert!(self.handshakes().is_empty());
    }
}

impl Drop for TlsUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Send `CONNECT target` on a fresh connection; returns the connection and leash's answer's status.
pub async fn connect(proxy: SocketAddr, target: &str) -> (Raw, u16) {
    let mut c = Raw::connect(proxy).await;
    c.send(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n")).await;
    let head = within("leash's answer to CONNECT", c.wire.head()).await.expect("read").expect("an answer");
    let status = head.start.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (c, status)
}

/// How the client writes its first flight.
#[derive(Debug, Clone, Copy)]
pub enum Writes {
    Whole,
    /// The first `budget` bytes in pieces of `piece` bytes, `pause` apart (each its own TCP segment).
    Sliced {
        piece: usize,
        pause: Duration,
        budget: usize,
    },
}

/// Open a tunnel to `target`, handshake as `server_name` (an IP address sends no SNI), `GET /` inside.
pub async fn https_get(
    proxy: SocketAddr,
    target: &str,
    server_name: &str,
    config: ClientConfig,
    writes: Writes,
) -> io::Result<Resp> {
    let (c, status) = connect(proxy, target).await;
    if status != 200 {
        return Err(io::Error::other(format!("CONNECT answered {status}")));
    }
    assert!(c.wire.buf.is_empty(), "leash sent bytes after its 200");
    tls_get(c.wire.io, target, server_name, config, writes).await
}

/// Handshake on `stream` as `server_name`, then `GET /` with `Host: host`.
pub async fn tls_get(
    stream: TcpStream,
    host: &str,
    server_name: &str,
    config: ClientConfig,
    writes: Writes,
) -> io::Result<Resp> {
    let io = Slicer::new(stream, writes);
    let name = ServerName::try_from(server_name.to_owned()).expect("server name");
    let connector = TlsConnector::from(Arc::new(config));
    let mut tls = within("TLS handshake through leash", connector.connect(name, io)).await?;
    tls.write_all(format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes()).await?;
    // rustls may still hold ciphertext the (sliced) socket did not take yet.
    tls.flush().await?;
    let mut wire = Wire::new(tls);
    within("response inside the tunnel", read_response(&mut wire, "GET")).await
}

/// A stream whose first writes are cut into pieces with pauses between them.
pub struct Slicer<S> {
    inner: S,
    writes: Writes,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl<S> Slicer<S> {
    pub fn new(inner: S, writes: Writes) -> Self {
        Self { inner, writes, sleep: None }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Slicer<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Slicer<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let Writes::Sliced { piece, pause, budget } = self.writes else {
            return Pin::new(&mut self.inner).poll_write(cx, data);
        };
        if budget == 0 {
            return Pin::new(&mut self.inner).poll_write(cx, data);
        }
        if let Some(sleep) = self.sleep.as_mut() {
            ready!(sleep.as_mut().poll(cx));
            self.sleep = None;
        }
        let n = data.len().min(piece).min(budget);
        let written = ready!(Pin::new(&mut self.inner).poll_write(cx, &data[..n]))?;
        self.writes = Writes::Sliced { piece, pause, budget: budget - written };
        self.sleep = Some(Box::pin(tokio::time::sleep(pause)));
        Poll::Ready(Ok(written))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// An HTTP/2 origin over TLS on loopback (a leaf of `ca` for `names`, ALPN `h2` only), every stream answered by
/// `answer`; its port and the task accepting connections (abort it to stop the origin).
pub async fn serve_h2_tls<F, Fut, B>(ca: &TestCa, names: &[&str], answer: F) -> (u16, JoinHandle<()>)
where
    F: Fn(http::Request<hyper::body::Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<http::Response<B>, std::convert::Infallible>> + Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut config = ca.server_config(names);
    config.alpn_protocols = vec![b"h2".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, answer) = (acceptor.clone(), answer.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                let _ = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), hyper::service::service_fn(answer))
                    .await;
            });
        }
    });
    (port, task)
}
