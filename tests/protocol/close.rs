//! Close semantics over real loopback sockets: `close()` starts the
//! handshake and nothing the peer sent before its close frame is lost; a
//! peer that hangs up after our close frame ends the stream cleanly.

use crate::support;

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use wavesock::{CloseCode, CloseFrame, Config, Error, Message};

use crate::support::{
    accept, client, close_payload, listener, masked, raw_upgrade, read_frame, unmasked,
};

/// A server that sends three messages and its close frame in one write,
/// while the client closes: the client still gets all three, then the
/// server's close frame, then the end.
#[tokio::test]
async fn client_close_keeps_messages_sent_before_the_peers_close() {
    let (l, addr) = listener().await;
    let server = tokio::spawn(async move {
        let (mut tcp, _) = l.accept().await.unwrap();
        support::read_head(&mut tcp).await;
        let mut out = format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n\r\n",
            support::ACCEPT
        )
        .into_bytes();
        for text in ["one", "two", "three"] {
            out.extend(unmasked(0x81, text.as_bytes()));
        }
        out.extend(unmasked(0x88, &close_payload(1001, "going away")));
        tcp.write_all(&out).await.unwrap();
        // Our close frame crosses theirs; then the server ends TCP.
        let mut b0 = [0u8; 1];
        tokio::io::AsyncReadExt::read_exact(&mut tcp, &mut b0)
            .await
            .unwrap();
        drop(tcp);
        b0[0]
    });
    let request = http::Request::builder()
        .uri(format!("ws://{addr}/"))
        .header("Sec-WebSocket-Key", support::KEY)
        .body(())
        .unwrap();
    let (mut ws, _) = wavesock::connect_async(request).await.unwrap();
    // Let everything the server sent arrive before we close.
    tokio::time::sleep(Duration::from_millis(50)).await;
    ws.close(Some(CloseFrame::new(CloseCode::NORMAL, "done")))
        .await
        .unwrap();
    let mut got = Vec::new();
    while let Some(msg) = ws.next().await {
        got.push(msg.unwrap());
    }
    assert_eq!(
        got,
        vec![
            Message::text("one"),
            Message::text("two"),
            Message::text("three"),
            Message::Close(Some(CloseFrame::new(CloseCode::GOING_AWAY, "going away"))),
        ]
    );
    assert_eq!(server.await.unwrap(), 0x88, "our close frame went out");
}

/// The server side of the same: a client sends messages and then its close
/// frame right after our close; they are delivered, and our close is not
/// sent twice.
#[tokio::test]
async fn server_close_keeps_messages_sent_before_the_peers_close() {
    let (l, addr) = listener().await;
    let peer = tokio::spawn(async move {
        let (mut tcp, mut buf) = raw_upgrade(addr).await;
        let (b0, payload) = read_frame(&mut tcp, &mut buf).await.unwrap();
        assert_eq!((b0, &payload[..2]), (0x88, &1000u16.to_be_bytes()[..]));
        let mut out = Vec::new();
        for i in 0..100u32 {
            out.extend(masked(0x82, &i.to_be_bytes()));
        }
        out.extend(masked(0x88, &close_payload(1000, "")));
        tcp.write_all(&out).await.unwrap();
        // The server closes TCP once the handshake is done; nothing more.
        assert!(read_frame(&mut tcp, &mut buf).await.is_none());
    });
    let mut ws = accept(&l, Config::default()).await;
    ws.close(Some(CloseFrame::new(CloseCode::NORMAL, "")))
        .await
        .unwrap();
    for i in 0..100u32 {
        assert_eq!(
            ws.next().await.unwrap().unwrap(),
            Message::binary(i.to_be_bytes().to_vec())
        );
    }
    assert!(ws.next().await.unwrap().unwrap().is_close());
    assert!(ws.next().await.is_none());
    peer.await.unwrap();
}

