//! The receiving side of a connection: reads, decodes, answers control
//! frames and runs the closing handshake, for the unsplit stream and the
//! receiving half alike.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Instant;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::{Sleep, sleep_until};

use crate::config::Config;
use crate::error::Result;
use crate::proto::Role;
use crate::proto::budget::Grant;
use crate::proto::conn::Phase;
use crate::proto::decoder::MessageDecoder;
use crate::proto::message::Message;
use crate::retry::Retrying;
use crate::stream::read_buf::ReadBuf;
use crate::stream::write::{Task, WriteState};
use crate::trace;

/// What the receiving side needs from its surroundings: the transport to
/// read, and access to the sending side for pongs and close replies.
pub(crate) trait Transport {
    type Read: AsyncRead + Unpin;
    type Write: AsyncWrite + Unpin;
    /// Whether the receiving side writes out everything queued before it
    /// waits for input, the user's messages too (write coalescing for `feed`
    /// in a read loop). A split receiver writes only what it owes itself and
    /// leaves the sender's messages to the sender.
    const FLUSHES_ALL_BEFORE_READ: bool;

    fn read_io(&mut self) -> &mut Self::Read;
    fn with_writer<T>(&mut self, f: impl FnOnce(&mut WriteState, &mut Self::Write) -> T) -> T;
    fn close_sent(&self) -> bool;
    /// Whether the transport has ended (the sending side may see it first,
    /// as a failed write).
    fn transport_ended(&self) -> bool;
    /// The receiving side waits for input: a sending side that finds the
    /// transport ended must be able to wake it.
    fn wait_for_input(&mut self, _cx: &Context<'_>) {}
}

/// Under a memory budget: when the connection, waiting for budget or
/// holding some while nothing arrives, gives up its message (`None` while
/// it makes progress), and the timer for it.
#[derive(Debug, Default)]
struct BudgetWait {
    deadline: Option<Instant>,
    timer: Option<Pin<Box<Sleep>>>,
}

/// The current time, from Tokio's clock so that tests can pause it.
pub(crate) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// The receiving side. The protocol's state lives in the sending side's
/// [`Connection`](crate::proto::conn::Connection) (both halves need it);
/// this side keeps what it needs on every read without asking: the phase
/// and a timer set to the core's next deadline, both refreshed whenever it
/// hands the core an input.
#[derive(Debug)]
pub(crate) struct ReadState {
    decoder: MessageDecoder,
    read_buf: ReadBuf,
    /// The core's phase as of this side's last input to it; only inputs from
    /// this side change it.
    phase: Phase,
    /// The peer's close frame has been received.
    pub(crate) close_received: bool,
    /// The sending side's close was seen and its deadline fetched.
    saw_close_sent: bool,
    terminated: bool,
    /// This side queued frames (pongs, a close reply) that it must see
    /// written even when the sending side is idle.
    must_flush: bool,
    /// The core wants to hear of every read (keepalive).
    report_input: bool,
    /// Sleeps until the core's next deadline; `None` when it has none. Made
    /// on the first poll (a timer needs the runtime, construction may be
    /// outside it).
    timer: Option<Pin<Box<Sleep>>>,
    timer_set: bool,
    /// Under a memory budget, when waiting for it; boxed, as an idle
    /// connection should be small.
    budget_wait: Option<Box<BudgetWait>>,
    #[cfg(feature = "tracing")]
    pub(crate) span: tracing::Span,
}

impl ReadState {
    pub(crate) fn new(
        role: Role,
        config: &Config,
        read_buf: BytesMut,
        writer: &WriteState,
    ) -> Self {
        ReadState {
            decoder: crate::codec::decoder(role, config),
            read_buf: ReadBuf::new(read_buf),
            phase: writer.conn.phase(),
            close_received: false,
            saw_close_sent: false,
            terminated: false,
            must_flush: false,
            report_input: writer.conn.wants_input_times(),
            timer: None,
            timer_set: false,
            budget_wait: None,
            #[cfg(feature = "tracing")]
            span: tracing::debug_span!("websocket", ?role),
        }
    }

    pub(crate) fn role(&self) -> Role {
        self.decoder.role()
    }

    pub(crate) fn decoder_mut(&mut self) -> &mut MessageDecoder {
        &mut self.decoder
    }

    pub(crate) fn is_terminated(&self) -> bool {
        self.terminated
    }

    /// Gives the core an input under the sending side's lock, queues what it
    /// then owes the peer, and refreshes what this side keeps of its state.
    fn feed_core<T: Transport>(
        &mut self,
        t: &mut T,
        input: impl FnOnce(&mut crate::proto::conn::Connection),
    ) -> Result<()> {
        let (phase, deadline, queued) = t.with_writer(|w, _| {
            input(&mut w.conn);
            let queued = w.transmit();
            (w.conn.phase(), w.conn.poll_timeout(), queued)
        });
        self.phase = phase;
        self.set_timer(deadline);
        if queued? {
            self.must_flush = true;
        }
        Ok(())
    }

