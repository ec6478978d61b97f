//! The attack suite: every bypass class tried end to end against the `leash` binary, with test hosts in
//! network namespaces this suite makes (see `attacks/scene.rs`) and a DNS server there that logs every query. Each
//! test asserts the refusal, that the origins saw nothing refused, and that a refused name never reached DNS. The
//! hostile client (`attacks/client.py`) sends exact bytes, including shapes no HTTP library would send. Where the
//! kernel refuses namespaces the tests skip loudly; `LEASH_REQUIRE_SANDBOX=1` (set by `.ci/run`) makes that a failure.
//! `LEASH_UNDER_TEST=/path/to/leash` runs the suite against another build (to show a test fails before its fix).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test's helpers fail it by panicking")]

#[path = "attacks/scene.rs"]
mod scene;

#[path = "attacks/doors.rs"]
mod doors;

#[path = "attacks/trusted.rs"]
mod trusted;

use std::time::{Duration, Instant};

use scene::{
    leash, text, Proxy, Scene, ADDED_PUBLIC_V4, ANYIP_V4, ANYIP_V4_NET, ANYIP_V6, ANYIP_V6_NET, METADATA,
    OWN_PUBLIC_V4, WORLD_V4, WORLD_V6,
};
use serde_json::{json, Value};

/// The name every test refuses; the DNS table has an answer for it, so a lookup would show.
const DENIED: &str = "denied.attack.test";
const OK: &str = "ok.attack.test";

/// An allowlist naming these hosts; the world's main address is exempt from the internal-destination refusal
/// (it stands for a public origin), nothing else is.
fn allowlist(hosts: &[&str]) -> String {
    format!(
        "network:\n  mode: allowlist\n  allowed_hosts: [{}]\n  allow_destinations: [{WORLD_V4}/32]\n",
        hosts.join(", ")
    )
}

/// Every name in the DNS table but the denied one.
const INSIDE: &[&str] = &[
    "lo.attack.test",
    "meta.attack.test",
    "hidden.attack.test",
    "mixed.attack.test",
    "v6lo.attack.test",
    "v6hidden.attack.test",
    "mapped.attack.test",
];

fn get(target: &str, host: &str) -> Value {
    json!({ "raw": format!("GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n") })
}

fn connect(target: &str, sni: Option<&str>) -> Value {
    json!({ "connect": target, "sni": sni })
}

/// `(status, reason)` of a probe's first response (0 when none came).
fn first(result: &Value) -> (u64, String) {
    let r = &result["responses"][0];
    (r["status"].as_u64().unwrap_or(0), r["reason"].as_str().unwrap_or("").to_owned())
}

fn assert_refused(results: &[Value], probes: &[Value], status: u64, reason: &str) {
    for (r, p) in results.iter().zip(probes) {
        assert_eq!(first(r), (status, reason.to_owned()), "probe {p}: {r}");
    }
}

/// A tunnel closed before or during the handshake (or answered 403 at CONNECT), with no response inside.
fn assert_tunnel_refused(r: &Value) {
    let refused_at_connect = r["connect"] == 403;
    let closed = r["tls"].as_str().is_some_and(|t| t != "ok") || r["responses"].as_array().is_some_and(Vec::is_empty);
    assert!(refused_at_connect || closed, "tunnel not refused: {r}");
}

/// 10.200.0.2 in the spellings a URL parser might accept.
fn world_spellings() -> Vec<String> {
    let n = u32::from(WORLD_V4.parse::<std::net::Ipv4Addr>().unwrap());
    vec![
        WORLD_V4.into(),
        format!("{WORLD_V4}:80"),
        n.to_string(),
        format!("{n:#010x}"),
        "012.0310.0.02".into(),
        "10.200.2".into(),
        format!("10.{}", n & 0xff_ffff),
        "0xa.0xc8.0.2".into(),
        format!("{WORLD_V4}."),
        format!("[{WORLD_V6}]"),
        format!("[::ffff:{WORLD_V4}]"),
        "[::ffff:ac8:2]".into(),
    ]
}

// ---------------------------------------------------------------------------------------------------------------

#[test]
fn ip_literal_spellings_are_refused_and_never_resolved() {
    let Some(mut s) = Scene::new() else { return };
    let p = s.proxy(&allowlist(&[OK]));
    let mut probes: Vec<Value> = world_spellings().iter().map(|h| get(&format!("http://{h}/"), h)).collect();
    let n = probes.len();
    probes.push(connect(&format!("{WORLD_V4}:443"), None));
    probes.push(connect(&format!("[{WORLD_V6}]:443"), None));
    probes.push(connect(&format!("{METADATA}:443"), None));
    let results = s.probe(&p, &probes);
    assert_refused(&results[..n], &probes[..n], 403, "ip-literal");
    for r in &results[n..] {
        assert_eq!(r["connect"], 403, "{r}");
        assert_eq!(first(r).1, "ip-literal", "{r}");
    }
    s.assert_no_lookup();
    s.assert_origin_untouched();
}

#[test]
fn dns_answers_pointing_inside_are_refused_and_nothing_is_dialed() {
    let Some(mut s) = Scene::new() else { return };
    let p = s.proxy(&allowlist(INSIDE));
    let probes: Vec<Value> = INSIDE.iter().map(|h| get(&format!("http://{h}/"), h)).collect();
    let results = s.probe(&p, &probes);
    assert_refused(&results, &probes, 403, "internal-destination");
    let tunnels: Vec<Value> = INSIDE.iter().map(|h| connect(&format!("{h}:443"), Some(h))).collect();
    for r in s.probe(&p, &tunnels) {
        assert_tunnel_refused(&r);
    }
    // Each name was resolved (that is how leash saw where it points), and nothing was dialed: not the world's
    // unlisted address, not the metadata address, not leash's own loopback.
    let queries = s.queries();
    for h in INSIDE {
        assert!(queries.iter().any(|q| q.starts_with(&format!("{h} "))), "{h} not resolved: {queries:?}");
    }
    s.assert_origin_untouched();
    let audit = s.audit(&p);
    let refused = audit.iter().filter(|l| l["reason"] == "internal-destination").count();
    assert_eq!(refused, 2 * INSIDE.len(), "{audit:?}");
}

