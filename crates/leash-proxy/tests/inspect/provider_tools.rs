//! Model APIs' provider-side tools over real sockets: a fake model API over HTTPS (test CA) at
//! `models.test`, listed in `model_apis`, records the bodies it receives; curl (HTTP/1.1) and hyper (HTTP/2) post
//! each provider's shapes through leash. Stripped bodies arrive without the tools, the references to them and with
//! function tools intact, refused ones never arrive and are answered in the API's JSON error shape (OpenAI's, for a
//! host that is none of the three), each removal is in the log, and responses stream chunk by chunk.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use ::http::Request;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Frame;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::sync::Notify;

use super::h2::{h2_client, Frames, H2Origin};
use super::Inspecting;
use crate::support::client::{read_response, CurlOut};
use crate::support::http::Wire;
use crate::support::*;

/// An allowlist of the fake model API, listed in `model_apis`, with `provider_tools: mode`.
fn model_policy(mode: &str) -> impl FnOnce(u16) -> String + '_ {
    move |port| {
        format!(
            "network:\n  mode: allowlist\n  allowed_hosts: [models.test]\n  tunnel_ports: [{port}]\n  \
             allow_destinations: [127.0.0.0/8]\n  model_apis: [models.test]\n  provider_tools: {mode}\n"
        )
    }
}

/// leash under `mode` in front of a model API answering `handler`, reading bodies of at most 64 KiB.
async fn scene_with(mode: &str, handler: impl Fn(&Recorded) -> Reply + Send + Sync + 'static) -> Inspecting {
    let ca = TestCa::new();
    let tls = TlsUpstream::with(&ca, handler).await;
    let leash = Leash::builder(&model_policy(mode)(tls.port()))
        .inspecting(&ca.pem)
        .limits(|l| l.max_model_body = 64 * 1024)
        .start()
        .await;
    Inspecting { ca, tls, leash }
}

async fn scene(mode: &str) -> Inspecting {
    scene_with(mode, |_| Reply::ok("{\"ok\":true}")).await
}

/// curl POSTs `body` as JSON to `path` at the model API, trusting leash's CA.
async fn post(t: &Inspecting, path: &str, body: &str, extra: &[&str]) -> CurlOut {
    let (ca, url) = (t.ca_file(), t.url("models.test", path));
    let mut args = vec!["--cacert", &ca, "-H", "content-type: application/json", "--data-binary", body];
    args.extend_from_slice(extra);
    args.push(&url);
    curl(t.leash.addr, &args).await
}

/// The bodies the model API received, as JSON.
fn received(t: &Inspecting) -> Vec<Value> {
    t.tls.origin.requests().iter().map(|r| serde_json::from_str(&r.body.text()).expect("JSON at the origin")).collect()
}

fn weather() -> Value {
    json!({"name": "get_weather", "description": "the weather", "input_schema": {"type": "object"}})
}

