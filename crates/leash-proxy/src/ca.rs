//! The per-run certificate authority of TLS inspection: an ECDSA P-256 CA generated at start, whose private key lives
//! in this process's memory only (it is never serialised, written or logged), and the leaf certificates it issues on
//! demand, one per server name, cached in a bounded LRU.
//!
//! Leaves are made for strict clients (Python 3.13's `VERIFY_X509_STRICT`, Go, Node, macOS): exactly the SNI name in
//! the subjectAltName (no wildcard, so `a.b.c.example.com` works), a random 128-bit serial, subject and authority key
//! identifiers, `CA:FALSE`, digitalSignature and serverAuth usages, and a validity that starts an hour in the past
//! (clock skew) and lasts [`LEAF_VALIDITY`].

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, OnceLock};

use lru::LruCache;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SerialNumber,
};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;
use time::{Duration, OffsetDateTime};

/// How many leaves are kept. A run talks to a few dozen hosts; 1,024 keeps all of them while bounding what a client
/// sending endless distinct SNI names can make leash hold (a leaf and its key are about 1 kB).
pub const LEAF_CACHE: usize = 1024;

/// Leaf validity: well under the 90 days strict clients and browsers accept, longer than any run.
pub const LEAF_VALIDITY: Duration = Duration::days(30);

/// The CA's own validity: it exists for one run; a little longer than its leaves so none outlives it.
const CA_VALIDITY: Duration = Duration::days(31);

/// Backdating of every certificate, so a client whose clock is a little behind still accepts it.
const BACKDATE: Duration = Duration::hours(1);

/// Why the CA or a leaf could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    /// The CA's key or certificate could not be generated: TLS inspection cannot start.
    #[error("cannot generate the CA: {0}")]
    Generate(rcgen::Error),
    /// A leaf could not be issued: that one tunnel fails its handshake.
    #[error("cannot issue a certificate for `{name}`: {why}")]
    Issue {
        /// The server name the leaf was for.
        name: String,
        /// What failed.
        why: LeafError,
    },
}

/// Why one leaf could not be made. Kept in the leaf's cache slot, so every user of the name gets the same answer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LeafError {
    /// The key or the certificate could not be generated or signed.
    #[error("{0}")]
    Certificate(#[from] rcgen::Error),
    /// The key could not be loaded for signing handshakes.
    #[error("{0}")]
    SigningKey(#[from] rustls::Error),
}

/// A leaf, issued once per name; concurrent first users of a name wait for the one issuance.
type Slot = Arc<OnceLock<Result<Arc<CertifiedKey>, LeafError>>>;

/// The run's CA.
pub struct CertAuthority {
    cert: CertificateDer<'static>,
    pem: String,
    // INVARIANT: the CA private key exists only here, in memory; nothing serialises it.
    issuer: Issuer<'static, KeyPair>,
    provider: Arc<CryptoProvider>,
    leaves: Mutex<LruCache<Box<str>, Slot>>,
}

impl CertAuthority {
    /// A fresh CA with a new P-256 key.
    pub fn generate() -> Result<Self, CaError> {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(CaError::Generate)?;
        let mut params = CertificateParams::default();
        params.distinguished_name = ca_name();
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.serial_number = Some(random_serial());
        let now = OffsetDateTime::now_utc();
        (params.not_before, params.not_after) = (now - BACKDATE, now + CA_VALIDITY);
        let cert = params.self_signed(&key).map_err(CaError::Generate)?;
        let cap = NonZeroUsize::new(LEAF_CACHE).unwrap_or(NonZeroUsize::MIN);
        Ok(Self {
            pem: cert.pem(),
            cert: cert.der().clone(),
            issuer: Issuer::new(params, key),
            provider: Arc::new(rustls::crypto::ring::default_provider()),
            leaves: Mutex::new(LruCache::new(cap)),
        })
    }

    /// The CA certificate, PEM: what clients add to their trust store.
    pub fn cert_pem(&self) -> &str {
        &self.pem
    }

    /// The CA certificate, DER.
    pub fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert
    }

    /// The leaf for `name` (a canonical host name: lowercase, no trailing dot), issued on first use and then reused.
    pub fn leaf(&self, name: &str) -> Result<Arc<CertifiedKey>, CaError> {
        let slot = {
            let mut leaves = self.leaves.lock().unwrap_or_else(|p| p.into_inner());
            match leaves.get(name) {
                Some(slot) => slot.clone(),
                None => {
                    let slot = Slot::default();
                    leaves.put(name.into(), slot.clone());
                    slot
                }
            }
        };
        // Outside the lock: other names are served while this one is issued; callers of the same name wait here.
        let issued = slot.get_or_init(|| self.issue(name).map(Arc::new));
        issued.clone().map_err(|why| CaError::Issue { name: name.to_owned(), why })
    }

    /// How many leaves the cache holds.
    pub fn cached_leaves(&self) -> usize {
        self.leaves.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    fn issue(&self, name: &str) -> Result<CertifiedKey, LeafError> {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        let mut params = CertificateParams::new(vec![name.to_owned()])?;
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        params.serial_number = Some(random_serial());
        let now = OffsetDateTime::now_utc();
        (params.not_before, params.not_after) = (now - BACKDATE, now + LEAF_VALIDITY);
        let cert = params.signed_by(&key, &self.issuer)?;
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let signing = self.provider.key_provider.load_private_key(der)?;
        Ok(CertifiedKey::new(vec![cert.der().clone(), self.cert.clone()], signing))
    }
}

fn ca_name() -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "leash");
    dn.push(DnType::CommonName, "leash per-run inspection CA");
    dn
}

