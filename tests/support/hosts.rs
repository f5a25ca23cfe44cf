//! The `Host` fields every server path is sent (issue 68 §2), with the
//! status each must answer: one field holding `uri-host [ ":" port ]` is
//! accepted, anything else is 400 (RFC 9112 §3.2). Shared by the
//! accepting matrix (tests/protocol/accepting.rs: the Stream's accept
//! functions, hyper, axum, the hub) and the engines' suite
//! (tests/hub/engines.rs: the hub on either poller, the Stream split or
//! not, behind faults), so that every server answers the same list alike.

/// (name, the request's `Host` lines, the status owed).
pub const HOST_CASES: &[(&str, &[&str], u16)] = &[
    ("host-name", &["Host: ws.example.com"], 101),
    ("host-name-port", &["Host: localhost:9001"], 101),
    ("host-ipv4-port", &["Host: 127.0.0.1:80"], 101),
    ("host-ipv6", &["Host: [::1]"], 101),
    ("host-ipv6-port", &["Host: [::1]:80"], 101),
    ("host-two", &["Host: localhost", "Host: evil.example"], 400),
    (
        "host-two-same",
        &["Host: localhost", "Host: localhost"],
        400,
    ),
    ("host-empty", &["Host:"], 400),
    ("host-blank", &["Host:    "], 400),
    ("host-space", &["Host: a b"], 400),
    ("host-tab", &["Host: a\tb"], 400),
    ("host-ctl", &["Host: a\x01b"], 400),
    ("host-bad-port", &["Host: localhost:80x"], 400),
    ("host-port-range", &["Host: localhost:65536"], 400),
    ("host-two-ports", &["Host: localhost:80:80"], 400),
    ("host-userinfo", &["Host: user@localhost"], 400),
    ("host-path", &["Host: localhost/chat"], 400),
    ("host-ipv6-bare", &["Host: ::1"], 400),
    ("host-ipv6-open", &["Host: [::1"], 400),
    ("host-ipv6-bad", &["Host: [::g]:80"], 400),
    ("host-non-ascii", &["Host: caf\u{e9}.example"], 400),
];

/// An upgrade request to `/chat` with `hosts` for its `Host` lines, valid
/// in every other way.
pub fn upgrade_with_hosts(hosts: &[&str]) -> Vec<u8> {
    let mut s = String::from("GET /chat HTTP/1.1\r\n");
    for h in hosts {
        s.push_str(h);
        s.push_str("\r\n");
    }
    s.push_str(
        "Upgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    );
    s.into_bytes()
}
