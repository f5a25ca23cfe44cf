//! The sending side of a connection: frames queued in an outbox and written
//! out, shared by the unsplit stream and the split halves.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker, ready};

use tokio::io::AsyncWrite;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::outbox::Outbox;
use crate::proto::Role;
use crate::proto::close::{CloseCode, CloseFrame};
use crate::proto::conn::Connection;
use crate::proto::encoder::FrameEncoder;
use crate::proto::header::OpCode;
use crate::proto::message::{Message, PreparedMessage};
use crate::retry::Retrying;
use crate::trace;

/// Server payloads at least this large are written from where they are
/// (vectored write) rather than copied next to their header.
const ZERO_COPY_MIN: usize = 4 << 10;

/// Which task is driving a write: the transport's write readiness
/// remembers only the last task to ask, so whichever makes progress wakes
/// the others.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Task {
    /// The receiving side, writing what it owes (pongs, close replies).
    Receiving,
    /// A sender.
    Sending,
}

/// Queued bytes past which sending writes out without waiting for the
/// queue to fill or the task to wait (uWebSockets corks 16 KiB likewise).
const CORK: usize = 16 << 10;

#[derive(Debug)]
pub(crate) struct WriteState {
    encoder: FrameEncoder,
    pub(crate) outbox: Outbox,
    write_buffer_size: usize,
    /// The protocol's state, here because both halves of a split
    /// connection need it and the sending side's lock guards it.
    pub(crate) conn: Connection,
    shutdown: bool,
    /// Bytes were handed to the transport since its last completed flush. A
    /// transport may hold them until flushed (`BufWriter`, TLS), so whoever
    /// owes output is not done until this is clear.
    pub(crate) unflushed: bool,
    /// Made on first need: only a split connection's halves wait on each
    /// other, and an idle connection should be small.
    wakers: Option<Box<Wakers>>,
}

#[derive(Debug, Default)]
struct Wakers {
    read: Option<Waker>,
    /// Every task waiting to send: a split sender can be cloned, and the
    /// transport wakes only the last task that asked, so progress by any
    /// task wakes the others to try again.
    write: Vec<Waker>,
}

pub(crate) fn store(slot: &mut Option<Waker>, cx: &Context<'_>) {
    match slot {
        Some(w) if w.will_wake(cx.waker()) => {}
        _ => *slot = Some(cx.waker().clone()),
    }
}

impl WriteState {
    pub(crate) fn new(role: Role, config: &Config) -> Self {
        WriteState {
            encoder: FrameEncoder::with_mask_keys(role, config.mask_keys),
            outbox: Outbox::default(),
            write_buffer_size: config.write_buffer_size,
            conn: Connection::new(role, config.timers(), crate::stream::read::now()),
            shutdown: false,
            unflushed: false,
            wakers: None,
        }
    }

    pub(crate) fn encoder_mut(&mut self) -> &mut FrameEncoder {
        &mut self.encoder
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        self.shutdown
    }

    pub(crate) fn set_shut_down(&mut self) {
        self.shutdown = true;
    }

    /// Encodes the frames the core owes the peer; whether there were any.
    pub(crate) fn transmit(&mut self) -> Result<bool> {
        let mut any = false;
        while let Some(msg) = self.conn.poll_transmit() {
            any = true;
            self.queue(msg)?;
        }
        Ok(any)
    }

    /// Whether the outbox is past its limit.
    pub(crate) fn is_full(&self) -> bool {
        self.outbox.len() >= self.write_buffer_size
    }

    /// Whether no task is parked waiting for write progress.
    fn nobody_parked(&self) -> bool {
        self.wakers
            .as_deref()
            .is_none_or(|w| w.read.is_none() && w.write.is_empty())
    }

    /// Remembers the task to wake when the other side makes write progress.
    pub(crate) fn park(&mut self, task: Task, cx: &Context<'_>) {
        let wakers = self.wakers.get_or_insert_with(Default::default);
        match task {
            Task::Receiving => store(&mut wakers.read, cx),
            Task::Sending => {
                if !wakers.write.iter().any(|w| w.will_wake(cx.waker())) {
                    wakers.write.push(cx.waker().clone());
                }
            }
        }
    }

