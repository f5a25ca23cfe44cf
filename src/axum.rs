//! An axum extractor for WebSockets served by wavesock (feature `axum`),
//! in the shape of `axum::extract::ws`: an application moves over by
//! changing its imports from `axum::extract::ws` (and
//! `axum::extract::WebSocketUpgrade`, the same extractor) to
//! `wavesock::axum`, with axum's `ws` feature off so that a path left
//! behind fails as an unresolved import (see MIGRATING.md).
//!
//! The same route serves HTTP/1.1 upgrades and HTTP/2 extended CONNECT
//! requests (RFC 8441; `axum::serve` advertises support). Register it with
//! `any(handler)` (or `get(...).connect(...)`), since HTTP/2 WebSockets
//! arrive as `CONNECT`. Subprotocols, limits and permessage-deflate are
//! negotiated as by [`accept_async`](crate::accept_async).
//!
//! ```no_run
//! // Needs axum.
//! use axum::{Router, routing::any, response::Response};
//! use wavesock::axum::{Message, WebSocket, WebSocketUpgrade};
//!
//! async fn handler(ws: WebSocketUpgrade) -> Response {
//!     ws.protocols(["chat"]).on_upgrade(echo)
//! }
//!
//! async fn echo(mut socket: WebSocket) {
//!     while let Some(Ok(msg)) = socket.recv().await {
//!         if let Message::Text(_) | Message::Binary(_) = msg {
//!             if socket.send(msg).await.is_err() {
//!                 return;
//!             }
//!         }
//!     }
//! }
//!
//! # async fn run() {
//! let app: Router = Router::new().route("/ws", any(handler));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await.unwrap();
//! axum::serve(listener, app).await.unwrap();
//! # }
//! ```
//!
//! Where it differs from axum's own, it fails at compile time rather than
//! behaving differently: errors are [`crate::Error`], close codes are
//! [`u16`] as in axum, and `read_buffer_size` / `max_write_buffer_size`
//! do not exist (wavesock sizes its read buffer per frame and applies
//! backpressure at [`write_buffer_size`](WebSocketUpgrade::write_buffer_size)).
//! [`WebSocketUpgrade::config`] takes a whole [`Config`], deflate included.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use axum_core::body::Body;
use axum_core::extract::FromRequestParts;
use axum_core::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::{Sink, Stream};
use http::header::{self, HeaderMap, HeaderValue};
use http::request::Parts;
use http::{Request, StatusCode, Version};
use hyper::upgrade::OnUpgrade;

pub use crate::Utf8Bytes;
use crate::config::Config;
use crate::error::{Error, HandshakeError};
use crate::handshake::server::{Accepting, error_response, select_subprotocol};
use crate::negotiated::Negotiated;
use crate::upgrade::HyperWebSocket;

/// Extractor for a WebSocket upgrade: checks the request, then
/// [`on_upgrade`](Self::on_upgrade) answers it and runs your handler on the
/// WebSocket. Works on HTTP/1.1 (`GET` with `Upgrade`) and HTTP/2
/// (extended `CONNECT`) requests.
pub struct WebSocketUpgrade<F = DefaultOnFailedUpgrade> {
    config: Config,
    /// The request, for the callback-free negotiation done at the end.
    headers: HeaderMap,
    /// The checked request and the response it is owed: `101` with the
    /// accept key (HTTP/1.1), or `200` (HTTP/2).
    accepting: Accepting,
    selected_protocol: Option<HeaderValue>,
    on_upgrade: OnUpgrade,
    on_failed_upgrade: F,
}

impl<F> fmt::Debug for WebSocketUpgrade<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebSocketUpgrade")
            .field("config", &self.config)
            .field("http2", &self.is_http2())
            .field("selected_protocol", &self.selected_protocol)
            .finish_non_exhaustive()
    }
}

impl<F> WebSocketUpgrade<F> {
    /// The whole [`Config`]: limits, keepalive, permessage-deflate.
    /// Message pieces ([`Config::stream_messages`]) are not available
    /// through [`WebSocket`]; use [`WebSocket::into_inner`] for that.
    pub fn config(mut self, config: Config) -> Self {
        self.config = config.stream_messages(false);
        self
    }

