//! Why an opening handshake failed: the handshake layer's own error, free of
//! any I/O. Opening the connection underneath (DNS, TCP, a proxy, TLS, the
//! connect timeout) fails with a `ConnectError` instead, one layer up.

use std::fmt;

use http::StatusCode;

/// Why the opening HTTP handshake failed.
///
/// Reached as `Error::Handshake` from the entry points. The connection the
/// handshake runs over failing to open is a `ConnectError`
/// ([`crate::ConnectError`]), not this.
#[derive(Debug)]
#[non_exhaustive]
pub enum HandshakeError {
    /// The HTTP head could not be parsed.
    Malformed(String),
    /// The HTTP head was larger than the configured limit.
    TooLarge(usize),
    /// The request used a method other than GET (HTTP/1.1) or CONNECT
    /// (HTTP/2).
    MethodNotAllowed(String),
    /// A required header was missing or wrong.
    BadHeader {
        /// Header name.
        name: &'static str,
        /// What was wrong with it.
        reason: &'static str,
    },
    /// The client asked for a WebSocket version other than 13.
    UnsupportedVersion,
    /// The server answered with something other than 101 Switching Protocols.
    UnexpectedStatus {
        /// The response status.
        status: StatusCode,
        /// The response as received (head and a bounded part of the body).
        response: Box<http::Response<Option<Vec<u8>>>>,
    },
    /// The handshake did not complete within the configured timeout.
    Timeout,
    /// The peer closed the connection during the handshake.
    ConnectionClosed,
    /// The URL could not be used to open a WebSocket connection: it does not
    /// parse, its scheme is not `ws` or `wss`, it has no host, or its port
    /// is invalid. The text shows the URL without its userinfo
    /// (`user:password@`) and its query, so that it can be logged.
    InvalidUrl(String),
    /// A client request could not be built from the parts given: a header
    /// name or value that is not valid HTTP, or a subprotocol name that is
    /// not an HTTP token (see
    /// [`ClientRequestBuilder`](crate::handshake::client::ClientRequestBuilder)).
    InvalidRequest(String),
    /// The server's callback refused the request.
    Refused(StatusCode),
}

impl HandshakeError {
    /// The HTTP status a server answers this failure with, if any.
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            HandshakeError::Malformed(_) | HandshakeError::BadHeader { .. } => {
                Some(StatusCode::BAD_REQUEST)
            }
            HandshakeError::TooLarge(_) => Some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE),
            HandshakeError::MethodNotAllowed(_) => Some(StatusCode::METHOD_NOT_ALLOWED),
            HandshakeError::UnsupportedVersion => Some(StatusCode::UPGRADE_REQUIRED),
            HandshakeError::Refused(status) => Some(*status),
            _ => None,
        }
    }
}

impl fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HandshakeError::Malformed(e) => write!(f, "malformed HTTP: {e}"),
            HandshakeError::TooLarge(max) => write!(f, "HTTP head exceeds {max} bytes"),
            HandshakeError::MethodNotAllowed(m) => {
                write!(
                    f,
                    "method {m} is not allowed; a WebSocket handshake uses GET over HTTP/1.1, CONNECT over HTTP/2"
                )
            }
            HandshakeError::BadHeader { name, reason } => write!(f, "bad header {name}: {reason}"),
            HandshakeError::UnsupportedVersion => f.write_str("unsupported WebSocket version"),
            HandshakeError::UnexpectedStatus { status, .. } => {
                write!(f, "server answered {status}")
            }
            HandshakeError::Timeout => f.write_str("handshake timed out"),
            HandshakeError::ConnectionClosed => {
                f.write_str("connection closed during the handshake")
            }
            HandshakeError::InvalidUrl(e) => write!(f, "invalid URL: {e}"),
            HandshakeError::InvalidRequest(e) => write!(f, "invalid request: {e}"),
            HandshakeError::Refused(status) => write!(f, "request refused with status {status}"),
        }
    }
}

impl std::error::Error for HandshakeError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_answer_refusals_with_their_status() {
        let cases = [
            (HandshakeError::Malformed("x".into()), Some(400)),
            (
                HandshakeError::BadHeader {
                    name: "Upgrade",
                    reason: "must list websocket",
                },
                Some(400),
            ),
            (HandshakeError::TooLarge(8192), Some(431)),
            (HandshakeError::MethodNotAllowed("POST".into()), Some(405)),
            (HandshakeError::UnsupportedVersion, Some(426)),
            (HandshakeError::Refused(StatusCode::FORBIDDEN), Some(403)),
            (HandshakeError::Timeout, None),
            (HandshakeError::ConnectionClosed, None),
            (HandshakeError::InvalidUrl("x".into()), None),
        ];
        for (err, status) in cases {
            assert_eq!(err.status().map(|s| s.as_u16()), status, "{err:?}");
        }
    }

    #[test]
    fn messages_read_as_before() {
        assert_eq!(
            HandshakeError::TooLarge(4096).to_string(),
            "HTTP head exceeds 4096 bytes"
        );
        assert_eq!(
            HandshakeError::BadHeader {
                name: "Connection",
                reason: "must list upgrade"
            }
            .to_string(),
            "bad header Connection: must list upgrade"
        );
        assert_eq!(
            HandshakeError::Refused(StatusCode::UNAUTHORIZED).to_string(),
            "request refused with status 401 Unauthorized"
        );
    }
}
