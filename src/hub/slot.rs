//! One hub connection: its transport, protocol core, encoder and the bytes
//! it holds, and [`Ws`], what a handler sees of it.

use std::io::{self, IoSlice};
use std::sync::Arc;
use std::time::Instant;

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::error::{Error, Result};
use crate::hub::config::BackpressurePolicy;
use crate::hub::event::{Addresses, ConnId, HubMessage, SendStatus};
use crate::hub::handle::{HubHandle, Io};
#[cfg(unix)]
use crate::hub::poller::Polled;
use crate::hub::subs::{Subs, token};
use crate::hub::wake::{ConnWaker, Key, ReadyQueue};
use crate::proto::Role;
use crate::proto::close::{CloseCode, CloseFrame};
use crate::proto::conn::{Connection, Outgoing};
use crate::proto::deflate::Inflater;
use crate::proto::driver::Driver;
use crate::proto::encoder::FrameEncoder;
use crate::proto::header::OpCode;
use crate::proto::message::{Message, PreparedMessage};
use crate::proto::outbox::{PoolLimits, QueuePool};
use crate::proto::receive::Receiver;
use crate::retry::Retrying;
use crate::topics::{Published, Topics};

/// Where a connection stands in the hub's eyes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Reading the HTTP upgrade request.
    Handshake,
    /// Messages flow (the closing handshake may have started).
    Open,
    /// Writing out what is owed (a close frame, an HTTP refusal), then
    /// shutting the transport down.
    Ending,
    /// Shut down after failing for backpressure: what the peer still sends
    /// is read and dropped until it ends the transport, or the close
    /// deadline passes. A socket closed with input unread is reset, and a
    /// reset throws away what the kernel still holds for the peer: the
    /// backlog it was slow to read, and our close frame.
    Lingering,
}

/// A connection's transport: TCP, the usual case, without indirection.
/// Calls on other transports retry `Interrupted` and take `WouldBlock` as
/// "not now", as everywhere else in the crate ([`Retrying`]); Tokio's
/// `TcpStream` never returns either.
pub(crate) enum Transport {
    Tcp(TcpStream),
    /// TCP read by the engine's own poller ([`Readiness::Owned`](crate::hub::Readiness)).
    #[cfg(unix)]
    Polled(Polled),
    /// With the addresses its giver told, boxed: most have none, and the
    /// variant stays no larger than a `TcpStream`.
    Other(Pin<Box<dyn Io>>, Option<Box<Addresses>>),
}

impl Transport {
    /// The connection's two ends: asked of the socket for TCP (nothing
    /// kept per connection), as given for other transports.
    pub(crate) fn addresses(&self) -> Addresses {
        Addresses {
            remote: self.remote_addr(),
            local: self.local_addr(),
        }
    }

    /// The peer's address alone: one system call for TCP, not two.
    pub(crate) fn remote_addr(&self) -> Option<std::net::SocketAddr> {
        match self {
            Transport::Tcp(t) => t.peer_addr().ok(),
            #[cfg(unix)]
            Transport::Polled(t) => t.peer_addr(),
            Transport::Other(_, addrs) => addrs.as_ref().and_then(|a| a.remote),
        }
    }

    /// This end's address alone.
    pub(crate) fn local_addr(&self) -> Option<std::net::SocketAddr> {
        match self {
            Transport::Tcp(t) => t.local_addr().ok(),
            #[cfg(unix)]
            Transport::Polled(t) => t.local_addr(),
            Transport::Other(_, addrs) => addrs.as_ref().and_then(|a| a.local),
        }
    }
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Transport::Tcp(t) => t.fmt(f),
            #[cfg(unix)]
            Transport::Polled(t) => t.fmt(f),
            Transport::Other(..) => f.write_str("Transport::Other"),
        }
    }
}

