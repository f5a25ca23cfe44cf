use super::*;

/// The masking key of the frame at the front of `wire` (a client frame
/// with a payload under 126 bytes), and the frame's length.
fn key_of(wire: &[u8]) -> ([u8; 4], usize) {
    assert_eq!(wire[1] & 0x80, 0x80, "mask bit set");
    let len = usize::from(wire[1] & 0x7f);
    (wire[2..6].try_into().unwrap(), 6 + len)
}

/// The keys of `frames` text frames of `payload` from `encoder`.
fn keys(encoder: &mut FrameEncoder, frames: usize, payload: &[u8]) -> Vec<[u8; 4]> {
    let mut out = Vec::new();
    for _ in 0..frames {
        let mut wire = BytesMut::new();
        encoder
            .encode_frame(true, OpCode::Text, payload, &mut wire)
            .unwrap();
        let (key, len) = key_of(&wire);
        assert_eq!(wire.len(), len);
        let unmasked: Vec<u8> = wire[6..]
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ key[i % 4])
            .collect();
        assert_eq!(unmasked, payload, "payload masked with the key sent");
        out.push(key);
    }
    out
}

#[test]
fn default_keys_differ_between_connections_and_frames() {
    let default = MaskKeys::default();
    assert_eq!(default, MaskKeys::Random);
    let a = keys(
        &mut FrameEncoder::with_mask_keys(Role::Client, default),
        4,
        b"x",
    );
    let b = keys(
        &mut FrameEncoder::with_mask_keys(Role::Client, default),
        4,
        b"x",
    );
    // Equal 4-byte runs from two OS-seeded generators: odds of 2^-128.
    assert_ne!(a, b);
    // The key changes from frame to frame: it is not drawn once.
    assert!(a.windows(2).any(|w| w[0] != w[1]), "{a:?}");
}

#[test]
fn counting_keys_are_first_plus_n_big_endian_and_wrap() {
    let mut enc =
        FrameEncoder::with_mask_keys(Role::Client, MaskKeys::CountingForTesting(0x0102_0304));
    assert_eq!(
        keys(&mut enc, 3, b"Hello"),
        [[1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 3, 6]]
    );
    let mut enc =
        FrameEncoder::with_mask_keys(Role::Client, MaskKeys::CountingForTesting(0xffff_fffe));
    assert_eq!(
        keys(&mut enc, 4, b""),
        [
            [0xff, 0xff, 0xff, 0xfe],
            [0xff, 0xff, 0xff, 0xff],
            [0, 0, 0, 0],
            [0, 0, 0, 1]
        ]
    );
}

#[test]
fn every_way_of_encoding_takes_the_next_key() {
    let mut enc = FrameEncoder::with_mask_keys(Role::Client, MaskKeys::CountingForTesting(7));
    let mut wire = BytesMut::new();
    let key = enc
        .encode_header(true, OpCode::Binary, 3, &mut wire)
        .unwrap();
    assert_eq!(key, Some([0, 0, 0, 7]));
    assert_eq!(wire[2..6], [0, 0, 0, 7]);
    let mut wire = BytesMut::new();
    enc.encode_message(&Message::Ping(bytes::Bytes::from_static(b"p")), &mut wire)
        .unwrap();
    assert_eq!(key_of(&wire).0, [0, 0, 0, 8]);
    let mut wire = BytesMut::new();
    enc.encode_message(&Message::Close(None), &mut wire)
        .unwrap();
    assert_eq!(key_of(&wire).0, [0, 0, 0, 9]);
}

#[test]
fn a_fixed_key_masks_every_frame() {
    let key = [0xde, 0xad, 0xbe, 0xef];
    let mut enc = FrameEncoder::with_mask_keys(Role::Client, MaskKeys::FixedForTesting(key));
    assert_eq!(keys(&mut enc, 3, b"abcdef"), [key; 3]);
    // A zero key leaves the payload as it is, the mask bit still set.
    let mut enc = FrameEncoder::with_mask_keys(Role::Client, MaskKeys::FixedForTesting([0; 4]));
    let mut wire = BytesMut::new();
    enc.encode_frame(true, OpCode::Text, b"hi", &mut wire)
        .unwrap();
    assert_eq!(wire[..], [0x81, 0x82, 0, 0, 0, 0, b'h', b'i']);
}

