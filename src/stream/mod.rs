//! [`WebSocketStream`]: a [`Stream`] of received messages and a [`Sink`] of
//! messages to send over any `AsyncRead + AsyncWrite`, and its split halves.

mod core;
mod pieces;
mod pool;
mod read;
mod split;
#[cfg(feature = "deflate")]
mod uncompressed;
mod write;

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::BytesMut;
use futures_util::{Sink, SinkExt, Stream};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::proto::Role;
use crate::proto::close::CloseFrame;
use crate::proto::conn::State;
use crate::proto::deflate::{DeflateConfig, DeflateParams};
use crate::proto::mask::MaskKeys;
use crate::proto::message::{Message, PreparedMessage};
use crate::trace;

use core::{Core, now};
use read::{CoreLink, ReadState};

pub use pieces::MessagePieces;
pub use split::{WebSocketReceiver, WebSocketSender};

/// A WebSocket connection over `S`.
///
/// Receive with [`StreamExt::next`](futures_util::StreamExt::next); send with [`SinkExt::send`] (one write
/// per message), or with [`SinkExt::feed`]: fed messages are buffered and
/// written together when you [`flush`](SinkExt::flush), when the buffer
/// passes [`Config::max_backpressure`], or when the stream is polled and
/// has no more buffered input, just before it waits for the socket. So a
/// read loop that answers with `feed` answers a burst of pipelined messages
/// with one write, and a lone message at once.
///
/// An idle connection holds no read or write buffer: reads land in a
/// per-thread scratch buffer until a frame needs more bytes than arrived.
///
/// A received message's payload may share its memory with others received
/// on the same thread: a small read (up to 2 KiB) is copied into the
/// thread's arena, chunks of 8 KiB freed when the last message taken from
/// one is dropped, so that a small message costs no allocation of its own;
/// messages of a burst read together share that read's buffer. To keep a
/// message long after its neighbours are gone, keep a copy
/// (`Bytes::copy_from_slice`).
///
/// Pings are answered (a pong with the ping's payload) and the peer's close
/// frame echoed (its code and reason) automatically by the receiving side,
/// even while nothing is being sent. The echo is handed to the transport
/// before the peer's close frame is delivered as [`Message::Close`], and
/// so is the pong before a [`Message::Ping`] after which nothing more has
/// been read (the pongs to pings read together go out together, with the
/// last one's; a ping followed by the start of another frame has its pong
/// written with the flush before the next read): a program that drops the stream as soon as it has either
/// has answered it. What the transport cannot take at once stays queued,
/// for the next poll or flush, and never holds up `next()` (the guide's
/// [Closing](crate::guide#closing) says what that covers). After the
/// close, the next poll finishes the close handshake and the stream ends. A protocol
/// violation by the peer is answered with a close frame carrying the right
/// code (1002, 1007 or 1009) and a short reason naming the rule or limit
/// before the error is returned. The guide lists [every frame sent on its
/// own](crate::guide#the-frames-wavesock-sends-on-its-own).
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
    core: Core,
}

/// How the unsplit stream's receiving side reaches the core: directly, with
/// one `S` for both directions.
struct UnsplitLink<'a, S> {
    io: &'a mut S,
    core: &'a mut Core,
}