impl AsyncRead for Transport {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Tcp(t) => Pin::new(t).poll_read(cx, buf),
            #[cfg(unix)]
            Transport::Polled(t) => t.poll_read(buf),
            Transport::Other(t, _) => Pin::new(&mut Retrying(t)).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Transport {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Transport::Tcp(t) => Pin::new(t).poll_write(cx, buf),
            #[cfg(unix)]
            Transport::Polled(t) => t.poll_write_vectored(&[IoSlice::new(buf)]),
            Transport::Other(t, _) => Pin::new(&mut Retrying(t)).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Transport::Tcp(t) => Pin::new(t).poll_write_vectored(cx, bufs),
            #[cfg(unix)]
            Transport::Polled(t) => t.poll_write_vectored(bufs),
            Transport::Other(t, _) => Pin::new(&mut Retrying(t)).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Transport::Tcp(t) => t.is_write_vectored(),
            #[cfg(unix)]
            Transport::Polled(_) => true,
            Transport::Other(t, _) => t.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Tcp(t) => Pin::new(t).poll_flush(cx),
            #[cfg(unix)]
            Transport::Polled(_) => Poll::Ready(Ok(())),
            Transport::Other(t, _) => Pin::new(&mut Retrying(t)).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Tcp(t) => Pin::new(t).poll_shutdown(cx),
            #[cfg(unix)]
            Transport::Polled(t) => Poll::Ready(t.shutdown()),
            Transport::Other(t, _) => Pin::new(&mut Retrying(t)).poll_shutdown(cx),
        }
    }
}

/// A connection in a hub's slot table.
///
/// Kept small: an idle connection is this and its socket's registration
/// (with Tokio's readiness, its waker too). What only some connections
/// need at a time is boxed (decoding state, bytes to write, how it ended).
#[derive(Debug)]
pub(crate) struct Slot<T> {
    pub(crate) io: Transport,
    /// Queues the connection for its engine when its transport (or the
    /// memory budget) wakes it. A socket of the engine's own poller has
    /// none until a budget wait needs one: its engine hears of it from
    /// the poller.
    pub(crate) waker: Option<Arc<ConnWaker>>,
    /// On the turn's list of connections to serve again
    /// ([`Slot::requeue`] without a waker).
    pub(crate) queued: bool,
    /// Only while the connection holds reading state of its own (the
    /// handshake's request, an unfinished frame or message, compression, a
    /// memory budget); between messages the engine lends one from its pool.
    pub(crate) reading: Option<Box<Receiver>>,
    /// The connection's inflater while it has no inbox of its own
    /// (compression negotiated, no message in progress).
    pub(crate) parked: Option<Box<Inflater>>,
    /// The deadline this connection has in the engine's timer heap: the
    /// handshake's, then the core's.
    pub(crate) timer_at: Option<Instant>,
    pub(crate) stage: Stage,
    pub(crate) data: Option<T>,
    pub(crate) c: Conn,
}

impl<T> Slot<T> {
    /// Serves the connection again soon (next turn), once however often
    /// asked before it is served.
    #[inline]
    pub(crate) fn requeue(&mut self, turn: &mut Turn) {
        match &self.waker {
            Some(w) => w.requeue(),
            None => {
                if !self.queued {
                    self.queued = true;
                    turn.again.push(self.c.key);
                }
            }
        }
    }

    /// The connection is being served: from now on, a wake queues it
    /// again.
    #[inline]
    pub(crate) fn serving(&mut self) {
        self.queued = false;
        if let Some(w) = &self.waker {
            w.serving();
        }
    }

    /// The waker the transport is polled with: the connection's own, or
    /// none for a socket of the engine's poller (the poller reports it,
    /// even after a budget wait gave it a waker). Poll with
    /// [`Waker::noop`](std::task::Waker::noop) when `None`.
    #[inline]
    pub(crate) fn io_waker(&self) -> Option<std::task::Waker> {
        match (&self.io, &self.waker) {
            #[cfg(unix)]
            (Transport::Polled(_), _) => None,
            (_, w) => w.as_ref().map(|w| std::task::Waker::from(w.clone())),
        }
    }

