//! The receiving side of a connection: reads, decodes, hands the core what
//! arrives and serves its one clock, for the unsplit stream and the
//! receiving half alike. Every protocol decision is the core's
//! ([`Connection`]); this moves bytes and time.

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
use crate::error::Result;
use crate::proto::Role;
use crate::proto::budget::Grant;
use crate::proto::conn::{Connection, Phase, State};
use crate::proto::decoder::MessageDecoder;
use crate::proto::inbox::{Inbox, Plan};
use crate::proto::message::Message;
use crate::retry::Retrying;
use crate::stream::core::{Core, Fed, now};
use crate::stream::pool::ThreadMemory;
use crate::stream::write::Task;
use crate::trace;

/// How the receiving side reaches what it does not own: the transport to
/// read, and the shared [`Core`] with the transport's writing side (held
/// directly by the unsplit stream, behind a lock by a split receiver).
pub(crate) trait CoreLink {
    type Read: AsyncRead + Unpin;
    type Write: AsyncWrite + Unpin;
    /// Whether the receiving side writes out everything queued before it
    /// waits for input, the user's messages too (write coalescing for `feed`
    /// in a read loop). A split receiver writes only what it owes itself and
    /// leaves the sender's messages to the sender.
    const FLUSHES_ALL_BEFORE_READ: bool;

    fn read_io(&mut self) -> &mut Self::Read;
    fn with_core<T>(&mut self, f: impl FnOnce(&mut Core, &mut Self::Write) -> T) -> T;
    /// The core's [`State`] as of its last input, from whichever task.
    fn state(&self) -> State;
    /// Called at the start of every poll of the receiving side: another
    /// task that changes the core's state (a sender whose write fails, or
    /// that sends our close) must wake this one, whichever way the poll
    /// then ends up waiting (the socket, the timer, the memory budget, the
    /// peer taking what we owe it).
    fn watch_state(&mut self, _cx: &Context<'_>) {}
}

/// A timer set to the core's next deadline ([`Connection::poll_timeout`]).
#[derive(Debug, Default)]
struct CoreTimer {
    /// `None` when the core has no deadline. Made on the first poll: a
    /// timer needs the runtime, and construction may be outside it.
    sleep: Option<Pin<Box<Sleep>>>,
    /// The core's state when the deadline was read. The deadline changes
    /// only with the state or with an input from this side, which sets it
    /// anew, so a state that differs is the sign to read it again.
    set_for: Option<State>,
}

impl CoreTimer {
    fn set(&mut self, deadline: Option<Instant>, state: State) {
        self.set_for = Some(state);
        let Some(deadline) = deadline else {
            self.sleep = None;
            return;
        };
        let deadline = tokio::time::Instant::from_std(deadline);
        match &mut self.sleep {
            Some(t) if t.deadline() == deadline => {}
            Some(t) => t.as_mut().reset(deadline),
            None => self.sleep = Some(Box::pin(sleep_until(deadline))),
        }
    }
}

use super::pool::STACK_READ;

/// How a read ended.
enum Read {
    /// Bytes came (`Ok(0)`: the transport ended), or it failed.
    Io(io::Result<usize>),
    /// The memory budget had no room for it: nothing was read.
    Refused(Grant),
}

/// The receiving side: the inbox (decoder and read buffer), and the timer
/// that serves the core's clock.
#[derive(Debug)]
pub(crate) struct ReadState {
    inbox: Inbox,
    /// This stream has yielded its last item. Not the core's: the core
    /// knows how the connection ended, this only that the stream did.
    terminated: bool,
    /// This side queued frames (pongs, a close reply) that it must see
    /// written even when the sending side is idle.
    must_flush: bool,
    timer: CoreTimer,
    #[cfg(feature = "tracing")]
    pub(crate) span: tracing::Span,
}

impl ReadState {
    pub(crate) fn new(role: Role, config: &Config, read_buf: BytesMut) -> Self {
        ReadState {
            inbox: Inbox::new(crate::codec::decoder(role, config), read_buf),
            terminated: false,
            must_flush: false,
            timer: CoreTimer::default(),
            #[cfg(feature = "tracing")]
            span: tracing::debug_span!("websocket", ?role),
        }
    }

    pub(crate) fn role(&self) -> Role {
        self.inbox.decoder().role()
    }

    pub(crate) fn decoder_mut(&mut self) -> &mut MessageDecoder {
        self.inbox.decoder_mut()
    }

    pub(crate) fn is_terminated(&self) -> bool {
        self.terminated
    }

