//! Ask mode (`mode: ask`), in-process: only what the rules refuse as `not-allowed` is held for a person; everything
//! else that is refused stays refused at once, with no question opened and nothing resolved; and a person's yes never
//! lets through what the destination check refuses after it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test's helpers fail it by panicking")]

mod support;

use std::time::Duration;

use leash_proxy::ask::{Answer, AnsweredBy, Event};
use leash_proxy::credentials::{Secret, Secrets};
use support::client::{self, exchange, get, read_response};
use support::tls::{connect, https_get, Writes};
use support::*;

/// An ask-mode policy that lists `allowed.test` only, with the plain origin's port and the TLS origin's.
fn ask(port: u16, tunnel_port: u16) -> String {
    format!(
        "network:\n  mode: ask\n  allowed_hosts: [allowed.test]\n  ports: [{port}]\n  tunnel_ports: [{tunnel_port}]\n  \
         allow_destinations: [127.0.0.0/8]\n"
    )
}

#[tokio::test]
async fn every_refusal_but_not_allowed_is_answered_at_once_without_a_question() {
    let up = Upstream::start().await;
    // A long timeout: a refusal that waited for a question would show as a test that does not end in time.
    let leash = Leash::builder(&ask(up.port(), 443)).asking(Duration::from_secs(60)).start().await;
    let mut events = leash.ask.as_ref().unwrap().watch();
    let cases = [
        (format!("http://127.0.0.1:{}/literal", up.port()), "ip-literal"),
        ("http://other.test:9/port".to_owned(), "port"),
        (format!("https://other.test:{}/scheme", up.port()), "scheme"),
    ];
    for (url, reason) in &cases {
        let r = tokio::time::timeout(Duration::from_secs(10), exchange(leash.addr, get(url))).await.expect(url);
        assert_refused(&r, 403, reason);
    }
    // A CONNECT to an unlisted port is refused before its 200, with no question either.
    let tunnel = "CONNECT other.test:9 HTTP/1.1\r\nHost: other.test:9\r\n\r\n";
    assert_refused(&exchange(leash.addr, tunnel).await, 403, "port");
    assert!(events.try_recv().is_err(), "a question was opened");
    assert!(leash.ask.as_ref().unwrap().pending().is_empty());
    up.assert_untouched().await;
    assert!(leash.resolver.asked().is_empty(), "nothing refused was resolved");
}

