//! The client side of the handshake: build the upgrade request, parse and
//! check the server's response. No I/O here; [`client_async`] and
//! [`connect_async`] drive these functions over a stream.
//!
//! [`client_async`]: crate::client_async
//! [`connect_async`]: crate::connect_async

use http::header::{self, HeaderValue};
use http::{HeaderMap, Method, StatusCode, Uri, Version};

use crate::handshake::HandshakeError;
use crate::handshake::{derive_accept_key, generate_key, is_valid_key, list_values};

/// The request a client sends: method `GET`, the URL, headers; no body.
/// What [`IntoClientRequest`] produces. The same type as tungstenite's
/// `handshake::client::Request`.
///
/// ```
/// use wavesock::handshake::client::Request;
///
/// let request: Request = Request::get("ws://localhost:9001/chat")
///     .header("Origin", "http://localhost")
///     .body(())
///     .unwrap();
/// assert_eq!(request.uri().port_u16(), Some(9001));
/// ```
pub type Request = http::Request<()>;

/// The server's answer to a successful handshake, as
/// [`connect_async`](crate::connect_async) and
/// [`client_async`](crate::client_async) return it: status `101`, its
/// headers, no body (`None`). The same type as tungstenite's
/// `handshake::client::Response` and as [`ClientResponse`](crate::ClientResponse).
///
/// ```
/// use wavesock::handshake::client::Response;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> wavesock::Result<()> {
/// let (client_io, server_io) = tokio::io::duplex(4096);
/// let (client, server) = tokio::join!(
///     wavesock::client_async("ws://localhost/", client_io),
///     wavesock::accept_async(server_io),
/// );
/// let (_ws, response): (_, Response) = client?;
/// assert_eq!(response.status(), http::StatusCode::SWITCHING_PROTOCOLS);
/// assert!(response.body().is_none());
/// # server?;
/// # Ok(()) }
/// ```
pub type Response = http::Response<Option<Vec<u8>>>;

/// Anything that can name the WebSocket to connect to: a URL (`&str`,
/// `String`, [`Uri`]) or a full [`Request`] carrying your own headers
/// (`Authorization`, `Origin`, cookies, `Sec-WebSocket-Protocol`).
///
/// The handshake headers (`Host` unless given, `Upgrade`, `Connection`,
/// `Sec-WebSocket-Version`, `Sec-WebSocket-Key` unless given) are filled in
/// by [`prepare_request`]; you only add what is yours. A `Sec-WebSocket-Key`
/// you give must be the base64 of 16 bytes and is sent as it is: for tests
/// that know the request byte for byte. Outside tests, let a fresh random
/// key be drawn. For headers and subprotocols without building an
/// [`http::Request`], see [`ClientRequestBuilder`].
///
/// A URL that does not parse, or whose port is not a number from 1 to
/// 65535, is refused here with [`HandshakeError::InvalidUrl`]; a
/// [`Request`] is taken as it is and checked by [`prepare_request`].
///
/// ```
/// use wavesock::IntoClientRequest;
///
/// let req = "ws://example.com/chat?room=1".into_client_request()?;
/// assert_eq!(req.uri().path(), "/chat");
///
/// let req = http::Request::builder()
///     .uri("ws://example.com/chat")
///     .header("Authorization", "Bearer secret")
///     .header("Sec-WebSocket-Protocol", "chat.v2, chat.v1")
///     .body(())
///     .unwrap()
///     .into_client_request()?;
/// assert!(req.headers().contains_key("authorization"));
/// # Ok::<(), wavesock::HandshakeError>(())
/// ```
pub trait IntoClientRequest {
    /// The request to send, before the handshake headers are added.
    fn into_client_request(self) -> Result<Request, HandshakeError>;
}

impl IntoClientRequest for &str {
    fn into_client_request(self) -> Result<Request, HandshakeError> {
        let uri: Uri = self
            .parse()
            .map_err(|e: http::uri::InvalidUri| HandshakeError::InvalidUrl(e.to_string()))?;
        uri.into_client_request()
    }
}

impl IntoClientRequest for &String {
    fn into_client_request(self) -> Result<Request, HandshakeError> {
        self.as_str().into_client_request()
    }
}

