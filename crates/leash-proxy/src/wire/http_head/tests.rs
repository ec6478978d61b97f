//! HTTP head tests: heads captured from curl 7.88 (through a proxy) and Python's http.server, replayed at every
//! prefix; one test per malformed or smuggling shape, each expecting its own error; framing tables; no-panic
//! property tests.

use proptest::prelude::*;

use super::*;

/// Captured: `curl -x http://127.0.0.1:PORT 'http://example.com/index.html?q=1'`.
const CURL_GET: &[u8] = b"GET http://example.com/index.html?q=1 HTTP/1.1\r\nHost: example.com\r\n\
User-Agent: curl/7.88.1\r\nAccept: */*\r\nProxy-Connection: Keep-Alive\r\n\r\n";
/// Captured: `curl -x ... -d a=1 -H 'Cookie: x=1' http://api.example.com/v1/items` (head, then its 3-byte body).
const CURL_POST: &[u8] = b"POST http://api.example.com/v1/items HTTP/1.1\r\nHost: api.example.com\r\n\
User-Agent: curl/7.88.1\r\nAccept: */*\r\nProxy-Connection: Keep-Alive\r\nCookie: x=1\r\nContent-Length: 3\r\n\
Content-Type: application/x-www-form-urlencoded\r\n\r\na=1";
/// Captured: `curl -x ... https://example.com/`.
const CURL_CONNECT: &[u8] = b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\
User-Agent: curl/7.88.1\r\nProxy-Connection: Keep-Alive\r\n\r\n";
/// Captured: Python 3.11 `http.server` answering a GET (head, then its 6-byte body).
const PY_RESPONSE: &[u8] = b"HTTP/1.0 200 OK\r\nServer: SimpleHTTP/0.6 Python/3.11.7\r\n\
Date: Wed, 02 Dec 2026 17:44:11 GMT\r\nContent-type: text/html\r\nContent-Length: 6\r\n\
Last-Modified: Wed, 02 Dec 2026 17:44:10 GMT\r\n\r\nhello\n";

const MAX: usize = 8 * 1024;

fn request(buf: &[u8]) -> (RequestHead, usize) {
    match parse_request_head(buf, MAX) {
        Parsed::Done(head, n) => (head, n),
        other => panic!("expected a request head in {:?}, got {other:?}", String::from_utf8_lossy(buf)),
    }
}

fn response(buf: &[u8]) -> (ResponseHead, usize) {
    match parse_response_head(buf, MAX) {
        Parsed::Done(head, n) => (head, n),
        other => panic!("expected a response head in {:?}, got {other:?}", String::from_utf8_lossy(buf)),
    }
}

fn request_error(buf: &[u8]) -> HeadError {
    match parse_request_head(buf, MAX) {
        Parsed::Refuse(e) => e,
        other => panic!("expected a refusal of {:?}, got {other:?}", String::from_utf8_lossy(buf)),
    }
}

fn response_error(buf: &[u8]) -> HeadError {
    match parse_response_head(buf, MAX) {
        Parsed::Refuse(e) => e,
        other => panic!("expected a refusal of {:?}, got {other:?}", String::from_utf8_lossy(buf)),
    }
}

fn head_len(sample: &[u8]) -> usize {
    sample.windows(4).position(|w| w == b"\r\n\r\n").map_or(0, |i| i + 4)
}

fn req_with(headers: &str) -> RequestHead {
    request(format!("POST http://a.example/ HTTP/1.1\r\nHost: a.example\r\n{headers}\r\n").as_bytes()).0
}

fn resp_with(status: u16, headers: &str) -> ResponseHead {
    response(format!("HTTP/1.1 {status} X\r\n{headers}\r\n").as_bytes()).0
}

