//! A read that is exactly one whole one-frame data message, decoded where
//! it lies (`Receiver::received`, `Inbox::take_whole`), on real loopback
//! sockets: each frame is written alone and given time to be read alone,
//! so the Stream's stack read holds exactly that frame. Order, payloads,
//! the close codes of broken frames, and the reads around them (mid-frame,
//! fragments, control frames, a filled stack buffer) as before.

use std::time::Duration;

use bytes::BytesMut;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use wavesock::{CloseCode, Config, Message, Role, WebSocketStream};

use crate::support::{close_payload, masked, unmasked};

/// A Stream of `role` over one end of a loopback connection, and the raw
/// other end (the peer, writing frames by hand).
async fn pair(role: Role, config: Config) -> (WebSocketStream<TcpStream>, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let peer = TcpStream::connect(addr).await.unwrap();
    let (ours, _) = l.accept().await.unwrap();
    peer.set_nodelay(true).unwrap();
    ours.set_nodelay(true).unwrap();
    (
        WebSocketStream::from_raw_socket(ours, role, config).unwrap(),
        peer,
    )
}

/// What the Stream handed out until it ended: its messages (kept, all of
/// them, to the end) and the error it ended with, if any.
type Got = (Vec<Message>, Option<wavesock::Error>);

fn collect(mut ws: WebSocketStream<TcpStream>) -> JoinHandle<Got> {
    tokio::spawn(async move {
        let mut got = Vec::new();
        while let Some(r) = ws.next().await {
            match r {
                Ok(m) => got.push(m),
                Err(e) => return (got, Some(e)),
            }
        }
        (got, None)
    })
}

/// Long enough for the Stream to read what was written before the next
/// write: each write is then a read of its own.
async fn pause() {
    tokio::time::sleep(Duration::from_millis(30)).await;
}

/// Writes each piece alone, with a pause after it.
async fn write_apart(peer: &mut TcpStream, pieces: &[Vec<u8>]) {
    for p in pieces {
        peer.write_all(p).await.unwrap();
        pause().await;
    }
}

/// Reads one frame of either side (masked or not): (first byte, payload).
async fn read_any(peer: &mut TcpStream) -> Option<(u8, Vec<u8>)> {
    let mut head = [0u8; 2];
    match tokio::time::timeout(Duration::from_secs(10), peer.read_exact(&mut head))
        .await
        .expect("in time")
    {
        Ok(_) => {}
        Err(_) => return None,
    }
    let len = match head[1] & 0x7f {
        126 => peer.read_u16().await.unwrap() as usize,
        127 => peer.read_u64().await.unwrap() as usize,
        n => n as usize,
    };
    let mut key = [0u8; 4];
    if head[1] & 0x80 != 0 {
        peer.read_exact(&mut key).await.unwrap();
    }
    let mut payload = vec![0u8; len];
    peer.read_exact(&mut payload).await.unwrap();
    if head[1] & 0x80 != 0 {
        for (i, b) in payload.iter_mut().enumerate() {
            *b ^= key[i % 4];
        }
    }
    Some((head[0], payload))
}

/// Reads frames until the close; its code (`None`: an empty close, or the
/// connection ended without one).
async fn close_code(peer: &mut TcpStream) -> Option<u16> {
    while let Some((b0, p)) = read_any(peer).await {
        if b0 & 0x0f == 0x8 {
            return (p.len() >= 2).then(|| u16::from_be_bytes([p[0], p[1]]));
        }
    }
    None
}

/// Distinct bytes for message `i` of `len` bytes.
fn payload(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| b'a' + ((i * 7 + j) % 26) as u8).collect()
}

fn message(i: usize, len: usize) -> Message {
    if i % 2 == 0 {
        Message::text(String::from_utf8(payload(i, len)).unwrap())
    } else {
        Message::binary(payload(i, len))
    }
}

/// The first byte of message `i`'s frame (FIN, text or binary).
fn b0(i: usize) -> u8 {
    if i % 2 == 0 { 0x81 } else { 0x82 }
}

