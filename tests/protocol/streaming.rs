//! Messages in pieces: `Config::stream_messages`, `next_message_pieces`,
//! `send_pieces` and `send_reader`. The big-message memory test is in
//! tests/memory/stream_memory.rs.

use crate::support::*;
use bytes::{Bytes, BytesMut};
use futures_util::{StreamExt, stream};
use proptest::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::codec::Decoder;
use tokio_util::io::StreamReader;
use wavesock::{Config, Error, Frame, Message, OpCode, Role, WebSocketCodec, WebSocketStream};

fn streaming() -> Config {
    Config::default().stream_messages(true)
}

/// A server-side stream over a duplex pipe, and the raw client end.
fn server_pair(
    config: Config,
) -> (
    WebSocketStream<tokio::io::DuplexStream>,
    tokio::io::DuplexStream,
) {
    let (a, b) = tokio::io::duplex(1 << 20);
    (
        WebSocketStream::from_raw_socket(a, Role::Server, config).unwrap(),
        b,
    )
}

/// The close code in the next frame the server wrote.
async fn close_code_sent(peer: &mut tokio::io::DuplexStream) -> u16 {
    let mut buf = BytesMut::new();
    loop {
        let (b0, payload) = read_frame(peer, &mut buf).await.expect("a close frame");
        if b0 == 0x88 {
            return u16::from_be_bytes([payload[0], payload[1]]);
        }
    }
}

fn piece(fin: bool, opcode: OpCode, payload: &[u8]) -> Message {
    Message::Frame(Frame::new(fin, opcode, Bytes::copy_from_slice(payload)))
}

#[tokio::test]
async fn pieces_follow_the_bytes_as_they_arrive() {
    let (mut ws, mut peer) = server_pair(streaming());
    // A 10-byte text frame arrives in two writes, then a continuation.
    let first = masked(0x01, b"hello worl");
    peer.write_all(&first[..11]).await.unwrap();
    assert_eq!(
        ws.next().await.unwrap().unwrap(),
        piece(false, OpCode::Text, b"hello")
    );
    peer.write_all(&first[11..]).await.unwrap();
    assert_eq!(
        ws.next().await.unwrap().unwrap(),
        piece(false, OpCode::Continuation, b" worl")
    );
    peer.write_all(&masked(0x80, b"d")).await.unwrap();
    assert_eq!(
        ws.next().await.unwrap().unwrap(),
        piece(true, OpCode::Continuation, b"d")
    );
    // The next message starts with its own opcode again.
    peer.write_all(&masked(0x82, b"")).await.unwrap();
    assert_eq!(
        ws.next().await.unwrap().unwrap(),
        piece(true, OpCode::Binary, b"")
    );
}

#[tokio::test]
async fn control_frames_between_pieces_are_delivered_and_answered() {
    let (mut ws, mut peer) = server_pair(streaming());
    let mut input = masked(0x02, b"ab");
    input.extend(masked(0x89, b"ping"));
    input.extend(masked(0x00, b"cd"));
    input.extend(masked(0x8A, b"pong"));
    input.extend(masked(0x80, b"ef"));
    peer.write_all(&input).await.unwrap();
    let mut got = Vec::new();
    for _ in 0..5 {
        got.push(ws.next().await.unwrap().unwrap());
    }
    assert_eq!(
        got,
        vec![
            piece(false, OpCode::Binary, b"ab"),
            Message::Ping(Bytes::from_static(b"ping")),
            piece(false, OpCode::Continuation, b"cd"),
            Message::Pong(Bytes::from_static(b"pong")),
            piece(true, OpCode::Continuation, b"ef"),
        ]
    );
    let mut buf = BytesMut::new();
    // The pong goes out when the stream next waits for input.
    let (b0, payload) = tokio::select! {
        frame = read_frame(&mut peer, &mut buf) => frame.unwrap(),
        _ = ws.next() => panic!("nothing more was sent"),
    };
    assert_eq!(
        (b0, &payload[..]),
        (0x8A, &b"ping"[..]),
        "the ping is answered"
    );
}

