//! The DNS stub's query parser and response builder never panic; a response echoes the id, is a response, and never
//! exceeds the client's UDP size; a parsed query's name was decided only when it is a host name.
#![no_main]
use leash_policy::Host;
use leash_proxy::wire::dns::{parse_query, respond, Answer, PLAIN_UDP_SIZE};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limit = parse_query(data).map_or(PLAIN_UDP_SIZE, |q| q.udp_size);
    let decide = |host: &Host| {
        assert!(matches!(host, Host::Name(_)), "{host:?}");
        Answer::Exists(std::net::Ipv4Addr::new(127, 0, 0, 2))
    };
    if let Some(r) = respond(data, decide) {
        assert!(r.len() <= limit && r.len() >= 12);
        assert_eq!(r[..2], data[..2]);
        assert_ne!(r[2] & 0x80, 0);
    }
});
