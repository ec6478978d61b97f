//! The method words of a policy: an entry's leading words (`GET HEAD api.example.com`, `read-only github.com`,
//! `POST github.com/*/*/git-upload-pack`) and `network.methods`. Each word is a method name as a request spells it
//! (upper case: names are case-sensitive) or `read-only`; a slip is named with the word it likely meant.

use super::spelling::edit_distance;
use crate::method::{Methods, KNOWN_METHODS, READ_ONLY};

/// An entry split into the methods it lists (if any) and the rule after them. Leading words are methods only when
/// the first looks like one (see [`looks_like_method`]), so `arxiv.org/a b` and `bad host` stay one entry, refused
/// for their space as before.
pub(crate) fn split_entry(text: &str) -> Result<(Option<Methods>, &str), String> {
    let trimmed = text.trim_start();
    let Some((first, _)) = trimmed.split_once(|c: char| c.is_ascii_whitespace()) else {
        return Ok((None, text));
    };
    if !looks_like_method(first) {
        return Ok((None, text));
    }
    let words: Vec<&str> = trimmed.split_ascii_whitespace().collect();
    let Some((rule, methods)) = words.split_last() else { return Ok((None, text)) };
    let mut set = Methods::default();
    for word in methods {
        set = set.union(method_word(word)?);
    }
    if rule.bytes().all(|b| b.is_ascii_alphabetic() || b == b'-') && method_word(rule).is_ok() {
        return Err(format!("`{text}` lists methods but no host; write the host after them (`{text} example.com`)"));
    }
    Ok((Some(set), rule))
}

/// Whether `word` was meant as a method word: upper-case letters (`GET`, a misspelt `GTE`, an unknown `BREW`), a
/// known method in another case (`get`), or a spelling of `read-only`.
pub(crate) fn looks_like_method(word: &str) -> bool {
    let upper = !word.is_empty() && word.bytes().all(|b| b.is_ascii_uppercase());
    upper || Methods::known(&word.to_ascii_uppercase()).is_some() || read_only_like(word)
}

fn read_only_like(word: &str) -> bool {
    let folded = word.to_ascii_lowercase().replace('_', "-");
    folded == READ_ONLY || folded == "readonly"
}

/// One method word: a known method, exactly as requests spell it, or `read-only` (GET, HEAD, OPTIONS).
pub(crate) fn method_word(word: &str) -> Result<Methods, String> {
    if word == READ_ONLY {
        return Ok(Methods::READ_ONLY);
    }
    if let Some(set) = Methods::known(word) {
        return Ok(set);
    }
    let upper = word.to_ascii_uppercase();
    if word == "CONNECT" {
        return Err(
            "`CONNECT` opens a tunnel, which is decided on its host and port before any method; a method list \
                    cannot admit it (leave it out)"
                .to_owned(),
        );
    }
    if Methods::known(&upper).is_some() {
        return Err(format!("`{word}` is not `{upper}`: method names are case-sensitive (RFC 9110); write `{upper}`"));
    }
    if read_only_like(word) {
        return Err(format!("unknown method `{word}`; did you mean `{READ_ONLY}`?"));
    }
    let closest = KNOWN_METHODS.iter().map(|m| (edit_distance(&upper, m), *m)).min();
    match closest {
        Some((distance, name)) if distance <= 2 && distance < name.len() => {
            Err(format!("unknown method `{word}`; did you mean `{name}`?"))
        }
        _ => Err(format!(
            "unknown method `{word}`; a rule lists {} or `{READ_ONLY}` (GET HEAD OPTIONS)",
            KNOWN_METHODS.join(" ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        split_entry(text).map(|_| ()).unwrap_err()
    }

    #[test]
    fn leading_method_words_are_split_off() {
        assert_eq!(split_entry("api.example.com").unwrap(), (None, "api.example.com"));
        assert_eq!(split_entry("GET HEAD api.example.com").unwrap().1, "api.example.com");
        let (set, rule) = split_entry("read-only  POST\tgithub.com/*/*/git-upload-pack").unwrap();
        assert_eq!(rule, "github.com/*/*/git-upload-pack");
        assert_eq!(set.map(|s| s.to_string()).as_deref(), Some("GET HEAD OPTIONS POST"));
        assert_eq!(split_entry("arxiv.org/a b").unwrap(), (None, "arxiv.org/a b"), "not a method word");
        assert_eq!(split_entry("bad host").unwrap(), (None, "bad host"));
    }

    #[test]
    fn slips_are_named() {
        assert_eq!(err("get api.x.com"), "`get` is not `GET`: method names are case-sensitive (RFC 9110); write `GET`");
        assert_eq!(err("GTE api.x.com"), "unknown method `GTE`; did you mean `GET`?");
        assert_eq!(err("PTACH api.x.com"), "unknown method `PTACH`; did you mean `PATCH`?");
        assert_eq!(err("readonly api.x.com"), "unknown method `readonly`; did you mean `read-only`?");
        assert!(err("CONNECT api.x.com").contains("decided on its host and port"));
        assert!(err("BREW api.x.com").starts_with("unknown method `BREW`; a rule lists GET HEAD OPTIONS POST"));
        assert!(err("GET HEAD").contains("lists methods but no host"));
    }
}
