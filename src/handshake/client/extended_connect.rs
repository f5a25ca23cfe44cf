//! RFC 8441's extended CONNECT: a WebSocket over an HTTP/2 stream, from the
//! client's side. The request and the check of its answer; the HTTP/2
//! library carries them.

use http::header::{self, HeaderValue};
use http::{Method, Version};

use super::answer::{agreed, with_body};
use super::request::{Request, mark_sensitive};
use super::target::{Handshake, check, shown};
use crate::handshake::HandshakeError;

/// Turns a WebSocket request (a `ws://` or `wss://` URL, as
/// [`IntoClientRequest`](super::IntoClientRequest) builds it) into an HTTP/2 extended CONNECT request
/// (RFC 8441 §4): method `CONNECT`, version HTTP/2, an `http`/`https` URI
/// whose authority and path become `:authority` and `:path`, and
/// `Sec-WebSocket-Version: 13`. The headers HTTP/2 forbids or has no use for
/// (`Host`, `Upgrade`, `Connection`, `Sec-WebSocket-Key`) are removed; the
/// rest (subprotocols, cookies, `Origin`) are kept, with the values of
/// `Authorization`, `Cookie` and `Proxy-Authorization` marked sensitive
/// (HPACK never indexes them). The `:protocol` pseudo-header is the HTTP/2
/// library's to set.
///
/// ```
/// use wavesock::IntoClientRequest;
/// use wavesock::handshake::client::prepare_extended_connect;
///
/// let req = prepare_extended_connect("wss://example.com/chat?room=1".into_client_request()?)?;
/// assert_eq!(req.method(), wavesock::http::Method::CONNECT);
/// assert_eq!(req.uri(), "https://example.com/chat?room=1");
/// assert_eq!(req.headers()["sec-websocket-version"], "13");
/// assert!(!req.headers().contains_key("sec-websocket-key"));
/// # Ok::<(), wavesock::HandshakeError>(())
/// ```
pub fn prepare_extended_connect(mut request: Request) -> Result<Request, HandshakeError> {
    let target = check(&request, Handshake::ExtendedConnect)?;
    let (Some(secure), Some(authority)) = (target.secure, target.authority) else {
        unreachable!("extended CONNECT takes only ws:// and wss:// URLs, which have a host");
    };
    let uri = request.uri();
    let path = uri
        .path_and_query()
        .map(|pq| pq.as_str())
        .filter(|p| !p.is_empty())
        .unwrap_or("/");
    let scheme = if secure { "https" } else { "http" };
    let new_uri: http::Uri = format!("{scheme}://{authority}{path}")
        .parse()
        .map_err(|e| HandshakeError::InvalidUrl(format!("{}: {e}", shown(uri))))?;
    *request.uri_mut() = new_uri;
    *request.method_mut() = Method::CONNECT;
    *request.version_mut() = Version::HTTP_2;
    let headers = request.headers_mut();
    for name in [
        header::HOST,
        header::UPGRADE,
        header::CONNECTION,
        header::SEC_WEBSOCKET_KEY,
    ] {
        headers.remove(name);
    }
    mark_sensitive(headers);
    headers.insert(
        header::SEC_WEBSOCKET_VERSION,
        HeaderValue::from_static("13"),
    );
    Ok(request)
}

/// Checks the server's answer to an extended CONNECT request (RFC 8441
/// §5): a 2xx status, no extension unless the request offered some, and a
/// subprotocol, if any, that the request offered. Returns the chosen
/// subprotocol.
pub fn check_extended_connect_response(
    request: &Request,
    response: &http::Response<()>,
) -> Result<Option<String>, HandshakeError> {
    if !response.status().is_success() {
        return Err(HandshakeError::UnexpectedStatus {
            status: response.status(),
            response: Box::new(with_body(response, None)),
        });
    }
    let h = response.headers();
    agreed(request.headers(), h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handshake::client::prepare_request;

    #[test]
    fn extended_connect_request_from_websocket_urls() {
        let req = Request::get("ws://example.com:8080/chat?x=1")
            .header("sec-websocket-protocol", "chat")
            .header("origin", "http://example.com")
            .body(())
            .unwrap();
        let req = prepare_extended_connect(prepare_request(req).unwrap()).unwrap();
        assert_eq!(req.method(), Method::CONNECT);
        assert_eq!(req.version(), Version::HTTP_2);
        assert_eq!(req.uri(), "http://example.com:8080/chat?x=1");
        let h = req.headers();
        for gone in ["host", "upgrade", "connection", "sec-websocket-key"] {
            assert!(!h.contains_key(gone), "{gone}");
        }
        assert_eq!(h["sec-websocket-version"], "13");
        assert_eq!(h["sec-websocket-protocol"], "chat");
        assert_eq!(h["origin"], "http://example.com");
        // Default ports are left out of :authority; an empty path is "/".
        let req = prepare_extended_connect(Request::get("wss://example.com:443").body(()).unwrap())
            .unwrap();
        assert_eq!(req.uri(), "https://example.com/");
        for bad in ["http://example.com/", "/chat"] {
            let req = Request::get(bad).body(()).unwrap();
            assert!(
                matches!(
                    prepare_extended_connect(req),
                    Err(HandshakeError::InvalidUrl(_))
                ),
                "{bad}"
            );
        }
        let post = Request::post("ws://example.com/").body(()).unwrap();
        assert!(matches!(
            prepare_extended_connect(post),
            Err(HandshakeError::MethodNotAllowed(_))
        ));
    }

    #[test]
    fn extended_connect_responses_are_checked() {
        let req = prepare_extended_connect(
            Request::get("wss://example.com/")
                .header("sec-websocket-protocol", "a, b")
                .body(())
                .unwrap(),
        )
        .unwrap();
        let answer = |status: u16, headers: &[(&str, &str)]| {
            let mut b = http::Response::builder().status(status);
            for (n, v) in headers {
                b = b.header(*n, *v);
            }
            b.body(()).unwrap()
        };
        assert_eq!(
            check_extended_connect_response(&req, &answer(200, &[])).unwrap(),
            None
        );
        assert_eq!(
            check_extended_connect_response(&req, &answer(200, &[("sec-websocket-protocol", "b")]))
                .unwrap()
                .as_deref(),
            Some("b")
        );
        assert!(matches!(
            check_extended_connect_response(&req, &answer(101, &[])),
            Err(HandshakeError::UnexpectedStatus { status, .. }) if status == 101
        ));
        assert!(matches!(
            check_extended_connect_response(&req, &answer(404, &[])),
            Err(HandshakeError::UnexpectedStatus { status, .. }) if status == 404
        ));
        assert!(matches!(
            check_extended_connect_response(&req, &answer(200, &[("sec-websocket-protocol", "c")])),
            Err(HandshakeError::BadHeader {
                name: "Sec-WebSocket-Protocol",
                ..
            })
        ));
        assert!(matches!(
            check_extended_connect_response(
                &req,
                &answer(200, &[("sec-websocket-extensions", "permessage-deflate")])
            ),
            Err(HandshakeError::BadHeader {
                name: "Sec-WebSocket-Extensions",
                ..
            })
        ));
    }
}
