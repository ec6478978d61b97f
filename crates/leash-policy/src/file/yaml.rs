//! YAML text → the raw tree, from `saphyr-parser`'s events, which carry a position for every node.
//!
//! Plain scalars are typed by the YAML 1.2 core schema (`80` is a number, `true` a boolean, `~` nothing); quoted and
//! block scalars are strings. Aliases are expanded (within [`MAX_EXPANDED_NODES`], against alias bombs); tags and
//! several documents in one file are refused, since a policy needs neither.

use std::collections::HashMap;

use saphyr_parser::{Event, Parser, ScalarStyle, Span, StrInput};

use super::raw::{Key, Node, Pos, ScalarKind, Value, MAX_DEPTH};
use super::{PolicyError, PolicyErrorKind};

/// Nodes an alias expansion may produce in total. A policy of 100,000 entries has about that many nodes; an alias
/// bomb would have billions.
const MAX_EXPANDED_NODES: usize = 1_000_000;

/// Parse a whole YAML stream into one tree (an empty stream is a null root).
pub(crate) fn parse(text: &str) -> Result<Node, PolicyError> {
    let mut reader = Reader { parser: Parser::new_from_str(text), anchors: HashMap::new(), expanded: 0 };
    let mut root = None;
    loop {
        let (event, span) = reader.next()?;
        match event {
            Event::StreamStart | Event::DocumentEnd | Event::Nothing => {}
            Event::StreamEnd => break,
            Event::DocumentStart(_) if root.is_some() => {
                return Err(error_at(pos(&span), "more than one YAML document; a policy file holds one"));
            }
            Event::DocumentStart(_) => {
                let (event, span) = reader.next()?;
                root = Some(reader.node(event, span, 0)?);
            }
            _ => return Err(error_at(pos(&span), "unexpected YAML event")),
        }
    }
    Ok(root.unwrap_or(Node { value: Value::Scalar(ScalarKind::Null, String::new()), pos: Pos { line: 1, column: 1 } }))
}

struct Reader<'a> {
    parser: Parser<'a, StrInput<'a>>,
    anchors: HashMap<usize, Node>,
    expanded: usize,
}

impl<'a> Reader<'a> {
    fn next(&mut self) -> Result<(Event<'a>, Span), PolicyError> {
        match self.parser.next_event() {
            Some(Ok(event)) => Ok(event),
            Some(Err(e)) => {
                let at = Pos { line: e.marker().line(), column: e.marker().col() + 1 };
                Err(error_at(at, &format!("not valid YAML: {}", e.info())))
            }
            None => Err(error_at(Pos::default(), "unexpected end of the YAML stream")),
        }
    }

    fn node(&mut self, event: Event<'a>, span: Span, depth: usize) -> Result<Node, PolicyError> {
        let at = pos(&span);
        if depth > MAX_DEPTH {
            return Err(error_at(at, "the document is nested too deeply"));
        }
        let (node, anchor) = match event {
            Event::Scalar(text, style, anchor, tag) => {
                refuse_tag(tag.is_some(), at)?;
                (Node { value: Value::Scalar(scalar_kind(&text, style), text.into_owned()), pos: at }, anchor)
            }
            Event::SequenceStart(anchor, tag) => {
                refuse_tag(tag.is_some(), at)?;
                (Node { value: Value::Seq(self.sequence(depth)?), pos: at }, anchor)
            }
            Event::MappingStart(anchor, tag) => {
                refuse_tag(tag.is_some(), at)?;
                (Node { value: Value::Map(self.mapping(depth)?), pos: at }, anchor)
            }
            Event::Alias(id) => return self.alias(id, at),
            _ => return Err(error_at(at, "unexpected YAML event")),
        };
        if anchor > 0 {
            self.anchors.insert(anchor, node.clone());
        }
        Ok(node)
    }

    fn sequence(&mut self, depth: usize) -> Result<Vec<Node>, PolicyError> {
        let mut items = Vec::new();
        loop {
            match self.next()? {
                (Event::SequenceEnd, _) => return Ok(items),
                (event, span) => items.push(self.node(event, span, depth + 1)?),
            }
        }
    }

    fn mapping(&mut self, depth: usize) -> Result<Vec<(Key, Node)>, PolicyError> {
        let mut entries = Vec::new();
        loop {
            let (event, span) = self.next()?;
            let name = match event {
                Event::MappingEnd => return Ok(entries),
                Event::Scalar(text, _, _, None) => text.into_owned(),
                _ => return Err(error_at(pos(&span), "a mapping key must be a plain string")),
            };
            let key = Key { name, pos: pos(&span) };
            let (event, span) = self.next()?;
            entries.push((key, self.node(event, span, depth + 1)?));
        }
    }

