//! Hostile peers against a [`Hub`] over real loopback TCP, the hub's
//! counterparts of the Stream server's tests (`stream.rs`, `alloc.rs`,
//! `handshake.rs`): protocol violations get their close code (1002, 1007,
//! 1009) and reason and the handler the error; a frame announcing 2^63
//! bytes, or 32 MiB, allocates nothing of the kind (measured with a
//! counting allocator); a slow-loris handshake is timed out and a header
//! flood refused at the cap; a peer that floods pings and never reads, or
//! never reads at all, stops being read and holds a bounded buffer, and
//! one that is sent more than `max_backpressure` is closed (or its
//! messages dropped) by the policy. Throughout, an honest client of the
//! same hub keeps getting its echoes, and every opened connection is
//! ended exactly once.
//!
//! The test that counts the heap runs in a process of its own
//! (`child::alone`), so what the allocator counts is that test's.
//!
//! [`Hub`]: wavesock::hub::Hub

use crate::support;

use crate::support::child;
use crate::support::counting;
use crate::support::hub;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use wavesock::hub::{BackpressurePolicy, SendStatus};
use wavesock::{CloseCode, Config, Error, Message, WebSocketStream};

use crate::support::{KEY_REQUEST, close_payload, masked, raw_upgrade, read_frame};
use counting::{LIVE, PEAK};
use hub::{Recorder, TestHub};

/// An honest client of the hub, checked to get its echo back promptly.
struct Honest {
    ws: WebSocketStream<TcpStream>,
    sent: usize,
}

impl Honest {
    async fn connect(addr: SocketAddr) -> Self {
        let ws = tokio::time::timeout(
            Duration::from_secs(5),
            support::client(addr, Config::default()),
        )
        .await
        .expect("the honest client's handshake is answered");
        let mut honest = Honest { ws, sent: 0 };
        honest.echo().await;
        honest
    }

    async fn echo(&mut self) {
        self.sent += 1;
        let text = format!("honest {}", self.sent);
        self.ws.send(Message::text(text.clone())).await.unwrap();
        let back = tokio::time::timeout(Duration::from_secs(2), self.ws.next())
            .await
            .expect("the honest client is still served")
            .expect("open")
            .expect("an echo");
        assert_eq!(back.as_text(), Some(text.as_str()));
    }

    async fn close(mut self) {
        self.ws.close(None).await.unwrap();
        while let Some(Ok(_)) = self.ws.next().await {}
    }
}

/// A masked client frame header announcing `len` bytes (64-bit length).
fn header(b0: u8, len: u64) -> Vec<u8> {
    let mut h = vec![b0, 0x80 | 127];
    h.extend_from_slice(&len.to_be_bytes());
    h.extend_from_slice(&[1, 2, 3, 4]);
    h
}

/// A listener whose accepted sockets have small kernel buffers, so a peer
/// that does not read is felt after a few KiB rather than megabytes.
fn small_listener() -> TcpListener {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_send_buffer_size(4096).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    socket.listen(64).unwrap()
}

/// A raw upgraded connection with small kernel buffers.
async fn small_raw_upgrade(addr: SocketAddr) -> (TcpStream, BytesMut) {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_send_buffer_size(4096).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut tcp = socket.connect(addr).await.unwrap();
    tcp.write_all(KEY_REQUEST).await.unwrap();
    let mut buf = BytesMut::new();
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        assert!(tcp.read_buf(&mut buf).await.unwrap() > 0, "closed");
    };
    assert!(buf.starts_with(b"HTTP/1.1 101 "));
    let rest = buf.split_off(end);
    (tcp, rest)
}

