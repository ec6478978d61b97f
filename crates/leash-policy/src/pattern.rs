//! Path patterns: a rule's path with `*` segments, each standing for exactly one segment of a request's canonical
//! path (`github.com/*/*/git-receive-pack` names that ending under every `owner/repo`).
//!
//! A `*` matches one whole segment: never an empty one and never a `/`, and it is compared with the canonical path
//! (decoded, dot segments removed, `;params` dropped: see [`crate::path`]), so an encoded `%2F` is a separator there
//! and cannot hide inside a `*`. Like a prefix rule, a pattern matches the path it names and everything below it.
//! The loader refuses `**`, a `*` inside a segment and a trailing `*` (which says no more than the prefix before it).

/// A rule path with at least one `*` segment, split into its segments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PathPattern {
    /// Each segment of the canonical rule path; `*` is the wildcard (a literal `*` cannot be named).
    segments: Box<[Box<str>]>,
    /// The rule path ended in `/`: as with an allow prefix `/a/`, it matches only below its last segment.
    below: bool,
}

/// The segment that stands for any one segment.
const WILDCARD: &str = "*";

impl PathPattern {
    /// The pattern of a canonical rule path, or `None` when it has no `*` segment (a plain prefix).
    pub(crate) fn of(canonical: &str) -> Option<PathPattern> {
        let (path, below) = match canonical.strip_suffix('/') {
            Some(path) => (path, true),
            None => (canonical, false),
        };
        let segments: Box<[Box<str>]> = path.split('/').skip(1).map(Box::from).collect();
        segments.iter().any(|s| &**s == WILDCARD).then_some(PathPattern { segments, below })
    }

    /// Whether `path` (canonical) is the pattern's path or below it. Block rules compare literal segments without
    /// regard to case, as block prefixes do.
    pub(crate) fn matches(&self, path: &str, fold_case: bool) -> bool {
        let mut parts = path.split('/').skip(1);
        let named = self.segments.iter().all(|want| {
            parts.next().is_some_and(|got| match &**want {
                WILDCARD => !got.is_empty(),
                literal if fold_case => literal.eq_ignore_ascii_case(got),
                literal => literal == got,
            })
        });
        named && (!self.below || parts.next().is_some())
    }

    /// How specific the pattern is, greater first: more segments, then fewer wildcards.
    /// The length of the rule path as written (`/*/ab` is 5): how a pattern ranks against a prefix of the other
    /// kind, a literal prefix of the same length winning the tie (it names every segment).
    pub(crate) fn written_len(&self) -> usize {
        let segments: usize = self.segments.iter().map(|s| s.len() + 1).sum();
        segments + usize::from(self.below)
    }

    pub(crate) fn specificity(&self) -> (usize, std::cmp::Reverse<usize>) {
        let stars = self.segments.iter().filter(|s| &***s == WILDCARD).count();
        (self.segments.len(), std::cmp::Reverse(stars))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(p: &str) -> PathPattern {
        PathPattern::of(p).unwrap_or_else(|| PathPattern { segments: Box::new([]), below: false })
    }

    #[test]
    fn a_star_is_one_whole_non_empty_segment() {
        let push = pattern("/*/*/git-receive-pack");
        assert!(push.matches("/o/r.git/git-receive-pack", false));
        assert!(push.matches("/o/r/git-receive-pack/x", false), "and below it, as a prefix rule");
        assert!(!push.matches("/o/git-receive-pack", false), "one segment short");
        assert!(!push.matches("/g/sub/r/git-receive-pack", false), "one segment too many before the ending");
        assert!(!push.matches("/o/r/git-receive-packs", false), "whole segments only");
        assert!(!push.matches("/o/r/", false), "an empty segment is no segment");
        assert!(!push.matches("/o/r/GIT-RECEIVE-PACK", false));
        assert!(push.matches("/o/r/GIT-RECEIVE-PACK", true), "block rules ignore case");
        assert!(PathPattern::of("/a/b").is_none());
        let below = pattern("/*/b/");
        assert!(below.matches("/a/b/", false) && below.matches("/a/b/c", false));
        assert!(!below.matches("/a/b", false), "a trailing `/` matches below the segment, as an allow prefix does");
    }

    #[test]
    fn more_segments_then_fewer_stars_is_more_specific() {
        assert!(pattern("/*/*/x").specificity() > pattern("/*/x").specificity());
        assert!(pattern("/a/*/x").specificity() > pattern("/*/*/x").specificity());
    }
}
