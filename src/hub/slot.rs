//! One hub connection: its transport, protocol core, encoder and the bytes
//! it holds, and [`Ws`], what a handler sees of it.

use std::io;
use std::sync::Arc;
use std::time::Instant;

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::error::{Error, Result};
use crate::hub::wake::ConnWaker;
use crate::hub::{BackpressurePolicy, ConnId, HubMessage, SendStatus};
use crate::proto::close::{CloseCode, CloseFrame};
use crate::proto::conn::{Connection, Phase};
use crate::proto::decoder::MessageDecoder;
use crate::proto::encoder::FrameEncoder;
use crate::proto::header::OpCode;
use crate::proto::message::{Message, PreparedMessage};
use crate::retry::Retrying;

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
#[derive(Debug)]
pub(crate) struct Slot<T> {
    pub(crate) io: Transport,
    pub(crate) waker: Arc<ConnWaker>,
    /// Only while the connection holds decoding state of its own (an
    /// unfinished message, compression, a memory budget); between messages
    /// the engine lends one from its pool.
    pub(crate) decoder: Option<Box<MessageDecoder>>,
    /// Bytes read but not decoded yet: an unfinished frame, or the
    /// handshake's request. Empty (no allocation) most of the time.
    pub(crate) pending: BytesMut,
    /// The deadline this connection has in the engine's timer heap.
    pub(crate) timer_at: Option<Instant>,
    /// Until when the handshake may take.
    pub(crate) handshake_deadline: Option<Instant>,
    pub(crate) stage: Stage,
    pub(crate) data: Option<T>,
    pub(crate) c: Conn,
}

/// The part of a connection that sending touches.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) id: ConnId,
    pub(crate) conn: Connection,
    pub(crate) encoder: FrameEncoder,
    /// Bytes to write: corked during the turn, written at its end; what
    /// the peer does not take stays here (its backpressure).
    pub(crate) out: BytesMut,
    /// In the turn's list of connections to write out.
    pub(crate) dirty: bool,
    /// The transport refused bytes: reading pauses until it takes them.
    pub(crate) write_blocked: bool,
    /// The peer's close frame, for the close callback.
    pub(crate) peer_close: Option<Box<CloseFrame>>,
    /// Why the connection ends, when the core does not know: the
    /// transport failed, or the backpressure policy closed it.
    pub(crate) error: Option<Box<Error>>,
    /// End at once, writing nothing more.
    pub(crate) abandoned: bool,
}

/// What sends need beyond the connection: the turn's time, the pool of
/// write buffers, the list of connections to write at the end of the turn,
/// and the backpressure settings.
#[derive(Debug)]
pub(crate) struct Turn {
    pub(crate) now: Instant,
    pub(crate) pool: Vec<BytesMut>,
    pub(crate) dirty: Vec<u32>,
    pub(crate) max_backpressure: usize,
    pub(crate) policy: BackpressurePolicy,
}

/// Buffers kept in the pool are at most this large; a larger one (after a
/// large message) goes back to the allocator.
pub(crate) const POOL_BUFFER_MAX: usize = 64 << 10;
/// At most this many buffers are pooled.
pub(crate) const POOL_MAX: usize = 1024;
/// A pooled buffer's size when the pool is empty.
const POOL_BUFFER: usize = 16 << 10;

impl Conn {
    pub(crate) fn new(id: ConnId, conn: Connection, encoder: FrameEncoder) -> Self {
        Conn {
            id,
            conn,
            encoder,
            out: BytesMut::new(),
            dirty: false,
            write_blocked: false,
            peer_close: None,
            error: None,
            abandoned: false,
        }
    }

    /// Makes sure `out` has a buffer (from the pool) and that the turn will
    /// write it.
    pub(crate) fn out(&mut self, turn: &mut Turn) -> &mut BytesMut {
        self.cork(turn);
        &mut self.out
    }

    fn cork(&mut self, turn: &mut Turn) {
        if self.out.capacity() == 0 {
            self.out = turn
                .pool
                .pop()
                .unwrap_or_else(|| BytesMut::with_capacity(POOL_BUFFER));
        }
        if !self.dirty {
            self.dirty = true;
            turn.dirty.push(self.id.slot);
        }
    }

    /// Gives an empty write buffer back to the pool.
    pub(crate) fn release_out(&mut self, pool: &mut Vec<BytesMut>) {
        if self.out.capacity() == 0 || !self.out.is_empty() {
            return;
        }
        let mut buf = std::mem::take(&mut self.out);
        buf.clear();
        // Reclaims the space already written from (no allocation).
        buf.reserve(POOL_BUFFER);
        if buf.capacity() <= POOL_BUFFER_MAX && pool.len() < POOL_MAX {
            pool.push(buf);
        }
    }

