//! Topics across servers through Redis pub/sub (feature `redis`).
//!
//! [`Topics::link_redis`] links a process's registry to every other
//! process linked to the same Redis with the same
//! [`RedisLinkConfig::prefix`]. Each topic is a Redis channel of its own
//! (the prefix and the topic's name), and a server subscribes to a topic's
//! channel only while it has subscribers to the topic: when the registry
//! gets the topic's first subscriber (a hub connection or a
//! [`TopicReceiver`](crate::topics::TopicReceiver)), and until
//! [`RedisLinkConfig::unsubscribe_delay`] after its last is gone (if none
//! came back meanwhile). So a server receives only the topics it has
//! subscribers for, and Redis sends each publish to the servers that want
//! it, as Centrifugo's Redis broker does.
//!
//! Each publish is delivered to this process's subscribers at once, as
//! without a link, and queued for Redis; every other server subscribed to
//! the topic's channel receives it and delivers it to its own subscribers,
//! encoding the frame once per server.
//!
//! The link runs three tasks: one publishes (a pipeline of `PUBLISH` per
//! round trip, on a connection of its own), one keeps the subscriptions
//! (one channel per `SUBSCRIBE` or `UNSUBSCRIBE`, on a RESP3 connection
//! whose push messages go straight to a queue bounded in bytes), and one
//! delivers what that queue holds. None waits behind another.
//!
//! What holds, and what does not:
//!
//! - **Live once confirmed.** [`RedisLink::is_live`] says whether Redis
//!   confirmed this server's subscription to a topic's channel, and
//!   [`RedisLink::live`] waits for it. What other servers publish to the
//!   topic after that reaches this server; what they published before,
//!   while the subscription was on its way, may or may not. A subscriber
//!   that comes while the topic is live (its channel kept through the
//!   unsubscribe delay) gets what is published after it subscribed.
//! - **Exactly once while the link is up.** A server skips its own
//!   publishes when Redis hands them back (each carries the publishing
//!   link's random id), and a batch that may have reached Redis is never
//!   sent again. A channel is subscribed once however many subscribers
//!   the topic has here, so nothing arrives twice.
//! - **Per-publisher order.** One link's publishes go out in order on one
//!   connection, a pipeline per round trip ([`RedisLinkConfig::batch`] at
//!   most), and Redis hands a channel's messages to every subscriber in
//!   the order it took them. Publishes from different servers may
//!   interleave differently on different servers: a server's own
//!   publishes reach its subscribers before Redis orders them.
//! - **Local delivery never waits for Redis** and goes on while it is
//!   away.
//! - **No replay.** Redis pub/sub keeps nothing, so neither does the link:
//!   what is published while it is down (or while another server's link
//!   is down) does not reach the servers on the other side of the split,
//!   now or later. Such publishes return [`Remote::Dropped`] and are
//!   counted in [`LinkStats`]; so are publishes queued or in flight when
//!   the connection failed (they may or may not have reached Redis).
//! - **Bounded.** At most [`RedisLinkConfig::queue`] publishes wait for
//!   Redis; past that, a publish is dropped for other servers
//!   ([`Remote::Dropped`], [`LinkStats::dropped_full`]) and still delivered
//!   here. What Redis pushes waits for delivery up to
//!   [`RedisLinkConfig::incoming_bytes`]; past that it is dropped and
//!   counted ([`LinkStats::dropped_incoming`]). redis-rs's RESP2 pub/sub
//!   connection buffers what it reads in an unbounded channel; the RESP3
//!   connection the link uses hands each push to the link as it is read,
//!   so no unbounded buffer sits in between (the link needs Redis 6 or
//!   later).
//! - **Observable.** [`RedisLink::status`] is a `watch` channel of
//!   [`LinkState`] (connecting, up, down with the error), and
//!   [`RedisLink::stats`] counts what went where.
//! - **Healing.** A failed link reconnects with exponential backoff (from
//!   [`RedisLinkConfig::backoff_first`], doubling to
//!   [`RedisLinkConfig::backoff_max`]), each wait jittered to between half
//!   and all of it so that servers that lost Redis together do not come
//!   back at the same instant. An idle link pings Redis every
//!   [`RedisLinkConfig::ping_interval`] to notice a Redis that went away
//!   without closing the connection.
//!
//! A registry is linked once: after its [`RedisLink`] is dropped, its
//! publishes reach this process only.
//!
//! ```no_run
//! use wavesock::topics::Topics;
//! use wavesock::topics::redis::RedisLinkConfig;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = wavesock::redis::Client::open("redis://127.0.0.1:6379/")?;
//! let topics = Topics::global();
//! // Kept for the life of the server: dropping it stops the link.
//! let link = topics.link_redis(client, RedisLinkConfig::default())?;
//! let mut status = link.status();
//! tokio::spawn(async move {
//!     while status.changed().await.is_ok() {
//!         eprintln!("Redis link: {:?}", *status.borrow());
//!     }
//! });
//! # Ok(())
//! # }
//! ```

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use tokio::sync::{Notify, mpsc, watch};

