//! What an engine's turn shares with every connection it serves (and with
//! the handlers, through [`Ws`](crate::hub::Ws)): the time, the engine's
//! ids, where sends go, and which connections are served again. Data
//! only: the order of a turn's work is the engine's (`engine.rs`).
//!
//! A turn serves the connections queued when it began; one that had more
//! to do is queued for the next turn, after the runtime's other tasks.
//! What handlers send is corked: written once all that one read brought
//! is handled, and for other connections at the end of the turn.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use crate::hub::config::{BackpressurePolicy, HubConfig};
use crate::hub::event::ConnId;
use crate::hub::handle::HubHandle;
use crate::hub::slots::Key;
#[cfg(feature = "topics")]
use crate::hub::subs::Subs;
use crate::hub::wake::ReadyQueue;
use crate::meter::{EngineMeter, Tally, TurnMeter};
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
    /// The engine's connection metrics (nothing without the `metrics`
    /// feature).
    pub(crate) meter: EngineMeter,
    /// Messages and bytes in and out this turn, recorded at its end.
    pub(crate) tally: Tally,
    /// The engine's turn metrics.
    pub(crate) turns: TurnMeter,
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
    /// The slot being read ([`NOT_READING`] between reads): what its
    /// handler sends it goes out with the read's own flush, and joins
    /// `dirty` only if some is left when the read ends
    /// ([`Writes::end_read`]); an echo then costs no entry.
    pub(crate) reading: u32,
    /// `reading` was corked to and not listed in `dirty`.
    pub(crate) reading_corked: bool,
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
                reading: NOT_READING,
                reading_corked: false,
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
            meter: EngineMeter::hub(engine),
            tally: Tally::default(),
            turns: TurnMeter::new(engine),
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

/// [`Writes::reading`] between reads.
pub(crate) const NOT_READING: u32 = u32::MAX;

/// The engine's write queues: a buffer is kept up to 256 KiB, 8 MiB of
/// them in all, and at most 4 096 queues (those holding only shared frames
/// have no bytes of their own to count); a new one gets 16 KiB.
const POOL_LIMITS: PoolLimits = PoolLimits {
    buffer_len: 16 << 10,
    buffer_max: 256 << 10,
    count_max: 4096,
    bytes_max: 8 << 20,
};
