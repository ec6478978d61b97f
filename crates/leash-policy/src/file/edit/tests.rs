//! Each shape: the exact new text (every comment and blank line kept), and the loaded policy of the result
//! allowing the new host while deciding every other probe as before.

use super::*;
use crate::file::load;
use crate::{parse_host, Decision, Question, TlsInspection, Verdict};

/// Hosts decided before and after each edit; the edit's own host must change to allowed, every other one not.
const PROBES: &[&str] =
    &["api.anthropic.com", "pypi.org", "files.pythonhosted.org", "example.org", "a.example.org", "other.test"];

fn connect(text: &str, format: Format, profile: Option<&str>, host: &str) -> Decision {
    let loaded = load(text, format, profile).unwrap_or_else(|e| panic!("{e:?}\n{text}"));
    let host = parse_host(host).unwrap();
    loaded.policy.decide(&Question::Connect { target: &host, port: 443 }, TlsInspection::Available)
}

/// Edit, compare with `want`, and check the policies: `probe` (a host the entry covers) goes from refused to allowed.
fn check(before: &str, format: Format, profile: Option<&str>, entry: &str, probe: &str, want: &str) {
    let after = allow_host(before, format, profile, entry).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(after, want, "\n--- got:\n{after}\n--- want:\n{want}");
    assert_eq!(connect(before, format, profile, probe).verdict, Verdict::Block, "{probe} was allowed before");
    let now = connect(&after, format, profile, probe);
    assert_eq!((now.verdict, now.rule.as_deref()), (Verdict::Allow, Some(entry)), "{probe}");
    for other in PROBES.iter().filter(|p| **p != probe) {
        assert_eq!(connect(before, format, profile, other), connect(&after, format, profile, other), "{other}");
    }
    assert_eq!(allow_host(&after, format, profile, entry).unwrap(), after, "a second edit changes nothing");
}

fn yaml(before: &str, entry: &str, probe: &str, want: &str) {
    check(before, Format::Yaml, None, entry, probe, want);
}

fn toml(before: &str, entry: &str, probe: &str, want: &str) {
    check(before, Format::Toml, None, entry, probe, want);
}

fn refused(before: &str, format: Format, profile: Option<&str>, entry: &str) -> EditError {
    allow_host(before, format, profile, entry).expect_err("the edit should be refused")
}

#[test]
fn yaml_block_sequence_with_comments_gets_a_line_like_its_last_item() {
    yaml(
        "# top\nnetwork:\n  mode: ask   # ask me\n  allowed_hosts:\n    - api.anthropic.com\n    # a comment between\n\n    - pypi.org   # the index\n  # after the list\n  ports: [80, 443]\n",
        "api.example.com",
        "api.example.com",
        "# top\nnetwork:\n  mode: ask   # ask me\n  allowed_hosts:\n    - api.anthropic.com\n    # a comment between\n\n    - pypi.org   # the index\n    - api.example.com\n  # after the list\n  ports: [80, 443]\n",
    );
}

#[test]
fn yaml_block_sequence_keeps_its_indentation_and_quoting() {
    yaml(
        "network:\n    mode: allowlist\n    allowed_hosts:\n    -   'pypi.org'\n",
        ".example.com",
        "x.example.com",
        "network:\n    mode: allowlist\n    allowed_hosts:\n    -   'pypi.org'\n    -   '.example.com'\n",
    );
    yaml(
        "network:\n  mode: allowlist\n  allowed_hosts:\n    - \"pypi.org\"",
        "api.example.com",
        "api.example.com",
        "network:\n  mode: allowlist\n  allowed_hosts:\n    - \"pypi.org\"\n    - \"api.example.com\"\n",
    );
}

#[test]
fn yaml_crlf_files_stay_crlf() {
    yaml(
        "network:\r\n  mode: ask\r\n  allowed_hosts:\r\n    - pypi.org\r\n",
        "api.example.com",
        "api.example.com",
        "network:\r\n  mode: ask\r\n  allowed_hosts:\r\n    - pypi.org\r\n    - api.example.com\r\n",
    );
}

#[test]
fn yaml_flow_sequences() {
    yaml(
        "network:\n  mode: ask\n  allowed_hosts: [pypi.org, \"files.pythonhosted.org\"]  # two\n",
        "api.example.com",
        "api.example.com",
        "network:\n  mode: ask\n  allowed_hosts: [pypi.org, \"files.pythonhosted.org\", \"api.example.com\"]  # two\n",
    );
    yaml(
        "network:\n  mode: ask\n  allowed_hosts: [pypi.org,]\n",
        ".example.com",
        "a.example.com",
        "network:\n  mode: ask\n  allowed_hosts: [pypi.org, .example.com,]\n",
    );
    yaml(
        "network:\n  mode: ask\n  allowed_hosts: [ ]\n",
        "api.example.com",
        "api.example.com",
        "network:\n  mode: ask\n  allowed_hosts: [api.example.com]\n",
    );
    yaml(
        "network:\n  mode: ask\n  allowed_hosts: [\n    pypi.org,   # the index\n    api.anthropic.com\n  ]\n",
        "api.example.com",
        "api.example.com",
        "network:\n  mode: ask\n  allowed_hosts: [\n    pypi.org,   # the index\n    api.anthropic.com,\n    api.example.com\n  ]\n",
    );
    yaml(
        "network:\n  mode: ask\n  allowed_hosts: [\n    pypi.org,\n    api.anthropic.com,  # last\n  ]\n",
        "api.example.com",
        "api.example.com",
        "network:\n  mode: ask\n  allowed_hosts: [\n    pypi.org,\n    api.anthropic.com,  # last\n    api.example.com,\n  ]\n",
    );
}

