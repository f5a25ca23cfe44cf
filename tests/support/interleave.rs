//! What both interleaving explorations (`tests/interleavings.rs`, the
//! Stream's halves, and `tests/hub_interleavings.rs`, the hub) share.
//! Included with `#[path = "support/interleave.rs"] mod interleave;`.

use wavesock::Message;

/// How many steps each schedule has: `INTERLEAVE_DEPTH`, else 7.
pub fn depth() -> usize {
    std::env::var("INTERLEAVE_DEPTH")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(7)
}

/// A data message's payload, to compare with a frame's.
pub trait AsPayload {
    fn as_payload(&self) -> &[u8];
}

impl AsPayload for Message {
    fn as_payload(&self) -> &[u8] {
        match self {
            Message::Text(t) => t.as_bytes(),
            Message::Binary(b) => b,
            _ => &[],
        }
    }
}
