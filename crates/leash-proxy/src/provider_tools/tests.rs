//! Each API's shapes, in both spellings where the API accepts two; every SDK's client-side tools surviving; tools
//! leash does not know taken for provider-side; references to removed tools going with them; the places inside
//! batch and session envelopes; bodies that cannot be checked.

use leash_policy::ProviderTools::{Allow, Refuse, Strip};
use serde_json::{json, Value};

use super::*;

/// Strip `body`; the new body as JSON and what was removed.
fn stripped(body: &Value) -> (Value, Vec<String>) {
    match filter(&serde_json::to_vec(body).unwrap(), PATH, Strip).unwrap() {
        Outcome::Stripped { body, removed } => (serde_json::from_slice(&body).unwrap(), removed),
        other => panic!("expected a strip, got {other:?}"),
    }
}

fn outcome(body: &Value, mode: leash_policy::ProviderTools) -> Outcome {
    outcome_at(PATH, body, mode)
}

fn outcome_at(path: &str, body: &Value, mode: leash_policy::ProviderTools) -> Outcome {
    filter(&serde_json::to_vec(body).unwrap(), path, mode).unwrap()
}

/// The tools a refusal of `body` under `mode` names.
fn refused(body: &Value, mode: leash_policy::ProviderTools) -> Vec<String> {
    match outcome(body, mode) {
        Outcome::Refused { tools } => tools,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// The path most bodies are posted to: only an endpoint row (`/containers`) looks at it.
const PATH: &str = "/v1/messages";

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
    let shapes = SHAPES.iter().filter_map(|s| match s.matches {
        Match::ToolKey(k) => Some(k),
        _ => None,
    });
    let kept = KEPT.iter().filter_map(|k| match k {
        Kept::Key(k) => Some(*k),
        Kept::Type(_) => None,
    });
    let keys: Vec<&str> = shapes.chain(kept).collect();
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
fn gemini_mcp_servers_maps_and_vertex_searches_go_and_are_refused() {
    let decls = json!([{"name": "f", "parameters": {"type": "OBJECT"}}]);
    let mcp = json!([{"name": "x", "streamableHttpTransport": {"url": "https://mcp.example/mcp"}}]);
    for (servers, maps, parallel, exa) in [
        ("mcpServers", "googleMaps", "parallelAiSearch", "exaAiSearch"),
        ("mcp_servers", "google_maps", "parallel_ai_search", "exa_ai_search"),
    ] {
        let body = json!({
            "contents": [{"parts": [{"text": "hi"}]}],
            "tools": [{servers: mcp}, {maps: {"enableWidget": true}}, {parallel: {}},
                      {"functionDeclarations": decls, exa: {}}],
        });
        let (after, removed) = stripped(&body);
        assert_eq!(after["tools"], json!([{"functionDeclarations": decls}]), "{servers}");
        assert_eq!(
            removed,
            [
                format!("tools[0].{servers} (remote MCP servers, Gemini)"),
                format!("tools[1].{maps} (Google Maps grounding, Gemini)"),
                format!("tools[2].{parallel} (Parallel web search, Gemini on Vertex AI)"),
                format!("tools[3].{exa} (Exa web search, Gemini on Vertex AI)"),
            ]
        );
        assert_eq!(refused(&body, Refuse).len(), 4, "{servers}");
    }
}

#[test]
fn openai_code_interpreter_and_shell_go_when_their_container_reaches_the_network() {
    let allowlist = json!({"type": "allowlist", "allowed_domains": ["pypi.org"]});
    let offline = [
        json!({"type": "code_interpreter", "container": {"type": "auto", "memory_limit": "4g"}}),
        json!({"type": "code_interpreter", "container": "cntr_abc"}),
        json!({"type": "code_interpreter", "container": {"type": "auto", "network_policy": {"type": "disabled"}}}),
        json!({"type": "shell"}),
        json!({"type": "shell", "environment": {"type": "local"}}),
        json!({"type": "shell", "environment": {"type": "container_auto", "network_policy": null}}),
    ];
    let online = [
        json!({"type": "code_interpreter", "container": {"type": "auto", "network_policy": allowlist}}),
        json!({"type": "shell", "environment": {"type": "container_auto", "network_policy": allowlist}}),
        json!({"type": "code_interpreter", "container": {"type": "auto", "network_policy": "allowlist"}}),
    ];
    let tools = [offline.as_slice(), online.as_slice()].concat();
    let body = json!({"model": "gpt-5", "input": "hi", "tools": tools});
    let (after, removed) = stripped(&body);
    assert_eq!(after["tools"], json!(offline));
    assert_eq!(
        removed,
        [
            "tools[6] `code_interpreter` (code interpreter with network access, OpenAI Responses)",
            "tools[7] `shell` (hosted shell with network access, OpenAI Responses)",
            "tools[8] `code_interpreter` (code interpreter with network access, OpenAI Responses)",
        ]
    );
    assert_eq!(refused(&body, Refuse).len(), 3);
    assert_eq!(outcome(&json!({"tools": offline}), Refuse), Outcome::Unchanged);
}

#[test]
fn creating_a_container_with_network_access_is_refused_under_strip_too() {
    let open = json!({"name": "c", "network_policy": {"type": "allowlist", "allowed_domains": ["pypi.org"]}});
    for path in ["/v1/containers", "/v1/containers/", "/openai/v1/containers?api-version=1", "/v1/Container%73"] {
        for mode in [Strip, Refuse] {
            let Outcome::Refused { tools } = outcome_at(path, &open, mode) else { panic!("{path} not refused") };
            assert_eq!(tools, ["network_policy `allowlist` (container with network access, OpenAI Containers)"]);
        }
    }
    let closed = json!({"name": "c", "network_policy": {"type": "disabled"}});
    assert_eq!(outcome_at("/v1/containers", &closed, Strip), Outcome::Unchanged);
    assert_eq!(outcome_at("/v1/containers", &json!({"name": "c"}), Refuse), Outcome::Unchanged);
    assert_eq!(outcome_at("/v1/containers/cntr_1/files", &open, Strip), Outcome::Unchanged, "another endpoint");
    assert_eq!(outcome_at("/v1/responses", &open, Strip), Outcome::Unchanged, "a key of no request object");
}

#[test]
fn tools_leash_does_not_know_are_taken_for_provider_side() {
    let decls = json!([{"name": "f", "parameters": {}}]);
    let body = json!({"model": "m", "tools": [
        {"type": "browser_20260101", "name": "browser"},
        weather(),
        {"newSearch": {}},
        {"functionDeclarations": decls, "newFetch": {"any": 1}},
        {"name": "no_schema", "description": "an Anthropic tool needs an input_schema"},
        "web",
        {"type": 5},
        {"type": "bash_tool"},
    ]});
    let (after, removed) = stripped(&body);
    assert_eq!(after["tools"], json!([weather(), {"functionDeclarations": decls}]));
    let unrecognised = "(unrecognised tool, not a client-side shape leash knows)";
    assert_eq!(
        removed,
        [
            format!("tools[0] `browser_20260101` {unrecognised}"),
            format!("tools[2].newSearch {unrecognised}"),
            format!("tools[3].newFetch {unrecognised}"),
            format!("tools[4].name {unrecognised}"),
            format!("tools[4].description {unrecognised}"),
            format!("tools[5] {unrecognised}"),
            format!("tools[6] {unrecognised}"),
            format!("tools[7] `bash_tool` {unrecognised}"),
        ]
    );
    assert_eq!(refused(&body, Refuse).len(), 8);
}

#[test]
fn every_sdks_client_side_tools_pass_unchanged() {
    let schema = json!({"type": "object", "properties": {}});
    let anthropic = json!({"model": "claude", "max_tokens": 8, "messages": [], "tools": [
        weather(),
        {"type": "custom", "name": "c", "input_schema": schema, "cache_control": {"type": "ephemeral"}},
        {"type": "bash_20250124", "name": "bash"},
        {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool", "max_characters": 1000},
        {"type": "computer_20250124", "name": "computer", "display_width_px": 1024, "display_height_px": 768},
        {"type": "memory_20250818", "name": "memory"},
        {"type": "code_execution_20250825", "name": "code_execution"},
        {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"},
    ], "tool_choice": {"type": "tool", "name": "bash"}});
    let chat = json!({"model": "gpt-4.1", "messages": [], "tools": [
        {"type": "function", "function": {"name": "f", "parameters": schema, "strict": true}},
        {"type": "custom", "custom": {"name": "g", "format": {"type": "text"}}},
    ], "tool_choice": {"type": "function", "function": {"name": "f"}}, "parallel_tool_calls": false});
    let responses = json!({"model": "gpt-5", "input": "hi", "tools": [
        {"type": "function", "name": "f", "parameters": schema},
        {"type": "custom", "name": "g"},
        {"type": "file_search", "vector_store_ids": ["vs_1"]},
        {"type": "image_generation"},
        {"type": "computer_use_preview", "display_width": 1024, "display_height": 768, "environment": "browser"},
        {"type": "local_shell"},
        {"type": "apply_patch"},
        {"type": "shell"},
        {"type": "code_interpreter", "container": {"type": "auto"}},
    ], "include": ["file_search_call.results", "code_interpreter_call.outputs"]});
    let gemini = json!({"contents": [], "tools": [
        {"functionDeclarations": [{"name": "f"}]}, {"function_declarations": [{"name": "g"}]},
        {"codeExecution": {}}, {"computer_use": {"environment": "ENVIRONMENT_BROWSER"}}, {"fileSearch": {}}, {},
    ], "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["f"]}}});
    for body in [anthropic, chat, responses, gemini] {
        assert_eq!(outcome(&body, Strip), Outcome::Unchanged, "{body}");
        assert_eq!(outcome(&body, Refuse), Outcome::Unchanged, "{body}");
    }
}

#[test]
fn a_version_suffix_is_digits_and_underscores_and_a_base_drops_it() {
    assert!(versioned("bash_20250124", "bash") && versioned("bash", "bash"));
    assert!(versioned("computer_use_preview_2025_03_11", "computer_use_preview"));
    for (kind, name) in [("bash_tool", "bash"), ("bash_", "bash"), ("bashful", "bash"), ("computer_use", "computer")] {
        assert!(!versioned(kind, name), "{kind}");
    }
    for (kind, b) in [
        ("web_search_preview_2025_03_11", "web_search"),
        ("web_search_20250305", "web_search"),
        ("code_interpreter", "code_interpreter"),
        ("mcp", "mcp"),
    ] {
        assert_eq!(base(kind), b);
    }
}

#[test]
fn anthropic_tool_choice_naming_a_removed_tool_becomes_auto() {
    let tools = json!([{"type": "web_search_20250305", "name": "web_search"}, weather()]);
    let named = json!({"type": "tool", "name": "web_search", "disable_parallel_tool_use": true});
    let (after, _) = stripped(&json!({"model": "m", "tools": tools, "tool_choice": named}));
    assert_eq!(after["tool_choice"], json!({"type": "auto", "disable_parallel_tool_use": true}));
    for kept in [json!({"type": "tool", "name": "get_weather"}), json!({"type": "any"}), json!({"type": "auto"})] {
        let (after, _) = stripped(&json!({"model": "m", "tools": tools, "tool_choice": kept}));
        assert_eq!(after["tool_choice"], kept);
    }
    // A tool of a removed MCP toolset is no tool that is left either.
    let mcp = json!({"model": "m", "tools": [{"type": "mcp_toolset", "mcp_server_name": "x"}, weather()],
                     "tool_choice": {"type": "tool", "name": "x_search"}});
    assert_eq!(stripped(&mcp).0["tool_choice"], json!({"type": "auto"}));
}

#[test]
fn openai_tool_choice_and_include_naming_removed_tools_go() {
    let network = json!({"type": "allowlist", "allowed_domains": ["x.example"]});
    let tools = json!([
        {"type": "web_search_preview"}, {"type": "mcp", "server_label": "x", "server_url": "https://mcp.example"},
        {"type": "code_interpreter", "container": {"type": "auto", "network_policy": network}},
        {"type": "function", "name": "f", "parameters": {}}, {"type": "file_search", "vector_store_ids": ["vs"]},
    ]);
    let include = json!([
        "web_search_call.action.sources",
        "web_search_call.results",
        "code_interpreter_call.outputs",
        "file_search_call.results",
        "reasoning.encrypted_content"
    ]);
    for gone in [
        json!({"type": "web_search_preview"}),
        json!({"type": "mcp", "server_label": "x"}),
        json!({"type": "code_interpreter"}),
        json!({"type": "function", "name": "nope"}),
    ] {
        let body = json!({"model": "gpt-5", "tools": tools, "tool_choice": gone, "include": include});
        let (after, removed) = stripped(&body);
        assert_eq!(removed.len(), 3);
        assert!(after.get("tool_choice").is_none(), "{gone}");
        assert_eq!(after["include"], json!(["file_search_call.results", "reasoning.encrypted_content"]));
    }
    for left in [json!("required"), json!({"type": "function", "name": "f"}), json!({"type": "file_search"})] {
        let (after, _) = stripped(&json!({"model": "gpt-5", "tools": tools, "tool_choice": left}));
        assert_eq!(after["tool_choice"], left);
    }
    let allowed = json!({"type": "allowed_tools", "mode": "required",
                         "tools": [{"type": "web_search_preview"}, {"type": "function", "name": "f"}]});
    let (after, _) = stripped(&json!({"model": "gpt-5", "tools": tools, "tool_choice": allowed}));
    assert_eq!(after["tool_choice"]["tools"], json!([{"type": "function", "name": "f"}]));
    let only_gone = json!({"type": "allowed_tools", "mode": "auto", "tools": [{"type": "mcp", "server_label": "x"}]});
    let (after, _) = stripped(&json!({"model": "gpt-5", "tools": tools, "tool_choice": only_gone}));
    assert!(after.get("tool_choice").is_none());
    let (after, _) = stripped(&json!({"tools": tools, "include": ["web_search_call.action.sources"]}));
    assert!(after.get("include").is_none(), "an include list left empty goes");
}

#[test]
fn chat_completions_references_go_with_the_tools() {
    let function = |name: &str| json!({"type": "function", "function": {"name": name}});
    let allowed =
        json!({"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [function("f"), function("x")]}});
    let body = json!({"model": "gpt-4.1", "messages": [], "tool_choice": allowed, "parallel_tool_calls": true,
                      "tools": [{"type": "function", "function": {"name": "f"}}, {"type": "x_search", "name": "x"}]});
    let (after, _) = stripped(&body);
    assert_eq!(after["tool_choice"]["allowed_tools"]["tools"], json!([function("f")]));
    assert_eq!(after["parallel_tool_calls"], true);
    // No tool left: a tool choice and parallel tool calls without tools are a 400.
    let body = json!({"model": "gpt-4.1", "messages": [], "tools": [{"type": "x_search"}],
                      "tool_choice": "required", "parallel_tool_calls": false});
    assert_eq!(stripped(&body).0, json!({"model": "gpt-4.1", "messages": []}));
}

#[test]
fn gemini_allowed_function_names_keep_only_declared_functions() {
    let decls = json!([{"name": "f"}]);
    for (config, calling, allowed, servers) in [
        ("toolConfig", "functionCallingConfig", "allowedFunctionNames", "mcpServers"),
        ("tool_config", "function_calling_config", "allowed_function_names", "mcp_servers"),
    ] {
        let body = |names: Value| {
            json!({"contents": [], "tools": [{servers: [{"name": "m"}]}, {"functionDeclarations": decls}],
                   config: {calling: {"mode": "ANY", allowed: names}, "retrievalConfig": {}}})
        };
        let (after, _) = stripped(&body(json!(["f", "m_lookup"])));
        assert_eq!(after[config], json!({calling: {"mode": "ANY", allowed: ["f"]}, "retrievalConfig": {}}));
        let (after, _) = stripped(&body(json!(["m_lookup"])));
        assert_eq!(after[config], json!({"retrievalConfig": {}}), "an emptied list: the default calling config");
        let alone = json!({"contents": [], "tools": [{servers: []}], config: {calling: {"mode": "ANY"}}});
        assert_eq!(stripped(&alone).0, json!({"contents": []}), "no tool left: no tool config");
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
    let Outcome::Stripped { body, .. } = filter(text, PATH, Strip).unwrap() else { panic!("not stripped") };
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
        assert!(matches!(filter(bad, PATH, Strip), Err(Unreadable::NotJson(_))), "{}", String::from_utf8_lossy(bad));
        assert!(filter(bad, PATH, Refuse).is_err());
    }
    let dup = filter(br#"{"a":{"x":1,"x":2}}"#, PATH, Strip).unwrap_err();
    assert!(dup.to_string().contains("duplicate key `x`"), "{dup}");
    assert!(filter(&[b'['; 200], PATH, Strip).is_err(), "nesting beyond serde_json's limit");
    assert_eq!(filter(b"not json", PATH, Allow).unwrap(), Outcome::Unchanged, "allow reads nothing");
    assert_eq!(filter(b"[1, {\"tools\": [{\"type\": \"web_search\"}]}]", PATH, Strip).unwrap(), Outcome::Unchanged);
}
