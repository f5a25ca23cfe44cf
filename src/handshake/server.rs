//! The server side of the handshake: parse and check the client's request,
//! write the response.

use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode, Version};

use crate::error::HandshakeError;
use crate::handshake::{derive_accept_key, headers_have_token, is_valid_key};

/// Parses an HTTP request head from the front of `buf`.
///
/// `Ok(None)` means the head is not complete yet; otherwise the request and
/// the length of its head (bytes after it belong to the WebSocket stream).
pub fn parse_request(
    buf: &[u8],
    max_headers: usize,
) -> Result<Option<(Request<()>, usize)>, HandshakeError> {
    let mut headers = vec![httparse::EMPTY_HEADER; max_headers];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(HandshakeError::Malformed(format!(
                "more than {max_headers} headers"
            )));
        }
        Err(e) => return Err(HandshakeError::Malformed(e.to_string())),
    };
    let method = req.method.unwrap_or_default();
    let mut builder = Request::builder()
        .method(
            Method::from_bytes(method.as_bytes())
                .map_err(|e| HandshakeError::Malformed(e.to_string()))?,
        )
        .uri(req.path.unwrap_or("/"))
        .version(match req.version {
            Some(1) => Version::HTTP_11,
            _ => Version::HTTP_10,
        });
    for h in req.headers.iter() {
        builder = builder.header(h.name, h.value);
    }
    let request = builder
        .body(())
        .map_err(|e| HandshakeError::Malformed(e.to_string()))?;
    Ok(Some((request, len)))
}

/// Checks a request against RFC 6455 §4.2.1 and returns the
/// `Sec-WebSocket-Accept` value to answer with.
pub fn check_request(req: &Request<()>) -> Result<String, HandshakeError> {
    if req.method() != Method::GET {
        return Err(HandshakeError::MethodNotAllowed(req.method().to_string()));
    }
    if req.version() < Version::HTTP_11 {
        return Err(HandshakeError::Malformed(
            "HTTP/1.1 or later is required".into(),
        ));
    }
    let h = req.headers();
    if !h.contains_key(header::HOST) {
        return Err(HandshakeError::BadHeader {
            name: "Host",
            reason: "missing",
        });
    }
    if !headers_have_token(h, header::UPGRADE, "websocket") {
        return Err(HandshakeError::BadHeader {
            name: "Upgrade",
            reason: "must list websocket",
        });
    }
    if !headers_have_token(h, header::CONNECTION, "upgrade") {
        return Err(HandshakeError::BadHeader {
            name: "Connection",
            reason: "must list upgrade",
        });
    }
    if h.get(header::SEC_WEBSOCKET_VERSION)
        .map(HeaderValue::as_bytes)
        != Some(b"13")
    {
        return Err(HandshakeError::UnsupportedVersion);
    }
    let mut keys = h.get_all(header::SEC_WEBSOCKET_KEY).iter();
    match (keys.next(), keys.next()) {
        (Some(key), None) if is_valid_key(key.as_bytes()) => Ok(derive_accept_key(key.as_bytes())),
        _ => Err(HandshakeError::BadHeader {
            name: "Sec-WebSocket-Key",
            reason: "must be one base64-encoded 16-byte value",
        }),
    }
}

/// The 101 response for an accepted request.
pub fn accept_response(accept_key: &str) -> Response<()> {
    let mut resp = Response::new(());
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(
        header::SEC_WEBSOCKET_ACCEPT,
        HeaderValue::from_str(accept_key).expect("base64 is a valid header value"),
    );
    resp
}

