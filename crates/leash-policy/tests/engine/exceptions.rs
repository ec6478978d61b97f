//! Exceptions in both modes: an allowlist's `blocked_urls`, a blocklist's `allowed_hosts` and `allowed_urls`, decided
//! with the mode's own rules by the most specific entry; what they imply for tunnels decided on the SNI and for
//! inspection; what they cannot re-admit; and `leash check`'s errors and warnings about them.

use leash_policy::{parse_host, ClientHelloFacts as Hello, Format, Host, Overruled, Question, TlsInspection, Via};

use crate::{connect, decide, decide_inner, decide_on, errors, hello, policy, render, warnings};

/// "The internet, but not `.corp.example` — except `jira.corp.example`, and its public pages."
const INTERNET_BUT_CORP: &str = "network:\n  mode: blocklist\n  blocked_urls: [corp.example, arxiv.org/abs/]\n  \
                                 allowed_hosts: [jira.corp.example, .wiki.corp.example]\n  \
                                 allowed_urls: [corp.example/public/, arxiv.org/abs/2401.00001]\n";

/// "PyPI, but not this one project" (and not one of its file hosts).
const PYPI_BUT_ONE: &str = "network:\n  mode: allowlist\n  allowed_hosts: [pypi.org, .pythonhosted.org, 192.0.2.7]\n  \
                            blocked_urls: [pypi.org/project/evil, pypi.org/simple/evil/, bad.files.pythonhosted.org]\n";

#[test]
fn a_blocklist_allows_its_exceptions_inside_what_it_blocks() {
    let p = INTERNET_BUT_CORP;
    assert_eq!(decide(p, "http://example.org/"), "allow default");
    assert_eq!(decide(p, "http://corp.example/"), "block rule corp.example");
    assert_eq!(decide(p, "http://mail.corp.example/"), "block rule corp.example");
    assert_eq!(decide(p, "http://jira.corp.example/browse/X-1"), "allow rule jira.corp.example");
    // An exact exception is that host only; its subdomains stay blocked.
    assert_eq!(decide(p, "http://x.jira.corp.example/"), "block rule corp.example");
    assert_eq!(decide(p, "http://wiki.corp.example/"), "allow rule .wiki.corp.example");
    assert_eq!(decide(p, "http://a.wiki.corp.example/"), "allow rule .wiki.corp.example");
    // A path exception: that prefix, at a `/` boundary and case-sensitively, on that host only.
    assert_eq!(decide(p, "http://corp.example/public/a"), "allow rule corp.example/public/");
    assert_eq!(decide(p, "http://corp.example/public"), "block rule corp.example");
    assert_eq!(decide(p, "http://corp.example/Public/a"), "block rule corp.example");
    assert_eq!(decide(p, "http://mail.corp.example/public/a"), "block rule corp.example");
    assert_eq!(decide(p, "http://arxiv.org/abs/2401.00001"), "allow rule arxiv.org/abs/2401.00001");
    assert_eq!(decide(p, "http://arxiv.org/abs/2401.00001/v2"), "allow rule arxiv.org/abs/2401.00001");
    assert_eq!(decide(p, "http://arxiv.org/abs/2401.00001v2"), "block rule arxiv.org/abs/");
    assert_eq!(decide(p, "http://arxiv.org/abs/2401.00002"), "block rule arxiv.org/abs/");
}

#[test]
fn an_allowlist_refuses_its_exceptions_inside_what_it_allows() {
    let p = PYPI_BUT_ONE;
    assert_eq!(decide(p, "http://pypi.org/simple/requests/"), "allow rule pypi.org");
    assert_eq!(decide(p, "http://pypi.org/project/evil"), "block rule pypi.org/project/evil");
    // Block prefixes are plain and case-insensitive, as in a blocklist.
    assert_eq!(decide(p, "http://pypi.org/Project/EVIL-2/"), "block rule pypi.org/project/evil");
    assert_eq!(decide(p, "http://pypi.org/simple/evil/"), "block rule pypi.org/simple/evil/");
    assert_eq!(decide(p, "http://pypi.org/project/good"), "allow rule pypi.org");
    assert_eq!(decide(p, "http://files.pythonhosted.org/x.whl"), "allow rule .pythonhosted.org");
    assert_eq!(decide(p, "http://bad.files.pythonhosted.org/x.whl"), "block rule bad.files.pythonhosted.org");
    assert_eq!(decide(p, "http://x.bad.files.pythonhosted.org/"), "block rule bad.files.pythonhosted.org");
    assert_eq!(decide(p, "http://example.org/"), "block not-allowed");
    // Re-spellings the canonical form undoes stay refused.
    for url in ["http://pypi.org/project/%65vil", "http://pypi.org/x/../project/evil", "http://pypi.org//project/evil"]
    {
        assert_eq!(decide(p, url), "block rule pypi.org/project/evil", "{url}");
    }
}

