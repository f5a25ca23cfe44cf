//! [`WebSocketStream`]: a [`Stream`] of received messages and a [`Sink`] of
//! messages to send over any `AsyncRead + AsyncWrite`.

use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker, ready};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{Sink, SinkExt, Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep, sleep_until};
use tokio_util::codec::{Decoder, Encoder};
use tokio_util::io::poll_read_buf;

use crate::codec::WebSocketCodec;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::outbox::Outbox;
use crate::proto::Role;
use crate::proto::close::{CloseCode, CloseFrame};
use crate::proto::header::OpCode;
use crate::proto::message::Message;

/// Reads are made at least this large while a frame's size is unknown.
const READ_CHUNK: usize = 8 << 10;
/// Server payloads at least this large are written from where they are
/// (vectored write) rather than copied next to their header.
const ZERO_COPY_MIN: usize = 4 << 10;
/// The per-thread buffer that reads land in while a connection holds none.
const SCRATCH_LEN: usize = 64 << 10;

thread_local! {
    static SCRATCH: RefCell<Box<[u8]>> = RefCell::new(vec![0; SCRATCH_LEN].into_boxed_slice());
}

#[derive(Clone, Copy)]
enum Side {
    Read,
    Write,
}

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
/// Pings are answered and close frames echoed automatically, from whichever
/// half of the connection is being polled. After the peer's close frame is
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
    codec: WebSocketCodec,
    write_buffer_size: usize,
    read_buf: BytesMut,
    outbox: Outbox,
    close_sent: bool,
    close_received: bool,
    /// A protocol error waiting for our close frame to go out.
    failing: Option<Error>,
    shutdown: bool,
    terminated: bool,
    /// The peer ended the connection (its close frame, EOF or a transport error).
    peer_closed: bool,
    read_waker: Option<Waker>,
    write_waker: Option<Waker>,
    close_timeout: Duration,
    /// Bounds the closing handshake once it starts; made when first needed.
    close_timer: Option<Pin<Box<Sleep>>>,
    keepalive: Option<Keepalive>,
}

/// Keepalive state: a ping after `interval` of silence, the peer declared
/// dead when `timeout` passes after it with nothing received.
#[derive(Debug)]
struct Keepalive {
    interval: Duration,
    timeout: Duration,
    last_rx: Instant,
    ping_sent: Option<Instant>,
    timer: Option<Pin<Box<Sleep>>>,
}

enum Tick {
    Quiet,
    Ping,
    Dead,
}

impl Keepalive {
    fn poll(&mut self, cx: &mut Context<'_>) -> Tick {
        let first = self.last_rx + self.interval;
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(sleep_until(first)));
        loop {
            if timer.as_mut().poll(cx).is_pending() {
                return Tick::Quiet;
            }
            let now = Instant::now();
            if let Some(sent) = self.ping_sent {
                if self.last_rx < sent {
                    return Tick::Dead;
                }
                self.ping_sent = None;
            }
            let due = self.last_rx + self.interval;
            if now < due {
                timer.as_mut().reset(due);
                continue;
            }
            self.ping_sent = Some(now);
            timer.as_mut().reset(now + self.timeout);
            // Registers the waker for the new deadline.
            let _ = timer.as_mut().poll(cx);
            return Tick::Ping;
        }
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
        Ok(WebSocketStream {
            io,
            codec: WebSocketCodec::new(role, &config),
            write_buffer_size: config.write_buffer_size,
            read_buf: read,
            outbox: Outbox::default(),
            close_sent: false,
            close_received: false,
            failing: None,
            shutdown: false,
            terminated: false,
            peer_closed: false,
            read_waker: None,
            write_waker: None,
            close_timeout: config.close_timeout,
            close_timer: None,
            keepalive: config.ping_interval.map(|interval| Keepalive {
                interval,
                timeout: config.pong_timeout,
                last_rx: Instant::now(),
                ping_sent: None,
                timer: None,
            }),
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
        if !self.close_sent && !self.terminated {
            self.feed(Message::Close(frame)).await?;
        }
        let timeout = self.close_timeout;
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
                self.give_up();
                Err(Error::CloseTimeout)
            }
        }
    }

    /// Splits the connection into a receiving half and a sending half that can
    /// be used from different tasks. Pongs and close replies are sent by
    /// whichever half is polled, so a reader alone keeps the protocol going.
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
        let (sink, stream) = StreamExt::split(self);
        (WebSocketSender(sink), WebSocketReceiver(stream))
    }
}

