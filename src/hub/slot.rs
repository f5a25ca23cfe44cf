//! One hub connection: its transport, protocol core, encoder and the bytes
//! it holds, and [`Ws`], what a handler sees of it.

use std::io::{self, IoSlice};
use std::sync::Arc;
use std::time::Instant;

use std::pin::Pin;
use std::task::{Context, Poll};

use std::collections::VecDeque;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::error::{Error, Result};
use crate::hub::config::BackpressurePolicy;
use crate::hub::event::{ConnId, HubMessage, SendStatus};
use crate::hub::subs::{Subs, token};
use crate::hub::wake::{ConnWaker, Key};
use crate::proto::Role;
use crate::proto::close::{CloseCode, CloseFrame};
use crate::proto::conn::{Connection, Outgoing, Phase};
use crate::proto::decoder::MessageDecoder;
use crate::proto::encoder::FrameEncoder;
use crate::proto::header::OpCode;
use crate::proto::message::{Message, PreparedMessage};
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
}

/// Any transport a hub can serve besides TCP (TLS, Unix sockets, test
/// transports).
pub(crate) trait Io: AsyncRead + AsyncWrite + Send + 'static {}

impl<T: AsyncRead + AsyncWrite + Send + 'static> Io for T {}

/// A connection's transport: TCP, the usual case, without indirection.
/// Calls on other transports retry `Interrupted` and take `WouldBlock` as
/// "not now", as everywhere else in the crate ([`Retrying`]); Tokio's
/// `TcpStream` never returns either.
pub(crate) enum Transport {
    Tcp(TcpStream),
    Other(Pin<Box<dyn Io>>),
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Transport::Tcp(t) => t.fmt(f),
            Transport::Other(_) => f.write_str("Transport::Other"),
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
            Transport::Other(t) => Pin::new(&mut Retrying(t)).poll_read(cx, buf),
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
            Transport::Other(t) => Pin::new(&mut Retrying(t)).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Transport::Tcp(t) => Pin::new(t).poll_write_vectored(cx, bufs),
            Transport::Other(t) => Pin::new(&mut Retrying(t)).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Transport::Tcp(t) => t.is_write_vectored(),
            Transport::Other(t) => t.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Tcp(t) => Pin::new(t).poll_flush(cx),
            Transport::Other(t) => Pin::new(&mut Retrying(t)).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Tcp(t) => Pin::new(t).poll_shutdown(cx),
            Transport::Other(t) => Pin::new(&mut Retrying(t)).poll_shutdown(cx),
        }
    }
}

/// A connection in a hub's slot table.
///
/// Kept small: an idle connection is this, its waker and its socket's
/// registration. What only some connections need at a time is boxed
/// (decoding state, bytes to write, how it ended).
#[derive(Debug)]
pub(crate) struct Slot<T> {
    pub(crate) io: Transport,
    pub(crate) waker: Arc<ConnWaker>,
    /// Only while the connection holds reading state of its own (the
    /// handshake's request, an unfinished frame or message, compression, a
    /// memory budget); between messages the engine lends one from its pool.
    pub(crate) reading: Option<Box<Reading>>,
    /// The deadline this connection has in the engine's timer heap: the
    /// handshake's, then the core's.
    pub(crate) timer_at: Option<Instant>,
    pub(crate) stage: Stage,
    pub(crate) data: Option<T>,
    pub(crate) c: Conn,
}

/// A connection's reading state: its decoder, and bytes read but not
/// decoded yet (empty, without an allocation, most of the time).
#[derive(Debug)]
pub(crate) struct Reading {
    pub(crate) decoder: MessageDecoder,
    pub(crate) pending: BytesMut,
}

/// How a connection ended, beyond what its core knows.
#[derive(Debug, Default)]
pub(crate) struct Ending {
    /// The peer's close frame, for the close callback.
    pub(crate) peer_close: Option<CloseFrame>,
    /// The transport failed, or the backpressure policy closed it.
    pub(crate) error: Option<Error>,
}