#[test]
fn yaml_without_the_key_gets_one_after_mode() {
    yaml(
        "network:\n  mode: ask  # hold\n  # ports next\n  ports: [443]\n",
        "api.example.com",
        "api.example.com",
        "network:\n  mode: ask  # hold\n  allowed_hosts:\n    - api.example.com\n  # ports next\n  ports: [443]\n",
    );
    // The dash placed as another list's in the section, and four-space keys kept.
    yaml(
        "network:\n    allowed_urls:\n    - github.com/rust-lang/\n    mode: ask\n",
        "api.example.com",
        "api.example.com",
        "network:\n    allowed_urls:\n    - github.com/rust-lang/\n    mode: ask\n    allowed_hosts:\n    - api.example.com\n",
    );
    yaml(
        "network:\n   mode: ask",
        "10.1.2.3",
        "10.1.2.3",
        "network:\n   mode: ask\n   allowed_hosts:\n      - 10.1.2.3\n",
    );
}

#[test]
fn a_profile_edits_its_own_network_only() {
    let before = "network:\n  mode: allowlist\n  allowed_hosts: [pypi.org]\nprofiles:\n  agent:\n    network:\n      mode: ask\n      allowed_hosts:\n        - api.anthropic.com\n  other:\n    network:\n      mode: blocklist\n      blocked_urls: [x.org]\n";
    let want = "network:\n  mode: allowlist\n  allowed_hosts: [pypi.org]\nprofiles:\n  agent:\n    network:\n      mode: ask\n      allowed_hosts:\n        - api.anthropic.com\n        - api.example.com\n  other:\n    network:\n      mode: blocklist\n      blocked_urls: [x.org]\n";
    check(before, Format::Yaml, Some("agent"), "api.example.com", "api.example.com", want);
    let top = allow_host(want, Format::Yaml, None, "api.example.com").unwrap();
    assert!(top.contains("allowed_hosts: [pypi.org, api.example.com]\n"), "{top}");
    assert!(
        matches!(refused(before, Format::Yaml, Some("other"), "a.org"), EditError::NoSection(m) if m.contains("blocklist"))
    );
    assert!(matches!(refused(before, Format::Yaml, Some("nope"), "a.org"), EditError::NoSection(_)));
    let toml_before =
        "[network]\nmode = \"allowlist\"\n\n[profiles.agent.network]\nmode = \"ask\" # held\nports = [443]\n";
    let toml_want = "[network]\nmode = \"allowlist\"\n\n[profiles.agent.network]\nmode = \"ask\" # held\nallowed_hosts = [\"api.example.com\"]\nports = [443]\n";
    check(toml_before, Format::Toml, Some("agent"), "api.example.com", "api.example.com", toml_want);
}

#[test]
fn toml_arrays_on_one_line() {
    toml(
        "# top\n[network]\nmode = \"ask\"\nallowed_hosts = [\"api.anthropic.com\", 'pypi.org'] # two\nports = [80, 443]\n",
        "api.example.com",
        "api.example.com",
        "# top\n[network]\nmode = \"ask\"\nallowed_hosts = [\"api.anthropic.com\", 'pypi.org', 'api.example.com'] # two\nports = [80, 443]\n",
    );
    toml(
        "[network]\nmode = \"ask\"\nallowed_hosts = [\"pypi.org\",]\n",
        ".example.com",
        "x.example.com",
        "[network]\nmode = \"ask\"\nallowed_hosts = [\"pypi.org\", \".example.com\",]\n",
    );
    toml(
        "[network]\nmode = \"ask\"\nallowed_hosts = []\n",
        "api.example.com",
        "api.example.com",
        "[network]\nmode = \"ask\"\nallowed_hosts = [\"api.example.com\"]\n",
    );
}

#[test]
fn toml_arrays_over_several_lines() {
    toml(
        "[network]\nmode = \"ask\"\nallowed_hosts = [\n  \"api.anthropic.com\", # the model\n  # the index:\n  \"pypi.org\",\n]\n",
        "api.example.com",
        "api.example.com",
        "[network]\nmode = \"ask\"\nallowed_hosts = [\n  \"api.anthropic.com\", # the model\n  # the index:\n  \"pypi.org\",\n  \"api.example.com\",\n]\n",
    );
    toml(
        "[network]\nmode = \"ask\"\nallowed_hosts = [\n    \"pypi.org\"  # no trailing comma\n]\n",
        "api.example.com",
        "api.example.com",
        "[network]\nmode = \"ask\"\nallowed_hosts = [\n    \"pypi.org\",  # no trailing comma\n    \"api.example.com\"\n]\n",
    );
}

