//! One connection's receiving side as one step: every decision about what
//! arrives, for every engine.
//!
//! An engine keeps a [`Receiver`] per connection and calls
//! [`Receiver::step`] in a loop, doing what each [`Step`] asks (read into
//! a place, flush, write what the core owes, wait) and passing what came
//! of it as the next step's [`Input`]. The receiver decodes, tells the
//! [`Connection`] what it must hear, decides when to read, flush, wait for
//! memory budget or end, and says how the connection ended; the engine
//! moves bytes and time and decides nothing.
//!
//! The engine reaches the connection through a [`Link`]. A receiver that
//! shares the connection with a sending task (behind a lock) reaches it
//! only when the connection must change: a control frame, an error, a
//! timer, the memory budget, the end. A plain data message, and input
//! while keepalive runs, take no lock: the time of the last input is kept
//! here and handed to the connection before anything else it hears (its
//! deadline, at the latest).
//!
//! Deadlines are looked at before each read, as the receiver keeps the
//! connection's next one: input that is always ready cannot starve them,
//! and messages already read (a peer's answer among them) are heard first.
//! The engine's timer serves only the waits.
//!
//! ```
//! use std::time::Instant;
//! use wavesock_proto::bytes::BytesMut;
//! use wavesock_proto::conn::{Connection, State, Timers};
//! use wavesock_proto::decoder::MessageDecoder;
//! use wavesock_proto::encoder::FrameEncoder;
//! use wavesock_proto::inbox::{Inbox, OwnMemory, Plan};
//! use wavesock_proto::receive::{Input, Link, Receiver, Step};
//! use wavesock_proto::{Error, Limits, Message, Role};
//!
//! // An engine that owns its connection outright.
//! struct Own(Connection);
//! impl Link for Own {
//!     fn state(&self) -> State {
//!         self.0.state()
//!     }
//!     fn with_conn<T>(&mut self, f: impl FnOnce(&mut Connection) -> T) -> Result<T, Error> {
//!         Ok(f(&mut self.0))
//!     }
//!     fn transport_ended(&mut self) {}
//!     fn abandon(&mut self) {}
//! }
//!
//! let mut wire = BytesMut::new();
//! FrameEncoder::new(Role::Client).encode_message(&Message::text("hi"), &mut wire)?;
//! let now = Instant::now();
//! let mut link = Own(Connection::new(Role::Server, Timers::default(), now));
//! let inbox = Inbox::new(MessageDecoder::new(Role::Server, Limits::default()), BytesMut::new());
//! let mut rx = Receiver::new(inbox, false);
//! let mut mem = OwnMemory;
//!
//! // Nothing buffered: read into scratch memory, hand the inbox what came.
//! let Step::Read(Plan::Scratch { .. }) = rx.step(&mut link, Input::Start, &mut mem, &|| now)
//! else { panic!() };
//! rx.inbox_mut().received(&wire, false, &mut mem);
//! let step = rx.step(&mut link, Input::Read(Ok(wire.len())), &mut mem, &|| now);
//! assert_eq!(step, Step::Message(Message::text("hi")));
//! // The peer leaves without a close frame.
//! let Step::Read(_) = rx.step(&mut link, Input::Start, &mut mem, &|| now) else { panic!() };
//! let Step::End(Some(_)) = rx.step(&mut link, Input::Read(Ok(0)), &mut mem, &|| now)
//! else { panic!() };
//! # Ok::<(), wavesock_proto::Error>(())
//! ```

use std::io;
use std::time::Instant;

use bytes::{Buf, BytesMut};

use crate::budget::Grant;
use crate::close::CloseCode;
use crate::conn::{Connection, Phase, State};
use crate::decoder::BorrowedData;
use crate::error::Error;
use crate::inbox::{Inbox, Plan, ReadMemory};
use crate::message::Message;

