//! Upstream certificate verification with a memory of the chains already verified: an inspected tunnel to an upstream
//! seen before skips webpki's chain building and its signature checks (bench/RESULTS.md: ~50 µs of a ~450 µs set-up
//! when, as with nginx's `ssl_session_cache off`, every upstream handshake is a full one). The upstream's proof that it
//! holds the key — its CertificateVerify signature — is still checked on every handshake: those calls go to webpki
//! unchanged.
//!
//! Why a cached answer is the answer a full verification would give now:
//! - rustls' `WebPkiServerVerifier` as leash builds it (no CRLs, so no revocation; OCSP staples are not checked) is a
//!   function of its roots and algorithms (fixed for a cache: one cache per root set), the presented certificates'
//!   bytes, the server name and `now` — nothing else. The key covers the bytes, in order, and the name: a SHA-256
//!   over a length-prefixed encoding of them (32 bytes an entry, however long the chain the upstream sends).
//! - `now` enters webpki only where it checks a certificate's validity (`notBefore <= now <= notAfter`, in seconds);
//!   trust anchors carry no validity there. Each certificate presented (leaf and every intermediate, a superset of the
//!   path webpki builds) is parsed with x509-parser, and an entry holds the intersection of their windows. It is
//!   stored only when the verification succeeded at a `now` inside that intersection and answers only at a `now`
//!   inside it again: every validity check webpki could make gives the same result at both times, so it would build
//!   the same path, spend the same signature budget and reach the same answer. (A time webpki cannot parse refuses
//!   its certificate whatever `now` is; one x509-parser reads more leniently than webpki only narrows the window.)
//! - A certificate x509-parser cannot parse makes the chain uncacheable: it is verified in full every time. Failures
//!   are never stored. The map is an LRU of [`VERIFIED_CHAINS`] entries, locked only to look up or insert, never
//!   while webpki verifies.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use lru::LruCache;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

/// How many verified chains are remembered. A run talks to a few dozen upstreams; 256 keeps them all, and an
/// upstream sending a new chain on every handshake can make leash hold no more than 256 × ~100 bytes.
pub(crate) const VERIFIED_CHAINS: usize = 256;

/// rustls' webpki verifier, answering again from memory for a chain it verified before (see the module's text).
pub(crate) struct CachingVerifier {
    webpki: Arc<WebPkiServerVerifier>,
    verified: Mutex<LruCache<ChainKey, Window>>,
    #[cfg(test)]
    full_verifications: std::sync::atomic::AtomicUsize,
}

/// SHA-256 over the presented certificates and the server name.
type ChainKey = [u8; 32];

/// When every presented certificate is valid: the latest notBefore to the earliest notAfter, inclusive, in seconds
/// since the epoch (webpki's resolution).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Window {
    not_before: i64,
    not_after: i64,
}

impl CachingVerifier {
    /// Verifies against `webpki`, remembering the chains it accepts.
    pub(crate) fn new(webpki: Arc<WebPkiServerVerifier>) -> Self {
        let cap = NonZeroUsize::new(VERIFIED_CHAINS).unwrap_or(NonZeroUsize::MIN);
        Self {
            webpki,
            verified: Mutex::new(LruCache::new(cap)),
            #[cfg(test)]
            full_verifications: Default::default(),
        }
    }

    /// The window remembered for `key`, if any (and marks it recently used).
    fn remembered(&self, key: &ChainKey) -> Option<Window> {
        self.verified.lock().unwrap_or_else(|p| p.into_inner()).get(key).copied()
    }

