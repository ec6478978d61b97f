//! DNS stub tests: queries shaped like glibc's, Go's and dig's answered from a decision, every refusal shape (names
//! that are no host, IP-literal spellings, pointers, long labels and names, wrong counts and opcodes, bad EDNS),
//! every prefix of a real query, and a property test that no input panics or yields an oversized response.

use proptest::prelude::*;

use super::*;

const ALLOWED: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

/// A query for `name` (dotted, as sent) of `qtype`, with an OPT record of `edns` payload size if given.
fn query(id: u16, name: &str, qtype: u16, edns: Option<u16>) -> Vec<u8> {
    let mut q = header(id, FLAG_RD, [1, 0, 0, u16::from(edns.is_some())]);
    q.extend(encode_name(name));
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&CLASS_IN.to_be_bytes());
    if let Some(size) = edns {
        q.extend_from_slice(&[0, 0, 41]);
        q.extend_from_slice(&size.to_be_bytes());
        q.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    }
    q
}

fn encode_name(name: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for label in name.split('.').filter(|l| !l.is_empty()) {
        out.push(u8::try_from(label.len()).unwrap());
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
    out
}

/// The stub's decision in these tests: `allowed.test` and its subdomains exist, nothing else.
fn decide(host: &Host) -> Answer {
    match host.as_str().as_ref() {
        "allowed.test" | "www.allowed.test" => Answer::Exists(ALLOWED),
        _ => Answer::NoSuchName,
    }
}

fn answer(q: &[u8]) -> Vec<u8> {
    respond(q, decide).unwrap_or_else(|| panic!("no response to {q:?}"))
}

fn rcode(response: &[u8]) -> u16 {
    u16::from_be_bytes([response[2], response[3]]) & 0x000f
}

fn count(response: &[u8], index: usize) -> u16 {
    u16::from_be_bytes([response[4 + 2 * index], response[5 + 2 * index]])
}

fn assert_rcode(q: &[u8], want: Rcode) {
    let r = answer(q);
    assert_eq!(rcode(&r), want as u16, "query {q:?} response {r:?}");
    assert_eq!(r[..2], q[..2], "the id is echoed");
    assert_ne!(r[2] & 0x80, 0, "QR is set");
}

#[test]
fn an_allowed_name_gets_one_a_record_with_a_short_ttl() {
    let q = query(0x1234, "allowed.test", TYPE_A, None);
    let r = answer(&q);
    assert_eq!(rcode(&r), 0);
    assert_eq!([count(&r, 0), count(&r, 1), count(&r, 2), count(&r, 3)], [1, 1, 0, 0]);
    assert_eq!(&r[HEADER_LEN..q.len()], &q[HEADER_LEN..], "the question is echoed");
    let record = &r[q.len()..];
    assert_eq!(record, [0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 5, 0, 4, 127, 0, 0, 2]);
    let flags = u16::from_be_bytes([r[2], r[3]]);
    assert_eq!(flags, FLAG_QR | FLAG_AA | FLAG_RD | FLAG_RA);
}

#[test]
fn other_types_for_an_allowed_name_get_nodata() {
    for qtype in [28, 5, 15, 16, 33, 65, 255, 252] {
        let r = answer(&query(7, "www.allowed.test", qtype, None));
        assert_eq!((rcode(&r), count(&r, 1)), (0, 0), "type {qtype}");
    }
}

#[test]
fn a_refused_name_gets_nxdomain_for_every_type() {
    for qtype in [TYPE_A, 28, 16] {
        assert_rcode(&query(9, "evil.test", qtype, None), Rcode::NxDomain);
    }
}

#[test]
fn the_name_is_decided_lowercased_and_echoed_as_sent() {
    let q = query(1, "WWW.Allowed.TEST", TYPE_A, None);
    let r = answer(&q);
    assert_eq!((rcode(&r), count(&r, 1)), (0, 1));
    assert_eq!(&r[HEADER_LEN..q.len()], &q[HEADER_LEN..]);
}

#[test]
fn names_that_are_no_host_get_nxdomain_without_a_decision() {
    let never = |host: &Host| panic!("decided {host:?}");
    for name in ["1.2.3.4", "127.0.0.1", "0x7f000001", "2130706433", "1.2.3.0x4", "127.1", "a_b.test", "", "a*b.test"] {
        let r = respond(&query(3, name, TYPE_A, None), never).unwrap();
        assert_eq!(rcode(&r), Rcode::NxDomain as u16, "{name:?}");
    }
    let mut dotted_label = header(3, 0, [1, 0, 0, 0]);
    dotted_label.extend_from_slice(b"\x03a.b\x04test\x00\x00\x01\x00\x01");
    assert_eq!(rcode(&respond(&dotted_label, never).unwrap()), Rcode::NxDomain as u16);
    let mut binary_label = header(3, 0, [1, 0, 0, 0]);
    binary_label.extend_from_slice(b"\x02a\xff\x04test\x00\x00\x01\x00\x01");
    assert_eq!(rcode(&respond(&binary_label, never).unwrap()), Rcode::NxDomain as u16);
}

#[test]
fn another_class_is_refused() {
    let mut q = query(5, "allowed.test", 16, None);
    let len = q.len();
    q[len - 1] = 3; // CH, as in `version.bind CH TXT`
    assert_rcode(&q, Rcode::Refused);
}

#[test]
fn a_compression_pointer_in_the_question_is_formerr() {
    let mut q = header(2, 0, [1, 0, 0, 0]);
    q.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1]);
    assert_eq!(parse_query(&q), Err(DnsError::Pointer));
    assert_rcode(&q, Rcode::FormErr);
    let mut after_label = header(2, 0, [1, 0, 0, 0]);
    after_label.extend_from_slice(&[1, b'a', 0xc0, 0x0c, 0, 1, 0, 1]);
    assert_eq!(parse_query(&after_label), Err(DnsError::Pointer));
}

