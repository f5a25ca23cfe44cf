//! The HTTP/1.1 upgrade (RFC 6455 §4.1) from the client's side: complete a
//! request into an opening handshake, write its head, parse the server's
//! response head and check it.

use http::header::{self, HeaderValue};
use http::{StatusCode, Version};

use super::answer::{agreed, with_body};
use super::request::{Request, mark_sensitive};
use super::target::{Handshake, check};
use crate::handshake::HandshakeError;
use crate::handshake::{derive_accept_key, generate_key, is_valid_key};

/// Completes a request into a valid opening handshake (RFC 6455 §4.1).
///
/// The URI must be `ws://` or `wss://` with a host, or a bare path with a
/// `Host` header given (for streams you opened yourself); any other scheme
/// is [`HandshakeError::InvalidUrl`]. A port in the URI
/// must be a number from 1 to 65535, else the request is refused with
/// [`HandshakeError::InvalidUrl`] (never replaced by the default port); an
/// empty port (`ws://host:/`) means the default, as in RFC 3986. `Upgrade`,
/// `Connection` and `Sec-WebSocket-Version` are set; `Host` is derived from
/// the URI unless present; a fresh random `Sec-WebSocket-Key` is added unless
/// the request already carries a valid one. Everything else you set is kept;
/// the values of `Authorization`, `Cookie` and `Proxy-Authorization` are
/// marked sensitive ([`HeaderValue::set_sensitive`]), so that printing the
/// request does not show them.
///
/// ```
/// use wavesock::handshake::client::prepare_request;
/// use wavesock::{HandshakeError, IntoClientRequest};
///
/// let req = prepare_request("ws://example.com:8080/chat".into_client_request()?)?;
/// assert_eq!(req.headers()["host"], "example.com:8080");
/// assert_eq!(req.headers()["sec-websocket-version"], "13");
/// assert!(req.headers().contains_key("sec-websocket-key"));
///
/// let hand_built = wavesock::http::Request::get("ws://example.com:99999/").body(()).unwrap();
/// let bad_port = prepare_request(hand_built);
/// assert!(matches!(bad_port, Err(HandshakeError::InvalidUrl(_))));
/// # Ok::<(), wavesock::HandshakeError>(())
/// ```
pub fn prepare_request(mut request: Request) -> Result<Request, HandshakeError> {
    let host = check(&request, Handshake::Upgrade)?.authority;
    *request.version_mut() = Version::HTTP_11;
    let headers = request.headers_mut();
    if !headers.contains_key(header::HOST) {
        let host = host.ok_or_else(|| {
            HandshakeError::InvalidUrl("a request without a host needs a Host header".into())
        })?;
        let value = HeaderValue::from_str(&host)
            .map_err(|_| HandshakeError::InvalidUrl(format!("bad host {host:?}")))?;
        headers.insert(header::HOST, value);
    }
    mark_sensitive(headers);
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    headers.insert(
        header::SEC_WEBSOCKET_VERSION,
        HeaderValue::from_static("13"),
    );
    let mut keys = headers.get_all(header::SEC_WEBSOCKET_KEY).iter();
    match (keys.next(), keys.next()) {
        (None, _) => {
            let key =
                HeaderValue::from_str(&generate_key()).expect("base64 is a valid header value");
            headers.insert(header::SEC_WEBSOCKET_KEY, key);
        }
        (Some(k), None) if is_valid_key(k.as_bytes()) => {}
        _ => {
            return Err(HandshakeError::BadHeader {
                name: "Sec-WebSocket-Key",
                reason: "must be one base64-encoded 16-byte value",
            });
        }
    }
    Ok(request)
}

