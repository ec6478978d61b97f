//! Audit mode (`mode: audit`, `--audit`): what the policy's host and path rules would refuse reaches its origin and
//! is logged as `would-block` with the reason it would have had; what learning must never open stays refused — IP
//! literals, unlisted ports, names that resolve inside — and a refused name is still never resolved.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test's helpers fail it by panicking")]

mod support;

use leash_proxy::credentials::{Secret, Secrets};
use support::client::{self, exchange, get};
use support::tls::{connect, https_get, Writes};
use support::*;

/// An audit policy that lists `allowed.test` only, with the plain origin's port and the TLS origin's.
fn audit(port: u16, tunnel_port: u16) -> String {
    format!(
        "network:\n  mode: audit\n  allowed_hosts: [allowed.test]\n  allowed_urls: [\"bl.test/abs/\"]\n  ports: [{port}]\n  \
         tunnel_ports: [{tunnel_port}]\n  allow_destinations: [127.0.0.0/8]\n"
    )
}

#[tokio::test]
async fn what_the_rules_would_refuse_reaches_the_origin_as_would_block() {
    let up = Upstream::start().await;
    let leash = Leash::start(&audit(up.port(), 443)).await;
    let r = exchange(leash.addr, get(&format!("http://other.test:{}/page?q=1", up.port()))).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(up.only_request().head.start, "GET /page?q=1 HTTP/1.1");
    let line = leash.decision("/page").await;
    assert_eq!((line["decision"].as_str(), line["reason"].as_str()), (Some("would-block"), Some("not-allowed")));
    // The listed host is allowed as usual.
    let r = exchange(leash.addr, get(&format!("http://allowed.test:{}/", up.port()))).await;
    assert_eq!(r.status, 200);
    assert_eq!(leash.decision("/").await["decision"], "allow");
}

#[tokio::test]
async fn ip_literals_ports_and_internal_names_are_still_refused() {
    let up = Upstream::start().await;
    let leash = Leash::start(&audit(up.port(), 443)).await;
    let literal = exchange(leash.addr, get(&format!("http://127.0.0.1:{}/literal", up.port()))).await;
    assert_refused(&literal, 403, "ip-literal");
    let port = exchange(leash.addr, get("http://other.test:9/port")).await;
    assert_refused(&port, 403, "port");
    // `rebind.test` resolves to 10.0.0.1, outside allow_destinations.
    let inside = exchange(leash.addr, get(&format!("http://rebind.test:{}/inside", up.port()))).await;
    assert_refused(&inside, 403, "internal-destination");
    up.assert_untouched().await;
    for (path, reason) in [("/literal", "ip-literal"), ("/port", "port"), ("/inside", "internal-destination")] {
        let line = leash.decision(path).await;
        assert_eq!((line["decision"].as_str(), line["reason"].as_str()), (Some("block"), Some(reason)), "{path}");
    }
    assert_eq!(leash.resolver.asked(), ["rebind.test"], "only the name that got past the rules was resolved");
}

#[tokio::test]
async fn a_tunnel_the_rules_would_refuse_is_spliced_and_an_unlisted_port_is_not() {
    let ca = TestCa::new();
    let tls = TlsUpstream::start(&ca).await;
    let leash = Leash::start(&audit(80, tls.port())).await;
    let target = format!("other.allowed.test:{}", tls.port());
    let r = https_get(leash.addr, &target, "other.allowed.test", ca.client_config(), Writes::Whole).await.unwrap();
    assert_eq!(r.status, 200);
    let line = leash.decision("other.allowed.test").await;
    assert_eq!((line["decision"].as_str(), line["reason"].as_str()), (Some("would-block"), Some("not-allowed")));
    let (_, status) = connect(leash.addr, "other.allowed.test:8443").await;
    assert_eq!(status, 403, "an unlisted tunnel port stays refused");
}

