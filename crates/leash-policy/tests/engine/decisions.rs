//! Decisions beyond the host and path: schemes and ports, CONNECT and the ClientHello, inspection, the most
//! specific rule's name, destination checks and inline policies.

use std::net::IpAddr;

use leash_policy::{Cidr, ClientHelloFacts as Hello, Mode, Policy, Question, Reason, TlsInspection, Via};

use crate::{allowlist, blocklist, connect, decide, decide_inner, decide_on, hello, policy, render};

const ALLOW: &str = "network:\n  mode: allowlist\n  allowed_hosts: [api.example.com, .pypi.org, 192.0.2.7]\n  \
                     allowed_urls: [github.com/rust-lang/]\n  ports: [80, 8080]\n  tunnel_ports: [443, 8443]\n";
const BLOCK: &str = "network:\n  mode: blocklist\n  blocked_urls: [arxiv.org/abs/, api.semanticscholar.org]\n";

#[test]
fn plain_proxy_needs_http_and_a_listed_port() {
    assert_eq!(decide(ALLOW, "http://api.example.com:8080/"), "allow rule api.example.com");
    assert_eq!(decide(ALLOW, "http://api.example.com:443/"), "block port");
    assert_eq!(decide(ALLOW, "https://api.example.com/"), "block scheme");
    assert_eq!(decide(ALLOW, "ftp://api.example.com/"), "block scheme");
    assert_eq!(decide(BLOCK, "HTTP://example.org/"), "allow default");
    let no_ports = "network:\n  mode: blocklist\n  blocked_urls: [x.org]\n  ports: []\n";
    assert_eq!(decide(no_ports, "http://example.org/"), "block port");
}

#[test]
fn scheme_and_port_are_checked_before_the_host() {
    assert_eq!(decide(ALLOW, "https://192.0.2.8/"), "block scheme");
    assert_eq!(decide(ALLOW, "http://[::1]:9/"), "block port");
}

#[test]
fn inner_requests_need_https_and_skip_the_port_check() {
    assert_eq!(decide_inner(ALLOW, "https://api.example.com:9999/x"), "allow rule api.example.com");
    assert_eq!(decide_inner(ALLOW, "http://api.example.com/x"), "block scheme");
    assert_eq!(decide_inner(ALLOW, "https://github.com/rust-lang/x"), "allow rule github.com/rust-lang/");
    assert_eq!(decide_inner(ALLOW, "https://github.com/evil"), "block not-allowed");
}

#[test]
fn allowlist_entries() {
    assert_eq!(decide(ALLOW, "http://pypi.org/"), "allow rule .pypi.org");
    assert_eq!(decide(ALLOW, "http://files.pypi.org/x"), "allow rule .pypi.org");
    assert_eq!(decide(ALLOW, "http://a.b.pypi.org/x"), "allow rule .pypi.org");
    assert_eq!(decide(ALLOW, "http://notpypi.org/"), "block not-allowed");
    assert_eq!(decide(ALLOW, "http://example.com/"), "block not-allowed");
}

#[test]
fn most_specific_rule_is_named_whatever_the_file_order() {
    let a = allowlist(&[".example.com", "example.com", ".a.example.com"]);
    let b = allowlist(&[".a.example.com", "example.com", ".example.com"]);
    for p in [a, b] {
        assert_eq!(decide(&p, "http://example.com/"), "allow rule example.com");
        assert_eq!(decide(&p, "http://x.example.com/"), "allow rule .example.com");
        assert_eq!(decide(&p, "http://x.a.example.com/"), "allow rule .a.example.com");
    }
    let a = blocklist(&["example.com", "example.com/a", "example.com/a/b", "x.example.com"]);
    let b = blocklist(&["x.example.com", "example.com/a/b", "example.com/a", "example.com"]);
    for p in [a, b] {
        assert_eq!(decide(&p, "http://example.com/a/b/c"), "block rule example.com/a/b");
        assert_eq!(decide(&p, "http://example.com/a/c"), "block rule example.com/a");
        assert_eq!(decide(&p, "http://example.com/c"), "block rule example.com");
        assert_eq!(decide(&p, "http://y.example.com/a/b"), "block rule example.com/a/b");
        // A longer host suffix beats any rule on a shorter one, path rules included.
        assert_eq!(decide(&p, "http://x.example.com/a/b"), "block rule x.example.com");
    }
    // Two spellings of one rule: the smaller text is named, in either order.
    let a = blocklist(&["x.org/a/../b", "x.org/b"]);
    let b = blocklist(&["x.org/b", "x.org/a/../b"]);
    assert_eq!(decide(&a, "http://x.org/b"), decide(&b, "http://x.org/b"));
}