#[test]
fn exceptions_nest_and_the_most_specific_entry_decides_whatever_the_file_order() {
    let a = "network:\n  mode: blocklist\n  blocked_urls: [corp.example, secret.jira.corp.example, \
             jira.corp.example/admin]\n  allowed_hosts: [.jira.corp.example]\n  \
             allowed_urls: [jira.corp.example/admin/help]\n";
    let b = "network:\n  mode: blocklist\n  allowed_urls: [jira.corp.example/admin/help]\n  \
             allowed_hosts: [.jira.corp.example]\n  blocked_urls: [jira.corp.example/admin, \
             secret.jira.corp.example, corp.example]\n";
    for p in [a, b] {
        assert_eq!(decide(p, "http://jira.corp.example/"), "allow rule .jira.corp.example");
        assert_eq!(decide(p, "http://jira.corp.example/admin/x"), "block rule jira.corp.example/admin");
        assert_eq!(decide(p, "http://jira.corp.example/admin/help/1"), "allow rule jira.corp.example/admin/help");
        assert_eq!(decide(p, "http://secret.jira.corp.example/"), "block rule secret.jira.corp.example");
        // A block path covers subdomains, and beats a subtree entry naming the same host.
        assert_eq!(decide(p, "http://a.jira.corp.example/admin/x"), "block rule jira.corp.example/admin");
        assert_eq!(decide(p, "http://a.jira.corp.example/x"), "allow rule .jira.corp.example");
        assert_eq!(decide(p, "http://corp.example/"), "block rule corp.example");
    }
    // An exact host beats a subtree on the same name: `corp.example` itself allowed, every subdomain blocked.
    let apex = "network:\n  mode: blocklist\n  blocked_urls: [corp.example]\n  allowed_hosts: [corp.example]\n";
    assert_eq!(decide(apex, "http://corp.example/"), "allow rule corp.example");
    assert_eq!(decide(apex, "http://a.corp.example/"), "block rule corp.example");
}

#[test]
fn tunnels_are_decided_on_the_name_where_no_path_decides_otherwise_and_inspected_where_one_does() {
    let p = INTERNET_BUT_CORP;
    // An exact exception under a blocked subtree is allowed on its SNI, unread.
    assert_eq!(connect(p, "jira.corp.example:443"), "allow rule jira.corp.example");
    assert_eq!(
        hello(p, "jira.corp.example:443", Hello::ServerName("jira.corp.example")),
        "allow rule jira.corp.example"
    );
    assert_eq!(connect(p, "a.wiki.corp.example:443"), "allow rule .wiki.corp.example");
    assert_eq!(connect(p, "mail.corp.example:443"), "block rule corp.example");
    assert_eq!(hello(p, "mail.corp.example:443", Hello::ServerName("mail.corp.example")), "block rule corp.example");
    // A path exception inside a blocked host: that host is opened and inspected, each request decided on its path.
    assert_eq!(connect(p, "corp.example:443"), "inspect rule corp.example/public/");
    assert_eq!(decide_inner(p, "https://corp.example/public/x"), "allow rule corp.example/public/");
    assert_eq!(decide_inner(p, "https://corp.example/private"), "block rule corp.example");
    assert_eq!(connect(p, "arxiv.org:443"), "inspect default");
    // Where no path rule can decide otherwise, the name alone decides.
    assert_eq!(connect(p, "example.org:443"), "allow default");

    let q = PYPI_BUT_ONE;
    // An allowed host with a blocked path is inspected (path rules need inspection, as before).
    assert_eq!(connect(q, "pypi.org:443"), "inspect rule pypi.org");
    assert_eq!(decide_inner(q, "https://pypi.org/project/evil"), "block rule pypi.org/project/evil");
    assert_eq!(decide_inner(q, "https://pypi.org/project/good"), "allow rule pypi.org");
    assert_eq!(connect(q, "files.pythonhosted.org:443"), "allow rule .pythonhosted.org");
    assert_eq!(connect(q, "bad.files.pythonhosted.org:443"), "block rule bad.files.pythonhosted.org");
    assert_eq!(connect(q, "192.0.2.7:443"), "allow rule 192.0.2.7");
    // Without a CA such a host is refused, never spliced unread.
    let host = parse_host("pypi.org").unwrap();
    let d = policy(q).decide(&Question::Connect { target: &host, port: 443 }, TlsInspection::Unavailable);
    assert_eq!(render(&d), "block needs-inspection pypi.org");
    assert!(policy(q).may_inspect() && policy(p).may_inspect());
    assert!(policy(q).host_has_path_rules(&host));
    assert!(!policy(q).host_has_path_rules(&parse_host("files.pythonhosted.org").unwrap()));
}

