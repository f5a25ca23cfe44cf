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
//! | `wavesock_upgrades_refused_total` | counter | `reason` | opening handshakes a server refused |
//! | `wavesock_handshake_duration_seconds` | histogram | `engine` | from a server connection's first byte to its response |
//! | `wavesock_messages_received_total` | counter | `kind` | messages received |
//! | `wavesock_received_bytes_total` | counter | `kind` | their payload bytes |
//! | `wavesock_messages_sent_total` | counter | `kind` | messages sent |
//! | `wavesock_sent_bytes_total` | counter | `kind` | their payload bytes |
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
//!   `policy`, `server_error`, `application`, `other`, `none`.
//! - `kind`: `text`, `binary`, `control` (pings and pongs: close frames
//!   are counted as connections closed, and the pongs and close answers
//!   the protocol owes are not counted as sent).
//! - `reason`: `request` (not a valid WebSocket upgrade), `version`,
//!   `too_large` (the request over the handshake's limits), `timeout`,
//!   `rejected` (the application's callback refused it), `not_found` (no
//!   route, or the application's callback answered 404), `overloaded`
//!   (the hub at its connection limit), `closed` (the peer left, or the
//!   transport failed, before the handshake was over).

mod record;
mod traffic;

use crate::proto::conn::Ending;

pub(crate) use record::EngineMeter;
#[cfg(any(feature = "metrics", feature = "hub"))]
pub(crate) use record::refused;
#[cfg(feature = "hub")]
pub(crate) use traffic::Tally;
pub(crate) use traffic::{Kind, received, sent};
pub use traffic::{MESSAGES_RECEIVED, MESSAGES_SENT, RECEIVED_BYTES, SENT_BYTES};

/// Server connections whose opening handshake succeeded (counter; label
/// `engine`).
pub const CONNECTIONS_ACCEPTED: &str = "wavesock_connections_accepted_total";
/// Connections open now (gauge; label `engine`).
pub const CONNECTIONS_OPEN: &str = "wavesock_connections_open";
/// Connections ended (counter; labels `engine`, `by`, `code`).
pub const CONNECTIONS_CLOSED: &str = "wavesock_connections_closed_total";
/// Opening handshakes a server refused (counter; label `reason`).
pub const UPGRADES_REFUSED: &str = "wavesock_upgrades_refused_total";
/// From a server connection's first byte to its handshake's response
/// (histogram, seconds; label `engine`).
pub const HANDSHAKE_DURATION: &str = "wavesock_handshake_duration_seconds";

/// The class of a close code, as the `code` label gives it: `normal`
/// (1000), `going_away` (1001), `protocol` (1002, 1003, 1007), `too_big`
/// (1009), `policy` (1008, 1010), `server_error` (1011 to 1014),
/// `application` (3000 to 4999), `other` for the rest.
pub fn code_class(code: u16) -> &'static str {
    match code {
        1000 => "normal",
        1001 => "going_away",
        1002 | 1003 | 1007 => "protocol",
        1009 => "too_big",
        1008 | 1010 => "policy",
        1011..=1014 => "server_error",
        3000..=4999 => "application",
        _ => "other",
    }
}

/// Who ended a connection, as the `by` label gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(any(feature = "metrics", feature = "hub")), allow(dead_code))]
pub(crate) enum ClosedBy {
    /// The peer's close frame came first.
    Peer,
    /// Ours did.
    Local,
    /// The connection failed.
    Error,
    /// The transport ended without a closing handshake.
    Gone,
}

