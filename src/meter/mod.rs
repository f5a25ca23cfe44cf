//! Metrics an operator can scrape, through the [`metrics`] facade (feature
//! `metrics`): the application installs the recorder it wants (a
//! Prometheus exporter, StatsD, its own), and every engine records into it.
//! Without the feature nothing here records and nothing is compiled into
//! the engines.
//!
//! Install the recorder before the first connection: engines and the
//! Stream take their handles once, and handles taken before a recorder is
//! installed record nowhere. Then call [`describe`] to give each metric its
//! help text and unit.
//!
//! ```ignore
//! let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
//!     .with_http_listener(([127, 0, 0, 1], 9000))
//!     .install()?;
//! wavesock::meter::describe();
//! ```
//!
//! Every name starts with `wavesock_` and carries its unit (`_bytes`,
//! `_seconds`, `_total` for counts). Labels are few, each with a bounded set
//! of values; no connection id, address or topic name is ever a label.
//!
//! | name | type | labels | what |
//! | --- | --- | --- | --- |
//! | `wavesock_connections_accepted_total` | counter | `engine` | server connections whose opening handshake succeeded |
//! | `wavesock_connections_open` | gauge | `engine` | connections open now |
//! | `wavesock_connections_closed_total` | counter | `engine`, `by`, `code` | connections ended: who closed first, and the close code's class |
//! | `wavesock_connection_errors_total` | counter | `engine`, `error` | connections that failed (`by="error"`), by why: keepalive timeouts, backpressure cuts, the memory budget's refusals among them |
//! | `wavesock_upgrades_refused_total` | counter | `reason` | opening handshakes a server refused (a transport upgraded elsewhere, by hyper or axum, counts in their own metrics) |
//! | `wavesock_handshake_duration_seconds` | histogram | `engine` | from the server taking the connection (accept, or the hub admitting it) to its response; none for a transport upgraded elsewhere |
//! | `wavesock_messages_received_total` | counter | `kind` | messages received |
//! | `wavesock_received_bytes_total` | counter | `kind` | their payload bytes |
//! | `wavesock_messages_sent_total` | counter | `kind` | messages sent: queued for the peer (those a backpressure cut drops later included) |
//! | `wavesock_sent_bytes_total` | counter | `kind` | their payload bytes |
//! | `wavesock_deflate_sent_bytes_total` | counter | `form` | payload bytes of messages sent compressed: `uncompressed` before, `compressed` after (a publish prepared once for many connections counts once per window size it is compressed for; feature `deflate`) |
//! | `wavesock_deflate_received_bytes_total` | counter | `form` | payload bytes of compressed messages received: `compressed` as they came, `uncompressed` inflated |
//! | `wavesock_write_blocked_connections` | gauge | | connections waiting for their peer to read what they were sent |
//! | `wavesock_write_blocked_bytes` | gauge | | bytes those connections have waiting for their peers, as of their last write |
//! | `wavesock_budget_in_use_bytes` | gauge | | the memory budget's bytes in use (sampled: [`record_budget`]) |
//! | `wavesock_budget_limit_bytes` | gauge | | the memory budget's limit |
//! | `wavesock_budget_waits_total` | counter | | times a connection stopped reading to wait for budget |
//! | `wavesock_hub_turn_duration_seconds` | histogram | `engine` | a hub engine's turn (feature `hub`) |
//! | `wavesock_hub_turn_connections` | histogram | `engine` | connections a turn served |
//! | `wavesock_hub_turn_deliveries` | histogram | `engine` | topic deliveries a turn made, for turns that made any |
//! | `wavesock_hub_turns_cut_total` | counter | `engine` | turns that stopped at their cap with deliveries left |
//! | `wavesock_topics` | gauge | | topics with a subscriber in this process (feature `topics`) |
//! | `wavesock_topic_subscriptions` | gauge | | hub connections' and receivers' subscriptions |
//! | `wavesock_topic_publishes_total` | counter | | publishes, from this process and the link |
//! | `wavesock_topic_deliveries_total` | counter | | publishes queued for a subscriber here |
//! | `wavesock_topic_drops_total` | counter | `reason` | deliveries dropped |
//! | `wavesock_redis_links_up` | gauge | | Redis links up: 1 while the process's link is (feature `redis`) |
//! | `wavesock_redis_connects_total` | counter | | times the link came up (reconnects: this less one) |
//! | `wavesock_redis_publishes_total` | counter | `outcome` | publishes to other servers: `sent`, `lost`, `dropped_down`, `dropped_full` |
//! | `wavesock_redis_received_total` | counter | | publishes from other servers delivered here |
//! | `wavesock_redis_incoming_dropped_total` | counter | `reason` | messages from Redis dropped: `incoming_full`, `malformed` |
//! | `wavesock_redis_incoming_bytes` | gauge | | bytes from Redis waiting to be delivered |
//! | `wavesock_redis_confirmation_seconds` | histogram | | a batch of publishes' round trip to Redis |
//!
//! Label values:
//! - `engine`: `stream` (a server-side [`WebSocketStream`](crate::WebSocketStream)),
//!   `client` (a client-side one), `hub-N` (the hub's engine N; as many
//!   values as engines).
//! - `by`: `peer` (its close frame came first), `local` (ours did), `error`
//!   (the connection failed: a protocol error, a limit, the budget, a
//!   timeout), `gone` (the transport ended without a closing handshake).
//! - `code`: the class of the close code sent or received (see
//!   [`code_class`]): `normal`, `going_away`, `protocol`, `too_big`,
//!   `policy`, `try_again`, `server_error`, `application`, `other`,
//!   `none`.
//! - `error`: why a connection failed ([`Failure::name`](crate::proto::conn::Failure::name)):
//!   `protocol`, `too_large`, `over_budget`, `budget_exhausted`,
//!   `backpressure`, `keepalive_timeout`, `timeout`, `compression`,
//!   `other`.
//! - `kind`: `text`, `binary`, `control` (pings and pongs: close frames
//!   are counted as connections closed, and the pongs and close answers
//!   the protocol owes are not counted as sent).
//! - `reason` of a topic's drop: `inbox_full` (an engine too far behind
//!   missed a publish, counted once for each of its subscribers the
//!   publish was for), `backpressure` (a hub
//!   subscriber over its limit: dropped under the `Drop` policy, or the
//!   publish that cut it, or came after, under `Close`), `lagged` (a
//!   receiver fell behind and skipped it).
//! - `reason` of a refusal: `request` (not a valid WebSocket upgrade), `version`,
//!   `too_large` (the request over the handshake's limits), `timeout`,
//!   `rejected` (the application's callback refused it), `not_found` (no
//!   route, or the application's callback answered 404), `overloaded`
//!   (the hub at its connection limit), `closed` (the peer left, or the
//!   transport failed, before the handshake was over).