use crate::proto::header::OpCode;
use crate::proto::message::{Message, PreparedMessage};
use crate::proto::text::Utf8Bytes;
use crate::topics::{Link, Remote, Topics};

mod nodes;

use nodes::{Target, Topology};

/// Settings of a Redis link.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RedisLinkConfig {
    /// What a topic's Redis channel starts with: topic `room:42` is
    /// channel `wavesock:t:room:42` by default. Servers of one deployment
    /// use the same prefix; two deployments on one Redis, different ones.
    /// In a Redis Cluster a channel's slot is the cluster's rule on the
    /// whole name, so a prefix without `{` lets topics choose their slot
    /// with a hash tag (`room:{42}:chat`).
    pub prefix: String,
    /// Publishes that may wait for Redis: 1 to Tokio's
    /// [`Semaphore::MAX_PERMITS`](tokio::sync::Semaphore::MAX_PERMITS) (the
    /// queue is a Tokio channel, whose memory is what waits). Default 8 192.
    pub queue: usize,
    /// Most publishes sent in one round trip (one pipeline); at least 1.
    /// Default 256.
    pub batch: usize,
    /// The first wait before reconnecting; not zero. Default 100 ms.
    pub backoff_first: Duration,
    /// The longest wait before reconnecting. Default 5 s.
    pub backoff_max: Duration,
    /// A connection attempt or round trip that takes longer fails the
    /// link; not zero. Default 3 s.
    pub timeout: Duration,
    /// An idle link pings Redis this often; not zero. Default 5 s.
    pub ping_interval: Duration,
    /// Messages from Redis larger than this (payload and topic) are
    /// dropped and counted as malformed; at least 1. Default 16 MiB.
    pub max_message_size: usize,
    /// Bytes of messages from Redis that may wait to be delivered here,
    /// those the link is delivering included until each is; past that,
    /// messages are dropped and counted ([`LinkStats::dropped_incoming`]),
    /// while one always fits when none waits. Default 16 MiB.
    pub incoming_bytes: usize,
    /// How long a topic's channel stays subscribed after its last
    /// subscriber here is gone, in case one comes back. Default 1 s.
    pub unsubscribe_delay: Duration,
}

impl Default for RedisLinkConfig {
    fn default() -> Self {
        RedisLinkConfig {
            prefix: "wavesock:t:".to_owned(),
            queue: 8192,
            batch: 256,
            backoff_first: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
            timeout: Duration::from_secs(3),
            ping_interval: Duration::from_secs(5),
            max_message_size: 16 << 20,
            incoming_bytes: 16 << 20,
            unsubscribe_delay: Duration::from_secs(1),
        }
    }
}

impl RedisLinkConfig {
    /// Sets [`prefix`](Self::prefix).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Sets [`incoming_bytes`](Self::incoming_bytes).
    pub fn incoming_bytes(mut self, bytes: usize) -> Self {
        self.incoming_bytes = bytes;
        self
    }

    /// Sets [`unsubscribe_delay`](Self::unsubscribe_delay).
    pub fn unsubscribe_delay(mut self, delay: Duration) -> Self {
        self.unsubscribe_delay = delay;
        self
    }

    /// Sets [`queue`](Self::queue) (at least 1).
    pub fn queue(mut self, publishes: usize) -> Self {
        self.queue = publishes.max(1);
        self
    }

    /// Sets [`batch`](Self::batch) (at least 1).
    pub fn batch(mut self, publishes: usize) -> Self {
        self.batch = publishes.max(1);
        self
    }

    /// Sets [`backoff_first`](Self::backoff_first) and
    /// [`backoff_max`](Self::backoff_max) (at least `first`).
    pub fn backoff(mut self, first: Duration, max: Duration) -> Self {
        self.backoff_first = first;
        self.backoff_max = max.max(first);
        self
    }

    /// Sets [`timeout`](Self::timeout).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets [`ping_interval`](Self::ping_interval).
    pub fn ping_interval(mut self, interval: Duration) -> Self {
        self.ping_interval = interval;
        self
    }

    /// Sets [`max_message_size`](Self::max_message_size).
    pub fn max_message_size(mut self, bytes: usize) -> Self {
        self.max_message_size = bytes;
        self
    }

