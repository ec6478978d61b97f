//! The policy loader never panics on any YAML or TOML text.
#![no_main]
use leash_policy::{load, Format};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = load(text, Format::Yaml, None);
    let _ = load(text, Format::Toml, None);
});