#[test]
fn a_name_rebound_to_loopback_after_the_check_is_never_dialed_there() {
    let Some(mut s) = Scene::new() else { return };
    let p = s.proxy(&allowlist(&["flip.attack.test"]));
    // The first answer is the (allowed) world, every later one 127.0.0.1: leash dials what it checked.
    let probes: Vec<Value> = (0..3).map(|i| get(&format!("http://flip.attack.test/{i}"), "flip.attack.test")).collect();
    let results = s.probe(&p, &probes);
    for (i, r) in results.iter().enumerate() {
        let body = r["responses"][0]["body"].as_str().unwrap_or("");
        let status = first(r).0;
        assert!(
            (status == 200 && body == format!("origin /{i}")) || first(r) == (403, "internal-destination".into()),
            "{r}"
        );
    }
    assert_eq!(first(&results[0]).0, 200, "the first answer pointed at the world: {results:?}");
    let edge: Vec<String> = s.origin_events().into_iter().filter(|l| l.starts_with("edge ")).collect();
    assert_eq!(edge, Vec::<String>::new(), "leash's own loopback was reached");
}

#[test]
fn a_name_answering_this_hosts_own_public_address_is_refused() {
    let Some(mut s) = Scene::new() else { return };
    // leash's namespace holds a public address (no internal range covers it); a name answering it must be refused
    // as leash's own, or an allowed name could reach services listening on the proxy's host.
    let added = std::process::Command::new("ip")
        .args(["-n", &s.edge, "addr", "add", &format!("{OWN_PUBLIC_V4}/32"), "dev", "lo"])
        .status()
        .unwrap();
    assert!(added.success());
    let p = s.proxy(&allowlist(&[OK, "self.attack.test"]));
    let probes = vec![
        get("http://self.attack.test/own", "self.attack.test"),
        connect("self.attack.test:443", Some("self.attack.test")),
    ];
    let results = s.probe(&p, &probes);
    assert_eq!(first(&results[0]), (403, "internal-destination".into()), "{}", results[0]);
    assert_tunnel_refused(&results[1]);
    let log = std::fs::read_to_string(s.path("audit.jsonl")).unwrap();
    let refusals = log.lines().filter(|l| l.contains("self.attack.test") && l.contains("internal-destination")).count();
    assert_eq!(refusals, 2, "the request and the tunnel are both refused as internal: {log}");
    // Control: the allowed world host is still reached by the same proxy.
    let control = s.probe(&p, &[get(&format!("http://{OK}/control"), OK)]);
    assert_eq!(control[0]["responses"][0]["body"], "origin /control", "{}", control[0]);
}

#[test]
fn an_address_added_to_the_host_after_the_first_request_is_refused_as_its_own() {
    let Some(mut s) = Scene::new() else { return };
    let p = s.proxy(&allowlist(&[OK, "added.attack.test"]));
    // The first upstream makes leash read its own addresses.
    let before = s.probe(&p, &[get(&format!("http://{OK}/first"), OK)]);
    assert_eq!(before[0]["responses"][0]["body"], "origin /first", "{}", before[0]);
    // Then the host gains a public address, with an origin on it (so a dial there would show), and a name
    // answering it must be refused as leash's own like any address it had at the first request.
    let edge = s.edge.clone();
    let ip = |verb: &str| {
        let done = std::process::Command::new("ip")
            .args(["-n", &edge, "addr", verb, &format!("{ADDED_PUBLIC_V4}/32"), "dev", "lo"])
            .status()
            .unwrap();
        assert!(done.success(), "ip addr {verb}");
    };
    ip("add");
    s.serve(&edge, &["own", ADDED_PUBLIC_V4]);
    let probes = vec![
        get("http://added.attack.test/own", "added.attack.test"),
        connect("added.attack.test:443", Some("added.attack.test")),
    ];
    let results = s.probe(&p, &probes);
    assert_eq!(first(&results[0]), (403, "internal-destination".into()), "{}", results[0]);
    assert_tunnel_refused(&results[1]);
    let own: Vec<String> = s.origin_events().into_iter().filter(|l| l.starts_with("own ")).collect();
    assert_eq!(own, Vec::<String>::new(), "the added address was dialed");
    let audit = s.audit(&p);
    let refused =
        audit.iter().filter(|l| l["host"] == "added.attack.test" && l["reason"] == "internal-destination").count();
    assert_eq!(refused, 2, "the request and the tunnel are both refused as internal: {audit:?}");
    // Removed again, the address is no longer leash's own: the name is dialed (and fails: nothing routes there from
    // leash's namespace), not refused.
    ip("del");
    let after = s.probe(&p, &[get("http://added.attack.test/gone", "added.attack.test")]);
    assert_eq!(first(&after[0]).0, 502, "{}", after[0]);
}