    /// A waker that queues this connection, made when first needed for a
    /// connection of the engine's own poller.
    pub(crate) fn waker(&mut self, turn: &Turn) -> std::task::Waker {
        let w = self
            .waker
            .get_or_insert_with(|| ConnWaker::new(self.c.key, turn.queue.clone()));
        std::task::Waker::from(w.clone())
    }
}

/// How a connection ended, beyond what its core knows.
#[derive(Debug, Default)]
pub(crate) struct Ending {
    /// The peer's close frame, for the close callback.
    pub(crate) peer_close: Option<CloseFrame>,
    /// The transport failed, or the backpressure policy closed it.
    pub(crate) error: Option<Error>,
    /// The close frame asked for (`Conn::closing`), sent at the end of
    /// the turn.
    pub(crate) close: Option<CloseFrame>,
}

/// The part of a connection that sending touches.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) key: Key,
    /// The core, the encoder, and the bytes to write in a queue lent by
    /// the engine's pool: corked during the turn, written at its end; what
    /// the peer does not take stays there (its backpressure).
    pub(crate) d: Driver,
    pub(crate) ending: Option<Box<Ending>>,
    /// In the turn's list of connections to write out.
    pub(crate) dirty: bool,
    /// The transport refused bytes: reading pauses until it takes them.
    pub(crate) write_blocked: bool,
    /// End at once, writing nothing more.
    pub(crate) abandoned: bool,
    /// A send found more than `max_backpressure` waiting: the handler
    /// hears when it is all written.
    pub(crate) wants_drain: bool,
    /// Closing was asked for: nothing more is sent or handed to the
    /// handler, and the close frame goes out at the end of the turn, after
    /// what was published this turn to the connection's topics.
    pub(crate) closing: bool,
    /// Failed for backpressure: once shut down, the peer's input is read
    /// and dropped until it ends the transport ([`Stage::Lingering`]), as
    /// the backlog it was slow to read may still be in the kernel.
    pub(crate) linger: bool,
}

/// What sends need beyond the connection: the turn's time, the pool of
/// write buffers, the list of connections to write at the end of the turn,
/// and the backpressure settings.
#[derive(Debug)]
pub(crate) struct Turn {
    /// The hub's handle, for handlers ([`Ws::handle`]).
    pub(crate) handle: HubHandle,
    /// Which hub of the process this engine serves.
    pub(crate) hub: u32,
    pub(crate) engine: u32,
    /// The payload of the message being handled, when it is large and the
    /// connection's own (not in the shared read buffer): a send of exactly
    /// these bytes shares them instead of copying.
    pub(crate) current: Option<Bytes>,
    /// The time, read once per turn when first needed.
    pub(crate) now: Option<Instant>,
    pub(crate) pool: QueuePool,
    pub(crate) dirty: Vec<u32>,
    pub(crate) max_backpressure: usize,
    pub(crate) policy: BackpressurePolicy,
    /// The engine's subscriptions to topics.
    pub(crate) subs: Subs,
    /// Connections whose close frame is to go out at the end of the turn.
    pub(crate) closing: Vec<Key>,
    /// Connections the engine itself queued to serve again (those without
    /// a waker), served next turn.
    pub(crate) again: Vec<Key>,
    /// The engine is to take another turn at once.
    pub(crate) again_now: bool,
    /// The queue connections' wakers push to.
    pub(crate) queue: Arc<ReadyQueue>,
}

impl Turn {
    #[inline]
    pub(crate) fn now(&mut self) -> Instant {
        *self
            .now
            .get_or_insert_with(|| tokio::time::Instant::now().into_std())
    }

    pub(crate) fn id(&self, key: Key) -> ConnId {
        ConnId {
            hub: self.hub,
            engine: self.engine,
            slot: key.slot,
            generation: key.generation,
        }
    }
}

/// The engine's write queues: a buffer is kept up to 256 KiB, 8 MiB of
/// them in all, and at most 4 096 queues (those holding only shared frames
/// have no bytes of their own to count); a new one gets 16 KiB.
pub(crate) const POOL_LIMITS: PoolLimits = PoolLimits {
    buffer_len: 16 << 10,
    buffer_max: 256 << 10,
    count_max: 4096,
    bytes_max: 8 << 20,
};

