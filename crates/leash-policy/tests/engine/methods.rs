//! Rules by method and path patterns: read-only hosts, `git fetch` but never `git push`, `network.methods`, how
//! method names are compared, what a tunnel to such a host becomes, and the mistakes `leash check` names.

use leash_policy::{load, Format, PolicyErrorKind, Question, TlsInspection, Via};

use crate::{connect, decide_method_on, policy, render};

/// A git forge readable by anyone, fetchable and clonable, never pushed to; an API to read but not change.
const FORGE: &str =
    "network:\n  mode: allowlist\n  allowed_hosts: ['read-only github.com', 'read-only api.example.com']\n  \
                     allowed_urls: ['POST github.com/*/*/git-upload-pack']\n";

fn inner(yaml: &str, method: &str, url: &str) -> String {
    decide_method_on(&policy(yaml), Via::Tunnel, method, url)
}

fn plain(yaml: &str, method: &str, url: &str) -> String {
    decide_method_on(&policy(yaml), Via::ForwardProxy, method, url)
}

#[test]
fn git_fetch_is_allowed_and_git_push_refused_under_every_repository() {
    let read = "allow rule read-only github.com";
    assert_eq!(inner(FORGE, "GET", "https://github.com/o/r.git/info/refs?service=git-upload-pack"), read);
    assert_eq!(inner(FORGE, "GET", "https://github.com/o/r.git/info/refs?service=git-receive-pack"), read);
    let fetch = "allow rule POST github.com/*/*/git-upload-pack";
    assert_eq!(inner(FORGE, "POST", "https://github.com/o/r.git/git-upload-pack"), fetch);
    assert_eq!(inner(FORGE, "POST", "https://github.com/other/x/git-upload-pack"), fetch);
    let push = "block method-not-allowed read-only github.com";
    assert_eq!(inner(FORGE, "POST", "https://github.com/o/r.git/git-receive-pack"), push);
    // Nothing but the ending under exactly two segments: not a deeper path, not a respelling.
    assert_eq!(inner(FORGE, "POST", "https://github.com/g/sub/r/git-upload-pack"), push.replace("receive", "upload"));
    assert_eq!(inner(FORGE, "POST", "https://github.com/o/git-upload-pack"), push);
    assert_eq!(inner(FORGE, "POST", "https://github.com/o/r/git-upload-packs"), push);
    assert_eq!(inner(FORGE, "POST", "https://github.com/o/r/x/../git-receive-pack"), push);
}

#[test]
fn an_encoded_slash_cannot_hide_inside_a_star() {
    // `%2F` decodes to a separator: `/o%2Fr/x/git-upload-pack` is four segments, not the pattern's three.
    assert_eq!(
        inner(FORGE, "POST", "https://github.com/o%2Fr/x/git-upload-pack"),
        "block method-not-allowed read-only github.com"
    );
    // Three segments canonically, two as a server that keeps `%2F` inside a segment reads it: ambiguous.
    assert_eq!(inner(FORGE, "POST", "https://github.com/o/r%2Fgit-upload-pack"), "block ambiguous-path");
    // An encoded letter is the same segment in every reading.
    let fetch = "allow rule POST github.com/*/*/git-upload-pack";
    assert_eq!(inner(FORGE, "POST", "https://github.com/o/r/%67it-upload-pack"), fetch);
}

#[test]
fn read_only_is_get_head_options_and_names_are_case_sensitive() {
    for ok in ["GET", "HEAD", "OPTIONS"] {
        assert_eq!(inner(FORGE, ok, "https://api.example.com/v1/x"), "allow rule read-only api.example.com", "{ok}");
    }
    for refused in ["POST", "PUT", "PATCH", "DELETE", "TRACE", "PROPFIND", "BREW", "get", "Get", "CONNECT"] {
        assert_eq!(
            inner(FORGE, refused, "https://api.example.com/v1/x"),
            "block method-not-allowed read-only api.example.com",
            "{refused}"
        );
    }
    assert_eq!(inner(FORGE, "GET", "https://example.org/"), "block not-allowed", "no entry: not a method refusal");
}

#[test]
fn an_entry_without_methods_admits_every_method_and_entries_add_up() {
    let p = "network:\n  mode: allowlist\n  allowed_hosts: ['GET a.org', 'POST a.org', b.org]\n";
    assert_eq!(plain(p, "GET", "http://a.org/"), "allow rule GET a.org");
    assert_eq!(plain(p, "POST", "http://a.org/"), "allow rule POST a.org");
    assert_eq!(plain(p, "PUT", "http://a.org/"), "block method-not-allowed GET a.org");
    for any in ["PUT", "PROPFIND", "BREW", "get"] {
        assert_eq!(plain(p, any, "http://b.org/"), "allow rule b.org", "{any}");
    }
}

