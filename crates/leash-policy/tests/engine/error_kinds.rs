//! Every policy error has a kind a caller may match, beside its entry, position and message: one policy per kind,
//! YAML, TOML and the command line alike.

use leash_policy::PolicyErrorKind::{self, *};
use leash_policy::{load, Format, Policy};

/// The one error of a policy that must be invalid, as (kind, `line:column entry`).
fn only(text: &str, format: Format, profile: Option<&str>) -> (PolicyErrorKind, String) {
    let errs = match load(text, format, profile) {
        Ok(_) => panic!("policy should be refused:\n{text}"),
        Err(errs) => errs,
    };
    assert_eq!(errs.len(), 1, "{errs:?}");
    let e = &errs[0];
    (e.kind, format!("{}:{} {}", e.line.unwrap_or(0), e.column.unwrap_or(0), e.entry))
}

fn yaml(text: &str) -> (PolicyErrorKind, String) {
    only(text, Format::Yaml, None)
}

fn toml(text: &str) -> (PolicyErrorKind, String) {
    only(text, Format::Toml, None)
}

/// One `allowed_hosts` entry of an allowlist.
fn host(entry: &str) -> (PolicyErrorKind, String) {
    yaml(&format!("network:\n  mode: allowlist\n  allowed_hosts: ['{entry}']\n"))
}

/// One entry of `list` (`allowed_urls` in an allowlist, `blocked_urls` in a blocklist).
fn url(list: &str, entry: &str) -> PolicyErrorKind {
    let mode = if list == "blocked_urls" { "blocklist" } else { "allowlist" };
    yaml(&format!("network:\n  mode: {mode}\n  {list}: ['{entry}']\n")).0
}

fn at(line: usize, column: usize, entry: &str) -> String {
    format!("{line}:{column} {entry}")
}

#[test]
fn syntax() {
    assert_eq!(yaml("network:\n  mode: [allowlist\n").0, Syntax);
    assert_eq!(yaml("network: !!map {}\n"), (Syntax, at(1, 10, "")));
    assert_eq!(yaml("network: {mode: allowlist}\n---\nnetwork: {}\n").0, Syntax);
    assert_eq!(yaml("network: *nowhere\n").0, Syntax);
    assert_eq!(yaml("? [a]\n: b\n").0, Syntax);
    assert_eq!(yaml(&"[".repeat(200)).0, Syntax);
    assert_eq!(toml("[network\nmode = \"allowlist\"\n").0, Syntax);
}

#[test]
fn keys() {
    let unknown = "network:\n  mode: allowlist\n  colour: blue\n";
    assert_eq!(yaml(unknown), (UnknownKey, at(3, 3, "network.colour")));
    let misspelt = load("network: {mode: allowlist}\nprofiles: {p: {netwrk: {}}}\n", Format::Yaml, None).err().unwrap();
    let kinds: Vec<_> = misspelt.iter().map(|e| (e.kind, e.entry.as_str())).collect();
    assert_eq!(kinds, [(MissingKey, "profiles.p.network"), (UnknownKey, "profiles.p.netwrk")]);
    assert_eq!(toml("[network]\nmode = \"allowlist\"\ncolour = \"blue\"\n"), (UnknownKey, at(3, 1, "network.colour")));
    let twice = "network:\n  mode: allowlist\n  mode: blocklist\n";
    assert_eq!(yaml(twice), (DuplicateKey, at(3, 3, "network.mode")));
    // TOML's parser finds the repeat itself; the kind is the same.
    assert_eq!(toml("[network]\nmode = \"allowlist\"\nmode = \"blocklist\"\n"), (DuplicateKey, at(3, 1, "")));
    assert_eq!(yaml(""), (MissingKey, at(1, 1, "network")));
    assert_eq!(yaml("profiles: {}\n"), (MissingKey, at(1, 1, "network")));
    assert_eq!(yaml("network:\n  allowed_hosts: []\n"), (MissingKey, at(2, 3, "network.mode")));
}

#[test]
fn types_and_values() {
    assert_eq!(yaml("network: []\n"), (WrongType, at(1, 10, "network")));
    assert_eq!(yaml("network:\n  mode: 1\n"), (WrongType, at(2, 9, "network.mode")));
    assert_eq!(yaml("network:\n  mode: allowlist\n  allowed_hosts: a.com\n").0, WrongType);
    assert_eq!(yaml("network:\n  mode: allowlist\n  allowed_hosts: [1]\n").0, WrongType);
    assert_eq!(yaml("network:\n  mode: allowlist\n  ports: ['80']\n").0, WrongType);
    assert_eq!(yaml("network:\n  mode: greylist\n"), (BadValue, at(2, 9, "network.mode")));
    assert_eq!(yaml("network:\n  mode: blocklist\n  inspect: some\n").0, BadValue);
    assert_eq!(yaml("network:\n  mode: blocklist\n  provider_tools: keep\n").0, BadValue);
    let name = "network: {mode: blocklist}\nprofiles:\n  bad name:\n    network: {mode: blocklist}\n";
    assert_eq!(yaml(name), (BadProfileName, at(3, 3, "profiles.bad name")));
}

#[test]
fn hosts() {
    assert_eq!(host("Example.com"), (BadHost, at(3, 19, "network.allowed_hosts[0]")));
    // A path in `allowed_hosts`: `/` is not a hostname character.
    assert_eq!(host("example.com/docs").0, BadHost);
    for bad in ["*.a.com", "bücher.de", "a..b", "[::1]", "::1", "127.1", ".192.0.2.1", "a.com:443", "a@b.com", ""] {
        assert_eq!(host(bad).0, BadHost, "{bad}");
    }
    let model = "network:\n  mode: blocklist\n  model_apis: [192.0.2.7]\n";
    assert_eq!(yaml(model), (BadHost, at(3, 16, "network.model_apis[0]")));
    assert_eq!(url("blocked_urls", ".arxiv.org"), BadHost);
    assert_eq!(url("allowed_urls", ".github.com/x"), BadHost);
    assert_eq!(url("blocked_urls", "Arxiv.org/abs"), BadHost);
}

