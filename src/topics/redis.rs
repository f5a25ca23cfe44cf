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
//!   now or later. Such publishes return [`Remote::Dropped`](crate::topics::Remote::Dropped) and are
//!   counted in [`LinkStats`]; so are publishes queued or in flight when
//!   the connection failed (they may or may not have reached Redis).
//! - **Bounded.** At most [`RedisLinkConfig::queue`] publishes wait for
//!   Redis; past that, a publish is dropped for other servers
//!   ([`Remote::Dropped`](crate::topics::Remote::Dropped), [`LinkStats::dropped_full`]) and still delivered
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

use crate::topics::redis::nodes::Target;
use crate::topics::redis::shared::{Shared, UP, lock};
use crate::topics::redis::tasks::{deliver, publish, subscribe};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{mpsc, watch};

use crate::topics::Topics;

mod config;
mod nodes;
mod shared;
mod tasks;
mod wire;

pub use config::LinkError;
pub use config::RedisLinkConfig;
pub use shared::{LinkState, LinkStats};

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
        if self.1.state.swap(0, Ordering::AcqRel) == shared::UP {
            crate::meter::redis_link_up(false);
        }
        // What Redis sent and the stopped tasks never delivered.
        let left = lock(&self.1.incoming).bytes;
        crate::meter::redis_incoming_bytes(-(left as i64));
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

#[cfg(test)]
#[path = "redis_tests.rs"]
mod tests;
