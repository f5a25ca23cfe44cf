//! An engine's inbox (`Mailbox` in the code, apart from the protocol
//! core's `Inbox`, which holds a connection's bytes): the publishes
//! queued for one engine's subscribers and what the engine took and has
//! not yet sent, the marks at which publishers are slowed and go on
//! (see `pace`), and the publishers waiting for room. Its lock is taken
//! after a shard's (see the registry's lock order) or alone, and no
//! waker runs under it.

#[cfg(feature = "hub")]
use std::collections::HashMap;
use std::collections::VecDeque;
#[cfg(feature = "hub")]
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
#[cfg(feature = "hub")]
use std::sync::{MutexGuard, PoisonError};
#[cfg(feature = "hub")]
use std::task::Waker;

use futures_util::task::AtomicWaker;

use crate::proto::message::PreparedMessage;

/// A publish waiting in an engine's inbox.
#[derive(Debug)]
#[cfg_attr(not(feature = "hub"), allow(dead_code))] // read by the hub's engines
pub(crate) struct Delivery {
    pub(crate) topic: Arc<str>,
    pub(crate) msg: PreparedMessage,
    /// The connection that published it, which does not receive it (as
    /// uWebSockets' `ws.publish`): the inbox's id and the engine's token.
    pub(crate) except: Option<(u64, u64)>,
    /// Its place in the registry's order of publishes: a connection that
    /// subscribed after it (before its engine got to it) does not get it.
    pub(crate) seq: u64,
}

/// An engine's inbox (the public settings' word, as in
/// [`TopicsConfig::inbox_capacity`](crate::topics::TopicsConfig::inbox_capacity)): publishes for its subscribers, and
/// the engine's task to wake for them. Named `Mailbox` in the code, apart
/// from the protocol core's `Inbox`, which holds a connection's bytes.
#[derive(Debug)]
pub(crate) struct Mailbox {
    id: u64,
    pub(super) items: Mutex<Waiting>,
    pub(super) waker: AtomicWaker,
    /// The registry's bounds, which pacing reads.
    #[cfg(feature = "hub")]
    pub(super) bounds: Bounds,
}

/// What waits in an inbox, and what its engine has taken and not yet
/// sent: both count against the inbox's bounds.
#[derive(Debug, Default)]
pub(super) struct Waiting {
    pub(super) items: VecDeque<Delivery>,
    /// Payload bytes (and topic names) of `items` and of the taken ones.
    pub(super) bytes: usize,
    /// Publishes the engine took and has not yet sent.
    pub(super) taken: usize,
    /// Topics with a publish missed since the engine last took, with the
    /// place ([`Delivery::seq`]) of the last one missed: its subscribers
    /// from before that place meet their hub's policy; one that came
    /// after it missed nothing. One entry a topic.
    pub(super) missed: Vec<(Arc<str>, u64)>,
    /// Publishers waiting for room (see `pace`), by name.
    #[cfg(feature = "hub")]
    pub(super) room: HashMap<u64, Waker>,
    /// The engine is gone: no publisher waits for it.
    #[cfg(feature = "hub")]
    closed: bool,
}

impl Waiting {
    /// Whether a publish of `size` bytes misses this inbox, bounded by
    /// `publishes` and `bytes`: the first always fits, however large;
    /// with `paced` (its publisher is slowed after it), so does any while
    /// the inbox is below the mark at which publishers are slowed.
    pub(super) fn misses(&self, size: usize, publishes: usize, bytes: usize, paced: bool) -> bool {
        let behind = self.items.len() + self.taken;
        let full = behind >= publishes || (behind > 0 && self.bytes + size > bytes);
        #[cfg(feature = "hub")]
        if full && paced {
            return self.pressed(Bounds { publishes, bytes });
        }
        #[cfg(not(feature = "hub"))]
        let _ = paced;
        full
    }
}

impl Mailbox {
    /// A new engine's inbox, named `id`.
    #[cfg(feature = "hub")]
    pub(super) fn new(id: u64, #[cfg(feature = "hub")] bounds: Bounds) -> Mailbox {
        Mailbox {
            id,
            items: Mutex::default(),
            waker: AtomicWaker::new(),
            #[cfg(feature = "hub")]
            bounds,
        }
    }

    #[cfg(feature = "hub")]
    pub(super) fn lock(&self) -> MutexGuard<'_, Waiting> {
        self.items.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    #[cfg(feature = "hub")]
    /// Registers the engine's task, at each poll.
    pub(crate) fn register(&self, waker: &Waker) {
        self.waker.register(waker);
    }