#[tokio::test]
async fn anthropic_server_tools_arrive_stripped_function_tools_intact_and_each_removal_is_logged() {
    let t = scene("strip").await;
    let body = json!({
        "model": "claude-sonnet-4-5", "max_tokens": 64,
        "mcp_servers": [{"type": "url", "url": "https://mcp.example/sse", "name": "x"}],
        "tools": [{"type": "web_search_20250305", "name": "web_search"}, weather(),
                  {"type": "web_fetch_20250910", "name": "web_fetch"}],
        "messages": [{"role": "user", "content": "hi"}],
    });
    let out = post(&t, "/v1/messages", &body.to_string(), &[]).await;
    assert_eq!(out.status, 200, "{}", out.stderr);
    let expected = json!({"model": "claude-sonnet-4-5", "max_tokens": 64, "tools": [weather()],
                          "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(received(&t), std::slice::from_ref(&expected));
    let got = &t.tls.origin.requests()[0];
    assert_eq!(got.header("content-length"), Some(expected.to_string().len().to_string().as_str()));
    let d = t.leash.decision("/v1/messages").await;
    assert_eq!((d["decision"].as_str(), d["reason"].as_str()), (Some("allow"), Some("provider-tools-stripped")));
    assert_eq!(
        d["stripped"],
        json!([
            "mcp_servers (remote MCP servers, Anthropic Messages)",
            "tools[0] `web_search_20250305` (web search, Anthropic Messages, OpenAI Responses)",
            "tools[2] `web_fetch_20250910` (web fetch, Anthropic Messages)",
        ])
    );
    assert_eq!(t.leash.outcome(&d["id"]).await["status"], 200);
    let tunnel = t.leash.decision("models.test").await;
    assert_eq!(tunnel["decision"], "inspect", "the model host is inspected without any path rule");
}

#[tokio::test]
async fn openai_chat_and_responses_tools_arrive_stripped() {
    let t = scene("strip").await;
    let function = json!({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}});
    let chat = json!({"model": "gpt-4.1", "web_search_options": {"search_context_size": "low"},
                      "tools": [function.clone()], "messages": []});
    assert_eq!(post(&t, "/v1/chat/completions", &chat.to_string(), &[]).await.status, 200);
    let responses = json!({"model": "gpt-5", "input": "hi", "tools": [
        {"type": "web_search_preview"}, {"type": "mcp", "server_label": "x", "server_url": "https://mcp.example"},
        {"type": "function", "name": "g", "parameters": {}}]});
    assert_eq!(post(&t, "/v1/responses", &responses.to_string(), &[]).await.status, 200);
    let got = received(&t);
    assert_eq!(got[0], json!({"model": "gpt-4.1", "tools": [function], "messages": []}));
    assert_eq!(got[1]["tools"], json!([{"type": "function", "name": "g", "parameters": {}}]));
    let d = t.leash.decision("/v1/responses").await;
    assert_eq!(d["stripped"].as_array().map(Vec::len), Some(2), "{d}");
    // leash answers `100 Continue` itself (it reads the body before anything goes up) and sends no Expect on.
    let expecting = post(&t, "/v1/chat/completions", &chat.to_string(), &["-H", "Expect: 100-continue"]).await;
    assert_eq!(expecting.status, 200, "{}", expecting.stderr);
    let third = &t.tls.origin.requests()[2];
    assert_eq!((third.header("expect"), third.body.text().contains("web_search")), (None, false));
}

#[tokio::test]
async fn gemini_grounding_arrives_stripped_in_both_spellings_over_a_chunked_upload() {
    let t = scene("strip").await;
    let decls = json!([{"name": "f", "parameters": {"type": "OBJECT"}}]);
    let body = json!({"contents": [{"parts": [{"text": "hi"}]}], "tools": [
        {"googleSearch": {}}, {"url_context": {}}, {"google_search_retrieval": {}},
        {"functionDeclarations": decls, "urlContext": {}}]});
    let path = "/v1beta/models/gemini-2.5-flash:streamGenerateContent";
    let out = post(&t, &format!("{path}?alt=sse"), &body.to_string(), &["-H", "Transfer-Encoding: chunked"]).await;
    assert_eq!(out.status, 200, "{}", out.stderr);
    let got = &t.tls.origin.requests()[0];
    assert!(!got.chunked, "a body leash read goes up with a Content-Length");
    assert_eq!(
        received(&t),
        [json!({"contents": [{"parts": [{"text": "hi"}]}], "tools": [{"functionDeclarations": decls}]})]
    );
    assert_eq!(t.leash.decision(path).await["stripped"].as_array().map(Vec::len), Some(4));
}

/// The `error.message` of a refusal in OpenAI's JSON error shape, after checking the shape and its headers.
fn error_message(out: &CurlOut) -> String {
    assert_eq!((out.status, out.head.header("x-leash-reason")), (403, Some("provider-tools")), "{}", out.stderr);
    assert_eq!(out.head.header("content-type"), Some("application/json"));
    let body: Value = serde_json::from_slice(&out.body).expect("a JSON error body");
    assert_eq!(
        (&body["error"]["type"], &body["error"]["code"]),
        (&json!("permission_error"), &json!("leash_provider_tools"))
    );
    body["error"]["message"].as_str().expect("a message").to_owned()
}

#[tokio::test]
async fn refuse_answers_403_in_the_apis_error_shape_naming_the_tool_and_nothing_arrives() {
    let t = scene("refuse").await;
    let body = json!({"model": "m", "tools": [{"type": "web_search_20250305", "name": "web_search"}, weather()]});
    let out = post(&t, "/v1/messages", &body.to_string(), &[]).await;
    let message = error_message(&out);
    assert!(
        message.starts_with("leash: models.test/v1/messages refused by the egress policy (provider-tools): "),
        "{message}"
    );
    assert!(message.contains("(provider_tools: refuse): tools[0] `web_search_20250305` (web search"), "{message}");
    let plain = json!({"model": "m", "tools": [weather()]});
    assert_eq!(post(&t, "/v1/messages", &plain.to_string(), &[]).await.status, 200, "function tools pass");
    assert_eq!(received(&t), [plain]);
    let d = t.leash.decision("/v1/messages").await;
    assert_eq!((d["decision"].as_str(), d["reason"].as_str()), (Some("block"), Some("provider-tools")));
    assert!(d.get("stripped").is_none());
}

#[tokio::test]
async fn gemini_mcp_servers_arrive_stripped_with_their_function_names_and_are_refused_under_refuse() {
    let decls = json!([{"name": "f", "parameters": {"type": "OBJECT"}}]);
    let body = json!({"contents": [{"parts": [{"text": "hi"}]}],
        "tools": [{"mcpServers": [{"name": "x", "streamableHttpTransport": {"url": "https://mcp.example/mcp"}}]},
                  {"functionDeclarations": decls, "googleMaps": {}}],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["f", "x_lookup"]}}});
    let path = "/v1beta/models/gemini-2.5-flash:generateContent";
    let t = scene("strip").await;
    assert_eq!(post(&t, path, &body.to_string(), &[]).await.status, 200);
    let expected = json!({"contents": [{"parts": [{"text": "hi"}]}], "tools": [{"functionDeclarations": decls}],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["f"]}}});
    assert_eq!(received(&t), [expected]);
    assert_eq!(
        t.leash.decision(path).await["stripped"],
        json!([
            "tools[0].mcpServers (remote MCP servers, Gemini)",
            "tools[1].googleMaps (Google Maps grounding, Gemini)"
        ])
    );
    let t = scene("refuse").await;
    let message = error_message(&post(&t, path, &body.to_string(), &[]).await);
    assert!(message.contains("tools[0].mcpServers (remote MCP servers, Gemini)"), "{message}");
    assert!(t.tls.origin.requests().is_empty(), "nothing reached the model API");
}