/// How a [`Receiver`] reaches its connection, which an engine may share
/// with a sending task.
pub trait Link {
    /// The connection's [`State`] as of its last input, from whichever
    /// task: cheap, called on every step.
    fn state(&self) -> State;

    /// Runs `f` on the connection; the engine then encodes what the
    /// connection owes the peer (its queue, to be written on the next
    /// flush or write step). An error: what it owes could not be encoded.
    /// (The connection's deadline is the receiver's to keep:
    /// [`Receiver::deadline`].)
    fn with_conn<T>(&mut self, f: impl FnOnce(&mut Connection) -> T) -> Result<T, Error>;

    /// The transport has ended: tasks waiting to write, or for room to,
    /// must learn it.
    fn transport_ended(&mut self);

    /// The connection is given up: frames still queued are dropped.
    fn abandon(&mut self);

    /// Whether the engine holds frames not yet written out and flushed:
    /// a flush before reading is skipped when it holds none. `true` when
    /// it cannot tell cheaply (the flush then finds out).
    #[inline]
    fn has_writes(&self) -> bool {
        true
    }

    /// Bytes queued to write and not yet written: once a cork's worth
    /// ([`CORK`](crate::buffer::CORK)) waits, a step over the engine's read buffer
    /// ([`Receiver::step_in`]) flushes before the next message, so that
    /// the peer gets to work on the replies while the rest of the read is
    /// handled. `0` when the engine cannot tell cheaply.
    #[inline]
    fn queued(&self) -> usize {
        0
    }

    /// Whether the engine holds the peer's input back for now: decoding
    /// stops (the step [waits](Step::Wait)) until it says otherwise and
    /// steps again. A hub holds it while a close the application asked
    /// for has not gone out, so that nothing the peer sent after the
    /// message that asked (its own close, a violation, its end) takes the
    /// place of the close asked for.
    #[inline]
    fn holds_input(&self) -> bool {
        false
    }

    /// Something worth reporting happened (for logs); nothing to act on.
    fn note(&mut self, note: Note<'_>) {
        let _ = note;
    }
}

/// What [`Link::note`] reports.
#[derive(Debug)]
#[non_exhaustive]
pub enum Note<'a> {
    /// The peer's close frame arrived, with this code.
    CloseReceived(Option<CloseCode>),
    /// The connection fails with this error (its close frame is owed).
    Failing(&'a Error),
    /// The memory budget refused room for good.
    OverBudget(Grant),
    /// Reading waits for this many bytes of memory budget.
    WaitingForBudget(usize),
    /// A deadline passed: the connection ends without waiting.
    TimedOut,
    /// The peer ended the transport after our close frame: a clean end.
    PeerEndedAfterClose,
}

/// What the engine did since the last step.
#[derive(Debug)]
#[non_exhaustive]
pub enum Input {
    /// Nothing yet: the first step of a poll, or after [`Step::WriteNow`].
    Start,
    /// The read [`Step::Read`] asked for: bytes (already handed to the
    /// inbox: [`Inbox::received`], [`Inbox::read_done`]), `Ok(0)` when the
    /// transport ended, or its error.
    Read(io::Result<usize>),
    /// That read found nothing yet (the engine is woken when it can).
    ReadPending,
    /// [`Step::Flush`] wrote what it could: whether some is still owed
    /// (the transport was not ready; the engine is woken when it is).
    Flushed(bool),
    /// [`Step::Flush`] waits: the peer does not take what is owed, and
    /// more is owed than the engine buffers.
    FlushBlocked,
    /// A write failed: the transport is gone.
    WriteFailed(io::Error),
    /// The engine's timer reached the connection's deadline.
    Timer,
    /// [`Step::WaitForBudget`]: the budget has room already.
    BudgetReady,
    /// [`Step::Finish`] is done (written and shut down, or given up on).
    Finished,
}