#[cfg_attr(not(any(feature = "metrics", feature = "hub")), allow(dead_code))]
impl ClosedBy {
    /// Who ended a connection that began to end as `ending` says (`None`:
    /// its transport ended first), and the close code sent or received.
    pub(crate) fn of(ending: Option<Ending>) -> (ClosedBy, Option<u16>) {
        match ending {
            Some(Ending::PeerClosed(code)) => (ClosedBy::Peer, code.map(|c| c.0)),
            Some(Ending::Closed(code)) => (ClosedBy::Local, code.map(|c| c.0)),
            Some(Ending::Failed(code)) => (ClosedBy::Error, code.map(|c| c.0)),
            None => (ClosedBy::Gone, None),
        }
    }

    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) fn label(self) -> &'static str {
        match self {
            ClosedBy::Peer => "peer",
            ClosedBy::Local => "local",
            ClosedBy::Error => "error",
            ClosedBy::Gone => "gone",
        }
    }
}

/// Why a server refused an opening handshake, as the `reason` label gives
/// it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "hub"), allow(dead_code))]
pub(crate) enum Refused {
    /// Not a valid WebSocket upgrade request.
    Request,
    /// A WebSocket version other than 13.
    Version,
    /// Over the handshake's size limits.
    TooLarge,
    /// The request did not arrive in time.
    Timeout,
    /// The application's callback refused it.
    Rejected,
    /// No route for its path.
    NotFound,
    /// The hub at its connection limit.
    Overloaded,
    /// The peer left, or the transport failed, before the handshake was
    /// over.
    Closed,
}

#[cfg_attr(not(any(feature = "metrics", feature = "hub")), allow(dead_code))]
impl Refused {
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) fn label(self) -> &'static str {
        match self {
            Refused::Request => "request",
            Refused::Version => "version",
            Refused::TooLarge => "too_large",
            Refused::Timeout => "timeout",
            Refused::Rejected => "rejected",
            Refused::NotFound => "not_found",
            Refused::Overloaded => "overloaded",
            Refused::Closed => "closed",
        }
    }

    /// Why a server's opening handshake failed with `err`.
    #[allow(dead_code)]
    pub(crate) fn of(err: &crate::Error) -> Refused {
        match err {
            crate::Error::Handshake(h) => Refused::of_handshake(h),
            crate::Error::Io(_) => Refused::Closed,
            _ => Refused::Request,
        }
    }

    /// Why a server's opening handshake failed with `err`.
    pub(crate) fn of_handshake(err: &crate::error::HandshakeError) -> Refused {
        use crate::error::HandshakeError as H;
        match err {
            H::UnsupportedVersion => Refused::Version,
            H::TooLarge(_) => Refused::TooLarge,
            H::Timeout => Refused::Timeout,
            H::Refused(status) => Refused::of_status(*status).unwrap_or(Refused::Rejected),
            H::ConnectionClosed => Refused::Closed,
            _ => Refused::Request,
        }
    }

    /// An upgrade the application answered with `status` instead: no
    /// route for a 404, refused for any other error; `None` for a success
    /// (a plain HTTP answer, not a refusal).
    pub(crate) fn of_status(status: http::StatusCode) -> Option<Refused> {
        if status == http::StatusCode::NOT_FOUND {
            Some(Refused::NotFound)
        } else if status.is_client_error() || status.is_server_error() {
            Some(Refused::Rejected)
        } else {
            None
        }
    }
}

/// Gives every metric its help text and unit in the installed recorder
/// (exporters show them: Prometheus' `# HELP` and `# TYPE` lines). Call it
/// once, after installing the recorder. Without the `metrics` feature it
/// does nothing.
pub fn describe() {
    #[cfg(feature = "metrics")]
    record::describe_all();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_codes_fall_in_their_classes() {
        for (code, class) in [
            (1000, "normal"),
            (1001, "going_away"),
            (1002, "protocol"),
            (1003, "protocol"),
            (1007, "protocol"),
            (1008, "policy"),
            (1009, "too_big"),
            (1010, "policy"),
            (1011, "server_error"),
            (1014, "server_error"),
            (1015, "other"),
            (2999, "other"),
            (3000, "application"),
            (4999, "application"),
            (5000, "other"),
        ] {
            assert_eq!(code_class(code), class, "{code}");
        }
    }
}