    /// The core's error once the connection has ended, if it ended with one.
    fn take_error<T: Transport>(&mut self, t: &mut T) -> Option<Result<Message>> {
        t.with_writer(|w, _| w.conn.take_error())
            .map(|e| Err(e.into()))
    }

    /// Ends the connection without waiting for anything more.
    pub(crate) fn give_up<T: Transport>(&mut self, t: &mut T) {
        self.terminated = true;
        self.read_buf.release(self.decoder.account_mut());
        t.with_writer(|w, _| {
            w.conn.abandon();
            w.outbox.clear();
        });
    }

    /// Flushes what is queued (our close frame) and ends the connection:
    /// at once when failing or as the server, after the server's TCP close
    /// as a client. Bounded by the close timeout; transport errors are
    /// ignored, as the peer may be gone.
    fn poll_finish<T: Transport>(
        &mut self,
        t: &mut T,
        cx: &mut Context<'_>,
        wait_for_peer: bool,
    ) -> Poll<()> {
        if self.poll_timer(t, cx).is_ready() {
            // Past the close deadline (the core moves to `TimedOut`).
            let _ = self.feed_core(t, |c| c.handle_timeout(now()));
            if self.phase == Phase::TimedOut {
                return Poll::Ready(());
            }
        }
        let done = t.with_writer(|w, io| {
            if w.is_shut_down() {
                return Poll::Ready(());
            }
            let r = finish_writes(w, io, cx, wait_for_peer);
            if r.is_pending() {
                w.park(Task::Receiving, cx);
            }
            r
        });
        ready!(done);
        if !wait_for_peer {
            return Poll::Ready(());
        }
        // A client waits for the server to close the TCP connection.
        loop {
            self.read_buf.bytes().clear();
            match ready!(self.poll_read(t, cx)) {
                Ok(0) | Err(_) => return Poll::Ready(()),
                Ok(_) => {}
            }
        }
    }

    fn set_timer(&mut self, deadline: Option<Instant>) {
        self.timer_set = true;
        let Some(deadline) = deadline else {
            self.timer = None;
            return;
        };
        let deadline = tokio::time::Instant::from_std(deadline);
        match &mut self.timer {
            Some(t) if t.deadline() == deadline => {}
            Some(t) => t.as_mut().reset(deadline),
            None => self.timer = Some(Box::pin(sleep_until(deadline))),
        }
    }

    /// Ready once the core's next deadline has passed.
    fn poll_timer<T: Transport>(&mut self, t: &mut T, cx: &mut Context<'_>) -> Poll<()> {
        if !self.timer_set {
            let deadline = t.with_writer(|w, _| w.conn.poll_timeout());
            self.set_timer(deadline);
        }
        match &mut self.timer {
            Some(timer) => timer.as_mut().poll(cx),
            None => Poll::Pending,
        }
    }

