//! Topics: publish a message once and reach every subscriber, on every
//! [`Hub`](crate::hub::Hub) of the process and, with the `redis` feature,
//! on every server linked through Redis.
//!
//! A [`Topics`] registry maps topic names to subscribers. Hub connections
//! subscribe with [`Ws::subscribe`](crate::hub::Ws::subscribe) (or
//! [`HubHandle::subscribe`](crate::hub::HubHandle::subscribe)); tasks
//! serving a [`WebSocketStream`](crate::WebSocketStream) subscribe with
//! [`Topics::subscribe`], which gives a [`TopicReceiver`]. A publish
//! encodes the frame once ([`PreparedMessage`]: compressed once per window
//! size for permessage-deflate connections) and queues it, under one lock,
//! in the inbox of each engine that has subscribers to the topic; each
//! engine then writes it to its subscribers.
//!
//! What holds:
//!
//! - **Order per topic.** Publishes to one topic reach every subscriber in
//!   one order, the order they took the registry's lock, whichever engine
//!   or task published them.
//! - **Slow subscribers.** A hub connection with more than
//!   [`max_backpressure`](crate::Config::max_backpressure) waiting
//!   meets its hub's [`BackpressurePolicy`](crate::hub::BackpressurePolicy)
//!   (closed, or the message skipped for it) while the others go on. A
//!   [`TopicReceiver`] more than [`TopicsConfig::stream_capacity`] behind
//!   skips ahead and is told how many it missed.
//! - **Fast publishers are slowed, not their neighbours punished.** Once
//!   an engine's inbox holds half of [`TopicsConfig::inbox_capacity`]
//!   publishes (or half of [`TopicsConfig::inbox_bytes`]), counting what
//!   the engine took and has not yet sent, publishers in this process
//!   that can wait do, until it is down to a quarter:
//!   - a hub connection whose handler publishes (by any means:
//!     [`Ws::publish`](crate::hub::Ws::publish), the registry, a handle)
//!     while the engine serves what it read (`message`, `ping`, `pong`,
//!     and a `drain` that comes meanwhile) stops being read after the
//!     message being handled; the rest of its input waits, as under write
//!     backpressure, and it is read again once the first such inbox is
//!     down to a quarter (slowed again at its next publish if another is
//!     still past half). Its own engine and the process's others count
//!     alike. The publish that found the inbox past half is taken in full
//!     even past [`TopicsConfig::inbox_bytes`]: an inbox below its mark
//!     takes one message of any size from a slowed publisher. While it
//!     waits, its keepalive counts the peer as heard (the server, not the
//!     peer, stopped listening), and a peer that goes away meanwhile is
//!     noticed once it is read again.
//!   - a task waits with [`Topics::room`] or publishes with
//!     [`Topics::publish_when_room`], which waits again if other
//!     publishers took the room first.
//!
//!   Nothing else is slowed: [`Topics::publish`] from a task, publishes
//!   from a hub handler's `open` and `close` callbacks (and `drain`
//!   outside a read), and what the Redis link brings from other servers
//!   go in at once. A handler slowed is slowed between messages: one that
//!   publishes more than half an inbox's worth while handling one message
//!   can still overflow it.
//! - **Bounded inboxes.** An engine more than
//!   [`TopicsConfig::inbox_capacity`] publishes (or
//!   [`TopicsConfig::inbox_bytes`]) behind misses publishes rather than
//!   queue without limit: what it has taken and not yet sent counts as
//!   much as what waits for it. Only what is not slowed can fill an inbox
//!   that far (publishes from other servers, tasks publishing without
//!   waiting for room, a handler publishing half an inbox's worth for one
//!   message, or more connections publishing at once than half an inbox
//!   holds). Missed publishes are counted in
//!   [`TopicsStats::inbox_dropped`] (once per engine) and in the
//!   `wavesock_topic_drops_total{reason="inbox_full"}` metric (once per
//!   subscriber that missed it), and the subscribers that missed them
//!   meet their hub's [`BackpressurePolicy`](crate::hub::BackpressurePolicy)
//!   as slow subscribers do: closed ([`Error::PublishesMissed`]) under
//!   `Close`, the publish skipped for them under `Drop`.
//! - **What a burst holds**: each engine's inbox up to its bounds (and,
//!   past `inbox_bytes`, one message of each slowed connection), each
//!   slowed connection the rest of the read it was slowed in (at most
//!   the hub's [`read_buffer_size`](crate::hub::HubConfig::read_buffer_size)),
//!   and each subscriber's backlog up to
//!   [`max_backpressure`](crate::Config::max_backpressure).
//! - **Which subscribers can be cut**, and when: a hub connection whose
//!   peer does not take what it is sent, past
//!   [`max_backpressure`](crate::Config::max_backpressure) (the hub's
//!   policy, as above), and the subscribers of an engine whose inbox
//!   overflowed as just said. A subscriber that reads is never cut for a
//!   burst of messages from one connection of this process.
//!
//! [`Error::PublishesMissed`]: crate::Error::PublishesMissed
//! - **Shared by every hub of a process**: hubs use [`Topics::global`]
//!   unless given their own with
//!   [`HubConfig::topics`](crate::hub::HubConfig::topics).
//! - **No call out under a lock.** Subscribing, publishing and receiving
//!   never run a waker, the Redis link or anything else outside the
//!   registry while they hold one of its locks, and the link never calls
//!   the registry while it holds one of its own; so none of them can wait
//!   for another in a circle, whichever threads they run on.
//!
//! ```
//! use wavesock::topics::Topics;
//! use wavesock::{Message, PreparedMessage};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let topics = Topics::new();
//! let mut prices = topics.subscribe("prices");
//! let msg = PreparedMessage::new(&Message::text("EURUSD 1.0842")).unwrap();
//! let published = topics.publish("prices", &msg);
//! assert_eq!(published.local, 1);
//! assert_eq!(prices.recv().await.unwrap(), msg);
//! # }
//! ```
//!
//! # Locks
//!
//! The order, for whoever changes this module, `redis.rs` or `ring.rs`:
//!
//! - a shard of the registry's map, then an engine's inbox (a publish
//!   queueing for it), a topic's ring (a receiver joining or leaving), or
//!   the topic's send order (`Streams::order`) and then its ring (a
//!   publish); an inbox's lock and a ring's are also taken alone (an engine
//!   taking its publishes, a receiver reading);
//! - the link's locks (its interest set, live set, incoming queue, channels
//!   leaving, errors) are each taken alone, never with another.
//!
//! No lock is held while code outside its module runs: the registry tells
//! the link that a topic came or went (`Link::interest`), wakes engines
//! and receivers, and drops what left its map, after letting go of the
//! shard and the send order; the link reads the registry
//! ([`Topics::names`], [`Topics::has`]), delivers to it and sends its
//! status with none of its own locks held. The link needs no order among
//! the registry's notices: a notice only marks the topic for a look, and
//! the link then reads whether the topic has subscribers
//! ([`Topics::has`]); every change is followed by a notice, so the link's
//! last look at a topic comes after its last change.