impl<S> WebSocketStream<S> {
    /// Which side of the connection this is.
    pub fn role(&self) -> Role {
        self.codec.role()
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

    /// The codec, to set up extensions the handshake negotiated.
    #[cfg_attr(not(feature = "deflate"), allow(dead_code))]
    pub(crate) fn codec_mut(&mut self) -> &mut WebSocketCodec {
        &mut self.codec
    }

    /// Whether a close frame has been sent.
    pub fn is_close_sent(&self) -> bool {
        self.close_sent
    }

    /// Whether the peer's close frame has been received.
    pub fn is_close_received(&self) -> bool {
        self.close_received
    }
}

impl<S> WebSocketStream<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    fn wake_other(&mut self, side: Side, cx: &Context<'_>) {
        let other = match side {
            Side::Read => &mut self.write_waker,
            Side::Write => &mut self.read_waker,
        };
        if let Some(w) = other {
            if !w.will_wake(cx.waker()) {
                other.take().expect("checked").wake();
            }
        }
    }

    /// Writes out the write buffer. The two halves of a split connection
    /// share one transport, whose write readiness remembers only the last
    /// task to ask; whichever half makes progress wakes the other.
    fn poll_write_buf(&mut self, cx: &mut Context<'_>, side: Side) -> Poll<io::Result<()>> {
        let mut progressed = false;
        while !self.outbox.is_empty() {
            match self.outbox.poll_write_once(&mut self.io, cx) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(_)) => progressed = true,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {
                    if progressed {
                        self.wake_other(side, cx);
                    }
                    return Poll::Pending;
                }
            }
        }
        if progressed {
            self.wake_other(side, cx);
        }
        Poll::Ready(Ok(()))
    }

    fn queue(&mut self, msg: &Message) -> Result<()> {
        // Compressed payloads are new bytes: they go through the codec.
        if self.role() == Role::Server && !self.codec.compresses(msg) {
            let large = match msg {
                Message::Text(t) if t.len() >= ZERO_COPY_MIN => {
                    Some((true, OpCode::Text, t.as_bytes()))
                }
                Message::Binary(b) if b.len() >= ZERO_COPY_MIN => Some((true, OpCode::Binary, b)),
                Message::Frame(f) if f.payload.len() >= ZERO_COPY_MIN => {
                    Some((f.fin, f.opcode, &f.payload))
                }
                _ => None,
            };
            if let Some((fin, opcode, payload)) = large {
                // Server frames are not masked: write the payload from where
                // it is instead of copying it into the write buffer.
                let codec = &mut self.codec;
                self.outbox
                    .encode(|b| codec.encode_header(fin, opcode, payload.len(), b).map(drop))?;
                self.outbox.push_shared(payload.clone());
                return Ok(());
            }
        }
        let codec = &mut self.codec;
        self.outbox.encode(|b| codec.encode(msg, b))
    }

    /// Ends the connection without waiting for anything more.
    fn give_up(&mut self) {
        self.terminated = true;
        self.outbox.clear();
        self.read_buf = BytesMut::new();
    }

    fn fail(&mut self, err: Error) {
        if let Some(code) = err.close_code() {
            if !self.close_sent {
                self.close_sent = true;
                // Cannot fail: the code is sendable and the reason is short.
                let _ = self.queue(&Message::Close(Some(CloseFrame::new(code, ""))));
            }
        }
        self.failing = Some(err);
    }

    /// Flushes what is queued (our close frame) and ends the connection:
    /// at once when failing or as the server, after the server's TCP close
    /// as a client. Bounded by the close timeout; transport errors are
    /// ignored, as the peer may be gone.
    fn poll_finish(&mut self, cx: &mut Context<'_>, wait_for_peer: bool) -> Poll<()> {
        if self.poll_close_timer(cx).is_ready() {
            self.give_up();
            return Poll::Ready(());
        }
        if !self.shutdown {
            if ready!(self.poll_write_buf(cx, Side::Read)).is_err() {
                self.outbox.clear();
            }
            let _ = ready!(Pin::new(&mut self.io).poll_flush(cx));
            if !wait_for_peer {
                let _ = ready!(Pin::new(&mut self.io).poll_shutdown(cx));
                self.shutdown = true;
                return Poll::Ready(());
            }
        }
        // A client waits for the server to close the TCP connection.
        loop {
            self.read_buf.clear();
            match ready!(self.poll_read(cx)) {
                Ok(0) | Err(_) => return Poll::Ready(()),
                Ok(_) => {}
            }
        }
    }

    /// Ready once the closing handshake has taken longer than allowed. The
    /// timer starts the first time this is asked.
    fn poll_close_timer(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let timeout = self.close_timeout;
        self.close_timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)))
            .as_mut()
            .poll(cx)
    }

    /// Reads more input. With no partial frame buffered, the connection
    /// holds no read buffer at all: the read goes to a per-thread scratch
    /// buffer and only the bytes that arrived are copied into a buffer of
    /// their size. This keeps idle connections small; payload bytes still
    /// reach the user without a further copy.
    fn poll_read(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.read_buf.is_empty() {
            // Drops our share of the last burst; messages handed out keep theirs.
            self.read_buf = BytesMut::new();
            let scratch_read = SCRATCH.with(|scratch| {
                let Ok(mut scratch) = scratch.try_borrow_mut() else {
                    return None; // a nested read on this thread: no scratch
                };
                let mut rb = ReadBuf::new(&mut scratch[..]);
                Some(match Pin::new(&mut self.io).poll_read(cx, &mut rb) {
                    Poll::Ready(Ok(())) => {
                        self.read_buf = BytesMut::from(rb.filled());
                        Poll::Ready(Ok(rb.filled().len()))
                    }
                    Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                    Poll::Pending => Poll::Pending,
                })
            });
            if let Some(r) = scratch_read {
                return self.heard(r);
            }
        }
        self.reserve_read();
        let r = poll_read_buf(Pin::new(&mut self.io), cx, &mut self.read_buf);
        self.heard(r)
    }

    /// Any bytes from the peer prove it alive, for keepalive.
    fn heard(&mut self, r: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        if let (Some(k), Poll::Ready(Ok(1..))) = (&mut self.keepalive, &r) {
            k.last_rx = Instant::now();
        }
        r
    }

    fn reserve_read(&mut self) {
        let len = self.read_buf.len();
        let spare = self.read_buf.capacity() - len;
        let want = self
            .codec
            .payload_remaining(len)
            .unwrap_or(READ_CHUNK)
            .max(1);
        let min_spare = want.min(READ_CHUNK);
        if spare < min_spare {
            // Grow with what has arrived (doubling), never past what the
            // frame still needs: a huge announced length costs nothing until
            // its bytes come.
            let additional = want.min(READ_CHUNK.max(len)).max(min_spare);
            self.read_buf.reserve(additional);
        }
    }

    fn poll_next_inner(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Message>>> {
        loop {
            if self.terminated {
                return Poll::Ready(None);
            }
            if self.failing.is_some() {
                ready!(self.poll_finish(cx, false));
                self.terminated = true;
                return Poll::Ready(self.failing.take().map(Err));
            }
            if self.close_received {
                let wait = self.role() == Role::Client;
                ready!(self.poll_finish(cx, wait));
                self.terminated = true;
                return Poll::Ready(None);
            }
            match self.codec.decode(&mut self.read_buf) {
                Ok(Some(msg)) => {
                    match &msg {
                        Message::Ping(payload) if !self.close_sent => {
                            self.queue(&Message::Pong(payload.clone()))?;
                        }
                        Message::Close(frame) => {
                            self.close_received = true;
                            self.peer_closed = true;
                            if !self.close_sent {
                                self.close_sent = true;
                                self.queue(&Message::Close(frame.clone()))?;
                            }
                        }
                        _ => {}
                    }
                    return Poll::Ready(Some(Ok(msg)));
                }
                Ok(None) => {}
                Err(e) => {
                    self.fail(e);
                    continue;
                }
            }
            // About to wait for input: write out what was queued meanwhile
            // (replies fed by the user, pongs), all in one write. This is
            // what makes `feed` in a read loop cork replies to pipelined
            // messages without delaying a lone one.
            if !self.outbox.is_empty() {
                let polled = self.poll_write_buf(cx, Side::Read);
                if polled.is_pending() && self.outbox.len() >= self.write_buffer_size {
                    // The peer is not reading what we owe it (pongs, replies):
                    // stop reading its input rather than buffer without bound.
                    return Poll::Pending;
                }
                if let Poll::Ready(r) = polled {
                    let flushed = r.and_then(|()| match Pin::new(&mut self.io).poll_flush(cx) {
                        Poll::Ready(r) => r,
                        Poll::Pending => Ok(()),
                    });
                    if let Err(e) = flushed {
                        self.terminated = true;
                        return Poll::Ready(Some(Err(e.into())));
                    }
                }
            }
            if self.close_sent && self.poll_close_timer(cx).is_ready() {
                // We closed and the peer has not answered in time.
                self.give_up();
                return Poll::Ready(Some(Err(Error::CloseTimeout)));
            }
            if let Some(k) = &mut self.keepalive {
                match k.poll(cx) {
                    Tick::Quiet => {}
                    Tick::Ping if self.close_sent => {}
                    Tick::Ping => {
                        self.queue(&Message::Ping(Bytes::new()))?;
                        continue;
                    }
                    Tick::Dead => {
                        // Say why if the transport still takes bytes, but
                        // wait for nothing: the peer is presumed gone.
                        if !self.close_sent {
                            self.close_sent = true;
                            let close =
                                CloseFrame::new(CloseCode::INTERNAL_ERROR, "keepalive timeout");
                            self.queue(&Message::Close(Some(close)))?;
                            let _ = self.poll_write_buf(cx, Side::Read);
                        }
                        self.give_up();
                        return Poll::Ready(Some(Err(Error::KeepaliveTimeout)));
                    }
                }
            }
            match ready!(self.poll_read(cx)) {
                Ok(0) => {
                    self.terminated = true;
                    self.peer_closed = true;
                    return Poll::Ready(Some(Err(Error::Io(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "connection closed without a close frame",
                    )))));
                }
                Ok(_) => {}
                Err(e) => {
                    self.terminated = true;
                    self.peer_closed = true;
                    return Poll::Ready(Some(Err(e.into())));
                }
            }
        }
    }

    fn poll_send_buffered(&mut self, cx: &mut Context<'_>) -> Poll<Result<()>> {
        match self.poll_write_buf(cx, Side::Write) {
            Poll::Ready(r) => Poll::Ready(r.map_err(Error::from)),
            Poll::Pending => {
                store(&mut self.write_waker, cx);
                Poll::Pending
            }
        }
    }
}

