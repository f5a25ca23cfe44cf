//! A Redis link's settings, and the bounds every wait of the link keeps.

use std::time::Duration;

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
    /// messages are dropped and counted ([`LinkStats::dropped_incoming`](super::LinkStats::dropped_incoming)),
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
    /// [`Topics::link_redis`](crate::topics::Topics::link_redis) calls it. Durations of any length work:
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
pub(super) const NEVER: Duration = Duration::from_secs(30 * 365 * 24 * 3600);

/// `d`, or [`NEVER`] if longer: a wait of any setting, safe to add to now.
pub(super) fn capped(d: Duration) -> Duration {
    d.min(NEVER)
}

/// The wait after `backoff`: twice it, at most `max`, never overflowing.
pub(super) fn next_backoff(backoff: Duration, max: Duration) -> Duration {
    backoff.saturating_mul(2).min(max)
}

/// Why [`Topics::link_redis`](crate::topics::Topics::link_redis) made no link.
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
