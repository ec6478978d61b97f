//! Model APIs: the built-in hosts and `model_apis` entries, `provider_tools`, and what they do to
//! decisions — an allowed model host is inspected (so its request bodies are read) unless `provider_tools: allow`,
//! and plain HTTP to one is refused, since its body would pass unread.

use leash_policy::{parse_host, ProviderTools, DEFAULT_MODEL_APIS};

use super::*;

fn host(name: &str) -> leash_policy::Host {
    parse_host(name).unwrap()
}

const GATEWAY: &str =
    "network:\n  mode: allowlist\n  allowed_hosts: [api.openai.com, models.test, x.openai.azure.com, \
                       pypi.org]\n  model_apis: [models.test, .openai.azure.com]\n";

#[test]
fn the_built_in_model_apis_are_in_every_policy() {
    assert_eq!(DEFAULT_MODEL_APIS, ["api.anthropic.com", "api.openai.com", "generativelanguage.googleapis.com"]);
    for p in [policy(&allowlist(&["pypi.org"])), policy(&blocklist(&["arxiv.org"])), policy(GATEWAY)] {
        for name in DEFAULT_MODEL_APIS {
            assert!(p.is_model_api(&host(name)), "{name}");
        }
        assert!(!p.is_model_api(&host("pypi.org")));
        assert!(!p.is_model_api(&host("sub.api.openai.com")), "a built-in entry is exact");
        assert_eq!(p.provider_tools(), ProviderTools::Strip, "strip by default");
    }
    let inline = Policy::from_inline(&["api.openai.com".to_owned()], &[]).unwrap();
    assert!(inline.filters_provider_tools(&host("api.openai.com")), "--allow policies strip too");
}

#[test]
fn model_apis_add_exact_and_subtree_hosts() {
    let p = policy(GATEWAY);
    for name in ["models.test", "openai.azure.com", "x.openai.azure.com", "a.b.openai.azure.com", "api.anthropic.com"] {
        assert!(p.is_model_api(&host(name)), "{name}");
    }
    for name in ["sub.models.test", "azure.com", "xopenai.azure.com", "pypi.org", "192.0.2.1"] {
        assert!(!p.is_model_api(&host(name)), "{name}");
    }
}

#[test]
fn provider_tools_values_and_errors() {
    let with = |v: &str| format!("network:\n  mode: blocklist\n  blocked_urls: []\n  provider_tools: {v}\n");
    assert_eq!(policy(&with("strip")).provider_tools(), ProviderTools::Strip);
    assert_eq!(policy(&with("refuse")).provider_tools(), ProviderTools::Refuse);
    assert_eq!(policy(&with("allow")).provider_tools(), ProviderTools::Allow);
    assert_eq!(
        errors(&with("drop"), Format::Yaml),
        ["4:19 network.provider_tools: `drop` is not a provider_tools setting; it is `strip`, `refuse` or `allow`"]
    );
    assert_eq!(
        errors(&with("[strip]"), Format::Yaml),
        ["4:19 network.provider_tools: expected a string, found a list"]
    );
    let toml = "[network]\nmode = \"blocklist\"\nblocked_urls = []\nprovider_tools = \"strips\"\n";
    assert_eq!(
        errors(toml, Format::Toml),
        ["4:18 network.provider_tools: `strips` is not a provider_tools setting; it is `strip`, `refuse` or `allow`"]
    );
    let toml =
        "[network]\nmode = \"blocklist\"\nblocked_urls = []\nmodel_apis = [\"gw.test\"]\nprovider_tools = \"refuse\"\n";
    let t = load(toml, Format::Toml, None).unwrap().policy;
    assert!(t.is_model_api(&host("gw.test")) && t.provider_tools() == ProviderTools::Refuse);
}

#[test]
fn model_apis_entries_are_validated_like_hosts() {
    let yaml =
        "network:\n  mode: allowlist\n  allowed_hosts: []\n  model_apis:\n    - Models.test\n    - 192.0.2.1\n    \
                - https://gw.test\n    - 7\n    - gw.test:8443\n";
    assert_eq!(
        errors(yaml, Format::Yaml),
        [
            "5:7 network.model_apis[0]: `Models.test` has uppercase letters; hostnames are lowercase",
            "6:7 network.model_apis[1]: `192.0.2.1` is an IP address; model APIs are named by host",
            "7:7 network.model_apis[2]: `https://gw.test` has a scheme; write the host alone without `http://` or \
             `https://`",
            "8:7 network.model_apis[3]: expected a string, found a number",
            "9:7 network.model_apis[4]: `gw.test:8443` has a port; ports are set with `ports` and `tunnel_ports`",
        ]
    );
    assert_eq!(
        errors("network:\n  mode: allowlist\n  model_apis: gw.test\n", Format::Yaml),
        ["3:15 network.model_apis: expected a list (write `[]` for an empty one), found a string"]
    );
}

