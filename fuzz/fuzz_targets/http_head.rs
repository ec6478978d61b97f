//! The request and response head parsers and the framing rules never panic; a parsed head's length is in bounds.
#![no_main]
use leash_proxy::wire::http_head::{parse_request_head, parse_response_head, request_framing, response_framing};
use leash_proxy::wire::Parsed;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Parsed::Done(head, used) = parse_request_head(data, 64 * 1024) {
        assert!(used <= data.len());
        let _ = request_framing(&head);
    }
    if let Parsed::Done(head, used) = parse_response_head(data, 64 * 1024) {
        assert!(used <= data.len());
        let _ = response_framing(&head, "GET");
        let _ = response_framing(&head, "HEAD");
    }
});
