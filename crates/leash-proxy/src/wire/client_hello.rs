//! TLS ClientHello reader: finds the server name (SNI), whether Encrypted Client Hello is offered, and the ALPN list,
//! reassembling the handshake message across TLS records. Bounded: a ClientHello larger than
//! [`MAX_CLIENT_HELLO`] is refused.
//!
//! The reader works in two steps. `locate` walks the record headers only, checking each byte as soon as it is in
//! the buffer (so a plain-HTTP request or an SSLv2 hello is refused on its first byte), until the records that carry
//! the whole handshake message are present. Then the message is gathered (borrowed when it sits in one record, the
//! common case; copied once otherwise) and its body parsed with a bounds-checked `Cursor`.

use std::borrow::Cow;

use super::cursor::Cursor;
use super::Parsed;

/// Largest ClientHello handshake message accepted. Real ones are < 2 KiB; post-quantum key shares push them
/// toward 2-4 KiB; 64 KiB leaves room for anything legitimate while bounding memory per tunnel.
pub const MAX_CLIENT_HELLO: usize = 64 * 1024;

/// Most bytes of records (headers included) that may carry one ClientHello. Twice the message bound: a client may
/// split its hello into tiny records (some do, to dodge middleboxes; each record costs 5 header bytes), but the
/// buffer the async side keeps per tunnel stays bounded whatever the fragmentation.
pub const MAX_CLIENT_HELLO_WIRE: usize = 2 * MAX_CLIENT_HELLO;

/// The server_name extension's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerName {
    /// Exactly one host_name entry, as sent (not yet validated as a host).
    One(String),
    /// No server_name extension.
    Absent,
    /// Several host_name entries, an empty one, a non-UTF-8/non-ASCII one, or a malformed extension.
    Invalid,
}

/// What the proxy needs from a ClientHello.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientHello {
    /// The server_name extension's one host_name, or why there is none to use.
    pub server_name: ServerName,
    /// The encrypted_client_hello extension (0xfe0d) is present.
    pub ech: bool,
    /// ALPN protocol names offered, in order.
    pub alpn: Vec<Vec<u8>>,
}

/// Why the bytes are not a ClientHello (reason `not-tls`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotClientHello {
    /// The first byte is not a TLS handshake record's (plain HTTP on a TLS port, say).
    #[error("not a TLS handshake record")]
    NotHandshake,
    /// A handshake, but its first message is another.
    #[error("first handshake message is not a ClientHello")]
    NotClientHello,
    /// A length or field that does not fit; which one.
    #[error("malformed ClientHello: {0}")]
    Malformed(&'static str),
    /// Longer than leash reads before deciding.
    #[error("ClientHello larger than the bound")]
    TooLarge,
}

/// Read a ClientHello from the first bytes of a tunnel. `Done`'s length is the bytes of the records that carried it.
pub fn parse_client_hello(buf: &[u8]) -> Parsed<ClientHello, NotClientHello> {
    let located = match locate(buf) {
        Ok(Some(located)) => located,
        Ok(None) => return Parsed::NeedMore,
        Err(e) => return Parsed::Refuse(e),
    };
    let message = gather(buf, &located);
    match parse_message(&message) {
        Ok(hello) => Parsed::Done(hello, located.wire_len),
        Err(e) => Parsed::Refuse(e),
    }
}

/// TLS record content type `handshake`.
const CONTENT_HANDSHAKE: u8 = 22;
/// Handshake message type `client_hello`.
const HANDSHAKE_CLIENT_HELLO: u8 = 1;
/// Record header: content type, legacy version (2), length (2).
const RECORD_HEADER: usize = 5;
/// Handshake header: message type, length (3).
const HANDSHAKE_HEADER: usize = 4;
/// Largest record fragment a peer may send (RFC 8446 §5.1: 2^14); more is a `record_overflow`.
const MAX_RECORD: usize = 1 << 14;
/// The random field of a ClientHello.
const RANDOM_LEN: usize = 32;
/// Longest legacy_session_id (RFC 8446 §4.1.2).
const MAX_SESSION_ID: usize = 32;

const EXT_SERVER_NAME: u16 = 0x0000;
const EXT_ALPN: u16 = 0x0010;
const EXT_ECH: u16 = 0xfe0d;
/// server_name entry type `host_name` (RFC 6066 §3).
const NAME_TYPE_HOST: u8 = 0;

/// Where a complete handshake message lies in the buffer.
struct Located {
    /// The handshake message's length, its 4-byte header included.
    msg_len: usize,
    /// The bytes of the records that carry it.
    wire_len: usize,
}

/// The first bytes of the handshake message, collected across records.
#[derive(Default)]
struct HandshakeHeader {
    bytes: [u8; HANDSHAKE_HEADER],
    have: usize,
}