#[tokio::test]
async fn protocol_violations_close_with_the_right_code() {
    let config = Config::default()
        .max_frame_size(1000)
        .max_message_size(1000);
    let hub = TestHub::start(crate::support::hub::defaults().config(config)).await;
    let mut honest = Honest::connect(hub.addr).await;
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (
            vec![0x81, 0x02, b'h', b'i'],
            1002,
            "unmasked frame from a client",
        ),
        (masked(0xA1, b"x"), 1002, "reserved bits set"),
        (masked(0xC2, b"x"), 1002, "reserved bits set"),
        (masked(0x8B, b""), 1002, "reserved opcode"),
        (masked(0x83, b""), 1002, "reserved opcode"),
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
        (masked(0x09, b""), 1002, "fragmented control frame"),
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
        (masked(0x88, &[0x03, 0xE8, 0xFF]), 1007, "invalid UTF-8"),
        (masked(0x82, &[0; 2000]), 1009, "frame over max_frame_size"),
        (
            header(0x82, (1 << 63) - 1),
            1009,
            "frame over max_frame_size",
        ),
        (
            masked(0x02, &[0; 600])
                .into_iter()
                .chain(masked(0x80, &[0; 600]))
                .collect(),
            1009,
            "message over max_message_size",
        ),
    ];
    for (i, (frame, code, reason)) in cases.iter().enumerate() {
        let (mut tcp, mut buf) = raw_upgrade(hub.addr).await;
        tcp.write_all(frame).await.unwrap();
        let (b0, payload) =
            tokio::time::timeout(Duration::from_secs(5), read_frame(&mut tcp, &mut buf))
                .await
                .unwrap_or_else(|_| panic!("{reason}: no answer"))
                .expect("a close frame");
        assert_eq!(b0, 0x88, "{reason}: {frame:x?}");
        assert_eq!(
            u16::from_be_bytes([payload[0], payload[1]]),
            *code,
            "{reason}"
        );
        assert_eq!(std::str::from_utf8(&payload[2..]), Ok(*reason));
        assert_eq!(
            read_frame(&mut tcp, &mut buf).await,
            None,
            "then TCP closes"
        );
        hub.wait_ended(i + 1, Duration::from_secs(5)).await;
        {
            let log = hub.log();
            let ended = log.ended.last().unwrap();
            let err = ended.closed.error.as_ref().expect("the violation");
            assert_eq!(err.close_code(), Some(CloseCode(*code)), "{reason}: {err}");
            assert!(ended.seen.received.is_empty(), "{reason}");
        }
        honest.echo().await;
    }
    honest.close().await;
    let log = hub.stop().await;
    assert_eq!(log.opened.len(), cases.len() + 1);
}

#[tokio::test]
async fn invalid_utf8_is_refused_before_the_message_ends() {
    let hub = TestHub::start(crate::support::hub::defaults()).await;
    let mut honest = Honest::connect(hub.addr).await;
    let (mut tcp, mut buf) = raw_upgrade(hub.addr).await;
    // A valid first fragment, then one with a byte that cannot start
    // valid text; the final fragment never comes.
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
    honest.echo().await;
    hub.wait_ended(1, Duration::from_secs(5)).await;
    assert!(matches!(
        hub.log().ended[0].closed.error,
        Some(Error::InvalidUtf8)
    ));
    honest.close().await;
    hub.stop().await;
}

/// Peak growth of the heap while `f` runs.
async fn peak_during<F: std::future::Future<Output = ()>>(f: F) -> usize {
    let base = LIVE.load(Ordering::SeqCst);
    PEAK.store(base, Ordering::SeqCst);
    f.await;
    PEAK.load(Ordering::SeqCst) - base
}

