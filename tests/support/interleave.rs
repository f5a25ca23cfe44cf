//! What both interleaving explorations (`tests/protocol/interleavings.rs`,
//! the Stream's halves, and `tests/hub/hub_interleavings.rs`, the hub)
//! share.

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

/// A masked frame from the peer (a client): FIN set, payload under 126
/// bytes.
pub fn client_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    assert!(payload.len() < 126);
    let key = [7, 1, 9, 3];
    let mut out = vec![0x80 | opcode, 0x80 | payload.len() as u8];
    out.extend_from_slice(&key);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
    out
}

/// A current-thread runtime with its clock paused, to enter (not run
/// tasks on): timers can be made, nothing fires by itself, and code polled
/// by hand outside any task has no cooperative budget to run out of.
pub fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}
