//! ClientHello tests: two captured hellos (OpenSSL `s_client -servername example.com`, and curl 7.88 with ALPN
//! `h2`, `http/1.1`) replayed at every prefix and re-fragmented into records of every small size; hand-built hellos
//! for each refusal; property tests that no input panics.

use proptest::prelude::*;

use super::*;

const OPENSSL: &[u8] = include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/client_hello_openssl.bin"));
const CURL: &[u8] = include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/client_hello_curl.bin"));

fn u16be(n: usize) -> [u8; 2] {
    u16::try_from(n).unwrap_or(u16::MAX).to_be_bytes()
}

/// A TLS 1.0-versioned handshake record around `fragment`, as clients send their first flight.
fn record(fragment: &[u8]) -> Vec<u8> {
    let mut out = vec![22, 3, 1];
    out.extend_from_slice(&u16be(fragment.len()));
    out.extend_from_slice(fragment);
    out
}

/// A handshake message of type `kind` around `body`.
fn handshake(kind: u8, body: &[u8]) -> Vec<u8> {
    let len = u32::try_from(body.len()).unwrap_or(u32::MAX).to_be_bytes();
    let mut out = vec![kind, len[1], len[2], len[3]];
    out.extend_from_slice(body);
    out
}

/// A ClientHello body with one cipher suite, null compression and the given extension block bytes.
fn body_with(extensions: Option<&[u8]>) -> Vec<u8> {
    let mut out = vec![3, 3];
    out.extend_from_slice(&[0x11; 32]);
    out.extend_from_slice(&[0, 0, 2, 0x13, 0x01, 1, 0]);
    if let Some(ext) = extensions {
        out.extend_from_slice(&u16be(ext.len()));
        out.extend_from_slice(ext);
    }
    out
}

fn ext(kind: u16, data: &[u8]) -> Vec<u8> {
    let mut out = kind.to_be_bytes().to_vec();
    out.extend_from_slice(&u16be(data.len()));
    out.extend_from_slice(data);
    out
}

/// server_name extension data listing `entries` as (name_type, name).
fn sni_data(entries: &[(u8, &[u8])]) -> Vec<u8> {
    let mut list = Vec::new();
    for (kind, name) in entries {
        list.push(*kind);
        list.extend_from_slice(&u16be(name.len()));
        list.extend_from_slice(name);
    }
    let mut out = u16be(list.len()).to_vec();
    out.extend_from_slice(&list);
    out
}

/// A whole one-record ClientHello with these extensions.
fn hello(extensions: &[Vec<u8>]) -> Vec<u8> {
    record(&handshake(1, &body_with(Some(&extensions.concat()))))
}

fn sni_hello(entries: &[(u8, &[u8])]) -> Vec<u8> {
    hello(&[ext(0, &sni_data(entries))])
}

/// The handshake bytes the records of `wire` carry, concatenated.
fn handshake_bytes(wire: &[u8]) -> Vec<u8> {
    Fragments { rest: wire }.flatten().copied().collect()
}

/// `wire`'s handshake message re-split into records whose fragment sizes cycle through `sizes`.
fn refragment(wire: &[u8], sizes: &[usize]) -> Vec<u8> {
    records_of(&handshake_bytes(wire), sizes)
}

/// `message` split into records whose fragment sizes cycle through `sizes`.
fn records_of(message: &[u8], sizes: &[usize]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = message;
    for &size in sizes.iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let (fragment, tail) = rest.split_at(size.clamp(1, rest.len()));
        out.extend_from_slice(&record(fragment));
        rest = tail;
    }
    out
}

fn done(buf: &[u8]) -> ClientHello {
    match parse_client_hello(buf) {
        Parsed::Done(hello, n) => {
            assert_eq!(n, buf.len(), "Done must cover exactly the records carrying the hello");
            hello
        }
        other => panic!("expected Done, got {other:?}"),
    }
}

fn refused(buf: &[u8]) -> NotClientHello {
    match parse_client_hello(buf) {
        Parsed::Refuse(e) => e,
        other => panic!("expected Refuse, got {other:?}"),
    }
}

fn assert_every_prefix_needs_more(buf: &[u8]) {
    for end in 0..buf.len() {
        assert_eq!(parse_client_hello(&buf[..end]), Parsed::NeedMore, "prefix of {end} bytes");
    }
}

#[test]
fn openssl_sample_names_its_server_and_offers_no_alpn() {
    let hello = done(OPENSSL);
    assert_eq!(hello.server_name, ServerName::One("example.com".into()));
    assert!(!hello.ech);
    assert!(hello.alpn.is_empty());
}