impl HandshakeHeader {
    fn push(&mut self, fragment: &[u8]) {
        for &b in fragment.iter().take(HANDSHAKE_HEADER.saturating_sub(self.have)) {
            if let Some(slot) = self.bytes.get_mut(self.have) {
                *slot = b;
                self.have += 1;
            }
        }
    }

    /// The whole message's length once its header is known; refuses a non-ClientHello from its first byte.
    fn message_len(&self) -> Result<Option<usize>, NotClientHello> {
        let [kind, a, b, c] = self.bytes;
        if self.have >= 1 && kind != HANDSHAKE_CLIENT_HELLO {
            return Err(NotClientHello::NotClientHello);
        }
        if self.have < HANDSHAKE_HEADER {
            return Ok(None);
        }
        let body = usize::from(a) << 16 | usize::from(b) << 8 | usize::from(c);
        if body > MAX_CLIENT_HELLO {
            return Err(NotClientHello::TooLarge);
        }
        Ok(Some(HANDSHAKE_HEADER + body))
    }
}

/// Walk the records until the whole handshake message is present (`Some`), or the buffer ends first (`None`).
fn locate(buf: &[u8]) -> Result<Option<Located>, NotClientHello> {
    let mut header = HandshakeHeader::default();
    let (mut pos, mut carried) = (0usize, 0usize);
    loop {
        let rest = buf.get(pos..).unwrap_or_default();
        let Some(len) = record_header(rest)? else {
            return Ok(None);
        };
        let wire_end = pos + RECORD_HEADER + len;
        if wire_end > MAX_CLIENT_HELLO_WIRE {
            return Err(NotClientHello::TooLarge);
        }
        let available = rest.get(RECORD_HEADER..).unwrap_or_default();
        let fragment = available.get(..len).unwrap_or(available);
        header.push(fragment);
        if let Some(msg_len) = header.message_len()? {
            if carried + len > msg_len {
                // A client sends nothing after its ClientHello until the server answers.
                return Err(NotClientHello::Malformed("data after the ClientHello in its record"));
            }
            if carried + len == msg_len {
                let complete = fragment.len() == len;
                return Ok(complete.then_some(Located { msg_len, wire_len: wire_end }));
            }
        }
        if fragment.len() < len {
            return Ok(None);
        }
        carried += len;
        pos = wire_end;
    }
}

/// Check a record header byte by byte as far as `rest` goes; its fragment length once all 5 bytes are there.
fn record_header(rest: &[u8]) -> Result<Option<usize>, NotClientHello> {
    let bad = |at: usize, ok: fn(u8) -> bool| rest.get(at).is_some_and(|&b| !ok(b));
    if bad(0, |t| t == CONTENT_HANDSHAKE) || bad(1, |major| major == 3) || bad(2, |minor| (1..=4).contains(&minor)) {
        return Err(NotClientHello::NotHandshake);
    }
    let (Some(&hi), Some(&lo)) = (rest.get(3), rest.get(4)) else {
        return Ok(None);
    };
    let len = usize::from(u16::from_be_bytes([hi, lo]));
    if len == 0 {
        // RFC 8446 §5.1: zero-length handshake fragments are forbidden.
        return Err(NotClientHello::Malformed("empty handshake record"));
    }
    if len > MAX_RECORD {
        return Err(NotClientHello::Malformed("record longer than 2^14 bytes"));
    }
    Ok(Some(len))
}

/// The handshake message as one slice: borrowed when one record carries it, else copied once.
fn gather<'a>(buf: &'a [u8], located: &Located) -> Cow<'a, [u8]> {
    let fragments = Fragments { rest: buf.get(..located.wire_len).unwrap_or(buf) };
    let mut fragments = fragments.peekable();
    let first = fragments.next().unwrap_or_default();
    if first.len() >= located.msg_len || fragments.peek().is_none() {
        return Cow::Borrowed(first.get(..located.msg_len).unwrap_or(first));
    }
    let mut message = Vec::with_capacity(located.msg_len);
    message.extend_from_slice(first);
    fragments.for_each(|f| message.extend_from_slice(f));
    Cow::Owned(message)
}

/// The fragments of records already checked by [`locate`].
struct Fragments<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Fragments<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let mut c = Cursor::new(self.rest);
        c.take(RECORD_HEADER - 2)?;
        let fragment = c.vec_u16()?;
        self.rest = self.rest.get(RECORD_HEADER + fragment.len()..).unwrap_or_default();
        Some(fragment)
    }
}