#[test]
fn reserved_label_types_are_formerr() {
    for first in [0x40, 0x80, 0x7f] {
        let mut q = header(2, 0, [1, 0, 0, 0]);
        q.extend_from_slice(&[first, b'a', 0, 0, 1, 0, 1]);
        assert_eq!(parse_query(&q), Err(DnsError::LabelType), "{first:#x}");
    }
}

#[test]
fn names_up_to_255_bytes_are_read_and_longer_ones_are_formerr() {
    let label63 = "a".repeat(MAX_LABEL);
    // Three 63-byte labels and one of 61: 4 * 64 - 2 + 1 = 255 bytes on the wire.
    let longest = format!("{label63}.{label63}.{label63}.{}", "b".repeat(61));
    assert_eq!(encode_name(&longest).len(), MAX_NAME);
    let q = query(1, &longest, TYPE_A, None);
    let parsed = parse_query(&q).unwrap();
    assert_eq!(parsed.name.as_deref(), Some(longest.as_str()));
    let too_long = format!("{longest}b");
    assert_eq!(parse_query(&query(1, &too_long, TYPE_A, None)), Err(DnsError::LongName));
    assert_rcode(&query(1, &too_long, TYPE_A, None), Rcode::FormErr);
}

#[test]
fn exactly_one_question_and_no_answer_or_authority_records() {
    for (counts, err) in [
        ([0, 0, 0, 0], DnsError::QuestionCount(0)),
        ([2, 0, 0, 0], DnsError::QuestionCount(2)),
        ([1, 1, 0, 0], DnsError::UnexpectedRecords),
        ([1, 0, 1, 0], DnsError::UnexpectedRecords),
    ] {
        let mut q = query(4, "allowed.test", TYPE_A, None);
        for (i, n) in counts.iter().enumerate() {
            q[4 + 2 * i..6 + 2 * i].copy_from_slice(&u16::to_be_bytes(*n));
        }
        assert_eq!(parse_query(&q), Err(err), "{counts:?}");
        assert_rcode(&q, Rcode::FormErr);
    }
}

#[test]
fn other_opcodes_get_notimp_with_the_opcode_echoed() {
    for opcode in [1u16, 2, 4, 5, 15] {
        let mut q = query(6, "allowed.test", TYPE_A, None);
        q[2] |= (opcode << 3) as u8;
        assert_eq!(parse_query(&q), Err(DnsError::Opcode(opcode as u8)));
        let r = answer(&q);
        assert_eq!(rcode(&r), Rcode::NotImp as u16);
        assert_eq!((r[2] >> 3) & 0x0f, opcode as u8);
    }
}

#[test]
fn responses_and_short_datagrams_are_dropped() {
    let mut q = query(6, "allowed.test", TYPE_A, None);
    q[2] |= 0x80;
    assert_eq!(respond(&q, decide), None);
    for len in 0..HEADER_LEN {
        assert_eq!(respond(&vec![0; len], decide), None);
    }
}

#[test]
fn every_prefix_of_a_query_is_dropped_or_formerr_and_trailing_bytes_are_formerr() {
    let q = query(8, "www.allowed.test", TYPE_A, Some(1232));
    for len in 0..q.len() {
        match respond(&q[..len], decide) {
            None => assert!(len < HEADER_LEN),
            Some(r) => assert_eq!((rcode(&r), r.len()), (Rcode::FormErr as u16, HEADER_LEN), "prefix {len}"),
        }
    }
    let mut trailing = query(8, "www.allowed.test", TYPE_A, None);
    trailing.push(0);
    assert_eq!(parse_query(&trailing), Err(DnsError::Trailing));
}

