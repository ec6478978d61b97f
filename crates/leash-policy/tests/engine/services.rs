//! The `services` section: what an entry says, and the checks that keep every service a gate (its target not also
//! reachable through the proxy, no loopback name allowed beside it, no listener on leash's own ports).

use leash_policy::{load, Format, PolicyError, PolicyErrorKind, Service, ServiceKind, ServiceListen, ServiceTarget};

fn services(yaml: &str) -> Result<Vec<Service>, Vec<PolicyError>> {
    let text = format!("network:\n  mode: allowlist\n  allowed_hosts: [pypi.org]\n  services:\n{yaml}");
    load(&text, Format::Yaml, None).map(|l| l.policy.services().to_vec())
}

fn errors(yaml_network: &str) -> Vec<(PolicyErrorKind, String, String)> {
    match load(yaml_network, Format::Yaml, None) {
        Ok(_) => panic!("policy should be refused:\n{yaml_network}"),
        Err(errs) => errs.into_iter().map(|e| (e.kind, e.entry, e.message)).collect(),
    }
}

#[test]
fn an_entry_names_a_listener_a_target_and_a_kind() {
    let got = services(
        "    - {name: mcp, listen: 8080, target: '127.0.0.1:9000'}\n    \
         - {name: tools, listen: /run/leash/tools.sock, target: /var/run/tools.sock, kind: tcp}\n    \
         - {name: gw, listen: 4000, target: 'localhost:4000', kind: http, paths: [/v1/chat, /v1/models/]}\n    \
         - {name: a2a, listen: 7000, target: '[::1]:7000'}\n",
    )
    .unwrap();
    assert_eq!(got.len(), 4);
    assert_eq!(got[0].listen, ServiceListen::Port(8080));
    assert_eq!(got[0].target, ServiceTarget::Tcp { host: "127.0.0.1".into(), port: 9000 });
    assert_eq!(got[0].kind, ServiceKind::Tcp);
    assert_eq!(got[1].listen, ServiceListen::Socket("/run/leash/tools.sock".into()));
    assert_eq!(got[1].target, ServiceTarget::Socket("/var/run/tools.sock".into()));
    let ServiceKind::Http { paths } = &got[2].kind else { panic!("{:?}", got[2].kind) };
    let paths: Vec<&str> = paths.iter().map(|p| p.as_str()).collect();
    assert_eq!(paths, ["/v1/chat", "/v1/models/"]);
    assert_eq!(got[3].target.shown(), "[::1]:7000");
}

#[test]
fn toml_says_the_same() {
    let text =
        "[network]\nmode = \"allowlist\"\nallowed_hosts = [\"pypi.org\"]\n\n[[network.services]]\nname = \"mcp\"\n\
                listen = 8080\ntarget = \"127.0.0.1:9000\"\nkind = \"http\"\npaths = [\"/mcp\"]\n";
    let policy = load(text, Format::Toml, None).unwrap().policy;
    assert_eq!(policy.services()[0].name.as_ref(), "mcp");
    assert_eq!(policy.service_on_port(8080).map(|s| s.name.as_ref()), Some("mcp"));
}

#[test]
fn malformed_entries_are_refused_each_with_its_reason() {
    let cases = [
        ("{listen: 8080, target: '127.0.0.1:9000'}", "missing `name`"),
        ("{name: m, target: '127.0.0.1:9000'}", "missing `listen`"),
        ("{name: m, listen: 8080}", "missing `target`"),
        ("{name: 'm m', listen: 8080, target: '127.0.0.1:9000'}", "not a service name"),
        ("{name: m, listen: 70000, target: '127.0.0.1:9000'}", "not a port"),
        ("{name: m, listen: run/x.sock, target: '127.0.0.1:9000'}", "not an absolute Unix socket path"),
        ("{name: m, listen: /run/../x.sock, target: '127.0.0.1:9000'}", "not an absolute Unix socket path"),
        ("{name: m, listen: 8080, target: '127.0.0.1'}", "has no port"),
        ("{name: m, listen: 8080, target: '8.8.8.8:53'}", "not on the host's loopback or a private network"),
        ("{name: m, listen: 8080, target: 'http://gw:80'}", "is not an address"),
        ("{name: m, listen: 8080, target: 'gw_1:80'}", "names no valid host"),
        ("{name: m, listen: 8080, target: '127.0.0.1:9000', kind: udp}", "not a service kind"),
        ("{name: m, listen: 8080, target: '127.0.0.1:9000', paths: [/a]}", "needs `kind: http`"),
        ("{name: m, listen: 8080, target: '127.0.0.1:9000', kind: http, paths: [/a/../b]}", "not a canonical path"),
        ("{name: m, listen: 8080, target: '127.0.0.1:9000', colour: red}", "unknown key `colour`"),
    ];
    for (entry, why) in cases {
        let errs = services(&format!("    - {entry}\n")).expect_err(entry);
        assert!(errs.iter().any(|e| e.message.contains(why)), "{entry}: {errs:?}");
    }
}

