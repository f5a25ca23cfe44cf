//! The receiver's decision: what the engine did, and the step that
//! follows (`Receiver::next`, the state machine, and what it tells the
//! connection). Apart from `receive.rs`, which holds the types and the
//! receiver's settings, so that each reads on one screen or two.

use std::io;
use std::time::Instant;

use bytes::{Buf, BytesMut};

use super::*;
use crate::budget::Grant;
use crate::buffer::CORK;
use crate::conn::{Connection, Phase};
use crate::error::Error;
use crate::inbox::{Plan, ReadMemory};
use crate::message::Message;

impl Receiver {
    /// Acts on what the engine did: a step to return at once, or `None`
    /// to go on.
    #[inline(always)]
    pub(super) fn take(
        &mut self,
        link: &mut impl Link,
        input: Input,
        mem: &mut impl ReadMemory,
        now: &impl Fn() -> Instant,
    ) -> Result<Option<Step>, Error> {
        // A flush is asked for once before each read: again after the
        // read, and in every new poll (the application may have queued
        // messages meanwhile).
        let flushed = std::mem::replace(&mut self.flushed, false);
        match input {
            Input::Start => {}
            Input::BudgetReady => self.drained = false,
            Input::Read(Ok(n)) if n > 0 => {
                self.drained = false;
                if self.stage == Stage::Draining {
                    // Whatever the server still sends is dropped.
                    self.inbox.clear();
                    return Ok(None);
                }
                let state = link.state();
                if state.is_waiting_for_budget() {
                    // Progress ends the budget's wait at once.
                    self.last_input = Some(now());
                    self.tell(link, |_| ())?;
                } else if state.hears_input() {
                    // Keepalive: told with the next thing the connection
                    // hears (its deadline, at the latest).
                    self.last_input = Some(now());
                    if self.engine_timers {
                        self.tell(link, |_| ())?;
                    }
                }
            }
            Input::Read(read) => {
                if self.stage == Stage::Draining {
                    // The server ended the transport (or it failed): done.
                    return Ok(Some(self.end_with_error(link)));
                }
                let err = match read {
                    Ok(_) => io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "connection closed without a close frame",
                    ),
                    Err(e) => e,
                };
                return Ok(Some(self.transport_ended(link, err)));
            }
            Input::ReadPending => {
                self.flushed = flushed;
                if self.waits(link) {
                    return Ok(Some(Step::Wait));
                }
                if link.state().is_waiting_for_budget() && !self.inbox.holds_budget() {
                    // It waited for room to read, and holds nothing now: a
                    // quiet connection is not refused for that.
                    self.tell(link, |c| c.handle_budget_idle())?;
                    return Ok(None);
                }
                // Changed by another task meanwhile: look again.
            }
            Input::Flushed(still_owed) => {
                self.flushed = true;
                self.must_flush &= still_owed;
            }
            Input::FlushBlocked if self.in_scratch => {
                // A cork's flush between messages of one read: the rest of
                // the read is handled all the same (its bytes are in the
                // engine's buffer), with no more flushes until it is; the
                // peer being behind pauses the next read.
                self.cork_blocked = true;
            }
            Input::FlushBlocked => {
                // Waiting for the peer to take what we owe it: as when
                // waiting for input, hold no more than in proportion. The
                // timer runs meanwhile: a peer that reads nothing for the
                // keepalive's interval and timeout is as dead as one that
                // sends nothing.
                self.inbox.wait(mem);
                return Ok(Some(Step::Wait));
            }
            Input::WriteFailed(e) => {
                self.stage = Stage::Done;
                self.inbox.release();
                return Ok(Some(Step::End(Some(Ended::Transport(e)))));
            }
            Input::Timer => {
                let at = now();
                self.tell(link, |c| c.handle_timeout(at))?;
            }
            Input::Finished => {
                if link.state().phase() == Phase::TimedOut {
                    return Ok(None);
                }
                let wait = link.state().phase().awaits_transport_end(self.role());
                if !wait {
                    return Ok(Some(self.end_with_error(link)));
                }
                self.stage = Stage::Draining;
            }
        }
        Ok(None)
    }

    /// The next step from where the connection stands. Inlined into the
    /// engine's loop (one call site per engine): a call per step cost
    /// about a third of the step's instructions.
    /// `SCRATCH`: stepping over the engine's buffer, `scratch`
    /// ([`step_in`](Self::step_in)); otherwise `scratch` is not used.
    #[inline(always)]
    pub(super) fn next<'s, O: Out<'s>, const SCRATCH: bool>(
        &mut self,
        link: &mut impl Link,
        scratch: &'s mut BytesMut,
        mem: &mut impl ReadMemory,
        now: &impl Fn() -> Instant,
    ) -> O {
        loop {
            match self.stage {
                Stage::Done => {
                    let step = Step::End(None);
                    return self.out::<O, SCRATCH>(link, scratch, step);
                }
                Stage::Abandoning => {
                    let err = link.with_conn(|c| c.take_error()).ok().flatten();
                    self.give_up(link);
                    let step = Step::End(err.map(Ended::Error));
                    return self.out::<O, SCRATCH>(link, scratch, step);
                }
                Stage::Draining => {
                    let state = link.state();
                    if state.phase() != Phase::TimedOut && self.deadline_passed(link, state, now) {
                        let at = now();
                        let _ = self.tell(link, |c| c.handle_timeout(at));
                    }
                    if link.state().phase() == Phase::TimedOut {
                        let step = self.time_out(link);
                        return self.out::<O, SCRATCH>(link, scratch, step);
                    }
                    self.inbox.clear();
                    let step = match self.inbox.plan(mem) {
                        Plan::Refused(_) => self.end_with_error(link),
                        plan => Step::Read(plan),
                    };
                    return self.out::<O, SCRATCH>(link, scratch, step);
                }
                Stage::Open | Stage::Finishing => {}
            }
            match self.pending.take() {
                None => {}
                Some(Ok(msg)) => {
                    let step = Step::Message(msg);
                    return self.out::<O, SCRATCH>(link, scratch, step);
                }
                Some(Err(e)) => {
                    if let Err(e) = self.fail(link, e, now) {
                        let step = self.end(Some(Ended::Error(e)));
                        return self.out::<O, SCRATCH>(link, scratch, step);
                    }
                    continue;
                }
            }
            let mut state = link.state();
            match state.phase() {
                Phase::Open => {}
                Phase::Failing | Phase::Closed => {
                    self.stage = Stage::Finishing;
                    self.inbox.release();
                    let wait = state.phase().awaits_transport_end(self.role());
                    let step = Step::Finish { shut_down: !wait };
                    return self.out::<O, SCRATCH>(link, scratch, step);
                }
                // `TimedOut`.
                _ => {
                    let step = self.time_out(link);
                    return self.out::<O, SCRATCH>(link, scratch, step);
                }
            }
            if link.holds_input() {
                // Decode nothing more for now; the engine steps again.
                let step = Step::Wait;
                return self.out::<O, SCRATCH>(link, scratch, step);
            }
            let next = if self.drained {
                Ok(None)
            } else if SCRATCH && self.in_scratch && self.scratch_used == scratch.len() {
                // All the read brought is handed out: the usual end of a
                // read (one message each, as often as not).
                self.leave_scratch(scratch, true);
                Ok(None)
            } else if SCRATCH && self.in_scratch {
                if !self.flushed && !self.cork_blocked && link.queued() >= CORK {
                    // A cork's worth of replies leaves now, while the rest
                    // of the read is handled: the peer gets to work on
                    // them meanwhile.
                    let step = Step::Flush;
                    return self.out::<O, SCRATCH>(link, scratch, step);
                }
                // A whole one-frame data message that needs no more than
                // handing out (the connection hears data messages only
                // while it waits for memory budget; a quiet receiver drops
                // them after its close) is borrowed where it lies.
                let hears = state.is_waiting_for_budget()
                    || (self.quiet_after_close && state.is_close_sent());
                let at = self.scratch_used;
                let found = if hears {
                    None
                } else {
                    self.inbox.decoder().borrowable(&scratch[at..])
                };
                if let Some(found) = found {
                    match self
                        .inbox
                        .decoder_mut()
                        .take_borrowable(found, &mut scratch[at..])
                    {
                        Ok(frame) => {
                            self.scratch_used += frame.used;
                            // Borrowed only on this path, which returns.
                            return O::borrowed(frame.view(&scratch[at..]));
                        }
                        Err(e) => Err(e),
                    }
                } else {
                    // The general way starts where the borrowed messages
                    // end.
                    if at > 0 {
                        scratch.advance(std::mem::take(&mut self.scratch_used));
                    }
                    match self.inbox.decode_in(scratch) {
                        Ok(None) => {
                            // What is left becomes the inbox's, decoded
                            // there once the rest of it comes.
                            self.leave_scratch(scratch, true);
                            if self.inbox.buffered().is_empty() {
                                Ok(None)
                            } else {
                                self.inbox.decode()
                            }
                        }
                        decoded => decoded,
                    }
                }
            } else {
                self.inbox.decode()
            };
            let held = match next {
                Ok(Some(msg)) => {
                    if !state.hears_message(&msg) {
                        if self.is_quiet(link, &msg) {
                            continue;
                        }
                        let step = Step::Message(msg);
                        return self.out::<O, SCRATCH>(link, scratch, step);
                    }
                    if let Message::Close(frame) = &msg {
                        link.note(Note::CloseReceived(frame.as_ref().map(|f| f.code)));
                    }
                    let at = now();
                    let heard = self.tell(link, |c| {
                        c.handle_message(&msg, at);
                        c.phase()
                    });
                    match heard {
                        Ok(Phase::Closed) => {
                            // The peer's close: its echo goes to the
                            // transport before the frame is handed out.
                            self.inbox.release();
                            self.pending = Some(Ok(msg));
                            let step = Step::WriteNow;
                            return self.out::<O, SCRATCH>(link, scratch, step);
                        }
                        Ok(_) if self.is_quiet(link, &msg) => continue,
                        Ok(_)
                            if self.pong_before_ping
                                && matches!(msg, Message::Ping(_))
                                && self.inbox.buffered().is_empty()
                                && link.has_writes() =>
                        {
                            // Its pong goes out as a close's echo does,
                            // before the ping is handed out: the
                            // application may drop the connection on it.
                            // Only with nothing read after it: the
                            // pongs to a burst of pings in one read still
                            // go out in one write, with the last ping's
                            // (a write per ping is a segment per pong,
                            // which a peer that is not reading runs out
                            // of buffer for long before it runs out of
                            // bytes).
                            self.pending = Some(Ok(msg));
                            let step = Step::WriteNow;
                            return self.out::<O, SCRATCH>(link, scratch, step);
                        }
                        Ok(_) => {
                            let step = Step::Message(msg);
                            return self.out::<O, SCRATCH>(link, scratch, step);
                        }
                        Err(e) => {
                            let step = self.end(Some(Ended::Error(e)));
                            return self.out::<O, SCRATCH>(link, scratch, step);
                        }
                    }
                }
                Ok(None) => {
                    self.drained = true;
                    self.inbox.held_back()
                }
                Err(e) => {
                    if let Err(e) = self.fail(link, e, now) {
                        let step = self.end(Some(Ended::Error(e)));
                        return self.out::<O, SCRATCH>(link, scratch, step);
                    }
                    continue;
                }
            };
            // About to wait for input: write out what was queued meanwhile
            // (replies the application fed, pongs), all in one write. This
            // is what corks replies to pipelined messages without delaying
            // a lone one.
            // Over the engine's buffer, a flush that comes just before a
            // read is asked for with it ([`Step::FlushRead`]): one step
            // fewer per message answered.
            let mut flush_first = false;
            if !self.flushed && (self.flush_all || self.must_flush) {
                if link.has_writes() {
                    if !SCRATCH && !self.flush_then_read {
                        let step = Step::Flush;
                        return self.out::<O, SCRATCH>(link, scratch, step);
                    }
                    flush_first = true;
                } else {
                    self.must_flush = false;
                }
            }
            if state.is_transport_ended() {
                // A write failed: no input is coming either.
                let err = io::Error::new(
                    io::ErrorKind::BrokenPipe,
                    "the transport failed while sending",
                );
                let step = self.transport_ended(link, err);
                return self.out::<O, SCRATCH>(link, scratch, step);
            }
            if let Some(grant) = held {
                if flush_first {
                    let step = Step::Flush;
                    return self.out::<O, SCRATCH>(link, scratch, step);
                }
                // Decoding waits for memory budget: read nothing meanwhile.
                match self.grant(link, grant, now) {
                    Ok(Some(step)) => {
                        let step = step;
                        return self.out::<O, SCRATCH>(link, scratch, step);
                    }
                    Ok(None) => {
                        self.drained = false;
                        continue;
                    }
                    Err(e) => {
                        let step = self.end(Some(Ended::Error(e)));
                        return self.out::<O, SCRATCH>(link, scratch, step);
                    }
                }
            }
            if self.inbox.holds_budget() && !state.is_waiting_for_budget() {
                // Holding budget while the peer sends nothing: the wait
                // runs (1013 past it) until input comes.
                // (Without a budget wait in the connection's timers,
                // nothing runs: read on.)
                let at = now();
                if let Err(e) = self.tell(link, |c| c.handle_budget_wait(at)) {
                    let step = self.end(Some(Ended::Error(e)));
                    return self.out::<O, SCRATCH>(link, scratch, step);
                }
                state = link.state();
            }
            if self.deadline_passed(link, state, now) {
                let at = now();
                if let Err(e) = self.tell(link, |c| c.handle_timeout(at)) {
                    let step = self.end(Some(Ended::Error(e)));
                    return self.out::<O, SCRATCH>(link, scratch, step);
                }
                continue;
            }
            match self.inbox.plan(mem) {
                Plan::Refused(_) if flush_first => {
                    let step = Step::Flush;
                    return self.out::<O, SCRATCH>(link, scratch, step);
                }
                Plan::Refused(grant) => match self.grant(link, grant, now) {
                    Ok(Some(step)) => {
                        let step = step;
                        return self.out::<O, SCRATCH>(link, scratch, step);
                    }
                    Ok(None) => {
                        self.drained = false;
                        continue;
                    }
                    Err(e) => {
                        let step = self.end(Some(Ended::Error(e)));
                        return self.out::<O, SCRATCH>(link, scratch, step);
                    }
                },
                plan => {
                    self.read_state = Some(state);
                    if flush_first {
                        self.flush_read = true;
                        let step = Step::FlushRead(plan);
                        return self.out::<O, SCRATCH>(link, scratch, step);
                    }
                    let step = Step::Read(plan);
                    return self.out::<O, SCRATCH>(link, scratch, step);
                }
            }
        }
    }

    /// `step` back to the engine from [`next`](Self::next), the engine's
    /// buffer emptied first unless the step needs it. Each of `next`'s
    /// returns calls it, rather than `next` breaking out of its loop to
    /// one return: a value carried out of the loop was copied at every
    /// step, 30 instructions a message on the Stream.
    #[inline(always)]
    pub(super) fn out<'s, O: Out<'s>, const SCRATCH: bool>(
        &mut self,
        link: &impl Link,
        scratch: &mut BytesMut,
        step: Step,
    ) -> O {
        if SCRATCH {
            self.leave_scratch_for(link, &step, scratch);
            // A read into the engine's buffer, whatever asks for it (the
            // client draining to the server's end too).
            self.read_scratch = matches!(
                step,
                Step::Read(Plan::Scratch { .. }) | Step::FlushRead(Plan::Scratch { .. })
            );
        }
        O::step(step)
    }

    /// The memory budget answered `grant`: the connection fails if the
    /// message can never fit (1009), else waits for budget to be given
    /// back. `None`: look again.
    pub(super) fn grant(
        &mut self,
        link: &mut impl Link,
        grant: Grant,
        now: &impl Fn() -> Instant,
    ) -> Result<Option<Step>, Error> {
        if grant == Grant::Granted {
            return Ok(None);
        }
        if matches!(grant, Grant::Never { .. }) {
            link.note(Note::OverBudget(grant));
        }
        let at = now();
        let wanted = self.tell(link, |c| c.handle_grant(grant, at))?;
        Ok(wanted.map(|wanted| {
            link.note(Note::WaitingForBudget(wanted));
            Step::WaitForBudget(wanted)
        }))
    }

    /// Tells the connection an input; what it then owes this side must
    /// see written.
    pub(super) fn tell<T>(
        &mut self,
        link: &mut impl Link,
        f: impl FnOnce(&mut Connection) -> T,
    ) -> Result<T, Error> {
        // Input remembered while keepalive ran came before whatever this
        // is: the connection hears it first.
        let heard = self.last_input.take();
        let engine_timers = self.engine_timers;
        let (out, owes, phase, state, deadline) = link.with_conn(|c| {
            if let Some(t) = heard {
                c.handle_input(t);
            }
            let out = f(c);
            let deadline = if engine_timers {
                None
            } else {
                c.poll_timeout()
            };
            (out, c.owes(), c.phase(), c.state(), deadline)
        })?;
        self.deadline = deadline;
        self.deadline_for = Some(state);
        if owes {
            self.must_flush = true;
        }
        if phase != Phase::Open {
            // Nothing more is decoded: the memory held for input goes back.
            self.inbox.release();
        }
        Ok(out)
    }
}
