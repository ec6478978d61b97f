//! Finding the `allowed_hosts` list in YAML text and appending to it: a block sequence (`- a` lines) gets a line
//! like its last item's, a flow sequence (`[a, b]`) gets `, new`, and a block mapping without the key gets one
//! after its `mode` line, indented as the mapping's keys are.
//!
//! The text is walked through `saphyr-parser`'s events again, this time keeping byte spans and styles (the raw tree
//! keeps neither). Anchors and aliases are refused: an entry added to an anchored list would reach every alias too.

use saphyr_parser::{Event, Parser, ScalarStyle, Span as Marks, StrInput};

use super::{after_line, append_bracketed, line_start, newline_of, splice, Bracketed, EditError, Span};

/// `text` with `entry` appended to the `allowed_hosts` of the mapping at `path`.
pub(super) fn append(text: &str, path: &[&str], entry: &str) -> Result<String, EditError> {
    let root = outline(text)?;
    let mut network = &root;
    let mut parent_key = None;
    for key in path {
        let (k, v) = network.entry(key).ok_or_else(|| unsupported("the section is not where it was read"))?;
        parent_key = Some(k);
        network = v;
    }
    match network.entry("allowed_hosts") {
        Some((_, list)) => append_to_list(text, list, entry),
        None => add_key(text, network, parent_key, entry),
    }
}

/// A node with its byte span: for a collection, from its start to its end event.
struct YNode {
    kind: Kind,
    span: Span,
}

enum Kind {
    Scalar(String, ScalarStyle),
    Seq(Vec<YNode>),
    Map(Vec<(YNode, YNode)>),
}

impl YNode {
    fn entry(&self, key: &str) -> Option<(&YNode, &YNode)> {
        match &self.kind {
            Kind::Map(pairs) => pairs.iter().find(|(k, _)| matches!(&k.kind, Kind::Scalar(t, _) if t == key)),
            _ => None,
        }
        .map(|(k, v)| (k, v))
    }
}

fn append_to_list(text: &str, list: &YNode, entry: &str) -> Result<String, EditError> {
    let Kind::Seq(items) = &list.kind else {
        return Err(unsupported("`allowed_hosts` is not a list"));
    };
    let mut spans = Vec::new();
    for item in items {
        match &item.kind {
            Kind::Scalar(_, ScalarStyle::Plain | ScalarStyle::SingleQuoted | ScalarStyle::DoubleQuoted) => {
                spans.push(item.span)
            }
            _ => return Err(unsupported("an `allowed_hosts` item is not a one-line string")),
        }
    }
    let rendered = render(entry, items.last().map(|i| &i.kind));
    match text.as_bytes().get(list.span.start) {
        Some(b'[') => {
            let close = list.span.end;
            if text.as_bytes().get(close) != Some(&b']') {
                return Err(unsupported("the `allowed_hosts` list has no closing `]` where expected"));
            }
            append_bracketed(text, &Bracketed { open: list.span.start, close, items: spans }, &rendered)
        }
        // A block sequence starts at its first `-`, or at its first item when its dashes are not indented.
        _ => append_block(text, &spans, &rendered),
    }
}

/// A new `- entry` line after the last item's line, with the same indentation and spacing.
fn append_block(text: &str, items: &[Span], rendered: &str) -> Result<String, EditError> {
    let last = items.last().ok_or_else(|| unsupported("the `allowed_hosts` list is empty"))?;
    let item_text = text.get(last.start..last.end).unwrap_or("\n");
    let prefix = text.get(line_start(text, last.start)..last.start).unwrap_or("");
    let dash_line = prefix
        .trim_start_matches(' ')
        .strip_prefix('-')
        .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|b| b == b' '));
    if item_text.contains('\n') || !dash_line {
        return Err(unsupported("the last `allowed_hosts` item is not on a `- host` line of its own"));
    }
    let (at, lines) = after_line(text, last.end, &format!("{prefix}{rendered}{}", newline_of(text)));
    Ok(splice(text, &[(at, at, lines)]))
}

/// `allowed_hosts:` with one item, after the `mode` line of a block mapping, keys indented as the mapping's are; the
/// item's dash placed as another list's in the mapping, else one indentation step (the mapping's) deeper.
fn add_key(text: &str, network: &YNode, parent_key: Option<&YNode>, entry: &str) -> Result<String, EditError> {
    let Kind::Map(pairs) = &network.kind else {
        return Err(unsupported("the network section is not a mapping"));
    };
    if text.as_bytes().get(network.span.start) == Some(&b'{') {
        return Err(unsupported("the network section is a `{...}` mapping without `allowed_hosts`"));
    }
    let (mode_key, mode) = network.entry("mode").ok_or_else(|| unsupported("the network section has no `mode`"))?;
    let flow_scalar =
        matches!(&mode.kind, Kind::Scalar(_, s) if *s != ScalarStyle::Literal && *s != ScalarStyle::Folded);
    let one_line = flow_scalar && text.get(mode.span.start..mode.span.end).is_some_and(|t| !t.contains('\n'));
    let indent = text.get(line_start(text, mode_key.span.start)..mode_key.span.start).unwrap_or("x");
    if !one_line || !indent.bytes().all(|b| b == b' ') {
        return Err(unsupported("the network section's `mode` is not a `mode: word` line of its own"));
    }
    let dash = sibling_dash(text, pairs).unwrap_or_else(|| {
        let parent_indent = parent_key.map_or(0, |k| k.span.start - line_start(text, k.span.start));
        let step = (indent.len().saturating_sub(parent_indent)).max(2);
        format!("{indent}{}- ", " ".repeat(step))
    });
    let nl = newline_of(text);
    let lines = format!("{indent}allowed_hosts:{nl}{dash}{}{nl}", render(entry, None));
    let (at, lines) = after_line(text, mode.span.end, &lines);
    Ok(splice(text, &[(at, at, lines)]))
}

