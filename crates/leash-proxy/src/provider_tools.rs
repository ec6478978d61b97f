//! Provider-side tools in model API request bodies: the JSON shapes with which the Anthropic, OpenAI and
//! Gemini APIs ask the provider to reach the network on the caller's behalf — web search, web fetch, remote MCP
//! servers, search and maps grounding, code execution with network access, hosted containers — found, and stripped
//! or refused. Pure: a request's path and body bytes in, an [`Outcome`] out; no I/O.
//!
//! The shapes are data: [`SHAPES`] says what a provider-side tool looks like inside one request object, [`KEPT`]
//! what a client-side tool (or a server tool without network) looks like, and [`PLACES`] where request objects sit in
//! a body (the body itself, or inside a batch or session envelope). A `tools[]` entry matching neither table is taken
//! for a provider-side tool: a tool a provider ships tomorrow is stripped or refused, not passed. Adding a tool is one
//! row. After a strip, what still names a removed tool (`tool_choice`, `include`, Gemini's `toolConfig`) goes too,
//! since the API would answer it with 400; everything else in a body is left as it is: messages, schemas.
//!
//! Bodies are parsed strictly: a duplicate object key is refused, since two parsers may keep different copies (a
//! `tools` leash reads empty and the provider reads full). An unchanged body is forwarded byte for byte; a stripped
//! one is re-serialised with its key order kept (serde_json's `preserve_order`).

use std::fmt;

