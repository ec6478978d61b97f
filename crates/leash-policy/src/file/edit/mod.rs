//! Editing a policy file's text: append one entry to the `allowed_hosts` list of the network section a run uses
//! (what an "always" answer in ask mode writes), keeping every other byte — comments, blank lines, key order,
//! quoting — as it was.
//!
//! Each format finds the list in its own syntax (`yaml`, `toml`) and splices text in through the shared helpers
//! below. Then the result is parsed again and compared with the original's tree plus the one entry: an edit that
//! would mean anything else is refused, never returned. Shapes the editor does not handle (YAML anchors and
//! aliases, flow mappings without the key, block scalars, dotted TOML keys without the key) are refused with a
//! message that says to add the entry by hand.

use std::fmt;

use super::raw::{Key, Node, ScalarKind, Value};
use super::{entries, Format, PolicyError};

mod toml;
mod yaml;

/// Why an edit was refused. The file is never half-edited: the caller keeps its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EditError {
    /// The text does not parse as the format (or uses what a policy refuses, such as YAML tags).
    Syntax(PolicyError),
    /// The entry is not one `allowed_hosts` accepts.
    BadEntry(String),
    /// The section to edit is not there (no `network`, an unknown profile), or it is a blocklist, which has no
    /// `allowed_hosts`.
    NoSection(String),
    /// The file is written in a shape the editor does not change safely; the message says which and where.
    Unsupported(String),
}

impl fmt::Display for EditError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EditError::Syntax(e) => write!(f, "cannot read the policy: {e}"),
            EditError::BadEntry(m) | EditError::NoSection(m) | EditError::Unsupported(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for EditError {}

/// `text` with `entry` (`api.example.com` or `.example.com`) appended to the `allowed_hosts` list of the network
/// section `profile` names (`profiles.<name>.network`; the top-level `network` if None) — the section
/// [`load`](super::load) builds the run's policy from. The key is added when the section has none. Every other byte
/// is kept. An entry already listed, spelled exactly so, returns the text unchanged.
pub fn allow_host(text: &str, format: Format, profile: Option<&str>, entry: &str) -> Result<String, EditError> {
    if let Err(e) = entries::host_entry(entry) {
        return Err(EditError::BadEntry(format!("`{entry}` is not an allowed_hosts entry: {}", e.message)));
    }
    let old = parse(text, format)?;
    let path = section_path(profile);
    let network = find_network(&old, &path)?;
    if listed(network, entry)? {
        return Ok(text.to_owned());
    }
    let new = match format {
        Format::Yaml => yaml::append(text, &path, entry)?,
        Format::Toml => toml::append(text, &path, entry)?,
        Format::Json => {
            let why = "a JSON policy is not edited in place (JSON keeps no comments or layout to preserve): add the \
                       entry by hand, or keep the policy in YAML";
            return Err(EditError::Unsupported(why.to_owned()));
        }
    };
    verify(&old, &new, format, &path, entry)?;
    Ok(new)
}

/// The keys from the document's root to the network section.
fn section_path(profile: Option<&str>) -> Vec<&str> {
    match profile {
        None => vec!["network"],
        Some(name) => vec!["profiles", name, "network"],
    }
}

fn parse(text: &str, format: Format) -> Result<Node, EditError> {
    format.parse(text).map_err(EditError::Syntax)
}

/// The value under `key` in a mapping node, if the node is one and has it.
fn get<'n>(node: &'n Node, key: &str) -> Option<&'n Node> {
    match &node.value {
        Value::Map(pairs) => pairs.iter().find(|(k, _)| k.name == key).map(|(_, v)| v),
        _ => None,
    }
}

fn find_network<'n>(root: &'n Node, path: &[&str]) -> Result<&'n Node, EditError> {
    let mut node = root;
    for key in path {
        node = get(node, key).ok_or_else(|| EditError::NoSection(format!("the policy has no `{}`", path.join("."))))?;
    }
    if !matches!(node.value, Value::Map(_)) {
        return Err(EditError::NoSection(format!("`{}` is not a mapping", path.join("."))));
    }
    match get(node, "mode").map(|m| &m.value) {
        Some(Value::Scalar(ScalarKind::Str, mode)) if mode == "blocklist" => {
            Err(EditError::NoSection(format!("`{}` is a blocklist; it has no allowed_hosts to add to", path.join("."))))
        }
        Some(Value::Scalar(ScalarKind::Str, _)) => Ok(node),
        _ => Err(EditError::NoSection(format!("`{}` has no `mode`", path.join(".")))),
    }
}

/// Whether `entry` is in the section's `allowed_hosts` already; an `allowed_hosts` that is not a list is refused.
fn listed(network: &Node, entry: &str) -> Result<bool, EditError> {
    match get(network, "allowed_hosts").map(|n| &n.value) {
        None => Ok(false),
        Some(Value::Seq(items)) => {
            Ok(items.iter().any(|i| matches!(&i.value, Value::Scalar(ScalarKind::Str, t) if t == entry)))
        }
        Some(_) => Err(EditError::Unsupported("`allowed_hosts` is not a list".to_owned())),
    }
}

/// Parse the new text and compare it with the old tree plus the entry, positions aside.
fn verify(old: &Node, new_text: &str, format: Format, path: &[&str], entry: &str) -> Result<(), EditError> {
    let unsafe_edit = || {
        EditError::Unsupported(format!(
            "adding `{entry}` to `{}.allowed_hosts` would change more than that list in this file; add it by hand",
            path.join(".")
        ))
    };
    let new = parse(new_text, format).map_err(|_| unsafe_edit())?;
    let mut expected = old.clone();
    append_in_tree(&mut expected, path, entry);
    match same(&expected, &new) {
        true => Ok(()),
        false => Err(unsafe_edit()),
    }
}

