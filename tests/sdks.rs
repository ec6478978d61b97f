//! The providers' official Python SDKs (anthropic, openai, google-genai: current releases from PyPI, installed by
//! `.ci/run` in a venv named by `LEASH_SDK_PYTHON`) run under `leash run` with the presets, over HTTP/1.1 and HTTP/2,
//! against a fake provider on the host's loopback (hypercorn, TLS from a test CA, answering for the presets' own
//! names through `--resolve`). The provider must see the real key in the place each SDK sends it; the SDK sees only
//! the placeholder, also where the provider quotes the key back; a body over leash's model body bound, sent over
//! HTTP/2 while leash has already refused it, gets leash's reason at once. Without the venv the tests skip loudly,
//! and fail when `LEASH_REQUIRE_SDKS` is set (CI sets it).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test's helpers fail it by panicking")]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{https_material_for, log_lines, sandbox_available, stderr, stdout, Served};

const LEASH: &str = env!("CARGO_BIN_EXE_leash");
/// Real keys, long enough that each placeholder has their length (an echo comes back as the placeholder itself).
const ANTHROPIC: &str = "sk-ant-api03-real-4f1c9a7e2b6d8035c1e9f7a2b4d6";
const OPENAI: &str = "sk-proj-real-9e8d7c6b5a4f3e2d1c0b9a8f7e6d";
const GEMINI: &str = "AIzaSyReal-0a1b2c3d4e5f6a7b8c9d0e1f2a3b";
const HOSTS: [&str; 3] = ["api.anthropic.com", "api.openai.com", "generativelanguage.googleapis.com"];

/// The venv's python, or a loud skip (a failure where CI requires the SDKs).
fn sdk_python() -> Option<PathBuf> {
    let python = std::env::var_os("LEASH_SDK_PYTHON").map(PathBuf::from).filter(|p| p.exists());
    if python.is_none() {
        assert!(
            std::env::var_os("LEASH_REQUIRE_SDKS").is_none(),
            "LEASH_REQUIRE_SDKS is set but LEASH_SDK_PYTHON names no python (see .ci/run)"
        );
        eprintln!("SKIPPED: LEASH_SDK_PYTHON is not set; the official SDK tests did not run (.ci/run installs them)");
    }
    python
}

/// The fake provider: one hypercorn server for the three hosts (HTTP/1.1 and HTTP/2 by ALPN). It takes a key from
/// `x-api-key`, `x-goog-api-key`, `Authorization: Bearer` or `?key=`, appends `{path, http, place, key}` to `seen`,
/// answers 401 unless the key is one of `keys`, and otherwise the API's own JSON with `your key: KEY` as the text.
const FAKE_PROVIDER: &str = r#"
import asyncio, json, socket, sys
from urllib.parse import parse_qsl
from hypercorn.asyncio import serve
from hypercorn.config import Config
KEYS, SEEN = set(sys.argv[1].split(",")), sys.argv[2]

def answer(path, text):
    if path.endswith("/messages"):
        return {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
                "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": None,
                "usage": {"input_tokens": 1, "output_tokens": 1}}
    if path.endswith("/chat/completions"):
        return {"id": "c1", "object": "chat.completion", "created": 1, "model": "gpt-x",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
    return {"candidates": [{"content": {"parts": [{"text": text}], "role": "model"}, "finishReason": "STOP"}]}

async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
    got, place = None, None
    for name in ("x-api-key", "x-goog-api-key"):
        if name in headers:
            got, place = headers[name], name
    if headers.get("authorization", "").startswith("Bearer "):
        got, place = headers["authorization"][7:], "authorization"
    query = dict(parse_qsl(scope["query_string"].decode()))
    if "key" in query:
        got, place = query["key"], "query"
    with open(SEEN, "a") as f:
        f.write(json.dumps({"path": scope["path"], "http": scope["http_version"], "place": place, "key": got}) + "\n")
    status, body = (200, answer(scope["path"], "your key: " + got)) if got in KEYS else (401, {"error": "bad key"})
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})

sock = socket.socket()
sock.bind(("127.0.0.1", 0))
sock.listen(64)
sock.set_inheritable(True)
print(sock.getsockname()[1], flush=True)
config = Config()
config.bind = [f"fd://{sock.fileno()}"]
config.certfile, config.keyfile = "leaf.pem", "leaf.key"
config.alpn_protocols = ["h2", "http/1.1"]
config.loglevel = "WARNING"
asyncio.run(serve(app, config))
"#;