/// Payload sizes around every boundary the fast path meets: the length
/// encodings (125/126, 65535/65536), the arena's 2 KiB, and the 4 KiB
/// stack read (4088 + an 8-byte header fills it exactly; 4089 does not fit).
const SIZES: &[usize] = &[
    0, 1, 2, 3, 4, 5, 124, 125, 126, 127, 2038, 2047, 2048, 2049, 4080, 4087, 4088, 4089, 8192,
    65535, 65536, 70000,
];

#[tokio::test]
async fn whole_frames_of_every_boundary_size_read_alone_arrive_intact_and_in_order() {
    let (ws, mut peer) = pair(Role::Server, Config::default()).await;
    let task = collect(ws);
    let frames: Vec<Vec<u8>> = SIZES
        .iter()
        .enumerate()
        .map(|(i, &n)| masked(b0(i), &payload(i, n)))
        .collect();
    write_apart(&mut peer, &frames).await;
    peer.write_all(&masked(0x88, &close_payload(1000, "")))
        .await
        .unwrap();
    assert_eq!(close_code(&mut peer).await, Some(1000));
    let (got, err) = task.await.unwrap();
    assert!(err.is_none(), "{err:?}");
    let want: Vec<Message> = SIZES
        .iter()
        .enumerate()
        .map(|(i, &n)| message(i, n))
        .collect();
    assert_eq!(got.len(), want.len() + 1);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(g == w, "message {i} ({} bytes) changed", SIZES[i]);
    }
    assert!(got.last().unwrap().is_close());
}

#[tokio::test]
async fn a_whole_frame_read_right_after_a_read_that_ended_mid_frame_keeps_order() {
    let (ws, mut peer) = pair(Role::Server, Config::default()).await;
    let task = collect(ws);
    for (i, len) in [(0, 10), (1, 300), (2, 3000), (3, 5000)] {
        let first = masked(b0(i), &payload(i, len));
        // Cut in the header, then in the payload.
        for cut in [1, 3, first.len() / 2, first.len() - 1] {
            write_apart(
                &mut peer,
                &[
                    first[..cut].to_vec(),
                    first[cut..].to_vec(),
                    masked(0x82, b"next"),
                ],
            )
            .await;
        }
    }
    peer.write_all(&masked(0x88, &close_payload(1000, "")))
        .await
        .unwrap();
    assert_eq!(close_code(&mut peer).await, Some(1000));
    let (got, err) = task.await.unwrap();
    assert!(err.is_none(), "{err:?}");
    let mut want = Vec::new();
    for (i, len) in [(0, 10), (1, 300), (2, 3000), (3, 5000)] {
        for _ in 0..4 {
            want.push(message(i, len));
            want.push(Message::binary(&b"next"[..]));
        }
    }
    want.push(Message::Close(Some(wavesock::CloseFrame::new(
        CloseCode::NORMAL,
        "",
    ))));
    assert!(got == want, "{} messages, {} wanted", got.len(), want.len());
}

#[tokio::test]
async fn a_read_of_a_frame_end_and_a_whole_frame_hands_out_both_in_order() {
    let (ws, mut peer) = pair(Role::Server, Config::default()).await;
    let task = collect(ws);
    let a = masked(0x81, b"first message");
    let mut rest_and_b = a[5..].to_vec();
    rest_and_b.extend(masked(0x82, b"second"));
    write_apart(
        &mut peer,
        &[a[..5].to_vec(), rest_and_b, masked(0x81, b"third")],
    )
    .await;
    peer.write_all(&masked(0x88, b"")).await.unwrap();
    assert_eq!(close_code(&mut peer).await, None);
    let (got, err) = task.await.unwrap();
    assert!(err.is_none(), "{err:?}");
    assert_eq!(
        got,
        vec![
            Message::text("first message"),
            Message::binary(&b"second"[..]),
            Message::text("third"),
            Message::Close(None)
        ]
    );
}

