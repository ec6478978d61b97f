//! The raw tree both formats parse into: every key and value with its line and column, scalars with their source
//! text and the kind the format gave them. Validation walks this tree; nothing here knows what a policy is.

/// A 1-based position in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Pos {
    pub(crate) line: usize,
    pub(crate) column: usize,
}

/// What a scalar is, by the format's own typing (YAML core schema for plain scalars, TOML's value types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScalarKind {
    Str,
    Int,
    Float,
    Bool,
    Null,
    Datetime,
}

#[derive(Debug, Clone)]
pub(crate) enum Value {
    Scalar(ScalarKind, String),
    Seq(Vec<Node>),
    /// Keys in file order, duplicates kept: the validator reports them.
    Map(Vec<(Key, Node)>),
}

#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub(crate) value: Value,
    pub(crate) pos: Pos,
}

#[derive(Debug, Clone)]
pub(crate) struct Key {
    pub(crate) name: String,
    pub(crate) pos: Pos,
}

/// Nesting deeper than this is refused: a policy is three levels deep, and a recursive walk over hostile input must
/// not exhaust the stack.
pub(crate) const MAX_DEPTH: usize = 32;

impl Node {
    /// "a string", "a list", ... for "expected X, found Y" messages.
    pub(crate) fn kind_name(&self) -> &'static str {
        match &self.value {
            Value::Scalar(ScalarKind::Str, _) => "a string",
            Value::Scalar(ScalarKind::Int, _) => "a number",
            Value::Scalar(ScalarKind::Float, _) => "a decimal number",
            Value::Scalar(ScalarKind::Bool, _) => "a boolean",
            Value::Scalar(ScalarKind::Null, _) => "nothing",
            Value::Scalar(ScalarKind::Datetime, _) => "a date",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a mapping",
        }
    }
}

/// Byte offsets → 1-based line and column (columns count characters), for formats whose parser gives spans.
pub(crate) struct LineIndex<'a> {
    text: &'a str,
    starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    pub(crate) fn new(text: &'a str) -> LineIndex<'a> {
        let starts = std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1)).collect();
        LineIndex { text, starts }
    }

    pub(crate) fn pos(&self, offset: usize) -> Pos {
        let line = self.starts.partition_point(|&start| start <= offset).max(1);
        let start = self.starts.get(line - 1).copied().unwrap_or(0);
        let column = self.text.get(start..offset.min(self.text.len())).map_or(0, |s| s.chars().count()) + 1;
        Pos { line, column }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_become_lines_and_columns() {
        let idx = LineIndex::new("ab\ncdé\nf");
        assert_eq!(idx.pos(0), Pos { line: 1, column: 1 });
        assert_eq!(idx.pos(3), Pos { line: 2, column: 1 });
        assert_eq!(idx.pos(7), Pos { line: 2, column: 4 });
        assert_eq!(idx.pos(8), Pos { line: 3, column: 1 });
    }
}
