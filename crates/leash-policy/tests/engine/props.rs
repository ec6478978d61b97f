//! Properties: canonicalisation is idempotent; a blocked path stays blocked under every re-spelling the
//! canonicaliser undoes; the compiled matcher agrees with a naive linear scan, rules by method, path patterns and
//! rules of both kinds (exceptions) included; no input makes a parser or the engine panic, what the engine decides on
//! arbitrary text (and methods) keeps its invariants, and what `explain` asks of an `https` URL is what the proxy's
//! steps decide.

use std::net::Ipv4Addr;

use leash_policy::{
    canonicalize, load, parse_absolute_target, parse_authority, parse_host, AbsoluteTarget, ClientHelloFacts, Decision,
    Format, Host, Mode, Policy, Question, Request, TlsInspection, Verdict, Via,
};
use proptest::prelude::*;
use proptest::sample::select;

use crate::decide_on;

/// Path segments that are not dot segments and hold no character the canonicaliser treats specially.
fn segment() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_~.-]{1,6}".prop_filter("not a dot segment", |s| s != "." && s != "..")
}

fn canonical_path() -> impl Strategy<Value = String> {
    proptest::collection::vec(segment(), 1..5).prop_map(|segs| format!("/{}", segs.join("/")))
}

/// One way to re-spell a character or a segment boundary that canonicalisation undoes.
#[derive(Debug, Clone, Copy)]
enum Respell {
    Keep,
    Encode,
    EncodeLowerHex,
    DoubleEncode,
    FlipCase,
}

fn respell_char(c: char, how: Respell) -> String {
    let hex = |c: char| format!("%{:02X}", c as u32);
    match how {
        Respell::Keep => c.to_string(),
        Respell::Encode => hex(c),
        Respell::EncodeLowerHex => hex(c).to_lowercase(),
        Respell::DoubleEncode => format!("%25{:02X}", c as u32),
        Respell::FlipCase if c.is_ascii_lowercase() => c.to_ascii_uppercase().to_string(),
        Respell::FlipCase => c.to_ascii_lowercase().to_string(),
    }
}

/// What to insert after a `/`: things that vanish under canonicalisation.
fn respell_slash(how: u8) -> &'static str {
    match how % 8 {
        0 => "/./",
        1 => "/x/../",
        2 => "//",
        3 => "\\",
        4 => "%2f",
        5 => "%252F",
        6 => "/%2e/",
        _ => "/",
    }
}

fn respell(path: &str, chars: &[Respell], slashes: &[u8], params: &[bool]) -> String {
    let mut out = String::new();
    for (i, c) in path.chars().enumerate() {
        if c == '/' {
            // `;p` closes the segment before this slash (never the leading one).
            if i > 0 && params.get(i).copied().unwrap_or(false) {
                out.push_str(";p=1");
            }
            let spelled = respell_slash(slashes.get(i).copied().unwrap_or(7));
            // The path's first byte must stay a real `/`: before it, everything is the authority.
            if i == 0 && !spelled.starts_with('/') {
                out.push('/');
            }
            out.push_str(spelled);
        } else {
            out.push_str(&respell_char(c, chars.get(i).copied().unwrap_or(Respell::Keep)));
        }
    }
    out
}

