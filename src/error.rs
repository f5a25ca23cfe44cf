//! The crate's one error type, [`Error`], and the errors it wraps.
//!
//! [`HandshakeError`] is defined by the sans-IO handshake layer and
//! [`ConnectError`] by the client's connect layer; both are re-exported here.

use std::io;

use crate::proto::close::CloseCode;

pub use crate::client::ConnectError;
pub use crate::handshake::HandshakeError;

/// Everything that can go wrong on a WebSocket connection.
///
/// Protocol violations and limit breaches carry the close code that was sent
/// to the peer (see [`Error::close_code`]); I/O and handshake failures do not.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The underlying transport failed.
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),

    /// The peer broke a rule of RFC 6455.
    #[error("protocol violation: {0}")]
    Protocol(#[from] ProtocolError),

    /// A text message or close reason was not valid UTF-8.
    #[error("invalid UTF-8 in a text message or close reason")]
    InvalidUtf8,

    /// A single frame announced more payload than `max_frame_size` allows.
    #[error("frame of {size} bytes exceeds the limit of {max} bytes")]
    FrameTooLarge {
        /// The length the frame announced.
        size: u64,
        /// The configured limit.
        max: usize,
    },

    /// A message (all of its fragments) would exceed `max_message_size`.
    #[error("message of at least {size} bytes exceeds the limit of {max} bytes")]
    MessageTooLarge {
        /// The size the message would reach.
        size: u64,
        /// The configured limit.
        max: usize,
    },

    /// The opening HTTP handshake failed.
    #[error("handshake failed: {0}")]
    Handshake(#[from] HandshakeError),

    /// A message was sent on a connection the peer closed (its close frame
    /// arrived, or the connection ended).
    #[error("connection closed by the peer")]
    ConnectionClosed,

    /// A message was sent after this side closed the connection (sent its
    /// close frame, or failed it over an error).
    #[error("connection already closed by this side")]
    AlreadyClosed,

    /// Keepalive: the peer sent nothing within `pong_timeout` of a ping.
    #[error("peer did not answer a keepalive ping in time")]
    KeepaliveTimeout,

    /// The closing handshake did not finish within `close_timeout`; the
    /// connection was dropped anyway.
    #[error("closing handshake timed out")]
    CloseTimeout,

    /// The message given to `send` cannot be put on the wire (for example a
    /// control frame over 125 bytes or a close code that is not allowed).
    #[error("invalid message to send: {0}")]
    InvalidMessage(&'static str),

    /// A [`Config`](crate::Config) combination that cannot work.
    #[error("invalid configuration: {0}")]
    InvalidConfig(&'static str),

    /// A client could not open the connection the handshake runs over: the
    /// name did not resolve, TCP failed, a proxy refused, or TLS failed.
    #[error("could not connect: {0}")]
    Connect(#[from] ConnectError),
}

impl Error {
    /// The close code this error calls for, when it is a fault of the peer's
    /// data: 1002 for protocol violations, 1007 for invalid UTF-8, 1009 for
    /// limit breaches.
    pub fn close_code(&self) -> Option<CloseCode> {
        match self {
            Error::Protocol(_) => Some(CloseCode::PROTOCOL_ERROR),
            Error::InvalidUtf8 => Some(CloseCode::INVALID_PAYLOAD),
            Error::FrameTooLarge { .. } | Error::MessageTooLarge { .. } => {
                Some(CloseCode::MESSAGE_TOO_BIG)
            }
            _ => None,
        }
    }
}

/// For byte-stream adapters such as [`tokio_util::io::StreamReader`] over
/// [`MessagePieces`](crate::MessagePieces): an I/O error is given back as it
/// was, a peer that closed in mid-message becomes
/// [`io::ErrorKind::UnexpectedEof`], invalid UTF-8
/// [`io::ErrorKind::InvalidData`], anything else [`io::ErrorKind::Other`].
impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        match e {
            Error::Io(e) => e,
            Error::ConnectionClosed => io::Error::new(io::ErrorKind::UnexpectedEof, e),
            Error::InvalidUtf8 => io::Error::new(io::ErrorKind::InvalidData, e),
            e => io::Error::other(e),
        }
    }
}

/// A violation of the framing rules of RFC 6455 by the peer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// An RSV bit was set without a negotiated extension that defines it.
    #[error("reserved bits set without a negotiated extension")]
    ReservedBits,
    /// An opcode reserved for future use (3–7, 11–15).
    #[error("reserved opcode {0:#x}")]
    ReservedOpcode(u8),
    /// A control frame with FIN clear.
    #[error("fragmented control frame")]
    FragmentedControlFrame,
    /// A control frame with more than 125 bytes of payload.
    #[error("control frame payload of {0} bytes (at most 125 allowed)")]
    ControlFrameTooLong(u64),
    /// A 64-bit payload length with the most significant bit set.
    #[error("64-bit payload length with the top bit set")]
    InvalidLength,
    /// A client sent an unmasked frame.
    #[error("unmasked frame from a client")]
    UnmaskedFrame,
    /// A server sent a masked frame.
    #[error("masked frame from a server")]
    MaskedFrame,
    /// A continuation frame arrived with no fragmented message in progress.
    #[error("continuation frame without a message in progress")]
    UnexpectedContinuation,
    /// A new text or binary frame arrived while a fragmented message was in progress.
    #[error("new data frame while a fragmented message is in progress")]
    ExpectedContinuation,
    /// A close frame with a one-byte payload.
    #[error("close frame with a one-byte payload")]
    CloseTooShort,
    /// A close frame carrying a code that must not appear on the wire.
    #[error("invalid close code {0}")]
    InvalidCloseCode(u16),
    /// Data frames arrived after the peer's close frame.
    #[error("frame received after a close frame")]
    FrameAfterClose,
    /// A compressed message (permessage-deflate) did not inflate.
    #[error("invalid permessage-deflate data")]
    InvalidCompressedData,
}

/// A `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
