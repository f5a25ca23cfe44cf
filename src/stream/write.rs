//! Bytes on their way out: frames encoded into an outbox and written to the
//! transport, and the wakers of the tasks that wait for that. What may be
//! sent is the core's decision ([`Core`](crate::stream::core::Core)); this
//! only encodes and writes.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use tokio::io::AsyncWrite;

use crate::config::Config;
use crate::error::Result;
use crate::proto::Role;
use crate::proto::encoder::FrameEncoder;
use crate::proto::message::{Message, PreparedMessage};
use crate::retry::Retrying;
use crate::stream::outbox::Outbox;

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

pub(crate) use crate::proto::buffer::CORK;

#[derive(Debug)]
pub(crate) struct WriteState {
    encoder: FrameEncoder,
    pub(crate) outbox: Outbox,
    write_buffer_size: usize,
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

    /// Whether the outbox is past its limit.
    pub(crate) fn is_full(&self) -> bool {
        self.outbox.len() >= self.write_buffer_size
    }

    /// Whether no task is parked waiting for write progress.
    pub(crate) fn nobody_parked(&self) -> bool {
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

    /// Encodes a message into the outbox; a payload the encoder leaves
    /// as it is goes in by reference.
    pub(crate) fn queue(&mut self, msg: Message) -> Result<()> {
        let encoder = &mut self.encoder;
        if let Some(payload) = self.outbox.encode(|b| encoder.encode_owned(msg, b))? {
            self.outbox.push_shared(payload);
        }
        Ok(())
    }

    /// Queues a prepared message: by reference when its frame goes out as
    /// it is, encoded anew otherwise.
    pub(crate) fn queue_prepared(&mut self, p: &PreparedMessage) -> Result<()> {
        if let Some(frame) = self.encoder.shared_frame(p)? {
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

    /// Wakes the receiving side if it is parked here: a failed write ends
    /// the connection for it too.
    pub(crate) fn wake_reader(&mut self) {
        if let Some(w) = self.wakers.as_deref_mut().and_then(|w| w.read.take()) {
            w.wake();
        }
    }

    /// Shuts the transport's sending direction down, once.
    pub(crate) fn poll_shutdown<W>(
        &mut self,
        io: &mut W,
        cx: &mut Context<'_>,
        task: Task,
    ) -> Poll<io::Result<()>>
    where
        W: AsyncWrite + Unpin,
    {
        if self.shutdown {
            return Poll::Ready(Ok(()));
        }
        match Pin::new(&mut Retrying(io)).poll_shutdown(cx) {
            Poll::Ready(r) => {
                self.shutdown = true;
                Poll::Ready(r)
            }
            Poll::Pending => {
                self.park(task, cx);
                Poll::Pending
            }
        }
    }
}
