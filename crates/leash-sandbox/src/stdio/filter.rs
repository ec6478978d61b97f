//! What the command writes to its terminal, filtered on its way to the caller's: the sequences that act on the
//! operator's machine rather than on the picture in the terminal are dropped.
//!
//! A terminal obeys more than colours and cursor moves. OSC 52 writes (and reads back) the operator's clipboard;
//! OSC 1337 (iTerm2) writes files and asks for uploads, OSC 5113 (kitty) transfers files, OSC 9, 99 and 777 raise
//! desktop notifications; a DCS string carries tmux's passthrough (`ESC P tmux;`: anything to the terminal outside
//! tmux), sixel and ReGIS; an APC carries kitty's graphics protocol (which reads files by path on the operator's
//! machine); `CSI 1-9 t` moves, resizes, iconifies and raises the window, `CSI 20 t`/`CSI 21 t` have the terminal
//! type the title back as input; `ESC SP G` and DECSCL make the terminal answer in 8-bit controls, which leash's prompt
//! does not read as sequences; ENQ types the answerback message. What is dropped is everything not known harmless:
//!
//! - OSC: passed only for 0-2 (titles), 4, 10-19, 104, 110-119 (colours), 7 (directory), 8 (hyperlinks: the
//!   command could print the address anyway; a click opens it, nothing opens by itself) and 133 (prompt marks);
//! - DCS, APC, PM and SOS strings: all, to their end;
//! - `CSI Ps t`: passed only for the reports and title stack (11, 13-16, 18, 19, 22, 23); DECSCL (`CSI .. " p`);
//!   a control sequence longer than [`CSI_MAX`];
//! - C1 controls, 8-bit (a byte 0x80-0x9f that is no part of a UTF-8 character) or UTF-8 encoded (U+0080-U+009F):
//!   a terminal may take either for CSI, OSC or DCS;
//! - ENQ, `ESC SP G` (S8C1T).
//!
//! Replies the terminal sends to a query passed here (a cursor position, a colour) go to whoever reads the caller's
//! terminal: the command's own input, or leash's prompt while a question is up, which skips every sequence.
//!
//! The filter is a byte-at-a-time state machine, like a terminal's parser (Paul Williams' VT500 model), that holds
//! an escape sequence until it knows what it is: a sequence split across reads is judged whole, and an `ESC` is never
//! passed before what follows it is known, so no passed byte can complete a sequence the filter did not see.

/// The longest control sequence passed: real ones are a few parameters long; a longer one is dropped whole.
pub(super) const CSI_MAX: usize = 64;

/// The longest run of intermediates after an `ESC`, and of digits in an OSC's number, before the sequence is dropped.
const HEAD_MAX: usize = 12;

/// OSC numbers passed: what changes the picture, the window's title, or marks places, and nothing else.
fn osc_allowed(number: u32) -> bool {
    matches!(number, 0..=2 | 4 | 7 | 8 | 10..=19 | 104 | 110..=119 | 133)
}

/// `CSI Ps t` passed: the terminal's reports of its size and state, and the title stack.
fn window_op_allowed(first: u32) -> bool {
    matches!(first, 11 | 13..=16 | 18 | 19 | 22 | 23)
}

const BEL: u8 = 0x07;
const ENQ: u8 = 0x05;
const CAN: u8 = 0x18;
const SUB: u8 = 0x1a;
const ESC: u8 = 0x1b;
const DEL: u8 = 0x7f;

/// The filter's place in the command's output, carried from one read to the next.
#[derive(Debug, Default)]
pub(super) struct OutputFilter {
    state: State,
    /// The bytes of the sequence or character being judged: not passed yet.
    held: Vec<u8>,
    /// Continuation bytes still to come for the UTF-8 character in `held`, and the range the next one must be in.
    utf8: Option<(u8, std::ops::RangeInclusive<u8>)>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
enum State {
    /// Text and C0 controls.
    #[default]
    Ground,
    /// After `ESC` (held), with any intermediates.
    Escape,
    /// A control sequence, held until its final byte.
    Csi,
    /// An OSC whose number is being read (held).
    OscNumber,
    /// An OSC's text, passed.
    OscPass,
    /// A string that is dropped to its end; `osc`: BEL ends it too.
    Drop { osc: bool },
    /// A dropped string's `ESC`: `\` ends the string, anything else starts a sequence.
    DropEscape,
}

impl OutputFilter {
    /// Adds to `out` what of `chunk` may reach the caller's terminal; what is not yet judged waits for the next call.
    pub(super) fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        // Plain ASCII text on the ground, most of what a command writes, passes whole.
        let plain = |b: &u8| *b < 0x80 && !matches!(*b, ENQ | CAN | SUB | ESC | DEL);
        if self.state == State::Ground && self.held.is_empty() && chunk.iter().all(plain) {
            return out.extend_from_slice(chunk);
        }
        for &byte in chunk {
            self.byte(byte, out);
        }
    }

