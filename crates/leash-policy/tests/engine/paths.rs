//! Paths: every re-spelling of a blocked path is still blocked (each its own case), malformed targets are refused,
//! and allow prefixes admit only what they name.

use crate::{decide, decide_inner};

const BLOCK: &str =
    "network:\n  mode: blocklist\n  blocked_urls: [arxiv.org/abs/2401.01234, api.semanticscholar.org]\n";
const BLOCKED: &str = "block rule arxiv.org/abs/2401.01234";

macro_rules! cases {
    ($policy:expr; $($name:ident: $url:expr => $want:expr;)*) => {
        $(
            #[test]
            fn $name() {
                assert_eq!(decide($policy, $url), $want, "{}", $url);
            }
        )*
    };
}

cases! { BLOCK;
    plain: "http://arxiv.org/abs/2401.01234" => BLOCKED;
    longer_path_is_a_prefix_match: "http://arxiv.org/abs/2401.01234v2" => BLOCKED;
    sub_path: "http://arxiv.org/abs/2401.01234/x" => BLOCKED;
    subdomain: "http://export.arxiv.org/abs/2401.01234" => BLOCKED;
    deep_subdomain: "http://a.b.c.arxiv.org/abs/2401.01234" => BLOCKED;
    dot_segment: "http://arxiv.org/abs/./2401.01234" => BLOCKED;
    dot_dot_segment: "http://arxiv.org/x/../abs/2401.01234" => BLOCKED;
    dot_dot_above_root: "http://arxiv.org/../../abs/2401.01234" => BLOCKED;
    encoded_dot_dot: "http://arxiv.org/x/%2e%2e/abs/2401.01234" => BLOCKED;
    encoded_dot_dot_upper: "http://arxiv.org/x/%2E%2E/abs/2401.01234" => BLOCKED;
    encoded_slash: "http://arxiv.org/abs%2f2401.01234" => BLOCKED;
    encoded_slash_upper: "http://arxiv.org/abs%2F2401.01234" => BLOCKED;
    double_slash: "http://arxiv.org//abs//2401.01234" => BLOCKED;
    encoded_letters: "http://arxiv.org/%61%62%73/2401.01234" => BLOCKED;
    encoded_digits: "http://arxiv.org/abs/%32%34%30%31.01234" => BLOCKED;
    uppercase_path: "http://arxiv.org/ABS/2401.01234" => BLOCKED;
    uppercase_host: "http://ArXiv.Org/abs/2401.01234" => BLOCKED;
    params_on_a_segment: "http://arxiv.org/abs;x=1/2401.01234" => BLOCKED;
    params_on_the_last_segment: "http://arxiv.org/abs/2401.01234;jsessionid=1" => BLOCKED;
    dot_dot_with_params: "http://arxiv.org/x/..;/abs/2401.01234" => BLOCKED;
    backslash: "http://arxiv.org/abs\\2401.01234" => BLOCKED;
    encoded_backslash: "http://arxiv.org/abs%5c2401.01234" => BLOCKED;
    double_encoded_slash: "http://arxiv.org/abs%252f2401.01234" => BLOCKED;
    double_encoded_dot_dot: "http://arxiv.org/x/%252e%252e/abs/2401.01234" => BLOCKED;
    triple_encoded_letter: "http://arxiv.org/%252561bs/2401.01234" => BLOCKED;
    query: "http://arxiv.org/abs/2401.01234?download=1" => BLOCKED;
    encoded_query_mark_is_a_path_char: "http://arxiv.org/abs/2401.01234%3fx" => BLOCKED;
    port_named: "http://arxiv.org:80/abs/2401.01234" => BLOCKED;
    host_rule: "http://api.semanticscholar.org/graph/v1" => "block rule api.semanticscholar.org";
    sibling_path_allowed: "http://arxiv.org/abs/2401.01235" => "allow default";
    shorter_path_allowed: "http://arxiv.org/abs/2401" => "allow default";
    other_host_allowed: "http://notarxiv.org/abs/2401.01234" => "allow default";
    query_does_not_reach_the_path: "http://arxiv.org/list?abs/2401.01234" => "allow default";
    fragment_is_refused: "http://arxiv.org/abs/2401.01234#x" => "error bad-request";
    fragment_after_query_is_refused: "http://arxiv.org/abs?x#y" => "error bad-request";
    malformed_escape: "http://arxiv.org/abs/%zz" => "error bad-request";
    truncated_escape: "http://arxiv.org/abs/%2" => "error bad-request";
    malformed_escape_in_query: "http://arxiv.org/abs?q=%" => "error bad-request";
    raw_space: "http://arxiv.org/abs /x" => "error bad-request";
    raw_tab: "http://arxiv.org/abs\t/x" => "error bad-request";
    decoded_nul: "http://arxiv.org/abs/2401.01234%00" => "error bad-request";
    decoded_newline: "http://arxiv.org/abs%0a/x" => "error bad-request";
    double_encoded_control: "http://arxiv.org/abs%2500" => "error bad-request";
    decoded_del: "http://arxiv.org/abs%7f" => "error bad-request";
}

const ALLOW_URLS: &str =
    "network:\n  mode: allowlist\n  allowed_urls: [github.com/rust-lang/, github.com/serde-rs, crates.io/api/v1/crates]\n";