/// The part of a connection that sending touches.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) key: Key,
    pub(crate) conn: Connection,
    /// Only with compression: a server's encoder holds no other state, so
    /// the others encode with one made on the spot.
    pub(crate) encoder: Option<Box<FrameEncoder>>,
    /// Bytes to write, from the engine's pool: corked during the turn,
    /// written at its end; what the peer does not take stays here (its
    /// backpressure).
    out: Option<Box<Out>>,
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
}

/// What sends need beyond the connection: the turn's time, the pool of
/// write buffers, the list of connections to write at the end of the turn,
/// and the backpressure settings.
#[derive(Debug)]
pub(crate) struct Turn {
    /// Which hub of the process this engine serves.
    pub(crate) hub: u32,
    pub(crate) engine: u32,
    /// The payload of the message being handled, when it is large and the
    /// connection's own (not in the shared read buffer): a send of exactly
    /// these bytes shares them instead of copying.
    pub(crate) current: Option<Bytes>,
    /// The time, read once per turn when first needed.
    pub(crate) now: Option<Instant>,
    pub(crate) pool: Pool,
    pub(crate) dirty: Vec<u32>,
    pub(crate) max_backpressure: usize,
    pub(crate) policy: BackpressurePolicy,
    /// The engine's subscriptions to topics.
    pub(crate) subs: Subs,
}

impl Turn {
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

/// Buffers kept in the pool are at most this large; a larger one (after a
/// large message) goes back to the allocator.
const POOL_BUFFER_MAX: usize = 256 << 10;
/// The pool keeps at most this many bytes of buffers.
const POOL_BYTES_MAX: usize = 8 << 20;
/// A pooled buffer's size when the pool is empty.
const POOL_BUFFER: usize = 16 << 10;
/// The pool keeps at most this many buffers (those holding only shared
/// frames have no bytes of their own to count).
const POOL_COUNT_MAX: usize = 4096;
/// Pieces (shared frames and encoded bytes) written in one system call.
const MAX_SLICES: usize = 64;
/// A prepared frame at least this large is queued as a reference to the
/// one shared copy; a smaller one is copied (cheaper than a piece of its
/// own).
const SHARE_PREPARED_MIN: usize = 256;

/// Write buffers lent to connections while they hold bytes to write, so
/// that an idle connection holds none and a busy one allocates none.
// Boxed: a connection holds a pointer, not an `Out`, while idle.
#[allow(clippy::vec_box)]
#[derive(Debug, Default)]
pub(crate) struct Pool {
    bufs: Vec<Box<Out>>,
    bytes: usize,
}

impl Pool {
    fn take(&mut self) -> Box<Out> {
        match self.bufs.pop() {
            Some(b) => {
                self.bytes -= b.tail.capacity();
                b
            }
            // The buffer itself is allocated when first encoded into: a
            // connection sent only shared frames (a publish) needs none.
            None => Box::new(Out {
                chunks: VecDeque::new(),
                chunk_bytes: 0,
                tail: BytesMut::new(),
            }),
        }
    }

    /// Keeps an empty buffer, unless it is large or the pool is full.
    fn give(&mut self, out: Box<Out>) {
        let cap = out.tail.capacity();
        if cap <= POOL_BUFFER_MAX
            && self.bytes + cap <= POOL_BYTES_MAX
            && self.bufs.len() < POOL_COUNT_MAX
        {
            self.bytes += cap;
            self.bufs.push(out);
        }
    }
}

/// What waits to be written to a connection, in order: payloads sent from
/// where they were received (with what was encoded before them), then the
/// bytes encoded since.
#[derive(Debug)]
pub(crate) struct Out {
    chunks: VecDeque<Bytes>,
    chunk_bytes: usize,
    tail: BytesMut,
}

impl Out {
    fn len(&self) -> usize {
        self.chunk_bytes + self.tail.len()
    }

