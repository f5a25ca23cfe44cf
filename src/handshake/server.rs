//! The server side of the handshake: parse and check the client's request,
//! write the response.
//!
//! [`Request`], [`Response`] and [`ErrorResponse`] name the types a
//! [`Callback`] takes and returns, as `tungstenite::handshake::server` does,
//! so a callback written for tokio-tungstenite's `accept_hdr_async` compiles
//! unchanged against [`accept_hdr_async`](crate::accept_hdr_async).

// Callbacks return `Result<Response<()>, Response<Option<String>>>`, the
// shape users know from tokio-tungstenite; a refusal is rare and cheap next
// to the I/O around it, so its size does not matter.
#![allow(clippy::result_large_err)]

use http::header::{self, HeaderValue};
use http::{Method, StatusCode};

use crate::handshake::HandshakeError;
pub use crate::handshake::accepting::{
    Accepting, accept_response, check_extended_connect, check_request, extended_connect_response,
};
use crate::handshake::list_values;

/// The client's upgrade request as a [`Callback`] sees it: method, URI,
/// version and headers; no body. The same type as tungstenite's
/// `handshake::server::Request`.
///
/// A callback in tokio-tungstenite's style, run over an in-memory stream:
///
/// ```
/// use wavesock::handshake::server::{ErrorResponse, Request, Response};
///
/// fn callback(req: &Request, mut resp: Response) -> Result<Response, ErrorResponse> {
///     if req.uri().path() != "/chat" {
///         let mut refusal = ErrorResponse::new(Some("no such room".into()));
///         *refusal.status_mut() = wavesock::http::StatusCode::NOT_FOUND;
///         return Err(refusal);
///     }
///     resp.headers_mut().insert("x-room", "chat".parse().unwrap());
///     Ok(resp)
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> wavesock::Result<()> {
/// let (client_io, server_io) = tokio::io::duplex(4096);
/// let (server, client) = tokio::join!(
///     wavesock::accept_hdr_async(server_io, callback),
///     wavesock::client_async("ws://localhost/chat", client_io),
/// );
/// let (_ws, response) = client?;
/// assert_eq!(response.headers()["x-room"], "chat");
/// server?;
/// # Ok(()) }
/// ```
pub type Request = http::Request<()>;

/// The `101 Switching Protocols` response a [`Callback`] may add headers
/// to; no body. The same type as tungstenite's
/// `handshake::server::Response`. (The client's view of the answer is
/// [`handshake::client::Response`](crate::handshake::client::Response).)
pub type Response = http::Response<()>;

/// The response a callback refuses a request with: status, headers and an
/// optional body, written to the client as they are. The same type as
/// tungstenite's `handshake::server::ErrorResponse`.
pub type ErrorResponse = http::Response<Option<String>>;

/// Looks at the client's request before it is accepted: may add headers to
/// the `101` response (cookies, a chosen subprotocol), or refuse with an
/// [`ErrorResponse`] of its own.
///
/// Implemented for closures
/// `FnOnce(&Request, Response) -> Result<Response, ErrorResponse>` (with
/// the aliases of this module: `http::Request<()>` and `http::Response<()>`).
/// The response handed in already has status `101` and the handshake
/// headers; whatever the callback returns, the status and the `Upgrade`,
/// `Connection` and `Sec-WebSocket-Accept` headers are kept as RFC 6455
/// requires. Refuse with an error status (4xx or 5xx).
///
/// ```
/// use wavesock::http::{Request, Response, StatusCode};
/// use wavesock::handshake::server::{Callback, ErrorResponse};
///
/// let check = |req: &Request<()>, resp: Response<()>| -> Result<Response<()>, ErrorResponse> {
///     if req.uri().path() != "/chat" {
///         let mut refusal = Response::new(Some("no such room".into()));
///         *refusal.status_mut() = StatusCode::NOT_FOUND;
///         return Err(refusal);
///     }
///     Ok(resp)
/// };
/// let req = Request::get("/lobby").body(()).unwrap();
/// let refused = check.on_request(&req, Response::new(())).unwrap_err();
/// assert_eq!(refused.status(), StatusCode::NOT_FOUND);
/// ```
pub trait Callback {
    /// Called once with the parsed, checked request and the response about
    /// to be sent.
    fn on_request(self, request: &Request, response: Response) -> Result<Response, ErrorResponse>;
}

impl<F> Callback for F
where
    F: FnOnce(&Request, Response) -> Result<Response, ErrorResponse>,
{
    fn on_request(self, request: &Request, response: Response) -> Result<Response, ErrorResponse> {
        self(request, response)
    }
}

/// Accepts every valid request unchanged.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoCallback;

impl Callback for NoCallback {
    fn on_request(self, _: &Request, response: Response) -> Result<Response, ErrorResponse> {
        Ok(response)
    }
}

/// An asynchronous [`Callback`], for checks that wait on something (a token
/// looked up in a database). It owns the request, so the future it returns
/// borrows nothing.
///
/// Implemented for closures `FnOnce(Request<()>, Response<()>) -> F` where `F`
/// is a future of `Result<Response<()>, ErrorResponse>`, such as
/// `|req, resp| async move { ... }`. The same rules as for [`Callback`]
/// apply to the response.
pub trait AsyncCallback {
    /// The future [`on_request`](Self::on_request) returns.
    type Future: Future<Output = Result<Response, ErrorResponse>>;

    /// Called once with the parsed, checked request and the response about
    /// to be sent.
    fn on_request(self, request: Request, response: Response) -> Self::Future;
}

impl<F, Fut> AsyncCallback for F
where
    F: FnOnce(Request, Response) -> Fut,
    Fut: Future<Output = Result<Response, ErrorResponse>>,
{
    type Future = Fut;

    fn on_request(self, request: Request, response: Response) -> Fut {
        self(request, response)
    }
}

/// The subprotocol to speak: the first entry of `supported` (the server's
/// list, most preferred first) that the client offered in
/// `Sec-WebSocket-Protocol`. The server's preference order wins; the order
/// of the client's list does not matter. Names are compared exactly (they
/// are case-sensitive tokens).
///
/// ```
/// use wavesock::handshake::server::select_subprotocol;
///
/// let req = wavesock::http::Request::get("/")
///     .header("Sec-WebSocket-Protocol", "chat.v1, chat.v2")
///     .body(())
///     .unwrap();
/// assert_eq!(select_subprotocol(&req, &["chat.v2", "chat.v1"]), Some("chat.v2"));
/// assert_eq!(select_subprotocol(&req, &["mqtt"]), None);
/// ```
pub fn select_subprotocol<'a, B>(
    request: &http::Request<B>,
    supported: &[&'a str],
) -> Option<&'a str> {
    supported.iter().copied().find(|s| {
        list_values(request.headers(), header::SEC_WEBSOCKET_PROTOCOL).any(|offered| offered == *s)
    })
}

