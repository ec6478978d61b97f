//! DNS queries and the answers of `leash run`'s stub resolver (RFC 1035; EDNS, RFC 6891): [`parse_query`] reads one
//! UDP query, [`respond`] builds the whole response from it and a decision on the name. No I/O and no upstream: the
//! stub only ever answers from the policy.
//!
//! A datagram arrives whole, so unlike the stream parsers this one answers found or refuse, never need-more. Strict
//! and bounded: exactly one question, no compression pointer in it (queries never compress their question), labels of
//! at most 63 bytes, names of at most 255; a query that breaks a rule gets FORMERR (NOTIMP for another opcode),
//! and bytes that cannot be answered at all (shorter than a header, or a response) are dropped. Every response is
//! built to fit the client's UDP size: at most 512 bytes unless its EDNS record allows more.

use std::net::Ipv4Addr;

use leash_policy::{parse_host, Host};

use super::cursor::Cursor;

/// A DNS header is 12 bytes: id, flags and four counts.
pub const HEADER_LEN: usize = 12;
/// RFC 1035 §4.2.1: without EDNS a UDP response may be at most 512 bytes (and EDNS sizes below it mean 512).
pub const PLAIN_UDP_SIZE: usize = 512;
/// The UDP payload size our OPT record advertises: 1232, the DNS Flag Day 2020 value that avoids IP fragmentation.
/// Our responses are far smaller anyway (at most about 300 bytes).
pub const OUR_UDP_SIZE: u16 = 1232;
/// RFC 1035 §2.3.4: a label is at most 63 bytes.
pub const MAX_LABEL: usize = 63;
/// RFC 1035 §2.3.4: a name is at most 255 bytes on the wire, length bytes and the root label included.
pub const MAX_NAME: usize = 255;
/// TTL of every answer, in seconds: short, so that a policy reload that refuses a name reaches clients that cache
/// within seconds, and long enough that a burst of lookups for one name is answered from their cache.
pub const ANSWER_TTL: u32 = 5;

/// Record type A (RFC 1035 §3.2.2).
pub const TYPE_A: u16 = 1;
/// Record type OPT, the EDNS pseudo-record (RFC 6891 §6.1.1).
pub const TYPE_OPT: u16 = 41;
const CLASS_IN: u16 = 1;
const CLASS_ANY: u16 = 255;

const FLAG_QR: u16 = 0x8000;
const OPCODE_MASK: u16 = 0x7800;
const FLAG_AA: u16 = 0x0400;
const FLAG_TC: u16 = 0x0200;
const FLAG_RD: u16 = 0x0100;
const FLAG_RA: u16 = 0x0080;
const FLAG_CD: u16 = 0x0010;
/// A compression pointer to offset 12, where the question's name starts.
const POINTER_TO_QUESTION: [u8; 2] = [0xc0, 0x0c];
/// A question's type and class, after its name.
const TYPE_AND_CLASS_LEN: usize = 4;
/// An A record answering the question: pointer, type, class, TTL, length, address.
const ANSWER_LEN: usize = 2 + 2 + 2 + 4 + 2 + 4;
/// Our OPT record: root owner, type, payload size, extended RCODE/version/flags, no options.
const OPT_LEN: usize = 1 + 2 + 2 + 4 + 2;
/// The longest response the stub builds: a header, the longest question, an answer and an OPT record.
const MAX_RESPONSE: usize = HEADER_LEN + MAX_NAME + TYPE_AND_CLASS_LEN + ANSWER_LEN + OPT_LEN;
/// The extended RCODE BADVERS (16) is carried as 1 in the OPT record's upper byte (RFC 6891 §6.1.3).
const EXTENDED_BADVERS: u8 = 1;

/// Response codes the stub uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rcode {
    /// An answer, or none for a type the name has no record of (NODATA).
    NoError = 0,
    /// The query is malformed.
    FormErr = 1,
    /// The name does not exist (for the policy: no request to it could pass).
    NxDomain = 3,
    /// An opcode or class the stub does not answer.
    NotImp = 4,
    /// The stub will not answer.
    Refused = 5,
}

/// What the stub knows about a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The name exists: an A query gets this address, every other type NOERROR with no answer (NODATA).
    Exists(Ipv4Addr),
    /// NXDOMAIN.
    NoSuchName,
    /// REFUSED: the stub will not answer (its audit log cannot be written).
    Refused,
}