#[test]
fn network_methods_is_what_entries_without_their_own_admit() {
    let p = "network:\n  mode: allowlist\n  methods: read-only\n  allowed_hosts: [docs.rs, 'POST api.anthropic.com']\n";
    assert_eq!(plain(p, "GET", "http://docs.rs/"), "allow rule docs.rs");
    assert_eq!(plain(p, "POST", "http://docs.rs/"), "block method-not-allowed docs.rs");
    assert_eq!(plain(p, "POST", "http://api.anthropic.com/v1/messages"), "allow rule POST api.anthropic.com");
    assert_eq!(plain(p, "GET", "http://api.anthropic.com/"), "block method-not-allowed POST api.anthropic.com");
    let b = "network:\n  mode: blocklist\n  methods: [GET, HEAD]\n  blocked_urls: [evil.example]\n";
    assert_eq!(plain(b, "HEAD", "http://example.org/"), "allow default");
    assert_eq!(plain(b, "OPTIONS", "http://example.org/"), "block method-not-allowed methods: GET HEAD");
    assert_eq!(plain(b, "GET", "http://evil.example/"), "block rule evil.example");
}

#[test]
fn a_blocklist_entry_with_methods_refuses_only_those_besides_every_other_entry() {
    let p = "network:\n  mode: blocklist\n  blocked_urls: ['POST github.com/*/*/git-receive-pack', \
             'DELETE PUT api.example.com', api.example.com/admin]\n";
    let push = "block rule POST github.com/*/*/git-receive-pack";
    assert_eq!(plain(p, "POST", "http://github.com/o/r.git/git-receive-pack"), push);
    assert_eq!(plain(p, "POST", "http://www.github.com/o/r/GIT-RECEIVE-PACK"), push, "subdomains, any case");
    assert_eq!(plain(p, "POST", "http://github.com/o/r.git/git-upload-pack"), "allow default");
    assert_eq!(plain(p, "GET", "http://github.com/o/r.git/git-receive-pack"), "allow default");
    assert_eq!(plain(p, "PUT", "http://api.example.com/x"), "block rule DELETE PUT api.example.com");
    assert_eq!(plain(p, "GET", "http://api.example.com/x"), "allow default");
    assert_eq!(plain(p, "GET", "http://api.example.com/admin/x"), "block rule api.example.com/admin");
}

#[test]
fn a_host_decided_by_method_is_inspected_never_spliced() {
    assert_eq!(connect(FORGE, "github.com:443"), "inspect rule read-only github.com");
    let blocks = "network:\n  mode: blocklist\n  blocked_urls: ['POST api.example.com']\n";
    assert_eq!(connect(blocks, "api.example.com:443"), "inspect default");
    assert_eq!(connect(blocks, "example.org:443"), "allow default");
    let only_post = "network:\n  mode: allowlist\n  allowed_urls: ['POST api.example.com/v1/']\n";
    assert_eq!(connect(only_post, "api.example.com:443"), "inspect rule POST api.example.com/v1/");
    let everywhere = "network:\n  mode: blocklist\n  methods: read-only\n  blocked_urls: []\n";
    assert_eq!(connect(everywhere, "example.org:443"), "inspect default");
    // Without a CA such a tunnel is refused, not spliced undecided.
    let p = policy(FORGE);
    let host = leash_policy::parse_host("github.com").unwrap();
    let d = p.decide(&Question::Connect { target: &host, port: 443 }, TlsInspection::Unavailable);
    assert_eq!(render(&d), "block needs-inspection read-only github.com");
    assert!(p.may_inspect() && policy(everywhere).may_inspect());
}

#[test]
fn explain_asks_the_method_given() {
    let p = policy(FORGE);
    let target = leash_policy::parse_absolute_target("https://github.com/o/r/git-receive-pack").unwrap();
    let asked = |m| render(&p.decide(&Question::of_request(m, &target), TlsInspection::Available));
    assert_eq!(asked("GET"), "allow rule read-only github.com");
    assert_eq!(asked("POST"), "block method-not-allowed read-only github.com");
    assert_eq!(render(&p.decide(&Question::of_url(&target), TlsInspection::Available)), asked("GET"));
}

