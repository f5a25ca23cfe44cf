//! Accepting connections: the server's opening handshake over any stream.

use bytes::BytesMut;
use http::{Request, Response};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::config::Config;
use crate::deadline::{after, within};
use crate::error::{Error, HandshakeError, Result};
use crate::handshake::server::{
    Accepting, AsyncCallback, Callback, ErrorResponse, NoCallback, error_response, parse_request,
    write_response,
};
use crate::head::{HeadError, read_head};
#[cfg(feature = "metrics")]
use crate::meter::{self, EngineMeter, Refused};
use crate::negotiated::Negotiated;
use crate::proto::Role;
use crate::retry::Retrying;
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
    Box::pin(accept(io, sync(NoCallback), Config::default())).await
}

/// Like [`accept_async`], with your own [`Config`] (limits, timeouts).
///
/// ```
/// use wavesock::Config;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> wavesock::Result<()> {
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// let url = format!("ws://{}/", listener.local_addr()?);
/// let client = tokio::spawn(wavesock::connect_async(url));
/// let (tcp, _) = listener.accept().await?;
/// // Messages up to 1 MiB; frames follow the message limit.
/// let config = Config::default().max_message_size(1 << 20);
/// let ws = wavesock::accept_async_with_config(tcp, config).await?;
/// # client.await.unwrap()?;
/// # Ok(()) }
/// ```
pub async fn accept_async_with_config<S>(io: S, config: Config) -> Result<WebSocketStream<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    Box::pin(accept(io, sync(NoCallback), config)).await
}

/// Like [`accept_async`], with a [`Callback`] that sees the request (method,
/// path, query, headers) and may add headers to the response, pick a
/// subprotocol, or refuse with an HTTP response of its own.
///
/// A refusal is written to the client as given (status, headers, body) and
/// returned as [`HandshakeError::Refused`]. The callback runs only for
/// requests that are valid WebSocket upgrades.
///
/// ```no_run
/// use wavesock::http::{Request, Response, StatusCode};
/// use wavesock::handshake::server::ErrorResponse;
///
/// # async fn run(tcp: tokio::net::TcpStream) -> wavesock::Result<()> {
/// let callback = |req: &Request<()>, mut resp: Response<()>| -> Result<Response<()>, ErrorResponse> {
///     if req.headers().get("authorization").is_none() {
///         let mut refusal = Response::new(Some("log in first".to_string()));
///         *refusal.status_mut() = StatusCode::UNAUTHORIZED;
///         return Err(refusal);
///     }
///     resp.headers_mut().insert("x-served-by", "wavesock".parse().unwrap());
///     Ok(resp)
/// };
/// let ws = wavesock::accept_hdr_async(tcp, callback).await?;
/// # Ok(()) }
/// ```
pub async fn accept_hdr_async<S, C>(io: S, callback: C) -> Result<WebSocketStream<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
    C: Callback,
{
    Box::pin(accept(io, sync(callback), Config::default())).await
}

/// Like [`accept_hdr_async`], with your own [`Config`].
///
/// ```no_run
/// use wavesock::Config;
/// use wavesock::handshake::server::Subprotocols;
///
/// # async fn run(tcp: tokio::net::TcpStream) -> wavesock::Result<()> {
/// let config = Config::default().max_handshake_size(4096);
/// let ws = wavesock::accept_hdr_async_with_config(tcp, Subprotocols::new(["chat"]), config).await?;
/// # Ok(()) }
/// ```
pub async fn accept_hdr_async_with_config<S, C>(
    io: S,
    callback: C,
    config: Config,
) -> Result<WebSocketStream<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
    C: Callback,
{
    Box::pin(accept(io, sync(callback), config)).await
}

/// Like [`accept_hdr_async`], with an [`AsyncCallback`]: a closure taking
/// the request by value and returning a future, for checks that wait on
/// something else.
///
/// The [`handshake_timeout`](Config::handshake_timeout) covers the whole
/// handshake, callback included.
///
/// ```no_run
/// use wavesock::http::{Request, Response, StatusCode};
///
/// # async fn token_is_valid(_: &str) -> bool { true }
/// # async fn run(tcp: tokio::net::TcpStream) -> wavesock::Result<()> {
/// let ws = wavesock::accept_async_callback(tcp, |req: Request<()>, resp: Response<()>| async move {
///     let token = req.uri().query().unwrap_or_default().to_owned();
///     if token_is_valid(&token).await {
///         Ok(resp)
///     } else {
///         let mut refusal = Response::new(None);
///         *refusal.status_mut() = StatusCode::FORBIDDEN;
///         Err(refusal)
///     }
/// })
/// .await?;
/// # Ok(()) }
/// ```
pub async fn accept_async_callback<S, C>(io: S, callback: C) -> Result<WebSocketStream<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
    C: AsyncCallback,
{
    Box::pin(accept(io, callback, Config::default())).await
}