/// One parsed query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query<'a> {
    /// The query's id, echoed in the response.
    pub id: u16,
    /// The header's flags as sent.
    pub flags: u16,
    /// The question (name, type, class) as sent, echoed verbatim so that its letter case survives (0x20 checks).
    pub question: &'a [u8],
    /// The name lowercased, its labels joined by `.`, no trailing dot (the root is empty); `None` when a label holds
    /// a byte no host name can hold (a `.`, a space, a control or non-ASCII byte).
    pub name: Option<String>,
    /// The name as text whatever it holds, for the record: lowercased, labels joined by `.`, and every byte but
    /// printable ASCII (and a `.` or `\\` inside a label) written `\\DDD`, as in a zone file.
    pub shown: String,
    /// QTYPE (1 for A).
    pub qtype: u16,
    /// QCLASS (1 for IN).
    pub qclass: u16,
    /// The largest response the client accepts: 512, or its EDNS payload size if larger.
    pub udp_size: usize,
    /// The EDNS version of the query's OPT record, if it carries one.
    pub edns: Option<u8>,
}

/// Why a datagram is not a query the stub answers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DnsError {
    /// Fewer than 12 bytes.
    #[error("shorter than a DNS header")]
    Short,
    /// The QR bit is set.
    #[error("a response, not a query")]
    NotAQuery,
    /// An opcode other than QUERY (0).
    #[error("opcode {0} is not QUERY")]
    Opcode(u8),
    /// Not exactly one question.
    #[error("{0} questions; exactly one is answered")]
    QuestionCount(u16),
    /// Answer or authority records, which a query does not carry.
    #[error("answer or authority records in a query")]
    UnexpectedRecords,
    /// A compression pointer where the question's name must be written out.
    #[error("compression pointer in the question")]
    Pointer,
    /// A label type other than a plain length (the two reserved top-bit patterns).
    #[error("reserved label type")]
    LabelType,
    /// A name over 255 bytes on the wire.
    #[error("name longer than 255 bytes")]
    LongName,
    /// A length that runs past the datagram.
    #[error("the message ends inside a record")]
    Truncated,
    /// An additional record that is an OPT not at the root, or a second OPT.
    #[error("an OPT record not owned by the root, or several")]
    BadOpt,
    /// Bytes left after the records the header counts.
    #[error("bytes after the last record")]
    Trailing,
}

impl DnsError {
    /// The response code that answers this error; `None` when the datagram is dropped unanswered (it carries no
    /// header to answer, or answering a response could start a loop).
    pub fn rcode(&self) -> Option<Rcode> {
        match self {
            DnsError::Short | DnsError::NotAQuery => None,
            DnsError::Opcode(_) => Some(Rcode::NotImp),
            _ => Some(Rcode::FormErr),
        }
    }
}

/// Parse one query datagram.
pub fn parse_query(buf: &[u8]) -> Result<Query<'_>, DnsError> {
    let mut c = Cursor::new(buf);
    let header = [c.u16(), c.u16(), c.u16(), c.u16(), c.u16(), c.u16()];
    let [Some(id), Some(flags), Some(qdcount), Some(ancount), Some(nscount), Some(arcount)] = header else {
        return Err(DnsError::Short);
    };
    check_header(flags, qdcount, ancount, nscount)?;
    let (name, shown, name_len) = read_name(&mut c)?;
    let (qtype, qclass) = (c.u16().ok_or(DnsError::Truncated)?, c.u16().ok_or(DnsError::Truncated)?);
    let question = buf.get(HEADER_LEN..HEADER_LEN + name_len + TYPE_AND_CLASS_LEN).ok_or(DnsError::Truncated)?;
    let mut query = Query { id, flags, question, name, shown, qtype, qclass, udp_size: PLAIN_UDP_SIZE, edns: None };
    for _ in 0..arcount {
        read_additional(&mut c, &mut query)?;
    }
    match c.is_empty() {
        true => Ok(query),
        false => Err(DnsError::Trailing),
    }
}

/// The response to `buf`, with `decide` answering for the queried name once it is a valid host name (always a
/// [`Host::Name`]; never called for malformed queries, other classes, IP-literal spellings or names that are no
/// host, which get NXDOMAIN). `None`: drop the datagram.
pub fn respond(buf: &[u8], decide: impl FnOnce(&Host) -> Answer) -> Option<Vec<u8>> {
    respond_recording(buf, decide, |_, _| {})
}

