//! Credentials on the way out: the secrets of the policy's `credentials` entries (read by the caller when leash
//! starts), the placeholder the sandbox holds for each, and the three things the proxy does with them — put the real
//! value where an entry says it travels on requests to its hosts, refuse a request that carries a placeholder or a
//! real value anywhere else (`credential-leak`), and turn a real value echoed in a response back into the
//! placeholder before the client sees it. The value never leaves this module but towards its own hosts: it is not
//! in `Debug` output, the audit log (which names the credential) or any message.

use std::borrow::Cow;
use std::fmt;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use base64::Engine;
use leash_policy::{Credential, HeaderForm, Host};

use tokio::io::AsyncWrite;

use crate::message::{Fields, Outgoing};
use crate::wire::chunked::ChunkedScanner;
use crate::wire::http_head::Header;

/// One credential's secret and placeholder.
pub struct Secret {
    /// The policy entry's name (what the audit log says).
    pub name: String,
    value: Vec<u8>,
    placeholder: Vec<u8>,
    /// Whether the placeholder was seen going to its own hosts where leash does not put the value (warned once).
    unreplaced_warned: AtomicBool,
}

impl Secret {
    /// `value` as read from its source; `placeholder` what the sandbox holds instead. Both are non-empty and differ.
    pub fn new(name: &str, value: &str, placeholder: &str) -> Option<Secret> {
        let usable = !value.is_empty() && !placeholder.is_empty() && value != placeholder;
        usable.then(|| Secret {
            name: name.to_owned(),
            value: value.into(),
            placeholder: placeholder.into(),
            unreplaced_warned: AtomicBool::new(false),
        })
    }

    /// The upstream proxy's `user:password` (what `upstream_proxy_auth_env` names), a secret of the operator's that
    /// leash alone sends, in `Proxy-Authorization`: looked for in every request like a credential bound to no host,
    /// masked where leash quotes an answer, and redacted from answers that come through the proxy. `placeholder`
    /// is what the sandbox's environment holds in its place.
    pub fn upstream_proxy(user_password: &str, placeholder: &str) -> Option<Secret> {
        Secret::new(UPSTREAM_PROXY, user_password, placeholder)
    }

    /// The placeholder the sandbox sees in place of the value (in its environment, and in what comes back).
    pub fn placeholder(&self) -> &str {
        std::str::from_utf8(&self.placeholder).unwrap_or_default()
    }

    /// A redactor that turns every form leash writes this value in, for an entry whose header is written in
    /// `form`, back into the placeholder's form in a response: the value itself, and for a `basic:` entry the
    /// base64 of `USER:value` (a provider quoting the Authorization it got).
    pub fn redactor(&self, form: &HeaderForm) -> Redactor {
        let mut forms = vec![(self.value.clone(), self.placeholder.clone())];
        if let HeaderForm::Basic(user) = form {
            let b64 =
                |v: &[u8]| base64::engine::general_purpose::STANDARD_NO_PAD.encode([user.as_bytes(), b":", v].concat());
            forms.push((b64(&self.value).into_bytes(), b64(&self.placeholder).into_bytes()));
        }
        Redactor::new(forms)
    }

    /// Say so (once a run) when the placeholder goes to its own host somewhere leash does not replace it: a client
    /// that sends the key in a header or parameter the entry does not name, which the provider will refuse.
    fn warn_if_unreplaced<'a>(&self, host: &Host, parts: impl IntoIterator<Item = (&'a str, &'a [u8])>) {
        let Some((place, _)) = parts.into_iter().find(|(_, bytes)| contains(bytes, &self.placeholder)) else { return };
        if !self.unreplaced_warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "credential `{}`: its placeholder went to {host} in {place}, where the entry does not put the secret \
                 (the provider will refuse it; name that place in the entry's `header` or `query`)",
                self.name
            );
        }
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secret").field("name", &self.name).field("placeholder", &self.placeholder()).finish()
    }
}

/// The name the upstream proxy's secret goes by in warnings: no credential entry can have it (a space).
pub const UPSTREAM_PROXY: &str = "upstream proxy";

/// Every secret of a run.
#[derive(Debug, Default)]
pub struct Secrets {
    secrets: Vec<Secret>,
}

