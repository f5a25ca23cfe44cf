//! Close status codes (RFC 6455 §7.4): a leaf that errors and close
//! frames both name.

use std::fmt;

/// A close status code.
///
/// ```
/// use wavesock_proto::CloseCode;
///
/// assert!(CloseCode::NORMAL.is_sendable());
/// assert!(!CloseCode::NO_STATUS.is_sendable()); // 1005 never goes on the wire
/// assert!(CloseCode::from(4000).is_sendable()); // private use
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CloseCode(pub u16);

impl CloseCode {
    /// 1000: normal closure.
    pub const NORMAL: CloseCode = CloseCode(1000);
    /// 1001: the endpoint is going away.
    pub const GOING_AWAY: CloseCode = CloseCode(1001);
    /// 1002: protocol error.
    pub const PROTOCOL_ERROR: CloseCode = CloseCode(1002);
    /// 1003: a data type the endpoint cannot accept.
    pub const UNSUPPORTED_DATA: CloseCode = CloseCode(1003);
    /// 1005: no status code was present (never sent on the wire).
    pub const NO_STATUS: CloseCode = CloseCode(1005);
    /// 1006: the connection dropped without a close frame (never sent).
    pub const ABNORMAL: CloseCode = CloseCode(1006);
    /// 1007: data inconsistent with the message type (e.g. invalid UTF-8).
    pub const INVALID_PAYLOAD: CloseCode = CloseCode(1007);
    /// 1008: a policy violation.
    pub const POLICY_VIOLATION: CloseCode = CloseCode(1008);
    /// 1009: a message too big to process.
    pub const MESSAGE_TOO_BIG: CloseCode = CloseCode(1009);
    /// 1010: the client expected an extension the server did not negotiate.
    pub const MANDATORY_EXTENSION: CloseCode = CloseCode(1010);
    /// 1011: the server met an unexpected condition.
    pub const INTERNAL_ERROR: CloseCode = CloseCode(1011);
    /// 1012: the service is restarting.
    pub const SERVICE_RESTART: CloseCode = CloseCode(1012);
    /// 1013: try again later.
    pub const TRY_AGAIN_LATER: CloseCode = CloseCode(1013);
    /// 1014: a gateway received an invalid response.
    pub const BAD_GATEWAY: CloseCode = CloseCode(1014);

    /// Whether this code may appear in a close frame: 1000–1003, 1007–1014,
    /// and 3000–4999 (registered and private use).
    pub fn is_sendable(self) -> bool {
        matches!(self.0, 1000..=1003 | 1007..=1014 | 3000..=4999)
    }
}

impl From<u16> for CloseCode {
    fn from(v: u16) -> Self {
        CloseCode(v)
    }
}

impl From<CloseCode> for u16 {
    fn from(c: CloseCode) -> u16 {
        c.0
    }
}

impl fmt::Debug for CloseCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CloseCode({})", self.0)
    }
}

impl fmt::Display for CloseCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