#[test]
fn captured_requests_parse_and_stop_at_the_end_of_the_head() {
    let (get, n) = request(CURL_GET);
    assert_eq!((get.method.as_str(), get.target.as_str()), ("GET", "http://example.com/index.html?q=1"));
    assert_eq!((get.version, n), (Version::Http11, CURL_GET.len()));
    assert_eq!(get.headers.len(), 4);
    assert_eq!(get.values("proxy-connection").collect::<Vec<_>>(), [&b"Keep-Alive"[..]]);
    let (post, n) = request(CURL_POST);
    assert_eq!(&CURL_POST[n..], b"a=1");
    assert_eq!(request_framing(&post), Ok(BodyFraming::ContentLength(3)));
    let (connect, _) = request(CURL_CONNECT);
    assert_eq!((connect.method.as_str(), connect.target.as_str()), ("CONNECT", "example.com:443"));
}

#[test]
fn captured_response_parses() {
    let (head, n) = response(PY_RESPONSE);
    assert_eq!((head.version, head.status, head.reason.as_slice()), (Version::Http10, 200, &b"OK"[..]));
    assert_eq!(&PY_RESPONSE[n..], b"hello\n");
    assert_eq!(response_framing(&head, "GET"), Ok(BodyFraming::ContentLength(6)));
    assert!(!head.is_persistent());
}

#[test]
fn every_prefix_of_the_samples_needs_more() {
    for sample in [CURL_GET, CURL_POST, CURL_CONNECT] {
        for end in 0..head_len(sample) {
            assert_eq!(parse_request_head(&sample[..end], MAX), Parsed::NeedMore, "prefix of {end}");
        }
    }
    for end in 0..head_len(PY_RESPONSE) {
        assert_eq!(parse_response_head(&PY_RESPONSE[..end], MAX), Parsed::NeedMore, "prefix of {end}");
    }
}

#[test]
fn one_leading_empty_line_is_skipped_and_counted() {
    let buf = [b"\r\n", CURL_GET].concat();
    assert_eq!(request(&buf).1, buf.len());
    assert_eq!(parse_request_head(b"\r", MAX), Parsed::NeedMore);
    assert_eq!(request_error(b"\r\n\r\nGET / HTTP/1.1\r\n\r\n"), HeadError::BadRequestLine);
    assert_eq!(request_error(b"\nGET / HTTP/1.1\r\n\r\n"), HeadError::BareLf);
}

#[test]
fn repeated_headers_are_kept_in_order() {
    let head = resp_with(200, "Set-Cookie: a=1\r\nX-Other: y\r\nset-cookie: b=2\r\nSET-COOKIE: c=3\r\n");
    let cookies: Vec<&[u8]> = head.values("Set-Cookie").collect();
    assert_eq!(cookies, [&b"a=1"[..], b"b=2", b"c=3"]);
    assert_eq!(&head.headers[2].name[..], b"set-cookie");
}

/// Names and values are kept inline up to a size and on the heap past it: either side of each bound, and far past
/// it, a field reads back exactly as sent.
#[test]
fn fields_either_side_of_the_inline_sizes_read_back_exactly() {
    let sizes = [0, 1, 23, 24, 25, 31, 32, 33, 3_000];
    for (name_len, value_len) in sizes.iter().filter(|&&n| n > 0).flat_map(|&n| sizes.iter().map(move |&v| (n, v))) {
        let name = "n".repeat(name_len - 1) + "N";
        let value: String = (0..value_len).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
        let head = req_with(&format!("{name}: {value}\r\n"));
        let field = head.headers.last().unwrap();
        assert_eq!((&field.name[..], &field.value[..]), (name.as_bytes(), value.as_bytes()), "{name_len}/{value_len}");
        assert!(field.is(&name.to_ascii_lowercase()));
    }
}

#[test]
fn values_are_trimmed_of_surrounding_whitespace_only() {
    let head = req_with("X-A: \t inner  space \t\r\nX-Empty:\r\nX-Bytes: café\r\n");
    assert_eq!(head.values("x-a").next(), Some(&b"inner  space"[..]));
    assert_eq!(head.values("x-empty").next(), Some(&b""[..]));
    assert_eq!(head.headers[3].value_str(), Some("café"));
}