#[test]
fn curl_sample_names_its_server_and_offers_h2_then_http11() {
    let hello = done(CURL);
    assert_eq!(hello.server_name, ServerName::One("example.test".into()));
    assert!(!hello.ech);
    assert_eq!(hello.alpn, vec![b"h2".to_vec(), b"http/1.1".to_vec()]);
}

#[test]
fn every_prefix_of_the_samples_needs_more() {
    assert_every_prefix_needs_more(OPENSSL);
    assert_every_prefix_needs_more(CURL);
}

#[test]
fn samples_refragmented_into_small_records_parse_the_same() {
    for sample in [OPENSSL, CURL] {
        let expected = done(sample);
        for sizes in [&[1][..], &[2], &[3], &[7], &[100], &[1, 500], &[16384], &[5, 1, 64, 2]] {
            let wire = refragment(sample, sizes);
            assert_eq!(done(&wire), expected, "fragment sizes {sizes:?}");
        }
    }
}

#[test]
fn every_prefix_of_a_refragmented_sample_needs_more() {
    assert_every_prefix_needs_more(&refragment(CURL, &[1, 3, 40]));
}

#[test]
fn bytes_after_the_hello_records_are_not_counted() {
    let mut wire = refragment(OPENSSL, &[50]);
    let hello_len = wire.len();
    wire.extend_from_slice(&[20, 3, 3, 0, 1, 1]); // a ChangeCipherSpec record, as TLS 1.3 middlebox mode sends
    assert!(matches!(parse_client_hello(&wire), Parsed::Done(_, n) if n == hello_len));
}

#[test]
fn record_versions_tls10_to_tls13_are_accepted() {
    for minor in 1..=4 {
        let mut wire = OPENSSL.to_vec();
        wire[2] = minor;
        done(&wire);
    }
}

#[test]
fn plain_http_is_refused_from_its_first_byte() {
    let request = b"GET / HTTP/1.1\r\n";
    for end in 1..=5 {
        assert_eq!(refused(&request[..end]), NotClientHello::NotHandshake);
    }
}

#[test]
fn other_record_types_and_versions_are_refused_at_once() {
    assert_eq!(refused(&[23, 3, 3, 0, 10]), NotClientHello::NotHandshake); // application data
    assert_eq!(refused(&[22, 3, 0]), NotClientHello::NotHandshake); // SSLv3 record version
    assert_eq!(refused(&[22, 3, 5]), NotClientHello::NotHandshake);
    assert_eq!(refused(&[22, 2]), NotClientHello::NotHandshake);
    // An SSLv2-style hello: two-byte length with the high bit set, then message type 1.
    assert_eq!(refused(&[0x80, 0x2e, 0x01, 0x03, 0x01]), NotClientHello::NotHandshake);
}

#[test]
fn another_handshake_message_first_is_refused_on_its_type_byte() {
    assert_eq!(refused(&[22, 3, 1, 0, 50, 2]), NotClientHello::NotClientHello);
}

#[test]
fn a_non_handshake_record_inside_the_hello_is_refused() {
    let mut wire = refragment(OPENSSL, &[20]);
    wire.truncate(25);
    wire.extend_from_slice(&[23, 3, 3, 0, 1, 0]);
    assert_eq!(refused(&wire), NotClientHello::NotHandshake);
}

#[test]
fn no_server_name_extension_is_absent() {
    assert_eq!(done(&hello(&[ext(0x000a, &[0, 2, 0, 0x1d])])).server_name, ServerName::Absent);
    // TLS 1.2 allows the whole extensions block to be left out.
    assert_eq!(done(&record(&handshake(1, &body_with(None)))).server_name, ServerName::Absent);
}

#[test]
fn server_name_lists_other_than_one_visible_ascii_host_name_are_invalid() {
    let cases: [&[(u8, &[u8])]; 7] = [
        &[],
        &[(0, b"a.example"), (0, b"b.example")],
        &[(0, b"")],
        &[(0, "bücher.example".as_bytes())],
        &[(0, b"a.example\0.evil")],
        &[(0, b"a example")],
        &[(1, b"a.example")],
    ];
    for entries in cases {
        assert_eq!(done(&sni_hello(entries)).server_name, ServerName::Invalid, "{entries:?}");
    }
    assert_eq!(done(&sni_hello(&[(0, b"api.example.com")])).server_name, ServerName::One("api.example.com".into()));
}

#[test]
fn malformed_server_name_lists_are_invalid() {
    for data in [&[][..], &[0], &[0, 5, 0, 0, 1, b'a'], &[0, 4, 0, 0, 1, b'a', 0], &[0, 4, 0, 0, 2, b'a']] {
        assert_eq!(done(&hello(&[ext(0, data)])).server_name, ServerName::Invalid, "{data:?}");
    }
}