#[test]
fn lookups_answer_exactly_the_names_some_request_could_reach() {
    let p = policy(INTERNET_BUT_CORP);
    let reachable = |name: &str| p.name_is_reachable(&parse_host(name).unwrap());
    assert!(reachable("jira.corp.example") && reachable("corp.example") && reachable("a.wiki.corp.example"));
    assert!(!reachable("mail.corp.example") && !reachable("x.jira.corp.example"));
    let q = policy(PYPI_BUT_ONE);
    let reachable = |name: &str| q.name_is_reachable(&parse_host(name).unwrap());
    assert!(reachable("pypi.org") && reachable("files.pythonhosted.org"));
    assert!(!reachable("bad.files.pythonhosted.org") && !reachable("example.org"));
}

#[test]
fn an_exception_never_re_admits_what_a_blocklist_refuses_on_its_own() {
    let p = "network:\n  mode: blocklist\n  blocked_urls: [nip.io]\n  allowed_hosts: [10.0.0.1.nip.io]\n  \
             allowed_urls: [1-2-3-4.sslip.io/x]\n";
    assert_eq!(decide(p, "http://10.0.0.1.nip.io/"), "block ip-literal");
    assert_eq!(connect(p, "10.0.0.1.nip.io:443"), "block ip-literal");
    assert_eq!(decide(p, "http://1-2-3-4.sslip.io/x"), "block ip-literal");
    assert_eq!(connect(p, "1-2-3-4.sslip.io:443"), "block ip-literal");
    let w = warnings(p);
    assert!(w.iter().any(|w| w.contains("allowed_hosts[0]") && w.contains("spells an IP address")), "{w:?}");
    // An address as a blocklist's exception is an error: a blocklist refuses every IP literal.
    let e =
        errors("network:\n  mode: blocklist\n  blocked_urls: [x.org]\n  allowed_hosts: [192.0.2.7]\n", Format::Yaml);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].starts_with("4:19 network.allowed_hosts[0]: `192.0.2.7` is an IP address"), "{e:?}");
    // Every other refusal stays one: a port, an IP literal, a scheme.
    assert_eq!(decide(INTERNET_BUT_CORP, "http://jira.corp.example:8080/"), "block port");
    assert_eq!(decide(INTERNET_BUT_CORP, "http://192.0.2.7/"), "block ip-literal");
}

#[test]
fn the_most_specific_entry_beats_the_model_api_and_credential_rules_never() {
    // An allowed exception to a model API host still has its tunnels inspected and its tools filtered.
    let p = "network:\n  mode: blocklist\n  blocked_urls: [anthropic.com]\n  allowed_hosts: [api.anthropic.com]\n";
    assert_eq!(connect(p, "api.anthropic.com:443"), "inspect rule api.anthropic.com");
    assert_eq!(connect(p, "console.anthropic.com:443"), "block rule anthropic.com");
}

#[test]
fn ties_between_an_allow_and_a_block_are_errors_naming_both() {
    let subtree = "network:\n  mode: blocklist\n  blocked_urls: [corp.example]\n  allowed_hosts: [.corp.example]\n";
    let e = errors(subtree, Format::Yaml);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].starts_with(
            "4:19 network.allowed_hosts[0]: `.corp.example` is allowed and `corp.example` \
             (network.blocked_urls[0]) blocked at the same specificity"
        ),
        "{e:?}"
    );
    let path = "network:\n  mode: allowlist\n  allowed_urls: [github.com/Org]\n  blocked_urls: [github.com/org/]\n";
    let e = errors(path, Format::Yaml);
    assert!(e.len() == 1 && e[0].contains("network.allowed_urls[0]: `github.com/Org` is allowed"), "{e:?}");
    // Not ties: an allowed prefix keeping its `/` is longer than the blocked one without it; an exact host is more
    // specific than a subtree.
    assert_eq!(
        decide(
            "network:\n  mode: allowlist\n  allowed_urls: [x.org/a/]\n  blocked_urls: [x.org/a/]\n",
            "http://x.org/a/b"
        ),
        "allow rule x.org/a/"
    );
}

