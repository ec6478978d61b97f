//! Absolute-target parsing and path canonicalisation never panic, and canonicalisation is idempotent.
#![no_main]
use leash_policy::{canonicalize, parse_absolute_target};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = parse_absolute_target(text);
    if let Ok(once) = canonicalize(text) {
        let twice = canonicalize(once.as_str()).expect("a canonical path canonicalises");
        assert_eq!(once, twice);
    }
});
