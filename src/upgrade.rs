//! Serving WebSockets from a hyper 1.x server (feature `hyper`): HTTP/1.1
//! `Upgrade` requests and HTTP/2 extended CONNECT requests (RFC 8441) alike.
//!
//! [`upgrade`] checks the request, negotiates subprotocols (through a
//! [`Callback`]) and permessage-deflate exactly as [`accept_async`]
//! does, and returns the response for your service to send together with
//! an [`UpgradeFut`] that resolves to a [`WebSocketStream`] once hyper has
//! sent it and handed over the connection (HTTP/1.1) or the stream
//! (HTTP/2). A request that is no valid upgrade is a [`Refusal`] that
//! carries the HTTP error to answer with.
//!
//! hyper needs upgrades switched on: `.with_upgrades()` on an HTTP/1.1
//! connection, and `enable_connect_protocol()` on the HTTP/2 builder so that
//! the server advertises `SETTINGS_ENABLE_CONNECT_PROTOCOL` (axum's `serve`
//! does both).
//!
//! ```no_run
//! // Needs hyper.
//! use futures_util::{SinkExt, StreamExt};
//! use hyper::body::Incoming;
//! use wavesock::http::{Request, Response};
//! use wavesock::upgrade::{self, Body};
//!
//! async fn handle(mut req: Request<Incoming>) -> Result<Response<Body>, std::convert::Infallible> {
//!     if !upgrade::is_upgrade_request(&req) {
//!         return Ok(Response::new(Body::from("a WebSocket endpoint")));
//!     }
//!     match upgrade::upgrade(&mut req) {
//!         Ok((response, websocket)) => {
//!             tokio::spawn(async move {
//!                 let mut ws = websocket.await?;
//!                 while let Some(msg) = ws.next().await {
//!                     let msg = msg?;
//!                     if msg.is_data() {
//!                         ws.feed(msg).await?;
//!                     }
//!                 }
//!                 Ok::<_, wavesock::Error>(())
//!             });
//!             Ok(response)
//!         }
//!         Err(refusal) => Ok(refusal.into_response()),
//!     }
//! }
//! ```
//!
//! [`accept_async`]: crate::accept_async

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode, Version};
use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper_util::rt::TokioIo;

use crate::config::Config;
use crate::error::{Error, HandshakeError, Result};
use crate::handshake::headers_have_token;
use crate::handshake::server::{Accepting, Callback, NoCallback, error_response};
use crate::negotiated::Negotiated;
use crate::proto::Role;
use crate::stream::WebSocketStream;

/// The response body type of [`upgrade`]'s answers: `http_body_util::Full`,
/// empty when accepting, a short text when refusing.
pub type Body = http_body_util::Full<Bytes>;

/// A WebSocket served from hyper: over the upgraded HTTP/1.1 connection or
/// the HTTP/2 stream.
pub type HyperWebSocket = WebSocketStream<TokioIo<Upgraded>>;

/// Whether `req` asks for a WebSocket: an HTTP/1.1 `GET` with `Upgrade:
/// websocket`, or an HTTP/2 `CONNECT` with `:protocol` `websocket`. Lets a
/// route serve a page and a WebSocket at the same path; [`upgrade`] does the
/// full check.
///
/// ```
/// // Needs hyper.
/// let h1 = wavesock::http::Request::get("/ws")
///     .header("upgrade", "websocket")
///     .header("connection", "upgrade")
///     .body(())
///     .unwrap();
/// assert!(wavesock::upgrade::is_upgrade_request(&h1));
///
/// let mut h2 = wavesock::http::Request::connect("https://example.com/ws")
///     .version(wavesock::http::Version::HTTP_2)
///     .body(())
///     .unwrap();
/// assert!(!wavesock::upgrade::is_upgrade_request(&h2));
/// h2.extensions_mut().insert(hyper::ext::Protocol::from_static("websocket"));
/// assert!(wavesock::upgrade::is_upgrade_request(&h2));
/// ```
pub fn is_upgrade_request<B>(req: &Request<B>) -> bool {
    if req.method() == Method::CONNECT {
        return protocol(req).is_some_and(|p| p.eq_ignore_ascii_case("websocket"));
    }
    req.method() == Method::GET
        && headers_have_token(req.headers(), header::UPGRADE, "websocket")
        && headers_have_token(req.headers(), header::CONNECTION, "upgrade")
}