impl Conn {
    pub(crate) fn new(key: Key, conn: Connection) -> Self {
        Conn {
            key,
            d: Driver::new(conn, FrameEncoder::new(Role::Server)),
            ending: None,
            dirty: false,
            write_blocked: false,
            abandoned: false,
            wants_drain: false,
            closing: false,
            linger: false,
        }
    }

    /// The protocol core.
    #[inline]
    pub(crate) fn conn(&mut self) -> &mut Connection {
        self.d.conn_mut()
    }

    /// Bytes waiting to be written.
    pub(crate) fn buffered(&self) -> usize {
        self.d.buffered()
    }

    /// Puts the connection on the turn's list to write.
    #[inline]
    fn mark(&mut self, turn: &mut Turn) {
        if !self.dirty {
            self.dirty = true;
            turn.dirty.push(self.key.slot);
        }
    }

    /// Writes what waits, in order, until the transport takes no more
    /// (`Pending`) or all is written (the queue then goes back to `pool`).
    pub(crate) fn poll_write_out(
        &mut self,
        io: &mut Transport,
        cx: &mut Context<'_>,
        pool: &mut QueuePool,
    ) -> Poll<io::Result<()>> {
        loop {
            let written = self.d.with_slices(|s| match s {
                [] => None,
                [one] => Some(Pin::new(&mut *io).poll_write(cx, one)),
                // Shared frames (publishes, large echoes) and what was
                // encoded around them go out in one system call.
                _ => Some(Pin::new(&mut *io).poll_write_vectored(cx, s)),
            });
            let Some(written) = written else {
                return Poll::Ready(Ok(()));
            };
            let n = match written {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {
                    self.d.write_blocked();
                    return Poll::Pending;
                }
            };
            self.d.written(n, pool);
        }
    }

    /// Queues bytes that are not frames (the handshake's response).
    pub(crate) fn queue_raw(&mut self, turn: &mut Turn, bytes: &[u8]) {
        self.mark(turn);
        self.d.queue_raw(bytes, &mut turn.pool);
    }

    /// Drops what waits to be written.
    pub(crate) fn discard_out(&mut self, pool: &mut QueuePool) {
        self.d.discard_writes(pool);
    }

    fn ending(&mut self) -> &mut Ending {
        self.ending.get_or_insert_with(Default::default)
    }

    /// Records the peer's close frame.
    pub(crate) fn peer_closed(&mut self, frame: Option<CloseFrame>) {
        self.ending().peer_close = frame;
    }

    /// Records why the connection ends, unless it is known already.
    pub(crate) fn set_error(&mut self, err: Error) {
        let e = &mut self.ending().error;
        if e.is_none() {
            *e = Some(err);
        }
    }

    /// Encodes the frames the core owes the peer (pongs, the close echo,
    /// keepalive pings); the backpressure limit does not hold them back.
    /// Asked after every message, so the usual answer, none, is inline.
    #[inline]
    pub(crate) fn transmit_owed(&mut self, turn: &mut Turn) {
        if self.d.conn().owes() {
            self.transmit_owed_now(turn);
        }
    }

    #[inline(never)]
    fn transmit_owed_now(&mut self, turn: &mut Turn) {
        match self.d.transmit(&mut turn.pool) {
            Ok(false) => {}
            Ok(true) => self.mark(turn),
            // The core only owes frames that encode; should one not, the
            // connection cannot go on.
            Err(e) => self.fail(e.into()),
        }
    }

    /// Ends the connection at once with `err`.
    pub(crate) fn fail(&mut self, err: Error) {
        self.set_error(err);
        self.d.conn_mut().abandon();
        self.abandoned = true;
    }

