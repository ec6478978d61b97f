//! Which names `leash run`'s DNS stub answers: `name_is_reachable` is true exactly when some tunnel or plain-HTTP
//! request to the name is not refused by name, checked case by case and against a naive search over ports and paths.

use leash_policy::{
    canonicalize, parse_host, CanonicalPath, Host, Policy, Question, Request, Scheme, TlsInspection, Verdict, Via,
};

use crate::{allowlist, blocklist, policy};

fn reachable(yaml: &str, name: &str) -> bool {
    policy(yaml).name_is_reachable(&parse_host(name).unwrap())
}

#[test]
fn allowlist_names_are_reachable_and_the_rest_are_not() {
    let p = allowlist(&["api.example.com", ".pypi.org"]);
    assert!(reachable(&p, "api.example.com"));
    assert!(reachable(&p, "pypi.org"));
    assert!(reachable(&p, "files.pypi.org"));
    assert!(!reachable(&p, "example.com"));
    assert!(!reachable(&p, "x.api.example.com"));
    assert!(!reachable(&p, "notpypi.org"));
}

#[test]
fn an_allowlist_that_allows_only_some_paths_of_a_host_makes_it_reachable() {
    let p = "network:\n  mode: allowlist\n  allowed_urls: [github.com/rust-lang/]\n";
    assert!(reachable(p, "github.com"));
    assert!(!reachable(p, "api.github.com"));
}

#[test]
fn blocklist_hosts_are_unreachable_but_hosts_with_only_path_rules_are_reachable() {
    let p = blocklist(&["api.semanticscholar.org", "arxiv.org/abs/2401.01234", "example.org/"]);
    assert!(!reachable(&p, "api.semanticscholar.org"));
    assert!(!reachable(&p, "x.api.semanticscholar.org"));
    assert!(reachable(&p, "semanticscholar.org"));
    assert!(reachable(&p, "arxiv.org"), "its requests are decided path by path");
    assert!(reachable(&p, "export.arxiv.org"));
    // A blocked prefix loses its trailing `/`: `example.org/` is the host's rule (it used to be a path rule on `/`,
    // left to inspection, blocking every path all the same).
    assert!(!reachable(&p, "example.org"), "`example.org/` blocks the host");
    assert!(reachable(&p, "anything.test"));
}

#[test]
fn ip_literals_are_never_reachable_as_names_even_a_listed_dotted_quad() {
    let p = allowlist(&["192.0.2.7", "example.com"]);
    for literal in ["192.0.2.7", "192.0.2.7.", "0xc0000207", "3221225991", "1.2.3.0x4"] {
        assert!(!reachable(&p, literal), "{literal}");
    }
    assert!(!policy(&blocklist(&["x.test"])).name_is_reachable(&parse_host("[::1]").unwrap()));
}

#[test]
fn a_policy_without_any_port_reaches_nothing() {
    let p = "network:\n  mode: blocklist\n  blocked_urls: [x.test]\n  ports: []\n  tunnel_ports: []\n";
    assert!(!reachable(p, "example.org"));
    let only_http = "network:\n  mode: allowlist\n  allowed_hosts: [a.test]\n  tunnel_ports: []\n";
    assert!(reachable(only_http, "a.test"));
    let only_tunnels = "network:\n  mode: allowlist\n  allowed_hosts: [a.test]\n  ports: []\n";
    assert!(reachable(only_tunnels, "a.test"));
}

#[test]
fn the_empty_inline_policy_reaches_nothing() {
    let p = Policy::from_inline(&[], &[]).unwrap();
    assert!(!p.name_is_reachable(&parse_host("example.com").unwrap()));
}

/// The naive definition: some tunnel port whose CONNECT is not blocked, or some plain-HTTP port and some path (`/`
/// or one a rule names) whose request is not blocked.
fn naive(policy: &Policy, host: &Host, paths: &[CanonicalPath]) -> bool {
    let by_tunnel = policy.tunnel_ports().iter().any(|&p| {
        policy.decide(&Question::Connect { target: host, port: p }, TlsInspection::Available).verdict != Verdict::Block
    });
    let by_http = policy.ports().iter().any(|&port| {
        paths.iter().any(|path| {
            let req = Request { via: Via::ForwardProxy, scheme: Scheme::Http, host, port, path, method: "GET" };
            policy.decide(&Question::Request(req), TlsInspection::Available).verdict != Verdict::Block
        })
    });
    by_tunnel || by_http
}

#[test]
fn agrees_with_the_naive_search_over_ports_and_paths() {
    let policies = [
        allowlist(&["a.test", ".b.test", "192.0.2.7"]),
        "network:\n  mode: allowlist\n  allowed_hosts: [.b.test]\n  allowed_urls: [a.test/x/, c.b.test/y]\n  \
         tunnel_ports: []\n"
            .to_owned(),
        "network:\n  mode: allowlist\n  allowed_urls: [a.test/x/]\n  ports: []\n".to_owned(),
        blocklist(&["a.test", "b.test/x", "c.b.test", "d.test/"]),
        "network:\n  mode: blocklist\n  blocked_urls: [a.test, b.test/x]\n  ports: []\n  tunnel_ports: []\n".to_owned(),
        "network:\n  mode: blocklist\n  blocked_urls: [b.test/x]\n  inspect: all\n".to_owned(),
    ];
    let names = ["a.test", "x.a.test", "b.test", "c.b.test", "x.c.b.test", "d.test", "e.test", "192.0.2.7", "test"];
    let paths: Vec<CanonicalPath> = ["/", "/x/", "/x/1", "/y", "/z"].iter().map(|p| canonicalize(p).unwrap()).collect();
    for yaml in &policies {
        let p = policy(yaml);
        for name in names {
            let host = parse_host(name).unwrap();
            let expected = matches!(host, Host::Name(_)) && naive(&p, &host, &paths);
            assert_eq!(p.name_is_reachable(&host), expected, "{name} under\n{yaml}");
        }
    }
}
