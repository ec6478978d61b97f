//! A WebSocket's server frames on a credential's host, after the 101 `upgrade.rs` let through: each message's
//! payload is passed through the host's [`Redactor`] across its fragments and the control frames between them
//! ([`FrameRedactor`]), the framing left in place, and anything the search could not read (a masked frame, a
//! reserved bit) ends the connection.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::credentials::Redactor;
use crate::wire::websocket::{parse_header, FrameError, FrameHeader, Kind, MAX_HEADER};
use crate::wire::Parsed;

/// Read size for the server's frames after a 101: as `tokio::io::copy`'s buffer.
const RELAY_BUF: usize = 8 * 1024;

/// The error a server's frames end the relay with: they could not be followed.
#[derive(Debug, thiserror::Error)]
#[error("WebSocket frames from the upstream: {0}")]
pub(crate) struct BadFrames(pub FrameError);

impl BadFrames {
    /// The frame error, if `e` is a [`BadFrames`].
    pub(crate) fn of(e: &io::Error) -> Option<FrameError> {
        e.get_ref().and_then(|inner| inner.downcast_ref::<BadFrames>()).map(|b| b.0)
    }
}

/// Copy a server's WebSocket frames from `from` to `to` through a [`FrameRedactor`] until `from` ends, one write per
/// read; then shut `to`'s writing side. Returns the bytes read.
pub(crate) async fn relay_frames<R, W>(from: &mut R, to: &mut W, redactor: Redactor) -> io::Result<u64>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut frames = FrameRedactor::new(redactor);
    let mut buf = vec![0; RELAY_BUF];
    let mut total = 0;
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            to.write_all(&frames.finish()).await?;
            break;
        }
        total += n as u64;
        let out = frames.push(&buf[..n]).map_err(|e| io::Error::other(BadFrames(e)))?;
        to.write_all(&out).await?;
        to.flush().await?;
    }
    let _ = to.shutdown().await;
    Ok(total)
}

/// Follows a server's frames and passes them through a [`Redactor`]: headers as framing, a data message's payload
/// as data (so a value cut across fragments, with control frames between them, is still one match), each control
/// frame's payload redacted whole. A message's end releases what the redactor held, so no message waits for the
/// next one. Redaction keeps lengths, so the headers stay right.
pub(crate) struct FrameRedactor {
    redactor: Redactor,
    /// Header bytes of the next frame read so far.
    head: Vec<u8>,
    at: At,
    /// A fragmented message is under way.
    in_message: bool,
}

enum At {
    Head,
    /// In a data frame's payload; `ends` when it is the last frame of its message.
    Payload {
        left: u64,
        ends: bool,
    },
    /// In a control frame's payload, gathered whole (at most 125 bytes).
    Control {
        left: u64,
        payload: Vec<u8>,
    },
}

impl FrameRedactor {
    pub(crate) fn new(redactor: Redactor) -> FrameRedactor {
        FrameRedactor { redactor, head: Vec::with_capacity(MAX_HEADER), at: At::Head, in_message: false }
    }

    /// The next bytes from the server: what may go on to the client now, or why the frames cannot be followed.
    pub(crate) fn push(&mut self, mut bytes: &[u8]) -> Result<Vec<u8>, FrameError> {
        let mut out = Vec::with_capacity(bytes.len());
        while !bytes.is_empty() {
            let used = match &mut self.at {
                At::Head => self.header(bytes, &mut out)?,
                At::Payload { left, .. } => {
                    let n = bytes.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                    out.extend(self.redactor.push(&bytes[..n], true));
                    *left -= n as u64;
                    n
                }
                At::Control { left, payload } => {
                    let n = bytes.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                    payload.extend_from_slice(&bytes[..n]);
                    *left -= n as u64;
                    n
                }
            };
            bytes = &bytes[used..];
            self.end_frame(&mut out);
        }
        Ok(out)
    }