    fn push_chunk(&mut self, chunk: Bytes) {
        self.chunk_bytes += chunk.len();
        self.chunks.push_back(chunk);
    }

    /// `n` bytes from the front were written (from one piece or, by a
    /// vectored write, from several).
    fn consume(&mut self, mut n: usize) {
        while n > 0 {
            let Some(c) = self.chunks.front_mut() else {
                self.tail.advance(n);
                return;
            };
            let k = n.min(c.len());
            c.advance(k);
            self.chunk_bytes -= k;
            n -= k;
            if c.is_empty() {
                self.chunks.pop_front();
            }
        }
    }
}

impl Conn {
    pub(crate) fn new(key: Key, conn: Connection) -> Self {
        Conn {
            key,
            conn,
            encoder: None,
            out: None,
            ending: None,
            dirty: false,
            write_blocked: false,
            abandoned: false,
            wants_drain: false,
        }
    }

    /// Bytes waiting to be written.
    pub(crate) fn buffered(&self) -> usize {
        self.out.as_ref().map_or(0, |o| o.len())
    }

    /// Writes what waits, in order, until the transport takes no more
    /// (`Pending`) or all is written.
    pub(crate) fn poll_write_out(
        &mut self,
        io: &mut Transport,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        let Some(out) = self.out.as_deref_mut() else {
            return Poll::Ready(Ok(()));
        };
        loop {
            let written = if out.chunks.is_empty() {
                if out.tail.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                Pin::new(&mut *io).poll_write(cx, &out.tail)
            } else {
                // Shared frames (publishes, large echoes) and what was
                // encoded around them go out in one system call.
                let mut slices = [IoSlice::new(&[]); MAX_SLICES];
                let mut k = 0;
                for c in out.chunks.iter().take(MAX_SLICES - 1) {
                    slices[k] = IoSlice::new(c);
                    k += 1;
                }
                if k == out.chunks.len() && !out.tail.is_empty() {
                    slices[k] = IoSlice::new(&out.tail);
                    k += 1;
                }
                Pin::new(&mut *io).poll_write_vectored(cx, &slices[..k])
            };
            let n = match written {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            };
            out.consume(n);
        }
    }

    /// Encodes into the write buffer (taken from the pool if need be) and
    /// puts the connection on the turn's list to write.
    pub(crate) fn encode<R>(
        &mut self,
        turn: &mut Turn,
        f: impl FnOnce(&mut FrameEncoder, &mut BytesMut) -> R,
    ) -> R {
        self.encode_with(turn, true, f)
    }

    /// [`encode`](Self::encode); `reserve`: give a buffer that has none
    /// its pool size first (not for a send that may only queue a shared
    /// frame).
    fn encode_with<R>(
        &mut self,
        turn: &mut Turn,
        reserve: bool,
        f: impl FnOnce(&mut FrameEncoder, &mut BytesMut) -> R,
    ) -> R {
        if !self.dirty {
            self.dirty = true;
            turn.dirty.push(self.key.slot);
        }
        let out = self.out.get_or_insert_with(|| turn.pool.take());
        if reserve && out.tail.capacity() == 0 {
            out.tail.reserve(POOL_BUFFER);
        }
        match self.encoder.as_deref_mut() {
            Some(e) => f(e, &mut out.tail),
            None => f(&mut FrameEncoder::new(Role::Server), &mut out.tail),
        }
    }

    /// Queues `payload` as it is after what is queued (a header written
    /// just before it): sent from where it was received, not copied.
    fn queue_shared(&mut self, payload: Bytes) {
        if let Some(out) = self.out.as_deref_mut() {
            if !out.tail.is_empty() {
                let head = out.tail.split().freeze();
                out.push_chunk(head);
            }
            out.push_chunk(payload);
        }
    }