/// A server's frame of up to 125 bytes (the two-byte header written
/// on its own) is the general encoding's, every opcode, FIN and RSV;
/// a fragmented control frame is refused all the same.
#[test]
fn small_server_frames_match_the_general_header() {
    let mut enc = FrameEncoder::new(Role::Server);
    let ops = [
        OpCode::Continuation,
        OpCode::Text,
        OpCode::Binary,
        OpCode::Ping,
        OpCode::Pong,
        OpCode::Close,
    ];
    for opcode in ops {
        for (fin, rsv, len) in [
            (true, 0, 0),
            (false, 0, 7),
            (true, RSV1, 125),
            (true, 0, 126),
        ] {
            let payload = vec![0x5a; len];
            let mut wire = BytesMut::new();
            let r = enc.write_frame(fin, rsv, opcode, &payload, &mut wire);
            if opcode.is_control() && (!fin || len > 125) {
                assert!(r.is_err(), "{opcode:?} fin {fin} len {len}");
                continue;
            }
            r.unwrap();
            let header = FrameHeader {
                fin,
                rsv,
                opcode,
                mask: None,
                payload_len: len as u64,
            };
            let mut head = [0u8; MAX_HEADER_LEN];
            let n = header.encode(&mut head);
            assert_eq!(
                &wire[..n],
                &head[..n],
                "{opcode:?} fin {fin} rsv {rsv} len {len}"
            );
            assert_eq!(&wire[n..], &payload[..]);
        }
    }
}

#[test]
fn servers_ignore_mask_keys() {
    for keys in [
        MaskKeys::Random,
        MaskKeys::FixedForTesting([1, 2, 3, 4]),
        MaskKeys::CountingForTesting(1),
    ] {
        let mut enc = FrameEncoder::with_mask_keys(Role::Server, keys);
        let mut wire = BytesMut::new();
        enc.encode_frame(true, OpCode::Text, b"hi", &mut wire)
            .unwrap();
        assert_eq!(wire[..], [0x81, 0x02, b'h', b'i'], "{keys:?}");
        assert!(enc.keys.is_none());
    }
}

/// The server's short path for small frames writes what the general
/// header encoding writes, for every opcode, FIN, RSV and length
/// around the 125-byte edge; and refuses what it refuses.
#[test]
fn a_servers_small_frame_is_the_general_encoding() {
    let ops = [
        OpCode::Continuation,
        OpCode::Text,
        OpCode::Binary,
        OpCode::Close,
        OpCode::Ping,
        OpCode::Pong,
    ];
    for opcode in ops {
        for fin in [true, false] {
            for rsv in [0, RSV1] {
                for len in [0, 1, 16, 124, 125, 126, 200] {
                    let payload: Vec<u8> = (0..len).map(|i| i as u8 ^ 0x5a).collect();
                    let mut enc = FrameEncoder::new(Role::Server);
                    let mut got = BytesMut::new();
                    let r = enc.write_frame(fin, rsv, opcode, &payload, &mut got);
                    let header = FrameHeader {
                        fin,
                        rsv,
                        opcode,
                        mask: None,
                        payload_len: len as u64,
                    };
                    let case = format!("{opcode:?} fin {fin} rsv {rsv} len {len}");
                    if let Err(e) = header.check_outgoing() {
                        assert_eq!(r, Err(e), "{case}");
                        continue;
                    }
                    r.unwrap();
                    let mut head = [0u8; MAX_HEADER_LEN];
                    let n = header.encode(&mut head);
                    let mut want = head[..n].to_vec();
                    want.extend_from_slice(&payload);
                    assert_eq!(&got[..], &want[..], "{case}");
                }
            }
        }
    }
}

/// Owned messages of a server without compression: small ones copied
/// whole, large ones as a header and the shared payload; control
/// frames and a client's frames the general way.
#[test]
fn owned_messages_of_a_server_copy_small_and_share_large() {
    let mut enc = FrameEncoder::new(Role::Server);
    for (msg, op) in [
        (Message::text("hi"), 0x81u8),
        (Message::binary(vec![3; 125]), 0x82),
        (Message::binary(vec![3; 126]), 0x82),
        (Message::Ping(Bytes::from_static(b"p")), 0x89),
    ] {
        let mut dst = BytesMut::new();
        assert_eq!(enc.encode_owned(msg.clone(), &mut dst).unwrap(), None);
        assert_eq!(dst[0], op, "{msg:?}");
        let mut want = BytesMut::new();
        FrameEncoder::new(Role::Server)
            .encode_message(&msg, &mut want)
            .unwrap();
        assert_eq!(dst, want, "{msg:?}");
    }
    let big = Message::binary(vec![9; SHARE_PAYLOAD_MIN]);
    let mut dst = BytesMut::new();
    let shared = enc.encode_owned(big, &mut dst).unwrap();
    assert_eq!(shared.map(|b| b.len()), Some(SHARE_PAYLOAD_MIN));
    assert_eq!(&dst[..2], &[0x82, 126]);
}

#[cfg(feature = "deflate")]
mod prepared_deflate_tests {
    use bytes::BytesMut;