/// A server that reads our close frame and hangs up without answering (as
/// many do): the stream ends with `None`, not an error.
#[tokio::test]
async fn a_peer_that_hangs_up_after_our_close_ends_the_stream_cleanly() {
    for reset in [false, true] {
        let (l, addr) = listener().await;
        let server = tokio::spawn(async move {
            let (tcp, _) = l.accept().await.unwrap();
            let mut ws = wavesock::accept_async(tcp).await.unwrap();
            ws.send(Message::text("before")).await.unwrap();
            // Wait for the client's close frame, then vanish.
            let tcp = ws.get_mut();
            let mut byte = [0u8; 1];
            tokio::io::AsyncReadExt::read_exact(tcp, &mut byte)
                .await
                .unwrap();
            assert_eq!(byte[0], 0x88);
            if reset {
                // Close with unread data and SO_LINGER 0: a TCP reset.
                ws.get_ref().set_zero_linger().unwrap();
            }
            drop(ws);
        });
        let mut ws = client(addr, Config::default()).await;
        ws.close(None).await.unwrap();
        assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("before"));
        let end = ws.next().await;
        assert!(end.is_none(), "reset={reset}: {end:?}");
        assert!(ws.is_close_sent());
        assert!(!ws.is_close_received());
        server.await.unwrap();
    }
}

/// Without our close frame, the peer hanging up stays an error: the
/// conversation may have been cut short.
#[tokio::test]
async fn a_peer_that_hangs_up_unasked_is_still_an_error() {
    let (l, addr) = listener().await;
    let server = tokio::spawn(async move {
        let (tcp, _) = l.accept().await.unwrap();
        let ws = wavesock::accept_async(tcp).await.unwrap();
        drop(ws);
    });
    let mut ws = client(addr, Config::default()).await;
    let err = ws.next().await.unwrap().unwrap_err();
    assert!(
        matches!(&err, Error::Io(e) if e.kind() == std::io::ErrorKind::UnexpectedEof),
        "{err:?}"
    );
    server.await.unwrap();
}

/// A split sender closing (what `SinkExt::close` on tokio-tungstenite's
/// `SplitSink` does): the receiver still gets what was in flight.
#[tokio::test]
async fn split_sender_close_leaves_the_receiver_reading() {
    let (l, addr) = listener().await;
    let server = tokio::spawn(async move {
        let mut ws = accept(&l, Config::default()).await;
        for i in 0..10 {
            ws.feed(Message::text(format!("m{i}"))).await.unwrap();
        }
        ws.flush().await.unwrap();
        // Echoes the close, then ends.
        while ws.next().await.is_some() {}
    });
    let (mut tx, mut rx) = client(addr, Config::default()).await.split();
    tokio::time::sleep(Duration::from_millis(20)).await;
    tx.close().await.unwrap();
    for i in 0..10 {
        assert_eq!(
            rx.next().await.unwrap().unwrap(),
            Message::text(format!("m{i}"))
        );
    }
    assert!(rx.next().await.unwrap().unwrap().is_close());
    assert!(rx.next().await.is_none());
    server.await.unwrap();
}

/// A split receiver already waiting for input when a sender sends our
/// close frame learns of it and runs the close timer: a peer that never
/// answers (nor hangs up) ends the receiver with `CloseTimeout`, not a
/// wait for ever.
#[tokio::test]
async fn a_waiting_split_receiver_times_out_a_close_its_sender_sent() {
    let (l, addr) = listener().await;
    let peer = tokio::spawn(async move {
        // Upgrades, then reads nothing and answers nothing.
        let (tcp, _) = raw_upgrade(addr).await;
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(tcp);
    });
    let config = Config::default().close_timeout(Duration::from_millis(200));
    let (mut tx, mut rx) = accept(&l, config).await.split();
    let receiving = tokio::spawn(async move { rx.next().await });
    // The receiver is parked on the socket before the close goes out.
    tokio::time::sleep(Duration::from_millis(50)).await;
    tx.send(Message::Close(None)).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), receiving)
        .await
        .expect("the receiver never ran the close timer")
        .unwrap();
    assert!(matches!(got, Some(Err(Error::CloseTimeout))), "{got:?}");
    peer.abort();
}