    /// The server's end: whatever is held or half read goes on.
    pub(crate) fn finish(&mut self) -> Vec<u8> {
        let mut out = self.redactor.push(&std::mem::take(&mut self.head), false);
        if let At::Control { payload, .. } = std::mem::replace(&mut self.at, At::Head) {
            out.extend(self.redactor.push(&self.redactor.redact_all(&payload), false));
        }
        out.extend(self.redactor.finish());
        out
    }

    /// Read header bytes from `bytes`; returns how many were used.
    fn header(&mut self, bytes: &[u8], out: &mut Vec<u8>) -> Result<usize, FrameError> {
        let before = self.head.len();
        let take = (MAX_HEADER - before).min(bytes.len());
        self.head.extend_from_slice(&bytes[..take]);
        match parse_header(&self.head, self.in_message) {
            Parsed::NeedMore => Ok(take),
            Parsed::Refuse(e) => Err(e),
            Parsed::Done(header, used) => {
                self.head.truncate(used);
                out.extend(self.redactor.push(&self.head, false));
                self.head.clear();
                self.begin(header);
                Ok(used - before)
            }
        }
    }

    fn begin(&mut self, FrameHeader { fin, kind, len }: FrameHeader) {
        self.at = match kind {
            Kind::Control => At::Control { left: len, payload: Vec::with_capacity(125) },
            Kind::Data | Kind::Continuation => {
                self.in_message = !fin;
                At::Payload { left: len, ends: fin }
            }
        };
    }

