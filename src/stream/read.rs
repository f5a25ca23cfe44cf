//! The receiving side of a connection, for the unsplit stream and the
//! receiving half alike: a loop around the core's receive step
//! ([`Receiver::step`]), doing what each step asks (read, flush, wait) and
//! serving the core's one clock. Every decision is the core's; this moves
//! bytes and time.

use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Instant;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::{Sleep, sleep_until};
use tokio_util::io::poll_read_buf;

use crate::config::Config;
use crate::discard::discard;
use crate::error::Result;
use crate::meter;
use crate::proto::Role;
use crate::proto::conn::{Connection, State};
use crate::proto::decoder::MessageDecoder;
use crate::proto::inbox::{Inbox, Plan};
use crate::proto::message::Message;
#[cfg(any(feature = "tracing", feature = "metrics"))]
use crate::proto::receive::Note;
use crate::proto::receive::{DISCARD_AT_ONCE, Ended, Input, Link, Receiver, Step};
use crate::retry::Retrying;
use crate::stream::core::{Core, now};
use crate::stream::pool::{STACK_READ, ThreadMemory};
use crate::stream::write::{Task, ThreadQueues};
#[cfg(feature = "tracing")]
use crate::trace;

/// How the receiving side reaches what it does not own: the transport to
/// read, and the shared [`Core`] with the transport's writing side (held
/// directly by the unsplit stream, behind a lock by a split receiver).
pub(crate) trait CoreLink {
    type Read: AsyncRead + Unpin;
    type Write: AsyncWrite + Unpin;

    fn read_io(&mut self) -> &mut Self::Read;
    fn with_core<T>(&mut self, f: impl FnOnce(&mut Core, &mut Self::Write) -> T) -> T;
    /// The core's [`State`] as of its last input, from whichever task.
    fn state(&self) -> State;
    /// Whether frames wait to be written or flushed; `true` when that
    /// cannot be told without the lock.
    fn has_writes(&self) -> bool {
        true
    }
    /// Called at the start of every poll of the receiving side: another
    /// task that changes the core's state (a sender whose write fails, or
    /// that sends our close) must wake this one, whichever way the poll
    /// then ends up waiting (the socket, the timer, the memory budget, the
    /// peer taking what we owe it).
    fn watch_state(&mut self, _cx: &Context<'_>) {}
}

/// A timer for the core's next deadline, which the receiver keeps
/// ([`Receiver::deadline`]).
#[derive(Debug, Default)]
struct CoreTimer {
    /// `None` when the core has no deadline. Made on the first wait: a
    /// timer needs the runtime, and construction may be outside it.
    sleep: Option<Pin<Box<Sleep>>>,
}

impl CoreTimer {
    /// Ready once `deadline` has passed; never without one.
    #[inline]
    fn poll_until(&mut self, deadline: Option<Instant>, cx: &mut Context<'_>) -> Poll<()> {
        let Some(deadline) = deadline else {
            self.sleep = None;
            return Poll::Pending;
        };
        let deadline = tokio::time::Instant::from_std(deadline);
        let sleep = match &mut self.sleep {
            Some(t) => {
                if t.deadline() != deadline {
                    t.as_mut().reset(deadline);
                }
                t
            }
            None => self.sleep.insert(Box::pin(sleep_until(deadline))),
        };
        sleep.as_mut().poll(cx)
    }
}

/// The receiving side: the core's receiver (decoder, read buffer and
/// decisions), and the timer that serves the core's clock.
#[derive(Debug)]
pub(crate) struct ReadState {
    rx: Receiver,
    timer: CoreTimer,
    /// The kind of a message received in pieces, for its count.
    pieces: meter::Pieces,
    #[cfg(feature = "tracing")]
    pub(crate) span: tracing::Span,
}

/// A connection's reading state goes: under a memory budget, what it
/// held is given back now and the budget's use recorded, so that a server
/// of Streams, which records it only when one waits, does not show it
/// held after the connection is gone.
#[cfg(feature = "metrics")]
impl Drop for ReadState {
    fn drop(&mut self) {
        let account = self.rx.inbox_mut().decoder_mut().account_mut();
        if let Some(budget) = account.budget().cloned() {
            account.release_all();
            meter::record_budget(&budget);
        }
    }
}

/// The core as the receive step reaches it: through the engine's link.
struct Reach<'a, L> {
    link: &'a mut L,
}

