//! What a Rust source file refers to, read from its text: the paths of its `use` trees and every other
//! `crate::`/`super::`/`self::`/`leash_*::` path, with comments, string and character literals and `#[cfg(test)]`
//! items left out (tests may reach anywhere; the layering is about the code that ships).

/// A path the file names, as written (`["super", "validate", "NETWORK_KEYS"]`), and the line it is on.
#[derive(Debug, Clone)]
pub struct Reference {
    pub path: Vec<String>,
    pub line: usize,
}

/// Every path rooted at `crate`, `super`, `self` or a workspace crate in `text`, outside test-only items.
pub fn references(text: &str) -> Vec<Reference> {
    let tokens = without_test_items(lex(text));
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        if tokens[i].text == "use" {
            let end = (i..tokens.len()).find(|&j| tokens[j].text == ";").unwrap_or(tokens.len());
            let mut paths = Vec::new();
            use_tree(&tokens[i + 1..end], &mut 0, &[], &mut paths);
            out.extend(paths.into_iter().filter(|p| is_rooted(p)).map(|path| Reference { path, line: tokens[i].line }));
            i = end + 1;
        } else if is_path_start(&tokens, i) {
            let (path, next) = inline_path(&tokens, i);
            out.push(Reference { path, line: tokens[i].line });
            i = next;
        } else {
            i += 1;
        }
    }
    out
}

/// A path this check follows: into the crate itself or into another crate of the workspace.
fn is_rooted(path: &[String]) -> bool {
    path.first()
        .is_some_and(|first| matches!(first.as_str(), "crate" | "super" | "self") || first.starts_with("leash_"))
}

/// `crate::`, `super::`, `self::` or `leash_x::` here, and not `$crate` (a macro's own crate).
fn is_path_start(tokens: &[Token], i: usize) -> bool {
    let root = &tokens[i].text;
    let rooted = matches!(root.as_str(), "crate" | "super" | "self") || root.starts_with("leash_");
    rooted && tokens.get(i + 1).is_some_and(|t| t.text == "::") && (i == 0 || tokens[i - 1].text != "$")
}

/// The path starting at `tokens[i]`, segments joined by `::`, and the index after it.
fn inline_path(tokens: &[Token], mut i: usize) -> (Vec<String>, usize) {
    let mut path = vec![tokens[i].text.clone()];
    i += 1;
    while tokens.get(i).is_some_and(|t| t.text == "::") && tokens.get(i + 1).is_some_and(|t| is_ident(&t.text)) {
        path.push(tokens[i + 1].text.clone());
        i += 2;
    }
    (path, i)
}

/// Expands one use tree (`a::{b, c::*, d as e}`) into its leaf paths under `prefix`; `self` inside braces is the
/// prefix itself and a glob stands for its prefix.
fn use_tree(tokens: &[Token], i: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let mut path = prefix.to_vec();
    while *i < tokens.len() {
        let text = tokens[*i].text.as_str();
        match text {
            "{" => {
                *i += 1;
                while *i < tokens.len() && tokens[*i].text != "}" {
                    use_tree(tokens, i, &path, out);
                    if tokens.get(*i).is_some_and(|t| t.text == ",") {
                        *i += 1;
                    }
                }
                *i += 1;
                return;
            }
            "::" => *i += 1,
            "*" => {
                *i += 1;
                break;
            }
            "as" => *i += 2,
            "," | "}" => break,
            "self" if !path.is_empty() => *i += 1,
            _ => {
                path.push(text.to_string());
                *i += 1;
            }
        }
    }
    out.push(path);
}

/// One token: an identifier (or number), `::`, or a single punctuation character.
#[derive(Debug, Clone)]
struct Token {
    text: String,
    line: usize,
}

fn is_ident(text: &str) -> bool {
    text.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_')
}

