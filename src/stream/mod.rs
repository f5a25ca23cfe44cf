//! [`WebSocketStream`]: a [`Stream`] of received messages and a [`Sink`] of
//! messages to send over any `AsyncRead + AsyncWrite`, and its split halves.

mod pieces;
mod read;
mod split;
mod write;

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::BytesMut;
use futures_util::{Sink, SinkExt, Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::proto::Role;
use crate::proto::close::CloseFrame;
use crate::proto::mask::MaskKeys;
use crate::proto::message::Message;
use crate::trace;

use read::{ReadState, Transport};
use write::WriteState;

pub use pieces::MessagePieces;
pub use split::{WebSocketReceiver, WebSocketSender};

/// A WebSocket connection over `S`.
///
/// Receive with [`StreamExt::next`]; send with [`SinkExt::send`] (one write
/// per message), or with [`SinkExt::feed`]: fed messages are buffered and
/// written together when you [`flush`](SinkExt::flush), when the buffer
/// passes [`Config::write_buffer_size`], or when the stream is polled and
/// has no more buffered input, just before it waits for the socket. So a
/// read loop that answers with `feed` answers a burst of pipelined messages
/// with one write, and a lone message at once.
///
/// An idle connection holds no read or write buffer: reads land in a
/// per-thread scratch buffer until a frame needs more bytes than arrived.
///
/// Pings are answered and close frames echoed automatically by the
/// receiving side, even while nothing is being sent. After the peer's close frame is
/// delivered as [`Message::Close`], the next poll finishes the close
/// handshake and the stream ends. A protocol violation by the peer is
/// answered with a close frame carrying the right code (1002, 1007 or 1009)
/// before the error is returned.
///
/// ```no_run
/// use futures_util::{SinkExt, StreamExt};
/// use tokio::net::TcpListener;
///
/// # async fn run() -> Result<(), wavesock::Error> {
/// let listener = TcpListener::bind("127.0.0.1:9001").await?;
/// let (tcp, _) = listener.accept().await?;
/// let mut ws = wavesock::accept_async(tcp).await?;
/// while let Some(msg) = ws.next().await {
///     let msg = msg?;
///     if msg.is_data() {
///         ws.feed(msg).await?; // written before next() waits for input
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct WebSocketStream<S> {
    io: S,
    reader: ReadState,
    writer: WriteState,
}

/// The unsplit stream's transport: one `S` for both directions.
struct Whole<'a, S> {
    io: &'a mut S,
    writer: &'a mut WriteState,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Transport for Whole<'_, S> {
    type Read = S;
    type Write = S;
    const CORKS: bool = true;

    fn read_io(&mut self) -> &mut S {
        self.io
    }

    fn with_writer<T>(&mut self, f: impl FnOnce(&mut WriteState, &mut S) -> T) -> T {
        f(self.writer, self.io)
    }

    fn close_sent(&self) -> bool {
        self.writer.close_sent
    }
}

impl<S> WebSocketStream<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    /// Wraps a connection whose opening handshake is already done, for
    /// example one upgraded by hyper or axum.
    ///
    /// ```
    /// use wavesock::{Config, Role, WebSocketStream};
    ///
    /// let (client_io, _server_io) = tokio::io::duplex(1024);
    /// let ws = WebSocketStream::from_raw_socket(client_io, Role::Client, Config::default())?;
    /// assert_eq!(ws.role(), Role::Client);
    /// # Ok::<(), wavesock::Error>(())
    /// ```
    pub fn from_raw_socket(io: S, role: Role, config: Config) -> Result<Self> {
        Self::from_partially_read(io, BytesMut::new(), role, config)
    }

    /// Like [`from_raw_socket`](Self::from_raw_socket), for a connection of
    /// which `read` holds bytes already read past the handshake: they are
    /// decoded first.
    pub fn from_partially_read(io: S, read: BytesMut, role: Role, config: Config) -> Result<Self> {
        config.validate()?;
        if role == Role::Client && config.mask_keys != MaskKeys::Random {
            trace::warn_event!(
                mask_keys = ?config.mask_keys,
                "masking keys are predictable: for tests only (RFC 6455 §10.3)"
            );
        }
        Ok(WebSocketStream {
            io,
            reader: ReadState::new(role, &config, read),
            writer: WriteState::new(role, &config),
        })
    }

    /// Closes the connection: sends a close frame (code and reason, or
    /// none), then waits for the peer's close frame and the end of the TCP
    /// connection, discarding messages that arrive meanwhile. The whole
    /// handshake is bounded by [`Config::close_timeout`]; past it the
    /// connection is given up and [`Error::CloseTimeout`] returned. Closing a
    /// connection that is already closing or closed does nothing more.
    ///
    /// To keep receiving until the peer answers instead, send
    /// [`Message::Close`] and keep polling the stream.
    ///
    /// ```no_run
    /// # async fn f(mut ws: wavesock::WebSocketStream<tokio::net::TcpStream>) -> wavesock::Result<()> {
    /// use wavesock::{CloseCode, CloseFrame};
    /// ws.close(Some(CloseFrame::new(CloseCode::NORMAL, "bye"))).await?;
    /// # Ok(()) }
    /// ```
    pub async fn close(&mut self, frame: Option<CloseFrame>) -> Result<()> {
        if !self.writer.close_sent && !self.reader.is_terminated() {
            self.feed(Message::Close(frame)).await?;
        }
        let timeout = self.reader.close_timeout();
        let handshake = async {
            self.flush().await?;
            while let Some(msg) = self.next().await {
                msg?;
            }
            Ok(())
        };
        match tokio::time::timeout(timeout, handshake).await {
            Ok(r) => r,
            Err(_) => {
                let mut t = Whole {
                    io: &mut self.io,
                    writer: &mut self.writer,
                };
                self.reader.give_up(&mut t);
                Err(Error::CloseTimeout)
            }
        }
    }

    /// Splits the connection into a receiving half and a sending half for
    /// two tasks.
    ///
    /// The halves share no lock on the data path: the receiver owns the
    /// decoder and read buffer, the sender the encoder and write queue. The
    /// transport is split with [`tokio::io::split`] (a short critical
    /// section around each read or write call), and the receiver touches the
    /// sender's queue only to add a pong or a close reply, which it then
    /// writes itself, so pings are answered while the sender is idle.
    ///
    /// ```no_run
    /// # async fn f(ws: wavesock::WebSocketStream<tokio::net::TcpStream>) {
    /// use futures_util::{SinkExt, StreamExt};
    /// let (mut tx, mut rx) = ws.split();
    /// tokio::spawn(async move { tx.send(wavesock::Message::text("hi")).await });
    /// while let Some(Ok(msg)) = rx.next().await {
    ///     println!("{msg:?}");
    /// }
    /// # }
    /// ```
    pub fn split(self) -> (WebSocketSender<S>, WebSocketReceiver<S>) {
        split::split(self.io, self.reader, self.writer)
    }
}