use leash_policy::ProviderTools;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// What a provider-side tool looks like inside one request object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    /// A key of the request object (`mcp_servers`): the key is removed.
    Key(&'static str),
    /// An entry of `tools[]` whose `type` starts with this (dated versions such as `web_search_20250305` and later
    /// ones alike): the entry is removed.
    ToolTypePrefix(&'static str),
    /// An entry of `tools[]` whose `type` is exactly this: the entry is removed.
    ToolType(&'static str),
    /// An entry of `tools[]` of this `type` whose `container` or `environment` has a `network_policy` other than
    /// `disabled`: code the provider runs with outbound access. The entry is removed.
    NetworkedTool(&'static str),
    /// A key inside an entry of `tools[]` (Gemini's Tool objects, which may also hold function declarations): the
    /// key is removed, and the entry when nothing is left in it.
    ToolKey(&'static str),
    /// A `model` whose name contains this: a model that searches by itself. Nothing can be stripped, so the request
    /// is refused under `strip` too.
    Model(&'static str),
    /// A request to a path ending with this whose body has a `network_policy` other than `disabled`: the request
    /// sets up a provider-side sandbox with outbound access. It is the tool, so it is refused under `strip` too.
    NetworkedEndpoint(&'static str),
}

/// One row of the table: which API, what the tool does (for the log and the 403), how to recognise it.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// The API the shape belongs to (`Anthropic Messages`, ...), named in the docs' table.
    pub api: &'static str,
    /// What the tool does, as the log's `stripped` and the 403 name it.
    pub tool: &'static str,
    /// How it is recognised in a request object.
    pub matches: Match,
}

const fn row(api: &'static str, tool: &'static str, matches: Match) -> Shape {
    Shape { api, tool, matches }
}

/// Every provider-side tool leash names. Server tools that fetch nothing from the network are in [`KEPT`] instead.
pub const SHAPES: &[Shape] = &[
    row("Anthropic Messages, OpenAI Responses", "web search", Match::ToolTypePrefix("web_search")),
    row("Anthropic Messages", "web fetch", Match::ToolTypePrefix("web_fetch")),
    row("Anthropic Messages", "remote MCP servers", Match::Key("mcp_servers")),
    row("Anthropic Messages", "remote MCP toolset", Match::ToolType("mcp_toolset")),
    row("OpenAI Responses", "remote MCP server", Match::ToolType("mcp")),
    row("OpenAI Responses", "code interpreter with network access", Match::NetworkedTool("code_interpreter")),
    row("OpenAI Responses", "hosted shell with network access", Match::NetworkedTool("shell")),
    row("OpenAI Containers", "container with network access", Match::NetworkedEndpoint("/containers")),
    row("OpenAI Chat Completions", "web search", Match::Key("web_search_options")),
    row("OpenAI Chat Completions", "web search model", Match::Model("-search-preview")),
    row("OpenAI Chat Completions", "web search model", Match::Model("-search-api")),
    row("Gemini", "remote MCP servers", Match::ToolKey("mcpServers")),
    row("Gemini", "remote MCP servers", Match::ToolKey("mcp_servers")),
    row("Gemini", "Google Search grounding", Match::ToolKey("googleSearch")),
    row("Gemini", "Google Search grounding", Match::ToolKey("google_search")),
    row("Gemini", "Google Search retrieval", Match::ToolKey("googleSearchRetrieval")),
    row("Gemini", "Google Search retrieval", Match::ToolKey("google_search_retrieval")),
    row("Gemini", "URL context", Match::ToolKey("urlContext")),
    row("Gemini", "URL context", Match::ToolKey("url_context")),
    row("Gemini", "Google Maps grounding", Match::ToolKey("googleMaps")),
    row("Gemini", "Google Maps grounding", Match::ToolKey("google_maps")),
    // Vertex AI's spellings, for an operator whose `model_apis` gateway is Vertex: web search by other names, and
    // retrieval (whose `externalApi` calls an endpoint of the caller's choosing).
    row("Gemini on Vertex AI", "enterprise web search", Match::ToolKey("enterpriseWebSearch")),
    row("Gemini on Vertex AI", "enterprise web search", Match::ToolKey("enterprise_web_search")),
    row("Gemini on Vertex AI", "Parallel web search", Match::ToolKey("parallelAiSearch")),
    row("Gemini on Vertex AI", "Parallel web search", Match::ToolKey("parallel_ai_search")),
    row("Gemini on Vertex AI", "Exa web search", Match::ToolKey("exaAiSearch")),
    row("Gemini on Vertex AI", "Exa web search", Match::ToolKey("exa_ai_search")),
    row("Gemini on Vertex AI", "retrieval", Match::ToolKey("retrieval")),
];

/// What a `tools[]` entry that stays looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// An entry whose `type` is this, bare or with a version suffix (`bash_20250124`,
    /// `computer_use_preview_2025_03_11`).
    Type(&'static str),
    /// A key of an entry without `type` (a Gemini Tool object).
    Key(&'static str),
}

/// The `tools[]` entries left alone under `strip` and `refuse`: client-side tools, which the client runs (so leash
/// sees their traffic), and server tools that reach no network. Besides these, an entry without `type` that has an
/// `input_schema` (an Anthropic custom tool) stays. Any other entry — a `type`, or a key of a Gemini Tool object,
/// found in neither this table nor [`SHAPES`] — is taken for a provider-side tool.
pub const KEPT: &[Kept] = &[
    // Function tools: OpenAI's `function` and `custom` (Chat Completions, Responses, Realtime), Anthropic's `custom`.
    Kept::Type("function"),
    Kept::Type("custom"),
    // Anthropic's client tools: computer use, bash, text editor, memory.
    Kept::Type("computer"),
    Kept::Type("bash"),
    Kept::Type("text_editor"),
    Kept::Type("memory"),
    // OpenAI's client tools.
    Kept::Type("computer_use_preview"),
    Kept::Type("local_shell"),
    Kept::Type("apply_patch"),
    // Server tools without network access: Anthropic's code execution (its containers have no internet) and tool
    // search (over the request's own tools); OpenAI's file search (the caller's stores), image generation, and code
    // interpreter and shell when no `network_policy` opens their container (`NetworkedTool` rows come first).
    Kept::Type("code_execution"),
    Kept::Type("tool_search_tool_regex"),
    Kept::Type("tool_search_tool_bm25"),
    Kept::Type("file_search"),
    Kept::Type("image_generation"),
    Kept::Type("code_interpreter"),
    Kept::Type("shell"),
    // Gemini: function declarations, code execution (sandboxed, no network), computer use (the client acts), file
    // search (the caller's stores).
    Kept::Key("functionDeclarations"),
    Kept::Key("function_declarations"),
    Kept::Key("codeExecution"),
    Kept::Key("code_execution"),
    Kept::Key("computerUse"),
    Kept::Key("computer_use"),
    Kept::Key("fileSearch"),
    Kept::Key("file_search"),
];

/// One step from a body towards its request objects.
#[derive(Debug, Clone, Copy)]
pub enum Step {
    /// The value under this key of an object.
    Key(&'static str),
    /// Every element of an array.
    Each,
}

/// Where request objects sit in a body; [`SHAPES`] is applied at each.
pub const PLACES: &[&[Step]] = &[
    // Messages, Chat Completions, Responses, generateContent, cachedContents, Realtime sessions: the body itself.
    &[],
    // Anthropic Message Batches: `requests[].params` is a whole Messages request.
    &[Step::Key("requests"), Step::Each, Step::Key("params")],
    // Gemini batchGenerateContent with inline requests, in both spellings.
    &[
        Step::Key("batch"),
        Step::Key("inputConfig"),
        Step::Key("requests"),
        Step::Key("requests"),
        Step::Each,
        Step::Key("request"),
    ],
    &[
        Step::Key("batch"),
        Step::Key("input_config"),
        Step::Key("requests"),
        Step::Key("requests"),
        Step::Each,
        Step::Key("request"),
    ],
    // OpenAI Realtime client secrets: `session` carries the session's tools.
    &[Step::Key("session")],
];

/// What to do with a model API request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// No provider-side tool: forward the body as it came.
    Unchanged,
    /// These tools were removed; forward `body` instead.
    Stripped {
        /// The body without them (key order kept).
        body: Vec<u8>,
        /// What was removed, one item per tool (the log's `stripped`).
        removed: Vec<String>,
    },
    /// Refuse the request: it asks for these tools (under `refuse`, or ones that cannot be stripped).
    Refused {
        /// The tools asked for, as the 403 names them.
        tools: Vec<String>,
    },
}

/// A body leash cannot check, so refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unreadable {
    /// Not a JSON document (or one deeper than leash reads); the parser's message.
    #[error("the body is not JSON ({0})")]
    NotJson(String),
}

/// Check the body of a model API request to `path` (its query, if any, is ignored) under `mode`. `allow` checks
/// nothing.
pub fn filter(body: &[u8], path: &str, mode: ProviderTools) -> Result<Outcome, Unreadable> {
    if mode == ProviderTools::Allow {
        return Ok(Outcome::Unchanged);
    }
    let Strict(mut root) = serde_json::from_slice(body).map_err(|e| Unreadable::NotJson(e.to_string()))?;
    let mut found = scan_endpoint(&root, path);
    found.extend(scan(&mut root, mode == ProviderTools::Strip));
    let kept: Vec<String> = found.iter().filter(|f| !f.removed).map(|f| f.describe()).collect();
    if found.is_empty() {
        return Ok(Outcome::Unchanged);
    }
    if !kept.is_empty() {
        return Ok(Outcome::Refused { tools: kept });
    }
    let removed = found.iter().map(Found::describe).collect();
    let body = serde_json::to_vec(&root).map_err(|e| Unreadable::NotJson(e.to_string()))?;
    Ok(Outcome::Stripped { body, removed })
}

/// A provider-side tool found in a body.
#[derive(Debug)]
struct Found {
    /// Where: `tools[1]`, `mcp_servers`, `requests[0].params.tools[0].googleSearch`.
    at: String,
    /// The `type` or `model` value that matched, if the key alone does not say it.
    value: Option<String>,
    /// What the tool does and whose it is: a [`Shape`]'s, or [`UNRECOGNISED`].
    what: (&'static str, &'static str),
    removed: bool,
}

/// The description of a `tools[]` entry neither [`SHAPES`] nor [`KEPT`] knows.
const UNRECOGNISED: (&str, &str) = ("unrecognised tool", "not a client-side shape leash knows");

impl Found {
    fn new(at: String, value: Option<String>, shape: &Shape, removed: bool) -> Self {
        Found { at, value, what: (shape.tool, shape.api), removed }
    }

    /// `tools[1] web_search_20250305 (web search, Anthropic Messages, OpenAI Responses)`.
    fn describe(&self) -> String {
        let (tool, api) = self.what;
        match &self.value {
            Some(v) => format!("{} `{v}` ({tool}, {api})", self.at),
            None => format!("{} ({tool}, {api})", self.at),
        }
    }
}

/// A request that is itself a provider-side tool (`NetworkedEndpoint`): never removed, so always refused.
fn scan_endpoint(root: &Value, path: &str) -> Vec<Found> {
    let path = endpoint(path);
    let mut found = Vec::new();
    for shape in SHAPES {
        let Match::NetworkedEndpoint(suffix) = shape.matches else { continue };
        if let Some(policy) = root.get("network_policy").filter(|p| networked(p) && path.ends_with(suffix)) {
            let value = policy.get("type").and_then(Value::as_str).map(str::to_owned);
            found.push(Found::new("network_policy".to_owned(), value, shape, false));
        }
    }
    found
}

/// A path as the API routes it: without its query and a final `/`, percent-decoded, lower-case, so that
/// `/v1/Container%73/?x` cannot pass for another endpoint.
fn endpoint(path: &str) -> String {
    let path = path.split('?').next().unwrap_or_default();
    let mut bytes = Vec::with_capacity(path.len());
    let mut rest = path.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        let hex = tail.get(..2).and_then(|h| std::str::from_utf8(h).ok()).and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b, hex) {
            (b'%', Some(decoded)) => {
                bytes.push(decoded);
                rest = &tail[2..];
            }
            _ => {
                bytes.push(b);
                rest = tail;
            }
        }
    }
    String::from_utf8_lossy(&bytes).trim_end_matches('/').to_ascii_lowercase()
}

/// Whether a `network_policy` lets a sandbox reach the network: anything but `{"type": "disabled"}` (or `null`,
/// which is no policy) does, an allowlist included — its hosts are not leash's.
fn networked(policy: &Value) -> bool {
    !policy.is_null() && policy.get("type").and_then(Value::as_str) != Some("disabled")
}

/// Find every provider-side tool at every place; remove the removable ones when `strip`.
fn scan(root: &mut Value, strip: bool) -> Vec<Found> {
    let mut found = Vec::new();
    for place in PLACES {
        visit(root, place, String::new(), &mut |obj, at| found.extend(scan_request(obj, &at, strip)));
    }
    found
}

/// Call `f` on every object reached from `value` by `steps`, with its path.
fn visit(value: &mut Value, steps: &[Step], at: String, f: &mut dyn FnMut(&mut Map<String, Value>, String)) {
    match (steps.split_first(), value) {
        (None, Value::Object(obj)) => f(obj, at),
        (Some((Step::Key(k), rest)), Value::Object(obj)) => {
            if let Some(inner) = obj.get_mut(*k) {
                visit(inner, rest, join(&at, k), f);
            }
        }
        (Some((Step::Each, rest)), Value::Array(items)) => {
            for (i, item) in items.iter_mut().enumerate() {
                visit(item, rest, format!("{at}[{i}]"), f);
            }
        }
        _ => {}
    }
}

fn join(at: &str, key: &str) -> String {
    match at {
        "" => key.to_owned(),
        _ => format!("{at}.{key}"),
    }
}

/// The tools of one request object: its keys, its `tools[]` entries, its `model`; after a strip, the references
/// to what went.
fn scan_request(obj: &mut Map<String, Value>, at: &str, strip: bool) -> Vec<Found> {
    let mut found = Vec::new();
    for shape in SHAPES {
        match shape.matches {
            Match::Key(key) if obj.contains_key(key) => {
                if strip {
                    obj.shift_remove(key);
                }
                found.push(Found::new(join(at, key), None, shape, strip));
            }
            Match::Model(part) => {
                if let Some(model) = obj.get("model").and_then(Value::as_str).filter(|m| m.contains(part)) {
                    found.push(Found::new(join(at, "model"), Some(model.to_owned()), shape, false));
                }
            }
            _ => {}
        }
    }
    let tools_at = join(at, "tools");
    let emptied = match obj.get_mut("tools") {
        Some(Value::Array(tools)) => scan_tools(tools, &tools_at, strip, &mut found),
        _ => false,
    };
    // A `tools` left empty by stripping goes too: some APIs refuse an empty list where they accept none.
    if emptied {
        obj.shift_remove("tools");
    }
    if strip && !found.is_empty() {
        let gone = found.iter().filter(|f| f.at.starts_with(&tools_at)).filter_map(|f| f.value.as_deref());
        tidy(obj, &gone.collect::<Vec<_>>());
    }
    found
}

/// The entries of a `tools[]` list; true if stripping left it empty.
fn scan_tools(tools: &mut Vec<Value>, at: &str, strip: bool, found: &mut Vec<Found>) -> bool {
    let before = found.len();
    let mut keep = Vec::with_capacity(tools.len());
    for (i, mut entry) in std::mem::take(tools).into_iter().enumerate() {
        let entry_at = format!("{at}[{i}]");
        let drop = match &mut entry {
            Value::Object(tool) => scan_tool(tool, &entry_at, strip, found),
            _ => {
                found.push(Found { at: entry_at, value: None, what: UNRECOGNISED, removed: strip });
                true
            }
        };
        if !(strip && drop) {
            keep.push(entry);
        }
    }
    *tools = keep;
    strip && tools.is_empty() && found.len() > before
}

/// One `tools[]` entry; true if the whole entry is a provider-side tool (or nothing is left of it).
fn scan_tool(tool: &mut Map<String, Value>, at: &str, strip: bool, found: &mut Vec<Found>) -> bool {
    let kind = match tool.get("type") {
        None => return scan_tool_keys(tool, at, strip, found),
        Some(Value::String(kind)) => kind.clone(),
        Some(_) => {
            found.push(Found { at: at.to_owned(), value: None, what: UNRECOGNISED, removed: strip });
            return true;
        }
    };
    let shape = SHAPES.iter().find(|shape| match shape.matches {
        Match::ToolTypePrefix(p) => kind.starts_with(p),
        Match::ToolType(x) => kind == x,
        Match::NetworkedTool(x) => kind == x && ["container", "environment"].iter().any(|k| opens_network(tool, k)),
        _ => false,
    });
    let what = match shape {
        Some(shape) => (shape.tool, shape.api),
        None if KEPT.iter().any(|k| matches!(k, Kept::Type(name) if versioned(&kind, name))) => {
            return scan_tool_keys(tool, at, strip, found);
        }
        None => UNRECOGNISED,
    };
    found.push(Found { at: at.to_owned(), value: Some(kind), what, removed: strip });
    true
}

/// The keys of a `tools[]` entry: a Gemini Tool object's (each key a tool; those not in [`KEPT`] go), or, in an
/// entry with a `type` or an `input_schema`, the tool's own fields (only a [`SHAPES`] key beside them goes). True if
/// something went and nothing is left.
fn scan_tool_keys(tool: &mut Map<String, Value>, at: &str, strip: bool, found: &mut Vec<Found>) -> bool {
    let fields = tool.contains_key("type") || tool.contains_key("input_schema");
    let before = found.len();
    let keys: Vec<String> = tool.keys().cloned().collect();
    for key in keys {
        let shape = SHAPES.iter().find(|s| matches!(s.matches, Match::ToolKey(k) if k == key));
        let what = match shape {
            Some(shape) => (shape.tool, shape.api),
            None if fields || KEPT.iter().any(|k| matches!(k, Kept::Key(n) if *n == key)) => continue,
            None => UNRECOGNISED,
        };
        if strip {
            tool.shift_remove(&key);
        }
        found.push(Found { at: join(at, &key), value: None, what, removed: strip });
    }
    found.len() > before && tool.is_empty()
}

/// Whether the `key` (`container`, `environment`) of a tool opens its sandbox to the network.
fn opens_network(tool: &Map<String, Value>, key: &str) -> bool {
    tool.get(key).and_then(|c| c.get("network_policy")).is_some_and(networked)
}

/// `kind` is `name`, bare or with a version suffix of digits and underscores (`_20250124`, `_2025_03_11`).
fn versioned(kind: &str, name: &str) -> bool {
    let version =
        |v: &str| v.starts_with(|c: char| c.is_ascii_digit()) && v.chars().all(|c| c.is_ascii_digit() || c == '_');
    match kind.strip_prefix(name) {
        Some(rest) => rest.is_empty() || rest.strip_prefix('_').is_some_and(version),
        None => false,
    }
}

/// A tool `type` without its version and `_preview`: `web_search_preview_2025_03_11` → `web_search`, the name its
/// `tool_choice` and its `include` entries (`web_search_call.…`) use.
fn base(kind: &str) -> &str {
    let mut kind = kind;
    while let Some((head, tail)) = kind.rsplit_once('_') {
        match !tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit()) {
            true => kind = head,
            false => break,
        }
    }
    kind.strip_suffix("_preview").unwrap_or(kind)
}

/// After a strip, what in a request object still names a tool that went — `tool_choice`, OpenAI's `include`,
/// Gemini's allowed function names — is removed or rewritten, since the API would answer it with 400. `gone` holds
/// the `type`s of the `tools[]` entries removed.
fn tidy(obj: &mut Map<String, Value>, gone: &[&str]) {
    let left = Left::of(obj.get("tools"));
    if !obj.contains_key("tools") {
        // No tool left: these APIs refuse a tool choice (or its parallel calls, or a tool config) without tools.
        for key in ["tool_choice", "parallel_tool_calls", "toolConfig", "tool_config"] {
            obj.shift_remove(key);
        }
    }
    if obj.get_mut("tool_choice").is_some_and(|choice| !keep_choice(choice, &left)) {
        match obj.get("tool_choice").and_then(anthropic_auto) {
            Some(auto) => obj.insert("tool_choice".to_owned(), auto),
            None => obj.shift_remove("tool_choice"),
        };
    }
    if let Some(Value::Array(include)) = obj.get_mut("include") {
        let before = include.len();
        include.retain(|entry| !entry.as_str().is_some_and(|e| names_gone(e, gone, &left)));
        if before > 0 && include.is_empty() {
            obj.shift_remove("include");
        }
    }
    for (config, calling, allowed) in GEMINI_ALLOWED {
        let Some(Value::Object(config)) = obj.get_mut(config) else { continue };
        let Some(Value::Array(names)) = config.get_mut(calling).and_then(|c| c.get_mut(allowed)) else { continue };
        names.retain(|name| name.as_str().is_none_or(|n| left.names.iter().any(|l| l == n)));
        // An emptied list would allow every function, or none: the calling config goes back to its default.
        if names.is_empty() {
            config.shift_remove(calling);
        }
    }
}

/// Where Gemini lists the functions a call may choose from, in both spellings.
const GEMINI_ALLOWED: [(&str, &str, &str); 2] = [
    ("toolConfig", "functionCallingConfig", "allowedFunctionNames"),
    ("tool_config", "function_calling_config", "allowed_function_names"),
];

/// What is left of a `tools[]` list for references to name: tool and function names, and `type`s by [`base`].
#[derive(Debug, Default)]
struct Left {
    names: Vec<String>,
    bases: Vec<String>,
}

impl Left {
    fn of(tools: Option<&Value>) -> Left {
        let mut left = Left::default();
        for entry in tools.and_then(Value::as_array).into_iter().flatten() {
            if let Some(kind) = entry.get("type").and_then(Value::as_str) {
                left.bases.push(base(kind).to_owned());
            }
            let declared = ["functionDeclarations", "function_declarations"].into_iter().filter_map(|k| entry.get(k));
            let functions = declared.filter_map(Value::as_array).flatten();
            let named = [entry, &entry["function"], &entry["custom"]].into_iter().chain(functions);
            left.names.extend(named.filter_map(|n| n.get("name")?.as_str()).map(str::to_owned));
        }
        left
    }
}

/// Whether a `tool_choice` names only what is left; an OpenAI `allowed_tools` choice is narrowed to what is left.
fn keep_choice(choice: &mut Value, left: &Left) -> bool {
    let Value::Object(c) = choice else { return true };
    if c.get("type").and_then(Value::as_str) != Some("allowed_tools") {
        return names_left(c, left);
    }
    // Responses: `{"type": "allowed_tools", "tools": […]}`;
    // Chat Completions: `{"type": "allowed_tools", "allowed_tools": {"tools": […]}}`.
    let list = match c.get("tools").is_some() {
        true => c.get_mut("tools"),
        false => c.get_mut("allowed_tools").and_then(|a| a.get_mut("tools")),
    };
    let Some(Value::Array(list)) = list else { return true };
    list.retain(|r| r.as_object().is_none_or(|r| names_left(r, left)));
    !list.is_empty()
}

/// Whether one tool choice (or an `allowed_tools` entry) names a tool that is left: Anthropic's `tool` and OpenAI's
/// `function`/`custom` by name, OpenAI's hosted tools (`web_search_preview`, `mcp`, …) by type.
fn names_left(c: &Map<String, Value>, left: &Left) -> bool {
    match c.get("type").and_then(Value::as_str) {
        None | Some("auto" | "any" | "none" | "required") => true,
        Some(kind @ ("tool" | "function" | "custom")) => {
            let name = c.get("name").or_else(|| c.get(kind).and_then(|inner| inner.get("name")));
            name.and_then(Value::as_str).is_some_and(|n| left.names.iter().any(|l| l == n))
        }
        Some(kind) => left.bases.iter().any(|b| b == base(kind)),
    }
}

/// The rewrite of an Anthropic `{"type": "tool", …}` whose tool went: `auto`, keeping `disable_parallel_tool_use`.
/// Other choices are dropped: OpenAI's default with tools is `auto`.
fn anthropic_auto(choice: &Value) -> Option<Value> {
    if choice.get("type").and_then(Value::as_str) != Some("tool") {
        return None;
    }
    let mut auto = Map::new();
    auto.insert("type".to_owned(), Value::String("auto".to_owned()));
    if let Some(v) = choice.get("disable_parallel_tool_use") {
        auto.insert("disable_parallel_tool_use".to_owned(), v.clone());
    }
    Some(Value::Object(auto))
}

/// Whether an OpenAI `include` entry (`web_search_call.action.sources`) asks for the output of a tool type that went
/// and is not left.
fn names_gone(entry: &str, gone: &[&str], left: &Left) -> bool {
    let item = entry.split('.').next().unwrap_or_default();
    let Some(tool) = item.strip_suffix("_output").unwrap_or(item).strip_suffix("_call") else { return false };
    gone.iter().any(|g| base(g) == tool) && !left.bases.iter().any(|b| b == tool)
}

/// A JSON value parsed with duplicate object keys refused.
struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Strict(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut obj = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if obj.contains_key(&key) {
                return Err(de::Error::custom(format_args!("duplicate key `{key}`")));
            }
            let Strict(v) = map.next_value()?;
            obj.insert(key, v);
        }
        Ok(Value::Object(obj))
    }
}

#[cfg(test)]
#[path = "provider_tools/tests.rs"]
mod tests;
