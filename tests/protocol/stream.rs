//! WebSocketStream over real loopback sockets.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::support::*;
use bytes::{Bytes, BytesMut};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wavesock::{
    CloseCode, CloseFrame, Config, Error, Frame, Message, OpCode, ProtocolError, Role,
    WebSocketStream,
};

async fn echo_server(l: tokio::net::TcpListener, config: Config) -> wavesock::Result<()> {
    let mut ws = accept(&l, config).await;
    while let Some(msg) = ws.next().await {
        let msg = msg?;
        if msg.is_data() {
            ws.send(msg).await?;
        }
    }
    Ok(())
}

#[tokio::test]
async fn echoes_text_and_binary_of_many_sizes() {
    let (l, addr) = listener().await;
    let server = tokio::spawn(echo_server(l, Config::default()));
    let mut ws = client(addr, Config::default()).await;
    for size in [0usize, 1, 125, 126, 65535, 65536, 1 << 20] {
        let text: String = "é".repeat(size / 2);
        ws.send(Message::text(text.clone())).await.unwrap();
        assert_eq!(ws.next().await.unwrap().unwrap(), Message::text(text));
        let bin: Vec<u8> = (0..size).map(|i| i as u8).collect();
        ws.send(Message::binary(bin.clone())).await.unwrap();
        assert_eq!(ws.next().await.unwrap().unwrap(), Message::binary(bin));
    }
    // Send our close by hand and read the reply (close() would discard it).
    ws.send(Message::Close(Some(CloseFrame::new(
        CloseCode::NORMAL,
        "done",
    ))))
    .await
    .unwrap();
    let reply = ws.next().await.unwrap().unwrap();
    assert_eq!(
        reply,
        Message::Close(Some(CloseFrame::new(CloseCode::NORMAL, "done")))
    );
    assert!(
        ws.next().await.is_none(),
        "stream ends after the close handshake"
    );
    server.await.unwrap().unwrap();
}

#[tokio::test]
async fn server_answers_pings_and_reports_them() {
    let (l, addr) = listener().await;
    let server = tokio::spawn(async move {
        let mut ws = accept(&l, Config::default()).await;
        let first = ws.next().await.unwrap().unwrap();
        assert_eq!(first, Message::Ping(Bytes::from_static(b"are you there")));
        // Keep reading so the close handshake completes.
        while ws.next().await.is_some() {}
    });
    let (mut tcp, mut buf) = raw_upgrade(addr).await;
    tcp.write_all(&masked(0x89, b"are you there"))
        .await
        .unwrap();
    assert_eq!(
        read_frame(&mut tcp, &mut buf).await,
        Some((0x8A, b"are you there".to_vec()))
    );
    tcp.write_all(&masked(0x88, &close_payload(1000, "")))
        .await
        .unwrap();
    assert_eq!(
        read_frame(&mut tcp, &mut buf).await,
        Some((0x88, close_payload(1000, "")))
    );
    assert_eq!(
        read_frame(&mut tcp, &mut buf).await,
        None,
        "server closes TCP after the handshake"
    );
    server.await.unwrap();
}

#[tokio::test]
async fn protocol_violations_close_with_the_right_code() {
    // The reason names the rule or limit, and nothing of the peer's data.
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (
            vec![0x81, 0x02, b'h', b'i'],
            1002,
            "unmasked frame from a client",
        ),
        (masked(0xA1, b"x"), 1002, "reserved bits set"),
        (masked(0x8B, b""), 1002, "reserved opcode"),
        (
            masked(0x80, b"x"),
            1002,
            "continuation frame without a message",
        ),
        (
            masked(0x89, &[0; 126]),
            1002,
            "control frame over 125 bytes",
        ),
        (
            masked(0x88, &[0x03]),
            1002,
            "close frame with a one-byte payload",
        ),
        (
            masked(0x88, &close_payload(999, "")),
            1002,
            "invalid close code",
        ),
        (masked(0x81, &[0xC0, 0xAF]), 1007, "invalid UTF-8"),
        (masked(0x82, &[0; 2000]), 1009, "frame over max_frame_size"),
        (
            masked(0x02, &[0; 600])
                .into_iter()
                .chain(masked(0x80, &[0; 600]))
                .collect(),
            1009,
            "message over max_message_size",
        ),
    ];
    for (frame, code, reason) in cases {
        let (l, addr) = listener().await;
        let server = tokio::spawn(echo_server(
            l,
            Config::default()
                .max_frame_size(1000)
                .max_message_size(1000),
        ));
        let (mut tcp, mut buf) = raw_upgrade(addr).await;
        tcp.write_all(&frame).await.unwrap();
        let (b0, payload) = read_frame(&mut tcp, &mut buf).await.expect("a close frame");
        assert_eq!(b0, 0x88, "{frame:x?}");
        assert_eq!(
            u16::from_be_bytes([payload[0], payload[1]]),
            code,
            "{frame:x?}"
        );
        assert_eq!(std::str::from_utf8(&payload[2..]), Ok(reason), "{frame:x?}");
        assert_eq!(
            read_frame(&mut tcp, &mut buf).await,
            None,
            "then TCP closes"
        );
        let err = server.await.unwrap().unwrap_err();
        assert_eq!(err.close_code(), Some(CloseCode(code)), "{err}");
    }
}