#[tokio::test]
async fn openai_references_to_removed_tools_go_with_them() {
    let t = scene("strip").await;
    let network = json!({"type": "allowlist", "allowed_domains": ["pypi.org"]});
    let body = json!({"model": "gpt-5", "input": "hi",
        "tools": [{"type": "web_search_preview"}, {"type": "function", "name": "f", "parameters": {}},
                  {"type": "code_interpreter", "container": {"type": "auto", "network_policy": network}}],
        "tool_choice": {"type": "web_search_preview"},
        "include": ["web_search_call.action.sources", "code_interpreter_call.outputs", "reasoning.encrypted_content"]});
    assert_eq!(post(&t, "/v1/responses", &body.to_string(), &[]).await.status, 200);
    let expected = json!({"model": "gpt-5", "input": "hi",
                          "tools": [{"type": "function", "name": "f", "parameters": {}}],
                          "include": ["reasoning.encrypted_content"]});
    assert_eq!(received(&t), [expected]);
}

#[tokio::test]
async fn creating_a_container_with_network_access_is_refused_under_strip() {
    let t = scene("strip").await;
    let open = json!({"name": "c", "network_policy": {"type": "allowlist", "allowed_domains": ["pypi.org"]}});
    let message = error_message(&post(&t, "/v1/containers", &open.to_string(), &[]).await);
    assert!(
        message.contains("network_policy `allowlist` (container with network access, OpenAI Containers)"),
        "{message}"
    );
    assert!(t.tls.origin.requests().is_empty(), "nothing reached the model API");
    let closed = json!({"name": "c", "network_policy": {"type": "disabled"}});
    assert_eq!(post(&t, "/v1/containers", &closed.to_string(), &[]).await.status, 200);
    assert_eq!(received(&t), [closed]);
    let d = t.leash.decision("/v1/containers").await;
    assert_eq!((d["decision"].as_str(), d["reason"].as_str()), (Some("block"), Some("provider-tools")), "the first");
}