/// A [`Callback`] that negotiates the subprotocol with
/// [`select_subprotocol`] and names the choice in the response.
///
/// When nothing matches, the connection goes ahead without a subprotocol,
/// unless [`required`](Self::required) is set: then the request is refused
/// with `400 Bad Request`. Use [`apply`](Self::apply) from inside a callback
/// of your own to combine it with other checks.
///
/// ```no_run
/// use wavesock::handshake::server::Subprotocols;
///
/// # async fn run(tcp: tokio::net::TcpStream) -> wavesock::Result<()> {
/// let protocols = Subprotocols::new(["chat.v2", "chat.v1"]).required(true);
/// let ws = wavesock::accept_hdr_async(tcp, protocols).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
pub struct Subprotocols {
    supported: Vec<String>,
    required: bool,
}

impl Subprotocols {
    /// The subprotocols the server speaks, most preferred first.
    pub fn new<I, P>(supported: I) -> Self
    where
        I: IntoIterator<Item = P>,
        P: Into<String>,
    {
        Subprotocols {
            supported: supported.into_iter().map(Into::into).collect(),
            required: false,
        }
    }

    /// Whether a client that offers none of them is refused (default: no).
    pub fn required(mut self, required: bool) -> Self {
        self.required = required;
        self
    }

    /// Negotiates for `request`: sets `Sec-WebSocket-Protocol` on `response`
    /// to the chosen subprotocol, or refuses if one is required and none
    /// matches.
    pub fn apply(
        &self,
        request: &Request,
        mut response: Response,
    ) -> Result<Response, ErrorResponse> {
        let supported: Vec<&str> = self.supported.iter().map(String::as_str).collect();
        match select_subprotocol(request, &supported) {
            Some(p) => match HeaderValue::from_str(p) {
                Ok(v) => {
                    response
                        .headers_mut()
                        .insert(header::SEC_WEBSOCKET_PROTOCOL, v);
                    Ok(response)
                }
                Err(_) => Err(refusal(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "bad subprotocol name",
                )),
            },
            None if self.required => Err(refusal(
                StatusCode::BAD_REQUEST,
                "none of the offered subprotocols is supported",
            )),
            None => Ok(response),
        }
    }
}

