//! One entry of `allowed_hosts`, `allowed_urls` or `blocked_urls` (or `--allow`/`--block`): text in, a validated
//! rule or a message saying which rule of the syntax it breaks.
//!
//! Messages name the entry's text in backticks and say what to write instead. The checks run in an order that
//! names the most telling problem first (a scheme before the `:` it contains, uppercase before "bad character").

use std::net::Ipv6Addr;
use std::sync::Arc;

use super::PolicyErrorKind::{self, BadHost, BadPath, BadUrl, WrongList};
use crate::host::{parse_host, Host, HostError};
use crate::path::{canonicalize, PathError};
use crate::spec::{HostPattern, UrlRule};

/// Which list an entry comes from; each accepts a slightly different syntax.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum List {
    /// `x` or `.x`, or a dotted-quad IPv4.
    AllowedHosts,
    /// `host/path`, one exact host.
    AllowedUrls,
    /// `host` or `host/path`, covering subdomains.
    BlockedUrls,
}

/// Why an entry is refused: the kind of problem, and the message that names the entry's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EntryError {
    pub(crate) kind: PolicyErrorKind,
    pub(crate) message: String,
}

fn fail<T>(kind: PolicyErrorKind, message: String) -> Result<T, EntryError> {
    Err(EntryError { kind, message })
}

/// A `blocked_urls`/`allowed_urls` entry: a rule, or (blocked_urls only) a dotted quad that needs no rule.
#[derive(Debug)]
pub(crate) enum UrlEntry {
    Rule(UrlRule),
    /// Every IP literal is refused in a blocklist already; the loader warns that the entry does nothing.
    Ipv4,
}

/// An `allowed_hosts` entry.
pub(crate) fn host_entry(text: &str) -> Result<HostPattern, EntryError> {
    let (name, subtree) = match text.strip_prefix('.') {
        Some(rest) => (rest, true),
        None => (text, false),
    };
    match (check_host(text, name, List::AllowedHosts)?, subtree) {
        (Host::Name(n), false) => Ok(HostPattern::Exact(n)),
        (Host::Name(n), true) => Ok(HostPattern::Subtree(n)),
        (Host::Ipv4(ip), false) => Ok(HostPattern::Ipv4(ip)),
        _ => fail(BadHost, format!("`{text}` puts a leading dot before an IP address; a leading dot is for names")),
    }
}

/// A `model_apis` entry: `host` or `.host` (it and every subdomain), never an address: model hosts are inspected,
/// and inspection is decided on TLS server names.
pub(crate) fn model_api_entry(text: &str) -> Result<HostPattern, EntryError> {
    match host_entry(text)? {
        HostPattern::Ipv4(_) => fail(BadHost, format!("`{text}` is an IP address; model APIs are named by host")),
        pattern => Ok(pattern),
    }
}

/// A `blocked_urls` or `allowed_urls` entry: `host` or `host/path-prefix`.
pub(crate) fn url_entry(text: &str, list: List) -> Result<UrlEntry, EntryError> {
    let (host_text, path_text) = match text.find('/') {
        Some(i) => (&text[..i], Some(&text[i..])),
        None => (text, None),
    };
    if host_text.starts_with('.') {
        let why = match list {
            List::BlockedUrls => "blocked_urls entries already cover every subdomain",
            _ => "an allowed_urls entry names exactly one host",
        };
        return fail(BadHost, format!("`{text}` has a leading dot; {why}"));
    }
    let host = match check_host(text, host_text, list)? {
        Host::Name(name) => name,
        _ if list == List::BlockedUrls => return Ok(UrlEntry::Ipv4),
        _ => return fail(WrongList, format!("`{text}` names an IP address; list the address in `allowed_hosts`")),
    };
    let path = match (path_text, list) {
        (None, List::AllowedUrls) => {
            return fail(WrongList, format!("`{text}` has no path; list whole hosts in `allowed_hosts`"));
        }
        (None, _) => None,
        // A blocked prefix blocks what starts with it: `arxiv.org/abs/2401.01234/` meant that paper, whose page has
        // no `/` after its id and whose next version adds `v2`; kept, the trailing `/` let both through. (benchflow,
        // whose task files list such entries, drops it too.) An allowed prefix keeps it: `github.com/rust-lang/`
        // means that directory, not `rust-lang-nursery`.
        (Some(p), List::BlockedUrls) => {
            // Checked as written first, so a mistake is told about in the user's own terms.
            let as_written = check_path(text, p)?;
            match p.trim_end_matches('/') {
                "" => None,
                trimmed if trimmed.len() == p.len() => Some(as_written),
                trimmed => Some(check_path(text, trimmed)?),
            }
        }
        (Some(p), _) => Some(check_path(text, p)?),
    };
    Ok(UrlEntry::Rule(UrlRule { host, path, text: Arc::from(text), index: 0, methods: None }))
}