#[tokio::test]
async fn bodies_leash_cannot_read_are_refused_under_strip() {
    let t = scene("strip").await;
    let not_json = post(&t, "/v1/messages", "model=m&tools=web_search", &[]).await;
    assert_eq!((not_json.status, not_json.head.header("x-leash-reason")), (403, Some("provider-tools")));
    assert!(not_json.text().contains("the body is not JSON"), "{}", not_json.text());
    let gzip = post(&t, "/v1/messages", "\u{1f}gzip-ish", &["-H", "Content-Encoding: gzip"]).await;
    assert_eq!(gzip.status, 403);
    assert!(gzip.text().contains("`gzip`-encoded (Content-Encoding), which leash does not read"), "{}", gzip.text());
    // 100 KiB over a 64 KiB bound; curl waits for `100 Continue`, which never comes: leash refuses first.
    let big = format!("{{\"model\":\"m\",\"pad\":\"{}\"}}", "x".repeat(100 * 1024));
    let over = post(&t, "/v1/messages", &big, &["-H", "Expect: 100-continue"]).await;
    assert_eq!(over.status, 403, "{}", over.stderr);
    assert!(over.text().contains("larger than 65536 bytes"), "{}", over.text());
    let dup = post(&t, "/v1/messages", r#"{"tools":[],"tools":[{"type":"web_search"}]}"#, &[]).await;
    assert!(dup.text().contains("duplicate key `tools`"), "{}", dup.text());
    assert!(t.tls.origin.requests().is_empty(), "nothing unread reached the model API");
    let lines = t.leash.log();
    let refused = lines.iter().filter(|v| v["reason"] == "provider-tools").count();
    assert_eq!(refused, 4, "{lines:?}");
}

#[tokio::test]
async fn a_chunked_upload_over_the_bound_is_refused_while_it_is_read() {
    // No Content-Length to refuse on: the bound is met while the chunks are read (HTTP/1.1's streamed branch).
    let t = scene("strip").await;
    let big = format!("{{\"model\":\"m\",\"pad\":\"{}\"}}", "x".repeat(100 * 1024));
    let out = post(&t, "/v1/messages", &big, &["-H", "Transfer-Encoding: chunked"]).await;
    assert_eq!((out.status, out.head.header("x-leash-reason")), (403, Some("provider-tools")), "{}", out.stderr);
    assert!(out.text().contains("larger than 65536 bytes"), "{}", out.text());
    assert!(t.tls.origin.requests().is_empty(), "nothing reached the model API");
    let d = t.leash.decision("/v1/messages").await;
    assert_eq!((d["decision"].as_str(), d["reason"].as_str()), (Some("block"), Some("provider-tools")));
}

#[tokio::test]
async fn allow_passes_bodies_untouched_through_a_spliced_tunnel() {
    let t = scene("allow").await;
    let body = r#"{"tools": [{"type": "web_search_20250305", "name": "web_search"}], "mcp_servers": []}"#;
    let dir = tempfile::tempdir().unwrap();
    let origin_ca = t.ca.pem_file(dir.path());
    let url = t.url("models.test", "/v1/messages");
    let out = curl(t.leash.addr, &["--cacert", origin_ca.to_str().unwrap(), "--data-binary", body, &url]).await;
    assert_eq!(out.status, 200, "the client sees the model API's own certificate: {}", out.stderr);
    assert_eq!(t.tls.origin.requests()[0].body.text(), body, "byte for byte");
    assert_eq!(t.leash.decision("models.test").await["decision"], "allow");
}

#[tokio::test]
async fn requests_without_a_body_pass_and_a_websocket_upgrade_is_refused() {
    let t = scene("strip").await;
    let get = curl(t.leash.addr, &["--cacert", &t.ca_file(), &t.url("models.test", "/v1/models")]).await;
    assert_eq!(get.status, 200, "{}", get.stderr);
    assert_eq!(t.leash.decision("/v1/models").await["reason"], "rule");
    let host = t.target("models.test");
    let ws = format!("GET /v1/realtime HTTP/1.1\r\nHost: {host}\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n");
    let r = t.inner("models.test", ws).await;
    assert_refused(&r, 403, "provider-tools");
    assert!(r.text().contains("WebSocket"), "{}", r.text());
    assert_eq!(t.tls.origin.requests().len(), 1);
}

#[tokio::test]
async fn a_streamed_response_arrives_chunk_by_chunk_after_a_strip() {
    let gate = Arc::new(Notify::new());
    let g = gate.clone();
    let t = scene_with("strip", move |_| Reply::Gated {
        first: b"data: {\"delta\":\"one\"}\n\n".to_vec(),
        gate: g.clone(),
        rest: b"data: {\"delta\":\"two\"}\n\n".to_vec(),
    })
    .await;
    let body =
        json!({"model": "m", "stream": true, "tools": [{"type": "web_search_20250305", "name": "w"}]}).to_string();
    let mut tls = t.tunnel("models.test", &[b"http/1.1"]).await;
    let head = format!(
        "POST /v1/messages HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        t.target("models.test"),
        body.len()
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.flush().await.unwrap();
    let mut wire = Wire::new(tls);
    let h = within("the response head", wire.head()).await.unwrap().unwrap();
    assert!(h.start.contains("200"), "{}", h.start);
    let first = b"data: {\"delta\":\"one\"}\n\n";
    while wire.buf.len() < first.len() {
        within("the first event, before the origin sends the second", wire.fill()).await.unwrap();
    }
    assert_eq!(&wire.buf[..], first, "the first event arrived alone: nothing is buffered");
    assert!(before(Duration::from_millis(200), wire.fill()).await.is_none(), "the second is not there yet");
    gate.notify_one();
    while wire.buf.len() < 2 * first.len() {
        within("the second event", wire.fill()).await.unwrap();
    }
    assert_eq!(&wire.buf[first.len()..], b"data: {\"delta\":\"two\"}\n\n");
    assert_eq!(received(&t), [json!({"model": "m", "stream": true})]);
}

#[tokio::test]
async fn a_keep_alive_connection_goes_on_after_a_refused_body() {
    let t = scene("strip").await;
    let host = t.target("models.test");
    let mut tls = t.tunnel("models.test", &[b"http/1.1"]).await;
    let bad = "not json";
    let good = json!({"model": "m", "web_search_options": {}}).to_string();
    let two = format!(
        "POST /v1/a HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\n\r\n{bad}\
         POST /v1/b HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\n\r\n{good}",
        bad.len(),
        good.len()
    );
    tls.write_all(two.as_bytes()).await.unwrap();
    tls.flush().await.unwrap();
    let mut wire = Wire::new(tls);
    let first = within("first", read_response(&mut wire, "POST")).await.unwrap();
    let second = within("second", read_response(&mut wire, "POST")).await.unwrap();
    assert_eq!((first.status, second.status), (403, 200));
    assert_eq!(received(&t), [json!({"model": "m"})]);
}

/// leash under `strip` in front of an HTTP/2 model API, reading bodies of at most 64 KiB.
async fn h2_scene() -> (H2Origin, Inspecting) {
    let ca = TestCa::new();
    let origin = H2Origin::start(&ca).await;
    let tls = TlsUpstream::start(&ca).await;
    let leash = Leash::builder(&model_policy("strip")(origin.port))
        .inspecting(&ca.pem)
        .limits(|l| l.max_model_body = 64 * 1024)
        .start()
        .await;
    (origin, Inspecting { ca, tls, leash })
}

fn h2_post(origin: &H2Origin, path: &str, headers: &[(&str, &str)], body: &str) -> Request<Frames> {
    let mut req = Request::post(format!("https://models.test:{}{path}", origin.port));
    for (n, v) in headers {
        req = req.header(*n, *v);
    }
    req.body(Frames::new(vec![Frame::data(Bytes::from(body.to_owned()))])).unwrap()
}

#[tokio::test]
async fn h2_streams_are_stripped_refused_when_compressed_and_logged() {
    let (origin, t) = h2_scene().await;
    let mut send = h2_client(&t, &origin, "models.test").await;
    let decls = json!([{"name": "f", "parameters": {}}]);
    let body = json!({"contents": [], "tools": [{"google_search": {}, "function_declarations": decls}]}).to_string();
    let path = "/v1beta/models/gemini:generateContent";
    let resp = within("stripped stream", send.send_request(h2_post(&origin, path, &[], &body))).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.into_body().collect().await.unwrap().to_bytes(), format!("h2 {path}"));
    let seen = origin.seen();
    let got: Value = serde_json::from_slice(&seen[0].body).unwrap();
    assert_eq!(got, json!({"contents": [], "tools": [{"function_declarations": decls}]}));
    let d = t.leash.decision(path).await;
    assert_eq!(d["reason"], "provider-tools-stripped");
    assert_eq!(d["stripped"], json!(["tools[0].google_search (Google Search grounding, Gemini)"]));
    let gzip = h2_post(&origin, "/v1/gz", &[("content-encoding", "gzip")], "\u{1f}x");
    let resp = within("compressed stream", send.send_request(gzip)).await.unwrap();
    assert_eq!(resp.status(), 403);
    assert_eq!(resp.headers().get("x-leash-reason").unwrap(), "provider-tools");
    assert_eq!(resp.headers().get("content-type").unwrap(), "application/json");
    let error: Value = serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("leash: models.test/v1/gz refused by the egress policy (provider-tools): "),
        "{message}"
    );
    assert!(message.contains("`gzip`-encoded"), "{message}");
    let mcp = json!({"contents": [], "tools": [{"mcp_servers": [{"name": "x"}]}]}).to_string();
    let resp = within("MCP stream", send.send_request(h2_post(&origin, path, &[], &mcp))).await.unwrap();
    assert_eq!(resp.status(), 200, "stripped, the last tool with it");
    let got: Value = serde_json::from_slice(&origin.seen()[1].body).unwrap();
    assert_eq!(got, json!({"contents": []}));
    // No content-length: the bound is met while the body is read.
    let big = h2_post(&origin, "/v1/big", &[], &format!("{{\"pad\":\"{}\"}}", "x".repeat(100 * 1024)));
    let resp = within("oversized stream", send.send_request(big)).await.unwrap();
    assert_eq!(resp.status(), 403);
    let text = resp.into_body().collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&text).contains("larger than 65536 bytes"), "{}", String::from_utf8_lossy(&text));
    let get = Request::get(format!("https://models.test:{}/v1beta/models", origin.port)).body(Frames::new(vec![]));
    assert_eq!(within("bodiless stream", send.send_request(get.unwrap())).await.unwrap().status(), 200);
    assert_eq!(origin.seen().len(), 3, "only the stripped and the bodiless streams reached the model API");
}