    /// The largest frame accepted ([`Config::max_frame_size`]).
    pub fn max_frame_size(mut self, max: usize) -> Self {
        self.config = self.config.max_frame_size(max);
        self
    }

    /// The largest message accepted ([`Config::max_message_size`]).
    pub fn max_message_size(mut self, max: usize) -> Self {
        self.config = self.config.max_message_size(max);
        self
    }

    /// How much may wait unsent before `send` waits for the peer
    /// ([`Config::max_backpressure`]).
    pub fn write_buffer_size(mut self, size: usize) -> Self {
        self.config = self.config.max_backpressure(size);
        self
    }

    /// Accept frames the client did not mask, against RFC 6455
    /// ([`Config::accept_unmasked_frames`]).
    pub fn accept_unmasked_frames(mut self, accept: bool) -> Self {
        self.config = self.config.accept_unmasked_frames(accept);
        self
    }

    /// The subprotocols the server speaks, most preferred first: the first
    /// the client offered is selected and named in the response.
    pub fn protocols<I>(mut self, protocols: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<std::borrow::Cow<'static, str>>,
    {
        let supported: Vec<std::borrow::Cow<'static, str>> =
            protocols.into_iter().map(Into::into).collect();
        let names: Vec<&str> = supported.iter().map(|p| p.as_ref()).collect();
        let head = head_with(&self.headers);
        self.selected_protocol =
            select_subprotocol(&head, &names).and_then(|p| HeaderValue::from_str(p).ok());
        self
    }

    /// The subprotocols the client offered, in its order.
    pub fn requested_protocols(&self) -> impl Iterator<Item = &HeaderValue> {
        self.headers.get_all(header::SEC_WEBSOCKET_PROTOCOL).iter()
    }

    /// Selects a subprotocol yourself; it should be one the client offered.
    pub fn set_selected_protocol(&mut self, protocol: HeaderValue) {
        self.selected_protocol = Some(protocol);
    }

    /// The subprotocol selected so far.
    pub fn selected_protocol(&self) -> Option<&HeaderValue> {
        self.selected_protocol.as_ref()
    }

    /// Whether the request came over HTTP/2 (extended CONNECT).
    pub fn is_http2(&self) -> bool {
        self.accepting.is_extended_connect()
    }

    /// What to do when hyper cannot hand over the connection after the
    /// response was sent (the client went away): by default nothing.
    pub fn on_failed_upgrade<C: OnFailedUpgrade>(self, callback: C) -> WebSocketUpgrade<C> {
        WebSocketUpgrade {
            config: self.config,
            headers: self.headers,
            accepting: self.accepting,
            selected_protocol: self.selected_protocol,
            on_upgrade: self.on_upgrade,
            on_failed_upgrade: callback,
        }
    }

    /// Answers the request (`101`, or `200` over HTTP/2) and, once the
    /// connection is handed over, runs `callback` with the WebSocket on a
    /// task of its own.
    #[must_use = "the response must be returned from the handler"]
    pub fn on_upgrade<C, Fut>(self, callback: C) -> Response
    where
        C: FnOnce(WebSocket) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
        F: OnFailedUpgrade,
    {
        let http2 = self.is_http2();
        let WebSocketUpgrade {
            config,
            headers,
            mut accepting,
            selected_protocol,
            on_upgrade,
            on_failed_upgrade,
        } = self;
        if let Err(e) = config.validate() {
            let mut response =
                (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response();
            if http2 {
                *response.version_mut() = Version::HTTP_2;
            }
            return response;
        }
        accepting.negotiate(&headers, config.deflate.as_ref());
        let mut response = accepting.required().clone();
        if let Some(protocol) = &selected_protocol {
            response
                .headers_mut()
                .insert(header::SEC_WEBSOCKET_PROTOCOL, protocol.clone());
        }
        accepting.respond(&mut response);
        let negotiated = Negotiated::from(accepting);
        tokio::spawn(async move {
            match crate::upgrade::websocket(on_upgrade.await, config, negotiated) {
                Ok(inner) => {
                    callback(WebSocket {
                        inner,
                        protocol: selected_protocol,
                    })
                    .await
                }
                Err(e) => on_failed_upgrade.call(e),
            }
        });
        response.map(|()| Body::empty())
    }
}

/// A request head carrying `headers`, for the handshake's checks.
fn head_with(headers: &HeaderMap) -> Request<()> {
    let mut head = Request::new(());
    *head.headers_mut() = headers.clone();
    head
}

impl<S: Send + Sync> FromRequestParts<S> for WebSocketUpgrade<DefaultOnFailedUpgrade> {
    type Rejection = WebSocketUpgradeRejection;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let http2 = parts.version >= Version::HTTP_2;
        let reject = |error| WebSocketUpgradeRejection {
            why: Why::Handshake(error),
            http2,
        };
        let mut head = Request::new(());
        *head.method_mut() = parts.method.clone();
        *head.uri_mut() = parts.uri.clone();
        *head.version_mut() = parts.version;
        *head.headers_mut() = parts.headers.clone();
        let protocol = crate::upgrade::protocol_in(&parts.extensions);
        let accepting = Accepting::new(&head, protocol).map_err(reject)?;
        let on_upgrade =
            parts
                .extensions
                .remove::<OnUpgrade>()
                .ok_or(WebSocketUpgradeRejection {
                    why: Why::NotUpgradable,
                    http2,
                })?;
        Ok(WebSocketUpgrade {
            config: Config::default(),
            headers: head.into_parts().0.headers,
            accepting,
            selected_protocol: None,
            on_upgrade,
            on_failed_upgrade: DefaultOnFailedUpgrade,
        })
    }
}

/// What [`WebSocketUpgrade::on_upgrade`] does when the connection cannot
/// be handed over. Implemented for `FnOnce(wavesock::Error)` closures.
pub trait OnFailedUpgrade: Send + 'static {
    /// Called with why it failed.
    fn call(self, error: Error);
}

