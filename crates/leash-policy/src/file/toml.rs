//! TOML text → the raw tree, from `toml_edit`'s document, which keeps a byte span for every key and value.
//!
//! TOML types its values itself, and its parser already refuses duplicate keys (with the span of the second), so
//! the same structure as the YAML form validates the same way. Tables created implicitly by a dotted header
//! (`[profiles.verifier.network]` creates `profiles`) have no span of their own; they take their key's position.

use toml_edit::{Document, InlineTable, Item, Table, Value as TomlValue};

use super::raw::{Key, LineIndex, Node, Pos, ScalarKind, Value, MAX_DEPTH};
use super::{PolicyError, PolicyErrorKind};

/// Parse a whole TOML document into one tree.
pub(crate) fn parse(text: &str) -> Result<Node, PolicyError> {
    let lines = LineIndex::new(text);
    let doc = Document::parse(text).map_err(|e| {
        let at = e.span().map_or(Pos { line: 1, column: 1 }, |span| lines.pos(span.start));
        // The parser refuses a repeated key itself, as a syntax error; its kind is the one YAML's gets.
        let kind = match e.message().contains("duplicate key") {
            true => PolicyErrorKind::DuplicateKey,
            false => PolicyErrorKind::Syntax,
        };
        error_of(kind, at, &format!("not valid TOML: {}", e.message()))
    })?;
    let conv = Converter { lines: &lines };
    conv.table(doc.as_table(), Pos { line: 1, column: 1 }, 0)
}

struct Converter<'a> {
    lines: &'a LineIndex<'a>,
}

impl Converter<'_> {
    fn at(&self, span: Option<std::ops::Range<usize>>, fallback: Pos) -> Pos {
        span.map_or(fallback, |s| self.lines.pos(s.start))
    }

    fn table(&self, table: &Table, fallback: Pos, depth: usize) -> Result<Node, PolicyError> {
        let at = self.at(table.span(), fallback);
        check_depth(depth, at)?;
        let mut entries = Vec::new();
        for (name, item) in table.iter() {
            let key_pos = self.at(table.key(name).and_then(|k| k.span()), at);
            let node = match item {
                Item::None => continue,
                Item::Value(v) => self.value(v, key_pos, depth + 1)?,
                Item::Table(t) => self.table(t, key_pos, depth + 1)?,
                Item::ArrayOfTables(tables) => {
                    let items = tables.iter().map(|t| self.table(t, key_pos, depth + 2)).collect::<Result<_, _>>()?;
                    Node { value: Value::Seq(items), pos: self.at(tables.span(), key_pos) }
                }
            };
            entries.push((Key { name: name.to_owned(), pos: key_pos }, node));
        }
        Ok(Node { value: Value::Map(entries), pos: at })
    }

    fn inline_table(&self, table: &InlineTable, at: Pos, depth: usize) -> Result<Node, PolicyError> {
        let mut entries = Vec::new();
        for (name, value) in table.iter() {
            let key_pos = self.at(table.key(name).and_then(|k| k.span()), at);
            entries.push((Key { name: name.to_owned(), pos: key_pos }, self.value(value, key_pos, depth + 1)?));
        }
        Ok(Node { value: Value::Map(entries), pos: at })
    }

    fn value(&self, value: &TomlValue, fallback: Pos, depth: usize) -> Result<Node, PolicyError> {
        let at = self.at(value.span(), fallback);
        check_depth(depth, at)?;
        let scalar = |kind, text: String| Ok(Node { value: Value::Scalar(kind, text), pos: at });
        match value {
            TomlValue::String(s) => scalar(ScalarKind::Str, s.value().clone()),
            TomlValue::Integer(i) => scalar(ScalarKind::Int, i.value().to_string()),
            TomlValue::Float(f) => scalar(ScalarKind::Float, f.value().to_string()),
            TomlValue::Boolean(b) => scalar(ScalarKind::Bool, b.value().to_string()),
            TomlValue::Datetime(d) => scalar(ScalarKind::Datetime, d.value().to_string()),
            TomlValue::Array(items) => {
                let items = items.iter().map(|v| self.value(v, at, depth + 1)).collect::<Result<_, _>>()?;
                Ok(Node { value: Value::Seq(items), pos: at })
            }
            TomlValue::InlineTable(t) => self.inline_table(t, at, depth),
        }
    }
}

fn check_depth(depth: usize, at: Pos) -> Result<(), PolicyError> {
    match depth > MAX_DEPTH {
        true => Err(error_at(at, "the document is nested too deeply")),
        false => Ok(()),
    }
}

fn error_at(at: Pos, message: &str) -> PolicyError {
    error_of(PolicyErrorKind::Syntax, at, message)
}

fn error_of(kind: PolicyErrorKind, at: Pos, message: &str) -> PolicyError {
    super::at_position(kind, at, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_have_positions() {
        let root = parse("[network]\nmode = \"allowlist\"\nports = [80, 443]\n").unwrap();
        let Value::Map(top) = root.value else { panic!("not a map") };
        assert_eq!(top[0].0.name, "network");
        let Value::Map(net) = &top[0].1.value else { panic!("not a map") };
        assert_eq!((net[0].0.pos, net[0].1.pos), (Pos { line: 2, column: 1 }, Pos { line: 2, column: 8 }));
        let Value::Seq(ports) = &net[1].1.value else { panic!("not a list") };
        assert_eq!(ports[1].pos, Pos { line: 3, column: 14 });
        assert!(matches!(&ports[1].value, Value::Scalar(ScalarKind::Int, t) if t == "443"));
    }

    #[test]
    fn duplicate_keys_and_syntax_errors_have_positions() {
        let err = parse("[network]\nmode = \"a\"\nmode = \"b\"\n").unwrap_err();
        assert_eq!(err.line, Some(3));
        assert!(err.message.starts_with("not valid TOML"), "{}", err.message);
        assert_eq!(err.kind, PolicyErrorKind::DuplicateKey);
        for twice in ["[network]\na = 1\n[network]\nb = 2\n", "a = {b = 1, b = 2}\n", "a.b = 1\na.b = 2\n"] {
            let err = parse(twice).unwrap_err();
            assert_eq!(err.kind, PolicyErrorKind::DuplicateKey, "{twice}: {}", err.message);
        }
        assert_eq!(parse("a = [\n").unwrap_err().kind, PolicyErrorKind::Syntax);
        assert!(parse(&format!("a = {}", "[".repeat(200))).is_err());
    }
}