/// The host part of an entry (`host`, without a leading dot): a name, or a dotted quad.
fn check_host(entry: &str, host: &str, list: List) -> Result<Host, EntryError> {
    if host.is_empty() {
        let message = match entry.is_empty() {
            true => "empty entry; write a hostname".to_owned(),
            false => format!("`{entry}` has no hostname"),
        };
        return fail(BadHost, message);
    }
    if entry.contains("://") {
        let write = match list {
            List::AllowedHosts => "the host alone",
            _ => "`host/path`",
        };
        return fail(BadUrl, format!("`{entry}` has a scheme; write {write} without `http://` or `https://`"));
    }
    if let Some(problem) = syntax_problem(host, list) {
        return fail(BadHost, format!("`{entry}` {problem}"));
    }
    let message = match parse_host(host) {
        Ok(Host::IpLiteral(_)) => {
            format!("`{entry}` spells an IP address; only a dotted quad like `192.0.2.1` is accepted")
        }
        Ok(host) => return Ok(host),
        Err(HostError::EmptyLabel | HostError::Empty) => format!("`{entry}` has an empty label"),
        Err(HostError::TooLong) => format!("`{entry}` is too long; names are at most 253 characters, labels 63"),
        Err(e) => format!("`{entry}` is not a hostname: {e}"),
    };
    fail(BadHost, message)
}

/// What is wrong with `host`'s characters, if anything, phrased to follow the entry's backticked text.
fn syntax_problem(host: &str, list: List) -> Option<String> {
    let bracketed = host.starts_with('[') || (host.contains(':') && host.parse::<Ipv6Addr>().is_ok());
    let problem = if bracketed {
        "is an IPv6 literal; only dotted-quad IPv4 literals are accepted"
    } else if host.split_once(' ').is_some_and(|(first, _)| super::methods::looks_like_method(first)) {
        "lists methods, which only allowed_hosts, allowed_urls and blocked_urls entries carry (`GET HEAD example.com`)"
    } else if host == "*" && list == List::AllowedHosts {
        "would allow every host; for everything but a list, write `mode: blocklist` and list what to refuse"
    } else if host.contains('*') {
        match list {
            List::AllowedHosts => "has a `*`; write `.example.com` for a host and all its subdomains",
            List::BlockedUrls => "has a `*`; blocked_urls entries already cover every subdomain",
            List::AllowedUrls => "has a `*`; an allowed_urls entry names exactly one host",
        }
    } else if !host.is_ascii() {
        "has non-ASCII characters; write the name in punycode (`xn--…`)"
    } else if host.bytes().any(|b| b.is_ascii_uppercase()) {
        "has uppercase letters; hostnames are lowercase"
    } else if host.contains(':') {
        "has a port; ports are set with `ports` and `tunnel_ports`"
    } else if host.contains('@') {
        "has userinfo (`@`); write the host alone"
    } else if host.contains('%') {
        "is percent-encoded; hostnames are plain letters, digits, hyphens and dots"
    } else if host.ends_with('.') {
        "ends with a dot; write the name without it"
    } else if host.starts_with('.') {
        "has an empty label"
    } else if let Some(c) = host.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '.')) {
        return Some(format!("has `{c}`; hostnames are letters, digits, hyphens and dots"));
    } else {
        return None;
    };
    Some(problem.to_owned())
}

