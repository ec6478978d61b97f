//! Chunked scanner tests: sample bodies fed at every split point and byte by byte, bytes after the end left alone,
//! one case per malformed shape, and property tests that any partition of a body scans like the whole.

use proptest::prelude::*;

use super::*;

/// RFC 9112's shapes: plain chunks, uppercase and leading-zero sizes, extensions (quoted too), trailer fields.
const SAMPLES: [&[u8]; 6] = [
    b"0\r\n\r\n",
    b"5\r\nhello\r\n0\r\n\r\n",
    b"4\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\n\r\n",
    b"4;name=value\r\nWiki\r\n5;q=\"a b\";x\r\npedia\r\n0;last\r\n\r\n",
    b"000A\r\n0123456789\r\n0\r\nExpires: Wed, 21 Oct 2015 07:28:00 GMT\r\nX-Sum:\tab \r\n\r\n",
    b"1\r\n\n\r\n2\r\n\r\n\r\n0\r\n\r\n",
];

/// Feed `body` in the pieces `cuts` makes; the bytes taken and whether the scanner finished.
fn scan_in_pieces(body: &[u8], cuts: &[usize]) -> Result<(usize, bool), ChunkedError> {
    let mut scanner = ChunkedScanner::new();
    let (mut start, mut used) = (0, 0);
    for &cut in cuts.iter().chain([&body.len()]) {
        let cut = cut.clamp(start, body.len());
        used += scanner.feed(&body[start..cut])?;
        start = cut;
    }
    Ok((used, scanner.is_done()))
}

fn error_of(body: &[u8]) -> ChunkedError {
    match ChunkedScanner::new().feed(body) {
        Err(e) => e,
        Ok(n) => panic!("expected an error for {:?}, took {n}", String::from_utf8_lossy(body)),
    }
}