#[tokio::test]
async fn invalid_utf8_is_refused_before_the_message_ends() {
    let (l, addr) = listener().await;
    let server = tokio::spawn(echo_server(l, Config::default()));
    let (mut tcp, mut buf) = raw_upgrade(addr).await;
    // First fragment valid, second carries the invalid byte; the final
    // fragment never comes, yet the server must close with 1007.
    tcp.write_all(&masked(0x01, "κόσμε".as_bytes()))
        .await
        .unwrap();
    tcp.write_all(&masked(0x00, &[0xF4, 0x90])).await.unwrap();
    let (b0, payload) =
        tokio::time::timeout(Duration::from_secs(5), read_frame(&mut tcp, &mut buf))
            .await
            .expect("closed without waiting for the end of the message")
            .unwrap();
    assert_eq!((b0, &payload[..2]), (0x88, &1007u16.to_be_bytes()[..]));
    assert!(matches!(server.await.unwrap(), Err(Error::InvalidUtf8)));
}

#[tokio::test]
async fn fragmented_message_with_interleaved_ping() {
    let (l, addr) = listener().await;
    let server = tokio::spawn(echo_server(l, Config::default()));
    let (mut tcp, mut buf) = raw_upgrade(addr).await;
    let mut wire = masked(0x01, b"frag");
    wire.extend(masked(0x89, b"p"));
    wire.extend(masked(0x00, b"men"));
    wire.extend(masked(0x80, b"ted"));
    tcp.write_all(&wire).await.unwrap();
    assert_eq!(
        read_frame(&mut tcp, &mut buf).await,
        Some((0x8A, b"p".to_vec()))
    );
    assert_eq!(
        read_frame(&mut tcp, &mut buf).await,
        Some((0x81, b"fragmented".to_vec()))
    );
    drop(tcp);
    assert!(
        server.await.unwrap().is_err(),
        "a dropped TCP connection is an error"
    );
}

#[tokio::test]
async fn pipelined_frame_after_the_handshake_is_kept() {
    let (l, addr) = listener().await;
    let server = tokio::spawn(echo_server(l, Config::default()));
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut wire = KEY_REQUEST.to_vec();
    wire.extend(masked(0x81, b"early"));
    tcp.write_all(&wire).await.unwrap();
    let mut buf = BytesMut::new();
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        tcp.read_buf(&mut buf).await.unwrap();
    };
    let _ = buf.split_to(end);
    assert_eq!(
        read_frame(&mut tcp, &mut buf).await,
        Some((0x81, b"early".to_vec()))
    );
    drop(tcp);
    let _ = server.await;
}

#[tokio::test]
async fn fed_messages_go_out_in_one_write() {
    let (a, b) = tokio::io::duplex(1 << 20);
    let (io, writes) = CountingIo::new(a);
    let mut server = WebSocketStream::from_raw_socket(io, Role::Server, Config::default()).unwrap();
    let mut client = WebSocketStream::from_raw_socket(b, Role::Client, Config::default()).unwrap();
    for i in 0..10 {
        server.feed(Message::text(format!("m{i}"))).await.unwrap();
    }
    assert_eq!(writes.load(Ordering::SeqCst), 0, "feed does not write");
    server.flush().await.unwrap();
    assert_eq!(
        writes.load(Ordering::SeqCst),
        1,
        "flush writes all ten frames at once"
    );
    for i in 0..10 {
        assert_eq!(
            client.next().await.unwrap().unwrap(),
            Message::text(format!("m{i}"))
        );
    }
}

