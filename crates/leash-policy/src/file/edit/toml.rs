//! Finding the `allowed_hosts` array in TOML text and appending to it: the array's own spans locate it (on one
//! line or several, trailing comma or not, comments kept), and a `[network]` table without the key gets
//! `allowed_hosts = ["new"]` after its `mode` line.
//!
//! The network section is found as `load` finds it: `network` or `profiles.<name>.network`, a header table, an
//! inline table or dotted keys. Only a header table gets a new key; in the other forms the key is refused.

use toml_edit::{Document, Item, Table, Value};

use super::{after_line, append_bracketed, leading_space, line_start, newline_of, splice, Bracketed, EditError, Span};

/// `text` with `entry` appended to the `allowed_hosts` of the table at `path`.
pub(super) fn append(text: &str, path: &[&str], entry: &str) -> Result<String, EditError> {
    let doc = Document::parse(text).map_err(|_| unsupported("the TOML could not be read again"))?;
    let mut item = doc.as_item();
    for key in path {
        item = item.get(key).ok_or_else(|| unsupported("the section is not where it was read"))?;
    }
    match item.get("allowed_hosts") {
        Some(Item::Value(Value::Array(array))) => {
            let span = |v: &Value| v.span().map(|r| Span { start: r.start, end: r.end });
            let items = array.iter().map(span).collect::<Option<Vec<_>>>();
            let whole = array.span().zip(items);
            let (range, items) = whole.ok_or_else(|| unsupported("the `allowed_hosts` array has no position"))?;
            let rendered = render(entry, text, items.last());
            let list = Bracketed { open: range.start, close: range.end.saturating_sub(1), items };
            if text.as_bytes().get(list.open) != Some(&b'[') || text.as_bytes().get(list.close) != Some(&b']') {
                return Err(unsupported("the `allowed_hosts` array is not where its brackets are"));
            }
            append_bracketed(text, &list, &rendered)
        }
        Some(_) => Err(unsupported("`allowed_hosts` is not an array")),
        None => match item {
            Item::Table(table) if !table.is_dotted() && !table.is_implicit() => add_key(text, table, entry),
            _ => Err(unsupported("the network section is not a `[network]` table of its own")),
        },
    }
}

/// `allowed_hosts = ["entry"]` on a line after the table's `mode` line, indented as that line is.
fn add_key(text: &str, table: &Table, entry: &str) -> Result<String, EditError> {
    let key_span = table.key("mode").and_then(|k| k.span());
    let value_span = table.get("mode").and_then(|m| m.span());
    let (key_span, value_span) =
        key_span.zip(value_span).ok_or_else(|| unsupported("the network table has no `mode` line"))?;
    let start = line_start(text, key_span.start);
    let indent = leading_space(text, start);
    if start + indent.len() != key_span.start || text.get(key_span.clone()) != Some("mode") {
        return Err(unsupported("the network table's `mode` is not a `mode = \"word\"` line of its own"));
    }
    let line = format!("{indent}allowed_hosts = [{}]{}", render(entry, text, None), newline_of(text));
    let (at, lines) = after_line(text, value_span.end, &line);
    Ok(splice(text, &[(at, at, lines)]))
}

/// The entry as a string quoted as the last item is: `'literal'` or `"basic"` (host entries need no escapes).
fn render(entry: &str, text: &str, like: Option<&Span>) -> String {
    match like.and_then(|s| text.as_bytes().get(s.start)) {
        Some(b'\'') => format!("'{entry}'"),
        _ => format!("\"{entry}\""),
    }
}

fn unsupported(why: &str) -> EditError {
    EditError::Unsupported(format!("leash does not edit this policy file: {why}; add the entry by hand"))
}