impl<F> OnFailedUpgrade for F
where
    F: FnOnce(Error) + Send + 'static,
{
    fn call(self, error: Error) {
        self(error)
    }
}

/// The default [`OnFailedUpgrade`]: does nothing (with the `tracing`
/// feature, logs at debug level).
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct DefaultOnFailedUpgrade;

impl OnFailedUpgrade for DefaultOnFailedUpgrade {
    fn call(self, _error: Error) {
        #[cfg(feature = "tracing")]
        tracing::debug!(error = %_error, "websocket upgrade failed");
    }
}

#[derive(Debug)]
enum Why {
    Handshake(HandshakeError),
    NotUpgradable,
}

/// Why [`WebSocketUpgrade`] rejected a request; answers with the status
/// [`accept_async`](crate::accept_async) would: `400` for a malformed
/// upgrade, `405` for a wrong method, `426` for a WebSocket version other
/// than 13 or a connection hyper cannot upgrade.
#[derive(Debug)]
pub struct WebSocketUpgradeRejection {
    why: Why,
    http2: bool,
}

impl WebSocketUpgradeRejection {
    /// The status the rejection answers with.
    pub fn status(&self) -> StatusCode {
        match &self.why {
            Why::Handshake(e) => e.status().unwrap_or(StatusCode::BAD_REQUEST),
            Why::NotUpgradable => StatusCode::UPGRADE_REQUIRED,
        }
    }

    /// The text of the response body.
    pub fn body_text(&self) -> String {
        self.to_string()
    }

    /// The handshake rule the request broke, if that is why.
    pub fn handshake_error(&self) -> Option<&HandshakeError> {
        match &self.why {
            Why::Handshake(e) => Some(e),
            Why::NotUpgradable => None,
        }
    }
}

impl fmt::Display for WebSocketUpgradeRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.why {
            Why::Handshake(e) => e.fmt(f),
            Why::NotUpgradable => f.write_str(
                "this connection cannot be upgraded (hyper put no upgrade handle in the request)",
            ),
        }
    }
}