/// [`respond`], telling `not_a_host` of every name answered NXDOMAIN without a decision because it is no host name
/// (its [`Query::shown`] text, and whether it spells an IP address), so that refusal is on record too.
pub fn respond_recording(
    buf: &[u8],
    decide: impl FnOnce(&Host) -> Answer,
    not_a_host: impl FnOnce(&str, NotAHost),
) -> Option<Vec<u8>> {
    let query = match parse_query(buf) {
        Ok(q) => q,
        Err(e) => return e.rcode().map(|rcode| error_response(buf, rcode)),
    };
    if query.edns.is_some_and(|version| version != 0) {
        return Some(build(&query, Rcode::NoError, None, EXTENDED_BADVERS, query.udp_size));
    }
    let (rcode, address) = outcome(&query, decide, not_a_host);
    Some(build(&query, rcode, address, 0, query.udp_size))
}

/// Why a queried name was no host name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotAHost {
    /// A spelling of an IP address (`127.0.0.1`, `0x7f000001`, `127.1`).
    IpLiteral,
    /// A byte or form no host name has (`_srv._tcp`, a space, a quote, a control or non-ASCII byte, the root).
    Malformed,
}

/// The response code and the A record's address, if any.
fn outcome(
    query: &Query<'_>,
    decide: impl FnOnce(&Host) -> Answer,
    not_a_host: impl FnOnce(&str, NotAHost),
) -> (Rcode, Option<Ipv4Addr>) {
    if query.qclass != CLASS_IN && query.qclass != CLASS_ANY {
        return (Rcode::Refused, None);
    }
    // INVARIANT: a name that is no valid host (IP literals in every spelling included) is NXDOMAIN, never decided.
    let host = match query.name.as_deref().map(parse_host) {
        Some(Ok(host @ Host::Name(_))) => host,
        Some(Ok(Host::Ipv4(_) | Host::IpLiteral(_))) => {
            not_a_host(&query.shown, NotAHost::IpLiteral);
            return (Rcode::NxDomain, None);
        }
        _ => {
            not_a_host(&query.shown, NotAHost::Malformed);
            return (Rcode::NxDomain, None);
        }
    };
    match decide(&host) {
        Answer::NoSuchName => (Rcode::NxDomain, None),
        Answer::Refused => (Rcode::Refused, None),
        Answer::Exists(addr) if query.qtype == TYPE_A => (Rcode::NoError, Some(addr)),
        Answer::Exists(_) => (Rcode::NoError, None),
    }
}

fn check_header(flags: u16, qdcount: u16, ancount: u16, nscount: u16) -> Result<(), DnsError> {
    if flags & FLAG_QR != 0 {
        return Err(DnsError::NotAQuery);
    }
    let opcode = ((flags & OPCODE_MASK) >> 11) as u8;
    if opcode != 0 {
        return Err(DnsError::Opcode(opcode));
    }
    if qdcount != 1 {
        return Err(DnsError::QuestionCount(qdcount));
    }
    if ancount != 0 || nscount != 0 {
        return Err(DnsError::UnexpectedRecords);
    }
    Ok(())
}

/// The question's name: its text (see [`Query::name`]), as shown (see [`Query::shown`]) and its length on the wire.
fn read_name(c: &mut Cursor<'_>) -> Result<(Option<String>, String, usize), DnsError> {
    let mut text = Some(String::new());
    let mut shown = String::new();
    let mut wire_len = 0;
    loop {
        let len = c.u8().ok_or(DnsError::Truncated)?;
        wire_len += 1 + usize::from(len);
        match len & 0xc0 {
            0xc0 => return Err(DnsError::Pointer),
            0x00 => {}
            _ => return Err(DnsError::LabelType),
        }
        if wire_len > MAX_NAME {
            return Err(DnsError::LongName);
        }
        if len == 0 {
            return Ok((text, shown, wire_len));
        }
        let label = c.take(usize::from(len)).ok_or(DnsError::Truncated)?;
        show_label(&mut shown, label);
        text = text.and_then(|t| append_label(t, label));
    }
}

/// `text` with `label` appended (lowercased, after a `.`), or `None` if the label holds a byte no host can.
fn append_label(mut text: String, label: &[u8]) -> Option<String> {
    if !label.iter().all(|b| b.is_ascii_graphic() && *b != b'.') {
        return None;
    }
    if !text.is_empty() {
        text.push('.');
    }
    text.extend(label.iter().map(|b| char::from(b.to_ascii_lowercase())));
    Some(text)
}

/// `label` appended to `shown` after a `.`, lowercased, any byte a host cannot hold escaped as `\\DDD`.
fn show_label(shown: &mut String, label: &[u8]) {
    if !shown.is_empty() {
        shown.push('.');
    }
    for &b in label {
        match b.is_ascii_graphic() && b != b'.' && b != b'\\' {
            true => shown.push(char::from(b.to_ascii_lowercase())),
            false => shown.push_str(&format!("\\{b:03}")),
        }
    }
}