#[test]
fn connect_decisions() {
    assert_eq!(connect(ALLOW, "api.example.com:443"), "allow rule api.example.com");
    assert_eq!(connect(ALLOW, "api.example.com:8443"), "allow rule api.example.com");
    assert_eq!(connect(ALLOW, "api.example.com:80"), "block port");
    assert_eq!(connect(ALLOW, "example.com:443"), "block not-allowed");
    assert_eq!(connect(ALLOW, "192.0.2.7:443"), "allow rule 192.0.2.7");
    assert_eq!(connect(ALLOW, "192.0.2.07:443"), "block ip-literal");
    assert_eq!(connect(ALLOW, "[::1]:443"), "block ip-literal");
    assert_eq!(connect(ALLOW, "github.com:443"), "inspect rule github.com/rust-lang/");
    assert_eq!(connect(BLOCK, "arxiv.org:443"), "inspect default");
    assert_eq!(connect(BLOCK, "export.arxiv.org:443"), "inspect default");
    assert_eq!(connect(BLOCK, "api.semanticscholar.org:443"), "block rule api.semanticscholar.org");
    assert_eq!(connect(BLOCK, "example.org:443"), "allow default");
    assert_eq!(connect(BLOCK, "192.0.2.7:443"), "block ip-literal");
}

#[test]
fn a_host_wholly_allowed_is_not_inspected_for_its_url_rules() {
    let p = "network:\n  mode: allowlist\n  allowed_hosts: [.github.com]\n  allowed_urls: [github.com/rust-lang/]\n";
    assert_eq!(connect(p, "github.com:443"), "allow rule .github.com");
    let policy = policy(p);
    let host = leash_policy::parse_host("github.com").unwrap();
    assert!(!policy.host_has_path_rules(&host));
    assert!(leash_policy::load(ALLOW, leash_policy::Format::Yaml, None).unwrap().policy.host_has_path_rules(&host));
}

#[test]
fn inspect_all_inspects_every_allowed_tunnel() {
    let p = "network:\n  mode: allowlist\n  allowed_hosts: [api.example.com, 192.0.2.7]\n  inspect: all\n";
    assert_eq!(connect(p, "api.example.com:443"), "inspect rule api.example.com");
    assert_eq!(connect(p, "other.com:443"), "block not-allowed");
    assert_eq!(connect(p, "192.0.2.7:443"), "allow rule 192.0.2.7");
    let p = "network:\n  mode: blocklist\n  blocked_urls: [x.org]\n  inspect: all\n";
    assert_eq!(connect(p, "example.org:443"), "inspect default");
    assert_eq!(connect(p, "x.org:443"), "block rule x.org");
    assert!(policy(p).inspect_all());
}

#[test]
fn client_hello_on_a_name() {
    let sni = |s| hello(ALLOW, "api.example.com:443", Hello::ServerName(s));
    assert_eq!(sni("api.example.com"), "allow rule api.example.com");
    assert_eq!(sni("API.example.com."), "allow rule api.example.com");
    assert_eq!(sni("other.example.com"), "block host-mismatch");
    assert_eq!(sni("192.0.2.7"), "block bad-sni");
    assert_eq!(sni("bad_name"), "block bad-sni");
    assert_eq!(sni(""), "block bad-sni");
    assert_eq!(hello(ALLOW, "api.example.com:443", Hello::NoServerName), "block no-sni");
    assert_eq!(hello(ALLOW, "api.example.com:443", Hello::BadServerName), "block bad-sni");
    assert_eq!(hello(ALLOW, "api.example.com:443", Hello::Ech), "block ech");
    assert_eq!(hello(ALLOW, "api.example.com:443", Hello::NotTls), "block not-tls");
    assert_eq!(hello(ALLOW, "github.com:443", Hello::ServerName("github.com")), "inspect rule github.com/rust-lang/");
    assert_eq!(hello(ALLOW, "example.com:443", Hello::ServerName("example.com")), "block not-allowed");
    assert_eq!(hello(ALLOW, "api.example.com:80", Hello::ServerName("api.example.com")), "block port");
}