mod mailbox;
#[cfg(feature = "hub")]
mod pace;
#[cfg(feature = "redis")]
pub mod redis;
mod ring;

pub(crate) use mailbox::{Delivery, Mailbox};
#[cfg(feature = "hub")]
pub(crate) use pace::{Held, Reading};

use std::collections::HashMap;
#[cfg(feature = "hub")]
use std::future::Future;
#[cfg(feature = "hub")]
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
#[cfg(feature = "hub")]
use std::task::{Context, Poll};

use crate::meter;
use crate::proto::message::PreparedMessage;
use crate::topics::ring::{Read, Ring};

/// Settings of a [`Topics`] registry.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TopicsConfig {
    /// Messages a [`TopicReceiver`] may fall behind before it skips ahead;
    /// at least 1. Default 1 024. Kept only while unread: a topic whose receivers keep
    /// up holds none.
    pub stream_capacity: usize,
    /// Publishes an engine may have waiting (queued for it, or taken and
    /// not yet sent) before it misses more; at least 1. Default 65 536.
    /// Publishers that can wait are slowed at half of it (see the
    /// [module docs](crate::topics)), as they are at half of
    /// [`inbox_bytes`](Self::inbox_bytes).
    pub inbox_capacity: usize,
    /// Bytes of payload (and topic names) an engine may have waiting
    /// (queued for it, or taken and not yet sent) before it misses more;
    /// one publish always fits, whatever its size.
    /// The payload of a publish is shared, not copied, by the engines it
    /// waits for: this bounds what one engine keeps alive. Default 64 MiB.
    pub inbox_bytes: usize,
    /// Locks the registry's map is split over, by topic: 1 to 4 096.
    /// Default 64; 1 is one lock for all topics.
    ///
    /// These fields may be set directly too: [`Topics::with_config`] holds
    /// each to the bounds its builder method applies.
    pub shards: usize,
}