#[test]
fn audit_mode_lets_a_method_refusal_through_as_would_block() {
    let audit = FORGE.replace("mode: allowlist", "mode: audit");
    assert_eq!(
        inner(&audit, "PUT", "https://api.example.com/"),
        "would-block method-not-allowed read-only api.example.com"
    );
}

fn errors(yaml: &str) -> Vec<String> {
    match load(yaml, Format::Yaml, None) {
        Ok(_) => Vec::new(),
        Err(errors) => errors.iter().map(|e| format!("{}: {}", e.entry, e.message)).collect(),
    }
}

fn kinds(yaml: &str) -> Vec<PolicyErrorKind> {
    load(yaml, Format::Yaml, None).err().unwrap_or_default().iter().map(|e| e.kind).collect()
}

#[test]
fn check_names_each_method_mistake() {
    let allow = |entry: &str| format!("network:\n  mode: allowlist\n  allowed_hosts: ['{entry}']\n");
    assert_eq!(
        errors(&allow("get api.example.com")),
        ["network.allowed_hosts[0]: `get` is not `GET`: method names are case-sensitive (RFC 9110); write `GET`"]
    );
    assert_eq!(
        errors(&allow("GTE api.example.com")),
        ["network.allowed_hosts[0]: unknown method `GTE`; did you mean `GET`?"]
    );
    assert_eq!(
        errors(&allow("read_only api.example.com")),
        ["network.allowed_hosts[0]: unknown method `read_only`; did you mean `read-only`?"]
    );
    assert!(errors(&allow("CONNECT api.example.com"))[0].contains("decided on its host and port"));
    assert!(errors(&allow("GET 192.0.2.7"))[0].contains("an IP address entry cannot list methods"));
    assert!(errors(&allow("GET HEAD"))[0].contains("lists methods but no host"));
    assert_eq!(kinds(&allow("GTE api.example.com")), [PolicyErrorKind::BadMethod]);
    let network = |line: &str| format!("network:\n  mode: allowlist\n{line}\n");
    assert!(errors(&network("  methods: []"))[0].contains("no methods: every request would be refused"));
    assert_eq!(
        errors(&network("  methods: [GET, Head]")),
        ["network.methods: `Head` is not `HEAD`: method names are case-sensitive (RFC 9110); write `HEAD`"]
    );
    assert!(errors(&network("  methods: 3"))[0].contains("expected a list of methods"));
    // Lists whose entries cannot carry methods say so instead of "uppercase letters".
    let models = network("  allowed_hosts: [a.org]\n  model_apis: ['POST llm.corp.example']");
    assert!(errors(&models)[0].contains("only allowed_hosts, allowed_urls and blocked_urls entries carry"));
}

#[test]
fn check_names_each_pattern_mistake() {
    let url = |entry: &str| format!("network:\n  mode: blocklist\n  blocked_urls: ['{entry}']\n");
    assert!(errors(&url("github.com/**/git-receive-pack"))[0].contains("there is no `**`"));
    let inside = errors(&url("github.com/*/r*/git-receive-pack"));
    assert!(inside[0].contains("a `*` stands only for one whole segment between others"), "{inside:?}");
    assert!(errors(&url("github.com/o/*"))[0].contains("`github.com/o/` already covers every path under it"));
    assert!(errors(&url("github.com/o/%2A/x"))[0].contains("a path with a literal `*` cannot be named"));
    assert!(errors(&url("*.github.com/o/x"))[0].contains("has a `*`"));
    assert!(errors(&url("github.com/*/*/git-receive-pack")).is_empty());
    let allow = "network:\n  mode: allowlist\n  allowed_urls: ['github.com/*/x']\n  allowed_hosts: ['*/x']\n";
    assert_eq!(errors(allow).len(), 1, "the host entry only: {:?}", errors(allow));
}

#[test]
fn toml_and_json_spell_methods_as_yaml_does() {
    let toml = "[network]\nmode = \"allowlist\"\nmethods = [\"read-only\"]\nallowed_hosts = [\"docs.rs\"]\n\
                allowed_urls = [\"POST github.com/*/*/git-upload-pack\"]\n";
    let json = r#"{"network": {"mode": "allowlist", "methods": "read-only", "allowed_hosts": ["docs.rs"],
                  "allowed_urls": ["POST github.com/*/*/git-upload-pack"]}}"#;
    for (text, format) in [(toml, Format::Toml), (json, Format::Json)] {
        let p = load(text, format, None).unwrap().policy;
        assert_eq!(decide_method_on(&p, Via::Tunnel, "PUT", "https://docs.rs/x"), "block method-not-allowed docs.rs");
        let fetch = decide_method_on(&p, Via::Tunnel, "POST", "https://github.com/o/r/git-upload-pack");
        assert_eq!(fetch, "allow rule POST github.com/*/*/git-upload-pack");
    }
}

