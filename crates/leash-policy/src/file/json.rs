//! JSON text → the raw tree. A JSON document is also a YAML 1.2 document meaning the same thing (every string
//! quoted, numbers, `true`/`false`/`null` typed alike), so the YAML reader builds the tree, with its positions; what
//! JSON alone refuses (comments, unquoted strings, trailing commas, block style) is refused first by a strict JSON
//! parser, so a `.json` policy is exactly what other JSON tools read in it.

use super::raw::{Node, Pos};
use super::{PolicyError, PolicyErrorKind};

/// Parse a whole JSON document (RFC 8259) into one tree.
pub(crate) fn parse(text: &str) -> Result<Node, PolicyError> {
    if let Err(e) = serde_json::from_str::<serde_json::Value>(text) {
        let at = Pos { line: e.line().max(1), column: e.column().max(1) };
        let message = format!("not JSON: {}", without_position(&e.to_string()));
        return Err(super::at_position(PolicyErrorKind::Syntax, at, &message));
    }
    super::yaml::parse(&surrogate_pairs_joined(text))
}

/// The text with each UTF-16 surrogate pair escape (`\uD83D\uDE00`, JSON's only spelling of a character beyond the
/// BMP in an escape) written as the one 32-bit escape YAML reads (`\U0001F600`). Only inside strings, and only
/// an escape's own `u` (not one after an escaped backslash). The text is strict JSON already, so every surrogate
/// escape is half of a pair; a node after one on the same line is reported two columns early.
fn surrogate_pairs_joined(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains("\\u") {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let (mut in_string, mut rest) = (false, text);
    while let Some(c) = rest.chars().next() {
        rest = &rest[c.len_utf8()..];
        match (in_string, c) {
            (false, '"') | (true, '"') => in_string = !in_string,
            (true, '\\') => {
                if let Some((joined, after)) = rest.strip_prefix('u').and_then(pair) {
                    out.push_str(&format!("\\U{joined:08X}"));
                    rest = after;
                    continue;
                }
                out.push(c);
                // The escaped character goes out as it is (an escaped backslash or quote ends nothing).
                if let Some(next) = rest.chars().next() {
                    out.push(next);
                    rest = &rest[next.len_utf8()..];
                }
                continue;
            }
            _ => {}
        }
        out.push(c);
    }
    std::borrow::Cow::Owned(out)
}

/// `D83D\uDE00...` → the code point the pair spells and the text after it; `None` for anything else.
fn pair(after_u: &str) -> Option<(u32, &str)> {
    let hex = |s: &str| s.get(..4).and_then(|h| u32::from_str_radix(h, 16).ok());
    let high = hex(after_u).filter(|h| (0xD800..0xDC00).contains(h))?;
    let rest = after_u.get(4..)?.strip_prefix("\\u")?;
    let low = hex(rest).filter(|l| (0xDC00..0xE000).contains(l))?;
    Some((0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00), rest.get(4..)?))
}

/// serde_json's message without its own ` at line L column C` (the error carries the position).
fn without_position(message: &str) -> &str {
    message.rsplit_once(" at line ").map_or(message, |(m, _)| m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::raw::{ScalarKind, Value};

    #[test]
    fn a_json_document_reads_as_its_yaml_spelling_with_positions() {
        let root = parse("{\n  \"network\": {\"mode\": \"allowlist\", \"ports\": [443], \"x\": null, \"y\": \"\\u00e9\\ud83d\\ude00\"}\n}")
            .unwrap();
        let Value::Map(top) = &root.value else { panic!("{root:?}") };
        let Value::Map(network) = &top[0].1.value else { panic!("{root:?}") };
        let kinds: Vec<(&str, Option<ScalarKind>, usize)> = network
            .iter()
            .map(|(k, v)| match &v.value {
                Value::Scalar(kind, _) => (k.name.as_str(), Some(*kind), v.pos.line),
                _ => (k.name.as_str(), None, v.pos.line),
            })
            .collect();
        assert_eq!(
            kinds,
            [
                ("mode", Some(ScalarKind::Str), 2),
                ("ports", None, 2),
                ("x", Some(ScalarKind::Null), 2),
                ("y", Some(ScalarKind::Str), 2)
            ]
        );
        let Value::Scalar(_, y) = &network[3].1.value else { panic!() };
        assert_eq!(y, "é😀", "escapes, surrogate pairs included, read as JSON reads them");
        let escaped = parse(r#"{"a": "\\uD83D \uD83D\uDE00 \"\\"}"#).unwrap();
        let Value::Map(pairs) = &escaped.value else { panic!() };
        let Value::Scalar(_, a) = &pairs[0].1.value else { panic!() };
        assert_eq!(a, "\\uD83D 😀 \"\\", "an escaped backslash's `u` is text");
    }

    #[test]
    fn what_only_yaml_allows_is_refused_with_its_place() {
        for (text, line) in [
            ("network:\n  mode: allowlist\n", 1),
            ("{\"network\": {\"mode\": \"allowlist\",}}", 1),
            ("{\n\"network\": {} # comment\n}", 2),
            ("{\"network\": {\"mode\": allowlist}}", 1),
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!((e.kind, e.line), (PolicyErrorKind::Syntax, Some(line)), "{text}: {e}");
            assert!(e.message.starts_with("not JSON: ") && !e.message.contains(" at line "), "{e}");
        }
    }
}