impl<S: AsyncRead + AsyncWrite + Unpin> CoreLink for UnsplitLink<'_, S> {
    type Read = S;
    type Write = S;

    fn read_io(&mut self) -> &mut S {
        self.io
    }

    fn with_core<T>(&mut self, f: impl FnOnce(&mut Core, &mut S) -> T) -> T {
        f(self.core, self.io)
    }

    fn state(&self) -> State {
        self.core.d.conn().state()
    }

    #[inline]
    fn has_writes(&self) -> bool {
        self.core.has_writes()
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
            core: Core::new(role, &config),
        })
    }

    /// Starts the closing handshake: sends a close frame (code and reason,
    /// or none for `None`) and waits until it is written, as
    /// tokio-tungstenite's `close` does. It does not read: messages the peer
    /// sent before it saw our close are still delivered by
    /// [`next`](futures_util::StreamExt::next), then the peer's [`Message::Close`], then
    /// the end of the stream. Nothing that arrives is discarded.
    ///
    /// After `close`, `next()` ends in one of three ways:
    /// - the peer answers with its close frame: `Some(Ok(Message::Close(..)))`,
    ///   then `None` once the handshake is done (a client first waits, within
    ///   the timeout, for the server to close TCP);
    /// - the peer ends the TCP connection without answering (many servers
    ///   do), or resets it: `None`. This is a normal end, not an error;
    /// - neither within [`Config::close_timeout`] of the first `close`
    ///   call: `Some(Err(Error::CloseTimeout))`, the connection dropped,
    ///   then `None`.
    ///
    /// So "close and wait" is `close`, then `next()` until `None`, bounded
    /// by `close_timeout` in all. Writing what is queued and the close
    /// frame is bounded by the same timeout, which runs from the first
    /// call: what the peer has not taken by then (it reads too slowly, or
    /// not at all) is given up with the connection, [`Error::CloseTimeout`].
    /// A frame that waits for room behind a full write queue, or a `close`
    /// cut short (by `select!` or a timeout) and called again, gets no
    /// fresh timeout. The frame is checked before any wait (an invalid one
    /// is an error at once, and nothing is sent). A connection already
    /// failing (the peer broke the protocol, and our close reporting it
    /// waits to be written) ends with that error instead. Closing a
    /// connection that is already closing or closed sends nothing more.
    ///
    /// ```
    /// use futures_util::{SinkExt, StreamExt};
    /// use wavesock::{CloseCode, CloseFrame, Config, Message, Role, WebSocketStream};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> wavesock::Result<()> {
    /// let (a, b) = tokio::io::duplex(4096);
    /// let mut ws = WebSocketStream::from_raw_socket(a, Role::Client, Config::default())?;
    /// let mut peer = WebSocketStream::from_raw_socket(b, Role::Server, Config::default())?;
    /// // The peer has something in flight when we close.
    /// peer.send(Message::text("last words")).await?;
    /// let server = tokio::spawn(async move { while peer.next().await.is_some() {} });
    ///
    /// ws.close(Some(CloseFrame::new(CloseCode::NORMAL, "bye"))).await?;
    /// assert_eq!(ws.next().await.unwrap()?, Message::text("last words"));
    /// assert!(ws.next().await.unwrap()?.is_close()); // the peer's answer
    /// assert!(ws.next().await.is_none());
    /// # server.await.unwrap();
    /// # Ok(()) }
    /// ```
    pub async fn close(&mut self, mut frame: Option<CloseFrame>) -> Result<()> {
        if self.reader.is_terminated() {
            return Ok(());
        }
        // Checked now, and the close timeout runs from the first call:
        // neither waits for room in the write queue.
        self.core.d.conn_mut().ask_close(frame.as_ref(), now())?;
        loop {
            // The core's close deadline: from the first call, the same
            // once the frame is queued.
            let deadline = self.core.d.conn().close_deadline_from(now());
            let send = async {
                if !self.core.d.conn().is_close_sent() {
                    // The frame is taken only as it is queued: a wait for
                    // room cut short by the deadline keeps it.
                    std::future::poll_fn(|cx| Pin::new(&mut *self).poll_ready(cx)).await?;
                    // As of the ask: its deadline runs from then.
                    let at = self.core.d.conn().close_asked().unwrap_or_else(now);
                    self.core.start_send_close(frame.take(), at)?;
                }
                self.flush().await
            };
            // Without a close timeout, no timer: a runtime without Tokio's
            // time driver can close (see `Config::without_timeouts`).
            let Some(deadline) = deadline else {
                return send.await;
            };
            if let Ok(r) = tokio::time::timeout_at(deadline.into(), send).await {
                return r;
            }
            // What the deadline means is the core's: the connection ends
            // with its error, or, while the deadline is still ahead (a
            // timer that went off early), wait on.
            let mut link = UnsplitLink {
                io: &mut self.io,
                core: &mut self.core,
            };
            if let Some(e) = self.reader.close_timer(&mut link, now()) {
                return Err(e.into());
            }
        }
    }

    /// Queues a [`PreparedMessage`] once the write queue has room, like
    /// [`SinkExt::feed`]: for a server, the frame encoded once is queued as
    /// it is, with no copy.
    ///
    /// ```
    /// use futures_util::StreamExt;
    /// use wavesock::{Config, Message, PreparedMessage, Role, WebSocketStream};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> wavesock::Result<()> {
    /// let news = PreparedMessage::new(&Message::text("market open"))?;
    /// let (a, b) = tokio::io::duplex(4096);
    /// let mut ws = WebSocketStream::from_raw_socket(a, Role::Server, Config::default())?;
    /// let mut peer = WebSocketStream::from_raw_socket(b, Role::Client, Config::default())?;
    /// ws.send_prepared(&news).await?;
    /// assert_eq!(peer.next().await.unwrap()?, Message::text("market open"));
    /// # Ok(()) }
    /// ```
    pub async fn feed_prepared(&mut self, msg: &PreparedMessage) -> Result<()> {
        std::future::poll_fn(|cx| self.core.poll_ready(&mut self.io, cx)).await?;
        self.core.start_send_prepared(msg)
    }

    /// [`feed_prepared`](Self::feed_prepared), then a flush, like
    /// [`SinkExt::send`].
    pub async fn send_prepared(&mut self, msg: &PreparedMessage) -> Result<()> {
        self.feed_prepared(msg).await?;
        self.flush().await
    }

    /// Splits the connection into a receiving half and a sending half for
    /// two tasks.
    ///
    /// The receiver owns the decoder and read buffer and reads without
    /// taking a lock: it learns where the connection stands from one atomic
    /// byte. The protocol state and the write queue are shared behind a
    /// lock, held only while a frame is queued or a write call is made,
    /// never while waiting; the receiver takes it only to hand the protocol
    /// a control frame or an error and to write a pong or a close reply
    /// itself, so pings are answered while the sender is idle. The
    /// transport is split with [`tokio::io::split`] (a short critical
    /// section around each read or write call).
    ///
    /// The sending half can be cloned, one clone per task that sends; see
    /// [`WebSocketSender`].
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
        split::split(self.io, self.reader, self.core)
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
        self.core.d.conn().is_close_sent()
    }

    /// Turns permessage-deflate on in both directions, as negotiated; fails
    /// only in a build without the `deflate` feature.
    pub(crate) fn enable_deflate(
        &mut self,
        params: &DeflateParams,
        config: &DeflateConfig,
    ) -> std::result::Result<(), crate::proto::Error> {
        let decoder = self.reader.decoder_mut();
        crate::proto::deflate::enable(decoder, self.core.d.encoder_mut(), params, config)
    }

    /// Fails the connection before it starts: a setup step (compression)
    /// that could not be done.
    #[cfg(feature = "deflate")]
    pub(crate) fn fail_setup(&mut self, e: crate::proto::Error) {
        self.core.d.conn_mut().handle_error(e, now());
        // What it owes (the close saying why) goes out with the first
        // write; an encoding error here would only repeat this one.
        let _ = self.core.transmit();
    }

    /// Whether the peer's close frame has been received.
    pub fn is_close_received(&self) -> bool {
        self.core.d.conn().is_close_received()
    }
}

