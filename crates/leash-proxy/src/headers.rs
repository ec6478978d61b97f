//! Header rewriting for forwarded messages: hop-by-hop fields removed (RFC 9110 §7.6.1), including every field the
//! Connection header names; everything else kept in order, repeated fields (several `Set-Cookie`) included.

use crate::wire::http_head::Header;

/// Fields that describe one connection, never forwarded. `Transfer-Encoding` is kept: bodies are relayed in their
/// original framing. `Proxy-Authorization` is for leash, not the upstream.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "upgrade",
    "trailer",
];

/// The field names the Connection header(s) list, lowercased.
pub fn connection_tokens(headers: &[Header]) -> Vec<String> {
    headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("connection"))
        .flat_map(|h| {
            String::from_utf8_lossy(&h.value)
                .split(',')
                .map(|t| t.trim().to_ascii_lowercase())
                .filter(|t| !t.is_empty())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Whether `token` (e.g. `close`, `upgrade`) is among the Connection options.
pub fn has_connection_option(headers: &[Header], token: &str) -> bool {
    connection_tokens(headers).iter().any(|t| t == token)
}

/// Append every end-to-end header to `out` as `Name: value\r\n`, skipping hop-by-hop ones and those in `skip`.
pub fn write_end_to_end(out: &mut Vec<u8>, headers: &[Header], skip: &[&str]) {
    let named = connection_tokens(headers);
    for h in headers {
        let lower = h.name.to_ascii_lowercase();
        if HOP_BY_HOP.contains(&lower.as_str()) || skip.contains(&lower.as_str()) || named.contains(&lower) {
            continue;
        }
        out.extend_from_slice(h.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(&h.value);
        out.extend_from_slice(b"\r\n");
    }
}

/// Every value of the fields named `name`, in order.
pub fn values<'a>(headers: &'a [Header], name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
    headers.iter().filter(move |h| h.name.eq_ignore_ascii_case(name)).map(|h| h.value.as_slice())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(name: &str, value: &str) -> Header {
        Header { name: name.into(), value: value.as_bytes().to_vec() }
    }

    #[test]
    fn drops_hop_by_hop_and_connection_named_fields_keeps_repeats_in_order() {
        let headers = vec![
            h("Set-Cookie", "a=1"),
            h("Connection", "keep-alive, X-Secret"),
            h("X-Secret", "s"),
            h("Keep-Alive", "timeout=5"),
            h("Set-Cookie", "b=2"),
            h("Transfer-Encoding", "chunked"),
        ];
        let mut out = Vec::new();
        write_end_to_end(&mut out, &headers, &[]);
        assert_eq!(
            String::from_utf8(out).unwrap_or_default(),
            "Set-Cookie: a=1\r\nSet-Cookie: b=2\r\nTransfer-Encoding: chunked\r\n"
        );
    }
}
