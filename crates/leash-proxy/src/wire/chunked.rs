//! Chunked transfer-coding scanner (RFC 9112 §7.1): follows a chunked body as it streams through, so the proxy can
//! relay it verbatim and know exactly where it ends, refusing malformed chunk-size lines and bounding every line.
//!
//! Strict where parsers are known to disagree (the request-smuggling surface): the size is `1*HEXDIG` with nothing
//! before it and nothing but `;` (extensions) or CRLF after it, so `5 `, ` 5`, `0x5`, `-1` and an empty size are
//! refused; every line ends in CRLF; trailer lines are `token ":" value` without obs-fold. Chunk data is skipped in
//! one step per buffer, so the cost is per line, not per byte.

use super::bytes::{is_tchar, value_run};

/// Longest chunk-size line (with extensions) or trailer line accepted.
pub const MAX_CHUNK_LINE: usize = 4096;

/// Why a chunked body cannot be relayed: each is a smuggling shape or a broken body, and ends the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChunkedError {
    /// The size is not hex digits (an extension may follow after `;`), or the line is longer than
    /// [`MAX_CHUNK_LINE`].
    #[error("malformed chunk-size line")]
    BadSize,
    /// A size that does not fit in 64 bits.
    #[error("chunk size too large")]
    TooLarge,
    /// The bytes after a chunk's data are not CRLF: the size lied.
    #[error("chunk data not followed by CRLF")]
    MissingCrlf,
    /// A trailer line that is no header field, or longer than [`MAX_CHUNK_LINE`].
    #[error("malformed or overlong trailer line")]
    BadTrailer,
    /// A line ended by LF alone, which servers read differently.
    #[error("bare LF in chunked framing")]
    BareLf,
}

/// Streaming state; feed it the bytes as they pass.
#[derive(Debug, Clone, Default)]
pub struct ChunkedScanner {
    state: State,
    /// Bytes of the current chunk-size or trailer line so far, for [`MAX_CHUNK_LINE`].
    line: usize,
}

impl ChunkedScanner {
    /// A scanner at the start of a body.
    pub fn new() -> Self {
        Self::default()
    }

    /// Scan `buf` (the next bytes of the body). Returns how many bytes belong to the body: less than `buf.len()`
    /// only when the body ended inside `buf` (then [`ChunkedScanner::is_done`] is true). An error is final: every
    /// later call returns it again.
    pub fn feed(&mut self, buf: &[u8]) -> Result<usize, ChunkedError> {
        if let State::Failed(e) = &self.state {
            return Err(e.clone());
        }
        let mut used = 0;
        while let Some(rest) = buf.get(used..).filter(|rest| !rest.is_empty() && !self.is_done()) {
            match self.step(rest) {
                Ok(n) => used += n,
                Err(e) => {
                    self.state = State::Failed(e.clone());
                    return Err(e);
                }
            }
        }
        Ok(used)
    }

    /// The last chunk and the trailers have passed: the body is complete.
    pub fn is_done(&self) -> bool {
        matches!(self.state, State::Done)
    }

    /// Chunk data bytes left before the next framing byte, when the scanner is inside a chunk's data.
    pub fn data_left(&self) -> Option<u64> {
        match self.state {
            State::Data { left } => Some(left),
            _ => None,
        }
    }

    /// Consume at least one byte of the non-empty `rest`: a run of line text at once, else one framing byte.
    fn step(&mut self, rest: &[u8]) -> Result<usize, ChunkedError> {
        let used = match self.state {
            State::Data { left } => return Ok(self.data(rest, left)),
            State::Extension { .. } | State::TrailerValue => value_run(rest),
            State::TrailerName => run(rest, is_tchar),
            _ => 0,
        };
        self.line += used.max(1);
        if self.line > MAX_CHUNK_LINE {
            return Err(if self.in_trailer() { ChunkedError::BadTrailer } else { ChunkedError::BadSize });
        }
        match rest.first() {
            Some(&b) if used == 0 => self.byte(b).map(|()| 1),
            _ => Ok(used),
        }
    }

