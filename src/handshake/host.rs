//! The `Host` field's syntax (RFC 9110 §7.2): `uri-host [ ":" port ]`,
//! with `uri-host` RFC 3986's `host` (§3.2.2) and `port` its digits
//! (§3.2.3). A server answers a request whose `Host` is not that with 400
//! (RFC 9112 §3.2); checking only that the field is there let `Host: a b`
//! through to a 101.

use std::net::Ipv6Addr;

/// Whether `value` is a `Host` field value a WebSocket request may carry.
///
/// - the host is an IP literal in brackets (`[::1]`, or RFC 3986's
///   `IPvFuture`, `[v1.x]`), or a registered name: unreserved characters,
///   sub-delimiters and percent-escapes, which covers IPv4 addresses and
///   DNS names;
/// - the host is never empty: an empty `Host` is what a client sends for a
///   target without an authority (RFC 9112 §3.2), and a `ws` URI always
///   has one (RFC 6455 §3; RFC 9110 §4.2.1 calls an `http` URI with an
///   empty host invalid);
/// - the port, if there is a `:`, is digits naming a TCP port (0 to
///   65535). RFC 3986 lets the digits be absent, so `host:` passes, as it
///   does in `http::Uri`; `host:80x` and `host:65536` do not.
///
/// Whitespace, control characters and bytes outside ASCII are never part
/// of a valid value.
pub(crate) fn is_valid_host(value: &[u8]) -> bool {
    let (host, port) = match value {
        [b'[', rest @ ..] => {
            let Some(end) = rest.iter().position(|&b| b == b']') else {
                return false;
            };
            if !is_ip_literal(&rest[..end]) {
                return false;
            }
            match &rest[end + 1..] {
                [] => return true,
                [b':', port @ ..] => return is_port(port),
                _ => return false,
            }
        }
        // A registered name has no `:`: the first one starts the port.
        _ => match value.iter().position(|&b| b == b':') {
            Some(colon) => (&value[..colon], Some(&value[colon + 1..])),
            None => (value, None),
        },
    };
    is_reg_name(host) && port.is_none_or(is_port)
}

/// RFC 3986's `reg-name`, not empty: `*( unreserved / pct-encoded /
/// sub-delims )`.
fn is_reg_name(name: &[u8]) -> bool {
    if name.is_empty() {
        return false;
    }
    let mut i = 0;
    while i < name.len() {
        match name[i] {
            b'%' => {
                let escape = name.get(i + 1..i + 3);
                if !escape.is_some_and(|e| e.iter().all(u8::is_ascii_hexdigit)) {
                    return false;
                }
                i += 3;
            }
            b if is_unreserved(b) || is_sub_delim(b) => i += 1,
            _ => return false,
        }
    }
    true
}

/// What is inside the brackets of RFC 3986's `IP-literal`: an
/// `IPv6address`, or an `IPvFuture` (`"v" 1*HEXDIG "." 1*( unreserved /
/// sub-delims / ":" )`). std's parser reads exactly RFC 4291's text forms,
/// the ones `IPv6address` describes.
fn is_ip_literal(inner: &[u8]) -> bool {
    match inner {
        [b'v' | b'V', rest @ ..] => {
            let Some(dot) = rest.iter().position(|&b| b == b'.') else {
                return false;
            };
            let (version, tail) = (&rest[..dot], &rest[dot + 1..]);
            !version.is_empty()
                && version.iter().all(u8::is_ascii_hexdigit)
                && !tail.is_empty()
                && tail
                    .iter()
                    .all(|&b| is_unreserved(b) || is_sub_delim(b) || b == b':')
        }
        _ => std::str::from_utf8(inner).is_ok_and(|s| s.parse::<Ipv6Addr>().is_ok()),
    }
}

/// RFC 3986's `port`, held to a TCP port: `*DIGIT`, at most 65535.
fn is_port(port: &[u8]) -> bool {
    port.iter().all(u8::is_ascii_digit)
        && (port.is_empty() || std::str::from_utf8(port).is_ok_and(|p| p.parse::<u16>().is_ok()))
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn is_sub_delim(b: u8) -> bool {
    matches!(
        b,
        b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'='
    )
}

#[cfg(test)]
mod tests {
    use super::is_valid_host;

    #[test]
    fn hosts_that_are_uri_host_and_port_pass() {
        for host in [
            "example.com",
            "example.com:80",
            "example.com:0",
            "example.com:65535",
            "example.com:08080",
            "example.com:",
            "EXAMPLE.com.",
            "localhost",
            "a",
            "127.0.0.1",
            "127.0.0.1:9001",
            "999.1.1.1", // no IPv4 address, but a registered name
            "[::1]",
            "[::1]:80",
            "[2001:db8::7]:443",
            "[::ffff:192.0.2.1]",
            "[fe80::1:2:3:4]",
            "[v1.fe80::a+en1]",
            "[V7.x:y]",
            "xn--bcher-kva.example",
            "under_score.example",
            "caf%C3%A9.example",
            "sub!$&'()*+,;=delims~",
        ] {
            assert!(is_valid_host(host.as_bytes()), "{host:?} refused");
        }
    }

    #[test]
    fn hosts_that_are_not_are_refused() {
        for host in [
            "",
            ":80",
            "a b",
            " example.com",
            "example.com ",
            "exa\tmple.com",
            "exa\x01mple.com",
            "exa\x7fmple.com",
            "ex\u{e4}mple.com",
            "example.com:80x",
            "example.com:-1",
            "example.com:65536",
            "example.com:99999999999999999999",
            "example.com:80:80",
            "example.com: 80",
            "user@example.com",
            "example.com/path",
            "example.com?q",
            "example.com#f",
            "exa\"mple.com",
            "exa<mple>.com",
            "%",
            "%4",
            "%zz.example",
            "::1",
            "[::1",
            "::1]",
            "[]",
            "[::1]x",
            "[::1]:http",
            "[::1]:65536",
            "[::g]",
            "[1:2:3:4:5:6:7:8:9]",
            "[127.0.0.1]",
            "[fe80::1%25eth0]", // RFC 6874 zone IDs are not RFC 3986's
            "[v.x]",
            "[v1.]",
            "[v1x]",
            "[vg.x]",
            "[v1.a b]",
            "[[::1]]",
        ] {
            assert!(!is_valid_host(host.as_bytes()), "{host:?} accepted");
        }
    }
}