/// A request body that sends one data frame and then never another, nor its end.
struct Stalled(Option<Bytes>);

impl hyper::body::Body for Stalled {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.0.take() {
            Some(first) => Poll::Ready(Some(Ok(Frame::data(first)))),
            None => Poll::Pending,
        }
    }
}

#[tokio::test]
async fn h2_a_declared_length_over_the_bound_is_refused_before_the_body_is_read() {
    let (origin, t) = h2_scene().await;
    let (c, status) = crate::support::tls::connect(t.leash.addr, &format!("models.test:{}", origin.port)).await;
    assert_eq!(status, 200);
    let connector = tokio_rustls::TlsConnector::from(Arc::new(t.client_config(&[b"h2"])));
    let name = rustls::pki_types::ServerName::try_from("models.test").unwrap();
    let tls = within("handshake", connector.connect(name, c.wire.io)).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls)).await.unwrap();
    tokio::spawn(conn);
    // 100 KiB declared, 1 KiB sent, the rest never: only the declaration can be refused on (a read would time out).
    let req = Request::post(format!("https://models.test:{}/v1/messages", origin.port))
        .header("content-length", (100 * 1024).to_string())
        .body(Stalled(Some(Bytes::from(vec![b' '; 1024]))))
        .unwrap();
    let resp = within("the refusal", send.send_request(req)).await.unwrap();
    assert_eq!(resp.status(), 403);
    assert_eq!(resp.headers().get("x-leash-reason").unwrap(), "provider-tools");
    let text = within("the refusal's body", resp.into_body().collect()).await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&text).contains("larger than 65536 bytes"), "{}", String::from_utf8_lossy(&text));
    assert!(origin.seen().is_empty(), "nothing reached the model API");
    assert_eq!(t.leash.decision("/v1/messages").await["reason"], "provider-tools");
}