impl Default for TopicsConfig {
    fn default() -> Self {
        TopicsConfig {
            stream_capacity: 1024,
            inbox_capacity: 1 << 16,
            inbox_bytes: 64 << 20,
            shards: SHARDS,
        }
    }
}

impl TopicsConfig {
    /// Sets [`stream_capacity`](Self::stream_capacity) (at least 1).
    pub fn stream_capacity(mut self, messages: usize) -> Self {
        self.stream_capacity = messages.max(1);
        self
    }

    /// Sets [`inbox_capacity`](Self::inbox_capacity) (at least 1).
    pub fn inbox_capacity(mut self, messages: usize) -> Self {
        self.inbox_capacity = messages.max(1);
        self
    }

    /// Sets [`shards`](Self::shards) (1 to 4 096).
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = shards.clamp(1, 4096);
        self
    }

    /// Sets [`inbox_bytes`](Self::inbox_bytes).
    pub fn inbox_bytes(mut self, bytes: usize) -> Self {
        self.inbox_bytes = bytes;
        self
    }
}

/// What a [`Topics::publish`] reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Published {
    /// Subscribers in this process it was queued for (hub connections and
    /// [`TopicReceiver`]s).
    pub local: usize,
    /// What became of it for other servers.
    pub remote: Remote,
}

/// What became of a publish for other servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Remote {
    /// No link to other servers: this process only.
    NoLink,
    /// Queued for the link, to go out in its next round trip.
    Queued,
    /// Not sent to other servers: the link is down, or its queue is full.
    /// Counted in the link's stats.
    Dropped,
}

/// Counters of a [`Topics`] registry, from [`Topics::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TopicsStats {
    /// Publishes (from this process and from the link).
    pub published: u64,
    /// Publishes an engine missed because its inbox was full.
    pub inbox_dropped: u64,
}

/// Where publishes go beyond this process (the Redis link).
pub(crate) trait Link: Send + Sync + std::fmt::Debug {
    fn send(&self, topic: &str, msg: &PreparedMessage) -> Remote;
    /// `topic` got its first subscriber in this process, or lost its last
    /// (the link asks [`Topics::has`] which, later). Called after the
    /// change, with none of the registry's locks held (see the module's
    /// lock rule): the link may take its own locks and call the registry
    /// back; it must not wait.
    fn interest(&self, topic: &str);
}

/// A topic's subscribers outside hubs: the ring their receivers read, and
/// a lock that orders sends to it. A publish takes this lock before it
/// lets go of its shard's, so sends reach the ring in the order publishes
/// took the shard, while waking the receivers (the costly part of a send,
/// done once this lock is let go too) holds up no other topic.
#[derive(Debug)]
struct Streams {
    order: Mutex<()>,
    ring: Ring,
}

#[derive(Debug)]
struct Entry {
    name: Arc<str>,
    /// Engines with subscribers, and how many each has: the engine counts
    /// its own (an atomic it shares with this entry), and takes the
    /// registry's lock only when its first subscriber comes and its last
    /// goes.
    engines: Vec<(Arc<Mailbox>, Arc<AtomicUsize>)>,
    /// Subscribers outside hubs.
    streams: Option<Arc<Streams>>,
}

impl Entry {
    fn is_empty(&self) -> bool {
        self.engines.is_empty() && self.streams.is_none()
    }
}

/// Shards of the registry's map by default: a topic's entry is in the
/// shard its name hashes to, so that publishes and subscriptions of
/// different topics seldom meet on one lock, while one topic's keep one
/// order.
const SHARDS: usize = 64;

