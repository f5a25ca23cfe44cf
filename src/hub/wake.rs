//! How a connection without a task of its own gets served: its transport
//! is polled with a [`Waker`] that, when woken, queues the connection's key
//! for the hub and wakes the hub's one task. The hub drains the queue and
//! serves each connection named in it. (The idea of `FuturesUnordered`,
//! without a future per connection.)

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Wake, Waker};

use futures_util::task::AtomicWaker;

use crate::hub::slots::Key;

/// The keys of connections to serve, and the hub task to wake for them.
#[derive(Debug, Default)]
pub(crate) struct ReadyQueue {
    keys: Mutex<Vec<Key>>,
    hub: AtomicWaker,
}

impl ReadyQueue {
    /// Queues `key` and wakes the hub.
    pub(crate) fn push(&self, key: Key) {
        self.keys
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(key);
        self.hub.wake();
    }

    /// Moves the queued keys into `into` (empty), leaving its allocation
    /// for the next producer: the two vectors trade places every turn, so
    /// queueing allocates nothing once both have grown.
    pub(crate) fn take(&self, into: &mut Vec<Key>) {
        debug_assert!(into.is_empty());
        let mut keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        std::mem::swap(&mut *keys, into);
    }

    /// Whether anything waits to be served.
    pub(crate) fn is_empty(&self) -> bool {
        self.keys
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
    }

    /// The hub task to wake; set at every poll of the hub, as wakers of a
    /// task may change between polls.
    pub(crate) fn register(&self, hub: &Waker) {
        self.hub.register(hub);
    }
}

/// One connection's waker. Wakes coming while the connection is already
/// queued are folded into one.
#[derive(Debug)]
pub(crate) struct ConnWaker {
    key: Key,
    queued: AtomicBool,
    queue: Arc<ReadyQueue>,
}

impl ConnWaker {
    pub(crate) fn new(key: Key, queue: Arc<ReadyQueue>) -> Arc<Self> {
        Arc::new(ConnWaker {
            key,
            queued: AtomicBool::new(false),
            queue,
        })
    }

    /// The hub is about to serve the connection: a wake from now on must
    /// queue it again, as what it reports may come after the hub looked.
    pub(crate) fn serving(&self) {
        self.queued.store(false, Ordering::Release);
    }

    /// Queues the connection from the hub itself (it stopped before its
    /// transport said `Pending`, to be fair to the others).
    pub(crate) fn requeue(&self) {
        if !self.queued.swap(true, Ordering::AcqRel) {
            self.queue.push(self.key);
        }
    }
}

impl Wake for ConnWaker {
    fn wake(self: Arc<Self>) {
        self.requeue();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.requeue();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Waker;

    #[test]
    fn wakes_queue_the_key_once_until_served() {
        let queue = Arc::new(ReadyQueue::default());
        let key = Key {
            slot: 3,
            generation: 7,
        };
        let conn = ConnWaker::new(key, queue.clone());
        let waker = Waker::from(conn.clone());
        waker.wake_by_ref();
        waker.wake_by_ref();
        let mut keys = Vec::new();
        queue.take(&mut keys);
        assert_eq!(keys, [key], "two wakes, one entry");
        keys.clear();
        // Not served yet: still counted as queued.
        waker.wake_by_ref();
        queue.take(&mut keys);
        assert!(keys.is_empty());
        conn.serving();
        waker.wake();
        queue.take(&mut keys);
        assert_eq!(keys, [key]);
        assert!(queue.is_empty());
    }
}
