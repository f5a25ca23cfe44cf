//! The engine's turn: the order of its work, and what a turn shares with
//! every connection it serves (and with the handlers, through [`Ws`](crate::hub::Ws)).
//!
//! A turn serves the connections queued when it began; one that had more
//! to do is queued for the next turn, after the runtime's other tasks.
//! What handlers send is corked: written once all that one read brought
//! is handled, and for other connections at the end of the turn.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;

use crate::hub::config::{BackpressurePolicy, HubConfig};
use crate::hub::engine::Engine;
use crate::hub::event::ConnId;
use crate::hub::handle::HubHandle;
use crate::hub::handler::Handler;
use crate::hub::slots::Key;
#[cfg(feature = "topics")]
use crate::hub::subs::Subs;
use crate::hub::wake::ReadyQueue;
use crate::proto::outbox::{PoolLimits, QueuePool};

/// What a turn shares with the connections it serves: sends, handlers
/// and the engine's own steps reach it through each connection.
#[derive(Debug)]
pub(crate) struct Turn {
    /// The time, read once per turn when first needed.
    pub(crate) now: Option<Instant>,
    /// Who the engine is, for the ids of its connections.
    pub(crate) ids: EngineIds,
    /// Where sends go this turn, and the backpressure limits they meet.
    pub(crate) writes: Writes,
    /// Which connections are served again, and when.
    pub(crate) schedule: Schedule,
    /// The engine's subscriptions to topics.
    #[cfg(feature = "topics")]
    pub(crate) subs: Subs,
}

/// Who the engine is: what names its connections, and the handle its
/// handlers reach the hub with.
#[derive(Debug)]
pub(crate) struct EngineIds {
    /// Which hub of the process this engine serves.
    pub(crate) hub: u32,
    /// Which engine of its hub this is.
    pub(crate) engine: u32,
    /// The hub's handle, for handlers ([`Ws::handle`](crate::hub::Ws::handle)).
    pub(crate) handle: HubHandle,
}

/// What sends need beyond the connection: the pool of write queues, the
/// lists of what to write and close at the end of the turn, and the
/// backpressure settings.
#[derive(Debug)]
pub(crate) struct Writes {
    pub(crate) pool: QueuePool,
    /// Slots with bytes corked this turn, written at its end.
    pub(crate) dirty: Vec<u32>,
    /// Connections whose close frame is to go out at the end of the turn.
    pub(crate) closing: Vec<Key>,
    /// The payload of the message being handled, when it is large and the
    /// connection's own (not in the shared read buffer): a send of exactly
    /// these bytes shares them instead of copying.
    pub(crate) current: Option<Bytes>,
    pub(crate) max_backpressure: usize,
    pub(crate) policy: BackpressurePolicy,
}

/// Connections to serve again: those whose waker queued them (the ready
/// queue), and those without a waker the engine queued itself.
#[derive(Debug)]
pub(crate) struct Schedule {
    /// The queue connections' wakers push to.
    pub(crate) ready: Arc<ReadyQueue>,
    /// Connections the engine itself queued to serve again (those without
    /// a waker), served next turn.
    pub(crate) again: Vec<Key>,
    /// The engine is to take another turn at once.
    pub(crate) again_now: bool,
}

impl Turn {
    pub(crate) fn new(hub: u32, engine: u32, handle: HubHandle, config: &HubConfig) -> Self {
        Turn {
            now: None,
            ids: EngineIds {
                hub,
                engine,
                handle,
            },
            writes: Writes {
                pool: QueuePool::new(POOL_LIMITS),
                dirty: Vec::new(),
                closing: Vec::new(),
                current: None,
                max_backpressure: config.backpressure(),
                policy: config.backpressure_policy,
            },
            schedule: Schedule {
                ready: Arc::new(ReadyQueue::default()),
                again: Vec::new(),
                again_now: false,
            },
            #[cfg(feature = "topics")]
            subs: Subs::new(config.topics.clone()),
        }
    }

    #[inline]
    pub(crate) fn now(&mut self) -> Instant {
        *self
            .now
            .get_or_insert_with(|| tokio::time::Instant::now().into_std())
    }

    pub(crate) fn id(&self, key: Key) -> ConnId {
        ConnId {
            hub: self.ids.hub,
            engine: self.ids.engine,
            slot: key.slot,
            generation: key.generation,
        }
    }
}

/// The engine's write queues: a buffer is kept up to 256 KiB, 8 MiB of
/// them in all, and at most 4 096 queues (those holding only shared frames
/// have no bytes of their own to count); a new one gets 16 KiB.
const POOL_LIMITS: PoolLimits = PoolLimits {
    buffer_len: 16 << 10,
    buffer_max: 256 << 10,
    count_max: 4096,
    bytes_max: 8 << 20,
};

impl<H: Handler> Engine<H> {
    /// One turn: takes what came in (poller events, commands, connections),
    /// serves the connections queued, fires due timers, then sends what
    /// the turn left for its end (publishes, close frames, corked writes).
    pub(crate) fn poll_turn(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.turn.schedule.ready.register(cx.waker());
        #[cfg(feature = "topics")]
        self.turn.subs.mailbox.register(cx.waker());
        // Read from the clock when first needed this turn: an echo
        // without timers needs none.
        self.turn.now = None;
        #[cfg(unix)]
        self.harvest(cx);
        self.poll_commands(cx);
        self.poll_handed_over(cx);
        self.poll_accept(cx);
        let mut keys = std::mem::take(&mut self.serving);
        self.turn.schedule.ready.take(&mut keys);
        keys.append(&mut self.turn.schedule.again);
        for &key in &keys {
            self.service(key);
        }
        keys.clear();
        self.serving = keys;
        self.fire_timers();
        // After the handlers ran: what they published goes out this turn,
        // before the close frames asked for meanwhile (up to the turn's
        // cap: past it, a close does not wait for a backlog, and a
        // closing connection gets no publish after its close frame).
        #[cfg(feature = "topics")]
        let deliveries_left = self.deliver_published();
        #[cfg(not(feature = "topics"))]
        let deliveries_left = false;
        self.send_closes();
        self.flush_dirty();
        if let Some(deadline) = self.shutdown {
            if self.slots.len() == 0 {
                return Poll::Ready(());
            }
            if self.turn.now() >= deadline {
                self.end_all();
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
}