#[tokio::test]
async fn a_persons_yes_does_not_pass_the_destination_check() {
    let up = Upstream::start().await;
    let leash = Leash::builder(&ask(up.port(), 443)).asking(Duration::from_secs(60)).start().await;
    let asking = leash.ask.clone().unwrap();
    // `rebind.test` resolves to 10.0.0.1, outside allow_destinations: allowed by the person, refused by the check.
    let url = format!("http://rebind.test:{}/inside", up.port());
    let held = {
        let addr = leash.addr;
        tokio::spawn(async move { exchange(addr, get(&url)).await })
    };
    let id = within("a question about rebind.test", async {
        loop {
            if let Some(q) = asking.pending().into_iter().find(|q| q.host == "rebind.test") {
                return q.id;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(leash.resolver.asked().is_empty(), "resolved before the answer");
    asking.answer(id, Answer::Run, None, AnsweredBy::Socket).unwrap();
    assert_refused(&within("the answer", held).await.unwrap(), 403, "internal-destination");
    up.assert_untouched().await;
    assert_eq!(leash.resolver.asked(), ["rebind.test"]);
}

#[tokio::test]
async fn a_tunnel_is_held_on_its_name_and_its_client_hello_must_name_the_host_the_person_allowed() {
    let ca = TestCa::new();
    let tls = TlsUpstream::start(&ca).await;
    let leash = Leash::builder(&ask(80, tls.port())).asking(Duration::from_secs(60)).start().await;
    let asking = leash.ask.clone().unwrap();
    // Allowed once for `new.test`, the tunnel's ClientHello names another host: refused, nothing dialled.
    let target = format!("new.test:{}", tls.port());
    let (config, addr) = (ca.client_config(), leash.addr);
    let mismatched = tokio::spawn(async move { https_get(addr, &target, "other.test", config, Writes::Whole).await });
    let id = within("a question about new.test", async {
        loop {
            if let Some(q) = asking.pending().into_iter().find(|q| q.host == "new.test") {
                return q;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!((id.method.as_str(), id.path.as_deref()), ("CONNECT", None), "a tunnel shows its name only");
    asking.answer(id.id, Answer::Once, None, AnsweredBy::Socket).unwrap();
    assert!(within("the mismatched tunnel", mismatched).await.unwrap().is_err(), "the mismatched tunnel went through");
    tls.assert_untouched().await;
    let line = leash.decision("other.test").await;
    assert_eq!((line["decision"].as_str(), line["reason"].as_str()), (Some("block"), Some("host-mismatch")));
}

const SECRET: &str = "sk-real-0123456789abcdef";
const PLACEHOLDER: &str = "leash-placeholder-abc123";

/// [`ask`] with a credential for `models.test`, listed nowhere.
fn with_a_credential(port: u16, tunnel_port: u16) -> String {
    let credential =
        "  credentials:\n    - name: provider\n      hosts: [models.test]\n      env: PROVIDER_KEY\n      \
                      header: x-api-key\n";
    format!("{}{credential}", ask(port, tunnel_port))
}

/// A leash asking about what `yaml` refuses as `not-allowed`, with the credential's secret and TLS inspection
/// trusting `ca`.
async fn asking_with_a_credential(yaml: &str, ca: &TestCa) -> Leash {
    let secrets = Secrets::new(vec![Secret::new("provider", SECRET, PLACEHOLDER).unwrap()]);
    Leash::builder(yaml).asking(Duration::from_secs(60)).inspecting(&ca.pem).secrets(secrets).start().await
}

/// A plain-HTTP request to `models.test` carrying the placeholder, answered within ten seconds.
async fn plain_to_the_provider(leash: &Leash, port: u16) -> Resp {
    let url = format!("http://models.test:{port}/v1/models");
    let raw = client::request("GET", &url, &[&format!("x-api-key: {PLACEHOLDER}")], "");
    tokio::time::timeout(Duration::from_secs(10), exchange(leash.addr, raw)).await.expect("an answer at once")
}

#[tokio::test]
async fn a_plain_http_request_to_a_credentials_host_is_refused_at_once_never_asked() {
    let (ca, up) = (TestCa::new(), Upstream::start().await);
    let leash = asking_with_a_credential(&with_a_credential(up.port(), 443), &ca).await;
    let mut events = leash.ask.as_ref().unwrap().watch();
    assert_refused(&plain_to_the_provider(&leash, up.port()).await, 403, "credential-plaintext");
    assert!(events.try_recv().is_err(), "a question was opened");
    up.assert_untouched().await;
}

#[tokio::test]
async fn after_run_for_an_https_request_a_plain_one_to_the_same_host_never_carries_the_key() {
    let (ca, up) = (TestCa::new(), Upstream::start().await);
    let tls = TlsUpstream::start(&ca).await;
    let leash = asking_with_a_credential(&with_a_credential(up.port(), tls.port()), &ca).await;
    let asking = leash.ask.clone().unwrap();
    let mut events = asking.watch();
    let (config, addr, target) = (leash.trusting_client(), leash.addr, format!("models.test:{}", tls.port()));
    let https = tokio::spawn(async move { https_get(addr, &target, "models.test", config, Writes::Whole).await });
    let question = within("a question about models.test", async {
        loop {
            if let Ok(Event::Asked(q)) = events.recv().await {
                return q;
            }
        }
    })
    .await;
    assert_eq!((question.host.as_str(), question.path.as_deref()), ("models.test", Some("/")));
    asking.answer(question.id, Answer::Run, None, AnsweredBy::Socket).unwrap();
    assert_eq!(within("the https request", https).await.unwrap().unwrap().status, 200);
    // The host is allowed for the run; over plain HTTP its key would travel in clear: refused, never sent.
    assert_refused(&plain_to_the_provider(&leash, up.port()).await, 403, "credential-plaintext");
    up.assert_untouched().await;
}

#[tokio::test]
async fn a_placeholder_on_its_way_to_another_host_is_refused_at_once_never_asked() {
    let (ca, up) = (TestCa::new(), Upstream::start().await);
    let tls = TlsUpstream::start(&ca).await;
    // `inspect: all`: a tunnel to an unlisted host is opened and each request in it asked about, path shown.
    let yaml = format!("{}  inspect: all\n", with_a_credential(up.port(), tls.port()));
    let leash = asking_with_a_credential(&yaml, &ca).await;
    let mut events = leash.ask.as_ref().unwrap().watch();
    let carrying = format!("x-note: {PLACEHOLDER}");
    // Plain HTTP.
    let url = format!("http://elsewhere.test:{}/x", up.port());
    let plain = tokio::time::timeout(
        Duration::from_secs(10),
        exchange(leash.addr, client::request("GET", &url, &[&carrying], "")),
    );
    assert_refused(&plain.await.expect("at once"), 403, "credential-leak");
    // Inside a tunnel opened to ask about each request (HTTP/1.1).
    let (raw, status) = connect(leash.addr, &format!("other.allowed.test:{}", tls.port())).await;
    assert_eq!(status, 200);
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(leash.trusting_client()));
    let name = rustls::pki_types::ServerName::try_from("other.allowed.test").unwrap();
    let mut inside = within("handshake", connector.connect(name, raw.wire.io)).await.unwrap();
    let request = format!("GET /x HTTP/1.1\r\nHost: other.allowed.test:{}\r\n{carrying}\r\n\r\n", tls.port());
    tokio::io::AsyncWriteExt::write_all(&mut inside, request.as_bytes()).await.unwrap();
    let mut wire = support::http::Wire::new(inside);
    let answer = tokio::time::timeout(Duration::from_secs(10), read_response(&mut wire, "GET"));
    let answer = answer.await.expect("at once").unwrap();
    assert_refused(&answer, 403, "credential-leak");
    assert!(events.try_recv().is_err(), "a question was opened");
    up.assert_untouched().await;
    tls.assert_untouched().await;
}
