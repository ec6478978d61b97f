//! A corporate proxy in front of the internet (`upstream_proxy`), over real sockets: an in-process HTTP proxy that
//! records what it is asked, demands `Proxy-Authorization`, answers absolute-form requests itself and splices
//! `CONNECT`s to the test origins, or refuses them. leash decides first, exactly as without it: refused requests
//! never reach the upstream proxy; allowed ones go through it (plain HTTP in absolute form, tunnels through its
//! CONNECT, spliced or inspected) with the proxy's credentials; names are resolved there, not by leash; a refusal by
//! the upstream proxy reaches the client as 502 naming its status; bypassed hosts go out directly. The same proxy
//! behind TLS stands for an `https://` upstream proxy: everything runs inside that session, tunnels TLS-in-TLS, and
//! its certificate is verified (against `upstream_proxy_ca`), never skipped.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test's helpers fail it by panicking")]

mod support;

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

use leash_proxy::credentials::{Secret, Secrets};
use support::client::{exchange, get, request};
use support::tls::{https_get, Writes};
use support::*;

const USER_PASSWORD: &str = "corp-user:s3cret";
/// What the sandbox's environment holds in its place (as long: the echo's lengths stay right).
const USER_PASSWORD_PLACEHOLDER: &str = "leash-upstream-p";
/// `Basic base64(corp-user:s3cret)`.
const PROXY_AUTH: &str = "Basic Y29ycC11c2VyOnMzY3JldA==";

/// Request lines the corporate proxy was sent, each with its `Proxy-Authorization`.
type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// The corporate proxy: what it was asked (request lines and their `Proxy-Authorization`), and the CONNECT targets
/// whose host it refuses with 403.
struct CorpProxy {
    port: u16,
    seen: Seen,
}

impl CorpProxy {
    async fn start(refuse: &'static [&'static str]) -> CorpProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                tokio::spawn(serve(conn, s.clone(), refuse));
            }
        });
        CorpProxy { port, seen }
    }

    /// The same proxy behind TLS, with a leaf of `ca`'s for `names`: an `https://` upstream proxy.
    async fn start_tls(refuse: &'static [&'static str], ca: &TestCa, names: &[&str]) -> CorpProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let acceptor = TlsAcceptor::from(Arc::new(ca.server_config(names)));
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                let (acceptor, s) = (acceptor.clone(), s.clone());
                tokio::spawn(async move {
                    // A client that does not trust the certificate ends here: nothing reaches `serve`.
                    if let Ok(tls) = acceptor.accept(conn).await {
                        serve(tls, s, refuse).await;
                    }
                });
            }
        });
        CorpProxy { port, seen }
    }

    fn seen(&self) -> Vec<(String, Option<String>)> {
        self.seen.lock().unwrap().clone()
    }

    fn lines(&self) -> Vec<String> {
        self.seen().into_iter().map(|(line, _)| line).collect()
    }
}