/// `close()` waits no longer than the core's close deadline, which runs
/// from when our close was recorded (here by `feed`), not from the call:
/// a peer that never reads costs the close timeout once.
#[tokio::test(start_paused = true)]
async fn close_is_bounded_by_the_deadline_armed_when_the_close_was_recorded() {
    use wavesock::{Role, WebSocketStream};
    let (a, _peer_never_reads) = tokio::io::duplex(64);
    let config = Config::default().close_timeout(Duration::from_secs(10));
    let mut ws = WebSocketStream::from_raw_socket(a, Role::Client, config).unwrap();
    ws.feed(Message::binary(vec![0u8; 4096])).await.unwrap();
    ws.feed(Message::Close(None)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(8)).await;
    let start = tokio::time::Instant::now();
    let r = ws.close(None).await;
    assert!(matches!(r, Err(Error::CloseTimeout)), "{r:?}");
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_secs(2) && waited < Duration::from_secs(3),
        "{waited:?}: the rest of the deadline, not a fresh timeout"
    );
    // The connection ended with that error, reported once: the stream
    // ends, and closing again sends and waits for nothing.
    assert!(ws.next().await.is_none());
    let again = tokio::time::Instant::now();
    assert!(ws.close(None).await.is_ok());
    assert_eq!(again.elapsed(), Duration::ZERO);
}

/// A peer that reads nothing, and a write queue past the backpressure
/// limit (one large message let in below it): `close()` cannot even queue
/// its frame, yet ends at the close timeout from the call, with
/// `CloseTimeout`, keepalive's deadlines passing meanwhile or not, and the
/// stream then ends.
#[tokio::test(start_paused = true)]
async fn close_with_no_room_for_its_frame_ends_at_the_timeout_from_the_call() {
    use wavesock::{Role, WebSocketStream};
    for keepalive in [false, true] {
        let (a, _peer_never_reads) = tokio::io::duplex(64);
        let mut config = Config::default()
            .close_timeout(Duration::from_secs(10))
            .max_backpressure(64 << 10);
        if keepalive {
            config = config
                .ping_interval(Some(Duration::from_secs(3)))
                .pong_timeout(Duration::from_secs(3));
        }
        let mut ws = WebSocketStream::from_raw_socket(a, Role::Client, config).unwrap();
        ws.feed(Message::binary(vec![7u8; 1 << 20])).await.unwrap();
        let start = tokio::time::Instant::now();
        let r = tokio::time::timeout(Duration::from_secs(600), ws.close(None)).await;
        let waited = start.elapsed();
        assert!(
            matches!(r, Ok(Err(Error::CloseTimeout))),
            "keepalive {keepalive}: {r:?} after {waited:?}"
        );
        assert!(
            waited >= Duration::from_secs(10) && waited < Duration::from_secs(11),
            "keepalive {keepalive}: {waited:?}"
        );
        assert!(ws.next().await.is_none());
    }
}

/// A client with 1 MiB queued past a 64 KiB backpressure limit to a peer
/// that reads nothing (the peer's end is returned, to read later).
fn stuck_client(
    close_timeout: Duration,
) -> (wavesock::WebSocketStream<DuplexStream>, DuplexStream) {
    use wavesock::{Role, WebSocketStream};
    let (a, b) = tokio::io::duplex(64);
    let config = Config::default()
        .close_timeout(close_timeout)
        .max_backpressure(64 << 10);
    (
        WebSocketStream::from_raw_socket(a, Role::Client, config).unwrap(),
        b,
    )
}

/// `close()` cut short (as by `select!`) while its frame waits for room,
/// then called again, and again: the close timeout runs from the first
/// call, so the retries end at it.
#[tokio::test(start_paused = true)]
async fn close_cut_short_and_called_again_ends_at_the_first_calls_timeout() {
    let (mut ws, _peer) = stuck_client(Duration::from_secs(10));
    ws.feed(Message::binary(vec![7u8; 1 << 20])).await.unwrap();
    let start = tokio::time::Instant::now();
    let mut outcome = None;
    for _ in 0..10 {
        let frame = CloseFrame::new(CloseCode::from(4001), "bye");
        if let Ok(r) = tokio::time::timeout(Duration::from_secs(6), ws.close(Some(frame))).await {
            outcome = Some(r);
            break;
        }
    }
    let waited = start.elapsed();
    assert!(
        matches!(outcome, Some(Err(Error::CloseTimeout))),
        "{outcome:?}"
    );
    assert!(
        waited >= Duration::from_secs(10) && waited < Duration::from_secs(11),
        "{waited:?}"
    );
}