#[tokio::test]
async fn announced_huge_frames_allocate_nothing_of_their_size() {
    if !child::alone() {
        return;
    }
    // Limits that let a 32 MiB frame through; the default 512 KiB read
    // buffer, which a waiting connection must not take after.
    let config = Config::default()
        .max_frame_size(64 << 20)
        .max_message_size(64 << 20);
    let hub_config = crate::support::hub::defaults().config(config);
    let hub = TestHub::start(hub_config).await;
    // Warm-up: the engine's read buffer and a pooled write buffer exist.
    let mut honest = Honest::connect(hub.addr).await;

    // 1. 32 MiB announced, 1 KiB sent: the connection holds a few times
    //    what arrived, neither the announced size nor a read buffer's worth.
    let (mut tcp, _buf) = raw_upgrade(hub.addr).await;
    honest.echo().await;
    let grew = peak_during(async {
        tcp.write_all(&header(0x82, 32 << 20)).await.unwrap();
        tcp.write_all(&[0u8; 1024]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        honest.echo().await;
    })
    .await;
    // What arrived, the buffer grown for the next read, and the honest
    // client's write buffer: tens of KiB (the whole read buffer, 512 KiB,
    // before the buffer grew with what arrives).
    assert!(
        grew < 64 << 10,
        "32 MiB announced, 1 KiB sent, {grew} bytes allocated"
    );
    assert!(hub.log().ended.is_empty(), "still waiting for the payload");
    drop(tcp);
    hub.wait_ended(1, Duration::from_secs(5)).await;

    // 2. 2^63 - 1 bytes announced, over the limit: refused on its header.
    let (mut tcp, mut buf) = raw_upgrade(hub.addr).await;
    honest.echo().await;
    let grew = peak_during(async {
        tcp.write_all(&header(0x82, (1 << 63) - 1)).await.unwrap();
        let (b0, payload) = read_frame(&mut tcp, &mut buf).await.unwrap();
        assert_eq!((b0, &payload[..2]), (0x88, &1009u16.to_be_bytes()[..]));
    })
    .await;
    assert!(
        grew < 64 << 10,
        "huge frame refused, {grew} bytes allocated"
    );
    hub.wait_ended(2, Duration::from_secs(5)).await;
    assert!(matches!(
        hub.log().ended[1].closed.error,
        Some(Error::FrameTooLarge { .. })
    ));
    honest.echo().await;
    honest.close().await;
    hub.stop().await;
}

#[tokio::test]
async fn slowloris_handshakes_are_timed_out() {
    let timeout = Duration::from_millis(300);
    let config = Config::default().handshake_timeout(Some(timeout));
    let hub = TestHub::start(crate::support::hub::defaults().config(config)).await;
    let mut honest = Honest::connect(hub.addr).await;
    let started = Instant::now();
    let mut lorises = Vec::new();
    for _ in 0..20 {
        let mut tcp = TcpStream::connect(hub.addr).await.unwrap();
        lorises.push(tokio::spawn(async move {
            let (mut rd, mut wr) = tcp.split();
            // Half a request, then a byte every 20 ms: never a whole head.
            let trickle = async {
                wr.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").await?;
                loop {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    wr.write_all(b"X").await?;
                }
                #[allow(unreachable_code)]
                Ok::<(), std::io::Error>(())
            };
            let mut answer = Vec::new();
            tokio::select! {
                _ = trickle => {}
                _ = rd.read_to_end(&mut answer) => {}
            }
            (started.elapsed(), answer)
        }));
    }
    // Meanwhile the hub serves the honest client, and a new one.
    for _ in 0..10 {
        honest.echo().await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut second = Honest::connect(hub.addr).await;
    for loris in lorises {
        let (after, answer) = tokio::time::timeout(Duration::from_secs(5), loris)
            .await
            .expect("the slow-loris connection is closed")
            .unwrap();
        assert!(
            after >= timeout,
            "closed after {after:?}, before the timeout"
        );
        assert!(
            !answer.starts_with(b"HTTP/1.1 101"),
            "{}",
            String::from_utf8_lossy(&answer)
        );
    }
    second.echo().await;
    honest.echo().await;
    second.close().await;
    honest.close().await;
    let log = hub.stop().await;
    // Only the honest clients were ever opened.
    assert_eq!(log.opened.len(), 2);
}

#[tokio::test]
async fn header_flood_is_refused_at_the_cap() {
    let config = Config::default().max_handshake_size(4096);
    let hub = TestHub::start(crate::support::hub::defaults().config(config)).await;
    let mut honest = Honest::connect(hub.addr).await;
    // Through `accept`, so the bytes the hub reads can be counted.
    let (client, server) = tokio::io::duplex(16 << 10);
    let (server, read) = support::Counting::new(server, usize::MAX);
    hub.handle.accept(server).await.unwrap();
    let (mut cr, mut cw) = tokio::io::split(client);
    let writer = tokio::spawn(async move {
        // One 1 MiB header: no line end for the parser to stop at.
        cw.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nX-Flood: ")
            .await?;
        cw.write_all(&vec![b'a'; 1 << 20]).await?;
        cw.write_all(b"\r\n\r\n").await
    });
    let answer = tokio::time::timeout(Duration::from_secs(5), support::read_to_end(&mut cr))
        .await
        .expect("refused");
    assert!(answer.starts_with("HTTP/1.1 431 "), "{answer}");
    assert!(
        read.load(Ordering::SeqCst) <= 4096,
        "read {} bytes of the flood",
        read.load(Ordering::SeqCst)
    );
    assert!(writer.await.unwrap().is_err(), "the flood went through");
    honest.echo().await;
    honest.close().await;
    let log = hub.stop().await;
    assert_eq!(log.opened.len(), 1);
}

#[tokio::test]
async fn a_peer_that_floods_pings_and_never_reads_cannot_grow_the_hubs_buffers() {
    let hub = TestHub::serve(
        small_listener(),
        crate::support::hub::defaults(),
        Recorder::new(),
    );
    let mut honest = Honest::connect(hub.addr).await;
    let (mut tcp, _) = small_raw_upgrade(hub.addr).await;
    let ping = masked(0x89, &[0u8; 125]);
    let flood = async {
        for _ in 0..20_000 {
            tcp.write_all(&ping).await.unwrap();
        }
    };
    // 2.6 MB of pings: the flood stalls once the hub owes more pongs
    // than the pipe takes and stops reading.
    let stalled = tokio::time::timeout(Duration::from_millis(500), flood)
        .await
        .is_err();
    assert!(stalled, "the hub kept reading while its pongs piled up");
    honest.echo().await;
    drop(tcp);
    hub.wait_ended(1, Duration::from_secs(5)).await;
    {
        let log = hub.log();
        let seen = &log.ended[0].seen;
        // Measured: about a hundred pings, 4 KiB of pongs.
        assert!(
            seen.pings < 1_000,
            "read {} pings it could not answer",
            seen.pings
        );
        assert!(
            seen.max_buffered < 64 << 10,
            "{} bytes of pongs held",
            seen.max_buffered
        );
        assert!(log.ended[0].closed.error.is_some(), "it hung up");
    }
    honest.echo().await;
    honest.close().await;
    hub.stop().await;
}

#[tokio::test]
async fn a_peer_that_never_reads_stops_being_read() {
    let hub = TestHub::serve(
        small_listener(),
        crate::support::hub::defaults(),
        Recorder::new(),
    );
    let mut honest = Honest::connect(hub.addr).await;
    let (mut tcp, _) = small_raw_upgrade(hub.addr).await;
    let msg = masked(0x82, &[7u8; 100]);
    let sent = async {
        for _ in 0..50_000 {
            tcp.write_all(&msg).await.unwrap();
        }
    };
    // 5 MB to echo, nothing read back: the hub stops reading.
    let stalled = tokio::time::timeout(Duration::from_millis(500), sent)
        .await
        .is_err();
    assert!(stalled, "the hub kept reading while its echoes piled up");
    honest.echo().await;
    drop(tcp);
    hub.wait_ended(1, Duration::from_secs(5)).await;
    {
        let log = hub.log();
        let seen = &log.ended[0].seen;
        // Measured: about 150 echoes, 6 KiB held.
        assert!(seen.received.len() < 2_000, "read {}", seen.received.len());
        assert!(
            seen.max_buffered < 64 << 10,
            "{} bytes of echoes held",
            seen.max_buffered
        );
        assert!(
            seen.statuses.iter().all(|s| *s == SendStatus::Sent),
            "never past max_backpressure"
        );
    }
    honest.echo().await;
    honest.close().await;
    hub.stop().await;
}

/// Messages sent to a peer that does not read, from another task through
/// the handle, as a broadcast would.
async fn flood_through_the_handle(policy: BackpressurePolicy) {
    let config = crate::support::hub::defaults()
        .config(Config::default().max_backpressure(64 << 10))
        .backpressure_policy(policy);
    let hub = TestHub::serve(small_listener(), config, Recorder::new());
    let mut honest = Honest::connect(hub.addr).await;
    let (mut tcp, mut buf) = small_raw_upgrade(hub.addr).await;
    let id = loop {
        if let Some(&id) = hub.log().opened.get(1) {
            break id;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let msg = Message::binary(vec![7u8; 16 << 10]);
    for _ in 0..64 {
        hub.handle.send(id, msg.clone()).await.unwrap();
    }
    honest.echo().await;
    match policy {
        BackpressurePolicy::Close => {
            // Nothing ends while the peer reads nothing (the close timeout
            // is 10 s); once it reads: whole messages, those the kernel took
            // and the one being written, and the close frame saying why.
            let mut got = 0;
            let code = loop {
                let (b0, payload) = read_frame(&mut tcp, &mut buf).await.expect("a frame");
                if b0 == 0x88 {
                    break u16::from_be_bytes([payload[0], payload[1]]);
                }
                assert_eq!((b0, payload.len()), (0x82, 16 << 10));
                got += 1;
            };
            assert_eq!(code, 1013);
            // None when the 64 sends came in one turn, before any write: all
            // of them waited, none begun.
            assert!(got <= 10, "{got} of 64 arrived");
            // The server shut down after its close, and lingers until the
            // peer hangs up.
            let mut rest = Vec::new();
            tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut rest))
                .await
                .expect("the end in time")
                .unwrap();
            assert!(rest.is_empty(), "nothing after the close: {rest:?}");
            drop(tcp);
            hub.wait_ended(1, Duration::from_secs(5)).await;
            let log = hub.log();
            let ended = &log.ended[0];
            assert_eq!(ended.closed.id, id);
            assert!(
                matches!(
                    ended.closed.error,
                    Some(Error::Backpressure { limit, .. }) if limit == 64 << 10
                ),
                "{:?}",
                ended.closed.error
            );
        }
        _ => {
            // Dropped, not closed: the peer catches up and gets a prefix
            // of whole messages, then what is sent after.
            assert!(hub.log().ended.is_empty());
            let mut got = 0;
            while let Ok(Some((b0, payload))) =
                tokio::time::timeout(Duration::from_millis(300), read_frame(&mut tcp, &mut buf))
                    .await
            {
                assert_eq!((b0, payload.len()), (0x82, 16 << 10));
                got += 1;
            }
            // 4 frames of 16 388 bytes pass 64 KiB; a few more if the
            // kernel took some between the engine's turns.
            assert!((4..=10).contains(&got), "{got} of 64 arrived");
            hub.handle.send(id, Message::text("after")).await.unwrap();
            let (b0, payload) = read_frame(&mut tcp, &mut buf).await.unwrap();
            assert_eq!((b0, &payload[..]), (0x81, &b"after"[..]));
            tcp.write_all(&masked(0x88, &close_payload(1000, "")))
                .await
                .unwrap();
            hub.wait_ended(1, Duration::from_secs(5)).await;
            assert!(hub.log().ended[0].closed.error.is_none());
        }
    }
    honest.echo().await;
    honest.close().await;
    hub.stop().await;
}

#[tokio::test]
async fn a_peer_sent_more_than_max_backpressure_is_closed() {
    flood_through_the_handle(BackpressurePolicy::Close).await;
}

#[tokio::test]
async fn a_peer_sent_more_than_max_backpressure_loses_messages_under_drop() {
    flood_through_the_handle(BackpressurePolicy::Drop).await;
}