/// The request's `:protocol` pseudo-header, if it has a readable one.
fn protocol<B>(req: &Request<B>) -> Option<&str> {
    protocol_in(req.extensions())
}

/// The `:protocol` pseudo-header hyper keeps in a request's extensions.
pub(crate) fn protocol_in(extensions: &http::Extensions) -> Option<&str> {
    extensions
        .get::<hyper::ext::Protocol>()
        .map(|p| std::str::from_utf8(p.as_ref()).unwrap_or("\u{fffd}"))
}

/// The WebSocket over the connection or stream hyper handed over.
pub(crate) fn websocket(
    upgraded: hyper::Result<Upgraded>,
    config: Config,
    negotiated: Negotiated,
) -> Result<HyperWebSocket> {
    let upgraded = upgraded.map_err(|e| {
        Error::Io(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            format!("hyper did not hand over the connection: {e}"),
        ))
    })?;
    // hyper keeps bytes it read past the request inside `Upgraded`.
    WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, config)
        .and_then(|ws| negotiated.apply(ws))
}

/// Accepts the WebSocket `req` asks for, with the default [`Config`] and no
/// callback. See the [module](self) documentation.
pub fn upgrade<B>(
    req: &mut Request<B>,
) -> std::result::Result<(Response<Body>, UpgradeFut), Refusal> {
    upgrade_with_config(req, Config::default())
}

/// Like [`upgrade`], with your own [`Config`]: limits, keepalive, and
/// permessage-deflate when [`Config::deflate`] is set and the client offers
/// it.
///
/// ```
/// # #[cfg(feature = "deflate")] {
/// use wavesock::{Config, DeflateConfig};
///
/// let mut req = http::Request::get("/ws")
///     .header("host", "example.com")
///     .header("upgrade", "websocket")
///     .header("connection", "upgrade")
///     .header("sec-websocket-version", "13")
///     .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
///     .header("sec-websocket-extensions", "permessage-deflate")
///     .body(())
///     .unwrap();
/// // hyper puts this in every request of a connection served with upgrades.
/// let (_, on_upgrade) = hyper_on_upgrade_for_the_doctest();
/// req.extensions_mut().insert(on_upgrade);
/// let config = Config::default().deflate(DeflateConfig::default());
/// let (response, _websocket) = wavesock::upgrade::upgrade_with_config(&mut req, config).unwrap();
/// assert_eq!(response.status(), 101);
/// assert_eq!(response.headers()["sec-websocket-extensions"], "permessage-deflate");
/// # fn hyper_on_upgrade_for_the_doctest() -> ((), hyper::upgrade::OnUpgrade) {
/// #     let mut r = http::Request::new(());
/// #     ((), hyper::upgrade::on(&mut r))
/// # }
/// # }
/// ```
pub fn upgrade_with_config<B>(
    req: &mut Request<B>,
    config: Config,
) -> std::result::Result<(Response<Body>, UpgradeFut), Refusal> {
    upgrade_hdr_with_config(req, NoCallback, config)
}

/// Like [`upgrade`], with a [`Callback`] that sees the request and may add
/// headers to the response, pick a subprotocol (a
/// [`Subprotocols`](crate::Subprotocols) does), or refuse with a response
/// of its own, as with [`accept_hdr_async`](crate::accept_hdr_async). Over
/// HTTP/2 the callback sees method `CONNECT` and a `200` response.
pub fn upgrade_hdr<B, C: Callback>(
    req: &mut Request<B>,
    callback: C,
) -> std::result::Result<(Response<Body>, UpgradeFut), Refusal> {
    upgrade_hdr_with_config(req, callback, Config::default())
}