    use super::*;
    use crate::Limits;
    use crate::decoder::MessageDecoder;
    use crate::deflate::{DeflateConfig, DeflateParams};

    /// A server's encoder and its client's decoder under `params`.
    fn pair(params: &DeflateParams) -> (FrameEncoder, MessageDecoder) {
        let config = DeflateConfig::default();
        let mut server_dec = MessageDecoder::new(Role::Server, Limits::default());
        let mut server = FrameEncoder::new(Role::Server);
        crate::deflate::enable_for_tests(&mut server_dec, &mut server, params, &config);
        let mut client = MessageDecoder::new(Role::Client, Limits::default());
        let mut client_enc = FrameEncoder::new(Role::Client);
        crate::deflate::enable_for_tests(&mut client, &mut client_enc, params, &config);
        (server, client)
    }

    fn text(seed: usize) -> Message {
        Message::text(format!("{seed}: the same words again and again, ").repeat(50))
    }

    fn decode_one(client: &mut MessageDecoder, wire: &mut BytesMut) -> Message {
        client.decode(wire).unwrap().expect("a whole message")
    }

    #[test]
    fn a_prepared_message_is_compressed_once_per_window_and_shared() {
        let news = PreparedMessage::new(&text(0)).unwrap();
        let full = DeflateParams::default();
        let small = DeflateParams {
            server_max_window_bits: 10,
            ..DeflateParams::default()
        };
        let (mut a, mut a_client) = pair(&full);
        let (mut b, mut b_client) = pair(&full);
        let (mut c, mut c_client) = pair(&small);
        let fa = a.prepared_frame(&news).unwrap();
        let fb = b.prepared_frame(&news).unwrap();
        let fc = c.prepared_frame(&news).unwrap();
        // RSV1 set, smaller than the plain frame.
        assert_eq!(fa[0], 0x80 | 0x40 | 0x1);
        assert!(
            fa.len() < news.frame().len() / 4,
            "{} vs {}",
            fa.len(),
            news.frame().len()
        );
        // The same bytes for the same window, not a copy of them.
        assert_eq!(fa.as_ptr(), fb.as_ptr());
        assert_ne!(fa.as_ptr(), fc.as_ptr());
        for (frame, client) in [
            (fa, &mut a_client),
            (fb, &mut b_client),
            (fc, &mut c_client),
        ] {
            assert_eq!(decode_one(client, &mut BytesMut::from(&frame[..])), text(0));
        }
    }

    #[test]
    fn context_takeover_survives_a_shared_message() {
        // Messages before and after the prepared one use the connection's
        // own compressor and window; the client must read all of them.
        for server_no_context_takeover in [false, true] {
            let params = DeflateParams {
                server_no_context_takeover,
                ..DeflateParams::default()
            };
            let (mut server, mut client) = pair(&params);
            let news = PreparedMessage::new(&text(99)).unwrap();
            let mut wire = BytesMut::new();
            for i in 0..3 {
                server.encode_message(&text(i), &mut wire).unwrap();
            }
            wire.extend_from_slice(&server.prepared_frame(&news).unwrap());
            for i in 3..6 {
                server.encode_message(&text(i), &mut wire).unwrap();
            }
            wire.extend_from_slice(&server.prepared_frame(&news).unwrap());
            server.encode_message(&text(0), &mut wire).unwrap();
            let expected = [0, 1, 2, 99, 3, 4, 5, 99, 0];
            for want in expected {
                assert_eq!(decode_one(&mut client, &mut wire), text(want));
            }
            assert!(wire.is_empty());
        }
    }

