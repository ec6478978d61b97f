use leash_policy::{Credential, CredentialHost, HeaderForm, SecretSource};

use super::*;

const SECRET: &str = "sk-real-0123456789abcdef";
const PLACEHOLDER: &str = "leash-placeholder-0123456";

fn secret() -> Secret {
    Secret::new("anthropic", SECRET, PLACEHOLDER).unwrap()
}

fn credential(header: &str, form: HeaderForm, add: bool) -> Credential {
    Credential {
        name: "anthropic".into(),
        hosts: Vec::<CredentialHost>::new(),
        env: "KEY".into(),
        source: SecretSource::Env("KEY".into()),
        header: header.into(),
        also_headers: Vec::new(),
        query: None,
        form,
        add,
        plaintext: false,
    }
}

fn header(name: &str, value: &str) -> Header {
    Header::new(name, value)
}

fn value_of<'h>(headers: &'h [Header], name: &str) -> &'h str {
    std::str::from_utf8(&headers.iter().find(|h| h.is(name)).unwrap().value).unwrap()
}

#[test]
fn the_placeholder_is_replaced_where_the_entry_says_and_nowhere_else() {
    let mut headers = vec![header("X-Api-Key", PLACEHOLDER), header("x-other", PLACEHOLDER)];
    assert!(inject(&mut headers, &credential("x-api-key", HeaderForm::Bare, false), &secret()));
    assert_eq!(value_of(&headers, "x-api-key"), SECRET);
    assert_eq!(value_of(&headers, "x-other"), PLACEHOLDER, "only the entry's header carries the secret");
    let mut bearer = vec![header("Authorization", &format!("Bearer {PLACEHOLDER}"))];
    assert!(inject(&mut bearer, &credential("authorization", HeaderForm::Bare, false), &secret()));
    assert_eq!(value_of(&bearer, "authorization"), format!("Bearer {SECRET}"));
}

#[test]
fn a_basic_authorization_carrying_the_placeholder_gets_the_secret_as_password() {
    let b64 = base64::engine::general_purpose::STANDARD;
    let sent = format!("Basic {}", b64.encode(format!("x-access-token:{PLACEHOLDER}")));
    let mut headers = vec![header("authorization", &sent)];
    let github = credential("authorization", HeaderForm::Basic("x-access-token".into()), false);
    assert!(inject(&mut headers, &github, &secret()));
    let now = value_of(&headers, "authorization").strip_prefix("Basic ").unwrap().to_owned();
    assert_eq!(b64.decode(now).unwrap(), format!("x-access-token:{SECRET}").as_bytes());
}

#[test]
fn a_missing_header_is_added_only_when_the_entry_says_so() {
    let mut headers = vec![header("accept", "*/*")];
    assert!(!inject(&mut headers, &credential("x-api-key", HeaderForm::Bare, false), &secret()));
    assert_eq!(headers.len(), 1);
    assert!(inject(&mut headers, &credential("authorization", HeaderForm::Scheme("Bearer".into()), true), &secret()));
    assert_eq!(value_of(&headers, "authorization"), format!("Bearer {SECRET}"));
    // A header without the placeholder is left alone (the client sent its own credential).
    let mut own = vec![header("x-api-key", "sk-someone-elses")];
    assert!(!inject(&mut own, &credential("x-api-key", HeaderForm::Bare, true), &secret()));
    assert_eq!(value_of(&own, "x-api-key"), "sk-someone-elses");
}

#[test]
fn http2_fields_get_the_same_treatment() {
    let mut fields = http::HeaderMap::new();
    fields.insert("x-api-key", http::HeaderValue::from_static(PLACEHOLDER));
    assert!(inject_h2(&mut fields, &credential("x-api-key", HeaderForm::Bare, false), &secret()));
    assert_eq!(fields["x-api-key"], SECRET);
    let mut none = http::HeaderMap::new();
    assert!(inject_h2(&mut none, &credential("x-goog-api-key", HeaderForm::Bare, true), &secret()));
    assert_eq!(none["x-goog-api-key"], SECRET);
}

#[test]
fn the_placeholder_or_the_value_anywhere_is_found_also_inside_basic() {
    let secrets = Secrets::new(vec![secret()]);
    assert_eq!(secrets.found_in(format!("/upload?k={PLACEHOLDER}").as_bytes()), Some("anthropic"));
    assert_eq!(secrets.found_in(format!("token {SECRET}").as_bytes()), Some("anthropic"));
    let b64 = base64::engine::general_purpose::STANDARD.encode(format!("u:{PLACEHOLDER}"));
    assert_eq!(secrets.found_in(format!("Basic {b64}").as_bytes()), Some("anthropic"));
    assert_eq!(secrets.found_in(b"/nothing/here"), None);
    assert!(!format!("{:?}", secret()).contains(SECRET), "Debug never shows the value");
}