impl IntoClientRequest for String {
    fn into_client_request(self) -> Result<Request, HandshakeError> {
        self.as_str().into_client_request()
    }
}

impl IntoClientRequest for Uri {
    fn into_client_request(self) -> Result<Request, HandshakeError> {
        explicit_port(&self)?;
        let mut req = Request::new(());
        *req.uri_mut() = self;
        Ok(req)
    }
}

impl IntoClientRequest for &Uri {
    fn into_client_request(self) -> Result<Request, HandshakeError> {
        self.clone().into_client_request()
    }
}

/// With the `url` feature: a parsed [`url::Url`], as tokio-tungstenite's
/// `url` feature takes it. It goes through the same checks as a URL given
/// as a string; a fragment (`#...`), which RFC 6455 §3 does not allow in
/// WebSocket URLs, is not sent.
///
/// ```
/// use wavesock::IntoClientRequest;
///
/// let url = url::Url::parse("ws://localhost:9001/chat?room=1").unwrap();
/// let request = url.into_client_request()?;
/// assert_eq!(request.uri(), "ws://localhost:9001/chat?room=1");
/// # Ok::<(), wavesock::HandshakeError>(())
/// ```
#[cfg(feature = "url")]
impl IntoClientRequest for url::Url {
    fn into_client_request(self) -> Result<Request, HandshakeError> {
        (&self).into_client_request()
    }
}

/// With the `url` feature: a borrowed [`url::Url`], like an owned one.
///
/// ```
/// use wavesock::IntoClientRequest;
///
/// let url = url::Url::parse("wss://example.com/feed").unwrap();
/// let request = (&url).into_client_request()?;
/// assert_eq!(request.uri().host(), Some("example.com"));
/// # Ok::<(), wavesock::HandshakeError>(())
/// ```
#[cfg(feature = "url")]
impl IntoClientRequest for &url::Url {
    fn into_client_request(self) -> Result<Request, HandshakeError> {
        self.as_str().into_client_request()
    }
}

impl IntoClientRequest for Request {
    fn into_client_request(self) -> Result<Request, HandshakeError> {
        Ok(self)
    }
}

/// A client request from a URL plus your own headers and subprotocols, so
/// that [`connect_async`](crate::connect_async) and
/// [`client_async`](crate::client_async) need no hand-built
/// [`http::Request`]. The name and methods are tungstenite's.
///
/// Building never fails and never panics: the URL, the header names and
/// values and the subprotocol names are checked by
/// [`into_client_request`](IntoClientRequest::into_client_request), which
/// returns [`HandshakeError::InvalidUrl`] (a URL that does not parse or
/// has a bad port) or [`HandshakeError::InvalidRequest`]. The URL's scheme
/// and host are checked when the request is sent, as for any URL.
///
/// ```
/// use wavesock::{ClientRequestBuilder, IntoClientRequest};
///
/// let request = ClientRequestBuilder::new("ws://localhost:9001/chat")
///     .with_header("Authorization", "Bearer secret")
///     .with_sub_protocol("chat.v2")
///     .with_sub_protocol("chat.v1")
///     .into_client_request()?;
/// assert_eq!(request.uri().path(), "/chat");
/// assert_eq!(request.headers()["authorization"], "Bearer secret");
/// assert_eq!(request.headers()["sec-websocket-protocol"], "chat.v2, chat.v1");
///
/// // Mistakes come out as errors, not panics.
/// let bad = ClientRequestBuilder::new("ws://localhost/")
///     .with_header("Bad Name", "x")
///     .into_client_request();
/// assert!(matches!(bad, Err(wavesock::HandshakeError::InvalidRequest(_))));
/// # Ok::<(), wavesock::HandshakeError>(())
/// ```
///
/// Connecting with one, here to a server on an in-memory stream:
///
/// ```
/// use wavesock::ClientRequestBuilder;
/// use wavesock::handshake::server::Subprotocols;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> wavesock::Result<()> {
/// let (client_io, server_io) = tokio::io::duplex(4096);
/// let request = ClientRequestBuilder::new("ws://localhost/").with_sub_protocol("chat.v1");
/// let (client, server) = tokio::join!(
///     wavesock::client_async(request, client_io),
///     wavesock::accept_hdr_async(server_io, Subprotocols::new(["chat.v1"])),
/// );
/// let (_ws, response) = client?;
/// assert_eq!(response.headers()["sec-websocket-protocol"], "chat.v1");
/// # server?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ClientRequestBuilder {
    /// The parsed URI, or why it did not parse.
    uri: Result<Uri, String>,
    headers: Vec<(String, String)>,
    subprotocols: Vec<String>,
}

