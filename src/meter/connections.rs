//! Connections' metrics: one engine's handles, taken once (a lookup in the
//! recorder per connection would hash labels on every accept), and the
//! refusals counted where the handshake refuses.

#[cfg(feature = "metrics")]
use std::sync::OnceLock;
use std::time::Duration;

#[cfg(feature = "metrics")]
use metrics::{Counter, Gauge, Histogram, SharedString, Unit};

#[cfg(any(feature = "metrics", feature = "hub"))]
use super::labels::Refused;
#[cfg(feature = "metrics")]
use super::labels::{ClosedBy, code_class};
use crate::Role;
use crate::proto::conn::Ending;

/// Server connections whose opening handshake succeeded (counter; label
/// `engine`).
pub const CONNECTIONS_ACCEPTED: &str = "wavesock_connections_accepted_total";
/// Connections open now (gauge; label `engine`).
pub const CONNECTIONS_OPEN: &str = "wavesock_connections_open";
/// Connections ended (counter; labels `engine`, `by`, `code`).
pub const CONNECTIONS_CLOSED: &str = "wavesock_connections_closed_total";
/// Connections that failed, by why (counter; labels `engine`, `error`).
pub const CONNECTION_ERRORS: &str = "wavesock_connection_errors_total";
/// Opening handshakes a server refused (counter; label `reason`).
pub const UPGRADES_REFUSED: &str = "wavesock_upgrades_refused_total";
/// From the server taking a connection to its handshake's response
/// (histogram, seconds; label `engine`).
pub const HANDSHAKE_DURATION: &str = "wavesock_handshake_duration_seconds";

/// One engine's connection metrics (the hub's engine N, or every Stream of
/// one role), labelled with its name. Without the feature: nothing.
#[derive(Debug)]
pub(crate) struct EngineMeter {
    #[cfg(feature = "metrics")]
    name: SharedString,
    #[cfg(feature = "metrics")]
    accepted: Counter,
    #[cfg(feature = "metrics")]
    open: Gauge,
    #[cfg(feature = "metrics")]
    handshake: Histogram,
}

impl EngineMeter {
    #[cfg(feature = "metrics")]
    fn named(name: SharedString) -> Self {
        super::deflate::watch();
        let label = [("engine", name.clone())];
        EngineMeter {
            accepted: metrics::counter!(CONNECTIONS_ACCEPTED, &label),
            open: metrics::gauge!(CONNECTIONS_OPEN, &label),
            handshake: metrics::histogram!(HANDSHAKE_DURATION, &label),
            name,
        }
    }

    /// The hub's engine `index`.
    #[cfg_attr(not(feature = "hub"), allow(dead_code))]
    #[allow(unused_variables)]
    pub(crate) fn hub(index: u32) -> Self {
        #[cfg(feature = "metrics")]
        return Self::named(SharedString::from(format!("hub-{index}")));
        #[cfg(not(feature = "metrics"))]
        EngineMeter {}
    }

    /// Every Stream of `role` (server-side ones are labelled `stream`).
    #[allow(unused_variables)]
    pub(crate) fn stream(role: Role) -> &'static EngineMeter {
        #[cfg(feature = "metrics")]
        {
            static SERVER: OnceLock<EngineMeter> = OnceLock::new();
            static CLIENT: OnceLock<EngineMeter> = OnceLock::new();
            match role {
                Role::Server => SERVER.get_or_init(|| Self::named("stream".into())),
                Role::Client => CLIENT.get_or_init(|| Self::named("client".into())),
            }
        }
        #[cfg(not(feature = "metrics"))]
        {
            static NONE: EngineMeter = EngineMeter {};
            &NONE
        }
    }

    /// A connection opened: a server's (accepted) or a client's.
    #[inline]
    #[allow(unused_variables)]
    pub(crate) fn opened(&self, server: bool) {
        #[cfg(feature = "metrics")]
        {
            self.open.increment(1.0);
            if server {
                self.accepted.increment(1);
            }
        }
    }

    /// A server's opening handshake took `took`, from taking the connection to
    /// its response.
    #[inline]
    #[cfg_attr(not(feature = "metrics"), allow(dead_code, unused_variables))]
    pub(crate) fn handshake(&self, took: Duration) {
        #[cfg(feature = "metrics")]
        self.handshake.record(took.as_secs_f64());
    }

    /// A connection [`opened`](Self::opened) ended as its core says.
    #[inline]
    #[allow(unused_variables)]
    #[cfg_attr(not(any(feature = "metrics", feature = "hub")), allow(dead_code))]
    pub(crate) fn closed(&self, ending: Option<Ending>) {
        #[cfg(feature = "metrics")]
        {
            let (by, code, failure) = ClosedBy::of(ending);
            self.open.decrement(1.0);
            let class = code.map_or("none", code_class);
            metrics::counter!(
                CONNECTIONS_CLOSED,
                "engine" => self.name.clone(),
                "by" => by.label(),
                "code" => class,
            )
            .increment(1);
            if let Some(failure) = failure {
                metrics::counter!(
                    CONNECTION_ERRORS,
                    "engine" => self.name.clone(),
                    "error" => failure.name(),
                )
                .increment(1);
            }
        }
    }
}

/// A server refused an opening handshake (`None`: it did not).
#[cfg(any(feature = "metrics", feature = "hub"))]
#[inline]
#[allow(unused_variables)]
pub(crate) fn refused(reason: impl Into<Option<Refused>>) {
    #[cfg(feature = "metrics")]
    if let Some(reason) = reason.into() {
        metrics::counter!(UPGRADES_REFUSED, "reason" => reason.label()).increment(1);
    }
}

/// Gives these metrics their help text and unit.
#[cfg(feature = "metrics")]
pub(super) fn describe_all() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        CONNECTIONS_ACCEPTED,
        Unit::Count,
        "Server connections whose opening handshake succeeded."
    );
    describe_gauge!(CONNECTIONS_OPEN, Unit::Count, "Connections open now.");
    describe_counter!(
        CONNECTIONS_CLOSED,
        Unit::Count,
        "Connections ended, by who closed first and the close code's class."
    );
    describe_counter!(
        CONNECTION_ERRORS,
        Unit::Count,
        "Connections that failed, by why."
    );
    describe_counter!(
        UPGRADES_REFUSED,
        Unit::Count,
        "Opening handshakes a server refused, by reason."
    );
    describe_histogram!(
        HANDSHAKE_DURATION,
        Unit::Seconds,
        "From the server taking a connection to its handshake's response."
    );
}
