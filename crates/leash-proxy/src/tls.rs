//! TLS set-up of inspection: the client-facing server configurations (leaves from the run's CA, chosen by SNI) and
//! the upstream-facing client configurations (always verifying: system roots plus `--upstream-ca` files; never a
//! downgrade, never a "skip verification" switch).
//!
//! ALPN is matched end to end: the upstream is offered what the client offered (of `h2` and `http/1.1`), and the
//! client is then given exactly the protocol the upstream chose, so each inspected tunnel speaks one protocol on
//! both sides and nothing is translated.
//!
//! Each set of roots has one `verified::CachingVerifier`, shared by its four ALPN configurations: a chain verified
//! once for a name is accepted again without webpki's signature checks while every certificate in it is within its
//! validity (the module says why that accepts nothing a full verification would refuse).
//!
//! The system trust store is loaded on the first inspected upstream connection, not at start: parsing it (and, with
//! `SSL_CERT_DIR` set, opening every file of the directory) cost `leash run` milliseconds before its command could
//! start, and its memory stays unpaid by a run that inspects nothing. `--upstream-ca` files are read at start, so a
//! bad one still stops leash there.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::CertificateDer;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use crate::ca::{CaError, CertAuthority};

mod verified;

use verified::CachingVerifier;

/// How much TLS output a session may hold before a write waits for the socket (rustls' default is 64 KiB). A bulk body
/// copy hands over up to [`COPY_BULK_BUF`](crate::relay::COPY_BULK_BUF) of plaintext at once; a limit above that
/// (records add ≈ 0.2 %) lets rustls seal it all and send it in one `writev` instead of one per 64 KiB.
pub(crate) const SEND_BUFFER_LIMIT: usize = crate::relay::COPY_BULK_BUF + 64 * 1024;

/// The client-facing side's cryptography: ring's with the AES-128-GCM suites first, chosen over the client's order
/// (clients put TLS13_AES_256_GCM_SHA384 first). A TLS 1.3 key schedule and transcript hash are then SHA-256, which
/// CPUs accelerate (SHA-NI, ARMv8's SHA-2 instructions) where SHA-384 runs in software: leash's side of the handshake
/// costs ~20 % less and a whole inspected set-up 4-6 % less CPU. AES-128-GCM is as safe a choice; every other suite
/// (AES-256-GCM, CHACHA20-POLY1305, TLS 1.2's) stays, in ring's order.
fn server_provider() -> rustls::crypto::CryptoProvider {
    use rustls::CipherSuite::{
        TLS13_AES_128_GCM_SHA256, TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    };
    let mut provider = rustls::crypto::ring::default_provider();
    let aes_128 =
        [TLS13_AES_128_GCM_SHA256, TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256];
    // A stable sort: those move to the front, each version's others keep their order.
    provider.cipher_suites.sort_by_key(|s| !aes_128.contains(&s.suite()));
    provider
}

/// ALPN's name for HTTP/2: an inspected tunnel speaks it when both the client and the upstream offer it.
pub const ALPN_H2: &[u8] = b"h2";
/// ALPN's name for HTTP/1.1.
pub const ALPN_HTTP1: &[u8] = b"http/1.1";

