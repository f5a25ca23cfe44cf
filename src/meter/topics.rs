//! Topics: how many there are and how many subscribe, what is published,
//! delivered and dropped. Recorded with none of the registry's locks held
//! (its lock rule): the recorder is the application's code.

#[cfg(feature = "metrics")]
use std::sync::OnceLock;

#[cfg(feature = "metrics")]
use metrics::{Counter, Gauge, Unit};

/// Topics with a subscriber in this process (gauge).
pub const TOPICS: &str = "wavesock_topics";
/// Subscriptions: hub connections' and receivers' (gauge).
pub const SUBSCRIPTIONS: &str = "wavesock_topic_subscriptions";
/// Publishes, from this process and from the link (counter).
pub const PUBLISHES: &str = "wavesock_topic_publishes_total";
/// Publishes queued for a subscriber in this process (counter).
pub const DELIVERIES: &str = "wavesock_topic_deliveries_total";
/// Deliveries dropped, by `reason`: `inbox_full` (an engine too far
/// behind missed a publish: counted once for each of its subscribers the
/// publish was for), `backpressure`
/// (a hub subscriber over its backpressure limit: dropped under the
/// `Drop` policy, or the publish that cut it and any after under
/// `Close`), `lagged` (a receiver that fell behind skipped it) (counter).
pub const DROPS: &str = "wavesock_topic_drops_total";

/// Why a delivery was dropped, as the `reason` label gives it.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(all(feature = "metrics", feature = "hub")), allow(dead_code))]
pub(crate) enum Drop {
    InboxFull,
    Backpressure,
    Lagged,
}

#[cfg(feature = "metrics")]
struct Handles {
    topics: Gauge,
    subscriptions: Gauge,
    publishes: Counter,
    deliveries: Counter,
    drops: [Counter; 3],
}

#[cfg(feature = "metrics")]
fn handles() -> &'static Handles {
    static HANDLES: OnceLock<Handles> = OnceLock::new();
    HANDLES.get_or_init(|| Handles {
        topics: metrics::gauge!(TOPICS),
        subscriptions: metrics::gauge!(SUBSCRIPTIONS),
        publishes: metrics::counter!(PUBLISHES),
        deliveries: metrics::counter!(DELIVERIES),
        drops: ["inbox_full", "backpressure", "lagged"]
            .map(|reason| metrics::counter!(DROPS, "reason" => reason)),
    })
}

/// A topic got its first subscriber (`+1`) or lost its last (`-1`).
#[inline]
#[allow(unused_variables)]
pub(crate) fn topics(change: i8) {
    #[cfg(feature = "metrics")]
    handles().topics.increment(f64::from(change));
}

/// A subscription began (`+1`) or ended (`-n`).
#[inline]
#[allow(unused_variables)]
pub(crate) fn subscriptions(change: i64) {
    #[cfg(feature = "metrics")]
    handles().subscriptions.increment(change as f64);
}

/// A publish, queued for `reached` subscribers in this process.
#[inline]
#[allow(unused_variables)]
pub(crate) fn published(reached: usize) {
    #[cfg(feature = "metrics")]
    {
        let h = handles();
        h.publishes.increment(1);
        h.deliveries.increment(reached as u64);
    }
}

/// `n` deliveries dropped, for `why`.
#[inline]
#[allow(unused_variables)]
pub(crate) fn dropped(why: Drop, n: u64) {
    #[cfg(feature = "metrics")]
    handles().drops[why as usize].increment(n);
}

#[cfg(feature = "metrics")]
pub(super) fn describe_all() {
    use metrics::{describe_counter, describe_gauge};
    describe_gauge!(
        TOPICS,
        Unit::Count,
        "Topics with a subscriber in this process."
    );
    describe_gauge!(
        SUBSCRIPTIONS,
        Unit::Count,
        "Subscriptions of hub connections and topic receivers."
    );
    describe_counter!(
        PUBLISHES,
        Unit::Count,
        "Publishes, from this process and from the Redis link."
    );
    describe_counter!(
        DELIVERIES,
        Unit::Count,
        "Publishes queued for a subscriber in this process."
    );
    describe_counter!(DROPS, Unit::Count, "Deliveries dropped, by reason.");
}
