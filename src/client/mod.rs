//! Connecting: the client's entry points, the opening handshake over TCP or
//! any stream.
//!
//! Inside, dependencies run one way: this module uses [`connect`] (opening
//! TCP, a proxy tunnel, TLS), which uses [`tls`] (one file per stack) and
//! [`transport`] ([`MaybeTlsStream`]); `alpn`, the ALPN offer, sits below
//! both; [`error`] ([`ConnectError`]) is used by all and uses none of them.

mod alpn;
pub(crate) mod connect;
#[cfg(feature = "__tls")]
pub mod tls;
mod transport;

pub use transport::MaybeTlsStream;

/// The connection [`connect_async`] makes: a [`WebSocketStream`] over TCP,
/// with TLS for `wss://` URLs. A name to write in your own signatures
/// instead of `WebSocketStream<MaybeTlsStream<TcpStream>>`.
///
/// ```no_run
/// use futures_util::SinkExt;
/// use wavesock::{ClientSender, ClientStream, Message};
///
/// async fn greet(tx: &mut ClientSender) -> wavesock::Result<()> {
///     tx.send(Message::text("hello")).await
/// }
///
/// # async fn run() -> wavesock::Result<()> {
/// let (ws, _): (ClientStream, _) = wavesock::connect_async("wss://example.com/").await?;
/// let (mut tx, _rx) = ws.split();
/// greet(&mut tx).await?;
/// # Ok(()) }
/// ```
pub type ClientStream = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// The sending half of a split [`ClientStream`].
pub type ClientSender = WebSocketSender<MaybeTlsStream<TcpStream>>;

/// The receiving half of a split [`ClientStream`].
pub type ClientReceiver = WebSocketReceiver<MaybeTlsStream<TcpStream>>;

use bytes::BytesMut;
use http::{Request, Response, StatusCode, header};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::config::Config;
use crate::deadline::{after, within};
use crate::error::{Error, HandshakeError, Result};
use crate::handshake::client::answer::with_body;
use crate::handshake::client::{
    IntoClientRequest, check_response, parse_response, prepare_request, write_request,
};
use crate::head::{HeadError, read_head};
use crate::negotiated::Negotiated;
use crate::proto::Role;
use crate::retry::Retrying;
use crate::stream::{WebSocketReceiver, WebSocketSender, WebSocketStream};

/// The server's answer to a successful handshake: status `101`, its headers
/// (`Sec-WebSocket-Protocol` names the chosen subprotocol, if any), no body.
pub type ClientResponse = Response<Option<Vec<u8>>>;

/// Opens a connection to a `ws://` or `wss://` URL and performs the
/// handshake, with the default [`Config`].
///
/// `request` is a URL or an [`http::Request`] with your own headers (see
/// [`IntoClientRequest`]). Returns the connection and the server's `101`
/// response. `wss://` needs a TLS feature: `native-tls`, or `rustls` with
/// a root store (`rustls-webpki-roots`, `rustls-native-roots` or
/// `rustls-platform-verifier`); else it is refused with
/// [`ConnectError::UnsupportedScheme`](crate::ConnectError::UnsupportedScheme) or
/// `ConnectError::NoRootCertificates`. With your own TLS configuration,
/// use `connect_async_tls_with_config`. Failures to resolve, connect,
/// get through a proxy or agree on TLS are [`Error::Connect`](crate::Error::Connect).
///
/// ```no_run
/// use futures_util::{SinkExt, StreamExt};
/// use wavesock::Message;
///
/// # async fn run() -> wavesock::Result<()> {
/// let (mut ws, response) = wavesock::connect_async("ws://127.0.0.1:9001/chat").await?;
/// println!("server said {}", response.status());
/// ws.send(Message::text("hello")).await?;
/// if let Some(reply) = ws.next().await {
///     println!("{:?}", reply?);
/// }
/// ws.close(None).await?;
/// # Ok(()) }
/// ```
pub async fn connect_async<R>(request: R) -> Result<(ClientStream, ClientResponse)>
where
    R: IntoClientRequest,
{
    connect_async_with_config(request, Config::default()).await
}