    fn poll_read<T: Transport>(
        &mut self,
        t: &mut T,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<usize>> {
        let need = self.decoder.payload_remaining(0);
        self.read_buf
            .poll_read(t.read_io(), cx, self.decoder.account_mut(), move |held| {
                need.map(|n| n.saturating_sub(held))
            })
    }

    /// Refuses the message in progress with `err` (a memory budget
    /// refusal): fails the connection and gives back what it holds.
    fn refuse<T: Transport>(&mut self, t: &mut T, err: crate::proto::Error) -> Result<()> {
        trace::warn_event!(error = %err, close_code = ?err.close_code(), "failing the connection");
        self.decoder.discard();
        self.read_buf.release(self.decoder.account_mut());
        self.made_progress();
        self.feed_core(t, |c| c.handle_error(err, now()))
    }

    /// Under a memory budget: whether the connection has gone without
    /// progress (bytes read, a message decoded) for the budget's wait
    /// timeout, counting from the first call since it last made progress.
    fn budget_deadline_passed(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(budget) = self.decoder.account().budget() else {
            return false;
        };
        let timeout = budget.wait_timeout_duration();
        let wait = self.budget_wait.get_or_insert_with(Default::default);
        let deadline = *wait.deadline.get_or_insert_with(|| now() + timeout);
        let deadline = tokio::time::Instant::from_std(deadline);
        let timer = match &mut wait.timer {
            Some(t) => {
                if t.deadline() != deadline {
                    t.as_mut().reset(deadline);
                }
                t
            }
            None => wait.timer.insert(Box::pin(sleep_until(deadline))),
        };
        timer.as_mut().poll(cx).is_ready()
    }

    /// Bytes arrived or a message was decoded: the budget wait starts over.
    fn made_progress(&mut self) {
        if let Some(wait) = &mut self.budget_wait {
            wait.deadline = None;
        }
    }

    /// The memory budget answered `grant` to a request for more: refuses
    /// the message at once if it can never fit (1009); else waits for
    /// budget to be given back, and refuses it (1013) past the wait
    /// timeout. `Ready` means: try again (or see the connection failed).
    fn poll_budget<T: Transport>(
        &mut self,
        t: &mut T,
        cx: &mut Context<'_>,
        grant: Grant,
    ) -> Poll<Result<()>> {
        let wanted = match grant {
            Grant::Granted => return Poll::Ready(Ok(())),
            Grant::Never { charge, limit } => {
                let err = crate::proto::Error::OverBudget {
                    size: charge as u64,
                    budget: limit,
                };
                return Poll::Ready(self.refuse(t, err));
            }
            Grant::Wait { wanted } => wanted,
        };
        if let Some(budget) = self.decoder.account().budget() {
            budget.wake_on_release(cx.waker());
            // Given back between the refusal and the registration.
            if budget.available() >= wanted {
                return Poll::Ready(Ok(()));
            }
        }
        if self.budget_deadline_passed(cx) {
            trace::debug_event!(wanted, "memory budget exhausted for too long");
            return Poll::Ready(self.refuse(t, crate::proto::Error::BudgetExhausted));
        }
        Poll::Pending
    }

    /// Writes out what this side owes (or, when corking, everything queued)
    /// before waiting for input. `Pending` means: stop reading, the peer is
    /// not taking what we owe it.
    fn poll_flush_owed<T: Transport>(
        &mut self,
        t: &mut T,
        cx: &mut Context<'_>,
    ) -> Poll<Result<()>> {
        if !T::FLUSHES_ALL_BEFORE_READ && !self.must_flush {
            return Poll::Ready(Ok(()));
        }
        // One pass under the sending side's lock: write, and learn whether
        // anything is still owed.
        let r = t.with_writer(|w, io| {
            if w.outbox.is_empty() && !w.unflushed {
                return Poll::Ready(Ok(false));
            }
            let r = match w.poll_drain(io, cx, Task::Receiving) {
                Poll::Ready(Ok(())) => match w.poll_flush_io(io, cx, Task::Receiving) {
                    Poll::Ready(r) => r,
                    // Still owed, and retried on the next poll: the flush
                    // wakes this task when the transport can take more.
                    // Reading goes on meanwhile.
                    Poll::Pending => Ok(()),
                },
                Poll::Ready(Err(e)) => Err(e),
                // Owing more than the write buffer holds: wait for the peer
                // to read rather than buffer without bound.
                Poll::Pending if w.is_full() => {
                    w.park(Task::Receiving, cx);
                    return Poll::Pending;
                }
                Poll::Pending => Ok(()),
            };
            if r.is_err() {
                w.conn.handle_transport_end();
                w.wake_writers();
            }
            Poll::Ready(r.map(|()| !w.outbox.is_empty() || w.unflushed))
        });
        match ready!(r) {
            Ok(still_owed) => {
                self.must_flush &= still_owed;
                Poll::Ready(Ok(()))
            }
            Err(e) => {
                self.terminated = true;
                Poll::Ready(Err(e.into()))
            }
        }
    }

    pub(crate) fn poll_next<T: Transport>(
        &mut self,
        t: &mut T,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Message>>> {
        #[cfg(feature = "tracing")]
        let _span = self.span.clone().entered();
        loop {
            if self.terminated {
                return Poll::Ready(None);
            }
            match self.phase {
                Phase::Open => {}
                Phase::Failing | Phase::Closed => {
                    let wait = self.phase.awaits_transport_end(self.role());
                    ready!(self.poll_finish(t, cx, wait));
                    if self.phase == Phase::TimedOut {
                        continue;
                    }
                    self.terminated = true;
                    return Poll::Ready(self.take_error(t));
                }
                Phase::TimedOut => {
                    trace::warn_event!("connection timed out");
                    // Write what the core owes (a close saying why) if the
                    // transport takes it at once; wait for nothing.
                    t.with_writer(|w, io| {
                        let _ = w.transmit();
                        let _ = w.poll_drain(io, cx, Task::Receiving);
                    });
                    let err = self.take_error(t);
                    self.give_up(t);
                    return Poll::Ready(err);
                }
            }
            let decoded = self.decoder.decode(self.read_buf.bytes());
            self.read_buf.sync(self.decoder.account_mut());
            match decoded {
                Ok(Some(msg)) => {
                    self.read_buf.handed_out();
                    self.made_progress();
                    if msg.is_control() {
                        if msg.is_close() {
                            trace::debug_event!(code = ?msg.close_frame().map(|f| f.code), "close frame received");
                            self.close_received = true;
                        }
                        self.feed_core(t, |c| c.handle_frame(&msg, now()))?;
                    }
                    return Poll::Ready(Some(Ok(msg)));
                }
                Ok(None) => {}
                Err(e) => {
                    trace::warn_event!(error = %e, close_code = ?e.close_code(), "failing the connection");
                    if self.decoder.account().is_on() {
                        // Nothing more is decoded: give the memory back now.
                        self.read_buf.release(self.decoder.account_mut());
                    }
                    self.feed_core(t, |c| c.handle_error(e, now()))?;
                    continue;
                }
            }
            // About to wait for input: write out what was queued meanwhile
            // (replies fed by the user, pongs), all in one write. This is
            // what makes `feed` in a read loop cork replies to pipelined
            // messages without delaying a lone one.
            match self.poll_flush_owed(t, cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(e))),
                Poll::Pending => {
                    // Waiting for the peer to take what we owe it: as when
                    // waiting for input, hold no more than in proportion.
                    self.read_buf.fit(self.decoder.account_mut());
                    return Poll::Pending;
                }
            }
            if !self.saw_close_sent && t.close_sent() {
                // Our close went out from the sending side: its deadline.
                self.saw_close_sent = true;
                self.feed_core(t, |c| c.handle_timeout(now()))?;
            }
            if self.poll_timer(t, cx).is_ready() {
                self.feed_core(t, |c| c.handle_timeout(now()))?;
                continue;
            }
            if t.transport_ended() {
                // A write failed: no input is coming either.
                let err = io::Error::new(
                    io::ErrorKind::BrokenPipe,
                    "the transport failed while sending",
                );
                return self.ended(t, err);
            }
            if let Some(wanted) = self.decoder.budget_wait() {
                // Decoding waits for memory budget: read nothing meanwhile.
                ready!(self.poll_budget(t, cx, Grant::Wait { wanted }))?;
                continue;
            }
            if self.decoder.account().charged() > 0 && self.budget_deadline_passed(cx) {
                // Holding budget while the peer sends nothing.
                self.refuse(t, crate::proto::Error::BudgetExhausted)?;
                continue;
            }
            let read = match self.poll_read(t, cx) {
                Poll::Ready(r) => r,
                Poll::Pending => match self.read_buf.take_denied() {
                    Some(grant) => {
                        ready!(self.poll_budget(t, cx, grant))?;
                        continue;
                    }
                    None => {
                        t.wait_for_input(cx);
                        if t.transport_ended() {
                            // Ended between the check above and the wait.
                            continue;
                        }
                        return Poll::Pending;
                    }
                },
            };
            let err = match read {
                Ok(n) if n > 0 => {
                    self.made_progress();
                    if self.report_input {
                        t.with_writer(|w, _| w.conn.handle_input(now()));
                    }
                    continue;
                }
                Ok(_) => io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed without a close frame",
                ),
                Err(e) => e,
            };
            return self.ended(t, err);
        }
    }