    fn remember(&self, key: ChainKey, window: Window) {
        self.verified.lock().unwrap_or_else(|p| p.into_inner()).put(key, window);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.verified.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

impl ServerCertVerifier for CachingVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let key = chain_key(end_entity, intermediates, server_name);
        let known = key.and_then(|k| self.remembered(&k));
        if known.is_some_and(|window| window.contains(now)) {
            return Ok(ServerCertVerified::assertion());
        }
        #[cfg(test)]
        self.full_verifications.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let verified = self.webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)?;
        // A known chain has the same window (it is read from the same bytes); outside it, it is not stored again.
        if let (Some(key), None) = (key, known) {
            if let Some(window) = Window::of(end_entity, intermediates).filter(|w| w.contains(now)) {
                self.remember(key, window);
            }
        }
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }

    fn requires_raw_public_keys(&self) -> bool {
        self.webpki.requires_raw_public_keys()
    }

    fn root_hint_subjects(&self) -> Option<&[DistinguishedName]> {
        self.webpki.root_hint_subjects()
    }
}

impl std::fmt::Debug for CachingVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachingVerifier").field("webpki", &self.webpki).finish_non_exhaustive()
    }
}

impl Window {
    /// The intersection of the validity of every certificate presented; `None` if one does not parse.
    fn of(end_entity: &CertificateDer<'_>, intermediates: &[CertificateDer<'_>]) -> Option<Window> {
        let mut window = Window { not_before: i64::MIN, not_after: i64::MAX };
        for der in std::iter::once(end_entity).chain(intermediates) {
            let (rest, cert) = x509_parser::parse_x509_certificate(der.as_ref()).ok()?;
            if !rest.is_empty() {
                return None;
            }
            let validity = cert.validity();
            window.not_before = window.not_before.max(validity.not_before.timestamp());
            window.not_after = window.not_after.min(validity.not_after.timestamp());
        }
        Some(window)
    }

    /// As webpki compares: valid from `not_before` to `not_after`, both included.
    fn contains(&self, now: UnixTime) -> bool {
        i64::try_from(now.as_secs()).is_ok_and(|now| self.not_before <= now && now <= self.not_after)
    }
}