impl<S> WebSocketReceiver<S> {
    /// Puts the two halves back together; fails (returning both) if they
    /// came from different connections or other clones of the sender remain.
    ///
    /// ```
    /// # use wavesock::{Config, Role, WebSocketStream};
    /// let (io, _peer) = tokio::io::duplex(64);
    /// let ws = WebSocketStream::from_raw_socket(io, Role::Server, Config::default())?;
    /// let (tx, rx) = ws.split();
    /// let ws = rx.reunite(tx).expect("same connection");
    /// # Ok::<(), wavesock::Error>(())
    /// ```
    #[allow(clippy::result_large_err)]
    pub fn reunite(
        self,
        other: WebSocketSender<S>,
    ) -> std::result::Result<WebSocketStream<S>, (WebSocketSender<S>, WebSocketReceiver<S>)>
    where
        S: Unpin,
    {
        let (io, reader, core) = split::into_parts(self, other)?;
        Ok(WebSocketStream { io, reader, core })
    }
}

impl<S> Stream for WebSocketStream<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    type Item = Result<Message>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let mut link = UnsplitLink {
            io: &mut this.io,
            core: &mut this.core,
        };
        this.reader.poll_next(&mut link, cx)
    }
}

impl<S> Sink<Message> for WebSocketStream<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    type Error = Error;

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = self.get_mut();
        this.core.poll_ready(&mut this.io, cx)
    }

    fn start_send(self: Pin<&mut Self>, msg: Message) -> Result<()> {
        self.get_mut().core.start_send(msg)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = self.get_mut();
        this.core.poll_flush(&mut this.io, cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = self.get_mut();
        this.core.poll_close(&mut this.io, cx)
    }
}