#[test]
fn edns_sets_the_udp_size_and_gets_an_opt_record_back() {
    let q = query(10, "allowed.test", TYPE_A, Some(4096));
    let parsed = parse_query(&q).unwrap();
    assert_eq!((parsed.udp_size, parsed.edns), (4096, Some(0)));
    let r = answer(&q);
    assert_eq!(count(&r, 3), 1);
    assert_eq!(&r[r.len() - OPT_LEN..], [0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(parse_query(&query(10, "allowed.test", TYPE_A, Some(100))).unwrap().udp_size, PLAIN_UDP_SIZE);
}

#[test]
fn another_edns_version_gets_badvers() {
    let mut q = query(11, "allowed.test", TYPE_A, Some(1232));
    let version_at = q.len() - 5;
    q[version_at] = 1;
    let r = answer(&q);
    assert_eq!((rcode(&r), count(&r, 1), count(&r, 3)), (0, 0, 1));
    assert_eq!(r[r.len() - 6], EXTENDED_BADVERS);
}

#[test]
fn two_opt_records_or_one_not_owned_by_the_root_are_formerr() {
    let mut two = query(12, "allowed.test", TYPE_A, Some(1232));
    two.extend_from_slice(&[0, 0, 41, 4, 0, 0, 0, 0, 0, 0, 0]);
    two[11] = 2;
    assert_eq!(parse_query(&two), Err(DnsError::BadOpt));
    let mut owned = header(12, 0, [1, 0, 0, 1]);
    owned.extend(encode_name("allowed.test"));
    owned.extend_from_slice(&[0, 1, 0, 1, 1, b'x', 0, 0, 41, 4, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(parse_query(&owned), Err(DnsError::BadOpt));
}

#[test]
fn other_additional_records_are_skipped_even_with_a_pointer_owner() {
    // dig's and BIND's queries may carry a TSIG or other record; its owner may be compressed.
    let mut q = header(13, FLAG_RD, [1, 0, 0, 2]);
    q.extend(encode_name("allowed.test"));
    q.extend_from_slice(&[0, 1, 0, 1]);
    q.extend_from_slice(&[0xc0, 0x0c, 0, 16, 0, 1, 0, 0, 0, 0, 0, 2, 1, b'x']);
    // An OPT record carrying a cookie option, as dig sends.
    q.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 12, 0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8]);
    let parsed = parse_query(&q).unwrap();
    assert_eq!((parsed.edns, parsed.udp_size), (Some(0), 1232));
    assert_eq!(count(&answer(&q), 1), 1);
}

#[test]
fn a_response_that_would_not_fit_drops_the_answer_and_sets_tc() {
    let q = query(14, "allowed.test", TYPE_A, None);
    let parsed = parse_query(&q).unwrap();
    let fits = build(&parsed, Rcode::NoError, Some(ALLOWED), 0, PLAIN_UDP_SIZE);
    assert_eq!(count(&fits, 1), 1);
    let limit = fits.len() - 1;
    let cut = build(&parsed, Rcode::NoError, Some(ALLOWED), 0, limit);
    assert!(cut.len() <= limit);
    assert_eq!((count(&cut, 1), cut[2] & 0x02), (0, 0x02));
}

#[test]
fn the_longest_response_stays_within_512_bytes() {
    let label63 = "a".repeat(MAX_LABEL);
    let longest = format!("{label63}.{label63}.{label63}.{}", "b".repeat(61));
    let q = query(15, &longest, TYPE_A, Some(4096));
    let r = respond(&q, |_| Answer::Exists(ALLOWED)).unwrap();
    assert_eq!(count(&r, 1), 1);
    assert!(r.len() <= PLAIN_UDP_SIZE && r.len() <= MAX_RESPONSE, "{}", r.len());
}

proptest! {
    #[test]
    fn no_input_panics_and_every_response_fits(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        if let Some(r) = respond(&bytes, |_| Answer::Exists(ALLOWED)) {
            let limit = parse_query(&bytes).map_or(PLAIN_UDP_SIZE, |q| q.udp_size);
            prop_assert!(r.len() <= limit);
            prop_assert_eq!(&r[..2], &bytes[..2]);
        }
    }

    #[test]
    fn mutated_queries_never_panic(at in 0usize..40, byte in any::<u8>(), qtype in any::<u16>()) {
        let mut q = query(16, "www.allowed.test", qtype, Some(1232));
        if let Some(b) = q.get_mut(at) {
            *b = byte;
        }
        let _ = respond(&q, decide);
    }
}