impl ClientRequestBuilder {
    /// A request for `uri`: a [`Uri`] or anything that converts to one
    /// (`&str`, `String`), as [`http::request::Builder::uri`] takes. A URL
    /// that does not parse is reported by `into_client_request`.
    pub fn new<U>(uri: U) -> Self
    where
        U: TryInto<Uri>,
        U::Error: Into<http::Error>,
    {
        ClientRequestBuilder {
            uri: uri.try_into().map_err(|e| e.into().to_string()),
            headers: Vec::new(),
            subprotocols: Vec::new(),
        }
    }

    /// Adds a header line to the request (`Authorization`, `Origin`,
    /// `Cookie`). Adding a name twice sends both lines. The handshake's own
    /// headers (`Upgrade`, `Connection`, `Sec-WebSocket-Version`) are set
    /// by the library whatever is given here; a `Host` given here is kept.
    pub fn with_header<K, V>(mut self, name: K, value: V) -> Self
    where
        K: Into<String>,
        V: Into<String>,
    {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Offers a subprotocol in `Sec-WebSocket-Protocol`, after those
    /// already offered (the order is the client's preference). Each must be
    /// an HTTP token and offered once (RFC 6455 §4.1).
    pub fn with_sub_protocol<P>(mut self, protocol: P) -> Self
    where
        P: Into<String>,
    {
        self.subprotocols.push(protocol.into());
        self
    }
}

impl IntoClientRequest for ClientRequestBuilder {
    fn into_client_request(self) -> Result<Request, HandshakeError> {
        let uri = self.uri.map_err(HandshakeError::InvalidUrl)?;
        let mut request = uri.into_client_request()?;
        let headers = request.headers_mut();
        for (name, value) in &self.headers {
            let name = header::HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                HandshakeError::InvalidRequest(format!("{name:?} is not a header name"))
            })?;
            // The value is left out of the error: it may be a credential.
            let value = HeaderValue::from_str(value).map_err(|_| {
                HandshakeError::InvalidRequest(format!("the value of header {name} is not valid"))
            })?;
            headers.append(name, value);
        }
        if !self.subprotocols.is_empty() {
            for (i, p) in self.subprotocols.iter().enumerate() {
                if !crate::handshake::is_token(p) {
                    return Err(HandshakeError::InvalidRequest(format!(
                        "{p:?} is not a subprotocol name (an HTTP token)"
                    )));
                }
                if self.subprotocols[..i].contains(p) {
                    return Err(HandshakeError::InvalidRequest(format!(
                        "subprotocol {p:?} is offered twice"
                    )));
                }
            }
            let list = self.subprotocols.join(", ");
            let value = HeaderValue::from_str(&list).expect("tokens are valid header values");
            headers.append(header::SEC_WEBSOCKET_PROTOCOL, value);
        }
        Ok(request)
    }
}

/// Whether the URI asks for TLS (`wss://`).
pub(crate) fn is_secure(uri: &Uri) -> bool {
    uri.scheme_str().and_then(ws_scheme_is_secure) == Some(true)
}

/// Whether a WebSocket scheme asks for TLS: `Some(false)` for `ws`,
/// `Some(true)` for `wss` (in any case), `None` for any other scheme.
pub(crate) fn ws_scheme_is_secure(scheme: &str) -> Option<bool> {
    if scheme.eq_ignore_ascii_case("ws") {
        Some(false)
    } else if scheme.eq_ignore_ascii_case("wss") {
        Some(true)
    } else {
        None
    }
}

/// The port a URL implies when it names none, the one place this rule is
/// written: 443 with TLS (`wss`, `https`), 80 without (`ws`, `http`).
pub(crate) fn default_port(secure: bool) -> u16 {
    if secure { 443 } else { 80 }
}