impl<L: CoreLink> Link for Reach<'_, L> {
    #[inline]
    fn state(&self) -> State {
        self.link.state()
    }

    #[inline]
    fn has_writes(&self) -> bool {
        self.link.has_writes()
    }

    fn with_conn<T>(
        &mut self,
        f: impl FnOnce(&mut Connection) -> T,
    ) -> std::result::Result<T, crate::proto::Error> {
        let out = self.link.with_core(|c, _| {
            let out = f(c.d.conn_mut());
            c.d.transmit(&mut ThreadQueues).map(|_| out)
        })?;
        Ok(out)
    }

    fn transport_ended(&mut self) {
        self.link.with_core(|c, _| c.end_transport());
    }

    fn abandon(&mut self) {
        self.link
            .with_core(|c, _| c.d.discard_writes(&mut ThreadQueues));
    }

    #[cfg(any(feature = "tracing", feature = "metrics"))]
    fn note(&mut self, note: Note<'_>) {
        if let Note::WaitingForBudget(_) = note {
            meter::budget_wait();
        }
        #[cfg(feature = "tracing")]
        match note {
            Note::CloseReceived(code) => {
                trace::debug_event!(code = ?code, "close frame received");
            }
            Note::Failing(e) => {
                trace::warn_event!(error = %e, close_code = ?e.close_code(), "failing the connection");
            }
            Note::OverBudget(grant) => {
                trace::warn_event!(?grant, "failing the connection: over the memory budget");
            }
            Note::WaitingForBudget(wanted) => {
                trace::debug_event!(wanted, "waiting for memory budget");
            }
            Note::TimedOut => trace::warn_event!("connection timed out"),
            Note::PeerEndedAfterClose => {
                trace::debug_event!("peer ended the connection after our close frame");
            }
            _ => {}
        }
    }
}

impl ReadState {
    /// For the unsplit stream, which flushes everything queued before it
    /// waits for input ([`set_split`](Self::set_split) for a receiver).
    pub(crate) fn new(role: Role, config: &Config, read_buf: BytesMut) -> Self {
        let inbox = Inbox::new(crate::codec::decoder(role, config), read_buf);
        let mut rx = Receiver::new(inbox, true);
        rx.set_flush_then_read(true);
        // A program may drop the Stream as soon as it has the ping: its
        // pong is written first, as the close's echo is.
        rx.set_pong_before_ping(true);
        ReadState {
            pieces: meter::Pieces::default(),
            rx,
            timer: CoreTimer::default(),
            #[cfg(feature = "tracing")]
            span: tracing::debug_span!("websocket", ?role),
        }
    }

    /// Whether this is a split receiver's: it flushes only what it owes
    /// itself, and leaves the senders' messages to them.
    pub(crate) fn set_split(&mut self, split: bool) {
        self.rx.set_flush_all(!split);
    }

    pub(crate) fn role(&self) -> Role {
        self.rx.inbox().decoder().role()
    }

    pub(crate) fn decoder_mut(&mut self) -> &mut MessageDecoder {
        self.rx.inbox_mut().decoder_mut()
    }

    pub(crate) fn is_terminated(&self) -> bool {
        self.rx.is_done()
    }

    /// The timer of a close the application waits on went off
    /// ([`Receiver::close_timer`]): the error that ends the connection, or
    /// `None` to wait on.
    pub(crate) fn close_timer<L: CoreLink>(
        &mut self,
        link: &mut L,
        now: Instant,
    ) -> Option<crate::proto::Error> {
        self.rx.close_timer(&mut Reach { link }, now)
    }

    /// Ready once the core's next deadline has passed.
    #[inline]
    fn poll_timer<L: CoreLink>(&mut self, link: &mut L, cx: &mut Context<'_>) -> Poll<()> {
        let deadline = self.rx.deadline(&mut Reach { link });
        self.timer.poll_until(deadline, cx)
    }

    /// Reads where the plan says: into the stack when nothing is
    /// buffered, else into the inbox's buffer.
    fn poll_read<L: CoreLink>(
        &mut self,
        link: &mut L,
        cx: &mut Context<'_>,
        plan: Plan,
    ) -> Poll<io::Result<usize>> {
        let mut mem = ThreadMemory;
        let mut io = Retrying(link.read_io());
        let io = Pin::new(&mut io);
        let inbox = self.rx.inbox_mut();
        match plan {
            Plan::Scratch { limit } => {
                let mut stack = [MaybeUninit::<u8>::uninit(); STACK_READ];
                let mut into = tokio::io::ReadBuf::uninit(&mut stack[..limit.min(STACK_READ)]);
                let read = io.poll_read(cx, &mut into);
                if !matches!(read, Poll::Ready(Ok(()))) || into.filled().is_empty() {
                    inbox.scratch_unused();
                }
                ready!(read)?;
                let got = into.filled_mut();
                let n = got.len();
                self.rx.received(got, n == STACK_READ, &mut mem);
                Poll::Ready(Ok(n))
            }
            // `Own` (the plan never asks to read when refused).
            _ => {
                let r = poll_read_buf(io, cx, &mut inbox.target());
                let got = match &r {
                    Poll::Ready(Ok(n)) => Some(*n),
                    _ => None,
                };
                inbox.read_done(got, &mut mem);
                r
            }
        }
    }