type Shard = Mutex<HashMap<Arc<str>, Entry>>;

#[derive(Debug)]
struct Inner {
    config: TopicsConfig,
    shards: Box<[Shard]>,
    link: OnceLock<Box<dyn Link>>,
    published: AtomicU64,
    inbox_dropped: AtomicU64,
    /// The next publish's place in the order; taken under the topic's
    /// shard lock.
    seq: AtomicU64,
    /// Shard locks taken, for the tests that check who takes them.
    #[cfg(test)]
    locks: AtomicU64,
}

impl Inner {
    /// Tells the link, if any, that `topic` came or went here.
    fn interest(&self, topic: &str) {
        if let Some(link) = self.link.get() {
            link.interest(topic);
        }
    }

    fn shard(&self, topic: &str) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Entry>> {
        use std::hash::{BuildHasher, BuildHasherDefault};
        #[cfg(test)]
        self.locks.fetch_add(1, Ordering::Relaxed);
        let hash = BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default()
            .hash_one(topic);
        self.shards[hash as usize % self.shards.len()]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// A registry of topics; cheap to clone (clones share it). See the
/// [module docs](crate::topics).
#[derive(Debug, Clone)]
pub struct Topics {
    inner: Arc<Inner>,
}

impl Default for Topics {
    fn default() -> Self {
        Topics::new()
    }
}

// Engines' mailboxes are the hub's: without it, publishes reach Streams
// only, and no engine ever registers one.
#[cfg(feature = "hub")]
static NEXT_INBOX: AtomicU64 = AtomicU64::new(1);

impl Topics {
    /// A registry of its own, with default settings.
    pub fn new() -> Topics {
        Topics::with_config(TopicsConfig::default())
    }

    /// A registry of its own. Settings out of their bounds (set on the
    /// public fields) are brought within them, as the builder methods do:
    /// `usize::MAX` shards would be an allocation that panics.
    pub fn with_config(config: TopicsConfig) -> Topics {
        let (shards, inbox, stream) =
            (config.shards, config.inbox_capacity, config.stream_capacity);
        let config = config
            .shards(shards)
            .inbox_capacity(inbox)
            .stream_capacity(stream);
        Topics {
            inner: Arc::new(Inner {
                shards: (0..config.shards).map(|_| Shard::default()).collect(),
                config,
                link: OnceLock::new(),
                published: AtomicU64::new(0),
                inbox_dropped: AtomicU64::new(0),
                seq: AtomicU64::new(0),
                #[cfg(test)]
                locks: AtomicU64::new(0),
            }),
        }
    }

    /// The process's registry, which hubs use unless configured otherwise.
    pub fn global() -> Topics {
        static GLOBAL: OnceLock<Topics> = OnceLock::new();
        GLOBAL.get_or_init(Topics::new).clone()
    }

    /// Whether `self` and `other` are the same registry.
    pub fn same(&self, other: &Topics) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The registry's settings.
    pub fn config(&self) -> &TopicsConfig {
        &self.inner.config
    }

    /// Publishes `msg` to `topic`: to its subscribers in this process and,
    /// with a link, to those of every linked server.
    pub fn publish(&self, topic: &str, msg: &PreparedMessage) -> Published {
        self.publish_except(topic, msg, None)
    }

    /// Waits until `topic` can take a publish without a subscriber in this
    /// process missing it: until no engine holding its subscribers has
    /// half its inbox bounds ([`TopicsConfig::inbox_capacity`],
    /// [`TopicsConfig::inbox_bytes`]) waiting. A task that publishes in
    /// bursts waits here (or publishes with
    /// [`publish_when_room`](Self::publish_when_room)) so that it is
    /// slowed instead of having subscribers miss publishes; hub handlers
    /// need not, as their connection is slowed for them (see the
    /// [module docs](crate::topics)). Ready at once when nothing waits,
    /// and always without the `hub` feature (no engine has an inbox).
    ///
    /// Cancel safe. A woken task looks again: room may be taken by other
    /// publishers before it publishes, which the inbox's other half
    /// holds. Receivers from [`subscribe`](Self::subscribe) are not
    /// waited for: each keeps up or skips ahead ([`RecvError::Lagged`]),
    /// so that one that stops reading holds up no publisher.
    ///
    /// ```
    /// use wavesock::topics::Topics;
    /// use wavesock::{Message, PreparedMessage};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let topics = Topics::new();
    /// for i in 0..10_000 {
    ///     let msg = PreparedMessage::new(&Message::text(format!("tick {i}"))).unwrap();
    ///     topics.room("ticks").await;
    ///     topics.publish("ticks", &msg);
    /// }
    /// # }
    /// ```
    #[cfg(feature = "hub")]
    pub fn room<'a>(&'a self, topic: &'a str) -> Room<'a> {
        Room::new(self, topic)
    }

    /// Waits for [`room`](Self::room), then [`publish`](Self::publish)es.
    #[cfg(feature = "hub")]
    pub async fn publish_when_room(&self, topic: &str, msg: &PreparedMessage) -> Published {
        loop {
            self.room(topic).await;
            // Others woken with it may have taken the room: then it waits
            // again, rather than have a subscriber miss the publish.
            if let Some(published) = pace::after_room(|| self.publish_after_room(topic, msg)) {
                return published;
            }
        }
    }

    /// The inboxes of the engines holding `topic`'s subscribers.
    #[cfg(feature = "hub")]
    fn inboxes(&self, topic: &str) -> Vec<Arc<Mailbox>> {
        let shard = self.inner.shard(topic);
        shard.get(topic).map_or_else(Vec::new, |e| {
            e.engines.iter().map(|(inbox, _)| inbox.clone()).collect()
        })
    }

    /// Publishes `msg` to `topic`'s subscribers in this process only, link
    /// or not: a notice about this server (such as its link going down);
    /// how many it was queued for.
    pub fn publish_local(&self, topic: &str, msg: &PreparedMessage) -> usize {
        self.deliver(topic, msg, None)
    }

    /// [`publish`](Self::publish), leaving out one hub connection.
    pub(crate) fn publish_except(
        &self,
        topic: &str,
        msg: &PreparedMessage,
        except: Option<(u64, u64)>,
    ) -> Published {
        let local = self.deliver(topic, msg, except);
        let remote = match self.inner.link.get() {
            Some(link) => link.send(topic, msg),
            None => Remote::NoLink,
        };
        Published { local, remote }
    }

    /// Publishes to this process's subscribers only (what the link
    /// received, or a publish from a connection, `except` it).
    pub(crate) fn deliver(
        &self,
        topic: &str,
        msg: &PreparedMessage,
        except: Option<(u64, u64)>,
    ) -> usize {
        self.inner.published.fetch_add(1, Ordering::Relaxed);
        let reached = self.queue(topic, msg, except, false).unwrap_or(0);
        meter::published(reached);
        reached
    }

    /// [`publish`](Self::publish) for a task that waited for room: `None`,
    /// and queued nowhere, if an inbox has none after all (other
    /// publishers took it first), for the task to wait again.
    #[cfg(feature = "hub")]
    fn publish_after_room(&self, topic: &str, msg: &PreparedMessage) -> Option<Published> {
        let local = self.queue(topic, msg, None, true)?;
        self.inner.published.fetch_add(1, Ordering::Relaxed);
        meter::published(local);
        let remote = match self.inner.link.get() {
            Some(link) => link.send(topic, msg),
            None => Remote::NoLink,
        };
        Some(Published { local, remote })
    }

    /// [`deliver`](Self::deliver)'s work, under the shard's lock: how many
    /// subscribers it was queued for.
    ///
    /// With `decline`, a publish that an engine's inbox has no room for is
    /// queued nowhere (`None`): each inbox is looked at first, under the
    /// shard's lock, so that publishes to this topic cannot take the room
    /// meanwhile.
    fn queue(
        &self,
        topic: &str,
        msg: &PreparedMessage,
        except: Option<(u64, u64)>,
        decline: bool,
    ) -> Option<usize> {
        let config = &self.inner.config;
        let size = msg.payload().len() + topic.len();
        let mut wake = Vec::new();
        let mut reached = 0;
        let mut missed = 0;
        let streams;
        let shard = self.inner.shard(topic);
        let Some(entry) = shard.get(topic) else {
            return Some(0);
        };
        #[cfg(feature = "hub")]
        let paced = pace::paced();
        #[cfg(not(feature = "hub"))]
        let paced = false;
        #[cfg(feature = "hub")]
        if decline
            && entry.engines.iter().any(|(inbox, _)| {
                inbox
                    .lock()
                    .misses(size, config.inbox_capacity, config.inbox_bytes, paced)
            })
        {
            return None;
        }
        #[cfg(not(feature = "hub"))]
        let _ = decline;
        let seq = self.inner.seq.fetch_add(1, Ordering::Relaxed);
        for (inbox, count) in &entry.engines {
            let mut waiting = inbox.items.lock().unwrap_or_else(PoisonError::into_inner);
            // An engine this far behind misses the publish.
            let full = waiting.misses(size, config.inbox_capacity, config.inbox_bytes, paced);
            let except = except.filter(|&(id, _)| id == inbox.id());
            // Subscribers here it is for (the publisher is not).
            let here = count
                .load(Ordering::Relaxed)
                .saturating_sub(usize::from(except.is_some()));
            if full {
                // The connection publishing, if an engine is reading one,
                // stops reading until there is room again.
                #[cfg(feature = "hub")]
                pace::pressed(inbox);
                self.inner.inbox_dropped.fetch_add(1, Ordering::Relaxed);
                // Counted as what it says: deliveries missed, one per
                // subscriber the publish was for.
                missed += here;
                match waiting
                    .missed
                    .iter_mut()
                    .find(|(t, _)| Arc::ptr_eq(t, &entry.name))
                {
                    Some((_, last)) => *last = seq,
                    None => waiting.missed.push((entry.name.clone(), seq)),
                }
                continue;
            }
            if waiting.items.is_empty() {
                wake.push(inbox.clone());
            }
            waiting.bytes += size;
            waiting.items.push_back(Delivery {
                topic: entry.name.clone(),
                msg: msg.clone(),
                except,
                seq,
            });
            reached += here;
            #[cfg(feature = "hub")]
            if waiting.pressed(inbox.bounds) {
                pace::pressed(inbox);
            }
        }
        streams = entry.streams.clone();
        // Taken before the shard is let go: the next publish to this topic
        // sends after this one.
        let order = streams
            .as_ref()
            .map(|s| s.order.lock().unwrap_or_else(PoisonError::into_inner));
        drop(shard);
        let pushed = streams.as_ref().map_or(0, |s| s.ring.push(msg));
        reached += pushed;
        drop(order);
        // Wakers run with no lock of ours held (see the module's lock rule).
        if let Some(s) = streams.as_ref().filter(|_| pushed > 0) {
            s.ring.wake();
        }
        for inbox in wake {
            inbox.waker.wake();
        }
        if missed > 0 {
            meter::topic_dropped(meter::TopicDrop::InboxFull, missed as u64);
        }
        Some(reached)
    }

    /// Subscribes a task to `topic`: what is published to it from now on
    /// arrives through the receiver, until the receiver is dropped.
    pub fn subscribe(&self, topic: &str) -> TopicReceiver {
        let mut shard = self.inner.shard(topic);
        let (entry, new) = entry(&mut shard, topic);
        let capacity = self.inner.config.stream_capacity;
        let streams = entry
            .streams
            .get_or_insert_with(|| {
                Arc::new(Streams {
                    order: Mutex::new(()),
                    ring: Ring::new(capacity),
                })
            })
            .clone();
        let next = streams.ring.join();
        let name = entry.name.clone();
        drop(shard);
        meter::subscriptions(1);
        if new {
            meter::topics(1);
            self.inner.interest(topic);
        }
        TopicReceiver {
            streams,
            next,
            topic: name,
            registry: self.inner.clone(),
        }
    }

    /// Subscribers to `topic` in this process (hub connections and
    /// receivers).
    pub fn subscribers(&self, topic: &str) -> usize {
        let shard = self.inner.shard(topic);
        shard.get(topic).map_or(0, |e| {
            e.engines
                .iter()
                .map(|(_, n)| n.load(Ordering::Relaxed))
                .sum::<usize>()
                + e.streams.as_ref().map_or(0, |s| s.ring.receivers())
        })
    }

    /// Whether `topic` has subscribers in this process.
    pub fn has(&self, topic: &str) -> bool {
        self.inner.shard(topic).contains_key(topic)
    }

    /// The topics that have subscribers in this process, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names = Vec::new();
        for shard in self.inner.shards.iter() {
            let shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
            names.extend(shard.values().map(|e| e.name.to_string()));
        }
        names.sort_unstable();
        names
    }

    /// The registry's counters.
    pub fn stats(&self) -> TopicsStats {
        TopicsStats {
            published: self.inner.published.load(Ordering::Relaxed),
            inbox_dropped: self.inner.inbox_dropped.load(Ordering::Relaxed),
        }
    }

    #[cfg(feature = "hub")]
    /// A mailbox (inbox) for a new engine.
    pub(crate) fn mailbox(&self) -> Arc<Mailbox> {
        let config = &self.inner.config;
        Arc::new(Mailbox::new(
            NEXT_INBOX.fetch_add(1, Ordering::Relaxed),
            mailbox::Bounds {
                publishes: config.inbox_capacity,
                bytes: config.inbox_bytes,
            },
        ))
    }

    #[cfg(feature = "hub")]
    /// The engine of `inbox` has its first subscriber to `topic`: the
    /// count it keeps from now on (at 1), and the place of the first
    /// publish the subscriber gets (see [`Delivery::seq`]).
    pub(crate) fn join(&self, inbox: &Arc<Mailbox>, topic: &str) -> (Arc<AtomicUsize>, u64) {
        let mut shard = self.inner.shard(topic);
        let (entry, new) = entry(&mut shard, topic);
        let count = Arc::new(AtomicUsize::new(1));
        entry.engines.push((inbox.clone(), count.clone()));
        let since = self.inner.seq.load(Ordering::Relaxed);
        drop(shard);
        if new {
            meter::topics(1);
            self.inner.interest(topic);
        }
        (count, since)
    }

    #[cfg(feature = "hub")]
    /// The place of the first publish a further subscriber of an engine
    /// already in a topic gets. Read without the lock: a publish that
    /// races the subscription may or may not reach it, as either order
    /// could have happened.
    pub(crate) fn now(&self) -> u64 {
        self.inner.seq.load(Ordering::Relaxed)
    }

    #[cfg(feature = "hub")]
    /// The engine of `inbox` has no subscriber to `topic` any more.
    pub(crate) fn leave(&self, inbox: &Arc<Mailbox>, topic: &str) {
        let mut shard = self.inner.shard(topic);
        let Some(entry) = shard.get_mut(topic) else {
            return;
        };
        let at = entry
            .engines
            .iter()
            .position(|(i, _)| Arc::ptr_eq(i, inbox));
        let left = at.map(|at| entry.engines.remove(at));
        let gone = if entry.is_empty() {
            shard.remove(topic)
        } else {
            None
        };
        drop(shard);
        if gone.is_some() {
            meter::topics(-1);
            self.inner.interest(topic);
        }
        // What left the map is dropped here, with no lock held.
        drop((left, gone));
    }

    /// Sets the link to other servers; false if there is one already.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn set_link(&self, link: Box<dyn Link>) -> bool {
        self.inner.link.set(link).is_ok()
    }
}