/// What the engine does next.
#[derive(Debug, PartialEq)]
#[non_exhaustive]
pub enum Step {
    /// A message for the application.
    Message(Message),
    /// Read where the plan says ([`Plan`]), then step with
    /// [`Input::Read`] or [`Input::ReadPending`].
    Read(Plan),
    /// Write out what is queued before waiting for input, then step with
    /// [`Input::Flushed`], [`Input::FlushBlocked`] or
    /// [`Input::WriteFailed`].
    Flush,
    /// [`Flush`](Self::Flush), then, if everything was written, read as
    /// [`Read`](Self::Read) says and step with the read's input; else step
    /// with the flush's ([`Input::Flushed`]`(true)`,
    /// [`Input::FlushBlocked`], [`Input::WriteFailed`]; nothing read).
    /// From [`Receiver::step_in`], and from [`Receiver::step`] when the
    /// engine takes it ([`Receiver::set_flush_then_read`]): one step fewer
    /// per message answered.
    FlushRead(Plan),
    /// Hand what is queued (the answer to the peer's close, or with
    /// [`Receiver::set_pong_before_ping`] a ping's pong) to the transport
    /// now, without waiting for it, then step with [`Input::Start`]: the
    /// application may never poll again.
    WriteNow,
    /// Wait for `0` bytes of memory budget
    /// ([`Inbox::wait_for_budget`](crate::inbox::Inbox::wait_for_budget)
    /// with the engine's waker; [`Input::BudgetReady`] if it has room at
    /// once), or for the timer.
    WaitForBudget(usize),
    /// Wait for the timer or a wake-up (from the transport or the budget).
    Wait,
    /// The connection is ending: write out what is queued (our close
    /// frame) and flush, ignoring failures, then shut the transport's
    /// writing side down if `shut_down` and read and drop the input that
    /// is there already (at most [`DISCARD_AT_ONCE`] bytes, without
    /// waiting): a transport closed with input unread is reset, and a
    /// reset throws away what the peer has not read yet, our close among
    /// it. Step with [`Input::Finished`]. Meanwhile the timer runs
    /// ([`Input::Timer`]).
    Finish {
        /// Shut the writing side down (else the peer ends the transport).
        shut_down: bool,
    },
    /// A deadline passed: write what the transport takes at once (a close
    /// saying why), wait for nothing, then step with [`Input::Start`].
    WriteLast,
    /// The connection has ended: how, if not cleanly.
    End(Option<Ended>),
}

/// What [`Receiver::step_in`] gives: a step, or a whole one-frame data
/// message decoded where it lies in the engine's read buffer.
#[derive(Debug, PartialEq)]
pub enum Stepped<'s> {
    /// A message for the application, borrowed from the engine's buffer:
    /// step again (with [`Input::Start`]) once done with it.
    Borrowed(BorrowedData<'s>),
    /// Any other step.
    Step(Step),
}

/// What [`Receiver::next`] returns to each kind of step: a [`Step`] to
/// [`Receiver::step`], whose engine has no buffer to borrow from, or a
/// [`Stepped`] to [`Receiver::step_in`]. Returned as it is, not wrapped
/// and unwrapped again (which cost the Stream 30 instructions a message).
trait Out<'s> {
    fn step(step: Step) -> Self;
    fn borrowed(data: BorrowedData<'s>) -> Self;
}

impl<'s> Out<'s> for Step {
    #[inline(always)]
    fn step(step: Step) -> Self {
        step
    }

    fn borrowed(_: BorrowedData<'s>) -> Self {
        unreachable!("nothing is borrowed without the engine's buffer")
    }
}

impl<'s> Out<'s> for Stepped<'s> {
    #[inline(always)]
    fn step(step: Step) -> Self {
        Stepped::Step(step)
    }

    #[inline(always)]
    fn borrowed(data: BorrowedData<'s>) -> Self {
        Stepped::Borrowed(data)
    }
}

