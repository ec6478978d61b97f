//! The compiled rule matcher: host suffix index → path prefixes, most specific rule first.
//!
//! Rules are indexed by the host they name, in a `HashMap`; a request host is looked up at each of its suffixes that
//! starts at a label boundary, longest first, so a lookup costs one hash per label whatever the number of rules. Under
//! one host, path prefixes sit in a sorted `Vec` searched for the longest prefix of the request path (a few binary
//! searches, see [`longest_prefix`]).
//!
//! Specificity, by comparison and never by file order: the longer host suffix wins first (so an exact host beats a
//! subdomain entry for a parent name); under one host a path rule beats a host rule and a longer path beats a shorter
//! one; in an allowlist an exact `x` entry beats a `.x` entry. Rules that tie (the same canonical entry written twice)
//! name the smaller original text. A path pattern (`/*/*/git-receive-pack`, see [`crate::pattern`]) counts as a path
//! rule that beats every prefix under its host; among patterns, more segments first, then fewer `*`.

use std::borrow::Cow;
use std::sync::Arc;

use crate::fasthash::FastMap;
use crate::pattern::PathPattern;

/// What a matcher holds: allow rules (`allowed_hosts` + `allowed_urls`) or block rules (`blocked_urls`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Path prefixes name one host exactly, match case-sensitively and only at a `/` boundary.
    Allow,
    /// Every entry covers its host and every subdomain; path prefixes are plain, case-insensitive prefixes.
    Block,
}

#[derive(Debug)]
pub(crate) struct Matcher {
    kind: Kind,
    hosts: FastMap<Box<str>, HostRules>,
}

#[derive(Debug, Default)]
struct HostRules {
    /// `x` in `allowed_hosts`: this host only.
    exact: Option<Arc<str>>,
    /// `.x` in `allowed_hosts`, or a host entry in `blocked_urls`: this host and every subdomain.
    subtree: Option<Arc<str>>,
    paths: PrefixSet,
    /// Path patterns, most specific first (after [`Matcher::finish`]).
    patterns: Vec<(PathPattern, Arc<str>)>,
}

/// Path prefixes sorted by their bytes (lowercased for block rules), each with the entry that wrote it.
#[derive(Debug, Default)]
struct PrefixSet {
    entries: Vec<(Box<str>, Arc<str>)>,
    /// The distinct key lengths, longest first, when there are few (see [`PrefixSet::longest`]).
    lengths: Vec<usize>,
}

/// Up to this many distinct key lengths under one host, a lookup probes each length for an exact key (one binary
/// search each) instead of the narrowing search: generated blocklists (`/abs/2401.01234`, ...) have one or two.
const MAX_PROBED_LENGTHS: usize = 4;

impl Matcher {
    pub(crate) fn new(kind: Kind) -> Matcher {
        Matcher { kind, hosts: FastMap::default() }
    }

    pub(crate) fn add_exact(&mut self, host: &str, rule: &Arc<str>) {
        if let Some(rules) = self.entry(host) {
            keep_smaller(&mut rules.exact, rule);
        }
    }

    pub(crate) fn add_subtree(&mut self, host: &str, rule: &Arc<str>) {
        if let Some(rules) = self.entry(host) {
            keep_smaller(&mut rules.subtree, rule);
        }
    }

    /// `path` is canonical; block prefixes are lowercased here so matching can compare bytes. A path with a `*`
    /// segment is a pattern.
    pub(crate) fn add_path(&mut self, host: &str, path: &str, rule: &Arc<str>) {
        if let Some(pattern) = PathPattern::of(path) {
            return self.add_pattern(host, pattern, rule);
        }
        let key = match self.kind {
            Kind::Allow => path.into(),
            Kind::Block => path.to_ascii_lowercase().into_boxed_str(),
        };
        if let Some(rules) = self.entry(host) {
            rules.paths.entries.push((key, Arc::clone(rule)));
        }
    }

    /// A path pattern under `host` (a block pattern covers subdomains, an allow pattern names the host exactly).
    pub(crate) fn add_pattern(&mut self, host: &str, pattern: PathPattern, rule: &Arc<str>) {
        if let Some(rules) = self.entry(host) {
            rules.patterns.push((pattern, Arc::clone(rule)));
        }
    }

    /// Whether any entry carries a path.
    pub(crate) fn has_path_rules(&self) -> bool {
        self.hosts.values().any(|rules| !rules.paths.entries.is_empty() || !rules.patterns.is_empty())
    }

