//! The client over HTTP/2 (feature `http2`): WebSockets as extended CONNECT
//! streams (RFC 8441), several on one connection.
//!
//! - [`connect_async_http2`] opens one WebSocket the way a browser does:
//!   over TLS it offers ALPN `h2` and `http/1.1`; when the server picks
//!   HTTP/2 and advertises `SETTINGS_ENABLE_CONNECT_PROTOCOL`, the WebSocket
//!   is an HTTP/2 stream, and otherwise it falls back to an HTTP/1.1
//!   upgrade. For `ws://` it tries HTTP/2 with prior knowledge (h2c) first.
//! - [`Http2Connection`] is one HTTP/2 connection on which
//!   [`websocket`](Http2Connection::websocket) opens as many WebSockets as
//!   the server's stream limit allows, each an independent
//!   [`WebSocketStream`]. It refuses clearly when the server does not
//!   support WebSockets over HTTP/2.
//!
//! ```no_run
//! use futures_util::{SinkExt, StreamExt};
//! use wavesock::Message;
//! use wavesock::http2::Http2Connection;
//!
//! # async fn run() -> wavesock::Result<()> {
//! let conn = Http2Connection::connect("wss://example.com/", wavesock::Config::default()).await?;
//! let (mut chat, _) = conn.websocket("wss://example.com/chat").await?;
//! let (mut feed, _) = conn.websocket("wss://example.com/feed").await?;
//! chat.send(Message::text("hello")).await?;
//! let update = feed.next().await;
//! # Ok(()) }
//! ```

mod stream;

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use h2::client::SendRequest;
use http::Response;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

pub use self::stream::Http2Stream;
use self::stream::io_error;
use crate::client::connect::Alpn;
use crate::client::{ClientResponse, MaybeTlsStream};
use crate::config::Config;
use crate::deadline::{after, within};
use crate::error::{ConnectError, Error, HandshakeError, Result};
use crate::handshake::client::answer::with_body;
use crate::handshake::client::target::{Handshake, Target, check_uri, is_secure};
use crate::handshake::client::{
    IntoClientRequest, check_extended_connect_response, prepare_extended_connect,
};
use crate::negotiated::Negotiated;
use crate::proto::Role;
use crate::stream::WebSocketStream;

/// Receive window per stream: what one WebSocket may have in flight toward
/// us before it reads. h2 buffers up to this much per stream that is not
/// read, so it is also the memory bound per idle-reading WebSocket.
const STREAM_WINDOW: u32 = 256 * 1024;
/// Receive window of the whole connection, shared by its streams.
const CONNECTION_WINDOW: u32 = 1024 * 1024;

/// One HTTP/2 connection to a server, on which WebSockets open as streams.
///
/// Cheap to clone: clones share the connection. The connection is driven by
/// a task of its own and closes when every clone and every WebSocket opened
/// on it is gone.
#[derive(Clone)]
pub struct Http2Connection {
    send: SendRequest<Bytes>,
    config: Config,
    websockets: bool,
    /// What the connection was opened to; `None` on a stream the caller
    /// opened ([`Http2Connection::handshake`]), of which it knows neither.
    origin: Option<Origin>,
}

/// The scheme and server an HTTP/2 connection was opened to, which every
/// WebSocket on it must name: a `wss://` request on a cleartext connection
/// would go out unencrypted, and one naming another server would be sent to
/// this one, which is not the server it names.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Origin {
    /// TLS (`wss://`), or h2c (`ws://`).
    secure: bool,
    /// The host and port as `:authority` carries them (the port left out
    /// when it is the scheme's default).
    authority: String,
}

impl Origin {
    /// The origin of a `ws://` or `wss://` URL.
    fn of(uri: &http::Uri) -> Result<Origin, HandshakeError> {
        match check_uri(uri, Handshake::ExtendedConnect)? {
            Target {
                secure: Some(secure),
                authority: Some(authority),
            } => Ok(Origin { secure, authority }),
            // check_uri gives both for every ws:// and wss:// URL, the only
            // ones it lets through for extended CONNECT.
            _ => Err(HandshakeError::InvalidUrl(
                "an HTTP/2 connection needs a ws:// or wss:// URL with a host".into(),
            )),
        }
    }