/// Why inspection could not be set up. leash does not start without it: a policy with path rules cannot be
/// enforced over HTTPS otherwise.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    /// The run's CA could not be made.
    #[error(transparent)]
    Ca(#[from] CaError),
    /// An `--upstream-ca` file could not be read.
    #[error("cannot read the upstream CA file `{0}`: {1}")]
    ReadCa(PathBuf, std::io::Error),
    /// An `--upstream-ca` file holds no certificate.
    #[error("the upstream CA file `{0}` holds no usable PEM certificate")]
    NoCertificate(PathBuf),
    /// An `--upstream-ca` file is not PEM, or a certificate in it cannot be a root; the parser's reason.
    #[error("the upstream CA file `{0}`: {1}")]
    BadCertificate(PathBuf, String),
    /// Nothing to verify upstream certificates against.
    #[error("no trusted root at all: the system store is empty and no --upstream-ca was given")]
    NoRoots,
    /// Nothing to verify an `https://` upstream proxy's certificate against.
    #[error("no trusted root for the upstream proxy: the system store is empty and no upstream_proxy_ca was given")]
    NoProxyRoots,
    /// rustls refused the configuration built.
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
    /// rustls refused to build the upstream certificate verifier.
    #[error("upstream certificate verifier: {0}")]
    Verifier(#[from] rustls::client::VerifierBuilderError),
}

/// Which roots upstream certificates are verified against.
#[derive(Debug, Clone, Default)]
pub struct UpstreamTrust {
    /// The system's trust store (`SSL_CERT_FILE`/`SSL_CERT_DIR`, else the distribution's bundle).
    pub system_roots: bool,
    /// PEM files of further CAs (private CAs, tests).
    pub extra_ca_files: Vec<PathBuf>,
}

impl UpstreamTrust {
    /// Reads the `extra_ca_files` as [`Inspection::new`] would, for a caller that makes no CA but must still refuse
    /// a file that cannot be used.
    pub fn check(&self) -> Result<(), TlsSetupError> {
        extra_roots(&self.extra_ca_files).map(drop)
    }
}

/// Everything inspection needs besides the policy: the CA, and the TLS configurations of both sides.
pub struct Inspection {
    ca: Arc<CertAuthority>,
    /// Client-facing, by the protocol the upstream chose: `h2`, `http/1.1`, none.
    server_h2: Arc<ServerConfig>,
    server_http1: Arc<ServerConfig>,
    server_plain: Arc<ServerConfig>,
    /// Upstream-facing, by what the client offered (both, `h2` only, `http/1.1` only, neither), trusting the
    /// `--upstream-ca` files alone; also what [`Inspection::upstream`] falls back to.
    upstream_extra: [Arc<ClientConfig>; 4],
    /// The same trusting the system roots too, built on first use when `system_roots` was asked for.
    upstream_system: OnceLock<[Arc<ClientConfig>; 4]>,
    provider: Arc<rustls::crypto::CryptoProvider>,
    system_roots: bool,
    /// The `--upstream-ca` certificates, to which the system roots are added on first use.
    extra_roots: RootCertStore,
}

impl Inspection {
    /// A new CA and configurations trusting `trust` upstream.
    pub fn new(trust: &UpstreamTrust) -> Result<Self, TlsSetupError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let ca = Arc::new(CertAuthority::generate()?);
        let extra_roots = extra_roots(&trust.extra_ca_files)?;
        if !trust.system_roots && extra_roots.is_empty() {
            return Err(TlsSetupError::NoRoots);
        }
        let resolver = Arc::new(LeafResolver(ca.clone()));
        let server_provider = Arc::new(server_provider());
        let server = |alpn: &[&[u8]]| -> Result<Arc<ServerConfig>, TlsSetupError> {
            let mut cfg = ServerConfig::builder_with_provider(server_provider.clone())
                .with_safe_default_protocol_versions()?
                .with_no_client_auth()
                .with_cert_resolver(resolver.clone());
            cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
            cfg.ignore_client_order = true;
            Ok(Arc::new(cfg))
        };
        Ok(Self {
            server_h2: server(&[ALPN_H2])?,
            server_http1: server(&[ALPN_HTTP1])?,
            server_plain: server(&[])?,
            upstream_extra: client_configs(&provider, extra_roots.clone())?,
            upstream_system: OnceLock::new(),
            provider,
            system_roots: trust.system_roots,
            extra_roots,
            ca,
        })
    }

    /// The four upstream configurations, loading the system roots the first time they are needed.
    fn upstream(&self) -> &[Arc<ClientConfig>; 4] {
        if !self.system_roots {
            return &self.upstream_extra;
        }
        self.upstream_system.get_or_init(|| {
            let mut roots = self.extra_roots.clone();
            let found = rustls_native_certs::load_native_certs();
            for e in &found.errors {
                tracing::warn!("system trust store: {e}");
            }
            // Distribution bundles carry a few certificates webpki cannot parse; skipping them is what browsers do.
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 && self.extra_roots.is_empty() {
                tracing::error!("no trusted root at all: the system store is empty and no --upstream-ca was given");
            }
            // Building can only fail as it already succeeded at start (protocol versions); the stricter
            // configuration trusting fewer roots is then kept.
            client_configs(&self.provider, roots).unwrap_or_else(|e| {
                tracing::error!("upstream TLS with the system roots: {e}; trusting --upstream-ca files only");
                self.upstream_extra.clone()
            })
        })
    }

    /// Reads the system's trust roots now, if they are trusted and not read yet, instead of at the first upstream
    /// verified: `leash run` calls this before its command starts, so a root a command running as root appends to
    /// the system bundle later is never trusted (what leash trusts, the sandbox cannot change).
    pub fn load_system_roots(&self) {
        let _ = self.upstream();
    }

    /// The run's CA, whose certificate the clients are given.
    pub fn ca(&self) -> &CertAuthority {
        &self.ca
    }

    /// The run's CA certificate, PEM (for `NODE_EXTRA_CA_CERTS`, `--ca-cert-out`).
    pub fn ca_pem(&self) -> &str {
        self.ca.cert_pem()
    }

    /// Writes `path` (created or truncated, mode 0644: nothing in it is secret): the system roots followed by the run's
    /// CA, PEM, one bundle for `SSL_CERT_FILE`, `REQUESTS_CA_BUNDLE`, ... The system part is the bundle file the
    /// system's OpenSSL reads (`SSL_CERT_FILE`, else the distribution's), copied as is by the kernel (`leash run`
    /// writes it at every start); only where there is none are the system's roots gathered and written one by one.
    pub fn write_bundle(&self, path: &Path) -> std::io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::{FileExt, PermissionsExt};
        let copied = match openssl_probe::probe().cert_file {
            Some(system) => std::fs::copy(system, path).unwrap_or(0),
            None => 0,
        };
        // Not truncated: it holds the copied roots (or is emptied below when nothing was copied).
        let mut file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
        file.set_permissions(std::fs::Permissions::from_mode(0o644))?;
        if copied == 0 {
            file.set_len(0)?;
            let found = rustls_native_certs::load_native_certs();
            let roots: String =
                found.certs.iter().map(|cert| pem::encode(&pem::Pem::new("CERTIFICATE", cert.to_vec()))).collect();
            file.write_all(roots.as_bytes())?;
        }
        let end = file.metadata()?.len();
        let mut last = [b'\n'];
        if end > 0 {
            file.read_exact_at(&mut last, end - 1)?;
        }
        let separator: &[u8] = if last == [b'\n'] { b"" } else { b"\n" };
        file.write_all_at(&[separator, self.ca.cert_pem().as_bytes()].concat(), end)
    }

    /// The upstream configuration offering what the client offered (of `h2`, `http/1.1`).
    pub(crate) fn upstream_config(&self, client_offers: &[Vec<u8>]) -> Arc<ClientConfig> {
        let h2 = client_offers.iter().any(|p| p == ALPN_H2);
        let http1 = client_offers.iter().any(|p| p == ALPN_HTTP1);
        let i = match (h2, http1) {
            (true, true) => 0,
            (true, false) => 1,
            (false, true) => 2,
            (false, false) => 3,
        };
        self.upstream()[i].clone()
    }

    /// The upstream configuration for a re-dial of an HTTP/1.1 tunnel.
    pub(crate) fn upstream_http1(&self) -> Arc<ClientConfig> {
        self.upstream()[2].clone()
    }

    /// The client-facing configuration that agrees to `alpn` (the upstream's choice), or to none.
    pub(crate) fn server_config(&self, alpn: Option<&[u8]>) -> Arc<ServerConfig> {
        match alpn {
            Some(ALPN_H2) => self.server_h2.clone(),
            Some(ALPN_HTTP1) => self.server_http1.clone(),
            _ => self.server_plain.clone(),
        }
    }

    /// The client-facing configuration for leash's own answers (refusals, upstream failures): HTTP/1.1 only.
    pub(crate) fn server_for_answers(&self) -> Arc<ServerConfig> {
        self.server_http1.clone()
    }
}