/// `topic`'s entry in `shard`, made if missing; whether it was (the
/// caller tells the link once it has let go of the shard).
fn entry<'a>(shard: &'a mut HashMap<Arc<str>, Entry>, topic: &str) -> (&'a mut Entry, bool) {
    let new = !shard.contains_key(topic);
    if new {
        let name: Arc<str> = topic.into();
        shard.insert(
            name.clone(),
            Entry {
                name,
                engines: Vec::new(),
                streams: None,
            },
        );
    }
    (shard.get_mut(topic).expect("inserted above"), new)
}

/// A task's subscription to a topic, from [`Topics::subscribe`]. Dropping
/// it unsubscribes: the last receiver of a topic takes its ring with it,
/// and the topic's entry if no hub connection subscribes.
#[derive(Debug)]
pub struct TopicReceiver {
    streams: Arc<Streams>,
    /// The place of the next message it reads.
    next: u64,
    topic: Arc<str>,
    registry: Arc<Inner>,
}

impl Drop for TopicReceiver {
    fn drop(&mut self) {
        meter::subscriptions(-1);
        // Under the shard's lock, so no subscribe races the last leaving.
        let mut shard = self.registry.shard(&self.topic);
        let left = self.streams.ring.leave(self.next);
        let Some(entry) = shard.get_mut(&*self.topic) else {
            return;
        };
        if left != 0 {
            return;
        }
        let ring = entry.streams.take();
        let gone = if entry.is_empty() {
            shard.remove(&*self.topic)
        } else {
            None
        };
        drop(shard);
        if gone.is_some() {
            meter::topics(-1);
            self.registry.interest(&self.topic);
        }
        // What left the map is dropped here, with no lock held.
        drop((ring, gone));
    }
}