/// The tokens without `#[cfg(test)]` items: after the attribute (and any attributes following it), the item up to
/// its `;` or through its braced body.
fn without_test_items(tokens: Vec<Token>) -> Vec<Token> {
    const CFG_TEST: [&str; 7] = ["#", "[", "cfg", "(", "test", ")", "]"];
    let mut out = Vec::with_capacity(tokens.len());
    let mut i = 0;
    while i < tokens.len() {
        let is_cfg_test =
            tokens.len() - i >= CFG_TEST.len() && CFG_TEST.iter().zip(&tokens[i..]).all(|(w, t)| t.text == *w);
        if !is_cfg_test {
            out.push(tokens[i].clone());
            i += 1;
            continue;
        }
        i += CFG_TEST.len();
        let mut depth = 0usize;
        while i < tokens.len() {
            match tokens[i].text.as_str() {
                "{" | "[" | "(" => depth += 1,
                "}" | "]" | ")" => depth = depth.saturating_sub(1),
                ";" if depth == 0 => break,
                _ => {}
            }
            i += 1;
            if depth == 0 && tokens[i - 1].text == "}" {
                break;
            }
        }
        if tokens.get(i).is_some_and(|t| t.text == ";") {
            i += 1;
        }
    }
    out
}

/// The file's tokens, comments and literals dropped (a lifetime's quote too).
fn lex(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let mut lexer = Lexer { chars, at: 0, line: 1, out: Vec::new() };
    lexer.run();
    lexer.out
}

struct Lexer {
    chars: Vec<char>,
    at: usize,
    line: usize,
    out: Vec<Token>,
}

impl Lexer {
    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.at + ahead).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek(0)?;
        self.at += 1;
        if c == '\n' {
            self.line += 1;
        }
        Some(c)
    }

    fn run(&mut self) {
        while let Some(c) = self.peek(0) {
            match (c, self.peek(1)) {
                ('/', Some('/')) => self.skip_while(|c| c != '\n'),
                ('/', Some('*')) => self.block_comment(),
                ('"', _) => self.string(false, 0),
                ('\'', _) => self.quote(),
                (':', Some(':')) => {
                    self.push("::".into());
                    self.at += 2;
                }
                _ if c.is_alphanumeric() || c == '_' => self.word(),
                _ if c.is_whitespace() => {
                    self.bump();
                }
                _ => {
                    self.push(c.to_string());
                    self.bump();
                }
            }
        }
    }

    fn push(&mut self, text: String) {
        self.out.push(Token { text, line: self.line });
    }

    fn skip_while(&mut self, keep: impl Fn(char) -> bool) {
        while self.peek(0).is_some_and(&keep) {
            self.bump();
        }
    }

    /// `/* ... */`, nested as Rust nests them.
    fn block_comment(&mut self) {
        let mut depth = 0;
        while let Some(c) = self.bump() {
            match (c, self.peek(0)) {
                ('/', Some('*')) => {
                    depth += 1;
                    self.bump();
                }
                ('*', Some('/')) => {
                    depth -= 1;
                    self.bump();
                    if depth == 0 {
                        return;
                    }
                }
                _ => {}
            }
        }
    }

    /// An identifier or number; `r"..."`, `r#"..."#`, `b"..."`, `br"..."`, `b'x'` are literals, skipped.
    fn word(&mut self) {
        let start = self.at;
        self.skip_while(|c| c.is_alphanumeric() || c == '_');
        let word: String = self.chars[start..self.at].iter().collect();
        match (word.as_str(), self.peek(0)) {
            ("r" | "br" | "cr", Some('"' | '#')) => {
                let hashes = (0..).take_while(|&k| self.peek(k) == Some('#')).count();
                if self.peek(hashes) == Some('"') {
                    self.at += hashes;
                    self.string(true, hashes);
                } else {
                    self.push(word);
                }
            }
            ("b" | "c", Some('"')) => self.string(false, 0),
            ("b", Some('\'')) => self.quote(),
            _ => self.push(word),
        }
    }

    /// A string literal from its opening quote: a raw one is closed by `"` and `hashes` hashes and has no escapes.
    fn string(&mut self, raw: bool, hashes: usize) {
        self.bump();
        while let Some(c) = self.bump() {
            if c == '\\' && !raw {
                self.bump();
            } else if c == '"' && (0..hashes).all(|k| self.peek(k) == Some('#')) {
                self.at += hashes;
                return;
            }
        }
    }

    /// A character literal (`'x'`, `'\n'`, `'\u{1F600}'`) or a lifetime's quote (`'a`).
    fn quote(&mut self) {
        self.bump();
        if self.peek(0) == Some('\\') {
            self.bump();
            self.bump();
            self.skip_while(|c| c != '\'');
            self.bump();
        } else if self.peek(1) == Some('\'') {
            self.at += 2;
        }
    }
}