fn respellings() -> impl Strategy<Value = Respell> {
    prop_oneof![
        3 => Just(Respell::Keep),
        1 => Just(Respell::Encode),
        1 => Just(Respell::EncodeLowerHex),
        1 => Just(Respell::DoubleEncode),
        1 => Just(Respell::FlipCase),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn canonicalisation_is_idempotent(raw in "[/a-zA-Z0-9%.;?\\\\é ~-]{0,24}") {
        if let Ok(once) = canonicalize(&raw) {
            prop_assert_eq!(canonicalize(once.as_str()), Ok(once.clone()), "raw {:?}", raw);
        }
    }

    #[test]
    fn canonicalisation_is_idempotent_on_any_text(raw in any::<String>()) {
        if let Ok(once) = canonicalize(&raw) {
            prop_assert_eq!(canonicalize(once.as_str()), Ok(once.clone()));
        }
    }

    #[test]
    fn a_blocked_path_stays_blocked_however_it_is_spelled(
        path in canonical_path(),
        cut in 1usize..40,
        chars in proptest::collection::vec(respellings(), 40),
        slashes in proptest::collection::vec(any::<u8>(), 40),
        params in proptest::collection::vec(any::<bool>(), 40),
        sub in "(|[a-z]{1,4}\\.)",
        query in "(|\\?[a-z=&]{0,6})",
    ) {
        let prefix: String = path.chars().take(cut.min(path.len())).collect();
        let rule = format!("h.org{prefix}");
        let policy = load(&format!("network:\n  mode: blocklist\n  blocked_urls: ['{rule}']\n"), Format::Yaml, None)
            .map_err(|e| TestCaseError::fail(format!("{e:?}")))?.policy;
        let url = format!("http://{sub}H.org{}{query}", respell(&path, &chars, &slashes, &params));
        prop_assert_eq!(decide_on(&policy, Via::ForwardProxy, &url), format!("block rule {rule}"), "url {}", url);
    }

    #[test]
    fn no_input_panics_the_parsers(raw in any::<String>()) {
        let _ = parse_host(&raw);
        let _ = parse_authority(&raw);
        let _ = canonicalize(&raw);
        let _ = parse_absolute_target(&raw);
        let _ = parse_absolute_target(&format!("http://{raw}"));
        let _ = load(&raw, Format::Yaml, None);
        let _ = load(&raw, Format::Toml, Some("x"));
    }

    #[test]
    fn no_policy_like_text_panics_the_loader(
        tokens in proptest::collection::vec(
            prop_oneof![
                Just("network:\n"), Just("  mode: allowlist\n"), Just("  mode: blocklist\n"), Just("profiles:\n"),
                Just("  p:\n"), Just("    network: {mode: blocklist}\n"), Just("  allowed_hosts: ["),
                Just("  blocked_urls: ["), Just("]\n"), Just("a.com, "), Just(".b.org, "), Just("x.org/p, "),
                Just("192.0.2.1, "), Just("'[::1]', "), Just("  ports: [0, 80, 65536]\n"), Just("&a "), Just("*a "),
                Just("- "), Just("{"), Just("}"), Just("\"\\u0000\""), Just("  inspect: all\n"), Just("\t"),
            ],
            0..24,
        )
    ) {
        let text: String = tokens.concat();
        let _ = load(&text, Format::Yaml, None);
        let _ = load(&text, Format::Yaml, Some("p"));
    }
}

/// A rule of a random policy, as the naive scan sees it.
#[derive(Debug, Clone)]
struct NaiveRule {
    text: String,
    host: String,
    /// `.x` in `allowed_hosts`: host and subdomains. Block entries always cover subdomains.
    subtree: bool,
    path: Option<String>,
    /// The methods the entry lists (`read-only` spelled out); `None` when it lists none.
    methods: Option<Vec<&'static str>>,
}

/// Whether `path` is named by the pattern `pattern` (`*` segments): segment by segment, a `*` any non-empty one,
/// then anything below (only something below when the pattern ends in `/`).
fn naive_pattern_match(pattern: &str, path: &str, fold: bool) -> bool {
    let (pattern, below) = pattern.strip_suffix('/').map_or((pattern, false), |p| (p, true));
    let want: Vec<&str> = pattern.split('/').skip(1).collect();
    let got: Vec<&str> = path.split('/').skip(1).collect();
    let same = |w: &str, g: &str| if fold { w.eq_ignore_ascii_case(g) } else { w == g };
    got.len() >= want.len() + usize::from(below)
        && want.iter().zip(&got).all(|(w, g)| if *w == "*" { !g.is_empty() } else { same(w, g) })
}

fn is_pattern(p: &str) -> bool {
    p.split('/').any(|s| s == "*")
}

/// The most specific matching rule by the documented order: longer host suffix; then, for allow rules, pattern,
/// url, exact, `.x` in that order, and for block rules pattern, path, host; then longer path, or for patterns more
/// segments and fewer `*`; ties name the smaller text.
fn naive_best<'a>(rules: &'a [NaiveRule], block: bool, host: &str, path: &str) -> Option<&'a str> {
    let covers = |h: &str| host == h || host.ends_with(&format!(".{h}"));
    let lower = path.to_ascii_lowercase();
    let matches = |r: &NaiveRule| match (&r.path, block) {
        (Some(p), true) if is_pattern(p) => covers(&r.host) && naive_pattern_match(p, path, true),
        (Some(p), false) if is_pattern(p) => host == r.host && naive_pattern_match(p, path, false),
        (None, true) => covers(&r.host),
        (Some(p), true) => covers(&r.host) && lower.starts_with(&p.to_ascii_lowercase()),
        (None, false) if r.subtree => covers(&r.host),
        (None, false) => host == r.host,
        (Some(p), false) => {
            let boundary = || p.ends_with('/') || path.len() == p.len() || path[p.len()..].starts_with('/');
            host == r.host && path.starts_with(p.as_str()) && boundary()
        }
    };
    let class = |r: &NaiveRule| match (&r.path, r.subtree) {
        (Some(p), _) if is_pattern(p) => 3,
        (Some(_), _) => 2,
        (None, false) => 1,
        (None, true) => 0,
    };
    let length = |r: &NaiveRule| match &r.path {
        Some(p) if is_pattern(p) => {
            let segments = p.trim_end_matches('/').split('/').count();
            (segments, std::cmp::Reverse(p.split('/').filter(|s| *s == "*").count()))
        }
        p => (p.as_ref().map_or(0, |p| p.len()), std::cmp::Reverse(0)),
    };
    let key = |r: &NaiveRule| (r.host.len(), class(r), length(r));
    let best = rules.iter().filter(|r| matches(r)).map(key).max()?;
    rules.iter().filter(|r| matches(r) && key(r) == best).map(|r| r.text.as_str()).min()
}

fn naive_host() -> impl Strategy<Value = String> {
    prop_oneof![Just("b.c"), Just("a.b.c"), Just("x.a.b.c"), Just("c"), Just("ab.c"), Just("d.e")]
        .prop_map(String::from)
}

fn naive_path() -> impl Strategy<Value = String> {
    proptest::collection::vec(prop_oneof![Just("a"), Just("A"), Just("ab"), Just("b"), Just("a-b")], 1..4)
        .prop_map(|segs| format!("/{}", segs.join("/")))
}

/// A rule's path: segments, some of them `*` (never the last, which the loader refuses).
fn naive_rule_path() -> impl Strategy<Value = String> {
    let segment =
        prop_oneof![4 => Just("a"), 1 => Just("A"), 2 => Just("ab"), 2 => Just("b"), 1 => Just("a-b"), 2 => Just("*")];
    (proptest::collection::vec(segment, 0..3), prop_oneof![Just("a"), Just("b"), Just("ab")]).prop_map(
        |(mut segs, last)| {
            segs.push(last);
            format!("/{}", segs.join("/"))
        },
    )
}

/// The method words an entry may list, and what they stand for.
const METHOD_WORDS: &[(&str, &[&str])] = &[
    ("GET", &["GET"]),
    ("read-only", &["GET", "HEAD", "OPTIONS"]),
    ("POST", &["POST"]),
    ("GET POST", &["GET", "POST"]),
    ("DELETE PUT", &["DELETE", "PUT"]),
];

