//! The engine: one task that accepts, reads, dispatches, writes and keeps
//! time for all of its connections. It moves bytes and time; every
//! protocol decision is the core's (`proto::conn`, the decoder and
//! encoder) or the handshake's.
//!
//! This file holds the engine's parts and a connection's life in it
//! (served, settled, ended). The rest is in rooms of its own, each an
//! `impl Engine` block or a part the engine holds:
//!
//! - `turn`: one turn's order of work, and what a turn shares with the
//!   connections it serves;
//! - `accept`: the listener, the poller and connections handed over;
//! - `commands`: what handles ask, and shutting down;
//! - `timers`: deadlines;
//! - `upgrade`, `read`, `write`: a connection's HTTP upgrade, its reading
//!   and dispatching, its writing;
//! - `deliver` (feature `topics`): publishes to subscribers.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use bytes::BytesMut;
use tokio::sync::mpsc;

use crate::error::Error;
use crate::hub::accept::Acceptor;
use crate::hub::config::HubConfig;
use crate::hub::conn::{Slot, Stage};
#[cfg(feature = "topics")]
use crate::hub::deliver::Deliveries;
use crate::hub::event::{Closed, LAST_GENERATION, MAX_SLOTS};
use crate::hub::handle::{Command, HubHandle};
use crate::hub::handler::Handler;
use crate::hub::read::{ReceiverPool, linger, read_frames};
use crate::hub::slots::{Key, Slots};
use crate::hub::timers::Timers;
use crate::hub::turn::Turn;
use crate::hub::upgrade::read_handshake;
use crate::hub::write::flush;
use crate::proto::conn::Phase;

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

    /// Serves a connection its transport woke.
    pub(crate) fn service(&mut self, key: Key) {
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
        self.settle(key);
    }

    /// After anything happened to a connection: ends it if it is over,
    /// moves it to `Ending` when only writing is left, and keeps its timer.
    pub(crate) fn settle(&mut self, key: Key) {
        let Some(slot) = self.slots.get_mut(key) else {
            return;
        };
        if slot.conn.abandoned {
            self.end(key);
            return;
        }
        match slot.conn.core().phase() {
            Phase::TimedOut => {
                self.end(key);
                return;
            }
            Phase::Closed | Phase::Failing if slot.stage == Stage::Open => {
                slot.stage = Stage::Ending;
                if !slot.conn.dirty {
                    // Nothing corked to write: finish now.
                    slot.requeue(&mut self.turn.schedule);
                }
            }
            _ => {}
        }
        let want = slot.conn.core().poll_timeout();
        if want != slot.timer_at {
            slot.timer_at = want;
            if let Some(at) = want {
                self.timers.push(at, key);
            }
        }
    }

    /// Removes a connection, telling the handler if it was open.
    pub(crate) fn end(&mut self, key: Key) {
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
        let closed = Closed {
            id: self.turn.id(key),
            frame,
            error: error.or_else(|| slot.conn.core_mut().take_error().map(Error::from)),
        };
        if let Some(data) = slot.data.take() {
            self.handler.close(closed, data);
        }
    }
}

impl<H: Handler> Future for Engine<H> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.get_mut().poll_turn(cx)
    }
}

// Engine holds only Unpin parts (its timer is boxed).
impl<H: Handler> Unpin for Engine<H> {}
