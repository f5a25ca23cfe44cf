//! Messages and bytes in and out. The Stream records each message into
//! handles taken once per process; the hub counts into its engine's
//! [`Tally`] (plain integers) and records the turn's sums when it ends, so
//! an echo costs a few additions.

#[cfg(feature = "metrics")]
use std::sync::OnceLock;

#[cfg(feature = "metrics")]
use metrics::{Counter, Unit};

/// Messages received (counter; label `kind`).
pub const MESSAGES_RECEIVED: &str = "wavesock_messages_received_total";
/// Payload bytes received (counter; label `kind`).
pub const RECEIVED_BYTES: &str = "wavesock_received_bytes_total";
/// Messages sent (counter; label `kind`).
pub const MESSAGES_SENT: &str = "wavesock_messages_sent_total";
/// Payload bytes sent (counter; label `kind`).
pub const SENT_BYTES: &str = "wavesock_sent_bytes_total";

/// A message's kind, as the `kind` label gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Text,
    Binary,
    /// Ping, pong and close.
    Control,
}

impl Kind {
    #[cfg(feature = "metrics")]
    const ALL: [Kind; 3] = [Kind::Text, Kind::Binary, Kind::Control];

    #[cfg(feature = "metrics")]
    fn label(self) -> &'static str {
        match self {
            Kind::Text => "text",
            Kind::Binary => "binary",
            Kind::Control => "control",
        }
    }

    /// A message received or sent with `opcode` and `len` payload bytes,
    /// as counted: `None` for a close frame (connections closed count
    /// those).
    #[inline]
    pub(crate) fn counted(opcode: crate::OpCode, len: usize) -> Option<(Kind, usize)> {
        (opcode != crate::OpCode::Close).then(|| (Kind::of_opcode(opcode), len))
    }

    /// The kind of a message with `opcode` (a data frame's first; a
    /// continuation alone says nothing: [`Pieces`] remembers).
    #[inline]
    pub(crate) fn of_opcode(opcode: crate::OpCode) -> Kind {
        match opcode {
            crate::OpCode::Text => Kind::Text,
            crate::OpCode::Binary | crate::OpCode::Continuation => Kind::Binary,
            _ => Kind::Control,
        }
    }
}

/// The kind of the message passing one way in pieces (the Stream's
/// [`Message::Frame`](crate::Message::Frame)s: sent with `send_pieces`,
/// received with `Config::stream_messages`): its first piece names it, a
/// continuation does not, and it counts as one message when its last piece
/// passes. Control frames may come between. Without the feature: nothing.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Pieces {
    #[cfg(feature = "metrics")]
    kind: Option<Kind>,
}

impl Pieces {
    /// A message or piece of `len` payload bytes whose head is `(opcode,
    /// fin)`, as counted: its kind, the messages it ends (0 or 1) and its
    /// bytes; `None` for a close frame.
    #[inline]
    #[allow(unused_variables)]
    pub(crate) fn count(
        &mut self,
        (opcode, fin): (crate::OpCode, bool),
        len: usize,
    ) -> Option<(Kind, u64, usize)> {
        #[cfg(feature = "metrics")]
        {
            use crate::OpCode;
            let kind = match opcode {
                OpCode::Close => return None,
                OpCode::Continuation => self.kind.unwrap_or(Kind::Binary),
                op if op.is_control() => return Some((Kind::Control, 1, len)),
                op => Kind::of_opcode(op),
            };
            self.kind = (!fin).then_some(kind);
            Some((kind, u64::from(fin), len))
        }
        #[cfg(not(feature = "metrics"))]
        None
    }
}

/// Counters for each kind, one direction.
#[cfg(feature = "metrics")]
struct Direction {
    messages: [Counter; 3],
    bytes: [Counter; 3],
}

#[cfg(feature = "metrics")]
impl Direction {
    fn new(messages: &'static str, bytes: &'static str) -> Self {
        Direction {
            messages: Kind::ALL.map(|k| metrics::counter!(messages, "kind" => k.label())),
            bytes: Kind::ALL.map(|k| metrics::counter!(bytes, "kind" => k.label())),
        }
    }

    #[inline]
    fn add(&self, kind: Kind, messages: u64, bytes: u64) {
        self.messages[kind as usize].increment(messages);
        self.bytes[kind as usize].increment(bytes);
    }
}

#[cfg(feature = "metrics")]
struct Traffic {
    received: Direction,
    sent: Direction,
}