/// SHA-256 over the number of intermediates, each certificate (leaf first) as its length and its bytes, and the
/// server name as its kind, length and bytes; `None` for a kind of name rustls may add later (then nothing is cached).
fn chain_key(
    end_entity: &CertificateDer<'_>,
    intermediates: &[CertificateDer<'_>],
    server_name: &ServerName<'_>,
) -> Option<ChainKey> {
    let mut sha = ring::digest::Context::new(&ring::digest::SHA256);
    let mut field = |bytes: &[u8]| {
        sha.update(&(bytes.len() as u64).to_be_bytes());
        sha.update(bytes);
    };
    field(&(intermediates.len() as u64).to_be_bytes());
    for der in std::iter::once(end_entity).chain(intermediates) {
        field(der.as_ref());
    }
    match server_name {
        ServerName::DnsName(name) => {
            field(b"dns");
            field(name.as_ref().as_bytes());
        }
        ServerName::IpAddress(ip) => match std::net::IpAddr::from(*ip) {
            std::net::IpAddr::V4(v4) => {
                field(b"ipv4");
                field(&v4.octets());
            }
            std::net::IpAddr::V6(v6) => {
                field(b"ipv6");
                field(&v6.octets());
            }
        },
        _ => return None,
    }
    let digest = sha.finish();
    digest.as_ref().try_into().ok()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
    use rustls::{CertificateError, RootCertStore};
    use time::OffsetDateTime;

    use super::*;

    /// One day, in seconds.
    const DAY: i64 = 86_400;
    /// 2026-01-01T00:00:00Z: the test certificates' times are fixed, and every `now` is given.
    const T0: i64 = 1_767_225_600;

    /// A CA (root or intermediate) that signs the test certificates.
    struct Ca {
        der: CertificateDer<'static>,
        issuer: Issuer<'static, KeyPair>,
    }

    impl Ca {
        /// A self-signed root named `name` (webpki does not look at a trust anchor's validity).
        fn root(name: &str) -> Ca {
            let key = KeyPair::generate().unwrap();
            let params = ca_params(name, T0 - 1000 * DAY, T0 + 1000 * DAY);
            let der = params.self_signed(&key).unwrap().der().clone();
            Ca { der, issuer: Issuer::new(params, key) }
        }

        /// An intermediate named `name` signed by this CA, valid `from..=until`.
        fn intermediate(&self, name: &str, from: i64, until: i64) -> Ca {
            let key = KeyPair::generate().unwrap();
            let params = ca_params(name, from, until);
            let der = params.signed_by(&key, &self.issuer).unwrap().der().clone();
            Ca { der, issuer: Issuer::new(params, key) }
        }

        /// A leaf for `names` signed by this CA, valid `from..=until`.
        fn leaf(&self, names: &[&str], from: i64, until: i64) -> CertificateDer<'static> {
            let key = KeyPair::generate().unwrap();
            let mut params = CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>()).unwrap();
            (params.not_before, params.not_after) = (date(from), date(until));
            params.signed_by(&key, &self.issuer).unwrap().der().clone()
        }
    }

    fn ca_params(name: &str, from: i64, until: i64) -> CertificateParams {
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
        (params.not_before, params.not_after) = (date(from), date(until));
        params
    }

    fn date(secs: i64) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(secs).unwrap()
    }

    fn at(secs: i64) -> UnixTime {
        UnixTime::since_unix_epoch(Duration::from_secs(secs.try_into().unwrap()))
    }

    /// A caching verifier trusting `root` only, as `client_configs` builds it.
    fn trusting(root: &Ca) -> CachingVerifier {
        let mut roots = RootCertStore::empty();
        roots.add(root.der.clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        CachingVerifier::new(WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider).build().unwrap())
    }

    /// `chain` (leaf first) verified for `name` at `now`.
    fn verify(
        v: &CachingVerifier,
        chain: &[&CertificateDer<'static>],
        name: &str,
        now: i64,
    ) -> Result<(), CertificateError> {
        let intermediates: Vec<CertificateDer<'static>> = chain[1..].iter().map(|c| (*c).clone()).collect();
        let name = ServerName::try_from(name.to_owned()).unwrap();
        match v.verify_server_cert(chain[0], &intermediates, &name, &[], at(now)) {
            Ok(_) => Ok(()),
            Err(rustls::Error::InvalidCertificate(e)) => Err(e),
            Err(e) => panic!("not a certificate error: {e}"),
        }
    }

    fn full(v: &CachingVerifier) -> usize {
        v.full_verifications.load(Ordering::Relaxed)
    }

    fn expired(e: &CertificateError) -> bool {
        matches!(e, CertificateError::Expired | CertificateError::ExpiredContext { .. })
    }

    fn not_yet_valid(e: &CertificateError) -> bool {
        matches!(e, CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. })
    }

    fn wrong_name(e: &CertificateError) -> bool {
        matches!(e, CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. })
    }

    #[test]
    fn a_cached_chain_answers_only_within_its_validity_both_ends_included() {
        let root = Ca::root("root");
        let leaf = root.leaf(&["a.test"], T0, T0 + 30 * DAY);
        let v = trusting(&root);
        verify(&v, &[&leaf], "a.test", T0 + DAY).unwrap();
        verify(&v, &[&leaf], "a.test", T0 + 2 * DAY).unwrap();
        verify(&v, &[&leaf], "a.test", T0).unwrap();
        verify(&v, &[&leaf], "a.test", T0 + 30 * DAY).unwrap();
        assert_eq!((full(&v), v.len()), (1, 1), "verified once, then answered from the cache");
        let late = verify(&v, &[&leaf], "a.test", T0 + 30 * DAY + 1).unwrap_err();
        assert!(expired(&late), "{late:?}");
        let early = verify(&v, &[&leaf], "a.test", T0 - 1).unwrap_err();
        assert!(not_yet_valid(&early), "{early:?}");
        assert_eq!(full(&v), 3, "outside the window the chain is verified in full");
        verify(&v, &[&leaf], "a.test", T0 + 3 * DAY).unwrap();
        assert_eq!(full(&v), 3, "still cached for the times it is valid");
    }

    #[test]
    fn an_intermediate_valid_for_less_than_the_leaf_bounds_the_window() {
        let root = Ca::root("root");
        let inter = root.intermediate("intermediate", T0 + DAY, T0 + 10 * DAY);
        let leaf = inter.leaf(&["a.test"], T0, T0 + 30 * DAY);
        let v = trusting(&root);
        verify(&v, &[&leaf, &inter.der], "a.test", T0 + 2 * DAY).unwrap();
        verify(&v, &[&leaf, &inter.der], "a.test", T0 + 10 * DAY).unwrap();
        assert_eq!(full(&v), 1);
        let late = verify(&v, &[&leaf, &inter.der], "a.test", T0 + 10 * DAY + 1).unwrap_err();
        assert!(expired(&late), "the intermediate expired though the leaf did not: {late:?}");
        let early = verify(&v, &[&leaf, &inter.der], "a.test", T0 + DAY - 1).unwrap_err();
        assert!(not_yet_valid(&early), "the intermediate is not valid yet though the leaf is: {early:?}");
    }

    #[test]
    fn an_unused_intermediate_out_of_its_validity_makes_a_chain_uncached_not_refused() {
        // webpki does not look at an intermediate off the path; the cache's window covers every one presented, so
        // such a chain is verified in full each time (stricter, never looser).
        let root = Ca::root("root");
        let leaf = root.leaf(&["a.test"], T0, T0 + 30 * DAY);
        let stale = root.intermediate("stale", T0 - 20 * DAY, T0 - 10 * DAY);
        let v = trusting(&root);
        verify(&v, &[&leaf, &stale.der], "a.test", T0 + DAY).unwrap();
        verify(&v, &[&leaf, &stale.der], "a.test", T0 + DAY).unwrap();
        assert_eq!((full(&v), v.len()), (2, 0));
    }

    #[test]
    fn utc_and_generalized_times_are_read_as_webpki_reads_them() {
        // rcgen writes UTCTime before 2050 and GeneralizedTime from 2050: each end at its boundary second.
        let (from, until) = (946_684_799, 2_524_608_000); // 1999-12-31T23:59:59Z, 2050-01-01T00:00:00Z
        let root = Ca::root("root");
        let leaf = root.leaf(&["a.test"], from, until);
        let v = trusting(&root);
        verify(&v, &[&leaf], "a.test", T0).unwrap();
        for now in [from, until] {
            verify(&v, &[&leaf], "a.test", now).unwrap();
        }
        assert_eq!(full(&v), 1);
        assert!(not_yet_valid(&verify(&v, &[&leaf], "a.test", from - 1).unwrap_err()));
        assert!(expired(&verify(&v, &[&leaf], "a.test", until + 1).unwrap_err()));
    }

    #[test]
    fn another_server_name_is_refused_after_the_chain_was_cached_for_one() {
        let root = Ca::root("root");
        let leaf = root.leaf(&["a.test"], T0, T0 + 30 * DAY);
        let v = trusting(&root);
        verify(&v, &[&leaf], "a.test", T0 + DAY).unwrap();
        for other in ["b.test", "A.test.example", "127.0.0.1", "b.test"] {
            let e = verify(&v, &[&leaf], other, T0 + DAY).unwrap_err();
            assert!(wrong_name(&e), "{other}: {e:?}");
        }
        verify(&v, &[&leaf], "a.test", T0 + DAY).unwrap();
        assert_eq!((full(&v), v.len()), (5, 1));
    }

    #[test]
    fn other_intermediates_or_other_leaf_bytes_miss() {
        let root = Ca::root("root");
        let inter = root.intermediate("intermediate", T0 - DAY, T0 + 100 * DAY);
        let leaf = inter.leaf(&["a.test"], T0, T0 + 30 * DAY);
        let v = trusting(&root);
        verify(&v, &[&leaf, &inter.der], "a.test", T0 + DAY).unwrap();
        // The same name under another key, trusted: the leaf's signature does not verify with it.
        let twin = root.intermediate("intermediate", T0 - DAY, T0 + 100 * DAY);
        assert_eq!(verify(&v, &[&leaf, &twin.der], "a.test", T0 + DAY), Err(CertificateError::BadSignature));
        assert_eq!(verify(&v, &[&leaf], "a.test", T0 + DAY), Err(CertificateError::UnknownIssuer));
        assert_eq!(verify(&v, &[&inter.der, &leaf], "a.test", T0 + DAY).map_err(|_| ()), Err(()));
        // A leaf for the same name from a stranger's intermediate of the same name.
        let stranger = Ca::root("root").intermediate("intermediate", T0 - DAY, T0 + 100 * DAY);
        let forged = stranger.leaf(&["a.test"], T0, T0 + 30 * DAY);
        assert_eq!(verify(&v, &[&forged, &inter.der], "a.test", T0 + DAY), Err(CertificateError::BadSignature));
        // One more, unused, intermediate: still valid, but another entry.
        verify(&v, &[&leaf, &inter.der, &twin.der], "a.test", T0 + DAY).unwrap();
        assert_eq!((full(&v), v.len()), (6, 2));
    }

    #[test]
    fn a_failed_verification_is_never_cached() {
        let (root, stranger) = (Ca::root("root"), Ca::root("stranger"));
        let untrusted = stranger.leaf(&["a.test"], T0, T0 + 30 * DAY);
        let good = root.leaf(&["a.test"], T0, T0 + 30 * DAY);
        let v = trusting(&root);
        for _ in 0..2 {
            assert_eq!(verify(&v, &[&untrusted], "a.test", T0 + DAY), Err(CertificateError::UnknownIssuer));
            assert!(wrong_name(&verify(&v, &[&good], "b.test", T0 + DAY).unwrap_err()));
            assert!(expired(&verify(&v, &[&good], "a.test", T0 + 31 * DAY).unwrap_err()));
        }
        assert_eq!((full(&v), v.len()), (6, 0));
    }

    #[test]
    fn the_cache_holds_at_most_verified_chains_and_forgets_the_least_recently_used() {
        let root = Ca::root("root");
        let leaf = root.leaf(&["*.many.test"], T0, T0 + 30 * DAY);
        let v = trusting(&root);
        let names: Vec<String> = (0..=VERIFIED_CHAINS).map(|i| format!("n{i}.many.test")).collect();
        for name in &names {
            verify(&v, &[&leaf], name, T0 + DAY).unwrap();
        }
        assert_eq!((full(&v), v.len()), (VERIFIED_CHAINS + 1, VERIFIED_CHAINS));
        verify(&v, &[&leaf], &names[VERIFIED_CHAINS], T0 + DAY).unwrap();
        assert_eq!(full(&v), VERIFIED_CHAINS + 1, "the newest is kept");
        verify(&v, &[&leaf], &names[0], T0 + DAY).unwrap();
        assert_eq!(full(&v), VERIFIED_CHAINS + 2, "the oldest was forgotten");
    }

    #[test]
    fn a_certificate_that_does_not_parse_has_no_window() {
        let root = Ca::root("root");
        let leaf = root.leaf(&["a.test"], T0, T0 + 30 * DAY);
        assert_eq!(Window::of(&leaf, &[]), Some(Window { not_before: T0, not_after: T0 + 30 * DAY }));
        let mut trailing = leaf.to_vec();
        trailing.push(0);
        assert_eq!(Window::of(&CertificateDer::from(trailing), &[]), None);
        assert_eq!(Window::of(&leaf, &[CertificateDer::from(&b"\x30\x03\x02\x01\x00"[..])]), None);
    }
}
