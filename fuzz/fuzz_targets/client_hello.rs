//! The ClientHello reader never panics, and a valid prefix of a parse is never refused.
#![no_main]
use leash_proxy::wire::{client_hello::parse_client_hello, Parsed};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Parsed::Done(hello, used) = parse_client_hello(data) {
        assert!(used <= data.len());
        // The same bytes, cut just before the end, can only ask for more.
        assert_eq!(parse_client_hello(&data[..used - 1]), Parsed::NeedMore, "{hello:?}");
    }
});