impl Secrets {
    /// The secrets read at start, one per `credentials` entry that has its value.
    pub fn new(secrets: Vec<Secret>) -> Secrets {
        Secrets { secrets }
    }

    /// No secret at all: requests pass untouched, with nothing to search.
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    /// The secret of the entry named `name`.
    pub fn get(&self, name: &str) -> Option<&Secret> {
        self.secrets.iter().find(|s| s.name == name)
    }

    /// The redactor for an answer that came through the upstream proxy, when leash sends it credentials: its
    /// `user:password`, and that in base64 (a `Proxy-Authorization` quoted back), become their placeholder's forms.
    pub(crate) fn upstream_redactor(&self) -> Option<Redactor> {
        let s = self.get(UPSTREAM_PROXY)?;
        let b64 = |v: &[u8]| base64::engine::general_purpose::STANDARD_NO_PAD.encode(v).into_bytes();
        let forms = vec![(s.value.clone(), s.placeholder.clone()), (b64(&s.value), b64(&s.placeholder))];
        Some(Redactor::new(forms))
    }

    /// `text` with every real value in it replaced by its placeholder; `None` when it holds none.
    pub fn masked(&self, text: &str) -> Option<String> {
        let mut out: Option<String> = None;
        for s in &self.secrets {
            let (value, placeholder) = (String::from_utf8_lossy(&s.value), s.placeholder());
            let current = out.as_deref().unwrap_or(text);
            if current.contains(&*value) {
                out = Some(current.replace(&*value, placeholder));
            }
        }
        out
    }

    /// The name of a credential whose placeholder or value `bytes` contains (also inside a Basic authorization).
    pub fn found_in(&self, bytes: &[u8]) -> Option<&str> {
        self.foreign_in(None, bytes)
    }

    /// The name of a credential carried by any of `parts` (a target, header values, a body) other than `own`, the
    /// one that belongs to the request's host. Every credential is looked for in every part: the host's own in the
    /// same value hides no other.
    pub fn found_in_any<'a>(&self, own: Option<&str>, parts: impl IntoIterator<Item = &'a [u8]>) -> Option<&str> {
        if self.secrets.is_empty() {
            return None;
        }
        parts.into_iter().find_map(|p| self.foreign_in(own, p))
    }

    fn foreign_in(&self, own: Option<&str>, bytes: &[u8]) -> Option<&str> {
        let decoded = basic_credentials(bytes);
        let foreign = self.secrets.iter().filter(|s| Some(s.name.as_str()) != own);
        foreign.into_iter().find_map(|s| {
            let carries = |b: &[u8]| contains(b, &s.placeholder) || contains(b, &s.value);
            (carries(bytes) || decoded.as_deref().is_some_and(carries)).then_some(s.name.as_str())
        })
    }

    /// A request to `host`, whose own credential is `own`, as it goes out, and what the credentials made of it (see
    /// [`Outbound`]): a credential bound to another host found anywhere in its head refuses it; the host's own is put
    /// where its entry says it travels. The one rule for HTTP/1.1 and HTTP/2 ([`Outgoing`]).
    pub(crate) fn outgoing<M: Outgoing>(&self, own: Option<&Credential>, host: &Host, request: &mut M) -> Outbound {
        if self.secrets.is_empty() {
            return Outbound::untouched();
        }
        if let Some(leaked) = self.carried_elsewhere(own.map(|c| &*c.name), request) {
            return Outbound::Leak(leaked.to_owned());
        }
        let secret = own.and_then(|c| Some((c, self.get(&c.name)?)));
        let query = secret.and_then(|(c, s)| in_query(request.target(), c, s));
        let in_header = secret.is_some_and(|(c, s)| put_in(request, c, s));
        if own.is_some() {
            // A compressed response could echo the value where the redactor cannot see it: ask for none, on every
            // request to the host (it may quote a value an earlier request carried).
            request.set("Accept-Encoding", "identity");
        }
        if let Some((_, s)) = secret {
            let target = query.as_deref().unwrap_or(request.target());
            let fields = request.each().map(|(name, value)| (std::str::from_utf8(name).unwrap_or("a field"), value));
            s.warn_if_unreplaced(host, [("the URL", target.as_bytes())].into_iter().chain(fields));
            // To a credential's host no WebSocket extension is offered: a compressed message would carry an echo
            // past the redactor (upgrade.rs).
            if request.upgrade().is_some_and(crate::upgrade::is_websocket) {
                request.remove("sec-websocket-extensions");
            }
        }
        let query = query.as_deref().and_then(|t| t.split_once('?')).map(|(_, q)| q.to_owned());
        let injected = in_header || query.is_some();
        Outbound::go(secret, injected, query)
    }

    /// The name of a credential other than `own` (the host's) that `request`'s head carries anywhere: its method,
    /// target, a field's name or value.
    pub(crate) fn carried_elsewhere<M: Outgoing>(&self, own: Option<&str>, request: &M) -> Option<&str> {
        let names = request.each().map(|(name, _)| name);
        let values = request.each().map(|(_, value)| value);
        let parts = [request.method().as_bytes(), request.target().as_bytes()].into_iter().chain(names).chain(values);
        self.found_in_any(own, parts)
    }

    /// The credential a host name carries (`leash-anthropic-….evil.example` would carry its placeholder out in a
    /// DNS query and the TLS server name), if any.
    pub(crate) fn found_in_name(&self, host: &str) -> Option<&str> {
        self.found_in_any(None, [host.as_bytes()])
    }
}

