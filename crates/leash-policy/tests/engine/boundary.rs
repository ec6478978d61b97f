//! A boundary (`--boundary`): its refusals apply before the run's rules and whatever mode the run is in, its allows
//! cap the run's, and a tunnel it wants read is read.

use std::net::IpAddr;
use std::sync::Arc;

use leash_policy::{
    parse_authority, parse_host, Boundary, ClientHelloFacts, ProviderTools, Question, TlsInspection, Via,
};

use super::{allowlist, blocklist, decide_on, policy, render};

fn boundary(yaml: &str) -> Arc<Boundary> {
    Arc::new(Boundary::new(policy(yaml), "org.yaml").unwrap())
}

fn within(run: &str, outer: &str) -> leash_policy::Policy {
    policy(run).within(boundary(outer)).unwrap()
}

fn plain(p: &leash_policy::Policy, url: &str) -> String {
    decide_on(p, Via::ForwardProxy, url)
}

fn tunnel(p: &leash_policy::Policy, authority: &str, tls: TlsInspection) -> String {
    let a = parse_authority(authority).unwrap();
    let hello = ClientHelloFacts::ServerName(authority.split(':').next().unwrap());
    render(&p.decide(&Question::ClientHello { target: &a.host, port: 443, hello }, tls))
}

#[test]
fn an_allowlist_boundary_caps_what_a_run_allowlist_allows() {
    let p = within(&allowlist(&["a.test", "b.test"]), &allowlist(&[".a.test"]));
    assert_eq!(plain(&p, "http://a.test/"), "allow rule a.test", "the run's own rule decides inside the boundary");
    assert_eq!(plain(&p, "http://b.test/"), "block boundary", "allowed by the run, outside the boundary");
    assert_eq!(plain(&p, "http://c.test/"), "block boundary", "refused by both: the boundary is named");
    assert_eq!(tunnel(&p, "b.test:443", TlsInspection::Available), "block boundary");
    assert!(!p.name_is_reachable(&parse_host("b.test").unwrap()), "the DNS stub does not answer it");
    assert!(p.name_is_reachable(&parse_host("a.test").unwrap()));
}

#[test]
fn a_blocklist_boundary_refuses_inside_a_run_blocklist_and_reads_the_tunnels_it_needs_to() {
    let p = within(&blocklist(&["other.test"]), &blocklist(&["arxiv.org/abs/2401.01234", "evil.test"]));
    assert_eq!(plain(&p, "http://arxiv.org/abs/2401.01234v2"), "block boundary arxiv.org/abs/2401.01234");
    assert_eq!(plain(&p, "http://arxiv.org/list"), "allow default");
    assert_eq!(plain(&p, "http://evil.test/"), "block boundary evil.test");
    assert_eq!(plain(&p, "http://other.test/"), "block rule other.test", "the run's own refusal stays its own");
    // The run alone would splice arxiv.org; the boundary's path rule needs it read, or without a CA refused.
    assert_eq!(
        tunnel(&policy(&blocklist(&["other.test"])), "arxiv.org:443", TlsInspection::Available),
        "allow default"
    );
    assert_eq!(tunnel(&p, "arxiv.org:443", TlsInspection::Available), "inspect default");
    assert_eq!(tunnel(&p, "arxiv.org:443", TlsInspection::Unavailable), "block boundary");
    let (host, path) = (parse_host("arxiv.org").unwrap(), leash_policy::canonicalize("/abs/2401.01234").unwrap());
    let https =
        p.decide(&Question::Https { host: &host, port: 443, path: &path, method: "GET" }, TlsInspection::Available);
    assert_eq!(render(&https), "block boundary arxiv.org/abs/2401.01234", "explain's https:// question too");
    assert!(p.may_inspect(), "a CA is made for the boundary's inspection");
}

#[test]
fn audit_mode_and_ask_mode_lift_the_runs_refusals_never_the_boundarys() {
    let outer = allowlist(&["in.test", "also-in.test"]);
    let audited = policy(&allowlist(&["in.test"])).into_audit().within(boundary(&outer)).unwrap();
    assert_eq!(plain(&audited, "http://also-in.test/"), "would-block not-allowed", "the run's refusal is lifted");
    assert_eq!(plain(&audited, "http://out.test/"), "block boundary", "the boundary's is not");
    let asking = policy(&allowlist(&["in.test"])).into_ask().unwrap().within(boundary(&outer)).unwrap();
    let ask = |url: &str| {
        let target = leash_policy::parse_absolute_target(url).unwrap();
        asking.may_ask(&asking.decide(&Question::of_url(&target), TlsInspection::Available))
    };
    assert!(ask("http://also-in.test/"), "a person may allow what the boundary admits");
    assert!(!ask("http://out.test/"), "nobody is asked about what the boundary refuses");
}