#[test]
fn exceptions_that_change_nothing_are_warned_about() {
    let p = "network:\n  mode: blocklist\n  blocked_urls: [corp.example]\n  \
             allowed_hosts: [jira.corp.example, example.org]\n  allowed_urls: [other.org/x]\n";
    let w = warnings(p);
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(w[0].starts_with("network.allowed_hosts[1]: `example.org` is inside no `blocked_urls` entry"), "{w:?}");
    assert!(w[1].starts_with("network.allowed_urls[0]: `other.org/x` is inside no `blocked_urls` entry"), "{w:?}");
    let q = "network:\n  mode: allowlist\n  allowed_hosts: [pypi.org]\n  blocked_urls: [pypi.org/x, example.org]\n";
    let w = warnings(q);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].starts_with("network.blocked_urls[1]: `example.org` is inside no allowed entry"), "{w:?}");
    // A narrower entry inside a broader one of its own kind is no repeat once an exception lies between them.
    let nested = "network:\n  mode: blocklist\n  blocked_urls: [corp.example, secret.jira.corp.example]\n  \
                  allowed_hosts: [.jira.corp.example]\n";
    assert!(warnings(nested).is_empty(), "{:?}", warnings(nested));
    // A dotted quad in an allowlist's blocked_urls cuts nothing out of anything: refused, saying where it goes.
    let e = errors(
        "network:\n  mode: allowlist\n  allowed_hosts: [192.0.2.7]\n  blocked_urls: [192.0.2.7]\n",
        Format::Yaml,
    );
    assert!(e.len() == 1 && e[0].contains("blocked_urls[0]: `192.0.2.7` is an IP address"), "{e:?}");
}

#[test]
fn an_allow_resting_on_a_path_exception_admits_only_paths_every_server_reads_the_same() {
    let p = INTERNET_BUT_CORP;
    assert_eq!(decide(p, "http://corp.example/public/a"), "allow rule corp.example/public/");
    // Under the exception only once decoded or normalised: a server may read it as a path outside it.
    assert_eq!(decide(p, "http://corp.example/public%2Fa"), "block ambiguous-path");
    assert_eq!(decide(p, "http://corp.example/x%2F..%2Fpublic/a"), "block ambiguous-path");
    assert_eq!(decide(p, "http://corp.example/public/x/../a"), "block ambiguous-path");
    assert_eq!(decide(p, "http://corp.example/public/..%2F..%2Fsecret"), "block rule corp.example");
    // The same spelling where the name is allowed on every path needs no such care.
    let q = "network:\n  mode: allowlist\n  allowed_hosts: [x.org]\n  allowed_urls: [x.org/p/]\n";
    assert_eq!(decide(q, "http://x.org/p/./a"), "allow rule x.org/p/");
}

#[test]
fn audit_and_ask_modes_take_blocked_urls_as_refusals_by_rule() {
    let audit = "network:\n  mode: audit\n  allowed_hosts: [pypi.org]\n  blocked_urls: [pypi.org/project/evil]\n";
    assert_eq!(decide(audit, "http://pypi.org/project/evil"), "would-block rule pypi.org/project/evil");
    let ask = policy("network:\n  mode: ask\n  allowed_hosts: [pypi.org]\n  blocked_urls: [pypi.org/project/evil]\n");
    let d = ask_decision(&ask, "http://pypi.org/project/evil");
    assert!(!ask.may_ask(&d), "a blocked path is a refusal, not a question: {d:?}");
    assert!(ask.may_ask(&ask_decision(&ask, "http://example.org/")));
}

fn ask_decision(p: &leash_policy::Policy, url: &str) -> leash_policy::Decision {
    let target = leash_policy::parse_absolute_target(url).unwrap();
    p.decide(&Question::of_url(&target), TlsInspection::Available)
}

#[test]
fn overruled_names_the_exception_and_the_entry_it_is_cut_out_of() {
    let p = policy(INTERNET_BUT_CORP);
    let name = |n: &str| parse_host(n).unwrap();
    let path = |s: &str| leash_policy::canonicalize(s).unwrap();
    let jira = p.overruled(&name("jira.corp.example"), Some(&path("/x"))).unwrap();
    assert_eq!(
        jira,
        Overruled {
            exception: "jira.corp.example".into(),
            allows: true,
            inside: "corp.example".into(),
            on_some_paths: false
        }
    );
    assert_eq!(p.overruled(&name("jira.corp.example"), None), Some(jira));
    let public = p.overruled(&name("corp.example"), None).unwrap();
    assert_eq!(
        (&*public.exception, &*public.inside, public.on_some_paths),
        ("corp.example/public/", "corp.example", true)
    );
    assert_eq!(p.overruled(&name("example.org"), None), None);
    assert_eq!(p.overruled(&name("mail.corp.example"), Some(&path("/"))), None);
    let q = policy(PYPI_BUT_ONE);
    let evil = q.overruled(&name("pypi.org"), Some(&path("/project/evil"))).unwrap();
    assert_eq!((&*evil.exception, evil.allows, &*evil.inside), ("pypi.org/project/evil", false, "pypi.org"));
    assert_eq!(q.overruled(&Host::Ipv4("192.0.2.7".parse().unwrap()), None), None);
    // The plain decision and the request decision agree with it.
    assert_eq!(decide_on(&q, Via::ForwardProxy, "http://pypi.org/project/evil"), "block rule pypi.org/project/evil");
}