    #[cfg(feature = "hub")]
    /// Moves every waiting publish into `into`, where they go on counting
    /// against the bounds until [`sent`](Self::sent) says so, and the
    /// topics with publishes missed since the last call into `missed`.
    pub(crate) fn take(&self, into: &mut VecDeque<Delivery>, missed: &mut Vec<(Arc<str>, u64)>) {
        let mut waiting = self.items.lock().unwrap_or_else(PoisonError::into_inner);
        waiting.taken += waiting.items.len();
        if into.is_empty() {
            std::mem::swap(&mut waiting.items, into);
        } else {
            into.append(&mut waiting.items);
        }
        if !waiting.missed.is_empty() {
            missed.append(&mut waiting.missed);
        }
    }

    #[cfg(feature = "hub")]
    /// The engine is done with `count` publishes it took, of `bytes` in
    /// all ([`Delivery::size`]): room for as many more.
    pub(crate) fn sent(&self, count: usize, bytes: usize) {
        let woken = {
            let mut waiting = self.lock();
            waiting.taken = waiting.taken.saturating_sub(count);
            waiting.bytes = waiting.bytes.saturating_sub(bytes);
            waiting.woken(self.bounds)
        };
        // Publishers slowed for this inbox go on; woken with its lock let
        // go (the module's lock rule).
        woken.into_iter().for_each(Waker::wake);
    }
}

impl Delivery {
    #[cfg(feature = "hub")]
    /// What the delivery counts for against an inbox's byte bound.
    pub(crate) fn size(&self) -> usize {
        self.msg.payload().len() + self.topic.len()
    }
}

#[cfg(feature = "hub")]
/// An inbox's bounds, as the pacing rule reads them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    pub(super) publishes: usize,
    pub(super) bytes: usize,
}

#[cfg(feature = "hub")]
impl Waiting {
    /// Publishes waiting for the engine: queued, or taken and not sent.
    pub(super) fn behind(&self) -> usize {
        self.items.len() + self.taken
    }

    /// Past the mark at which publishers are slowed.
    pub(crate) fn pressed(&self, bounds: Bounds) -> bool {
        !self.closed
            && (self.behind().saturating_mul(2) >= bounds.publishes
                || self.bytes.saturating_mul(2) > bounds.bytes)
    }

    /// Down to the mark at which slowed publishers go on.
    pub(crate) fn has_room(&self, bounds: Bounds) -> bool {
        self.closed
            || (self.behind().saturating_mul(4) <= bounds.publishes
                && self.bytes.saturating_mul(4) <= bounds.bytes)
    }

    /// The waiters to wake, if the inbox has room now (taken out: they are
    /// woken once the lock is let go).
    pub(crate) fn woken(&mut self, bounds: Bounds) -> Vec<Waker> {
        if self.room.is_empty() || !self.has_room(bounds) {
            return Vec::new();
        }
        self.room.drain().map(|(_, w)| w).collect()
    }
}

#[cfg(feature = "hub")]
/// Names a waiter in the inboxes it waits in: registering again replaces
/// its waker, and it takes its waker out when it stops waiting.
pub(super) fn next_waiter() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

#[cfg(feature = "hub")]
impl Mailbox {
    /// Waiter `id` waits for room in this inbox unless it has some:
    /// whether it waits.
    pub(super) fn wait_for_room(&self, id: u64, waker: &Waker) -> bool {
        let mut waiting = self.lock();
        if waiting.has_room(self.bounds) {
            waiting.room.remove(&id);
            return false;
        }
        register(&mut waiting, id, waker);
        true
    }

    /// Waiter `id` waits if the inbox is pressed: whether it does.
    pub(super) fn wait_if_pressed(&self, id: u64, waker: &Waker) -> bool {
        let mut waiting = self.lock();
        if !waiting.pressed(self.bounds) {
            waiting.room.remove(&id);
            return false;
        }
        register(&mut waiting, id, waker);
        true
    }

    /// Waiter `id` waits no more.
    pub(super) fn forget(&self, id: u64) {
        let gone = self.lock().room.remove(&id);
        // Dropped with the lock let go: a waker's drop is code of its own.
        drop(gone);
    }

    /// The engine is gone: nobody will take what waits, so nobody waits
    /// for it.
    pub(crate) fn close(&self) {
        let woken: Vec<Waker> = {
            let mut waiting = self.lock();
            waiting.closed = true;
            waiting.room.drain().map(|(_, w)| w).collect()
        };
        woken.into_iter().for_each(Waker::wake);
    }
}

#[cfg(feature = "hub")]
/// Registers (or refreshes) waiter `id`'s waker: one entry a waiter.
fn register(waiting: &mut Waiting, id: u64, waker: &Waker) {
    match waiting.room.get_mut(&id) {
        Some(w) => w.clone_from(waker),
        None => {
            waiting.room.insert(id, waker.clone());
        }
    }
}