#[test]
fn an_address_in_a_prefix_the_host_routes_to_itself_is_refused_as_its_own() {
    let Some(mut s) = Scene::new() else { return };
    let edge = s.edge.clone();
    s.serve(&edge, &["any", "8080"]);
    let names = ["anyip.attack.test", "anyip6.attack.test"];
    let policy = format!(
        "network:\n  mode: allowlist\n  allowed_hosts: [{OK}, {}]\n  ports: [80, 8080]\n  tunnel_ports: [443, 8080]\n  \
         allow_destinations: [{WORLD_V4}/32]\n",
        names.join(", ")
    );
    let p = s.proxy(&policy);
    // The first upstream makes leash read what its host delivers locally.
    let before = s.probe(&p, &[get(&format!("http://{OK}/first"), OK)]);
    assert_eq!(before[0]["responses"][0]["body"], "origin /first", "{}", before[0]);
    // Then AnyIP: a `local` route makes a whole public prefix the host's own, though no interface carries an address
    // in it; the service on the wildcard address answers on every one of them. One family at a time, so each
    // family's route change must be noticed on its own.
    for (name, family, net) in [(names[1], "-6", ANYIP_V6_NET), (names[0], "-4", ANYIP_V4_NET)] {
        let done = std::process::Command::new("ip")
            .args(["-n", &edge, family, "route", "add", "local", net, "dev", "lo"])
            .status()
            .unwrap();
        assert!(done.success(), "ip route add local {net}");
        let plain = get(&format!("http://{name}:8080/any"), &format!("{name}:8080"));
        let results = s.probe(&p, &[plain.clone(), connect(&format!("{name}:8080"), Some(name))]);
        assert_eq!(first(&results[0]), (403, "internal-destination".into()), "{plain}: {}", results[0]);
        assert_tunnel_refused(&results[1]);
    }
    let any = |s: &Scene| s.origin_events().into_iter().filter(|l| l.starts_with("any ")).collect::<Vec<_>>();
    assert_eq!(any(&s), Vec::<String>::new(), "an address in the local prefix was dialed");
    let audit = s.audit(&p);
    let refused = audit.iter().filter(|l| l["reason"] == "internal-destination").count();
    assert_eq!(refused, 4, "both names refused as internal, plain and tunnelled: {audit:?}");
    // Control: from leash's namespace both addresses do reach the wildcard service, so a dial would have shown.
    let reach = format!(
        "import socket\nfor a in ['{ANYIP_V4}', '{ANYIP_V6}']:\n    socket.create_connection((a, 8080), timeout=5).close()"
    );
    let reached =
        std::process::Command::new("ip").args(["netns", "exec", &edge, "python3", "-c", &reach]).status().unwrap();
    assert!(reached.success(), "the wildcard service is reachable on the local prefixes");
    let deadline = Instant::now() + Duration::from_secs(10);
    while any(&s).len() < 2 {
        assert!(Instant::now() < deadline, "the control connections were not seen: {:?}", any(&s));
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn ports_outside_the_policy_are_refused_before_any_lookup() {
    let Some(mut s) = Scene::new() else { return };
    let p = s.proxy(&allowlist(&[OK]));
    let plain = vec![
        get("http://ok.attack.test:8080/", "ok.attack.test:8080"),
        get("http://ok.attack.test:8443/", "ok.attack.test:8443"),
        get("http://ok.attack.test:22/", "ok.attack.test:22"),
    ];
    assert_refused(&s.probe(&p, &plain), &plain, 403, "port");
    let tunnels = vec![connect("ok.attack.test:8443", Some(OK)), connect("ok.attack.test:80", Some(OK))];
    for r in s.probe(&p, &tunnels) {
        assert_eq!(first(&r), (403, "port".into()), "{r}");
    }
    let odd = vec![get("http://ok.attack.test:65536/", "ok.attack.test:65536"), get("http://ok.attack.test:0/", "x")];
    for r in s.probe(&p, &odd) {
        assert!([400, 403].contains(&first(&r).0), "{r}");
    }
    s.assert_no_lookup();
    s.assert_origin_untouched();
}

#[test]
fn sni_connect_target_and_host_must_name_the_same_host() {
    let Some(mut s) = Scene::new() else { return };
    let p = s.proxy(&format!(
        "network:\n  mode: allowlist\n  allowed_hosts: [{OK}]\n  allowed_urls: [also.attack.test/pub/]\n  allow_destinations: [{WORLD_V4}/32]\n"
    ));
    let ca = text(&p.ca);
    let probes = vec![
        // Spliced host: SNI naming the denied host behind an allowed CONNECT target, and the reverse.
        connect("ok.attack.test:443", Some(DENIED)),
        connect("denied.attack.test:443", Some(OK)),
        // Inspected host: a Host header (or absolute-form target) naming another host inside TLS.
        json!({"connect": "also.attack.test:443", "sni": "also.attack.test", "cafile": ca,
               "send": "GET /pub/x HTTP/1.1\r\nHost: denied.attack.test\r\n\r\n"}),
        json!({"connect": "also.attack.test:443", "sni": "also.attack.test", "cafile": ca,
               "send": "GET /pub/x HTTP/1.1\r\nHost: also.attack.test:8443\r\n\r\n"}),
        json!({"connect": "also.attack.test:443", "sni": "also.attack.test", "cafile": ca,
               "send": "GET https://denied.attack.test/pub/x HTTP/1.1\r\nHost: also.attack.test\r\n\r\n"}),
        // Inspected SNI naming another host than the CONNECT target.
        json!({"connect": "also.attack.test:443", "sni": DENIED, "cafile": ca, "send": "GET /pub/ HTTP/1.1\r\nHost: denied.attack.test\r\n\r\n"}),
    ];
    let results = s.probe(&p, &probes);
    assert_tunnel_refused(&results[0]);
    assert_eq!(first(&results[1]), (403, "not-allowed".into()), "{}", results[1]);
    for r in &results[2..4] {
        assert_eq!(first(r), (403, "host-mismatch".into()), "{r}");
    }
    assert!([400, 403].contains(&first(&results[4]).0), "{}", results[4]);
    assert!(first(&results[5]).0 != 200, "{}", results[5]);
    s.assert_never_resolved(&[DENIED]);
    assert_eq!(s.requests(), Vec::<String>::new(), "an origin saw a refused request");
}

#[test]
fn tunnels_without_sni_or_without_tls_are_closed_unresolved() {
    let Some(mut s) = Scene::new() else { return };
    let p = s.proxy(&allowlist(&[OK]));
    let probes = vec![
        connect("ok.attack.test:443", None),
        json!({"connect": "ok.attack.test:443", "nontls": "GET / HTTP/1.1\r\nHost: denied.attack.test\r\n\r\n"}),
        json!({"connect": "ok.attack.test:443", "nontls": "SSH-2.0-OpenSSH_9.2\r\n"}),
    ];
    for r in s.probe(&p, &probes) {
        assert_eq!(r["connect"], 200, "{r}");
        assert_tunnel_refused(&r);
    }
    s.assert_no_lookup();
    s.assert_origin_untouched();
    let reasons: Vec<Value> = s.audit(&p).iter().map(|l| l["reason"].clone()).collect();
    assert_eq!(reasons, [json!("no-sni"), json!("not-tls"), json!("not-tls")]);
}

#[test]
fn audit_mode_still_holds_a_tunnel_to_an_unlisted_host_to_the_client_hello_checks() {
    // Learning lets a CONNECT to an unlisted host through as would-block; what flows in it must still be TLS naming
    // that host, or a tunnel on 443 could carry any protocol while the policy is learned.
    let Some(mut s) = Scene::new() else { return };
    let p = s.proxy(&allowlist(&[OK]).replace("mode: allowlist", "mode: audit"));
    let unlisted = "unlisted.attack.test:443";
    let probes = vec![
        connect(unlisted, None),
        json!({"connect": unlisted, "nontls": "GET / HTTP/1.1\r\nHost: denied.attack.test\r\n\r\n"}),
        json!({"connect": unlisted, "nontls": "SSH-2.0-OpenSSH_9.2\r\n"}),
        connect(unlisted, Some(DENIED)),
    ];
    for r in s.probe(&p, &probes) {
        assert_eq!(r["connect"], 200, "audit mode lets the CONNECT itself through: {r}");
        assert_tunnel_refused(&r);
    }
    s.assert_no_lookup();
    s.assert_origin_untouched();
    let decided: Vec<(Value, Value)> =
        s.audit(&p).iter().map(|l| (l["decision"].clone(), l["reason"].clone())).collect();
    let block = |reason: &str| (json!("block"), json!(reason));
    assert_eq!(decided, [block("no-sni"), block("not-tls"), block("not-tls"), block("host-mismatch")]);
}

#[test]
fn a_client_hello_split_across_segments_or_records_or_sent_with_the_connect_is_read_whole() {
    let Some(mut s) = Scene::new() else { return };
    let p = s.proxy(&allowlist(&[OK]));
    let ca = text(&s.path("ca.pem"));
    let hello = |split: &str, sni: &str, path: &str| {
        json!({"connect": format!("{sni}:443"), "sni": sni, "split": split, "cafile": ca,
               "send": format!("GET {path} HTTP/1.1\r\nHost: {sni}\r\n\r\n")})
    };
    let probes = vec![
        hello("segments", OK, "/segments"),
        hello("records", OK, "/records"),
        json!({"connect": "ok.attack.test:443", "sni": DENIED, "split": "segments"}),
        json!({"connect": "ok.attack.test:443", "sni": DENIED, "split": "records"}),
        hello("with-connect", OK, "/with-connect"),
        json!({"connect": "ok.attack.test:443", "sni": DENIED, "split": "with-connect"}),
    ];
    let results = s.probe(&p, &probes);
    assert_eq!(results[0]["responses"][0]["body"], "origin /segments", "{}", results[0]);
    assert_eq!(results[1]["responses"][0]["body"], "origin /records", "{}", results[1]);
    assert_tunnel_refused(&results[2]);
    assert_tunnel_refused(&results[3]);
    assert_eq!(results[4]["responses"][0]["body"], "origin /with-connect", "{}", results[4]);
    assert_tunnel_refused(&results[5]);
    s.assert_never_resolved(&[DENIED]);
    let requests = s.requests();
    assert_eq!(requests.len(), 3, "only the allowed tunnels reached the origin: {requests:?}");
}

/// Spellings of `/secret` the canonicaliser undoes.
const SECRET_SPELLINGS: &[&str] = &[
    "/secret",
    "/./secret",
    "/x/../secret",
    "/%73ecret",
    "/SECRET/a",
    "//secret",
    "/secret;v=1",
    "/%2e%2e/secret",
    "/%252e%252e/secret",
    "/x%2f..%2fsecret",
    "/x\\..\\secret",
    "/x%5c..%5csecret",
];

/// Each of `refused`, asked of `ok.attack.test` in plain HTTP and inside an inspected tunnel (the client trusts the
/// run's CA), gets 403 `reason`; the two `controls` (a path in plain HTTP, one inside TLS) reach the origin as sent,
/// and nothing else reaches it.
fn assert_paths_refused_plain_and_inside_tls(
    s: &Scene,
    p: &Proxy,
    refused: &[&str],
    reason: &str,
    controls: [&str; 2],
) {
    let plain: Vec<Value> = refused.iter().map(|path| get(&format!("http://{OK}{path}"), OK)).collect();
    assert_refused(&s.probe(p, &plain), &plain, 403, reason);
    let ca = text(&p.ca);
    let inner = |path: &str| {
        json!({"connect": "ok.attack.test:443", "sni": OK, "cafile": ca,
               "send": format!("GET {path} HTTP/1.1\r\nHost: {OK}\r\n\r\n")})
    };
    let tls: Vec<Value> = refused.iter().map(|path| inner(path)).collect();
    for (r, path) in s.probe(p, &tls).iter().zip(refused) {
        assert_eq!(r["tls"], "ok", "the client trusts the run's CA: {r}");
        assert_eq!(first(r), (403, reason.into()), "inside TLS {path}: {r}");
    }
    let results = s.probe(p, &[get(&format!("http://{OK}{}", controls[0]), OK), inner(controls[1])]);
    for (r, path) in results.iter().zip(controls) {
        assert_eq!(r["responses"][0]["body"], format!("origin {path}"), "{r}");
    }
    let requests = s.requests();
    assert_eq!(requests.len(), 2, "only the controls reached the origin: {requests:?}");
}

#[test]
fn path_respellings_are_refused_in_plain_http_and_inside_tls() {
    let Some(mut s) = Scene::new() else { return };
    let p = s.proxy(&format!(
        "network:\n  mode: blocklist\n  blocked_urls: [ok.attack.test/secret]\n  allow_destinations: [{WORLD_V4}/32]\n"
    ));
    // Controls: the same host on another path is reached, in plain HTTP and inside TLS.
    assert_paths_refused_plain_and_inside_tls(&s, &p, SECRET_SPELLINGS, "rule", ["/public", "/public-tls"]);
}

/// Spellings that leash canonicalises to a path under `/pub/` but that a server keeping `%2F`, `\` or `;` as data,
/// or removing dot segments at another stage, reads as a path outside it.
const PREFIX_ESCAPES: &[&str] = &[
    "/evil%2F..%2Fpub/x",
    "/evil%252F..%252Fpub/x",
    "/evil%5C..%5Cpub/x",
    "/evil\\..\\pub/x",
    "/evil/../pub/x",
    "/evil/%2e%2e/pub/x",
    "/evil/..;/pub/x",
    "/pub/a%2Fb/../../evil",
    "//pub/x",
];

#[test]
fn an_allow_prefix_admits_no_spelling_a_server_may_read_outside_it() {
    let Some(mut s) = Scene::new() else { return };
    let p = s.proxy(&format!(
        "network:\n  mode: allowlist\n  allowed_urls: [ok.attack.test/pub/]\n  allow_destinations: [{WORLD_V4}/32]\n"
    ));
    // Controls: plain spellings under the prefix, and an encoded `/` below it, reach the origin as sent.
    assert_paths_refused_plain_and_inside_tls(
        &s,
        &p,
        PREFIX_ESCAPES,
        "ambiguous-path",
        ["/pub/x", "/pub/group%2Fproject"],
    );
}

#[test]
fn smuggling_shapes_get_400_and_reach_nothing() {
    let Some(mut s) = Scene::new() else { return };
    let p = s.proxy(&allowlist(&[OK]));
    let smuggled = "GET http://denied.attack.test/ HTTP/1.1\r\nHost: denied.attack.test\r\n\r\n";
    let head = "POST http://ok.attack.test/ HTTP/1.1\r\nHost: ok.attack.test\r\n";
    let shapes = [
        format!("{head}Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{smuggled}"),
        format!("{head}Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n{smuggled}"),
        format!("{head}Content-Length: 0\r\nContent-Length: {}\r\n\r\n{smuggled}", smuggled.len()),
        format!("{head}Content-Length: 0, {}\r\n\r\n{smuggled}", smuggled.len()),
        format!("{head}Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n{smuggled}"),
        format!("{head}Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n{smuggled}"),
        format!("{head}X-Folded: a\r\n Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n{smuggled}"),
        format!("{head}Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n{smuggled}"),
        format!("POST http://ok.attack.test/ HTTP/1.1\nHost: ok.attack.test\nContent-Length: 0\n\n{smuggled}"),
        format!("{head}Content-Length: 0\r\n\rX: y\r\n\r\n{smuggled}"),
    ];
    let probes: Vec<Value> = shapes.iter().map(|raw| json!({ "raw": raw, "expect": 2 })).collect();
    for (r, shape) in s.probe(&p, &probes).iter().zip(&shapes) {
        assert_eq!(first(r).0, 400, "{shape:?}: {r}");
        assert_eq!(r["responses"].as_array().unwrap().len(), 1, "nothing after a malformed head: {shape:?}: {r}");
    }
    s.assert_never_resolved(&[DENIED]);
    assert_eq!(s.requests(), Vec::<String>::new(), "an origin saw a smuggled request");
    // A malformed chunk in the body of an allowed request: the head was already on its way (bodies stream), so the
    // upstream sees the allowed POST and its body up to the bad byte, then both connections close; the request
    // after it is never forwarded and its name never resolved.
    let bad_chunk = format!("{head}Transfer-Encoding: chunked\r\n\r\n5;\n\r\nhello\r\n0\r\n\r\n{smuggled}");
    let r = &s.probe(&p, &[json!({ "raw": bad_chunk, "expect": 2 })])[0];
    assert!(r["closed"] == true && r["responses"].as_array().unwrap().iter().all(|r| r["status"] != 200), "{r}");
    s.assert_never_resolved(&[DENIED]);
    let requests = s.requests();
    assert!(requests.iter().all(|l| l.contains("POST / HTTP/1.1 | ok.attack.test")), "{requests:?}");
}

#[test]
fn pipelined_requests_are_each_decided_on_their_own() {
    let Some(mut s) = Scene::new() else { return };
    let p = s.proxy(&allowlist(&[OK]));
    let req = |host: &str, path: &str| format!("GET http://{host}{path} HTTP/1.1\r\nHost: {host}\r\n\r\n");
    let raw = [req(OK, "/a"), req(DENIED, "/b"), req(OK, "/c"), req("denied.attack.test.", "/d"), req(OK, "/e")];
    let results = s.probe(&p, &[json!({ "raw": raw.concat(), "expect": 5 })]);
    let statuses: Vec<u64> =
        results[0]["responses"].as_array().unwrap().iter().map(|r| r["status"].as_u64().unwrap()).collect();
    assert_eq!(statuses, [200, 403, 200, 403, 200], "{}", results[0]);
    s.assert_never_resolved(&[DENIED]);
    let paths: Vec<String> = s.requests().iter().map(|l| l.split(' ').nth(4).unwrap_or("").to_owned()).collect();
    assert_eq!(paths, ["/a", "/c", "/e"]);
}

#[test]
fn absolute_form_and_host_header_must_agree() {
    let Some(mut s) = Scene::new() else { return };
    let p = s.proxy(&allowlist(&[OK]));
    let target = "http://ok.attack.test/";
    let mismatched = vec![
        get(target, DENIED),
        get(target, "ok.attack.test:8080"),
        json!({ "raw": "GET http://ok.attack.test/ HTTP/1.1\r\n\r\n" }),
        json!({ "raw": "GET http://denied.attack.test/ HTTP/1.1\r\nHost: ok.attack.test\r\n\r\n" }),
    ];
    let results = s.probe(&p, &mismatched);
    for r in &results[..3] {
        assert_eq!(first(r), (403, "host-mismatch".into()), "{r}");
    }
    assert_eq!(first(&results[3]).0, 403, "{}", results[3]);
    let malformed = vec![
        get("/", OK),
        json!({ "raw": "GET http://ok.attack.test/ HTTP/1.1\r\nHost: ok.attack.test\r\nHost: denied.attack.test\r\n\r\n" }),
    ];
    for r in s.probe(&p, &malformed) {
        assert_eq!(first(&r).0, 400, "{r}");
    }
    s.assert_no_lookup();
    s.assert_origin_untouched();
}

#[test]
fn userinfo_and_odd_authorities_are_refused_unresolved() {
    let Some(mut s) = Scene::new() else { return };
    let p = s.proxy(&allowlist(&[OK]));
    let targets = [
        ("http://ok.attack.test@denied.attack.test/", "denied.attack.test"),
        ("http://denied.attack.test@ok.attack.test/", "ok.attack.test"),
        ("http://user:pass@ok.attack.test/", "ok.attack.test"),
        ("http://ok.attack.test%40denied.attack.test/", "ok.attack.test"),
        ("http://ok.attack.test:80@denied.attack.test/", "denied.attack.test"),
        ("http://ok.attack.test%2edenied.attack.test/", "ok.attack.test"),
        ("http://ok.attack.test\\@denied.attack.test/", "ok.attack.test"),
    ];
    let mut probes: Vec<Value> = targets.iter().map(|(t, h)| get(t, h)).collect();
    probes.push(connect("ok.attack.test@denied.attack.test:443", Some(DENIED)));
    probes.push(connect("denied.attack.test@ok.attack.test:443", Some(OK)));
    for (r, probe) in s.probe(&p, &probes).iter().zip(&probes) {
        let (status, _) = first(r);
        assert!([400, 403].contains(&status), "{probe}: {r}");
    }
    s.assert_no_lookup();
    s.assert_origin_untouched();
}

#[test]
fn ipv6_destinations_are_refused_as_literals_and_as_answers() {
    let Some(mut s) = Scene::new() else { return };
    let p = s.proxy(&allowlist(&[OK, "v6lo.attack.test", "v6hidden.attack.test", "mapped.attack.test"]));
    let literals = ["[::1]", &format!("[{WORLD_V6}]"), "[fd00:200::3]:80", "[::ffff:7f00:1]", "[::]", "[fe80::1%25lo]"];
    let probes: Vec<Value> = literals.iter().map(|h| get(&format!("http://{h}/"), h)).collect();
    for (r, probe) in s.probe(&p, &probes).iter().zip(&probes) {
        assert!(matches!(first(r).0, 400 | 403), "{probe}: {r}");
        assert_ne!(first(r).1, "", "a leash refusal: {r}");
    }
    let names = ["v6lo.attack.test", "v6hidden.attack.test", "mapped.attack.test"];
    let probes: Vec<Value> = names.iter().map(|h| get(&format!("http://{h}/"), h)).collect();
    assert_refused(&s.probe(&p, &probes), &probes, 403, "internal-destination");
    s.assert_origin_untouched();
    let queries = s.queries();
    assert!(
        queries.iter().all(|q| names.iter().any(|n| q.starts_with(n))),
        "only the names were resolved: {queries:?}"
    );
}

/// Run inside `leash run` in the edge namespace: every way out but the proxy, each printing what happened.
const ESCAPES: &str = r#"
import socket, struct, subprocess, sys
def attempt(name, f):
    try:
        f(); print(name, "OPEN")
    except Exception as e:
        print(name, "refused", type(e).__name__)
def tcp(addr, port, fam=socket.AF_INET):
    s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(2); s.connect((addr, port))
    s.sendall(b"GET /escaped HTTP/1.1\r\nHost: x\r\n\r\n"); s.recv(100) or 1/0
def dns(server, name):
    q = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\x00\x00\x01\x00\x01"
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2); s.sendto(q, (server, 53)); s.recvfrom(512)
def raw():
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP); s.sendto(b"\x08\x00\xf7\xff\x00\x00\x00\x00", (sys.argv[1], 0))
def packet():
    socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