/// How much input an ending connection reads and drops in one go: after
/// [`Step::Finish`] shut its side down, and per turn of an engine that
/// keeps reading until the peer ends the transport (a hub's connection
/// closed for backpressure). Enough for what a peer sends in the round
/// trip before it reads our close; a peer that floods past it is cut off
/// at the end, and waits its turn while lingering.
pub const DISCARD_AT_ONCE: usize = 64 << 10;

/// How a connection ended, when not cleanly.
#[derive(Debug)]
pub enum Ended {
    /// The protocol's error (a close frame with its code was owed).
    Error(Error),
    /// The transport's.
    Transport(io::Error),
}

impl PartialEq for Ended {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Ended::Error(a), Ended::Error(b)) => a.to_string() == b.to_string(),
            (Ended::Transport(a), Ended::Transport(b)) => a.kind() == b.kind(),
            _ => false,
        }
    }
}

/// Where the receiver is in a connection's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Open,
    /// The close is being written ([`Step::Finish`]).
    Finishing,
    /// Written; a client waits for the server to end the transport.
    Draining,
    /// Timed out: what the transport takes at once is being written.
    Abandoning,
    Done,
}

/// One connection's receiving side; see the [module docs](self).
#[derive(Debug)]
pub struct Receiver {
    inbox: Inbox,
    stage: Stage,
    /// Flush everything queued before waiting for input (the sender's
    /// messages too: write coalescing for an application that sends
    /// from its read loop), rather than only what this side owes.
    flush_all: bool,
    /// This side queued frames (pongs, a close) that it must see written
    /// even when the sending side is idle.
    must_flush: bool,
    /// Flushed since the last read: read now.
    flushed: bool,
    /// Decoded to the end of what the inbox holds since input last came:
    /// nothing to decode until more does.
    drained: bool,
    /// A message held back while [`Step::WriteNow`] answers it, or one
    /// [`received`](Self::received) decoded from a read (or the rule it
    /// broke): handed out (or failed with) before anything else is
    /// decoded.
    pending: Option<Result<Message, Error>>,
    /// When input last came while keepalive ran, not yet told to the
    /// connection: it hears it before anything else.
    last_input: Option<Instant>,
    /// The state seen before the last read, to notice another task's
    /// change while the read found nothing.
    read_state: Option<State>,
    /// The connection's next deadline ([`Connection::poll_timeout`]) as
    /// of `deadline_for`: looked at before every read, so that input that
    /// is always ready cannot starve it, and only then, so that messages
    /// the application has not taken yet (the peer's answer among them)
    /// are heard before it.
    deadline: Option<Instant>,
    /// The state the deadline was read in: it changes only with the state
    /// or with this side's inputs, which read it again.
    deadline_for: Option<State>,
    /// Messages decoded after this side's close went out are dropped
    /// rather than handed out (but the peer's close).
    quiet_after_close: bool,
    /// [`step_in`](Self::step_in): the last read went into the engine's
    /// read buffer.
    read_scratch: bool,
    /// [`step_in`](Self::step_in): bytes of the last read are in the
    /// engine's read buffer, not all decoded yet.
    in_scratch: bool,
    /// Bytes at the front of the engine's buffer taken by messages handed
    /// out borrowed: advanced past once, not per message.
    scratch_used: usize,
    /// A cork's flush during this read found the peer behind.
    cork_blocked: bool,
    /// The engine serves the connection's deadlines itself.
    engine_timers: bool,
    /// The last step was [`Step::FlushRead`]: a read's input says the
    /// flush before it wrote everything.
    flush_read: bool,
    /// [`step`](Self::step) may ask for [`Step::FlushRead`]
    /// ([`set_flush_then_read`](Self::set_flush_then_read)).
    flush_then_read: bool,
    /// A ping's pong goes to the transport before the ping is handed out
    /// ([`set_pong_before_ping`](Self::set_pong_before_ping)).
    pong_before_ping: bool,
}