    /// Wakes every task parked to send but the current one, and the
    /// receiving side when a sender made the progress.
    fn wake_other(&mut self, task: Task, cx: &Context<'_>) {
        let Some(wakers) = self.wakers.as_deref_mut() else {
            return;
        };
        if let Task::Sending = task {
            if let Some(w) = wakers.read.take_if(|w| !w.will_wake(cx.waker())) {
                w.wake();
            }
        }
        let current = cx.waker();
        wakers
            .write
            .drain(..)
            .filter(|w| !w.will_wake(current))
            .for_each(Waker::wake);
    }

    /// Wakes every task parked to send, for when one that may have been the
    /// transport's only registered waiter gives up (a cancelled send).
    pub(crate) fn wake_writers(&mut self) {
        if let Some(wakers) = self.wakers.as_deref_mut() {
            for w in wakers.write.drain(..) {
                w.wake();
            }
        }
    }

    /// Encodes a message into the outbox.
    pub(crate) fn queue(&mut self, msg: Message) -> Result<()> {
        // Compressed payloads are new bytes: they go through the encoder.
        if self.encoder.role() == Role::Server && !self.encoder.compresses(&msg) {
            let zero_copy = match &msg {
                Message::Text(t) => t.len() >= ZERO_COPY_MIN,
                Message::Binary(b) => b.len() >= ZERO_COPY_MIN,
                Message::Frame(f) => f.payload.len() >= ZERO_COPY_MIN,
                _ => false,
            };
            if zero_copy {
                let (fin, opcode, payload) = match msg {
                    Message::Text(t) => (true, OpCode::Text, t.into_bytes()),
                    Message::Binary(b) => (true, OpCode::Binary, b),
                    Message::Frame(f) => (f.fin, f.opcode, f.payload),
                    _ => unreachable!("checked above"),
                };
                // Server frames are not masked: write the payload from where
                // it is instead of copying it into the write buffer.
                let encoder = &mut self.encoder;
                self.outbox.encode(|b| {
                    encoder
                        .encode_header(fin, opcode, payload.len(), b)
                        .map(drop)
                })?;
                self.outbox.push_shared(payload);
                return Ok(());
            }
        }
        let encoder = &mut self.encoder;
        Ok(self.outbox.encode(|b| encoder.encode_message(&msg, b))?)
    }

    /// Queues a prepared message: for a server, a reference to the frame
    /// encoded once for every connection.
    fn queue_prepared(&mut self, p: &PreparedMessage) -> Result<()> {
        if self.encoder.role() == Role::Server {
            let frame = self.encoder.prepared_frame(p)?;
            self.outbox.push_shared(frame);
            return Ok(());
        }
        let encoder = &mut self.encoder;
        Ok(self.outbox.encode(|b| encoder.encode_prepared(p, b))?)
    }