/// Writes a prepared request head in HTTP/1.1 form: the request target is
/// the URI's path and query (`/` when empty).
pub fn write_request(request: &Request, out: &mut Vec<u8>) {
    let target = request
        .uri()
        .path_and_query()
        .map(|pq| pq.as_str())
        .filter(|t| !t.is_empty())
        .unwrap_or("/");
    out.extend_from_slice(request.method().as_str().as_bytes());
    out.push(b' ');
    if !target.starts_with('/') {
        out.push(b'/');
    }
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in request.headers() {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// Parses an HTTP response head from the front of `buf`.
///
/// `Ok(None)` means the head is not complete yet; otherwise the response and
/// the length of its head (bytes after it are body or WebSocket frames).
pub fn parse_response(
    buf: &[u8],
    max_headers: usize,
) -> Result<Option<(http::Response<()>, usize)>, HandshakeError> {
    let mut headers = vec![httparse::EMPTY_HEADER; max_headers];
    let mut resp = httparse::Response::new(&mut headers);
    let Some(len) = crate::handshake::head_len(resp.parse(buf), max_headers)? else {
        return Ok(None);
    };
    let status = resp
        .code
        .and_then(|c| StatusCode::from_u16(c).ok())
        .ok_or_else(|| HandshakeError::Malformed("bad status code".into()))?;
    let mut builder = http::Response::builder()
        .status(status)
        .version(crate::handshake::http_version(resp.version));
    for h in resp.headers.iter() {
        builder = builder.header(h.name, h.value);
    }
    let response = builder
        .body(())
        .map_err(|e| HandshakeError::Malformed(e.to_string()))?;
    Ok(Some((response, len)))
}

/// Checks the server's response against the request it answers
/// (RFC 6455 §4.1): `101 Switching Protocols`, `Upgrade: websocket`,
/// `Connection: upgrade` (tokens case-insensitive, comma lists allowed), the
/// right `Sec-WebSocket-Accept`, no extension unless the request offered
/// some (the caller then checks the choice: see
/// `handshake::extensions::check_response` with the `deflate` feature), and
/// a subprotocol, if any, that the request offered (compared exactly).
///
/// Returns the chosen subprotocol. A status other than 101 is
/// [`HandshakeError::UnexpectedStatus`] without a body; the connecting
/// functions read a bounded body first.
pub fn check_response(
    request: &Request,
    response: &http::Response<()>,
) -> Result<Option<String>, HandshakeError> {
    if response.status() != StatusCode::SWITCHING_PROTOCOLS {
        return Err(HandshakeError::UnexpectedStatus {
            status: response.status(),
            response: Box::new(with_body(response, None)),
        });
    }
    let h = response.headers();
    crate::handshake::check_upgrade_headers(h)?;
    let key =
        request
            .headers()
            .get(header::SEC_WEBSOCKET_KEY)
            .ok_or(HandshakeError::BadHeader {
                name: "Sec-WebSocket-Key",
                reason: "missing from the request",
            })?;
    let expected = derive_accept_key(key.as_bytes());
    let mut accepts = h.get_all(header::SEC_WEBSOCKET_ACCEPT).iter();
    match (accepts.next(), accepts.next()) {
        (Some(a), None) if a.as_bytes() == expected.as_bytes() => {}
        _ => {
            return Err(HandshakeError::BadHeader {
                name: "Sec-WebSocket-Accept",
                reason: "does not match the key sent",
            });
        }
    }
    agreed(request.headers(), h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handshake::client::IntoClientRequest;

    fn request(extra: &[(&str, &str)]) -> Request {
        let mut b = Request::builder()
            .uri("ws://server.example.com/chat")
            .header("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==");
        for (n, v) in extra {
            b = b.header(*n, *v);
        }
        prepare_request(b.body(()).unwrap()).unwrap()
    }

    fn response(raw: &str) -> http::Response<()> {
        parse_response(raw.as_bytes(), 64).unwrap().unwrap().0
    }

    const GOOD: &str = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n";

    #[test]
    fn request_bytes_are_a_valid_handshake() {
        let req = request(&[("Origin", "http://example.com")]);
        let mut out = Vec::new();
        write_request(&req, &mut out);
        let text = String::from_utf8(out.clone()).unwrap();
        assert!(text.starts_with("GET /chat HTTP/1.1\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\n"));
        // Our own server-side checks accept it.
        let (parsed, len) = crate::handshake::server::parse_request(&out, 64)
            .unwrap()
            .unwrap();
        assert_eq!(len, out.len());
        assert_eq!(parsed.headers()["origin"], "http://example.com");
        assert_eq!(parsed.headers()["host"], "server.example.com");
        assert_eq!(
            crate::handshake::server::check_request(&parsed).unwrap(),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn keys_are_fresh_per_request() {
        let a = prepare_request("ws://h/".into_client_request().unwrap()).unwrap();
        let b = prepare_request("ws://h/".into_client_request().unwrap()).unwrap();
        let (ka, kb) = (
            &a.headers()["sec-websocket-key"],
            &b.headers()["sec-websocket-key"],
        );
        assert!(is_valid_key(ka.as_bytes()));
        assert_ne!(ka, kb);
    }

    #[test]
    fn a_given_key_is_sent_as_is() {
        let req = request(&[]);
        let keys: Vec<_> = req.headers().get_all("sec-websocket-key").iter().collect();
        assert_eq!(keys, ["dGhlIHNhbXBsZSBub25jZQ=="]);
        let mut out = Vec::new();
        write_request(&req, &mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n"),
            "{text}"
        );
    }

    #[test]
    fn a_given_key_that_is_not_16_bytes_of_base64_is_refused() {
        for bad in [
            "dGhlIHNhbXBsZSBub25jZQ",   // unpadded
            "dGhlIHNhbXBsZSBub25jZR==", // stray bits in the last digit
            "aGVsbG8=",                 // 5 bytes
            "dGhlIHNhbXBsZSBub25jZXM=", // 17 bytes
            "dGhlIHNhbXBsZSBub25jZQ==, dGhlIHNhbXBsZSBub25jZQ==",
        ] {
            let req = Request::builder()
                .uri("ws://h/")
                .header("Sec-WebSocket-Key", bad)
                .body(())
                .unwrap();
            assert!(
                matches!(
                    prepare_request(req),
                    Err(HandshakeError::BadHeader {
                        name: "Sec-WebSocket-Key",
                        ..
                    })
                ),
                "{bad}"
            );
        }
        // Two keys, each valid, are still one too many.
        let req = Request::builder()
            .uri("ws://h/")
            .header("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
            .header("Sec-WebSocket-Key", "AAAAAAAAAAAAAAAAAAAAAA==")
            .body(())
            .unwrap();
        assert!(prepare_request(req).is_err());
    }

    #[test]
    fn hosts_and_targets() {
        let cases = [
            ("ws://h", "h", "GET / HTTP/1.1\r\n"),
            ("ws://h:80/a?b=c", "h", "GET /a?b=c HTTP/1.1\r\n"),
            ("ws://h:9001/", "h:9001", "GET / HTTP/1.1\r\n"),
            ("wss://h:443/x", "h", "GET /x HTTP/1.1\r\n"),
            ("ws://user:pw@h:81/", "h:81", "GET / HTTP/1.1\r\n"),
            ("WS://[::1]:9001/", "[::1]:9001", "GET / HTTP/1.1\r\n"),
        ];
        for (url, host, line) in cases {
            let req = prepare_request(url.into_client_request().unwrap()).unwrap();
            assert_eq!(req.headers()["host"], host, "{url}");
            let mut out = Vec::new();
            write_request(&req, &mut out);
            assert!(out.starts_with(line.as_bytes()), "{url}");
        }
    }

    #[test]
    fn user_headers_are_kept_and_handshake_headers_forced() {
        let req = request(&[
            ("Authorization", "Bearer t"),
            ("Connection", "keep-alive"),
            ("Host", "custom:1"),
        ]);
        assert_eq!(req.headers()["authorization"], "Bearer t");
        assert_eq!(req.headers()["connection"], "Upgrade");
        assert_eq!(req.headers()["host"], "custom:1");
    }

    #[test]
    fn credential_headers_are_marked_sensitive() {
        // Given as a hand-built request, not through ClientRequestBuilder.
        let req = request(&[
            ("Authorization", "Bearer t"),
            ("Cookie", "a=1"),
            ("Cookie", "b=2"),
            ("Proxy-Authorization", "Basic x"),
            ("Origin", "http://h"),
        ]);
        for name in ["authorization", "cookie", "proxy-authorization"] {
            let values = req.headers().get_all(name);
            assert!(values.iter().all(|v| v.is_sensitive()), "{name}");
        }
        assert!(!req.headers()["origin"].is_sensitive());
        assert!(!req.headers()["sec-websocket-key"].is_sensitive());
        // The same over HTTP/2.
        let req = Request::builder()
            .uri("wss://h/")
            .header("Authorization", "Bearer t")
            .body(())
            .unwrap();
        let req = crate::handshake::client::prepare_extended_connect(req).unwrap();
        assert!(req.headers()["authorization"].is_sensitive());
    }

    #[test]
    fn rfc_response_is_accepted() {
        let req = request(&[]);
        assert_eq!(
            check_response(&req, &response(&format!("{GOOD}\r\n"))).unwrap(),
            None
        );
    }

    #[test]
    fn response_header_case_and_lists() {
        let req = request(&[]);
        let raw = "HTTP/1.1 101 Switching Protocols\r\nupgrade: WebSocket\r\nCONNECTION: keep-alive, UPGRADE\r\nsec-websocket-accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n";
        assert!(check_response(&req, &response(raw)).is_ok());
    }

    #[test]
    fn bad_responses_are_refused() {
        let req = request(&[]);
        let cases = [
            (
                "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n",
                "Upgrade",
            ),
            (
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n",
                "Connection",
            ),
            (
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
                "Sec-WebSocket-Accept",
            ),
            (
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: AAAAAAAAAAAAAAAAAAAAAAAAAAA=\r\n\r\n",
                "Sec-WebSocket-Accept",
            ),
            (
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n",
                "Sec-WebSocket-Accept",
            ),
            (
                &format!("{GOOD}Sec-WebSocket-Extensions: permessage-deflate\r\n\r\n"),
                "Sec-WebSocket-Extensions",
            ),
            (
                &format!("{GOOD}Sec-WebSocket-Protocol: chat\r\n\r\n"),
                "Sec-WebSocket-Protocol",
            ),
        ];
        for (raw, header) in cases {
            match check_response(&req, &response(raw)) {
                Err(HandshakeError::BadHeader { name, .. }) => assert_eq!(name, header, "{raw}"),
                other => panic!("{raw}: {other:?}"),
            }
        }
    }

    #[test]
    fn non_101_carries_status_and_headers() {
        let req = request(&[]);
        let raw = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-Why: no\r\n\r\n";
        match check_response(&req, &response(raw)) {
            Err(HandshakeError::UnexpectedStatus { status, response }) => {
                assert_eq!(status, StatusCode::OK);
                assert_eq!(response.headers()["x-why"], "no");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn subprotocol_must_be_one_of_those_offered() {
        let req = request(&[("Sec-WebSocket-Protocol", "chat, superchat")]);
        let ok = response(&format!("{GOOD}Sec-WebSocket-Protocol: superchat\r\n\r\n"));
        assert_eq!(
            check_response(&req, &ok).unwrap().as_deref(),
            Some("superchat")
        );
        for bad in ["other", "Chat", "chat, superchat", ""] {
            let resp = response(&format!("{GOOD}Sec-WebSocket-Protocol: {bad}\r\n\r\n"));
            assert!(check_response(&req, &resp).is_err(), "{bad}");
        }
        // Not choosing one is the server's right.
        assert_eq!(
            check_response(&req, &response(&format!("{GOOD}\r\n"))).unwrap(),
            None
        );
    }

    #[test]
    fn partial_response_asks_for_more() {
        let raw = format!("{GOOD}\r\n");
        for cut in 0..raw.len() {
            assert!(
                parse_response(&raw.as_bytes()[..cut], 64)
                    .unwrap()
                    .is_none(),
                "{cut}"
            );
        }
        let mut with_frame = raw.clone().into_bytes();
        with_frame.extend_from_slice(&[0x81, 0x00]);
        let (_, len) = parse_response(&with_frame, 64).unwrap().unwrap();
        assert_eq!(&with_frame[len..], &[0x81, 0x00]);
    }

    #[test]
    fn garbage_response_is_malformed() {
        assert!(matches!(
            parse_response(b"SSH-2.0-OpenSSH\r\n\r\n", 64),
            Err(HandshakeError::Malformed(_))
        ));
    }
}