/// Watches a request body on its way up for the credentials that do not belong to its host. A placeholder (what
/// the sandbox holds) is found before its last byte is sent: bytes that may start one are held until the next bytes
/// tell — which tells the sandbox nothing it does not know. A real value is never held for: the sandbox does not have
/// it, and holding a possible start would tell it whether a guess is one (a prefix oracle). A value is refused only
/// whole, when its last byte arrives (that write does not go up) — which says no more than the provider's own 401 to
/// a wrong key. The body is then cut off and the request refused.
#[derive(Clone)]
pub(crate) struct LeakWatch {
    placeholders: Vec<(Arc<str>, Vec<u8>)>,
    values: Vec<(Arc<str>, Vec<u8>)>,
    /// Bytes not yet sent up.
    held: Vec<u8>,
    /// Where in `held` chunk-framing bytes are (passed over by the search), in order; nearly always none.
    framing: Vec<usize>,
    /// The last data bytes searched for values (the longest value less one): one completed later starts in them.
    recent: Vec<u8>,
}

impl LeakWatch {
    /// A watch for a request to a host whose own credential (allowed in its body) is `own`; `None` when there is
    /// nothing to watch for.
    pub(crate) fn new(secrets: &Secrets, own: Option<&str>) -> Option<LeakWatch> {
        let foreign = secrets.secrets.iter().filter(|s| Some(s.name.as_str()) != own);
        let named = |s: &Secret, bytes: &[u8]| (Arc::from(s.name.as_str()), bytes.to_vec());
        let placeholders: Vec<_> = foreign.clone().map(|s| named(s, &s.placeholder)).collect();
        let values = foreign.map(|s| named(s, &s.value)).collect();
        let (held, framing, recent) = (Vec::new(), Vec::new(), Vec::new());
        (!placeholders.is_empty()).then_some(LeakWatch { placeholders, values, held, framing, recent })
    }

    /// The next body bytes (`data`: body data, else chunk framing): what may go up now, or the credential found.
    pub(crate) fn pass(&mut self, bytes: &[u8], data: bool) -> Result<Vec<u8>, Arc<str>> {
        if data {
            self.search_values(bytes)?;
        }
        let base = self.held.len();
        self.held.extend_from_slice(bytes);
        if !data {
            self.framing.extend(base..self.held.len());
        }
        let (view, raw_at) = self.data_view();
        if let Some((name, _)) = self.placeholders.iter().find(|(_, n)| contains(&view, n)) {
            return Err(name.clone());
        }
        // Hold back the longest run of final data bytes that may start a placeholder: its last byte never goes up.
        // INVARIANT: only placeholders are held for, never a real value (the sandbox would learn its prefixes).
        let longest = self.longest().saturating_sub(1).min(view.len());
        let held_len = (1..=longest).rev().find(|&len| {
            let tail = &view[view.len() - len..];
            self.placeholders.iter().any(|(_, n)| n.starts_with(tail))
        });
        let keep_from = match held_len {
            Some(len) => raw_at.as_ref().map_or(self.held.len() - len, |at| at[view.len() - len]),
            None => self.held.len(),
        };
        self.framing.retain(|&i| i >= keep_from);
        self.framing.iter_mut().for_each(|i| *i -= keep_from);
        Ok(self.held.drain(..keep_from).collect())
    }