/// Feed `parts` (text, is-data) through a redactor; what comes out.
fn redact(secret_len_placeholder: &str, parts: &[(&str, bool)]) -> String {
    let s = Secret::new("k", "SECRETVALUE", secret_len_placeholder).unwrap();
    let mut r = s.redactor(&HeaderForm::Bare);
    let mut out = Vec::new();
    for (text, data) in parts {
        out.extend(r.push(text.as_bytes(), *data));
    }
    out.extend(r.finish());
    String::from_utf8(out).unwrap()
}

#[test]
fn an_echoed_secret_becomes_the_placeholder_across_chunk_boundaries() {
    // Same length: the placeholder itself.
    assert_eq!(redact("PLACEHOLDR!", &[("key: SECRETVALUE.", true)]), "key: PLACEHOLDR!.");
    assert_eq!(redact("PLACEHOLDR!", &[("key: SECR", true), ("ETVALUE.", true)]), "key: PLACEHOLDR!.");
    // Split by chunk framing: the framing stays where it was, the data around it is replaced.
    let framed = [("b\r\nkey: SECRET", true), ("\r\n6\r\n", false), ("VALUE.", true), ("\r\n0\r\n\r\n", false)];
    assert_eq!(redact("PLACEHOLDR!", &framed), "b\r\nkey: PLACEH\r\n6\r\nOLDR!.\r\n0\r\n\r\n");
    // A different length: stars of the secret's length, so framing lengths stay right.
    assert_eq!(redact("leash-placeholder-x", &[("[SECRETVALUE]", true)]), "[***********]");
    // A prefix that goes nowhere is passed on unchanged at the end.
    assert_eq!(redact("PLACEHOLDR!", &[("ends with SECRE", true)]), "ends with SECRE");
}

#[test]
fn what_is_held_back_never_depends_on_the_secret() {
    let s = Secret::new("k", "SECRETVALUE", "PLACEHOLDR!").unwrap();
    let mut r = s.redactor(&HeaderForm::Bare);
    assert_eq!(r.push(b"data: event\n\n", true), b"data: event\n\n", "a line ended is not held back");
    // A tail that starts the secret and one that does not are held alike: the window, back to the line's start.
    for tail in ["data: SEC", "data: XYZ"] {
        let mut r = s.redactor(&HeaderForm::Bare);
        assert_eq!(r.push(format!("x\n{tail}").as_bytes(), true), b"x\n", "{tail}");
        assert_eq!(r.push(b"0123456789abcdef", true), format!("{tail}012345").as_bytes(), "{tail}");
        assert_eq!(r.finish(), b"6789abcdef", "{tail}: the window, at the end");
    }
    assert_eq!(r.push(b"OND\n\n", true), b"OND\n\n");
}

#[test]
fn the_base64_a_basic_entry_wrote_is_redacted_too() {
    let s = Secret::new("k", "SECRETVALUE", "PLACEHOLDR!").unwrap();
    let b64 = |v: &str| base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{v}"));
    let echo = format!("you sent: Basic {}", b64("SECRETVALUE"));
    let mut r = s.redactor(&HeaderForm::Basic("x-access-token".into()));
    let mut out = r.push(echo.as_bytes(), true);
    out.extend(r.finish());
    assert_eq!(String::from_utf8(out).unwrap(), format!("you sent: Basic {}", b64("PLACEHOLDR!")));
    assert_eq!(r.redact_all(echo.as_bytes()), format!("you sent: Basic {}", b64("PLACEHOLDR!")).as_bytes());
}

#[test]
fn only_a_basic_entry_is_rewritten_inside_basic_and_then_in_its_own_form() {
    let b64 = base64::engine::general_purpose::STANDARD;
    let sent = format!("Basic {}", b64.encode(format!("someone:{PLACEHOLDER}")));
    let mut bearer = vec![header("authorization", &sent)];
    assert!(!inject(&mut bearer, &credential("authorization", HeaderForm::Scheme("Bearer".into()), false), &secret()));
    assert_eq!(value_of(&bearer, "authorization"), sent, "a Bearer entry leaves Basic alone");
    let mut basic = vec![header("authorization", &sent)];
    let github = credential("authorization", HeaderForm::Basic("x-access-token".into()), false);
    assert!(inject(&mut basic, &github, &secret()));
    let now = value_of(&basic, "authorization").strip_prefix("Basic ").unwrap().to_owned();
    assert_eq!(b64.decode(now).unwrap(), format!("x-access-token:{SECRET}").as_bytes(), "the entry's own form");
}

#[test]
fn a_hosts_own_credential_hides_no_other_in_the_same_value() {
    let other = Secret::new("other", "sk-other-secret-0000000", "leash-other-placeholder").unwrap();
    let secrets = Secrets::new(vec![secret(), other]);
    let both = format!("/x?a={PLACEHOLDER}&b=leash-other-placeholder");
    assert_eq!(secrets.found_in_any(Some("anthropic"), [both.as_bytes()]), Some("other"));
    assert_eq!(secrets.found_in_any(Some("other"), [both.as_bytes()]), Some("anthropic"));
    assert_eq!(secrets.found_in_any(Some("anthropic"), [format!("/x?a={PLACEHOLDER}").as_bytes()]), None);
}