impl<S> WebSocketStream<S> {
    /// Which side of the connection this is.
    pub fn role(&self) -> Role {
        self.reader.role()
    }

    /// The underlying connection.
    pub fn get_ref(&self) -> &S {
        &self.io
    }

    /// The underlying connection, mutably. Reading or writing it directly
    /// corrupts the WebSocket stream.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.io
    }

    /// Whether a close frame has been sent.
    pub fn is_close_sent(&self) -> bool {
        self.writer.close_sent
    }

    /// Turns permessage-deflate on in both directions, as negotiated.
    #[cfg(feature = "deflate")]
    pub(crate) fn enable_deflate(
        &mut self,
        params: &crate::deflate::DeflateParams,
        config: &crate::deflate::DeflateConfig,
    ) {
        crate::proto::deflate::enable(
            self.reader.decoder_mut(),
            self.writer.encoder_mut(),
            params,
            config,
        );
    }

    /// Whether the peer's close frame has been received.
    pub fn is_close_received(&self) -> bool {
        self.reader.close_received
    }
}

impl<S> Stream for WebSocketStream<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    type Item = Result<Message>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let mut t = Whole {
            io: &mut this.io,
            writer: &mut this.writer,
        };
        this.reader.poll_next(&mut t, cx)
    }
}

impl<S> Sink<Message> for WebSocketStream<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    type Error = Error;

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = self.get_mut();
        this.writer.poll_ready(&mut this.io, cx)
    }

    fn start_send(self: Pin<&mut Self>, msg: Message) -> Result<()> {
        self.get_mut().writer.start_send(msg)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = self.get_mut();
        this.writer.poll_flush(&mut this.io, cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = self.get_mut();
        this.writer.poll_close(&mut this.io, cx)
    }
}
