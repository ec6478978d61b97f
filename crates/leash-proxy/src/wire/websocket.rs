//! WebSocket frame headers (RFC 6455 §5.2), as a server sends them: enough to tell a frame's payload from its
//! framing so a credential echoed in a message is found wherever the server cut it. Strict where a payload could
//! hide from that search: a masked server frame, a reserved bit set (no extension is negotiated where leash
//! watches) and a reserved opcode are refused, as are the shapes RFC 6455 forbids (a fragmented or long control
//! frame, a continuation with no message under way, a new message inside one).

use super::Parsed;

/// The longest header: 2 bytes, an 8-byte length, a 4-byte mask.
pub const MAX_HEADER: usize = 14;

/// A frame header read off the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// The last frame of its message (always true for a control frame).
    pub fin: bool,
    /// Data, continuation or control.
    pub kind: Kind,
    /// The payload's length.
    pub len: u64,
}

/// What a frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The first frame of a text or binary message.
    Data,
    /// A later frame of a fragmented message.
    Continuation,
    /// Close, ping or pong: at most 125 bytes, never fragmented, possibly between two fragments of a message.
    Control,
}

/// Why a server's frames cannot be followed (RFC 6455 §5): the relay ends rather than pass bytes it cannot search.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// A server never masks; a masked payload would hide a value from the search.
    #[error("a frame from the server is masked")]
    Masked,
    /// RSV1-3 set: an extension (compression) would hide a value.
    #[error("a frame sets a reserved bit (an extension leash did not negotiate)")]
    Reserved,
    /// An opcode RFC 6455 reserves.
    #[error("a frame has a reserved opcode")]
    Opcode,
    /// A control frame without FIN, or with more than 125 bytes.
    #[error("a control frame is fragmented or longer than 125 bytes")]
    Control,
    /// Continuation and data frames out of order.
    #[error("a continuation frame with no message under way, or a new message inside one")]
    Sequence,
    /// A 64-bit length with its most significant bit set.
    #[error("a frame length has its top bit set")]
    Length,
}

/// The header at the start of `buf`, given whether a fragmented message is under way (`in_message`).
pub fn parse_header(buf: &[u8], in_message: bool) -> Parsed<FrameHeader, FrameError> {
    let (Some(&b0), Some(&b1)) = (buf.first(), buf.get(1)) else { return Parsed::NeedMore };
    let (fin, opcode) = (b0 & 0x80 != 0, b0 & 0x0f);
    if b0 & 0x70 != 0 {
        return Parsed::Refuse(FrameError::Reserved);
    }
    if b1 & 0x80 != 0 {
        return Parsed::Refuse(FrameError::Masked);
    }
    let kind = match opcode {
        0 if in_message => Kind::Continuation,
        1 | 2 if !in_message => Kind::Data,
        8..=10 => Kind::Control,
        0..=2 => return Parsed::Refuse(FrameError::Sequence),
        _ => return Parsed::Refuse(FrameError::Opcode),
    };
    let (len, used) = match b1 & 0x7f {
        126 => match buf.get(2..4) {
            Some(b) => (u64::from(u16::from_be_bytes([b[0], b[1]])), 4),
            None => return Parsed::NeedMore,
        },
        127 => match buf.get(2..10).and_then(|b| <[u8; 8]>::try_from(b).ok()) {
            Some(b) if b[0] & 0x80 != 0 => return Parsed::Refuse(FrameError::Length),
            Some(b) => (u64::from_be_bytes(b), 10),
            None => return Parsed::NeedMore,
        },
        n => (u64::from(n), 2),
    };
    if kind == Kind::Control && (!fin || len > 125) {
        return Parsed::Refuse(FrameError::Control);
    }
    Parsed::Done(FrameHeader { fin, kind, len }, used)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_prefix_needs_more(frame: &[u8], in_message: bool) -> Parsed<FrameHeader, FrameError> {
        let whole = parse_header(frame, in_message);
        let Parsed::Done(_, used) = whole else { return whole };
        for cut in 0..used {
            assert_eq!(parse_header(&frame[..cut], in_message), Parsed::NeedMore, "prefix of {cut}");
        }
        whole
    }

    #[test]
    fn short_medium_and_long_lengths_are_read_from_every_prefix() {
        let short = every_prefix_needs_more(&[0x81, 5, b'h'], false);
        assert_eq!(short, Parsed::Done(FrameHeader { fin: true, kind: Kind::Data, len: 5 }, 2));
        let medium = every_prefix_needs_more(&[0x02, 126, 0x01, 0x00], false);
        assert_eq!(medium, Parsed::Done(FrameHeader { fin: false, kind: Kind::Data, len: 256 }, 4));
        let long = every_prefix_needs_more(&[0x80, 127, 0, 0, 0, 1, 0, 0, 0, 0], true);
        assert_eq!(long, Parsed::Done(FrameHeader { fin: true, kind: Kind::Continuation, len: 1 << 32 }, 10));
    }

    #[test]
    fn control_frames_may_come_between_fragments() {
        let ping = parse_header(&[0x89, 1], true);
        assert_eq!(ping, Parsed::Done(FrameHeader { fin: true, kind: Kind::Control, len: 1 }, 2));
    }

    #[test]
    fn shapes_that_could_hide_a_payload_are_refused() {
        assert_eq!(parse_header(&[0x81, 0x85], false), Parsed::Refuse(FrameError::Masked));
        assert_eq!(parse_header(&[0xc1, 5], false), Parsed::Refuse(FrameError::Reserved), "permessage-deflate's bit");
        assert_eq!(parse_header(&[0x83, 5], false), Parsed::Refuse(FrameError::Opcode));
        assert_eq!(parse_header(&[0x09, 0], false), Parsed::Refuse(FrameError::Control), "a fragmented ping");
        assert_eq!(parse_header(&[0x89, 126, 0, 126], false), Parsed::Refuse(FrameError::Control));
        assert_eq!(parse_header(&[0x80, 1], false), Parsed::Refuse(FrameError::Sequence), "no message under way");
        assert_eq!(parse_header(&[0x01, 1], true), Parsed::Refuse(FrameError::Sequence), "a message inside one");
        let top = [0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(parse_header(&top, false), Parsed::Refuse(FrameError::Length));
    }
}