    /// Skip chunk data: as much of `rest` as the chunk has left.
    fn data(&mut self, rest: &[u8], left: u64) -> usize {
        let n = usize::try_from(left).map_or(rest.len(), |left| left.min(rest.len()));
        let left = left - n as u64;
        self.state = if left == 0 { State::DataCr } else { State::Data { left } };
        n
    }

    /// One framing byte: the state's next transition. (The state is taken out; an error leaves it to `feed`.)
    fn byte(&mut self, b: u8) -> Result<(), ChunkedError> {
        use ChunkedError as E;
        self.state = match (std::mem::take(&mut self.state), b) {
            (State::SizeLf { value: 0 }, b'\n') => self.line_start(State::TrailerStart),
            (State::SizeLf { value }, b'\n') => self.line_start(State::Data { left: value }),
            (State::DataLf, b'\n') => self.line_start(State::SizeStart),
            (State::TrailerLf, b'\n') => self.line_start(State::TrailerStart),
            (State::FinalLf, b'\n') => State::Done,
            (_, b'\n') => return Err(E::BareLf),
            (State::SizeStart, _) => State::Size { value: u64::from(hex(b).ok_or(E::BadSize)?) },
            (State::Size { value }, _) if hex(b).is_some() => State::Size { value: push_hex(value, b)? },
            (State::Size { value } | State::Extension { value }, b';') => State::Extension { value },
            (State::Size { value } | State::Extension { value }, b'\r') => State::SizeLf { value },
            (State::Size { .. } | State::Extension { .. } | State::SizeLf { .. }, _) => return Err(E::BadSize),
            (State::DataCr, b'\r') => State::DataLf,
            (State::DataCr | State::DataLf, _) => return Err(E::MissingCrlf),
            (State::TrailerStart, b'\r') => State::FinalLf,
            (State::TrailerStart, _) if is_tchar(b) => State::TrailerName,
            (State::TrailerName, b':') => State::TrailerValue,
            (State::TrailerValue, b'\r') => State::TrailerLf,
            _ => return Err(E::BadTrailer),
        };
        Ok(())
    }

    /// In text a peer chose (a chunk extension, the trailer section) rather than sizes and line ends: searched for
    /// credentials like data is.
    pub fn in_text(&self) -> bool {
        matches!(self.state, State::Extension { .. }) || self.in_trailer()
    }

    /// Inside the trailer section (after the last chunk): its lines are fields, like a head's.
    pub fn in_trailer(&self) -> bool {
        matches!(self.state, State::TrailerStart | State::TrailerName | State::TrailerValue | State::TrailerLf)
    }

    /// Enter `next`, the first state of a new line.
    fn line_start(&mut self, next: State) -> State {
        self.line = 0;
        next
    }
}

#[derive(Debug, Clone, Default)]
enum State {
    /// Before the first hex digit of a chunk-size line.
    #[default]
    SizeStart,
    Size {
        value: u64,
    },
    /// After a `;`, up to the CR.
    Extension {
        value: u64,
    },
    /// The CR of the chunk-size line seen.
    SizeLf {
        value: u64,
    },
    Data {
        left: u64,
    },
    DataCr,
    DataLf,
    /// At the start of a trailer line, or of the empty line that ends the body.
    TrailerStart,
    TrailerName,
    TrailerValue,
    TrailerLf,
    FinalLf,
    Done,
    Failed(ChunkedError),
}

/// Hex digits a size may have before it overflows `u64`: refused with `TooLarge` past this, never wrapped.
const SIZE_SHIFT_LIMIT: u64 = u64::MAX >> 4;

fn push_hex(value: u64, b: u8) -> Result<u64, ChunkedError> {
    if value > SIZE_SHIFT_LIMIT {
        return Err(ChunkedError::TooLarge);
    }
    Ok(value << 4 | u64::from(hex(b).unwrap_or(0)))
}

fn hex(b: u8) -> Option<u8> {
    char::from(b).to_digit(16).and_then(|d| u8::try_from(d).ok())
}

/// The length of the run of `class` bytes at the start of `rest`.
fn run(rest: &[u8], class: impl Fn(u8) -> bool) -> usize {
    rest.iter().position(|&b| !class(b)).unwrap_or(rest.len())
}

#[cfg(test)]
mod tests;