def unix():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.settimeout(2); s.connect(sys.argv[2])
    s.sendall(b"GET /via-relay HTTP/1.1\r\nHost: x\r\n\r\n"); s.recv(100) or 1/0
def lookup():
    socket.getaddrinfo("sandbox-lookup.attack.test", 80)
attempt("tcp-world", lambda: tcp(sys.argv[1], 80))
attempt("tcp-metadata", lambda: tcp("169.254.169.254", 80))
attempt("tcp-v6", lambda: tcp(sys.argv[3], 80, socket.AF_INET6))
attempt("dns-direct", lambda: dns(sys.argv[1], "direct-dns.attack.test"))
attempt("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", (sys.argv[1], 9)) and dns(sys.argv[1], "udp.attack.test"))
attempt("raw", raw)
attempt("packet", packet)
attempt("unix-relay", unix)
attempt("lookup", lookup)
for url in ["http://ok.attack.test/run", "http://denied.attack.test/run"]:
    out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", url], capture_output=True, text=True)
    print("proxy", url, out.stdout)
# Ignoring the proxy: the DNS stub's address and leash's transparent listeners there, with a spoofed Host, a name
# pinned by hand to that address, and TLS naming a refused host.
for label, args in [
    ("transparent-ok", ["http://ok.attack.test/transparent"]),
    ("transparent-host", ["-H", "Host: denied.attack.test", "http://ok.attack.test/spoofed"]),
    ("transparent-pinned", ["--resolve", "denied.attack.test:80:127.0.0.2", "http://denied.attack.test/pinned"]),
    ("transparent-absolute", ["--request-target", "http://denied.attack.test/abs", "http://ok.attack.test/"]),
    ("transparent-tls", ["-k", "--resolve", "denied.attack.test:443:127.0.0.2", "https://denied.attack.test/tls"]),
]:
    out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", "--noproxy", "*"] + args, capture_output=True, text=True)
    print(label, out.stdout)
