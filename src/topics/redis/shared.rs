//! What the link's tasks and its handles share: its state, counters,
//! what waits to be published, and the registry's `Link` to it.

use crate::meter;
use crate::topics::redis::RedisLinkConfig;
use crate::topics::redis::wire::encode;
use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use tokio::sync::{Notify, mpsc, watch};

use crate::proto::message::PreparedMessage;
use crate::topics::{Link, Remote};

/// Where a link stands, from [`RedisLink::status`](super::RedisLink::status).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LinkState {
    /// Connecting and subscribing (at start, and after each backoff).
    Connecting,
    /// Publishes go to Redis and come from it.
    Up,
    /// Redis is unreachable (the error says why); reconnecting after a
    /// backoff. Publishes reach this process only.
    Down(String),
    /// The link was dropped; publishes reach this process only.
    Stopped,
}

/// A link's counters, from [`RedisLink::stats`](super::RedisLink::stats).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LinkStats {
    /// Publishes Redis took (their round trip completed).
    pub sent: u64,
    /// Publishes from other servers delivered here.
    pub received: u64,
    /// Publishes not sent because the link was not up.
    pub dropped_down: u64,
    /// Publishes not sent because [`RedisLinkConfig::queue`] were waiting.
    pub dropped_full: u64,
    /// Messages from Redis not delivered because
    /// [`RedisLinkConfig::incoming_bytes`] waited already.
    pub dropped_incoming: u64,
    /// Publishes waiting or in flight when the connection failed: they may
    /// or may not have reached Redis, and are not sent again.
    pub lost: u64,
    /// Messages on the channel that were not a publish of a wavesock link
    /// (or too large, or a text message that was not UTF-8).
    pub malformed: u64,
    /// Times the link came up (the first time included).
    pub connects: u64,
    /// Topic channels subscribed (each time one was).
    pub subscribes: u64,
    /// Topic channels unsubscribed (each time one was).
    pub unsubscribes: u64,
    /// Topics whose channel Redis confirmed, now.
    pub live: u64,
}

/// Bits of [`Shared::state`]: the publishing connection is up, the
/// subscribing one is; the link is up with both.
pub(super) const PUB_UP: u8 = 1;
pub(super) const SUB_UP: u8 = 2;
pub(super) const UP: u8 = PUB_UP | SUB_UP;

/// What the registry, the link's tasks and Redis's push messages share.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) origin: [u8; 16],
    pub(super) prefix: String,
    pub(super) state: AtomicU8,
    pub(super) queue: mpsc::Sender<(String, Bytes)>,
    /// Topics whose presence here changed, for the subscribing task, which
    /// asks the registry whether each has subscribers when it gets to it.
    pub(super) interest: Mutex<HashSet<Arc<str>>>,
    pub(super) interest_changed: Notify,
    /// Topics whose channel Redis confirmed this server subscribes to.
    pub(super) live: Mutex<HashSet<Arc<str>>>,
    pub(super) live_changed: watch::Sender<()>,
    /// Messages Redis pushed, bounded in bytes, for the delivering task.
    pub(super) incoming: Mutex<Pending>,
    pub(super) incoming_limit: usize,
    pub(super) incoming_ready: Notify,
    /// A subscribing connection reported it is gone, or a slot moved.
    pub(super) disconnected: std::sync::atomic::AtomicBool,
    /// Channels the link is unsubscribing from (their confirmation comes
    /// as a push, as an unsubscribe it did not ask for would).
    pub(super) unsubscribing: Mutex<HashSet<Vec<u8>>>,
    /// The last failure of each connection, for the status.
    pub(super) errors: Mutex<[Option<String>; 2]>,
    pub(super) sent: AtomicU64,
    pub(super) received: AtomicU64,
    pub(super) dropped_down: AtomicU64,
    pub(super) dropped_full: AtomicU64,
    pub(super) dropped_incoming: AtomicU64,
    pub(super) lost: AtomicU64,
    pub(super) malformed: AtomicU64,
    pub(super) connects: AtomicU64,
    pub(super) subscribes: AtomicU64,
    pub(super) unsubscribes: AtomicU64,
}

/// Messages from Redis waiting for the delivering task.
#[derive(Debug, Default)]
pub(super) struct Pending {
    pub(super) items: VecDeque<(Vec<u8>, Vec<u8>)>,
    /// The bytes of `items` and of those the delivering task took and has
    /// not delivered yet: taking a batch frees no room, delivering each
    /// message frees its own, so that what waits, here or in the task's
    /// batch, stays within [`RedisLinkConfig::incoming_bytes`].
    pub(super) bytes: usize,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    pub(super) fn new(queue: mpsc::Sender<(String, Bytes)>, config: &RedisLinkConfig) -> Self {
        Shared {
            origin: rand::random(),
            prefix: config.prefix.clone(),
            state: AtomicU8::new(0),
            queue,
            interest: Mutex::default(),
            interest_changed: Notify::new(),
            live: Mutex::default(),
            live_changed: watch::Sender::new(()),
            incoming: Mutex::default(),
            incoming_limit: config.incoming_bytes,
            incoming_ready: Notify::new(),
            disconnected: Default::default(),
            unsubscribing: Mutex::default(),
            errors: Mutex::default(),
            sent: AtomicU64::new(0),
            received: AtomicU64::new(0),
            dropped_down: AtomicU64::new(0),
            dropped_full: AtomicU64::new(0),
            dropped_incoming: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            malformed: AtomicU64::new(0),
            connects: AtomicU64::new(0),
            subscribes: AtomicU64::new(0),
            unsubscribes: AtomicU64::new(0),
        }
    }