#[tokio::test]
async fn write_buffer_limit_makes_feed_write() {
    let (a, _b) = tokio::io::duplex(1 << 20);
    let (io, writes) = CountingIo::new(a);
    let config = Config::default().max_backpressure(1024);
    let mut server = WebSocketStream::from_raw_socket(io, Role::Server, config).unwrap();
    for _ in 0..8 {
        server.feed(Message::binary(vec![0u8; 500])).await.unwrap();
    }
    assert!(
        writes.load(Ordering::SeqCst) >= 2,
        "buffer past the limit is written out"
    );
}

#[tokio::test]
async fn split_reader_answers_pings_while_writer_is_idle() {
    let (l, addr) = listener().await;
    let server = tokio::spawn(async move {
        let ws = accept(&l, Config::default()).await;
        let (tx, mut rx) = ws.split();
        let mut seen = Vec::new();
        while let Some(msg) = rx.next().await {
            seen.push(msg.unwrap());
        }
        drop(tx);
        seen
    });
    let mut ws = client(addr, Config::default()).await;
    ws.send(Message::Ping(Bytes::from_static(b"1")))
        .await
        .unwrap();
    assert_eq!(
        ws.next().await.unwrap().unwrap(),
        Message::Pong(Bytes::from_static(b"1"))
    );
    // close() starts the handshake; next() sees the reply and the TCP end.
    ws.close(None).await.unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::Close(None));
    assert!(ws.is_close_received());
    assert!(ws.next().await.is_none());
    let seen = server.await.unwrap();
    assert_eq!(
        seen,
        vec![
            Message::Ping(Bytes::from_static(b"1")),
            Message::Close(None)
        ]
    );
}