    fn byte(&mut self, byte: u8, out: &mut Vec<u8>) {
        // In every state, as in a terminal: CAN and SUB end any sequence, ESC starts a new one.
        match (self.state, byte) {
            (State::Drop { .. }, ESC) => return self.to(State::DropEscape),
            (state, ESC) => {
                // An OSC ended by its number alone (`ESC ] 104 ESC \`) is passed as any other.
                if state == State::OscNumber && self.osc_allowed() {
                    out.append(&mut self.held);
                }
                self.held.clear();
                self.utf8 = None;
                self.held.push(ESC);
                return self.to(State::Escape);
            }
            (State::Drop { .. } | State::DropEscape, CAN | SUB) => return self.reset(),
            (_, CAN | SUB) => {
                self.reset();
                return out.push(byte);
            }
            _ => {}
        }
        match self.state {
            State::Ground | State::OscPass => self.text(byte, out),
            State::Escape => self.escape(byte, out),
            State::Csi => self.csi(byte, out),
            State::OscNumber => self.osc_number(byte, out),
            State::Drop { osc } => {
                if osc && byte == BEL {
                    self.reset();
                }
            }
            State::DropEscape => {
                // `ESC \` ends the string (dropped with it); another byte after ESC begins a sequence.
                self.reset();
                if byte != b'\\' {
                    self.held.push(ESC);
                    self.to(State::Escape);
                    self.escape(byte, out);
                }
            }
        }
    }

    /// A byte of text (on the ground, or of an OSC passed): printable ASCII, whole UTF-8 characters that are not C1
    /// controls, and C0 controls on the ground (but ENQ); BEL ends a passed OSC.
    fn text(&mut self, byte: u8, out: &mut Vec<u8>) {
        if let Some((left, range)) = self.utf8.clone() {
            if range.contains(&byte) {
                self.held.push(byte);
                if left > 1 {
                    self.utf8 = Some((left - 1, 0x80..=0xbf));
                } else {
                    self.utf8 = None;
                    if self.held.first() != Some(&0xc2) || self.held.get(1).is_some_and(|b| *b >= 0xa0) {
                        out.append(&mut self.held);
                    }
                    self.held.clear();
                }
                return;
            }
            // Not a UTF-8 character: the bytes so far are dropped, and this one read afresh.
            self.held.clear();
            self.utf8 = None;
        }
        let osc = self.state == State::OscPass;
        match byte {
            BEL if osc => {
                out.push(BEL);
                self.reset();
            }
            ENQ | DEL => {}
            0x00..=0x1f if osc => {}
            0x00..=0x7e => out.push(byte),
            // A C1 control in 8-bit form; a byte that cannot start a character is passed (Latin-1 text).
            0x80..=0x9f => {}
            0xc2..=0xf4 => {
                self.held.push(byte);
                self.utf8 = Some(match byte {
                    0xc2..=0xdf => (1, 0x80..=0xbf),
                    0xe0 => (2, 0xa0..=0xbf),
                    0xed => (2, 0x80..=0x9f),
                    0xe1..=0xef => (2, 0x80..=0xbf),
                    0xf0 => (3, 0x90..=0xbf),
                    0xf4 => (3, 0x80..=0x8f),
                    _ => (3, 0x80..=0xbf),
                });
            }
            _ => out.push(byte),
        }
    }

    /// After `ESC`: intermediates, then the final byte that says what the sequence is.
    fn escape(&mut self, byte: u8, out: &mut Vec<u8>) {
        match byte {
            0x20..=0x2f if self.held.len() < HEAD_MAX => self.held.push(byte),
            0x30..=0x7e if self.held.len() == 1 => match byte {
                b'[' => {
                    self.held.push(byte);
                    self.to(State::Csi);
                }
                b']' => {
                    self.held.push(byte);
                    self.to(State::OscNumber);
                }
                b'P' | b'X' | b'^' | b'_' => self.drop_string(false),
                _ => self.pass_held(byte, out),
            },
            // S8C1T: the terminal would answer in 8-bit controls from now on.
            b'G' if self.held == [ESC, b' '] => self.reset(),
            0x30..=0x7e => self.pass_held(byte, out),
            0x00..=0x1f => control_within(byte, out),
            // Too many intermediates, DEL or a byte above ASCII.
            _ => self.abandon(byte, out),
        }
    }

