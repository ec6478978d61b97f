//! Other tools' domain allowlists with a deny list beside them (sandbox-runtime's and Claude Code's
//! `allowedDomains`/`deniedDomains`, Codex's `domains` map): their patterns, and the one way both lists become a
//! leash allowlist. A denied entry drops the allowed entries it covers whole; one that would cut an exception out of
//! an allowed entry cannot be expressed (a leash allowlist has no exceptions) and is reported, never approximated.

/// A domain pattern of such a list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Pattern {
    /// `example.com`.
    Exact(String),
    /// `*.example.com`: the names under `example.com`, not `example.com` itself.
    Under(String),
    /// `**.example.com` (Codex): `example.com` and every name under it, as leash's `.example.com` is.
    ApexAndUnder(String),
}

impl Pattern {
    /// Whether every name `other` matches, this matches too.
    fn covers(&self, other: &Pattern) -> bool {
        let (inside, own_apex) = match other {
            Pattern::Exact(h) => (h, true),
            Pattern::Under(d) => (d, false),
            Pattern::ApexAndUnder(d) => (d, true),
        };
        match self {
            Pattern::Exact(a) => matches!(other, Pattern::Exact(b) if a == b),
            // `*.d` covers `x` under d, and `*.e`/`**.e` when e is under d; `*.d` also covers `*.d`.
            Pattern::Under(d) => is_under(inside, d) || (!own_apex && inside == d),
            Pattern::ApexAndUnder(d) => inside == d || is_under(inside, d),
        }
    }

    /// Whether some name matches both.
    fn overlaps(&self, other: &Pattern) -> bool {
        self.covers(other) || other.covers(self)
    }

    /// As the other tool writes it.
    pub(super) fn shown(&self) -> String {
        match self {
            Pattern::Exact(h) => h.clone(),
            Pattern::Under(d) => format!("*.{d}"),
            Pattern::ApexAndUnder(d) => format!("**.{d}"),
        }
    }

    /// The leash entry, and what it admits in words.
    fn leash(&self) -> (String, String) {
        match self {
            Pattern::Exact(h) => (h.clone(), "this host only".to_owned()),
            Pattern::Under(d) => {
                (format!(".{d}"), format!("every name under {d}, and {d} itself, which `*.` leaves out"))
            }
            Pattern::ApexAndUnder(d) => (format!(".{d}"), format!("{d} and every name under it")),
        }
    }
}

/// `name` is strictly under `domain`.
fn is_under(name: &str, domain: &str) -> bool {
    name.strip_suffix(domain).is_some_and(|head| head.len() > 1 && head.ends_with('.'))
}

/// An entry of either list: its label (`network.allowedDomains[0]`), its pattern, a note on what changed.
pub(super) type Entry = (String, Pattern, Option<&'static str>);

/// The allowlist text (YAML) of `allow` less `deny`: a line in `became` per entry, and each exception a denied entry
/// would cut out of an allowed one in `unexpressible`.
pub(super) fn allowlist(
    mut allow: Vec<Entry>,
    deny: Vec<Entry>,
    became: &mut Vec<String>,
    unexpressible: &mut Vec<String>,
) -> String {
    // Every allowed entry a denied one covers whole goes first; what still meets a denied entry is an exception.
    let dropped_by = |d: &Pattern| -> Vec<String> {
        allow.iter().filter(|(_, a, _)| d.covers(a)).map(|(_, a, _)| a.shown()).collect()
    };
    let drops: Vec<Vec<String>> = deny.iter().map(|(_, d, _)| dropped_by(d)).collect();
    allow.retain(|(_, a, _)| !deny.iter().any(|(_, d, _)| d.covers(a)));
    for ((label, d, _), dropped) in deny.iter().zip(drops) {
        let entry = format!("{label} `{}`", d.shown());
        // leash's `.example.com` admits `example.com` too: denying that name cuts into it.
        let apex = |a: &Pattern| matches!((a, d), (Pattern::Under(x), Pattern::Exact(y)) if x == y);
        if let Some((_, cut, _)) = allow.iter().find(|(_, a, _)| a.overlaps(d) || apex(a)) {
            let why =
                format!("{entry}: an exception to the allowed `{}`, which a leash allowlist cannot hold", cut.shown());
            unexpressible.push(why);
            continue;
        }
        became.push(match dropped.is_empty() {
            true => format!("{entry} → refused already (no allowed entry covers it)"),
            false => format!("{entry} → {} left out of allowed_hosts", dropped.join(", ")),
        });
    }
    let mut text = String::from("network:\n  mode: allowlist\n  allowed_hosts:");
    text.push_str(if allow.is_empty() { " []\n" } else { "\n" });
    for (label, p, note) in &allow {
        let (host, what) = p.leash();
        let note = note.map(|n| format!("; {n}")).unwrap_or_default();
        became.push(format!("{label} `{}` → allowed_hosts: {host} ({what}{note})", p.shown()));
        text.push_str(&format!("    - '{host}'\n"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::Pattern::{ApexAndUnder, Exact, Under};

    #[test]
    fn coverage_follows_each_form() {
        let s = |t: &str| t.to_owned();
        assert!(Under(s("a.com")).covers(&Exact(s("x.a.com"))));
        assert!(!Under(s("a.com")).covers(&Exact(s("a.com"))));
        assert!(!Under(s("a.com")).covers(&ApexAndUnder(s("a.com"))));
        assert!(Under(s("a.com")).covers(&ApexAndUnder(s("x.a.com"))));
        assert!(Under(s("a.com")).covers(&Under(s("a.com"))));
        assert!(ApexAndUnder(s("a.com")).covers(&Exact(s("a.com"))));
        assert!(ApexAndUnder(s("a.com")).covers(&Under(s("a.com"))));
        assert!(ApexAndUnder(s("a.com")).covers(&ApexAndUnder(s("x.a.com"))));
        assert!(!ApexAndUnder(s("x.a.com")).covers(&Exact(s("a.com"))));
        assert!(!Exact(s("a.com")).covers(&ApexAndUnder(s("a.com"))));
        assert!(Exact(s("a.com")).overlaps(&ApexAndUnder(s("a.com"))));
    }
}