/// The port the URI's authority names, checked: `None` when it names none
/// or leaves it empty after the colon (`ws://host:/`), which RFC 3986
/// §3.2.3 and §6.2.3 make the same as naming none: the scheme's default.
///
/// [`Uri::port_u16`] cannot be used alone: it is `None` both for no port and
/// for one that is not a number or is over 65535, and it takes a sign
/// (`+80`). A port here is ASCII digits (leading zeros allowed) with a value
/// from 1 to 65535; port 0 names no service and cannot be connected to.
pub(crate) fn explicit_port(uri: &Uri) -> Result<Option<u16>, HandshakeError> {
    let Some(authority) = uri.authority() else {
        return Ok(None);
    };
    let authority = authority.as_str();
    // Userinfo may hold colons; the host and port follow its last '@'.
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    let after_host = match host_port.strip_prefix('[') {
        // An IPv6 literal: its colons are inside the brackets.
        Some(literal) => literal.split_once(']').map_or("", |(_, rest)| rest),
        None => host_port.find(':').map_or("", |at| &host_port[at..]),
    };
    let digits = after_host.strip_prefix(':').unwrap_or_default();
    if digits.is_empty() {
        return Ok(None);
    }
    // `u16::from_str` alone would take a leading '+'.
    let port = match digits.bytes().all(|b| b.is_ascii_digit()) {
        true => digits.parse::<u16>().ok(),
        false => None,
    };
    match port {
        Some(p) if p != 0 => Ok(Some(p)),
        _ => Err(HandshakeError::InvalidUrl(format!(
            "{uri}: bad port {digits:?} (a port is a number from 1 to 65535)"
        ))),
    }
}