/// A `close()` cut short while its frame waited for room, and never
/// called again: the connection goes on, and a closing handshake begun a
/// minute later another way (our close sent as a message, or the peer's)
/// has its whole timeout, not one that ran out long ago.
#[tokio::test(start_paused = true)]
async fn a_close_cut_short_and_given_up_leaves_a_later_close_its_timeout() {
    use wavesock::{Role, WebSocketStream};
    for peer_closes in [false, true] {
        let (a, b) = tokio::io::duplex(64);
        let config = Config::default()
            .close_timeout(Duration::from_secs(10))
            .max_backpressure(64 << 10);
        let mut ws = WebSocketStream::from_raw_socket(a, Role::Client, config.clone()).unwrap();
        let mut peer = WebSocketStream::from_raw_socket(b, Role::Server, config).unwrap();
        ws.feed(Message::binary(vec![7u8; 1 << 20])).await.unwrap();
        let frame = CloseFrame::new(CloseCode::from(4001), "bye");
        let cut = tokio::time::timeout(Duration::from_secs(1), ws.close(Some(frame))).await;
        assert!(cut.is_err() && !ws.is_close_sent(), "{cut:?}");
        // The peer takes the backlog; a minute of use goes by.
        let reader = tokio::spawn(async move {
            assert_eq!(peer.next().await.unwrap().unwrap().len(), 1 << 20);
            peer
        });
        ws.flush().await.unwrap();
        let mut peer = reader.await.unwrap();
        tokio::time::sleep(Duration::from_secs(60)).await;
        // The peer answers (or ends) 2 s into the handshake.
        let other = tokio::spawn(async move {
            if peer_closes {
                peer.send(Message::Close(Some(CloseFrame::new(
                    CloseCode::from(4002),
                    "srv",
                ))))
                .await
                .unwrap();
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
            while let Some(m) = peer.next().await {
                m.unwrap();
            }
        });
        if !peer_closes {
            ws.send(Message::Close(Some(CloseFrame::new(
                CloseCode::NORMAL,
                "later",
            ))))
            .await
            .unwrap();
        }
        let start = tokio::time::Instant::now();
        let got = ws.next().await;
        assert!(
            matches!(got, Some(Ok(Message::Close(_)))),
            "{peer_closes}: {got:?}"
        );
        assert!(ws.next().await.is_none(), "{peer_closes}");
        assert!(
            start.elapsed() >= Duration::from_secs(2),
            "{peer_closes}: ended at {:?}, not at the peer's end",
            start.elapsed()
        );
        other.await.unwrap();
    }
}

/// Room for the close frame comes just before the timeout, then the peer
/// stops reading: the deadline still runs from the call (not from when
/// the frame was queued), so `close()` takes one timeout in all.
#[tokio::test(start_paused = true)]
async fn a_close_frame_queued_late_keeps_the_deadline_of_the_call() {
    let (mut ws, mut peer) = stuck_client(Duration::from_secs(10));
    ws.feed(Message::binary(vec![7u8; 1 << 20])).await.unwrap();
    let reader = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(9900)).await;
        // The data frame (a client's: a 14-byte masked header) and no more.
        let mut frame = vec![0u8; (1 << 20) + 14];
        peer.read_exact(&mut frame).await.unwrap();
        peer
    });
    let start = tokio::time::Instant::now();
    // Larger than the duplex's 64 bytes: it cannot be written whole.
    let frame = CloseFrame::new(CloseCode::from(4001), "x".repeat(120));
    let r = ws.close(Some(frame)).await;
    let waited = start.elapsed();
    let _peer = reader.await.unwrap();
    assert!(matches!(r, Err(Error::CloseTimeout)), "{r:?}");
    assert!(waited < Duration::from_secs(11), "{waited:?}");
}