impl std::error::Error for WebSocketUpgradeRejection {}

impl IntoResponse for WebSocketUpgradeRejection {
    fn into_response(self) -> Response {
        let mut response = match &self.why {
            Why::Handshake(e) => match error_response(e) {
                Some(resp) => resp.map(Body::from),
                None => (self.status(), self.body_text()).into_response(),
            },
            Why::NotUpgradable => (self.status(), self.body_text()).into_response(),
        };
        crate::upgrade::strip_http1_headers(&mut response, self.http2);
        response
    }
}

/// A WebSocket served through [`WebSocketUpgrade`], as axum's `WebSocket`:
/// [`recv`](Self::recv), [`send`](Self::send), a `Stream` of [`Message`]s
/// and a `Sink` for them (`StreamExt::split` gives two halves). Pings are
/// answered for you; you see them too.
#[derive(Debug)]
pub struct WebSocket {
    inner: HyperWebSocket,
    protocol: Option<HeaderValue>,
}

impl WebSocket {
    /// The next message; `None` once the connection is closed.
    pub async fn recv(&mut self) -> Option<Result<Message, Error>> {
        futures_util::StreamExt::next(self).await
    }

    /// Sends a message and waits until it is written.
    pub async fn send(&mut self, msg: Message) -> Result<(), Error> {
        futures_util::SinkExt::send(&mut self.inner, msg.into()).await
    }

    /// The subprotocol selected, if any.
    pub fn protocol(&self) -> Option<&HeaderValue> {
        self.protocol.as_ref()
    }

    /// The wavesock [`WebSocketStream`](crate::WebSocketStream) underneath: its
    /// [`split`](crate::WebSocketStream::split) halves, prepared messages,
    /// streaming and close methods.
    pub fn into_inner(self) -> HyperWebSocket {
        self.inner
    }
}

impl Stream for WebSocket {
    type Item = Result<Message, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            return match ready!(Pin::new(&mut self.inner).poll_next(cx)) {
                Some(Ok(msg)) => match Message::from_wavesock(msg) {
                    Some(msg) => Poll::Ready(Some(Ok(msg))),
                    // Pieces are switched off by `config`.
                    None => continue,
                },
                Some(Err(e)) => Poll::Ready(Some(Err(e))),
                None => Poll::Ready(None),
            };
        }
    }
}

impl Sink<Message> for WebSocket {
    type Error = Error;

    fn poll_ready(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        Pin::new(&mut self.inner).poll_ready(cx)
    }

    fn start_send(mut self: Pin<&mut Self>, item: Message) -> Result<(), Error> {
        Pin::new(&mut self.inner).start_send(item.into())
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        Pin::new(&mut self.inner).poll_close(cx)
    }
}

/// A close status code, a plain `u16` as in axum (see [`close_code`]).
pub type CloseCode = u16;

/// A close frame as axum spells it: a [`CloseCode`] and a reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloseFrame {
    /// The status code.
    pub code: CloseCode,
    /// Why, for humans; at most 123 bytes.
    pub reason: Utf8Bytes,
}

/// The close codes of RFC 6455 §7.4.1 (and IANA's registry) as `u16`s,
/// under the names axum uses.
pub mod close_code {
    /// 1000: the purpose of the connection was fulfilled.
    pub const NORMAL: u16 = 1000;
    /// 1001: going away (server shutdown, page left).
    pub const AWAY: u16 = 1001;
    /// 1002: a protocol error.
    pub const PROTOCOL: u16 = 1002;
    /// 1003: a kind of data that cannot be accepted.
    pub const UNSUPPORTED: u16 = 1003;
    /// 1005: no status code was present (never sent).
    pub const STATUS: u16 = 1005;
    /// 1006: closed without a close frame (never sent).
    pub const ABNORMAL: u16 = 1006;
    /// 1007: data inconsistent with the message type (bad UTF-8).
    pub const INVALID: u16 = 1007;
    /// 1008: a message violating policy.
    pub const POLICY: u16 = 1008;
    /// 1009: a message too big to process.
    pub const SIZE: u16 = 1009;
    /// 1010: the client expected an extension the server did not agree to.
    pub const EXTENSION: u16 = 1010;
    /// 1011: an unexpected condition on the server.
    pub const ERROR: u16 = 1011;
    /// 1012: the server is restarting.
    pub const RESTART: u16 = 1012;
    /// 1013: try again later.
    pub const AGAIN: u16 = 1013;
}