#[test]
fn urls_and_paths() {
    assert_eq!(host("https://a.com").0, BadUrl);
    assert_eq!(url("blocked_urls", "https://arxiv.org/abs"), BadUrl);
    assert_eq!(url("blocked_urls", "arxiv.org/abs?x=1"), BadUrl);
    assert_eq!(url("blocked_urls", "arxiv.org/abs#x"), BadUrl);
    assert_eq!(url("blocked_urls", "arxiv.org/%zz"), BadPath);
    assert_eq!(url("blocked_urls", "arxiv.org/a%00"), BadPath);
    assert_eq!(url("allowed_urls", "github.com/a b"), BadPath);
}

#[test]
fn cidrs_and_ports() {
    let cidr = |entry: &str| yaml(&format!("network:\n  mode: blocklist\n  allow_destinations: ['{entry}']\n"));
    assert_eq!(cidr("10.0.0.1/8"), (BadCidr, at(3, 24, "network.allow_destinations[0]")));
    assert_eq!(cidr("example.com").0, BadCidr);
    assert_eq!(cidr("10.0.0.0/33").0, BadCidr);
    let port = |list: &str, value: &str| yaml(&format!("network:\n  mode: blocklist\n  {list}: [{value}]\n"));
    assert_eq!(port("ports", "0"), (BadPort, at(3, 11, "network.ports[0]")));
    assert_eq!(port("tunnel_ports", "70000").0, BadPort);
    assert_eq!(port("ports", "-1").0, BadPort);
    assert_eq!(toml("[network]\nmode = \"blocklist\"\nports = [0]\n"), (BadPort, at(3, 10, "network.ports[0]")));
}

#[test]
fn lists_and_profiles() {
    // The other mode's lists are exceptions; what cannot be one is refused with its kind.
    let tie = "network:\n  mode: allowlist\n  allowed_hosts: [.x.org]\n  blocked_urls: [x.org]\n";
    assert_eq!(yaml(tie), (PolicyErrorKind::Conflict, at(3, 19, "network.allowed_hosts[0]")));
    let address = "network:\n  mode: blocklist\n  allowed_hosts: [192.0.2.1]\n";
    assert_eq!(yaml(address), (WrongList, at(3, 19, "network.allowed_hosts[0]")));
    assert_eq!(url("allowed_urls", "github.com"), WrongList);
    assert_eq!(url("allowed_urls", "192.0.2.1/x"), WrongList);
    let profiles = "network: {mode: blocklist}\nprofiles:\n  verifier:\n    network: {mode: allowlist}\n";
    assert_eq!(only(profiles, Format::Yaml, Some("reviewer")), (UnknownProfile, at(2, 1, "profiles")));
    assert_eq!(only("network: {mode: blocklist}\n", Format::Yaml, Some("x")), (UnknownProfile, at(0, 0, "profiles")));
}

#[test]
fn command_line_entries() {
    let s = |v: &[&str]| v.iter().map(|t| (*t).to_owned()).collect::<Vec<_>>();
    let kinds = |allow: &[&str], block: &[&str]| {
        Policy::from_inline(&s(allow), &s(block))
            .unwrap_err()
            .iter()
            .map(|e| (e.kind, e.entry.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(kinds(&["a.com"], &["b.com"]), [(WrongList, "--block[0]".to_owned())]);
    assert_eq!(
        kinds(&["ok.com", "Bad.com", "https://x.com"], &[]),
        [(BadHost, "--allow[1]".to_owned()), (BadUrl, "--allow[2]".to_owned())]
    );
    assert_eq!(
        kinds(&[], &["x.org/a%zz", "x.org/?q"]),
        [(BadPath, "--block[0]".to_owned()), (BadUrl, "--block[1]".to_owned())]
    );
}

#[test]
fn methods() {
    assert_eq!(host("GTE a.com"), (BadMethod, at(3, 19, "network.allowed_hosts[0]")));
    assert_eq!(host("GET 192.0.2.7"), (BadMethod, at(3, 19, "network.allowed_hosts[0]")));
    assert_eq!(url("blocked_urls", "post x.org/a"), BadMethod);
    assert_eq!(url("allowed_urls", "POST x.org/**/a"), BadPath);
    assert_eq!(yaml("network:\n  mode: allowlist\n  methods: [get]\n").0, BadMethod);
    assert_eq!(toml("[network]\nmode = \"blocklist\"\nmethods = []\n").0, BadMethod);
    let s = |v: &[&str]| v.iter().map(|t| (*t).to_owned()).collect::<Vec<_>>();
    let inline = |allow: &[&str], block: &[&str]| Policy::from_inline(&s(allow), &s(block)).map(|_| ()).unwrap_err();
    assert_eq!(inline(&["read_only a.com"], &[])[0].kind, BadMethod);
    assert_eq!(inline(&[], &["PUSH x.org"])[0].entry, "--block[0]");
    assert!(Policy::from_inline(&s(&["read-only a.com"]), &[]).is_ok());
}

#[test]
fn the_kind_does_not_change_the_display() {
    let errs = load("network:\n  mode: allowlist\n  allowed_hosts: [Example.com]\n", Format::Yaml, None).err().unwrap();
    assert_eq!(errs[0].kind, BadHost);
    assert_eq!(
        errs[0].to_string(),
        "line 3, column 19: network.allowed_hosts[0]: `Example.com` has uppercase letters; hostnames are lowercase"
    );
}