/// The methods a generated request uses: known ones, one in the wrong case, one no rule can list.
const REQUEST_METHODS: &[&str] = &["GET", "HEAD", "OPTIONS", "POST", "PUT", "DELETE", "PROPFIND", "get", "BREW"];

fn naive_rule(block: bool) -> impl Strategy<Value = NaiveRule> {
    let methods = proptest::option::weighted(0.4, select(METHOD_WORDS));
    (naive_host(), any::<bool>(), proptest::option::of((naive_rule_path(), any::<bool>())), methods).prop_map(
        move |(host, subtree, path, methods)| {
            let path = path.map(|(p, slash)| if slash { format!("{p}/") } else { p });
            let subtree = !block && subtree && path.is_none();
            let text = match (&path, subtree) {
                (Some(p), _) => format!("{host}{p}"),
                (None, true) => format!(".{host}"),
                (None, false) => host.clone(),
            };
            let text = match methods {
                Some((words, _)) => format!("{words} {text}"),
                None => text,
            };
            // A blocked prefix is the path without its trailing `/` (docs/policy.md).
            let path =
                if block { path.map(|p| p.trim_end_matches('/').to_owned()).filter(|p| !p.is_empty()) } else { path };
            NaiveRule { text, host, subtree, path, methods: methods.map(|(_, m)| m.to_vec()) }
        },
    )
}

/// The decision by the documented rules for methods (docs/policy.md, "Methods and path patterns"), over naive scans.
fn naive_decision(
    rules: &[NaiveRule],
    block: bool,
    default: Option<(&str, &[&str])>,
    at: (&str, &str, &str),
) -> String {
    let (host, path, method) = at;
    let default_admits = default.is_none_or(|(_, methods)| methods.contains(&method));
    let plain: Vec<NaiveRule> = rules.iter().filter(|r| r.methods.is_none()).cloned().collect();
    let listing: Vec<NaiveRule> =
        rules.iter().filter(|r| r.methods.as_ref().is_some_and(|m| m.contains(&method))).cloned().collect();
    if block {
        if let Some(rule) = naive_best(&plain, true, host, path).or(naive_best(&listing, true, host, path)) {
            return format!("block rule {rule}");
        }
        return match default {
            Some((words, _)) if !default_admits => format!("block method-not-allowed methods: {words}"),
            _ => "allow default".to_owned(),
        };
    }
    match naive_best(&plain, false, host, path) {
        Some(rule) if default_admits => return format!("allow rule {rule}"),
        _ => {}
    }
    if let Some(rule) = naive_best(&listing, false, host, path) {
        return format!("allow rule {rule}");
    }
    match naive_best(rules, false, host, path) {
        Some(rule) => format!("block method-not-allowed {rule}"),
        None => "block not-allowed".to_owned(),
    }
}

fn policy_of(rules: &[NaiveRule], block: bool) -> Policy {
    policy_with(rules, block, None)
}

/// The policy of `rules`, with `methods: <default>` when given.
fn policy_with(rules: &[NaiveRule], block: bool, default: Option<&str>) -> Policy {
    let quoted = |r: &NaiveRule| format!("'{}'", r.text);
    let methods = default.map(|words| format!("  methods: {words}\n")).unwrap_or_default();
    let text = if block {
        let all: Vec<_> = rules.iter().map(quoted).collect();
        format!("network:\n  mode: blocklist\n{methods}  blocked_urls: [{}]\n", all.join(", "))
    } else {
        let hosts: Vec<_> = rules.iter().filter(|r| r.path.is_none()).map(quoted).collect();
        let urls: Vec<_> = rules.iter().filter(|r| r.path.is_some()).map(quoted).collect();
        format!(
            "network:\n  mode: allowlist\n{methods}  allowed_hosts: [{}]\n  allowed_urls: [{}]\n",
            hosts.join(", "),
            urls.join(", ")
        )
    };
    load(&text, Format::Yaml, None).unwrap_or_else(|e| panic!("{e:?}\n{text}")).policy
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_compiled_matcher_agrees_with_a_linear_scan(
        block in any::<bool>(),
        rules in proptest::collection::vec(naive_rule(true), 0..12),
        allow_rules in proptest::collection::vec(naive_rule(false), 0..12),
        requests in proptest::collection::vec((naive_host(), naive_path(), any::<bool>()), 1..16),
    ) {
        // Without methods: the rules as they were before entries could list any.
        let rules: Vec<NaiveRule> = if block { rules } else { allow_rules };
        let rules: Vec<NaiveRule> = rules.into_iter().filter(|r| r.methods.is_none()).collect();
        let policy = policy_of(&rules, block);
        for (host, path, slash) in requests {
            let path = if slash { format!("{path}/") } else { path };
            let want = match (naive_best(&rules, block, &host, &path), block) {
                (Some(rule), true) => format!("block rule {rule}"),
                (None, true) => "allow default".to_owned(),
                (Some(rule), false) => format!("allow rule {rule}"),
                (None, false) => "block not-allowed".to_owned(),
            };
            let got = decide_on(&policy, Via::ForwardProxy, &format!("http://{host}{path}"));
            prop_assert_eq!(got, want, "{} {} under {:?}", host, path, rules);
        }
    }

    #[test]
    fn rules_by_method_and_patterns_agree_with_a_linear_scan(
        block in any::<bool>(),
        rules in proptest::collection::vec(naive_rule(true), 0..12),
        allow_rules in proptest::collection::vec(naive_rule(false), 0..12),
        default in proptest::option::of(select(vec![("read-only", &["GET", "HEAD", "OPTIONS"][..]), ("[GET, POST]", &["GET", "POST"][..])])),
        requests in proptest::collection::vec((naive_host(), naive_path(), any::<bool>(), select(REQUEST_METHODS)), 1..16),
    ) {
        let rules = if block { rules } else { allow_rules };
        let policy = policy_with(&rules, block, default.map(|(words, _)| words));
        // The setting as decisions name it: its words as written, brackets and commas aside.
        let named = default.map(|(words, methods)| (if words == "read-only" { "read-only".to_owned() } else { methods.join(" ") }, methods));
        let default = named.as_ref().map(|(w, m)| (w.as_str(), *m));
        for (host, path, slash, method) in requests {
            let path = if slash { format!("{path}/") } else { path };
            let want = naive_decision(&rules, block, default, (&host, &path, method));
            let url = format!("http://{host}{path}");
            let got = crate::decide_method_on(&policy, Via::ForwardProxy, method, &url);
            prop_assert_eq!(got, want, "{} {} under {:?} (methods {:?})", method, url, rules, default);
        }
    }
}

