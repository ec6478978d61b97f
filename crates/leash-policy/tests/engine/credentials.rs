//! The `credentials` section (and, beside it, `upstream_proxy`): presets and full entries, every mistake reported, and what a credential changes in
//! decisions (its hosts always inspected, never reached over plain HTTP unless the entry allows it).

use leash_policy::{Format, HeaderForm, SecretSource};

use crate::{connect, decide, decide_on, errors, policy, warnings};

const BLOCK_WITH_KEYS: &str = "network:\n  mode: blocklist\n  blocked_urls: []\n  credentials:\n    \
                               - preset: anthropic\n    - preset: github\n      env: GH_TOKEN\n    \
                               - name: mirror\n      hosts: [.pypi.corp.test]\n      env: PYPI_TOKEN\n      \
                               file: /run/secrets/pypi\n      header: Authorization\n      basic: __token__\n      \
                               plaintext: true\n";

#[test]
fn presets_and_full_entries_load_with_their_defaults() {
    let p = policy(BLOCK_WITH_KEYS);
    let c = p.credentials();
    assert_eq!(c.len(), 3);
    assert_eq!((&*c[0].name, c[0].env.as_str(), c[0].header.as_str()), ("anthropic", "ANTHROPIC_API_KEY", "x-api-key"));
    assert_eq!(c[0].source, SecretSource::Env("ANTHROPIC_API_KEY".into()));
    assert_eq!((&*c[1].name, c[1].env.as_str()), ("github", "GH_TOKEN"), "a preset's variable can be renamed");
    assert_eq!(c[1].form, HeaderForm::Basic("x-access-token".into()));
    assert_eq!(c[2].source, SecretSource::File("/run/secrets/pypi".into()));
    assert_eq!((c[2].header.as_str(), &c[2].form), ("authorization", &HeaderForm::Basic("__token__".into())));
    assert!(c[2].plaintext && !c[0].plaintext);
    let host = |h: &str| leash_policy::parse_host(h).unwrap();
    assert_eq!(p.credential_for(&host("files.pypi.corp.test")).map(|c| &*c.name), Some("mirror"));
    assert_eq!(p.credential_for(&host("api.github.com")).map(|c| &*c.name), Some("github"));
    assert!(p.credential_for(&host("example.org")).is_none());
    assert!(p.may_inspect());
}

#[test]
fn presets_cover_every_place_their_providers_official_clients_send_the_key() {
    let text = "network:\n  mode: blocklist\n  blocked_urls: []\n  credentials:\n    - preset: anthropic\n    \
                - preset: openai\n    - preset: gemini\n    - name: gw\n      hosts: [gw.test]\n      env: GW\n      \
                header: [X-Key, Authorization]\n      query: token\n";
    let p = policy(text);
    let places = |i: usize| {
        let c = &p.credentials()[i];
        (c.headers().map(str::to_owned).collect::<Vec<_>>(), c.query.clone())
    };
    assert_eq!(places(0), (vec!["x-api-key".into(), "authorization".into()], None), "Anthropic's SDK sends Bearer");
    assert_eq!(places(1), (vec!["authorization".into()], None));
    assert_eq!(places(2), (vec!["x-goog-api-key".into()], Some("key".into())), "Gemini's REST API takes ?key=");
    assert_eq!(places(3), (vec!["x-key".into(), "authorization".into()], Some("token".into())));
    let entry = |body: &str| format!("network:\n  mode: blocklist\n  blocked_urls: []\n  credentials:\n{body}");
    let errs = errors(&entry("    - preset: gemini\n      query: \"k y\"\n      header: []\n"), Format::Yaml);
    assert!(errs.iter().any(|e| e.contains("`k y` is not a query parameter name")), "{errs:?}");
    assert!(errs.iter().any(|e| e.contains("a credential needs at least one header")), "{errs:?}");
}

#[test]
fn a_credentials_host_is_always_inspected_and_never_reached_in_clear() {
    assert_eq!(connect(BLOCK_WITH_KEYS, "api.anthropic.com:443"), "inspect default");
    assert_eq!(connect(BLOCK_WITH_KEYS, "github.com:443"), "inspect default");
    assert_eq!(connect(BLOCK_WITH_KEYS, "example.org:443"), "allow default");
    assert_eq!(decide(BLOCK_WITH_KEYS, "http://github.com/x"), "block credential-plaintext");
    // The entry that allows plaintext (a gateway on a private network) is reached over plain HTTP.
    assert_eq!(decide(BLOCK_WITH_KEYS, "http://files.pypi.corp.test/simple/"), "allow default");
    let allow =
        "network:\n  mode: allowlist\n  allowed_hosts: [api.openai.com]\n  credentials:\n    - preset: openai\n";
    assert_eq!(connect(allow, "api.openai.com:443"), "inspect rule api.openai.com");
}