fn watch() -> LeakWatch {
    LeakWatch::new(&Secrets::new(vec![secret()]), None).unwrap()
}

#[test]
fn a_placeholder_split_across_writes_is_found_before_its_last_byte_goes_up() {
    let mut w = watch();
    let (first, second) = PLACEHOLDER.split_at(3);
    let sent = w.pass(format!("k={first}").as_bytes(), true).unwrap();
    assert_eq!(sent, b"k=", "a possible start is held back");
    assert_eq!(w.pass(second.as_bytes(), true), Err(Arc::from("anthropic")));
    let mut clean = watch();
    assert_eq!(clean.pass(b"k=lea", true).unwrap(), b"k=");
    assert_eq!(clean.pass(b"f and more", true).unwrap(), b"leaf and more", "released once it cannot be one");
    assert_eq!(clean.finish(), b"");
}

#[test]
fn a_possible_start_of_a_value_is_not_held_and_a_whole_value_is_refused() {
    for guess in [&SECRET[..10], "sk-fake-01"] {
        let mut w = watch();
        assert_eq!(w.pass(format!("k={guess}").as_bytes(), true).unwrap(), format!("k={guess}").as_bytes());
    }
    let mut w = watch();
    assert!(w.pass(&SECRET.as_bytes()[..10], true).is_ok());
    assert_eq!(w.pass(&SECRET.as_bytes()[10..], true), Err(Arc::from("anthropic")), "whole across two writes");
}

#[test]
fn a_value_split_by_chunk_framing_is_found_too() {
    let mut w = watch();
    let (first, second) = SECRET.split_at(10);
    assert!(w.pass(first.as_bytes(), true).is_ok());
    assert!(w.pass(b"\r\n10\r\n", false).is_ok(), "framing between the halves passes over");
    assert_eq!(w.pass(second.as_bytes(), true), Err(Arc::from("anthropic")));
}

#[test]
fn a_credentials_own_host_may_carry_it() {
    let mut own = LeakWatch::new(&Secrets::new(vec![secret()]), Some("anthropic"));
    assert!(own.is_none(), "nothing to watch for on the credential's own host");
    own = LeakWatch::new(&Secrets::new(vec![secret()]), Some("other"));
    assert!(own.unwrap().pass(PLACEHOLDER.as_bytes(), true).is_err());
}

/// An entry whose placeholder is replaced in two headers (`x-api-key` first, where `add` puts it) and `?key=`.
fn several_places(add: bool) -> Credential {
    Credential {
        also_headers: vec!["authorization".into()],
        query: Some("key".into()),
        ..credential("x-api-key", HeaderForm::Bare, add)
    }
}

#[test]
fn every_header_of_the_entry_gets_the_secret_and_add_only_fills_a_request_without_one() {
    let mut bearer = vec![header("Authorization", &format!("Bearer {PLACEHOLDER}"))];
    assert!(inject(&mut bearer, &several_places(true), &secret()));
    assert_eq!(value_of(&bearer, "authorization"), format!("Bearer {SECRET}"));
    assert!(!bearer.iter().any(|h| h.is("x-api-key")), "a request that carried it elsewhere gets no second one");
    let mut fields = http::HeaderMap::new();
    fields.insert("authorization", http::HeaderValue::from_str(&format!("Bearer {PLACEHOLDER}")).unwrap());
    assert!(inject_h2(&mut fields, &several_places(true), &secret()));
    assert_eq!(fields["authorization"], format!("Bearer {SECRET}").as_str());
    assert!(!fields.contains_key("x-api-key"));
    let mut none = vec![header("accept", "*/*")];
    assert!(inject(&mut none, &several_places(true), &secret()));
    assert_eq!(value_of(&none, "x-api-key"), SECRET, "`add` writes the first header");
}

#[test]
fn the_query_parameter_of_the_entry_gets_the_secret_and_no_other() {
    let c = several_places(false);
    let sent = in_query(&format!("/v1/m?alt=sse&key={PLACEHOLDER}&k={PLACEHOLDER}"), &c, &secret());
    assert_eq!(sent.unwrap(), format!("/v1/m?alt=sse&key={SECRET}&k={PLACEHOLDER}"));
    let absolute = format!("http://gw.test:8080/v1?key={PLACEHOLDER}");
    assert_eq!(in_query(&absolute, &c, &secret()).unwrap(), format!("http://gw.test:8080/v1?key={SECRET}"));
    assert_eq!(in_query("/v1?key=mine", &c, &secret()), None, "a value without the placeholder is left alone");
    assert_eq!(in_query(&format!("/{PLACEHOLDER}"), &c, &secret()), None, "only the query");
}