/// One record of the additional section: an OPT record sets the UDP size and EDNS version; others are skipped.
fn read_additional(c: &mut Cursor<'_>, query: &mut Query<'_>) -> Result<(), DnsError> {
    let root_owner = skip_name(c)?;
    let rtype = c.u16().ok_or(DnsError::Truncated)?;
    let class = c.u16().ok_or(DnsError::Truncated)?;
    let ttl = [c.u8(), c.u8(), c.u8(), c.u8()];
    let [Some(_extended_rcode), Some(version), Some(_), Some(_)] = ttl else { return Err(DnsError::Truncated) };
    c.vec_u16().ok_or(DnsError::Truncated)?;
    if rtype != TYPE_OPT {
        return Ok(());
    }
    if !root_owner || query.edns.is_some() {
        return Err(DnsError::BadOpt);
    }
    query.edns = Some(version);
    query.udp_size = usize::from(class).max(PLAIN_UDP_SIZE);
    Ok(())
}

/// Skip a record's owner name without following a compression pointer (one ends the name); true if it is the root.
fn skip_name(c: &mut Cursor<'_>) -> Result<bool, DnsError> {
    let mut wire_len = 0;
    loop {
        let len = c.u8().ok_or(DnsError::Truncated)?;
        wire_len += 1 + usize::from(len & 0x3f);
        match len & 0xc0 {
            0xc0 => return c.u8().map(|_| false).ok_or(DnsError::Truncated),
            0x00 if len == 0 => return Ok(wire_len == 1),
            0x00 => {}
            _ => return Err(DnsError::LabelType),
        }
        if wire_len > MAX_NAME {
            return Err(DnsError::LongName);
        }
        c.take(usize::from(len)).ok_or(DnsError::Truncated)?;
    }
}

/// The whole response: header, the question echoed, the A record if any, an OPT record if the query had one. If it
/// would exceed `limit`, the answer is left out and TC set (RFC 2181 §9); the stub's responses never come near 512.
fn build(query: &Query<'_>, rcode: Rcode, address: Option<Ipv4Addr>, extended: u8, limit: usize) -> Vec<u8> {
    let records = ANSWER_LEN * usize::from(address.is_some()) + OPT_LEN * usize::from(query.edns.is_some());
    let full = HEADER_LEN + query.question.len() + records;
    let (address, truncated) = match full > limit {
        true => (None, FLAG_TC),
        false => (address, 0),
    };
    let flags = FLAG_QR | (query.flags & (OPCODE_MASK | FLAG_RD | FLAG_CD)) | FLAG_AA | FLAG_RA | truncated;
    let counts = [1, u16::from(address.is_some()), 0, u16::from(query.edns.is_some())];
    let mut out = header(query.id, flags | rcode as u16, counts);
    out.extend_from_slice(query.question);
    if let Some(addr) = address {
        out.extend_from_slice(&POINTER_TO_QUESTION);
        out.extend_from_slice(&TYPE_A.to_be_bytes());
        out.extend_from_slice(&CLASS_IN.to_be_bytes());
        out.extend_from_slice(&ANSWER_TTL.to_be_bytes());
        out.extend_from_slice(&4u16.to_be_bytes());
        out.extend_from_slice(&addr.octets());
    }
    if query.edns.is_some() {
        // Owner root, type OPT, our payload size, extended RCODE, version 0, no flags (DO clear), no options.
        out.push(0);
        out.extend_from_slice(&TYPE_OPT.to_be_bytes());
        out.extend_from_slice(&OUR_UDP_SIZE.to_be_bytes());
        out.extend_from_slice(&[extended, 0, 0, 0, 0, 0]);
    }
    out
}

/// A bare response to a query that could not be parsed: the id, opcode and RD echoed, `rcode`, no records.
fn error_response(buf: &[u8], rcode: Rcode) -> Vec<u8> {
    let mut c = Cursor::new(buf);
    let (id, flags) = (c.u16().unwrap_or(0), c.u16().unwrap_or(0));
    header(id, FLAG_QR | (flags & (OPCODE_MASK | FLAG_RD)) | FLAG_RA | rcode as u16, [0; 4])
}

fn header(id: u16, flags: u16, counts: [u16; 4]) -> Vec<u8> {
    let mut out = Vec::with_capacity(MAX_RESPONSE);
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    for count in counts {
        out.extend_from_slice(&count.to_be_bytes());
    }
    out
}

#[cfg(test)]
mod tests;
