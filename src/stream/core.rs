//! What both directions of a connection share: the driver ([`Driver`]:
//! the protocol core, the encoder and the bytes queued for the peer),
//! which decides, and the writing ([`WriteState`]), which carries out what
//! it decides. The unsplit stream
//! holds one [`Core`]; the halves of a split stream share one behind a
//! lock. The receiving side ([`ReadState`](crate::stream::read::ReadState))
//! owns the decoder and read buffer and reaches the core through its
//! [`CoreLink`](crate::stream::read::CoreLink).

use std::io;
use std::task::{Context, Poll, ready};
use std::time::Instant;

use tokio::io::AsyncWrite;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::meter::{self, EngineMeter};
use crate::proto::Role;
use crate::proto::close::{CloseFrame, Leaving};
use crate::proto::conn::{Connection, Outgoing};
use crate::proto::driver::Driver;
use crate::proto::encoder::FrameEncoder;
use crate::proto::message::{Message, PreparedMessage};
use crate::stream::write::{Task, ThreadQueues, WriteState};
use crate::trace;

/// The current time, from Tokio's clock so that tests can pause it.
pub(crate) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// The driver and the writing of one connection.
#[derive(Debug)]
pub(crate) struct Core {
    pub(crate) d: Driver,
    pub(crate) write: WriteState,
    /// The kind of a message sent in pieces, for its count.
    pieces: meter::Pieces,
    /// Last, so that it goes after the driver: records the budget's use
    /// once the compressor has given its memory back.
    #[cfg(feature = "metrics")]
    _budget_after: meter::BudgetAfter,
}

impl Core {
    pub(crate) fn new(role: Role, config: &Config) -> Self {
        EngineMeter::stream(role).opened(role == Role::Server);
        Core {
            d: Driver::new(
                Connection::new(role, config.timers(), now()),
                FrameEncoder::with_mask_keys(role, config.mask_keys),
            ),
            write: WriteState::new(config),
            pieces: meter::Pieces::default(),
            #[cfg(feature = "metrics")]
            _budget_after: meter::BudgetAfter(config.limits.budget.clone()),
        }
    }

    /// Encodes the frames the core owes the peer; whether there were any.
    pub(crate) fn transmit(&mut self) -> Result<bool> {
        Ok(self.d.transmit(&mut ThreadQueues)?)
    }

    /// A write failed, or the receiving side saw the transport end: the
    /// connection is over for every task, which may be waiting for input
    /// or for room that will never come.
    pub(crate) fn end_transport(&mut self) {
        self.d.conn_mut().handle_transport_end();
        self.write.wake_writers();
        self.write.wake_reader();
    }

    // The Sink operations, for the unsplit stream and the sending half.

