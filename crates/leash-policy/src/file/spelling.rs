//! "Did you mean": the known word closest to a slip (`allowed_host` → `allowed_hosts`, `+pyhton` → `+python`), for
//! the messages of the validator and of presets.

/// The word of `known` closest to `word`, when it is close enough to be a slip rather than another word: within a
/// third of its length, and at least two edits.
pub(super) fn closest<'k>(word: &str, known: &[&'k str]) -> Option<&'k str> {
    let (distance, best) = known.iter().map(|k| (edit_distance(word, k), *k)).min()?;
    (distance <= (best.len() / 3).max(2)).then_some(best)
}

/// Levenshtein distance over bytes (keys are short ASCII words).
pub(super) fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, &ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let replaced = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = replaced.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}