#[tokio::test]
async fn a_whole_text_frame_read_while_a_fragmented_message_is_in_progress_fails_with_1002() {
    for second in [0x81u8, 0x82] {
        let (ws, mut peer) = pair(Role::Server, Config::default()).await;
        let task = collect(ws);
        write_apart(
            &mut peer,
            &[masked(0x01, b"frag"), masked(second, b"whole")],
        )
        .await;
        assert_eq!(close_code(&mut peer).await, Some(1002));
        let (got, err) = task.await.unwrap();
        assert!(got.is_empty(), "{got:?}");
        assert_eq!(
            err.expect("an error").close_code(),
            Some(CloseCode::PROTOCOL_ERROR)
        );
    }
}

#[tokio::test]
async fn a_fragmented_message_finished_by_a_read_of_its_last_frame_alone_arrives_whole() {
    let (ws, mut peer) = pair(Role::Server, Config::default()).await;
    let task = collect(ws);
    write_apart(
        &mut peer,
        &[
            masked(0x01, b"ab"),
            masked(0x00, b"cd"),
            masked(0x80, b"ef"),
            masked(0x82, b"after"),
        ],
    )
    .await;
    peer.write_all(&masked(0x88, b"")).await.unwrap();
    assert_eq!(close_code(&mut peer).await, None);
    let (got, err) = task.await.unwrap();
    assert!(err.is_none(), "{err:?}");
    assert_eq!(
        got,
        vec![
            Message::text("abcdef"),
            Message::binary(&b"after"[..]),
            Message::Close(None)
        ]
    );
}

#[tokio::test]
async fn a_continuation_frame_read_alone_with_no_message_in_progress_fails_with_1002() {
    let (ws, mut peer) = pair(Role::Server, Config::default()).await;
    let task = collect(ws);
    write_apart(&mut peer, &[masked(0x80, b"lost")]).await;
    assert_eq!(close_code(&mut peer).await, Some(1002));
    let (got, err) = task.await.unwrap();
    assert!(got.is_empty(), "{got:?}");
    assert!(err.is_some());
}

#[tokio::test]
async fn a_data_frame_read_alone_after_a_ping_read_alone_comes_after_the_pong() {
    let (ws, mut peer) = pair(Role::Server, Config::default()).await;
    let task = collect(ws);
    write_apart(&mut peer, &[masked(0x89, b"p1")]).await;
    assert_eq!(read_any(&mut peer).await, Some((0x8A, b"p1".to_vec())));
    write_apart(&mut peer, &[masked(0x81, b"data"), masked(0x89, b"p2")]).await;
    assert_eq!(read_any(&mut peer).await, Some((0x8A, b"p2".to_vec())));
    write_apart(&mut peer, &[masked(0x82, b"more")]).await;
    peer.write_all(&masked(0x88, b"")).await.unwrap();
    assert_eq!(close_code(&mut peer).await, None);
    let (got, err) = task.await.unwrap();
    assert!(err.is_none(), "{err:?}");
    assert_eq!(
        got,
        vec![
            Message::Ping("p1".into()),
            Message::text("data"),
            Message::Ping("p2".into()),
            Message::binary(&b"more"[..]),
            Message::Close(None)
        ]
    );
}

#[tokio::test]
async fn an_unmasked_whole_frame_to_a_server_fails_with_1002() {
    for b0 in [0x81u8, 0x82] {
        let (ws, mut peer) = pair(Role::Server, Config::default()).await;
        let task = collect(ws);
        write_apart(&mut peer, &[masked(0x82, b"ok"), unmasked(b0, b"bare")]).await;
        assert_eq!(close_code(&mut peer).await, Some(1002));
        let (got, err) = task.await.unwrap();
        assert_eq!(got, vec![Message::binary(&b"ok"[..])]);
        assert_eq!(
            err.expect("an error").close_code(),
            Some(CloseCode::PROTOCOL_ERROR)
        );
    }
}

