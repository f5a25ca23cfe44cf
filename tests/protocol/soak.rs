//! A soak test. The long one runs on demand (it is `#[ignore]`d in the
//! default run):
//!
//! ```text
//! SOAK_SECS=60 SOAK_CONNS=2000 cargo test --release --test protocol soak:: -- --ignored --nocapture
//! ```
//!
//! `short_soak` runs with every `cargo test` (and so in CI): 200 connections
//! for 3 seconds, messages up to 16 KiB.
//!
//! Thousands of connections on loopback send messages of mixed sizes (empty
//! to 256 KiB, text and binary, some fragmented) to an echo server, and
//! close at random moments, some cleanly, some by dropping the socket. Every
//! echo is checked byte for byte; at the end every message sent on a
//! connection that closed cleanly has come back, no task panicked, and the
//! server holds no connection any more.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use wavesock::{Config, Frame, Message, OpCode};

use crate::support::raw::Rng;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn payload(rng: &mut Rng, max: usize) -> Vec<u8> {
    let size = match rng.below(10) {
        0 => 0,
        1..=6 => rng.below(200) as usize,
        7 | 8 => rng.below(16 << 10) as usize,
        _ => rng.below(max as u64) as usize,
    };
    let seed = rng.next() as u8;
    (0..size)
        .map(|i| b'a' + (i as u8).wrapping_add(seed) % 26)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "soak test: run on demand"]
async fn soak() {
    soak_for(
        env("SOAK_SECS", 20) as u64,
        env("SOAK_CONNS", 1000),
        256 << 10,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_soak() {
    soak_for(3, 200, 16 << 10).await;
}

async fn soak_for(secs: u64, conns: usize, max_size: usize) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let live = Arc::new(AtomicUsize::new(0));
    let server_live = live.clone();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let live = server_live.clone();
            tokio::spawn(async move {
                live.fetch_add(1, Ordering::SeqCst);
                let config = Config::default().ping_interval(Some(Duration::from_secs(5)));
                if let Ok(mut ws) = wavesock::accept_async_with_config(tcp, config).await {
                    while let Some(Ok(msg)) = ws.next().await {
                        if msg.is_data() && ws.feed(msg).await.is_err() {
                            break;
                        }
                    }
                }
                live.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });

    let deadline = Instant::now() + Duration::from_secs(secs);
    let echoed = Arc::new(AtomicUsize::new(0));
    let clean = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for id in 0..conns {
        let echoed = echoed.clone();
        let clean = clean.clone();
        clients.push(tokio::spawn(async move {
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (id as u64 + 1));
            while Instant::now() < deadline {
                let url = format!("ws://{addr}/soak");
                let (mut ws, _) = wavesock::connect_async(url).await.expect("connect");
                let rounds = 1 + rng.below(20);
                for _ in 0..rounds {
                    let data = payload(&mut rng, max_size);
                    let text = rng.below(2) == 0;
                    if rng.below(8) == 0 && data.len() > 2 {
                        // Fragmented: the echo must still be one message.
                        let (a, b) = data.split_at(data.len() / 2);
                        let op = if text { OpCode::Text } else { OpCode::Binary };
                        ws.feed(Message::Frame(Frame::new(false, op, a.to_vec())))
                            .await
                            .unwrap();
                        ws.send(Message::Frame(Frame::new(
                            true,
                            OpCode::Continuation,
                            b.to_vec(),
                        )))
                        .await
                        .unwrap();
                    } else if text {
                        ws.send(Message::text(String::from_utf8(data.clone()).unwrap()))
                            .await
                            .unwrap();
                    } else {
                        ws.send(Message::binary(data.clone())).await.unwrap();
                    }
                    let back = loop {
                        match ws.next().await.expect("echo").expect("echo") {
                            Message::Ping(_) | Message::Pong(_) => continue,
                            m => break m,
                        }
                    };
                    assert_eq!(back.is_text(), text);
                    assert_eq!(back.into_payload(), data, "connection {id}");
                    echoed.fetch_add(1, Ordering::SeqCst);
                }
                if rng.below(4) == 0 {
                    drop(ws); // abrupt: the server sees EOF without a close
                } else {
                    ws.close(None).await.expect("clean close");
                    clean.fetch_add(1, Ordering::SeqCst);
                }
            }
        }));
    }
    for c in clients {
        c.await.expect("client task panicked");
    }
    // Every server task ends once its client is gone.
    let settle = Instant::now();
    while live.load(Ordering::SeqCst) > 0 && settle.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "soak: {} connections for {secs}s, {} messages echoed, {} clean closes",
        conns,
        echoed.load(Ordering::SeqCst),
        clean.load(Ordering::SeqCst)
    );
    assert_eq!(
        live.load(Ordering::SeqCst),
        0,
        "server connections left behind"
    );
    assert!(echoed.load(Ordering::SeqCst) > conns);
}
