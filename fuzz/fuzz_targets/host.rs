//! The host and authority classifier never panics, and what it calls a dotted quad reads back as that address.
#![no_main]
use leash_policy::{parse_authority, parse_host, Host};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = parse_authority(text);
    match parse_host(text) {
        Ok(Host::Ipv4(ip)) => assert_eq!(parse_host(&ip.to_string()), Ok(Host::Ipv4(ip))),
        Ok(Host::Name(name)) => assert!(name.as_str().parse::<std::net::IpAddr>().is_err()),
        _ => {}
    }
});