#[test]
fn toml_without_the_key_and_inline_tables() {
    toml(
        "[network]\n  mode = \"ask\"   # hold\n  ports = [443]\n",
        "api.example.com",
        "api.example.com",
        "[network]\n  mode = \"ask\"   # hold\n  allowed_hosts = [\"api.example.com\"]\n  ports = [443]\n",
    );
    toml(
        "network = { mode = \"ask\", allowed_hosts = [\"pypi.org\"] }\n",
        "api.example.com",
        "api.example.com",
        "network = { mode = \"ask\", allowed_hosts = [\"pypi.org\", \"api.example.com\"] }\n",
    );
    for dotted in ["network = { mode = \"ask\" }\n", "network.mode = \"ask\"\n"] {
        let e = refused(dotted, Format::Toml, None, "api.example.com");
        assert!(e.to_string().contains("by hand"), "{dotted}: {e}");
    }
}

#[test]
fn an_entry_already_listed_leaves_the_text_as_it_is() {
    for (text, format) in [
        ("network:\n  mode: ask\n  allowed_hosts: [ 'api.example.com' ]  # x\n", Format::Yaml),
        ("[network]\nmode = \"ask\"\nallowed_hosts = [\n 'api.example.com',\n]\n", Format::Toml),
    ] {
        assert_eq!(allow_host(text, format, None, "api.example.com").unwrap(), text);
    }
    // Only exactly: a subtree entry does not list the host itself.
    let text = "network:\n  mode: ask\n  allowed_hosts: [.example.com]\n";
    assert_ne!(allow_host(text, Format::Yaml, None, "api.example.com").unwrap(), text);
}

#[test]
fn shapes_that_cannot_be_edited_safely_are_refused() {
    let cases = [
        // An anchored list would grow in every alias too.
        "network:\n  mode: ask\n  allowed_hosts: &hosts [pypi.org]\nprofiles:\n  p:\n    network:\n      mode: ask\n      allowed_hosts: *hosts\n",
        "network: {mode: ask}\n",
        "network:\n  mode: >-\n    ask\n",
        "network:\n  mode: ask\n  allowed_hosts:\n    - - pypi.org\n",
        "network:\n  mode: ask\n  allowed_hosts: [\n    # none yet\n    ]\n",
        "network:\n  mode: ask\n  allowed_hosts: pypi.org\n",
        "network:\n  mode: ask\n  allowed_hosts:\n    - |\n      pypi.org\n",
    ];
    for text in cases {
        let e = refused(text, Format::Yaml, None, "api.example.com");
        assert!(matches!(e, EditError::Unsupported(_)), "{text}: {e:?}");
    }
    assert!(matches!(refused("network:\n  mode: blocklist\n", Format::Yaml, None, "a.org"), EditError::NoSection(_)));
    assert!(matches!(refused("ports: [1]\n", Format::Yaml, None, "a.org"), EditError::NoSection(_)));
    assert!(matches!(refused("network: [\n", Format::Yaml, None, "a.org"), EditError::Syntax(_)));
    for bad in ["https://a.org/", "A.org", "a.org/x", "", "a org"] {
        let e = refused("network:\n  mode: ask\n", Format::Yaml, None, bad);
        assert!(matches!(e, EditError::BadEntry(_)), "{bad}: {e:?}");
    }
}

#[test]
fn the_check_after_an_edit_refuses_text_that_means_more_than_the_entry() {
    let old = parse("network:\n  mode: ask\n  allowed_hosts: [a.org]\n", Format::Yaml).unwrap();
    let right = "network:\n  mode: ask\n  allowed_hosts: [a.org, b.org]\n";
    assert!(verify(&old, right, Format::Yaml, &["network"], "b.org").is_ok());
    for wrong in [
        "network:\n  mode: allowlist\n  allowed_hosts: [a.org, b.org]\n",
        "network:\n  mode: ask\n  allowed_hosts: [a.org, b.org, c.org]\n",
        "network:\n  mode: ask\n  allowed_hosts: [b.org, a.org]\n",
        "network:\n  mode: ask\n  allowed_hosts: [a.org, [b.org]]\n",
        "network:\n  mode: ask\n  allowed_hosts: [a.org, b.org\n",
    ] {
        assert!(matches!(verify(&old, wrong, Format::Yaml, &["network"], "b.org"), Err(EditError::Unsupported(_))));
    }
}

#[test]
fn a_json_policy_is_not_edited_in_place_and_says_so() {
    let before = "{\"network\": {\"mode\": \"allowlist\", \"allowed_hosts\": [\"pypi.org\"]}}";
    let e = refused(before, Format::Json, None, "example.org");
    assert!(matches!(&e, EditError::Unsupported(m) if m.contains("JSON policy is not edited in place")), "{e}");
    // Already listed: nothing to write, so nothing refused.
    assert_eq!(allow_host(before, Format::Json, None, "pypi.org").unwrap(), before);
}