/// The four upstream configurations (ALPN: both, `h2`, `http/1.1`, none) trusting `roots`, sharing one cache of
/// verified chains.
fn client_configs(
    provider: &Arc<rustls::crypto::CryptoProvider>,
    roots: RootCertStore,
) -> Result<[Arc<ClientConfig>; 4], TlsSetupError> {
    let roots = Arc::new(roots);
    // With no root at all nothing verifies (webpki's builder refuses to make such a verifier): nothing to cache.
    let verifier = if roots.is_empty() {
        Verifier::Roots(roots)
    } else {
        let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider.clone()).build()?;
        Verifier::Caching(Arc::new(CachingVerifier::new(webpki)))
    };
    let client = |alpn: &[&[u8]]| client_config(provider, &verifier, alpn);
    Ok([client(&[ALPN_H2, ALPN_HTTP1])?, client(&[ALPN_H2])?, client(&[ALPN_HTTP1])?, client(&[])?])
}

/// How a client configuration verifies the server's certificate: always against roots, by webpki.
enum Verifier {
    /// rustls' webpki verifier, made for each configuration.
    Roots(Arc<RootCertStore>),
    /// rustls' webpki verifier behind a cache of the chains it verified (tls/verified.rs).
    Caching(Arc<CachingVerifier>),
}