cases! { ALLOW_URLS;
    allow_prefix_with_slash: "http://github.com/rust-lang/rust" => "allow rule github.com/rust-lang/";
    allow_prefix_needs_its_slash: "http://github.com/rust-lang" => "block not-allowed";
    allow_prefix_is_case_sensitive: "http://github.com/Rust-lang/rust" => "block not-allowed";
    allow_prefix_stops_at_boundary: "http://github.com/rust-lang-evil/x" => "block not-allowed";
    allow_prefix_without_slash_exact: "http://github.com/serde-rs" => "allow rule github.com/serde-rs";
    allow_prefix_without_slash_below: "http://github.com/serde-rs/serde" => "allow rule github.com/serde-rs";
    allow_prefix_without_slash_boundary: "http://github.com/serde-rs-evil" => "block not-allowed";
    allow_prefix_dot_dot_escape: "http://github.com/rust-lang/../evil/x" => "block not-allowed";
    allow_prefix_encoded_escape: "http://github.com/rust-lang/%2e%2e/evil" => "block not-allowed";
    allow_prefix_params_trick: "http://github.com/rust-lang;x/../evil" => "block not-allowed";
    allow_prefix_other_host: "http://api.github.com/rust-lang/x" => "block not-allowed";
    allow_prefix_root_of_host: "http://github.com/" => "block not-allowed";
    allow_prefix_encoded_letters: "http://crates.io/api/v1/%63rates/serde" => "allow rule crates.io/api/v1/crates";
    // Spellings that are under the prefix to leash but not to a server keeping `%2F`, `\` or `;` as data, or
    // removing dot segments at another stage: refused whatever the server does.
    allow_prefix_encoded_slash_climb: "http://github.com/evil%2F..%2Frust-lang/x" => "block ambiguous-path";
    allow_prefix_encoded_slash_climb_lower: "http://github.com/evil%2f..%2frust-lang/x" => "block ambiguous-path";
    allow_prefix_double_encoded_climb: "http://github.com/evil%252F..%252Frust-lang/x" => "block ambiguous-path";
    allow_prefix_backslash_climb: "http://github.com/evil\\..\\rust-lang/x" => "block ambiguous-path";
    allow_prefix_encoded_backslash_climb: "http://github.com/evil%5C..%5Crust-lang/x" => "block ambiguous-path";
    allow_prefix_raw_dot_dot_into: "http://github.com/evil/../rust-lang/x" => "block ambiguous-path";
    allow_prefix_encoded_dot_dot_into: "http://github.com/evil/%2e%2e/rust-lang/x" => "block ambiguous-path";
    allow_prefix_dot_dot_below: "http://github.com/rust-lang/a/../b" => "block ambiguous-path";
    allow_prefix_dot_segment: "http://github.com/rust-lang/./x" => "block ambiguous-path";
    allow_prefix_climb_past_encoded_slash: "http://github.com/rust-lang/a%2Fb/../../evil" => "block ambiguous-path";
    allow_prefix_tomcat_params: "http://github.com/evil/..;/rust-lang/x" => "block ambiguous-path";
    allow_prefix_params_on_prefix: "http://github.com/rust-lang;x/y" => "block ambiguous-path";
    allow_prefix_leading_empty_segment: "http://github.com//rust-lang/x" => "block ambiguous-path";
    allow_prefix_encoded_slash_into_prefix: "http://github.com/rust%2Dlang%2Fx" => "block ambiguous-path";
    // Below the prefix every reading stays under it: APIs that name an object with `%2F` keep working.
    allow_prefix_encoded_slash_below: "http://github.com/rust-lang/group%2Fproject" => "allow rule github.com/rust-lang/";
    allow_prefix_backslash_below: "http://github.com/rust-lang/a\\b" => "allow rule github.com/rust-lang/";
    allow_prefix_params_below: "http://github.com/rust-lang/x;v=1" => "allow rule github.com/rust-lang/";
    allow_prefix_empty_segment_below: "http://github.com/rust-lang//x" => "allow rule github.com/rust-lang/";
}

#[test]
fn a_whole_host_allow_needs_no_literal_reading() {
    let p = "network:\n  mode: allowlist\n  allowed_hosts: [github.com]\n  allowed_urls: [github.com/rust-lang/]\n";
    assert_eq!(decide(p, "http://github.com/evil%2F..%2Frust-lang/x"), "allow rule github.com/rust-lang/");
    assert_eq!(decide(p, "http://github.com/evil/../x"), "allow rule github.com");
}

#[test]
fn inner_requests_refuse_ambiguous_allow_paths_too() {
    assert_eq!(decide_inner(ALLOW_URLS, "https://github.com/evil%2F..%2Frust-lang/x"), "block ambiguous-path");
    assert_eq!(decide_inner(ALLOW_URLS, "https://github.com/rust-lang/x"), "allow rule github.com/rust-lang/");
}

#[test]
fn host_in_allowed_hosts_is_allowed_on_every_path() {
    let p = "network:\n  mode: allowlist\n  allowed_hosts: [github.com]\n  allowed_urls: [github.com/rust-lang/]\n";
    assert_eq!(decide(p, "http://github.com/anything"), "allow rule github.com");
    assert_eq!(decide(p, "http://github.com/rust-lang/x"), "allow rule github.com/rust-lang/");
}

#[test]
fn inner_requests_use_the_same_canonical_path() {
    assert_eq!(decide_inner(BLOCK, "https://arxiv.org/abs/%32401.01234"), BLOCKED);
    assert_eq!(decide_inner(BLOCK, "https://arxiv.org/abs/2401.01235"), "allow default");
}

#[test]
fn canonical_forms() {
    use leash_policy::canonicalize;
    let c = |raw: &str| canonicalize(raw).unwrap().as_str().to_owned();
    assert_eq!(c(""), "/");
    assert_eq!(c("?x"), "/");
    assert_eq!(c("/a/b/../"), "/a/");
    assert_eq!(c("/é"), "/%C3%A9");
    assert_eq!(c("/%C3%A9"), "/%C3%A9");
    assert_eq!(c("/a%2525zz"), "/a%25zz");
    assert_eq!(canonicalize("a").unwrap_err(), leash_policy::PathError::NotAbsolute);
}