/// Why [`TopicReceiver::recv`] returned no message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RecvError {
    /// The receiver fell more than
    /// [`TopicsConfig::stream_capacity`] behind and skipped this many
    /// messages; the next `recv` returns the oldest still kept.
    #[error("fell behind and skipped {0} messages")]
    Lagged(u64),
}

impl TopicReceiver {
    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The next message published to the topic. Never ends on its own: the
    /// registry lives as long as any receiver.
    ///
    /// Cancel safe: a message is taken only when it is returned.
    pub async fn recv(&mut self) -> Result<PreparedMessage, RecvError> {
        self.streams.ring.recv(&mut self.next).await.map_err(lagged)
    }

    /// The next message if one is waiting (`Ok(None)` if not).
    pub fn try_recv(&mut self) -> Result<Option<PreparedMessage>, RecvError> {
        match self.streams.ring.read(&mut self.next) {
            Read::Message(m) => Ok(Some(m)),
            Read::Lagged(n) => Err(lagged(n)),
            Read::Empty => Ok(None),
        }
    }
}

/// A receiver skipped `n` messages: counted as dropped.
fn lagged(n: u64) -> RecvError {
    meter::topic_dropped(meter::TopicDrop::Lagged, n);
    RecvError::Lagged(n)
}

#[cfg(feature = "hub")]
/// Resolves once no engine inbox holding `topic`'s subscribers is pressed:
/// from [`Topics::room`]. Dropped before that, it leaves nothing behind
/// in the inboxes it waited in.
#[derive(Debug)]
#[must_use = "a future does nothing unless polled"]
pub struct Room<'a> {
    topics: &'a Topics,
    topic: &'a str,
    id: u64,
    /// The inboxes it waits in.
    waits_in: Vec<Arc<Mailbox>>,
}

