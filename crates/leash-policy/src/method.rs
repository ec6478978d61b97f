//! HTTP request methods as rules name them: the methods a policy can list, and [`Methods`], a set of them.
//!
//! Method names are case-sensitive (RFC 9110 §9.1): a request whose method is `get` is not a GET, and a method leash
//! does not know (an extension method, a made-up one) is in no set, so every rule that lists methods refuses it. A
//! rule that lists none admits every method, known or not. `CONNECT` is never in a set: a tunnel is decided on its
//! host and port, and a CONNECT sent inside an inspected tunnel is a request no method list admits.

use std::fmt;

/// The methods a rule can list, in the order they are shown: RFC 9110's (less CONNECT), PATCH (RFC 5789), and
/// WebDAV's (RFC 4918, with REPORT from RFC 3253). The index of a name is its bit in [`Methods`].
pub const KNOWN_METHODS: [&str; 15] = [
    "GET",
    "HEAD",
    "OPTIONS",
    "POST",
    "PUT",
    "PATCH",
    "DELETE",
    "TRACE",
    "PROPFIND",
    "PROPPATCH",
    "MKCOL",
    "COPY",
    "MOVE",
    "LOCK",
    "UNLOCK",
];

/// The word a policy writes for GET, HEAD and OPTIONS: requests that read and do not change (RFC 9110's safe
/// methods less TRACE, which echoes the request back and which no client needs to read an API).
pub const READ_ONLY: &str = "read-only";

/// A set of methods a rule admits (allow rules) or refuses (block rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Methods(u16);

impl Methods {
    /// GET, HEAD and OPTIONS: what [`READ_ONLY`] stands for.
    pub const READ_ONLY: Methods = Methods(0b111);

    /// The set holding one known method (`GET`, spelled exactly so), or `None` for any other name.
    pub fn known(name: &str) -> Option<Methods> {
        KNOWN_METHODS.iter().position(|m| *m == name).map(|i| Methods(1 << i))
    }

    /// Both sets.
    pub fn union(self, other: Methods) -> Methods {
        Methods(self.0 | other.0)
    }

    /// Whether a request with `method` (as sent, case kept) is in the set. An unknown method never is.
    pub fn admits(self, method: &str) -> bool {
        Methods::known(method).is_some_and(|m| self.0 & m.0 != 0)
    }

    /// The method names in the set, in [`KNOWN_METHODS`] order.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        KNOWN_METHODS.iter().enumerate().filter(move |(i, _)| self.0 & (1 << i) != 0).map(|(_, m)| *m)
    }
}

impl fmt::Display for Methods {
    /// `GET HEAD OPTIONS`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, name) in self.names().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            f.write_str(name)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_case_sensitive_and_unknown_ones_are_in_no_set() {
        let read = Methods::READ_ONLY;
        assert!(read.admits("GET") && read.admits("HEAD") && read.admits("OPTIONS"));
        for refused in ["get", "Get", "POST", "PROPFIND", "CONNECT", "BREW", "", "GET "] {
            assert!(!read.admits(refused), "{refused:?}");
        }
        let all = KNOWN_METHODS.iter().fold(Methods::default(), |s, m| s.union(Methods::known(m).unwrap_or_default()));
        assert!(all.admits("PROPFIND") && !all.admits("CONNECT") && !all.admits("BREW"));
        assert_eq!(read.to_string(), "GET HEAD OPTIONS");
        assert_eq!(
            Methods::known("GET")
                .unwrap_or_default()
                .union(Methods::known("OPTIONS").unwrap_or_default())
                .names()
                .count(),
            2
        );
    }
}
