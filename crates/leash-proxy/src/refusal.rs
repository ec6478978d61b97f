//! The one place that builds leash's own responses: refusals (403), malformed requests (400, 431), audit failures
//! (503) and upstream failures (502, 504). Every refusal carries `X-Leash-Reason` and a body whose first line says
//! what was refused and why, and never lists the rules.

use leash_policy::Reason;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::conn::Next;

/// A response leash answers by itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The HTTP status (403, 400, 502, ...).
    pub status: u16,
    /// The reason word for `X-Leash-Reason`, when the answer is a decision's.
    pub reason: Option<Reason>,
    /// The plain-text body: what was refused and why, one sentence per line.
    pub body: String,
}

impl Response {
    /// 403 for a request the policy refused; `target` is `<host><path>` (or `host:port` for a tunnel).
    pub fn forbidden(target: &str, reason: Reason) -> Self {
        let body = format!("leash: {target} refused by the egress policy ({reason})\n{}\n", reason.describe());
        Self { status: 403, reason: Some(reason), body }
    }

    /// 403 for a model API request refused for its provider-side tools, or for a body leash cannot check for them;
    /// `why` says which (it names the tools, never the policy's rules).
    pub fn provider_tools(target: &str, why: &str) -> Self {
        let reason = Reason::ProviderTools;
        let body = format!("leash: {target} refused by the egress policy ({reason})\n{why}\n");
        Self { status: 403, reason: Some(reason), body }
    }

    /// 400 (or 431 for an oversized head) for a request leash cannot read safely.
    pub fn bad_request(status: u16, why: &str) -> Self {
        let body = format!("leash: malformed request refused ({why})\n");
        Self { status, reason: Some(Reason::BadRequest), body }
    }

    /// 503 when the decision could not be written to the audit log (only the request gate answers it).
    pub fn audit_failed() -> Self {
        let body = "leash: request refused because the audit log cannot be written (audit-failed)\n".to_owned();
        Self { status: 503, reason: Some(Reason::AuditFailed), body }
    }

    /// 502 or 504 for an allowed request whose upstream failed.
    pub fn upstream_failed(status: u16, authority: &str, why: &str) -> Self {
        let body = format!("leash: upstream `{authority}` failed ({why})\n");
        Self { status, reason: None, body }
    }

    /// 502 for an inspected tunnel whose upstream's certificate could not be verified (never downgraded).
    pub fn upstream_tls(authority: &str, why: &str) -> Self {
        let body = format!("leash: upstream `{authority}` failed TLS verification (upstream-tls): {why}\n");
        Self { status: 502, reason: Some(Reason::UpstreamTls), body }
    }

    /// This answer to a tunnel, given inside TLS to the request for `path` on `host`: a 403 names that path; any
    /// other answer (503 `audit-failed`) stays as it is.
    pub fn naming_path(&self, host: &str, path: &str) -> Response {
        match (self.status, self.reason) {
            (403, Some(reason)) => Response::forbidden(&format!("{host}{path}"), reason),
            _ => self.clone(),
        }
    }

    /// This refusal answered as an origin answers what it does not have (`refusals: as-not-found`): a request gets
    /// 404 and an HTML body like a web server's own, a tunnel (`request` false) 502 as an unreachable host does; no
    /// `X-Leash-Reason`, nothing naming leash, the target or a rule. Any other answer stays as it is.
    pub fn as_not_found(&self, request: bool) -> Response {
        if self.status != 403 {
            return self.clone();
        }
        let (status, title) = if request { (404, "404 Not Found") } else { (502, "502 Bad Gateway") };
        let body = format!(
            "<html>\r\n<head><title>{title}</title></head>\r\n<body>\r\n<center><h1>{title}</h1></center>\r\n\
             </body>\r\n</html>\r\n"
        );
        Response { status, reason: None, body }
    }

    /// The response bytes; `keep_alive` false adds `Connection: close`.
    pub fn to_bytes(&self, keep_alive: bool) -> Vec<u8> {
        let mut out = format!("HTTP/1.1 {} {}\r\n", self.status, status_text(self.status));
        out.push_str(&format!("Content-Type: {}\r\n", self.content_type()));
        if let Some(reason) = self.reason {
            out.push_str("X-Leash-Reason: ");
            out.push_str(reason.as_str());
            out.push_str("\r\n");
        }
        out.push_str(&format!("Content-Length: {}\r\n", self.body.len()));
        if !keep_alive {
            out.push_str("Connection: close\r\n");
        }
        out.push_str("\r\n");
        out.push_str(&self.body);
        out.into_bytes()
    }

    /// 403 for a refused model API request (as [`Response::provider_tools`]) in the JSON error shape of the API at
    /// `host` (see [`Response::in_api_shape`]).
    pub fn provider_error(host: &str, target: &str, why: &str) -> Self {
        Response::provider_tools(target, why).in_api_shape(host)
    }

    /// A 403 refusal to a request for a model API at `host`, whatever its reason, in the JSON error shape of that
    /// API, so that its SDK shows leash's reason rather than a bare status: Anthropic's, Gemini's (Vertex AI's too),
    /// and OpenAI's for any other host — the shape most gateways copy. The message is the text body's two lines on
    /// one; `X-Leash-Reason` stays. Any other response is returned as it is.
    pub fn in_api_shape(self, host: &str) -> Self {
        let Some(reason) = self.reason.filter(|_| self.status == 403 && !self.body.starts_with('{')) else {
            return self;
        };
        let message = self.body.trim_end().replacen('\n', ": ", 1);
        let google = host == "generativelanguage.googleapis.com" || host.ends_with("aiplatform.googleapis.com");
        let body = match host {
            "api.anthropic.com" => serde_json::json!({
                "type": "error",
                "error": {"type": "permission_error", "message": message},
            }),
            _ if google => serde_json::json!({
                "error": {"code": 403, "message": message, "status": "PERMISSION_DENIED"},
            }),
            _ => serde_json::json!({
                "error": {
                    "message": message, "type": "permission_error", "param": null,
                    "code": format!("leash_{}", reason.as_str().replace('-', "_")),
                },
            }),
        };
        Self { body: body.to_string(), ..self }
    }

    /// The body's media type: JSON for [`Response::provider_error`]'s, the one body that is a JSON object; HTML for
    /// [`Response::as_not_found`]'s; every other starts `leash:`.
    pub fn content_type(&self) -> &'static str {
        match self.body.as_bytes().first() {
            Some(b'{') => "application/json",
            Some(b'<') => "text/html",
            _ => "text/plain; charset=utf-8",
        }
    }
}

/// Write one of leash's own responses.
pub(crate) async fn reply<S: AsyncWrite + Unpin>(client: &mut S, response: &Response, keep_alive: bool) -> Next {
    match client.write_all(&response.to_bytes(keep_alive)).await.and(client.flush().await) {
        Ok(()) if keep_alive => Next::KeepAlive,
        _ => Next::Close,
    }
}

fn status_text(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forbidden_names_target_and_reason_and_no_rules() {
        let r = Response::forbidden("arxiv.org/abs/2401.01234", Reason::Rule);
        let text = String::from_utf8(r.to_bytes(true)).unwrap_or_default();
        assert!(text.starts_with("HTTP/1.1 403 Forbidden\r\n"));
        assert!(text.contains("\r\nX-Leash-Reason: rule\r\n"));
        let body = text.split("\r\n\r\n").nth(1).unwrap_or_default();
        assert_eq!(body.lines().next(), Some("leash: arxiv.org/abs/2401.01234 refused by the egress policy (rule)"));
        assert!(!text.contains("Connection: close"));
    }
}