    /// Gives the core an input, queues what it then owes the peer, and
    /// sets the timer to its next deadline. Once the connection is no
    /// longer open nothing more is decoded: the memory held for input goes
    /// back at once.
    fn feed<L: CoreLink>(
        &mut self,
        link: &mut L,
        input: impl FnOnce(&mut Connection),
    ) -> Result<()> {
        let fed = link.with_core(|c, _| c.feed(input))?;
        self.fed(fed);
        Ok(())
    }

    /// [`feed`](Self::feed) for a message decoded from the peer, before it
    /// is yielded. When the core ends the connection on it (the peer's
    /// close frame), what it then owes (the echo) is handed to the
    /// transport at once, with this poll's context: the user may never
    /// poll again after the close, and the peer would wait for the echo
    /// until its close timeout. A split receiver does it under the lock it
    /// takes anyway to queue the echo, held for the write call, never
    /// across a wait, as for every write.
    fn feed_message<L: CoreLink>(
        &mut self,
        link: &mut L,
        cx: &mut Context<'_>,
        msg: &Message,
    ) -> Result<()> {
        let at = now();
        let fed = link.with_core(|c, io| -> Result<Fed> {
            let fed = c.feed(|conn| conn.handle_message(msg, at))?;
            if fed.state.phase() == Phase::Closed {
                c.write_close_reply(io, cx);
            }
            Ok(fed)
        })?;
        self.fed(fed);
        Ok(())
    }

    /// Acts on what the core said after an input.
    fn fed(&mut self, fed: Fed) {
        self.timer.set(fed.deadline, fed.state);
        if fed.queued {
            self.must_flush = true;
        }
        if fed.state.phase() != Phase::Open {
            self.release_input();
        }
    }

    fn release_input(&mut self) {
        self.inbox.release();
    }

    /// The core's error once the connection has ended, if it ended with one.
    fn take_error<L: CoreLink>(&mut self, link: &mut L) -> Option<Result<Message>> {
        link.with_core(|c, _| c.d.conn_mut().take_error())
            .map(|e| Err(e.into()))
    }

    /// Ends the connection without waiting for anything more.
    pub(crate) fn give_up<L: CoreLink>(&mut self, link: &mut L) {
        self.terminated = true;
        self.release_input();
        link.with_core(|c, _| c.abandon());
    }

    /// Flushes what is queued (our close frame) and ends the connection:
    /// at once when failing or as the server, after the server's TCP close
    /// as a client. Bounded by the close timeout; transport errors are
    /// ignored, as the peer may be gone.
    fn poll_finish<L: CoreLink>(
        &mut self,
        link: &mut L,
        cx: &mut Context<'_>,
        wait_for_peer: bool,
    ) -> Poll<()> {
        if self.poll_timer(link, cx).is_ready() {
            // Past the close deadline (the core moves to `TimedOut`).
            let _ = self.feed(link, |c| c.handle_timeout(now()));
            if link.state().phase() == Phase::TimedOut {
                return Poll::Ready(());
            }
        }
        ready!(link.with_core(|c, io| c.poll_finish_writes(io, cx, wait_for_peer)));
        if !wait_for_peer {
            return Poll::Ready(());
        }
        // A client waits for the server to close the TCP connection.
        loop {
            self.inbox.clear();
            match ready!(self.poll_read(link, cx)) {
                Read::Io(Ok(n)) if n > 0 => {}
                _ => return Poll::Ready(()),
            }
        }
    }

    /// Ready once the core's next deadline has passed.
    #[inline]
    fn poll_timer<L: CoreLink>(&mut self, link: &mut L, cx: &mut Context<'_>) -> Poll<()> {
        let state = link.state();
        if self.timer.set_for != Some(state) {
            let deadline = link.with_core(|c, _| c.d.conn().poll_timeout());
            self.timer.set(deadline, state);
        }
        match &mut self.timer.sleep {
            Some(sleep) => sleep.as_mut().poll(cx),
            None => Poll::Pending,
        }
    }

    /// Serves the clock once: `Ready` if a deadline passed and the core
    /// was told.
    fn poll_deadline<L: CoreLink>(
        &mut self,
        link: &mut L,
        cx: &mut Context<'_>,
    ) -> Poll<Result<()>> {
        ready!(self.poll_timer(link, cx));
        Poll::Ready(self.feed(link, |c| c.handle_timeout(now())))
    }

