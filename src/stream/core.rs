//! What both directions of a connection share: the protocol core
//! ([`Connection`]), which decides, and the outgoing bytes
//! ([`WriteState`]), which carry out what it decides. The unsplit stream
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
use crate::proto::Role;
use crate::proto::close::{CloseCode, CloseFrame};
use crate::proto::conn::{Connection, Outgoing, State};
use crate::proto::message::{Message, PreparedMessage};
use crate::stream::write::{CORK, Task, WriteState};
use crate::trace;

/// The current time, from Tokio's clock so that tests can pause it.
pub(crate) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// The protocol core and the outgoing bytes of one connection.
#[derive(Debug)]
pub(crate) struct Core {
    pub(crate) conn: Connection,
    pub(crate) write: WriteState,
}

/// What the core said after an input: its state and its next deadline.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fed {
    pub(crate) state: State,
    pub(crate) deadline: Option<Instant>,
    /// Frames it owed were queued, which the feeding side must see written.
    pub(crate) queued: bool,
}

impl Core {
    pub(crate) fn new(role: Role, config: &Config) -> Self {
        Core {
            conn: Connection::new(role, config.timers(), now()),
            write: WriteState::new(role, config),
        }
    }

    /// Gives the core an input, queues what it then owes the peer, and
    /// says where it stands.
    pub(crate) fn feed(&mut self, input: impl FnOnce(&mut Connection)) -> Result<Fed> {
        input(&mut self.conn);
        let queued = self.transmit()?;
        Ok(Fed {
            state: self.conn.state(),
            deadline: self.conn.poll_timeout(),
            queued,
        })
    }

    /// Encodes the frames the core owes the peer; whether there were any.
    pub(crate) fn transmit(&mut self) -> Result<bool> {
        let mut any = false;
        while let Some(msg) = self.conn.poll_transmit() {
            any = true;
            self.write.queue(msg)?;
        }
        Ok(any)
    }

    /// A write failed, or the receiving side saw the transport end: the
    /// connection is over for every task, which may be waiting for input
    /// or for room that will never come.
    pub(crate) fn end_transport(&mut self) {
        self.conn.handle_transport_end();
        self.write.wake_writers();
        self.write.wake_reader();
    }

    // The Sink operations, for the unsplit stream and the sending half.

    pub(crate) fn poll_ready<W>(&mut self, io: &mut W, cx: &mut Context<'_>) -> Poll<Result<()>>
    where
        W: AsyncWrite + Unpin,
    {
        if self.write.is_full() {
            ready!(self.poll_send_buffered(io, cx))?;
        } else if self.write.outbox.len() >= CORK && self.write.nobody_parked() {
            // A burst of replies starts leaving once a cork's worth is
            // queued; a transport that is not ready just lets the queue grow
            // on. Only when no other task waits to write: polling the
            // transport takes over its single write waker slot.
            if let Poll::Ready(Err(e)) = self.write.poll_drain(io, cx, Task::Sending) {
                self.end_transport();
                return Poll::Ready(Err(e.into()));
            }
        }
        Poll::Ready(Ok(()))
    }

    /// What the user sends passes the core's rules first
    /// ([`Connection::handle_send`]).
    #[inline]
    pub(crate) fn start_send(&mut self, msg: Message) -> Result<()> {
        match self.conn.handle_send(&msg, now())? {
            Outgoing::Send => {
                if msg.is_close() {
                    trace::debug_event!("close frame sent");
                }
                self.write.queue(msg)
            }
            Outgoing::Skip => Ok(()),
        }
    }

    pub(crate) fn start_send_prepared(&mut self, p: &PreparedMessage) -> Result<()> {
        match self.conn.handle_send_frame(p.opcode(), true, now())? {
            Outgoing::Send => self.write.queue_prepared(p),
            Outgoing::Skip => Ok(()),
        }
    }

    fn poll_send_buffered<W>(&mut self, io: &mut W, cx: &mut Context<'_>) -> Poll<Result<()>>
    where
        W: AsyncWrite + Unpin,
    {
        if self.conn.is_transport_ended() && !self.write.outbox.is_empty() {
            // What is queued will not arrive, and a peer that stopped
            // reading would keep the write waiting for ever.
            self.write.outbox.clear();
            return Poll::Ready(Err(Error::ConnectionClosed));
        }
        match self.write.poll_drain(io, cx, Task::Sending) {
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
        self.start_send(Message::Close(Some(CloseFrame::new(CloseCode::NORMAL, ""))))?;
        ready!(self.poll_flush(io, cx))?;
        ready!(self.write.poll_shutdown(io, cx, Task::Sending))?;
        Poll::Ready(Ok(()))
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
        let w = &mut self.write;
        if w.outbox.is_empty() && !w.unflushed {
            return Poll::Ready(Ok(false));
        }
        let r = match w.poll_drain(io, cx, Task::Receiving) {
            Poll::Ready(Ok(())) => match w.poll_flush_io(io, cx, Task::Receiving) {
                Poll::Ready(r) => r,
                // Retried on the next poll: the flush wakes this task when
                // the transport can take more. Reading goes on meanwhile.
                Poll::Pending => Ok(()),
            },
            Poll::Ready(Err(e)) => Err(e),
            // Owing more than the write buffer holds: wait for the peer to
            // read rather than buffer without bound.
            Poll::Pending if w.is_full() => {
                w.park(Task::Receiving, cx);
                return Poll::Pending;
            }
            Poll::Pending => Ok(()),
        };
        if r.is_err() {
            self.end_transport();
        }
        let w = &self.write;
        Poll::Ready(r.map(|()| !w.outbox.is_empty() || w.unflushed))
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
        let w = &mut self.write;
        if w.is_shut_down() {
            return Poll::Ready(());
        }
        let r = (|| {
            if ready!(w.poll_drain(io, cx, Task::Receiving)).is_err() {
                w.outbox.clear();
            }
            let _ = ready!(w.poll_flush_io(io, cx, Task::Receiving));
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

    /// Ends the connection without waiting for anything more.
    pub(crate) fn abandon(&mut self) {
        self.conn.abandon();
        self.write.outbox.clear();
    }
}