#[test]
fn client_hello_on_a_listed_literal() {
    let on = |facts| hello(ALLOW, "192.0.2.7:443", facts);
    assert_eq!(on(Hello::NoServerName), "allow rule 192.0.2.7");
    assert_eq!(on(Hello::ServerName("api.example.com")), "block host-mismatch");
    assert_eq!(on(Hello::ServerName("192.0.2.7")), "block host-mismatch");
    assert_eq!(on(Hello::Ech), "block ech");
    assert_eq!(on(Hello::NotTls), "block not-tls");
    assert_eq!(on(Hello::BadServerName), "block bad-sni");
    assert_eq!(hello(ALLOW, "192.0.2.8:443", Hello::NoServerName), "block ip-literal");
}

fn ips(list: &[&str]) -> Vec<IpAddr> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

#[test]
fn destination_checks() {
    let p =
        policy("network:\n  mode: blocklist\n  blocked_urls: [x.org]\n  allow_destinations: [10.1.0.0/16, fd00::/8]\n");
    let own: Vec<Cidr> = vec![IpAddr::from([203, 0, 113, 9]).into(), "198.51.100.0/24".parse().unwrap()];
    assert_eq!(p.check_destination(&ips(&["93.184.216.34"]), &own), Ok(()));
    assert_eq!(p.check_destination(&ips(&["93.184.216.34", "127.0.0.1"]), &own), Err(Reason::InternalDestination));
    assert_eq!(p.check_destination(&ips(&["203.0.113.9"]), &own), Err(Reason::InternalDestination));
    assert_eq!(p.check_destination(&ips(&["169.254.169.254"]), &own), Err(Reason::InternalDestination));
    // A prefix the host's kernel delivers locally (AnyIP) is its own for every address in it.
    assert_eq!(p.check_destination(&ips(&["198.51.100.77"]), &own), Err(Reason::InternalDestination));
    assert_eq!(p.check_destination(&ips(&["198.51.101.1"]), &own), Ok(()));
    assert_eq!(p.check_destination(&ips(&["10.1.2.3"]), &own), Ok(()));
    assert_eq!(p.check_destination(&ips(&["10.2.0.1"]), &own), Err(Reason::InternalDestination));
    assert_eq!(p.check_destination(&ips(&["fd00::5"]), &own), Ok(()));
    assert_eq!(p.check_destination(&ips(&["::ffff:10.1.2.3"]), &own), Err(Reason::InternalDestination));
    assert_eq!(p.check_destination(&[], &own), Err(Reason::InternalDestination));
    assert_eq!(p.allow_destinations().len(), 2);
}

#[test]
fn accessors_and_defaults() {
    let p = policy(BLOCK);
    assert_eq!(
        (p.mode(), p.ports(), p.tunnel_ports(), p.inspect_all()),
        (Mode::Blocklist, &[80, 443][..], &[443][..], false)
    );
    let p = policy(ALLOW);
    assert_eq!((p.mode(), p.ports(), p.tunnel_ports()), (Mode::Allowlist, &[80, 8080][..], &[443, 8443][..]));
}