/// The `   - ` before the first item of a block sequence in the mapping, if one has such a list.
fn sibling_dash(text: &str, pairs: &[(YNode, YNode)]) -> Option<String> {
    pairs.iter().find_map(|(_, value)| match &value.kind {
        Kind::Seq(items) if text.as_bytes().get(value.span.start) != Some(&b'[') => {
            let first = items.first()?;
            let prefix = text.get(line_start(text, first.span.start)..first.span.start)?;
            let ok = prefix.trim_start_matches(' ').strip_prefix('-').is_some_and(|r| r.bytes().all(|b| b == b' '));
            (ok && prefix.ends_with(' ')).then(|| prefix.to_owned())
        }
        _ => None,
    })
}

/// The entry quoted as the list's last item is; plain when that is how YAML reads it back as the same string.
fn render(entry: &str, like: Option<&Kind>) -> String {
    match like {
        Some(Kind::Scalar(_, ScalarStyle::SingleQuoted)) => format!("'{entry}'"),
        Some(Kind::Scalar(_, ScalarStyle::DoubleQuoted)) => format!("\"{entry}\""),
        _ if reads_as_plain_string(entry) => entry.to_owned(),
        _ => format!("\"{entry}\""),
    }
}

/// Whether `entry`, written plain, is the string `entry` (not a number, a boolean or nothing). Host entries are
/// letters, digits, `-` and `.`; only a bare number could read otherwise, and the verification would catch it too.
fn reads_as_plain_string(entry: &str) -> bool {
    let dotted_words = entry.split('.').filter(|p| !p.is_empty()).count();
    entry.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
        && !entry.starts_with('-')
        && (entry.bytes().any(|b| b.is_ascii_alphabetic()) || dotted_words > 2)
}

/// Every node of the document with byte spans. The text parsed as a policy already, so it is one document nested
/// no deeper than the raw tree allows.
fn outline(text: &str) -> Result<YNode, EditError> {
    let offsets: Vec<usize> = text.char_indices().map(|(i, _)| i).chain([text.len()]).collect();
    let mut walker = Walker { parser: Parser::new_from_str(text), offsets };
    loop {
        let (event, marks) = walker.next()?;
        match event {
            Event::StreamStart | Event::DocumentStart(_) | Event::Nothing => {}
            Event::StreamEnd | Event::DocumentEnd => return Err(unsupported("the file holds no mapping")),
            event => return walker.node(event, marks),
        }
    }
}

struct Walker<'a> {
    parser: Parser<'a, StrInput<'a>>,
    /// The byte offset of each character (the parser counts characters), and the text's length last.
    offsets: Vec<usize>,
}

impl<'a> Walker<'a> {
    fn next(&mut self) -> Result<(Event<'a>, Marks), EditError> {
        match self.parser.next_event() {
            Some(Ok(event)) => Ok(event),
            _ => Err(unsupported("the YAML could not be read again")),
        }
    }

    fn byte(&self, marker: saphyr_parser::Marker) -> usize {
        self.offsets.get(marker.index()).copied().unwrap_or(usize::MAX)
    }

    fn node(&mut self, event: Event<'a>, marks: Marks) -> Result<YNode, EditError> {
        let start = self.byte(marks.start);
        let (kind, end) = match event {
            Event::Scalar(_, _, anchor, _) | Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _)
                if anchor > 0 =>
            {
                return Err(anchors())
            }
            Event::Alias(_) => return Err(anchors()),
            Event::Scalar(t, style, _, _) => (Kind::Scalar(t.into_owned(), style), self.byte(marks.end)),
            Event::SequenceStart(..) => {
                let mut items = Vec::new();
                let end = loop {
                    match self.next()? {
                        (Event::SequenceEnd, m) => break self.byte(m.start),
                        (e, m) => items.push(self.node(e, m)?),
                    }
                };
                (Kind::Seq(items), end)
            }
            Event::MappingStart(..) => self.mapping()?,
            _ => return Err(unsupported("the YAML holds an event leash does not edit")),
        };
        Ok(YNode { kind, span: Span { start, end } })
    }

    fn mapping(&mut self) -> Result<(Kind, usize), EditError> {
        let mut pairs = Vec::new();
        loop {
            let (event, marks) = self.next()?;
            if let Event::MappingEnd = event {
                return Ok((Kind::Map(pairs), self.byte(marks.start)));
            }
            let key = self.node(event, marks)?;
            let (event, marks) = self.next()?;
            pairs.push((key, self.node(event, marks)?));
        }
    }
}

fn anchors() -> EditError {
    unsupported("the file uses YAML anchors or aliases (`&name`, `*name`), so one list may stand for several")
}

fn unsupported(why: &str) -> EditError {
    EditError::Unsupported(format!("leash does not edit this policy file: {why}; add the entry by hand"))
}
