//! TLS ClientHello reader: finds the server name (SNI), whether Encrypted Client Hello is offered, and the ALPN list,
//! reassembling the handshake message across TLS records. Bounded: a ClientHello larger than
//! [`MAX_CLIENT_HELLO`] is refused.

use super::Parsed;

/// Largest ClientHello handshake message accepted. Real ones are < 2 KiB; post-quantum key shares push them
/// toward 2-4 KiB; 64 KiB leaves room for anything legitimate while bounding memory per tunnel.
pub const MAX_CLIENT_HELLO: usize = 64 * 1024;

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
    pub server_name: ServerName,
    /// The encrypted_client_hello extension (0xfe0d) is present.
    pub ech: bool,
    /// ALPN protocol names offered, in order.
    pub alpn: Vec<Vec<u8>>,
}

/// Why the bytes are not a ClientHello (reason `not-tls`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotClientHello {
    #[error("not a TLS handshake record")]
    NotHandshake,
    #[error("first handshake message is not a ClientHello")]
    NotClientHello,
    #[error("malformed ClientHello: {0}")]
    Malformed(&'static str),
    #[error("ClientHello larger than the bound")]
    TooLarge,
}

/// Read a ClientHello from the first bytes of a tunnel. `Done`'s length is the bytes of the records that carried it.
pub fn parse_client_hello(_buf: &[u8]) -> Parsed<ClientHello, NotClientHello> {
    todo!()
}