#[test]
fn inline_policies() {
    let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let p = Policy::from_inline(&s(&["api.example.com", ".pypi.org"]), &[]).unwrap();
    assert_eq!(decide_on(&p, Via::ForwardProxy, "http://files.pypi.org/"), "allow rule .pypi.org");
    assert_eq!(decide_on(&p, Via::ForwardProxy, "http://example.com/"), "block not-allowed");
    let p = Policy::from_inline(&[], &s(&["arxiv.org/abs/"])).unwrap();
    assert_eq!(decide_on(&p, Via::ForwardProxy, "http://arxiv.org/abs/1"), "block rule arxiv.org/abs/");
    assert_eq!(p.ports(), &[80, 443]);
    let p = Policy::from_inline(&[], &[]).unwrap();
    assert_eq!(
        (p.mode(), decide_on(&p, Via::ForwardProxy, "http://example.com/")),
        (Mode::Allowlist, "block not-allowed".into())
    );
    let mixed = Policy::from_inline(&s(&["a.com"]), &s(&["b.com"])).unwrap_err();
    assert!(mixed[0].message.contains("cannot be mixed"), "{}", mixed[0]);
    let bad = Policy::from_inline(&s(&["ok.com", "Bad.com", "*.x.com"]), &[]).unwrap_err();
    let entries: Vec<_> = bad.iter().map(|e| (e.entry.as_str(), e.line)).collect();
    assert_eq!(entries, [("--allow[1]", None), ("--allow[2]", None)]);
    let bad = Policy::from_inline(&[], &s(&["x.org", "https://y.org/"])).unwrap_err();
    assert_eq!(bad[0].entry, "--block[1]");
    assert_eq!(bad[0].to_string(), format!("--block[1]: {}", bad[0].message));
}

#[test]
fn decisions_render_their_reason_words() {
    let host = leash_policy::parse_host("x.org").unwrap();
    let d = policy(BLOCK).decide(&Question::Connect { target: &host, port: 80 }, TlsInspection::Available);
    assert_eq!(render(&d), "block port");
    assert_eq!(d.reason.as_str(), "port");
}

#[test]
fn a_policy_that_can_never_inspect_says_so() {
    let may = |text: &str| policy(text).may_inspect();
    let allow = |hosts: &str, extra: &str| format!("network:\n  mode: allowlist\n  allowed_hosts: [{hosts}]\n{extra}");
    assert!(!may(&allow("pypi.org, .pythonhosted.org, 192.0.2.7", "")), "no path rule, no model API");
    assert!(may(&allow("pypi.org", "  allowed_urls: [github.com/rust-lang/]\n")), "a path rule");
    assert!(may(&allow("pypi.org", "  inspect: all\n")));
    assert!(may(&allow("api.anthropic.com", "")), "a model API whose tools are filtered");
    assert!(may(&allow(".anthropic.com", "")), "a subtree holding a model API");
    assert!(may(&allow(".com", "")), "a subtree holding model APIs");
    assert!(may(&allow("a.b.x.org", "  model_apis: ['.x.org']\n")), "under a `.x` model entry");
    assert!(!may(&allow("api.anthropic.com", "  provider_tools: allow\n")), "tools not filtered");
    assert!(may(BLOCK), "a blocklist allows the model APIs");
    let no_filter = "network:\n  mode: blocklist\n  blocked_urls: [example.org]\n  provider_tools: allow\n";
    assert!(!may(no_filter));
    assert!(may(&format!("{no_filter}  inspect: all\n")));
}

#[test]
fn a_lookup_is_decided_on_the_name_with_the_reason_an_audit_line_names() {
    let lookup = |text: &str, host: &str| {
        let host = leash_policy::parse_host(host).unwrap();
        let d = policy(text).decide(&Question::Lookup { host: &host }, TlsInspection::Available);
        render(&d)
    };
    assert_eq!(lookup(ALLOW, "api.example.com"), "allow rule api.example.com");
    assert_eq!(lookup(ALLOW, "files.pypi.org"), "allow rule .pypi.org");
    assert_eq!(lookup(ALLOW, "evil.example"), "block not-allowed");
    assert_eq!(lookup(BLOCK, "api.semanticscholar.org"), "block rule api.semanticscholar.org");
    assert_eq!(lookup(BLOCK, "arxiv.org"), "inspect default", "a path rule: some paths pass");
    assert_eq!(lookup(ALLOW, "192.0.2.7"), "block ip-literal", "addresses are never names");
    let no_ports = "network:\n  mode: blocklist\n  blocked_urls: [x.org]\n  ports: []\n  tunnel_ports: []\n";
    assert_eq!(lookup(no_ports, "example.org"), "block port");
}

/// `Policy::decide` on a whole URL, as `leash explain` asks it.
fn decide_url(text: &str, url: &str, tls: TlsInspection) -> String {
    let target = leash_policy::parse_absolute_target(url).unwrap();
    render(&policy(text).decide(&Question::of_url(&target), tls))
}

