//! Byte classes of HTTP/1.1 (RFC 9110 §5.5, §5.6.2) and fast scans over runs of them. Header values and
//! request-targets are the long parts of a head (cookies, user agents, URLs), so their runs are skipped eight bytes
//! at a time with word arithmetic (no `unsafe`, no dependency); names are short and use a table.

/// RFC 9110 §5.6.2 tchar: methods, field names, Connection options, trailer names.
pub(crate) fn is_tchar(b: u8) -> bool {
    TCHAR[usize::from(b)]
}

/// Visible ASCII (VCHAR): what a request-target and a version may hold.
pub(crate) fn is_visible(b: u8) -> bool {
    (0x21..=0x7e).contains(&b)
}

/// A field-value or reason-phrase byte: VCHAR, obs-text, SP or HTAB (RFC 9110 §5.5); no controls, no DEL.
pub(crate) fn is_value_byte(b: u8) -> bool {
    is_visible(b) || b >= 0x80 || b == b' ' || b == b'\t'
}

/// Length of the leading run of [`is_value_byte`] bytes.
pub(crate) fn value_run(rest: &[u8]) -> usize {
    // A word with no control byte and no DEL is all value bytes. HTAB counts as a control here, so a word holding
    // one goes to the byte loop, which is exact.
    words_then_bytes(rest, |w| !has_less(w, 0x20) && !has_zero(w ^ splat(0x7f)), is_value_byte)
}

/// Length of the leading run of [`is_visible`] bytes.
pub(crate) fn visible_run(rest: &[u8]) -> usize {
    words_then_bytes(rest, |w| !has_less(w, 0x21) && !has_zero(w ^ splat(0x7f)) && w & splat(0x80) == 0, is_visible)
}

/// Length of the leading run of `class` bytes, given `class` as an exact check on whole words (`all`: every byte
/// of the word is in the class; false may also mean "don't know") and on single bytes.
fn words_then_bytes(rest: &[u8], all: impl Fn(u64) -> bool, class: fn(u8) -> bool) -> usize {
    let mut n = 0;
    while let Some(word) = rest.get(n..n + WORD).and_then(|w| <[u8; WORD]>::try_from(w).ok()) {
        if !all(u64::from_le_bytes(word)) {
            break;
        }
        n += WORD;
    }
    let tail = rest.get(n..).unwrap_or_default();
    n + tail.iter().position(|&b| !class(b)).unwrap_or(tail.len())
}

const WORD: usize = 8;

/// `b` in every byte of a word.
const fn splat(b: u8) -> u64 {
    u64::from_ne_bytes([b; WORD])
}

/// Whether some byte of `w` is zero (exact as a yes/no: a false flag can only follow a true one).
fn has_zero(w: u64) -> bool {
    w.wrapping_sub(splat(1)) & !w & splat(0x80) != 0
}

/// Whether some byte of `w` is below `n` (n <= 128; exact as a yes/no, as for [`has_zero`]).
fn has_less(w: u64, n: u8) -> bool {
    w.wrapping_sub(splat(n)) & !w & splat(0x80) != 0
}

const TCHAR: [bool; 256] = {
    let mut table = [false; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        table[i] = b.is_ascii_alphanumeric()
            || matches!(b, b'!' | b'#'..=b'\'' | b'*' | b'+' | b'-' | b'.' | b'^'..=b'`' | b'|' | b'~');
        i += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn naive(rest: &[u8], class: fn(u8) -> bool) -> usize {
        rest.iter().take_while(|&&b| class(b)).count()
    }

    #[test]
    fn tchar_table_matches_rfc_9110() {
        let specials = b"!#$%&'*+-.^_`|~";
        for b in 0..=255u8 {
            assert_eq!(is_tchar(b), b.is_ascii_alphanumeric() || specials.contains(&b), "{b:#x}");
        }
    }

    proptest! {
        #[test]
        fn word_scans_match_byte_scans(
            bytes in proptest::collection::vec(
                prop_oneof![4 => 0x20u8..0x7f, 1 => any::<u8>(), 1 => Just(b'\t'), 1 => Just(0x7fu8)], 0..80),
        ) {
            prop_assert_eq!(value_run(&bytes), naive(&bytes, is_value_byte));
            prop_assert_eq!(visible_run(&bytes), naive(&bytes, is_visible));
        }
    }
}