    /// A byte that ends a sequence unfinished (DEL, a byte above ASCII): the sequence is dropped, and a byte above
    /// ASCII read as text.
    fn abandon(&mut self, byte: u8, out: &mut Vec<u8>) {
        self.reset();
        if byte >= 0x80 {
            self.text(byte, out);
        }
    }

    /// A control sequence: parameters and intermediates held, judged at the final byte.
    fn csi(&mut self, byte: u8, out: &mut Vec<u8>) {
        match byte {
            0x20..=0x3f => self.held.push(byte),
            0x40..=0x7e => {
                self.held.push(byte);
                if self.held.len() <= CSI_MAX + 2 && csi_allowed(&self.held) {
                    out.append(&mut self.held);
                }
                self.reset();
            }
            0x00..=0x1f => control_within(byte, out),
            _ => self.abandon(byte, out),
        }
        // Past the bound the sequence is dropped at its final byte; what it held is not kept meanwhile.
        if self.held.len() > CSI_MAX + 2 {
            self.held.truncate(CSI_MAX + 3);
        }
    }

    /// The number of an OSC, read up to `;` or its end, decides whether the rest is passed.
    fn osc_number(&mut self, byte: u8, out: &mut Vec<u8>) {
        if byte.is_ascii_digit() && self.held.len() < HEAD_MAX {
            return self.held.push(byte);
        }
        let allowed = self.osc_allowed();
        match byte {
            b';' if allowed => {
                self.held.push(byte);
                out.append(&mut self.held);
                self.to(State::OscPass);
            }
            BEL if allowed => {
                self.held.push(byte);
                out.append(&mut self.held);
                self.reset();
            }
            BEL => self.reset(),
            _ => self.drop_string(true),
        }
    }

    /// Whether the OSC number held is one passed.
    fn osc_allowed(&self) -> bool {
        let digits = self.held.get(2..).unwrap_or_default();
        std::str::from_utf8(digits).ok().and_then(|n| n.parse().ok()).is_some_and(osc_allowed)
    }

    fn drop_string(&mut self, osc: bool) {
        self.reset();
        self.to(State::Drop { osc });
    }

    /// Passes the held escape sequence ending in `last`.
    fn pass_held(&mut self, last: u8, out: &mut Vec<u8>) {
        self.held.push(last);
        out.append(&mut self.held);
        self.reset();
    }

    fn to(&mut self, state: State) {
        self.state = state;
    }

    fn reset(&mut self) {
        self.held.clear();
        self.utf8 = None;
        self.state = State::Ground;
    }
}

/// A control byte inside a sequence: carried out where it stands, as a terminal does (ENQ, which asks the terminal
/// for its answerback, dropped).
fn control_within(byte: u8, out: &mut Vec<u8>) {
    if byte != ENQ {
        out.push(byte);
    }
}

