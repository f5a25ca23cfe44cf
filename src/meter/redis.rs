//! The Redis link: whether it is up, how often it came up, what it sent,
//! lost and dropped, what it received and dropped, the bytes from Redis
//! waiting to be delivered, and how long its publishes took to be
//! confirmed. Recorded with none of the link's locks held.

#[cfg(feature = "metrics")]
use std::sync::OnceLock;
use std::time::Duration;

#[cfg(feature = "metrics")]
use metrics::{Counter, Gauge, Histogram, Unit};

/// Links up now: 1 while a process's one link is up (gauge).
pub const REDIS_UP: &str = "wavesock_redis_links_up";
/// Times the link came up, the first included (counter).
pub const REDIS_CONNECTS: &str = "wavesock_redis_connects_total";
/// Publishes to other servers, by `outcome`: `sent` (Redis confirmed
/// them), `lost` (waiting or in flight when a connection failed),
/// `dropped_down` (the link was not up), `dropped_full` (its queue was)
/// (counter).
pub const REDIS_PUBLISHES: &str = "wavesock_redis_publishes_total";
/// Publishes from other servers delivered here (counter).
pub const REDIS_RECEIVED: &str = "wavesock_redis_received_total";
/// Messages from Redis dropped: `incoming_full` (the bytes waiting to be
/// delivered were at their limit), `malformed` (counter; label
/// `reason`).
pub const REDIS_INCOMING_DROPPED: &str = "wavesock_redis_incoming_dropped_total";
/// Bytes from Redis waiting to be delivered (gauge).
pub const REDIS_INCOMING_BYTES: &str = "wavesock_redis_incoming_bytes";
/// A batch of publishes' round trip to Redis, to its confirmation
/// (histogram, seconds).
pub const REDIS_CONFIRM: &str = "wavesock_redis_confirmation_seconds";

/// What became of publishes to other servers.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Outcome {
    Sent,
    Lost,
    DroppedDown,
    DroppedFull,
}

/// Why a message from Redis was dropped.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Incoming {
    Full,
    Malformed,
}

#[cfg(feature = "metrics")]
struct Handles {
    up: Gauge,
    connects: Counter,
    publishes: [Counter; 4],
    received: Counter,
    dropped: [Counter; 2],
    incoming: Gauge,
    confirm: Histogram,
}

#[cfg(feature = "metrics")]
fn handles() -> &'static Handles {
    static HANDLES: OnceLock<Handles> = OnceLock::new();
    HANDLES.get_or_init(|| Handles {
        up: metrics::gauge!(REDIS_UP),
        connects: metrics::counter!(REDIS_CONNECTS),
        publishes: ["sent", "lost", "dropped_down", "dropped_full"]
            .map(|o| metrics::counter!(REDIS_PUBLISHES, "outcome" => o)),
        received: metrics::counter!(REDIS_RECEIVED),
        dropped: ["incoming_full", "malformed"]
            .map(|r| metrics::counter!(REDIS_INCOMING_DROPPED, "reason" => r)),
        incoming: metrics::gauge!(REDIS_INCOMING_BYTES),
        confirm: metrics::histogram!(REDIS_CONFIRM),
    })
}

/// The link came up (`true`, counted as a connect) or went down.
#[inline]
#[allow(unused_variables)]
pub(crate) fn link_up(up: bool) {
    #[cfg(feature = "metrics")]
    {
        let h = handles();
        if up {
            h.up.increment(1.0);
            h.connects.increment(1);
        } else {
            h.up.decrement(1.0);
        }
    }
}

/// `n` publishes met `outcome`.
#[inline]
#[allow(unused_variables)]
pub(crate) fn publishes(outcome: Outcome, n: u64) {
    #[cfg(feature = "metrics")]
    handles().publishes[outcome as usize].increment(n);
}

/// A publish from another server was delivered here.
#[inline]
pub(crate) fn received() {
    #[cfg(feature = "metrics")]
    handles().received.increment(1);
}

/// A message from Redis was dropped.
#[inline]
#[allow(unused_variables)]
pub(crate) fn incoming_dropped(why: Incoming) {
    #[cfg(feature = "metrics")]
    handles().dropped[why as usize].increment(1);
}

/// `change` more bytes from Redis wait to be delivered (fewer if
/// negative).
#[inline]
#[allow(unused_variables)]
pub(crate) fn incoming_bytes(change: i64) {
    #[cfg(feature = "metrics")]
    handles().incoming.increment(change as f64);
}

/// A batch of publishes was confirmed after `took`.
#[inline]
#[allow(unused_variables)]
pub(crate) fn confirmed(took: Duration) {
    #[cfg(feature = "metrics")]
    handles().confirm.record(took.as_secs_f64());
}

#[cfg(feature = "metrics")]
pub(super) fn describe_all() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_gauge!(
        REDIS_UP,
        Unit::Count,
        "Redis links up (1 while a process's link is)."
    );
    describe_counter!(REDIS_CONNECTS, Unit::Count, "Times the Redis link came up.");
    describe_counter!(
        REDIS_PUBLISHES,
        Unit::Count,
        "Publishes to other servers, by outcome."
    );
    describe_counter!(
        REDIS_RECEIVED,
        Unit::Count,
        "Publishes from other servers delivered here."
    );
    describe_counter!(
        REDIS_INCOMING_DROPPED,
        Unit::Count,
        "Messages from Redis dropped, by reason."
    );
    describe_gauge!(
        REDIS_INCOMING_BYTES,
        Unit::Bytes,
        "Bytes from Redis waiting to be delivered."
    );
    describe_histogram!(
        REDIS_CONFIRM,
        Unit::Seconds,
        "A batch of publishes' round trip to Redis."
    );
}