#[cfg(feature = "hub")]
impl<'a> Room<'a> {
    pub(crate) fn new(topics: &'a Topics, topic: &'a str) -> Self {
        Room {
            topics,
            topic,
            id: mailbox::next_waiter(),
            waits_in: Vec::new(),
        }
    }
}

#[cfg(feature = "hub")]
impl Future for Room<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let inboxes = this.topics.inboxes(this.topic);
        // Registered in each pressed one: woken when one has room, this
        // looks at them all again.
        let mut pressed = false;
        for inbox in &inboxes {
            if inbox.wait_if_pressed(this.id, cx.waker()) {
                pressed = true;
                if !this.waits_in.iter().any(|i| Arc::ptr_eq(i, inbox)) {
                    this.waits_in.push(inbox.clone());
                }
            }
        }
        if pressed {
            Poll::Pending
        } else {
            // Nothing left registered (each look took it out).
            for inbox in this.waits_in.drain(..) {
                inbox.forget(this.id);
            }
            Poll::Ready(())
        }
    }
}

#[cfg(feature = "hub")]
impl Drop for Room<'_> {
    fn drop(&mut self) {
        for inbox in self.waits_in.drain(..) {
            inbox.forget(self.id);
        }
    }
}

#[cfg(all(test, feature = "hub"))]
mod pace_tests;
#[cfg(test)]
mod tests;
