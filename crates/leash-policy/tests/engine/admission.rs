//! The admission value (`Policy::admit`): the decision with an allowed request's treatment — its credential, the
//! model API gate, its route, its tunnel — what the proxy acts on and `leash explain` prints.

use leash_policy::{Admission, ProviderTools, Route, Tunnel};

use super::*;

const POLICY: &str = "network:\n  mode: blocklist\n  blocked_urls: [docs.test/private/]\n  \
                      upstream_proxy: http://proxy.corp.test:3128\n  upstream_proxy_bypass: [.internal.test]\n  \
                      model_apis: [models.test]\n  provider_tools: refuse\n  credentials:\n    - name: key\n      \
                      hosts: [models.test]\n      env: KEY\n      header: x-api-key\n";

fn admit<'p>(p: &'p Policy, url: &str) -> Admission<'p> {
    let target = parse_absolute_target(url).unwrap();
    p.admit(&Question::of_url(&target), TlsInspection::Available)
}

#[test]
fn an_allowed_request_carries_its_credential_model_gate_and_route() {
    let p = policy(POLICY);
    let a = admit(&p, "https://models.test/v1/messages");
    let t = a.treatment.expect("allowed");
    assert_eq!(t.credential.map(|c| &*c.name), Some("key"));
    assert_eq!(t.model_gate, Some(ProviderTools::Refuse));
    assert!(matches!(t.route, Route::UpstreamProxy(up) if up.authority() == "proxy.corp.test:3128"));
    assert_eq!(a.tunnel, Tunnel::Inspected, "a credential's and a model API's tunnels are inspected");

    let a = admit(&p, "https://pypi.org/simple/");
    let t = a.treatment.expect("allowed");
    assert_eq!((t.credential, t.model_gate), (None, None));
    assert_eq!(a.tunnel, Tunnel::Spliced);
    assert!(matches!(admit(&p, "http://db.internal.test/").treatment.unwrap().route, Route::Bypass(_)));
    let direct = policy(&blocklist(&[]));
    assert_eq!(admit(&direct, "http://x.test/").treatment.unwrap().route, Route::Direct);
}

#[test]
fn a_refused_request_has_no_treatment_but_says_its_tunnel() {
    let p = policy(POLICY);
    let a = admit(&p, "https://docs.test/private/x");
    assert_eq!(a.decision.verdict, Verdict::Block);
    assert!(a.treatment.is_none());
    assert_eq!(a.tunnel, Tunnel::Inspected, "decided on its path inside an inspected tunnel");
    let plain = admit(&p, "http://docs.test/private/x");
    assert_eq!((plain.decision.verdict, plain.tunnel), (Verdict::Block, Tunnel::None));
}

#[test]
fn the_admission_decides_as_decide_does() {
    let p = policy(POLICY);
    for url in ["https://models.test/v1/messages", "http://docs.test/private/", "https://docs.test/", "http://x.test/"]
    {
        let target = parse_absolute_target(url).unwrap();
        let question = Question::of_url(&target);
        assert_eq!(
            p.admit(&question, TlsInspection::Available).decision,
            p.decide(&question, TlsInspection::Available),
            "{url}"
        );
    }
}
