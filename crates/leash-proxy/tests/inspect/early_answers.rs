//! Answers given before a request body has ended — a refusal (the policy, a model API body over the bound, a
//! credential cut off mid-body) or an upstream's early answer — reach clients that read a response only once their
//! whole body is sent: Python's httpx over HTTP/2 (the official model SDKs' transport) and requests over HTTP/1.1,
//! real programs from the SDK venv (`LEASH_SDK_PYTHON`; without it these tests skip loudly, and fail when
//! `LEASH_REQUIRE_SDKS` is set). Every body is larger than HTTP/2's stream window and leash's model body bound, and
//! every answer must come within [`PROMPT`]: before, httpx waited for window on a stream leash had reset until its
//! own time-out, and requests got a reset instead of the 403.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use ::http::{Request, Response};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use leash_proxy::credentials::{Secret, Secrets};
use serde_json::{json, Value};
use tokio::process::Command;

use crate::support::*;

/// An answer given early must reach the client within this (a 4 MiB body over loopback takes well under a second);
/// the client's own time-out is twice it, so a client left waiting shows as a time-out, not a hung test.
const PROMPT: Duration = Duration::from_secs(10);
/// Each body sent: four times HTTP/2's 1 MiB stream window, 64 times the model body bound below.
const BODY: usize = 4 * 1024 * 1024;
const MODEL_BOUND: usize = 64 * 1024;
const PLACEHOLDER: &str = "leash-placeholder-abc123";

/// Each case posts a body of [`BODY`] bytes to `url` (`mark` written into its middle; `stream`: sent without a
/// length, as it is produced) and prints `{status, reason, http, text, secs}` or `{error, secs}`, a JSON line.
const CLIENT: &str = r#"
import json, sys, time
client, proxy, cafile, cases = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])

def body(case):
    data = bytearray(b"x" * case["size"])
    mark = (case.get("mark") or "").encode()
    data[len(data) // 2 : len(data) // 2 + len(mark)] = mark
    data = bytes(data)
    if case.get("stream"):
        return (data[i : i + 65536] for i in range(0, len(data), 65536))
    return data

def post_all(post):
    for case in cases:
        start = time.monotonic()
        try:
            out = post(case["url"], body(case))
        except Exception as e:
            out = {"error": f"{type(e).__name__}: {e}"}
        out["secs"] = round(time.monotonic() - start, 2)
        print(json.dumps(out), flush=True)

timeout = float(sys.argv[5])
if client == "httpx-h2":
    import httpx
    with httpx.Client(http2=True, proxy=proxy, verify=cafile, timeout=timeout) as c:
        def post(url, content):
            r = c.post(url, content=content)
            return {"status": r.status_code, "reason": r.headers.get("x-leash-reason"), "http": r.http_version,
                    "text": r.text}
        post_all(post)
else:
    import requests
    with requests.Session() as s:
        def post(url, data):
            r = s.post(url, data=data, proxies={"https": proxy}, verify=cafile, timeout=timeout)
            return {"status": r.status_code, "reason": r.headers.get("x-leash-reason"), "http": "HTTP/1.1",
                    "connection": r.headers.get("connection"), "text": r.text}
        post_all(post)
"#;

/// The venv's python, or a loud skip (a failure where `LEASH_REQUIRE_SDKS` is set).
fn sdk_python() -> Option<PathBuf> {
    let python = std::env::var_os("LEASH_SDK_PYTHON").map(PathBuf::from).filter(|p| p.exists());
    if python.is_none() {
        assert!(
            std::env::var_os("LEASH_REQUIRE_SDKS").is_none(),
            "LEASH_REQUIRE_SDKS is set but LEASH_SDK_PYTHON names no python (see .ci/run)"
        );
        eprintln!("SKIPPED: LEASH_SDK_PYTHON is not set; httpx and requests against early answers did not run");
    }
    python
}

/// A blocklist with `models.test` a model API (bodies read up to [`MODEL_BOUND`]) holding a credential, and
/// `other.allowed.test` inspected for its one path rule; both at the origin's `port`.
fn policy(port: u16) -> String {
    format!(
        "network:\n  mode: blocklist\n  blocked_urls: [models.test/admin/, other.allowed.test/never/]\n  ports: [80]\n  \
         tunnel_ports: [{port}]\n  allow_destinations: [127.0.0.0/8]\n  model_apis: [models.test]\n  credentials:\n    \
         - name: provider\n      hosts: [models.test]\n      env: PROVIDER_KEY\n      header: x-api-key\n"
    )
}

async fn leash(ca: &TestCa, port: u16) -> Leash {
    let secrets = Secrets::new(vec![Secret::new("provider", "sk-real-0123456789abcdef", PLACEHOLDER).unwrap()]);
    Leash::builder(&policy(port))
        .inspecting(&ca.pem)
        .limits(|l| l.max_model_body = MODEL_BOUND)
        .secrets(secrets)
        .start()
        .await
}

/// An HTTP/2 origin: `/early` is answered 413 without its body being read (the stream reset after the answer, as
/// hyper does); any other path once its body has arrived, with its length. Each stream is recorded: `/early`,
/// `<path> <length>` or `<path> cut` (its body ended in a reset).
async fn h2_origin(ca: &TestCa) -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>, tokio::task::JoinHandle<()>) {
    let served = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = served.clone();
    let names = ["models.test", "other.allowed.test"];
    let (port, task) = crate::support::tls::serve_h2_tls(ca, &names, move |req: Request<Incoming>| {
        let served = s.clone();
        async move {
            let path = req.uri().path().to_owned();
            let (seen, answer) = match path.as_str() {
                "/early" => (path, Response::builder().status(413).body(Full::new(Bytes::from_static(b"too large")))),
                _ => match req.into_body().collect().await {
                    Ok(body) => {
                        let got = body.to_bytes().len();
                        (
                            format!("{path} {got}"),
                            Response::builder().body(Full::new(Bytes::from(format!("got {got}")))),
                        )
                    }
                    Err(_) => (format!("{path} cut"), Response::builder().status(400).body(Full::new(Bytes::new()))),
                },
            };
            served.lock().unwrap().push(seen);
            Ok::<_, std::convert::Infallible>(answer.unwrap())
        }
    })
    .await;
    (port, served, task)
}