#[tokio::test]
async fn running_message_total_is_limited_in_streaming_mode() {
    let config = streaming().max_frame_size(1024).max_message_size(4096);
    let (mut ws, mut peer) = server_pair(config);
    let kib = vec![7u8; 1024];
    let mut input = masked(0x02, &kib);
    for _ in 0..4 {
        input.extend(masked(0x00, &kib));
    }
    peer.write_all(&input).await.unwrap();
    let mut received = 0;
    let err = loop {
        match ws.next().await.unwrap() {
            Ok(Message::Frame(f)) => received += f.payload.len(),
            Ok(other) => panic!("unexpected {other:?}"),
            Err(e) => break e,
        }
    };
    assert_eq!(
        received, 4096,
        "every fragment within the limit is delivered"
    );
    assert!(
        matches!(
            err,
            Error::MessageTooLarge {
                size: 5120,
                max: 4096
            }
        ),
        "{err}"
    );
    assert_eq!(close_code_sent(&mut peer).await, 1009);
}

#[tokio::test]
async fn frame_limit_applies_in_streaming_mode() {
    let config = streaming().max_frame_size(1024).max_message_size(4096);
    let (mut ws, mut peer) = server_pair(config);
    peer.write_all(&masked(0x82, &[0; 1025])).await.unwrap();
    let err = ws.next().await.unwrap().unwrap_err();
    assert!(
        matches!(err, Error::FrameTooLarge { size: 1025, .. }),
        "{err}"
    );
    assert_eq!(close_code_sent(&mut peer).await, 1009);
}

#[tokio::test]
async fn invalid_utf8_fails_at_the_bad_byte_not_the_frame_end() {
    let (mut ws, mut peer) = server_pair(streaming());
    // A 1 MiB text frame is announced; 6 bytes come, the fifth one invalid.
    let mut frame = masked(0x81, &[b'a'; 1 << 20]);
    let start = frame.len() - (1 << 20);
    frame.truncate(start + 6);
    frame[start + 4] ^= 0xFF ^ b'a'; // masked 'a' turned into masked 0xFF
    peer.write_all(&frame[..start + 2]).await.unwrap();
    assert_eq!(
        ws.next().await.unwrap().unwrap(),
        piece(false, OpCode::Text, b"aa")
    );
    peer.write_all(&frame[start + 2..]).await.unwrap();
    let err = ws.next().await.unwrap().unwrap_err();
    assert!(matches!(err, Error::InvalidUtf8), "{err}");
    assert_eq!(close_code_sent(&mut peer).await, 1007);
}

#[tokio::test]
async fn code_point_split_across_pieces_is_accepted_and_one_cut_short_is_not() {
    let (mut ws, mut peer) = server_pair(streaming());
    let euro = "€".as_bytes();
    let frame = masked(0x81, euro);
    peer.write_all(&frame[..frame.len() - 1]).await.unwrap();
    assert_eq!(
        ws.next().await.unwrap().unwrap(),
        piece(false, OpCode::Text, &euro[..2])
    );
    peer.write_all(&frame[frame.len() - 1..]).await.unwrap();
    assert_eq!(
        ws.next().await.unwrap().unwrap(),
        piece(true, OpCode::Continuation, &euro[2..])
    );
    // A message that ends inside a code point.
    peer.write_all(&masked(0x81, &euro[..2])).await.unwrap();
    let err = ws.next().await.unwrap().unwrap_err();
    assert!(matches!(err, Error::InvalidUtf8), "{err}");
    assert_eq!(close_code_sent(&mut peer).await, 1007);
}

#[tokio::test]
async fn split_halves_stream_a_message_through_a_stream_reader() {
    let (l, addr) = listener().await;
    let server = tokio::spawn(async move {
        let (mut tx, mut rx) = accept(&l, streaming()).await.split();
        let mut received = Vec::new();
        let pieces = rx.next_message_pieces();
        StreamReader::new(pieces)
            .read_to_end(&mut received)
            .await
            .unwrap();
        tx.send(Message::text(format!("{} bytes", received.len())))
            .await
            .unwrap();
        received
    });
    let (mut tx, mut rx) = client(addr, Config::default()).await.split();
    let sent: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    let chunks: Vec<std::io::Result<Bytes>> = sent
        .chunks(7000)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    tx.send_pieces(OpCode::Binary, stream::iter(chunks))
        .await
        .unwrap();
    assert_eq!(
        rx.next().await.unwrap().unwrap(),
        Message::text("300000 bytes")
    );
    assert_eq!(server.await.unwrap(), sent);
}

#[tokio::test]
async fn text_sent_in_chunks_that_split_code_points_arrives_whole() {
    let (l, addr) = listener().await;
    let server = tokio::spawn(async move {
        let mut ws = accept(&l, Config::default()).await;
        ws.next().await.unwrap().unwrap()
    });
    let mut ws = client(addr, Config::default()).await;
    let text = "héllo wörld, 1 € ✓ 𝄞";
    // One byte per fragment: every multi-byte code point is split.
    let chunks = text.as_bytes().iter().map(|b| Ok::<_, Error>(vec![*b]));
    ws.send_pieces(OpCode::Text, stream::iter(chunks))
        .await
        .unwrap();
    assert_eq!(server.await.unwrap(), Message::text(text));
}