impl Receiver {
    /// A receiver for `inbox`. `flush_all`: before waiting for input,
    /// everything queued is written out (the engine sends from the task
    /// that reads); otherwise only what the receiver itself queued.
    pub fn new(inbox: Inbox, flush_all: bool) -> Self {
        Receiver {
            inbox,
            stage: Stage::Open,
            flush_all,
            must_flush: false,
            flushed: false,
            drained: false,
            pending: None,
            last_input: None,
            read_state: None,
            deadline: None,
            deadline_for: None,
            quiet_after_close: false,
            read_scratch: false,
            in_scratch: false,
            scratch_used: 0,
            cork_blocked: false,
            engine_timers: false,
            flush_read: false,
            flush_then_read: false,
            pong_before_ping: false,
        }
    }

    /// [`step`](Self::step) asks for a flush and the read after it as one
    /// step ([`Step::FlushRead`]) rather than two: the engine flushes and,
    /// if that wrote everything, reads at once (one step fewer per message
    /// answered). [`step_in`](Self::step_in) always does.
    pub fn set_flush_then_read(&mut self, on: bool) {
        self.flush_then_read = on;
    }

    /// A ping handed out with nothing read after it is preceded
    /// by [`Step::WriteNow`], which hands its pong (with anything queued
    /// before it, the pongs to earlier pings of the same read among them)
    /// to the transport, as the echo of the peer's close is: an
    /// application that stops polling once it has the ping, and drops the
    /// connection, has still answered it. For an engine whose application owns the connection
    /// (a Stream); one that writes every reply after the read that
    /// brought it (a hub) leaves it off and keeps one write for a burst of
    /// pings. The cap on owed pongs is the connection's either way.
    pub fn set_pong_before_ping(&mut self, on: bool) {
        self.pong_before_ping = on;
    }

    /// The engine serves the connection's deadlines itself: it calls
    /// [`Connection::handle_timeout`] when they pass, within a bound of
    /// its own on how long input can keep it from doing so (a hub's turn).
    /// The receiver then looks at no deadline before reading, and input
    /// under keepalive is told to the connection at once rather than
    /// remembered (a timer the receiver does not see may fire next).
    pub fn set_engine_timers(&mut self, engine_timers: bool) {
        self.engine_timers = engine_timers;
    }

    /// Messages that arrive after this side's close frame went out are
    /// dropped rather than handed out (the application asked to close and
    /// hears nothing more but the end): the connection still hears them
    /// (a ping is answered), and the peer's close is handed out and ends
    /// the connection.
    pub fn set_quiet_after_close(&mut self, quiet: bool) {
        self.quiet_after_close = quiet;
    }

    /// Makes the receiver new for another connection of the same limits
    /// (an engine that pools them): the inbox must be
    /// [at rest](Inbox::is_at_rest). Settings stay.
    #[inline]
    pub fn reset(&mut self) {
        debug_assert!(self.inbox.is_at_rest());
        self.stage = Stage::Open;
        self.must_flush = false;
        self.flushed = false;
        // At rest: nothing to decode until input comes.
        self.drained = true;
        self.pending = None;
        self.last_input = None;
        self.read_state = None;
        self.deadline = None;
        self.deadline_for = None;
        self.read_scratch = false;
        self.in_scratch = false;
        self.scratch_used = 0;
        self.cork_blocked = false;
        self.flush_read = false;
    }

    /// Whether the message just handed out by
    /// [`step_in`](Self::step_in) lies in the engine's read buffer (its
    /// payload shares that memory) rather than in the inbox's own.
    #[inline]
    pub fn decodes_in_scratch(&self) -> bool {
        self.in_scratch
    }

    /// Changes what is flushed before waiting for input (see
    /// [`new`](Self::new)): an engine that splits a connection's tasks
    /// apart, or joins them again.
    pub fn set_flush_all(&mut self, flush_all: bool) {
        self.flush_all = flush_all;
    }

    /// The inbox: the decoder and the read buffer.
    #[inline]
    pub fn inbox(&self) -> &Inbox {
        &self.inbox
    }

