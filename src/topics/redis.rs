//! Topics across servers through Redis pub/sub (feature `redis`).
//!
//! [`Topics::link_redis`] links a process's registry to every other
//! process linked to the same Redis and channel. Each publish is delivered
//! to this process's subscribers at once, as without a link, and queued
//! for Redis; every other server receives it from its subscription to the
//! channel and delivers it to its own subscribers, encoding the frame once
//! per server. This is the shape of Phoenix PubSub's Redis adapter: one
//! channel, every server reads it, topics are sorted out locally.
//!
//! What holds, and what does not:
//!
//! - **Exactly once while the link is up.** A server skips its own
//!   publishes when Redis hands them back (each carries the publishing
//!   link's random id), and a batch that may have reached Redis is never
//!   sent again.
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
//!   here.
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

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::StreamExt;
use tokio::sync::{mpsc, watch};

use crate::proto::header::OpCode;
use crate::proto::message::{Message, PreparedMessage};
use crate::proto::text::Utf8Bytes;
use crate::topics::{Link, Remote, Topics};

/// Settings of a Redis link.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RedisLinkConfig {
    /// The Redis channel every server of one deployment publishes to and
    /// reads. Default `wavesock:topics`.
    pub channel: String,
    /// Publishes that may wait for Redis. Default 8 192.
    pub queue: usize,
    /// Most publishes sent in one round trip (one pipeline). Default 256.
    pub batch: usize,
    /// The first wait before reconnecting. Default 100 ms.
    pub backoff_first: Duration,
    /// The longest wait before reconnecting. Default 5 s.
    pub backoff_max: Duration,
    /// A connection attempt or round trip that takes longer fails the
    /// link. Default 3 s.
    pub timeout: Duration,
    /// An idle link pings Redis this often. Default 5 s.
    pub ping_interval: Duration,
    /// Messages from Redis larger than this (payload and topic) are
    /// dropped and counted as malformed. Default 16 MiB.
    pub max_message_size: usize,
}

impl Default for RedisLinkConfig {
    fn default() -> Self {
        RedisLinkConfig {
            channel: "wavesock:topics".to_owned(),
            queue: 8192,
            batch: 256,
            backoff_first: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
            timeout: Duration::from_secs(3),
            ping_interval: Duration::from_secs(5),
            max_message_size: 16 << 20,
        }
    }
}

impl RedisLinkConfig {
    /// Sets [`channel`](Self::channel).
    pub fn channel(mut self, channel: impl Into<String>) -> Self {
        self.channel = channel.into();
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
    /// Publishes waiting or in flight when the connection failed: they may
    /// or may not have reached Redis, and are not sent again.
    pub lost: u64,
    /// Messages on the channel that were not a publish of a wavesock link
    /// (or too large, or a text message that was not UTF-8).
    pub malformed: u64,
    /// Times the link came up (the first time included).
    pub connects: u64,
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
}

const UP: u8 = 1;

/// What the registry's publishes and the link's task share.
#[derive(Debug)]
struct Shared {
    origin: [u8; 16],
    state: AtomicU8,
    queue: mpsc::Sender<Bytes>,
    sent: AtomicU64,
    received: AtomicU64,
    dropped_down: AtomicU64,
    dropped_full: AtomicU64,
    lost: AtomicU64,
    malformed: AtomicU64,
    connects: AtomicU64,
}

impl Shared {
    fn new(queue: mpsc::Sender<Bytes>) -> Self {
        Shared {
            origin: rand::random(),
            state: AtomicU8::new(0),
            queue,
            sent: AtomicU64::new(0),
            received: AtomicU64::new(0),
            dropped_down: AtomicU64::new(0),
            dropped_full: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            malformed: AtomicU64::new(0),
            connects: AtomicU64::new(0),
        }
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
        match self.queue.try_send(wire) {
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
}

/// A registry's link to Redis, from [`Topics::link_redis`]. Clones share
/// it; when the last is dropped the link stops and publishes reach this
/// process only.
#[derive(Debug, Clone)]
#[must_use = "dropping the link stops it"]
pub struct RedisLink {
    shared: Arc<Shared>,
    status: watch::Receiver<LinkState>,
    _task: Arc<AbortOnDrop>,
}

/// Stops the link's task when the last [`RedisLink`] goes.
#[derive(Debug)]
struct AbortOnDrop(
    tokio::task::AbortHandle,
    Arc<Shared>,
    watch::Sender<LinkState>,
);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
        self.1.state.store(0, Ordering::Release);
        self.2.send_replace(LinkState::Stopped);
    }
}

impl RedisLink {
    /// The link's state, as it changes.
    pub fn status(&self) -> watch::Receiver<LinkState> {
        self.status.clone()
    }

