//! What handlers and handles see of connections: ids, messages, send
//! outcomes, how a connection ended.

use crate::error::Error;
use crate::proto::close::CloseFrame;

/// What became of a message sent on a hub connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendStatus {
    /// Queued, with less than `max_backpressure` waiting.
    Sent,
    /// Queued, but now more than `max_backpressure` waits: further sends
    /// are refused until [`Handler::drain`](crate::hub::Handler::drain).
    Backpressure,
    /// Not sent: too much waited already ([`BackpressurePolicy::Drop`](crate::hub::BackpressurePolicy::Drop)), or
    /// the connection was closed for it ([`BackpressurePolicy::Close`](crate::hub::BackpressurePolicy::Close)).
    Dropped,
    /// Not sent: the connection is closing or closed.
    Closed,
}

/// A received message, borrowed from the hub's read buffer for the length
/// of a [`Handler::message`](crate::hub::Handler::message) call. Copy what you keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HubMessage<'a> {
    /// A text message, valid UTF-8.
    Text(&'a str),
    /// A binary message.
    Binary(&'a [u8]),
}

impl<'a> HubMessage<'a> {
    /// The payload's bytes.
    pub fn as_bytes(&self) -> &'a [u8] {
        match *self {
            HubMessage::Text(t) => t.as_bytes(),
            HubMessage::Binary(b) => b,
        }
    }

    /// Whether it is a text message.
    pub fn is_text(&self) -> bool {
        matches!(self, HubMessage::Text(_))
    }
}

/// Names a connection of a hub, for [`HubHandle`](crate::hub::HubHandle). Unique for the hub's
/// lifetime: an id of a connection that is gone never names another one
/// (a slot whose generation would wrap is retired), and an id of another
/// hub's connection names none of this one's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId {
    pub(crate) hub: u32,
    pub(crate) engine: u32,
    pub(crate) slot: u32,
    pub(crate) generation: u32,
}

impl ConnId {
    /// The engine (task) serving the connection.
    pub fn engine(&self) -> usize {
        self.engine as usize
    }
}

impl std::fmt::Display for ConnId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.engine, self.slot, self.generation)
    }
}

/// How a connection ended, for [`Handler::close`](crate::hub::Handler::close).
#[derive(Debug)]
#[non_exhaustive]
pub struct Closed {
    /// The connection.
    pub id: ConnId,
    /// The peer's close frame, if one came (its code and reason).
    pub frame: Option<CloseFrame>,
    /// Why it ended otherwise: a protocol violation of the peer's (the
    /// close code sent for it is [`Error::close_code`]), a timeout, the
    /// transport failing or ending without a closing handshake, or
    /// [`Error::Backpressure`]. `None` after a clean closing handshake.
    pub error: Option<Error>,
}
