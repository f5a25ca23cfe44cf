//! The engine: one task that accepts, reads, dispatches, writes and keeps
//! time for all of its connections. It moves bytes and time; every
//! protocol decision is the core's (`proto::conn`, the decoder and
//! encoder) or the handshake's.
//!
//! This file holds the engine's parts, the order of a turn's work
//! (`poll_turn`), and a connection's life in the engine (served, settled,
//! ended). The rest is in rooms, each owning its part of the engine's
//! state and taking the other parts it needs as arguments. None names the
//! engine, so that each reads (and changes) without it and no two files
//! lean on each other. What only the engine does (settling or ending a
//! connection, shutting down) a room hands back: the key of the
//! connection a step changed, the connections a failed poller lost, what
//! a command leaves (`Then`). The engine runs the loops, and settles each
//! connection right after its step.
//!
//! - `turn`: what a turn shares with the connections it serves (the
//!   time, sends and their backpressure, what is served again);
//! - `accept`: the listener, the poller, connections taken in
//!   (`Acceptor`);
//! - `commands`: what handles ask;
//! - `timers`: deadlines (`Timers`);
//! - `upgrade`, `read`, `write`: a connection's HTTP upgrade, its reading
//!   and dispatching, its writing;
//! - `deliver` (feature `topics`): publishes to subscribers
//!   (`Deliveries`).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use bytes::BytesMut;
use tokio::sync::mpsc;

use crate::error::Error;
use crate::hub::accept::{ACCEPTS_PER_TURN, Acceptor};
use crate::hub::commands::{self, COMMANDS_PER_TURN, Then};
use crate::hub::config::HubConfig;
use crate::hub::conn::{Slot, Stage};
#[cfg(feature = "topics")]
use crate::hub::deliver::{Deliveries, Served};
use crate::hub::event::{Closed, LAST_GENERATION, MAX_SLOTS};
use crate::hub::handle::{Command, HubHandle};
use crate::hub::handler::Handler;
use crate::hub::read::{ReceiverPool, linger, read_frames};
use crate::hub::slots::{Key, Slots};
use crate::hub::timers::Timers;
use crate::hub::turn::Turn;
use crate::hub::upgrade::read_handshake;
use crate::hub::write::{flush, flush_corked, keep_dirty};
use crate::meter::{self, Refused};
use crate::proto::close::Leaving;
use crate::proto::conn::{Phase, later};

/// One engine: a task and its connections.
///
/// It runs outside Tokio's cooperative budget (`unconstrained`): the budget
/// is per task, and an engine is one task doing the I/O of thousands of
/// connections, so past 128 operations every transport would answer
/// `Pending` and wake its connection again, a spurious service each. The
/// engine yields on its own instead: each turn serves the connections
/// queued when it began, and one that had more to read is queued for the
/// next turn, after the runtime's other tasks.
pub(crate) struct Engine<H: Handler> {
    pub(crate) handler: H,
    pub(crate) config: HubConfig,
    /// The connections, by key.
    pub(crate) slots: Slots<Box<Slot<H::Data>>>,
    /// What the turn shares with the connections it serves.
    pub(crate) turn: Turn,
    /// The read buffer every connection reads into in turn.
    pub(crate) read_buffer: BytesMut,
    /// Reading state lent to connections between messages.
    pub(crate) receivers: ReceiverPool,
    pub(crate) timers: Timers,
    pub(crate) acceptor: Acceptor,
    /// Commands from handles, until every handle is gone.
    pub(crate) commands: Option<mpsc::Receiver<Command>>,
    /// Shutting down, until this deadline.
    pub(crate) shutdown: Option<Instant>,
    /// The keys of the connections being served this turn (kept for its
    /// allocation).
    pub(crate) serving: Vec<Key>,
    /// Publishes on their way to this engine's subscribers.
    #[cfg(feature = "topics")]
    pub(crate) deliveries: Deliveries,
}

impl<H: Handler> std::fmt::Debug for Engine<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("index", &self.turn.ids.engine)
            .field("live", &self.slots.len())
            .finish_non_exhaustive()
    }
}