#[tokio::test]
async fn pieces_without_streaming_mode_come_as_one_message() {
    let (mut ws, mut peer) = server_pair(Config::default());
    let mut input = masked(0x89, b"");
    input.extend(masked(0x01, b"hel"));
    input.extend(masked(0x80, b"lo"));
    peer.write_all(&input).await.unwrap();
    let mut pieces = ws.next_message_pieces();
    assert_eq!(pieces.next().await.unwrap().unwrap(), "hello");
    assert!(pieces.next().await.is_none());
    assert_eq!(pieces.opcode(), Some(OpCode::Text));
}

#[tokio::test]
async fn empty_message_has_an_opcode_and_no_pieces() {
    let (mut ws, mut peer) = server_pair(streaming());
    peer.write_all(&masked(0x82, b"")).await.unwrap();
    let mut pieces = ws.next_message_pieces();
    assert!(pieces.next().await.is_none());
    assert_eq!(pieces.opcode(), Some(OpCode::Binary));
    assert!(pieces.is_finished());
}

#[tokio::test]
async fn close_in_mid_message_ends_the_pieces_with_an_error() {
    let (mut ws, mut peer) = server_pair(streaming());
    let mut input = masked(0x02, b"part");
    input.extend(masked(0x88, &close_payload(1000, "")));
    peer.write_all(&input).await.unwrap();
    let mut pieces = ws.next_message_pieces();
    assert_eq!(pieces.next().await.unwrap().unwrap(), "part");
    let err = pieces.next().await.unwrap().unwrap_err();
    assert!(matches!(err, Error::ConnectionClosed), "{err}");
    assert!(pieces.next().await.is_none());
    // Before any message starts, a close just ends the pieces.
    let (mut ws, mut peer) = server_pair(streaming());
    peer.write_all(&masked(0x88, &close_payload(1000, "")))
        .await
        .unwrap();
    let mut pieces = ws.next_message_pieces();
    assert!(pieces.next().await.is_none());
    assert_eq!(pieces.opcode(), None);
    assert!(ws.next().await.is_none(), "the close handshake finishes");
}

#[tokio::test]
async fn send_pieces_refuses_control_opcodes_and_a_zero_chunk_size() {
    let (mut ws, _peer) = server_pair(Config::default());
    let none = stream::iter(Vec::<Result<Bytes, Error>>::new());
    let err = ws.send_pieces(OpCode::Ping, none).await.unwrap_err();
    assert!(matches!(err, Error::InvalidMessage(_)), "{err}");
    let err = ws
        .send_reader(OpCode::Binary, &b"abc"[..], 0)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidMessage(_)), "{err}");
}

#[tokio::test]
async fn send_reader_fragments_are_what_the_wire_shows() {
    let (a, mut peer) = tokio::io::duplex(1 << 16);
    let mut ws = WebSocketStream::from_raw_socket(a, Role::Server, Config::default()).unwrap();
    ws.send_reader(OpCode::Text, &b"abcdefg"[..], 3)
        .await
        .unwrap();
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    for _ in 0..4 {
        frames.push(read_frame(&mut peer, &mut buf).await.unwrap());
    }
    assert_eq!(
        frames,
        vec![
            (0x01, b"abc".to_vec()),
            (0x00, b"def".to_vec()),
            (0x00, b"g".to_vec()),
            (0x80, Vec::new()),
        ]
    );
    // An empty source is one empty message.
    ws.send_reader(OpCode::Binary, &b""[..], 3).await.unwrap();
    assert_eq!(
        read_frame(&mut peer, &mut buf).await.unwrap(),
        (0x82, Vec::new())
    );
}

#[tokio::test]
async fn a_chunk_error_is_returned() {
    let (mut ws, _peer) = server_pair(Config::default());
    let chunks = stream::iter(vec![
        Ok(Bytes::from_static(b"a")),
        Err(std::io::Error::other("disk on fire")),
    ]);
    let err = ws.send_pieces(OpCode::Binary, chunks).await.unwrap_err();
    assert!(
        matches!(err, Error::Io(ref e) if e.to_string() == "disk on fire"),
        "{err}"
    );
}

// The decoder in streaming mode, fed at random splits.