    /// The read a step asked for, as the next step's input. Pending when
    /// it found nothing and the receiver says to wait (as the step with
    /// [`Input::ReadPending`] would), with the timer set: that step is
    /// not taken.
    #[inline]
    fn poll_read_input<L: CoreLink>(
        &mut self,
        link: &mut L,
        cx: &mut Context<'_>,
        plan: Plan,
    ) -> Poll<Input> {
        match self.poll_read(link, cx, plan) {
            Poll::Ready(r) => Poll::Ready(Input::Read(r)),
            Poll::Pending if self.rx.read_pending(&Reach { link: &mut *link }) => {
                ready!(self.poll_timer(link, cx));
                Poll::Ready(Input::Timer)
            }
            Poll::Pending => Poll::Ready(Input::ReadPending),
        }
    }

    /// The next message: a loop around the core's receive step.
    pub(crate) fn poll_next<L: CoreLink>(
        &mut self,
        link: &mut L,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Message>>> {
        #[cfg(feature = "tracing")]
        let _span = self.span.clone().entered();
        link.watch_state(cx);
        let mut input = Input::Start;
        loop {
            let step = self.rx.step(
                &mut Reach { link: &mut *link },
                input,
                &mut ThreadMemory,
                &now,
            );
            input = match step {
                Step::Message(msg) => {
                    if let Some((kind, messages, len)) = self.pieces.count(msg.head(), msg.len()) {
                        meter::received(kind, messages, len);
                    }
                    return Poll::Ready(Some(Ok(msg)));
                }
                Step::Read(plan) => ready!(self.poll_read_input(link, cx, plan)),
                Step::FlushRead(plan) => match link.with_core(|c, io| c.poll_write_owed(io, cx)) {
                    Poll::Ready(Ok(false)) => ready!(self.poll_read_input(link, cx, plan)),
                    Poll::Ready(Ok(true)) => Input::Flushed(true),
                    Poll::Ready(Err(e)) => Input::WriteFailed(e),
                    Poll::Pending => Input::FlushBlocked,
                },
                Step::Flush => match link.with_core(|c, io| c.poll_write_owed(io, cx)) {
                    Poll::Ready(Ok(still_owed)) => Input::Flushed(still_owed),
                    Poll::Ready(Err(e)) => Input::WriteFailed(e),
                    Poll::Pending => Input::FlushBlocked,
                },
                Step::WriteNow => {
                    link.with_core(|c, io| c.write_now(io, cx));
                    Input::Start
                }
                Step::WaitForBudget(wanted) => {
                    #[cfg(feature = "metrics")]
                    if let Some(budget) = self.rx.inbox().decoder().account().budget() {
                        meter::record_budget(budget);
                    }
                    if self.rx.inbox().wait_for_budget(wanted, cx.waker()) {
                        Input::BudgetReady
                    } else {
                        ready!(self.poll_timer(link, cx));
                        Input::Timer
                    }
                }
                Step::Wait => {
                    ready!(self.poll_timer(link, cx));
                    Input::Timer
                }
                Step::Finish { shut_down } => {
                    match link.with_core(|c, io| c.poll_finish_writes(io, cx, !shut_down)) {
                        Poll::Ready(()) => {
                            if shut_down {
                                discard(link.read_io(), cx, DISCARD_AT_ONCE);
                            }
                            Input::Finished
                        }
                        Poll::Pending => {
                            ready!(self.poll_timer(link, cx));
                            Input::Timer
                        }
                    }
                }
                Step::WriteLast => {
                    // What the transport takes at once; nothing is awaited.
                    link.with_core(|c, io| {
                        let _ = c.transmit();
                        let _ = c.write.poll_drain(&mut c.d, io, cx, Task::Receiving);
                    });
                    Input::Start
                }
                Step::End(None) => return Poll::Ready(None),
                Step::End(Some(Ended::Error(e))) => return Poll::Ready(Some(Err(e.into()))),
                Step::End(Some(Ended::Transport(e))) => return Poll::Ready(Some(Err(e.into()))),
                // The core's steps are non-exhaustive: one it might add
                // ends the stream rather than spin.
                _ => return Poll::Ready(None),
            };
        }
    }
}
