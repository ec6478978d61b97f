//! Each API's shapes, in both spellings where the API accepts two; function tools surviving; the places inside
//! batch and session envelopes; bodies that cannot be checked.

use leash_policy::ProviderTools::{Allow, Refuse, Strip};
use serde_json::{json, Value};

use super::*;

/// Strip `body`; the new body as JSON and what was removed.
fn stripped(body: &Value) -> (Value, Vec<String>) {
    match filter(&serde_json::to_vec(body).unwrap(), Strip).unwrap() {
        Outcome::Stripped { body, removed } => (serde_json::from_slice(&body).unwrap(), removed),
        other => panic!("expected a strip, got {other:?}"),
    }
}

fn outcome(body: &Value, mode: leash_policy::ProviderTools) -> Outcome {
    filter(&serde_json::to_vec(body).unwrap(), mode).unwrap()
}

fn weather() -> Value {
    json!({"name": "get_weather", "description": "d", "input_schema": {"type": "object", "properties": {}}})
}

#[test]
fn anthropic_server_tools_go_and_function_tools_stay() {
    let body = json!({
        "model": "claude-sonnet-4-5", "max_tokens": 64,
        "tools": [
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
            weather(),
            {"type": "web_fetch_20250910", "name": "web_fetch"},
            {"type": "custom", "name": "lookup", "input_schema": {"type": "object"}},
        ],
        "messages": [{"role": "user", "content": "hi"}],
    });
    let (after, removed) = stripped(&body);
    assert_eq!(
        after["tools"],
        json!([weather(), {"type": "custom", "name": "lookup", "input_schema": {"type": "object"}}])
    );
    assert_eq!(after["messages"], body["messages"]);
    assert_eq!(
        removed,
        [
            "tools[0] `web_search_20250305` (web search, Anthropic Messages, OpenAI Responses)",
            "tools[2] `web_fetch_20250910` (web fetch, Anthropic Messages)",
        ]
    );
}

#[test]
fn anthropic_mcp_connector_goes_whole() {
    let body = json!({
        "model": "m", "mcp_servers": [{"type": "url", "url": "https://mcp.example/sse", "name": "x"}],
        "tools": [{"type": "mcp_toolset", "mcp_server_name": "x"}, weather()],
    });
    let (after, removed) = stripped(&body);
    assert!(after.get("mcp_servers").is_none());
    assert_eq!(after["tools"], json!([weather()]));
    assert_eq!(removed.len(), 2, "{removed:?}");
    assert!(removed[0].starts_with("mcp_servers (remote MCP servers"), "{removed:?}");
}

#[test]
fn openai_chat_completions_web_search_options_go() {
    let function = json!({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}});
    let body = json!({"model": "gpt-4.1", "web_search_options": {}, "tools": [function.clone()], "messages": []});
    let (after, removed) = stripped(&body);
    assert_eq!(after, json!({"model": "gpt-4.1", "tools": [function], "messages": []}));
    assert_eq!(removed, ["web_search_options (web search, OpenAI Chat Completions)"]);
}

#[test]
fn openai_search_models_cannot_be_stripped_so_are_refused() {
    for model in ["gpt-4o-search-preview", "gpt-4o-mini-search-preview-2025-03-11", "gpt-5-search-api"] {
        let body = json!({"model": model, "web_search_options": {}, "messages": []});
        let Outcome::Refused { tools } = outcome(&body, Strip) else { panic!("{model} not refused") };
        assert_eq!(tools, [format!("model `{model}` (web search model, OpenAI Chat Completions)")]);
    }
    assert_eq!(outcome(&json!({"model": "gpt-4o", "messages": []}), Strip), Outcome::Unchanged);
}

#[test]
fn openai_responses_web_search_and_mcp_go_in_every_version() {
    let function = json!({"type": "function", "name": "f", "parameters": {}});
    let body = json!({
        "model": "gpt-5", "input": "hi",
        "tools": [
            {"type": "web_search"}, {"type": "web_search_preview"}, {"type": "web_search_preview_2025_03_11"},
            {"type": "web_search_2025_08_26"}, function.clone(),
            {"type": "mcp", "server_label": "x", "server_url": "https://mcp.example"},
            {"type": "mcp", "server_label": "gmail", "connector_id": "connector_gmail"},
            {"type": "file_search", "vector_store_ids": ["vs"]},
        ],
    });
    let (after, removed) = stripped(&body);
    assert_eq!(after["tools"], json!([function, {"type": "file_search", "vector_store_ids": ["vs"]}]));
    assert_eq!(removed.len(), 6, "{removed:?}");
    assert!(removed[5].starts_with("tools[6] `mcp` (remote MCP server, OpenAI Responses)"), "{removed:?}");
}

#[test]
fn gemini_grounding_goes_in_both_spellings_and_function_declarations_stay() {
    let decls = json!([{"name": "f", "parameters": {"type": "OBJECT"}}]);
    for (search, retrieval, url) in [
        ("googleSearch", "googleSearchRetrieval", "urlContext"),
        ("google_search", "google_search_retrieval", "url_context"),
    ] {
        let body = json!({
            "contents": [{"parts": [{"text": "hi"}]}],
            "tools": [{search: {}}, {retrieval: {"dynamicRetrievalConfig": {}}}, {url: {}},
                      {"functionDeclarations": decls, search: {}}],
        });
        let (after, removed) = stripped(&body);
        assert_eq!(after["tools"], json!([{"functionDeclarations": decls}]), "{search}");
        assert_eq!(removed.len(), 4, "{removed:?}");
        assert_eq!(removed[0], format!("tools[0].{search} (Google Search grounding, Gemini)"));
        assert_eq!(removed[3], format!("tools[3].{search} (Google Search grounding, Gemini)"));
    }
}