    /// The transport ended: the end of the stream, or an error.
    fn ended<T: Transport>(&mut self, t: &mut T, err: io::Error) -> Poll<Option<Result<Message>>> {
        self.terminated = true;
        let expected = t.with_writer(|w, _| {
            // Senders waiting on the transport learn it has ended.
            w.wake_writers();
            w.conn.handle_transport_end()
        });
        // After our close frame, a peer that hangs up (or resets) instead
        // of answering ends the connection as surely: many servers do.
        let hung_up = matches!(
            err.kind(),
            io::ErrorKind::UnexpectedEof
                | io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::BrokenPipe
        );
        if hung_up && expected {
            trace::debug_event!("peer ended the connection after our close frame");
            return Poll::Ready(None);
        }
        Poll::Ready(Some(Err(err.into())))
    }
}

/// The write half of finishing: flush, and shut down unless the peer is to
/// close first.
fn finish_writes<W: AsyncWrite + Unpin>(
    w: &mut WriteState,
    io: &mut W,
    cx: &mut Context<'_>,
    wait_for_peer: bool,
) -> Poll<()> {
    if ready!(w.poll_drain(io, cx, Task::Receiving)).is_err() {
        w.outbox.clear();
    }
    let _ = ready!(w.poll_flush_io(io, cx, Task::Receiving));
    if !wait_for_peer {
        let _ = ready!(Pin::new(&mut Retrying(io)).poll_shutdown(cx));
        w.set_shut_down();
    }
    Poll::Ready(())
}