#[tokio::test]
async fn an_unmasked_whole_frame_is_accepted_by_a_server_that_accepts_unmasked_frames() {
    let config = Config::default().accept_unmasked_frames(true);
    let (ws, mut peer) = pair(Role::Server, config).await;
    let task = collect(ws);
    write_apart(
        &mut peer,
        &[
            unmasked(0x81, b"bare"),
            masked(0x82, b"masked"),
            unmasked(0x82, &[]),
        ],
    )
    .await;
    peer.write_all(&unmasked(0x88, b"")).await.unwrap();
    assert_eq!(close_code(&mut peer).await, None);
    let (got, err) = task.await.unwrap();
    assert!(err.is_none(), "{err:?}");
    assert_eq!(
        got,
        vec![
            Message::text("bare"),
            Message::binary(&b"masked"[..]),
            Message::binary(Vec::new()),
            Message::Close(None)
        ]
    );
}

#[tokio::test]
async fn a_whole_frame_of_invalid_utf8_fails_with_1007_and_nothing_after_it_is_handed_out() {
    for bad in [
        &b"\xff"[..],
        b"ok\xc3",
        b"\xed\xa0\x80",
        b"abc\xf4\x90\x80\x80",
    ] {
        let (ws, mut peer) = pair(Role::Server, Config::default()).await;
        let task = collect(ws);
        write_apart(
            &mut peer,
            &[masked(0x81, "é€😀".as_bytes()), masked(0x81, bad)],
        )
        .await;
        let _ = peer.write_all(&masked(0x81, b"after")).await;
        assert_eq!(close_code(&mut peer).await, Some(1007), "{bad:?}");
        let (got, err) = task.await.unwrap();
        assert_eq!(got, vec![Message::text("é€😀")], "{bad:?}");
        assert_eq!(
            err.expect("an error").close_code(),
            Some(CloseCode::INVALID_PAYLOAD)
        );
    }
}

#[tokio::test]
async fn a_whole_frame_over_max_message_size_fails_with_1009_and_one_at_it_arrives() {
    let config = Config::default().max_message_size(100).max_frame_size(100);
    let (ws, mut peer) = pair(Role::Server, config).await;
    let task = collect(ws);
    write_apart(
        &mut peer,
        &[masked(0x82, &[1; 100]), masked(0x82, &[2; 101])],
    )
    .await;
    assert_eq!(close_code(&mut peer).await, Some(1009));
    let (got, err) = task.await.unwrap();
    assert_eq!(got, vec![Message::binary(vec![1; 100])]);
    assert_eq!(
        err.expect("an error").close_code(),
        Some(CloseCode::MESSAGE_TOO_BIG)
    );
}

#[tokio::test]
async fn a_whole_frame_over_max_frame_size_fails_with_1009() {
    let config = Config::default().max_frame_size(50).max_message_size(1000);
    let (ws, mut peer) = pair(Role::Server, config).await;
    let task = collect(ws);
    write_apart(
        &mut peer,
        &[masked(0x81, &[b'x'; 50]), masked(0x81, &[b'y'; 51])],
    )
    .await;
    assert_eq!(close_code(&mut peer).await, Some(1009));
    let (got, err) = task.await.unwrap();
    assert_eq!(got, vec![Message::text("x".repeat(50))]);
    assert_eq!(
        err.expect("an error").close_code(),
        Some(CloseCode::MESSAGE_TOO_BIG)
    );
}

#[tokio::test]
async fn a_whole_frame_with_rsv_bits_and_no_extension_fails_with_1002() {
    for b0 in [0xC1u8, 0xA2, 0x92] {
        let (ws, mut peer) = pair(Role::Server, Config::default()).await;
        let task = collect(ws);
        write_apart(&mut peer, &[masked(b0, b"rsv")]).await;
        assert_eq!(close_code(&mut peer).await, Some(1002), "{b0:#x}");
        let (got, err) = task.await.unwrap();
        assert!(got.is_empty(), "{got:?}");
        assert!(err.is_some());
    }
}

