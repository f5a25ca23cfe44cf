//! The hub's turns: how long each took, how many connections it served,
//! how many deliveries it made, and how often it stopped with deliveries
//! left for the next.

use std::time::Instant;

#[cfg(feature = "metrics")]
use metrics::{Counter, Histogram, SharedString, Unit};

/// A hub turn's duration (histogram, seconds; label `engine`).
pub const TURN_DURATION: &str = "wavesock_hub_turn_duration_seconds";
/// Connections a hub turn served (histogram; label `engine`).
pub const TURN_CONNECTIONS: &str = "wavesock_hub_turn_connections";
/// Topic deliveries a hub turn made, for turns that made any (histogram;
/// label `engine`).
pub const TURN_DELIVERIES: &str = "wavesock_hub_turn_deliveries";
/// Hub turns that ended at their cap of deliveries with more left for
/// the next (counter; label `engine`).
pub const TURNS_CUT: &str = "wavesock_hub_turns_cut_total";

/// One hub engine's turn metrics. Without the feature: nothing.
#[derive(Debug)]
pub(crate) struct TurnMeter {
    #[cfg(feature = "metrics")]
    duration: Histogram,
    #[cfg(feature = "metrics")]
    connections: Histogram,
    #[cfg(feature = "metrics")]
    deliveries: Histogram,
    #[cfg(feature = "metrics")]
    cut: Counter,
}

impl TurnMeter {
    #[allow(unused_variables)]
    pub(crate) fn new(engine: u32) -> Self {
        #[cfg(feature = "metrics")]
        {
            let label = [("engine", SharedString::from(format!("hub-{engine}")))];
            TurnMeter {
                duration: metrics::histogram!(TURN_DURATION, &label),
                connections: metrics::histogram!(TURN_CONNECTIONS, &label),
                deliveries: metrics::histogram!(TURN_DELIVERIES, &label),
                cut: metrics::counter!(TURNS_CUT, &label),
            }
        }
        #[cfg(not(feature = "metrics"))]
        TurnMeter {}
    }

    /// When a turn begins (a clock read only with the feature).
    #[inline]
    pub(crate) fn begin(&self) -> Option<Instant> {
        #[cfg(feature = "metrics")]
        return Some(Instant::now());
        #[cfg(not(feature = "metrics"))]
        None
    }

    /// A turn begun at `began` served `connections` and made `deliveries`,
    /// with more left (`cut`). A turn that did neither (a timer, a wake-up
    /// for nothing) is not recorded.
    #[inline]
    #[allow(unused_variables)]
    pub(crate) fn end(
        &self,
        began: Option<Instant>,
        connections: usize,
        deliveries: usize,
        cut: bool,
    ) {
        #[cfg(feature = "metrics")]
        {
            if connections == 0 && deliveries == 0 {
                return;
            }
            if let Some(began) = began {
                self.duration.record(began.elapsed().as_secs_f64());
            }
            self.connections.record(connections as f64);
            // Turns that delivered: an echo's turns would only add zeros,
            // a record each.
            if deliveries != 0 {
                self.deliveries.record(deliveries as f64);
            }
            if cut {
                self.cut.increment(1);
            }
        }
    }
}

#[cfg(feature = "metrics")]
pub(super) fn describe_all() {
    use metrics::{describe_counter, describe_histogram};
    describe_histogram!(
        TURN_DURATION,
        Unit::Seconds,
        "A hub engine's turn, start to end."
    );
    describe_histogram!(
        TURN_CONNECTIONS,
        Unit::Count,
        "Connections a hub turn served."
    );
    describe_histogram!(
        TURN_DELIVERIES,
        Unit::Count,
        "Topic deliveries a hub turn made, for turns that made any."
    );
    describe_counter!(
        TURNS_CUT,
        Unit::Count,
        "Hub turns that stopped at their cap with deliveries left for the next."
    );
}