/// An invalid close frame is refused at once, whether or not the write
/// queue has room for it, and the connection lives on.
#[tokio::test(start_paused = true)]
async fn an_invalid_close_frame_is_refused_at_once_with_or_without_room() {
    use wavesock::{Role, WebSocketStream};
    let (a, _b) = tokio::io::duplex(4096);
    let mut roomy = WebSocketStream::from_raw_socket(a, Role::Client, Config::default()).unwrap();
    let (mut stuck, _peer) = stuck_client(Duration::from_secs(10));
    stuck
        .feed(Message::binary(vec![7u8; 1 << 20]))
        .await
        .unwrap();
    let r = roomy
        .close(Some(CloseFrame::new(CloseCode::from(1005), "")))
        .await;
    assert!(matches!(r, Err(Error::InvalidMessage(_))), "{r:?}");
    assert!(!roomy.is_close_sent());
    let start = tokio::time::Instant::now();
    let r = stuck
        .close(Some(CloseFrame::new(CloseCode::from(1005), "")))
        .await;
    assert!(matches!(r, Err(Error::InvalidMessage(_))), "{r:?}");
    assert_eq!(start.elapsed(), Duration::ZERO, "no wait for room");
    assert!(!stuck.is_close_sent());
}

/// Over loopback: a server with 32 MiB queued to a client that reads only
/// after `close()`'s timeout. `close()` gives up at its timeout; the
/// client gets whole frames up to where the connection was dropped, and
/// never a close frame other than the one asked for (the frame is taken
/// only as it is queued, not by a wait for room cut short).
#[tokio::test]
async fn a_close_cut_short_never_sends_another_frame_than_the_one_asked() {
    let (l, addr) = support::listener().await;
    let peer = tokio::spawn(async move {
        let (mut tcp, buf) = support::raw_upgrade(addr).await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let mut all = buf.to_vec();
        let _ = tokio::time::timeout(REPLY_GUARD, tcp.read_to_end(&mut all)).await;
        let mut closes = Vec::new();
        let mut at = 0;
        while all.len() >= at + 2 {
            let (len, h) = match all[at + 1] & 0x7f {
                126 if all.len() >= at + 4 => (
                    usize::from(u16::from_be_bytes([all[at + 2], all[at + 3]])),
                    4,
                ),
                127 if all.len() >= at + 10 => {
                    let n = u64::from_be_bytes(all[at + 2..at + 10].try_into().unwrap());
                    (usize::try_from(n).unwrap(), 10)
                }
                126 | 127 => break,
                n => (usize::from(n), 2),
            };
            if all.len() < at + h + len {
                break;
            }
            if all[at] & 0x0f == 0x8 {
                closes.push(all[at + h..at + h + len].to_vec());
            }
            at += h + len;
        }
        closes
    });
    let config = Config::default().close_timeout(Duration::from_millis(300));
    let mut ws = support::accept(&l, config).await;
    ws.feed(Message::binary(vec![3u8; 32 << 20])).await.unwrap();
    let r = ws
        .close(Some(CloseFrame::new(CloseCode::from(4001), "bye")))
        .await;
    drop(ws);
    assert!(matches!(r, Err(Error::CloseTimeout)), "{r:?}");
    for c in peer.await.unwrap() {
        assert_eq!(
            &c[..2],
            &4001u16.to_be_bytes(),
            "{c:?}: not the close asked for"
        );
    }
}

/// How long a peer waits for a close reply before the test fails: a guard
/// against hanging, not a bound on how fast the reply comes.
const REPLY_GUARD: Duration = Duration::from_secs(5);