"#;

#[test]
fn leash_run_leaves_no_way_out_but_the_proxy() {
    let Some(mut s) = Scene::new() else { return };
    let relay = text(&s.path("relay.sock"));
    let edge = s.edge.clone();
    // A relay a host process runs on a Unix socket, to the world's origin: the sandbox must not reach it.
    s.serve(&edge, &["relay", &relay, WORLD_V4]);
    let policy = s.file("policy.yaml", &allowlist(&[OK]));
    let log = s.path("audit.jsonl");
    let out = s
        .in_edge("timeout")
        .args(["60", &leash(), "run", "--policy"])
        .arg(&policy)
        .arg("--log")
        .arg(&log)
        .args(["--", "/usr/bin/python3", "-c", ESCAPES, WORLD_V4, &relay, WORLD_V6])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "stdout: {stdout}\nstderr: {}", String::from_utf8_lossy(&out.stderr));
    for attempt in ["tcp-world", "tcp-metadata", "tcp-v6", "dns-direct", "udp", "raw", "packet", "unix-relay", "lookup"]
    {
        let line = stdout.lines().find(|l| l.starts_with(&format!("{attempt} "))).unwrap_or("");
        assert!(line.starts_with(&format!("{attempt} refused")), "{attempt}: {stdout}");
    }
    assert!(stdout.contains("proxy http://ok.attack.test/run 200"), "{stdout}");
    assert!(stdout.contains("proxy http://denied.attack.test/run 403"), "{stdout}");
    assert!(stdout.contains("transparent-ok 200"), "a proxy-unaware client reaches an allowed host: {stdout}");
    // 403 (for TLS: leash's readable refusal inside TLS, which `-k` reads) or 400, or no answer at all.
    for label in ["transparent-host", "transparent-pinned", "transparent-absolute", "transparent-tls"] {
        let line = stdout.lines().find(|l| l.starts_with(&format!("{label} "))).unwrap_or("");
        assert!([" 403", " 400", " 000"].iter().any(|c| line.ends_with(c)), "{label}: {stdout}");
    }
    // Only the allowed requests reached the world (through the proxy, and through the transparent listener when it
    // exists); the relay was never connected; only the allowed name was resolved.
    let seen: Vec<String> =
        s.origin_events().into_iter().filter(|l| l.contains(" req ") || l.contains("unix")).collect();
    assert!(seen.iter().any(|l| l.contains("GET /run ")), "{seen:?}");
    assert!(seen.iter().all(|l| l.contains("GET /run ") || l.contains("GET /transparent ")), "{seen:?}");
    s.assert_never_resolved(&[DENIED, "direct-dns.attack.test", "udp.attack.test", "sandbox-lookup.attack.test"]);
    assert!(s.queries().iter().any(|q| q.starts_with("ok.attack.test ")), "the allowed name went through DNS");
    // The log holds every decision, the transparent listeners' too: the two allowed requests, and a refusal for
    // the denied one through the proxy and for each of the four proxy-unaware attempts.
    let (lookups, decisions): (Vec<Value>, Vec<Value>) = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l.get("decision").is_some())
        .partition(|l| l["method"] == "DNS");
    // And every lookup the sandbox's stub answered: the refused name, a block line for each query (A and AAAA),
    // the allowed one once; nothing for the names sent past the stub, which never reached it.
    let looked_up: Vec<String> =
        lookups.iter().map(|l| format!("{} {} {}", l["decision"], l["host"], l["reason"])).collect();
    let refused_lookups = lookups.iter().filter(|l| l["decision"] == "block").collect::<Vec<_>>();
    assert!(refused_lookups.iter().all(|l| l["host"] == "sandbox-lookup.attack.test"), "{looked_up:#?}");
    assert!(!refused_lookups.is_empty(), "the refused lookup is on record: {looked_up:#?}");
    let allowed_lookups = lookups.iter().filter(|l| l["decision"] == "allow").collect::<Vec<_>>();
    assert_eq!(allowed_lookups.len(), 1, "{looked_up:#?}");
    assert_eq!(allowed_lookups[0]["host"], OK, "{looked_up:#?}");
    let summary: Vec<String> =
        decisions.iter().map(|l| format!("{} {} {} {}", l["decision"], l["host"], l["path"], l["reason"])).collect();
    let allowed: Vec<&Value> = decisions.iter().filter(|l| l["decision"] == "allow").collect();
    assert_eq!(allowed.len(), 2, "{summary:#?}");
    assert!(allowed.iter().all(|l| l["host"] == OK), "{summary:#?}");
    let refused: Vec<&Value> = decisions.iter().filter(|l| l["decision"] == "block").collect();
    assert_eq!(refused.len(), 5, "{summary:#?}");
    assert!(refused.iter().all(|l| l["host"] == DENIED), "{summary:#?}");
}