/// Writes a response head (and body, if any) in HTTP/1.1 form.
pub fn write_response<B>(resp: &Response<B>, body: &[u8], out: &mut Vec<u8>) {
    let status = resp.status();
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("Unknown").as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in resp.headers() {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if status != StatusCode::SWITCHING_PROTOCOLS
        && !resp.headers().contains_key(header::CONTENT_LENGTH)
    {
        out.extend_from_slice(format!("content-length: {}\r\n", body.len()).as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
}

/// The HTTP response that refuses a request that failed `err`.
pub fn error_response(err: &HandshakeError) -> Option<Response<Vec<u8>>> {
    let status = err.status()?;
    let mut resp = Response::new(format!("{err}\n").into_bytes());
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    if status == StatusCode::UPGRADE_REQUIRED {
        h.insert(
            header::SEC_WEBSOCKET_VERSION,
            HeaderValue::from_static("13"),
        );
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    }
    Some(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RFC_REQUEST: &[u8] = b"GET /chat HTTP/1.1\r\nHost: server.example.com\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nOrigin: http://example.com\r\nSec-WebSocket-Protocol: chat, superchat\r\nSec-WebSocket-Version: 13\r\n\r\n";

    fn parse(buf: &[u8]) -> Request<()> {
        parse_request(buf, 64).unwrap().unwrap().0
    }

    #[test]
    fn rfc_request_is_accepted() {
        let (req, len) = parse_request(RFC_REQUEST, 64).unwrap().unwrap();
        assert_eq!(len, RFC_REQUEST.len());
        assert_eq!(req.uri().path(), "/chat");
        assert_eq!(check_request(&req).unwrap(), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    }

    #[test]
    fn partial_request_asks_for_more() {
        for cut in 0..RFC_REQUEST.len() {
            assert!(
                parse_request(&RFC_REQUEST[..cut], 64).unwrap().is_none(),
                "cut {cut}"
            );
        }
    }

    #[test]
    fn bytes_after_the_head_are_not_consumed() {
        let mut buf = RFC_REQUEST.to_vec();
        buf.extend_from_slice(&[0x81, 0x80, 1, 2, 3, 4]);
        let (_, len) = parse_request(&buf, 64).unwrap().unwrap();
        assert_eq!(&buf[len..], &[0x81, 0x80, 1, 2, 3, 4]);
    }

    #[test]
    fn header_case_and_lists() {
        let req = b"GET / HTTP/1.1\r\nhost: x\r\nUPGRADE: WebSocket\r\nconnection: keep-alive, Upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nSEC-WEBSOCKET-VERSION: 13\r\n\r\n";
        assert!(check_request(&parse(req)).is_ok());
    }

    #[test]
    fn refusals_carry_the_right_status() {
        let cases: &[(&[u8], StatusCode)] = &[
            (b"POST / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", StatusCode::METHOD_NOT_ALLOWED),
            (b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 8\r\n\r\n", StatusCode::UPGRADE_REQUIRED),
            (b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: upgrade\r\nSec-WebSocket-Version: 13\r\n\r\n", StatusCode::BAD_REQUEST),
            (b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: upgrade\r\nSec-WebSocket-Key: short\r\nSec-WebSocket-Version: 13\r\n\r\n", StatusCode::BAD_REQUEST),
            (b"GET / HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", StatusCode::BAD_REQUEST),
            (b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: keep-alive\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", StatusCode::BAD_REQUEST),
            (b"GET / HTTP/1.0\r\nHost: x\r\nUpgrade: websocket\r\nConnection: upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", StatusCode::BAD_REQUEST),
        ];
        for (raw, status) in cases {
            let err = check_request(&parse(raw)).unwrap_err();
            assert_eq!(
                err.status(),
                Some(*status),
                "{}",
                String::from_utf8_lossy(raw)
            );
            let resp = error_response(&err).unwrap();
            assert_eq!(resp.status(), *status);
        }
    }

    #[test]
    fn garbage_is_malformed() {
        assert!(matches!(
            parse_request(b"\x00\x01\x02 nonsense\r\n\r\n", 64),
            Err(HandshakeError::Malformed(_))
        ));
    }

    #[test]
    fn too_many_headers_is_refused() {
        let mut req = b"GET / HTTP/1.1\r\n".to_vec();
        for i in 0..20 {
            req.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        req.extend_from_slice(b"\r\n");
        assert!(matches!(
            parse_request(&req, 10),
            Err(HandshakeError::Malformed(_))
        ));
    }

    #[test]
    fn response_is_well_formed() {
        let mut out = Vec::new();
        write_response(
            &accept_response("s3pPLMBiTxaQ9kYGzzhZRbK+xOo="),
            &[],
            &mut out,
        );
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("HTTP/1.1 101 Switching Protocols\r\n"));
        assert!(text.contains("sec-websocket-accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"));
        assert!(text.ends_with("\r\n\r\n"));
    }
}