/// Each SDK's call, with `http2` off then on; what it printed names the SDK, the version and the text it got.
const SDK_CALLS: &str = r#"
import os, sys
import anthropic, httpx2, openai
from google import genai
from google.genai import types
port = sys.argv[1]
print("env", os.environ["ANTHROPIC_API_KEY"], os.environ["OPENAI_API_KEY"], os.environ["GEMINI_API_KEY"])
for http2 in (False, True):
    a = anthropic.Anthropic(base_url=f"https://api.anthropic.com:{port}", http_client=httpx2.Client(http2=http2))
    m = a.messages.create(model="claude-x", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    print("anthropic", http2, m.content[0].text)
    o = openai.OpenAI(base_url=f"https://api.openai.com:{port}/v1", http_client=httpx2.Client(http2=http2))
    c = o.chat.completions.create(model="gpt-x", messages=[{"role": "user", "content": "hi"}])
    print("openai", http2, c.choices[0].message.content)
    options = types.HttpOptions(base_url=f"https://generativelanguage.googleapis.com:{port}",
                                client_args={"http2": http2})
    g = genai.Client(http_options=options)
    print("gemini", http2, g.models.generate_content(model="gemini-x", contents="hi").text)
"#;

/// Anthropic's and OpenAI's SDKs over HTTP/2 (no retries, a 20 s time-out) each send a body one byte over leash's
/// 32 MiB bound for model API bodies; each prints `<sdk> <what it raised> <seconds> <message>`.
const SDK_OVERSIZED: &str = r#"
import sys, time
import anthropic, httpx2, openai
port, text = sys.argv[1], "x" * (32 * 1024 * 1024 + 1)
def http():
    return httpx2.Client(http2=True, timeout=20)
calls = {
    "anthropic": lambda: anthropic.Anthropic(base_url=f"https://api.anthropic.com:{port}", http_client=http(),
        max_retries=0).messages.create(model="claude-x", max_tokens=8, messages=[{"role": "user", "content": text}]),
    "openai": lambda: openai.OpenAI(base_url=f"https://api.openai.com:{port}/v1", http_client=http(),
        max_retries=0).chat.completions.create(model="gpt-x", messages=[{"role": "user", "content": text}]),
}
for name, call in calls.items():
    start = time.monotonic()
    try:
        call()
        print(name, "answered")
    except Exception as e:
        print(name, type(e).__name__, round(time.monotonic() - start, 2), str(e).replace("\n", " "), flush=True)
"#;

/// A run of `script` under `leash run` with the three presets, the provider's names pinned to loopback and its CA
/// trusted upstream; the real keys only in leash's own environment.
fn run_with_presets(dir: &Path, port: u16, script: &[&str]) -> Output {
    let policy = dir.join("policy.yaml");
    let text = format!(
        "network:\n  mode: blocklist\n  blocked_urls: []\n  ports: [80, {port}]\n  tunnel_ports: [{port}]\n  \
         allow_destinations: [127.0.0.0/8]\n  credentials:\n    - preset: anthropic\n    - preset: openai\n    \
         - preset: gemini\n"
    );
    std::fs::write(&policy, text).unwrap();
    let ca = dir.join("ca.pem");
    let mut cmd = Command::new(LEASH);
    cmd.args(["run", "--policy", policy.to_str().unwrap(), "--log", dir.join("audit.jsonl").to_str().unwrap()]);
    cmd.args(["--upstream-ca", ca.to_str().unwrap()]);
    for host in HOSTS {
        cmd.args(["--resolve", &format!("{host}:127.0.0.1")]);
    }
    cmd.arg("--").args(script);
    cmd.env("ANTHROPIC_API_KEY", ANTHROPIC).env("OPENAI_API_KEY", OPENAI).env("GEMINI_API_KEY", GEMINI);
    cmd.env_remove("GOOGLE_API_KEY").env_remove("ANTHROPIC_AUTH_TOKEN").output().unwrap()
}

/// The fake provider's records: `(path, http version, place, key)`.
fn seen(path: &Path) -> Vec<(String, String, String, String)> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let field = |v: &serde_json::Value, k: &str| v[k].as_str().unwrap_or_default().to_owned();
    text.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|v| (field(&v, "path"), field(&v, "http"), field(&v, "place"), field(&v, "key")))
        .collect()
}

fn start_provider(python: &Path, dir: &Path) -> (Served, u16) {
    https_material_for(dir, &HOSTS);
    let keys = [ANTHROPIC, OPENAI, GEMINI].join(",");
    let seen = dir.join("seen.jsonl");
    Served::start(Command::new(python).args(["-c", FAKE_PROVIDER, &keys]).arg(seen).current_dir(dir))
}