/// Like [`upgrade_hdr`], with your own [`Config`].
///
/// ```no_run
/// use wavesock::Subprotocols;
///
/// # fn run<B>(mut req: wavesock::http::Request<B>) {
/// let protocols = Subprotocols::new(["chat.v2", "chat.v1"]);
/// let config = wavesock::Config::default().max_message_size(1 << 20);
/// let (response, websocket) =
///     wavesock::upgrade::upgrade_hdr_with_config(&mut req, protocols, config).unwrap();
/// # }
/// ```
pub fn upgrade_hdr_with_config<B, C: Callback>(
    req: &mut Request<B>,
    callback: C,
    config: Config,
) -> std::result::Result<(Response<Body>, UpgradeFut), Refusal> {
    let http2 = req.version() >= Version::HTTP_2;
    let refuse = |error: HandshakeError| Refusal::handshake(error, http2);
    if let Err(e) = config.validate() {
        return Err(Refusal::server_side(e, http2));
    }
    let mut accepting = Accepting::new(req, protocol(req)).map_err(refuse)?;
    if req.extensions().get::<OnUpgrade>().is_none() {
        // hyper's servers add it to every request that may upgrade (an
        // HTTP/1.1 connection without `.with_upgrades()` fails the upgrade
        // later, in `UpgradeFut`); a request built by hand has none.
        return Err(Refusal::server_side(
            Error::Io(std::io::Error::other(
                "hyper gave this request no upgrade handle: serve HTTP/1.1 with `.with_upgrades()` and HTTP/2 with `enable_connect_protocol()`",
            )),
            http2,
        ));
    }
    accepting.negotiate(req.headers(), config.deflate.as_ref());
    let mut head = Request::new(());
    *head.method_mut() = req.method().clone();
    *head.uri_mut() = req.uri().clone();
    *head.version_mut() = req.version();
    *head.headers_mut() = req.headers().clone();
    let mut response = match callback.on_request(&head, accepting.required().clone()) {
        Ok(response) => response,
        Err(refusal) => {
            let status = refusal.status();
            let (parts, body) = refusal.into_parts();
            let mut response = Response::from_parts(parts, Body::from(body.unwrap_or_default()));
            strip_http1_headers(&mut response, http2);
            return Err(Refusal::new(
                HandshakeError::Refused(status).into(),
                response,
            ));
        }
    };
    accepting.respond(&mut response);
    let protocol = response
        .headers()
        .get(header::SEC_WEBSOCKET_PROTOCOL)
        .cloned();
    let on_upgrade = hyper::upgrade::on(req);
    let (parts, ()) = response.into_parts();
    Ok((
        Response::from_parts(parts, Body::default()),
        UpgradeFut {
            on_upgrade,
            setup: Some(Box::new(Setup {
                config,
                negotiated: Negotiated::from(accepting),
            })),
            protocol,
            http2,
        },
    ))
}

/// Makes an HTTP/1.1 refusal fit HTTP/2: no connection-specific headers
/// (RFC 9113 §8.2.2), and a 405 names the method HTTP/2 WebSockets use.
pub(crate) fn strip_http1_headers<B>(response: &mut Response<B>, http2: bool) {
    if http2 {
        let status = response.status();
        let h = response.headers_mut();
        h.remove(header::CONNECTION);
        h.remove(header::UPGRADE);
        if status == StatusCode::METHOD_NOT_ALLOWED {
            h.insert(header::ALLOW, HeaderValue::from_static("CONNECT"));
        }
        *response.version_mut() = Version::HTTP_2;
    }
}

/// What the connection is set up with once hyper hands it over.
#[derive(Debug)]
struct Setup {
    config: Config,
    negotiated: Negotiated,
}

/// Resolves to the [`WebSocketStream`] once hyper has sent the response
/// [`upgrade`] returned and handed over the connection or stream. Fails if
/// the client went away first.
#[must_use = "the WebSocket exists only once this future has resolved"]
pub struct UpgradeFut {
    on_upgrade: OnUpgrade,
    setup: Option<Box<Setup>>,
    protocol: Option<HeaderValue>,
    http2: bool,
}

impl UpgradeFut {
    /// The subprotocol the response names, if any.
    pub fn protocol(&self) -> Option<&HeaderValue> {
        self.protocol.as_ref()
    }

    /// Whether the WebSocket runs over an HTTP/2 stream (RFC 8441) rather
    /// than an upgraded HTTP/1.1 connection.
    pub fn is_http2(&self) -> bool {
        self.http2
    }
}

impl fmt::Debug for UpgradeFut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpgradeFut")
            .field("protocol", &self.protocol)
            .field("http2", &self.http2)
            .finish_non_exhaustive()
    }
}