    /// Whether the link is up now.
    pub fn is_up(&self) -> bool {
        self.shared.state.load(Ordering::Acquire) == UP
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
            lost: get(&s.lost),
            malformed: get(&s.malformed),
            connects: get(&s.connects),
        }
    }
}

impl Topics {
    /// Links this registry to every other linked to the same Redis
    /// channel; see the [module docs](crate::topics::redis). Starts
    /// connecting in a task on the current Tokio runtime and returns at
    /// once: until [`RedisLink::status`] says [`Up`](LinkState::Up),
    /// publishes reach this process only.
    pub fn link_redis(
        &self,
        client: redis::Client,
        config: RedisLinkConfig,
    ) -> Result<RedisLink, LinkError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| LinkError::NoRuntime)?;
        let (queue, rx) = mpsc::channel(config.queue.max(1));
        let shared = Arc::new(Shared::new(queue));
        if !self.set_link(Box::new(shared.clone())) {
            return Err(LinkError::AlreadyLinked);
        }
        let (status_tx, status) = watch::channel(LinkState::Connecting);
        let task = runtime.spawn(run(
            client,
            config,
            self.clone(),
            shared.clone(),
            rx,
            status_tx.clone(),
        ));
        Ok(RedisLink {
            shared: shared.clone(),
            status,
            _task: Arc::new(AbortOnDrop(task.abort_handle(), shared, status_tx)),
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

fn decode(wire: &[u8], max: usize) -> Option<Incoming> {
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
    let payload = Bytes::copy_from_slice(&rest[topic_len..]);
    let msg = match op {
        1 => Message::Text(Utf8Bytes::try_from(payload).ok()?),
        2 => Message::Binary(payload),
        _ => return None,
    };
    Some(Incoming { origin, topic, msg })
}

/// Between half and all of `d`.
fn jittered(d: Duration) -> Duration {
    d.mul_f64(0.5 + rand::random::<f64>() / 2.0)
}

/// The link's task: connect, carry publishes both ways, and on failure
/// back off and connect again, until the link is dropped.
async fn run(
    client: redis::Client,
    config: RedisLinkConfig,
    topics: Topics,
    shared: Arc<Shared>,
    mut queue: mpsc::Receiver<Bytes>,
    status: watch::Sender<LinkState>,
) {
    let mut backoff = config.backoff_first;
    loop {
        status.send_replace(LinkState::Connecting);
        let error = match connect(&client, &config).await {
            Ok((publisher, subscriber)) => {
                backoff = config.backoff_first;
                shared.connects.fetch_add(1, Ordering::Relaxed);
                shared.state.store(UP, Ordering::Release);
                status.send_replace(LinkState::Up);
                let error =
                    carry(&config, &topics, &shared, &mut queue, publisher, subscriber).await;
                shared.state.store(0, Ordering::Release);
                drop_queued(&shared, &mut queue);
                error
            }
            Err(e) => e.to_string(),
        };
        #[cfg(feature = "tracing")]
        tracing::warn!(%error, "Redis link down");
        status.send_replace(LinkState::Down(error));
        tokio::time::sleep(jittered(backoff)).await;
        // Publishes that raced the state change are not sent either.
        drop_queued(&shared, &mut queue);
        backoff = (backoff * 2).min(config.backoff_max);
    }
}

/// Publishes queued for a connection that failed: not sent again.
fn drop_queued(shared: &Shared, queue: &mut mpsc::Receiver<Bytes>) {
    while queue.try_recv().is_ok() {
        shared.lost.fetch_add(1, Ordering::Relaxed);
    }
}

type Conns = (redis::aio::MultiplexedConnection, redis::aio::PubSub);

async fn connect(client: &redis::Client, config: &RedisLinkConfig) -> redis::RedisResult<Conns> {
    let connect = async {
        let publisher = client.get_multiplexed_async_connection().await?;
        let mut subscriber = client.get_async_pubsub().await?;
        subscriber.subscribe(&config.channel).await?;
        Ok((publisher, subscriber))
    };
    match tokio::time::timeout(config.timeout, connect).await {
        Ok(r) => r,
        Err(_) => Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into()),
    }
}

/// Carries publishes both ways until the connection fails; why it did.
async fn carry(
    config: &RedisLinkConfig,
    topics: &Topics,
    shared: &Shared,
    queue: &mut mpsc::Receiver<Bytes>,
    mut publisher: redis::aio::MultiplexedConnection,
    subscriber: redis::aio::PubSub,
) -> String {
    let (mut sink, mut incoming) = subscriber.split();
    let mut batch = Vec::with_capacity(config.batch);
    let mut ping = tokio::time::interval(config.ping_interval);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ping.reset();
    loop {
        tokio::select! {
            n = queue.recv_many(&mut batch, config.batch) => {
                if n == 0 {
                    // Every sender is gone: nothing more will be published.
                    return "stopped".to_owned();
                }
                // One round trip for the whole batch, in order.
                let mut pipe = redis::pipe();
                for wire in &batch {
                    pipe.publish(&config.channel, wire.as_ref()).ignore();
                }
                let sent = tokio::time::timeout(
                    config.timeout,
                    pipe.query_async::<()>(&mut publisher),
                )
                .await;
                let count = batch.len() as u64;
                batch.clear();
                match sent {
                    Ok(Ok(())) => {
                        shared.sent.fetch_add(count, Ordering::Relaxed);
                        ping.reset();
                    }
                    Ok(Err(e)) => {
                        shared.lost.fetch_add(count, Ordering::Relaxed);
                        return e.to_string();
                    }
                    Err(_) => {
                        shared.lost.fetch_add(count, Ordering::Relaxed);
                        return "a round trip to Redis timed out".to_owned();
                    }
                }
            }
            msg = incoming.next() => {
                let Some(msg) = msg else {
                    return "Redis closed the subscription".to_owned();
                };
                match decode(msg.get_payload_bytes(), config.max_message_size) {
                    // This link's own publish, delivered here already.
                    Some(i) if i.origin == shared.origin => {}
                    Some(i) => {
                        let prepared =
                            PreparedMessage::new(&i.msg).expect("data messages always prepare");
                        topics.deliver(&i.topic, &prepared, None);
                        shared.received.fetch_add(1, Ordering::Relaxed);
                    }
                    None => {
                        shared.malformed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            _ = ping.tick() => {
                // Both connections: either may be the one that is gone.
                let alive = async {
                    redis::cmd("PING").query_async::<()>(&mut publisher).await?;
                    sink.ping::<()>().await
                };
                match tokio::time::timeout(config.timeout, alive).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => return e.to_string(),
                    Err(_) => return "Redis did not answer a ping".to_owned(),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prepared(msg: Message) -> PreparedMessage {
        PreparedMessage::new(&msg).unwrap()
    }

    #[test]
    fn publishes_round_trip_through_the_wire_form() {
        let origin = [7u8; 16];
        for msg in [
            Message::text("héllo"),
            Message::binary(vec![0u8, 255, 1]),
            Message::text(""),
        ] {
            let wire = encode(&origin, "room/1", &prepared(msg.clone())).unwrap();
            let got = decode(&wire, 1 << 20).unwrap();
            assert_eq!(
                got,
                Incoming {
                    origin,
                    topic: "room/1".into(),
                    msg
                }
            );
        }
    }

    #[test]
    fn control_messages_do_not_travel() {
        let ping = prepared(Message::Ping(Bytes::from_static(b"x")));
        assert_eq!(encode(&[0; 16], "t", &ping), None);
    }

    #[test]
    fn anything_else_on_the_channel_is_refused() {
        let origin = [1u8; 16];
        let good = encode(&origin, "t", &prepared(Message::text("abc"))).unwrap();
        assert!(decode(&good, 4).is_some());
        // Too large for the limit (topic and payload count).
        assert_eq!(decode(&good, 3), None);
        // Truncated, another version, an unknown opcode, a topic longer
        // than the message, a topic or text that is not UTF-8.
        assert_eq!(decode(&good[..HEAD - 1], 1 << 20), None);
        let mut bad = good.to_vec();
        bad[0] = 2;
        assert_eq!(decode(&bad, 1 << 20), None);
        let mut bad = good.to_vec();
        bad[17] = 9;
        assert_eq!(decode(&bad, 1 << 20), None);
        let mut bad = good.to_vec();
        bad[18..22].copy_from_slice(&100u32.to_be_bytes());
        assert_eq!(decode(&bad, 1 << 20), None);
        let mut bad = good.to_vec();
        bad[HEAD] = 0xff;
        assert_eq!(decode(&bad, 1 << 20), None);
        let mut bad = good.to_vec();
        *bad.last_mut().unwrap() = 0xff;
        assert_eq!(decode(&bad, 1 << 20), None);
        assert_eq!(decode(b"hello from redis-cli", 1 << 20), None);
    }

    #[test]
    fn a_link_that_is_not_up_drops_and_counts() {
        let (queue, mut rx) = mpsc::channel(1);
        let shared = Arc::new(Shared::new(queue));
        let msg = prepared(Message::text("x"));
        assert_eq!(shared.send("t", &msg), Remote::Dropped);
        assert_eq!(shared.dropped_down.load(Ordering::Relaxed), 1);
        shared.state.store(UP, Ordering::Release);
        assert_eq!(shared.send("t", &msg), Remote::Queued);
        assert_eq!(
            shared.send("t", &msg),
            Remote::Dropped,
            "queue of 1 is full"
        );
        assert_eq!(shared.dropped_full.load(Ordering::Relaxed), 1);
        let wire = rx.try_recv().unwrap();
        assert_eq!(decode(&wire, 100).unwrap().topic, "t");
        drop_queued(&shared, &mut rx);
        assert_eq!(shared.lost.load(Ordering::Relaxed), 0, "nothing was left");
        assert_eq!(shared.send("t", &msg), Remote::Queued);
        drop_queued(&shared, &mut rx);
        assert_eq!(shared.lost.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn backoff_is_jittered_within_half_and_all() {
        let d = Duration::from_millis(100);
        let waits: Vec<_> = (0..100).map(|_| jittered(d)).collect();
        assert!(waits.iter().all(|j| *j >= d / 2 && *j <= d), "{waits:?}");
        assert!(waits.iter().any(|j| *j != waits[0]), "not all the same");
    }

    #[test]
    fn linking_needs_a_runtime_and_happens_once() {
        let client = redis::Client::open("redis://127.0.0.1:1/").unwrap();
        let topics = Topics::new();
        assert!(matches!(
            topics.link_redis(client.clone(), RedisLinkConfig::default()),
            Err(LinkError::NoRuntime)
        ));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let link = topics
                .link_redis(client.clone(), RedisLinkConfig::default())
                .unwrap();
            assert!(matches!(
                topics.link_redis(client, RedisLinkConfig::default()),
                Err(LinkError::AlreadyLinked)
            ));
            // Nothing listens on port 1: the link reports it is down.
            let mut status = link.status();
            let down = status
                .wait_for(|s| matches!(s, LinkState::Down(_)))
                .await
                .map(|s| s.clone());
            assert!(matches!(down, Ok(LinkState::Down(_))));
            let p = topics.publish("t", &prepared(Message::text("x")));
            assert_eq!(p.remote, Remote::Dropped);
            assert_eq!(link.stats().dropped_down, 1);
            assert!(!link.is_up());
            let watcher = link.status();
            drop(link);
            assert_eq!(*watcher.borrow(), LinkState::Stopped);
        });
    }
}
