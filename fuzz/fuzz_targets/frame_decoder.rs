//! The message decoder fed the same bytes whole and in chunks (sizes taken
//! from the input): it never panics, and both ways agree on every message
//! and on the close code of the error that ends the stream, if any.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use tokio_util::codec::Decoder;
use wavesock::{CloseCode, Config, Message, Role, WebSocketCodec};

/// Messages decoded until the input runs out or an error ends it.
fn decode(role: Role, pieces: &[&[u8]]) -> (Vec<Message>, Option<Option<CloseCode>>) {
    let config = Config::default()
        .max_frame_size(1024)
        .max_message_size(4096);
    let mut codec = WebSocketCodec::new(role, &config);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for piece in pieces {
        buf.extend_from_slice(piece);
        loop {
            match codec.decode(&mut buf) {
                Ok(Some(msg)) => out.push(msg),
                Ok(None) => break,
                Err(e) => return (out, Some(e.close_code())),
            }
        }
    }
    (out, None)
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    // The first byte picks the role and how many of the following bytes
    // are chunk sizes; the rest is the wire.
    let role = if flags & 1 == 0 {
        Role::Server
    } else {
        Role::Client
    };
    let (sizes, wire) = rest.split_at(usize::from(flags >> 1).min(rest.len()));

    let whole = decode(role, &[wire]);
    let mut pieces = Vec::new();
    let mut rest = wire;
    for &s in sizes.iter().cycle().take(wire.len()) {
        if rest.is_empty() {
            break;
        }
        let (piece, tail) = rest.split_at(usize::from(s).clamp(1, rest.len()));
        pieces.push(piece);
        rest = tail;
    }
    if !rest.is_empty() {
        pieces.push(rest);
    }
    let chunked = decode(role, &pieces);
    assert_eq!(whole, chunked);
    if let (_, Some(code)) = &whole {
        assert!(code.is_some(), "a decoding error always has a close code");
    }
});
