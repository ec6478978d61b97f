//! Provider-side tools in model API request bodies: the JSON shapes with which the Anthropic, OpenAI and
//! Gemini APIs ask the provider to fetch the web on the caller's behalf — web search, web fetch, remote MCP servers,
//! search grounding — found, and stripped or refused. Pure: body bytes in, an [`Outcome`] out; no I/O.
//!
//! The shapes are data: [`SHAPES`] says what a provider-side tool looks like inside one request object, and
//! [`PLACES`] where request objects sit in a body (the body itself, or inside a batch or session envelope). Adding
//! a tool is one row. Everything else in a body is left as it is: function (client-side) tools, messages, schemas.
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
    /// A key inside an entry of `tools[]` (Gemini's Tool objects, which may also hold function declarations): the
    /// key is removed, and the entry when nothing is left in it.
    ToolKey(&'static str),
    /// A `model` whose name contains this: a model that searches by itself. Nothing can be stripped, so the request
    /// is refused under `strip` too.
    Model(&'static str),
}

/// One row of the table: which API, what the tool does (for the log and the 403), how to recognise it.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub api: &'static str,
    pub tool: &'static str,
    pub matches: Match,
}

const fn row(api: &'static str, tool: &'static str, matches: Match) -> Shape {
    Shape { api, tool, matches }
}

/// Every provider-side tool leash recognises. Server tools that fetch nothing from the network (Anthropic's and
/// OpenAI's code execution, which run without internet access; file search over the caller's own stores) are not
/// listed: they cannot reach a host the policy refuses.
pub const SHAPES: &[Shape] = &[
    row("Anthropic Messages, OpenAI Responses", "web search", Match::ToolTypePrefix("web_search")),
    row("Anthropic Messages", "web fetch", Match::ToolTypePrefix("web_fetch")),
    row("Anthropic Messages", "remote MCP servers", Match::Key("mcp_servers")),
    row("Anthropic Messages", "remote MCP toolset", Match::ToolType("mcp_toolset")),
    row("OpenAI Responses", "remote MCP server", Match::ToolType("mcp")),
    row("OpenAI Chat Completions", "web search", Match::Key("web_search_options")),
    row("OpenAI Chat Completions", "web search model", Match::Model("-search-preview")),
    row("OpenAI Chat Completions", "web search model", Match::Model("-search-api")),
    row("Gemini", "Google Search grounding", Match::ToolKey("googleSearch")),
    row("Gemini", "Google Search grounding", Match::ToolKey("google_search")),
    row("Gemini", "Google Search retrieval", Match::ToolKey("googleSearchRetrieval")),
    row("Gemini", "Google Search retrieval", Match::ToolKey("google_search_retrieval")),
    row("Gemini", "URL context", Match::ToolKey("urlContext")),
    row("Gemini", "URL context", Match::ToolKey("url_context")),
    // Vertex AI's spellings, for an operator whose `model_apis` gateway is Vertex: web search by another name, and
    // retrieval (whose `externalApi` calls an endpoint of the caller's choosing).
    row("Gemini on Vertex AI", "enterprise web search", Match::ToolKey("enterpriseWebSearch")),
    row("Gemini on Vertex AI", "enterprise web search", Match::ToolKey("enterprise_web_search")),
    row("Gemini on Vertex AI", "retrieval", Match::ToolKey("retrieval")),
];

/// One step from a body towards its request objects.
#[derive(Debug, Clone, Copy)]
pub enum Step {
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
    Stripped { body: Vec<u8>, removed: Vec<String> },
    /// Refuse the request: it asks for these tools (under `refuse`, or ones that cannot be stripped).
    Refused { tools: Vec<String> },
}

/// A body leash cannot check, so refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unreadable {
    #[error("the body is not JSON ({0})")]
    NotJson(String),
}

/// Check a model API request body under `mode`. `allow` checks nothing.
pub fn filter(body: &[u8], mode: ProviderTools) -> Result<Outcome, Unreadable> {
    if mode == ProviderTools::Allow {
        return Ok(Outcome::Unchanged);
    }
    let Strict(mut root) = serde_json::from_slice(body).map_err(|e| Unreadable::NotJson(e.to_string()))?;
    let found = scan(&mut root, mode == ProviderTools::Strip);
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
    shape: &'static Shape,
    removed: bool,
}

impl Found {
    /// `tools[1] web_search_20250305 (web search, Anthropic Messages, OpenAI Responses)`.
    fn describe(&self) -> String {
        let (tool, api) = (self.shape.tool, self.shape.api);
        match &self.value {
            Some(v) => format!("{} `{v}` ({tool}, {api})", self.at),
            None => format!("{} ({tool}, {api})", self.at),
        }
    }
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

/// The tools of one request object: its keys, its `tools[]` entries, its `model`.
fn scan_request(obj: &mut Map<String, Value>, at: &str, strip: bool) -> Vec<Found> {
    let mut found = Vec::new();
    for shape in SHAPES {
        match shape.matches {
            Match::Key(key) if obj.contains_key(key) => {
                if strip {
                    obj.shift_remove(key);
                }
                found.push(Found { at: join(at, key), value: None, shape, removed: strip });
            }
            Match::Model(part) => {
                if let Some(model) = obj.get("model").and_then(Value::as_str).filter(|m| m.contains(part)) {
                    found.push(Found { at: join(at, "model"), value: Some(model.to_owned()), shape, removed: false });
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
            _ => false,
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
    let kind = tool.get("type").and_then(Value::as_str).map(str::to_owned);
    for shape in SHAPES {
        let whole = match (shape.matches, kind.as_deref()) {
            (Match::ToolTypePrefix(p), Some(t)) => t.starts_with(p),
            (Match::ToolType(x), Some(t)) => t == x,
            _ => false,
        };
        if whole {
            found.push(Found { at: at.to_owned(), value: kind, shape, removed: strip });
            return true;
        }
    }
    let mut any = false;
    for shape in SHAPES {
        if let Match::ToolKey(key) = shape.matches {
            if tool.contains_key(key) {
                if strip {
                    tool.shift_remove(key);
                }
                found.push(Found { at: join(at, key), value: None, shape, removed: strip });
                any = true;
            }
        }
    }
    any && tool.is_empty()
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
