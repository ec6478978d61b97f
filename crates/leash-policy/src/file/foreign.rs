//! Reading another tool's file (a harness's task, a sandbox runtime's settings) as its tool does: the few tree
//! helpers `task.rs` and `sandbox_settings.rs` share, each error naming the other tool's field.

use super::raw::{Node, ScalarKind, Value};
use super::{PolicyError, PolicyErrorKind};

/// The mapping at `key` of the root (or of any mapping node), if it is one.
pub(crate) fn section<'a>(root: &'a Node, key: &str) -> Option<&'a Node> {
    let Value::Map(entries) = &root.value else { return None };
    entries.iter().find(|(k, v)| k.name == key && matches!(v.value, Value::Map(_))).map(|(_, v)| v)
}

/// The strings listed at `key` of `table` (none when absent); anything but a list of strings names `field`.
pub(crate) fn strings(table: Option<&Node>, key: &str, field: &str) -> Result<Vec<String>, PolicyError> {
    let Some(Value::Map(entries)) = table.map(|t| &t.value) else { return Ok(Vec::new()) };
    let Some((_, node)) = entries.iter().find(|(k, _)| k.name == key) else { return Ok(Vec::new()) };
    let not_a_list =
        || error(PolicyErrorKind::BadValue, field, format!("expected a list of strings, found {}", node.kind_name()));
    let Value::Seq(items) = &node.value else {
        return match node.value {
            Value::Scalar(ScalarKind::Null, _) => Ok(Vec::new()),
            _ => Err(not_a_list()),
        };
    };
    items
        .iter()
        .map(|item| match &item.value {
            Value::Scalar(ScalarKind::Str, s) => Ok(s.clone()),
            _ => Err(not_a_list()),
        })
        .collect()
}

pub(crate) fn error(kind: PolicyErrorKind, entry: &str, message: String) -> PolicyError {
    PolicyError { kind, entry: entry.to_owned(), line: None, column: None, message }
}