/// A verifying client configuration, offering `alpn`.
fn client_config(
    provider: &Arc<rustls::crypto::CryptoProvider>,
    verifier: &Verifier,
    alpn: &[&[u8]],
) -> Result<Arc<ClientConfig>, TlsSetupError> {
    let builder = ClientConfig::builder_with_provider(provider.clone()).with_safe_default_protocol_versions()?;
    let builder = match verifier {
        Verifier::Roots(roots) => builder.with_root_certificates(roots.clone()),
        // "dangerous" is rustls' name for any verifier not its own; this one is webpki with a memory.
        Verifier::Caching(caching) => builder.dangerous().with_custom_certificate_verifier(caching.clone()),
    };
    let mut cfg = builder.with_no_client_auth();
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(cfg))
}

/// The client configuration for the policy's `https://` upstream proxy, built on first use and kept while the
/// policy names the same `upstream_proxy_ca` (a reload naming another file builds it anew).
#[derive(Default)]
pub(crate) struct ProxyTls {
    built: Mutex<Option<(Option<String>, Arc<ClientConfig>)>>,
}

impl ProxyTls {
    /// The configuration trusting the system roots and `ca_file`'s certificates.
    pub(crate) fn config(&self, ca_file: Option<&str>) -> Result<Arc<ClientConfig>, TlsSetupError> {
        let mut built = self.built.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((file, config)) = built.as_ref() {
            if file.as_deref() == ca_file {
                return Ok(config.clone());
            }
        }
        let config = proxy_client_config(ca_file)?;
        *built = Some((ca_file.map(str::to_owned), config.clone()));
        Ok(config)
    }
}

/// Read the policy's `upstream_proxy_ca` as the proxy will, so a file that is missing, unreadable or holds no usable
/// PEM certificate stops leash at policy load (`leash check` included) instead of failing its first request.
pub fn check_upstream_proxy(policy: &leash_policy::Policy) -> Result<(), TlsSetupError> {
    match policy.upstream_proxy().and_then(|up| up.ca_file.as_deref()) {
        Some(file) => extra_roots(&[PathBuf::from(file)]).map(drop),
        None => Ok(()),
    }
}

/// System roots plus `ca_file`'s certificates, no ALPN: the proxy is spoken to in HTTP/1.1.
fn proxy_client_config(ca_file: Option<&str>) -> Result<Arc<ClientConfig>, TlsSetupError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = match ca_file {
        Some(file) => extra_roots(&[PathBuf::from(file)])?,
        None => RootCertStore::empty(),
    };
    let found = rustls_native_certs::load_native_certs();
    for e in &found.errors {
        tracing::warn!("system trust store: {e}");
    }
    roots.add_parsable_certificates(found.certs);
    if roots.is_empty() {
        return Err(TlsSetupError::NoProxyRoots);
    }
    // rustls' own verifier: the cache is for inspected upstreams' set-ups.
    client_config(&provider, &Verifier::Roots(Arc::new(roots)), &[])
}

/// Every `--upstream-ca` file's certificates as trust anchors, each one checked now, so a bad file stops leash.
fn extra_roots(files: &[PathBuf]) -> Result<RootCertStore, TlsSetupError> {
    let mut store = RootCertStore::empty();
    for path in files {
        for cert in read_ca_file(path)? {
            store.add(cert).map_err(|e| TlsSetupError::BadCertificate(path.clone(), e.to_string()))?;
        }
    }
    Ok(store)
}