#[test]
fn names_and_listeners_are_each_used_once() {
    let errs = services(
        "    - {name: m, listen: 8080, target: '127.0.0.1:9000'}\n    \
         - {name: m, listen: 8081, target: '127.0.0.1:9001'}\n    \
         - {name: n, listen: 8080, target: '127.0.0.1:9002'}\n",
    )
    .unwrap_err();
    let messages: Vec<&str> = errs.iter().map(|e| e.message.as_str()).collect();
    assert!(messages.iter().any(|m| m.contains("a service named `m` is given twice")), "{messages:?}");
    assert!(messages.iter().any(|m| m.contains("two services listen on port 8080")), "{messages:?}");
}

#[test]
fn a_listener_never_takes_a_port_of_leash_itself() {
    for port in [3128, 53, 80, 443] {
        let errs = services(&format!("    - {{name: m, listen: {port}, target: '127.0.0.1:9000'}}\n")).unwrap_err();
        assert_eq!(errs[0].kind, PolicyErrorKind::ServiceClash, "{port}: {errs:?}");
        assert_eq!(errs[0].entry, "network.services[0].listen");
    }
    let text = "network:\n  mode: allowlist\n  ports: [80, 8080]\n  services:\n    - {name: m, listen: 8080, target: '127.0.0.1:9000'}\n";
    assert!(errors(text)[0].2.contains("transparent listener"));
}

#[test]
fn a_target_reachable_through_the_proxy_is_refused() {
    // A named target the allowlist also admits: the agent could go around the gate.
    let named = "network:\n  mode: allowlist\n  allowed_hosts: [.corp.test]\n  services:\n    \
                 - {name: gw, listen: 4000, target: 'gw.corp.test:4000'}\n";
    let errs = errors(named);
    assert_eq!((errs[0].0, errs[0].1.as_str()), (PolicyErrorKind::ServiceClash, "network.services[0].target"));
    assert!(errs[0].2.contains("`gw.corp.test` is allowed through the proxy"), "{errs:?}");
    // A blocklist admits every name it does not block.
    let blocklist =
        "network:\n  mode: blocklist\n  services:\n    - {name: gw, listen: 4000, target: 'gw.corp.test:4000'}\n";
    assert_eq!(errors(blocklist)[0].0, PolicyErrorKind::ServiceClash);
    let blocked = "network:\n  mode: blocklist\n  blocked_urls: [gw.corp.test]\n  services:\n    \
                   - {name: gw, listen: 4000, target: 'gw.corp.test:4000'}\n";
    assert!(load(blocked, Format::Yaml, None).is_ok());
    // An address exempt from the internal-destination check is reachable by any allowed name resolving to it.
    let exempt = "network:\n  mode: allowlist\n  allow_destinations: [10.0.0.0/8]\n  services:\n    \
                  - {name: gw, listen: 4000, target: '10.1.2.3:4000'}\n";
    assert!(errors(exempt)[0].2.contains("its address 10.1.2.3 is in `allow_destinations`"));
    let loopback = "network:\n  mode: blocklist\n  allow_destinations: [127.0.0.0/8]\n  blocked_urls: [x.test]\n  \
                    services:\n    - {name: gw, listen: 4000, target: 'localhost:4000'}\n";
    assert!(errors(loopback)[0].2.contains("the loopback is in `allow_destinations`"), "{:?}", errors(loopback));
}

#[test]
fn loopback_names_are_not_allowed_beside_services() {
    for entry in ["localhost", ".localhost"] {
        let text = format!(
            "network:\n  mode: allowlist\n  allowed_hosts: ['{entry}']\n  services:\n    \
             - {{name: gw, listen: 4000, target: '127.0.0.1:4000'}}\n"
        );
        let errs = errors(&text);
        assert_eq!((errs[0].0, errs[0].1.as_str()), (PolicyErrorKind::ServiceClash, "network.allowed_hosts[0]"));
    }
    // Without services, `localhost` stays an ordinary (if odd) entry.
    assert!(load("network:\n  mode: allowlist\n  allowed_hosts: [localhost]\n", Format::Yaml, None).is_ok());
}