#[tokio::test]
async fn the_peers_close_read_alone_right_after_a_whole_data_frame_is_echoed_after_it() {
    let (ws, mut peer) = pair(Role::Server, Config::default()).await;
    let task = collect(ws);
    write_apart(
        &mut peer,
        &[
            masked(0x81, b"last words"),
            masked(0x88, &close_payload(1001, "bye")),
        ],
    )
    .await;
    // Frames after the close are dropped.
    let _ = peer.write_all(&masked(0x81, b"too late")).await;
    assert_eq!(close_code(&mut peer).await, Some(1001));
    let (got, err) = task.await.unwrap();
    assert!(err.is_none(), "{err:?}");
    assert_eq!(
        got,
        vec![
            Message::text("last words"),
            Message::Close(Some(wavesock::CloseFrame::new(
                CloseCode::GOING_AWAY,
                "bye"
            )))
        ]
    );
}

#[tokio::test]
async fn a_whole_data_frame_read_alone_after_our_close_is_still_handed_out() {
    let (mut ws, mut peer) = pair(Role::Server, Config::default()).await;
    ws.close(None).await.unwrap();
    assert_eq!(close_code(&mut peer).await, None);
    let task = collect(ws);
    write_apart(&mut peer, &[masked(0x82, b"in flight")]).await;
    peer.write_all(&masked(0x88, b"")).await.unwrap();
    let (got, err) = task.await.unwrap();
    assert!(err.is_none(), "{err:?}");
    assert_eq!(
        got,
        vec![Message::binary(&b"in flight"[..]), Message::Close(None)]
    );
}

#[tokio::test]
async fn a_client_receives_whole_unmasked_server_frames_read_alone() {
    let (ws, mut peer) = pair(Role::Client, Config::default()).await;
    let task = collect(ws);
    let frames: Vec<Vec<u8>> = SIZES
        .iter()
        .enumerate()
        .map(|(i, &n)| unmasked(b0(i), &payload(i, n)))
        .collect();
    write_apart(&mut peer, &frames).await;
    peer.write_all(&unmasked(0x88, &close_payload(1000, "")))
        .await
        .unwrap();
    assert_eq!(close_code(&mut peer).await, Some(1000));
    drop(peer);
    let (got, err) = task.await.unwrap();
    assert!(err.is_none(), "{err:?}");
    let want: Vec<Message> = SIZES
        .iter()
        .enumerate()
        .map(|(i, &n)| message(i, n))
        .collect();
    assert_eq!(got.len(), want.len() + 1);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(g == w, "message {i} ({} bytes) changed", SIZES[i]);
    }
}

#[tokio::test]
async fn a_masked_whole_frame_to_a_client_fails_with_1002() {
    let (ws, mut peer) = pair(Role::Client, Config::default()).await;
    let task = collect(ws);
    write_apart(
        &mut peer,
        &[unmasked(0x81, b"fine"), masked(0x81, b"masked")],
    )
    .await;
    assert_eq!(close_code(&mut peer).await, Some(1002));
    drop(peer);
    let (got, err) = task.await.unwrap();
    assert_eq!(got, vec![Message::text("fine")]);
    assert_eq!(
        err.expect("an error").close_code(),
        Some(CloseCode::PROTOCOL_ERROR)
    );
}