    /// The inbox, for the engine's reads ([`Inbox::received`],
    /// [`Inbox::read_done`], [`Inbox::target`]) and set-up: whatever it
    /// holds is decoded on the next step.
    #[inline]
    pub fn inbox_mut(&mut self) -> &mut Inbox {
        self.drained = false;
        &mut self.inbox
    }

    /// Whether the last step ended the connection.
    pub fn is_done(&self) -> bool {
        self.stage == Stage::Done
    }

    /// Ends the connection without waiting for anything more (the
    /// application gave it up).
    pub fn give_up(&mut self, link: &mut impl Link) {
        self.stage = Stage::Done;
        self.inbox.release();
        let _ = link.with_conn(|c| c.abandon());
        link.abandon();
    }

    /// The engine's timer for a close the application waits on went off:
    /// what the core makes of it. Until its close frame is queued (a full
    /// write queue to a peer that reads nothing has no room for it), the
    /// close timeout runs from the application's first ask
    /// ([`Connection::ask_close`]); once queued, the connection's close
    /// deadline (from that ask too) rules. Past the deadline, the
    /// connection ends at once, nothing more written or read (as
    /// [`give_up`](Self::give_up)), and this is the error to report
    /// ([`Error::CloseTimeout`]); `None` while the deadline is still ahead
    /// (a timer that went off early): wait on. Keepalive and the budget's
    /// wait are not looked at: the close's deadline is the only one that
    /// ends a close.
    #[cold]
    pub fn close_timer(&mut self, link: &mut impl Link, now: Instant) -> Option<Error> {
        let error = link
            .with_conn(|c| {
                if c.close_deadline().is_none() {
                    // Not queued yet: the frame waits for room.
                    let passed = c.close_deadline_from(now).is_some_and(|d| now >= d);
                    return passed.then_some(Error::CloseTimeout);
                }
                c.handle_timeout(now);
                if c.phase() == Phase::TimedOut {
                    Some(c.take_error().unwrap_or(Error::CloseTimeout))
                } else {
                    None
                }
            })
            .unwrap_or_else(Some)?;
        self.give_up(link);
        Some(error)
    }

    /// The next step, given what came of the last one. `now` reads the
    /// engine's clock, called only when a time is needed.
    #[inline(always)]
    pub fn step(
        &mut self,
        link: &mut impl Link,
        input: Input,
        mem: &mut impl ReadMemory,
        now: &impl Fn() -> Instant,
    ) -> Step {
        self.after_flush_read(&input);
        match self.take(link, input, mem, now) {
            Ok(Some(step)) => step,
            // No buffer of the engine's: an empty one, never read, and
            // never dropped (its drop is a call that cost the Stream 50
            // instructions per message).
            Ok(None) => self.next::<Step, false>(
                link,
                &mut std::mem::ManuallyDrop::new(BytesMut::new()),
                mem,
                now,
            ),
            Err(e) => self.end(Some(Ended::Error(e))),
        }
    }

