//! The Stream's receive step at its edges, over loopback with raw peers:
//! pongs and fed replies flushed while the application only awaits
//! `next()` (unsplit and split), the peer's close answered, keepalive and
//! close deadlines kept, a half-closed peer, a ping flood from a peer
//! that reads nothing (no busy loop, no pong lost), and the memory
//! budget's 1009 for a frame larger than all of it beside other holders
//! (header and payload together or apart, the room taken meanwhile).
//! Written to break the flush-then-read step and the budget refusal.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use wavesock::proto::budget::{BudgetAccount, Held};
use wavesock::{Config, MemoryBudget, Message, OpCode, WebSocketStream};

use crate::support::raw::{frame, read_frame, upgrade_raw, within};

/// A client frame's header alone (masked, key zero), for `len` bytes.
fn header(fin: bool, opcode: OpCode, len: u64) -> Vec<u8> {
    let mut h = vec![(u8::from(fin) << 7) | opcode.as_u8()];
    if len <= 125 {
        h.push(0x80 | len as u8);
    } else if len <= 0xffff {
        h.push(0x80 | 126);
        h.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        h.push(0x80 | 127);
        h.extend_from_slice(&len.to_be_bytes());
    }
    h.extend_from_slice(&[0, 0, 0, 0]);
    h
}

/// A server on loopback that accepts connections with `config` and hands
/// each Stream to `serve`.
async fn server<F, Fut>(config: Config, serve: F) -> std::net::SocketAddr
where
    F: Fn(WebSocketStream<TcpStream>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let serve = Arc::new(serve);
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let config = config.clone();
            let serve = serve.clone();
            tokio::spawn(async move {
                if let Ok(ws) = wavesock::accept_async_with_config(tcp, config).await {
                    serve(ws).await;
                }
            });
        }
    });
    addr
}

/// Reads server frames until a close frame: its code, or `None` at EOF.
async fn close_code_or_eof(tcp: &mut TcpStream) -> Option<u16> {
    loop {
        let mut head = [0u8; 2];
        if tcp.read_exact(&mut head).await.is_err() {
            return None;
        }
        let len = match head[1] & 0x7f {
            126 => tcp.read_u16().await.ok()? as usize,
            127 => tcp.read_u64().await.ok()? as usize,
            n => n as usize,
        };
        let mut payload = vec![0u8; len];
        tcp.read_exact(&mut payload).await.ok()?;
        if head[0] & 0x0f == 0x8 {
            return Some(u16::from_be_bytes([payload[0], payload[1]]));
        }
    }
}

/// A future that counts its polls.
struct Counted<F> {
    f: Pin<Box<F>>,
    polls: Arc<AtomicUsize>,
}

impl<F: Future> Future for Counted<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.polls.fetch_add(1, Ordering::Relaxed);
        self.f.as_mut().poll(cx)
    }
}

// ---------------------------------------------------------------------
// A frame over the whole memory budget.

/// How the header of a frame larger than the whole budget comes.
#[derive(Clone, Copy, PartialEq)]
enum Comes {
    /// With 4 KiB of its payload, in one write.
    WithPayload,
    /// Alone; the payload 200 ms later.
    Alone,
    /// Alone; then others take the rest of the budget, then the payload.
    AloneThenRoomTaken,
}