/// One message to send: text or binary, its payload cut into frames, with
/// control frames between some of them.
#[derive(Debug, Clone)]
struct Sent {
    text: bool,
    payload: Vec<u8>,
    cuts: Vec<usize>,
    pings: Vec<bool>,
}

fn sent_message() -> impl Strategy<Value = Sent> {
    (
        any::<bool>(),
        prop::collection::vec(any::<char>(), 0..200),
        prop::collection::vec(any::<u8>(), 0..600),
        prop::collection::vec(0usize..700, 0..5),
        prop::collection::vec(any::<bool>(), 6),
    )
        .prop_map(|(text, chars, bytes, mut cuts, pings)| {
            let payload = if text {
                chars.into_iter().collect::<String>().into_bytes()
            } else {
                bytes
            };
            cuts.iter_mut().for_each(|c| *c = (*c).min(payload.len()));
            cuts.sort_unstable();
            Sent {
                text,
                payload,
                cuts,
                pings,
            }
        })
}

/// The wire bytes of `msgs`, as a client sends them, with key `key`.
fn encode(msgs: &[Sent], key: [u8; 4]) -> Vec<u8> {
    let frame = |b0: u8, payload: &[u8]| {
        let mut f = masked(b0, payload);
        // support::masked uses a fixed key; re-mask with ours.
        let start = f.len() - payload.len();
        f[start - 4..start].copy_from_slice(&key);
        for (i, b) in f[start..].iter_mut().enumerate() {
            *b = payload[i] ^ key[i % 4];
        }
        f
    };
    let mut out = Vec::new();
    for m in msgs {
        let mut bounds = vec![0];
        bounds.extend(&m.cuts);
        bounds.push(m.payload.len());
        let frames = bounds.len() - 1;
        for i in 0..frames {
            let fin = if i + 1 == frames { 0x80 } else { 0 };
            let op = match (i, m.text) {
                (0, true) => 0x1,
                (0, false) => 0x2,
                _ => 0x0,
            };
            out.extend(frame(fin | op, &m.payload[bounds[i]..bounds[i + 1]]));
            if m.pings[i] {
                out.extend(frame(0x89, &[i as u8; 3]));
            }
        }
    }
    out
}

proptest! {
    #[test]
    fn streamed_pieces_reassemble_at_any_split(
        msgs in prop::collection::vec(sent_message(), 1..5),
        key in any::<[u8; 4]>(),
        splits in prop::collection::vec(1usize..97, 1..20),
    ) {
        let input = encode(&msgs, key);
        let mut codec = WebSocketCodec::new(Role::Server, &streaming());
        let mut buf = BytesMut::new();
        let mut sizes = splits.iter().cycle();
        let mut at = 0;
        let mut out: Vec<Message> = Vec::new();
        while at < input.len() {
            let n = (*sizes.next().unwrap()).min(input.len() - at);
            buf.extend_from_slice(&input[at..at + n]);
            at += n;
            while let Some(m) = codec.decode(&mut buf).unwrap() {
                out.push(m);
            }
            // Between reads the decoder keeps at most a partial header or
            // control frame: never data payload.
            prop_assert!(buf.len() < 14 + 125, "{} bytes held", buf.len());
        }
        prop_assert!(buf.is_empty());

        let mut got: Vec<(bool, Vec<u8>)> = Vec::new();
        let mut pings = 0;
        let mut open: Option<(bool, Vec<u8>)> = None;
        for m in out {
            match m {
                Message::Frame(f) => {
                    let mut cur = match open.take() {
                        None => {
                            prop_assert!(matches!(f.opcode, OpCode::Text | OpCode::Binary));
                            (f.opcode == OpCode::Text, Vec::new())
                        }
                        Some(cur) => {
                            prop_assert_eq!(f.opcode, OpCode::Continuation);
                            cur
                        }
                    };
                    cur.1.extend_from_slice(&f.payload);
                    if f.fin { got.push(cur) } else { open = Some(cur) }
                }
                Message::Ping(_) => pings += 1,
                other => prop_assert!(false, "unexpected {:?}", other),
            }
        }
        prop_assert!(open.is_none());
        let want: Vec<(bool, Vec<u8>)> = msgs.iter().map(|m| (m.text, m.payload.clone())).collect();
        prop_assert_eq!(got, want);
        let want_pings: usize = msgs
            .iter()
            .map(|m| m.pings[..m.cuts.len() + 1].iter().filter(|p| **p).count())
            .sum();
        prop_assert_eq!(pings, want_pings);
    }
}