    /// Refuses an extended CONNECT request (its URI `http://` or
    /// `https://`, as `prepare_extended_connect` makes it) for another
    /// origin. Hosts compare in any case, as DNS names do.
    fn admit(&self, request: &http::Uri) -> Result<(), HandshakeError> {
        let secure = request.scheme_str() == Some("https");
        let authority = request.authority().map_or("", |a| a.as_str());
        if secure == self.secure && authority.eq_ignore_ascii_case(&self.authority) {
            return Ok(());
        }
        let ws = |secure| if secure { "wss" } else { "ws" };
        let how = match self.secure {
            true => "over TLS",
            false => "in cleartext (h2c)",
        };
        Err(HandshakeError::InvalidUrl(format!(
            "{}://{authority}{}: this HTTP/2 connection is to {}://{} {how}; a WebSocket on it must name the same scheme, host and port",
            ws(secure),
            request.path(),
            ws(self.secure),
            self.authority,
        )))
    }
}

impl std::fmt::Debug for Http2Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Http2Connection")
            .field("supports_websockets", &self.websockets)
            .finish_non_exhaustive()
    }
}

impl Http2Connection {
    /// Opens an HTTP/2 connection to the server of `url` (`wss://`: TLS with
    /// ALPN `h2`; `ws://`: h2c with prior knowledge), through the proxy of
    /// [`Config::proxy`] if any, within [`Config::connect_timeout`].
    ///
    /// Fails with [`ConnectError::Http2NotNegotiated`] when a TLS server
    /// picks another protocol. The path of `url` is not used.
    pub async fn connect<R: IntoClientRequest>(url: R, config: Config) -> Result<Self> {
        #[cfg(feature = "__tls")]
        let tls = None;
        #[cfg(not(feature = "__tls"))]
        let tls = ();
        Self::connect_inner(url, config, tls).await
    }

    /// Like [`connect`](Self::connect), securing `wss://` with the given
    /// [`Connector`](crate::Connector): a rustls configuration's ALPN list
    /// is replaced by `h2`; a native-tls connector offers what it was built
    /// with, so build it with `request_alpns(&["h2"])`.
    #[cfg(feature = "__tls")]
    pub async fn connect_tls<R: IntoClientRequest>(
        url: R,
        config: Config,
        connector: Option<crate::Connector>,
    ) -> Result<Self> {
        Self::connect_inner(url, config, connector).await
    }

    async fn connect_inner<R: IntoClientRequest>(
        url: R,
        config: Config,
        tls: crate::client::connect::Tls,
    ) -> Result<Self> {
        config.validate()?;
        let request = url.into_client_request()?;
        crate::client::connect::check_scheme(request.uri())?;
        let origin = Origin::of(request.uri())?;
        let io = crate::client::connect::open(request.uri(), &config, tls, Alpn::H2Only).await?;
        if is_secure(request.uri()) && !io.is_h2() {
            return Err(ConnectError::Http2NotNegotiated.into());
        }
        let mut connection = Self::handshake(io, config).await?;
        connection.origin = Some(origin);
        Ok(connection)
    }