#[test]
fn an_allowed_model_host_is_inspected_unless_provider_tools_is_allow() {
    assert_eq!(connect(GATEWAY, "api.openai.com:443"), "inspect rule api.openai.com");
    assert_eq!(connect(GATEWAY, "models.test:443"), "inspect rule models.test");
    assert_eq!(connect(GATEWAY, "x.openai.azure.com:443"), "inspect rule x.openai.azure.com");
    assert_eq!(connect(GATEWAY, "pypi.org:443"), "allow rule pypi.org", "other hosts stay spliced");
    assert_eq!(connect(GATEWAY, "api.anthropic.com:443"), "block not-allowed", "listing a model API allows nothing");
    let blocklist_yaml = blocklist(&["api.anthropic.com"]);
    assert_eq!(connect(&blocklist_yaml, "api.openai.com:443"), "inspect default");
    assert_eq!(connect(&blocklist_yaml, "api.anthropic.com:443"), "block rule api.anthropic.com");
    let allow = format!("{GATEWAY}  provider_tools: allow\n");
    assert_eq!(connect(&allow, "api.openai.com:443"), "allow rule api.openai.com");
    assert_eq!(connect(&format!("{}  provider_tools: allow\n", blocklist_yaml), "api.openai.com:443"), "allow default");
    let refuse = format!("{GATEWAY}  provider_tools: refuse\n");
    assert_eq!(connect(&refuse, "models.test:443"), "inspect rule models.test");
    let p = policy(GATEWAY);
    assert!(
        p.filters_provider_tools(&host("models.test")) && !policy(&allow).filters_provider_tools(&host("models.test"))
    );
    assert!(p.name_is_reachable(&host("models.test")), "an inspected host is reachable");
}

#[test]
fn a_model_hosts_requests_are_allowed_by_the_rules_alone_plain_http_too() {
    // Plain HTTP to a model host (an operator's gateway) is allowed by the rules; the proxy reads its body as it
    // does inside an inspected tunnel.
    assert_eq!(decide_inner(GATEWAY, "https://api.openai.com/v1/responses"), "allow rule api.openai.com");
    assert_eq!(decide(GATEWAY, "http://models.test/v1/messages"), "allow rule models.test");
    assert_eq!(decide(GATEWAY, "http://pypi.org/simple/"), "allow rule pypi.org");
    assert_eq!(decide(GATEWAY, "http://api.anthropic.com/"), "block not-allowed", "a refusal keeps its reason");
    let allow = format!("{GATEWAY}  provider_tools: allow\n");
    assert_eq!(decide(&allow, "http://models.test/v1/messages"), "allow rule models.test");
    assert_eq!(decide(&blocklist(&[]), "http://generativelanguage.googleapis.com/"), "allow default");
}

#[test]
fn a_hello_to_a_model_host_keeps_the_inspect_verdict() {
    assert_eq!(
        hello(GATEWAY, "models.test:443", ClientHelloFacts::ServerName("models.test")),
        "inspect rule models.test"
    );
    assert_eq!(hello(GATEWAY, "models.test:443", ClientHelloFacts::ServerName("other.test")), "block host-mismatch");
}

#[test]
fn check_warns_when_tools_pass_and_when_an_entry_adds_nothing() {
    let yaml = "network:\n  mode: blocklist\n  blocked_urls: [a.com]\n  model_apis: [gw.test, api.openai.com]\n  \
                provider_tools: allow\n";
    assert_eq!(
        warnings(yaml),
        [
            "network.model_apis[1]: `api.openai.com` is a built-in model API already",
            "network.provider_tools: model APIs' provider-side tools (web search, web fetch, remote MCP) pass \
             untouched: the model's provider can fetch what this policy refuses",
        ]
    );
    assert!(warnings(GATEWAY).is_empty());
}

#[test]
fn audit_mode_inspects_an_unlisted_model_api_so_its_tools_are_still_filtered() {
    let audit = "network:\n  mode: audit\n  allowed_hosts: [pypi.org]\n  model_apis: [models.test]\n";
    let tunnel = |p: &Policy, name: &str, tls: TlsInspection| {
        let target = host(name);
        let question = Question::Connect { target: &target, port: 443 };
        (render(&p.decide(&question, tls)), p.admit(&question, tls).treatment.and_then(|t| t.model_gate))
    };
    let on = TlsInspection::Available;
    for p in [policy(audit), policy(&allowlist(&["pypi.org"])).into_audit()] {
        assert!(p.may_inspect(), "the run needs a CA: every model API is reachable");
        for model in ["api.anthropic.com", "models.test"].into_iter().filter(|m| p.is_model_api(&host(m))) {
            assert_eq!(
                tunnel(&p, model, on),
                ("inspect not-allowed".to_owned(), Some(ProviderTools::Strip)),
                "{model}"
            );
            // Without a CA such a tunnel cannot be read: refused, as an allowed one would be, never spliced.
            assert_eq!(tunnel(&p, model, TlsInspection::Unavailable).0, "block needs-inspection");
        }
        // Its requests are decided one by one: would-block, and treated (stripped) as an allowed one's.
        let inner = decide_on(&p, Via::Tunnel, "https://api.anthropic.com/v1/messages");
        assert_eq!(inner, "would-block not-allowed");
        // Any other unlisted host is spliced as before.
        assert_eq!(tunnel(&p, "example.com", on).0, "would-block not-allowed");
    }
}