#[test]
fn the_official_sdks_reach_the_provider_with_the_real_key_over_http1_and_http2() {
    let Some(python) = sdk_python() else { return };
    if !sandbox_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (_provider, port) = start_provider(&python, dir.path());
    let o = run_with_presets(dir.path(), port, &[python.to_str().unwrap(), "-c", SDK_CALLS, &port.to_string()]);
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    let lines: Vec<&str> = out.lines().collect();
    let env: Vec<&str> = lines[0].split(' ').skip(1).collect();
    for (placeholder, name) in env.iter().zip(["anthropic", "openai", "gemini"]) {
        assert!(placeholder.starts_with(&format!("leash-{name}-")), "the SDK holds a placeholder: {placeholder}");
    }
    let expected: Vec<String> = [false, true]
        .iter()
        .flat_map(|h2| {
            let py = if *h2 { "True" } else { "False" };
            [("anthropic", env[0]), ("openai", env[1]), ("gemini", env[2])]
                .map(|(sdk, placeholder)| format!("{sdk} {py} your key: {placeholder}"))
        })
        .collect();
    assert_eq!(lines[1..], expected, "every call got through; the key quoted back is the placeholder\n{err}");
    let places: Vec<(String, String, String, String)> = seen(&dir.path().join("seen.jsonl"));
    let want = |path: &str, http: &str, place: &str, key: &str| (path.into(), http.into(), place.into(), key.into());
    let mut expected_seen = Vec::new();
    for http in ["1.1", "2"] {
        expected_seen.push(want("/v1/messages", http, "authorization", ANTHROPIC));
        expected_seen.push(want("/v1/chat/completions", http, "authorization", OPENAI));
        expected_seen.push(want("/v1/models/gemini-x:generateContent", http, "x-goog-api-key", GEMINI));
    }
    assert_eq!(places, expected_seen, "the provider saw the real keys, over HTTP/1.1 then HTTP/2");
    for key in [ANTHROPIC, OPENAI, GEMINI] {
        assert!(!out.contains(key) && !err.contains(key), "nothing the SDKs or leash printed holds a real key");
    }
    let log = dir.path().join("audit.jsonl");
    let credentials: Vec<String> =
        log_lines(&log).iter().filter_map(|l| l["credential"].as_str().map(str::to_owned)).collect();
    assert_eq!(credentials, ["anthropic", "openai", "gemini"].repeat(2), "each request's line names its credential");
}

#[test]
fn gemini_s_key_parameter_is_replaced_and_a_placeholder_sent_elsewhere_is_warned_about() {
    let Some(python) = sdk_python() else { return };
    if !sandbox_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (_provider, port) = start_provider(&python, dir.path());
    let gemini = format!("https://generativelanguage.googleapis.com:{port}/v1beta/models/gemini-x:generateContent");
    let script = format!(
        r#"curl -s --http1.1 -d '{{}}' "{gemini}?alt=json&key=$GEMINI_API_KEY"; echo
curl -s --http2 -d '{{}}' "{gemini}?key=$GEMINI_API_KEY"; echo
curl -s -o /dev/null -w '%{{http_code}}\n' -H "x-other: $ANTHROPIC_API_KEY" https://api.anthropic.com:{port}/v1/models
"#
    );
    let o = run_with_presets(dir.path(), port, &["sh", "-c", &script]);
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].contains("your key: leash-gemini-") && lines[1].contains("your key: leash-gemini-"), "{out}");
    assert_eq!(lines[2], "401", "a placeholder in a header the entry does not name goes on as it is");
    let places = seen(&dir.path().join("seen.jsonl"));
    let (q1, q2) = (&places[0], &places[1]);
    assert_eq!((q1.1.as_str(), q1.2.as_str(), q1.3.as_str()), ("1.1", "query", GEMINI), "{places:?}");
    assert_eq!((q2.1.as_str(), q2.2.as_str(), q2.3.as_str()), ("2", "query", GEMINI), "{places:?}");
    assert!(
        err.contains("credential `anthropic`: its placeholder went to api.anthropic.com in x-other"),
        "the operator is told the placeholder went unreplaced: {err}"
    );
    let log = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap();
    assert!(!log.contains(GEMINI) && !out.contains(GEMINI) && !err.contains(GEMINI), "the key is in no output");
}

#[test]
fn the_sdks_over_http2_get_leash_s_refusal_of_a_body_over_the_bound_at_once() {
    let Some(python) = sdk_python() else { return };
    if !sandbox_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (_provider, port) = start_provider(&python, dir.path());
    let o = run_with_presets(dir.path(), port, &[python.to_str().unwrap(), "-c", SDK_OVERSIZED, &port.to_string()]);
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}\n{err}");
    for (line, sdk) in lines.iter().zip(["anthropic", "openai"]) {
        let words: Vec<&str> = line.splitn(4, ' ').collect();
        assert_eq!(words[..2], [sdk, "PermissionDeniedError"], "leash's 403, not a time-out: {line}");
        let secs: f64 = words[2].parse().unwrap();
        // Before, the SDK waited for its time-out (20 s here) for the answer leash had already sent.
        assert!(secs < 10.0, "the refusal came after {secs} s: {line}");
        assert!(
            words[3].contains("refused by the egress policy (provider-tools): the body is larger than 33554432 bytes"),
            "the SDK shows leash's reason: {line}"
        );
    }
    assert!(seen(&dir.path().join("seen.jsonl")).is_empty(), "neither body reached the provider");
}
