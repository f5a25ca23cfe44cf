//! Inputs the fuzzers found, replayed by `cargo test`: every file under
//! `fuzz/regressions/<target>/` goes through the same property function as
//! the fuzz target (`fuzz/src/lib.rs`, included here), so a fixed bug stays
//! fixed. Adding one is described in `fuzz/README.md`.

use std::path::Path;

use crate::props;

/// Runs every regression input of `target` through its property.
fn replay(target: &str) {
    let (_, property) = props::TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .expect("a known target");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/regressions")
        .join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    let mut files: Vec<_> = entries.map(|e| e.unwrap().path()).collect();
    files.sort();
    for file in files {
        let data = std::fs::read(&file).unwrap();
        let name = file.display().to_string();
        if std::panic::catch_unwind(|| property(&data)).is_err() {
            panic!("{name} fails again");
        }
    }
}

#[test]
fn frame_decoder_regressions() {
    replay("frame_decoder");
}

#[test]
fn utf8_regressions() {
    replay("utf8");
}

#[test]
fn handshake_regressions() {
    replay("handshake");
}

#[test]
fn deflate_regressions() {
    replay("deflate");
}

#[test]
fn conn_regressions() {
    replay("conn");
}

#[test]
fn hub_regressions() {
    replay("hub");
}

/// The seed corpus passes too (quick: tens of small files per target).
#[test]
fn seed_corpus_passes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    for (target, property) in props::TARGETS {
        for entry in std::fs::read_dir(root.join(target)).unwrap() {
            let path = entry.unwrap().path();
            property(&std::fs::read(&path).unwrap());
        }
    }
}

// The bugs, one test each, named after them.

/// Found by the `conn` target: a decoding error after the peer's close
/// frame moved the core from `Closed` to `Failing`, so a closing handshake
/// that had completed ended with a protocol error (and a client no longer
/// waited for the server to end TCP). Now errors count only while open.
#[test]
fn error_after_peer_close_left_closed_phase() {
    use std::time::Instant;
    use wavesock::proto::conn::{Connection, Phase, Timers};
    use wavesock::proto::{Error, ProtocolError};
    use wavesock::{CloseCode, CloseFrame, Message, Role};

    let t0 = Instant::now();
    let mut c = Connection::new(Role::Client, Timers::default(), t0);
    let close = CloseFrame::new(CloseCode::NORMAL, "");
    c.handle_frame(&Message::Close(Some(close.clone())), t0);
    c.handle_error(Error::Protocol(ProtocolError::ReservedBits), t0);
    assert_eq!(c.phase(), Phase::Closed);
    assert!(c.phase().awaits_transport_end(Role::Client));
    assert_eq!(c.poll_transmit(), Some(Message::Close(Some(close))));
    assert_eq!(c.poll_transmit(), None);
    assert_eq!(c.take_error(), None);
}

#[test]
fn driver_inbox_and_receive_regressions() {
    replay("driver");
    replay("inbox");
    replay("receive");
    replay("receive_in");
}