/// Reads one frame a client sent: its first byte and its payload, unmasked.
async fn read_masked_frame(tcp: &mut TcpStream) -> (u8, Vec<u8>) {
    let mut head = [0u8; 2];
    tcp.read_exact(&mut head).await.unwrap();
    assert_eq!(head[1] & 0x80, 0x80, "client frames are masked");
    let len = match head[1] & 0x7f {
        126 => tcp.read_u16().await.unwrap() as usize,
        127 => tcp.read_u64().await.unwrap() as usize,
        n => n as usize,
    };
    let mut key = [0u8; 4];
    tcp.read_exact(&mut key).await.unwrap();
    let mut payload = vec![0u8; len];
    tcp.read_exact(&mut payload).await.unwrap();
    for (i, b) in payload.iter_mut().enumerate() {
        *b ^= key[i % 4];
    }
    (head[0], payload)
}

/// A raw client sends its close frame (1001 "restart") to a wavesock
/// server; the reply it reads, within [`REPLY_GUARD`].
async fn close_and_read_the_reply(addr: std::net::SocketAddr) -> Option<(u8, Vec<u8>)> {
    let (mut tcp, mut buf) = raw_upgrade(addr).await;
    tcp.write_all(&masked(0x88, &close_payload(1001, "restart")))
        .await
        .unwrap();
    tokio::time::timeout(REPLY_GUARD, read_frame(&mut tcp, &mut buf))
        .await
        .expect("no close reply from a server polled no more after the close")
}

fn restart() -> Message {
    Message::Close(Some(CloseFrame::new(CloseCode::GOING_AWAY, "restart")))
}

/// The server closes; the client's `next()` yields that close once and the
/// stream is then kept but never polled again: the server still reads the
/// client's reply, its code and reason echoed.
#[tokio::test]
async fn a_client_that_stops_polling_at_the_peers_close_has_sent_the_reply() {
    let (l, addr) = listener().await;
    let server = tokio::spawn(async move {
        let (mut tcp, _) = l.accept().await.unwrap();
        support::read_head(&mut tcp).await;
        let mut out = format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n\r\n",
            support::ACCEPT
        )
        .into_bytes();
        out.extend(unmasked(0x88, &close_payload(1001, "restart")));
        tcp.write_all(&out).await.unwrap();
        tokio::time::timeout(REPLY_GUARD, read_masked_frame(&mut tcp))
            .await
            .expect("no close reply from a client polled no more after the close")
    });
    let mut ws = client(addr, Config::default()).await;
    assert_eq!(ws.next().await.unwrap().unwrap(), restart());
    // `ws` stays alive, unpolled, until the server has read the reply.
    let reply = server.await.unwrap();
    assert_eq!(reply, (0x88, close_payload(1001, "restart")));
    drop(ws);
}

/// The client closes; the server's `next()` yields that close once and the
/// stream is then kept but never polled again: the client still reads the
/// server's reply, its code and reason echoed.
#[tokio::test]
async fn a_server_that_stops_polling_at_the_peers_close_has_sent_the_reply() {
    let (l, addr) = listener().await;
    let (done, until_done) = oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        let mut ws = accept(&l, Config::default()).await;
        let msg = ws.next().await.unwrap().unwrap();
        // Kept, unpolled, until the client has read the reply.
        until_done.await.unwrap();
        drop(ws);
        msg
    });
    let reply = close_and_read_the_reply(addr).await;
    assert_eq!(reply, Some((0x88, close_payload(1001, "restart"))));
    done.send(()).unwrap();
    assert_eq!(server.await.unwrap(), restart());
}

/// The same with the connection split: the receiver yields the client's
/// close once and is not polled again, the sender held idle meanwhile; the
/// client still reads the reply.
#[tokio::test]
async fn a_split_receiver_that_stops_polling_at_the_peers_close_has_sent_the_reply() {
    let (l, addr) = listener().await;
    let (done, until_done) = oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        let (tx, mut rx) = accept(&l, Config::default()).await.split();
        let msg = rx.next().await.unwrap().unwrap();
        // Both halves kept, unpolled, until the client has read the reply.
        until_done.await.unwrap();
        drop((tx, rx));
        msg
    });
    let reply = close_and_read_the_reply(addr).await;
    assert_eq!(reply, Some((0x88, close_payload(1001, "restart"))));
    done.send(()).unwrap();
    assert_eq!(server.await.unwrap(), restart());
}

