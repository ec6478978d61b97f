//! Properties: canonicalisation is idempotent; a blocked path stays blocked under every re-spelling the
//! canonicaliser undoes; the compiled matcher agrees with a naive linear scan; no input makes a parser panic.

use leash_policy::{canonicalize, load, parse_absolute_target, parse_authority, parse_host, Format, Policy, Via};
use proptest::prelude::*;

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
}

/// The most specific matching rule by the documented order: longer host suffix; then (allow) url > exact > `.x`,
/// (block) path > host; then longer path; ties name the smaller text.
fn naive_best<'a>(rules: &'a [NaiveRule], block: bool, host: &str, path: &str) -> Option<&'a str> {
    let covers = |h: &str| host == h || host.ends_with(&format!(".{h}"));
    let lower = path.to_ascii_lowercase();
    let matches = |r: &NaiveRule| match (&r.path, block) {
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
        (Some(_), _) => 2,
        (None, false) => 1,
        (None, true) => 0,
    };
    let key = |r: &NaiveRule| (r.host.len(), class(r), r.path.as_ref().map_or(0, |p| p.len()));
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

fn naive_rule(block: bool) -> impl Strategy<Value = NaiveRule> {
    (naive_host(), any::<bool>(), proptest::option::of((naive_path(), any::<bool>()))).prop_map(
        move |(host, subtree, path)| {
            let path = path.map(|(p, slash)| if slash { format!("{p}/") } else { p });
            let subtree = !block && subtree && path.is_none();
            let text = match (&path, subtree) {
                (Some(p), _) => format!("{host}{p}"),
                (None, true) => format!(".{host}"),
                (None, false) => host.clone(),
            };
            NaiveRule { text, host, subtree, path }
        },
    )
}

fn policy_of(rules: &[NaiveRule], block: bool) -> Policy {
    let quoted = |r: &NaiveRule| format!("'{}'", r.text);
    let text = if block {
        let all: Vec<_> = rules.iter().map(quoted).collect();
        format!("network:\n  mode: blocklist\n  blocked_urls: [{}]\n", all.join(", "))
    } else {
        let hosts: Vec<_> = rules.iter().filter(|r| r.path.is_none()).map(quoted).collect();
        let urls: Vec<_> = rules.iter().filter(|r| r.path.is_some()).map(quoted).collect();
        format!(
            "network:\n  mode: allowlist\n  allowed_hosts: [{}]\n  allowed_urls: [{}]\n",
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
        let rules = if block { rules } else { allow_rules };
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
}
