//! Scale: a blocklist of 100,000 URLs loads and decides correctly (the timings are the benchmark's job:
//! `cargo bench -p leash-policy`).

use leash_policy::{load, Format, Via};

use crate::decide_on;

/// 100,000 path rules spread over 1,000 hosts, plus host rules: the shape of a large scraped blocklist.
pub fn big_blocklist(entries: usize) -> String {
    let mut text = String::from("network:\n  mode: blocklist\n  blocked_urls:\n");
    for i in 0..entries {
        let line = match i % 10 {
            0 => format!("    - host{i}.example.org\n"),
            _ => format!("    - site{}.example.com/abs/{:05}.{:05}\n", i % 1000, i / 1000, i),
        };
        text.push_str(&line);
    }
    text
}

#[test]
fn a_hundred_thousand_blocked_urls_load_and_decide() {
    let loaded = load(&big_blocklist(100_000), Format::Yaml, None).unwrap();
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings.first());
    let d = |url| decide_on(&loaded.policy, Via::ForwardProxy, url);
    assert_eq!(d("http://site7.example.com/abs/00012.12007v2"), "block rule site7.example.com/abs/00012.12007");
    assert_eq!(d("http://x.site7.example.com/ABS/00012.12007"), "block rule site7.example.com/abs/00012.12007");
    assert_eq!(d("http://site7.example.com/abs/00012.12008"), "allow default");
    assert_eq!(d("http://host99990.example.org/x"), "block rule host99990.example.org");
    assert_eq!(d("http://example.net/"), "allow default");
}

#[test]
fn a_large_toml_policy_loads_too() {
    let mut text = String::from("[network]\nmode = \"blocklist\"\nblocked_urls = [\n");
    for i in 0..10_000 {
        text.push_str(&format!("  \"site{}.example.com/abs/{i}\",\n", i % 100));
    }
    text.push_str("]\n");
    let policy = load(&text, Format::Toml, None).unwrap().policy;
    assert_eq!(
        decide_on(&policy, Via::ForwardProxy, "http://site42.example.com/abs/542"),
        "block rule site42.example.com/abs/542"
    );
}