    /// Encodes the frames the core owes the peer (pongs, the close echo,
    /// keepalive pings); the backpressure limit does not hold them back.
    pub(crate) fn transmit_owed(&mut self, turn: &mut Turn) {
        while let Some(msg) = self.conn.poll_transmit() {
            self.cork(turn);
            if let Err(e) = self.encoder.encode_message(&msg, &mut self.out) {
                // The core only owes frames that encode; should one not,
                // the connection cannot go on.
                self.fail(e.into());
                return;
            }
        }
    }

    /// Ends the connection at once with `err`.
    pub(crate) fn fail(&mut self, err: Error) {
        if self.error.is_none() {
            self.error = Some(Box::new(err));
        }
        self.conn.abandon();
        self.abandoned = true;
    }

    /// The transport ended: EOF (`None`) or an error.
    pub(crate) fn transport_ended(&mut self, err: Option<io::Error>) {
        let expected = self.conn.handle_transport_end();
        let err = err.unwrap_or_else(|| {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed without a close frame",
            )
        });
        // After our close frame, a peer that hangs up instead of answering
        // ends the connection as surely (many do).
        let hung_up = matches!(
            err.kind(),
            io::ErrorKind::UnexpectedEof
                | io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::BrokenPipe
        );
        if !(expected && hung_up) && self.error.is_none() && self.conn.phase() == Phase::Open {
            self.error = Some(Box::new(err.into()));
        }
        self.abandoned = true;
    }

    /// The common path of every send: the backpressure policy, the core's
    /// rules, then `encode` into the write buffer.
    fn send_with(
        &mut self,
        turn: &mut Turn,
        opcode: OpCode,
        fin: bool,
        encode: impl FnOnce(
            &mut FrameEncoder,
            &mut BytesMut,
        ) -> std::result::Result<(), crate::proto::Error>,
    ) -> Result<SendStatus> {
        if self.abandoned {
            return Ok(SendStatus::Closed);
        }
        if self.out.len() > turn.max_backpressure {
            return Ok(match turn.policy {
                BackpressurePolicy::Drop => SendStatus::Dropped,
                BackpressurePolicy::Close => {
                    let buffered = self.out.len();
                    self.fail(Error::Backpressure {
                        buffered,
                        limit: turn.max_backpressure,
                    });
                    SendStatus::Dropped
                }
            });
        }
        if opcode == OpCode::Close {
            if !self.conn.send_close(turn.now) {
                return Ok(SendStatus::Closed);
            }
        } else if self.conn.is_close_sent() || self.conn.is_peer_gone() {
            return Ok(SendStatus::Closed);
        } else {
            self.conn.check_send(opcode, fin)?;
        }
        self.cork(turn);
        encode(&mut self.encoder, &mut self.out)?;
        Ok(if self.out.len() > turn.max_backpressure {
            SendStatus::Backpressure
        } else {
            SendStatus::Sent
        })
    }

    pub(crate) fn send_message(&mut self, turn: &mut Turn, msg: &Message) -> Result<SendStatus> {
        if let Message::Close(frame) = msg {
            // Refused before the core records the close as sent.
            CloseFrame::encode(frame.as_ref())?;
        }
        let (opcode, fin) = msg.head();
        self.send_with(turn, opcode, fin, |e, out| e.encode_message(msg, out))
    }

    pub(crate) fn send_data(
        &mut self,
        turn: &mut Turn,
        opcode: OpCode,
        payload: &[u8],
    ) -> Result<SendStatus> {
        self.send_with(turn, opcode, true, |e, out| {
            e.encode_data(opcode, payload, out)
        })
    }

    pub(crate) fn send_prepared(
        &mut self,
        turn: &mut Turn,
        msg: &PreparedMessage,
    ) -> Result<SendStatus> {
        self.send_with(turn, msg.opcode(), true, |e, out| {
            e.encode_prepared(msg, out)
        })
    }

    pub(crate) fn close(&mut self, turn: &mut Turn, code: CloseCode, reason: &str) -> Result<()> {
        let frame = CloseFrame::new(code, cut_reason(reason));
        self.send_message(turn, &Message::Close(Some(frame)))
            .map(|_| ())
    }
}

/// `reason` cut to the 123 bytes a close frame holds, at a character
/// boundary.
fn cut_reason(reason: &str) -> String {
    let mut end = reason.len().min(123);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    reason[..end].to_owned()
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
        self.c.id
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
        self.c.out.len()
    }

    /// Whether a close frame went out or came in: data can no longer be
    /// sent.
    pub fn is_closing(&self) -> bool {
        self.c.abandoned || self.c.conn.is_close_sent() || self.c.conn.is_peer_gone()
    }
}