fn store(slot: &mut Option<Waker>, cx: &Context<'_>) {
    match slot {
        Some(w) if w.will_wake(cx.waker()) => {}
        _ => *slot = Some(cx.waker().clone()),
    }
}

impl<S> Stream for WebSocketStream<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    type Item = Result<Message>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let r = this.poll_next_inner(cx);
        if r.is_pending() {
            store(&mut this.read_waker, cx);
        }
        r
    }
}

impl<S> Sink<Message> for WebSocketStream<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    type Error = Error;

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = self.get_mut();
        if this.outbox.len() >= this.write_buffer_size {
            ready!(this.poll_send_buffered(cx))?;
        }
        Poll::Ready(Ok(()))
    }

    fn start_send(self: Pin<&mut Self>, msg: Message) -> Result<()> {
        let this = self.get_mut();
        if this.close_sent || this.terminated {
            return if msg.is_close() {
                Ok(())
            } else if this.peer_closed {
                Err(Error::ConnectionClosed)
            } else {
                Err(Error::AlreadyClosed)
            };
        }
        this.queue(&msg)?;
        if msg.is_close() {
            this.close_sent = true;
        }
        Ok(())
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_send_buffered(cx))?;
        match Pin::new(&mut this.io).poll_flush(cx) {
            Poll::Ready(r) => Poll::Ready(r.map_err(Error::from)),
            Poll::Pending => {
                store(&mut this.write_waker, cx);
                Poll::Pending
            }
        }
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        if !self.close_sent && !self.terminated {
            let frame = CloseFrame::new(CloseCode::NORMAL, "");
            self.as_mut().start_send(Message::Close(Some(frame)))?;
        }
        ready!(self.as_mut().poll_flush(cx))?;
        let this = self.get_mut();
        if !this.shutdown {
            match Pin::new(&mut this.io).poll_shutdown(cx) {
                Poll::Ready(r) => {
                    this.shutdown = true;
                    r?;
                }
                Poll::Pending => {
                    store(&mut this.write_waker, cx);
                    return Poll::Pending;
                }
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// The sending half of a split [`WebSocketStream`].
#[derive(Debug)]
pub struct WebSocketSender<S>(SplitSink<WebSocketStream<S>, Message>);

/// The receiving half of a split [`WebSocketStream`].
#[derive(Debug)]
pub struct WebSocketReceiver<S>(SplitStream<WebSocketStream<S>>);

impl<S> WebSocketReceiver<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    /// Puts the two halves back together; fails (returning both) if they
    /// came from different connections.
    pub fn reunite(
        self,
        other: WebSocketSender<S>,
    ) -> std::result::Result<WebSocketStream<S>, (WebSocketSender<S>, WebSocketReceiver<S>)> {
        self.0
            .reunite(other.0)
            .map_err(|e| (WebSocketSender(e.0), WebSocketReceiver(e.1)))
    }
}

impl<S> Stream for WebSocketReceiver<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    type Item = Result<Message>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_next_unpin(cx)
    }
}

impl<S> Sink<Message> for WebSocketSender<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    type Error = Error;

    fn poll_ready(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.0.poll_ready_unpin(cx)
    }

    fn start_send(mut self: Pin<&mut Self>, msg: Message) -> Result<()> {
        self.0.start_send_unpin(msg)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.0.poll_flush_unpin(cx)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.0.poll_close_unpin(cx)
    }
}
