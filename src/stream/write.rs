//! Bytes on their way out: the driver's queue
//! ([`Driver`](crate::proto::driver::Driver)) written to the transport,
//! and the wakers of the tasks that wait for that. What may be sent and
//! how it is encoded is the driver's; this only writes and wakes.

use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use tokio::io::AsyncWrite;

use crate::config::Config;
use crate::proto::driver::{Driver, Lender};
use crate::proto::outbox::{PoolLimits, QueuePool, WriteQueue};
use crate::retry::Retrying;
use crate::stream::pool::BUF_LEN;

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

/// Write queues kept per thread: one connection is polled at a time and
/// needs one (a split one's halves may be polled on two), so two are kept;
/// each gets room for a 64 KiB message.
const THREAD_POOL: PoolLimits = PoolLimits {
    buffer_len: BUF_LEN,
    buffer_max: 2 * BUF_LEN,
    count_max: 2,
    bytes_max: 4 * BUF_LEN,
};

thread_local! {
    static QUEUES: RefCell<QueuePool> = const { RefCell::new(QueuePool::new(THREAD_POOL)) };
}

/// Lends write queues from the thread's pool (a new one while the pool is
/// in use or the thread is shutting down).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ThreadQueues;

impl Lender for ThreadQueues {
    #[inline]
    fn take(&mut self) -> Box<WriteQueue> {
        QUEUES
            .try_with(|p| p.try_borrow_mut().ok().map(|mut p| p.take()))
            .ok()
            .flatten()
            .unwrap_or_else(|| Box::new(WriteQueue::new(THREAD_POOL.buffer_len)))
    }

    #[inline]
    fn give(&mut self, q: Box<WriteQueue>) {
        let _ = QUEUES.try_with(|p| {
            if let Ok(mut p) = p.try_borrow_mut() {
                p.give(q);
            }
        });
    }
}

#[derive(Debug)]
pub(crate) struct WriteState {
    max_backpressure: usize,
    shutdown: bool,
    /// Bytes were handed to the transport since its last completed flush. A
    /// transport may hold them until flushed (`BufWriter`, TLS), so whoever
    /// owes output is not done until this is clear.
    pub(crate) unflushed: bool,
    /// Made on first need: only a split connection's halves wait on each
    /// other, and an idle connection should be small.
    wakers: Option<Box<Wakers>>,
    /// The transport last took less than there was to write: counted
    /// among the write-blocked connections until it takes the rest
    /// (nothing without the `metrics` feature).
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) blocked: crate::meter::Blocked,
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
    pub(crate) fn new(config: &Config) -> Self {
        WriteState {
            max_backpressure: config.stream_backpressure(),
            shutdown: false,
            unflushed: false,
            wakers: None,
            blocked: crate::meter::Blocked::default(),
        }
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        self.shutdown
    }

    /// Whether what waits to be written is past the limit.
    pub(crate) fn is_full(&self, d: &Driver) -> bool {
        d.buffered() >= self.max_backpressure
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
        // After every write that moved bytes: nobody parked is the case
        // to keep cheap.
        if wakers.write.is_empty() {
            return;
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

    /// Writes out what the driver has queued.
    pub(crate) fn poll_drain<W>(
        &mut self,
        d: &mut Driver,
        io: &mut W,
        cx: &mut Context<'_>,
        task: Task,
    ) -> Poll<io::Result<()>>
    where
        W: AsyncWrite + Unpin,
    {
        let mut progressed = false;
        loop {
            let r = d.with_slices(|s| match s {
                [] => None,
                [one] => Some(Pin::new(&mut Retrying(&mut *io)).poll_write(cx, one)),
                _ => Some(Pin::new(&mut Retrying(&mut *io)).poll_write_vectored(cx, s)),
            });
            match r {
                None => break,
                Some(Poll::Ready(Ok(0))) => {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                Some(Poll::Ready(Ok(n))) => {
                    d.written(n, &mut ThreadQueues);
                    progressed = true;
                    self.unflushed = true;
                }
                Some(Poll::Ready(Err(e))) => return Poll::Ready(Err(e)),
                Some(Poll::Pending) => {
                    // Waiting on the peer: hold memory in proportion to
                    // what is left.
                    d.write_blocked();
                    #[cfg(feature = "metrics")]
                    {
                        let (connections, bytes) = self.blocked.blocked(d.buffered());
                        crate::meter::write_blocked(connections, bytes);
                    }
                    if progressed {
                        self.wake_other(task, cx);
                    }
                    return Poll::Pending;
                }
            }
        }
        #[cfg(feature = "metrics")]
        {
            let (connections, bytes) = self.blocked.cleared();
            if connections != 0 {
                crate::meter::write_blocked(connections, bytes);
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