/// The certificates of a PEM file; other blocks (keys) are ignored, none at all is an error.
fn read_ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsSetupError> {
    let text = std::fs::read(path).map_err(|e| TlsSetupError::ReadCa(path.to_owned(), e))?;
    let blocks = pem::parse_many(&text).map_err(|e| TlsSetupError::BadCertificate(path.to_owned(), e.to_string()))?;
    let certs: Vec<CertificateDer<'static>> = blocks
        .into_iter()
        .filter(|b| b.tag() == "CERTIFICATE")
        .map(|b| CertificateDer::from(b.into_contents()))
        .collect();
    if certs.is_empty() {
        return Err(TlsSetupError::NoCertificate(path.to_owned()));
    }
    Ok(certs)
}

/// Serves the leaf for the ClientHello's server name (canonical form), issuing it on first use.
#[derive(Debug)]
struct LeafResolver(Arc<CertAuthority>);

impl ResolvesServerCert for LeafResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let name = hello.server_name()?.trim_end_matches('.').to_ascii_lowercase();
        match self.0.leaf(&name) {
            Ok(leaf) => Some(leaf),
            Err(e) => {
                tracing::error!("{e}");
                None
            }
        }
    }
}

impl std::fmt::Debug for CertAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("CertAuthority").field("leaves", &self.cached_leaves()).finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::{CipherSuite, ClientConnection, ServerConnection};

    /// The suite a client offering `suites` (in its order) and `versions` gets from the client-facing side.
    fn negotiated(suites: &[CipherSuite], versions: &[&'static rustls::SupportedProtocolVersion]) -> CipherSuite {
        let inspection = Inspection::new(&UpstreamTrust { system_roots: true, extra_ca_files: vec![] }).unwrap();
        let mut provider = rustls::crypto::ring::default_provider();
        provider.cipher_suites =
            suites.iter().map(|&s| *provider.cipher_suites.iter().find(|c| c.suite() == s).unwrap()).collect();
        let mut roots = RootCertStore::empty();
        roots.add(inspection.ca().cert_der().clone()).unwrap();
        let client = ClientConfig::builder_with_provider(Arc::new(provider))
            .with_protocol_versions(versions)
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = rustls::pki_types::ServerName::try_from("suites.example").unwrap();
        let mut client = ClientConnection::new(Arc::new(client), name).unwrap();
        let mut server = ServerConnection::new(inspection.server_config(Some(ALPN_HTTP1))).unwrap();
        while client.is_handshaking() || server.is_handshaking() {
            let mut bytes = Vec::new();
            while client.wants_write() {
                client.write_tls(&mut bytes).unwrap();
            }
            server.read_tls(&mut &bytes[..]).unwrap();
            server.process_new_packets().unwrap();
            bytes.clear();
            while server.wants_write() {
                server.write_tls(&mut bytes).unwrap();
            }
            client.read_tls(&mut &bytes[..]).unwrap();
            client.process_new_packets().unwrap();
        }
        client.negotiated_cipher_suite().unwrap().suite()
    }

    #[test]
    fn clients_get_aes_128_gcm_before_their_first_choice() {
        let theirs = [CipherSuite::TLS13_AES_256_GCM_SHA384, CipherSuite::TLS13_AES_128_GCM_SHA256];
        assert_eq!(negotiated(&theirs, &[&rustls::version::TLS13]), CipherSuite::TLS13_AES_128_GCM_SHA256);
        let theirs = [
            CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
            CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        ];
        let tls12 = CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256;
        assert_eq!(negotiated(&theirs, &[&rustls::version::TLS12]), tls12);
    }

    #[test]
    fn every_other_suite_is_still_served() {
        for suite in [
            CipherSuite::TLS13_AES_256_GCM_SHA384,
            CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
            CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
            CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
            CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
        ] {
            let version = match suite.as_str() {
                Some(name) if name.starts_with("TLS13_") => &rustls::version::TLS13,
                _ => &rustls::version::TLS12,
            };
            assert_eq!(negotiated(&[suite], &[version]), suite);
        }
    }

    #[test]
    fn the_system_roots_alone_start_though_the_upstream_ca_set_is_empty() {
        // webpki's verifier builder refuses an empty root set; the `--upstream-ca` configurations are built over one.
        let trust = UpstreamTrust { system_roots: true, extra_ca_files: Vec::new() };
        assert!(Inspection::new(&trust).is_ok());
    }
}