    /// Speaks HTTP/2 over a stream you opened: h2c over TCP or a Unix
    /// socket, or TLS on which you negotiated `h2`. Waits (within
    /// [`Config::handshake_timeout`]) until the server's settings have
    /// arrived, so that [`supports_websockets`](Self::supports_websockets)
    /// is known.
    ///
    /// Such a connection knows neither the server's name nor whether the
    /// stream is encrypted, so [`websocket`](Self::websocket) sends each
    /// request's scheme and authority as given: name the server at the
    /// other end of `io`, and `wss://` only over TLS.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// // A peer that does not speak HTTP/2 is a clear error, not a hang.
    /// let (client, mut server) = tokio::io::duplex(1024);
    /// tokio::spawn(async move {
    ///     use tokio::io::AsyncWriteExt;
    ///     server.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await
    /// });
    /// let config = wavesock::Config::default();
    /// assert!(wavesock::http2::Http2Connection::handshake(client, config).await.is_err());
    /// # }
    /// ```
    pub async fn handshake<S>(io: S, config: Config) -> Result<Self>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        config.validate()?;
        let max_header_list = u32::try_from(config.handshake.max_size).unwrap_or(u32::MAX);
        let deadline = after(config.handshake.timeout);
        let opening = async {
            let (send, mut connection) = h2::client::Builder::new()
                .initial_window_size(STREAM_WINDOW)
                .initial_connection_window_size(CONNECTION_WINDOW)
                .max_header_list_size(max_header_list)
                .enable_push(false)
                .handshake::<_, Bytes>(io)
                .await
                .map_err(io_error)?;
            let mut ping = connection
                .ping_pong()
                .expect("a new connection hands out its ping_pong");
            tokio::spawn(async move {
                // Ends when every handle and stream is dropped, or on error;
                // the streams see the error themselves.
                let _ = connection.await;
            });
            // The server's SETTINGS is the first frame it sends, so once our
            // PING comes back its settings have been applied.
            ping.ping(h2::Ping::opaque()).await.map_err(io_error)?;
            Ok::<_, Error>(send)
        };
        let send = within(deadline, opening)
            .await
            .ok_or(HandshakeError::Timeout)??;
        let websockets = send.is_extended_connect_protocol_enabled();
        Ok(Http2Connection {
            send,
            config,
            websockets,
            origin: None,
        })
    }

    /// Whether the server advertised `SETTINGS_ENABLE_CONNECT_PROTOCOL`:
    /// without it, [`websocket`](Self::websocket) refuses.
    pub fn supports_websockets(&self) -> bool {
        // The server may switch it on in a later SETTINGS frame.
        self.websockets || self.send.is_extended_connect_protocol_enabled()
    }

    /// Opens a WebSocket as a new stream on this connection, with the
    /// connection's [`Config`]. `request` is a `ws://` or `wss://` URL or an
    /// [`http::Request`] with one (headers such as `Sec-WebSocket-Protocol`
    /// or cookies are sent along).
    ///
    /// On a connection from [`connect`](Self::connect) or `connect_tls`
    /// (with a TLS feature), the URL must name what was
    /// connected to: `wss://` on a TLS connection and `ws://` on an h2c one,
    /// and the same host (in any case) and port (an omitted default port
    /// and the port written out are the same). Any other URL is refused
    /// with [`HandshakeError::InvalidUrl`] before anything is sent: a
    /// `wss://` URL on a cleartext connection would be sent unencrypted,
    /// and another host's to a server that is not that host. On a
    /// connection from [`handshake`](Self::handshake), the URL's scheme and
    /// authority are sent as given.
    ///
    /// Refused with [`ConnectError::Http2WebSocketsDisabled`] if the server
    /// did not advertise support; a status other than 2xx is
    /// [`HandshakeError::UnexpectedStatus`].
    pub async fn websocket<R: IntoClientRequest>(
        &self,
        request: R,
    ) -> Result<(WebSocketStream<Http2Stream>, ClientResponse)> {
        self.websocket_with_config(request, self.config.clone())
            .await
    }

    /// Like [`websocket`](Self::websocket), with a [`Config`] for this
    /// WebSocket (limits, deflate, keepalive).
    pub async fn websocket_with_config<R: IntoClientRequest>(
        &self,
        request: R,
        config: Config,
    ) -> Result<(WebSocketStream<Http2Stream>, ClientResponse)> {
        config.validate()?;
        let (stream, response, negotiated) = self.open(request, &config).await?;
        let ws = WebSocketStream::from_raw_socket(stream, Role::Client, config)?;
        Ok((negotiated.apply(ws)?, response))
    }

    /// Sends the extended CONNECT and checks the answer.
    async fn open<R: IntoClientRequest>(
        &self,
        request: R,
        config: &Config,
    ) -> Result<(Http2Stream, ClientResponse, Negotiated)> {
        let mut request = prepare_extended_connect(request.into_client_request()?)?;
        if let Some(origin) = &self.origin {
            origin.admit(request.uri())?;
        }
        if !self.supports_websockets() {
            return Err(ConnectError::Http2WebSocketsDisabled.into());
        }
        Negotiated::offer(config, &mut request);
        let mut sent = request.clone();
        sent.extensions_mut()
            .insert(h2::ext::Protocol::from_static("websocket"));
        let deadline = after(config.handshake.timeout);
        let exchange = async {
            let mut send = self.send.clone().ready().await.map_err(io_error)?;
            let (response, send_stream) = send.send_request(sent, false).map_err(io_error)?;
            let response = response.await.map_err(io_error)?;
            Ok::<_, Error>((response, send_stream))
        };
        let (response, send_stream) = within(deadline, exchange)
            .await
            .ok_or(HandshakeError::Timeout)??;
        let (parts, mut body) = response.into_parts();
        let head = Response::from_parts(parts, ());
        if !head.status().is_success() {
            let limit = config.handshake.max_size;
            let kept = within(deadline, read_body(&mut body, limit)).await;
            return Err(HandshakeError::UnexpectedStatus {
                status: head.status(),
                response: Box::new(with_body(&head, kept)),
            }
            .into());
        }
        check_extended_connect_response(&request, &head)?;
        let negotiated = Negotiated::client(config, head.headers())?;
        Ok((
            Http2Stream::new(send_stream, body),
            with_body(&head, None),
            negotiated,
        ))
    }
}

