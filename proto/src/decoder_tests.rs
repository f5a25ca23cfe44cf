use super::*;
use crate::encoder::FrameEncoder;

fn client_wire(msgs: &[Message]) -> BytesMut {
    let mut wire = BytesMut::new();
    let mut enc = FrameEncoder::new(Role::Client);
    for m in msgs {
        enc.encode_message(m, &mut wire).unwrap();
    }
    wire
}

/// In place, a masked one-frame message decodes to what `decode` gives,
/// and the messages after it follow from where it ended.
#[test]
fn borrowed_decoding_matches_owned_decoding() {
    let msgs = [
        Message::text("héllo"),
        Message::binary(vec![0u8, 1, 2, 255]),
        Message::text(""),
        Message::binary(vec![9u8; 70_000]),
    ];
    let mut wire = client_wire(&msgs);
    let mut owned = wire.clone();
    let mut dec = MessageDecoder::new(Role::Server, Limits::default());
    let mut reference = MessageDecoder::new(Role::Server, Limits::default());
    let mut at = 0;
    for m in &msgs {
        let b = dec
            .decode_borrowed(&mut wire[at..])
            .unwrap()
            .expect("whole");
        let expected = reference.decode(&mut owned).unwrap().unwrap();
        assert_eq!(&expected, m);
        match (b.data, m) {
            (BorrowedData::Text(t), Message::Text(e)) => assert_eq!(t, e.as_str()),
            (BorrowedData::Binary(p), Message::Binary(e)) => assert_eq!(p, &e[..]),
            other => panic!("{other:?}"),
        }
        at += b.used;
    }
    assert_eq!(at, wire.len());
    assert!(owned.is_empty());
}

/// Anything but a whole one-frame data message is left, untouched,
/// for `decode`, which then decodes it as ever.
#[test]
fn borrowed_decoding_leaves_everything_else_to_decode() {
    let ping = client_wire(&[Message::Ping(bytes::Bytes::from_static(b"p"))]);
    let whole = client_wire(&[Message::binary(vec![5u8; 300])]);
    let cut = BytesMut::from(&whole[..whole.len() - 1]);
    // A first fragment: FIN clear.
    let mut fragment = whole.clone();
    fragment[0] &= 0x7F;
    // RSV1 without compression negotiated: `decode` refuses it.
    let mut rsv = whole.clone();
    rsv[0] |= 0x40;
    for (what, wire) in [
        ("ping", ping),
        ("unfinished", cut),
        ("fragment", fragment),
        ("rsv", rsv),
    ] {
        let mut dec = MessageDecoder::new(Role::Server, Limits::default());
        let mut buf = wire.clone();
        assert_eq!(dec.decode_borrowed(&mut buf).unwrap(), None, "{what}");
        assert_eq!(buf, wire, "{what}: nothing consumed or unmasked");
        let mut reference = MessageDecoder::new(Role::Server, Limits::default());
        let mut wire2 = wire.clone();
        assert_eq!(
            dec.decode(&mut buf).map_err(|e| e.to_string()),
            reference.decode(&mut wire2).map_err(|e| e.to_string()),
            "{what}"
        );
    }
    // After a first fragment the decoder is in a message: the next
    // whole frame (a continuation) is `decode`'s too.
    let mut dec = MessageDecoder::new(Role::Server, Limits::default());
    let mut first = client_wire(&[Message::binary(vec![1u8; 3])]);
    first[0] &= 0x7F;
    assert_eq!(dec.decode(&mut first).unwrap(), None);
    let mut text = client_wire(&[Message::text("x")]);
    assert_eq!(dec.decode_borrowed(&mut text).unwrap(), None);
}

/// The rules hold in place: bad UTF-8 and an oversized frame are errors,
/// and an unmasked client frame is refused by `decode` as ever.
#[test]
fn borrowed_decoding_keeps_the_rules() {
    let mut bad = client_wire(&[Message::binary(vec![0xC3, 0x28])]);
    bad[0] = 0x81; // the same bytes as text
    let mut dec = MessageDecoder::new(Role::Server, Limits::default());
    assert!(dec.decode_borrowed(&mut bad).is_err());
    let limits = Limits {
        max_frame_size: 10,
        ..Limits::default()
    };
    let mut big = client_wire(&[Message::binary(vec![0u8; 11])]);
    let mut dec = MessageDecoder::new(Role::Server, limits);
    assert!(matches!(
        dec.decode_borrowed(&mut big),
        Err(Error::FrameTooLarge { size: 11, max: 10 })
    ));
    let mut unmasked = BytesMut::from(&[0x82u8, 0x01, 0x07][..]);
    let mut dec = MessageDecoder::new(Role::Server, Limits::default());
    assert!(dec.decode_borrowed(&mut unmasked).is_err());
}

/// A client's frame of `len` bytes in a buffer of exactly its size.
fn exact_frame(len: usize) -> BytesMut {
    let mut wire = BytesMut::new();
    FrameEncoder::new(Role::Client)
        .encode_message(&Message::binary(vec![7; len]), &mut wire)
        .unwrap();
    let mut exact = BytesMut::with_capacity(wire.len());
    exact.extend_from_slice(&wire);
    assert_eq!(exact.capacity(), exact.len());
    exact
}

#[test]
fn a_payload_that_fills_the_buffer_leaves_it_no_share() {
    for len in [100, 64 << 10, 1 << 20] {
        let mut src = exact_frame(len);
        let mut dec = MessageDecoder::new(Role::Server, Limits::default());
        let Some(Message::Binary(payload)) = dec.decode(&mut src).unwrap() else {
            panic!("a binary message");
        };
        assert_eq!(payload.len(), len);
        assert!(src.is_empty());
        // The message is its memory's only owner: nothing left in the
        // reader's buffer keeps that memory alive once it is dropped.
        assert!(
            payload.try_into_mut().is_ok(),
            "{len}: the buffer kept a share"
        );
    }
}

/// The short way to a small frame's header finds what the full parse
/// finds, whatever the bytes: every first and second byte (each opcode,
/// FIN, RSV, mask bit and length form), cut at every length around the
/// header and a small payload.
#[test]
fn the_small_frame_header_reads_as_the_full_parse() {
    let mut src = [0u8; 160];
    for (i, b) in src.iter_mut().enumerate().skip(2) {
        *b = (i * 37 + 11) as u8;
    }
    for b0 in 0..=255u8 {
        for b1 in 0..=255u8 {
            src[0] = b0;
            src[1] = b1;
            let lens = (0..16).chain((b1 & 0x7F) as usize..(b1 & 0x7F) as usize + 16);
            for len in lens.filter(|&l| l <= src.len()) {
                let src = &src[..len];
                assert_eq!(
                    Borrowable::at_front(src),
                    Borrowable::parsed(src),
                    "{b0:#04x} {b1:#04x}, {len} bytes"
                );
            }
        }
    }
}

proptest::proptest! {
    /// Any bytes at all: the same answer both ways.
    #[test]
    fn any_bytes_find_the_same_frame_both_ways(src in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
        proptest::prop_assert_eq!(Borrowable::at_front(&src), Borrowable::parsed(&src));
    }
}