    /// Reads where the inbox says: into the stack when nothing is
    /// buffered, else into its buffer.
    fn poll_read<L: CoreLink>(&mut self, link: &mut L, cx: &mut Context<'_>) -> Poll<Read> {
        let mut mem = ThreadMemory;
        let mut io = Retrying(link.read_io());
        let io = Pin::new(&mut io);
        match self.inbox.plan(&mut mem) {
            Plan::Scratch { limit } => {
                let mut stack = [MaybeUninit::<u8>::uninit(); STACK_READ];
                let mut into = tokio::io::ReadBuf::uninit(&mut stack[..limit.min(STACK_READ)]);
                let read = io.poll_read(cx, &mut into);
                if !matches!(read, Poll::Ready(Ok(()))) || into.filled().is_empty() {
                    self.inbox.scratch_unused();
                }
                if let Err(e) = ready!(read) {
                    return Poll::Ready(Read::Io(Err(e)));
                }
                let got = into.filled();
                self.inbox.received(got, got.len() == STACK_READ, &mut mem);
                Poll::Ready(Read::Io(Ok(got.len())))
            }
            Plan::Own => {
                let r = poll_read_buf(io, cx, &mut self.inbox.target());
                let got = match &r {
                    Poll::Ready(Ok(n)) => Some(*n),
                    _ => None,
                };
                self.inbox.read_done(got, &mut mem);
                r.map(Read::Io)
            }
            Plan::Refused(grant) => Poll::Ready(Read::Refused(grant)),
        }
    }

    /// Under a memory budget: reading waits for budget, or holds some while
    /// nothing arrives. The core runs the wait (and fails the connection
    /// with 1013 past its timeout); this side only makes sure its timer
    /// watches it.
    fn poll_budget_wait<L: CoreLink>(
        &mut self,
        link: &mut L,
        cx: &mut Context<'_>,
    ) -> Poll<Result<()>> {
        if !link.state().is_waiting_for_budget() {
            self.feed(link, |c| c.handle_budget_wait(now()))?;
        }
        self.poll_deadline(link, cx)
    }

    /// The memory budget answered `grant` to a request for more: the
    /// message is refused at once if it can never fit (1009); else this
    /// side waits for budget to be given back. `Ready` means: try again
    /// (or see the connection failed).
    fn poll_budget<L: CoreLink>(
        &mut self,
        link: &mut L,
        cx: &mut Context<'_>,
        grant: Grant,
    ) -> Poll<Result<()>> {
        if grant == Grant::Granted {
            return Poll::Ready(Ok(()));
        }
        if matches!(grant, Grant::Never { .. }) {
            trace::warn_event!(?grant, "failing the connection: over the memory budget");
        }
        let mut wanted = None;
        self.feed(link, |c| wanted = c.handle_grant(grant, now()))?;
        let Some(wanted) = wanted else {
            // Refused for good: the core fails the connection (1009).
            return Poll::Ready(Ok(()));
        };
        if self.inbox.wait_for_budget(wanted, cx.waker()) {
            return Poll::Ready(Ok(()));
        }
        trace::debug_event!(wanted, "waiting for memory budget");
        self.poll_budget_wait(link, cx)
    }