#[test]
fn entries_listing_methods_are_neither_repeats_nor_covered() {
    let warnings = |yaml: &str| -> Vec<String> {
        load(yaml, Format::Yaml, None).unwrap().warnings.iter().map(|w| w.to_string()).collect()
    };
    assert_eq!(warnings(FORGE), Vec::<String>::new());
    let p = "network:\n  mode: allowlist\n  allowed_hosts: ['GET a.org', 'POST a.org', b.org, b.org]\n";
    assert_eq!(warnings(p), ["network.allowed_hosts[3]: `b.org` repeats network.allowed_hosts[2]"]);
    let b = "network:\n  mode: blocklist\n  blocked_urls: ['DELETE api.x.org', api.x.org/admin]\n";
    assert_eq!(warnings(b), Vec::<String>::new());
}

/// Rules by method meet exceptions (written apart, merged later): an allow entry listing methods never lifts a
/// `blocked_urls` exception, a path pattern still decides in a policy with exceptions, and an exception may not list
/// methods (refused, rather than weighed against rules by method).
#[test]
fn rules_by_method_and_exceptions_decide_together_and_never_open_what_either_refuses() {
    let allow = crate::policy(
        "network:\n  mode: allowlist\n  allowed_hosts: ['GET api.test']\n  blocked_urls: [api.test/admin]\n",
    );
    let get = |url: &str| crate::decide_method_on(&allow, Via::ForwardProxy, "GET", url);
    assert_eq!(get("http://api.test/admin/users"), "block rule api.test/admin");
    assert_eq!(get("http://api.test/v1"), "allow rule GET api.test");
    let block = crate::policy(
        "network:\n  mode: blocklist\n  blocked_urls: [github.com/*/*/git-receive-pack]\n  allowed_urls: [github.com/org/]\n",
    );
    let post = |url: &str| crate::decide_method_on(&block, Via::ForwardProxy, "POST", url);
    assert_eq!(post("http://github.com/org/repo/git-receive-pack"), "block rule github.com/*/*/git-receive-pack");
    assert_eq!(post("http://github.com/org/repo/git-upload-pack"), "allow rule github.com/org/");
    for (mode, list) in [("blocklist", "allowed_hosts"), ("blocklist", "allowed_urls"), ("allowlist", "blocked_urls")] {
        let text = format!("network:\n  mode: {mode}\n  allowed_hosts: [x.test]\n  {list}: ['POST x.test/a']\n");
        let text = if mode == "blocklist" { text.replace("  allowed_hosts: [x.test]\n", "") } else { text };
        let errors = crate::errors(&text, leash_policy::Format::Yaml);
        assert!(errors.iter().any(|e| e.contains("cannot list methods")), "{mode} {list}: {errors:?}");
    }
}

/// A path pattern against a literal path of the other kind (an exception): the longer written path decides, and a
/// literal as long as the pattern wins the tie for the block rule — an allowed `*` never reopens a path blocked by
/// name (`/*/ab` over a blocked `/a/ab` was allowed before the merge's fix).
#[test]
fn a_pattern_meets_a_literal_path_of_the_other_kind() {
    let decide = |yaml: &str, url: &str| crate::decide_method_on(&crate::policy(yaml), Via::ForwardProxy, "GET", url);
    let tie = "network:\n  mode: blocklist\n  blocked_urls: [ab.test/a/ab]\n  allowed_urls: ['ab.test/*/ab']\n";
    assert_eq!(decide(tie, "http://ab.test/a/ab"), "block rule ab.test/a/ab");
    let tie = "network:\n  mode: allowlist\n  allowed_urls: [d.test/a/a]\n  blocked_urls: ['d.test/*/a']\n";
    assert_eq!(decide(tie, "http://d.test/a/a"), "block rule d.test/*/a");
    let longer =
        "network:\n  mode: blocklist\n  blocked_urls: [gh.test/org/]\n  allowed_urls: ['gh.test/*/*/info/refs']\n";
    assert_eq!(decide(longer, "http://gh.test/org/repo/info/refs"), "allow rule gh.test/*/*/info/refs");
    assert_eq!(decide(longer, "http://gh.test/org/repo/issues"), "block rule gh.test/org/");
}