    /// Checks the settings, which are public fields and so may hold what
    /// the builder methods would not set: a Tokio channel or interval
    /// that cannot be made (they panic), or a link that could never work
    /// (a zero timeout, a zero backoff that reconnects in a busy loop).
    /// [`Topics::link_redis`] calls it. Durations of any length work:
    /// `Duration::MAX` means never.
    ///
    /// ```
    /// use std::time::Duration;
    /// use wavesock::topics::redis::RedisLinkConfig;
    ///
    /// assert!(RedisLinkConfig::default().validate().is_ok());
    /// let mut config = RedisLinkConfig::default();
    /// config.ping_interval = Duration::ZERO;
    /// assert!(config.validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<(), LinkError> {
        let refuse = |reason| Err(LinkError::InvalidConfig(reason));
        if self.queue == 0 {
            return refuse("queue must be at least 1");
        }
        if self.queue > tokio::sync::Semaphore::MAX_PERMITS {
            return refuse("queue must be at most tokio::sync::Semaphore::MAX_PERMITS");
        }
        if self.batch == 0 {
            return refuse("batch must be at least 1");
        }
        if self.backoff_first.is_zero() {
            return refuse("backoff_first must not be zero");
        }
        if self.timeout.is_zero() {
            return refuse("timeout must not be zero");
        }
        if self.ping_interval.is_zero() {
            return refuse("ping_interval must not be zero");
        }
        if self.max_message_size == 0 {
            return refuse("max_message_size must be at least 1");
        }
        Ok(())
    }
}

/// Thirty years, the most any wait of the link lasts (Tokio's own "far
/// future"): a longer one would overflow `Instant` when added to now.
const NEVER: Duration = Duration::from_secs(30 * 365 * 24 * 3600);

/// `d`, or [`NEVER`] if longer: a wait of any setting, safe to add to now.
fn capped(d: Duration) -> Duration {
    d.min(NEVER)
}

/// The wait after `backoff`: twice it, at most `max`, never overflowing.
fn next_backoff(backoff: Duration, max: Duration) -> Duration {
    backoff.saturating_mul(2).min(max)
}

/// Where a link stands, from [`RedisLink::status`].
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

/// A link's counters, from [`RedisLink::stats`].
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

/// Why [`Topics::link_redis`] made no link.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LinkError {
    /// The registry has (or had) a link already.
    #[error("this registry is linked already")]
    AlreadyLinked,
    /// Not called from within a Tokio runtime, where the link's task runs.
    #[error("a Redis link needs a Tokio runtime")]
    NoRuntime,
    /// A setting cannot work; see [`RedisLinkConfig::validate`].
    #[error("invalid Redis link setting: {0}")]
    InvalidConfig(&'static str),
    /// A cluster node's address did not parse, or none was given.
    #[error("bad Redis address: {0}")]
    Address(String),
}

/// Bits of [`Shared::state`]: the publishing connection is up, the
/// subscribing one is; the link is up with both.
const PUB_UP: u8 = 1;
const SUB_UP: u8 = 2;
const UP: u8 = PUB_UP | SUB_UP;

/// What the registry, the link's tasks and Redis's push messages share.
#[derive(Debug)]
struct Shared {
    origin: [u8; 16],
    prefix: String,
    state: AtomicU8,
    queue: mpsc::Sender<(String, Bytes)>,
    /// Topics whose presence here changed, for the subscribing task, which
    /// asks the registry whether each has subscribers when it gets to it.
    interest: Mutex<HashSet<Arc<str>>>,
    interest_changed: Notify,
    /// Topics whose channel Redis confirmed this server subscribes to.
    live: Mutex<HashSet<Arc<str>>>,
    live_changed: watch::Sender<()>,
    /// Messages Redis pushed, bounded in bytes, for the delivering task.
    incoming: Mutex<Pending>,
    incoming_limit: usize,
    incoming_ready: Notify,
    /// A subscribing connection reported it is gone, or a slot moved.
    disconnected: std::sync::atomic::AtomicBool,
    /// Channels the link is unsubscribing from (their confirmation comes
    /// as a push, as an unsubscribe it did not ask for would).
    unsubscribing: Mutex<HashSet<Vec<u8>>>,
    /// The last failure of each connection, for the status.
    errors: Mutex<[Option<String>; 2]>,
    sent: AtomicU64,
    received: AtomicU64,
    dropped_down: AtomicU64,
    dropped_full: AtomicU64,
    dropped_incoming: AtomicU64,
    lost: AtomicU64,
    malformed: AtomicU64,
    connects: AtomicU64,
    subscribes: AtomicU64,
    unsubscribes: AtomicU64,
}