mod connections;
mod deflate;
mod labels;
mod pressure;
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "topics")]
mod topics;
mod traffic;
#[cfg(feature = "hub")]
mod turns;

pub(crate) use connections::EngineMeter;
#[cfg(any(feature = "metrics", feature = "hub"))]
pub(crate) use connections::refused;
pub use connections::{
    CONNECTION_ERRORS, CONNECTIONS_ACCEPTED, CONNECTIONS_CLOSED, CONNECTIONS_OPEN,
    HANDSHAKE_DURATION, UPGRADES_REFUSED,
};
pub use deflate::{DEFLATE_RECEIVED_BYTES, DEFLATE_SENT_BYTES};
#[cfg(any(feature = "metrics", feature = "hub"))]
pub(crate) use labels::Refused;
pub use labels::code_class;
pub(crate) use pressure::Blocked;
#[cfg(feature = "metrics")]
pub(crate) use pressure::BudgetAfter;
#[cfg(any(feature = "tracing", feature = "metrics"))]
pub(crate) use pressure::budget_wait;
#[cfg(feature = "metrics")]
pub(crate) use pressure::write_blocked;
pub use pressure::{
    BUDGET_IN_USE, BUDGET_LIMIT, BUDGET_WAITS, WRITE_BLOCKED, WRITE_BLOCKED_BYTES, record_budget,
};
#[cfg(feature = "redis")]
pub(crate) use redis::{
    Incoming as RedisIncoming, Outcome as RedisOutcome, confirmed as redis_confirmed,
    incoming_bytes as redis_incoming_bytes, incoming_dropped as redis_incoming_dropped,
    link_up as redis_link_up, publishes as redis_publishes, received as redis_received,
};
#[cfg(feature = "redis")]
pub use redis::{
    REDIS_CONFIRM, REDIS_CONNECTS, REDIS_INCOMING_BYTES, REDIS_INCOMING_DROPPED, REDIS_PUBLISHES,
    REDIS_RECEIVED, REDIS_UP,
};
#[cfg(feature = "topics")]
pub use topics::{DELIVERIES, DROPS, PUBLISHES, SUBSCRIPTIONS, TOPICS};
#[cfg(feature = "topics")]
pub(crate) use topics::{
    Drop as TopicDrop, dropped as topic_dropped, published, subscriptions, topics,
};
#[cfg(feature = "hub")]
pub(crate) use traffic::Tally;
pub(crate) use traffic::{Kind, Pieces, received, sent};
pub use traffic::{MESSAGES_RECEIVED, MESSAGES_SENT, RECEIVED_BYTES, SENT_BYTES};
#[cfg(feature = "hub")]
pub(crate) use turns::TurnMeter;
#[cfg(feature = "hub")]
pub use turns::{TURN_CONNECTIONS, TURN_DELIVERIES, TURN_DURATION, TURNS_CUT};

/// Gives every metric its help text and unit in the installed recorder
/// (exporters show them: Prometheus' `# HELP` and `# TYPE` lines). Call it
/// once, after installing the recorder. Without the `metrics` feature it
/// does nothing.
pub fn describe() {
    #[cfg(feature = "metrics")]
    {
        connections::describe_all();
        traffic::describe_all();
        deflate::describe_all();
        pressure::describe_all();
        #[cfg(feature = "hub")]
        turns::describe_all();
        #[cfg(feature = "topics")]
        topics::describe_all();
        #[cfg(feature = "redis")]
        redis::describe_all();
    }
}