    /// Gives an emptied write buffer back to the pool (or to the allocator,
    /// if it grew large).
    pub(crate) fn release_out(&mut self, pool: &mut Pool) {
        if self.out.as_ref().is_some_and(|o| o.len() > 0) {
            return;
        }
        let Some(mut out) = self.out.take() else {
            return;
        };
        out.tail.clear();
        // Reclaims the space already written from; never allocates (a
        // buffer that held only shared frames stays without one).
        let _ = out.tail.try_reclaim(POOL_BUFFER);
        pool.give(out);
    }

    /// Drops what waits to be written.
    pub(crate) fn discard_out(&mut self, pool: &mut Pool) {
        if let Some(o) = self.out.as_deref_mut() {
            o.tail.clear();
            o.chunks.clear();
            o.chunk_bytes = 0;
        }
        self.release_out(pool);
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
    pub(crate) fn transmit_owed(&mut self, turn: &mut Turn) {
        while let Some(msg) = self.conn.poll_transmit() {
            if let Err(e) = self.encode(turn, |enc, out| enc.encode_message(&msg, out)) {
                // The core only owes frames that encode; should one not,
                // the connection cannot go on.
                self.fail(e.into());
                return;
            }
        }
    }

    /// Ends the connection at once with `err`.
    pub(crate) fn fail(&mut self, err: Error) {
        self.set_error(err);
        self.conn.abandon();
        self.abandoned = true;
    }

    /// The transport ended: EOF (`None`) or an error. The core says
    /// whether that is part of closing.
    pub(crate) fn transport_ended(&mut self, err: Option<io::Error>) {
        let open = self.conn.phase() == Phase::Open;
        let err = err.unwrap_or_else(|| {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed without a close frame",
            )
        });
        if let Some(err) = self.conn.handle_transport_error(err) {
            if open {
                self.set_error(err.into());
            }
        }
        self.abandoned = true;
    }

    /// The common path of every send: the backpressure policy, the core's
    /// rules, then `encode` into the write buffer.
    fn send_with(
        &mut self,
        turn: &mut Turn,
        rule: impl FnOnce(
            &mut Connection,
            Instant,
        ) -> std::result::Result<Outgoing, crate::proto::Error>,
        reserve: bool,
        encode: impl FnOnce(
            &mut FrameEncoder,
            &mut BytesMut,
        ) -> std::result::Result<(), crate::proto::Error>,
    ) -> Result<SendStatus> {
        if self.abandoned {
            return Ok(SendStatus::Closed);
        }
        let buffered = self.buffered();
        if buffered > turn.max_backpressure {
            self.wants_drain = true;
            return Ok(match turn.policy {
                BackpressurePolicy::Drop => SendStatus::Dropped,
                BackpressurePolicy::Close => {
                    self.fail(Error::Backpressure {
                        buffered,
                        limit: turn.max_backpressure,
                    });
                    SendStatus::Dropped
                }
            });
        }
        // The core's rules; the hub reports a send after a close as
        // `SendStatus::Closed` where the Stream returns the core's error.
        match rule(&mut self.conn, turn.now()) {
            Ok(Outgoing::Send) => {}
            Ok(Outgoing::Skip)
            | Err(crate::proto::Error::AlreadyClosed | crate::proto::Error::ConnectionClosed) => {
                return Ok(SendStatus::Closed);
            }
            Err(e) => return Err(e.into()),
        }
        self.encode_with(turn, reserve, encode)?;
        Ok(if self.buffered() > turn.max_backpressure {
            self.wants_drain = true;
            SendStatus::Backpressure
        } else {
            SendStatus::Sent
        })
    }

    pub(crate) fn send_message(&mut self, turn: &mut Turn, msg: &Message) -> Result<SendStatus> {
        self.send_with(
            turn,
            |c, now| c.handle_send(msg, now),
            true,
            |e, out| e.encode_message(msg, out),
        )
    }

