//! The per-message path shares nothing between connections: on a
//! multi-threaded runtime, echoing a small message costs no allocation of
//! its own. The received payload, which the user gets to keep, is copied
//! into the thread's arena: one 8 KiB chunk (two allocations) per few
//! hundred 16-byte messages. Spare buffers and arenas are per thread, so no
//! lock or shared counter is taken per message; this test counts what
//! would show if that changed (a payload allocated per message, a shared
//! pool falling back to the allocator, a boxed future per message, a
//! channel node per write). The clients are blocking sockets with fixed
//! buffers, so every allocation counted is the server's.
//!
//! Not with the `tracing` feature: spans allocate as the user asked.
#![cfg(not(feature = "tracing"))]

use std::io::{Read, Write};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Barrier};

use futures_util::{SinkExt, StreamExt};

use crate::support::child;
use crate::support::counting;

use counting::ALLOCS;

const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";

const CONNS: usize = 8;
const WARM_UP: usize = 200;
const MEASURED: usize = 2000;

/// One blocking client: upgrades, then echoes `WARM_UP` messages, waits at
/// the barrier, echoes `MEASURED` more, waits again. Payloads are 16 bytes,
/// different per connection and per message, each reply checked.
fn client(addr: std::net::SocketAddr, id: u8, barrier: Arc<Barrier>) {
    let mut tcp = std::net::TcpStream::connect(addr).unwrap();
    tcp.set_nodelay(true).unwrap();
    tcp.write_all(REQUEST).unwrap();
    let mut head = [0u8; 512];
    let mut n = 0;
    while !head[..n].ends_with(b"\r\n\r\n") {
        n += tcp.read(&mut head[n..]).unwrap();
    }
    assert!(head.starts_with(b"HTTP/1.1 101"));
    let key = [7, id, 3, 9];
    let mut echo = |i: usize| {
        let mut payload = [id; 16];
        payload[..8].copy_from_slice(&(i as u64).to_be_bytes());
        let mut frame = [0u8; 22];
        frame[..6].copy_from_slice(&[0x82, 0x80 | 16, key[0], key[1], key[2], key[3]]);
        for (k, b) in payload.iter().enumerate() {
            frame[6 + k] = b ^ key[k % 4];
        }
        tcp.write_all(&frame).unwrap();
        let mut reply = [0u8; 18];
        tcp.read_exact(&mut reply).unwrap();
        assert_eq!(reply[..2], [0x82, 16]);
        assert_eq!(reply[2..], payload);
    };
    (0..WARM_UP).for_each(&mut echo);
    barrier.wait();
    (WARM_UP..WARM_UP + MEASURED).for_each(&mut echo);
    barrier.wait();
}

#[test]
fn echoing_a_small_message_allocates_nothing_of_its_own_on_a_multi_threaded_runtime() {
    if !child::alone() {
        return;
    }
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = crate::support::two_workers();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            addr_tx.send(listener.local_addr().unwrap()).unwrap();
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                tcp.set_nodelay(true).unwrap();
                // The README's echo loop.
                tokio::spawn(async move {
                    let mut ws = wavesock::accept_async(tcp).await?;
                    while let Some(msg) = ws.next().await {
                        let msg = msg?;
                        if msg.is_data() {
                            ws.feed(msg).await?;
                        }
                    }
                    Ok::<_, wavesock::Error>(())
                });
            }
        });
    });
    let addr = addr_rx.recv().unwrap();
    let barrier = Arc::new(Barrier::new(CONNS + 1));
    let clients: Vec<_> = (0..CONNS)
        .map(|id| {
            let barrier = barrier.clone();
            std::thread::spawn(move || client(addr, id as u8, barrier))
        })
        .collect();
    barrier.wait();
    let before = ALLOCS.load(Ordering::SeqCst);
    barrier.wait();
    let allocs = ALLOCS.load(Ordering::SeqCst) - before;
    for c in clients {
        c.join().unwrap();
    }
    let messages = CONNS * MEASURED;
    // A 22-byte read each: 16 000 of them fill 43 arena chunks of two
    // allocations each. A little slack for the runtime's own bookkeeping
    // (its queues may grow once); anything per message would add thousands.
    assert!(
        allocs <= messages / 50,
        "{allocs} allocations for {messages} echoed messages"
    );
    eprintln!("{allocs} allocations for {messages} echoed messages");
}
