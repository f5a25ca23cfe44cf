//! Pressure: connections whose peer does not take what it is sent, and the
//! memory budget: its bytes in use, and the waits for it.

#[cfg(feature = "metrics")]
use std::sync::OnceLock;

#[cfg(feature = "metrics")]
use metrics::{Counter, Gauge, Unit};

use crate::MemoryBudget;

/// Connections whose transport took less than they had to write and waits
/// for the peer to read (gauge).
pub const WRITE_BLOCKED: &str = "wavesock_write_blocked_connections";
/// Bytes write-blocked connections have waiting for their peers, as of
/// their last write (gauge).
pub const WRITE_BLOCKED_BYTES: &str = "wavesock_write_blocked_bytes";
/// Bytes in use of the memory budgets, as of the last time an engine
/// looked (gauge; see [`record_budget`]).
pub const BUDGET_IN_USE: &str = "wavesock_budget_in_use_bytes";
/// The memory budgets' limits (gauge): a server's one budget's.
pub const BUDGET_LIMIT: &str = "wavesock_budget_limit_bytes";
/// Times a connection stopped reading to wait for memory budget (counter).
pub const BUDGET_WAITS: &str = "wavesock_budget_waits_total";

#[cfg(feature = "metrics")]
struct Handles {
    blocked: Gauge,
    blocked_bytes: Gauge,
    in_use: Gauge,
    limit: Gauge,
    waits: Counter,
}

#[cfg(feature = "metrics")]
fn handles() -> &'static Handles {
    static HANDLES: OnceLock<Handles> = OnceLock::new();
    HANDLES.get_or_init(|| Handles {
        blocked: metrics::gauge!(WRITE_BLOCKED),
        blocked_bytes: metrics::gauge!(WRITE_BLOCKED_BYTES),
        in_use: metrics::gauge!(BUDGET_IN_USE),
        limit: metrics::gauge!(BUDGET_LIMIT),
        waits: metrics::counter!(BUDGET_WAITS),
    })
}

/// Connections became write-blocked (`connections > 0`) or were unblocked
/// or ended blocked (`< 0`); the bytes they have waiting changed by
/// `bytes`.
#[cfg(feature = "metrics")]
#[inline]
pub(crate) fn write_blocked(connections: i64, bytes: i64) {
    let h = handles();
    if connections != 0 {
        h.blocked.increment(connections as f64);
    }
    if bytes != 0 {
        h.blocked_bytes.increment(bytes as f64);
    }
}

/// Records a budget's use when dropped: the last field of what holds
/// memory under it, so that the gauge follows what the other fields gave
/// back as they went.
#[cfg(feature = "metrics")]
#[derive(Debug)]
pub(crate) struct BudgetAfter(pub(crate) Option<MemoryBudget>);

#[cfg(feature = "metrics")]
impl Drop for BudgetAfter {
    fn drop(&mut self) {
        if let Some(budget) = &self.0 {
            record_budget(budget);
        }
    }
}

/// One connection's share of the write-blocked gauges. Without the
/// feature: nothing.
#[derive(Debug, Default)]
pub(crate) struct Blocked {
    #[cfg(feature = "metrics")]
    on: bool,
    #[cfg(feature = "metrics")]
    bytes: usize,
}

#[cfg_attr(not(any(feature = "metrics", feature = "hub")), allow(dead_code))]
impl Blocked {
    /// The transport took less than there was: `waiting` bytes wait for
    /// the peer. The gauges' change: connections, bytes.
    #[inline]
    #[allow(unused_variables)]
    pub(crate) fn blocked(&mut self, waiting: usize) -> (i64, i64) {
        #[cfg(feature = "metrics")]
        {
            let connections = i64::from(!std::mem::replace(&mut self.on, true));
            let bytes = waiting as i64 - std::mem::replace(&mut self.bytes, waiting) as i64;
            (connections, bytes)
        }
        #[cfg(not(feature = "metrics"))]
        (0, 0)
    }

    /// All was written, or the connection ended: its share taken back.
    #[inline]
    pub(crate) fn cleared(&mut self) -> (i64, i64) {
        #[cfg(feature = "metrics")]
        {
            let connections = i64::from(std::mem::take(&mut self.on));
            (-connections, -(std::mem::take(&mut self.bytes) as i64))
        }
        #[cfg(not(feature = "metrics"))]
        (0, 0)
    }
}

/// A connection stopped reading to wait for memory budget.
#[cfg(any(feature = "tracing", feature = "metrics"))]
#[inline]
pub(crate) fn budget_wait() {
    #[cfg(feature = "metrics")]
    handles().waits.increment(1);
}

/// Records `budget`'s bytes in use (and, the first time, its limit),
/// added to those of any other budget alive: budgets dropped since the
/// last record leave the sums (the gauges show a dropped budget until the
/// next record of any). The hub's engines call it once a
/// turn and Streams when they wait for budget; a server of Streams alone
/// whose dashboards should follow the budget as it is given back calls it
/// from a timer of its own. Without the `metrics` feature it does
/// nothing.
#[inline]
#[allow(unused_variables)]
pub fn record_budget(budget: &MemoryBudget) {
    #[cfg(feature = "metrics")]
    {
        let (change, limit) = budget.report();
        // Budgets dropped since leave the sums.
        let (gone_in_use, gone_limit) = crate::proto::budget::take_dropped_reports();
        let h = handles();
        if change != gone_in_use {
            h.in_use.increment((change - gone_in_use) as f64);
        }
        if limit != gone_limit {
            h.limit.increment(limit as f64 - gone_limit as f64);
        }
    }
}

#[cfg(feature = "metrics")]
pub(super) fn describe_all() {
    use metrics::{describe_counter, describe_gauge};
    describe_gauge!(
        WRITE_BLOCKED,
        Unit::Count,
        "Connections waiting for their peer to read what they were sent."
    );
    describe_gauge!(
        WRITE_BLOCKED_BYTES,
        Unit::Bytes,
        "Bytes write-blocked connections have waiting for their peers."
    );
    describe_gauge!(
        BUDGET_IN_USE,
        Unit::Bytes,
        "The memory budget's bytes in use."
    );
    describe_gauge!(BUDGET_LIMIT, Unit::Bytes, "The memory budget's limit.");
    describe_counter!(
        BUDGET_WAITS,
        Unit::Count,
        "Times a connection stopped reading to wait for memory budget."
    );
}
