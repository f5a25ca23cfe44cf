//! The values of the labels: a close code's class, who closed, why an
//! upgrade was refused.

#[cfg(feature = "metrics")]
use crate::proto::conn::{Ending, Failure};

/// The class of a close code, as the `code` label gives it: `normal`
/// (1000), `going_away` (1001), `protocol` (1002, 1003, 1007), `too_big`
/// (1009), `policy` (1008, 1010), `try_again` (1013: the memory budget
/// or backpressure), `server_error` (1011, 1012, 1014), `application`
/// (3000 to 4999), `other` for the rest.
pub fn code_class(code: u16) -> &'static str {
    match code {
        1000 => "normal",
        1001 => "going_away",
        1002 | 1003 | 1007 => "protocol",
        1009 => "too_big",
        1008 | 1010 => "policy",
        1013 => "try_again",
        1011..=1014 => "server_error",
        3000..=4999 => "application",
        _ => "other",
    }
}

/// Who ended a connection, as the `by` label gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg(feature = "metrics")]
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

#[cfg(feature = "metrics")]
impl ClosedBy {
    /// Who ended a connection that began to end as `ending` says (`None`:
    /// its transport ended first), the close code sent or received, and
    /// why it failed if it did.
    pub(crate) fn of(ending: Option<Ending>) -> (ClosedBy, Option<u16>, Option<Failure>) {
        match ending {
            Some(Ending::PeerClosed(code)) => (ClosedBy::Peer, code.map(|c| c.0), None),
            Some(Ending::Closed(code)) => (ClosedBy::Local, code.map(|c| c.0), None),
            Some(Ending::Failed(code, why)) => (ClosedBy::Error, code.map(|c| c.0), Some(why)),
            None => (ClosedBy::Gone, None, None),
        }
    }

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
            (1013, "try_again"),
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