/// Messages from Redis waiting for the delivering task.
#[derive(Debug, Default)]
struct Pending {
    items: VecDeque<(Vec<u8>, Vec<u8>)>,
    /// The bytes of `items` and of those the delivering task took and has
    /// not delivered yet: taking a batch frees no room, delivering each
    /// message frees its own, so that what waits, here or in the task's
    /// batch, stays within [`RedisLinkConfig::incoming_bytes`].
    bytes: usize,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    fn new(queue: mpsc::Sender<(String, Bytes)>, config: &RedisLinkConfig) -> Self {
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
    fn channel(&self, topic: &str) -> String {
        format!("{}{topic}", self.prefix)
    }

    fn set_live(&self, topic: &Arc<str>, live: bool) {
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

    fn clear_live(&self) {
        lock(&self.live).clear();
        self.live_changed.send_replace(());
    }

    /// A push message from the subscribing connection (called by
    /// redis-rs's connection task for each; it must not wait). Messages
    /// go to the delivering task's queue unless it holds
    /// [`RedisLinkConfig::incoming_bytes`] already; the rest is dropped
    /// and counted.
    fn on_push(&self, push: redis::PushInfo) {
        match push.kind {
            redis::PushKind::Message | redis::PushKind::SMessage => {
                let mut data = push.data.into_iter();
                let (
                    Some(redis::Value::BulkString(channel)),
                    Some(redis::Value::BulkString(payload)),
                ) = (data.next(), data.next())
                else {
                    self.malformed.fetch_add(1, Ordering::Relaxed);
                    return;
                };
                let size = channel.len() + payload.len();
                {
                    let mut pending = lock(&self.incoming);
                    // Anything waiting, queued or in the delivering task's
                    // batch, leaves room for this only within the limit.
                    if pending.bytes > 0 && pending.bytes + size > self.incoming_limit {
                        self.dropped_incoming.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                    pending.bytes += size;
                    pending.items.push_back((channel, payload));
                }
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
    fn set_part(&self, part: u8, up: Result<(), String>, status: &watch::Sender<LinkState>) {
        let index = usize::from(part == SUB_UP);
        let failed = up.is_err();
        lock(&self.errors)[index] = up.err();
        let before = if failed {
            self.state.fetch_and(!part, Ordering::AcqRel)
        } else {
            self.state.fetch_or(part, Ordering::AcqRel)
        };
        if self.state.load(Ordering::Acquire) == UP && before != UP {
            self.connects.fetch_add(1, Ordering::Relaxed);
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
                Remote::Dropped
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.dropped_down.fetch_add(1, Ordering::Relaxed);
                Remote::Dropped
            }
        }
    }

    fn interest(&self, topic: &str) {
        lock(&self.interest).insert(topic.into());
        self.interest_changed.notify_one();
    }
}

/// A registry's link to Redis, from [`Topics::link_redis`]. Clones share
/// it; when the last is dropped the link stops and publishes reach this
/// process only.
#[derive(Debug, Clone)]
#[must_use = "dropping the link stops it"]
pub struct RedisLink {
    shared: Arc<Shared>,
    status: watch::Receiver<LinkState>,
    _tasks: Arc<AbortOnDrop>,
}

/// Stops the link's tasks when the last [`RedisLink`] goes.
#[derive(Debug)]
struct AbortOnDrop(
    Vec<tokio::task::AbortHandle>,
    Arc<Shared>,
    watch::Sender<LinkState>,
);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
        self.1.state.store(0, Ordering::Release);
        self.1.clear_live();
        self.2.send_replace(LinkState::Stopped);
    }
}

impl RedisLink {
    /// The link's state as it changes.
    pub fn status(&self) -> watch::Receiver<LinkState> {
        self.status.clone()
    }

    /// Whether the link is up: publishes go to Redis.
    pub fn is_up(&self) -> bool {
        self.shared.state.load(Ordering::Acquire) == UP
    }

    /// Whether Redis confirmed this server's subscription to `topic`'s
    /// channel: from then on, what other servers publish to it reaches
    /// this server (until it has no subscriber left, or the link goes
    /// down).
    pub fn is_live(&self, topic: &str) -> bool {
        lock(&self.shared.live).contains(topic)
    }

    /// Waits until [`is_live`](Self::is_live) holds for `topic` (a local
    /// subscriber must exist: the link subscribes only to topics with
    /// subscribers here). Publishes by other servers that Redis took
    /// before this returns may or may not arrive; every one it takes
    /// after arrives, once, while the link stays up.
    pub async fn live(&self, topic: &str) {
        let mut changed = self.shared.live_changed.subscribe();
        while !self.is_live(topic) {
            if changed.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// The link's counters.
    pub fn stats(&self) -> LinkStats {
        let s = &self.shared;
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        LinkStats {
            sent: get(&s.sent),
            received: get(&s.received),
            dropped_down: get(&s.dropped_down),
            dropped_full: get(&s.dropped_full),
            dropped_incoming: get(&s.dropped_incoming),
            lost: get(&s.lost),
            malformed: get(&s.malformed),
            connects: get(&s.connects),
            subscribes: get(&s.subscribes),
            unsubscribes: get(&s.unsubscribes),
            live: lock(&s.live).len() as u64,
        }
    }
}

impl Topics {
    /// Links this registry to every other registry linked to the same
    /// Redis with the same [`RedisLinkConfig::prefix`]; see the
    /// [module docs](self). Spawns the link's tasks on the current Tokio
    /// runtime; the link runs until the returned [`RedisLink`] (and its
    /// clones) is dropped.
    ///
    /// The link speaks RESP3 (Redis 6 or later) on its subscribing
    /// connection, whatever `client`'s URL asks.
    pub fn link_redis(
        &self,
        client: redis::Client,
        config: RedisLinkConfig,
    ) -> Result<RedisLink, LinkError> {
        let target = Target::Single(client.get_connection_info().clone());
        self.link(target, config)
    }

    /// Links this registry through a Redis Cluster, as
    /// [`link_redis`](Self::link_redis) does through one Redis: each
    /// topic's channel lives on the master of its slot, with sharded
    /// pub/sub (`SPUBLISH`, `SSUBSCRIBE`; Redis 7 or later), so the
    /// cluster's masters share the traffic.
    ///
    /// `nodes` are some of the cluster's nodes (`redis://host:port`, with
    /// the user and password the cluster wants); the link asks the first
    /// that answers for the slots' masters (`CLUSTER SLOTS`), and again
    /// after any failure. A channel's slot is the cluster's rule on the
    /// whole channel name ([`RedisLinkConfig::prefix`] and the topic):
    /// topics with the same hash tag (`room:{42}:chat`, `room:{42}:typing`)
    /// share a slot and a master.
    ///
    /// A master that fails is a link outage, as Redis going away is for
    /// [`link_redis`](Self::link_redis): the link reports
    /// [`LinkState::Down`], counts what it could not send, and comes back
    /// once the cluster has a master for every slot again (a replica
    /// promoted), subscribing again to every topic with subscribers here.
    /// Nothing is replayed.
    ///
    /// ```no_run
    /// use wavesock::topics::Topics;
    /// use wavesock::topics::redis::RedisLinkConfig;
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let nodes = ["redis://10.0.0.1:7000/", "redis://10.0.0.2:7000/"];
    /// let link = Topics::global().link_redis_cluster(nodes, RedisLinkConfig::default())?;
    /// # let _ = link;
    /// # Ok(())
    /// # }
    /// ```
    pub fn link_redis_cluster<I>(
        &self,
        nodes: I,
        config: RedisLinkConfig,
    ) -> Result<RedisLink, LinkError>
    where
        I: IntoIterator,
        I::Item: redis::IntoConnectionInfo,
    {
        let mut seeds = Vec::new();
        for node in nodes {
            let info = redis::IntoConnectionInfo::into_connection_info(node)
                .map_err(|e| LinkError::Address(e.to_string()))?;
            seeds.push(info);
        }
        if seeds.is_empty() {
            return Err(LinkError::Address("no cluster node given".to_owned()));
        }
        self.link(Target::Cluster(seeds), config)
    }

    fn link(&self, target: Target, config: RedisLinkConfig) -> Result<RedisLink, LinkError> {
        config.validate()?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| LinkError::NoRuntime)?;
        let (queue, rx) = mpsc::channel(config.queue);
        let shared = Arc::new(Shared::new(queue, &config));
        if !self.set_link(Box::new(shared.clone())) {
            return Err(LinkError::AlreadyLinked);
        }
        let (status_tx, status) = watch::channel(LinkState::Connecting);
        let config = Arc::new(config);
        let tasks = vec![
            runtime
                .spawn(publish(
                    target.clone(),
                    config.clone(),
                    shared.clone(),
                    rx,
                    status_tx.clone(),
                ))
                .abort_handle(),
            runtime
                .spawn(subscribe(
                    target,
                    config.clone(),
                    self.clone(),
                    shared.clone(),
                    status_tx.clone(),
                ))
                .abort_handle(),
            runtime
                .spawn(deliver(config, self.clone(), shared.clone()))
                .abort_handle(),
        ];
        Ok(RedisLink {
            shared: shared.clone(),
            status,
            _tasks: Arc::new(AbortOnDrop(tasks, shared, status_tx)),
        })
    }
}

/// The wire form of a publish on the channel: a version byte, the
/// publishing link's id, the opcode, the topic's length (u32, big-endian),
/// the topic, the payload.
fn encode(origin: &[u8; 16], topic: &str, msg: &PreparedMessage) -> Option<Bytes> {
    let op = match msg.opcode() {
        OpCode::Text => 1,
        OpCode::Binary => 2,
        _ => return None,
    };
    let payload = msg.payload();
    let mut b = BytesMut::with_capacity(HEAD + topic.len() + payload.len());
    b.put_u8(VERSION);
    b.put_slice(origin);
    b.put_u8(op);
    b.put_u32(u32::try_from(topic.len()).ok()?);
    b.put_slice(topic.as_bytes());
    b.put_slice(payload);
    Some(b.freeze())
}

const VERSION: u8 = 1;
const HEAD: usize = 1 + 16 + 1 + 4;

/// A publish read from the channel.
#[derive(Debug, PartialEq)]
struct Incoming {
    origin: [u8; 16],
    topic: String,
    msg: Message,
}

#[cfg(test)]
fn decode(wire: &[u8], max: usize) -> Option<Incoming> {
    decode_owned(Bytes::copy_from_slice(wire), max)
}

/// Reads a publish from what Redis pushed; the payload stays where it
/// came, not copied.
fn decode_owned(wire: Bytes, max: usize) -> Option<Incoming> {
    if wire.len() < HEAD || wire.len() - HEAD > max || wire[0] != VERSION {
        return None;
    }
    let origin: [u8; 16] = wire[1..17].try_into().ok()?;
    let op = wire[17];
    let topic_len = u32::from_be_bytes(wire[18..22].try_into().ok()?) as usize;
    let rest = &wire[HEAD..];
    if topic_len > rest.len() {
        return None;
    }
    let topic = std::str::from_utf8(&rest[..topic_len]).ok()?.to_owned();
    let payload = wire.slice(HEAD + topic_len..);
    let msg = match op {
        1 => Message::Text(Utf8Bytes::try_from(payload).ok()?),
        2 => Message::Binary(payload),
        _ => return None,
    };
    Some(Incoming { origin, topic, msg })
}

/// Between half and all of `d` (of [`NEVER`] if longer: `mul_f64` panics
/// past `Duration::MAX`, which a float near it rounds to).
fn jittered(d: Duration) -> Duration {
    capped(d).mul_f64(0.5 + rand::random::<f64>() / 2.0)
}

/// Connects to every node of `topology`, with `config` for each (a push
/// sender for the subscribing task).
async fn connect_all(
    topology: &Topology,
    timeout: Duration,
    resp3: Option<&redis::AsyncConnectionConfig>,
) -> Result<Vec<redis::aio::MultiplexedConnection>, String> {
    let mut conns = Vec::with_capacity(topology.nodes.len());
    for node in &topology.nodes {
        let mut info = node.clone();
        if resp3.is_some() {
            info.redis.protocol = redis::ProtocolVersion::RESP3;
        }
        let client = redis::Client::open(info).map_err(|e| e.to_string())?;
        let connect = async {
            match resp3 {
                Some(c) => client.get_multiplexed_async_connection_with_config(c).await,
                None => client.get_multiplexed_async_connection().await,
            }
        };
        match tokio::time::timeout(timeout, connect).await {
            Ok(Ok(conn)) => conns.push(conn),
            Ok(Err(e)) => return Err(e.to_string()),
            Err(_) => return Err("connecting to Redis timed out".to_owned()),
        }
    }
    Ok(conns)
}

/// The publishing task: a connection per node (one, or each master of a
/// cluster), a pipeline of `PUBLISH` (`SPUBLISH`) per node and round trip,
/// in order; on failure, back off, learn the topology again and connect
/// again.
async fn publish(
    target: Target,
    config: Arc<RedisLinkConfig>,
    shared: Arc<Shared>,
    mut queue: mpsc::Receiver<(String, Bytes)>,
    status: watch::Sender<LinkState>,
) {
    let mut backoff = config.backoff_first;
    loop {
        let up = async {
            let topology = nodes::discover(&target, config.timeout).await?;
            let conns = connect_all(&topology, config.timeout, None).await?;
            Ok::<_, String>((topology, conns))
        };
        let error = match up.await {
            Ok((topology, conns)) => {
                backoff = config.backoff_first;
                shared.set_part(PUB_UP, Ok(()), &status);
                let error = carry_publishes(&config, &shared, &mut queue, &topology, conns).await;
                shared.set_part(PUB_UP, Err(error.clone()), &status);
                drop_queued(&shared, &mut queue);
                error
            }
            Err(e) => e,
        };
        shared.set_part(PUB_UP, Err(error), &status);
        #[cfg(feature = "tracing")]
        tracing::warn!("Redis link down (publishing)");
        tokio::time::sleep(jittered(backoff)).await;
        // Publishes that raced the state change are not sent either.
        drop_queued(&shared, &mut queue);
        backoff = next_backoff(backoff, config.backoff_max);
    }
}

/// Publishes queued for a connection that failed: not sent again.
fn drop_queued(shared: &Shared, queue: &mut mpsc::Receiver<(String, Bytes)>) {
    while queue.try_recv().is_ok() {
        shared.lost.fetch_add(1, Ordering::Relaxed);
    }
}

/// Sends publishes until a connection fails; why it did.
async fn carry_publishes(
    config: &RedisLinkConfig,
    shared: &Shared,
    queue: &mut mpsc::Receiver<(String, Bytes)>,
    topology: &Topology,
    conns: Vec<redis::aio::MultiplexedConnection>,
) -> String {
    let (publish, _, _) = topology.commands();
    // Room for a batch is made as publishes come (`recv_many` grows it):
    // a batch setting of any size holds only what was queued.
    let mut batch = Vec::new();
    let mut ping = tokio::time::interval(capped(config.ping_interval));
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ping.reset();
    loop {
        tokio::select! {
            n = queue.recv_many(&mut batch, config.batch) => {
                if n == 0 {
                    // Every sender is gone: nothing more will be published.
                    std::future::pending::<()>().await;
                }
                // A pipeline per node, in the batch's order; the nodes'
                // round trips at once.
                let mut pipes: Vec<(redis::Pipeline, u64)> =
                    (0..conns.len()).map(|_| (redis::pipe(), 0)).collect();
                let mut unplaced = 0;
                for (channel, wire) in &batch {
                    match topology.node_of(channel) {
                        Some(node) => {
                            pipes[node].0.cmd(publish).arg(channel).arg(wire.as_ref()).ignore();
                            pipes[node].1 += 1;
                        }
                        None => unplaced += 1,
                    }
                }
                batch.clear();
                let rounds = pipes.into_iter().zip(conns.iter()).filter(|((_, n), _)| *n > 0).map(
                    |((pipe, n), conn)| {
                        let mut conn = conn.clone();
                        async move {
                            let sent = tokio::time::timeout(
                                config.timeout,
                                pipe.query_async::<()>(&mut conn),
                            )
                            .await;
                            (sent, n)
                        }
                    },
                );
                let mut failed = None;
                for (sent, n) in futures_util::future::join_all(rounds).await {
                    match sent {
                        Ok(Ok(())) => {
                            shared.sent.fetch_add(n, Ordering::Relaxed);
                        }
                        Ok(Err(e)) => {
                            shared.lost.fetch_add(n, Ordering::Relaxed);
                            failed.get_or_insert(e.to_string());
                        }
                        Err(_) => {
                            shared.lost.fetch_add(n, Ordering::Relaxed);
                            failed.get_or_insert("a round trip to Redis timed out".to_owned());
                        }
                    }
                }
                if unplaced > 0 {
                    shared.lost.fetch_add(unplaced, Ordering::Relaxed);
                    failed.get_or_insert("a channel's slot has no master".to_owned());
                }
                if let Some(e) = failed {
                    return e;
                }
                ping.reset();
            }
            _ = ping.tick() => {
                for conn in &conns {
                    let ping = redis::cmd("PING");
                    let mut conn = conn.clone();
                    match tokio::time::timeout(config.timeout, ping.query_async::<()>(&mut conn)).await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => return e.to_string(),
                        Err(_) => return "Redis did not answer a ping".to_owned(),
                    }
                }
            }
        }
    }
}

/// The subscribing task: a RESP3 connection per node whose push messages
/// go to the bounded incoming queue; subscribes a topic's channel (on the
/// master of its slot, in a cluster) when the topic gets its first
/// subscriber here, unsubscribes after
/// [`RedisLinkConfig::unsubscribe_delay`] once it has none (if it still
/// has none). On failure (of any node, or a slot moving), back off, learn
/// the topology again, connect again and subscribe every topic with
/// subscribers here.
async fn subscribe(
    target: Target,
    config: Arc<RedisLinkConfig>,
    topics: Topics,
    shared: Arc<Shared>,
    status: watch::Sender<LinkState>,
) {
    let mut backoff = config.backoff_first;
    loop {
        let push = shared.clone();
        let conn_config = redis::AsyncConnectionConfig::new().set_push_sender(
            move |p: redis::PushInfo| -> Result<(), std::convert::Infallible> {
                push.on_push(p);
                Ok(())
            },
        );
        shared.disconnected.store(false, Ordering::Release);
        lock(&shared.unsubscribing).clear();
        let up = async {
            let topology = nodes::discover(&target, config.timeout).await?;
            let conns = connect_all(&topology, config.timeout, Some(&conn_config)).await?;
            Ok::<_, String>((topology, conns))
        };
        let error = match up.await {
            Ok((topology, conns)) => {
                backoff = config.backoff_first;
                shared.set_part(SUB_UP, Ok(()), &status);
                let error = carry_subscriptions(&config, &topics, &shared, &topology, conns).await;
                shared.clear_live();
                error
            }
            Err(e) => e,
        };
        shared.set_part(SUB_UP, Err(error), &status);
        #[cfg(feature = "tracing")]
        tracing::warn!("Redis link down (subscribing)");
        tokio::time::sleep(jittered(backoff)).await;
        backoff = next_backoff(backoff, config.backoff_max);
    }
}

/// Keeps the subscriptions to the topics with subscribers here until a
/// connection fails; why it did.
async fn carry_subscriptions(
    config: &RedisLinkConfig,
    topics: &Topics,
    shared: &Shared,
    topology: &Topology,
    mut conns: Vec<redis::aio::MultiplexedConnection>,
) -> String {
    let (_, subscribe, unsubscribe) = topology.commands();
    let mut subscribed: HashSet<Arc<str>> = HashSet::new();
    // Unsubscribes waiting out their delay, oldest first.
    let mut leaving: VecDeque<(tokio::time::Instant, Arc<str>)> = VecDeque::new();
    // Read before the interest set is locked: the registry's locks are
    // never taken under one of the link's (see the lock rule in
    // `topics`). A topic that comes or goes after this read is noticed
    // again anyway.
    let names = topics.names();
    lock(&shared.interest).extend(names.into_iter().map(Arc::from));
    let mut ping = tokio::time::interval(capped(config.ping_interval));
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ping.reset();
    // One channel per command: redis-rs takes each confirmation as the
    // reply of the command in flight.
    macro_rules! call {
        ($cmd:expr, $topic:expr) => {
            let channel = shared.channel($topic);
            let Some(node) = topology.node_of(&channel) else {
                return "a channel's slot has no master".to_owned();
            };
            let cmd = redis::cmd($cmd).arg(&channel).clone();
            let call = cmd.exec_async(&mut conns[node]);
            match tokio::time::timeout(config.timeout, call).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return e.to_string(),
                Err(_) => return "a round trip to Redis timed out".to_owned(),
            }
        };
    }
    loop {
        if shared.disconnected.load(Ordering::Acquire) {
            return "Redis closed a connection, or a slot moved".to_owned();
        }
        let changed: Vec<Arc<str>> = lock(&shared.interest).drain().collect();
        for topic in changed {
            if topics.has(&topic) {
                // Back before its unsubscribe: it stays.
                leaving.retain(|(_, t)| *t != topic);
                if !subscribed.contains(&topic) {
                    call!(subscribe, &topic);
                    subscribed.insert(topic.clone());
                    shared.subscribes.fetch_add(1, Ordering::Relaxed);
                    shared.set_live(&topic, true);
                }
            } else if subscribed.contains(&topic) && !leaving.iter().any(|(_, t)| *t == topic) {
                leaving.push_back((
                    tokio::time::Instant::now() + capped(config.unsubscribe_delay),
                    topic,
                ));
            }
        }
        let now = tokio::time::Instant::now();
        while leaving.front().is_some_and(|(at, _)| *at <= now) {
            let (_, topic) = leaving.pop_front().expect("checked above");
            // Not live first, then the check: a subscriber that comes
            // after the check waits for the subscription that its coming
            // asks for, never for one about to go.
            shared.set_live(&topic, false);
            if topics.has(&topic) {
                shared.set_live(&topic, true);
                continue;
            }
            // Its confirmation comes as a push too: not a slot moving.
            lock(&shared.unsubscribing).insert(shared.channel(&topic).into_bytes());
            call!(unsubscribe, &topic);
            subscribed.remove(&topic);
            shared.unsubscribes.fetch_add(1, Ordering::Relaxed);
        }
        let next = leaving.front().map(|(at, _)| *at);
        tokio::select! {
            () = shared.interest_changed.notified() => {}
            () = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => {}
            _ = ping.tick() => {
                for conn in conns.iter_mut() {
                    let ping = redis::cmd("PING");
                    match tokio::time::timeout(config.timeout, ping.query_async::<()>(conn)).await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => return e.to_string(),
                        Err(_) => return "Redis did not answer a ping".to_owned(),
                    }
                }
            }
        }
    }
}

/// The delivering task: hands what Redis pushed to this process's
/// subscribers, apart from both connections, so that neither waits for
/// the other or for the registry.
async fn deliver(config: Arc<RedisLinkConfig>, topics: Topics, shared: Arc<Shared>) {
    loop {
        shared.incoming_ready.notified().await;
        loop {
            // Its bytes stay counted until each is delivered (see
            // `Pending::bytes`).
            let batch = std::mem::take(&mut lock(&shared.incoming).items);
            if batch.is_empty() {
                break;
            }
            for (channel, payload) in batch {
                let size = channel.len() + payload.len();
                let topic = channel.strip_prefix(shared.prefix.as_bytes());
                match (
                    topic,
                    decode_owned(Bytes::from(payload), config.max_message_size),
                ) {
                    // This link's own publish, delivered here already.
                    (Some(_), Some(i)) if i.origin == shared.origin => {}
                    (Some(topic), Some(i)) if topic == i.topic.as_bytes() => {
                        let prepared =
                            PreparedMessage::new(&i.msg).expect("data messages always prepare");
                        topics.deliver(&i.topic, &prepared, None);
                        shared.received.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {
                        shared.malformed.fetch_add(1, Ordering::Relaxed);
                    }
                }
                lock(&shared.incoming).bytes -= size;
            }
            tokio::task::yield_now().await;
        }
    }
}

#[cfg(test)]
#[path = "redis_tests.rs"]
mod tests;