    /// The Redis channel of `topic`.
    pub(super) fn channel(&self, topic: &str) -> String {
        format!("{}{topic}", self.prefix)
    }

    pub(super) fn set_live(&self, topic: &Arc<str>, live: bool) {
        let changed = {
            let mut set = lock(&self.live);
            if live {
                set.insert(topic.clone())
            } else {
                set.remove(topic)
            }
        };
        if changed {
            self.live_changed.send_replace(());
        }
    }

    pub(super) fn clear_live(&self) {
        lock(&self.live).clear();
        self.live_changed.send_replace(());
    }

    /// A push message from the subscribing connection (called by
    /// redis-rs's connection task for each; it must not wait). Messages
    /// go to the delivering task's queue unless it holds
    /// [`RedisLinkConfig::incoming_bytes`] already; the rest is dropped
    /// and counted.
    pub(super) fn on_push(&self, push: redis::PushInfo) {
        match push.kind {
            redis::PushKind::Message | redis::PushKind::SMessage => {
                let mut data = push.data.into_iter();
                let (
                    Some(redis::Value::BulkString(channel)),
                    Some(redis::Value::BulkString(payload)),
                ) = (data.next(), data.next())
                else {
                    self.malformed.fetch_add(1, Ordering::Relaxed);
                    meter::redis_incoming_dropped(meter::RedisIncoming::Malformed);
                    return;
                };
                let size = channel.len() + payload.len();
                let queued = {
                    let mut pending = lock(&self.incoming);
                    // Anything waiting, queued or in the delivering task's
                    // batch, leaves room for this only within the limit.
                    if pending.bytes > 0 && pending.bytes + size > self.incoming_limit {
                        self.dropped_incoming.fetch_add(1, Ordering::Relaxed);
                        false
                    } else {
                        pending.bytes += size;
                        pending.items.push_back((channel, payload));
                        true
                    }
                };
                // Recorded with the lock let go.
                if !queued {
                    meter::redis_incoming_dropped(meter::RedisIncoming::Full);
                    return;
                }
                meter::redis_incoming_bytes(size as i64);
                self.incoming_ready.notify_one();
            }
            redis::PushKind::Disconnection => {
                self.disconnected.store(true, Ordering::Release);
                self.interest_changed.notify_one();
            }
            // An unsubscribe the link did not ask for: the channel's slot
            // moved (a failover, a resharding).
            redis::PushKind::SUnsubscribe | redis::PushKind::Unsubscribe => {
                let channel = match push.data.first() {
                    Some(redis::Value::BulkString(c)) => c.clone(),
                    _ => Vec::new(),
                };
                if !lock(&self.unsubscribing).remove(&channel) {
                    self.disconnected.store(true, Ordering::Release);
                    self.interest_changed.notify_one();
                }
            }
            // Confirmations are the replies of the calls that asked.
            _ => {}
        }
    }

    /// One connection came up or went down (with why): the link's state
    /// and status follow.
    pub(super) fn set_part(
        &self,
        part: u8,
        up: Result<(), String>,
        status: &watch::Sender<LinkState>,
    ) {
        let index = usize::from(part == SUB_UP);
        let failed = up.is_err();
        lock(&self.errors)[index] = up.err();
        let before = if failed {
            self.state.fetch_and(!part, Ordering::AcqRel)
        } else {
            self.state.fetch_or(part, Ordering::AcqRel)
        };
        let now = self.state.load(Ordering::Acquire);
        if now == UP && before != UP {
            self.connects.fetch_add(1, Ordering::Relaxed);
            meter::redis_link_up(true);
        } else if now != UP && before == UP {
            meter::redis_link_up(false);
        }
        // The status is worked out under the watch's own lock, from the
        // state and errors as they are then, so that of two parts changing
        // at once the later word is the last; and the watch wakes its
        // receivers with none of the link's locks held.
        status.send_if_modified(|s| {
            let state = if self.state.load(Ordering::Acquire) == UP {
                LinkState::Up
            } else if let Some(e) = lock(&self.errors).iter().flatten().next() {
                LinkState::Down(e.clone())
            } else {
                LinkState::Connecting
            };
            let changed = *s != state && *s != LinkState::Stopped;
            if changed {
                *s = state;
            }
            changed
        });
    }
}

impl Link for Arc<Shared> {
    fn send(&self, topic: &str, msg: &PreparedMessage) -> Remote {
        if self.state.load(Ordering::Acquire) != UP {
            self.dropped_down.fetch_add(1, Ordering::Relaxed);
            meter::redis_publishes(meter::RedisOutcome::DroppedDown, 1);
            return Remote::Dropped;
        }
        let Some(wire) = encode(&self.origin, topic, msg) else {
            // Only data messages travel; a ping or close is this server's.
            return Remote::NoLink;
        };
        match self.queue.try_send((self.channel(topic), wire)) {
            Ok(()) => Remote::Queued,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.dropped_full.fetch_add(1, Ordering::Relaxed);
                meter::redis_publishes(meter::RedisOutcome::DroppedFull, 1);
                Remote::Dropped
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.dropped_down.fetch_add(1, Ordering::Relaxed);
                meter::redis_publishes(meter::RedisOutcome::DroppedDown, 1);
                Remote::Dropped
            }
        }
    }

    fn interest(&self, topic: &str) {
        lock(&self.interest).insert(topic.into());
        self.interest_changed.notify_one();
    }
}