/// Up to `limit` bytes of a refusal's body, giving the credit back.
async fn read_body(body: &mut h2::RecvStream, limit: usize) -> Vec<u8> {
    let mut kept = Vec::new();
    while kept.len() < limit {
        match poll_fn(|cx| body.poll_data(cx)).await {
            Some(Ok(data)) => {
                let _ = body.flow_control().release_capacity(data.len());
                let room = limit - kept.len();
                kept.extend_from_slice(&data[..data.len().min(room)]);
            }
            _ => break,
        }
    }
    kept
}

/// The stream [`connect_async_http2`] returns: an HTTP/2 stream when the
/// server supports WebSockets over HTTP/2, else the HTTP/1.1 connection it
/// fell back to.
#[derive(Debug)]
#[non_exhaustive]
pub enum MaybeHttp2Stream {
    /// A stream on an HTTP/2 connection (RFC 8441).
    Http2(Http2Stream),
    /// A connection upgraded from HTTP/1.1 (RFC 6455).
    Http1(MaybeTlsStream<TcpStream>),
}

impl MaybeHttp2Stream {
    /// Whether the WebSocket runs over HTTP/2.
    pub fn is_http2(&self) -> bool {
        matches!(self, MaybeHttp2Stream::Http2(_))
    }
}

impl AsyncRead for MaybeHttp2Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeHttp2Stream::Http2(s) => Pin::new(s).poll_read(cx, buf),
            MaybeHttp2Stream::Http1(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for MaybeHttp2Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeHttp2Stream::Http2(s) => Pin::new(s).poll_write(cx, buf),
            MaybeHttp2Stream::Http1(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeHttp2Stream::Http2(s) => Pin::new(s).poll_flush(cx),
            MaybeHttp2Stream::Http1(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeHttp2Stream::Http2(s) => Pin::new(s).poll_shutdown(cx),
            MaybeHttp2Stream::Http1(s) => Pin::new(s).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeHttp2Stream::Http2(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            MaybeHttp2Stream::Http1(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            MaybeHttp2Stream::Http2(s) => s.is_write_vectored(),
            MaybeHttp2Stream::Http1(s) => s.is_write_vectored(),
        }
    }
}

/// Opens a WebSocket over HTTP/2 when the server supports it (RFC 8441),
/// over HTTP/1.1 otherwise, with the default [`Config`]: the
/// [`connect_async`](crate::connect_async) of browsers' behaviour.
///
/// For `wss://`, TLS offers ALPN `h2` and `http/1.1`: if the server picks
/// `http/1.1`, the same connection is upgraded; if it picks `h2` without
/// advertising `SETTINGS_ENABLE_CONNECT_PROTOCOL`, a second connection
/// offering only `http/1.1` is opened. For `ws://`, h2c with prior
/// knowledge is tried first and a server that does not answer it in HTTP/2
/// gets a fresh HTTP/1.1 connection. [`MaybeHttp2Stream::is_http2`] says
/// which it was. Each call opens its own connection; to share one among
/// several WebSockets, use [`Http2Connection`].
///
/// ```no_run
/// # async fn run() -> wavesock::Result<()> {
/// let (ws, _response) = wavesock::http2::connect_async_http2("wss://example.com/chat").await?;
/// println!("over HTTP/2: {}", ws.get_ref().is_http2());
/// # Ok(()) }
/// ```
pub async fn connect_async_http2<R: IntoClientRequest>(
    request: R,
) -> Result<(WebSocketStream<MaybeHttp2Stream>, ClientResponse)> {
    connect_async_http2_with_config(request, Config::default()).await
}

/// Like [`connect_async_http2`], with your own [`Config`].
pub async fn connect_async_http2_with_config<R: IntoClientRequest>(
    request: R,
    config: Config,
) -> Result<(WebSocketStream<MaybeHttp2Stream>, ClientResponse)> {
    #[cfg(feature = "__tls")]
    let tls = None;
    #[cfg(not(feature = "__tls"))]
    let tls = ();
    connect_inner(request, config, tls).await
}

/// Like [`connect_async_http2_with_config`], securing `wss://` with the
/// given [`Connector`](crate::Connector): a rustls configuration's ALPN
/// list is replaced for each attempt; a native-tls connector offers what
/// it was built with, and one offering `h2` makes the HTTP/1.1 fallback
/// fail with `ConnectError::UnwantedHttp2`.
#[cfg(feature = "__tls")]
pub async fn connect_async_http2_tls_with_config<R: IntoClientRequest>(
    request: R,
    config: Config,
    connector: Option<crate::Connector>,
) -> Result<(WebSocketStream<MaybeHttp2Stream>, ClientResponse)> {
    connect_inner(request, config, connector).await
}

// Without a TLS feature, the TLS choice is `()`.
#[cfg_attr(not(feature = "__tls"), allow(clippy::unit_arg, clippy::clone_on_copy))]
async fn connect_inner<R: IntoClientRequest>(
    request: R,
    config: Config,
    tls: crate::client::connect::Tls,
) -> Result<(WebSocketStream<MaybeHttp2Stream>, ClientResponse)> {
    use crate::client::connect::{check_scheme, open};
    config.validate()?;
    let request = request.into_client_request()?;
    check_scheme(request.uri())?;
    // Checked before any connection is made.
    prepare_extended_connect(request.clone())?;
    let secure = is_secure(request.uri());
    let io = open(request.uri(), &config, tls.clone(), Alpn::H2OrHttp1).await?;
    if !secure || io.is_h2() {
        match Http2Connection::handshake(io, config.clone()).await {
            Ok(conn) if conn.supports_websockets() => {
                let (stream, response, negotiated) = conn.open(request, &config).await?;
                let stream = MaybeHttp2Stream::Http2(stream);
                let ws = WebSocketStream::from_raw_socket(stream, Role::Client, config)?;
                return Ok((negotiated.apply(ws)?, response));
            }
            // The server speaks HTTP/2 without WebSockets on it, or (h2c)
            // does not speak HTTP/2 at all: ask again in HTTP/1.1.
            Ok(_) => {}
            Err(e) if secure => return Err(e),
            Err(_) => {}
        }
        let io = open(request.uri(), &config, tls, Alpn::Http1Only).await?;
        return crate::client_async_with_config(request, MaybeHttp2Stream::Http1(io), config).await;
    }
    crate::client_async_with_config(request, MaybeHttp2Stream::Http1(io), config).await
}
