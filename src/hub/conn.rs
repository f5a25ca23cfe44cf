//! One hub connection as its engine holds it: a [`Slot`] in the slot
//! table (transport, wakers, reading state, stage, the handler's data)
//! around a [`Conn`], the part that sending and the protocol core touch.

use std::io;
use std::sync::Arc;
use std::time::Instant;

use crate::error::Error;
use crate::hub::slots::Key;
use crate::hub::transport::Transport;
use crate::hub::turn::{NOT_READING, Schedule, Turn};
use crate::hub::wake::ConnWaker;
use crate::proto::Role;
use crate::proto::close::CloseFrame;
use crate::proto::conn::{Connection, Phase};
use crate::proto::deflate::Inflater;
use crate::proto::driver::Driver;
use crate::proto::encoder::FrameEncoder;
use crate::proto::outbox::QueuePool;
use crate::proto::receive::Receiver;
#[cfg(feature = "topics")]
use crate::topics::Held;

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
    pub(crate) receiver: Option<Box<Receiver>>,
    /// The connection's inflater while it has no inbox of its own
    /// (compression negotiated, no message in progress).
    pub(crate) idle_inflater: Option<Box<Inflater>>,
    /// The deadline this connection has in the engine's timer heap: the
    /// handshake's, then the core's.
    pub(crate) timer_at: Option<Instant>,
    /// When the engine took the connection, by the real clock (not the
    /// timers' Tokio clock), for the handshake's duration (only with the
    /// `metrics` feature: 16 bytes a connection).
    #[cfg(feature = "metrics")]
    pub(crate) admitted: Instant,
    /// Slowed for what it published: it reads again once the engine
    /// inbox it waits for has room (`topics::pace`).
    #[cfg(feature = "topics")]
    pub(crate) held: Option<Box<Held>>,
    pub(crate) stage: Stage,
    pub(crate) data: Option<T>,
    /// What sends, the core and the engine's steps share.
    pub(crate) conn: Conn,
}

impl<T> Slot<T> {
    /// Serves the connection again soon (next turn), once however often
    /// asked before it is served.
    #[inline]
    pub(crate) fn requeue(&mut self, schedule: &mut Schedule) {
        match &self.waker {
            Some(w) => w.requeue(),
            None => {
                if !self.queued {
                    self.queued = true;
                    schedule.again.push(self.conn.key);
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
    pub(crate) fn waker(&mut self, schedule: &Schedule) -> std::task::Waker {
        let w = self
            .waker
            .get_or_insert_with(|| ConnWaker::new(self.conn.key, schedule.ready.clone()));
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
    pub(crate) driver: Driver,
    pub(crate) ending: Option<Box<Ending>>,
    /// Bytes were corked this turn: the connection is in the turn's list
    /// to write out, or being read (whose flush writes them).
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
    /// The kind of a message sent in pieces, for its count (nothing
    /// without the `metrics` feature).
    pub(crate) pieces: crate::meter::Pieces,
    /// Its share of the write-blocked gauges (nothing without the
    /// `metrics` feature).
    pub(crate) blocked_share: crate::meter::Blocked,
}

impl Conn {
    pub(crate) fn new(key: Key, conn: Connection) -> Self {
        Conn {
            key,
            driver: Driver::new(conn, FrameEncoder::new(Role::Server)),
            ending: None,
            dirty: false,
            write_blocked: false,
            abandoned: false,
            wants_drain: false,
            closing: false,
            linger: false,
            pieces: crate::meter::Pieces::default(),
            blocked_share: crate::meter::Blocked::default(),
        }
    }

    /// The protocol core.
    #[inline]
    pub(crate) fn core(&self) -> &Connection {
        self.driver.conn()
    }

    /// The protocol core, to change.
    #[inline]
    pub(crate) fn core_mut(&mut self) -> &mut Connection {
        self.driver.conn_mut()
    }

    /// Bytes waiting to be written.
    #[inline]
    pub(crate) fn buffered(&self) -> usize {
        self.driver.buffered()
    }

    /// Puts the connection on the turn's list to write; the connection
    /// being read only once its read ends ([`Conn::end_read`]).
    #[inline]
    pub(crate) fn mark(&mut self, turn: &mut Turn) {
        if !self.dirty {
            self.dirty = true;
            if turn.writes.reading == self.key.slot {
                turn.writes.reading_corked = true;
            } else {
                turn.writes.dirty.push(self.key.slot);
            }
        }
    }

    /// The read of this connection begins: what its handler sends it is
    /// written by the read's flush.
    #[inline]
    pub(crate) fn begin_read(&self, turn: &mut Turn) {
        turn.writes.reading = self.key.slot;
    }

    /// The read ends: if it corked bytes, the connection joins the turn's
    /// list to write, unless the read's flush left nothing for the end of
    /// the turn to do (as [`flush_corked`](crate::hub::write::flush_corked)
    /// would find: all written, open, no drain owed).
    #[inline]
    pub(crate) fn end_read(&mut self, turn: &mut Turn) {
        turn.writes.reading = NOT_READING;
        if !std::mem::take(&mut turn.writes.reading_corked) {
            return;
        }
        let done = self.buffered() == 0
            && !self.wants_drain
            && !self.abandoned
            && self.core().phase() == Phase::Open;
        if done {
            self.dirty = false;
        } else {
            turn.writes.dirty.push(self.key.slot);
        }
    }

    /// Queues bytes that are not frames (the handshake's response).
    pub(crate) fn queue_raw(&mut self, turn: &mut Turn, bytes: &[u8]) {
        self.mark(turn);
        self.driver.queue_raw(bytes, &mut turn.writes.pool);
    }

    /// Drops what waits to be written.
    pub(crate) fn discard_out(&mut self, pool: &mut QueuePool) {
        self.driver.discard_writes(pool);
    }

    pub(crate) fn ending(&mut self) -> &mut Ending {
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
        if self.core().owes() {
            self.transmit_owed_now(turn);
        }
    }

    #[inline(never)]
    fn transmit_owed_now(&mut self, turn: &mut Turn) {
        match self.driver.transmit(&mut turn.writes.pool) {
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
        self.core_mut().abandon();
        self.abandoned = true;
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
        if let Some(err) = self.core_mut().handle_transport_error(err) {
            self.set_error(err.into());
        }
        self.abandoned = true;
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
        self.closing || self.abandoned || self.core().is_close_sent() || self.core().is_peer_gone()
    }
}
