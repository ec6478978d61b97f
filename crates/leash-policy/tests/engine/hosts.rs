//! Hosts: every IP-literal spelling refused as its own case (only the exact listed dotted quad passes), names
//! canonicalised, odd authorities refused as bad hosts.

use crate::{blocklist, decide};

/// An allowlist naming one host and one dotted quad (192.0.2.7 = 3221225991 = 0xc0000207).
const ALLOW: &str = "network:\n  mode: allowlist\n  allowed_hosts: [example.com, 192.0.2.7]\n";

macro_rules! cases {
    ($policy:expr; $($name:ident: $url:expr => $want:expr;)*) => {
        $(
            #[test]
            fn $name() {
                assert_eq!(decide(&$policy, $url), $want, "{}", $url);
            }
        )*
    };
}

cases! { ALLOW;
    listed_dotted_quad_is_allowed_in_exactly_that_spelling: "http://192.0.2.7/" => "allow rule 192.0.2.7";
    listed_dotted_quad_with_port: "http://192.0.2.7:80/x" => "allow rule 192.0.2.7";
    unlisted_dotted_quad: "http://192.0.2.8/" => "block ip-literal";
    leading_zero_part: "http://192.0.2.07/" => "block ip-literal";
    octal_part: "http://0300.0.2.7/" => "block ip-literal";
    hex_part: "http://0xc0.0.2.7/" => "block ip-literal";
    uppercase_hex_part: "http://0XC0.0.2.7/" => "block ip-literal";
    whole_decimal: "http://3221225991/" => "block ip-literal";
    whole_hex: "http://0xc0000207/" => "block ip-literal";
    whole_octal: "http://030000001007/" => "block ip-literal";
    three_part_short_form: "http://192.0.519/" => "block ip-literal";
    two_part_short_form: "http://127.1/" => "block ip-literal";
    five_parts: "http://192.0.2.7.1/" => "block ip-literal";
    octet_over_255: "http://192.0.2.256/" => "block ip-literal";
    last_label_all_digits: "http://foo.123/" => "block ip-literal";
    last_label_hex: "http://1.2.3.0x4/" => "block ip-literal";
    name_with_hex_last_label: "http://foo.0x1f/" => "block ip-literal";
    bare_0x_label: "http://foo.0x/" => "block ip-literal";
    dotted_quad_with_trailing_dot: "http://192.0.2.7./" => "block ip-literal";
    ipv6_loopback: "http://[::1]/" => "block ip-literal";
    ipv6_with_port: "http://[::1]:80/" => "block ip-literal";
    ipv4_mapped_dotted: "http://[::ffff:192.0.2.7]/" => "block ip-literal";
    ipv4_mapped_hex: "http://[::ffff:c000:207]/" => "block ip-literal";
    ipv6_zone_id: "http://[fe80::1%25eth0]/" => "block ip-literal";
    ipv6_uppercase: "http://[FE80::1]/" => "block ip-literal";
    ipv_future: "http://[v1.fe]/" => "block ip-literal";
    decimal_with_port: "http://3221225991:80/" => "block ip-literal";
    name_is_allowed: "http://example.com/" => "allow rule example.com";
    uppercase_name_is_lowercased: "http://EXAMPLE.Com/" => "allow rule example.com";
    one_trailing_dot_is_dropped: "http://example.com./" => "allow rule example.com";
    two_trailing_dots_are_refused: "http://example.com../" => "error bad-host";
    cafe_is_a_name_not_a_literal: "http://example.cafe/" => "block not-allowed";
    subdomain_of_exact_entry_is_not_allowed: "http://www.example.com/" => "block not-allowed";
    percent_encoded_host: "http://ex%61mple.com/" => "error bad-host";
    userinfo: "http://user@example.com/" => "error bad-host";
    userinfo_with_password: "http://user:pw@example.com/" => "error bad-host";
    backslash_userinfo_trick: "http://example.com\\@evil.com/" => "error bad-host";
    non_ascii_host: "http://exämple.com/" => "error bad-host";
    underscore_in_host: "http://ex_ample.com/" => "error bad-host";
    empty_label: "http://a..example.com/" => "error bad-host";
    empty_host: "http:///x" => "error bad-host";
    empty_port: "http://example.com:/" => "error bad-host";
    port_zero: "http://example.com:0/" => "error bad-host";
    port_too_large: "http://example.com:65536/" => "error bad-host";
    signed_port: "http://example.com:+80/" => "error bad-host";
    bracketed_name: "http://[example.com]/" => "error bad-host";
    overlong_label: "http://aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.com/" => "error bad-host";
}

cases! { blocklist(&["arxiv.org"]);
    blocklist_refuses_every_dotted_quad: "http://192.0.2.7/" => "block ip-literal";
    blocklist_refuses_decimal: "http://3221225991/" => "block ip-literal";
    blocklist_refuses_ipv6: "http://[2001:db8::1]/" => "block ip-literal";
    blocklist_allows_other_names: "http://example.cafe/" => "allow default";
}

#[test]
fn canonical_text_of_hosts() {
    use leash_policy::{parse_host, Host};
    assert_eq!(parse_host("API.Example.COM.").unwrap().as_str(), "api.example.com");
    assert_eq!(parse_host("192.0.2.7").unwrap().as_str(), "192.0.2.7");
    assert_eq!(parse_host("0XC0.0.2.7").unwrap(), Host::IpLiteral("0xc0.0.2.7".into()));
    assert_eq!(parse_host("[::FFFF:1.2.3.4]").unwrap().to_string(), "[::ffff:1.2.3.4]");
    assert!(matches!(parse_host("::1").unwrap(), Host::IpLiteral(_)));
}