    /// A value whose last byte is in `data`: in `data`, or begun in the bytes before it. Nothing is held for it.
    fn search_values(&mut self, data: &[u8]) -> Result<(), Arc<str>> {
        let keep = self.values.iter().map(|(_, v)| v.len()).max().unwrap_or(0).saturating_sub(1);
        // The seam only is copied: the recent bytes and as many new ones as a value begun in them reaches into.
        let reach = data.len().min(keep);
        self.recent.extend_from_slice(&data[..reach]);
        if let Some((name, _)) = self.values.iter().find(|(_, v)| contains(&self.recent, v) || contains(data, v)) {
            return Err(name.clone());
        }
        if data.len() > keep {
            self.recent.clear();
            self.recent.extend_from_slice(&data[data.len() - keep..]);
        } else {
            self.recent.drain(..self.recent.len().saturating_sub(keep));
        }
        Ok(())
    }

    /// The data bytes held, and (where framing sits among them) each one's place in `held`.
    fn data_view(&self) -> (Cow<'_, [u8]>, Option<Vec<usize>>) {
        if self.framing.is_empty() {
            return (Cow::Borrowed(&self.held), None);
        }
        let at: Vec<usize> = (0..self.held.len()).filter(|i| self.framing.binary_search(i).is_err()).collect();
        (Cow::Owned(at.iter().map(|&i| self.held[i]).collect()), Some(at))
    }

    /// The body's end: what was held goes up.
    pub(crate) fn finish(&mut self) -> Vec<u8> {
        self.framing.clear();
        std::mem::take(&mut self.held)
    }

    /// The credential whole `bytes` (a trailer field's name or value) carry, if any.
    pub(crate) fn found_in(&self, bytes: &[u8]) -> Option<Arc<str>> {
        let mut all = self.placeholders.iter().chain(&self.values);
        all.find(|(_, n)| contains(bytes, n)).map(|(name, _)| name.clone())
    }

    fn longest(&self) -> usize {
        self.placeholders.iter().map(|(_, n)| n.len()).max().unwrap_or(0)
    }
}

/// The error a [`Watched`] writer fails with: the credential found.
#[derive(Debug)]
pub(crate) struct LeakFound(pub Arc<str>);

impl fmt::Display for LeakFound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the request body carries credential `{}`", self.0)
    }
}

impl std::error::Error for LeakFound {}

impl LeakFound {
    /// The credential, if `e` is a [`LeakFound`].
    pub(crate) fn of(e: &io::Error) -> Option<Arc<str>> {
        e.get_ref().and_then(|inner| inner.downcast_ref::<LeakFound>()).map(|l| l.0.clone())
    }
}

/// What watches an exchange for credentials: the one put on the request, turned back into its placeholder in the
/// response (`redact`), and those the request body must not carry (`leaks`); and the upstream proxy the request
/// goes through, whose own refusals (see `exchange::proxy_refusal`) are not the origin's answer (`via_proxy`, its authority).
#[derive(Clone, Default)]
pub(crate) struct Watches {
    pub redact: Option<Redactor>,
    pub leaks: Option<LeakWatch>,
    pub via_proxy: Option<String>,
}

/// What leash does with credentials on one request.
pub(crate) enum Outbound {
    /// The request carries the placeholder or value of this credential to a host it does not belong to: refuse.
    Leak(String),
    /// It goes: with the credential named put on it (if one was), and every response from the host watched for the
    /// host's own credential (whether or not this request carried it: the host may quote a value it got before).
    /// `query`: the query to send in place of the request's, the credential put into a parameter of it.
    Go { credential: Option<Arc<str>>, redactor: Option<Redactor>, query: Option<String> },
}

impl Outbound {
    fn untouched() -> Outbound {
        Outbound::Go { credential: None, redactor: None, query: None }
    }

    fn go(own: Option<(&Credential, &Secret)>, injected: bool, query: Option<String>) -> Outbound {
        let credential = own.filter(|_| injected).map(|(c, _)| c.name.clone());
        Outbound::Go { credential, redactor: own.map(|(c, s)| s.redactor(&c.form)), query }
    }
}