/// Parse a complete ClientHello message (handshake header included), RFC 8446 §4.1.2.
fn parse_message(message: &[u8]) -> Result<ClientHello, NotClientHello> {
    let malformed = NotClientHello::Malformed;
    let mut c = Cursor::new(message.get(HANDSHAKE_HEADER..).unwrap_or_default());
    c.take(2).ok_or(malformed("truncated legacy_version"))?;
    c.take(RANDOM_LEN).ok_or(malformed("truncated random"))?;
    let session_id = c.vec_u8().ok_or(malformed("truncated legacy_session_id"))?;
    if session_id.len() > MAX_SESSION_ID {
        return Err(malformed("legacy_session_id longer than 32 bytes"));
    }
    let suites = c.vec_u16().ok_or(malformed("truncated cipher_suites"))?;
    if suites.is_empty() || suites.len() % 2 != 0 {
        return Err(malformed("cipher_suites length"));
    }
    let compression = c.vec_u8().ok_or(malformed("truncated legacy_compression_methods"))?;
    if compression.is_empty() {
        return Err(malformed("empty legacy_compression_methods"));
    }
    if c.is_empty() {
        // A TLS 1.2 hello may omit the extensions block altogether.
        return Ok(ClientHello { server_name: ServerName::Absent, ech: false, alpn: Vec::new() });
    }
    let extensions = c.vec_u16().ok_or(malformed("truncated extensions"))?;
    if !c.is_empty() {
        return Err(malformed("bytes after the extensions"));
    }
    parse_extensions(extensions)
}

/// Walk the extensions, refusing any type that appears twice (RFC 8446 §4.2).
fn parse_extensions(extensions: &[u8]) -> Result<ClientHello, NotClientHello> {
    let mut hello = ClientHello { server_name: ServerName::Absent, ech: false, alpn: Vec::new() };
    let mut seen = SeenTypes::default();
    let mut c = Cursor::new(extensions);
    while !c.is_empty() {
        let kind = c.u16().ok_or(NotClientHello::Malformed("truncated extension type"))?;
        let data = c.vec_u16().ok_or(NotClientHello::Malformed("extension longer than its container"))?;
        if !seen.insert(kind) {
            return Err(NotClientHello::Malformed("duplicate extension"));
        }
        match kind {
            EXT_SERVER_NAME => hello.server_name = parse_server_name(data),
            EXT_ALPN => hello.alpn = parse_alpn(data)?,
            EXT_ECH => hello.ech = true,
            _ => {}
        }
    }
    Ok(hello)
}

/// One bit per extension type: duplicate detection in constant time whatever the count (a 64 KiB hello can hold
/// 16k empty extensions, too many for a pairwise check), with no allocation.
struct SeenTypes([u64; 1024]);

impl Default for SeenTypes {
    fn default() -> Self {
        Self([0; 1024])
    }
}

impl SeenTypes {
    /// Mark `kind`; false if it was already marked.
    fn insert(&mut self, kind: u16) -> bool {
        let bit = 1u64 << (kind % 64);
        match self.0.get_mut(usize::from(kind / 64)) {
            Some(word) if *word & bit == 0 => {
                *word |= bit;
                true
            }
            _ => false,
        }
    }
}

/// The server_name extension (RFC 6066 §3): valid only as a list of exactly one non-empty host_name entry of
/// visible ASCII. Other name types are treated as invalid too: no client sends them, and a list a server might
/// read differently from us is exactly what must not pass.
fn parse_server_name(data: &[u8]) -> ServerName {
    let mut outer = Cursor::new(data);
    let Some(list) = outer.vec_u16() else {
        return ServerName::Invalid;
    };
    if !outer.is_empty() {
        return ServerName::Invalid;
    }
    let mut c = Cursor::new(list);
    let (Some(NAME_TYPE_HOST), Some(name)) = (c.u8(), c.vec_u16()) else {
        return ServerName::Invalid;
    };
    let visible = |b: &u8| (0x21..=0x7e).contains(b);
    if !c.is_empty() || name.is_empty() || !name.iter().all(visible) {
        return ServerName::Invalid;
    }
    ServerName::One(name.iter().map(|&b| char::from(b)).collect())
}

/// The ALPN extension (RFC 7301 §3.1): a non-empty list of non-empty protocol names.
fn parse_alpn(data: &[u8]) -> Result<Vec<Vec<u8>>, NotClientHello> {
    let mut outer = Cursor::new(data);
    let list = outer.vec_u16().ok_or(NotClientHello::Malformed("truncated ALPN list"))?;
    if !outer.is_empty() || list.is_empty() {
        return Err(NotClientHello::Malformed("ALPN list length"));
    }
    let mut c = Cursor::new(list);
    let mut names = Vec::new();
    while !c.is_empty() {
        match c.vec_u8() {
            Some(name) if !name.is_empty() => names.push(name.to_vec()),
            _ => return Err(NotClientHello::Malformed("ALPN protocol name")),
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests;
