//! A read cursor over a byte slice for length-prefixed binary formats (the TLS ClientHello): every read is checked
//! against what is left and answers `None` instead of indexing out of bounds, so a parser built on it cannot panic.

/// Reads big-endian integers and length-prefixed vectors from the front of a slice.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cursor<'a> {
    rest: &'a [u8],
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { rest: buf }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    /// The next `n` bytes, or `None` (and nothing consumed) if fewer are left.
    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.rest.len() {
            return None;
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Some(head)
    }

    pub(crate) fn u8(&mut self) -> Option<u8> {
        let (&first, tail) = self.rest.split_first()?;
        self.rest = tail;
        Some(first)
    }

    pub(crate) fn u16(&mut self) -> Option<u16> {
        let b = self.take(2)?;
        Some(u16::from_be_bytes([*b.first()?, *b.get(1)?]))
    }

    /// A vector whose length is given by a leading `u8`.
    pub(crate) fn vec_u8(&mut self) -> Option<&'a [u8]> {
        let n = self.u8()?;
        self.take(usize::from(n))
    }

    /// A vector whose length is given by a leading big-endian `u16`.
    pub(crate) fn vec_u16(&mut self) -> Option<&'a [u8]> {
        let n = self.u16()?;
        self.take(usize::from(n))
    }
}

#[cfg(test)]
mod tests {
    use super::Cursor;

    #[test]
    fn reads_are_bounded_and_leave_the_cursor_unchanged_on_failure() {
        let mut c = Cursor::new(&[0x01, 0x02, 0x03]);
        assert_eq!(c.u16(), Some(0x0102));
        assert_eq!(c.take(2), None);
        assert_eq!(c.u8(), Some(3));
        assert_eq!(c.u8(), None);
        assert!(c.is_empty());
        let mut v = Cursor::new(&[0x00, 0x03, 0xaa]);
        assert_eq!(v.vec_u16(), None);
        assert_eq!(Cursor::new(&[0x02, 0xaa, 0xbb]).vec_u8(), Some(&[0xaa, 0xbb][..]));
    }
}