/// `target` (a path or a whole URL, with its query) with the placeholder replaced by the secret in the value of
/// the entry's query parameter (`?key=PLACEHOLDER`); `None` when there is no such parameter carrying it.
fn in_query(target: &str, credential: &Credential, secret: &Secret) -> Option<String> {
    let name = credential.query.as_deref()?;
    let (before, query) = target.split_once('?')?;
    let mut used = false;
    let pairs: Vec<Cow<'_, str>> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((n, v)) if n == name && contains(v.as_bytes(), &secret.placeholder) => {
                used = true;
                let value = replace_all(v.as_bytes(), &secret.placeholder, &secret.value);
                Cow::Owned(format!("{n}={}", String::from_utf8_lossy(&value)))
            }
            _ => Cow::Borrowed(pair),
        })
        .collect();
    used.then(|| format!("{before}?{}", pairs.join("&")))
}

/// [`inject`]'s rule, for the fields of either version.
fn put_in<F: Fields>(fields: &mut F, credential: &Credential, secret: &Secret) -> bool {
    let present = fields.values_of(&credential.header).next().is_some();
    let used = credential
        .headers()
        .fold(false, |used, name| fields.rewrite(name, |value| replaced(value, credential, secret)) | used);
    if present || used || !credential.add {
        return used;
    }
    fields.add(&credential.header, added_value(&credential.form, secret))
}

/// Put `secret` where `credential` says it travels in an HTTP/1.1 head's `headers`: its placeholder is replaced in
/// the values of each of the entry's headers (for a `basic:` entry, a Basic authorization carrying it becomes the
/// entry's own, see `replaced`); with `add`, a request without the entry's first header, and without the
/// placeholder in another, gets that header. True if the real value went in.
pub fn inject(headers: &mut Vec<Header>, credential: &Credential, secret: &Secret) -> bool {
    put_in(headers, credential, secret)
}

/// [`inject`] for an HTTP/2 request's fields.
pub fn inject_h2(headers: &mut http::HeaderMap, credential: &Credential, secret: &Secret) -> bool {
    put_in(headers, credential, secret)
}

/// `value` with the placeholder replaced by the secret; `None` when it holds no placeholder. For a `basic:` entry, a
/// `Basic base64(user:password)` carrying the placeholder in its user or password becomes the entry's own
/// `Basic base64(USER:SECRET)`: leash writes no form of the value its redactor does not know. Other entries are not
/// rewritten inside Basic (the placeholder there goes as it is).
fn replaced(value: &[u8], credential: &Credential, secret: &Secret) -> Option<Vec<u8>> {
    if contains(value, &secret.placeholder) {
        return Some(replace_all(value, &secret.placeholder, &secret.value));
    }
    let HeaderForm::Basic(_) = credential.form else { return None };
    let decoded = basic_credentials(value)?;
    contains(&decoded, &secret.placeholder).then(|| added_value(&credential.form, secret))
}

fn added_value(form: &HeaderForm, secret: &Secret) -> Vec<u8> {
    match form {
        HeaderForm::Bare => secret.value.clone(),
        HeaderForm::Scheme(word) => [word.as_bytes(), b" ", &secret.value].concat(),
        HeaderForm::Basic(user) => basic_value(&[user.as_bytes(), b":", &secret.value].concat()),
    }
}

/// The decoded `user:password` of a `Basic ...` value.
fn basic_credentials(value: &[u8]) -> Option<Vec<u8>> {
    let rest = value.get(..6).filter(|p| p.eq_ignore_ascii_case(b"basic ")).and(value.get(6..))?;
    // Padding or none: clients differ, and a credential must be found either way.
    let lenient = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    lenient.decode(rest.trim_ascii()).ok()
}

/// `Basic base64(user:password)`, as a `Proxy-Authorization` or `Authorization` value.
pub fn basic_authorization(user_password: &str) -> String {
    String::from_utf8_lossy(&basic_value(user_password.as_bytes())).into_owned()
}

fn basic_value(user_password: &[u8]) -> Vec<u8> {
    let encoded = base64::engine::general_purpose::STANDARD.encode(user_password);
    [b"Basic ".as_slice(), encoded.as_bytes()].concat()
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    find(hay, needle).is_some()
}