impl Future for UpgradeFut {
    type Output = Result<HyperWebSocket>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let upgraded = std::task::ready!(Pin::new(&mut self.on_upgrade).poll(cx));
        let Some(setup) = self.setup.take() else {
            panic!("UpgradeFut polled after completion");
        };
        let Setup { config, negotiated } = *setup;
        Poll::Ready(websocket(upgraded, config, negotiated))
    }
}

/// A request [`upgrade`] did not accept, with the HTTP response that says
/// why: `400`, `405` or `426` for a request that is no valid upgrade (as
/// [`accept_async`](crate::accept_async) answers), the callback's own
/// refusal, or `500` when the server cannot upgrade.
#[derive(Debug)]
pub struct Refusal(Box<RefusalParts>);

/// Boxed: a refusal is rare, and `upgrade`'s `Ok` should not pay its size.
#[derive(Debug)]
struct RefusalParts {
    error: Error,
    response: Response<Body>,
}

impl Refusal {
    fn handshake(error: HandshakeError, http2: bool) -> Self {
        let mut response = match error_response(&error) {
            Some(resp) => resp.map(Body::from),
            None => {
                let mut resp = Response::new(Body::default());
                *resp.status_mut() = StatusCode::BAD_REQUEST;
                resp
            }
        };
        strip_http1_headers(&mut response, http2);
        Refusal::new(error.into(), response)
    }

    fn new(error: Error, response: Response<Body>) -> Self {
        Refusal(Box::new(RefusalParts { error, response }))
    }

    fn server_side(error: Error, http2: bool) -> Self {
        let mut response = Response::new(Body::from(format!("{error}\n")));
        *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
        strip_http1_headers(&mut response, http2);
        Refusal::new(error, response)
    }

    /// Why the request was refused.
    pub fn error(&self) -> &Error {
        &self.0.error
    }

    /// The status the response carries.
    pub fn status(&self) -> StatusCode {
        self.0.response.status()
    }

    /// The response to send.
    pub fn into_response(self) -> Response<Body> {
        self.0.response
    }

    /// The error and the response.
    pub fn into_parts(self) -> (Error, Response<Body>) {
        let RefusalParts { error, response } = *self.0;
        (error, response)
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "WebSocket upgrade refused ({}): {}",
            self.status(),
            self.0.error
        )
    }
}

impl std::error::Error for Refusal {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0.error)
    }
}

#[cfg(test)]
// Callbacks return tungstenite's `Result<Response, ErrorResponse>` shape.
#[allow(clippy::result_large_err)]
mod tests {
    use super::*;
    use crate::Subprotocols;
    use crate::handshake::server::ErrorResponse;

    fn h1() -> Request<()> {
        let mut req = Request::get("/ws")
            .header("host", "example.com")
            .header("upgrade", "websocket")
            .header("connection", "keep-alive, Upgrade")
            .header("sec-websocket-version", "13")
            .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
            .header("sec-websocket-protocol", "b, a")
            .body(())
            .unwrap();
        can_upgrade(&mut req);
        req
    }

    fn h2(protocol: Option<&'static str>) -> Request<()> {
        let mut req = Request::connect("https://example.com/ws")
            .version(Version::HTTP_2)
            .header("sec-websocket-version", "13")
            .body(())
            .unwrap();
        if let Some(p) = protocol {
            req.extensions_mut()
                .insert(hyper::ext::Protocol::from_static(p));
        }
        can_upgrade(&mut req);
        req
    }

    /// What hyper does for requests on connections that can upgrade.
    fn can_upgrade(req: &mut Request<()>) {
        let handle = hyper::upgrade::on(Request::new(()));
        req.extensions_mut().insert(handle);
    }

    #[test]
    fn upgrade_requests_are_recognised_in_both_versions() {
        assert!(is_upgrade_request(&h1()));
        assert!(is_upgrade_request(&h2(Some("websocket"))));
        assert!(!is_upgrade_request(&h2(None)));
        assert!(!is_upgrade_request(&h2(Some("connect-udp"))));
        let plain = Request::get("/ws").body(()).unwrap();
        assert!(!is_upgrade_request(&plain));
    }