/// Like [`connect_async`], with your own [`Config`] (limits, the connect and
/// handshake timeouts, a [`proxy`](Config::proxy)).
///
/// ```no_run
/// use std::time::Duration;
/// use wavesock::Config;
///
/// # async fn run() -> wavesock::Result<()> {
/// let request = wavesock::http::Request::builder()
///     .uri("ws://127.0.0.1:9001/chat")
///     .header("Authorization", "Bearer secret")
///     .header("Sec-WebSocket-Protocol", "chat.v2, chat.v1")
///     .body(())
///     .unwrap();
/// let config = Config::default().connect_timeout(Some(Duration::from_secs(3)));
/// let (ws, response) = wavesock::connect_async_with_config(request, config).await?;
/// let chosen = response.headers().get("sec-websocket-protocol");
/// # Ok(()) }
/// ```
pub async fn connect_async_with_config<R>(
    request: R,
    config: Config,
) -> Result<(ClientStream, ClientResponse)>
where
    R: IntoClientRequest,
{
    config.validate()?;
    let request = request_to_connect(request)?;
    #[cfg(feature = "__tls")]
    let tls = None;
    #[cfg(not(feature = "__tls"))]
    let tls = ();
    let io = connect::open(request.uri(), &config, tls, connect::Alpn::None).await?;
    handshake(request, io, config).await
}

/// Like [`connect_async_with_config`], securing `wss://` with the given
/// [`Connector`](crate::Connector) (`None`: the built-in configuration from
/// the root store features). `ws://` URLs stay plain whatever the connector.
///
/// ```no_run
/// use wavesock::{Config, Connector};
///
/// # async fn run() -> wavesock::Result<()> {
/// // The stack the features choose, as `connect_async` would use it.
/// let connector = Connector::from_features()?;
/// let (ws, _) =
///     wavesock::connect_async_tls_with_config("wss://example.com/", Config::default(), Some(connector))
///         .await?;
/// # Ok(()) }
/// ```
#[cfg(feature = "__tls")]
pub async fn connect_async_tls_with_config<R>(
    request: R,
    config: Config,
    connector: Option<tls::Connector>,
) -> Result<(ClientStream, ClientResponse)>
where
    R: IntoClientRequest,
{
    config.validate()?;
    let request = request_to_connect(request)?;
    let io = connect::open(request.uri(), &config, connector, connect::Alpn::None).await?;
    handshake(request, io, config).await
}

/// The request for a connection `connect_async` opens: a scheme other than
/// `ws` or `wss` cannot be connected to ([`ConnectError::UnsupportedScheme`]),
/// then it is prepared as for any stream.
fn request_to_connect<R: IntoClientRequest>(request: R) -> Result<Request<()>> {
    let request = request.into_client_request()?;
    connect::check_scheme(request.uri())?;
    Ok(prepare_request(request)?)
}

/// Performs the client handshake over a stream you opened (TCP, TLS, a Unix
/// socket, a proxy tunnel), with the default [`Config`].
///
/// `request` is a URL or an [`http::Request`] (see [`IntoClientRequest`]);
/// with a bare path (`/chat`) give a `Host` header. The URL's scheme is not
/// acted on: the stream is yours. The request is completed by the rules of
/// [`prepare_request`](crate::handshake::client::prepare_request):
/// handshake headers you set by hand may stay (`Upgrade`, `Connection`
/// and `Sec-WebSocket-Version` are set again, a `Host` and a valid
/// `Sec-WebSocket-Key` are kept, a malformed key is an error). Bytes the
/// server sent right after its response are kept and decoded as frames.
///
/// ```no_run
/// # async fn run() -> wavesock::Result<()> {
/// let tcp = tokio::net::TcpStream::connect("127.0.0.1:9001").await?;
/// let (ws, response) = wavesock::client_async("ws://127.0.0.1:9001/", tcp).await?;
/// # Ok(()) }
/// ```
pub async fn client_async<R, S>(request: R, io: S) -> Result<(WebSocketStream<S>, ClientResponse)>
where
    R: IntoClientRequest,
    S: AsyncRead + AsyncWrite + Unpin,
{
    client_async_with_config(request, io, Config::default()).await
}

