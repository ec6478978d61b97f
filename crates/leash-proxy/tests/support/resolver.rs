//! A resolver that answers from a table and records every name it is asked, so a test can show that a refused name
//! never reached it. Non-loopback answers (10.0.0.1, 169.254.169.254) exist only for leash to refuse: nothing in
//! these tests may ever send a packet anywhere but loopback.

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::sync::Mutex;

use leash_policy::Name;
use leash_proxy::{Resolve, ResolveFuture};

/// Names with special answers. Every other `*.test` name resolves to 127.0.0.1 (where the origins listen).
const SPECIAL: &[(&str, &[&str])] = &[
    // DNS rebinding to a private network.
    ("rebind.test", &["10.0.0.1"]),
    // Cloud metadata.
    ("metadata.test", &["169.254.169.254"]),
    ("v6.test", &["::1"]),
    // IPv4-mapped IPv6 of the origins' own loopback address: dialing it would reach them.
    ("mapped.test", &["::ffff:127.0.0.1"]),
    // 0.0.0.0 dials this host on Linux.
    ("zero.test", &["0.0.0.0"]),
    // One good address and one internal one: refused as a whole.
    ("mixed.test", &["127.0.0.1", "169.254.169.254"]),
];

/// The name that does not exist.
pub const NXDOMAIN: &str = "nxdomain.test";

pub struct RecordingResolver {
    table: Mutex<HashMap<String, Vec<IpAddr>>>,
    asked: Mutex<Vec<String>>,
}

impl RecordingResolver {
    pub fn new() -> RecordingResolver {
        let table = SPECIAL
            .iter()
            .map(|(name, addrs)| ((*name).to_owned(), addrs.iter().map(|a| a.parse().unwrap()).collect()))
            .collect();
        RecordingResolver { table: Mutex::new(table), asked: Mutex::new(Vec::new()) }
    }

    /// Answer `name` with `addrs` from now on.
    pub fn insert(&self, name: &str, addrs: &[&str]) {
        let addrs = addrs.iter().map(|a| a.parse().unwrap()).collect();
        self.table.lock().unwrap().insert(name.to_owned(), addrs);
    }

    /// Every name asked, in order.
    pub fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }

    pub fn assert_never_asked(&self) {
        assert_eq!(self.asked(), Vec::<String>::new(), "the resolver should not have been asked anything");
    }

    fn answer(&self, name: &str) -> io::Result<Vec<IpAddr>> {
        if let Some(addrs) = self.table.lock().unwrap().get(name) {
            return Ok(addrs.clone());
        }
        if name.ends_with(".test") && name != NXDOMAIN {
            return Ok(vec!["127.0.0.1".parse().unwrap()]);
        }
        Err(io::Error::new(io::ErrorKind::NotFound, format!("no such name `{name}`")))
    }
}

impl Resolve for RecordingResolver {
    fn resolve<'a>(&'a self, name: &'a Name, _port: u16) -> ResolveFuture<'a> {
        self.asked.lock().unwrap().push(name.as_str().to_owned());
        let answer = self.answer(name.as_str());
        Box::pin(async move { answer })
    }
}