#[test]
fn neither_audit_mode_nor_ask_mode_lets_a_credential_go_in_clear() {
    use leash_policy::Via;
    let allow = "network:\n  mode: allowlist\n  allowed_hosts: [example.org]\n  ports: [80]\n  credentials:\n    \
                 - preset: openai\n    - name: gw\n      hosts: [gw.test]\n      env: GW\n      header: x-key\n      \
                 plaintext: true\n";
    let (audit, ask) = (policy(allow).into_audit(), policy(allow).into_ask().unwrap());
    // The host is listed nowhere: audit mode would let it through, ask mode would ask; over plain HTTP neither does.
    assert_eq!(decide_on(&audit, Via::ForwardProxy, "http://api.openai.com/v1/models"), "block credential-plaintext");
    assert_eq!(decide_on(&ask, Via::ForwardProxy, "http://api.openai.com/v1/models"), "block credential-plaintext");
    // Over HTTPS the host is still lifted (audit) or asked about (ask), as any unlisted host; an entry that allows
    // plaintext is too.
    assert_eq!(decide_on(&audit, Via::Tunnel, "https://api.openai.com/v1/models"), "would-block not-allowed");
    assert_eq!(decide_on(&ask, Via::Tunnel, "https://api.openai.com/v1/models"), "block not-allowed");
    assert_eq!(decide_on(&audit, Via::ForwardProxy, "http://gw.test/x"), "would-block not-allowed");
    // Without audit or ask the rules' own reason stands.
    assert_eq!(decide(allow, "http://api.openai.com/v1/models"), "block not-allowed");
}

#[test]
fn every_mistake_in_an_entry_is_reported() {
    let entry = |body: &str| format!("network:\n  mode: blocklist\n  blocked_urls: []\n  credentials:\n{body}");
    let errs = errors(&entry("    - preset: anthropik\n"), Format::Yaml);
    assert!(errs[0].contains("`anthropik` is not a preset; the presets are `anthropic`"), "{errs:?}");
    let errs = errors(&entry("    - name: x\n      env: X\n"), Format::Yaml);
    assert!(errs.iter().any(|e| e.contains("credentials[0].header: missing `header`")), "{errs:?}");
    assert!(errs.iter().any(|e| e.contains("credentials[0].hosts: missing `hosts`")), "{errs:?}");
    let errs = errors(&entry("    - preset: openai\n      hosts: [10.0.0.1]\n"), Format::Yaml);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(errs[0].contains("is an address; a credential belongs to names"), "{errs:?}");
    let errs = errors(&entry("    - preset: openai\n      scheme: Bearer\n      basic: me\n"), Format::Yaml);
    assert!(errs[0].contains("give `scheme` or `basic`, not both"), "{errs:?}");
    let errs = errors(&entry("    - preset: openai\n    - preset: openai\n"), Format::Yaml);
    assert!(errs.iter().any(|e| e.contains("a credential named `openai` is given twice")), "{errs:?}");
    let errs = errors(&entry("    - preset: openai\n      env: 1BAD\n      header: \"bad header\"\n"), Format::Yaml);
    assert!(errs.iter().any(|e| e.contains("`1BAD` is not an environment variable name")), "{errs:?}");
    assert!(errs.iter().any(|e| e.contains("`bad header` is not a header")), "{errs:?}");
    let errs = errors(&entry("    - preset: openai\n      secret: sk-123\n"), Format::Yaml);
    assert!(errs[0].contains("unknown key `secret`"), "a secret is never written in the policy: {errs:?}");
}

#[test]
fn a_credential_for_a_host_the_policy_refuses_is_a_warning() {
    let allow = "network:\n  mode: allowlist\n  allowed_hosts: [pypi.org]\n  credentials:\n    - preset: anthropic\n";
    let w = warnings(allow);
    assert_eq!(
        w,
        ["network.credentials[0].hosts[0]: `api.anthropic.com` is refused by this policy (not-allowed), so the \
          credential `anthropic` is never used there"]
    );
}