/// A WebSocket message as axum spells it: five variants, text as
/// [`Utf8Bytes`], close codes as `u16`. Converts to and from
/// [`crate::Message`] without copying.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// A text message.
    Text(Utf8Bytes),
    /// A binary message.
    Binary(Bytes),
    /// A ping; received ones are answered for you.
    Ping(Bytes),
    /// A pong.
    Pong(Bytes),
    /// A close frame, with its code and reason if it carried one.
    Close(Option<CloseFrame>),
}

impl Message {
    fn from_wavesock(msg: crate::Message) -> Option<Message> {
        Some(match msg {
            crate::Message::Text(t) => Message::Text(t),
            crate::Message::Binary(b) => Message::Binary(b),
            crate::Message::Ping(b) => Message::Ping(b),
            crate::Message::Pong(b) => Message::Pong(b),
            crate::Message::Close(frame) => Message::Close(frame.map(|f| CloseFrame {
                code: f.code.into(),
                reason: f.reason,
            })),
            crate::Message::Frame(_) => return None,
        })
    }

    /// A text message.
    pub fn text<S: Into<Utf8Bytes>>(string: S) -> Message {
        Message::Text(string.into())
    }

    /// A binary message.
    pub fn binary<B: Into<Bytes>>(bin: B) -> Message {
        Message::Binary(bin.into())
    }

    /// The payload as bytes (a close frame's reason).
    pub fn into_data(self) -> Bytes {
        crate::Message::from(self).into_data()
    }

    /// The text, or an error for anything but a text message.
    pub fn into_text(self) -> Result<Utf8Bytes, Error> {
        match self {
            Message::Text(t) => Ok(t),
            other => Ok(crate::Message::from(other).into_text()?),
        }
    }

    /// The text as `&str`, or an error for anything but a text message.
    pub fn to_text(&self) -> Result<&str, Error> {
        match self {
            Message::Text(t) => Ok(t.as_str()),
            Message::Binary(b) | Message::Ping(b) | Message::Pong(b) => {
                Ok(std::str::from_utf8(b).map_err(crate::proto::Error::from)?)
            }
            Message::Close(Some(frame)) => Ok(frame.reason.as_str()),
            Message::Close(None) => Ok(""),
        }
    }
}

impl From<Message> for crate::Message {
    fn from(msg: Message) -> crate::Message {
        match msg {
            Message::Text(t) => crate::Message::Text(t),
            Message::Binary(b) => crate::Message::Binary(b),
            Message::Ping(b) => crate::Message::Ping(b),
            Message::Pong(b) => crate::Message::Pong(b),
            Message::Close(frame) => crate::Message::Close(frame.map(|f| crate::CloseFrame {
                code: f.code.into(),
                reason: f.reason,
            })),
        }
    }
}

impl From<String> for Message {
    fn from(s: String) -> Message {
        Message::Text(s.into())
    }
}

impl<'s> From<&'s str> for Message {
    fn from(s: &'s str) -> Message {
        Message::Text(s.into())
    }
}

impl<'b> From<&'b [u8]> for Message {
    fn from(b: &'b [u8]) -> Message {
        Message::Binary(Bytes::copy_from_slice(b))
    }
}

impl From<Bytes> for Message {
    fn from(b: Bytes) -> Message {
        Message::Binary(b)
    }
}

impl From<Vec<u8>> for Message {
    fn from(b: Vec<u8>) -> Message {
        Message::Binary(b.into())
    }
}

impl From<Message> for Vec<u8> {
    fn from(msg: Message) -> Vec<u8> {
        msg.into_data().to_vec()
    }
}