/// A split receiver yields the client's close while a sender waits on a
/// full socket (the client reads nothing yet), then is not polled again.
/// Once the client reads, the sender's send completes and the reply, queued
/// behind the sender's message, reaches the client: the receiver's attempt
/// to write it on a full socket leaves the sender able to finish.
#[tokio::test]
async fn a_sender_waiting_on_the_socket_writes_the_reply_of_a_receiver_that_stopped() {
    const BIG: usize = 32 << 20;
    let (l, addr) = listener().await;
    let ((mut tcp, mut buf), ws) = tokio::join!(raw_upgrade(addr), accept(&l, Config::default()));
    let (mut tx, mut rx) = ws.split();
    let sending = tokio::spawn(async move {
        let sent = tx.send(Message::binary(vec![7u8; BIG])).await;
        (tx, sent)
    });
    // Let the send fill the socket and wait on it.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !sending.is_finished(),
        "the socket took {BIG} bytes at once"
    );
    let (yielded, close_yielded) = oneshot::channel();
    let (done, until_done) = oneshot::channel::<()>();
    let receiving = tokio::spawn(async move {
        yielded.send(rx.next().await.unwrap().unwrap()).unwrap();
        // Kept, unpolled, until the client has read the reply.
        until_done.await.unwrap();
        drop(rx);
    });
    tcp.write_all(&masked(0x88, &close_payload(1001, "restart")))
        .await
        .unwrap();
    let msg = tokio::time::timeout(REPLY_GUARD, close_yielded)
        .await
        .expect("the receiver did not yield the close")
        .unwrap();
    assert_eq!(msg, restart());
    // Only now does the client read.
    let (first, reply) = tokio::time::timeout(REPLY_GUARD, async {
        let first = read_frame(&mut tcp, &mut buf).await.unwrap();
        (first, read_frame(&mut tcp, &mut buf).await)
    })
    .await
    .expect("the sender's message and the reply did not both arrive");
    assert_eq!((first.0, first.1.len()), (0x82, BIG));
    assert_eq!(reply, Some((0x88, close_payload(1001, "restart"))));
    let (_tx, sent) = sending.await.unwrap();
    sent.unwrap();
    done.send(()).unwrap();
    receiving.await.unwrap();
}

/// A peer whose input never runs out (every read is ready) and that takes
/// every write: a flood that never answers our close.
struct Firehose {
    frame: Vec<u8>,
    at: usize,
}

impl tokio::io::AsyncRead for Firehose {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        while buf.remaining() > 0 {
            let at = self.at;
            let n = (self.frame.len() - at).min(buf.remaining());
            buf.put_slice(&self.frame[at..at + n]);
            self.at = (at + n) % self.frame.len();
        }
        std::task::Poll::Ready(Ok(()))
    }
}

impl tokio::io::AsyncWrite for Firehose {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// Our close against a peer that floods and never answers: the close
/// timeout ends the stream, unsplit and split, though every read finds
/// input (the deadline is looked at before reading, not only when a read
/// waits).
#[tokio::test]
async fn a_close_times_out_against_a_peer_that_floods_and_never_answers() {
    for split in [false, true] {
        let io = Firehose {
            frame: masked(0x82, &[7; 1000]),
            at: 0,
        };
        let config = Config::default().close_timeout(Duration::from_millis(300));
        let mut ws =
            wavesock::WebSocketStream::from_raw_socket(io, wavesock::Role::Server, config).unwrap();
        let start = std::time::Instant::now();
        let mut read = 0u64;
        let next = |read: &mut u64, msg: Option<wavesock::Result<Message>>| {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "split {split}: no close timeout 5 s after our close ({read} messages read)"
            );
            match msg {
                Some(Ok(_)) => {
                    *read += 1;
                    None
                }
                end => Some(end),
            }
        };
        let end = if split {
            let (mut tx, mut rx) = ws.split();
            tx.close().await.unwrap();
            loop {
                if let Some(end) = next(&mut read, rx.next().await) {
                    break end;
                }
                tokio::task::yield_now().await;
            }
        } else {
            ws.close(None).await.unwrap();
            loop {
                if let Some(end) = next(&mut read, ws.next().await) {
                    break end;
                }
                tokio::task::yield_now().await;
            }
        };
        assert!(
            matches!(end, Some(Err(Error::CloseTimeout))),
            "split {split}: {end:?}"
        );
    }
}