    /// Sort every prefix set; call once after the last `add_*`.
    pub(crate) fn finish(&mut self) {
        for rules in self.hosts.values_mut() {
            rules.patterns.sort_by(|a, b| b.0.specificity().cmp(&a.0.specificity()).then_with(|| a.1.cmp(&b.1)));
            rules.paths.entries.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
            rules.paths.entries.dedup_by(|later, first| later.0 == first.0);
            let mut lengths: Vec<usize> = rules.paths.entries.iter().map(|(key, _)| key.len()).collect();
            lengths.sort_unstable_by(|a, b| b.cmp(a));
            lengths.dedup();
            if lengths.len() <= MAX_PROBED_LENGTHS {
                rules.paths.lengths = lengths;
            }
        }
    }

    /// The most specific rule matching `host` (a validated name) and `path` (canonical), if any.
    pub(crate) fn best(&self, host: &str, path: &str) -> Option<&Arc<str>> {
        let mut lowered: Option<Cow<'_, str>> = None;
        for (full, rules) in self.suffixes(host) {
            // Checked here rather than in the call: most hosts have no pattern, and this loop is every decision's.
            if !rules.patterns.is_empty() {
                if let Some(rule) = rules.pattern_match(path, self.kind, full) {
                    return Some(rule);
                }
            }
            let found = match self.kind {
                Kind::Allow if full => rules
                    .paths
                    .longest(path.as_bytes(), |key| at_boundary(path.as_bytes(), key))
                    .or(rules.exact.as_ref())
                    .or(rules.subtree.as_ref()),
                Kind::Allow => rules.subtree.as_ref(),
                Kind::Block => {
                    let by_path = match rules.paths.entries.is_empty() {
                        true => None,
                        false => {
                            let query = lowered.get_or_insert_with(|| lowercase(path));
                            rules.paths.longest(query.as_bytes(), |_| true)
                        }
                    };
                    by_path.or(rules.subtree.as_ref())
                }
            };
            if found.is_some() {
                return found;
            }
        }
        None
    }

    /// The most specific host-level rule (one that matches every path) for `host`.
    pub(crate) fn host_rule(&self, host: &str) -> Option<&Arc<str>> {
        self.suffixes(host).find_map(|(full, rules)| match self.kind {
            Kind::Allow if full => rules.exact.as_ref().or(rules.subtree.as_ref()),
            _ => rules.subtree.as_ref(),
        })
    }

    /// The first path rule that applies to `host` (for block rules any covering it, for allow rules those naming
    /// it): longest host suffix first, then in byte order, so it is the same whatever the file order.
    pub(crate) fn first_path_rule(&self, host: &str) -> Option<&Arc<str>> {
        self.suffixes(host)
            .filter(|(full, _)| self.kind == Kind::Block || *full)
            .find_map(|(_, rules)| rules.paths.entries.first().map(|(_, rule)| rule).or(rules.first_pattern()))
    }

    /// The nearest parent of `host` (a suffix at a label boundary, never `host` itself) that an exact entry names:
    /// `example.org` for `api.example.org` when `example.org` is listed without its leading dot.
    pub(crate) fn exact_parent<'h>(&self, host: &'h str) -> Option<&'h str> {
        let mut parents = host.match_indices('.').filter_map(|(i, _)| host.get(i + 1..));
        parents.find(|parent| self.hosts.get(*parent).is_some_and(|rules| rules.exact.is_some()))
    }

    /// The rules named at each suffix of `host` at a label boundary, longest first, each marked whether it is the
    /// whole host.
    fn suffixes<'s, 'h>(&'s self, host: &'h str) -> impl Iterator<Item = (bool, &'s HostRules)> + 'h
    where
        's: 'h,
    {
        let starts = std::iter::once(0).chain(host.match_indices('.').map(|(i, _)| i + 1));
        starts.filter_map(move |start| Some((start == 0, self.hosts.get(host.get(start..)?)?)))
    }

    fn entry(&mut self, host: &str) -> Option<&mut HostRules> {
        // `entry()` would allocate the key on every call; most calls find the host already there.
        if !self.hosts.contains_key(host) {
            self.hosts.insert(host.into(), HostRules::default());
        }
        self.hosts.get_mut(host)
    }
}

impl HostRules {
    /// The most specific pattern matching `path`; allow patterns name their host exactly (`full`).
    fn pattern_match(&self, path: &str, kind: Kind, full: bool) -> Option<&Arc<str>> {
        match kind {
            Kind::Allow if !full => None,
            _ => self.patterns.iter().find(|(p, _)| p.matches(path, kind == Kind::Block)).map(|(_, rule)| rule),
        }
    }