    pub(crate) fn send_data(
        &mut self,
        turn: &mut Turn,
        opcode: OpCode,
        payload: &[u8],
    ) -> Result<SendStatus> {
        // The message being handled, sent on as it is (an echo, a relay):
        // its header is written and its payload queued where it was read,
        // when nothing transforms it (no compression on this connection).
        let same = turn.current.as_ref().filter(|c| {
            c.as_ptr() == payload.as_ptr() && c.len() == payload.len() && self.encoder.is_none()
        });
        if let Some(current) = same.cloned() {
            let len = current.len();
            let status = self.send_with(turn, data_rule(opcode), true, |e, out| {
                e.encode_header(true, opcode, len, out).map(|_| ())
            })?;
            if matches!(status, SendStatus::Sent | SendStatus::Backpressure) {
                self.queue_shared(current);
                if self.buffered() > turn.max_backpressure {
                    self.wants_drain = true;
                    return Ok(SendStatus::Backpressure);
                }
            }
            return Ok(status);
        }
        self.send_with(turn, data_rule(opcode), true, |e, out| {
            e.encode_data(opcode, payload, out)
        })
    }

    pub(crate) fn send_prepared(
        &mut self,
        turn: &mut Turn,
        msg: &PreparedMessage,
    ) -> Result<SendStatus> {
        let mut shared = None;
        let status = self.send_with(turn, data_rule(msg.opcode()), false, |e, out| {
            let frame = e.prepared_frame(msg)?;
            if frame.len() < SHARE_PREPARED_MIN {
                out.extend_from_slice(&frame);
            } else {
                shared = Some(frame);
            }
            Ok(())
        })?;
        // A publish to thousands: each connection queues a reference to
        // the one frame (compressed once per window size), not a copy in a
        // buffer of its own.
        if let Some(frame) = shared {
            self.queue_shared(frame);
            if self.buffered() > turn.max_backpressure {
                self.wants_drain = true;
                return Ok(SendStatus::Backpressure);
            }
        }
        Ok(status)
    }

    pub(crate) fn close(&mut self, turn: &mut Turn, code: CloseCode, reason: &str) -> Result<()> {
        let frame = CloseFrame::truncated(code, reason);
        self.send_message(turn, &Message::Close(Some(frame)))
            .map(|_| ())
    }
}

/// The core's rule for a whole data (or prepared) frame of `opcode`.
fn data_rule(
    opcode: OpCode,
) -> impl FnOnce(&mut Connection, Instant) -> std::result::Result<Outgoing, crate::proto::Error> {
    move |c, now| c.handle_send_frame(opcode, true, now)
}

/// A hub connection as a [`Handler`](crate::hub::Handler) sees it during a
/// call: its id and data, and sending to it. What is sent is corked and
/// written at the end of the engine's turn.
#[derive(Debug)]
pub struct Ws<'a, T> {
    pub(crate) c: &'a mut Conn,
    pub(crate) data: &'a mut T,
    pub(crate) turn: &'a mut Turn,
}