/// Like [`accept_async_callback`], with your own [`Config`].
///
/// ```no_run
/// # async fn run(tcp: tokio::net::TcpStream) -> wavesock::Result<()> {
/// let config = wavesock::Config::default();
/// let ws = wavesock::accept_async_callback_with_config(
///     tcp,
///     |_req, resp| async move { Ok(resp) },
///     config,
/// )
/// .await?;
/// # Ok(()) }
/// ```
pub async fn accept_async_callback_with_config<S, C>(
    io: S,
    callback: C,
    config: Config,
) -> Result<WebSocketStream<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
    C: AsyncCallback,
{
    // Boxed: the handshake's state (request, buffers, timer) lives on the
    // heap only while it runs, instead of widening, for the connection's
    // whole life, every task that awaits this future.
    Box::pin(accept(io, callback, config)).await
}

/// A synchronous [`Callback`] adapted into an [`AsyncCallback`] whose
/// future is ready at once (a named type, so the handshake future stays
/// `Send` when the callback is).
struct SyncCallbackAdapter<C>(C);

fn sync<C: Callback>(callback: C) -> SyncCallbackAdapter<C> {
    SyncCallbackAdapter(callback)
}

impl<C: Callback> AsyncCallback for SyncCallbackAdapter<C> {
    type Future = std::future::Ready<std::result::Result<Response<()>, ErrorResponse>>;

    fn on_request(self, request: Request<()>, response: Response<()>) -> Self::Future {
        std::future::ready(self.0.on_request(&request, response))
    }
}

async fn accept<S, C>(mut io: S, callback: C, config: Config) -> Result<WebSocketStream<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
    C: AsyncCallback,
{
    config.validate()?;
    #[cfg(feature = "metrics")]
    let began = std::time::Instant::now();
    let result = {
        let mut retrying = Retrying(&mut io);
        let handshake = server_handshake(&mut retrying, &config, callback);
        within(after(config.handshake.timeout), handshake)
            .await
            .unwrap_or_else(|| Err(HandshakeError::Timeout.into()))
    };
    #[cfg(feature = "tracing")]
    match &result {
        Ok(_) => tracing::debug!("websocket handshake accepted"),
        Err(e) => tracing::debug!(error = %e, "websocket handshake failed"),
    }
    #[cfg(feature = "metrics")]
    match &result {
        Ok(_) => EngineMeter::stream(Role::Server).handshake(began.elapsed()),
        Err(e) => meter::refused(Refused::of(e)),
    }
    let (leftover, negotiated) = result?;
    let ws = WebSocketStream::from_partially_read(io, leftover, Role::Server, config)?;
    negotiated.apply(ws)
}

/// Reads the request head into `buf`, never holding more than the cap.
async fn read_request<S>(
    io: &mut S,
    buf: &mut BytesMut,
    config: &Config,
) -> std::result::Result<(Request<()>, usize), ReadFailure>
where
    S: AsyncRead + Unpin,
{
    let max = config.handshake.max_size;
    read_head(io, buf, max, |b| {
        parse_request(b, config.handshake.max_headers)
    })
    .await
    .map_err(|e| match e {
        HeadError::Parse(e) => ReadFailure::Refuse(e),
        HeadError::TooLarge => ReadFailure::Refuse(HandshakeError::TooLarge(max)),
        HeadError::Eof => ReadFailure::Fatal(HandshakeError::ConnectionClosed.into()),
        HeadError::Io(e) => ReadFailure::Fatal(e.into()),
    })
}

enum ReadFailure {
    /// A bad request: answer it with an HTTP error.
    Refuse(HandshakeError),
    /// The transport failed: nothing to answer.
    Fatal(Error),
}

async fn server_handshake<S, C>(
    io: &mut S,
    config: &Config,
    callback: C,
) -> Result<(BytesMut, Negotiated)>
where
    S: AsyncRead + AsyncWrite + Unpin,
    C: AsyncCallback,
{
    let mut buf = BytesMut::new();
    let (request, head_len) = match read_request(io, &mut buf, config).await {
        Ok(parsed) => parsed,
        Err(ReadFailure::Refuse(e)) => return Err(refuse(io, e).await),
        Err(ReadFailure::Fatal(e)) => return Err(e),
    };
    let mut accepting = match Accepting::http1(&request) {
        Ok(a) => a,
        Err(e) => return Err(refuse(io, e).await),
    };
    accepting.negotiate(request.headers(), config.deflate.as_ref());
    let mut response = match callback
        .on_request(request, accepting.required().clone())
        .await
    {
        Ok(r) => r,
        Err(refusal) => {
            let mut out = Vec::new();
            let body = refusal.body().as_deref().unwrap_or_default();
            write_response(&refusal, body.as_bytes(), &mut out);
            // Refused either way; a peer that is gone changes nothing.
            let _ = io.write_all(&out).await;
            let _ = io.shutdown().await;
            return Err(HandshakeError::Refused(refusal.status()).into());
        }
    };
    // The callback may add headers; the handshake itself is not its to change.
    accepting.respond(&mut response);
    let mut out = Vec::with_capacity(160);
    write_response(&response, &[], &mut out);
    io.write_all(&out).await?;
    io.flush().await?;
    let _ = buf.split_to(head_len);
    Ok((buf, Negotiated::from(accepting)))
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
        // Shutting down sends the end of the response before the socket is
        // dropped.
        let _ = io.write_all(&out).await;
        let _ = io.shutdown().await;
    }
    err.into()
}