/// The tree `old` would be with `entry` at the end of the section's `allowed_hosts` (the key added if missing).
fn append_in_tree(node: &mut Node, path: &[&str], entry: &str) {
    let Value::Map(pairs) = &mut node.value else { return };
    let item = Node { value: Value::Scalar(ScalarKind::Str, entry.to_owned()), pos: node.pos };
    match path.split_first() {
        Some((first, rest)) => {
            if let Some((_, child)) = pairs.iter_mut().find(|(k, _)| k.name == *first) {
                append_in_tree(child, rest, entry);
            }
        }
        None => match pairs.iter_mut().find(|(k, _)| k.name == "allowed_hosts") {
            Some((_, Node { value: Value::Seq(items), .. })) => items.push(item),
            Some(_) => {}
            None => {
                let key = Key { name: "allowed_hosts".to_owned(), pos: node.pos };
                pairs.push((key, Node { value: Value::Seq(vec![item]), pos: node.pos }));
            }
        },
    }
}

/// Equal values, positions aside; a mapping's keys compared in name order (formats may list them differently).
fn same(a: &Node, b: &Node) -> bool {
    match (&a.value, &b.value) {
        (Value::Scalar(ka, ta), Value::Scalar(kb, tb)) => ka == kb && ta == tb,
        (Value::Seq(xs), Value::Seq(ys)) => xs.len() == ys.len() && xs.iter().zip(ys).all(|(x, y)| same(x, y)),
        (Value::Map(xs), Value::Map(ys)) => {
            let (xs, ys) = (by_name(xs), by_name(ys));
            xs.len() == ys.len() && xs.iter().zip(&ys).all(|((kx, x), (ky, y))| kx == ky && same(x, y))
        }
        _ => false,
    }
}

fn by_name(pairs: &[(Key, Node)]) -> Vec<(&str, &Node)> {
    let mut sorted: Vec<_> = pairs.iter().map(|(k, n)| (k.name.as_str(), n)).collect();
    sorted.sort_by_key(|(name, _)| *name);
    sorted
}

/// A byte range of the text: one list item, quotes included.
#[derive(Debug, Clone, Copy)]
struct Span {
    start: usize,
    end: usize,
}

/// A bracketed list, `[a, b]` on one line or several: YAML's flow sequence and TOML's array have the same shape.
struct Bracketed {
    /// The offset of `[`.
    open: usize,
    /// The offset of `]`.
    close: usize,
    items: Vec<Span>,
}

/// `text` with `rendered` appended to the bracketed list. On one line: `, new` after the last item (before a
/// trailing comma, which stays). Over several: a new line after the last item's, indented like it, with a comma
/// after the last item if it had none, and one after the new item if the last had one.
fn append_bracketed(text: &str, list: &Bracketed, rendered: &str) -> Result<String, EditError> {
    let Some(last) = list.items.last() else {
        let inside = text.get(list.open + 1..list.close).unwrap_or("");
        if !inside.chars().all(|c| c == ' ' || c == '\t') {
            return Err(EditError::Unsupported("the empty `allowed_hosts` list spans lines or holds comments".into()));
        }
        return Ok(splice(text, &[(list.open + 1, list.close, rendered.to_owned())]));
    };
    let after = text.get(last.end..list.close).unwrap_or("");
    if !after.contains('\n') {
        return Ok(splice(text, &[(last.end, last.end, format!(", {rendered}"))]));
    }
    let trailing_comma = after.trim_start_matches([' ', '\t']).starts_with(',');
    let indent = leading_space(text, line_start(text, last.start));
    let comma = if trailing_comma { "," } else { "" };
    let (at, line) = after_line(text, last.end, &format!("{indent}{rendered}{comma}{}", newline_of(text)));
    let mut edits = vec![(at, at, line)];
    if !trailing_comma {
        edits.insert(0, (last.end, last.end, ",".to_owned()));
    }
    Ok(splice(text, &edits))
}

/// Apply replacements `(from, to, with)`, given in increasing order and not overlapping.
fn splice(text: &str, edits: &[(usize, usize, String)]) -> String {
    let mut out = String::with_capacity(text.len() + 64);
    let mut at = 0;
    for (from, to, with) in edits {
        out.push_str(text.get(at..*from).unwrap_or(""));
        out.push_str(with);
        at = *to;
    }
    out.push_str(text.get(at..).unwrap_or(""));
    out
}

/// The offset just after the newline ending the line that holds `at` (the text's length on the last line).
fn end_of_line(text: &str, at: usize) -> usize {
    text.get(at..).and_then(|rest| rest.find('\n')).map_or(text.len(), |i| at + i + 1)
}

fn line_start(text: &str, at: usize) -> usize {
    text.get(..at).and_then(|before| before.rfind('\n')).map_or(0, |i| i + 1)
}

/// The spaces and tabs a line starts with.
fn leading_space(text: &str, start: usize) -> &str {
    let line = text.get(start..).unwrap_or("");
    let width = line.len() - line.trim_start_matches([' ', '\t']).len();
    &line[..width]
}

/// The file's line ending: CRLF if it uses one, else LF.
fn newline_of(text: &str) -> &'static str {
    match text.contains("\r\n") {
        true => "\r\n",
        false => "\n",
    }
}

/// Text to insert after the line holding `at`: preceded by a newline when that line is the file's last and has none.
fn after_line(text: &str, at: usize, lines: &str) -> (usize, String) {
    let end = end_of_line(text, at);
    let lead = if end == text.len() && !text.ends_with('\n') { newline_of(text) } else { "" };
    (end, format!("{lead}{lines}"))
}

#[cfg(test)]
mod tests;
