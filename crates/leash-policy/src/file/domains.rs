//! Other tools' domain allowlists with a deny list beside them (sandbox-runtime's and Claude Code's
//! `allowedDomains`/`deniedDomains`, Codex's `domains` map): their patterns, and the one way both lists become a
//! leash allowlist. A denied entry drops the allowed entries it covers whole; one inside an allowed wildcard becomes a
//! `blocked_urls` exception, which covers the name and every name under it: where that is more than the denied entry
//! (`x`'s subdomains, `*.x`'s `x`) it refuses more, and says so. Denying the name a `.x` entry leash writes also
//! admits (`x` beside `*.x`, or `**.x`) cannot be expressed: a block entry on `x` would tie with `.x`; it is
//! reported, never approximated.

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

/// The allowlist text (YAML) of `allow` less `deny`: a line in `became` per entry, the denied entries inside allowed
/// wildcards as `blocked_urls` exceptions, and each one leash cannot cut out (see the module's doc) in `unexpressible`.
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
    let mut blocked = Vec::new();
    for ((label, d, _), dropped) in deny.iter().zip(drops) {
        let entry = format!("{label} `{}`", d.shown());
        let (host, widened) = match d {
            Pattern::Exact(h) => (h, Some(format!("every name under {h} too, which the denied entry leaves out"))),
            Pattern::Under(y) => (y, Some(format!("{y} itself too, which `*.` leaves out"))),
            Pattern::ApexAndUnder(y) => (y, None),
        };
        // leash writes an allowed wildcard as `.y`, which admits `y` too: a block entry on `y` would tie with it.
        let tie = |a: &Pattern| matches!(a, Pattern::Under(x) | Pattern::ApexAndUnder(x) if x == host);
        if let Some((_, cut, _)) = allow.iter().find(|(_, a, _)| tie(a)) {
            let why = format!(
                "{entry}: the name leash's `.{host}` for the allowed `{}` admits too; a leash block entry on it would \
                 cover every name the wildcard allows",
                cut.shown()
            );
            unexpressible.push(why);
            continue;
        }
        // What still meets an allowed entry lies inside an allowed wildcard (those it covers were dropped above).
        if let Some((_, inside, _)) = allow.iter().find(|(_, a, _)| a.overlaps(d)) {
            let widened = widened.map(|w| format!("; it refuses {w}")).unwrap_or_default();
            became.push(format!(
                "{entry} → blocked_urls: {host} (an exception inside the allowed `{}`{widened})",
                inside.shown()
            ));
            blocked.push(host.clone());
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
    if !blocked.is_empty() {
        text.push_str("  blocked_urls:\n");
        for host in &blocked {
            text.push_str(&format!("    - '{host}'\n"));
        }
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
