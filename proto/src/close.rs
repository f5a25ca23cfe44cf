//! Close codes and close frame payloads (RFC 6455 §5.5.1, §7.4).

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::{Error, ProtocolError};
use crate::text::Utf8Bytes;

pub use crate::close_code::CloseCode;

/// The most bytes a close reason may take: 125 minus the two-byte code.
pub const MAX_REASON_LEN: usize = 123;

/// The code and reason carried by a close frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloseFrame {
    /// The status code.
    pub code: CloseCode,
    /// Why, for humans; at most 123 bytes.
    pub reason: Utf8Bytes,
}

impl CloseFrame {
    /// A close frame with a code and a reason.
    pub fn new(code: CloseCode, reason: impl Into<Utf8Bytes>) -> Self {
        CloseFrame {
            code,
            reason: reason.into(),
        }
    }

    /// A close frame whose reason is `reason` cut to the
    /// [`MAX_REASON_LEN`] bytes a close frame holds, at a character
    /// boundary: for a reason that comes from elsewhere (an error's text),
    /// where refusing to close would be worse than a shorter reason.
    pub fn truncated(code: CloseCode, reason: &str) -> Self {
        let mut end = reason.len().min(MAX_REASON_LEN);
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        CloseFrame::new(code, reason[..end].to_owned())
    }

    /// Parses a received close payload. An empty payload means no status.
    pub fn parse(payload: &[u8]) -> Result<Option<CloseFrame>, Error> {
        match payload {
            [] => Ok(None),
            [_] => Err(ProtocolError::CloseTooShort.into()),
            [hi, lo, reason @ ..] => {
                let code = CloseCode(u16::from_be_bytes([*hi, *lo]));
                if !code.is_sendable() {
                    return Err(ProtocolError::InvalidCloseCode(code.0).into());
                }
                let reason = std::str::from_utf8(reason)?;
                Ok(Some(CloseFrame::new(code, reason)))
            }
        }
    }

    /// The payload for an outgoing close frame, refusing what the peer would
    /// have to reject.
    pub fn encode(frame: Option<&CloseFrame>) -> Result<Bytes, Error> {
        let Some(f) = frame else {
            return Ok(Bytes::new());
        };
        if !f.code.is_sendable() {
            return Err(Error::InvalidMessage("close code may not be sent"));
        }
        if f.reason.len() > MAX_REASON_LEN {
            return Err(Error::InvalidMessage("close reason longer than 123 bytes"));
        }
        let mut b = BytesMut::with_capacity(2 + f.reason.len());
        b.put_u16(f.code.0);
        b.extend_from_slice(f.reason.as_bytes());
        Ok(b.freeze())
    }
}

/// Why this side closes when the application gave no close frame of its
/// own: the frame every engine sends for each, chosen here once.
///
/// ```
/// use wavesock_proto::close::{CloseCode, Leaving};
///
/// assert_eq!(Leaving::Done.frame().code, CloseCode::NORMAL);
/// assert_eq!(Leaving::ShuttingDown.frame().code, CloseCode::GOING_AWAY);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Leaving {
    /// The application is done with the connection (the Stream's
    /// `Sink::close`): 1000, no reason.
    Done,
    /// The server is shutting down (the hub's shutdown): 1001, "server
    /// shutting down".
    ShuttingDown,
    /// The server dropped messages this connection subscribed to, having
    /// fallen behind (the hub's topics): 1013, "publishes missed", as when
    /// a server sheds load (come back and subscribe again).
    MissedPublishes,
}

impl Leaving {
    /// The close frame sent.
    pub fn frame(self) -> CloseFrame {
        match self {
            Leaving::Done => CloseFrame::new(CloseCode::NORMAL, ""),
            Leaving::ShuttingDown => CloseFrame::new(CloseCode::GOING_AWAY, "server shutting down"),
            Leaving::MissedPublishes => {
                CloseFrame::new(CloseCode::TRY_AGAIN_LATER, "publishes missed")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_leaving_frame_can_be_sent() {
        for l in [
            Leaving::Done,
            Leaving::ShuttingDown,
            Leaving::MissedPublishes,
        ] {
            let f = l.frame();
            let payload = CloseFrame::encode(Some(&f)).unwrap();
            assert_eq!(CloseFrame::parse(&payload).unwrap(), Some(f));
        }
    }

    #[test]
    fn truncated_reasons_fit_and_stay_utf8() {
        let short = CloseFrame::truncated(CloseCode::NORMAL, "bye");
        assert_eq!(short.reason.as_str(), "bye");
        let long = "é".repeat(100); // 200 bytes
        let cut = CloseFrame::truncated(CloseCode::NORMAL, &long);
        assert_eq!(cut.reason.len(), 122, "cut before the split character");
        assert!(CloseFrame::encode(Some(&cut)).is_ok());
        let ascii = "x".repeat(500);
        let cut = CloseFrame::truncated(CloseCode::GOING_AWAY, &ascii);
        assert_eq!(cut.reason.len(), MAX_REASON_LEN);
    }

    #[test]
    fn valid_and_invalid_codes() {
        for c in [
            1000u16, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014, 3000, 3999,
            4000, 4999,
        ] {
            assert!(CloseCode(c).is_sendable(), "{c}");
        }
        for c in [
            0u16, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999, 5000, 65535,
        ] {
            assert!(!CloseCode(c).is_sendable(), "{c}");
        }
    }

    #[test]
    fn parse_close_payloads() {
        assert_eq!(CloseFrame::parse(&[]).unwrap(), None);
        assert!(matches!(
            CloseFrame::parse(&[0x03]),
            Err(Error::Protocol(ProtocolError::CloseTooShort))
        ));
        assert!(matches!(
            CloseFrame::parse(&[0x03, 0xED]),
            Err(Error::Protocol(ProtocolError::InvalidCloseCode(1005)))
        ));
        assert!(matches!(
            CloseFrame::parse(&[0x03, 0xE8, 0xff]),
            Err(Error::InvalidUtf8)
        ));
        let f = CloseFrame::parse(&[0x03, 0xE8, b'b', b'y', b'e'])
            .unwrap()
            .unwrap();
        assert_eq!(f.code, CloseCode::NORMAL);
        assert_eq!(f.reason, "bye");
    }

    #[test]
    fn encode_refuses_unsendable() {
        assert!(CloseFrame::encode(Some(&CloseFrame::new(CloseCode::NO_STATUS, ""))).is_err());
        let long = "x".repeat(124);
        assert!(CloseFrame::encode(Some(&CloseFrame::new(CloseCode::NORMAL, long))).is_err());
        let ok =
            CloseFrame::encode(Some(&CloseFrame::new(CloseCode::NORMAL, "x".repeat(123)))).unwrap();
        assert_eq!(ok.len(), 125);
        assert_eq!(CloseFrame::encode(None).unwrap().len(), 0);
    }
}