#[test]
fn ports_and_internal_destinations_are_capped_by_the_boundarys() {
    let run = "network:\n  mode: allowlist\n  allowed_hosts: [a.test]\n  ports: [80, 8080]\n  allow_destinations: [10.0.0.0/8]\n";
    let outer = "network:\n  mode: allowlist\n  allowed_hosts: [a.test]\n";
    let p = within(run, outer);
    assert_eq!(plain(&p, "http://a.test:8080/"), "block boundary", "the boundary allows ports 80 and 443 only");
    assert_eq!(plain(&p, "http://a.test/"), "allow rule a.test");
    let internal: [IpAddr; 1] = ["10.1.2.3".parse().unwrap()];
    assert!(policy(run).check_destination(&internal, &[]).is_ok(), "the run alone exempts it");
    assert!(p.check_destination(&internal, &[]).is_err(), "the boundary does not");
    let both = within(run, &format!("{outer}  allow_destinations: [10.1.0.0/16]\n"));
    assert!(both.check_destination(&internal, &[]).is_ok(), "exempt in both");
}

#[test]
fn the_boundarys_stricter_settings_hold_for_the_run() {
    let run = "network:\n  mode: blocklist\n  blocked_urls: [x.test]\n  provider_tools: allow\n";
    let p = within(
        run,
        "network:\n  mode: blocklist\n  blocked_urls: [y.test]\n  provider_tools: refuse\n  refusals: as-not-found\n",
    );
    assert_eq!(p.provider_tools(), ProviderTools::Refuse);
    assert_eq!(p.refusals(), leash_policy::Refusals::AsNotFound);
    let kept = within(
        "network:\n  mode: blocklist\n  blocked_urls: [x.test]\n  provider_tools: refuse\n",
        &blocklist(&["y.test"]),
    );
    assert_eq!(kept.provider_tools(), ProviderTools::Refuse, "a boundary never loosens the run's");
}

#[test]
fn a_boundary_holds_rules_only() {
    let refused = |yaml: &str| Boundary::new(policy(yaml), "org.yaml").unwrap_err().join("\n");
    assert!(refused("network:\n  mode: audit\n  allowed_hosts: [a.test]\n").contains("always enforced"));
    let credential = "network:\n  mode: blocklist\n  blocked_urls: []\n  credentials:\n    - preset: anthropic\n";
    assert!(refused(credential).contains("credentials"));
    let upstream = "network:\n  mode: blocklist\n  blocked_urls: []\n  upstream_proxy: http://squid.test:3128\n";
    assert!(refused(upstream).contains("upstream_proxy"));
    let models = "network:\n  mode: allowlist\n  allowed_hosts: [gw.test]\n  model_apis: [gw.test]\n";
    assert!(refused(models).contains("model_apis"));
}

#[test]
fn a_runs_service_must_be_one_the_boundary_declares() {
    let service = |target: &str| {
        format!("network:\n  mode: allowlist\n  allowed_hosts: [a.test]\n  services:\n    - name: gw\n      listen: 4000\n      target: {target}\n")
    };
    let refused = policy(&service("127.0.0.1:9000")).within(boundary(&allowlist(&["a.test"]))).unwrap_err();
    assert!(refused[0].contains("service `gw`") && refused[0].contains("127.0.0.1:9000"), "{refused:?}");
    assert!(policy(&service("127.0.0.1:9000")).within(boundary(&service("127.0.0.1:9000"))).is_ok());
    assert!(policy(&service("127.0.0.1:9001")).within(boundary(&service("127.0.0.1:9000"))).is_err(), "same target");
}

#[test]
fn outside_names_each_entry_the_boundary_refuses_whole_or_in_part() {
    let run =
        "network:\n  mode: allowlist\n  allowed_hosts: [a.test, .b.test, c.test]\n  allowed_urls: [d.test/docs]\n";
    let b = boundary(
        "network:\n  mode: allowlist\n  allowed_hosts: [a.test, b.test, .c.test]\n  allowed_urls: [d.test/other]\n",
    );
    let outside: Vec<(String, bool)> = b.outside(&policy(run)).iter().map(|o| (o.entry.to_string(), o.whole)).collect();
    assert_eq!(outside, [(".b.test".to_owned(), false), ("d.test/docs".to_owned(), true)]);
    assert!(b.outside(&policy(&allowlist(&["a.test"]))).is_empty());
}

#[test]
fn outside_names_a_blocklists_exceptions_the_boundary_refuses() {
    let run =
        "network:\n  mode: blocklist\n  blocked_urls: [corp.test]\n  allowed_hosts: [jira.corp.test, wiki.corp.test]\n";
    let b = boundary("network:\n  mode: blocklist\n  blocked_urls: [wiki.corp.test]\n");
    let outside: Vec<String> = b.outside(&policy(run)).iter().map(|o| o.entry.to_string()).collect();
    assert_eq!(outside, ["wiki.corp.test"], "the run's exception promises what the boundary refuses");
}