    /// Writes out what this side owes (or, when corking, everything queued)
    /// before waiting for input. `Pending` means: stop reading, the peer is
    /// not taking what we owe it.
    fn poll_flush_owed<L: CoreLink>(
        &mut self,
        link: &mut L,
        cx: &mut Context<'_>,
    ) -> Poll<Result<()>> {
        if !L::FLUSHES_ALL_BEFORE_READ && !self.must_flush {
            return Poll::Ready(Ok(()));
        }
        match ready!(link.with_core(|c, io| c.poll_write_owed(io, cx))) {
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

    pub(crate) fn poll_next<L: CoreLink>(
        &mut self,
        link: &mut L,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Message>>> {
        #[cfg(feature = "tracing")]
        let _span = self.span.clone().entered();
        link.watch_state(cx);
        loop {
            if self.terminated {
                return Poll::Ready(None);
            }
            let state = link.state();
            match state.phase() {
                Phase::Open => {}
                phase @ (Phase::Failing | Phase::Closed) => {
                    let wait = phase.awaits_transport_end(self.role());
                    ready!(self.poll_finish(link, cx, wait));
                    if link.state().phase() == Phase::TimedOut {
                        continue;
                    }
                    self.terminated = true;
                    return Poll::Ready(self.take_error(link));
                }
                // `TimedOut` (the core's phases are non-exhaustive: one it
                // might add is ended the same way, at once).
                _ => {
                    trace::warn_event!("connection timed out");
                    // Write what the core owes (a close saying why) if the
                    // transport takes it at once; wait for nothing.
                    link.with_core(|c, io| {
                        let _ = c.transmit();
                        let _ = c.write.poll_drain(&mut c.d, io, cx, Task::Receiving);
                    });
                    let err = self.take_error(link);
                    self.give_up(link);
                    return Poll::Ready(err);
                }
            }
            let budget = match self.inbox.decode() {
                Ok(Some(msg)) => {
                    if state.hears_message(&msg) {
                        if msg.is_close() {
                            trace::debug_event!(code = ?msg.close_frame().map(|f| f.code), "close frame received");
                        }
                        self.feed_message(link, cx, &msg)?;
                    }
                    return Poll::Ready(Some(Ok(msg)));
                }
                Ok(None) => self.inbox.held_back(),
                Err(e) => {
                    trace::warn_event!(error = %e, close_code = ?e.close_code(), "failing the connection");
                    self.feed(link, |c| c.handle_error(e, now()))?;
                    continue;
                }
            };
            // About to wait for input: write out what was queued meanwhile
            // (replies fed by the user, pongs), all in one write. This is
            // what makes `feed` in a read loop cork replies to pipelined
            // messages without delaying a lone one.
            match self.poll_flush_owed(link, cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(e))),
                Poll::Pending => {
                    // Waiting for the peer to take what we owe it: as when
                    // waiting for input, hold no more than in proportion.
                    self.inbox.wait(&mut ThreadMemory);
                    // The clock runs meanwhile: a peer that reads nothing
                    // for the keepalive's interval and timeout is as dead
                    // as one that sends nothing, and a close still times
                    // out.
                    if self.poll_timer(link, cx).is_ready() {
                        self.feed(link, |c| c.handle_timeout(now()))?;
                        continue;
                    }
                    return Poll::Pending;
                }
            }
            if self.poll_timer(link, cx).is_ready() {
                self.feed(link, |c| c.handle_timeout(now()))?;
                continue;
            }
            if link.state().is_transport_ended() {
                // A write failed: no input is coming either.
                let err = io::Error::new(
                    io::ErrorKind::BrokenPipe,
                    "the transport failed while sending",
                );
                return self.ended(link, err);
            }
            if let Some(grant) = budget {
                // Decoding waits for memory budget: read nothing meanwhile.
                ready!(self.poll_budget(link, cx, grant))?;
                continue;
            }
            if self.inbox.holds_budget() {
                // Holding budget while the peer sends nothing.
                if let Poll::Ready(r) = self.poll_budget_wait(link, cx) {
                    r?;
                    continue;
                }
            }
            let read = match self.poll_read(link, cx) {
                Poll::Ready(Read::Io(r)) => r,
                Poll::Ready(Read::Refused(grant)) => {
                    ready!(self.poll_budget(link, cx, grant))?;
                    continue;
                }
                Poll::Pending => {
                    if state.is_waiting_for_budget() && !self.inbox.holds_budget() {
                        // It waited for room to read, and holds nothing
                        // now: a quiet connection is not refused for that.
                        self.feed(link, |c| c.handle_budget_idle())?;
                        continue;
                    }
                    if link.state() != state {
                        // Changed by another task between the checks above
                        // and the wait.
                        continue;
                    }
                    return Poll::Pending;
                }
            };
            let err = match read {
                Ok(n) if n > 0 => {
                    if link.state().hears_input() {
                        let at = now();
                        link.with_core(|c, _| c.d.conn_mut().handle_input(at));
                    }
                    continue;
                }
                Ok(_) => io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed without a close frame",
                ),
                Err(e) => e,
            };
            return self.ended(link, err);
        }
    }

    /// The transport ended: the end of the stream, or an error.
    fn ended<L: CoreLink>(
        &mut self,
        link: &mut L,
        err: io::Error,
    ) -> Poll<Option<Result<Message>>> {
        self.terminated = true;
        // Senders waiting on the transport learn it has ended; the core
        // says whether the end is part of closing.
        let err = link.with_core(|c, _| {
            let err = c.d.conn_mut().handle_transport_error(err);
            c.end_transport();
            err
        });
        match err {
            None => {
                trace::debug_event!("peer ended the connection after our close frame");
                Poll::Ready(None)
            }
            Some(err) => Poll::Ready(Some(Err(err.into()))),
        }
    }
}