    /// [`HostRules::pattern_match`] with the matching pattern's written length.
    fn ranked_pattern_match(&self, path: &str, kind: Kind, full: bool) -> Option<(usize, &Arc<str>)> {
        match kind {
            Kind::Allow if !full => None,
            _ => self
                .patterns
                .iter()
                .find(|(p, _)| p.matches(path, kind == Kind::Block))
                .map(|(p, rule)| (p.written_len(), rule)),
        }
    }

    /// The pattern rule first in byte order of its text, so the same whatever the file order.
    fn first_pattern(&self) -> Option<&Arc<str>> {
        self.patterns.iter().map(|(_, rule)| rule).min()
    }
}

/// How specific a matching rule is, compared field by field: the host suffix the entry names (longer wins), then
/// its class (a path rule beats an exact host, which beats a subtree), then its path prefix (longer wins). It is the
/// order [`Matcher::best`] picks by within one matcher; the engine compares a policy's rules with its exceptions
/// (rules of the other kind) by it too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Rank {
    /// Length in bytes of the host suffix the entry names (the whole host for an exact entry).
    pub(crate) suffix: usize,
    class: Class,
    /// Length in bytes of the path prefix; 0 for a host rule.
    path: usize,
}

/// What an entry names under its host, least specific first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Class {
    /// The host and every subdomain: `.x` in `allowed_hosts`, a host in `blocked_urls`.
    Subtree,
    /// `x` in `allowed_hosts`: the host only.
    Exact,
    /// A path prefix.
    Path,
}

impl Rank {
    /// Whether the entry carries a path, so the decision it gives rests on the request's path.
    pub(crate) fn is_path(self) -> bool {
        self.class == Class::Path
    }
}

/// The ranked look-ups the engine needs when a policy holds rules of both kinds.
impl Matcher {
    /// Allow rules or block rules.
    pub(crate) fn kind(&self) -> Kind {
        self.kind
    }

    /// Whether no entry was added.
    pub(crate) fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }

    /// [`Matcher::best`] with the rank of the rule it finds.
    pub(crate) fn best_ranked(&self, host: &str, path: &str) -> Option<(Rank, &Arc<str>)> {
        let mut lowered: Option<Cow<'_, str>> = None;
        for (suffix, rules) in self.ranked_suffixes(host) {
            let full = suffix == host.len();
            // Against rules of the other kind a pattern ranks by its written length, so a literal path as long
            // (which names every segment) wins the tie; a tie between kinds goes to the block rule.
            let by_pattern = match rules.patterns.is_empty() {
                true => None,
                false => rules.ranked_pattern_match(path, self.kind, full),
            };
            let by_path = match self.kind {
                Kind::Allow if full => {
                    rules.paths.longest_entry(path.as_bytes(), |key| at_boundary(path.as_bytes(), key))
                }
                Kind::Allow => None,
                Kind::Block if rules.paths.entries.is_empty() => None,
                Kind::Block => {
                    let query = lowered.get_or_insert_with(|| lowercase(path));
                    rules.paths.longest_entry(query.as_bytes(), |_| true)
                }
            };
            let by_path = by_path.map(|(key, rule)| (key.len(), rule));
            let longest = match (by_pattern, by_path) {
                (Some(pattern), Some(prefix)) if prefix.0 >= pattern.0 => Some(prefix),
                (Some(pattern), _) => Some(pattern),
                (None, prefix) => prefix,
            };
            if let Some((len, rule)) = longest {
                return Some((Rank { suffix, class: Class::Path, path: len }, rule));
            }
            if let Some((class, rule)) = self.host_level(full, rules) {
                return Some((Rank { suffix, class, path: 0 }, rule));
            }
        }
        None
    }

    /// [`Matcher::host_rule`] with its rank.
    pub(crate) fn host_rule_ranked(&self, host: &str) -> Option<(Rank, &Arc<str>)> {
        self.ranked_suffixes(host).find_map(|(suffix, rules)| {
            let (class, rule) = self.host_level(suffix == host.len(), rules)?;
            Some((Rank { suffix, class, path: 0 }, rule))
        })
    }

    /// [`Matcher::first_path_rule`] among the entries naming a suffix of `host` at least `min_suffix` bytes long:
    /// the path rules that beat, on the paths they match, a host rule naming a suffix that long.
    pub(crate) fn first_path_rule_within(&self, host: &str, min_suffix: usize) -> Option<&Arc<str>> {
        self.ranked_suffixes(host)
            .take_while(|(suffix, _)| *suffix >= min_suffix)
            .filter(|(suffix, _)| self.kind == Kind::Block || *suffix == host.len())
            .find_map(|(_, rules)| rules.paths.entries.first().map(|(_, rule)| rule).or(rules.first_pattern()))
    }

    /// The host rule of `rules` that applies: for allow rules on the whole host an exact entry before a subtree.
    fn host_level<'r>(&self, full: bool, rules: &'r HostRules) -> Option<(Class, &'r Arc<str>)> {
        let exact = match (self.kind, full) {
            (Kind::Allow, true) => rules.exact.as_ref(),
            _ => None,
        };
        exact.map(|rule| (Class::Exact, rule)).or_else(|| rules.subtree.as_ref().map(|rule| (Class::Subtree, rule)))
    }

    /// The rules named at each suffix of `host` at a label boundary, longest first, each with the suffix's length.
    fn ranked_suffixes<'s, 'h>(&'s self, host: &'h str) -> impl Iterator<Item = (usize, &'s HostRules)> + 'h
    where
        's: 'h,
    {
        let starts = std::iter::once(0).chain(host.match_indices('.').map(|(i, _)| i + 1));
        starts.filter_map(move |start| Some((host.len() - start, self.hosts.get(host.get(start..)?)?)))
    }
}

