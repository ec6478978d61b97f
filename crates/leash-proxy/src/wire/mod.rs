//! Pure byte parsers for what the proxy reads off the wire: the TLS ClientHello, HTTP/1.1 message heads, chunked
//! framing. No I/O: each parser looks at a buffer and answers "found", "refuse" or "need more bytes"; the async side
//! only peeks, buffers and replays.

mod bytes;
pub mod chunked;
pub mod client_hello;
mod cursor;
pub mod dns;
pub mod http_head;
pub mod target;
pub mod websocket;

/// The three answers of a byte parser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed<T, E> {
    /// A complete value, and how many bytes of the buffer it took.
    Done(T, usize),
    /// The buffer is a valid prefix; read more and call again with the whole buffer.
    NeedMore,
    /// The bytes can never become valid.
    Refuse(E),
}