/// A server Stream under a 256 KiB budget (allowance 0) of which others
/// hold all but 64 KiB, and a peer that sends a 1 MiB frame as `comes`
/// says: the close code it gets within 3 s. 1009 every way: the frame is
/// known to exceed the whole budget once its header is read. (A header
/// read alone leaves the inbox's buffer empty, so the next plan is a read
/// into the engine's memory, which refused it only as a wait, for room it
/// could never use: no close in 3 s.)
async fn over_budget_frame(comes: Comes) -> Result<Option<u16>, tokio::time::error::Elapsed> {
    let limit = 256 << 10;
    let budget = MemoryBudget::new(limit)
        .allowance(0)
        .wait_timeout(Duration::from_secs(30));
    let mut others = BudgetAccount::new(Some(budget.clone()));
    assert_eq!(
        others.try_set(Held::Fragments, limit - (64 << 10)),
        wavesock::proto::budget::Grant::Granted
    );
    let config = Config::default()
        .max_frame_size(16 << 20)
        .max_message_size(16 << 20)
        .memory_budget(budget.clone());
    let addr = server(config, |mut ws| async move {
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;
    let mut tcp = upgrade_raw(addr).await;
    let mut wire = header(true, OpCode::Binary, 1 << 20);
    if comes != Comes::WithPayload {
        tcp.write_all(&wire).await.unwrap();
        wire.clear();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    if comes == Comes::AloneThenRoomTaken {
        assert_eq!(
            others.try_set(Held::Fragments, limit),
            wavesock::proto::budget::Grant::Granted
        );
    }
    wire.extend(vec![0u8; 4096]);
    tcp.write_all(&wire).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(3), close_code_or_eof(&mut tcp)).await;
    drop(others);
    got
}

#[tokio::test]
async fn a_frame_over_the_budget_gets_1009_after_its_header_alone_and_the_room_taken() {
    assert_eq!(
        over_budget_frame(Comes::AloneThenRoomTaken).await,
        Ok(Some(1009))
    );
}

#[tokio::test]
async fn a_frame_over_the_budget_gets_1009_after_its_header_alone() {
    assert_eq!(over_budget_frame(Comes::Alone).await, Ok(Some(1009)));
}

#[tokio::test]
async fn a_frame_over_the_budget_gets_1009_with_its_header_and_payload_together() {
    assert_eq!(over_budget_frame(Comes::WithPayload).await, Ok(Some(1009)));
}

/// A frame that fits the budget is not refused beside others, whatever
/// kind: fragmented (earlier fragments held), each header arriving apart
/// from its payload, a ping between fragments.
#[tokio::test]
async fn budget_frames_that_fit_are_not_refused() {
    let limit = 1 << 20;
    let budget = MemoryBudget::new(limit)
        .allowance(16 << 10)
        .wait_timeout(Duration::from_secs(10));
    // Other connections hold 300 KiB of it throughout.
    let mut others = BudgetAccount::new(Some(budget.clone()));
    assert_eq!(
        others.try_set(Held::Fragments, (300 << 10) + (16 << 10)),
        wavesock::proto::budget::Grant::Granted
    );
    let config = Config::default()
        .max_frame_size(16 << 20)
        .max_message_size(16 << 20)
        .memory_budget(budget.clone());
    let addr = server(config, |mut ws| async move {
        while let Some(Ok(m)) = ws.next().await {
            if let Message::Binary(b) = m {
                let _ = ws.send(Message::text(b.len().to_string())).await;
            }
        }
    })
    .await;
    let mut tcp = upgrade_raw(addr).await;
    // Three fragments of 100 KiB, each header sent apart from its payload,
    // with a ping between: 300 KiB in all.
    for (i, op) in [OpCode::Binary, OpCode::Continuation, OpCode::Continuation]
        .into_iter()
        .enumerate()
    {
        let f = frame(i == 2, op, vec![7u8; 100 << 10]);
        let split = f.len() - (100 << 10);
        tcp.write_all(&f[..split]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        tcp.write_all(&f[split..split + 10]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        tcp.write_all(&f[split + 10..]).await.unwrap();
        tcp.write_all(&frame(true, OpCode::Ping, b"p".to_vec()))
            .await
            .unwrap();
    }
    let mut pongs = 0;
    loop {
        let (op, payload) = read_frame(&mut tcp).await;
        match op {
            0xA => pongs += 1,
            0x1 => {
                assert_eq!(payload, b"307200");
                break;
            }
            0x8 => panic!("closed: {}", u16::from_be_bytes([payload[0], payload[1]])),
            _ => {}
        }
    }
    assert!(pongs >= 2);
    drop(others);
}

// ---------------------------------------------------------------------
// The Stream's flush-then-read step.

/// The app only awaits `next()`: pings answered one by one (each a
/// FlushRead of its own), the peer waiting for each pong.
#[tokio::test]
async fn stream_pongs_flushed_while_app_awaits_next() {
    let addr = server(Config::default(), |mut ws| async move {
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;
    let mut tcp = upgrade_raw(addr).await;
    for i in 0..50u8 {
        tcp.write_all(&frame(true, OpCode::Ping, vec![i]))
            .await
            .unwrap();
        assert_eq!(read_frame(&mut tcp).await, (0xA, vec![i]));
    }
}

/// A split receiver owes a pong while its sender is idle (held, never
/// used): it writes the pong itself.
#[tokio::test]
async fn split_receiver_flushes_pong_with_idle_sender() {
    let addr = server(Config::default(), |ws| async move {
        let (tx, mut rx) = ws.split();
        while let Some(Ok(_)) = rx.next().await {}
        drop(tx);
    })
    .await;
    let mut tcp = upgrade_raw(addr).await;
    for i in 0..20u8 {
        tcp.write_all(&frame(true, OpCode::Ping, vec![i]))
            .await
            .unwrap();
        assert_eq!(read_frame(&mut tcp).await, (0xA, vec![i]));
    }
}

/// Replies fed (not flushed) by the app go out when it next waits for
/// input: the unsplit Stream flushes everything before it reads.
#[tokio::test]
async fn fed_replies_written_when_the_reader_waits() {
    let addr = server(Config::default(), |mut ws| async move {
        while let Some(Ok(m)) = ws.next().await {
            if m.is_text() {
                ws.feed(m).await.unwrap();
            }
        }
    })
    .await;
    let mut tcp = upgrade_raw(addr).await;
    for i in 0..20u8 {
        tcp.write_all(&frame(true, OpCode::Text, vec![b'a' + i]))
            .await
            .unwrap();
        assert_eq!(read_frame(&mut tcp).await, (0x1, vec![b'a' + i]));
    }
    // Pipelined: many at once, all echoed.
    let mut burst = Vec::new();
    for _ in 0..200 {
        burst.extend(frame(true, OpCode::Text, b"xyz".to_vec()));
    }
    tcp.write_all(&burst).await.unwrap();
    for _ in 0..200 {
        assert_eq!(read_frame(&mut tcp).await, (0x1, b"xyz".to_vec()));
    }
}

/// The peer's close is echoed while the app awaits `next()`, and the
/// app sees the close then the end.
#[tokio::test]
async fn close_echo_reaches_the_peer() {
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let done_tx = std::sync::Mutex::new(Some(done_tx));
    let addr = server(Config::default(), move |mut ws| {
        let tx = done_tx.lock().unwrap().take();
        async move {
            let mut seen = Vec::new();
            while let Some(m) = ws.next().await {
                seen.push(format!("{m:?}"));
                if m.is_err() {
                    break;
                }
            }
            let _ = tx.unwrap().send(seen);
        }
    })
    .await;
    let mut tcp = upgrade_raw(addr).await;
    tcp.write_all(&frame(true, OpCode::Ping, b"a".to_vec()))
        .await
        .unwrap();
    let close = frame(true, OpCode::Close, vec![0x03, 0xe8]);
    tcp.write_all(&close).await.unwrap();
    assert_eq!(read_frame(&mut tcp).await, (0xA, b"a".to_vec()));
    assert_eq!(read_frame(&mut tcp).await, (0x8, vec![0x03, 0xe8]));
    // The server ends the transport.
    let mut rest = Vec::new();
    within(5, tcp.read_to_end(&mut rest)).await.unwrap();
    let seen = within(5, done_rx).await.unwrap();
    assert!(seen.iter().any(|s| s.contains("Close")), "{seen:?}");
}

/// Keepalive: the peer never answers pings; the Stream's next() fails
/// (timed out) within ping interval + pong timeout, the app awaiting it
/// the whole time, and the peer saw a ping first.
#[tokio::test]
async fn keepalive_times_out_a_silent_peer() {
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let done_tx = std::sync::Mutex::new(Some(done_tx));
    let config = Config::default()
        .ping_interval(Some(Duration::from_millis(200)))
        .pong_timeout(Duration::from_millis(300))
        .close_timeout(Duration::from_millis(300));
    let addr = server(config, move |mut ws| {
        let tx = done_tx.lock().unwrap().take();
        async move {
            let t = Instant::now();
            let mut last = None;
            while let Some(m) = ws.next().await {
                last = Some(format!("{m:?}"));
                if m.is_err() {
                    break;
                }
            }
            let _ = tx.unwrap().send((t.elapsed(), last));
        }
    })
    .await;
    let mut tcp = upgrade_raw(addr).await;
    // A ping first (data messages answered first keep it alive a while).
    assert_eq!(read_frame(&mut tcp).await.0, 0x9);
    let (took, last) = within(5, done_rx).await.unwrap();
    assert!(took < Duration::from_secs(2), "{took:?} {last:?}");
}

/// Keepalive while the peer keeps the app busy with data it never
/// answers pings for... it answers data only: still timed out? No: input
/// keeps the connection alive. Here the peer sends a message every 50 ms
/// and the server's pings keep going out (one per interval at most).
#[tokio::test]
async fn keepalive_pings_keep_firing_while_data_flows() {
    let config = Config::default()
        .ping_interval(Some(Duration::from_millis(100)))
        .pong_timeout(Duration::from_secs(5));
    let addr = server(config, |mut ws| async move {
        while let Some(Ok(m)) = ws.next().await {
            if m.is_text() {
                let _ = ws.send(m).await;
            }
        }
    })
    .await;
    let mut tcp = upgrade_raw(addr).await;
    let (mut rd, mut wr) = tcp.split();
    let reader = async {
        let mut pings = 0;
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(1200) {
            let (op, _) = read_frame(&mut rd).await;
            if op == 0x9 {
                pings += 1;
            }
        }
        pings
    };
    let writer = async {
        for _ in 0..30 {
            wr.write_all(&frame(true, OpCode::Text, b"hi".to_vec()))
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let (pings, ()) = tokio::join!(reader, writer);
    // Whether input defers pings is the core's policy; what matters here
    // is that the Stream keeps serving its timer (no more than one per
    // interval).
    assert!(pings <= 14, "{pings}");
}

/// Close timeout: the app closes, the raw peer never answers; close()
/// returns within the timeout, and next() ends.
#[tokio::test]
async fn close_timeout_enforced_with_silent_peer() {
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let done_tx = std::sync::Mutex::new(Some(done_tx));
    let config = Config::default().close_timeout(Duration::from_millis(300));
    let addr = server(config, move |mut ws| {
        let tx = done_tx.lock().unwrap().take();
        async move {
            let t = Instant::now();
            let _ = ws.close(None).await;
            let _ = ws.next().await;
            let _ = ws.next().await;
            let _ = tx.unwrap().send(t.elapsed());
        }
    })
    .await;
    let mut tcp = upgrade_raw(addr).await;
    assert_eq!(read_frame(&mut tcp).await.0, 0x8);
    let took = within(5, done_rx).await.unwrap();
    assert!(took < Duration::from_secs(2), "{took:?}");
}

/// Split: the sender closes, the receiver awaits next() (its read
/// pending, its timer set before the close armed a deadline); the silent
/// peer's close timeout must still end the receiver.
#[tokio::test]
async fn split_close_timeout_wakes_the_waiting_receiver() {
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let done_tx = std::sync::Mutex::new(Some(done_tx));
    let config = Config::default().close_timeout(Duration::from_millis(300));
    let addr = server(config, move |ws| {
        let tx = done_tx.lock().unwrap().take();
        async move {
            let (mut s, mut r) = ws.split();
            let t = Instant::now();
            let reader = tokio::spawn(async move {
                let mut n = 0;
                while let Some(m) = r.next().await {
                    n += 1;
                    if m.is_err() {
                        break;
                    }
                }
                n
            });
            tokio::time::sleep(Duration::from_millis(100)).await;
            let _ = s.send(Message::Close(None)).await;
            let _ = reader.await;
            let _ = tx.unwrap().send(t.elapsed());
        }
    })
    .await;
    let mut tcp = upgrade_raw(addr).await;
    assert_eq!(read_frame(&mut tcp).await.0, 0x8);
    let took = within(5, done_rx).await.unwrap();
    assert!(took < Duration::from_secs(2), "{took:?}");
}

/// The peer shuts its write side down after a ping: the pong still
/// comes, and the server's next() ends (no close frame: an error).
#[tokio::test]
async fn half_closed_peer_gets_its_pong_and_the_stream_ends() {
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let done_tx = std::sync::Mutex::new(Some(done_tx));
    let addr = server(Config::default(), move |mut ws| {
        let tx = done_tx.lock().unwrap().take();
        async move {
            let mut last = String::new();
            while let Some(m) = ws.next().await {
                last = format!("{m:?}");
                if m.is_err() {
                    break;
                }
            }
            let _ = tx.unwrap().send(last);
        }
    })
    .await;
    let mut tcp = upgrade_raw(addr).await;
    tcp.write_all(&frame(true, OpCode::Ping, b"z".to_vec()))
        .await
        .unwrap();
    tcp.shutdown().await.unwrap();
    assert_eq!(read_frame(&mut tcp).await, (0xA, b"z".to_vec()));
    let last = within(5, done_rx).await.unwrap();
    assert!(last.contains("rr"), "{last}");
}

/// A flood of pings from a peer that reads nothing: the server must not
/// spin (polls of its task bounded) and must not read on without bound
/// while the pongs pile up; once the peer reads, all pongs come.
#[tokio::test]
async fn ping_flood_from_a_slow_reader_neither_spins_nor_stalls() {
    let polls = Arc::new(AtomicUsize::new(0));
    let p2 = polls.clone();
    let config = Config::default().max_backpressure(256 << 10);
    let addr = server(config, move |mut ws| {
        let polls = p2.clone();
        async move {
            let fut = async move { while let Some(Ok(_)) = ws.next().await {} };
            Counted {
                f: Box::pin(fut),
                polls,
            }
            .await;
        }
    })
    .await;
    let mut tcp = upgrade_raw(addr).await;
    let n = 40_000usize;
    let mut flood = Vec::new();
    for i in 0..n {
        flood.extend(frame(true, OpCode::Ping, vec![(i % 251) as u8; 100]));
    }
    let (mut rd, mut wr) = tcp.split();
    // Write as much as the server takes in 2 s, reading nothing.
    let _ = tokio::time::timeout(Duration::from_secs(2), wr.write_all(&flood)).await;
    let before = polls.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle_polls = polls.load(Ordering::Relaxed) - before;
    assert!(
        idle_polls < 50,
        "{idle_polls} polls in 500 ms while blocked: a busy loop"
    );
    // Now read everything: every pong answered, in order.
    let reader = async {
        let mut i = 0usize;
        while i < n {
            let (op, payload) = read_frame(&mut rd).await;
            assert_eq!(op, 0xA);
            assert_eq!(payload[0], (i % 251) as u8, "pong {i}");
            i += 1;
        }
    };
    within(30, reader).await;
}