#[cfg(feature = "metrics")]
fn traffic() -> &'static Traffic {
    static TRAFFIC: OnceLock<Traffic> = OnceLock::new();
    TRAFFIC.get_or_init(|| Traffic {
        received: Direction::new(MESSAGES_RECEIVED, RECEIVED_BYTES),
        sent: Direction::new(MESSAGES_SENT, SENT_BYTES),
    })
}

/// `messages` (a message, or 0 for a piece that ends none) of `kind` and
/// `len` payload bytes received.
#[inline]
#[allow(unused_variables)]
pub(crate) fn received(kind: Kind, messages: u64, len: usize) {
    #[cfg(feature = "metrics")]
    traffic().received.add(kind, messages, len as u64);
}

/// `messages` (as for [`received`]) of `kind` and `len` payload bytes
/// sent.
#[inline]
#[allow(unused_variables)]
pub(crate) fn sent(kind: Kind, messages: u64, len: usize) {
    #[cfg(feature = "metrics")]
    traffic().sent.add(kind, messages, len as u64);
}

/// Messages and bytes counted by an engine between two
/// [`record`](Self::record)s. Without the feature: nothing.
#[derive(Debug, Default)]
#[cfg(feature = "hub")]
pub(crate) struct Tally {
    /// Received then sent, messages then bytes, by kind.
    #[cfg(feature = "metrics")]
    counts: [[[u64; 3]; 2]; 2],
    /// Connections write-blocked since, less those unblocked; the bytes
    /// they have waiting, likewise.
    #[cfg(feature = "metrics")]
    blocked: (i64, i64),
}

#[cfg(feature = "hub")]
impl Tally {
    /// A message of `kind` and `len` payload bytes received.
    #[inline]
    #[allow(unused_variables)]
    pub(crate) fn received(&mut self, kind: Kind, len: usize) {
        #[cfg(feature = "metrics")]
        self.add(0, kind, 1, len);
    }

    /// `messages` (a message, or 0 for a piece that ends none) of `kind`
    /// and `len` payload bytes sent.
    #[inline]
    #[allow(unused_variables)]
    pub(crate) fn sent(&mut self, kind: Kind, messages: u64, len: usize) {
        #[cfg(feature = "metrics")]
        self.add(1, kind, messages, len);
    }

    /// A change of the write-blocked gauges ([`Blocked`](super::Blocked)):
    /// connections, bytes.
    #[inline]
    #[allow(unused_variables)]
    pub(crate) fn write_blocked(&mut self, (connections, bytes): (i64, i64)) {
        #[cfg(feature = "metrics")]
        {
            self.blocked.0 += connections;
            self.blocked.1 += bytes;
        }
    }

    #[cfg(feature = "metrics")]
    #[inline]
    fn add(&mut self, way: usize, kind: Kind, messages: u64, len: usize) {
        self.counts[way][0][kind as usize] += messages;
        self.counts[way][1][kind as usize] += len as u64;
    }

    /// Records what was counted, and starts again from zero.
    #[inline]
    pub(crate) fn record(&mut self) {
        #[cfg(feature = "metrics")]
        if self.blocked != (0, 0) {
            let (connections, bytes) = std::mem::take(&mut self.blocked);
            super::pressure::write_blocked(connections, bytes);
        }
        #[cfg(feature = "metrics")]
        if self.counts != [[[0; 3]; 2]; 2] {
            let t = traffic();
            for (way, direction) in [&t.received, &t.sent].into_iter().enumerate() {
                for kind in Kind::ALL {
                    let [messages, bytes] = self.counts[way].map(|c| c[kind as usize]);
                    if messages != 0 || bytes != 0 {
                        direction.add(kind, messages, bytes);
                    }
                }
            }
            self.counts = [[[0; 3]; 2]; 2];
        }
    }
}

#[cfg(feature = "metrics")]
pub(super) fn describe_all() {
    use metrics::describe_counter;
    describe_counter!(
        MESSAGES_RECEIVED,
        Unit::Count,
        "Messages received, by kind."
    );
    describe_counter!(
        RECEIVED_BYTES,
        Unit::Bytes,
        "Payload bytes received, by kind."
    );
    describe_counter!(MESSAGES_SENT, Unit::Count, "Messages sent, by kind.");
    describe_counter!(SENT_BYTES, Unit::Bytes, "Payload bytes sent, by kind.");
}