    /// The peer reads too slowly for the backpressure policy: the core
    /// fails the connection (its close frame next, after the frame being
    /// written; what waits behind that is dropped).
    #[cold]
    fn fail_backlogged(&mut self, turn: &mut Turn, buffered: usize) {
        let now = turn.now();
        match self
            .d
            .fail_backlogged(buffered, turn.max_backpressure, now, &mut turn.pool)
        {
            Ok(true) => {
                self.linger = true;
                self.mark(turn);
            }
            // Closing already: its close frame waits behind the backlog,
            // which the peer is not reading.
            Ok(false) => self.fail(Error::Backpressure {
                buffered,
                limit: turn.max_backpressure,
            }),
            Err(e) => self.fail(e.into()),
        }
    }

    /// The transport ended: EOF (`None`) or an error. The core says
    /// whether that is part of closing.
    pub(crate) fn transport_ended(&mut self, err: Option<io::Error>) {
        let err = err.unwrap_or_else(|| {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed without a close frame",
            )
        });
        if let Some(err) = self.d.conn_mut().handle_transport_error(err) {
            self.set_error(err.into());
        }
        self.abandoned = true;
    }

    /// The common path of every send: the backpressure policy, then the
    /// driver's rules and encoding (`send`).
    fn send_with(
        &mut self,
        turn: &mut Turn,
        published: bool,
        send: impl FnOnce(
            &mut Driver,
            Instant,
            &mut QueuePool,
        ) -> std::result::Result<Outgoing, crate::proto::Error>,
    ) -> Result<SendStatus> {
        // A publish goes out until the close frame does: it was made
        // before the end of the turn the close was asked in.
        if self.abandoned || (self.closing && !published) || self.d.conn().is_close_sent() {
            // Closing (a backpressure close among them, whose frame waits
            // behind the frame being written): before the limit is looked
            // at, so that a second send in the call that met it is told so
            // rather than meeting the policy again.
            return Ok(SendStatus::Closed);
        }
        let buffered = self.buffered();
        if buffered > turn.max_backpressure && self.closing {
            // A publish to a connection whose close was asked for: the
            // close comes next, as asked (not the policy's 1013).
            return Ok(SendStatus::Dropped);
        }
        if buffered > turn.max_backpressure {
            self.wants_drain = true;
            return Ok(match turn.policy {
                BackpressurePolicy::Drop => SendStatus::Dropped,
                BackpressurePolicy::Close => {
                    self.fail_backlogged(turn, buffered);
                    SendStatus::Dropped
                }
            });
        }
        let now = turn.now();
        // The hub reports a send after a close as `SendStatus::Closed`
        // where the Stream returns the core's error.
        match send(&mut self.d, now, &mut turn.pool) {
            Ok(Outgoing::Send) => self.mark(turn),
            Ok(Outgoing::Skip)
            | Err(crate::proto::Error::AlreadyClosed | crate::proto::Error::ConnectionClosed) => {
                return Ok(SendStatus::Closed);
            }
            Err(e) => return Err(e.into()),
        }
        Ok(if self.buffered() > turn.max_backpressure {
            self.wants_drain = true;
            SendStatus::Backpressure
        } else {
            SendStatus::Sent
        })
    }

    pub(crate) fn send_message(&mut self, turn: &mut Turn, msg: &Message) -> Result<SendStatus> {
        self.send_with(turn, false, |d, now, pool| d.send(msg.clone(), now, pool))
    }

    pub(crate) fn send_data(
        &mut self,
        turn: &mut Turn,
        opcode: OpCode,
        payload: &[u8],
    ) -> Result<SendStatus> {
        // The message being handled, sent on as it is (an echo, a relay):
        // the driver queues its payload where it was read when nothing
        // transforms it.
        let same = turn
            .current
            .as_ref()
            .filter(|c| c.as_ptr() == payload.as_ptr() && c.len() == payload.len());
        if let Some(current) = same.cloned() {
            return self.send_with(turn, false, |d, now, pool| {
                d.send_data_shared(opcode, current, now, pool)
            });
        }
        self.send_with(turn, false, |d, now, pool| {
            d.send_data(opcode, payload, now, pool)
        })
    }

    pub(crate) fn send_prepared(
        &mut self,
        turn: &mut Turn,
        msg: &PreparedMessage,
    ) -> Result<SendStatus> {
        // A publish to thousands: each connection queues a reference to
        // the one frame (compressed once per window size), not a copy.
        self.send_with(turn, false, |d, now, pool| d.send_prepared(msg, now, pool))
    }

    /// Sends what was published to a topic the connection subscribes to,
    /// as [`send_prepared`](Self::send_prepared), closing or not.
    pub(crate) fn deliver(&mut self, turn: &mut Turn, msg: &PreparedMessage) -> Result<SendStatus> {
        self.send_with(turn, true, |d, now, pool| d.send_prepared(msg, now, pool))
    }

    pub(crate) fn close(&mut self, turn: &mut Turn, code: CloseCode, reason: &str) -> Result<()> {
        self.close_with(turn, Some(CloseFrame::truncated(code, reason)))
    }

    /// Asks for the closing handshake with `frame`: checked now (an
    /// invalid code is refused and changes nothing), sent by
    /// `send_close` at the end of the turn. Closing twice does nothing.
    pub(crate) fn close_with(&mut self, turn: &mut Turn, frame: Option<CloseFrame>) -> Result<()> {
        CloseFrame::encode(frame.as_ref()).map_err(Error::from)?;
        if self.is_closing() {
            return Ok(());
        }
        self.closing = true;
        self.ending().close = frame;
        turn.closing.push(self.key);
        Ok(())
    }

    /// Sends the close frame [`close_with`](Self::close_with) asked for,
    /// unless the closing handshake began otherwise meanwhile.
    pub(crate) fn send_close(&mut self, turn: &mut Turn) {
        if !std::mem::replace(&mut self.closing, false) {
            return;
        }
        let frame = self.ending.as_mut().and_then(|e| e.close.take());
        if !self.abandoned {
            // Behind what was sent before it, whatever waits: the close
            // asked for is not a send the backpressure policy refuses (nor
            // turns into its own 1013).
            let now = turn.now();
            if let Ok(Outgoing::Send) = self.d.send(Message::Close(frame), now, &mut turn.pool) {
                self.mark(turn);
            }
        }
    }

    /// Whether a close was asked for and has not gone out yet: until it
    /// does, nothing more of the peer's input is read or decoded, so that
    /// nothing the peer sent after the closing message (its own close, a
    /// violation, its end) takes the place of the close asked for.
    #[inline]
    pub(crate) fn close_pending(&self) -> bool {
        self.closing
    }

    /// Whether a close was asked for, went out or came in: nothing more
    /// is sent, and the handler hears no more messages.
    #[inline]
    pub(crate) fn is_closing(&self) -> bool {
        self.closing
            || self.abandoned
            || self.d.conn().is_close_sent()
            || self.d.conn().is_peer_gone()
    }
}