/// We close; the peer answers at once behind 100 messages it had in
/// flight, all in one write, and a slow application takes them at 5 ms
/// each, past the 100 ms close timeout: the peer answered in time, so
/// every message arrives, then its close, then the end (split and
/// unsplit). The deadline is looked at before reading, not while
/// messages already read wait to be taken.
#[tokio::test(start_paused = true)]
async fn a_close_answered_behind_a_backlog_is_no_timeout_for_a_slow_reader() {
    for split in [false, true] {
        let (a, mut peer) = tokio::io::duplex(1 << 16);
        let config = Config::default().close_timeout(Duration::from_millis(100));
        let mut ws =
            wavesock::WebSocketStream::from_raw_socket(a, wavesock::Role::Server, config).unwrap();
        let answering = tokio::spawn(async move {
            let mut buf = bytes::BytesMut::new();
            while let Some((b0, _)) = support::read_frame(&mut peer, &mut buf).await {
                if b0 == 0x88 {
                    break;
                }
            }
            let mut burst: Vec<u8> = (0..100)
                .flat_map(|i| masked(0x81, format!("m{i}").as_bytes()))
                .collect();
            burst.extend(masked(0x88, &close_payload(1000, "")));
            peer.write_all(&burst).await.unwrap();
            let mut rest = Vec::new();
            let _ = peer.read_to_end(&mut rest).await;
        });
        let mut got = 0;
        let mut closed = false;
        let end = if split {
            let (mut tx, mut rx) = ws.split();
            tx.close().await.unwrap();
            loop {
                match rx.next().await {
                    Some(Ok(Message::Text(_))) => got += 1,
                    Some(Ok(Message::Close(_))) => closed = true,
                    end => break end.map(|r| r.map(|_| ())),
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        } else {
            ws.close(None).await.unwrap();
            loop {
                match ws.next().await {
                    Some(Ok(Message::Text(_))) => got += 1,
                    Some(Ok(Message::Close(_))) => closed = true,
                    end => break end.map(|r| r.map(|_| ())),
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        assert!(
            got == 100 && closed && end.is_none(),
            "split {split}: {got} messages, close {closed}, then {end:?}"
        );
        answering.await.unwrap();
    }
}

/// A server Stream fails a connection from a frame's header (over
/// `max_message_size`) with the rest of the frame unread, and the
/// application drops it at once: the peer gets the 1009 close and a clean
/// end (the Stream reads and drops what input is there as it finishes, so
/// that closing does not reset a connection whose peer has not read all
/// it was sent; here it had, so this guards the close and the end).
#[tokio::test]
async fn a_server_failing_mid_frame_ends_without_a_reset() {
    let (l, addr) = listener().await;
    let (sent, go) = oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        let mut ws = accept(&l, Config::default().max_message_size(1024)).await;
        // The whole frame has arrived before the first read.
        go.await.unwrap();
        let got = ws.next().await;
        assert!(
            matches!(got, Some(Err(Error::MessageTooLarge { .. }))),
            "{got:?}"
        );
        // Dropped here, as an application that gives up does.
    });
    let (mut tcp, _) = raw_upgrade(addr).await;
    // 48 KiB announced: refused from the header, most of it unread.
    tcp.write_all(&masked(0x82, &vec![7u8; 48 << 10]))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    sent.send(()).unwrap();
    server.await.unwrap();
    let mut wire = Vec::new();
    let end = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut wire))
        .await
        .expect("the end in time");
    assert!(end.is_ok(), "a clean end, not {end:?} (after {wire:?})");
    assert!(wire.len() >= 4, "{wire:?}");
    assert_eq!(wire[0], 0x88, "the close frame: {wire:?}");
    assert_eq!(u16::from_be_bytes([wire[2], wire[3]]), 1009);
}