#[test]
fn framing_headers_named_in_connection_cannot_smuggle_a_second_request() {
    let Some(mut s) = Scene::new() else { return };
    let p = s.proxy(&format!(
        "network:\n  mode: blocklist\n  blocked_urls: [ok.attack.test/secret]\n  allow_destinations: [{WORLD_V4}/32]\n"
    ));
    // If leash dropped a framing header because `Connection` names it, yet framed the body by it, the origin would
    // read the body as a second request: one to a refused path that leash never decided.
    let inner = "GET /secret HTTP/1.1\r\nHost: ok.attack.test\r\n\r\n";
    let head = "POST http://ok.attack.test/public HTTP/1.1\r\nHost: ok.attack.test\r\n";
    let chunked = format!("{:x}\r\n{inner}\r\n0\r\n\r\n", inner.len());
    let shapes = [
        format!("{head}Content-Length: {}\r\nConnection: Content-Length\r\n\r\n{inner}", inner.len()),
        format!("{head}Content-Length: {}\r\nConnection: keep-alive, content-length\r\n\r\n{inner}", inner.len()),
        format!("{head}Transfer-Encoding: chunked\r\nConnection: Transfer-Encoding\r\n\r\n{chunked}"),
    ];
    let mut probes: Vec<Value> = shapes.iter().map(|raw| json!({ "raw": raw })).collect();
    // The same inside an inspected tunnel (the host has a path rule), origin-form as there.
    let ca = text(&p.ca);
    for shape in &shapes {
        let inner = shape.replacen("http://ok.attack.test/public", "/public", 1);
        probes.push(json!({"connect": "ok.attack.test:443", "sni": OK, "cafile": ca, "send": inner}));
    }
    let results = s.probe(&p, &probes);
    let requests = s.requests();
    assert!(!requests.iter().any(|l| l.contains("/secret")), "a refused path reached the origin: {requests:?}");
    assert_eq!(requests.len(), probes.len(), "one request each, its body read as a body: {requests:?}");
    for r in &results {
        assert_eq!(r["responses"][0]["body"], "origin /public", "{r}");
    }
}