/// A plain-HTTP model gateway (an operator's, on a private network) in `model_apis`, under `mode`.
async fn plain_gateway(mode: &str) -> (Upstream, Leash) {
    let up = Upstream::start().await;
    let yaml = format!(
        "network:\n  mode: allowlist\n  allowed_hosts: [gw.test]\n  ports: [{}]\n  allow_destinations: [127.0.0.0/8]\n  \
         model_apis: [gw.test]\n  provider_tools: {mode}\n",
        up.port()
    );
    let leash = Leash::builder(&yaml).limits(|l| l.max_model_body = 64 * 1024).start().await;
    (up, leash)
}

#[tokio::test]
async fn a_plain_http_model_gateway_is_stripped_as_one_inside_tls_is() {
    let (up, leash) = plain_gateway("strip").await;
    let body = json!({"model": "m", "tools": [{"type": "web_search_20250305", "name": "web_search"}, weather()]});
    let url = format!("http://gw.test:{}/v1/messages", up.port());
    let out =
        curl(leash.addr, &["-H", "content-type: application/json", "--data-binary", &body.to_string(), &url]).await;
    assert_eq!(out.status, 200, "{}", out.text());
    let got: Value = serde_json::from_str(&up.only_request().body.text()).unwrap();
    assert_eq!(got, json!({"model": "m", "tools": [weather()]}), "the server tool went, the function tool stayed");
    let line = leash.decision("/v1/messages").await;
    assert_eq!(line["reason"], "provider-tools-stripped");

    let (up, leash) = plain_gateway("refuse").await;
    let url = format!("http://gw.test:{}/v1/messages", up.port());
    let out =
        curl(leash.addr, &["-H", "content-type: application/json", "--data-binary", &body.to_string(), &url]).await;
    assert_eq!(out.status, 403);
    let error: Value = serde_json::from_slice(&out.body).unwrap();
    assert!(error["error"]["message"].as_str().unwrap().contains("provider-tools"), "{error}");
    up.assert_untouched().await;
}