    pub(crate) fn poll_ready<W>(&mut self, io: &mut W, cx: &mut Context<'_>) -> Poll<Result<()>>
    where
        W: AsyncWrite + Unpin,
    {
        if self.write.is_full(&self.d) {
            ready!(self.poll_send_buffered(io, cx))?;
        } else if self.d.uncorks() && self.write.nobody_parked() {
            // A burst of replies starts leaving once a cork's worth is
            // queued; a transport that is not ready just lets the queue grow
            // on. Only when no other task waits to write: polling the
            // transport takes over its single write waker slot.
            if let Poll::Ready(Err(e)) = self.write.poll_drain(&mut self.d, io, cx, Task::Sending) {
                self.end_transport();
                return Poll::Ready(Err(e.into()));
            }
        }
        Poll::Ready(Ok(()))
    }

    /// What the user sends passes the driver's rules
    /// ([`Driver::send`]).
    #[inline]
    pub(crate) fn start_send(&mut self, msg: Message) -> Result<()> {
        let close = msg.is_close();
        let mut pieces = self.pieces;
        let counted = pieces.count(msg.head(), msg.len());
        if self.d.send(msg, now, &mut ThreadQueues)? == Outgoing::Send {
            self.pieces = pieces;
            if let Some((kind, messages, len)) = counted {
                meter::sent(kind, messages, len);
            }
            if close {
                trace::debug_event!("close frame sent");
            }
        }
        Ok(())
    }

    /// Queues our close frame as of `at` (when the application asked to
    /// close: the closing handshake's deadline runs from then).
    pub(crate) fn start_send_close(
        &mut self,
        frame: Option<CloseFrame>,
        at: Instant,
    ) -> Result<()> {
        if self.d.send(Message::Close(frame), at, &mut ThreadQueues)? == Outgoing::Send {
            trace::debug_event!("close frame sent");
        }
        Ok(())
    }

    pub(crate) fn start_send_prepared(&mut self, p: &PreparedMessage) -> Result<()> {
        self.d.send_prepared(p, now, &mut ThreadQueues)?;
        if let Some((kind, len)) = meter::Kind::counted(p.opcode(), p.payload().len()) {
            meter::sent(kind, 1, len);
        }
        Ok(())
    }

    fn poll_send_buffered<W>(&mut self, io: &mut W, cx: &mut Context<'_>) -> Poll<Result<()>>
    where
        W: AsyncWrite + Unpin,
    {
        if self.d.conn().is_transport_ended() && self.d.buffered() > 0 {
            // What is queued will not arrive, and a peer that stopped
            // reading would keep the write waiting for ever.
            self.d.discard_writes(&mut ThreadQueues);
            return Poll::Ready(Err(Error::ConnectionClosed));
        }
        match self.write.poll_drain(&mut self.d, io, cx, Task::Sending) {
            Poll::Ready(Ok(())) => Poll::Ready(Ok(())),
            Poll::Ready(Err(e)) => {
                self.end_transport();
                Poll::Ready(Err(e.into()))
            }
            Poll::Pending => {
                self.write.park(Task::Sending, cx);
                Poll::Pending
            }
        }
    }

    pub(crate) fn poll_flush<W>(&mut self, io: &mut W, cx: &mut Context<'_>) -> Poll<Result<()>>
    where
        W: AsyncWrite + Unpin,
    {
        ready!(self.poll_send_buffered(io, cx))?;
        let r = ready!(self.write.poll_flush_io(io, cx, Task::Sending));
        if r.is_err() {
            self.end_transport();
        }
        Poll::Ready(r.map_err(Error::from))
    }

    pub(crate) fn poll_close<W>(&mut self, io: &mut W, cx: &mut Context<'_>) -> Poll<Result<()>>
    where
        W: AsyncWrite + Unpin,
    {
        self.start_send(Message::Close(Some(Leaving::Done.frame())))?;
        ready!(self.poll_flush(io, cx))?;
        ready!(self.write.poll_shutdown(io, cx, Task::Sending))?;
        Poll::Ready(Ok(()))
    }

    /// Whether frames are queued, or written and not yet flushed.
    #[inline]
    pub(crate) fn has_writes(&self) -> bool {
        self.d.buffered() > 0 || self.write.unflushed
    }

    /// Writes out what is queued and flushes the transport, for the
    /// receiving side before it waits for input. `Pending` only when more
    /// is owed than the write buffer holds: the caller then stops reading
    /// until the peer takes it. `Ok(true)` when something is still owed
    /// (the transport was not ready; this task is woken when it is).
    #[inline]
    pub(crate) fn poll_write_owed<W>(
        &mut self,
        io: &mut W,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<bool>>
    where
        W: AsyncWrite + Unpin,
    {
        if !self.has_writes() {
            return Poll::Ready(Ok(false));
        }
        let w = &mut self.write;
        let r = match w.poll_drain(&mut self.d, io, cx, Task::Receiving) {
            Poll::Ready(Ok(())) => match w.poll_flush_io(io, cx, Task::Receiving) {
                Poll::Ready(r) => r,
                // Retried on the next poll: the flush wakes this task when
                // the transport can take more. Reading goes on meanwhile.
                Poll::Pending => Ok(()),
            },
            Poll::Ready(Err(e)) => Err(e),
            // Owing more than the write buffer holds: wait for the peer to
            // read rather than buffer without bound.
            Poll::Pending if w.is_full(&self.d) => {
                w.park(Task::Receiving, cx);
                return Poll::Pending;
            }
            Poll::Pending => Ok(()),
        };
        if r.is_err() {
            self.end_transport();
        }
        Poll::Ready(r.map(|()| self.has_writes()))
    }

    /// The write half of finishing the connection: write out what is owed
    /// (our close frame), flush, and shut the transport down unless the
    /// peer is to end it first. Transport errors end the attempt quietly:
    /// the peer may be gone.
    pub(crate) fn poll_finish_writes<W>(
        &mut self,
        io: &mut W,
        cx: &mut Context<'_>,
        wait_for_peer: bool,
    ) -> Poll<()>
    where
        W: AsyncWrite + Unpin,
    {
        let (w, d) = (&mut self.write, &mut self.d);
        if w.is_shut_down() {
            return Poll::Ready(());
        }
        let r = (|| {
            ready!(poll_write_out(w, d, io, cx));
            if !wait_for_peer {
                let _ = ready!(w.poll_shutdown(io, cx, Task::Receiving));
            }
            Poll::Ready(())
        })();
        if r.is_pending() {
            w.park(Task::Receiving, cx);
        }
        r
    }

    /// The peer's close frame, or a ping, has just been fed: hands what is
    /// queued (our echo or the pong, after anything queued before it) to
    /// the transport in the poll that yields that frame, so that a user
    /// who stops polling there, or drops the stream, has still answered.
    /// The first step of [`poll_finish_writes`](Self::poll_finish_writes),
    /// taken early and without its wait: what the transport does not take
    /// now stays queued, for the next poll of the receiving side, `close`
    /// or a flush, and the frame is handed out all the same (a peer that
    /// reads nothing never holds up `next()`). A transport error is dealt
    /// with as that step deals with it (the queue is dropped, the peer may
    /// be gone), so the next poll ends the connection as it would have.
    pub(crate) fn write_now<W>(&mut self, io: &mut W, cx: &mut Context<'_>)
    where
        W: AsyncWrite + Unpin,
    {
        let (w, d) = (&mut self.write, &mut self.d);
        if d.buffered() == 0 && !w.unflushed {
            return;
        }
        if poll_write_out(w, d, io, cx).is_pending() {
            // The transport now wakes this task, which the user may never
            // poll again: a sender parked on the transport asks it again
            // (taking its waker back), and its flush writes the reply too.
            w.wake_writers();
        }
    }
}

/// Writes out what is queued and flushes, for a connection that is ending:
/// a failed write drops the rest (the peer may be gone) and a failed flush
/// is ignored, for the same reason.
fn poll_write_out<W>(
    w: &mut WriteState,
    d: &mut Driver,
    io: &mut W,
    cx: &mut Context<'_>,
) -> Poll<()>
where
    W: AsyncWrite + Unpin,
{
    if ready!(w.poll_drain(d, io, cx, Task::Receiving)).is_err() {
        d.discard_writes(&mut ThreadQueues);
    }
    let _ = ready!(w.poll_flush_io(io, cx, Task::Receiving));
    Poll::Ready(())
}

/// A connection ended: the Stream's metrics learn how (the core knows
/// whatever task held it last).
#[cfg(feature = "metrics")]
impl Drop for Core {
    fn drop(&mut self) {
        let conn = self.d.conn();
        EngineMeter::stream(conn.role()).closed(conn.ending());
        let (connections, bytes) = self.write.blocked.cleared();
        meter::write_blocked(connections, bytes);
    }
}