impl Callback for Subprotocols {
    fn on_request(self, request: &Request, response: Response) -> Result<Response, ErrorResponse> {
        self.apply(request, response)
    }
}

impl Callback for &Subprotocols {
    fn on_request(self, request: &Request, response: Response) -> Result<Response, ErrorResponse> {
        self.apply(request, response)
    }
}

fn refusal(status: StatusCode, why: &str) -> ErrorResponse {
    let mut resp = http::Response::new(Some(format!("{why}\n")));
    *resp.status_mut() = status;
    resp
}

/// Parses an HTTP request head from the front of `buf`.
///
/// `Ok(None)` means the head is not complete yet; otherwise the request and
/// the length of its head (bytes after it belong to the WebSocket stream).
pub fn parse_request(
    buf: &[u8],
    max_headers: usize,
) -> Result<Option<(Request, usize)>, HandshakeError> {
    let mut headers = vec![httparse::EMPTY_HEADER; max_headers];
    let mut req = httparse::Request::new(&mut headers);
    let Some(len) = crate::handshake::head_len(req.parse(buf), max_headers)? else {
        return Ok(None);
    };
    let method = req.method.unwrap_or_default();
    let mut builder = Request::builder()
        .method(
            Method::from_bytes(method.as_bytes())
                .map_err(|e| HandshakeError::Malformed(e.to_string()))?,
        )
        .uri(req.path.unwrap_or("/"))
        .version(crate::handshake::http_version(req.version));
    for h in req.headers.iter() {
        builder = builder.header(h.name, h.value);
    }
    let request = builder
        .body(())
        .map_err(|e| HandshakeError::Malformed(e.to_string()))?;
    Ok(Some((request, len)))
}