fn check_path(entry: &str, path: &str) -> Result<crate::path::CanonicalPath, EntryError> {
    if let Some(message) = pattern_syntax(entry, path) {
        return fail(BadPath, message);
    }
    if path.contains('?') {
        return fail(BadUrl, format!("`{entry}` has a query (`?`); rules match paths only"));
    }
    let canonical = canonicalize(path).map_err(|e| {
        let (kind, message) = match e {
            PathError::ControlChar => (BadPath, format!("`{entry}` has a space or control character in its path")),
            PathError::Fragment => (BadUrl, format!("`{entry}` has a `#`; rules match paths only")),
            PathError::BadEscape => (BadPath, format!("`{entry}` has a malformed percent-escape in its path")),
            PathError::DecodedControlChar => {
                (BadPath, format!("`{entry}` has a path that decodes to a control character"))
            }
            PathError::NotAbsolute => (BadPath, format!("`{entry}` has a path that does not start with `/`")),
        };
        EntryError { kind, message }
    })?;
    // In a rule `*` is a segment wildcard; one that decoding made (`%2A`) or a `..` removed would change the rule.
    if canonical.as_str().matches('*').count() != path.matches('*').count() {
        let message = format!(
            "`{entry}` spells a `*` that is not one as written (`%2A`, or removed by `..`); in a rule `*` stands for \
             one segment, and a path with a literal `*` cannot be named"
        );
        return fail(BadPath, message);
    }
    Ok(canonical)
}

