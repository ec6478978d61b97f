//! Policy files: every error named with its entry, line and column (YAML and TOML alike), every bad entry of every
//! profile reported, profiles replacing the top level whole, warnings for surprising but valid policies.

use leash_policy::{load, Format};

use crate::{decide_on, errors, errors_for, warnings};

const BAD_YAML: &str = "\
network:
  mode: allowlist
  allowed_hosts:
    - api.example.com
    - Example.com
    - .pypi.org
    - example.com:443
  blocked_urls: [192.0.2.1]
  ports: [80, 0, \"443\"]
  colour: blue
";

#[test]
fn every_error_has_its_entry_line_and_column() {
    assert_eq!(
        errors(BAD_YAML, Format::Yaml),
        [
            "5:7 network.allowed_hosts[1]: `Example.com` has uppercase letters; hostnames are lowercase",
            "7:7 network.allowed_hosts[3]: `example.com:443` has a port; ports are set with `ports` and `tunnel_ports`",
            "8:18 network.blocked_urls[0]: `192.0.2.1` is an IP address: an allowlist refuses every address \
             `allowed_hosts` does not list; to refuse it, leave it out there",
            "9:15 network.ports[1]: `0` is not a port; ports are 1-65535",
            "9:18 network.ports[2]: expected a port number, found a string",
            "10:3 network.colour: unknown key `colour`; expected one of `mode`, `allowed_hosts`, `allowed_urls`, \
         `blocked_urls`, `ports`, `tunnel_ports`, `allow_destinations`, `inspect`, `model_apis`, `provider_tools`, `refusals`, `credentials`, `upstream_proxy`, `upstream_proxy_auth_env`, `upstream_proxy_bypass`, `upstream_proxy_ca`, `services`, `methods`",
        ]
    );
}

#[test]
fn errors_display_with_their_position() {
    let errs = load(BAD_YAML, Format::Yaml, None).err().unwrap();
    assert_eq!(
        errs[0].to_string(),
        "line 5, column 7: network.allowed_hosts[1]: `Example.com` has uppercase letters; hostnames are lowercase"
    );
}

const BAD_TOML: &str = "\
[network]
mode = \"allowlist\"
allowed_hosts = [\"api.example.com\", \"Example.com\"]
ports = [80, 0]
colour = \"blue\"
";

#[test]
fn toml_errors_name_the_same_entries_at_toml_positions() {
    let errs = errors(BAD_TOML, Format::Toml);
    assert_eq!(errs[0], "3:37 network.allowed_hosts[1]: `Example.com` has uppercase letters; hostnames are lowercase");
    assert_eq!(errs[1], "4:14 network.ports[1]: `0` is not a port; ports are 1-65535");
    assert!(errs[2].starts_with("5:1 network.colour: unknown key `colour`"), "{}", errs[2]);
    assert_eq!(errs.len(), 3);
}

const PROFILES_YAML: &str = "\
network:
  mode: blocklist
  blocked_urls: [arxiv.org]
  ports: [8080]
profiles:
  verifier:
    network: { mode: allowlist, allowed_hosts: [ok.com, \"bad host\"] }
  agent:
    network:
      mode: greylist
  broken:
    netwrk: {}
";

#[test]
fn every_profile_is_checked_even_when_one_is_chosen() {
    for profile in [None, Some("verifier"), Some("agent")] {
        let errs = errors_for(PROFILES_YAML, Format::Yaml, profile);
        assert_eq!(errs[0], "7:57 profiles.verifier.network.allowed_hosts[1]: `bad host` has ` `; hostnames are letters, digits, hyphens and dots");
        assert_eq!(
            errs[1],
            "10:13 profiles.agent.network.mode: `greylist` is not a mode; it is `allowlist`, `blocklist`, `audit` or `ask`"
        );
        assert!(errs.iter().any(|e| e.starts_with("12:5 profiles.broken.netwrk: unknown key `netwrk`")), "{errs:?}");
        assert!(errs.iter().any(|e| e.contains("profiles.broken.network: missing `network`")), "{errs:?}");
    }
}

const GOOD_PROFILES: &str = "\
network:
  mode: blocklist
  blocked_urls: [arxiv.org]
  ports: [8080]
profiles:
  verifier:
    network: { mode: allowlist, allowed_hosts: [ok.com] }
  agent:
    network: { mode: blocklist, blocked_urls: [] }
";

const GOOD_PROFILES_TOML: &str = "\
[network]
mode = \"blocklist\"
blocked_urls = [\"arxiv.org\"]
ports = [8080]

[profiles.verifier.network]
mode = \"allowlist\"
allowed_hosts = [\"ok.com\"]

[profiles.agent]
network = { mode = \"blocklist\", blocked_urls = [] }
";

fn decide_with(text: &str, format: Format, profile: Option<&str>, url: &str) -> String {
    let policy = load(text, format, profile).unwrap_or_else(|e| panic!("{e:?}")).policy;
    decide_on(&policy, leash_policy::Via::ForwardProxy, url)
}

#[test]
fn a_profile_replaces_the_top_level_network_whole() {
    for (text, format) in [(GOOD_PROFILES, Format::Yaml), (GOOD_PROFILES_TOML, Format::Toml)] {
        let d = |profile, url| decide_with(text, format, profile, url);
        assert_eq!(d(None, "http://arxiv.org:8080/"), "block rule arxiv.org");
        assert_eq!(d(None, "http://example.com/"), "block port");
        // The verifier's allowlist, with the default ports: nothing of the top level's ports or rules carries over.
        assert_eq!(d(Some("verifier"), "http://ok.com/"), "allow rule ok.com");
        assert_eq!(d(Some("verifier"), "http://ok.com:8080/"), "block port");
        assert_eq!(d(Some("verifier"), "http://arxiv.org/"), "block not-allowed");
        assert_eq!(d(Some("agent"), "http://arxiv.org/"), "allow default");
    }
}

#[test]
fn an_unknown_profile_lists_the_known_ones() {
    let errs = errors_for(GOOD_PROFILES, Format::Yaml, Some("reviewer"));
    assert_eq!(errs, ["5:1 profiles: no profile `reviewer`; the policy defines `verifier`, `agent`"]);
    let errs = errors_for("network: {mode: blocklist}\n", Format::Yaml, Some("x"));
    assert_eq!(errs, ["0:0 profiles: no profile `x`: the policy defines no profiles"]);
}

#[test]
fn toml_and_yaml_decide_alike() {
    let yaml = "network:\n  mode: allowlist\n  allowed_hosts: [.pypi.org, 192.0.2.7]\n  allowed_urls: [github.com/rust-lang/]\n  \
                ports: [80]\n  tunnel_ports: [443]\n  allow_destinations: [10.0.0.0/8]\n  inspect: all\n";
    let toml = "[network]\nmode = \"allowlist\"\nallowed_hosts = [\".pypi.org\", \"192.0.2.7\"]\n\
                allowed_urls = [\"github.com/rust-lang/\"]\nports = [80]\ntunnel_ports = [443]\n\
                allow_destinations = [\"10.0.0.0/8\"]\ninspect = \"all\"\n";
    for url in [
        "http://pypi.org/",
        "http://192.0.2.7/",
        "http://github.com/rust-lang/x",
        "http://github.com/x",
        "http://a.com:443/",
    ] {
        assert_eq!(decide_with(yaml, Format::Yaml, None, url), decide_with(toml, Format::Toml, None, url), "{url}");
    }
    let y = load(yaml, Format::Yaml, None).unwrap().policy;
    let t = load(toml, Format::Toml, None).unwrap().policy;
    assert_eq!((y.inspect_all(), y.allow_destinations()), (t.inspect_all(), t.allow_destinations()));
}

#[test]
fn structural_errors() {
    let e = |text: &str| errors(text, Format::Yaml);
    assert_eq!(e(""), ["1:1 network: the policy is empty; it needs a `network` section"]);
    assert_eq!(e("profiles: {}\n"), ["1:1 network: missing `network`; every policy has a top-level one"]);
    assert_eq!(e("network: []\n"), ["1:10 network: expected a mapping, found a list"]);
    assert_eq!(
        e("network:\n  allowed_hosts: []\n"),
        ["2:3 network.mode: missing `mode`; it is `allowlist`, `blocklist`, `audit` or `ask`"]
    );
    assert_eq!(
        e("network:\n  mode: allowlist\n  mode: blocklist\n"),
        ["3:3 network.mode: `mode` is given twice (first on line 2)"]
    );
    assert_eq!(e("network:\n  mode: 1\n"), ["2:9 network.mode: expected a string, found a number"]);
    assert_eq!(
        e("network:\n  mode: allowlist\n  allowed_hosts: a.com\n"),
        ["3:18 network.allowed_hosts: expected a list (write `[]` for an empty one), found a string"]
    );
    assert_eq!(
        e("network:\n  mode: allowlist\n  allowed_hosts:\n"),
        ["3:16 network.allowed_hosts: expected a list (write `[]` for an empty one), found nothing"]
    );
    assert_eq!(
        e("network:\n  mode: blocklist\n  blocked_urls: [a.com, b.com/x]\n  allowed_hosts: [.a.com, 192.0.2.1]\n  \
           allowed_urls: [b.com/X]\n"),
        [
            "4:19 network.allowed_hosts[0]: `.a.com` is allowed and `a.com` (network.blocked_urls[0]) blocked at the \
             same specificity, so which one decides cannot be told; remove one (a more specific entry of either kind \
             is an exception)",
            "4:27 network.allowed_hosts[1]: `192.0.2.1` is an IP address: a blocklist refuses every IP literal, and \
             an exception cannot re-admit one",
            "5:18 network.allowed_urls[0]: `b.com/X` is allowed and `b.com/x` (network.blocked_urls[1]) blocked at \
             the same specificity, so which one decides cannot be told; remove one (a more specific entry of either \
             kind is an exception)",
        ]
    );
    assert_eq!(
        e("network:\n  mode: blocklist\n  inspect: some\n"),
        ["3:12 network.inspect: `some` is not an inspect setting; the only value is `all`"]
    );
    assert_eq!(e("network:\n  mode: blocklist\n  allow_destinations: [10.0.0.1/8, x]\n"), [
        "3:24 network.allow_destinations[0]: `10.0.0.1/8` has bits set after the /8 prefix; write the network address",
        "3:36 network.allow_destinations[1]: `x` is not an IP address",
    ]);
    assert_eq!(
        e("network:\n  mode: blocklist\n  tunnel_ports: [70000]\n"),
        ["3:18 network.tunnel_ports[0]: `70000` is not a port; ports are 1-65535"]
    );
    assert_eq!(
        e("network:\n  mode: blocklist\nprofiles:\n  bad name:\n    network: {mode: blocklist}\n"),
        ["4:3 profiles.bad name: `bad name` is not a profile name; use letters, digits, `-` and `_`"]
    );
}

#[test]
fn entry_errors_name_the_rule_broken() {
    let one = |list: &str, entry: &str| {
        let mode = if list == "blocked_urls" { "blocklist" } else { "allowlist" };
        let errs = errors(&format!("network:\n  mode: {mode}\n  {list}: ['{entry}']\n"), Format::Yaml);
        assert_eq!(errs.len(), 1, "{errs:?}");
        errs[0].split_once(": ").map(|(_, m)| m.to_owned()).unwrap()
    };
    assert!(one("allowed_hosts", "https://a.com").contains("has a scheme"));
    assert!(one("allowed_hosts", "*.a.com").contains("has a `*`; write `.example.com`"));
    // A bare `*` is no host at all: the advice is the mode that allows everything but a list.
    let star = one("allowed_hosts", "*");
    assert!(
        star.contains("would allow every host") && star.contains("mode: blocklist") && !star.contains(".example.com")
    );
    assert!(one("allowed_hosts", "bücher.de").contains("non-ASCII"));
    assert!(one("allowed_hosts", "a..b").contains("empty label"));
    assert!(one("allowed_hosts", "[::1]").contains("IPv6 literal"));
    assert!(one("allowed_hosts", "::1").contains("IPv6 literal"));
    assert!(one("allowed_hosts", "0x7f.0.0.1").contains("spells an IP address"));
    assert!(one("allowed_hosts", "127.1").contains("spells an IP address"));
    assert!(one("allowed_hosts", "").contains("empty entry"));
    assert!(one("allowed_urls", "github.com").contains("has no path"));
    assert!(one("allowed_urls", ".github.com/x").contains("leading dot"));
    assert!(one("allowed_urls", "192.0.2.1/x").contains("`allowed_hosts`"));
    assert!(one("blocked_urls", ".arxiv.org").contains("already cover every subdomain"));
    assert!(one("blocked_urls", "arxiv.org:443/abs").contains("has a port"));
    assert!(one("blocked_urls", "arxiv.org/abs?x=1").contains("query"));
    assert!(one("blocked_urls", "arxiv.org/abs#x").contains('#'));
    assert!(one("blocked_urls", "arxiv.org/%zz").contains("percent-escape"));
    assert!(one("blocked_urls", "arxiv.org/a%00").contains("control character"));
    assert!(one("blocked_urls", "Arxiv.org/abs").contains("uppercase"));
    assert!(one("blocked_urls", "*.arxiv.org").contains("has a `*`"));
}

#[test]
fn syntax_errors_have_positions() {
    let errs = errors("network:\n  mode: [allowlist\n", Format::Yaml);
    assert!(errs[0].starts_with("3:") && errs[0].contains("not valid YAML"), "{errs:?}");
    let errs = errors("[network]\nmode = \"a\"\nmode = \"b\"\n", Format::Toml);
    assert!(errs[0].starts_with("3:1 ") && errs[0].contains("not valid TOML"), "{errs:?}");
    let errs = errors("network:\n  mode: allowlist\n---\nnetwork: {}\n", Format::Yaml);
    assert!(errs[0].contains("more than one YAML document"), "{errs:?}");
    assert!(errors("network: !!map {}\n", Format::Yaml)[0].contains("tags"));
}

#[test]
fn warnings_for_surprising_allowlists() {
    let w = warnings(
        "network:\n  mode: allowlist\n  allowed_hosts: [.example.com, a.example.com, api.x.com, api.x.com, 192.0.2.1, \
         .a.example.com, example.com]\n  allowed_urls: [example.com/x, y.com/a/, y.com/a/b, y.com/a/]\n  ports: []\n  \
         allow_destinations: [0.0.0.0/0, '::/0']\n",
    );
    assert_eq!(
        w,
        [
            "network.allowed_hosts[1]: `a.example.com` is already covered by `.a.example.com`",
            "network.allowed_hosts[3]: `api.x.com` repeats network.allowed_hosts[2]",
            "network.allowed_hosts[4]: `192.0.2.1` is an IP address: it is allowed in exactly this spelling, and the \
         destination check still applies",
            "network.allowed_hosts[5]: `.a.example.com` is already covered by `.example.com`",
            "network.allowed_hosts[6]: `example.com` is already covered by `.example.com`",
            "network.allowed_urls[0]: `example.com/x` is already covered by `example.com`",
            "network.allowed_urls[2]: `y.com/a/b` is already covered by `y.com/a/`",
            "network.allowed_urls[3]: `y.com/a/` repeats network.allowed_urls[1]",
            "network.ports: no port is listed: every plain-HTTP request is refused",
            "network.allow_destinations[0]: `0.0.0.0/0` exempts every IPv4 address from the internal-destination check",
            "network.allow_destinations[1]: `::/0` exempts every IPv6 address from the internal-destination check",
        ]
    );
    assert_eq!(
        warnings("network:\n  mode: allowlist\n  tunnel_ports: []\n"),
        [
            "network: the allowlist is empty: nothing is allowed",
            "network.tunnel_ports: no port is listed: every CONNECT is refused",
        ]
    );
}

#[test]
fn warnings_for_surprising_blocklists() {
    let w = warnings(
        "network:\n  mode: blocklist\n  blocked_urls: [example.com, a.example.com, example.com/x, b.com/p, b.com/p/q, \
         c.b.com/p/z, b.com/P, 192.0.2.1, d.com/, b.com/p/./q, b.com/./p]\n",
    );
    assert_eq!(w, [
        "network.blocked_urls[1]: `a.example.com` is already covered by `example.com`",
        "network.blocked_urls[2]: `example.com/x` is already covered by `example.com`",
        "network.blocked_urls[4]: `b.com/p/q` is already covered by `b.com/p`",
        "network.blocked_urls[5]: `c.b.com/p/z` is already covered by `b.com/p`",
        "network.blocked_urls[6]: `b.com/P` repeats network.blocked_urls[3]",
        "network.blocked_urls[7]: `192.0.2.1`: a blocklist refuses every IP literal already; this entry does nothing",
        "network.blocked_urls[9]: `b.com/p/./q` repeats network.blocked_urls[4]",
        "network.blocked_urls[10]: `b.com/./p` repeats network.blocked_urls[3]",
    ]);
    assert_eq!(warnings("network:\n  mode: blocklist\n"), ["network: the blocklist is empty: everything is allowed"]);
    // `d.com/` used to block every path through inspection, with a warning to write `d.com`: a blocked prefix loses
    // its trailing `/` now, so it is the host's rule, decided on the tunnel's name.
    let trailing = load("network:\n  mode: blocklist\n  blocked_urls: [d.com/]\n", Format::Yaml, None).unwrap().policy;
    let host = leash_policy::parse_host("d.com").unwrap();
    let d = trailing
        .decide(&leash_policy::Question::Connect { target: &host, port: 443 }, leash_policy::TlsInspection::Available);
    assert_eq!((d.verdict, d.rule.as_deref()), (leash_policy::Verdict::Block, Some("d.com/")));
    assert!(warnings("network:\n  mode: blocklist\n  blocked_urls: [a.com, b.com/x]\n").is_empty());
}

#[test]
fn formats_follow_the_extension() {
    use std::path::Path;
    assert_eq!(Format::from_path(Path::new("p.yaml")), Some(Format::Yaml));
    assert_eq!(Format::from_path(Path::new("dir/p.YML")), Some(Format::Yaml));
    assert_eq!(Format::from_path(Path::new("p.toml")), Some(Format::Toml));
    assert_eq!(Format::from_path(Path::new("p.json")), Some(Format::Json));
    assert_eq!(Format::from_path(Path::new("p.ini")), None);
    assert_eq!(Format::from_path(Path::new("policy")), None);
}

#[test]
fn yaml_anchors_are_expanded() {
    let text = "network:\n  mode: allowlist\n  allowed_hosts: &hosts [a.com]\nprofiles:\n  p:\n    network:\n      \
                mode: allowlist\n      allowed_hosts: *hosts\n";
    let policy = load(text, Format::Yaml, Some("p")).unwrap().policy;
    assert_eq!(decide_on(&policy, leash_policy::Via::ForwardProxy, "http://a.com/"), "allow rule a.com");
}

#[test]
fn ask_mode_is_an_allowlist_that_asks_with_an_allowlists_errors() {
    for (text, format) in [
        ("network:\n  mode: ask\n  allowed_hosts: [pypi.org]\n", Format::Yaml),
        ("[network]\nmode = \"ask\"\nallowed_hosts = [\"pypi.org\"]\n", Format::Toml),
    ] {
        let policy = load(text, format, None).map_err(|e| format!("{e:?}")).unwrap().policy;
        assert!(policy.asks() && !policy.audits() && policy.mode() == leash_policy::Mode::Allowlist, "{text}");
    }
    let plain = load("network:\n  mode: allowlist\n", Format::Yaml, None).ok().unwrap().policy;
    assert!(!plain.asks());
    // The same lists, the same refusals, word for word.
    let with_blocked =
        |mode: &str| format!("network:\n  mode: {mode}\n  allowed_hosts: [.x.org]\n  blocked_urls: [x.org]\n");
    assert_eq!(errors(&with_blocked("ask"), Format::Yaml), errors(&with_blocked("allowlist"), Format::Yaml));
    assert_eq!(
        errors(&with_blocked("ask"), Format::Yaml),
        ["3:19 network.allowed_hosts[0]: `.x.org` is allowed and `x.org` (network.blocked_urls[0]) blocked at the \
          same specificity, so which one decides cannot be told; remove one (a more specific entry of either kind is \
          an exception)"]
    );
    let profile =
        "network:\n  mode: allowlist\nprofiles:\n  agent:\n    network: {mode: ask, blocked_urls: [192.0.2.1]}\n";
    assert_eq!(errors(profile, Format::Yaml).len(), 1, "a profile in ask mode is checked too");
}

#[test]
fn refusals_are_announced_unless_the_policy_says_as_not_found_and_a_wrong_value_is_named() {
    let load = |text: &str| leash_policy::load(text, Format::Yaml, None);
    let announced = load("network:\n  mode: blocklist\n  blocked_urls: [a.com]\n").unwrap().policy;
    assert_eq!(announced.refusals(), leash_policy::Refusals::Announced);
    let quiet =
        load("network:\n  mode: allowlist\n  allowed_hosts: [a.com]\n  refusals: as-not-found\n").unwrap().policy;
    assert_eq!(quiet.refusals(), leash_policy::Refusals::AsNotFound);
    assert_eq!(
        errors("network:\n  mode: blocklist\n  refusals: silent\n", Format::Yaml),
        ["3:13 network.refusals: `silent` is not a refusals setting; it is `announced` or `as-not-found`"]
    );
}