#[tokio::test]
async fn split_halves_work_from_two_tasks() {
    let (l, addr) = listener().await;
    let server = tokio::spawn(async move {
        let ws = accept(&l, Config::default()).await;
        let (mut tx, mut rx) = ws.split();
        let writer = tokio::spawn(async move {
            for i in 0..1000u32 {
                tx.send(Message::binary(i.to_be_bytes().to_vec()))
                    .await
                    .unwrap();
            }
            tx
        });
        let mut got = 0u32;
        while let Some(msg) = rx.next().await {
            match msg.unwrap() {
                Message::Text(t) => {
                    assert_eq!(t.as_str(), got.to_string());
                    got += 1;
                }
                Message::Close(_) => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        let tx = writer.await.unwrap();
        assert!(rx.reunite(tx).is_ok());
        got
    });
    let ws = client(addr, Config::default()).await;
    let (mut tx, mut rx) = ws.split();
    let sender = tokio::spawn(async move {
        for i in 0..1000u32 {
            tx.feed(Message::text(i.to_string())).await.unwrap();
        }
        tx.flush().await.unwrap();
        tx
    });
    for i in 0..1000u32 {
        assert_eq!(
            rx.next().await.unwrap().unwrap(),
            Message::binary(i.to_be_bytes().to_vec())
        );
    }
    let mut tx = sender.await.unwrap();
    tx.send(Message::Close(None)).await.unwrap();
    assert_eq!(rx.next().await.unwrap().unwrap(), Message::Close(None));
    assert!(rx.next().await.is_none());
    assert_eq!(server.await.unwrap(), 1000);
}

#[tokio::test(start_paused = true)]
async fn close_gives_up_after_the_timeout_and_closing_twice_is_harmless() {
    // The peer never answers our close.
    let (a, _peer) = tokio::io::duplex(4096);
    let config = Config::default().close_timeout(Duration::from_secs(3));
    let mut ws = WebSocketStream::from_raw_socket(a, Role::Server, config).unwrap();
    let started = tokio::time::Instant::now();
    ws.close(None).await.unwrap();
    assert_eq!(started.elapsed(), Duration::ZERO, "close() does not wait");
    assert!(matches!(ws.next().await.unwrap(), Err(Error::CloseTimeout)));
    assert_eq!(started.elapsed(), Duration::from_secs(3));
    ws.close(None).await.unwrap();
    assert!(ws.is_close_sent());
    assert!(matches!(
        ws.send(Message::text("late")).await,
        Err(Error::AlreadyClosed)
    ));
    assert!(ws.next().await.is_none());
}

#[tokio::test]
async fn sending_after_the_peer_closed_is_connection_closed() {
    let (a, mut peer) = tokio::io::duplex(4096);
    let mut ws = WebSocketStream::from_raw_socket(a, Role::Server, Config::default()).unwrap();
    peer.write_all(&masked(0x88, &close_payload(1000, "")))
        .await
        .unwrap();
    assert!(ws.next().await.unwrap().unwrap().is_close());
    assert!(matches!(
        ws.send(Message::text("late")).await,
        Err(Error::ConnectionClosed)
    ));
}

#[tokio::test]
async fn raw_frames_send_custom_fragments() {
    let (l, addr) = listener().await;
    let server = tokio::spawn(echo_server(l, Config::default()));
    let mut ws = client(addr, Config::default()).await;
    ws.feed(Message::Frame(Frame::new(false, OpCode::Text, "Hel")))
        .await
        .unwrap();
    ws.feed(Message::Frame(Frame::new(true, OpCode::Continuation, "lo")))
        .await
        .unwrap();
    ws.flush().await.unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("Hello"));
    ws.close(None).await.unwrap();
    while ws.next().await.is_some() {}
    server.await.unwrap().unwrap();
}

#[tokio::test]
async fn client_refuses_masked_frames_from_the_server() {
    let (l, addr) = listener().await;
    let server = tokio::spawn(async move {
        let (mut tcp, _) = l.accept().await.unwrap();
        let mut buf = vec![0u8; 4096];
        let n = tcp.read(&mut buf).await.unwrap();
        let req = wavesock::handshake::server::parse_request(&buf[..n], 64)
            .unwrap()
            .unwrap()
            .0;
        let accept = wavesock::handshake::server::check_request(&req).unwrap();
        let mut out = Vec::new();
        wavesock::handshake::server::write_response(
            &wavesock::handshake::server::accept_response(&accept),
            &[],
            &mut out,
        );
        tcp.write_all(&out).await.unwrap();
        tcp.write_all(&masked(0x81, b"masked")).await.unwrap();
        let mut rest = BytesMut::new();
        let mut frames = Vec::new();
        loop {
            if tcp.read_buf(&mut rest).await.unwrap() == 0 {
                break;
            }
        }
        // The client's close frame is masked: unmask its code.
        if rest.len() >= 8 {
            let key = [rest[2], rest[3], rest[4], rest[5]];
            frames.push(u16::from_be_bytes([rest[6] ^ key[0], rest[7] ^ key[1]]));
        }
        frames
    });
    let mut ws = client(addr, Config::default()).await;
    let err = ws.next().await.unwrap().unwrap_err();
    assert!(
        matches!(err, Error::Protocol(ProtocolError::MaskedFrame)),
        "{err}"
    );
    assert!(ws.next().await.is_none());
    drop(ws);
    assert_eq!(server.await.unwrap(), vec![1002]);
}

#[tokio::test]
async fn eof_without_close_is_an_error() {
    let (a, b) = tokio::io::duplex(4096);
    let mut ws = WebSocketStream::from_raw_socket(a, Role::Client, Config::default()).unwrap();
    drop(b);
    let err = ws.next().await.unwrap().unwrap_err();
    assert!(
        matches!(&err, Error::Io(e) if e.kind() == std::io::ErrorKind::UnexpectedEof),
        "{err}"
    );
    assert!(ws.next().await.is_none());
}

#[tokio::test]
async fn invalid_config_is_an_error_not_a_panic() {
    let (a, _b) = tokio::io::duplex(64);
    let r = WebSocketStream::from_raw_socket(a, Role::Server, Config::default().max_frame_size(0));
    assert!(matches!(r, Err(Error::InvalidConfig(_))));
}

#[tokio::test]
async fn client_waits_for_the_server_to_close_tcp() {
    let (a, mut server) = tokio::io::duplex(4096);
    let mut ws = WebSocketStream::from_raw_socket(a, Role::Client, Config::default()).unwrap();
    server
        .write_all(&unmasked(0x88, &close_payload(1000, "")))
        .await
        .unwrap();
    assert!(ws.next().await.unwrap().unwrap().is_close());
    let waiting = tokio::spawn(async move { ws.next().await.is_none() });
    // The client's masked close reply arrives; the client has not hung up.
    let mut buf = [0u8; 8];
    server.read_exact(&mut buf).await.unwrap();
    assert_eq!(buf[0], 0x88);
    assert_eq!(buf[1], 0x82, "masked, two-byte payload");
    let code = u16::from_be_bytes([buf[6] ^ buf[2], buf[7] ^ buf[3]]);
    assert_eq!(code, 1000);
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(
        !waiting.is_finished(),
        "the client waits for the server's TCP close"
    );
    server
        .write_all(b"bytes after close are discarded")
        .await
        .unwrap();
    drop(server);
    assert!(waiting.await.unwrap());
}

#[tokio::test]
async fn feed_in_a_read_loop_corks_replies_to_pipelined_messages() {
    let (a, mut peer) = tokio::io::duplex(1 << 20);
    let (io, writes) = CountingIo::new(a);
    let mut server = WebSocketStream::from_raw_socket(io, Role::Server, Config::default()).unwrap();
    let echo = tokio::spawn(async move {
        while let Some(msg) = server.next().await {
            let msg = msg.unwrap();
            if msg.is_data() {
                server.feed(msg).await.unwrap();
            }
        }
    });
    // Ten messages in one burst: ten replies in one write.
    let burst: Vec<u8> = (0..10)
        .flat_map(|i| masked(0x81, format!("m{i}").as_bytes()))
        .collect();
    peer.write_all(&burst).await.unwrap();
    let mut buf = BytesMut::new();
    for i in 0..10 {
        assert_eq!(
            read_frame(&mut peer, &mut buf).await,
            Some((0x81, format!("m{i}").into_bytes()))
        );
    }
    assert_eq!(
        writes.load(Ordering::SeqCst),
        1,
        "replies to one burst go out together"
    );
    // A lone message is answered at once, with no explicit flush.
    peer.write_all(&masked(0x82, b"alone")).await.unwrap();
    let reply = tokio::time::timeout(Duration::from_secs(5), read_frame(&mut peer, &mut buf)).await;
    assert_eq!(reply.unwrap(), Some((0x82, b"alone".to_vec())));
    assert_eq!(writes.load(Ordering::SeqCst), 2);
    peer.write_all(&masked(0x88, b"")).await.unwrap();
    assert_eq!(read_frame(&mut peer, &mut buf).await, Some((0x88, vec![])));
    echo.await.unwrap();
}

#[tokio::test]
async fn a_peer_that_floods_pings_and_never_reads_cannot_grow_our_buffers() {
    // The peer's receive window is tiny (duplex of 1 KiB) and it never reads.
    let (a, mut peer) = tokio::io::duplex(1024);
    let config = Config::default().max_backpressure(4096);
    let mut server = WebSocketStream::from_raw_socket(a, Role::Server, config).unwrap();
    let reader = tokio::spawn(async move {
        let mut pings = 0usize;
        while let Some(Ok(Message::Ping(_))) = server.next().await {
            pings += 1;
        }
        pings
    });
    let ping = masked(0x89, &[0u8; 125]);
    let flood = async {
        for _ in 0..10_000 {
            peer.write_all(&ping).await.unwrap();
        }
    };
    // The flood stalls: the server stops reading once it owes ~4 KiB of
    // pongs it cannot write, and the tiny pipe fills up.
    let stalled = tokio::time::timeout(Duration::from_millis(300), flood)
        .await
        .is_err();
    assert!(stalled, "the server kept reading while its pongs piled up");
    drop(peer);
    let pings = reader.await.unwrap();
    assert!(pings < 200, "read {pings} pings while unable to answer");
}

#[tokio::test(start_paused = true)]
async fn keepalive_detects_a_silent_peer() {
    let (a, mut peer) = tokio::io::duplex(4096);
    let config = Config::default()
        .ping_interval(Some(Duration::from_secs(5)))
        .pong_timeout(Duration::from_secs(2));
    let (_tx, mut rx) = WebSocketStream::from_raw_socket(a, Role::Server, config)
        .unwrap()
        .split();
    let started = tokio::time::Instant::now();
    let reader = tokio::spawn(async move { rx.next().await });
    // The keepalive ping goes out after five quiet seconds.
    let mut buf = BytesMut::new();
    assert_eq!(read_frame(&mut peer, &mut buf).await, Some((0x89, vec![])));
    assert_eq!(started.elapsed(), Duration::from_secs(5));
    // No answer: given up at interval + timeout, with close code 1011.
    let err = reader.await.unwrap().unwrap().unwrap_err();
    assert!(matches!(err, Error::KeepaliveTimeout), "{err}");
    assert_eq!(started.elapsed(), Duration::from_secs(7));
    let (b0, payload) = read_frame(&mut peer, &mut buf).await.unwrap();
    assert_eq!((b0, &payload[..2]), (0x88, &1011u16.to_be_bytes()[..]));
    assert_eq!(&payload[2..], b"keepalive timeout");
}

#[tokio::test(start_paused = true)]
async fn keepalive_keeps_a_responsive_peer() {
    let (a, mut peer) = tokio::io::duplex(4096);
    let config = Config::default()
        .ping_interval(Some(Duration::from_secs(5)))
        .pong_timeout(Duration::from_secs(2));
    let mut ws = WebSocketStream::from_raw_socket(a, Role::Server, config).unwrap();
    let answering = tokio::spawn(async move {
        let mut buf = BytesMut::new();
        let mut pings = 0;
        while let Some((b0, payload)) = read_frame(&mut peer, &mut buf).await {
            if b0 == 0x89 {
                pings += 1;
                peer.write_all(&masked(0x8A, &payload)).await.unwrap();
            }
            if pings == 12 {
                peer.write_all(&masked(0x88, b"")).await.unwrap();
            }
        }
        pings
    });
    let mut pongs = 0;
    while let Some(msg) = ws.next().await {
        match msg.unwrap() {
            Message::Pong(_) => pongs += 1,
            Message::Close(_) => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(pongs, 12, "a minute of pings, all answered, no timeout");
    assert_eq!(answering.await.unwrap(), 12);
}

#[tokio::test(start_paused = true)]
async fn keepalive_counts_any_traffic_as_life() {
    let (a, mut peer) = tokio::io::duplex(1 << 16);
    let config = Config::default()
        .ping_interval(Some(Duration::from_secs(5)))
        .pong_timeout(Duration::from_secs(2));
    let mut ws = WebSocketStream::from_raw_socket(a, Role::Server, config).unwrap();
    let chatty = tokio::spawn(async move {
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_secs(3)).await;
            peer.write_all(&masked(0x81, b"still here")).await.unwrap();
        }
        peer.write_all(&masked(0x88, b"")).await.unwrap();
        let mut rest = Vec::new();
        peer.read_to_end(&mut rest).await.unwrap();
        rest
    });
    let mut texts = 0;
    while let Some(msg) = ws.next().await {
        if msg.unwrap().is_text() {
            texts += 1;
        }
    }
    assert_eq!(texts, 20);
    let written = chatty.await.unwrap();
    assert_eq!(written, unmasked(0x88, b""), "no keepalive ping was needed");
}

/// A peer that sent a burst in one write and answers every ping is not
/// timed out while a slow application takes the burst: messages still in
/// the read buffer are the peer alive (split and unsplit; the burst takes
/// 500 ms to take, keepalive gives up after 200 ms of silence).
#[tokio::test(start_paused = true)]
async fn keepalive_keeps_a_peer_whose_burst_the_application_is_slow_to_take() {
    for split in [false, true] {
        let (a, mut peer) = tokio::io::duplex(1 << 16);
        let config = Config::default()
            .ping_interval(Some(Duration::from_millis(100)))
            .pong_timeout(Duration::from_millis(100));
        let ws = WebSocketStream::from_raw_socket(a, Role::Server, config).unwrap();
        let answering = tokio::spawn(async move {
            let burst: Vec<u8> = (0..100)
                .flat_map(|i| masked(0x81, format!("m{i}").as_bytes()))
                .collect();
            peer.write_all(&burst).await.unwrap();
            let mut buf = BytesMut::new();
            while let Some((b0, payload)) = read_frame(&mut peer, &mut buf).await {
                if b0 == 0x89 {
                    peer.write_all(&masked(0x8A, &payload)).await.unwrap();
                }
            }
        });
        let (tx, mut rx) = if split {
            let (tx, rx) = ws.split();
            (Some(tx), futures_util::future::Either::Left(rx))
        } else {
            (None, futures_util::future::Either::Right(ws))
        };
        for i in 0..100 {
            let msg = rx.next().await.unwrap();
            assert!(
                matches!(&msg, Ok(Message::Text(t)) if t.as_str() == format!("m{i}")),
                "split {split}: message {i}: {msg:?}"
            );
            // The slow application.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        drop((tx, rx));
        answering.await.unwrap();
    }
}

#[tokio::test]
async fn a_prepared_message_reaches_many_connections_unchanged() {
    use wavesock::PreparedMessage;
    let payload: String = "broadcast ".repeat(1000);
    let prepared = PreparedMessage::new(&Message::text(payload.clone())).unwrap();
    let mut servers = Vec::new();
    let mut clients = Vec::new();
    for _ in 0..50 {
        let (a, b) = tokio::io::duplex(1 << 16);
        servers.push(WebSocketStream::from_raw_socket(a, Role::Server, Config::default()).unwrap());
        clients.push(WebSocketStream::from_raw_socket(b, Role::Client, Config::default()).unwrap());
    }
    for ws in &mut servers {
        ws.send_prepared(&prepared).await.unwrap();
    }
    for ws in &mut clients {
        assert_eq!(
            ws.next().await.unwrap().unwrap(),
            Message::text(payload.clone())
        );
    }
    // A client-side connection encodes (and masks) it like any message.
    clients[0].send_prepared(&prepared).await.unwrap();
    assert_eq!(
        servers[0].next().await.unwrap().unwrap(),
        Message::text(payload)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_halves_on_two_threads_carry_traffic_both_ways() {
    const N: u32 = 10_000;
    let (l, addr) = listener().await;
    let server = tokio::spawn(async move {
        let ws = accept(&l, Config::default()).await;
        let (mut tx, mut rx) = ws.split();
        let writer = tokio::spawn(async move {
            for i in 0..N {
                tx.feed(Message::binary(i.to_be_bytes().to_vec()))
                    .await
                    .unwrap();
                if i % 64 == 0 {
                    tx.flush().await.unwrap();
                }
            }
            tx.flush().await.unwrap();
            tx
        });
        let mut next = 0u32;
        while let Some(msg) = rx.next().await {
            if let Message::Binary(b) = msg.unwrap() {
                assert_eq!(u32::from_be_bytes(b[..].try_into().unwrap()), next);
                next += 1;
            }
        }
        let tx = writer.await.unwrap();
        assert!(rx.reunite(tx).is_ok());
        next
    });
    let ws = client(addr, Config::default()).await;
    let (mut tx, mut rx) = ws.split();
    let sender = tokio::spawn(async move {
        for i in 0..N {
            tx.send(Message::binary(i.to_be_bytes().to_vec()))
                .await
                .unwrap();
        }
        tx
    });
    for i in 0..N {
        let msg = rx.next().await.unwrap().unwrap();
        assert_eq!(msg, Message::binary(i.to_be_bytes().to_vec()));
    }
    let mut tx = sender.await.unwrap();
    tx.send(Message::Close(None)).await.unwrap();
    assert!(rx.next().await.unwrap().unwrap().is_close());
    assert!(rx.next().await.is_none());
    assert_eq!(server.await.unwrap(), N);
}

#[tokio::test]
async fn next_in_a_select_loop_loses_nothing() {
    // Cancelled next() futures must not drop a message or a partial frame.
    const N: usize = 10_000;
    let (a, mut peer) = tokio::io::duplex(1 << 10);
    let mut ws = WebSocketStream::from_raw_socket(a, Role::Server, Config::default()).unwrap();
    let writer = tokio::spawn(async move {
        for i in 0..N {
            // Odd sizes so frames straddle the small pipe's reads.
            let payload = vec![(i % 251) as u8; i % 300];
            peer.write_all(&masked(0x82, &payload)).await.unwrap();
        }
        peer.write_all(&masked(0x88, b"")).await.unwrap();
        let mut sink = Vec::new();
        peer.read_to_end(&mut sink).await.unwrap();
    });
    let mut tick = tokio::time::interval(Duration::from_micros(50));
    let (mut got, mut ticks) = (0usize, 0usize);
    loop {
        tokio::select! {
            msg = ws.next() => match msg {
                Some(Ok(Message::Binary(b))) => {
                    assert_eq!(b.len(), got % 300, "message {got}");
                    assert!(b.iter().all(|&x| x == (got % 251) as u8));
                    got += 1;
                }
                Some(Ok(Message::Close(_))) => {}
                None => break,
                other => panic!("{other:?}"),
            },
            _ = tick.tick() => ticks += 1,
        }
    }
    assert_eq!(got, N);
    assert!(ticks > 0, "the select loop did cancel next() futures");
    writer.await.unwrap();
}

#[test]
#[allow(clippy::result_large_err)] // the callback shape users know from tokio-tungstenite
fn entry_point_futures_and_halves_are_send() {
    fn send<T: Send>(_: &T) {}
    let (a, _b) = tokio::io::duplex(64);
    send(&wavesock::accept_async(a));
    let (a, _b) = tokio::io::duplex(64);
    send(&wavesock::accept_hdr_async(
        a,
        |_: &http::Request<()>, r| Ok(r),
    ));
    let (a, _b) = tokio::io::duplex(64);
    send(&wavesock::client_async("ws://localhost/", a));
    send(&wavesock::connect_async("ws://localhost/"));
    let (a, _b) = tokio::io::duplex(64);
    let (tx, rx) = WebSocketStream::from_raw_socket(a, Role::Server, Config::default())
        .unwrap()
        .split();
    send(&tx);
    send(&rx);
}

#[tokio::test]
async fn after_our_close_completes_sending_is_already_closed() {
    let (l, addr) = listener().await;
    let server = tokio::spawn(echo_server(l, Config::default()));
    let mut ws = client(addr, Config::default()).await;
    ws.close(None).await.unwrap();
    assert!(matches!(
        ws.send(Message::text("late")).await,
        Err(Error::AlreadyClosed)
    ));
    server.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_peer_that_never_reads_makes_send_wait_instead_of_buffering() {
    // The peer's receive window is 16 KiB (the duplex) and it never reads.
    let (a, _peer) = tokio::io::duplex(16 << 10);
    let config = Config::default().max_backpressure(64 << 10);
    let mut ws = WebSocketStream::from_raw_socket(a, Role::Server, config).unwrap();
    let msg = Message::binary(vec![7u8; 10 << 10]);
    let mut accepted = 0usize;
    while let Ok(r) = tokio::time::timeout(Duration::from_millis(100), ws.feed(msg.clone())).await {
        r.unwrap();
        accepted += 1;
        assert!(accepted < 1000, "feed never waited");
    }
    // What was accepted fits the write buffer plus the transport's window
    // (and the one message that crossed the limit), not more.
    let held = accepted * (10 << 10);
    assert!(
        held <= (64 << 10) + (16 << 10) + (10 << 10) + 1024,
        "{accepted} messages accepted"
    );
    assert!(
        accepted >= 6,
        "the write buffer is used before waiting: {accepted}"
    );
}

/// A peer that stops reading while we owe it more than the write buffer
/// holds: `next()` waits for it to read, and the keepalive clock runs
/// meanwhile, so a peer that reads nothing for the interval and the pong
/// timeout is given up like one that sends nothing (it used to wait for
/// ever, no timer being polled while the write was blocked).
#[tokio::test(start_paused = true)]
async fn keepalive_gives_up_on_a_peer_that_stops_reading() {
    let (a, _peer) = tokio::io::duplex(4096);
    let config = Config::default()
        .ping_interval(Some(Duration::from_secs(5)))
        .pong_timeout(Duration::from_secs(2))
        .max_backpressure(1024);
    let mut ws = WebSocketStream::from_raw_socket(a, Role::Server, config).unwrap();
    // Far more than the pipe and the write buffer hold; nobody reads it.
    ws.feed(Message::binary(vec![7; 64 << 10])).await.unwrap();
    let started = tokio::time::Instant::now();
    let got = tokio::time::timeout(Duration::from_secs(60), ws.next())
        .await
        .expect("no timer ran while the write was blocked");
    assert!(matches!(got, Some(Err(Error::KeepaliveTimeout))), "{got:?}");
    assert_eq!(started.elapsed(), Duration::from_secs(7));
}