impl<H: Handler> Engine<H> {
    /// Engine `index` of hub `hub`, taking commands from `commands` and
    /// connections from `handed_over`.
    pub(crate) fn new(
        hub: u32,
        index: u32,
        handler: H,
        config: HubConfig,
        commands: mpsc::Receiver<Command>,
        handed_over: mpsc::Receiver<Command>,
        handle: HubHandle,
    ) -> Self {
        Engine {
            handler,
            slots: Slots::new(MAX_SLOTS, LAST_GENERATION),
            turn: Turn::new(hub, index, handle, &config),
            read_buffer: BytesMut::new(),
            receivers: ReceiverPool::default(),
            timers: Timers::default(),
            acceptor: Acceptor::new(handed_over, config.readiness.owned()),
            commands: Some(commands),
            shutdown: None,
            serving: Vec::new(),
            #[cfg(feature = "topics")]
            deliveries: Deliveries::default(),
            config,
        }
    }

    /// One turn: takes what came in (poller events, commands, connections),
    /// serves the connections queued, fires due timers, then sends what
    /// the turn left for its end (publishes, close frames, corked writes).
    fn poll_turn(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let began = self.turn.turns.begin();
        self.turn.schedule.ready.register(cx.waker());
        #[cfg(feature = "topics")]
        self.turn.subs.mailbox.register(cx.waker());
        // Read from the clock when first needed this turn: an echo
        // without timers needs none. (Not the metrics' start of the turn:
        // that is the real clock, and the hub's timers follow Tokio's,
        // which a test may pause.)
        self.turn.now = None;
        #[cfg(unix)]
        self.harvest(cx);
        self.poll_commands(cx);
        self.poll_handed_over(cx);
        self.acceptor.poll_accept(
            cx,
            &mut self.slots,
            &mut self.turn,
            &mut self.timers,
            &self.config,
        );
        let mut keys = std::mem::take(&mut self.serving);
        self.turn.schedule.ready.take(&mut keys);
        keys.append(&mut self.turn.schedule.again);
        for &key in &keys {
            self.service(key);
        }
        let served = keys.len();
        keys.clear();
        self.serving = keys;
        self.fire_timers();
        // After the handlers ran: what they published goes out this turn,
        // before the close frames asked for meanwhile (up to the turn's
        // cap: past it, a close does not wait for a backlog, and a
        // closing connection gets no publish after its close frame).
        #[cfg(feature = "topics")]
        let (deliveries_left, delivered) = (self.deliver_published(), self.deliveries.made());
        #[cfg(not(feature = "topics"))]
        let (deliveries_left, delivered) = (false, 0);
        self.send_closes();
        self.flush_dirty();
        self.turn.tally.record();
        if let Some(budget) = &self.config.config.limits.budget {
            meter::record_budget(budget);
        }
        self.turn
            .turns
            .end(began, served, delivered, deliveries_left);
        if let Some(deadline) = self.shutdown {
            if self.slots.len() == 0 {
                return Poll::Ready(());
            }
            if self.turn.now() >= deadline {
                self.end_all();
                // What ending them took back (write-blocked ones, and the
                // memory they held).
                self.turn.tally.record();
                if let Some(budget) = &self.config.config.limits.budget {
                    meter::record_budget(budget);
                }
                return Poll::Ready(());
            }
        }
        if !self.turn.schedule.ready.is_empty()
            || !self.turn.schedule.again.is_empty()
            || std::mem::take(&mut self.turn.schedule.again_now)
            || !self.turn.writes.closing.is_empty()
            || deliveries_left
        {
            // Connections that stopped to let others go first, close
            // frames a drain handler asked for as the turn ended, or
            // publishes past this turn's cap.
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let next = [
            self.timers.next(),
            self.shutdown,
            self.acceptor.paused_until,
        ]
        .into_iter()
        .flatten()
        .min();
        self.timers.alarm(next, cx);
        Poll::Pending
    }

    /// Serves a connection its transport woke.
    fn service(&mut self, key: Key) {
        let Some(slot) = self.slots.get_mut(key) else {
            return;
        };
        let (handler, turn) = (&mut self.handler, &mut self.turn);
        slot.serving();
        let waker = slot.io_waker();
        let mut cx = Context::from_waker(waker.as_ref().unwrap_or(Waker::noop()));
        match slot.stage {
            Stage::Handshake => read_handshake(
                slot,
                &mut cx,
                handler,
                &self.config,
                &mut self.receivers,
                turn,
            ),
            Stage::Open => {
                if slot.conn.write_blocked {
                    flush(slot, &mut cx, handler, turn);
                }
                read_frames(
                    slot,
                    &mut cx,
                    handler,
                    &self.config,
                    &mut self.read_buffer,
                    &mut self.receivers,
                    turn,
                );
            }
            Stage::Ending => flush(slot, &mut cx, handler, turn),
            Stage::Lingering => linger(slot, &mut cx, turn),
        }
        // Settled here, the slot in hand (not looked up again).
        if !settle_slot(slot, key, &mut self.timers, &mut self.turn) {
            self.end(key);
        }
    }

    /// After anything happened to a connection: ends it if it is over,
    /// moves it to `Ending` when only writing is left, and keeps its timer.
    fn settle(&mut self, key: Key) {
        let Some(slot) = self.slots.get_mut(key) else {
            return;
        };
        if !settle_slot(slot, key, &mut self.timers, &mut self.turn) {
            self.end(key);
        }
    }

    /// Removes a connection, telling the handler if it was open.
    fn end(&mut self, key: Key) {
        let Some(mut slot) = self.slots.remove(key) else {
            return;
        };
        #[cfg(feature = "topics")]
        self.turn.subs.end(key.slot);
        slot.conn.discard_out(&mut self.turn.writes.pool);
        if let Some(r) = slot.receiver.take() {
            self.receivers.lend_back(r);
        }
        let (frame, error) = match slot.conn.ending.take() {
            Some(e) => (e.peer_close, e.error),
            None => (None, None),
        };
        if slot.conn.write_blocked {
            self.turn
                .tally
                .write_blocked(slot.conn.blocked_share.cleared());
        }
        if slot.data.is_some() {
            self.turn.meter.closed(slot.conn.core().ending());
        } else if slot.stage == Stage::Handshake {
            // Never answered: the peer left, or its deadline passed.
            meter::refused(if slot.conn.abandoned {
                Refused::Closed
            } else {
                Refused::Timeout
            });
        }
        let closed = Closed {
            id: self.turn.id(key),
            frame,
            error: error.or_else(|| slot.conn.core_mut().take_error().map(Error::from)),
        };
        if let Some(data) = slot.data.take() {
            self.handler.close(closed, data);
        }
    }

    /// Reads the poller's events; should the poller fail, ends the
    /// connections on it.
    #[cfg(unix)]
    fn harvest(&mut self, cx: &mut Context<'_>) {
        let again = &mut self.turn.schedule.again;
        if let Err(lost) = self.acceptor.harvest(cx, &mut self.slots, again) {
            for key in lost {
                self.end(key);
            }
        }
    }

    /// Takes the commands handles queued, a bounded number per turn.
    fn poll_commands(&mut self, cx: &mut Context<'_>) {
        for _ in 0..COMMANDS_PER_TURN {
            let Some(cmd) = commands::poll_next(&mut self.commands, cx) else {
                return;
            };
            self.command(cmd);
        }
        cx.waker().wake_by_ref();
    }

    /// Takes the connections handed to this engine, a bounded number per
    /// turn.
    fn poll_handed_over(&mut self, cx: &mut Context<'_>) {
        for _ in 0..ACCEPTS_PER_TURN {
            let Some(cmd) = commands::poll_next(&mut self.acceptor.handed_over, cx) else {
                return;
            };
            self.command(cmd);
        }
        cx.waker().wake_by_ref();
    }

    /// Does what a handle (or the hub's acceptor) asked.
    fn command(&mut self, cmd: Command) {
        let then = commands::run(
            cmd,
            &mut self.acceptor,
            &mut self.slots,
            &mut self.turn,
            &mut self.timers,
            &self.config,
            &mut self.handler,
        );
        match then {
            Then::Done => {}
            Then::Settle(key) => self.settle(key),
            Then::ShutDown => self.start_shutdown(),
        }
    }

    /// Closes every open connection with 1001 (going away) and takes no
    /// new ones; the engine ends once they are gone or the shutdown
    /// timeout passes.
    fn start_shutdown(&mut self) {
        if self.shutdown.is_some() {
            return;
        }
        self.shutdown = Some(later(self.turn.now(), self.config.shutdown_timeout));
        self.acceptor.stop();
        let keys: Vec<Key> = self.slots.keys().collect();
        for key in keys {
            let Some(s) = self.slots.get_mut(key) else {
                continue;
            };
            match s.stage {
                Stage::Handshake => self.end(key),
                Stage::Open => {
                    let frame = Some(Leaving::ShuttingDown.frame());
                    let _ = s.conn.close_with(&mut self.turn, frame);
                    self.settle(key);
                }
                Stage::Ending | Stage::Lingering => {}
            }
        }
    }

    /// The shutdown timeout passed: ends the connections left.
    fn end_all(&mut self) {
        let keys: Vec<Key> = self.slots.keys().collect();
        for key in keys {
            if let Some(s) = self.slots.get_mut(key) {
                // Unless it was failing already: that is why it ended.
                if s.conn.core().phase() != Phase::Failing {
                    s.conn.set_error(Error::ShutdownTimeout);
                }
                self.end(key);
            }
        }
    }

    /// Serves the connections whose deadline passed.
    fn fire_timers(&mut self) {
        self.timers.drop_stale(&self.slots);
        if self.timers.next().is_some() {
            let now = self.turn.now();
            while let Some(key) = self.timers.fire_next(now, &mut self.slots, &mut self.turn) {
                self.settle(key);
            }
            self.timers.drop_stale(&self.slots);
        }
    }

    /// Sends what was published to this engine's subscribers, up to the
    /// turn's cap. True if some are left.
    #[cfg(feature = "topics")]
    fn deliver_published(&mut self) -> bool {
        // Subscribers closed for publishes they missed: a close asked for
        // changes nothing settling looks at (the stage, the core's phase
        // and deadline), so settling them after all are closed is as
        // settling each after its close.
        for key in self.deliveries.begin(&mut self.slots, &mut self.turn) {
            self.settle(key);
        }
        while let Some(served) = self
            .deliveries
            .deliver_next(&mut self.slots, &mut self.turn)
        {
            let key = match served {
                Served::Done(key) => key,
                Served::WriteOut(key) => {
                    flush_corked(&mut self.slots, key.slot, &mut self.handler, &mut self.turn);
                    key
                }
            };
            self.settle(key);
        }
        self.deliveries.end(&mut self.turn)
    }

    /// Sends the close frames handlers and handles asked for this turn.
    fn send_closes(&mut self) {
        let mut closing = std::mem::take(&mut self.turn.writes.closing);
        for &key in &closing {
            let Some(slot) = self.slots.get_mut(key) else {
                continue;
            };
            slot.conn.send_close(&mut self.turn);
            // What came after the closing message, and what comes next,
            // is read now that the close is out: the peer's answer.
            slot.requeue(&mut self.turn.schedule);
            self.settle(key);
        }
        closing.clear();
        self.turn.writes.closing = closing;
    }

    /// Writes out every connection that has bytes corked this turn.
    fn flush_dirty(&mut self) {
        let mut dirty = std::mem::take(&mut self.turn.writes.dirty);
        for &slot in &dirty {
            if let Some(key) =
                flush_corked(&mut self.slots, slot, &mut self.handler, &mut self.turn)
            {
                self.settle(key);
            }
        }
        dirty.clear();
        keep_dirty(dirty, &mut self.slots, &mut self.turn);
    }
}

/// [`Engine::settle`] on the slot of `key`: `false` if the connection is
/// over (the engine ends it).
#[inline]
fn settle_slot<T>(slot: &mut Slot<T>, key: Key, timers: &mut Timers, turn: &mut Turn) -> bool {
    if slot.conn.abandoned {
        return false;
    }
    match slot.conn.core().phase() {
        Phase::TimedOut => return false,
        Phase::Closed | Phase::Failing if slot.stage == Stage::Open => {
            slot.stage = Stage::Ending;
            if !slot.conn.dirty {
                // Nothing corked to write: finish now.
                slot.requeue(&mut turn.schedule);
            }
        }
        _ => {}
    }
    let want = slot.conn.core().poll_timeout();
    if want != slot.timer_at {
        slot.timer_at = want;
        if let Some(at) = want {
            timers.push(at, key);
        }
    }
    true
}

impl<H: Handler> Future for Engine<H> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.get_mut().poll_turn(cx)
    }
}

// Engine holds only Unpin parts (its timer is boxed).
impl<H: Handler> Unpin for Engine<H> {}

/// An engine dropped with connections in it (its task aborted, `serve` in
/// a `select!` that went another way, a panic in a handler): their sockets
/// close with it, and they are counted closed, as a dropped Stream is.
/// The handler hears nothing: it goes with the engine.
#[cfg(feature = "metrics")]
impl<H: Handler> Drop for Engine<H> {
    fn drop(&mut self) {
        let keys: Vec<Key> = self.slots.keys().collect();
        for key in keys {
            // Removed, so that the memory it held goes back now.
            let Some(mut slot) = self.slots.remove(key) else {
                continue;
            };
            if std::mem::take(&mut slot.conn.write_blocked) {
                self.turn
                    .tally
                    .write_blocked(slot.conn.blocked_share.cleared());
            }
            if slot.data.take().is_some() {
                self.turn.meter.closed(slot.conn.core().ending());
            }
        }
        self.turn.tally.record();
        if let Some(budget) = &self.config.config.limits.budget {
            meter::record_budget(budget);
        }
    }
}