    fn alias(&mut self, id: usize, at: Pos) -> Result<Node, PolicyError> {
        let node = self.anchors.get(&id).cloned().ok_or_else(|| error_at(at, "alias to an unknown anchor"))?;
        self.expanded = self.expanded.saturating_add(count_nodes(&node));
        if self.expanded > MAX_EXPANDED_NODES {
            return Err(error_at(at, "aliases expand to too many nodes"));
        }
        Ok(node)
    }
}

fn count_nodes(node: &Node) -> usize {
    match &node.value {
        Value::Scalar(..) => 1,
        Value::Seq(items) => 1 + items.iter().map(count_nodes).sum::<usize>(),
        Value::Map(entries) => 1 + entries.iter().map(|(_, n)| count_nodes(n)).sum::<usize>(),
    }
}

fn refuse_tag(tagged: bool, at: Pos) -> Result<(), PolicyError> {
    match tagged {
        true => Err(error_at(at, "YAML tags (`!…`) are not supported in a policy")),
        false => Ok(()),
    }
}

/// The YAML 1.2 core schema's resolution of a plain scalar; every other style is a string.
fn scalar_kind(text: &str, style: ScalarStyle) -> ScalarKind {
    if style != ScalarStyle::Plain {
        return ScalarKind::Str;
    }
    match text {
        "" | "~" | "null" | "Null" | "NULL" => ScalarKind::Null,
        "true" | "True" | "TRUE" | "false" | "False" | "FALSE" => ScalarKind::Bool,
        t if is_core_int(t) => ScalarKind::Int,
        t if is_core_float(t) => ScalarKind::Float,
        _ => ScalarKind::Str,
    }
}

fn is_core_int(t: &str) -> bool {
    let digits = |s: &str, ok: fn(&u8) -> bool| !s.is_empty() && s.as_bytes().iter().all(ok);
    if let Some(hex) = t.strip_prefix("0x") {
        return digits(hex, u8::is_ascii_hexdigit);
    }
    if let Some(oct) = t.strip_prefix("0o") {
        return digits(oct, |b| (b'0'..=b'7').contains(b));
    }
    digits(t.strip_prefix(['-', '+']).unwrap_or(t), u8::is_ascii_digit)
}

fn is_core_float(t: &str) -> bool {
    let specials = [".inf", ".Inf", ".INF", ".nan", ".NaN", ".NAN"];
    let unsigned = t.strip_prefix(['-', '+']).unwrap_or(t);
    if specials.contains(&unsigned) {
        return true;
    }
    let (mantissa, exponent) = match unsigned.split_once(['e', 'E']) {
        Some((m, e)) => (m, Some(e.strip_prefix(['-', '+']).unwrap_or(e))),
        None => (unsigned, None),
    };
    let (whole, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = all_digits(whole) && all_digits(frac) && !(whole.is_empty() && frac.is_empty());
    let exponent_ok = match exponent {
        None => true,
        Some(e) => !e.is_empty() && all_digits(e),
    };
    mantissa_ok && exponent_ok
}

fn pos(span: &Span) -> Pos {
    Pos { line: span.start.line(), column: span.start.col() + 1 }
}

fn error_at(at: Pos, message: &str) -> PolicyError {
    super::at_position(PolicyErrorKind::Syntax, at, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<ScalarKind> {
        let Value::Seq(items) = parse(text).unwrap().value else {
            return Vec::new();
        };
        items.iter().map(|n| if let Value::Scalar(k, _) = n.value { k } else { ScalarKind::Datetime }).collect()
    }

    #[test]
    fn plain_scalars_follow_the_core_schema() {
        use ScalarKind::*;
        assert_eq!(
            kinds("[80, '80', 0x50, 1.5, 1.2.3.4, true, ~, a.b, -3, 1e3, .inf]"),
            [Int, Str, Int, Float, Str, Bool, Null, Str, Int, Float, Float]
        );
    }

    #[test]
    fn positions_are_one_based() {
        let root = parse("network:\n  mode: allowlist\n").unwrap();
        let Value::Map(top) = root.value else { panic!("not a map") };
        assert_eq!(top[0].0.pos, Pos { line: 1, column: 1 });
        let Value::Map(net) = &top[0].1.value else { panic!("not a map") };
        assert_eq!((net[0].0.pos, net[0].1.pos), (Pos { line: 2, column: 3 }, Pos { line: 2, column: 9 }));
    }

    #[test]
    fn refusals() {
        assert!(parse("a: 1\n---\nb: 2\n").unwrap_err().message.contains("more than one"));
        assert!(parse("a: !!str 1\n").unwrap_err().message.contains("tags"));
        assert!(parse("a: [\n").unwrap_err().message.starts_with("not valid YAML"));
        assert!(parse(&"[".repeat(100)).is_err());
        let bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n\
                    c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n\
                    e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n";
        assert!(parse(bomb).unwrap_err().message.contains("too many"));
        assert!(parse("a: &x [1]\nb: *x\n").is_ok());
    }
}