/// A hub connection as a [`Handler`](crate::hub::Handler) sees it during a
/// call: its id and data, and sending to it. What is sent is corked and
/// written at the end of the engine's turn.
#[derive(Debug)]
pub struct Ws<'a, T> {
    pub(crate) io: &'a Transport,
    pub(crate) c: &'a mut Conn,
    pub(crate) data: &'a mut T,
    pub(crate) turn: &'a mut Turn,
}

impl<T> Ws<'_, T> {
    /// The connection's id, for [`HubHandle`](crate::hub::HubHandle).
    pub fn id(&self) -> ConnId {
        self.turn.id(self.c.key)
    }

    /// The peer's address: for TCP the socket's (`None` once the socket
    /// is gone), for a transport handed over what its giver said (see
    /// [`Addresses`]).
    ///
    /// ```
    /// use wavesock::hub::{HubMessage, Ws};
    ///
    /// fn log(ws: &mut Ws<'_, ()>, msg: HubMessage<'_>) {
    ///     match ws.remote_addr() {
    ///         Some(peer) => println!("{} bytes from {peer}", msg.as_bytes().len()),
    ///         None => println!("{} bytes from {}", msg.as_bytes().len(), ws.id()),
    ///     }
    /// }
    /// ```
    pub fn remote_addr(&self) -> Option<std::net::SocketAddr> {
        self.io.remote_addr()
    }

    /// This end's address, as [`remote_addr`](Self::remote_addr).
    pub fn local_addr(&self) -> Option<std::net::SocketAddr> {
        self.io.local_addr()
    }

    /// The hub's handle: to reach this connection (or others) later, from
    /// a task the handler spawns.
    pub fn handle(&self) -> &HubHandle {
        &self.turn.handle
    }

    /// The connection's data.
    pub fn data(&self) -> &T {
        self.data
    }

    /// The connection's data, to change.
    pub fn data_mut(&mut self) -> &mut T {
        self.data
    }

    /// Sends a text message from a borrowed string.
    pub fn send_text(&mut self, text: &str) -> Result<SendStatus> {
        self.c.send_data(self.turn, OpCode::Text, text.as_bytes())
    }

    /// Sends a binary message from a borrowed slice.
    pub fn send_binary(&mut self, data: &[u8]) -> Result<SendStatus> {
        self.c.send_data(self.turn, OpCode::Binary, data)
    }

    /// Sends a received message back as it is (an echo), or any other
    /// borrowed message.
    pub fn send_borrowed(&mut self, msg: HubMessage<'_>) -> Result<SendStatus> {
        match msg {
            HubMessage::Text(t) => self.send_text(t),
            HubMessage::Binary(b) => self.send_binary(b),
        }
    }

    /// Sends any message: data, a ping or pong, a close frame (as
    /// [`close`](Self::close)), or a fragment ([`Message::Frame`]).
    pub fn send(&mut self, msg: &Message) -> Result<SendStatus> {
        match msg {
            Message::Close(frame) => self
                .c
                .close_with(self.turn, frame.clone())
                .map(|()| SendStatus::Sent),
            _ => self.c.send_message(self.turn, msg),
        }
    }

    /// Sends a message prepared once for many connections.
    pub fn send_prepared(&mut self, msg: &PreparedMessage) -> Result<SendStatus> {
        self.c.send_prepared(self.turn, msg)
    }

    /// Starts the closing handshake with `code` and `reason` (cut to 123
    /// bytes); the connection ends when the peer answers or the close
    /// timeout passes. Closing twice does nothing.
    ///
    /// From this call on, the handler hears no more `message`, `ping`,
    /// `pong` or `drain` for the connection (the rest of what the same
    /// read brought is dropped), and sends to it return
    /// [`SendStatus::Closed`]. What was sent before the call, and what was
    /// published to its topics before the end of the engine's turn, is
    /// written before the close frame, which goes out at the end of the
    /// turn (up to the turn's cap of publishes: past it, the close does
    /// not wait for the rest, which the connection then does not get).
    pub fn close(&mut self, code: CloseCode, reason: &str) -> Result<()> {
        self.c.close(self.turn, code, reason)
    }

    /// Bytes waiting to be written to this peer.
    pub fn buffered_amount(&self) -> usize {
        self.c.buffered()
    }

    /// Whether the connection is closing: [`close`](Self::close) was
    /// called (here or through a handle), or a close frame came in; data
    /// can no longer be sent.
    pub fn is_closing(&self) -> bool {
        self.c.is_closing()
    }

    /// Subscribes the connection to `topic`: what is published to it from
    /// now on is sent to this peer, until it unsubscribes or is gone. False
    /// if it was subscribed already.
    pub fn subscribe(&mut self, topic: &str) -> bool {
        self.turn.subs.subscribe(self.c.key, topic)
    }

    /// Unsubscribes the connection from `topic`; false if it was not
    /// subscribed.
    pub fn unsubscribe(&mut self, topic: &str) -> bool {
        self.turn.subs.unsubscribe(self.c.key, topic)
    }

    /// Whether the connection subscribes to `topic`.
    pub fn is_subscribed(&self, topic: &str) -> bool {
        self.turn.subs.is_subscribed(self.c.key, topic)
    }

    /// The topics the connection subscribes to.
    pub fn topics(&self) -> impl Iterator<Item = &str> {
        self.turn.subs.of(self.c.key).iter().map(|t| &**t)
    }

    /// The registry the hub's topics live in, to publish to everyone
    /// (this connection included) or look around.
    pub fn registry(&self) -> &Topics {
        &self.turn.subs.topics
    }

    /// Publishes a message to `topic`: to every subscriber but this
    /// connection (as uWebSockets' `ws.publish`; publish through
    /// [`registry`](Self::registry) to include it), on every hub of the
    /// registry and, with a link, every linked server. Encoded once.
    pub fn publish(&mut self, topic: &str, msg: HubMessage<'_>) -> Published {
        let msg = match msg {
            HubMessage::Text(t) => Message::text(t.to_owned()),
            HubMessage::Binary(b) => Message::binary(Bytes::copy_from_slice(b)),
        };
        let prepared = PreparedMessage::new(&msg).expect("data messages always prepare");
        self.publish_prepared(topic, &prepared)
    }

    /// Publishes a prepared message to `topic`, as [`publish`](Self::publish).
    pub fn publish_prepared(&mut self, topic: &str, msg: &PreparedMessage) -> Published {
        let subs = &self.turn.subs;
        let except = subs
            .is_subscribed(self.c.key, topic)
            .then(|| (subs.inbox.id(), token(self.c.key)));
        subs.topics.publish_except(topic, msg, except)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn() -> Conn {
        let key = Key {
            slot: 0,
            generation: 0,
        };
        let now = Instant::now();
        Conn::new(
            key,
            Connection::new(Role::Server, crate::Config::default().timers(), now),
        )
    }

    fn turn() -> Turn {
        Turn {
            handle: HubHandle::new(Vec::new(), Vec::new(), crate::topics::Topics::new()),
            hub: 0,
            engine: 0,
            current: None,
            now: None,
            pool: QueuePool::new(POOL_LIMITS),
            dirty: Vec::new(),
            max_backpressure: 1 << 20,
            policy: BackpressurePolicy::Close,
            subs: Subs::new(crate::topics::Topics::new()),
            closing: Vec::new(),
            again: Vec::new(),
            again_now: false,
            queue: Default::default(),
        }
    }

    #[test]
    fn large_prepared_frames_are_shared_and_small_ones_copied() {
        let mut turn = turn();
        let mut c = conn();
        let big = PreparedMessage::new(&Message::binary(vec![7u8; 1024])).unwrap();
        let small = PreparedMessage::new(&Message::text("hi")).unwrap();
        assert_eq!(c.send_prepared(&mut turn, &big).unwrap(), SendStatus::Sent);
        let mut iov = [IoSlice::new(&[]); 4];
        assert_eq!(c.d.slices(&mut iov), 1);
        assert_eq!(&*iov[0], &big.frame()[..], "the same bytes");
        assert_eq!(iov[0].as_ptr(), big.frame().as_ptr(), "not a copy");
        assert_eq!(turn.dirty, [0]);
        assert_eq!(
            c.send_prepared(&mut turn, &small).unwrap(),
            SendStatus::Sent
        );
        let mut iov = [IoSlice::new(&[]); 4];
        assert_eq!(c.d.slices(&mut iov), 2, "the small one copied after it");
        assert_eq!(&*iov[1], &small.frame()[..]);
        assert_eq!(c.buffered(), big.frame().len() + small.frame().len());
    }

    #[test]
    fn a_shared_frame_past_the_limit_says_backpressure() {
        let mut turn = turn();
        turn.max_backpressure = 1500;
        let mut c = conn();
        let big = PreparedMessage::new(&Message::binary(vec![7u8; 1024])).unwrap();
        assert_eq!(c.send_prepared(&mut turn, &big).unwrap(), SendStatus::Sent);
        assert_eq!(
            c.send_prepared(&mut turn, &big).unwrap(),
            SendStatus::Backpressure
        );
        assert!(c.wants_drain);
        assert_eq!(
            c.send_prepared(&mut turn, &big).unwrap(),
            SendStatus::Dropped
        );
    }
}