#[test]
fn bare_lf_anywhere_is_refused() {
    for buf in [
        &b"GET / HTTP/1.1\n\r\n"[..],
        b"GET /\n HTTP/1.1\r\n\r\n",
        b"GET\n",
        b"GET / HTTP/1.1\r\nHost: a\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\n\n",
        b"GET / HTTP/1.1\r\nHo\nst: a\r\n\r\n",
    ] {
        assert_eq!(request_error(buf), HeadError::BareLf, "{:?}", String::from_utf8_lossy(buf));
    }
    assert_eq!(response_error(b"HTTP/1.1 200 OK\n"), HeadError::BareLf);
}

#[test]
fn malformed_request_lines_are_refused() {
    for buf in [
        &b"GET  / HTTP/1.1\r\n"[..],
        b"GET /  HTTP/1.1\r\n",
        b" GET / HTTP/1.1\r\n",
        b"GET\t/ HTTP/1.1\r\n",
        b"G(T / HTTP/1.1\r\n",
        b"GET /a\rb HTTP/1.1\r\n",
        b"GET /caf\xc3\xa9 HTTP/1.1\r\n",
        b"GET /\x7f HTTP/1.1\r\n",
        b"GET / HTTP/1.1 \r\n",
        b"GET / HTTP/1.1\rX",
        b"GET / HTTP/1.1\r\r\n",
        b"\x16\x03\x01\x02\x00",
    ] {
        assert_eq!(request_error(buf), HeadError::BadRequestLine, "{:?}", String::from_utf8_lossy(buf));
    }
}

#[test]
fn versions_other_than_1_0_and_1_1_are_refused_as_soon_as_known() {
    for buf in
        [&b"GET / HTTP/2.0\r\n"[..], b"GET / HTTP/1.2", b"GET / http/1.1\r\n", b"GET / HTTP/1.10\r\n", b"GET / X"]
    {
        assert_eq!(request_error(buf), HeadError::BadVersion, "{:?}", String::from_utf8_lossy(buf));
    }
    assert_eq!(response_error(b"HTTP/2 200 OK\r\n"), HeadError::BadVersion);
    assert_eq!(request(b"GET / HTTP/1.0\r\n\r\n").0.version, Version::Http10);
}

#[test]
fn header_shapes_used_for_smuggling_get_their_own_error() {
    let cases: [(&[u8], HeadError); 9] = [
        (b"GET / HTTP/1.1\r\nHost : a\r\n\r\n", HeadError::SpaceBeforeColon),
        (b"GET / HTTP/1.1\r\nHost\t: a\r\n\r\n", HeadError::SpaceBeforeColon),
        (b"GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n", HeadError::ObsFold),
        (b"GET / HTTP/1.1\r\nX: a\r\n\tb\r\n\r\n", HeadError::ObsFold),
        (b"GET / HTTP/1.1\r\n Host: a\r\n\r\n", HeadError::ObsFold),
        (b"GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", HeadError::BadHeader),
        (b"GET / HTTP/1.1\r\nX: a\0b\r\n\r\n", HeadError::BadHeader),
        (b"GET / HTTP/1.1\r\n: a\r\n\r\n", HeadError::BadHeader),
        (b"GET / HTTP/1.1\r\nX(y): a\r\n\r\n", HeadError::BadHeader),
    ];
    for (buf, want) in cases {
        assert_eq!(request_error(buf), want, "{:?}", String::from_utf8_lossy(buf));
    }
    assert_eq!(request_error(b"GET / HTTP/1.1\r\nNoColon\r\n\r\n"), HeadError::BadHeader);
    assert_eq!(request_error(b"GET / HTTP/1.1\r\nX: \x7f\r\n\r\n"), HeadError::BadHeader);
    assert_eq!(request_error(b"GET / HTTP/1.1\r\n\rX"), HeadError::BadHeader);
}