#[tokio::test]
async fn messages_kept_while_later_ones_arrive_on_the_same_thread_do_not_change() {
    // Two connections on this one thread share its arena.
    let (ws1, mut p1) = pair(Role::Server, Config::default()).await;
    let (ws2, mut p2) = pair(Role::Server, Config::default()).await;
    let t1 = collect(ws1);
    let t2 = collect(ws2);
    let mut want1 = Vec::new();
    let mut want2 = Vec::new();
    for i in 0..300 {
        let n = [0, 1, 7, 100, 125, 126, 500, 2000, 2048, 2049, 3000][i % 11];
        let f = masked(b0(i), &payload(i, n));
        if i % 3 == 0 {
            p2.write_all(&f).await.unwrap();
            want2.push(message(i, n));
        } else {
            p1.write_all(&f).await.unwrap();
            want1.push(message(i, n));
        }
        if i % 5 != 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    for p in [&mut p1, &mut p2] {
        p.write_all(&masked(0x88, b"")).await.unwrap();
        assert_eq!(close_code(p).await, None);
    }
    for (t, mut want) in [(t1, want1), (t2, want2)] {
        let (got, err) = t.await.unwrap();
        assert!(err.is_none(), "{err:?}");
        want.push(Message::Close(None));
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(g == w, "message {i} changed");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_split_receiver_gets_whole_frames_in_order_while_the_sender_sends() {
    let (ws, peer) = pair(Role::Server, Config::default()).await;
    let (mut tx, mut rx) = ws.split();
    let (mut pr, mut pw) = peer.into_split();
    let sending = tokio::spawn(async move {
        for i in 0..500u32 {
            tx.send(Message::binary(i.to_be_bytes().to_vec()))
                .await
                .unwrap();
            if i % 50 == 0 {
                tokio::task::yield_now().await;
            }
        }
        tx
    });
    let draining = tokio::spawn(async move {
        let mut n = 0usize;
        let mut buf = BytesMut::new();
        while crate::support::read_frame(&mut pr, &mut buf)
            .await
            .is_some()
        {
            n += 1;
        }
        n
    });
    let writing = tokio::spawn(async move {
        for i in 0..200usize {
            pw.write_all(&masked(b0(i), &payload(i, i * 13 % 3000)))
                .await
                .unwrap();
            if i % 4 != 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        pw
    });
    let mut got = Vec::new();
    for _ in 0..200 {
        got.push(rx.next().await.unwrap().unwrap());
    }
    for (i, g) in got.iter().enumerate() {
        assert!(*g == message(i, i * 13 % 3000), "message {i}");
    }
    let mut tx = sending.await.unwrap();
    let mut pw = writing.await.unwrap();
    pw.write_all(&masked(0x88, b"")).await.unwrap();
    assert_eq!(rx.next().await.unwrap().unwrap(), Message::Close(None));
    assert!(rx.next().await.is_none());
    let _ = tx.close().await;
    drop(pw);
    assert!(draining.await.unwrap() >= 500);
}

#[tokio::test]
async fn with_stream_messages_a_whole_frame_read_alone_comes_as_one_final_piece() {
    let config = Config::default().stream_messages(true);
    let (ws, mut peer) = pair(Role::Server, config).await;
    let task = collect(ws);
    write_apart(
        &mut peer,
        &[
            masked(0x81, b"piece"),
            masked(0x82, &[]),
            masked(0x81, b"\xff"),
        ],
    )
    .await;
    assert_eq!(close_code(&mut peer).await, Some(1007));
    let (got, err) = task.await.unwrap();
    assert_eq!(got.len(), 2, "{got:?}");
    for (m, (text, body)) in got.iter().zip([(true, &b"piece"[..]), (false, &b""[..])]) {
        let Message::Frame(f) = m else {
            panic!("a piece: {m:?}")
        };
        assert!(f.fin, "{m:?}");
        assert_eq!(f.opcode == wavesock::OpCode::Text, text);
        assert_eq!(&f.payload[..], body);
    }
    assert_eq!(
        err.expect("an error").close_code(),
        Some(CloseCode::INVALID_PAYLOAD)
    );
}

#[tokio::test]
async fn a_read_that_fills_the_stack_buffer_with_one_frame_arrives_intact() {
    let (ws, mut peer) = pair(Role::Server, Config::default()).await;
    let task = collect(ws);
    // 8 + 4088 = 4096 bytes: exactly the stack read; then frames around it.
    let frames: Vec<Vec<u8>> = [4088usize, 4087, 4089, 4088]
        .iter()
        .enumerate()
        .map(|(i, &n)| masked(b0(i), &payload(i, n)))
        .collect();
    assert_eq!(frames[0].len(), 4096);
    write_apart(&mut peer, &frames).await;
    // And two frames that fill it together.
    let mut two = masked(0x82, &payload(9, 2000));
    two.extend(masked(0x82, &payload(10, 4096 - two.len() - 8)));
    assert_eq!(two.len(), 4096);
    write_apart(&mut peer, &[two]).await;
    peer.write_all(&masked(0x88, b"")).await.unwrap();
    assert_eq!(close_code(&mut peer).await, None);
    let (got, err) = task.await.unwrap();
    assert!(err.is_none(), "{err:?}");
    let mut want: Vec<Message> = [4088usize, 4087, 4089, 4088]
        .iter()
        .enumerate()
        .map(|(i, &n)| message(i, n))
        .collect();
    want.push(Message::binary(payload(9, 2000)));
    want.push(Message::binary(payload(10, 4096 - 2008 - 8)));
    want.push(Message::Close(None));
    assert!(got == want, "{} messages", got.len());
}

#[cfg(feature = "deflate")]
mod deflate {
    use super::*;
    use wavesock::{DeflateConfig, DeflateParams};

    /// "Hello" compressed (RFC 7692 §7.2.3.1), tail stripped.
    const HELLO: &[u8] = &[0xf2, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00];

    async fn deflate_pair() -> (WebSocketStream<TcpStream>, TcpStream) {
        let (ws, peer) = pair(Role::Server, Config::default()).await;
        (
            ws.with_deflate(DeflateParams::default(), &DeflateConfig::default()),
            peer,
        )
    }

    #[tokio::test]
    async fn compressed_and_uncompressed_whole_frames_read_alone_on_a_deflate_connection() {
        let (ws, mut peer) = deflate_pair().await;
        let task = collect(ws);
        write_apart(
            &mut peer,
            &[
                masked(0xC1, HELLO),
                masked(0x81, b"plain"),
                masked(0xC1, HELLO),
                masked(0x82, &payload(1, 3000)),
                masked(0xC2, HELLO),
            ],
        )
        .await;
        peer.write_all(&masked(0x88, b"")).await.unwrap();
        assert_eq!(close_code(&mut peer).await, None);
        let (got, err) = task.await.unwrap();
        assert!(err.is_none(), "{err:?}");
        assert_eq!(
            got,
            vec![
                Message::text("Hello"),
                Message::text("plain"),
                Message::text("Hello"),
                Message::binary(payload(1, 3000)),
                Message::binary(&b"Hello"[..]),
                Message::Close(None)
            ]
        );
    }

    #[tokio::test]
    async fn a_whole_uncompressed_frame_while_a_compressed_message_is_in_progress_fails_with_1002()
    {
        let (ws, mut peer) = deflate_pair().await;
        let task = collect(ws);
        write_apart(
            &mut peer,
            &[masked(0x41, &HELLO[..3]), masked(0x81, b"interloper")],
        )
        .await;
        assert_eq!(close_code(&mut peer).await, Some(1002));
        let (got, err) = task.await.unwrap();
        assert!(got.is_empty(), "{got:?}");
        assert!(err.is_some());
    }

    #[tokio::test]
    async fn invalid_utf8_in_a_whole_uncompressed_text_frame_on_a_deflate_connection_fails_with_1007()
     {
        let (ws, mut peer) = deflate_pair().await;
        let task = collect(ws);
        write_apart(&mut peer, &[masked(0xC1, HELLO), masked(0x81, b"\xc3")]).await;
        assert_eq!(close_code(&mut peer).await, Some(1007));
        let (got, err) = task.await.unwrap();
        assert_eq!(got, vec![Message::text("Hello")]);
        assert!(err.is_some());
    }
}