#[tokio::test]
async fn inside_an_inspected_tunnel_a_path_the_rules_would_refuse_goes_through() {
    let ca = TestCa::new();
    let tls = TlsUpstream::start(&ca).await;
    let leash = Leash::builder(&audit(80, tls.port())).inspecting(&ca.pem).start().await;
    let config = leash.trusting_client();
    // `bl.test` has a path rule (`bl.test/abs/`), so it is inspected; `GET /` is outside the rule.
    let r = https_get(leash.addr, &format!("bl.test:{}", tls.port()), "bl.test", config, Writes::Whole).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let log = leash.log_until("the inner request's line", |l| l["method"] == "GET").await;
    let inner = log.iter().find(|l| l["method"] == "GET").unwrap();
    assert_eq!((inner["decision"].as_str(), inner["reason"].as_str()), (Some("would-block"), Some("not-allowed")));
}

#[tokio::test]
async fn a_credentials_host_the_rules_would_refuse_is_never_reached_over_plain_http() {
    const SECRET: &str = "sk-real-0123456789abcdef";
    const PLACEHOLDER: &str = "leash-placeholder-abc123";
    let up = Upstream::start().await;
    let credential =
        "  credentials:\n    - name: provider\n      hosts: [models.test]\n      env: PROVIDER_KEY\n      \
                      header: x-api-key\n";
    let secrets = Secrets::new(vec![Secret::new("provider", SECRET, PLACEHOLDER).unwrap()]);
    let leash = Leash::builder(&format!("{}{credential}", audit(up.port(), 443))).secrets(secrets).start().await;
    // `models.test` is listed nowhere: audit mode lets such a host through, but not with its key in clear.
    let url = format!("http://models.test:{}/v1/models", up.port());
    let r = exchange(leash.addr, client::request("GET", &url, &[&format!("x-api-key: {PLACEHOLDER}")], "")).await;
    assert_refused(&r, 403, "credential-plaintext");
    up.assert_untouched().await;
    let line = leash.decision("/v1/models").await;
    assert_eq!((line["decision"].as_str(), line["reason"].as_str()), (Some("block"), Some("credential-plaintext")));
}

#[tokio::test]
async fn an_unlisted_model_api_is_inspected_and_its_provider_tools_still_stripped() {
    let ca = TestCa::new();
    let tls = TlsUpstream::start(&ca).await;
    let yaml = format!("{}  model_apis: [models.test]\n", audit(80, tls.port()));
    let leash = Leash::builder(&yaml).inspecting(&ca.pem).start().await;
    // The client trusts the origin's CA too: a tunnel leash spliced would reach the origin as well.
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let leashs = std::fs::read(leash.ca_path.as_ref().unwrap()).unwrap();
    for pem in [ca.pem.as_bytes(), &leashs] {
        roots.add(rustls::pki_types::CertificateDer::from_pem_slice(pem).unwrap()).unwrap();
    }
    let config =
        rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
    let (raw, status) = connect(leash.addr, &format!("models.test:{}", tls.port())).await;
    assert_eq!(status, 200);
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let name = rustls::pki_types::ServerName::try_from("models.test").unwrap();
    let mut inside = within("handshake", connector.connect(name, raw.wire.io)).await.unwrap();
    let body =
        r#"{"model":"m","max_tokens":8,"tools":[{"type":"web_search_20250305","name":"web_search"}],"messages":[]}"#;
    let request = format!(
        "POST /v1/messages HTTP/1.1\r\nHost: models.test:{}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        tls.port(),
        body.len()
    );
    tokio::io::AsyncWriteExt::write_all(&mut inside, request.as_bytes()).await.unwrap();
    let answer = within("the answer", client::read_response(&mut support::http::Wire::new(inside), "POST")).await;
    assert_eq!(answer.unwrap().status, 200);
    let got = tls.origin.requests();
    assert_eq!(got.len(), 1, "{got:#?}");
    assert!(!got[0].body.text().contains("web_search"), "the provider got the tool: {}", got[0].body.text());
    let line = leash.decision("/v1/messages").await;
    assert_eq!((line["decision"].as_str(), line["reason"].as_str()), (Some("would-block"), Some("not-allowed")));
    assert!(line["stripped"].to_string().contains("web_search"), "{line}");
}