fn replace_all(hay: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(hay.len() + to.len());
    let mut i = 0;
    while i < hay.len() {
        if hay[i..].starts_with(from) {
            out.extend_from_slice(to);
            i += from.len();
        } else {
            out.push(hay[i]);
            i += 1;
        }
    }
    out
}

/// What a [`Filtered`] writer passes a byte stream through: a [`Redactor`] (a response) or a [`LeakWatch`] (a request).
pub(crate) trait Filter {
    /// The next bytes (`data`: body data; else framing, passed over by the search): what may go on now, or the
    /// credential that stops the stream.
    fn filter(&mut self, bytes: &[u8], data: bool) -> Result<Vec<u8>, Arc<str>>;
    /// One whole line of text a peer chose outside the data (a chunk extension, a trailer field), searched on its
    /// own: as it may go on (redacted), or the credential that stops the stream.
    fn text(&mut self, line: &[u8]) -> Result<Vec<u8>, Arc<str>>;
    /// The stream's end: what was held goes on.
    fn end(&mut self) -> Vec<u8>;
}

impl Filter for Redactor {
    fn filter(&mut self, bytes: &[u8], data: bool) -> Result<Vec<u8>, Arc<str>> {
        Ok(self.push(bytes, data))
    }

    fn text(&mut self, line: &[u8]) -> Result<Vec<u8>, Arc<str>> {
        Ok(self.redact_all(line))
    }

    fn end(&mut self) -> Vec<u8> {
        self.finish()
    }
}

impl Filter for LeakWatch {
    fn filter(&mut self, bytes: &[u8], data: bool) -> Result<Vec<u8>, Arc<str>> {
        self.pass(bytes, data)
    }

    fn text(&mut self, line: &[u8]) -> Result<Vec<u8>, Arc<str>> {
        self.found_in(line).map_or_else(|| Ok(line.to_vec()), Err)
    }

    fn end(&mut self) -> Vec<u8> {
        self.finish()
    }
}

/// A response body's writer that turns the host's own credential back into its placeholder.
pub(crate) type Redacting<'a, W> = Filtered<'a, W, Redactor>;
/// A request body's writer that stops at a credential bound to another host: the write fails with [`LeakFound`]
/// inside the error, and nothing of the credential is written.
pub(crate) type Watched<'a, W> = Filtered<'a, W, LeakWatch>;

/// A writer that passes a byte stream through a [`Filter`] on its way to `inner`. With `chunked`, the message's data
/// is searched as one stream, whatever frames it — sizes, line ends, chunk extensions (`;x`, a bare `;`, quoted
/// values) and trailers are passed over — so a credential split across chunks is caught; each extension and trailer
/// line is searched whole on its own, held until its line end (its length is the peer's, never the value's).
/// Bytes the filter holds go on only at [`Filtered::finish`], never at a flush: a relay flushes whenever its reader
/// waits, which may fall inside a credential.
pub(crate) struct Filtered<'a, W, F> {
    inner: &'a mut W,
    filter: F,
    chunked: Option<ChunkedScanner>,
    /// The chunk extension or trailer line under way (bounded by the scanner's `MAX_CHUNK_LINE`).
    line: Vec<u8>,
    /// Bytes the filter passed that `inner` has not taken yet, from `at` on.
    out: Vec<u8>,
    at: usize,
}

impl<'a, W: AsyncWrite + Unpin, F: Filter + Unpin> Filtered<'a, W, F> {
    pub(crate) fn new(inner: &'a mut W, filter: F, chunked: bool) -> Self {
        let chunked = chunked.then(ChunkedScanner::new);
        Filtered { inner, filter, chunked, line: Vec::new(), out: Vec::new(), at: 0 }
    }

    /// The stream's end: what the filter still holds goes on, and `inner` is flushed.
    pub(crate) async fn finish(&mut self) -> io::Result<()> {
        use tokio::io::AsyncWriteExt;
        let mut pending = self.out.split_off(self.at);
        // A line cut off by the stream's end (a broken body, the relay's to report) is searched like a whole one.
        let cut = end_line(&mut self.line, &mut self.filter).map_err(|name| io::Error::other(LeakFound(name)))?;
        pending.extend_from_slice(&cut);
        pending.extend_from_slice(&self.filter.end());
        self.out.clear();
        self.at = 0;
        self.inner.write_all(&pending).await?;
        self.inner.flush().await
    }