#[test]
fn a_subdomain_entry_is_a_warning_with_add_or_without() {
    let entry = |add: &str| {
        format!(
            "network:\n  mode: blocklist\n  blocked_urls: [x.test]\n  credentials:\n    - name: corp\n      \
             hosts: [.example.com, api.example.org]\n      env: CORP\n      header: authorization\n{add}"
        )
    };
    assert_eq!(
        warnings(&entry("      add: true\n")),
        ["network.credentials[0].hosts[0]: `.example.com` with `add: true` puts the real secret of `corp` on every \
          request to any subdomain of `example.com`, also one an attacker can register or point elsewhere; list the \
          exact hosts"]
    );
    // Without `add` the value goes wherever under it the sandbox sends the placeholder: a name it controls too.
    assert_eq!(
        warnings(&entry("")),
        ["network.credentials[0].hosts[0]: `.example.com` puts the real secret of `corp` on any request to a \
          subdomain of `example.com` that carries its placeholder, so the sandbox can have it sent to one an attacker \
          can register or point elsewhere; list the exact hosts"]
    );
    let exact = "network:\n  mode: blocklist\n  blocked_urls: [x.test]\n  credentials:\n    - name: corp\n      \
                 hosts: [api.example.com, api.example.org]\n      env: CORP\n      header: authorization\n";
    assert!(warnings(exact).is_empty(), "exact hosts are no warning");
}

#[test]
fn an_upstream_proxy_is_an_http_url_with_its_auth_variable_and_bypass_list() {
    let p = policy(
        "network:\n  mode: blocklist\n  blocked_urls: []\n  upstream_proxy: http://proxy.corp.test:3128\n  \
         upstream_proxy_auth_env: CORP_PROXY\n  upstream_proxy_bypass: [.internal.test, pypi.test]\n",
    );
    let up = p.upstream_proxy().unwrap();
    assert_eq!((up.authority().as_str(), up.auth_env.as_deref()), ("proxy.corp.test:3128", Some("CORP_PROXY")));
    let host = |h: &str| leash_policy::parse_host(h).unwrap();
    assert!(up.bypasses(&host("a.internal.test")) && up.bypasses(&host("pypi.test")));
    assert!(!up.bypasses(&host("files.pypi.test")) && !up.bypasses(&host("example.org")));
    let entry = |body: &str| format!("network:\n  mode: blocklist\n  blocked_urls: []\n{body}");
    let errs = errors(&entry("  upstream_proxy: http://proxy:3128\n  upstream_proxy_ca: /etc/ca.pem\n"), Format::Yaml);
    assert!(errs[0].contains("a CA is for an https:// upstream proxy"), "{errs:?}");
    let errs = errors(&entry("  upstream_proxy_ca: /etc/ca.pem\n"), Format::Yaml);
    assert!(errs[0].contains("`upstream_proxy_ca` needs an `upstream_proxy`"), "{errs:?}");
    let errs = errors(&entry("  upstream_proxy_bypass: [x.test]\n"), Format::Yaml);
    assert!(errs[0].contains("`upstream_proxy_bypass` needs an `upstream_proxy`"), "{errs:?}");
    let errs =
        errors(&entry("  upstream_proxy: http://proxy:3128\n  upstream_proxy_bypass: [10.0.0.1]\n"), Format::Yaml);
    assert!(errs[0].contains("is an address"), "{errs:?}");
    let w = warnings(
        &entry("  upstream_proxy: http://proxy:3128\n  blocked_urls: [x.test]\n").replace("  blocked_urls: []\n", ""),
    );
    assert!(
        w.iter().any(|w| w.contains("refusing names that resolve to internal addresses is the upstream proxy's job")),
        "{w:?}"
    );
}

#[test]
fn an_https_upstream_proxy_has_its_ca_file_named_not_read() {
    let p = policy(
        "network:\n  mode: blocklist\n  blocked_urls: []\n  upstream_proxy: https://10.9.8.7:3129/\n  \
         upstream_proxy_ca: corp-ca.pem\n",
    );
    let up = p.upstream_proxy().unwrap();
    assert_eq!((up.url().as_str(), up.tls), ("https://10.9.8.7:3129", true));
    assert_eq!(up.ca_file.as_deref(), Some("corp-ca.pem"), "a path as written: the caller reads it");
    let plain = policy("network:\n  mode: blocklist\n  blocked_urls: []\n  upstream_proxy: http://proxy:3128\n");
    let up = plain.upstream_proxy().unwrap();
    assert_eq!((up.url().as_str(), up.tls, up.ca_file.as_deref()), ("http://proxy:3128", false, None));
}