#[test]
fn status_lines() {
    assert_eq!(response(b"HTTP/1.1 204 \r\n\r\n").0.reason, b"");
    assert_eq!(response(b"HTTP/1.1 200\r\n\r\n").0.status, 200);
    assert_eq!(response(b"HTTP/1.1 999 Request denied\r\n\r\n").0.status, 999);
    assert_eq!(response(b"HTTP/1.1 404 Not \xe2\x80\x9cFound\xe2\x80\x9d\r\n\r\n").0.status, 404);
    for buf in [
        &b"HTTP/1.1 20 OK\r\n"[..],
        b"HTTP/1.1 2000 OK\r\n",
        b"HTTP/1.1 099 OK\r\n",
        b"HTTP/1.1  200 OK\r\n",
        b"HTTP/1.1 200 O\x01K\r\n",
        b"HTTP/1.1\r\n",
        b"HTTP/1.1 -20 OK\r\n",
    ] {
        assert_eq!(response_error(buf), HeadError::BadStatusLine, "{:?}", String::from_utf8_lossy(buf));
    }
}

#[test]
fn size_bound_is_answered_as_soon_as_exceeded() {
    let head = CURL_GET;
    assert!(matches!(parse_request_head(head, head.len()), Parsed::Done(_, _)));
    assert_eq!(parse_request_head(&head[..40], 39), Parsed::Refuse(HeadError::TooLarge));
    assert_eq!(parse_request_head(&head[..39], 39), Parsed::NeedMore);
    assert_eq!(parse_request_head(head, head.len() - 1), Parsed::Refuse(HeadError::TooLarge));
    // A complete head within the bound is fine whatever follows it.
    let pipelined = [head, head].concat();
    assert_eq!(parse_request_head(&pipelined, head.len()), Parsed::Done(request(head).0, head.len()));
    // Malformed bytes inside the bound are still reported as what they are.
    assert_eq!(parse_request_head(b"GET\n/ HTTP/1.1", 5), Parsed::Refuse(HeadError::BareLf));
}