/// Names a generated policy lists (two of them built-in model APIs), and the dotted quads an allowlist may list.
const NAMES: &[&str] = &["a.com", "b.a.com", "x.org", "c.d.e.net", "api.anthropic.com", "api.openai.com"];
const IPS: &[&str] = &["192.0.2.1", "10.0.0.1", "127.0.0.1"];
const PATHS: &[&str] = &["/", "/p", "/p/", "/v1/messages", "/a-b/c", "/*/p", "/*/*/git-upload-pack"];

/// Host spellings that reach the engine's corners: listed names re-spelled, and every IP-literal form.
const SPELLINGS: &[&str] = &[
    "A.COM",
    "a.com.",
    "B.a.com",
    "z.b.a.com",
    "192.0.2.1",
    "192.0.2.1.",
    "0300.0.2.1",
    "0xc0.0.2.1",
    "3221225985",
    "192.0.513",
    "192.0.2.01",
    "127.1",
    "10.0.0.1",
    "[::1]",
    "[::ffff:192.0.2.1]",
    "[::ffff:c000:201]",
    "1.2.3.4",
    "a.com.0x1",
    "x.org.1",
    "user@a.com",
    "a%2ecom",
    "a..com",
    "",
];

/// One entry of a generated policy.
#[derive(Debug, Clone)]
enum Entry {
    Exact(&'static str),
    Subtree(&'static str),
    Ipv4(&'static str),
    Url(&'static str, &'static str),
    /// An entry listing methods before its host (never an address: the loader refuses that).
    Methods(&'static str, Box<Entry>),
}

/// A valid policy built from generated entries, with what the properties need to know about it.
#[derive(Debug)]
struct Generated {
    yaml: String,
    policy: Policy,
    /// Dotted quads an allowlist lists (a blocklist allows none).
    listed_ips: Vec<Ipv4Addr>,
}

fn entry() -> impl Strategy<Value = Entry> {
    let named = prop_oneof![
        select(NAMES).prop_map(Entry::Exact),
        select(NAMES).prop_map(Entry::Subtree),
        (select(NAMES), select(PATHS)).prop_map(|(n, p)| Entry::Url(n, p)),
    ];
    let words = select(METHOD_WORDS.iter().map(|(w, _)| *w).collect::<Vec<_>>());
    prop_oneof![
        4 => named.clone(),
        1 => select(IPS).prop_map(Entry::Ipv4),
        2 => (words, named).prop_map(|(w, e)| Entry::Methods(w, Box::new(e))),
    ]
}

fn quoted(items: &[String]) -> String {
    items.iter().map(|i| format!("'{i}'")).collect::<Vec<_>>().join(", ")
}

/// The YAML of a policy in `mode` with `entries` (a blocklist takes subtrees as host rules and drops addresses).
fn policy_text(allowlist: bool, entries: &[Entry], extras: &[&str]) -> String {
    let (mut hosts, mut urls) = (Vec::new(), Vec::new());
    for e in entries {
        let (words, e) = match e {
            Entry::Methods(words, inner) => (format!("{words} "), &**inner),
            e => (String::new(), e),
        };
        match (e, allowlist) {
            (Entry::Exact(n), _) => hosts.push(format!("{words}{n}")),
            (Entry::Subtree(n), true) => hosts.push(format!("{words}.{n}")),
            (Entry::Subtree(n), false) => hosts.push(format!("{words}{n}")),
            (Entry::Ipv4(ip), true) => hosts.push((*ip).to_owned()),
            (Entry::Ipv4(_), false) | (Entry::Methods(..), _) => {}
            (Entry::Url(n, p), _) => urls.push(format!("{words}{n}{p}")),
        }
    }
    let lists = if allowlist {
        format!("  mode: allowlist\n  allowed_hosts: [{}]\n  allowed_urls: [{}]\n", quoted(&hosts), quoted(&urls))
    } else {
        hosts.extend(urls);
        format!("  mode: blocklist\n  blocked_urls: [{}]\n", quoted(&hosts))
    };
    format!("network:\n{lists}{}", extras.concat())
}

/// Any policy of either mode, with optional ports, `inspect: all`, `provider_tools`, `model_apis` and `methods`.
fn any_policy() -> impl Strategy<Value = Generated> {
    let extras = (
        select(vec!["", "  ports: [80, 8080]\n", "  ports: []\n"]),
        select(vec!["", "  tunnel_ports: [443, 8443]\n", "  tunnel_ports: []\n"]),
        select(vec!["", "  inspect: all\n"]),
        select(vec!["", "  provider_tools: refuse\n", "  provider_tools: allow\n"]),
        select(vec!["", "  model_apis: ['.x.org']\n"]),
        select(vec!["", "", "  methods: read-only\n", "  methods: [GET, POST]\n"]),
    );
    let lists = (any::<bool>(), proptest::collection::vec(entry(), 0..8), proptest::collection::vec(entry(), 0..3));
    (lists, extras).prop_filter_map("an allow and a block entry tie", |((allowlist, entries, exceptions), x)| {
        let exceptions = exceptions_text(allowlist, &exceptions);
        let yaml = policy_text(allowlist, &entries, &[x.0, x.1, x.2, x.3, x.4, x.5, &exceptions]);
        let policy = match load(&yaml, Format::Yaml, None) {
            Ok(loaded) => loaded.policy,
            Err(e) if e.iter().all(|e| e.kind == leash_policy::PolicyErrorKind::Conflict) => return None,
            Err(e) => panic!("{e:?}\n{yaml}"),
        };
        let listed_ips = entries
            .iter()
            .filter_map(|e| match e {
                Entry::Ipv4(ip) if allowlist => ip.parse().ok(),
                _ => None,
            })
            .collect();
        Some(Generated { yaml, policy, listed_ips })
    })
}

/// The other mode's lists, as exceptions: an allowlist's `blocked_urls`, a blocklist's `allowed_hosts` and
/// `allowed_urls` (addresses left out: a blocklist refuses them as exceptions, an allowlist's block list too).
fn exceptions_text(allowlist: bool, entries: &[Entry]) -> String {
    let (mut hosts, mut urls) = (Vec::new(), Vec::new());
    for e in entries {
        match (e, allowlist) {
            (Entry::Exact(n), true) | (Entry::Subtree(n), true) => urls.push((*n).to_owned()),
            (Entry::Exact(n), false) => hosts.push((*n).to_owned()),
            (Entry::Subtree(n), false) => hosts.push(format!(".{n}")),
            (Entry::Url(n, p), _) => urls.push(format!("{n}{p}")),
            // An exception cannot list methods (the loader refuses it).
            (Entry::Ipv4(_), _) | (Entry::Methods(..), _) => {}
        }
    }
    match allowlist {
        true => format!("  blocked_urls: [{}]\n", quoted(&urls)),
        false => format!("  allowed_hosts: [{}]\n  allowed_urls: [{}]\n", quoted(&hosts), quoted(&urls)),
    }
}

/// Text where a host goes: anything, host-like characters, or a spelling from [`SPELLINGS`] or [`NAMES`].
fn host_text() -> impl Strategy<Value = String> {
    prop_oneof![
        1 => any::<String>(),
        2 => "[a-zA-Z0-9.:\\[\\]%@_-]{0,24}",
        3 => select(SPELLINGS).prop_map(String::from),
        3 => select(NAMES).prop_map(String::from),
        2 => ("[a-z0-9-]{1,4}", select(NAMES)).prop_map(|(label, n)| format!("{label}.{n}")),
    ]
}

/// `host`, `host:port` with a port the policies name or not, or a broken port.
fn authority_text() -> impl Strategy<Value = String> {
    let port = select(vec!["", ":80", ":443", ":8080", ":8443", ":0", ":65535", ":65536", ":x", ":"]);
    (host_text(), port).prop_map(|(host, port)| format!("{host}{port}"))
}

/// A request's method: the ones rules list, other spellings, and any token.
fn method_text() -> impl Strategy<Value = String> {
    prop_oneof![3 => select(REQUEST_METHODS).prop_map(String::from), 1 => Just("CONNECT".to_owned()), 1 => "[A-Za-z-]{1,9}"]
}

fn path_text() -> impl Strategy<Value = String> {
    prop_oneof![select(PATHS).prop_map(String::from), "/[a-zA-Z0-9/.%;?-]{0,16}", any::<String>()]
}

/// What a ClientHello may show; `ServerName` holds arbitrary text or the CONNECT target's own host.
#[derive(Debug, Clone)]
enum Hello {
    ServerName(String),
    SameAsTarget,
    NoServerName,
    BadServerName,
    Ech,
    NotTls,
}

fn hello() -> impl Strategy<Value = Hello> {
    prop_oneof![
        host_text().prop_map(Hello::ServerName),
        Just(Hello::SameAsTarget),
        Just(Hello::NoServerName),
        Just(Hello::BadServerName),
        Just(Hello::Ech),
        Just(Hello::NotTls),
    ]
}

/// What may pass whatever the rules say: names; a dotted quad only where an allowlist lists it; never another
/// IP-literal spelling.
fn host_may_pass(g: &Generated, host: &Host) -> bool {
    match host {
        Host::Name(_) => true,
        Host::Ipv4(ip) => g.policy.mode() == Mode::Allowlist && g.listed_ips.contains(ip),
        Host::IpLiteral(_) => false,
    }
}

/// The invariants every decision keeps: an IP literal passes only if listed, and an allowlist passes nothing
/// without naming the rule that let it.
fn check_decision(g: &Generated, host: &Host, d: &Decision) -> Result<(), TestCaseError> {
    if d.verdict == Verdict::Inspect {
        prop_assert!(g.policy.may_inspect(), "{host:?} inspected, yet no CA would exist: {d:?}\n{}", g.yaml);
    }
    if d.verdict != Verdict::Block {
        prop_assert!(host_may_pass(g, host), "{host:?} passed: {d:?}\n{}", g.yaml);
        if g.policy.mode() == Mode::Allowlist {
            prop_assert!(d.rule.is_some(), "an allowlist passed {host:?} on no rule: {d:?}\n{}", g.yaml);
        }
    }
    Ok(())
}

fn check_request(g: &Generated, via: Via, method: &str, url: &str) -> Result<(), TestCaseError> {
    let Ok(target) = parse_absolute_target(url) else { return Ok(()) };
    let (host, port) = (&target.authority.host, target.port());
    let req = Request { via, scheme: target.scheme, host, port, path: &target.path, method };
    let d = g.policy.decide(&Question::Request(req), TlsInspection::Available);
    check_decision(g, host, &d)?;
    if via == Via::Tunnel {
        explain_agrees(g, method, &target, &d)?;
    }
    let plain_port_shut = via == Via::ForwardProxy && !g.policy.ports().contains(&port);
    let scheme_wrong = (via == Via::ForwardProxy) != (target.scheme == leash_policy::Scheme::Http);
    if plain_port_shut || scheme_wrong {
        prop_assert_eq!(d.verdict, Verdict::Block, "{} {:?} on {:?}\n{}", url, via, d, g.yaml);
    }
    Ok(())
}

/// What `explain` asks of an `https` URL ([`Question::of_request`]) is what the proxy's steps decide: the tunnel on
/// its ClientHello naming the host, then, when it is inspected, `inner` (the request inside it).
fn explain_agrees(
    g: &Generated,
    method: &str,
    target: &AbsoluteTarget<'_>,
    inner: &Decision,
) -> Result<(), TestCaseError> {
    if target.scheme != leash_policy::Scheme::Https {
        return Ok(());
    }
    let (host, port) = (&target.authority.host, target.port());
    let shown = host.as_str();
    let hello = match host {
        Host::Name(_) => ClientHelloFacts::ServerName(&shown),
        _ => ClientHelloFacts::NoServerName,
    };
    let tunnel = g.policy.decide(&Question::ClientHello { target: host, port, hello }, TlsInspection::Available);
    let steps = if tunnel.verdict == Verdict::Inspect { inner.clone() } else { tunnel };
    let explained = g.policy.decide(&Question::of_request(method, target), TlsInspection::Available);
    prop_assert_eq!(&explained, &steps, "{} {:?}\n{}", method, target, g.yaml);
    Ok(())
}

fn check_tunnel(g: &Generated, authority: &str, hellos: &[Hello]) -> Result<(), TestCaseError> {
    let Ok(a) = parse_authority(authority) else { return Ok(()) };
    let port = a.port.unwrap_or(443);
    let on_target = g.policy.decide(&Question::Connect { target: &a.host, port }, TlsInspection::Available);
    check_decision(g, &a.host, &on_target)?;
    if !g.policy.tunnel_ports().contains(&port) {
        prop_assert_eq!(on_target.verdict, Verdict::Block, "CONNECT {} passed\n{}", authority, g.yaml);
    }
    let same = a.host.to_string();
    for h in hellos {
        let facts = match h {
            Hello::ServerName(sni) => ClientHelloFacts::ServerName(sni),
            Hello::SameAsTarget => ClientHelloFacts::ServerName(&same),
            Hello::NoServerName => ClientHelloFacts::NoServerName,
            Hello::BadServerName => ClientHelloFacts::BadServerName,
            Hello::Ech => ClientHelloFacts::Ech,
            Hello::NotTls => ClientHelloFacts::NotTls,
        };
        let d =
            g.policy.decide(&Question::ClientHello { target: &a.host, port, hello: facts }, TlsInspection::Available);
        check_decision(g, &a.host, &d)?;
        // The ClientHello can only confirm the target's decision or refuse: never loosen it.
        prop_assert!(d == on_target || d.verdict == Verdict::Block, "{facts:?} turned {on_target:?} into {d:?}");
        if on_target.verdict == Verdict::Block {
            prop_assert_eq!(&d, &on_target, "{:?}\n{}", facts, g.yaml);
        }
        if matches!(a.host, Host::Name(_)) && matches!(h, Hello::SameAsTarget) {
            prop_assert_eq!(&d, &on_target, "an SNI naming the target changes nothing\n{}", g.yaml);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn no_input_panics_the_engine_and_its_decisions_keep_their_invariants(
        g in any_policy(),
        requests in proptest::collection::vec((authority_text(), path_text(), any::<bool>(), any::<bool>(), method_text()), 1..8),
        tunnels in proptest::collection::vec(authority_text(), 1..6),
        hellos in proptest::collection::vec(hello(), 1..6),
    ) {
        for (authority, path, https, inner, method) in &requests {
            let scheme = if *https { "https" } else { "http" };
            let via = if *inner { Via::Tunnel } else { Via::ForwardProxy };
            check_request(&g, via, method, &format!("{scheme}://{authority}{path}"))?;
        }
        for authority in &tunnels {
            check_tunnel(&g, authority, &hellos)?;
        }
    }

    #[test]
    fn no_host_text_panics_the_engine(g in any_policy(), raw in any::<String>(), port in any::<u16>()) {
        if let Ok(host) = parse_host(&raw) {
            let d = g.policy.decide(&Question::Connect { target: &host, port }, TlsInspection::Available);
            check_decision(&g, &host, &d)?;
            let hello = ClientHelloFacts::ServerName(&raw);
            let d = g.policy.decide(&Question::ClientHello { target: &host, port, hello }, TlsInspection::Available);
            check_decision(&g, &host, &d)?;
            let _ = g.policy.name_is_reachable(&host);
            let _ = g.policy.host_has_path_rules(&host);
        }
    }
}

/// A rule of a generated policy holding both kinds, as the oracle below sees it.
#[derive(Debug, Clone)]
struct MixedRule {
    rule: NaiveRule,
    block: bool,
}

/// How specific a rule is, by the documented order alone (docs/policy.md): the host it names (longer wins), then
/// a path over an exact host over a host and its subdomains (`.x` allowed, any blocked host), then the longer path.
fn mixed_key(r: &MixedRule) -> (usize, u8, usize) {
    let class = match (&r.rule.path, r.block || r.rule.subtree) {
        (Some(_), _) => 2,
        (None, false) => 1,
        (None, true) => 0,
    };
    (r.rule.host.len(), class, r.rule.path.as_ref().map_or(0, |p| p.len()))
}

/// Whether one allow and one block entry are equally specific on every request both match: `.x` and a blocked
/// `x`, or the same path (a block path compares case-insensitively). The loader must refuse such a policy.
fn mixed_tie(rules: &[MixedRule]) -> bool {
    let lower = |r: &MixedRule| r.rule.path.as_ref().map(|p| p.to_ascii_lowercase());
    rules.iter().filter(|a| !a.block).any(|a| {
        rules.iter().filter(|b| b.block).any(|b| {
            a.rule.host == b.rule.host
                && mixed_key(a).1 == mixed_key(b).1
                && mixed_key(a).1 != 1
                && lower(a) == lower(b)
        })
    })
}

/// The decision by a linear scan: the most specific matching rule of either kind, else the mode's default.
fn mixed_oracle(rules: &[MixedRule], allowlist: bool, host: &str, path: &str) -> String {
    let matching: Vec<&MixedRule> =
        rules.iter().filter(|r| naive_best(std::slice::from_ref(&r.rule), r.block, host, path).is_some()).collect();
    let Some(best) = matching.iter().map(|r| mixed_key(r)).max() else {
        return if allowlist { "block not-allowed".to_owned() } else { "allow default".to_owned() };
    };
    let top: Vec<&&MixedRule> = matching.iter().filter(|r| mixed_key(r) == best).collect();
    let block = top.iter().any(|r| r.block);
    let text = top.iter().filter(|r| r.block == block).map(|r| r.rule.text.as_str()).min().unwrap_or_default();
    format!("{} rule {text}", if block { "block" } else { "allow" })
}

fn mixed_policy_text(rules: &[MixedRule], allowlist: bool) -> String {
    let quoted = |items: Vec<&MixedRule>| items.iter().map(|r| format!("'{}'", r.rule.text)).collect::<Vec<_>>();
    let hosts = quoted(rules.iter().filter(|r| !r.block && r.rule.path.is_none()).collect());
    let urls = quoted(rules.iter().filter(|r| !r.block && r.rule.path.is_some()).collect());
    let blocked = quoted(rules.iter().filter(|r| r.block).collect());
    format!(
        "network:\n  mode: {}\n  allowed_hosts: [{}]\n  allowed_urls: [{}]\n  blocked_urls: [{}]\n",
        if allowlist { "allowlist" } else { "blocklist" },
        hosts.join(", "),
        urls.join(", "),
        blocked.join(", ")
    )
}

fn mixed_rules() -> impl Strategy<Value = Vec<MixedRule>> {
    // Rules by method are their own property (`the_compiled_matcher_agrees_*`); an exception may not list any.
    let plain = |rule: NaiveRule| match rule.methods {
        Some(_) => {
            let text = rule.text.split_whitespace().last().unwrap_or_default().to_owned();
            NaiveRule { text, methods: None, ..rule }
        }
        None => rule,
    };
    let one = prop_oneof![
        naive_rule(true).prop_map(move |rule| MixedRule { rule: plain(rule), block: true }),
        naive_rule(false).prop_map(move |rule| MixedRule { rule: plain(rule), block: false }),
    ];
    // Path patterns meet rules of the other kind in `a_pattern_meets_a_literal_path_of_the_other_kind` (methods.rs):
    // this oracle ranks by prefix length, which a `*` segment does not have.
    let literal = |r: &MixedRule| !r.rule.path.as_ref().is_some_and(|p| p.contains('*'));
    proptest::collection::vec(one, 0..10).prop_map(move |rules| rules.into_iter().filter(literal).collect())
}

/// Paths that reach every rule's edges: each rule's own prefix, flipped in case, with a segment after it.
fn probe_paths(rules: &[MixedRule], requests: &[String]) -> Vec<String> {
    let mut out: Vec<String> = vec!["/".to_owned(), "/zz".to_owned()];
    for r in rules {
        if let Some(p) = &r.rule.path {
            out.extend([p.clone(), p.to_ascii_uppercase(), format!("{p}/x"), format!("{p}x")]);
        }
    }
    out.extend(requests.iter().cloned());
    out
}

/// Whether a decision lets the request or tunnel on (allowed, inspected, or let through by audit mode).
fn passes(d: &Decision) -> bool {
    d.verdict != Verdict::Block
}

/// A boundary only narrows: what passes inside it passes the run's policy alone and the boundary alone; what both
/// allow outright passes inside it; a tunnel either reads passes only read.
fn check_bounded(run: &Policy, outer: &Policy, bounded: &Policy, q: &Question<'_>) -> Result<(), TestCaseError> {
    let tls = TlsInspection::Available;
    let (alone, by_outer, d) = (run.decide(q, tls), outer.decide(q, tls), bounded.decide(q, tls));
    if passes(&d) {
        prop_assert!(passes(&alone) && passes(&by_outer), "{q:?}: {d:?} though run {alone:?}, boundary {by_outer:?}");
    } else if passes(&alone) && passes(&by_outer) {
        // Both let it on, yet it is refused: only for a tunnel both would have passed only unread-vs-read differently.
        prop_assert!(false, "{q:?}: refused inside though run {alone:?} and boundary {by_outer:?} pass it: {d:?}");
    }
    if !passes(&by_outer) {
        prop_assert_eq!(d.reason, leash_policy::Reason::Boundary, "{:?}: the boundary's refusal is named", q);
    }
    let tunnel = matches!(q, Question::Connect { .. } | Question::ClientHello { .. });
    if tunnel && passes(&d) && (by_outer.verdict == Verdict::Inspect || alone.verdict == Verdict::Inspect) {
        prop_assert_eq!(d.verdict, Verdict::Inspect, "{:?}: read by one, so read inside", q);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Exceptions: with rules of both kinds, the most specific rule decides (an oracle written from the documented
    /// order, not from the engine); a tie between an allow and a block is refused; `explain`'s answer (the admission
    /// of the URL) is the engine's; a tunnel spliced on its name is one whose every path the oracle allows, one
    /// refused on its name one whose every path it refuses, and one inspected has some path allowed.
    #[test]
    fn with_both_kinds_the_most_specific_rule_decides(
        allowlist in any::<bool>(),
        rules in mixed_rules(),
        requests in proptest::collection::vec((naive_host(), naive_path(), any::<bool>()), 1..12),
    ) {
        let text = mixed_policy_text(&rules, allowlist);
        let loaded = load(&text, Format::Yaml, None);
        if mixed_tie(&rules) {
            let errors = loaded.err().unwrap_or_default();
            prop_assert!(
                errors.iter().any(|e| e.kind == leash_policy::PolicyErrorKind::Conflict),
                "a tie must be refused: {:?}\n{}", errors, text
            );
            return Ok(());
        }
        let policy = loaded.map_err(|e| TestCaseError::fail(format!("{e:?}\n{text}")))?.policy;
        let requests: Vec<(String, String)> =
            requests.into_iter().map(|(h, p, slash)| (h, if slash { format!("{p}/") } else { p })).collect();
        for (host, path) in &requests {
            let url = format!("http://{host}{path}");
            let want = mixed_oracle(&rules, allowlist, host, path);
            let got = decide_on(&policy, Via::ForwardProxy, &url);
            prop_assert_eq!(&got, &want, "{} under\n{}", url, text);
            let target = parse_absolute_target(&url).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
            let explained = policy.admit(&Question::of_url(&target), TlsInspection::Available).decision;
            prop_assert_eq!(crate::render(&explained), want, "explain disagrees on {}\n{}", url, text);
            check_overruled(&policy, &target, &explained, &rules)?;
        }
        let paths = probe_paths(&rules, &requests.iter().map(|(_, p)| p.clone()).collect::<Vec<_>>());
        for host in requests.iter().map(|(h, _)| h.as_str()).chain(rules.iter().map(|r| r.rule.host.as_str())) {
            let target = parse_host(host).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
            let tunnel = policy.decide(&Question::Connect { target: &target, port: 443 }, TlsInspection::Available);
            let allowed: Vec<bool> =
                paths.iter().map(|p| mixed_oracle(&rules, allowlist, host, p).starts_with("allow")).collect();
            match tunnel.verdict {
                Verdict::Allow => prop_assert!(allowed.iter().all(|a| *a), "{host} spliced, a path refused\n{text}"),
                Verdict::Block => prop_assert!(allowed.iter().all(|a| !*a), "{host} refused, a path allowed\n{text}"),
                _ => prop_assert!(allowed.iter().any(|a| *a), "{host} inspected, no path allowed\n{text}"),
            }
            prop_assert_eq!(policy.name_is_reachable(&target), tunnel.verdict != Verdict::Block, "{}\n{}", host, text);
        }
    }
}

/// `overruled` names the rule that decided, and an entry of the other kind the request matches too.
fn check_overruled(
    policy: &Policy,
    target: &leash_policy::AbsoluteTarget<'_>,
    d: &Decision,
    rules: &[MixedRule],
) -> Result<(), TestCaseError> {
    let Some(o) = policy.overruled(&target.authority.host, Some(&target.path)) else { return Ok(()) };
    prop_assert_eq!(d.rule.as_deref(), Some(&*o.exception), "{:?}", o);
    prop_assert_eq!(o.allows, d.verdict == Verdict::Allow, "{:?} {:?}", o, d);
    let inside_kind_block = o.allows;
    prop_assert!(
        rules.iter().any(|r| r.block == inside_kind_block && r.rule.text == *o.inside),
        "{:?} names no entry of the other kind",
        o
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_boundary_only_narrows_and_never_lets_the_run_lift_its_refusals(
        run in any_policy(),
        outer in any_policy(),
        audit in any::<bool>(),
        requests in proptest::collection::vec((authority_text(), path_text(), any::<bool>()), 1..8),
        tunnels in proptest::collection::vec(authority_text(), 1..6),
    ) {
        let Ok(boundary) = leash_policy::Boundary::new(outer.policy, "b") else { return Ok(()) };
        let boundary = std::sync::Arc::new(boundary);
        let run_yaml = run.yaml.clone();
        let alone = load(&run_yaml, Format::Yaml, None).unwrap().policy;
        let alone = if audit { alone.into_audit() } else { alone };
        let again = load(&run_yaml, Format::Yaml, None).unwrap().policy;
        let again = if audit { again.into_audit() } else { again };
        let bounded = again.within(boundary.clone()).unwrap();
        let outer = boundary.policy();
        for (authority, path, inner) in &requests {
            let url = format!("http://{authority}{path}");
            let Ok(target) = parse_absolute_target(&url) else { continue };
            let via = if *inner { Via::Tunnel } else { Via::ForwardProxy };
            let scheme = if *inner { leash_policy::Scheme::Https } else { leash_policy::Scheme::Http };
            for method in ["GET", "POST", "get"] {
                let (host, port, path) = (&target.authority.host, target.port(), &target.path);
                let req = Request { via, scheme, host, port, path, method };
                check_bounded(&alone, outer, &bounded, &Question::Request(req))?;
            }
        }
        for authority in &tunnels {
            let Ok(a) = parse_authority(authority) else { continue };
            let port = a.port.unwrap_or(443);
            check_bounded(&alone, outer, &bounded, &Question::Connect { target: &a.host, port })?;
            let sni = a.host.to_string();
            let hello = ClientHelloFacts::ServerName(&sni);
            check_bounded(&alone, outer, &bounded, &Question::ClientHello { target: &a.host, port, hello })?;
            check_bounded(&alone, outer, &bounded, &Question::Lookup { host: &a.host })?;
        }
    }
}