    /// A frame whose payload is all read: a control frame's goes on redacted; a message's last releases what the
    /// redactor held.
    fn end_frame(&mut self, out: &mut Vec<u8>) {
        match &mut self.at {
            At::Payload { left: 0, ends } => {
                if *ends {
                    out.extend(self.redactor.finish());
                }
                self.at = At::Head;
            }
            At::Control { left: 0, payload } => {
                let redacted = self.redactor.redact_all(payload);
                out.extend(self.redactor.push(&redacted, false));
                self.at = At::Head;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentials::Secret;

    const SECRET: &str = "sk-real-0123456789abcdef";
    const PLACEHOLDER: &str = "leash-placeholder-abc123";

    fn frames() -> FrameRedactor {
        FrameRedactor::new(Secret::new("p", SECRET, PLACEHOLDER).unwrap().redactor(&leash_policy::HeaderForm::Bare))
    }

    /// A server frame: FIN and opcode, an unmasked payload.
    fn frame(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
        let b0 = if fin { 0x80 } else { 0 } | opcode;
        [&[b0, payload.len() as u8][..], payload].concat()
    }

    /// The payloads of data frames in `wire`, in order, control frames' apart.
    fn payloads(wire: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let (mut data, mut control, mut at) = (Vec::new(), Vec::new(), 0);
        while at < wire.len() {
            let (opcode, len) = (wire[at] & 0x0f, usize::from(wire[at + 1]));
            let payload = &wire[at + 2..at + 2 + len];
            if opcode >= 8 {
                control.extend_from_slice(payload)
            } else {
                data.extend_from_slice(payload)
            }
            at += 2 + len;
        }
        (data, control)
    }

    #[test]
    fn a_value_in_one_byte_fragments_with_a_ping_between_comes_out_as_the_placeholder() {
        let message = format!("key={SECRET}");
        let bytes = message.as_bytes();
        let mut wire = frame(false, 1, &bytes[..1]);
        for (i, b) in bytes[1..].iter().enumerate() {
            if i == 6 {
                wire.extend(frame(true, 9, b"ping"));
            }
            wire.extend(frame(i == bytes.len() - 2, 0, &[*b]));
        }
        let mut f = frames();
        // Fed a byte at a time, as the worst reads would bring it.
        let mut out: Vec<u8> = wire.iter().flat_map(|b| f.push(&[*b]).unwrap()).collect();
        out.extend(f.finish());
        assert_eq!(out.len(), wire.len(), "lengths kept");
        let (data, control) = payloads(&out);
        assert_eq!(String::from_utf8_lossy(&data), format!("key={PLACEHOLDER}"));
        assert_eq!(control, b"ping");
    }

    #[test]
    fn a_message_end_releases_what_was_held() {
        let mut f = frames();
        // Ends in a possible start of the value: a message's end lets it go at once.
        let out = f.push(&frame(true, 1, b"ok sk-re")).unwrap();
        assert_eq!(out, frame(true, 1, b"ok sk-re"));
    }

    #[test]
    fn a_value_in_a_close_frames_reason_is_redacted() {
        let mut f = frames();
        let reason = [&[0x03, 0xe8][..], SECRET.as_bytes()].concat();
        let out = f.push(&frame(true, 8, &reason)).unwrap();
        assert_eq!(payloads(&out).1, [&[0x03, 0xe8][..], PLACEHOLDER.as_bytes()].concat());
    }

    /// `messages` cut into data frames of `sizes` (cycled), a ping after every `ping_every`-th frame.
    fn framed(messages: &[Vec<u8>], sizes: &[usize], ping_every: usize) -> Vec<u8> {
        let (mut wire, mut n) = (Vec::new(), 0);
        for message in messages {
            let mut at = 0;
            while at < message.len() || at == 0 {
                let size = sizes[n % sizes.len()].min(message.len() - at);
                let (first, last) = (at == 0, at + size == message.len());
                wire.extend(frame(last, if first { 1 } else { 0 }, &message[at..at + size]));
                n += 1;
                if n % ping_every == 0 && !last {
                    wire.extend(frame(true, 9, b"ping"));
                }
                at += size;
                if message.is_empty() {
                    break;
                }
            }
        }
        wire
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        /// A server's message: pieces of the value, whole values and other bytes, short enough for one-byte lengths.
        fn message() -> impl Strategy<Value = Vec<u8>> {
            let piece = prop_oneof![
                Just(SECRET.as_bytes().to_vec()),
                Just(SECRET.as_bytes()[..5].to_vec()),
                proptest::collection::vec(any::<u8>(), 0..6),
            ];
            proptest::collection::vec(piece, 0..5)
                .prop_map(|parts| parts.concat())
                .prop_filter("short", |m| m.len() < 126)
        }

        proptest! {
            /// However the server frames its messages and however the reads cut the frames, the client gets the same
            /// frames with every whole value in a message turned into the placeholder.
            #[test]
            fn frames_come_out_redacted_however_cut(
                messages in proptest::collection::vec(message(), 1..4),
                sizes in proptest::collection::vec(1usize..9, 1..5),
                ping_every in 1usize..5,
                reads in proptest::collection::vec(1usize..40, 1..8),
            ) {
                let wire = framed(&messages, &sizes, ping_every);
                let redactor = Secret::new("p", SECRET, PLACEHOLDER).unwrap().redactor(&leash_policy::HeaderForm::Bare);
                let redacted: Vec<Vec<u8>> = messages.iter().map(|m| redactor.redact_all(m)).collect();
                let (mut f, mut out, mut at, mut i) = (frames(), Vec::new(), 0, 0);
                while at < wire.len() {
                    let n = reads[i % reads.len()].min(wire.len() - at);
                    out.extend(f.push(&wire[at..at + n]).unwrap());
                    (at, i) = (at + n, i + 1);
                }
                out.extend(f.finish());
                prop_assert_eq!(out, framed(&redacted, &sizes, ping_every));
            }
        }
    }

    #[test]
    fn a_compressed_or_masked_frame_is_refused() {
        assert_eq!(frames().push(&[0xc1, 1, b'x']), Err(FrameError::Reserved));
        assert_eq!(frames().push(&[0x81, 0x81, 1, 2, 3, 4, b'x']), Err(FrameError::Masked));
    }
}