/// `chunks` encoded as a chunked body with plain sizes.
fn encode(chunks: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for chunk in chunks.iter().filter(|c| !c.is_empty()) {
        out.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        out.extend_from_slice(chunk);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

#[test]
fn samples_scan_whole_at_every_split_and_byte_by_byte() {
    for body in SAMPLES {
        assert_eq!(scan_in_pieces(body, &[]), Ok((body.len(), true)), "{:?}", String::from_utf8_lossy(body));
        for cut in 0..=body.len() {
            assert_eq!(scan_in_pieces(body, &[cut]), Ok((body.len(), true)), "cut at {cut}");
        }
        let every: Vec<usize> = (1..body.len()).collect();
        assert_eq!(scan_in_pieces(body, &every), Ok((body.len(), true)));
    }
}

#[test]
fn every_prefix_is_unfinished_and_fine() {
    for body in SAMPLES {
        for end in 0..body.len() {
            let mut scanner = ChunkedScanner::new();
            assert_eq!(scanner.feed(&body[..end]), Ok(end));
            assert!(!scanner.is_done(), "finished after {end} bytes");
        }
    }
}

#[test]
fn bytes_after_the_body_are_left_for_the_next_message() {
    for body in SAMPLES {
        let pipelined = [body, b"GET / HTTP/1.1\r\n\r\n"].concat();
        let mut scanner = ChunkedScanner::new();
        assert_eq!(scanner.feed(&pipelined), Ok(body.len()));
        assert!(scanner.is_done());
        assert_eq!(scanner.feed(b"more"), Ok(0));
    }
}

#[test]
fn malformed_sizes_are_refused() {
    for body in [
        &b"-1\r\n"[..],
        b"0x10\r\n",
        b" 5\r\nhello\r\n",
        b"\t5\r\n",
        b"\r\n",
        b"5 \r\nhello\r\n",
        b"5\t;x\r\n",
        b"+5\r\n",
        b"g\r\n",
        b"5\rX",
        b"5;a\x01b\r\n",
        b"5;a\rb",
    ] {
        assert_eq!(error_of(body), ChunkedError::BadSize, "{:?}", String::from_utf8_lossy(body));
    }
}

#[test]
fn sizes_that_overflow_u64_are_too_large() {
    let mut scanner = ChunkedScanner::new();
    assert_eq!(scanner.feed(b"ffffffffffffffff\r\n"), Ok(18));
    assert_eq!(error_of(b"10000000000000000\r\n"), ChunkedError::TooLarge);
    let zeros = [&[b'0'; 40][..], b"5\r\nhello\r\n0\r\n\r\n"].concat();
    assert_eq!(scan_in_pieces(&zeros, &[]), Ok((zeros.len(), true)));
}

#[test]
fn data_must_end_in_crlf() {
    assert_eq!(error_of(b"5\r\nhelloX"), ChunkedError::MissingCrlf);
    assert_eq!(error_of(b"5\r\nhello\rX"), ChunkedError::MissingCrlf);
    assert_eq!(error_of(b"5\r\nhello world\r\n"), ChunkedError::MissingCrlf);
}

#[test]
fn bare_lf_is_refused_wherever_a_line_ends() {
    for body in
        [&b"5\nhello\r\n"[..], b"5;ext\nhello", b"5\r\nhello\n0\r\n\r\n", b"0\r\n\n", b"0\r\nX: y\n\r\n", b"0\r\nX\n"]
    {
        assert_eq!(error_of(body), ChunkedError::BareLf, "{:?}", String::from_utf8_lossy(body));
    }
}

#[test]
fn malformed_trailers_are_refused() {
    for body in [
        &b"0\r\n X: y\r\n\r\n"[..],
        b"0\r\nX: y\r\n\tz\r\n\r\n",
        b"0\r\nX y\r\n\r\n",
        b"0\r\nX : y\r\n\r\n",
        b"0\r\n: y\r\n\r\n",
        b"0\r\nX: a\x00b\r\n\r\n",
        b"0\r\nX: y\rZ",
        b"0\r\n\rX",
    ] {
        assert_eq!(error_of(body), ChunkedError::BadTrailer, "{:?}", String::from_utf8_lossy(body));
    }
}

#[test]
fn lines_are_bounded() {
    let long_ext = [&b"5;"[..], &[b'x'; MAX_CHUNK_LINE], b"\r\n"].concat();
    assert_eq!(error_of(&long_ext), ChunkedError::BadSize);
    let long_size = vec![b'0'; MAX_CHUNK_LINE + 1];
    assert_eq!(error_of(&long_size), ChunkedError::BadSize);
    let long_trailer = [&b"0\r\nX: "[..], &[b'v'; MAX_CHUNK_LINE], b"\r\n\r\n"].concat();
    assert_eq!(error_of(&long_trailer), ChunkedError::BadTrailer);
    let fits = [&b"1;"[..], &[b'x'; MAX_CHUNK_LINE - 5], b"\r\na\r\n0\r\n\r\n"].concat();
    assert_eq!(scan_in_pieces(&fits, &[3, 700]), Ok((fits.len(), true)));
}

#[test]
fn an_error_is_final() {
    let mut scanner = ChunkedScanner::new();
    assert_eq!(scanner.feed(b"z"), Err(ChunkedError::BadSize));
    assert_eq!(scanner.feed(b"0\r\n\r\n"), Err(ChunkedError::BadSize));
    assert_eq!(scanner.feed(b""), Err(ChunkedError::BadSize));
}

#[test]
fn large_chunks_are_skipped_without_looking_at_their_bytes() {
    let data = vec![b'\n'; 1 << 20];
    let body = [format!("{:x}\r\n", data.len()).as_bytes(), &data, b"\r\n0\r\n\r\n"].concat();
    assert_eq!(scan_in_pieces(&body, &[10, 5000, 600_000]), Ok((body.len(), true)));
}

proptest! {
    #[test]
    fn any_partition_scans_like_the_whole(
        chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..8),
        cuts in proptest::collection::vec(0usize..400, 0..12),
    ) {
        let body = encode(&chunks);
        let mut cuts = cuts;
        cuts.sort_unstable();
        prop_assert_eq!(scan_in_pieces(&body, &cuts), Ok((body.len(), true)));
    }

    #[test]
    fn random_bytes_scan_the_same_in_any_partition(
        bytes in proptest::collection::vec(
            prop::sample::select(b"0123456789aAfFgx;: \t\r\n-".to_vec()), 0..60),
        cuts in proptest::collection::vec(0usize..60, 0..6),
    ) {
        let mut cuts = cuts;
        cuts.sort_unstable();
        let whole = scan_in_pieces(&bytes, &[]);
        let pieces = scan_in_pieces(&bytes, &cuts);
        prop_assert_eq!(whole, pieces);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = ChunkedScanner::new().feed(&bytes);
    }
}