/// Like [`client_async`], with your own [`Config`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> wavesock::Result<()> {
/// # let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// # let addr = listener.local_addr()?;
/// # let server = tokio::spawn(async move {
/// #     let (tcp, _) = listener.accept().await?;
/// #     wavesock::accept_async(tcp).await.map(drop)
/// # });
/// // Any stream you opened: TCP here, a Unix socket or a tunnel alike.
/// let tcp = tokio::net::TcpStream::connect(addr).await?;
/// let request = wavesock::http::Request::builder()
///     .uri("/events")
///     .header("Host", "localhost")
///     .body(())
///     .unwrap();
/// // Messages up to 1 MiB; frames follow the message limit.
/// let config = wavesock::Config::default().max_message_size(1 << 20);
/// let (ws, _) = wavesock::client_async_with_config(request, tcp, config).await?;
/// # server.await.unwrap()?;
/// # Ok(()) }
/// ```
pub async fn client_async_with_config<R, S>(
    request: R,
    io: S,
    config: Config,
) -> Result<(WebSocketStream<S>, ClientResponse)>
where
    R: IntoClientRequest,
    S: AsyncRead + AsyncWrite + Unpin,
{
    config.validate()?;
    let request = prepare_request(request.into_client_request()?)?;
    let result = handshake(request, io, config).await;
    #[cfg(feature = "tracing")]
    match &result {
        Ok((_, response)) => {
            tracing::debug!(status = %response.status(), "websocket handshake completed")
        }
        Err(e) => tracing::debug!(error = %e, "websocket handshake failed"),
    }
    result
}

async fn handshake<S>(
    mut request: Request<()>,
    mut io: S,
    config: Config,
) -> Result<(WebSocketStream<S>, ClientResponse)>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    Negotiated::offer(&config, &mut request);
    let deadline = after(config.handshake.timeout);
    let mut buf = BytesMut::new();
    let (response, head_len) = within(
        deadline,
        send_and_read_head(&mut Retrying(&mut io), &request, &mut buf, &config),
    )
    .await
    .ok_or(HandshakeError::Timeout)??;
    let _ = buf.split_to(head_len);
    if response.status() != StatusCode::SWITCHING_PROTOCOLS {
        // Whatever arrives by the deadline, up to the cap, is the body.
        let limit = body_limit(&response, config.handshake.max_size);
        let _ = within(deadline, read_body(&mut Retrying(&mut io), &mut buf, limit)).await;
        let body = (limit > 0).then(|| buf[..buf.len().min(limit)].to_vec());
        return Err(HandshakeError::UnexpectedStatus {
            status: response.status(),
            response: Box::new(with_body(&response, body)),
        }
        .into());
    }
    check_response(&request, &response)?;
    let negotiated = Negotiated::client(&config, response.headers())?;
    let ws = WebSocketStream::from_partially_read(io, buf, Role::Client, config)?;
    Ok((negotiated.apply(ws)?, with_body(&response, None)))
}

async fn send_and_read_head<S>(
    io: &mut S,
    request: &Request<()>,
    buf: &mut BytesMut,
    config: &Config,
) -> Result<(Response<()>, usize)>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut out = Vec::with_capacity(256);
    write_request(request, &mut out);
    io.write_all(&out).await?;
    io.flush().await?;
    // What follows the head stays in `buf` for the stream.
    let max = config.handshake.max_size;
    read_head(io, buf, max, |b| {
        parse_response(b, config.handshake.max_headers)
    })
    .await
    .map_err(|e| match e {
        HeadError::Parse(e) => e.into(),
        HeadError::TooLarge => HandshakeError::TooLarge(max).into(),
        HeadError::Eof => HandshakeError::ConnectionClosed.into(),
        HeadError::Io(e) => Error::Io(e),
    })
}

/// How many body bytes of a refusal to keep: what `Content-Length` says, or
/// everything until the server closes, never more than `cap`. Bodies in
/// chunked encoding are not decoded and not kept.
fn body_limit(response: &Response<()>, cap: usize) -> usize {
    let status = response.status();
    if status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
        || response.headers().contains_key(header::TRANSFER_ENCODING)
    {
        return 0;
    }
    match response.headers().get(header::CONTENT_LENGTH) {
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .map_or(0, |n| n.min(cap as u64) as usize),
        None => cap,
    }
}

async fn read_body<S>(io: &mut S, buf: &mut BytesMut, limit: usize)
where
    S: AsyncRead + Unpin,
{
    while buf.len() < limit {
        let room = limit - buf.len();
        buf.reserve(room.min(4096));
        match (&mut *io).take(room as u64).read_buf(buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_response_is_the_handshake_layers_response() {
        // Fails to compile if the alias names another type.
        let _: fn(ClientResponse) -> crate::handshake::client::Response = |r| r;
    }
}
