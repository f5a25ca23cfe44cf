//! How a connection began to end, kept in three bytes.

use crate::close::CloseCode;
use crate::error::Error;

/// How a connection began to end: the first of the closing events
/// ([`Connection::ending`](super::Connection::ending)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The peer's close frame came first, with this code (`None`: an empty
    /// close frame).
    PeerClosed(Option<CloseCode>),
    /// Ours did, with this code (`None`: an empty close frame, or one
    /// encoded before it was sent).
    Closed(Option<CloseCode>),
    /// The connection failed: a protocol error, a limit, the memory
    /// budget, a keepalive that went unanswered. The code of the close
    /// frame owed for it, if any, and why.
    Failed(Option<CloseCode>, Failure),
}

/// Why a connection failed, in a few kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failure {
    /// The peer broke the protocol (invalid UTF-8 included).
    Protocol,
    /// A frame or message over the limits.
    TooLarge,
    /// A message over the whole memory budget (1009).
    OverBudget,
    /// The memory budget's wait ran out (1013).
    BudgetExhausted,
    /// The peer did not read what it was sent (a hub's backpressure
    /// policy, 1013).
    Backpressure,
    /// A keepalive ping went unanswered.
    KeepaliveTimeout,
    /// Another deadline passed (the opening or closing handshake's).
    Timeout,
    /// Compressing or inflating failed.
    Compression,
    /// Anything else.
    Other,
}

impl Failure {
    const ALL: [Failure; 9] = [
        Failure::Protocol,
        Failure::TooLarge,
        Failure::OverBudget,
        Failure::BudgetExhausted,
        Failure::Backpressure,
        Failure::KeepaliveTimeout,
        Failure::Timeout,
        Failure::Compression,
        Failure::Other,
    ];

    /// The kind of failure `err` is.
    pub fn of(err: &Error) -> Failure {
        match err {
            Error::Protocol(_) | Error::InvalidUtf8 => Failure::Protocol,
            Error::FrameTooLarge { .. } | Error::MessageTooLarge { .. } => Failure::TooLarge,
            Error::OverBudget { .. } => Failure::OverBudget,
            Error::BudgetExhausted => Failure::BudgetExhausted,
            Error::Backpressure { .. } => Failure::Backpressure,
            Error::KeepaliveTimeout => Failure::KeepaliveTimeout,
            Error::CloseTimeout | Error::HandshakeTimeout => Failure::Timeout,
            Error::Compression(_) => Failure::Compression,
            _ => Failure::Other,
        }
    }

    /// Its name in logs and metrics: `protocol`, `too_large`,
    /// `over_budget`, `budget_exhausted`, `backpressure`,
    /// `keepalive_timeout`, `timeout`, `compression`, `other`.
    pub fn name(self) -> &'static str {
        match self {
            Failure::Protocol => "protocol",
            Failure::TooLarge => "too_large",
            Failure::OverBudget => "over_budget",
            Failure::BudgetExhausted => "budget_exhausted",
            Failure::Backpressure => "backpressure",
            Failure::KeepaliveTimeout => "keepalive_timeout",
            Failure::Timeout => "timeout",
            Failure::Compression => "compression",
            Failure::Other => "other",
        }
    }
}

/// [`Ending`] packed as a kind (a failure's kind beyond the first three)
/// and a code (0 for none): beside a connection's flags it takes their
/// padding instead of growing the connection.
#[derive(Debug, Clone, Copy)]
pub(super) struct Began {
    kind: u8,
    code: u16,
}

impl Began {
    pub(super) const NOT: Began = Began { kind: 0, code: 0 };

    /// Records `ending` unless an earlier one was.
    #[inline]
    pub(super) fn set(&mut self, ending: Ending) {
        if self.kind != 0 {
            return;
        }
        let (kind, code) = match ending {
            Ending::PeerClosed(code) => (1, code),
            Ending::Closed(code) => (2, code),
            Ending::Failed(code, why) => (3 + why as u8, code),
        };
        *self = Began {
            kind,
            code: code.map_or(0, |c| c.0),
        };
    }

    #[inline]
    pub(super) fn get(self) -> Option<Ending> {
        let code = (self.code != 0).then_some(CloseCode(self.code));
        match self.kind {
            0 => None,
            1 => Some(Ending::PeerClosed(code)),
            2 => Some(Ending::Closed(code)),
            k => Some(Ending::Failed(code, Failure::ALL[usize::from(k - 3)])),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_ending_stays_and_round_trips() {
        let mut b = Began::NOT;
        assert_eq!(b.get(), None);
        b.set(Ending::PeerClosed(Some(CloseCode(4001))));
        b.set(Ending::Failed(
            Some(CloseCode::PROTOCOL_ERROR),
            Failure::Protocol,
        ));
        assert_eq!(b.get(), Some(Ending::PeerClosed(Some(CloseCode(4001)))));
        let failures = Failure::ALL.map(|why| Ending::Failed(Some(CloseCode(1013)), why));
        for e in [
            Ending::Closed(None),
            Ending::Closed(Some(CloseCode::NORMAL)),
            Ending::Failed(None, Failure::Other),
            Ending::PeerClosed(None),
        ]
        .into_iter()
        .chain(failures)
        {
            let mut b = Began::NOT;
            b.set(e);
            assert_eq!(b.get(), Some(e));
        }
    }

    #[test]
    fn a_connection_does_not_grow_for_it() {
        assert!(std::mem::size_of::<super::super::Connection>() <= 40);
    }
}