    /// [`step`](Self::step) for an engine that reads into a buffer of its
    /// own that all its connections share, `scratch`: a
    /// [`Plan::Scratch`] read goes there (not handed to the inbox), and
    /// what it brought is decoded where it lies, a whole one-frame data
    /// message [borrowed](Stepped::Borrowed) from it, others split off.
    /// `scratch` must be empty when a read into it begins; the receiver
    /// empties it (what is left of an unfinished frame becomes the
    /// inbox's) before it returns any step but a message or a flush. Pass
    /// the same buffer, untouched, on every step until then.
    #[inline(always)]
    pub fn step_in<'s>(
        &mut self,
        link: &mut impl Link,
        input: Input,
        scratch: &'s mut BytesMut,
        mem: &mut impl ReadMemory,
        now: &impl Fn() -> Instant,
    ) -> Stepped<'s> {
        self.after_flush_read(&input);
        if std::mem::take(&mut self.read_scratch) {
            match input {
                Input::Read(Ok(n)) if n > 0 => {
                    self.in_scratch = self.stage != Stage::Draining;
                    if !self.in_scratch {
                        scratch.clear();
                    }
                }
                // Nothing came: what was set aside for the read under a
                // budget goes back.
                _ => self.inbox.scratch_unused(),
            }
        }
        let step = match self.take(link, input, mem, now) {
            Ok(None) => return self.next::<Stepped<'s>, true>(link, scratch, mem, now),
            Ok(Some(step)) => step,
            Err(e) => self.end(Some(Ended::Error(e))),
        };
        self.leave_scratch_for(link, &step, scratch);
        Stepped::Step(step)
    }

    /// After [`Step::FlushRead`]: input from the read says the flush
    /// before it wrote everything.
    #[inline(always)]
    fn after_flush_read(&mut self, input: &Input) {
        if std::mem::take(&mut self.flush_read)
            && matches!(input, Input::Read(_) | Input::ReadPending)
        {
            self.must_flush = false;
        }
    }

    /// Before `step` goes back to the engine: the engine's buffer is
    /// emptied unless the step hands out a message from it or flushes
    /// between its messages.
    #[inline(always)]
    fn leave_scratch_for(&mut self, link: &impl Link, step: &Step, scratch: &mut BytesMut) {
        if self.in_scratch && !matches!(step, Step::Message(_) | Step::Flush) {
            let open = self.stage == Stage::Open && link.state().phase() == Phase::Open;
            self.leave_scratch(scratch, open);
        }
    }

    /// What a [`Plan::Scratch`] read brought, in the engine's memory
    /// (`got`): [`Inbox::received`], but a read that is one whole
    /// one-frame data message (the usual one under request and reply) is
    /// decoded where it lies, only its payload copied, and handed out by
    /// the next step ([`Inbox::take_whole`]). Before that step, which
    /// gets the read's [`Input::Read`] as always.
    #[inline]
    pub fn received(&mut self, got: &mut [u8], filled: bool, mem: &mut impl ReadMemory) {
        // A message handed out this way skips the connection, which hears
        // data messages only while waiting for memory budget (no budget:
        // `take_whole` declines under one) and after a quiet receiver's
        // close.
        if !filled && self.stage == Stage::Open && !self.quiet_after_close && self.pending.is_none()
        {
            if let Some(whole) = self.inbox.take_whole(got, mem) {
                self.pending = Some(whole);
                return;
            }
        }
        self.inbox.received(got, filled, mem);
    }

    /// The engine stops stepping while bytes of the last read are still
    /// in its buffer, its connection ended another way (a write failed,
    /// the application is gone): they are dropped, and `scratch` emptied
    /// for the engine's next connection. Nothing if none are: an engine
    /// calls it whenever it leaves its loop.
    #[inline]
    pub fn quit_scratch(&mut self, scratch: &mut BytesMut) {
        if self.in_scratch {
            self.leave_scratch(scratch, false);
        }
    }

    /// The read a step asked for found nothing (the engine is woken when
    /// there is something): `true` if the engine
    /// just waits now, as the step with [`Input::ReadPending`] would say
    /// ([`Step::Wait`]), without taking that step; `false`: take it.
    #[inline]
    pub fn read_pending(&mut self, link: &impl Link) -> bool {
        if std::mem::take(&mut self.read_scratch) {
            self.inbox.scratch_unused();
        }
        if std::mem::take(&mut self.flush_read) {
            self.must_flush = false;
        }
        self.waits(link)
    }

    /// Whether a read that found nothing leaves nothing to do but wait.
    #[inline]
    fn waits(&self, link: &impl Link) -> bool {
        if self.stage == Stage::Draining {
            return true;
        }
        let state = link.state();
        let budget_idle = state.is_waiting_for_budget() && !self.inbox.holds_budget();
        !budget_idle && self.read_state == Some(state)
    }

    /// Done with the engine's buffer: past what was handed out borrowed,
    /// what is left (an unfinished frame) becomes the inbox's if `open`
    /// (the connection takes more input), else is dropped; the buffer is
    /// emptied for the engine's next read.
    #[inline]
    fn leave_scratch(&mut self, scratch: &mut BytesMut, open: bool) {
        self.in_scratch = false;
        self.cork_blocked = false;
        // Advanced past, not cleared: the buffer's start moves on, so the
        // engine's next read is offered what is left of it rather than its
        // whole capacity every time (which made 16 connections echoing 64
        // KiB half as fast in the hub: 2.5 GiB/s fell to 1.2).
        let used = std::mem::take(&mut self.scratch_used);
        if used > 0 {
            scratch.advance(used);
        }
        self.inbox.keep_rest(scratch, open);
    }

    /// Whether `msg` is dropped: anything but the peer's close after our
    /// close, for a quiet receiver ([`set_quiet_after_close`](Self::set_quiet_after_close)).
    #[inline]
    fn is_quiet(&self, link: &impl Link, msg: &Message) -> bool {
        self.quiet_after_close && !matches!(msg, Message::Close(_)) && link.state().is_close_sent()
    }

    /// The peer broke the protocol: the connection hears it.
    fn fail(
        &mut self,
        link: &mut impl Link,
        e: Error,
        now: &impl Fn() -> Instant,
    ) -> Result<(), Error> {
        link.note(Note::Failing(&e));
        let at = now();
        self.tell(link, |c| c.handle_error(e, at))
    }

    /// The connection's next deadline ([`Connection::poll_timeout`]), for
    /// the engine's timer while it waits ([`Step::Wait`] and the other
    /// waits): kept from the last input this side gave it, and read again
    /// when another task changed the connection's state. The engine keeps
    /// no deadline of its own.
    #[inline]
    pub fn deadline(&mut self, link: &mut impl Link) -> Option<Instant> {
        let state = link.state();
        self.deadline_in(link, state)
    }

    #[inline]
    fn deadline_in(&mut self, link: &mut impl Link, state: State) -> Option<Instant> {
        if self.deadline_for != Some(state) {
            self.deadline = link.with_conn(|c| c.poll_timeout()).unwrap_or(None);
            self.deadline_for = Some(state);
        }
        self.deadline
    }

    /// Whether the connection's deadline has passed. No clock is read
    /// without one.
    fn deadline_passed(
        &mut self,
        link: &mut impl Link,
        state: State,
        now: &impl Fn() -> Instant,
    ) -> bool {
        !self.engine_timers && self.deadline_in(link, state).is_some_and(|d| now() >= d)
    }

    fn role(&self) -> crate::Role {
        self.inbox.decoder().role()
    }

    fn time_out(&mut self, link: &mut impl Link) -> Step {
        link.note(Note::TimedOut);
        self.stage = Stage::Abandoning;
        self.inbox.release();
        Step::WriteLast
    }

    /// The transport ended with `err` before the connection did: the
    /// connection says whether that was part of closing.
    fn transport_ended(&mut self, link: &mut impl Link, err: io::Error) -> Step {
        let err = link
            .with_conn(|c| c.handle_transport_error(err))
            .unwrap_or(None);
        link.transport_ended();
        if err.is_none() {
            link.note(Note::PeerEndedAfterClose);
        }
        self.end(err.map(Ended::Transport))
    }

    /// Ends with the connection's error, if it failed.
    fn end_with_error(&mut self, link: &mut impl Link) -> Step {
        let err = link.with_conn(|c| c.take_error()).ok().flatten();
        self.end(err.map(Ended::Error))
    }

    fn end(&mut self, how: Option<Ended>) -> Step {
        self.stage = Stage::Done;
        self.inbox.release();
        Step::End(how)
    }
}

mod next;

#[cfg(test)]
#[path = "receive_tests.rs"]
mod tests;