#[test]
fn odd_request_lines_and_host_spellings_reach_no_refused_path() {
    let Some(mut s) = Scene::new() else { return };
    let p = s.proxy(&format!(
        "network:\n  mode: blocklist\n  blocked_urls: [ok.attack.test/secret, denied.attack.test]\n  allow_destinations: [{WORLD_V4}/32]\n"
    ));
    // Host spellings of the blocked path: case, a trailing dot, the default port spelled out.
    let spelled = ["OK.Attack.Test", "ok.attack.test.", "ok.attack.test:80"];
    let probes: Vec<Value> = spelled.iter().map(|h| get(&format!("http://{h}/secret"), h)).collect();
    assert_refused(&s.probe(&p, &probes), &probes, 403, "rule");
    // Request lines a lax parser would read differently than an upstream.
    let lines = [
        "GET  http://denied.attack.test/ HTTP/1.1\r\nHost: denied.attack.test\r\n\r\n",
        "GET\thttp://denied.attack.test/ HTTP/1.1\r\nHost: denied.attack.test\r\n\r\n",
        "GET http://denied.attack.test/ HTTP/1.1 \r\nHost: denied.attack.test\r\n\r\n",
        "GET http://ok.attack.test/secret\r\nHost: ok.attack.test\r\n\r\n",
        "GET http://ok.attack.test/secret HTTP/1.1\r\nHost: ok.attack.test\r\nX-A: \0\r\n\r\n",
        "GET http://ok.attack.test/ HTTP/1.1\r\nHost: ok.attack.test\r\n\x00GET /secret HTTP/1.1\r\n\r\n",
        "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        "GET http://ok.attack.test/secret HTTP/2.0\r\nHost: ok.attack.test\r\n\r\n",
        "GET http://ok.attack.test/secret HTTP/0.9\r\nHost: ok.attack.test\r\n\r\n",
    ];
    let probes: Vec<Value> = lines.iter().map(|raw| json!({ "raw": raw })).collect();
    for (r, line) in s.probe(&p, &probes).iter().zip(lines) {
        let (status, _) = first(r);
        assert!(status == 0 || (400..500).contains(&status), "{line:?}: {r}");
    }
    // An inspected tunnel whose SNI and target spell the host differently still decides on the canonical name.
    let ca = text(&p.ca);
    let tls = vec![
        json!({"connect": "OK.attack.test:443", "sni": "ok.attack.test", "cafile": ca,
               "send": "GET /secret HTTP/1.1\r\nHost: ok.attack.test\r\n\r\n"}),
        json!({"connect": "ok.attack.test:443", "sni": "ok.attack.test", "cafile": ca,
               "send": "GET /secret HTTP/1.1\r\nHost: OK.ATTACK.TEST.:443\r\n\r\n"}),
    ];
    for r in s.probe(&p, &tls) {
        assert!(r["tls"] != "ok" || (400..500).contains(&first(&r).0), "{r}");
    }
    s.assert_never_resolved(&[DENIED]);
    let requests = s.requests();
    assert!(!requests.iter().any(|l| l.contains("secret") || l.contains("denied")), "{requests:?}");
}

