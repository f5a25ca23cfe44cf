//! What a client asks for: the [`Request`] and [`Response`] types, the
//! [`IntoClientRequest`] conversions from URLs and requests, and the
//! [`ClientRequestBuilder`]. A request is only taken here; the handshake
//! headers are added when it is prepared for a handshake.

use std::fmt;

use http::Uri;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};

use super::target::{explicit_port, shown};
use crate::handshake::HandshakeError;

/// The request headers that carry credentials.
const CREDENTIALS: [HeaderName; 3] = [
    header::AUTHORIZATION,
    header::COOKIE,
    header::PROXY_AUTHORIZATION,
];

/// Marks the values of the headers that carry credentials as sensitive:
/// HTTP/2's HPACK then never adds them to its compression table (RFC 7541
/// §7.1.3, where a compressed size could reveal them), and their `Debug`
/// shows `Sensitive`, not the value, wherever the request is printed.
pub(crate) fn mark_sensitive(headers: &mut HeaderMap) {
    for name in CREDENTIALS {
        if let header::Entry::Occupied(mut entry) = headers.entry(name) {
            for value in entry.iter_mut() {
                value.set_sensitive(true);
            }
        }
    }
}

/// Whether a header named `name` (in any case) carries credentials.
fn is_credential(name: &str) -> bool {
    CREDENTIALS
        .iter()
        .any(|c| c.as_str().eq_ignore_ascii_case(name))
}

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
/// assert_eq!(response.status(), wavesock::http::StatusCode::SWITCHING_PROTOCOLS);
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
/// by [`prepare_request`](super::prepare_request); you only add what is yours. A `Sec-WebSocket-Key`
/// you give must be the base64 of 16 bytes and is sent as it is: for tests
/// that know the request byte for byte. Outside tests, let a fresh random
/// key be drawn. For headers and subprotocols without building an
/// [`http::Request`], see [`ClientRequestBuilder`].
///
/// A URL that does not parse, or whose port is not a number from 1 to
/// 65535, is refused here with [`HandshakeError::InvalidUrl`]; a
/// [`Request`] is taken as it is and checked by
/// [`prepare_request`](super::prepare_request).
///
/// ```
/// use wavesock::IntoClientRequest;
///
/// let req = "ws://example.com/chat?room=1".into_client_request()?;
/// assert_eq!(req.uri().path(), "/chat");
///
/// let req = wavesock::http::Request::builder()
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
/// // Needs url.
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
/// // Needs url.
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
#[derive(Clone)]
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

/// Shows the URL without its userinfo or query and the values of
/// `Authorization`, `Cookie` and `Proxy-Authorization` as `<redacted>`: a
/// builder may well be logged, and credentials must not be.
impl fmt::Debug for ClientRequestBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Url<'a>(&'a Result<Uri, String>);
        impl fmt::Debug for Url<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self.0 {
                    Ok(uri) => write!(f, "Ok({})", shown(uri)),
                    // Why it did not parse, which does not repeat the URL.
                    Err(why) => write!(f, "Err({why:?})"),
                }
            }
        }
        struct Headers<'a>(&'a [(String, String)]);
        impl fmt::Debug for Headers<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let shown = self.0.iter().map(|(name, value)| {
                    let value = match is_credential(name) {
                        true => "<redacted>",
                        false => value.as_str(),
                    };
                    (name, value)
                });
                f.debug_list().entries(shown).finish()
            }
        }
        f.debug_struct("ClientRequestBuilder")
            .field("uri", &Url(&self.uri))
            .field("headers", &Headers(&self.headers))
            .field("subprotocols", &self.subprotocols)
            .finish()
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
        mark_sensitive(headers);
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

#[cfg(test)]
mod tests {
    use http::Method;

    use super::*;
    use crate::handshake::client::prepare_request;

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
    fn credentials_are_sensitive_and_kept_out_of_debug() {
        let builder = ClientRequestBuilder::new("ws://alice:pw0rd@h/chat")
            .with_header("Authorization", "Bearer s3cret")
            .with_header("cookie", "sid=c00kie")
            .with_header("PROXY-AUTHORIZATION", "Basic pr0xy")
            .with_header("Origin", "http://h")
            .with_sub_protocol("v1");
        let shown = format!("{builder:?}");
        for secret in ["s3cret", "c00kie", "pr0xy", "pw0rd"] {
            assert!(!shown.contains(secret), "{secret}: {shown}");
        }
        // The rest is still there to debug with.
        for kept in ["Authorization", "cookie", "ws://h/chat", "http://h", "v1"] {
            assert!(shown.contains(kept), "{kept}: {shown}");
        }
        // The request it builds marks them sensitive, so that HPACK never
        // indexes them and `Debug` of the request hides them too.
        let request = builder.into_client_request().unwrap();
        for name in ["authorization", "cookie", "proxy-authorization"] {
            assert!(request.headers()[name].is_sensitive(), "{name}");
        }
        assert!(!request.headers()["origin"].is_sensitive());
        assert!(!format!("{request:?}").contains("s3cret"));
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
        use crate::handshake::client::write_request;

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
}
