//! The protocol core's errors: what the peer did wrong, what a limit
//! refused, what cannot be sent. Plain data (`Clone + PartialEq`), with no
//! I/O inside: the layers above add their own failures and convert these.

use crate::close_code::CloseCode;
use crate::utf8::InvalidUtf8;

/// A failure of the WebSocket protocol itself, on either side of the wire.
///
/// wavesock's `Error` has a variant for each of these and
/// converts with `From`, so `?` carries them up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The peer broke a framing rule of RFC 6455.
    #[error("protocol violation: {0}")]
    Protocol(#[from] ProtocolError),

    /// A text message or close reason was not valid UTF-8.
    #[error("invalid UTF-8 in a text message or close reason")]
    InvalidUtf8,

    /// A single frame announced more payload than the frame limit allows.
    #[error("frame of {size} bytes exceeds the limit of {max} bytes")]
    FrameTooLarge {
        /// The length the frame announced.
        size: u64,
        /// The limit.
        max: usize,
    },

    /// A message (all of its fragments, or its inflated size) would exceed
    /// the message limit.
    #[error("message of at least {size} bytes exceeds the limit of {max} bytes")]
    MessageTooLarge {
        /// The size the message would reach.
        size: u64,
        /// The limit.
        max: usize,
    },

    /// The message would make this connection hold more than the whole
    /// shared [`MemoryBudget`](crate::budget::MemoryBudget): refused
    /// at once (close code 1009).
    #[error("message needs {size} bytes of a memory budget of {budget} bytes")]
    OverBudget {
        /// What the connection would have taken from the budget.
        size: u64,
        /// The size of the budget.
        budget: usize,
    },

    /// The shared [`MemoryBudget`](crate::budget::MemoryBudget) was
    /// exhausted for longer than its wait timeout while this connection
    /// needed more, or this connection held some of it while its peer sent
    /// nothing for that long: the message is refused (close code 1013, try
    /// again later).
    #[error("memory budget exhausted: message refused, try again later")]
    BudgetExhausted,

    /// The peer reads too slowly: more than an engine's limit of bytes
    /// waited to be written to it, and the engine gives it up rather than
    /// queue more (the hub's `BackpressurePolicy::Close`). Close code 1013
    /// (try again later), as for the memory budget: the server sheds a
    /// connection it cannot serve at its peer's pace.
    #[error("{buffered} bytes wait for a peer that does not read (limit {limit})")]
    Backpressure {
        /// Bytes waiting to be written.
        buffered: usize,
        /// The engine's limit.
        limit: usize,
    },

    /// Something this side asked to send cannot go on the wire (a control
    /// frame over 125 bytes, a close code that may not be sent, a message
    /// breaking into a fragmented one).
    #[error("invalid message to send: {0}")]
    InvalidMessage(&'static str),

    /// Sending after the peer closed the connection.
    #[error("connection closed by the peer")]
    ConnectionClosed,

    /// Sending after this side closed the connection.
    #[error("connection already closed by this side")]
    AlreadyClosed,

    /// Keepalive: the peer sent nothing within the pong timeout of a ping.
    #[error("peer did not answer a keepalive ping in time")]
    KeepaliveTimeout,

    /// The closing handshake did not finish within the close timeout.
    #[error("closing handshake timed out")]
    CloseTimeout,

    /// The opening handshake did not finish by its deadline
    /// ([`Connection::handshaking`](crate::conn::Connection::handshaking)).
    #[error("opening handshake timed out")]
    HandshakeTimeout,

    /// The compressor failed (permessage-deflate); not the peer's fault.
    #[error("compression failed: {0}")]
    Compression(String),

    /// A setting the core cannot work with.
    #[error("invalid configuration: {0}")]
    InvalidConfig(&'static str),
}

impl Error {
    /// The close code this error calls for when it is a fault of the peer's
    /// data: 1002 for protocol violations, 1007 for invalid UTF-8, 1009 for
    /// limit breaches and messages larger than the whole memory budget, 1013
    /// when the memory budget ran out or the peer read too slowly; `None`
    /// otherwise.
    pub fn close_code(&self) -> Option<CloseCode> {
        match self {
            Error::Protocol(_) => Some(CloseCode::PROTOCOL_ERROR),
            Error::InvalidUtf8 => Some(CloseCode::INVALID_PAYLOAD),
            Error::FrameTooLarge { .. }
            | Error::MessageTooLarge { .. }
            | Error::OverBudget { .. } => Some(CloseCode::MESSAGE_TOO_BIG),
            Error::BudgetExhausted | Error::Backpressure { .. } => Some(CloseCode::TRY_AGAIN_LATER),
            _ => None,
        }
    }

    /// The reason sent with [`close_code`](Self::close_code): which rule or
    /// limit the peer's data broke, short and fixed (nothing of the peer's
    /// data is echoed into it), for the peer to log or show (browsers give
    /// it as `CloseEvent.reason`). Empty when the error has no close code.
    ///
    /// ```
    /// use wavesock_proto::Error;
    ///
    /// let err = Error::MessageTooLarge { size: 1 << 30, max: 64 << 20 };
    /// assert_eq!(err.close_code().map(|c| c.0), Some(1009));
    /// assert_eq!(err.close_reason(), "message over max_message_size");
    /// ```
    pub fn close_reason(&self) -> &'static str {
        match self {
            Error::Protocol(p) => p.close_reason(),
            Error::InvalidUtf8 => "invalid UTF-8",
            Error::FrameTooLarge { .. } => "frame over max_frame_size",
            Error::MessageTooLarge { .. } => "message over max_message_size",
            Error::OverBudget { .. } => "message over the memory budget",
            Error::BudgetExhausted => "memory budget exhausted, try again later",
            Error::Backpressure { .. } => "reading too slowly: backpressure limit",
            _ => "",
        }
    }
}

impl From<InvalidUtf8> for Error {
    fn from(_: InvalidUtf8) -> Error {
        Error::InvalidUtf8
    }
}

impl From<std::str::Utf8Error> for Error {
    fn from(_: std::str::Utf8Error) -> Error {
        Error::InvalidUtf8
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

impl ProtocolError {
    /// The rule broken, as [`Error::close_reason`] sends it: like the
    /// `Display` text, without the peer's values.
    pub fn close_reason(&self) -> &'static str {
        match self {
            ProtocolError::ReservedBits => "reserved bits set",
            ProtocolError::ReservedOpcode(_) => "reserved opcode",
            ProtocolError::FragmentedControlFrame => "fragmented control frame",
            ProtocolError::ControlFrameTooLong(_) => "control frame over 125 bytes",
            ProtocolError::InvalidLength => "invalid payload length",
            ProtocolError::UnmaskedFrame => "unmasked frame from a client",
            ProtocolError::MaskedFrame => "masked frame from a server",
            ProtocolError::UnexpectedContinuation => "continuation frame without a message",
            ProtocolError::ExpectedContinuation => "new message inside a fragmented one",
            ProtocolError::CloseTooShort => "close frame with a one-byte payload",
            ProtocolError::InvalidCloseCode(_) => "invalid close code",
            ProtocolError::FrameAfterClose => "frame after the close frame",
            ProtocolError::InvalidCompressedData => "invalid permessage-deflate data",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_peer_fault_names_its_close_code() {
        let cases = [
            (Error::Protocol(ProtocolError::MaskedFrame), Some(1002)),
            (Error::InvalidUtf8, Some(1007)),
            (Error::FrameTooLarge { size: 2, max: 1 }, Some(1009)),
            (Error::MessageTooLarge { size: 2, max: 1 }, Some(1009)),
            (Error::OverBudget { size: 2, budget: 1 }, Some(1009)),
            (Error::BudgetExhausted, Some(1013)),
            (Error::InvalidMessage("x"), None),
            (Error::AlreadyClosed, None),
            (Error::KeepaliveTimeout, None),
            (Error::CloseTimeout, None),
        ];
        for (e, code) in cases {
            assert_eq!(e.close_code().map(|c| c.0), code, "{e}");
            // A reason exactly when there is a code to send it with.
            assert_eq!(e.close_reason().is_empty(), code.is_none(), "{e}");
        }
    }

    #[test]
    fn close_reasons_fit_a_close_frame_and_echo_nothing_of_the_peer() {
        let protocol = [
            ProtocolError::ReservedBits,
            ProtocolError::ReservedOpcode(0xb),
            ProtocolError::FragmentedControlFrame,
            ProtocolError::ControlFrameTooLong(4242),
            ProtocolError::InvalidLength,
            ProtocolError::UnmaskedFrame,
            ProtocolError::MaskedFrame,
            ProtocolError::UnexpectedContinuation,
            ProtocolError::ExpectedContinuation,
            ProtocolError::CloseTooShort,
            ProtocolError::InvalidCloseCode(4242),
            ProtocolError::FrameAfterClose,
            ProtocolError::InvalidCompressedData,
        ];
        let mut seen = std::collections::HashSet::new();
        for p in protocol {
            let reason = Error::Protocol(p.clone()).close_reason();
            assert!(!reason.is_empty() && reason.len() <= 123, "{p}: {reason:?}");
            assert!(
                !reason.contains("4242") && !reason.contains("0xb"),
                "{reason}"
            );
            assert!(seen.insert(reason), "two rules share {reason:?}");
        }
        let limits = [
            Error::FrameTooLarge { size: 4242, max: 1 },
            Error::MessageTooLarge { size: 4242, max: 1 },
            Error::OverBudget {
                size: 4242,
                budget: 1,
            },
            Error::BudgetExhausted,
            Error::Backpressure {
                buffered: 4242,
                limit: 1,
            },
            Error::InvalidUtf8,
        ];
        for e in limits {
            let reason = e.close_reason();
            assert!(!reason.is_empty() && reason.len() <= 123, "{e}: {reason:?}");
            assert!(!reason.contains("4242"), "{reason}");
            assert!(seen.insert(reason), "two errors share {reason:?}");
        }
    }

    #[test]
    fn utf8_failures_convert() {
        assert_eq!(Error::from(InvalidUtf8), Error::InvalidUtf8);
        let bytes = vec![b'a', 0xff];
        let bad = std::str::from_utf8(&bytes).unwrap_err();
        assert_eq!(Error::from(bad), Error::InvalidUtf8);
    }
}