#[test]
fn smuggling_shapes_inside_tls_inspection_reach_no_refused_path() {
    let Some(mut s) = Scene::new() else { return };
    let p = s.proxy(&format!(
        "network:\n  mode: blocklist\n  blocked_urls: [ok.attack.test/secret]\n  allow_destinations: [{WORLD_V4}/32]\n"
    ));
    let smuggled = "GET /secret HTTP/1.1\r\nHost: ok.attack.test\r\n\r\n";
    let head = "POST /public HTTP/1.1\r\nHost: ok.attack.test\r\n";
    let n = smuggled.len();
    let shapes = [
        format!("{head}Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{smuggled}"),
        format!("{head}Content-Length: 0\r\nContent-Length: {n}\r\n\r\n{smuggled}"),
        format!("{head}Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n{smuggled}"),
        format!("{head}X-Folded: a\r\n Content-Length: {n}\r\n\r\n{smuggled}"),
        format!("{head}Content-Length : {n}\r\n\r\n{smuggled}"),
        format!("POST /public HTTP/1.1\nHost: ok.attack.test\nContent-Length: 0\n\n{smuggled}"),
        format!("{head}Content-Length: 0\r\n\r\n{smuggled}"),
    ];
    let ca = text(&p.ca);
    let probes: Vec<Value> = shapes
        .iter()
        .map(|raw| json!({"connect": "ok.attack.test:443", "sni": OK, "cafile": ca, "send": raw, "expect": 2}))
        .collect();
    let results = s.probe(&p, &probes);
    for (r, shape) in results[..shapes.len() - 1].iter().zip(&shapes) {
        assert_eq!(first(r).0, 400, "{shape:?}: {r}");
    }
    // The last is a well-formed pipeline: the second request is decided on its own and refused.
    let last = &results[shapes.len() - 1]["responses"];
    assert_eq!((last[0]["status"].as_u64(), last[1]["status"].as_u64()), (Some(200), Some(403)), "{last}");
    let requests = s.requests();
    assert!(!requests.iter().any(|l| l.contains("/secret")), "a refused path reached the origin: {requests:?}");
}

#[test]
fn hostile_bytes_in_requests_leave_one_valid_json_line_each() {
    let Some(mut s) = Scene::new() else { return };
    let p = s.proxy(&allowlist(&[OK]));
    let long = "a".repeat(60_000);
    let targets = [
        "http://denied.attack.test/a\"b\\c".to_owned(),
        "http://denied.attack.test/\u{85}\u{ff}\u{fe}".to_owned(),
        "http://denied.attack.test/%0a{\"decision\":\"allow\"}".to_owned(),
        "http://denied.attack.test/%22%7d%0d%0a".to_owned(),
        format!("http://denied.attack.test/{long}"),
        "http://denied.attack.test/?q=\"},{\"decision\":\"allow".to_owned(),
    ];
    let mut probes: Vec<Value> = targets.iter().map(|t| get(t, DENIED)).collect();
    probes.push(
        json!({ "raw": "GET http://denied.attack.test/ HTTP/1.1\r\nHost: denied.attack.test\r\nX-\u{ff}: \"\r\n\r\n" }),
    );
    probes.push(json!({ "raw": "\u{16}\u{3}\u{1}\u{0}\u{5}hello\r\n\r\n" }));
    let results = s.probe(&p, &probes);
    for (r, probe) in results.iter().zip(&probes) {
        assert!((400..500).contains(&first(r).0), "{probe}: {r}");
    }
    // `audit` parses every line as JSON; each request left exactly one line, none of them an allow.
    let audit = s.audit(&p);
    assert_eq!(audit.len(), probes.len(), "{audit:#?}");
    assert!(audit.iter().all(|l| l["decision"] == "block"), "{audit:#?}");
    s.assert_no_lookup();
    s.assert_origin_untouched();
}

/// What `until` finds, polled for at most 10 s (a proxy or an origin finishing after the client has gone).
fn within<T>(what: &str, mut until: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(found) = until() {
            return found;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_client_hanging_up_mid_stream_is_logged_with_the_upstreams_status_and_bytes() {
    // A client that closed an event stream after its first event left an outcome of
    // `status 502, bytes 0/0`, though the upstream had answered 200 and received the whole request.
    let Some(mut s) = Scene::new() else { return };
    // The path rule makes ok.attack.test inspected inside TLS; the event streams are under no rule.
    let p = s.proxy(&format!(
        "network:\n  mode: blocklist\n  blocked_urls: [ok.attack.test/secret]\n  allow_destinations: [{WORLD_V4}/32]\n"
    ));
    let ca = text(&p.ca);
    let ask = |target: &str| format!("GET {target} HTTP/1.1\r\nHost: {OK}\r\nAccept: text/event-stream\r\n\r\n");
    let first_event = "data: first\n\n";
    let probes = vec![
        json!({"raw": ask(&format!("http://{OK}/events")), "hang_up_after": first_event}),
        json!({"connect": "ok.attack.test:443", "sni": OK, "cafile": ca, "send": ask("/events-tls"),
               "hang_up_after": first_event}),
    ];
    let results = s.probe(&p, &probes);
    for (r, (path, port)) in results.iter().zip([("/events", 80), ("/events-tls", 443)]) {
        assert_eq!((r["status"].as_u64(), r["seen"].as_bool()), (Some(200), Some(true)), "{path}: {r}");
        let read = r["read"].as_u64().unwrap();
        let audit = s.audit(&p);
        let decision = audit.iter().find(|l| l["path"] == path).unwrap_or_else(|| panic!("{path}: {audit:#?}"));
        assert_eq!(decision["decision"], "allow", "{decision}");
        let id = decision["id"].clone();
        let outcome = within(&format!("the outcome of {path}"), || {
            s.audit(&p).into_iter().find(|l| l["id"] == id && l.get("status").is_some())
        });
        assert_eq!(outcome["status"], 200, "{path}: the upstream's status, not leash's own: {outcome}");
        assert!(outcome["bytes_up"].as_u64().unwrap() > 0, "{path}: the request went up: {outcome}");
        assert!(
            outcome["bytes_down"].as_u64().unwrap() >= read,
            "{path}: at least what the client read ({read}): {outcome}"
        );
        // The stream ended because leash let go of the upstream once its client had gone, not at its time limit.
        let end = format!("world events-end {port} {path} ");
        let ended = within(&format!("the end of {path}"), || s.events().into_iter().find(|l| l.starts_with(&end)));
        assert!(ended.starts_with(&format!("{end}gone ")), "{ended}");
    }
}