    fn take(&mut self, data: &[u8]) -> Result<Vec<u8>, Arc<str>> {
        let Some(scanner) = &mut self.chunked else { return self.filter.filter(data, true) };
        let mut out = Vec::with_capacity(data.len());
        let mut rest = data;
        while !rest.is_empty() {
            // Data goes through in runs; framing one byte at a time (its lines are short).
            let left = scanner.data_left();
            // Chunk extensions and trailer fields are a peer's text too, but no part of the data: searched line by
            // line on their own, and passed over by the data's search, so none can split a credential in the data.
            let text = scanner.in_text();
            let n = left.map_or(1, |left| usize::try_from(left).map_or(rest.len(), |l| l.min(rest.len())).max(1));
            let (now, later) = rest.split_at(n);
            // A framing error is the relay's to report; here the bytes only pass through.
            let _ = scanner.feed(now);
            rest = later;
            if !text {
                out.extend(self.filter.filter(now, left.is_some())?);
                continue;
            }
            self.line.extend_from_slice(now);
            // The line ends at its LF, or where the scanner leaves text (an extension's CR, a framing error).
            if now == b"\n" || !scanner.in_text() {
                out.extend(end_line(&mut self.line, &mut self.filter)?);
            }
        }
        Ok(out)
    }

    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.at < self.out.len() {
            let n = ready!(Pin::new(&mut *self.inner).poll_write(cx, &self.out[self.at..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.at += n;
        }
        self.out.clear();
        self.at = 0;
        Poll::Ready(Ok(()))
    }
}

/// The text `line` under way, searched whole and handed to `filter` as framing (after the data before it).
fn end_line<F: Filter>(line: &mut Vec<u8>, filter: &mut F) -> Result<Vec<u8>, Arc<str>> {
    if line.is_empty() {
        return Ok(Vec::new());
    }
    let whole = std::mem::take(line);
    let checked = filter.text(&whole)?;
    filter.filter(&checked, false)
}

impl<W: AsyncWrite + Unpin, F: Filter + Unpin> AsyncWrite for Filtered<'_, W, F> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        ready!(self.drain(cx))?;
        match self.take(data) {
            Ok(passed) => self.out = passed,
            Err(name) => return Poll::Ready(Err(io::Error::other(LeakFound(name)))),
        }
        // Accepted whole; what could not be written yet goes first on the next call or flush.
        if let Poll::Ready(Err(e)) = self.drain(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(data.len()))
    }

    /// What the filter passed goes on; what it holds stays held (see [`Filtered::finish`]).
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.drain(cx))?;
        Pin::new(&mut *self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.drain(cx))?;
        Pin::new(&mut *self.inner).poll_shutdown(cx)
    }
}

/// Turns a secret echoed in a response body back into its placeholder, as the body streams. Framing bytes
/// (chunk-size lines) may sit between the bytes of a match; they pass in place, so a value split across chunks or
/// frames is caught too. The placeholder is used when it has the secret's length, so framing lengths stay right;
/// otherwise a run of `*` of that length.
///
/// What is held back never depends on the secret (else whether bytes go on, and how they are cut into writes,
/// records and frames, would tell a guess that is a prefix of it from one that is not): always the last
/// `window` data bytes — those a match ending in later bytes could start in — cut back to the last control byte
/// among them, which no secret holds (refused at start) and so no match spans. Held bytes go on with the next
/// bytes, in the same write; a stream of lines (server-sent events) is held back by nothing.
#[derive(Clone)]
pub struct Redactor {
    /// Each form of the secret leash writes, and what it becomes.
    forms: Vec<(Vec<u8>, Vec<u8>)>,
    /// The longest form less one.
    window: usize,
    /// True when no form holds a control byte (always, for a secret leash accepted at start).
    breaks: bool,
    /// Bytes not yet passed on.
    pending: Vec<u8>,
    /// Where in `pending` framing bytes are (passed over by the match), in order; nearly always none.
    framing: Vec<usize>,
}

/// A byte no match spans (see [`Redactor`]).
fn is_break(b: u8) -> bool {
    b.is_ascii_control()
}