impl<T> Ws<'_, T> {
    /// The connection's id, for [`HubHandle`](crate::hub::HubHandle).
    pub fn id(&self) -> ConnId {
        self.turn.id(self.c.key)
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
        self.c.send_message(self.turn, msg)
    }

    /// Sends a message prepared once for many connections.
    pub fn send_prepared(&mut self, msg: &PreparedMessage) -> Result<SendStatus> {
        self.c.send_prepared(self.turn, msg)
    }

    /// Starts the closing handshake with `code` and `reason` (cut to 123
    /// bytes); the connection ends when the peer answers or the close
    /// timeout passes. Closing twice does nothing.
    pub fn close(&mut self, code: CloseCode, reason: &str) -> Result<()> {
        self.c.close(self.turn, code, reason)
    }

    /// Bytes waiting to be written to this peer.
    pub fn buffered_amount(&self) -> usize {
        self.c.buffered()
    }

    /// Whether a close frame went out or came in: data can no longer be
    /// sent.
    pub fn is_closing(&self) -> bool {
        self.c.abandoned || self.c.conn.is_close_sent() || self.c.conn.is_peer_gone()
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

    fn out_with(chunks: &[&'static [u8]], tail: &[u8]) -> Out {
        let mut out = Out {
            chunks: VecDeque::new(),
            chunk_bytes: 0,
            tail: BytesMut::from(tail),
        };
        for c in chunks {
            out.push_chunk(Bytes::from_static(c));
        }
        out
    }

    #[test]
    fn a_vectored_write_consumes_across_pieces_in_order() {
        let mut out = out_with(&[b"abc", b"de"], b"fgh");
        assert_eq!(out.len(), 8);
        // Part of the first piece.
        out.consume(2);
        assert_eq!(&out.chunks[0][..], b"c");
        assert_eq!(out.len(), 6);
        // The rest of it, all of the second and one byte of the tail.
        out.consume(4);
        assert!(out.chunks.is_empty());
        assert_eq!(out.chunk_bytes, 0);
        assert_eq!(&out.tail[..], b"gh");
        out.consume(2);
        assert_eq!(out.len(), 0);
    }

    #[test]
    fn the_pool_keeps_buffers_up_to_its_count_and_bytes() {
        let mut pool = Pool::default();
        let fresh = pool.take();
        assert_eq!(
            fresh.tail.capacity(),
            0,
            "allocated when first encoded into"
        );
        for _ in 0..POOL_COUNT_MAX + 10 {
            pool.give(Box::new(out_with(&[], b"")));
        }
        assert_eq!(pool.bufs.len(), POOL_COUNT_MAX);
        let mut pool = Pool::default();
        let big = || {
            Box::new(Out {
                chunks: VecDeque::new(),
                chunk_bytes: 0,
                tail: BytesMut::with_capacity(POOL_BUFFER_MAX),
            })
        };
        for _ in 0..POOL_BYTES_MAX / POOL_BUFFER_MAX + 3 {
            pool.give(big());
        }
        assert!(pool.bytes <= POOL_BYTES_MAX);
        assert_eq!(pool.bufs.len(), POOL_BYTES_MAX / POOL_BUFFER_MAX);
        let taken = pool.take();
        assert_eq!(pool.bytes, POOL_BYTES_MAX - taken.tail.capacity());
    }

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
            hub: 0,
            engine: 0,
            current: None,
            now: None,
            pool: Pool::default(),
            dirty: Vec::new(),
            max_backpressure: 1 << 20,
            policy: BackpressurePolicy::Close,
            subs: Subs::new(crate::topics::Topics::new()),
        }
    }

    #[test]
    fn large_prepared_frames_are_shared_and_small_ones_copied() {
        let mut turn = turn();
        let mut c = conn();
        let big = PreparedMessage::new(&Message::binary(vec![7u8; 1024])).unwrap();
        let small = PreparedMessage::new(&Message::text("hi")).unwrap();
        assert_eq!(c.send_prepared(&mut turn, &big).unwrap(), SendStatus::Sent);
        let out = c.out.as_deref().unwrap();
        assert_eq!(out.chunks.len(), 1);
        assert_eq!(out.chunks[0], big.frame(), "the same bytes");
        assert_eq!(out.chunks[0].as_ptr(), big.frame().as_ptr(), "not a copy");
        assert_eq!(out.tail.capacity(), 0, "no buffer of its own for it");
        assert_eq!(turn.dirty, [0]);
        assert_eq!(
            c.send_prepared(&mut turn, &small).unwrap(),
            SendStatus::Sent
        );
        let out = c.out.as_deref().unwrap();
        assert_eq!(out.chunks.len(), 1);
        assert_eq!(&out.tail[..], &small.frame()[..]);
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