/// One client connection of the corporate proxy: CONNECT is spliced to 127.0.0.1 at the target's port (its name
/// "resolved" here), any other request answered `via corp <target>`; 407 without the right credentials; a target
/// whose host is in `refuse` gets squid's own 403 (marked `X-Squid-Error`), a path `/origin-403` an unmarked 403 as
/// an origin would answer.
async fn serve<S: AsyncRead + AsyncWrite + Unpin>(mut conn: S, seen: Seen, refuse: &[&str]) {
    loop {
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            if conn.read(&mut byte).await.unwrap_or(0) == 0 {
                return;
            }
            head.push(byte[0]);
        }
        let text = String::from_utf8_lossy(&head).into_owned();
        let line = text.lines().next().unwrap_or_default().to_owned();
        let auth = text
            .lines()
            .find_map(|l| l.strip_prefix("Proxy-Authorization: ").or_else(|| l.strip_prefix("proxy-authorization: ")))
            .map(str::to_owned);
        seen.lock().unwrap().push((line.clone(), auth.clone()));
        if auth.as_deref() != Some(PROXY_AUTH) {
            let _ = conn.write_all(b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n").await;
            return;
        }
        let mut parts = line.split(' ');
        let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or("").to_owned());
        if method == "CONNECT" {
            let (host, port) = target.rsplit_once(':').unwrap();
            if refuse.contains(&host) {
                let _ = conn.write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n").await;
                return;
            }
            let mut origin = TcpStream::connect(("127.0.0.1", port.parse::<u16>().unwrap())).await.unwrap();
            conn.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await.unwrap();
            let _ = tokio::io::copy_bidirectional(&mut conn, &mut origin).await;
            return;
        }
        let host = target.trim_start_matches("http://").split([':', '/']).next().unwrap_or_default();
        let reply = if refuse.contains(&host) {
            "HTTP/1.1 403 Forbidden\r\nX-Squid-Error: ERR_ACCESS_DENIED 0\r\nContent-Length: 6\r\n\r\ndenied".to_owned()
        } else if target.ends_with("/echo-auth") {
            // A debug page quoting the credentials it got, as some proxies' and gateways' do.
            let body = format!("auth: {}; user: {USER_PASSWORD}", auth.unwrap_or_default());
            format!("HTTP/1.1 200 OK\r\nX-Auth: {USER_PASSWORD}\r\nContent-Length: {}\r\n\r\n{body}", body.len())
        } else if target.ends_with("/origin-403") {
            "HTTP/1.1 403 Forbidden\r\nContent-Length: 9\r\n\r\norigin403".to_owned()
        } else {
            let body = format!("via corp {target}");
            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len())
        };
        if conn.write_all(reply.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// An allowlist of `allowed.test`, `other.allowed.test` and `direct.test` going out through `corp`, `direct.test`
/// bypassing it.
fn policy(corp: &CorpProxy, http_port: u16, tunnel_port: u16, extra: &str) -> String {
    format!(
        "network:\n  mode: allowlist\n  allowed_hosts: [allowed.test, other.allowed.test, direct.test]\n  \
         ports: [{http_port}]\n  tunnel_ports: [{tunnel_port}]\n  allow_destinations: [127.0.0.0/8]\n  \
         upstream_proxy: http://proxy.test:{}\n  upstream_proxy_auth_env: CORP_PROXY\n  \
         upstream_proxy_bypass: [direct.test]\n{extra}",
        corp.port
    )
}

async fn leash(yaml: &str) -> Leash {
    Leash::builder(yaml).upstream_auth(USER_PASSWORD).start().await
}

/// [`leash`] with the proxy's `user:password` among the run's secrets, as the binary reads it.
async fn leash_keeping_it_secret(yaml: &str) -> Leash {
    let secret = Secret::upstream_proxy(USER_PASSWORD, USER_PASSWORD_PLACEHOLDER).unwrap();
    Leash::builder(yaml).upstream_auth(USER_PASSWORD).secrets(Secrets::new(vec![secret])).start().await
}

#[tokio::test]
async fn an_answer_quoting_the_upstream_proxys_credentials_comes_back_without_them() {
    let corp = CorpProxy::start(&[]).await;
    let leash = leash_keeping_it_secret(&policy(&corp, 8080, 443, "")).await;
    let r = exchange(leash.addr, get("http://allowed.test:8080/echo-auth")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let got = format!("{}{}", r.head.raw, r.text());
    let encoded = PROXY_AUTH.trim_start_matches("Basic ").trim_end_matches('=');
    assert!(!got.contains(USER_PASSWORD) && !got.contains(encoded), "the answer holds the credentials: {got}");
    assert!(got.contains(&format!("user: {USER_PASSWORD_PLACEHOLDER}")), "{got}");
}

#[tokio::test]
async fn a_request_carrying_the_upstream_proxys_credentials_is_refused() {
    let corp = CorpProxy::start(&[]).await;
    let leash = leash_keeping_it_secret(&policy(&corp, 8080, 443, "")).await;
    for line in [format!("x-note: {USER_PASSWORD}"), format!("Authorization: {PROXY_AUTH}")] {
        let r = exchange(leash.addr, request("GET", "http://allowed.test:8080/page", &[&line], "")).await;
        assert_refused(&r, 403, "credential-leak");
    }
    let r = exchange(leash.addr, request("POST", "http://allowed.test:8080/page", &[], USER_PASSWORD)).await;
    assert_refused(&r, 403, "credential-leak");
    // Refused on their heads, the GETs never reached it (the POST's head went up before its body was read).
    assert!(corp.seen().iter().all(|(line, _)| !line.starts_with("GET")), "{:?}", corp.seen());
}

#[tokio::test]
async fn plain_http_goes_through_the_upstream_proxy_in_absolute_form_with_its_credentials() {
    let corp = CorpProxy::start(&[]).await;
    let leash = leash(&policy(&corp, 8080, 443, "")).await;
    let r = exchange(leash.addr, get("http://allowed.test:8080/page?q=1")).await;
    assert_eq!((r.status, r.text()), (200, "via corp http://allowed.test:8080/page?q=1".to_owned()));
    assert_eq!(corp.seen(), [("GET http://allowed.test:8080/page?q=1 HTTP/1.1".to_owned(), Some(PROXY_AUTH.into()))]);
    // leash resolved the proxy's name only: the destination's is the upstream proxy's to resolve.
    assert_eq!(leash.resolver.asked(), ["proxy.test"]);
    let line = leash.decision("/page").await;
    assert_eq!(line["decision"], "allow");
}

#[tokio::test]
async fn what_leash_refuses_never_reaches_the_upstream_proxy() {
    let corp = CorpProxy::start(&[]).await;
    let leash = leash(&policy(&corp, 8080, 443, "")).await;
    assert_refused(&exchange(leash.addr, get("http://other.test:8080/")).await, 403, "not-allowed");
    assert_refused(&exchange(leash.addr, get("http://allowed.test:9999/")).await, 403, "port");
    assert_refused(&exchange(leash.addr, get("http://127.0.0.1:8080/")).await, 403, "ip-literal");
    assert!(corp.seen().is_empty(), "the upstream proxy saw {:?}", corp.seen());
    leash.resolver.assert_never_asked();
}

#[tokio::test]
async fn tunnels_go_through_its_connect_spliced_and_inspected() {
    let ca = TestCa::new();
    let tls = TlsUpstream::start(&ca).await;
    let corp = CorpProxy::start(&[]).await;
    let rule = "  allowed_urls: [\"allowed.test/open/\"]\n";
    let yaml = policy(&corp, 80, tls.port(), "").replace("allowed_hosts: [allowed.test, ", "allowed_hosts: [");
    let leash = Leash::builder(&format!("{yaml}{rule}")).inspecting(&ca.pem).upstream_auth(USER_PASSWORD).start().await;
    // Spliced: other.allowed.test is allowed whole; the TLS is end to end, through the proxy's tunnel.
    let target = format!("other.allowed.test:{}", tls.port());
    let r = https_get(leash.addr, &target, "other.allowed.test", ca.client_config(), Writes::Whole).await.unwrap();
    assert_eq!(r.status, 200);
    let connect = format!("CONNECT other.allowed.test:{} HTTP/1.1", tls.port());
    assert_eq!(corp.seen()[0], (connect, Some(PROXY_AUTH.to_owned())));
    assert_eq!(leash.resolver.asked(), ["proxy.test"], "leash resolved the proxy's name, never the destination's");
    // Inspected: allowed.test has a path rule; the inner request is decided by leash inside the proxy's tunnel.
    let t = inspecting(leash, ca, tls);
    assert_eq!(t.get("allowed.test", "/open/x").await.status, 200);
    assert_refused(&t.get("allowed.test", "/closed").await, 403, "not-allowed");
    let connects = corp.lines().into_iter().filter(|l| l.starts_with("CONNECT allowed.test:")).count();
    assert!(connects >= 1, "{:?}", corp.lines());
}

fn inspecting(leash: Leash, ca: TestCa, tls: TlsUpstream) -> Inspected {
    Inspected { leash, ca, tls }
}

/// leash inspecting through the corporate proxy, with a client that trusts leash's CA.
struct Inspected {
    leash: Leash,
    ca: TestCa,
    tls: TlsUpstream,
}

impl Inspected {
    async fn get(&self, host: &str, path: &str) -> Resp {
        let _ = &self.ca;
        let ca = self.leash.ca_path.as_ref().unwrap().to_str().unwrap().to_owned();
        let url = format!("https://{host}:{}{path}", self.tls.port());
        let out = curl(self.leash.addr, &["--cacert", &ca, &url]).await;
        Resp { status: out.status, head: out.head, body: support::Body::of(&out.body) }
    }
}

#[tokio::test]
async fn a_refusal_by_the_upstream_proxy_is_a_502_naming_its_status() {
    let ca = TestCa::new();
    let tls = TlsUpstream::start(&ca).await;
    let corp = CorpProxy::start(&["allowed.test"]).await;
    let yaml = format!("{}  inspect: all\n", policy(&corp, 80, tls.port(), ""));
    let leash = Leash::builder(&yaml).inspecting(&ca.pem).upstream_auth(USER_PASSWORD).start().await;
    let t = inspecting(leash, ca, tls);
    let r = t.get("allowed.test", "/x").await;
    assert_eq!(r.status, 502, "{}", r.text());
    assert!(r.text().contains("the upstream proxy `proxy.test:"), "{}", r.text());
    assert!(r.text().contains("answered 403"), "{}", r.text());
    let lines = t.leash.log_until("the tunnel's outcome", |l| l["error"] == "upstream-proxy").await;
    assert!(lines.iter().any(|l| l["status"] == 502), "{lines:?}");
}

#[tokio::test]
async fn a_bypassed_host_goes_out_directly_checked_by_leash() {
    let corp = CorpProxy::start(&[]).await;
    let up = Upstream::start().await;
    let leash = leash(&policy(&corp, up.port(), 443, "")).await;
    let r = exchange(leash.addr, get(&format!("http://direct.test:{}/d", up.port()))).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(up.only_request().head.start, "GET /d HTTP/1.1", "origin-form, straight to the origin");
    assert!(corp.seen().is_empty(), "the upstream proxy saw {:?}", corp.seen());
    assert_eq!(leash.resolver.asked(), ["direct.test"], "leash resolved and checked the bypassed name");
}

#[tokio::test]
async fn the_upstream_proxys_407_to_a_plain_request_is_a_502_naming_it() {
    let corp = CorpProxy::start(&[]).await;
    let leash = Leash::builder(&policy(&corp, 8080, 443, "")).upstream_auth("corp-user:wrong").start().await;
    let r = exchange(leash.addr, get("http://allowed.test:8080/page")).await;
    assert_eq!(r.status, 502, "{}", r.text());
    assert!(r.text().contains("the upstream proxy `proxy.test:") && r.text().contains("answered 407"), "{}", r.text());
    let line = leash.decision("/page").await;
    let outcome = leash.outcome(&line["id"]).await;
    assert_eq!((outcome["status"].as_u64(), outcome["error"].as_str()), (Some(502), Some("upstream-proxy")));
    assert!(outcome["upstream_proxy_answer"].as_str().is_some_and(|a| a.contains("answered 407")), "{outcome}");
}

#[tokio::test]
async fn the_upstream_proxys_own_refusal_of_a_plain_request_is_a_502_an_origins_403_is_relayed() {
    let corp = CorpProxy::start(&["other.allowed.test"]).await;
    let leash = leash(&policy(&corp, 8080, 443, "")).await;
    // squid's own page (X-Squid-Error): the proxy refused, the client is told so, not handed the page as the origin's.
    let r = exchange(leash.addr, get("http://other.allowed.test:8080/page")).await;
    assert_eq!(r.status, 502, "{}", r.text());
    assert!(r.text().contains("the upstream proxy `proxy.test:"), "{}", r.text());
    assert!(r.text().contains("answered 403 (X-Squid-Error: ERR_ACCESS_DENIED 0)"), "{}", r.text());
    let line = leash.decision("/page").await;
    let outcome = leash.outcome(&line["id"]).await;
    assert_eq!((outcome["status"].as_u64(), outcome["error"].as_str()), (Some(502), Some("upstream-proxy")));
    let answer = outcome["upstream_proxy_answer"].as_str().unwrap_or_default();
    assert!(answer.contains("answered 403 (X-Squid-Error: ERR_ACCESS_DENIED 0)"), "{outcome}");
    // An unmarked 403 may be the origin's own answer: relayed as it came.
    let r = exchange(leash.addr, get("http://allowed.test:8080/origin-403")).await;
    assert_eq!((r.status, r.text()), (403, "origin403".to_owned()));
    let line = leash.decision("/origin-403").await;
    let outcome = leash.outcome(&line["id"]).await;
    assert_eq!((outcome["status"].as_u64(), outcome["error"].as_str()), (Some(403), None));
}

/// `policy` with an `https://` upstream proxy at `host`, trusting the CA file at `ca` (if any).
fn https_policy(corp: &CorpProxy, host: &str, ca: Option<&std::path::Path>, ports: (u16, u16), extra: &str) -> String {
    let ca = ca.map_or(String::new(), |p| format!("  upstream_proxy_ca: {}\n", p.display()));
    policy(corp, ports.0, ports.1, &format!("{ca}{extra}"))
        .replace("upstream_proxy: http://proxy.test:", &format!("upstream_proxy: https://{host}:"))
}

/// The test CA's certificate as a file, for `upstream_proxy_ca`.
fn ca_file(ca: &TestCa) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("corp-ca.pem");
    std::fs::write(&path, &ca.pem).unwrap();
    (dir, path)
}

#[tokio::test]
async fn an_https_upstream_proxy_carries_everything_inside_its_tls_session() {
    let ca = TestCa::new();
    let tls = TlsUpstream::start(&ca).await;
    let corp = CorpProxy::start_tls(&[], &ca, &["proxy.test"]).await;
    let (_dir, ca_path) = ca_file(&ca);
    let rule = "  allowed_urls: [\"allowed.test/open/\"]\n";
    let yaml = https_policy(&corp, "proxy.test", Some(&ca_path), (8080, tls.port()), rule)
        .replace("allowed_hosts: [allowed.test, ", "allowed_hosts: [");
    let leash = Leash::builder(&yaml).inspecting(&ca.pem).upstream_auth(USER_PASSWORD).start().await;
    // Plain HTTP, twice: the second request reuses the pooled TLS session to the proxy.
    for _ in 0..2 {
        let r = exchange(leash.addr, get("http://other.allowed.test:8080/page")).await;
        assert_eq!((r.status, r.text()), (200, "via corp http://other.allowed.test:8080/page".to_owned()));
    }
    // Spliced: the client's TLS to the origin runs inside leash's TLS to the proxy.
    let target = format!("other.allowed.test:{}", tls.port());
    let r = https_get(leash.addr, &target, "other.allowed.test", ca.client_config(), Writes::Whole).await.unwrap();
    assert_eq!(r.status, 200);
    let connect = format!("CONNECT other.allowed.test:{} HTTP/1.1", tls.port());
    assert!(corp.seen().contains(&(connect, Some(PROXY_AUTH.to_owned()))), "{:?}", corp.seen());
    // Inspected: leash terminates the client's TLS and opens its own to the origin, inside the proxy's session.
    let t = inspecting(leash, ca, tls);
    assert_eq!(t.get("allowed.test", "/open/x").await.status, 200);
    assert_refused(&t.get("allowed.test", "/closed").await, 403, "not-allowed");
    assert_eq!(t.leash.resolver.asked().iter().filter(|n| *n != "proxy.test").count(), 0, "only the proxy's name");
    let lines = corp.lines();
    assert_eq!(lines.iter().filter(|l| l.starts_with("GET http://other.allowed.test:8080/page")).count(), 2);
    assert!(lines.iter().any(|l| l.starts_with("CONNECT allowed.test:")), "{lines:?}");
}

#[tokio::test]
async fn an_https_upstream_proxy_is_verified_against_its_name_or_address() {
    let ca = TestCa::new();
    let (_dir, ca_path) = ca_file(&ca);
    // Addressed by IP: its certificate must carry that address.
    let by_ip = CorpProxy::start_tls(&[], &ca, &["127.0.0.1"]).await;
    let through_ip = leash(&https_policy(&by_ip, "127.0.0.1", Some(&ca_path), (8080, 443), "")).await;
    let r = exchange(through_ip.addr, get("http://allowed.test:8080/ip")).await;
    assert_eq!((r.status, r.text()), (200, "via corp http://allowed.test:8080/ip".to_owned()));
    // A certificate for another name, or from a CA leash does not trust: 502, and nothing is sent in the clear.
    let wrong_name = CorpProxy::start_tls(&[], &ca, &["elsewhere.test"]).await;
    let other_ca = TestCa::new();
    let untrusted = CorpProxy::start_tls(&[], &other_ca, &["proxy.test"]).await;
    for corp in [&wrong_name, &untrusted] {
        let leash = leash(&https_policy(corp, "proxy.test", Some(&ca_path), (8080, 443), "")).await;
        let r = exchange(leash.addr, get("http://allowed.test:8080/page")).await;
        assert_eq!(r.status, 502, "{}", r.text());
        assert!(
            r.text().contains("the upstream proxy `proxy.test:") && r.text().contains("no TLS session"),
            "{}",
            r.text()
        );
        let line = leash.decision("/page").await;
        let outcome = leash.outcome(&line["id"]).await;
        assert_eq!(outcome["error"], "upstream-proxy");
        assert!(corp.seen().is_empty(), "the proxy read a request: {:?}", corp.seen());
    }
}