/// The port to connect to for a `ws://` or `wss://` URI: the one it names,
/// else 443 for `wss://` and 80 otherwise. An invalid port is an error,
/// never the default.
pub(crate) fn port_or_default(uri: &Uri) -> Result<u16, HandshakeError> {
    Ok(explicit_port(uri)?.unwrap_or(default_port(is_secure(uri))))
}

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
/// the request already carries a valid one. Everything else you set is kept.
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
/// let hand_built = http::Request::get("ws://example.com:99999/").body(()).unwrap();
/// let bad_port = prepare_request(hand_built);
/// assert!(matches!(bad_port, Err(HandshakeError::InvalidUrl(_))));
/// # Ok::<(), wavesock::HandshakeError>(())
/// ```
pub fn prepare_request(mut request: Request) -> Result<Request, HandshakeError> {
    if request.method() != Method::GET {
        return Err(HandshakeError::MethodNotAllowed(
            request.method().to_string(),
        ));
    }
    *request.version_mut() = Version::HTTP_11;
    let uri = request.uri();
    let default_port = match uri.scheme_str() {
        Some(s) => match ws_scheme_is_secure(s) {
            Some(secure) => Some(default_port(secure)),
            None => {
                return Err(HandshakeError::InvalidUrl(format!(
                    "unsupported URL scheme {s:?}: a WebSocket URL is ws:// or wss://"
                )));
            }
        },
        None => None,
    };
    // Checked even when a Host header is given: the URL is also what
    // connect_async connects to.
    let port = explicit_port(uri)?;
    let host = match uri.authority() {
        Some(auth) if !auth.host().is_empty() => {
            // Userinfo never goes into Host; a default port is left out.
            let host = match port {
                Some(p) if Some(p) != default_port => format!("{}:{p}", auth.host()),
                _ => auth.host().to_owned(),
            };
            Some(host)
        }
        _ if default_port.is_some() => {
            return Err(HandshakeError::InvalidUrl(format!("{uri}: no host")));
        }
        _ => None,
    };
    let headers = request.headers_mut();
    if !headers.contains_key(header::HOST) {
        let host = host.ok_or_else(|| {
            HandshakeError::InvalidUrl("a request without a host needs a Host header".into())
        })?;
        let value = HeaderValue::from_str(&host)
            .map_err(|_| HandshakeError::InvalidUrl(format!("bad host {host:?}")))?;
        headers.insert(header::HOST, value);
    }
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

/// Turns a WebSocket request (a `ws://` or `wss://` URL, as
/// [`IntoClientRequest`] builds it) into an HTTP/2 extended CONNECT request
/// (RFC 8441 §4): method `CONNECT`, version HTTP/2, an `http`/`https` URI
/// whose authority and path become `:authority` and `:path`, and
/// `Sec-WebSocket-Version: 13`. The headers HTTP/2 forbids or has no use for
/// (`Host`, `Upgrade`, `Connection`, `Sec-WebSocket-Key`) are removed; the
/// rest (subprotocols, cookies, `Origin`) are kept. The `:protocol`
/// pseudo-header is the HTTP/2 library's to set.
///
/// ```
/// use wavesock::IntoClientRequest;
/// use wavesock::handshake::client::prepare_extended_connect;
///
/// let req = prepare_extended_connect("wss://example.com/chat?room=1".into_client_request()?)?;
/// assert_eq!(req.method(), http::Method::CONNECT);
/// assert_eq!(req.uri(), "https://example.com/chat?room=1");
/// assert_eq!(req.headers()["sec-websocket-version"], "13");
/// assert!(!req.headers().contains_key("sec-websocket-key"));
/// # Ok::<(), wavesock::HandshakeError>(())
/// ```
pub fn prepare_extended_connect(mut request: Request) -> Result<Request, HandshakeError> {
    if request.method() != Method::GET {
        return Err(HandshakeError::MethodNotAllowed(
            request.method().to_string(),
        ));
    }
    let uri = request.uri();
    let secure = match uri.scheme_str().map(ws_scheme_is_secure) {
        Some(Some(secure)) => secure,
        _ => {
            return Err(HandshakeError::InvalidUrl(format!(
                "{uri}: an HTTP/2 WebSocket needs a ws:// or wss:// URL"
            )));
        }
    };
    let port = explicit_port(uri)?;
    let host = match uri.authority() {
        Some(auth) if !auth.host().is_empty() => auth.host(),
        _ => return Err(HandshakeError::InvalidUrl(format!("{uri}: no host"))),
    };
    let authority = match port {
        Some(p) if p != default_port(secure) => format!("{host}:{p}"),
        _ => host.to_owned(),
    };
    let path = uri
        .path_and_query()
        .map(|pq| pq.as_str())
        .filter(|p| !p.is_empty())
        .unwrap_or("/");
    let scheme = if secure { "https" } else { "http" };
    let new_uri: http::Uri = format!("{scheme}://{authority}{path}")
        .parse()
        .map_err(|e| HandshakeError::InvalidUrl(format!("{uri}: {e}")))?;
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

/// The response's head with `body`, for handing back to the caller.
pub(crate) fn with_body<T>(response: &http::Response<()>, body: T) -> http::Response<T> {
    let mut out = http::Response::new(body);
    *out.status_mut() = response.status();
    *out.version_mut() = response.version();
    *out.headers_mut() = response.headers().clone();
    out
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

/// What both handshakes check of the answer beyond its status: no
/// extension unless some were offered, and the subprotocol chosen.
fn agreed(request: &HeaderMap, response: &HeaderMap) -> Result<Option<String>, HandshakeError> {
    if response.contains_key(header::SEC_WEBSOCKET_EXTENSIONS)
        && !request.contains_key(header::SEC_WEBSOCKET_EXTENSIONS)
    {
        return Err(HandshakeError::BadHeader {
            name: "Sec-WebSocket-Extensions",
            reason: "the server chose an extension that was not offered",
        });
    }
    chosen_subprotocol(request, response)
}

fn chosen_subprotocol(
    request: &HeaderMap,
    response: &HeaderMap,
) -> Result<Option<String>, HandshakeError> {
    let mut lines = response.get_all(header::SEC_WEBSOCKET_PROTOCOL).iter();
    let chosen = match (lines.next(), lines.next()) {
        (None, _) => return Ok(None),
        (Some(v), None) => v.to_str().map(str::trim).unwrap_or_default(),
        _ => "",
    };
    if chosen.is_empty() || chosen.contains(',') {
        return Err(HandshakeError::BadHeader {
            name: "Sec-WebSocket-Protocol",
            reason: "the server must choose exactly one subprotocol",
        });
    }
    if !list_values(request, header::SEC_WEBSOCKET_PROTOCOL).any(|p| p == chosen) {
        return Err(HandshakeError::BadHeader {
            name: "Sec-WebSocket-Protocol",
            reason: "the server chose a subprotocol that was not offered",
        });
    }
    Ok(Some(chosen.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn bad_urls_are_refused() {
        assert!(matches!(
            prepare_request("http://h/".into_client_request().unwrap()),
            Err(HandshakeError::InvalidUrl(s)) if s.contains("\"http\"")
        ));
        assert!(matches!(
            "not a url at all".into_client_request(),
            Err(HandshakeError::InvalidUrl(_))
        ));
        // A bare path needs a Host header.
        assert!(matches!(
            prepare_request("/chat".into_client_request().unwrap()),
            Err(HandshakeError::InvalidUrl(_))
        ));
        let req = Request::builder()
            .uri("/chat")
            .header("Host", "unix")
            .body(())
            .unwrap();
        assert_eq!(prepare_request(req).unwrap().headers()["host"], "unix");
        let post = Request::builder()
            .method("POST")
            .uri("ws://h/")
            .body(())
            .unwrap();
        assert!(matches!(
            prepare_request(post),
            Err(HandshakeError::MethodNotAllowed(_))
        ));
    }

    #[test]
    fn invalid_ports_are_refused_not_replaced_by_the_default() {
        for url in [
            "ws://127.0.0.1:99999/",
            "ws://h:65536/",
            "ws://h:abc/",
            "ws://h:-1/",
            "ws://h:+80/",
            "ws://h:0/",
            "wss://h:99999/",
            "ws://[::1]:99999/",
            "ws://user:pw@h:x/",
        ] {
            // As a URL, refused as soon as it becomes a request.
            match url.into_client_request() {
                Err(HandshakeError::InvalidUrl(why)) => {
                    assert!(why.contains("port"), "{url}: {why}")
                }
                other => panic!("{url}: {other:?}"),
            }
            // In a request built by hand, refused by prepare_request.
            let req = Request::builder().uri(url).body(()).unwrap();
            match prepare_request(req) {
                Err(HandshakeError::InvalidUrl(why)) => {
                    assert!(why.contains("port"), "{url}: {why}")
                }
                other => panic!("{url}: {other:?}"),
            }
        }
        // Also when the caller gives its own Host: the URL is what
        // connect_async would connect to.
        let req = Request::builder()
            .uri("ws://h:abc/")
            .header("Host", "h")
            .body(())
            .unwrap();
        assert!(matches!(
            prepare_request(req),
            Err(HandshakeError::InvalidUrl(_))
        ));
    }

    #[test]
    fn empty_or_zero_padded_ports_are_valid() {
        // RFC 3986 §3.2.3: `port = *DIGIT`, an empty port is the default.
        let cases = [
            ("ws://h:/", "h", 80),
            ("wss://h:/", "h", 443),
            ("ws://h:080/", "h", 80),
            ("ws://h:09001/", "h:9001", 9001),
            ("ws://h:65535/", "h:65535", 65535),
            ("ws://[::1]:/", "[::1]", 80),
        ];
        for (url, host, port) in cases {
            let req = prepare_request(url.into_client_request().unwrap()).unwrap();
            assert_eq!(req.headers()["host"], host, "{url}");
            assert_eq!(port_or_default(req.uri()).unwrap(), port, "{url}");
        }
    }

    #[test]
    fn builder_makes_the_request_a_hand_built_one_would_be() {
        let built = ClientRequestBuilder::new("ws://h:9001/chat?x=1")
            .with_header("Authorization", "Bearer t")
            .with_header("Cookie", "a=1")
            .with_header("cookie", "b=2")
            .with_sub_protocol("v2")
            .with_sub_protocol(String::from("v1"))
            .into_client_request()
            .unwrap();
        assert_eq!(built.method(), Method::GET);
        assert_eq!(built.uri(), "ws://h:9001/chat?x=1");
        assert_eq!(built.headers()["authorization"], "Bearer t");
        let cookies: Vec<_> = built.headers().get_all("cookie").iter().collect();
        assert_eq!(cookies, ["a=1", "b=2"]);
        assert_eq!(built.headers()["sec-websocket-protocol"], "v2, v1");
        // And it completes into a handshake like any other request.
        let prepared = prepare_request(built).unwrap();
        assert_eq!(prepared.headers()["host"], "h:9001");
        assert_eq!(prepared.headers()["authorization"], "Bearer t");

        // Nothing added: just the URL.
        let plain = ClientRequestBuilder::new("ws://h/")
            .into_client_request()
            .unwrap();
        assert!(plain.headers().is_empty());
    }

    #[test]
    fn builder_takes_what_a_request_builder_takes_as_a_uri() {
        let uri: Uri = "ws://h/a".parse().unwrap();
        for built in [
            ClientRequestBuilder::new(uri.clone()),
            ClientRequestBuilder::new(&uri),
            ClientRequestBuilder::new("ws://h/a"),
            ClientRequestBuilder::new(String::from("ws://h/a")),
        ] {
            assert_eq!(built.into_client_request().unwrap().uri(), &uri);
        }
    }

    #[test]
    fn builder_mistakes_are_errors_at_into_client_request() {
        let bad_url = ClientRequestBuilder::new("not a url").with_sub_protocol("v1");
        assert!(matches!(
            bad_url.into_client_request(),
            Err(HandshakeError::InvalidUrl(_))
        ));
        let cases = [
            ClientRequestBuilder::new("ws://h/").with_header("Bad Name", "x"),
            ClientRequestBuilder::new("ws://h/").with_header("", "x"),
            ClientRequestBuilder::new("ws://h/").with_header("X-Ok", "line\r\nbreak"),
            ClientRequestBuilder::new("ws://h/").with_sub_protocol(""),
            ClientRequestBuilder::new("ws://h/").with_sub_protocol("a, b"),
            ClientRequestBuilder::new("ws://h/").with_sub_protocol("chat v1"),
            ClientRequestBuilder::new("ws://h/").with_sub_protocol("caf\u{e9}"),
            ClientRequestBuilder::new("ws://h/")
                .with_sub_protocol("v1")
                .with_sub_protocol("v1"),
        ];
        for builder in cases {
            let shown = format!("{builder:?}");
            assert!(
                matches!(
                    builder.into_client_request(),
                    Err(HandshakeError::InvalidRequest(_))
                ),
                "{shown}"
            );
        }
        // A secret in a bad value does not end up in the error.
        let err = ClientRequestBuilder::new("ws://h/")
            .with_header("Authorization", "Bearer s3cret\n")
            .into_client_request()
            .unwrap_err();
        assert!(!err.to_string().contains("s3cret"), "{err}");
        // So is a port that is not one.
        assert!(matches!(
            ClientRequestBuilder::new("ws://h:99999/").into_client_request(),
            Err(HandshakeError::InvalidUrl(_))
        ));
    }

    #[cfg(feature = "url")]
    #[test]
    fn url_crate_urls_are_client_requests() {
        let url = url::Url::parse("ws://user:pw@h:9001/a/b?c=d#frag").unwrap();
        let by_ref = (&url).into_client_request().unwrap();
        let owned = url.clone().into_client_request().unwrap();
        assert_eq!(by_ref.uri(), owned.uri());
        assert_eq!(owned.uri().path_and_query().unwrap(), "/a/b?c=d");
        let prepared = prepare_request(owned).unwrap();
        assert_eq!(prepared.headers()["host"], "h:9001");
        let mut out = Vec::new();
        write_request(&prepared, &mut out);
        assert!(out.starts_with(b"GET /a/b?c=d HTTP/1.1\r\n"));
        // The url crate drops a default port; the request is the same.
        let url = url::Url::parse("wss://h:443/").unwrap();
        let prepared = prepare_request(url.into_client_request().unwrap()).unwrap();
        assert_eq!(prepared.headers()["host"], "h");
        // Schemes are checked as for any URL.
        let url = url::Url::parse("https://h/").unwrap();
        assert!(matches!(
            prepare_request(url.into_client_request().unwrap()),
            Err(HandshakeError::InvalidUrl(s)) if s.contains("\"https\"")
        ));
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
