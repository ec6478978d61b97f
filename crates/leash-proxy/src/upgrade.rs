//! What may follow a 101: nothing leash does not understand and watch. A request's `Upgrade` goes up only when it
//! asks for a WebSocket; any other (`h2c` above all, whose streams would each name a path nobody decided) is dropped
//! with its `Connection` token, so the request goes on as plain HTTP/1.1 — what a client does anyway when a server
//! declines — and the decision line says what was dropped. A 101 that answers anything but the WebSocket handshake
//! the request asked for is refused (502) and nothing after it is relayed.
//!
//! On a credential's host a WebSocket negotiates no extension (a compressed message would carry an echoed value
//! where no search sees it), and the server's frames are followed (`websocket_relay.rs`).

use std::borrow::Cow;

use crate::wire::http_head::{upgrade_value, RequestHead, ResponseHead};

/// The only protocol a connection may switch to.
const WEBSOCKET: &[u8] = b"websocket";

/// The `Upgrade` that goes up with the request: a WebSocket's, or none.
pub(crate) fn forwarded(head: &RequestHead) -> Option<&[u8]> {
    upgrade_value(head).filter(|v| is_websocket(v))
}

/// Of the `Upgrade` a request asked for (`upgrade`), the one that does not go up (the decision line's
/// `upgrade_dropped`).
pub(crate) fn dropped(upgrade: Option<&[u8]>) -> Option<Cow<'_, str>> {
    upgrade.filter(|v| !is_websocket(v)).map(String::from_utf8_lossy)
}

/// Why a 101 is not relayed. The reasons quote nothing of the response: what a credential's host sends must not
/// reach leash's own output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SwitchRefused {
    #[error("the upstream switched protocols unasked")]
    Unasked,
    #[error("the upstream switched to another protocol than the WebSocket asked for")]
    OtherProtocol,
    #[error("the upstream selected a WebSocket extension on a credential's host")]
    ExtensionOnCredentialHost,
}

/// Whether a 101 may be relayed: the request asked for a WebSocket and the response switches to one; on a
/// credential's host (`watched`) without an extension.
pub(crate) fn check_switch(request: &RequestHead, response: &ResponseHead, watched: bool) -> Result<(), SwitchRefused> {
    if forwarded(request).is_none() {
        return Err(SwitchRefused::Unasked);
    }
    if !response.values("upgrade").next().is_some_and(is_websocket) {
        return Err(SwitchRefused::OtherProtocol);
    }
    if watched && response.values("sec-websocket-extensions").next().is_some() {
        return Err(SwitchRefused::ExtensionOnCredentialHost);
    }
    Ok(())
}

/// Whether an `Upgrade` value names the WebSocket protocol.
pub(crate) fn is_websocket(value: &[u8]) -> bool {
    value.trim_ascii().eq_ignore_ascii_case(WEBSOCKET)
}