impl PrefixSet {
    /// The longest key that is a prefix of `query` and that `accept` takes.
    fn longest(&self, query: &[u8], accept: impl Fn(&[u8]) -> bool) -> Option<&Arc<str>> {
        self.longest_entry(query, accept).map(|(_, rule)| rule)
    }

    /// [`PrefixSet::longest`] with its key, whose length ranks it against other rules (see [`Rank`]).
    fn longest_entry(&self, query: &[u8], accept: impl Fn(&[u8]) -> bool) -> Option<&(Box<str>, Arc<str>)> {
        if self.lengths.is_empty() {
            return longest_prefix(&self.entries, |(key, _)| key.as_bytes(), query, accept);
        }
        self.lengths.iter().filter_map(|&len| query.get(..len)).find_map(|candidate| {
            let found = self.entries.binary_search_by(|(key, _)| key.as_bytes().cmp(candidate)).ok()?;
            let entry = self.entries.get(found)?;
            accept(entry.0.as_bytes()).then_some(entry)
        })
    }
}

/// The longest element of `sorted` (sorted by `key`) whose key is a prefix of `query` and that `accept` takes.
///
/// The largest key ≤ `query` is either a prefix of it — then the longest such prefix, since a longer one would sort
/// between the two — or it shares a common prefix with `query` that every matching key must lie within; so each
/// round either answers or shortens the query, and a round is one binary search.
pub(crate) fn longest_prefix<'s, T>(
    sorted: &'s [T],
    key: impl Fn(&T) -> &[u8],
    query: &[u8],
    accept: impl Fn(&[u8]) -> bool,
) -> Option<&'s T> {
    let mut q = query;
    loop {
        let idx = sorted.partition_point(|item| key(item) <= q);
        let item = sorted.get(idx.checked_sub(1)?)?;
        let k = key(item);
        if q.starts_with(k) {
            if accept(k) {
                return Some(item);
            }
            q = k.get(..k.len().checked_sub(1)?)?;
        } else {
            let common = k.iter().zip(q).take_while(|(a, b)| a == b).count();
            q = q.get(..common)?;
        }
    }
}

/// Block prefixes are stored lowercase; a request path is lowered to meet them, copied only if it has to be.
fn lowercase(path: &str) -> Cow<'_, str> {
    match path.bytes().any(|b| b.is_ascii_uppercase()) {
        true => Cow::Owned(path.to_ascii_lowercase()),
        false => Cow::Borrowed(path),
    }
}

/// An allow prefix matches at a `/` boundary: `/a` admits `/a` and `/a/…` but not `/ab`; `/a/` admits `/a/…`.
fn at_boundary(path: &[u8], key: &[u8]) -> bool {
    key.ends_with(b"/") || path.len() == key.len() || path.get(key.len()) == Some(&b'/')
}

