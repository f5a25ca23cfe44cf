//! The crate's one error type, [`Error`], and the errors it wraps.
//!
//! [`HandshakeError`] is defined by the sans-IO handshake layer and
//! re-exported here; [`ConnectError`] (the connect phase: DNS, TCP, proxy,
//! TLS) is defined here, below the client code that reports it, so that the
//! dependencies run one way. Protocol errors convert from
//! [`proto::Error`].

mod connect;

use std::io;

use crate::proto;
use crate::proto::close::CloseCode;

pub use crate::handshake::HandshakeError;
pub use crate::proto::error::ProtocolError;
pub use connect::ConnectError;

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

    /// The message would make this connection hold more than the whole
    /// shared [`MemoryBudget`](crate::MemoryBudget); refused with close code
    /// 1009.
    #[error("message needs {size} bytes of a memory budget of {budget} bytes")]
    OverBudget {
        /// What the connection would have taken from the budget.
        size: u64,
        /// The size of the budget.
        budget: usize,
    },

    /// The shared [`MemoryBudget`](crate::MemoryBudget) stayed exhausted
    /// past its wait timeout while this connection needed more, or this
    /// connection held some of it while the peer sent nothing for that long;
    /// the message was refused with close code 1013 (try again later).
    #[error("memory budget exhausted: message refused, try again later")]
    BudgetExhausted,

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

    /// A hub was shut down ([`HubHandle::shutdown`](crate::hub::HubHandle::shutdown))
    /// and its [`shutdown_timeout`](crate::hub::HubConfig::shutdown_timeout)
    /// passed before this connection's closing handshake finished; it was
    /// dropped.
    #[error("dropped by the hub's shutdown before its closing handshake finished")]
    ShutdownTimeout,

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

    /// A [`hub`](crate::hub) connection's peer stopped reading: more than
    /// the hub's `max_backpressure` bytes waited to be written to it when
    /// another message was sent, and the hub's policy is to close it. The
    /// peer gets close code 1013 (try again later) after the frame being
    /// written to it; what was queued behind that frame is dropped.
    #[error("{buffered} bytes wait for a peer that does not read (limit {limit})")]
    Backpressure {
        /// Bytes waiting to be written when the message came.
        buffered: usize,
        /// The hub's `max_backpressure`.
        limit: usize,
    },
    /// A [`hub`](crate::hub) connection missed publishes to a topic it
    /// subscribes to: its engine fell more than the topics' inbox bounds
    /// behind ([`TopicsConfig::inbox_capacity`], `inbox_bytes`), and the
    /// hub's policy for slow subscribers is to close them: the peer gets
    /// close code 1013 (try again later).
    ///
    /// [`TopicsConfig::inbox_capacity`]: crate::topics::TopicsConfig::inbox_capacity
    #[error("publishes to topic {topic:?} were missed: its engine fell behind the inbox bounds")]
    PublishesMissed {
        /// The topic.
        topic: String,
    },
}

impl Error {
    /// The close code this error calls for, when it is a fault of the peer's
    /// data: 1002 for protocol violations, 1007 for invalid UTF-8, 1009 for
    /// limit breaches and messages larger than the whole memory budget, 1013
    /// when the memory budget ran out, the peer read too slowly or missed
    /// publishes.
    pub fn close_code(&self) -> Option<CloseCode> {
        match self {
            Error::Protocol(_) => Some(CloseCode::PROTOCOL_ERROR),
            Error::InvalidUtf8 => Some(CloseCode::INVALID_PAYLOAD),
            Error::FrameTooLarge { .. }
            | Error::MessageTooLarge { .. }
            | Error::OverBudget { .. } => Some(CloseCode::MESSAGE_TOO_BIG),
            Error::BudgetExhausted | Error::Backpressure { .. } | Error::PublishesMissed { .. } => {
                Some(CloseCode::TRY_AGAIN_LATER)
            }
            _ => None,
        }
    }
}

/// The protocol core's errors, each as the variant of the same name.
impl From<proto::Error> for Error {
    fn from(e: proto::Error) -> Error {
        match e {
            proto::Error::Protocol(p) => Error::Protocol(p),
            proto::Error::InvalidUtf8 => Error::InvalidUtf8,
            proto::Error::FrameTooLarge { size, max } => Error::FrameTooLarge { size, max },
            proto::Error::MessageTooLarge { size, max } => Error::MessageTooLarge { size, max },
            proto::Error::OverBudget { size, budget } => Error::OverBudget { size, budget },
            proto::Error::BudgetExhausted => Error::BudgetExhausted,
            proto::Error::Backpressure { buffered, limit } => {
                Error::Backpressure { buffered, limit }
            }
            proto::Error::InvalidMessage(m) => Error::InvalidMessage(m),
            proto::Error::ConnectionClosed => Error::ConnectionClosed,
            proto::Error::AlreadyClosed => Error::AlreadyClosed,
            proto::Error::KeepaliveTimeout => Error::KeepaliveTimeout,
            proto::Error::CloseTimeout => Error::CloseTimeout,
            proto::Error::HandshakeTimeout => Error::Handshake(HandshakeError::Timeout),
            proto::Error::InvalidConfig(m) => Error::InvalidConfig(m),
            // A compressor failure is a local fault, like a failed write.
            proto::Error::Compression(m) => Error::Io(io::Error::other(m)),
            // The two crates are released together (an exact version
            // requirement), so a variant this match does not name cannot
            // come from the core this crate is built with.
            e => Error::Io(io::Error::other(e)),
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

/// A `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