/// Whether a whole control sequence (`ESC [ ... final`) may pass: not a window operation or title report outside
/// [`window_op_allowed`], not DECSCL.
fn csi_allowed(sequence: &[u8]) -> bool {
    let Some((&last, body)) = sequence.get(2..).and_then(<[u8]>::split_last) else { return false };
    match last {
        b't' => {
            let first = body.split(|b| *b == b';').next().unwrap_or_default();
            let first =
                if first.is_empty() { Some(0) } else { std::str::from_utf8(first).ok().and_then(|n| n.parse().ok()) };
            first.is_some_and(window_op_allowed)
        }
        b'p' => !body.contains(&b'"'),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filtered(pieces: &[&[u8]]) -> Vec<u8> {
        let (mut filter, mut out) = (OutputFilter::default(), Vec::new());
        pieces.iter().for_each(|p| filter.feed(p, &mut out));
        out
    }

    fn show(bytes: &[u8]) -> String {
        String::from_utf8_lossy(bytes).escape_debug().to_string()
    }

    /// The command's output with every kind of sequence, and what of it reaches the caller's terminal.
    fn sample() -> (Vec<u8>, Vec<u8>) {
        let pairs: &[(&[u8], &[u8])] = &[
            (b"plain text\r\n", b"plain text\r\n"),
            (b"\x1b[1;31mred\x1b[0m", b"\x1b[1;31mred\x1b[0m"),
            ("h\u{e9}llo \u{1f600} \u{4e2d}".as_bytes(), "h\u{e9}llo \u{1f600} \u{4e2d}".as_bytes()),
            (b"\x1b]0;a title\x07", b"\x1b]0;a title\x07"),
            (
                b"\x1b]8;;https://example.com\x1b\\link\x1b]8;;\x1b\\",
                b"\x1b]8;;https://example.com\x1b\\link\x1b]8;;\x1b\\",
            ),
            // The operator's clipboard, written and read.
            (b"\x1b]52;c;cHduZWQ=\x07", b""),
            (b"\x1b]52;c;?\x1b\\", b""),
            (b"\x1b]1337;File=name=eA==;inline=0:cHduZWQ=\x07", b""),
            (b"\x1b]777;notify;leash;allow?\x07", b""),
            (b"\x1b]50;?\x07", b""),
            // tmux's passthrough (ESC doubled inside), kitty's graphics, PM, SOS.
            (b"\x1bPtmux;\x1b\x1b]52;c;cHduZWQ=\x07\x1b\\", b"\x1b\\"),
            (b"\x1b]104\x1b\\\x1b]110\x07", b"\x1b]104\x1b\\\x1b]110\x07"),
            (b"\x1b_Ga=T,t=f;L2V0Yy9wYXNzd2Q=\x1b\\", b""),
            (b"\x1b^private\x1b\\\x1bXstring\x1b\\", b""),
            // Window operations and title reports; the size report and title stack pass.
            (b"\x1b[2t\x1b[3;0;0t\x1b[8;1;1t\x1b[21t\x1b[20t\x1b[t", b""),
            (b"\x1b[18t\x1b[22;0t\x1b[23;0t", b"\x1b[18t\x1b[22;0t\x1b[23;0t"),
            // 8-bit controls asked for, and used: raw and UTF-8 encoded.
            (b"\x1b G\x1b[62;0\"p\x1b[61\"p", b""),
            (b"\x9d52;c;eA==\x9c", b"52;c;eA=="),
            ("\u{9d}52;c;eA==\u{9c}\u{9b}2J".as_bytes(), b"52;c;eA==2J"),
            (b"\x05", b""),
            // A cursor position query is answered into the command's own input.
            (b"\x1b[6n\x1b7\x1b(0q\x1b(B\x1b8", b"\x1b[6n\x1b7\x1b(0q\x1b(B\x1b8"),
            // CAN ends a string; the text after it is text.
            (b"\x1b]52;c;eA==\x18after", b"after"),
            (b"\x1b]2;title\x18after", b"\x1b]2;title\x18after"),
        ];
        let input = pairs.iter().flat_map(|(i, _)| i.iter().copied()).collect();
        let output = pairs.iter().flat_map(|(_, o)| o.iter().copied()).collect();
        (input, output)
    }

    #[test]
    fn only_sequences_that_act_on_the_picture_pass() {
        let (input, expected) = sample();
        assert_eq!(show(&filtered(&[&input])), show(&expected));
    }

    #[test]
    fn a_sequence_split_anywhere_is_judged_the_same() {
        let (input, expected) = sample();
        for at in 0..=input.len() {
            let (a, b) = input.split_at(at);
            assert_eq!(show(&filtered(&[a, b])), show(&expected), "split at {at}");
        }
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        assert_eq!(show(&filtered(&bytes)), show(&expected), "a byte at a time");
    }

    #[test]
    fn no_passed_byte_completes_a_sequence_the_filter_dropped() {
        // A dropped string followed by what would, after it, open a clipboard write: the filter reads it from the
        // same place the terminal does.
        for tail in [&b"]52;c;eA==\x07"[..], b"\x1b]52;c;eA==\x07", b"\\]52;c;eA==\x07"] {
            for head in [&b"\x1bPq#0;2;0;0;0\x1b"[..], b"\x1b]52;x\x1b", b"\x1b_G\x1b", b"\x1b"] {
                let out = filtered(&[head, tail]);
                assert!(!out.windows(2).any(|w| w == b"\x1b]"), "{} then {}: {}", show(head), show(tail), show(&out));
            }
        }
    }

    #[test]
    fn an_overlong_control_sequence_is_dropped_and_holds_nothing() {
        let mut long = b"\x1b[".to_vec();
        long.extend(std::iter::repeat_n(b'1', 10_000));
        long.extend(b"mafter");
        let (mut filter, mut out) = (OutputFilter::default(), Vec::new());
        filter.feed(&long, &mut out);
        assert_eq!(show(&out), "after");
        assert!(filter.held.capacity() < 1024, "held {}", filter.held.capacity());
    }
}