fn keep_smaller(slot: &mut Option<Arc<str>>, rule: &Arc<str>) {
    let smaller = match slot {
        Some(held) => rule < held,
        None => true,
    };
    if smaller {
        *slot = Some(Arc::clone(rule));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(s: &str) -> Arc<str> {
        Arc::from(s)
    }

    fn named(m: &Matcher, host: &str, path: &str) -> Option<String> {
        m.best(host, path).map(|r| r.to_string())
    }

    #[test]
    fn block_rules_pick_the_most_specific() {
        let mut m = Matcher::new(Kind::Block);
        m.add_subtree("example.com", &rule("example.com"));
        m.add_path("example.com", "/abs/", &rule("example.com/abs/"));
        m.add_path("example.com", "/abs/2401", &rule("example.com/abs/2401"));
        m.add_subtree("a.example.com", &rule("a.example.com"));
        m.finish();
        assert_eq!(named(&m, "example.com", "/ABS/2401.1").as_deref(), Some("example.com/abs/2401"));
        assert_eq!(named(&m, "x.example.com", "/abs/1").as_deref(), Some("example.com/abs/"));
        assert_eq!(named(&m, "example.com", "/other").as_deref(), Some("example.com"));
        assert_eq!(named(&m, "b.a.example.com", "/abs/2401").as_deref(), Some("a.example.com"));
        assert_eq!(named(&m, "example.org", "/"), None);
        assert_eq!(named(&m, "notexample.com", "/abs/2401"), None);
        assert_eq!(m.host_rule("x.example.com").map(|r| r.to_string()).as_deref(), Some("example.com"));
    }

    #[test]
    fn allow_prefixes_stop_at_slash_boundaries() {
        let mut m = Matcher::new(Kind::Allow);
        m.add_path("github.com", "/rust-lang", &rule("github.com/rust-lang"));
        m.add_path("github.com", "/rust-lang-nursery/", &rule("github.com/rust-lang-nursery/"));
        m.finish();
        assert_eq!(named(&m, "github.com", "/rust-lang").as_deref(), Some("github.com/rust-lang"));
        assert_eq!(named(&m, "github.com", "/rust-lang/x").as_deref(), Some("github.com/rust-lang"));
        assert_eq!(named(&m, "github.com", "/rust-lang-evil/"), None);
        assert_eq!(named(&m, "github.com", "/rust-lang-nursery"), None);
        assert_eq!(named(&m, "github.com", "/Rust-lang/x"), None);
        assert_eq!(named(&m, "api.github.com", "/rust-lang/x"), None);
        assert_eq!(m.first_path_rule("github.com").map(|r| r.to_string()).as_deref(), Some("github.com/rust-lang"));
    }

    #[test]
    fn exact_beats_subtree_and_ties_name_the_smaller_text() {
        let mut m = Matcher::new(Kind::Allow);
        m.add_subtree("example.com", &rule(".example.com"));
        m.add_exact("example.com", &rule("example.com"));
        m.finish();
        assert_eq!(named(&m, "example.com", "/").as_deref(), Some("example.com"));
        assert_eq!(named(&m, "a.example.com", "/").as_deref(), Some(".example.com"));
        let mut m = Matcher::new(Kind::Block);
        m.add_path("x.org", "/a", &rule("x.org/b/../a"));
        m.add_path("x.org", "/a", &rule("x.org/a"));
        m.finish();
        assert_eq!(named(&m, "x.org", "/a").as_deref(), Some("x.org/a"));
    }

    #[test]
    fn longest_prefix_search_backs_off_past_near_misses() {
        let mut m = Matcher::new(Kind::Block);
        for p in ["/a", "/ab", "/abd", "/b"] {
            m.add_path("h.org", p, &rule(p));
        }
        m.finish();
        assert_eq!(named(&m, "h.org", "/abc").as_deref(), Some("/ab"));
        assert_eq!(named(&m, "h.org", "/ac").as_deref(), Some("/a"));
        assert_eq!(named(&m, "h.org", "/c"), None);
    }

    #[test]
    fn many_key_lengths_use_the_narrowing_search() {
        let mut m = Matcher::new(Kind::Block);
        for p in ["/a", "/ab", "/abd", "/abde", "/abdef", "/b", "/abdxyz0"] {
            m.add_path("h.org", p, &rule(p));
        }
        m.finish();
        assert!(m.hosts.get("h.org").is_some_and(|r| r.paths.lengths.is_empty()));
        assert_eq!(named(&m, "h.org", "/abc").as_deref(), Some("/ab"));
        assert_eq!(named(&m, "h.org", "/abdeg").as_deref(), Some("/abde"));
        assert_eq!(named(&m, "h.org", "/ac").as_deref(), Some("/a"));
        assert_eq!(named(&m, "h.org", "/c"), None);
    }
}