impl Redactor {
    fn new(forms: Vec<(Vec<u8>, Vec<u8>)>) -> Redactor {
        let forms: Vec<_> = forms
            .into_iter()
            .filter(|(secret, _)| !secret.is_empty())
            .map(|(secret, placeholder)| {
                let replacement =
                    if placeholder.len() == secret.len() { placeholder } else { vec![b'*'; secret.len()] };
                (secret, replacement)
            })
            .collect();
        let window = forms.iter().map(|(s, _)| s.len()).max().unwrap_or(0).saturating_sub(1);
        let breaks = forms.iter().all(|(s, r)| !s.iter().chain(r).any(|&b| is_break(b)));
        Redactor { forms, window, breaks, pending: Vec::new(), framing: Vec::new() }
    }

    /// One redactor for the forms of both `a` and `b` (either may be missing).
    pub(crate) fn joined(a: Option<Redactor>, b: Option<Redactor>) -> Option<Redactor> {
        match (a, b) {
            (Some(a), Some(b)) => Some(Redactor::new(a.forms.into_iter().chain(b.forms).collect())),
            (a, b) => a.or(b),
        }
    }

    /// Take `bytes` (`data`: body data, else framing) and return what may be passed on now.
    pub fn push(&mut self, bytes: &[u8], data: bool) -> Vec<u8> {
        let base = self.pending.len();
        self.pending.extend_from_slice(bytes);
        if !data {
            self.framing.extend(base..self.pending.len());
        }
        let held_from = match self.framing.is_empty() {
            // The common case, all data: slices, no index per byte.
            true => self.redact_data(),
            false => self.redact_framed(),
        };
        self.framing.retain(|&i| i >= held_from);
        self.framing.iter_mut().for_each(|i| *i -= held_from);
        self.pending.drain(..held_from).collect()
    }

    /// The end of the body: everything held is passed on.
    pub fn finish(&mut self) -> Vec<u8> {
        self.framing.clear();
        std::mem::take(&mut self.pending)
    }

    /// `bytes` (a whole response head, a field value) with every occurrence of each form replaced.
    pub fn redact_all(&self, bytes: &[u8]) -> Vec<u8> {
        let mut out = Cow::Borrowed(bytes);
        for (secret, replacement) in &self.forms {
            if contains(&out, secret) {
                out = Cow::Owned(replace_all(&out, secret, replacement));
            }
        }
        out.into_owned()
    }

    /// Replace every match in `pending` (all data); where the held tail starts.
    fn redact_data(&mut self) -> usize {
        for (secret, replacement) in &self.forms {
            let mut at = 0;
            while let Some(found) = self.pending.get(at..).and_then(|rest| find(rest, secret)) {
                let start = at + found;
                self.pending[start..start + secret.len()].copy_from_slice(replacement);
                at = start + secret.len();
            }
        }
        // INVARIANT: what is held depends on the bytes the client gets and the secret's length, never its value.
        let from = self.pending.len().saturating_sub(self.window);
        let after_break = self.pending[from..].iter().rposition(|&b| is_break(b)).filter(|_| self.breaks);
        after_break.map_or(from, |i| from + i + 1)
    }

    /// [`Redactor::redact_data`] with framing bytes among the data, passed over by the match.
    fn redact_framed(&mut self) -> usize {
        let data_at: Vec<usize> = (0..self.pending.len()).filter(|i| self.framing.binary_search(i).is_err()).collect();
        for (secret, replacement) in &self.forms {
            let n = secret.len();
            let mut k = 0;
            while k + n <= data_at.len() {
                if (0..n).all(|j| self.pending[data_at[k + j]] == secret[j]) {
                    for j in 0..n {
                        self.pending[data_at[k + j]] = replacement[j];
                    }
                    k += n;
                } else {
                    k += 1;
                }
            }
        }
        let from = data_at.len().saturating_sub(self.window);
        let tail = &data_at[from..];
        let after_break = tail.iter().rposition(|&i| is_break(self.pending[i])).filter(|_| self.breaks);
        let start = after_break.map_or(from, |i| from + i + 1);
        data_at.get(start).copied().unwrap_or(self.pending.len())
    }
}

/// Where `needle` first occurs in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    let first = *needle.first()?;
    let mut at = 0;
    while let Some(i) = hay.get(at..)?.iter().position(|&b| b == first) {
        let start = at + i;
        if hay.get(start..start + needle.len())? == needle {
            return Some(start);
        }
        at = start + 1;
    }
    None
}

#[cfg(test)]
mod tests;