#[tokio::test]
async fn every_refusal_on_a_model_api_comes_in_its_error_shape_not_only_provider_tools() {
    // A path the policy refuses on the model host: the SDK must show leash's reason, not a bare 403.
    let ca = TestCa::new();
    let tls = TlsUpstream::with(&ca, |_| Reply::ok("{\"ok\":true}")).await;
    let policy = format!(
        "network:\n  mode: allowlist\n  allowed_urls: [models.test/v1/]\n  tunnel_ports: [{}]\n  \
         allow_destinations: [127.0.0.0/8]\n  model_apis: [models.test]\n",
        tls.port()
    );
    let leash = Leash::builder(&policy).inspecting(&ca.pem).start().await;
    let t = Inspecting { ca, tls, leash };
    let out = post(&t, "/admin/keys", "{}", &[]).await;
    assert_eq!((out.status, out.head.header("x-leash-reason")), (403, Some("not-allowed")), "{}", out.stderr);
    assert_eq!(out.head.header("content-type"), Some("application/json"));
    let body: Value = serde_json::from_slice(&out.body).expect("a JSON error body");
    assert_eq!(
        (&body["error"]["type"], &body["error"]["code"]),
        (&json!("permission_error"), &json!("leash_not_allowed"))
    );
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("leash: models.test/admin/keys refused by the egress policy (not-allowed): "),
        "{message}"
    );
    assert!(t.tls.origin.requests().is_empty(), "nothing reached the API");
    assert_eq!(post(&t, "/v1/chat", "{}", &[]).await.status, 200, "an allowed path still passes");
}