#[test]
fn encrypted_client_hello_is_reported() {
    let wire = hello(&[ext(0, &sni_data(&[(0, b"public.example")])), ext(0xfe0d, &[0, 1, 2, 3])]);
    let parsed = done(&wire);
    assert!(parsed.ech);
    assert_eq!(parsed.server_name, ServerName::One("public.example".into()));
}

#[test]
fn any_duplicated_extension_is_refused() {
    let sni = ext(0, &sni_data(&[(0, b"a.example")]));
    let groups = ext(0x000a, &[0, 2, 0, 0x1d]);
    for exts in [vec![sni.clone(), sni.clone()], vec![sni, groups.clone(), groups]] {
        assert_eq!(refused(&hello(&exts)), NotClientHello::Malformed("duplicate extension"));
    }
}

#[test]
fn malformed_alpn_is_refused() {
    for data in [&[][..], &[0, 0], &[0, 4, 2, b'h', b'2'], &[0, 1, 0], &[0, 3, 2, b'h', b'2', 0]] {
        assert!(matches!(refused(&hello(&[ext(0x10, data)])), NotClientHello::Malformed(_)), "{data:?}");
    }
}

#[test]
fn truncated_and_overflowing_lengths_are_malformed() {
    let good = body_with(Some(&ext(0, &sni_data(&[(0, b"a.example")]))));
    let mut cases: Vec<Vec<u8>> = vec![good[..20].to_vec(), good[..34].to_vec(), good[..36].to_vec()];
    let mut long_session = good.clone();
    long_session[34] = 33; // legacy_session_id longer than 32
    long_session.splice(35..35, [0u8; 33]);
    let mut odd_suites = good.clone();
    odd_suites[36] = 1;
    let mut ext_block_overflow = good.clone();
    ext_block_overflow[42] += 1;
    let mut ext_overflow = good.clone();
    ext_overflow[46] += 1;
    let mut trailing = good.clone();
    trailing.push(0);
    cases.extend([long_session, odd_suites, ext_block_overflow, ext_overflow, trailing]);
    for body in cases {
        assert!(matches!(refused(&record(&handshake(1, &body))), NotClientHello::Malformed(_)), "{body:?}");
    }
}

#[test]
fn records_must_be_non_empty_and_at_most_2_14_bytes() {
    assert!(matches!(refused(&[22, 3, 1, 0, 0]), NotClientHello::Malformed(_)));
    assert!(matches!(refused(&[22, 3, 1, 0x40, 0x01]), NotClientHello::Malformed(_)));
}

#[test]
fn handshake_bytes_after_the_hello_in_its_record_are_refused() {
    let mut message = handshake(1, &body_with(None));
    message.extend_from_slice(&[1, 0, 0, 0]);
    assert!(matches!(refused(&record(&message)), NotClientHello::Malformed(_)));
}

#[test]
fn an_oversized_hello_is_refused_from_its_length_alone() {
    let len = (MAX_CLIENT_HELLO + 1).to_be_bytes();
    let n = len.len();
    assert_eq!(refused(&[22, 3, 1, 0x40, 0, 1, len[n - 3], len[n - 2], len[n - 1]]), NotClientHello::TooLarge);
}

#[test]
fn fragmentation_beyond_the_wire_bound_is_refused() {
    let wire = records_of(&handshake(1, &[0; 30_000]), &[1]);
    assert!(wire.len() > MAX_CLIENT_HELLO_WIRE);
    assert_eq!(refused(&wire), NotClientHello::TooLarge);
}

proptest! {
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = parse_client_hello(&bytes);
        let mut tls = vec![22, 3, 1];
        tls.extend_from_slice(&bytes);
        let _ = parse_client_hello(&tls);
    }

    #[test]
    fn mutated_samples_never_panic(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        for sample in [OPENSSL, CURL] {
            let mut wire = sample.to_vec();
            for (at, byte) in &edits {
                let i = at.index(wire.len());
                wire[i] = *byte;
            }
            if let Parsed::Done(_, n) = parse_client_hello(&wire) {
                prop_assert!(n <= wire.len());
            }
            let _ = parse_client_hello(&wire[..cut.index(wire.len())]);
        }
    }

    #[test]
    fn random_fragmentation_parses_the_same(sizes in proptest::collection::vec(1usize..300, 1..20)) {
        let wire = refragment(CURL, &sizes);
        prop_assert_eq!(parse_client_hello(&wire), Parsed::Done(done(CURL), wire.len()));
    }
}