    /// Writes out the outbox.
    pub(crate) fn poll_drain<W>(
        &mut self,
        io: &mut W,
        cx: &mut Context<'_>,
        task: Task,
    ) -> Poll<io::Result<()>>
    where
        W: AsyncWrite + Unpin,
    {
        let mut progressed = false;
        while !self.outbox.is_empty() {
            match self.outbox.poll_write_once(io, cx) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(_)) => {
                    progressed = true;
                    self.unflushed = true;
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {
                    if progressed {
                        self.wake_other(task, cx);
                    }
                    return Poll::Pending;
                }
            }
        }
        if progressed {
            self.wake_other(task, cx);
        }
        Poll::Ready(Ok(()))
    }

    /// Flushes the transport. Waiting, the task is parked as `task`; done,
    /// the other side is woken, as it may be waiting for the same bytes to
    /// leave.
    pub(crate) fn poll_flush_io<W>(
        &mut self,
        io: &mut W,
        cx: &mut Context<'_>,
        task: Task,
    ) -> Poll<io::Result<()>>
    where
        W: AsyncWrite + Unpin,
    {
        match Pin::new(&mut Retrying(io)).poll_flush(cx) {
            Poll::Ready(r) => {
                if std::mem::take(&mut self.unflushed) {
                    self.wake_other(task, cx);
                }
                Poll::Ready(r)
            }
            Poll::Pending => {
                self.park(task, cx);
                Poll::Pending
            }
        }
    }

    // The Sink operations, for the unsplit stream and the sending half.

    pub(crate) fn poll_ready<W>(&mut self, io: &mut W, cx: &mut Context<'_>) -> Poll<Result<()>>
    where
        W: AsyncWrite + Unpin,
    {
        if self.is_full() {
            ready!(self.poll_send_buffered(io, cx))?;
        } else if self.outbox.len() >= CORK && self.nobody_parked() {
            // A burst of replies starts leaving once a cork's worth is
            // queued, so the peer works on it while the rest is made; a
            // transport that is not ready just lets the queue grow on.
            // Only when no other task waits to write: polling the
            // transport takes over its single write waker slot.
            if let Poll::Ready(Err(e)) = self.poll_drain(io, cx, Task::Sending) {
                self.transport_failed();
                return Poll::Ready(Err(e.into()));
            }
        }
        Poll::Ready(Ok(()))
    }

    pub(crate) fn start_send(&mut self, msg: Message) -> Result<()> {
        if let Message::Close(frame) = &msg {
            // Refused before the core records the close as sent.
            CloseFrame::encode(frame.as_ref())?;
        }
        let (opcode, fin) = msg.head();
        self.start_frame(opcode, fin, |w| w.queue(msg))
    }

    pub(crate) fn start_send_prepared(&mut self, p: &PreparedMessage) -> Result<()> {
        self.start_frame(p.opcode, true, |w| w.queue_prepared(p))
    }

    /// What the user sends, whatever it is made from, passes the core's
    /// rules first: nothing after a close, fragments not interrupted.
    fn start_frame(
        &mut self,
        opcode: OpCode,
        fin: bool,
        queue: impl FnOnce(&mut Self) -> Result<()>,
    ) -> Result<()> {
        if opcode == OpCode::Close {
            // A second close, or one after the peer is gone, is dropped.
            if !self.conn.send_close(Some(crate::stream::read::now())) {
                return Ok(());
            }
            trace::debug_event!("close frame sent");
        } else {
            self.conn.check_send(opcode, fin)?;
        }
        queue(self)
    }

    fn poll_send_buffered<W>(&mut self, io: &mut W, cx: &mut Context<'_>) -> Poll<Result<()>>
    where
        W: AsyncWrite + Unpin,
    {
        if self.conn.is_transport_ended() && !self.outbox.is_empty() {
            // The receiving side saw the transport end: what is queued will
            // not arrive, and a peer that stopped reading would keep the
            // write waiting for ever.
            self.outbox.clear();
            return Poll::Ready(Err(Error::ConnectionClosed));
        }
        match self.poll_drain(io, cx, Task::Sending) {
            Poll::Ready(Ok(())) => Poll::Ready(Ok(())),
            Poll::Ready(Err(e)) => {
                self.transport_failed();
                Poll::Ready(Err(e.into()))
            }
            Poll::Pending => {
                self.park(Task::Sending, cx);
                Poll::Pending
            }
        }
    }

    /// A write failed: the connection is over for the receiving side too,
    /// which may be waiting for input that will never come.
    fn transport_failed(&mut self) {
        self.conn.handle_transport_end();
        if let Some(w) = self.wakers.as_deref_mut().and_then(|w| w.read.take()) {
            w.wake();
        }
    }

    pub(crate) fn poll_flush<W>(&mut self, io: &mut W, cx: &mut Context<'_>) -> Poll<Result<()>>
    where
        W: AsyncWrite + Unpin,
    {
        ready!(self.poll_send_buffered(io, cx))?;
        let r = ready!(self.poll_flush_io(io, cx, Task::Sending));
        if r.is_err() {
            self.transport_failed();
        }
        Poll::Ready(r.map_err(Error::from))
    }

    pub(crate) fn poll_close<W>(&mut self, io: &mut W, cx: &mut Context<'_>) -> Poll<Result<()>>
    where
        W: AsyncWrite + Unpin,
    {
        self.start_send(Message::Close(Some(CloseFrame::new(CloseCode::NORMAL, ""))))?;
        ready!(self.poll_flush(io, cx))?;
        if !self.shutdown {
            match Pin::new(&mut Retrying(io)).poll_shutdown(cx) {
                Poll::Ready(r) => {
                    self.shutdown = true;
                    r?;
                }
                Poll::Pending => {
                    self.park(Task::Sending, cx);
                    return Poll::Pending;
                }
            }
        }
        Poll::Ready(Ok(()))
    }
}