    #[test]
    fn http1_is_answered_101_with_the_chosen_subprotocol() {
        let mut req = h1();
        let (resp, fut) = upgrade_hdr(&mut req, Subprotocols::new(["a", "b"])).unwrap();
        assert_eq!(resp.status(), StatusCode::SWITCHING_PROTOCOLS);
        assert_eq!(
            resp.headers()["sec-websocket-accept"],
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
        assert_eq!(resp.headers()["sec-websocket-protocol"], "a");
        assert_eq!(fut.protocol().unwrap(), "a");
        assert!(!fut.is_http2());
        // The handle moved into the future.
        assert!(req.extensions().get::<OnUpgrade>().is_none());
    }

    #[test]
    fn http2_is_answered_200_without_http1_headers() {
        let (resp, fut) = upgrade(&mut h2(Some("websocket"))).unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert!(fut.is_http2());
        for h in ["upgrade", "connection", "sec-websocket-accept"] {
            assert!(!resp.headers().contains_key(h), "{h}");
        }
    }

    #[test]
    fn refusals_carry_the_status_and_no_http1_headers_over_http2() {
        let refusal = upgrade(&mut h2(Some("chat"))).unwrap_err();
        assert_eq!(refusal.status(), StatusCode::BAD_REQUEST);
        assert!(matches!(
            refusal.error(),
            Error::Handshake(HandshakeError::BadHeader {
                name: ":protocol",
                ..
            })
        ));
        let resp = refusal.into_response();
        assert!(!resp.headers().contains_key("connection"));

        let mut old = h2(Some("websocket"));
        old.headers_mut()
            .insert("sec-websocket-version", HeaderValue::from_static("8"));
        let refusal = upgrade(&mut old).unwrap_err();
        assert_eq!(refusal.status(), StatusCode::UPGRADE_REQUIRED);
        let resp = refusal.into_response();
        assert_eq!(resp.headers()["sec-websocket-version"], "13");
        assert!(!resp.headers().contains_key("upgrade"));

        // A GET over HTTP/2 is told to use CONNECT.
        let mut get = Request::get("https://example.com/ws")
            .version(Version::HTTP_2)
            .body(())
            .unwrap();
        can_upgrade(&mut get);
        let resp = upgrade(&mut get).unwrap_err().into_response();
        assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(resp.headers()["allow"], "CONNECT");

        // Over HTTP/1.1 the same refusal keeps them.
        let mut old = h1();
        old.headers_mut()
            .insert("sec-websocket-version", HeaderValue::from_static("8"));
        let resp = upgrade(&mut old).unwrap_err().into_response();
        assert_eq!(resp.headers()["upgrade"], "websocket");
    }

    #[test]
    fn a_callback_refusal_is_sent_as_given() {
        let deny =
            |_: &crate::handshake::server::Request, _| -> std::result::Result<_, ErrorResponse> {
                let mut refusal = ErrorResponse::new(Some("go away".into()));
                *refusal.status_mut() = StatusCode::FORBIDDEN;
                Err(refusal)
            };
        let refusal = upgrade_hdr(&mut h1(), deny).unwrap_err();
        assert_eq!(refusal.status(), StatusCode::FORBIDDEN);
        assert!(matches!(
            refusal.error(),
            Error::Handshake(HandshakeError::Refused(s)) if *s == StatusCode::FORBIDDEN
        ));
        let body = refusal.into_response().into_body();
        let text = futures_util::FutureExt::now_or_never(http_body_util::BodyExt::collect(body))
            .unwrap()
            .unwrap()
            .to_bytes();
        assert_eq!(&text[..], b"go away");
    }

    #[test]
    fn a_connection_that_cannot_upgrade_is_a_500() {
        let mut req = h1();
        req.extensions_mut().remove::<OnUpgrade>();
        let refusal = upgrade(&mut req).unwrap_err();
        assert_eq!(refusal.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(refusal.to_string().contains("with_upgrades"), "{refusal}");
    }

    #[test]
    fn a_bad_config_is_a_500_before_anything_else() {
        let config = Config::default().max_frame_size(0);
        let refusal = upgrade_with_config(&mut h1(), config).unwrap_err();
        assert_eq!(refusal.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }
}
