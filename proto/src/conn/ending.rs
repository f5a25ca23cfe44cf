//! How a connection began to end, kept in three bytes.

use crate::close::CloseCode;

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
    /// frame owed for it, if any.
    Failed(Option<CloseCode>),
}

/// [`Ending`] packed as a kind and a code (0 for none): beside a
/// connection's flags it takes their padding instead of growing the
/// connection.
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
            Ending::Failed(code) => (3, code),
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
            1 => Some(Ending::PeerClosed(code)),
            2 => Some(Ending::Closed(code)),
            3 => Some(Ending::Failed(code)),
            _ => None,
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
        b.set(Ending::Failed(Some(CloseCode::PROTOCOL_ERROR)));
        assert_eq!(b.get(), Some(Ending::PeerClosed(Some(CloseCode(4001)))));
        for e in [
            Ending::Closed(None),
            Ending::Closed(Some(CloseCode::NORMAL)),
            Ending::Failed(None),
            Ending::PeerClosed(None),
        ] {
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