/// 16 random bytes, top bit clear so the DER integer stays positive (RFC 5280 §4.1.2.2).
fn random_serial() -> SerialNumber {
    let mut bytes = [0u8; 16];
    // ring's system RNG (getrandom); it does not fail on Linux, and a zero serial would still be a valid certificate.
    let _ = ring_fill(&mut bytes);
    bytes[0] &= 0x7f;
    bytes[0] |= 0x01;
    SerialNumber::from_slice(&bytes)
}

fn ring_fill(bytes: &mut [u8]) -> Result<(), rustls::Error> {
    rustls::crypto::ring::default_provider()
        .secure_random
        .fill(bytes)
        .map_err(|_| rustls::Error::FailedToGetRandomBytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_leaf_per_name_reused() {
        let ca = CertAuthority::generate().unwrap();
        let a = ca.leaf("a.b.c.example.com").unwrap();
        let b = ca.leaf("a.b.c.example.com").unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        let other = ca.leaf("example.org").unwrap();
        assert!(!Arc::ptr_eq(&a, &other));
        assert_eq!(a.cert.len(), 2, "leaf then CA");
        assert_eq!(&a.cert[1], ca.cert_der());
    }

    #[test]
    fn concurrent_first_requests_issue_one_certificate() {
        let ca = Arc::new(CertAuthority::generate().unwrap());
        let leaves: Vec<Arc<CertifiedKey>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8).map(|_| s.spawn(|| ca.leaf("race.example").unwrap())).collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(leaves.windows(2).all(|w| Arc::ptr_eq(&w[0], &w[1])));
    }

    #[test]
    fn cache_is_bounded() {
        let ca = CertAuthority::generate().unwrap();
        for i in 0..LEAF_CACHE + 10 {
            ca.leaf(&format!("h{i}.example")).unwrap();
        }
        assert_eq!(ca.cached_leaves(), LEAF_CACHE);
    }

    /// `openssl ARGS` on files in `dir`; its status and standard output.
    fn openssl(dir: &std::path::Path, args: &[&str]) -> (bool, String) {
        let o = std::process::Command::new("openssl").args(args).current_dir(dir).output().unwrap();
        (o.status.success(), String::from_utf8_lossy(&o.stdout).into_owned())
    }

    #[test]
    fn leaves_are_what_strict_clients_accept() {
        let ca = CertAuthority::generate().unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca.cert_pem()).unwrap();
        let mut serials = Vec::new();
        for (i, name) in ["a.b.c.example.com", "other.example"].iter().enumerate() {
            let der = format!("leaf{i}.der");
            std::fs::write(dir.path().join(&der), ca.leaf(name).unwrap().cert[0].as_ref()).unwrap();
            let pem = format!("leaf{i}.pem");
            assert!(openssl(dir.path(), &["x509", "-inform", "DER", "-in", &der, "-out", &pem]).0);
            // Valid since a little before now (a client whose clock lags a few seconds accepts it) and now.
            let a_bit_ago = (std::time::SystemTime::now() - std::time::Duration::from_secs(30))
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs()
                .to_string();
            let verify = ["verify", "-CAfile", "ca.pem", "-purpose", "sslserver", "-verify_hostname", name];
            assert!(openssl(dir.path(), &[&verify[..], &["-attime", &a_bit_ago, &pem]].concat()).0, "{name}");
            assert!(openssl(dir.path(), &[&verify[..], &[&pem]].concat()).0, "{name}");
            // At most 90 days: it expires within 90 days and a minute from now.
            let checkend = ["x509", "-in", &pem, "-noout", "-checkend"];
            assert!(openssl(dir.path(), &[&checkend[..], &["0"]].concat()).0, "not yet expired");
            assert!(!openssl(dir.path(), &[&checkend[..], &["7776060"]].concat()).0, "valid beyond 90 days");
            let (ok, text) = openssl(dir.path(), &["x509", "-in", &pem, "-noout", "-text"]);
            assert!(ok);
            for wanted in ["Subject Key Identifier", "Authority Key Identifier", "TLS Web Server Authentication"] {
                assert!(text.contains(wanted), "{wanted} missing: {text}");
            }
            assert!(text.contains(&format!("DNS:{name}")) && !text.contains("DNS:*"), "exactly the name: {text}");
            let (ok, serial) = openssl(dir.path(), &["x509", "-in", &pem, "-noout", "-serial"]);
            assert!(ok);
            let hex = serial.trim().trim_start_matches("serial=").to_owned();
            assert!(hex.len() >= 24 && hex.chars().any(|c| c != '0'), "a random serial of ~128 bits: {hex}");
            serials.push(hex);
        }
        assert_ne!(serials[0], serials[1], "serials are random, not counted from a fixed start");
    }

    #[test]
    fn pem_holds_no_private_key() {
        let ca = CertAuthority::generate().unwrap();
        assert!(ca.cert_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(!ca.cert_pem().contains("PRIVATE"));
    }
}