#[test]
fn request_framing_rules() {
    let cases: [(&str, Result<BodyFraming, HeadError>); 15] = [
        ("", Ok(BodyFraming::None)),
        ("Content-Length: 0\r\n", Ok(BodyFraming::ContentLength(0))),
        ("Content-Length: 18446744073709551615\r\n", Ok(BodyFraming::ContentLength(u64::MAX))),
        ("Transfer-Encoding: chunked\r\n", Ok(BodyFraming::Chunked)),
        ("Transfer-Encoding: CHUNKED\r\n", Ok(BodyFraming::Chunked)),
        ("Content-Length: 3\r\nTransfer-Encoding: chunked\r\n", Err(HeadError::ContentLengthAndTransferEncoding)),
        ("Transfer-Encoding: gzip, chunked\r\n", Err(HeadError::BadTransferEncoding)),
        ("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", Err(HeadError::BadTransferEncoding)),
        ("Transfer-Encoding: chunked, chunked\r\n", Err(HeadError::BadTransferEncoding)),
        ("Transfer-Encoding: xchunked\r\n", Err(HeadError::BadTransferEncoding)),
        ("Content-Length: 3\r\nContent-Length: 4\r\n", Err(HeadError::BadContentLength)),
        ("Content-Length: 3\r\nContent-Length: 3\r\n", Err(HeadError::BadContentLength)),
        ("Content-Length: 3, 3\r\n", Err(HeadError::BadContentLength)),
        ("Content-Length: 18446744073709551616\r\n", Err(HeadError::BadContentLength)),
        ("Content-Length: +3\r\n", Err(HeadError::BadContentLength)),
    ];
    for (headers, want) in cases {
        assert_eq!(request_framing(&req_with(headers)), want, "{headers:?}");
    }
    for bad in ["-1", "", "0x10", "3 4", "3,", "1e3"] {
        let head = req_with(&format!("Content-Length: {bad}\r\n"));
        assert_eq!(request_framing(&head), Err(HeadError::BadContentLength), "{bad:?}");
    }
    let http10 = request(b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n").0;
    assert_eq!(request_framing(&http10), Err(HeadError::BadTransferEncoding));
}

#[test]
fn response_framing_rules() {
    let chunked = "Transfer-Encoding: chunked\r\n";
    assert_eq!(response_framing(&resp_with(200, ""), "GET"), Ok(BodyFraming::UntilClose));
    assert_eq!(response_framing(&resp_with(200, chunked), "GET"), Ok(BodyFraming::Chunked));
    assert_eq!(response_framing(&resp_with(200, "Content-Length: 5\r\n"), "HEAD"), Ok(BodyFraming::None));
    for status in [100, 101, 103, 204, 304] {
        assert_eq!(response_framing(&resp_with(status, chunked), "GET"), Ok(BodyFraming::None), "{status}");
    }
    assert_eq!(response_framing(&resp_with(200, ""), "CONNECT"), Ok(BodyFraming::None));
    assert_eq!(
        response_framing(&resp_with(407, "Content-Length: 2\r\n"), "CONNECT"),
        Ok(BodyFraming::ContentLength(2))
    );
    let repeated = "Content-Length: 7\r\nContent-Length: 7, 7\r\n";
    assert_eq!(response_framing(&resp_with(200, repeated), "GET"), Ok(BodyFraming::ContentLength(7)));
    let differing = "Content-Length: 7\r\nContent-Length: 8\r\n";
    assert_eq!(response_framing(&resp_with(200, differing), "GET"), Err(HeadError::BadContentLength));
    let both = "Content-Length: 7\r\nTransfer-Encoding: chunked\r\n";
    assert_eq!(response_framing(&resp_with(200, both), "GET"), Err(HeadError::ContentLengthAndTransferEncoding));
    let gzip = "Transfer-Encoding: gzip\r\n";
    assert_eq!(response_framing(&resp_with(200, gzip), "GET"), Err(HeadError::BadTransferEncoding));
}

#[test]
fn connection_tokens_and_persistence() {
    let head = req_with("Connection: keep-alive, X-Secret\r\nconnection: ,Close ,\r\n");
    let tokens: Vec<&[u8]> = connection_tokens(&head.headers).collect();
    assert_eq!(tokens, [&b"keep-alive"[..], b"X-Secret", b"Close"]);
    assert!(has_connection_token(&head.headers, "close"));
    assert!(!head.is_persistent());
    assert!(req_with("").is_persistent());
    assert!(!request(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").0.is_persistent());
    assert!(head.headers[0].is("HOST"));
    assert!(is_token(b"X-Secret") && !is_token(b"") && !is_token(b"a b"));
    assert_eq!(Version::Http10.as_str(), "HTTP/1.0");
}

proptest! {
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300), max in 0usize..400) {
        let _ = parse_request_head(&bytes, max);
        let _ = parse_response_head(&bytes, max);
        let mut prefixed = b"GET / HTTP/1.1\r\n".to_vec();
        prefixed.extend_from_slice(&bytes);
        if let Parsed::Done(head, n) = parse_request_head(&prefixed, MAX) {
            prop_assert!(n <= prefixed.len());
            let _ = request_framing(&head);
        }
    }

    #[test]
    fn mutated_samples_never_panic_and_done_never_overruns(
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        let mut buf = CURL_POST.to_vec();
        let i = at.index(buf.len());
        buf[i] = byte;
        if let Parsed::Done(head, n) = parse_request_head(&buf, MAX) {
            prop_assert!(n <= buf.len());
            let _ = request_framing(&head);
        }
    }
}
