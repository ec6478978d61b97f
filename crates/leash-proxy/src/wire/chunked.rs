//! Chunked transfer-coding scanner (RFC 9112 §7.1): follows a chunked body as it streams through, so the proxy can
//! relay it verbatim and know exactly where it ends, refusing malformed chunk-size lines and bounding every line.

/// Longest chunk-size line (with extensions) or trailer line accepted.
pub const MAX_CHUNK_LINE: usize = 4096;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChunkedError {
    #[error("malformed chunk-size line")]
    BadSize,
    #[error("chunk size too large")]
    TooLarge,
    #[error("chunk data not followed by CRLF")]
    MissingCrlf,
    #[error("malformed or overlong trailer line")]
    BadTrailer,
    #[error("bare LF in chunked framing")]
    BareLf,
}

/// Streaming state; feed it the bytes as they pass.
#[derive(Debug, Clone, Default)]
pub struct ChunkedScanner {}

impl ChunkedScanner {
    pub fn new() -> Self {
        Self::default()
    }

    /// Scan `buf` (the next bytes of the body). Returns how many bytes belong to the body: less than `buf.len()`
    /// only when the body ended inside `buf` (then [`ChunkedScanner::is_done`] is true).
    pub fn feed(&mut self, _buf: &[u8]) -> Result<usize, ChunkedError> {
        todo!()
    }

    pub fn is_done(&self) -> bool {
        todo!()
    }
}