#[test]
fn an_https_url_is_its_tunnel_then_the_request_inside_when_inspected() {
    let on = TlsInspection::Available;
    // Spliced: the tunnel's decision is the URL's, whatever the path.
    assert_eq!(decide_url(ALLOW, "https://api.example.com/anything", on), "allow rule api.example.com");
    // Inspected: the path decides.
    assert_eq!(decide_url(ALLOW, "https://github.com/rust-lang/rust", on), "allow rule github.com/rust-lang/");
    assert_eq!(decide_url(ALLOW, "https://github.com/torvalds/linux", on), "block not-allowed");
    assert_eq!(decide_url(BLOCK, "https://arxiv.org/abs/2401.01234", on), "block rule arxiv.org/abs/");
    assert_eq!(decide_url(BLOCK, "https://arxiv.org/list/cs", on), "allow default");
    // Refused on the tunnel: port, then name.
    assert_eq!(decide_url(ALLOW, "https://api.example.com:444/", on), "block port");
    assert_eq!(decide_url(ALLOW, "https://example.com/", on), "block not-allowed");
    // Plain HTTP is one request to the forward proxy.
    assert_eq!(decide_url(ALLOW, "http://github.com/rust-lang/rust", on), "allow rule github.com/rust-lang/");
}

#[test]
fn a_tunnel_that_needs_inspection_is_refused_where_there_is_none() {
    let off = TlsInspection::Unavailable;
    assert_eq!(
        decide_url(ALLOW, "https://github.com/rust-lang/rust", off),
        "block needs-inspection github.com/rust-lang/"
    );
    assert_eq!(decide_url(BLOCK, "https://arxiv.org/list/cs", off), "block needs-inspection");
    // A tunnel that needs none is unaffected.
    assert_eq!(decide_url(ALLOW, "https://api.example.com/", off), "allow rule api.example.com");
    let host = leash_policy::parse_host("github.com").unwrap();
    let p = policy(ALLOW);
    let connect = |tls| render(&p.decide(&Question::Connect { target: &host, port: 443 }, tls));
    assert_eq!(connect(TlsInspection::Available), "inspect rule github.com/rust-lang/");
    assert_eq!(connect(off), "block needs-inspection github.com/rust-lang/");
    let hello = Question::ClientHello { target: &host, port: 443, hello: Hello::ServerName("github.com") };
    assert_eq!(render(&p.decide(&hello, off)), "block needs-inspection github.com/rust-lang/");
}

#[test]
fn audit_mode_lets_through_only_what_the_host_and_path_rules_refuse() {
    let on = TlsInspection::Available;
    let audit = ALLOW.replace("mode: allowlist", "mode: audit");
    let p = policy(&audit);
    assert!(p.audits() && p.mode() == Mode::Allowlist);
    assert_eq!(decide_url(&audit, "https://example.com/", on), "would-block not-allowed");
    assert_eq!(decide_url(&audit, "http://example.com/", on), "would-block not-allowed");
    assert_eq!(decide_url(&audit, "https://github.com/torvalds/linux", on), "would-block not-allowed");
    assert_eq!(decide_url(&audit, "https://api.example.com/", on), "allow rule api.example.com");
    // What learning must not open stays refused.
    assert_eq!(decide_url(&audit, "http://10.0.0.1/", on), "block ip-literal");
    assert_eq!(decide_url(&audit, "https://example.com:444/", on), "block port");
    assert_eq!(decide_url(&audit, "ftp://example.com/", on), "block scheme");
    // `--audit` turns any policy into one: a blocklist's rule refusals become would-block.
    let learning = policy(BLOCK).into_audit();
    let target = leash_policy::parse_absolute_target("https://arxiv.org/abs/2401.01234").unwrap();
    assert_eq!(render(&learning.decide(&Question::of_url(&target), on)), "would-block rule arxiv.org/abs/");
}

#[test]
fn an_empty_audit_policy_loads_without_the_empty_allowlist_warning() {
    let loaded = leash_policy::load("network:\n  mode: audit\n", leash_policy::Format::Yaml, None).unwrap();
    assert!(loaded.policy.audits());
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
}