/// Writes a response head (and body, if any) in HTTP/1.1 form.
pub fn write_response<B>(resp: &http::Response<B>, body: &[u8], out: &mut Vec<u8>) {
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

/// The HTTP response that refuses a request that failed `err`: its
/// [`status`](HandshakeError::status), a plain-text body saying why, and
/// the headers the status calls for: `Allow: GET` with `405 Method Not
/// Allowed` (RFC 9110 §15.5.6), `Sec-WebSocket-Version: 13` with `426
/// Upgrade Required` (RFC 6455 §4.4). `None` for failures that are not the
/// request's fault.
///
/// ```
/// use wavesock::HandshakeError;
/// use wavesock::handshake::server::error_response;
///
/// let resp = error_response(&HandshakeError::MethodNotAllowed("POST".into())).unwrap();
/// assert_eq!(resp.status(), wavesock::http::StatusCode::METHOD_NOT_ALLOWED);
/// assert_eq!(resp.headers()["allow"], "GET");
/// assert!(error_response(&HandshakeError::Timeout).is_none());
/// ```
pub fn error_response(err: &HandshakeError) -> Option<http::Response<Vec<u8>>> {
    let status = err.status()?;
    let mut resp = http::Response::new(format!("{err}\n").into_bytes());
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    if status == StatusCode::METHOD_NOT_ALLOWED {
        // RFC 9110 §15.5.6: a 405 lists the methods the resource supports.
        h.insert(header::ALLOW, HeaderValue::from_static("GET"));
    }
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
    use http::Version;

    const RFC_REQUEST: &[u8] = b"GET /chat HTTP/1.1\r\nHost: server.example.com\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nOrigin: http://example.com\r\nSec-WebSocket-Protocol: chat, superchat\r\nSec-WebSocket-Version: 13\r\n\r\n";

    fn parse(buf: &[u8]) -> Request {
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
    fn aliases_are_the_tungstenite_shapes() {
        // Each line fails to compile if an alias names another type.
        let _: fn(Request) -> http::Request<()> = |r| r;
        let _: fn(Response) -> http::Response<()> = |r| r;
        let _: fn(ErrorResponse) -> http::Response<Option<String>> = |r| r;
        let _: fn(crate::handshake::client::Request) -> http::Request<()> = |r| r;
        let _: fn(crate::handshake::client::Response) -> http::Response<Option<Vec<u8>>> = |r| r;
    }

    #[test]
    fn method_not_allowed_names_get_in_allow() {
        let post = parse(b"POST / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n");
        let resp = error_response(&check_request(&post).unwrap_err()).unwrap();
        assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(resp.headers()["allow"], "GET");
        // Only 405 carries it.
        let bad = error_response(&HandshakeError::UnsupportedVersion).unwrap();
        assert!(!bad.headers().contains_key(header::ALLOW));
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
    fn subprotocol_choice_follows_server_preference() {
        let req = parse(b"GET / HTTP/1.1\r\nHost: x\r\nSec-WebSocket-Protocol: a, b\r\nSec-WebSocket-Protocol: c\r\n\r\n");
        assert_eq!(select_subprotocol(&req, &["c", "b", "a"]), Some("c"));
        assert_eq!(select_subprotocol(&req, &["x", "b"]), Some("b"));
        assert_eq!(select_subprotocol(&req, &["A", "x"]), None);
        assert_eq!(select_subprotocol(&req, &[]), None);
        let none = parse(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(select_subprotocol(&none, &["a"]), None);
    }

    #[test]
    fn subprotocols_callback() {
        let req = parse(b"GET / HTTP/1.1\r\nHost: x\r\nSec-WebSocket-Protocol: v1, v2\r\n\r\n");
        let resp = Subprotocols::new(["v2", "v1"])
            .on_request(&req, Response::new(()))
            .unwrap();
        assert_eq!(resp.headers()["sec-websocket-protocol"], "v2");
        // No match: fine unless required.
        let resp = Subprotocols::new(["v3"])
            .on_request(&req, Response::new(()))
            .unwrap();
        assert!(!resp.headers().contains_key("sec-websocket-protocol"));
        let err = Subprotocols::new(["v3"])
            .required(true)
            .on_request(&req, Response::new(()))
            .unwrap_err();
        assert_eq!(err.status(), StatusCode::BAD_REQUEST);
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

    fn extended_connect(uri: &str, version: Option<&str>) -> http::Request<()> {
        let mut b = http::Request::connect(uri).version(Version::HTTP_2);
        if let Some(v) = version {
            b = b.header("sec-websocket-version", v);
        }
        b.body(()).unwrap()
    }

    #[test]
    fn extended_connect_rules_of_rfc_8441() {
        let good = extended_connect("https://example.com/chat", Some("13"));
        assert!(check_extended_connect(&good, Some("websocket")).is_ok());
        // The token is case-insensitive, as Upgrade's is.
        assert!(check_extended_connect(&good, Some("WebSocket")).is_ok());
        for (protocol, reason_has) in [(None, "missing"), (Some("h3"), "websocket")] {
            match check_extended_connect(&good, protocol) {
                Err(HandshakeError::BadHeader { name, reason }) => {
                    assert_eq!(name, ":protocol");
                    assert!(reason.contains(reason_has), "{reason}");
                }
                other => panic!("{protocol:?}: {other:?}"),
            }
        }
        let get = Request::get("https://example.com/chat").body(()).unwrap();
        assert!(matches!(
            check_extended_connect(&get, Some("websocket")),
            Err(HandshakeError::MethodNotAllowed(m)) if m == "GET"
        ));
        let no_authority = extended_connect("/chat", Some("13"));
        assert!(matches!(
            check_extended_connect(&no_authority, Some("websocket")),
            Err(HandshakeError::BadHeader {
                name: ":authority",
                ..
            })
        ));
        let no_path = extended_connect("example.com:443", Some("13"));
        assert!(matches!(
            check_extended_connect(&no_path, Some("websocket")),
            Err(HandshakeError::BadHeader { name: ":path", .. })
        ));
        for version in [None, Some("8")] {
            let req = extended_connect("https://example.com/chat", version);
            assert!(matches!(
                check_extended_connect(&req, Some("websocket")),
                Err(HandshakeError::UnsupportedVersion)
            ));
        }
    }

    #[test]
    fn extended_connect_is_accepted_with_200_and_no_http1_headers() {
        let resp = extended_connect_response();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(resp.version(), Version::HTTP_2);
        assert!(resp.headers().is_empty());
    }
}