#[test]
fn every_gemini_key_is_listed_in_both_spellings() {
    let keys: Vec<&str> = SHAPES
        .iter()
        .filter_map(|s| match s.matches {
            Match::ToolKey(k) => Some(k),
            _ => None,
        })
        .collect();
    for key in &keys {
        let snake: String = key
            .chars()
            .flat_map(|c| match c.is_ascii_uppercase() {
                true => vec!['_', c.to_ascii_lowercase()],
                false => vec![c],
            })
            .collect();
        assert!(keys.contains(&snake.as_str()), "{key} has no `{snake}` row");
    }
}

#[test]
fn a_tools_list_left_empty_goes() {
    let (after, _) = stripped(&json!({"model": "m", "tools": [{"type": "web_search"}], "input": "x"}));
    assert_eq!(after, json!({"model": "m", "input": "x"}));
}

#[test]
fn refuse_names_every_tool_and_strips_nothing() {
    let body = json!({"mcp_servers": [], "tools": [{"type": "web_fetch_20250910"}, {"googleSearch": {}}]});
    let Outcome::Refused { tools } = outcome(&body, Refuse) else { panic!("not refused") };
    assert_eq!(tools.len(), 3, "{tools:?}");
    assert_eq!(outcome(&json!({"tools": [weather()]}), Refuse), Outcome::Unchanged);
}

#[test]
fn batch_and_session_envelopes_are_checked_too() {
    let anthropic = json!({"requests": [
        {"custom_id": "a", "params": {"model": "m", "tools": [weather()]}},
        {"custom_id": "b", "params": {"model": "m", "tools": [{"type": "web_search_20250305"}, weather()]}},
    ]});
    let (after, removed) = stripped(&anthropic);
    assert_eq!(after["requests"][1]["params"]["tools"], json!([weather()]));
    assert!(removed[0].starts_with("requests[1].params.tools[0] `web_search_20250305`"), "{removed:?}");
    for config in ["inputConfig", "input_config"] {
        let gemini = json!({"batch": {"display_name": "b", config: {"requests": {"requests": [
            {"request": {"contents": [], "tools": [{"google_search": {}}]}, "metadata": {"key": "1"}}
        ]}}}});
        let (after, removed) = stripped(&gemini);
        assert!(after["batch"][config]["requests"]["requests"][0]["request"].get("tools").is_none());
        assert_eq!(removed.len(), 1, "{config}");
    }
    let realtime = json!({"session": {"type": "realtime", "tools": [{"type": "mcp", "server_url": "https://x"}]}});
    let (after, removed) = stripped(&realtime);
    assert_eq!(after, json!({"session": {"type": "realtime"}}));
    assert!(removed[0].starts_with("session.tools[0] `mcp`"), "{removed:?}");
}

#[test]
fn a_function_schema_naming_a_tool_key_is_not_touched() {
    // Keys inside a function's schema, a message, or a tool result are not request-level keys.
    let schema = json!({"type": "object", "properties": {"mcp_servers": {"type": "array"}, "web_search_options": {}}});
    let body = json!({
        "tools": [{"name": "configure", "input_schema": schema}],
        "messages": [{"role": "user", "content": [{"type": "tool_result", "content": "{\"mcp_servers\": 1}"}]}],
        "metadata": {"tools": [{"type": "web_search"}]},
    });
    assert_eq!(outcome(&body, Strip), Outcome::Unchanged);
}

#[test]
fn key_order_and_values_survive_a_strip() {
    let text = br#"{"z":1,"model":"m","a":[1.5,-2,18446744073709551615,"\u00e9"],"web_search_options":{},"m":null}"#;
    let Outcome::Stripped { body, .. } = filter(text, Strip).unwrap() else { panic!("not stripped") };
    assert_eq!(
        String::from_utf8(body).unwrap(),
        r#"{"z":1,"model":"m","a":[1.5,-2,18446744073709551615,"é"],"m":null}"#
    );
}

#[test]
fn bodies_that_cannot_be_checked_are_unreadable() {
    for bad in [
        &b"not json"[..],
        b"",
        b"{\"a\":1} trailing",
        b"\xef\xbb\xbf{}",
        b"{\"tools\":[],\"tools\":[{\"type\":\"web_search\"}]}",
    ] {
        assert!(matches!(filter(bad, Strip), Err(Unreadable::NotJson(_))), "{}", String::from_utf8_lossy(bad));
        assert!(filter(bad, Refuse).is_err());
    }
    let dup = filter(br#"{"a":{"x":1,"x":2}}"#, Strip).unwrap_err();
    assert!(dup.to_string().contains("duplicate key `x`"), "{dup}");
    assert!(filter(&[b'['; 200], Strip).is_err(), "nesting beyond serde_json's limit");
    assert_eq!(filter(b"not json", Allow).unwrap(), Outcome::Unchanged, "allow reads nothing");
    assert_eq!(filter(b"[1, {\"tools\": [{\"type\": \"web_search\"}]}]", Strip).unwrap(), Outcome::Unchanged);
}