/// A message for a path written as a glob or a regular expression (`/abs/*`, `/abs/**`, `^/abs`, `/abs/.*$`):
/// a rule is a prefix whose only pattern is a `*` standing for one whole segment between others
/// (`github.com/*/*/git-upload-pack`), and such an entry would otherwise be accepted and match nothing a client
/// sends. A `$` or `^` elsewhere in a path is literal (OData's `/$metadata`), so only the anchor places are refused.
fn pattern_syntax(entry: &str, path: &str) -> Option<String> {
    let prefix = |upto: &str| format!("{}{upto}", &entry[..entry.len() - path.len()]);
    if let Some(star) = path.find('*') {
        let before = path[..star].trim_end_matches('.');
        let cut = before.rfind('/').map_or(before, |slash| &before[..=slash]);
        let covered = format!(
            "`{entry}` has a `*`; rules are prefixes, not patterns: `{}` already covers every path under it",
            prefix(cut)
        );
        let segments: Vec<&str> = path.split('/').skip(1).collect();
        let last = segments.iter().rev().find(|s| !s.is_empty()).copied().unwrap_or_default();
        if last.contains('*') {
            // A trailing wildcard says no more than the prefix before it.
            return Some(covered);
        }
        if segments.contains(&"**") {
            return Some(format!(
                "`{entry}` has `**`; a `*` stands for exactly one segment and there is no `**`: write one `*` per \
                 segment (`github.com/*/*/git-receive-pack`), or one entry per depth"
            ));
        }
        if segments.iter().any(|s| s.contains('*') && *s != "*") {
            return Some(format!(
                "{covered}; a `*` stands only for one whole segment between others (`github.com/*/*/git-upload-pack`)"
            ));
        }
    }
    if path.starts_with("/^") || path.ends_with('$') || path.contains("\\.") {
        let plain = path.trim_start_matches("/^").trim_end_matches('$').replace("\\.", ".");
        let plain = if plain.starts_with('/') { plain } else { format!("/{plain}") };
        return Some(format!(
            "`{entry}` looks like a regular expression; rules are plain path prefixes: write `{}`",
            prefix(&plain)
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host_err(text: &str) -> String {
        host_entry(text).unwrap_err().message
    }

    #[test]
    fn host_entries() {
        assert!(matches!(host_entry("api.example.com").unwrap(), HostPattern::Exact(_)));
        assert!(matches!(host_entry(".pypi.org").unwrap(), HostPattern::Subtree(_)));
        assert!(matches!(host_entry("192.0.2.7").unwrap(), HostPattern::Ipv4(_)));
        assert!(matches!(host_entry("xn--bcher-kva.de").unwrap(), HostPattern::Exact(_)));
        assert_eq!(host_err("Example.com"), "`Example.com` has uppercase letters; hostnames are lowercase");
        assert!(host_err("https://example.com").contains("has a scheme"));
        assert!(host_err("example.com:443").contains("has a port"));
        assert!(host_err("*.example.com").contains("has a `*`"));
        assert!(host_err("bücher.de").contains("non-ASCII"));
        assert!(host_err("a..b").contains("empty label"));
        assert!(host_err("..a").contains("empty label"));
        assert!(host_err("example.com.").contains("ends with a dot"));
        assert!(host_err("[::1]").contains("IPv6"));
        assert!(host_err("::1").contains("IPv6"));
        assert!(host_err("127.1").contains("spells an IP address"));
        assert!(host_err("foo.123").contains("spells an IP address"));
        assert!(host_err(".1.2.3.4").contains("leading dot"));
        assert!(host_err("a_b.com").contains("has `_`"));
        assert!(host_err("").contains("empty entry"));
    }

    #[test]
    fn model_api_entries_are_names() {
        assert!(matches!(model_api_entry("llm.corp.example").unwrap(), HostPattern::Exact(_)));
        assert!(matches!(model_api_entry(".openai.azure.com").unwrap(), HostPattern::Subtree(_)));
        assert!(model_api_entry("192.0.2.7").unwrap_err().message.contains("IP address"));
        assert!(model_api_entry("https://api.openai.com").unwrap_err().message.contains("scheme"));
        assert!(model_api_entry("API.openai.com").unwrap_err().message.contains("uppercase"));
    }

    #[test]
    fn url_entries() {
        let UrlEntry::Rule(r) = url_entry("arxiv.org/abs/./2401", List::BlockedUrls).unwrap() else {
            return;
        };
        assert_eq!(
            (r.host.as_str(), r.path.unwrap().as_str(), &*r.text),
            ("arxiv.org", "/abs/2401", "arxiv.org/abs/./2401")
        );
        assert!(matches!(url_entry("api.semanticscholar.org", List::BlockedUrls).unwrap(), UrlEntry::Rule(_)));
        let trailing = |t| match url_entry(t, List::BlockedUrls).unwrap() {
            UrlEntry::Rule(r) => r.path.map(|p| p.as_str().to_owned()),
            UrlEntry::Ipv4 => panic!("not an IP"),
        };
        assert_eq!(trailing("arxiv.org/abs/2401.01234/").as_deref(), Some("/abs/2401.01234"));
        assert_eq!(trailing("arxiv.org/abs//").as_deref(), Some("/abs"));
        assert_eq!(trailing("arxiv.org/"), None, "the whole host");
        assert!(matches!(url_entry("192.0.2.1/x", List::BlockedUrls).unwrap(), UrlEntry::Ipv4));
        let err = |t, l| url_entry(t, l).unwrap_err().message;
        assert!(err("github.com", List::AllowedUrls).contains("has no path"));
        assert!(err(".github.com/x", List::AllowedUrls).contains("leading dot"));
        assert!(err(".arxiv.org", List::BlockedUrls).contains("leading dot"));
        assert!(err("https://arxiv.org/abs", List::BlockedUrls).contains("scheme"));
        assert!(err("arxiv.org/abs?x", List::BlockedUrls).contains("query"));
        assert!(err("arxiv.org/a#b", List::BlockedUrls).contains('#'));
        assert!(err("arxiv.org/a%zz", List::BlockedUrls).contains("percent-escape"));
        assert!(err("arxiv.org/a b", List::BlockedUrls).contains("space"));
        assert!(err("192.0.2.1/x", List::AllowedUrls).contains("allowed_hosts"));
        assert!(err("/abs", List::BlockedUrls).contains("no hostname"));
    }

    #[test]
    fn globs_and_regular_expressions_in_paths_are_refused_with_the_prefix_meant() {
        let err = |t| url_entry(t, List::BlockedUrls).unwrap_err();
        let star = err("arxiv.org/abs/*");
        assert_eq!(star.kind, PolicyErrorKind::BadPath);
        assert_eq!(
            star.message,
            "`arxiv.org/abs/*` has a `*`; rules are prefixes, not patterns: `arxiv.org/abs/` already covers every \
             path under it"
        );
        assert!(err("arxiv.org/abs/**").message.contains("`arxiv.org/abs/` already covers"));
        assert!(err("arxiv.org/abs/.*").message.contains("`arxiv.org/abs/` already covers"));
        assert!(err("arxiv.org/abs/24*/pdf").message.contains("`arxiv.org/abs/` already covers"));
        assert!(err("arxiv.org/*").message.contains("`arxiv.org/` already covers"));
        assert!(url_entry("github.com/rust-lang/*", List::AllowedUrls).unwrap_err().message.contains("a `*`"));
        assert!(err("arxiv.org/^abs/").message.ends_with("write `arxiv.org/abs/`"));
        assert!(err("arxiv.org/abs/$").message.ends_with("write `arxiv.org/abs/`"));
        assert!(err("arxiv.org/abs/2401\\.01234").message.ends_with("write `arxiv.org/abs/2401.01234`"));
        // A `$` or `^` inside a path is an ordinary character (OData's `$metadata`).
        assert!(url_entry("graph.example.com/v1.0/$metadata", List::BlockedUrls).is_ok());
        assert!(url_entry("example.com/a^b/c", List::BlockedUrls).is_ok());
    }

    #[test]
    fn entry_errors_have_kinds() {
        use PolicyErrorKind::*;
        let host = |t| host_entry(t).unwrap_err().kind;
        let url = |t, l| url_entry(t, l).unwrap_err().kind;
        for bad in ["Example.com", "*.a.com", "bücher.de", "a..b", "[::1]", "127.1", ".1.2.3.4", "a.com:443", "a/b", ""]
        {
            assert_eq!(host(bad), BadHost, "{bad}");
        }
        assert_eq!(host("https://a.com"), BadUrl);
        assert_eq!(model_api_entry("192.0.2.7").unwrap_err().kind, BadHost);
        assert_eq!(url("github.com", List::AllowedUrls), WrongList);
        assert_eq!(url("192.0.2.1/x", List::AllowedUrls), WrongList);
        assert_eq!(url(".github.com/x", List::AllowedUrls), BadHost);
        assert_eq!(url(".arxiv.org", List::BlockedUrls), BadHost);
        assert_eq!(url("/abs", List::BlockedUrls), BadHost);
        assert_eq!(url("https://arxiv.org/abs", List::BlockedUrls), BadUrl);
        assert_eq!(url("arxiv.org/abs?x", List::BlockedUrls), BadUrl);
        assert_eq!(url("arxiv.org/a#b", List::BlockedUrls), BadUrl);
        assert_eq!(url("arxiv.org/a%zz", List::BlockedUrls), BadPath);
        assert_eq!(url("arxiv.org/a b", List::BlockedUrls), BadPath);
        assert_eq!(url("arxiv.org/a%00", List::BlockedUrls), BadPath);
    }
}
