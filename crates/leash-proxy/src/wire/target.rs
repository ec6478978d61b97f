//! Request-target helpers: the query split, a scheme's default port, and the loose readings of targets that did not
//! parse, which the audit log still names as best it can. Pure, like the parsers beside it.

use leash_policy::Scheme;

/// `(path, query)` split at the first raw `?`.
pub fn split_query(path_and_query: &str) -> (&str, Option<&str>) {
    match path_and_query.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (path_and_query, None),
    }
}

/// The port a URL of `scheme` means when it names none.
pub fn default_port(scheme: Scheme) -> u16 {
    match scheme {
        Scheme::Https => 443,
        _ => 80,
    }
}

/// Host, port and path of a target that may not parse, for the log only: the text between `://` and the path, the
/// port it names (else the scheme's default, 0 for an unknown scheme), and the rest as sent (`/` when empty). A
/// target that is not absolute-form is all path.
pub fn loose_target(target: &str) -> (String, u16, &str) {
    let Some((scheme, rest)) = target.split_once("://") else { return (String::new(), 0, target) };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = (&rest[..end], &rest[end..]);
    let path = if path.is_empty() { "/" } else { path };
    let default = match scheme.to_ascii_lowercase().as_str() {
        "http" => 80,
        "https" => 443,
        _ => 0,
    };
    let (host, port) = loose_authority(authority, default);
    (host, port, path)
}

/// Host and port of an authority that may not parse, for the log only: the port it names, else `default`, and the
/// host as sent before it, lowercased (`Ex.com:81` → `ex.com`, 81; `[::1]` → `[::1]`; `a@b` → `a@b`).
pub fn loose_authority(authority: &str, default: u16) -> (String, u16) {
    match authority.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') || h.ends_with(']') => match p.parse() {
            Ok(port) => (h.to_ascii_lowercase(), port),
            Err(_) => (authority.to_ascii_lowercase(), default),
        },
        _ => (authority.to_ascii_lowercase(), default),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loose_target_reads_what_it_can() {
        assert_eq!(loose_target("http://Ex.com:81/x?q"), ("ex.com".into(), 81, "/x?q"));
        assert_eq!(loose_target("/origin"), (String::new(), 0, "/origin"));
        assert_eq!(loose_target("http://a%2eb/"), ("a%2eb".into(), 80, "/"));
        assert_eq!(loose_target("https://user@h"), ("user@h".into(), 443, "/"));
        assert_eq!(loose_target("ftp://h/f"), ("h".into(), 0, "/f"));
    }

    #[test]
    fn loose_authority_reads_the_port_when_there_is_one() {
        assert_eq!(loose_authority("User@Allowed.test:443", 0), ("user@allowed.test".into(), 443));
        assert_eq!(loose_authority("allowed.test", 0), ("allowed.test".into(), 0));
        assert_eq!(loose_authority("allowed.test", 80), ("allowed.test".into(), 80));
        assert_eq!(loose_authority("[::1]:8443", 0), ("[::1]".into(), 8443));
        assert_eq!(loose_authority("::1", 0), ("::1".into(), 0));
        assert_eq!(loose_authority("h:port", 0), ("h:port".into(), 0));
    }
}