#[test]
fn audit_mode_holds_a_tunnel_to_an_unlisted_host_to_the_client_hello_checks() {
    let audit = ALLOW.replace("mode: allowlist", "mode: audit");
    let at = "unlisted.example:443";
    assert_eq!(hello(&audit, at, Hello::ServerName("unlisted.example")), "would-block not-allowed");
    assert_eq!(hello(&audit, at, Hello::NoServerName), "block no-sni");
    assert_eq!(hello(&audit, at, Hello::NotTls), "block not-tls");
    assert_eq!(hello(&audit, at, Hello::Ech), "block ech");
    assert_eq!(hello(&audit, at, Hello::ServerName("other.example")), "block host-mismatch");
    // Enforcing, the target's own refusal stands whatever the ClientHello says.
    assert_eq!(hello(ALLOW, at, Hello::NoServerName), "block not-allowed");
}

#[test]
fn ask_mode_holds_a_tunnel_to_an_unlisted_host_to_the_client_hello_checks() {
    // A person's yes is about the name on the tunnel; the ClientHello must still name it, in TLS, without ECH.
    let ask = ALLOW.replace("mode: allowlist", "mode: ask");
    let at = "unlisted.example:443";
    let p = policy(&ask);
    let askable = |rendered: &str| rendered == "block not-allowed";
    assert!(askable(&hello(&ask, at, Hello::ServerName("unlisted.example"))));
    assert_eq!(hello(&ask, at, Hello::NoServerName), "block no-sni");
    assert_eq!(hello(&ask, at, Hello::NotTls), "block not-tls");
    assert_eq!(hello(&ask, at, Hello::Ech), "block ech");
    assert_eq!(hello(&ask, at, Hello::ServerName("other.example")), "block host-mismatch");
    // Only `not-allowed` is held for a person; what no answer may open is refused as before.
    let d = |url: &str| {
        let target = leash_policy::parse_absolute_target(url).unwrap();
        p.decide(&Question::of_url(&target), TlsInspection::Available)
    };
    assert!(p.asks() && p.may_ask(&d("https://unlisted.example/")));
    for refused in ["http://10.0.0.1/", "https://unlisted.example:444/", "ftp://unlisted.example/"] {
        assert!(!p.may_ask(&d(refused)), "{refused} would be asked about");
    }
    assert!(!p.may_ask(&d("https://api.example.com/")), "an allowed host is not asked about");
}

/// A name that spells an address (`1-2-3-4.sslip.io` answers 1.2.3.4) is an IP literal in another spelling: a
/// blocklist refuses it as it refuses every literal, in a request, a tunnel and a lookup (benchflow refuses them too).
/// The services' own names are names; an allowlist decides such names by its entries.
#[test]
fn a_blocklist_refuses_names_that_spell_an_address_as_it_refuses_ip_literals() {
    let decide_url_on = |p: &Policy, url: &str| {
        let target = leash_policy::parse_absolute_target(url).unwrap();
        render(&p.decide(&Question::of_url(&target), TlsInspection::Available))
    };
    let block = policy("network:\n  mode: blocklist\n  blocked_urls: [example.org]\n");
    for url in ["http://1-2-3-4.sslip.io/", "https://10.0.0.1.nip.io/x", "https://app.203-0-113-9.traefik.me/"] {
        assert_eq!(decide_url_on(&block, url), "block ip-literal", "{url}");
    }
    let host = leash_policy::parse_host("1-2-3-4.sslip.io").unwrap();
    let d = block.decide(&Question::Connect { target: &host, port: 443 }, TlsInspection::Available);
    assert_eq!((d.verdict, d.reason), (leash_policy::Verdict::Block, Reason::IpLiteral));
    assert!(!block.name_is_reachable(&host), "the DNS stub answers it nothing");
    assert_eq!(decide_url_on(&block, "https://sslip.io/"), "allow default", "the service's own site");
    let allow = policy("network:\n  mode: allowlist\n  allowed_hosts: [.nip.io]\n");
    assert_eq!(decide_url_on(&allow, "https://1.2.3.4.nip.io/"), "allow rule .nip.io", "the operator listed them");
}