    #[test]
    fn a_publish_is_compressed_once_per_window_across_policies() {
        use crate::deflate::DeflatePolicy;
        // What each policy agrees with Chromium's offer (see the
        // handshake's negotiation), and with a client that offers nothing.
        let agreed = |s: u8, c: u8, reset: bool| DeflateParams {
            server_no_context_takeover: reset,
            client_no_context_takeover: reset,
            server_max_window_bits: s,
            client_max_window_bits: c,
        };
        let subscribers = [
            (DeflatePolicy::Takeover, agreed(15, 15, false)),
            (DeflatePolicy::Shared, agreed(15, 15, true)),
            (DeflatePolicy::Dedicated(4096), agreed(11, 11, false)),
            (DeflatePolicy::Dedicated(4096), agreed(11, 15, false)),
            (DeflatePolicy::Dedicated(16384), agreed(13, 13, false)),
        ];
        let mut conns: Vec<_> = subscribers
            .iter()
            .map(|(policy, params)| {
                let config = DeflateConfig::default().policy(*policy);
                let mut server = FrameEncoder::new(Role::Server);
                let mut unused = MessageDecoder::new(Role::Server, Limits::default());
                crate::deflate::enable_for_tests(&mut unused, &mut server, params, &config);
                // The browser keeps zlib's state whatever the server's policy.
                let mut client = MessageDecoder::new(Role::Client, Limits::default());
                let mut unused = FrameEncoder::new(Role::Client);
                let browser = DeflateConfig::default();
                crate::deflate::enable_for_tests(&mut client, &mut unused, params, &browser);
                (server, client, BytesMut::new())
            })
            .collect();
        let mut expected = Vec::new();
        for round in 0..3 {
            let news = PreparedMessage::new(&text(100 + round)).unwrap();
            // Each connection's own messages before and after, the shared
            // frame encoded where it goes on the wire.
            let mut frames = Vec::new();
            for (server, _, wire) in conns.iter_mut() {
                server.encode_message(&text(round), wire).unwrap();
                let frame = server.prepared_frame(&news).unwrap();
                wire.extend_from_slice(&frame);
                frames.push(frame);
                server.encode_message(&text(round + 10), wire).unwrap();
            }
            // One compression per window: 15 (takeover and shared), 11 and 13.
            let windows = [15, 15, 11, 11, 13];
            for (i, f) in frames.iter().enumerate() {
                assert_eq!(f[0] & 0x40, 0x40, "compressed");
                for (j, g) in frames.iter().enumerate() {
                    let same = windows[i] == windows[j];
                    assert_eq!(f.as_ptr() == g.as_ptr(), same, "{i} and {j}");
                }
            }
            expected.extend([round, 100 + round, round + 10]);
        }
        for (n, (_, client, wire)) in conns.iter_mut().enumerate() {
            for &want in &expected {
                assert_eq!(decode_one(client, wire), text(want), "subscriber {n}");
            }
            assert!(wire.is_empty());
        }
    }

    #[test]
    fn a_message_goes_out_uncompressed_while_the_budget_has_no_room_for_zlib() {
        use crate::budget::{BudgetAccount, Grant, Held, MemoryBudget};
        let budget = MemoryBudget::new(1 << 20).allowance(0);
        let mut decoder =
            MessageDecoder::new(Role::Server, Limits::default().budget(Some(budget.clone())));
        let mut server = FrameEncoder::new(Role::Server);
        let (params, config) = (DeflateParams::default(), DeflateConfig::default());
        crate::deflate::enable(&mut decoder, &mut server, &params, &config).unwrap();
        let mut hog = BudgetAccount::new(Some(budget.clone()));
        assert_eq!(hog.try_set(Held::Fragments, 900 << 10), Grant::Granted);
        // A client's decoder, as any browser's.
        let (_, mut client) = pair(&params);
        let mut wire = BytesMut::new();
        server.encode_message(&text(1), &mut wire).unwrap();
        assert_eq!(wire[0], 0x81, "text, RSV1 unset");
        assert_eq!(decode_one(&mut client, &mut wire), text(1));
        hog.release_all();
        server.encode_message(&text(2), &mut wire).unwrap();
        assert_eq!(wire[0], 0xC1, "text, compressed");
        assert_eq!(decode_one(&mut client, &mut wire), text(2));
    }

    #[test]
    fn small_and_control_prepared_messages_go_out_plain() {
        let (mut server, _) = pair(&DeflateParams::default());
        for msg in [
            Message::text("hi"),
            Message::Ping(bytes::Bytes::from_static(b"p")),
        ] {
            let p = PreparedMessage::new(&msg).unwrap();
            assert_eq!(server.prepared_frame(&p).unwrap(), p.frame().clone());
        }
        // Without deflate the plain frame is shared as it is.
        let p = PreparedMessage::new(&text(1)).unwrap();
        let mut plain = FrameEncoder::new(Role::Server);
        assert_eq!(
            plain.prepared_frame(&p).unwrap().as_ptr(),
            p.frame().as_ptr()
        );
    }

    #[test]
    fn a_client_compresses_prepared_data_like_any_message() {
        let params = DeflateParams::default();
        let config = DeflateConfig::default();
        let mut client_dec = MessageDecoder::new(Role::Client, Limits::default());
        let mut client = FrameEncoder::new(Role::Client);
        crate::deflate::enable_for_tests(&mut client_dec, &mut client, &params, &config);
        let mut server = MessageDecoder::new(Role::Server, Limits::default());
        let mut server_enc = FrameEncoder::new(Role::Server);
        crate::deflate::enable_for_tests(&mut server, &mut server_enc, &params, &config);
        let p = PreparedMessage::new(&text(7)).unwrap();
        let mut wire = BytesMut::new();
        client.encode_prepared(&p, &mut wire).unwrap();
        assert_eq!(wire[0] & 0x40, 0x40, "RSV1: compressed");
        assert_eq!(server.decode(&mut wire).unwrap().unwrap(), text(7));
    }
}
