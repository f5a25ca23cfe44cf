//! Accepting connections: the server's opening handshake over any stream.

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::config::Config;
use crate::error::{Error, HandshakeError, Result};
use crate::handshake::server::{
    accept_response, check_request, error_response, parse_request, write_response,
};
use crate::proto::Role;
use crate::stream::WebSocketStream;

/// Accepts a WebSocket connection on `io` with the default [`Config`].
///
/// Reads the client's upgrade request, answers `101 Switching Protocols`, and
/// returns the connection. A request that is not a valid WebSocket upgrade is
/// answered with an HTTP error (400, 405 or 426) and returned as
/// [`Error::Handshake`]. Bytes the client sent right after its request are
/// kept and decoded as frames.
///
/// ```no_run
/// use futures_util::{SinkExt, StreamExt};
///
/// # async fn run() -> wavesock::Result<()> {
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:9001").await?;
/// loop {
///     let (tcp, _) = listener.accept().await?;
///     tokio::spawn(async move {
///         let mut ws = wavesock::accept_async(tcp).await?;
///         while let Some(msg) = ws.next().await {
///             let msg = msg?;
///             if msg.is_data() {
///                 ws.feed(msg).await?;
///             }
///         }
///         Ok::<_, wavesock::Error>(())
///     });
/// }
/// # }
/// ```
pub async fn accept_async<S>(io: S) -> Result<WebSocketStream<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    accept_async_with_config(io, Config::default()).await
}

/// Like [`accept_async`], with your own [`Config`] (limits, timeouts).
///
/// ```no_run
/// # async fn run(tcp: tokio::net::TcpStream) -> wavesock::Result<()> {
/// use wavesock::Config;
/// let config = Config::default().max_message_size(1 << 20);
/// let ws = wavesock::accept_async_with_config(tcp, config).await?;
/// # Ok(()) }
/// ```
pub async fn accept_async_with_config<S>(mut io: S, config: Config) -> Result<WebSocketStream<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    config.validate()?;
    let handshake = server_handshake(&mut io, &config);
    let leftover = match config.handshake_timeout {
        Some(t) => tokio::time::timeout(t, handshake)
            .await
            .map_err(|_| HandshakeError::Timeout)??,
        None => handshake.await?,
    };
    WebSocketStream::from_partially_read(io, leftover, Role::Server, config)
}

async fn server_handshake<S>(io: &mut S, config: &Config) -> Result<BytesMut>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut buf = BytesMut::new();
    let (request, head_len) = loop {
        match parse_request(&buf, config.max_headers) {
            Ok(Some(parsed)) => break parsed,
            Ok(None) if buf.len() >= config.max_handshake_size => {
                return Err(refuse(io, HandshakeError::TooLarge(config.max_handshake_size)).await);
            }
            Ok(None) => {}
            Err(e) => return Err(refuse(io, e).await),
        }
        // Never read past the cap, so a flood costs at most the cap.
        let room = config.max_handshake_size - buf.len();
        buf.reserve(room.min(1024));
        let mut limited = (&mut *io).take(room as u64);
        if limited.read_buf(&mut buf).await? == 0 {
            return Err(HandshakeError::ConnectionClosed.into());
        }
    };
    if head_len > config.max_handshake_size {
        return Err(refuse(io, HandshakeError::TooLarge(config.max_handshake_size)).await);
    }
    let accept = match check_request(&request) {
        Ok(a) => a,
        Err(e) => return Err(refuse(io, e).await),
    };
    let mut out = Vec::with_capacity(160);
    write_response(&accept_response(&accept), &[], &mut out);
    io.write_all(&out).await?;
    io.flush().await?;
    let _ = buf.split_to(head_len);
    Ok(buf)
}

/// Answers a refused request with its HTTP error, then returns the error.
async fn refuse<S>(io: &mut S, err: HandshakeError) -> Error
where
    S: AsyncWrite + Unpin,
{
    if let Some(resp) = error_response(&err) {
        let mut out = Vec::new();
        write_response(&resp, resp.body(), &mut out);
        // The request already failed; a peer that is gone changes nothing.
        let _ = io.write_all(&out).await;
        let _ = io.flush().await;
    }
    err.into()
}