/// Run [`CLIENT`] (`httpx-h2` or `requests`) through leash with `cases`; one JSON answer per case.
async fn post(python: &PathBuf, client: &str, t: &Leash, cases: &Value) -> Vec<Value> {
    let proxy = format!("http://{}", t.addr);
    let ca_file = t.ca_path.as_ref().expect("inspecting").to_str().unwrap();
    let timeout = (2 * PROMPT).as_secs().to_string();
    let mut cmd = Command::new(python);
    cmd.args(["-c", CLIENT, client, &proxy, ca_file, &cases.to_string(), &timeout]);
    cmd.env_remove("HTTPS_PROXY").env_remove("https_proxy").env_remove("ALL_PROXY").env_remove("all_proxy");
    let cases_len = cases.as_array().map_or(0, Vec::len);
    let bound = 2 * PROMPT * u32::try_from(cases_len).unwrap() + STEP;
    let run = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true).output();
    let out = tokio::time::timeout(bound, run).await.expect("the client ends").unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{client} failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// `got` is the answer `(status, reason)`, over `http`, within [`PROMPT`].
fn answered(got: &Value, http: &str, status: u16, reason: Option<&str>) {
    assert_eq!(got["error"], Value::Null, "an answer, not a failure: {got}");
    assert_eq!((got["status"].as_u64(), got["reason"].as_str()), (Some(status.into()), reason), "{got}");
    assert_eq!(got["http"], http, "{got}");
    let secs = got["secs"].as_f64().unwrap();
    assert!(secs < PROMPT.as_secs_f64(), "the answer came after {secs} s: {got}");
}

fn case(url: String, mark: Option<&str>, stream: bool) -> Value {
    json!({"url": url, "size": BODY, "mark": mark, "stream": stream})
}

#[tokio::test]
async fn httpx_over_http2_gets_every_early_answer_while_its_body_is_still_going() {
    let Some(python) = sdk_python() else { return };
    let ca = TestCa::new();
    let (port, served, origin) = h2_origin(&ca).await;
    let t = leash(&ca, port).await;
    let url = |host: &str, path: &str| format!("https://{host}:{port}{path}");
    let cases = json!([
        case(url("models.test", "/v1/messages"), None, false),
        case(url("models.test", "/v1/messages"), None, true),
        case(url("models.test", "/admin/upload"), None, false),
        case(url("other.allowed.test", "/upload"), Some(PLACEHOLDER), true),
        case(url("other.allowed.test", "/early"), None, false),
        case(url("other.allowed.test", "/ok"), None, false),
    ]);
    let got = post(&python, "httpx-h2", &t, &cases).await;
    let h2 = "HTTP/2";
    answered(&got[0], h2, 403, Some("provider-tools"));
    assert!(got[0]["text"].as_str().unwrap().contains("larger than 65536 bytes"), "declared too long: {}", got[0]);
    answered(&got[1], h2, 403, Some("provider-tools"));
    assert!(got[1]["text"].as_str().unwrap().contains("larger than 65536 bytes"), "found too long: {}", got[1]);
    answered(&got[2], h2, 403, Some("rule"));
    answered(&got[3], h2, 403, Some("credential-leak"));
    answered(&got[4], h2, 413, None);
    answered(&got[5], h2, 200, None);
    assert_eq!(got[5]["text"], format!("got {BODY}"), "the connection still carries whole bodies");
    let mut served = served.lock().unwrap().clone();
    served.sort();
    let whole = format!("/ok {BODY}");
    assert_eq!(served, ["/early", &whole, "/upload cut"], "the leak was cut off; no other refused stream went up");
    origin.abort();
}

#[tokio::test]
async fn requests_over_http1_gets_every_early_refusal_and_a_fresh_connection_after_it() {
    let Some(python) = sdk_python() else { return };
    let ca = TestCa::new();
    let origin = TlsUpstream::with(&ca, |r: &Recorded| Reply::ok(format!("got {}", r.body.len))).await;
    let port = origin.port();
    let t = leash(&ca, port).await;
    let url = |host: &str, path: &str| format!("https://{host}:{port}{path}");
    let cases = json!([
        case(url("models.test", "/v1/messages"), None, false),
        case(url("models.test", "/v1/messages"), None, true),
        case(url("models.test", "/admin/upload"), None, false),
        case(url("other.allowed.test", "/upload"), Some(PLACEHOLDER), true),
        case(url("other.allowed.test", "/ok"), None, false),
    ]);
    let got = post(&python, "requests", &t, &cases).await;
    let h1 = "HTTP/1.1";
    for (got, reason) in got.iter().zip(["provider-tools", "provider-tools", "rule", "credential-leak"]) {
        answered(got, h1, 403, Some(reason));
        assert_eq!(got["connection"], "close", "a connection with half a body in it is not reused: {got}");
    }
    answered(&got[4], h1, 200, None);
    assert_eq!(got[4]["text"], format!("got {BODY}"), "a fresh connection carries the next request whole");
    let reached: Vec<String> = origin.origin.requests().iter().map(|r| r.target.clone()).collect();
    assert_eq!(reached, ["/ok"], "no refused request reached the origin");
}
