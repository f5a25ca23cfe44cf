//! An idle connection costs the server little heap: measured with a counting
//! allocator over real loopback sockets, task and socket registration
//! included. One test function, so nothing else allocates meanwhile.
//!
//! Not with the `tracing` feature: its per-connection span is state the
//! user opted into (it adds one 128-byte step to the task).
#![cfg(not(feature = "tracing"))]

use std::io::{Read, Write};
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};

use crate::support::child;
use crate::support::counting;

use counting::LIVE;

const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";

/// Opens a blocking client connection (no tokio state on the client side),
/// upgrades it and exchanges one small message.
fn idle_client(addr: std::net::SocketAddr) -> std::net::TcpStream {
    let mut tcp = std::net::TcpStream::connect(addr).unwrap();
    tcp.write_all(REQUEST).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8];
    while !head.ends_with(b"\r\n\r\n") {
        tcp.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 101"));
    tcp.write_all(&[0x82, 0x82, 1, 2, 3, 4, b'h' ^ 1, b'i' ^ 2])
        .unwrap();
    let mut echo = [0u8; 4];
    tcp.read_exact(&mut echo).unwrap();
    assert_eq!(echo, [0x82, 2, b'h', b'i']);
    tcp
}

#[test]
fn an_idle_echo_connection_costs_under_1_kib_of_heap() {
    if !child::alone() {
        return;
    }
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            addr_tx.send(listener.local_addr().unwrap()).unwrap();
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
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
    // Warm-up: per-thread and per-runtime state is set up once.
    let mut clients = vec![idle_client(addr), idle_client(addr)];
    std::thread::sleep(Duration::from_millis(100));
    const N: usize = 500;
    clients.reserve(N);
    let before = LIVE.load(Ordering::SeqCst);
    for _ in 0..N {
        clients.push(idle_client(addr));
    }
    std::thread::sleep(Duration::from_millis(200));
    let per_conn = (LIVE.load(Ordering::SeqCst) - before) / N;
    eprintln!("heap per idle connection: {per_conn} bytes");
    assert!(per_conn <= 1024, "{per_conn} bytes per idle connection");

    // A connection waiting for the rest of a frame keeps memory in
    // proportion to what arrived (100 payload bytes of a 4 KiB frame), not
    // a read buffer sized for the frame or for a read.
    let before = LIVE.load(Ordering::SeqCst);
    let mut partial = vec![0x82, 0xfe, 0x10, 0x00, 1, 2, 3, 4];
    partial.extend_from_slice(&[0x55; 100]);
    for c in &mut clients[2..] {
        c.write_all(&partial).unwrap();
    }
    std::thread::sleep(Duration::from_millis(200));
    let per_conn = (LIVE.load(Ordering::SeqCst) - before) / N;
    eprintln!("heap per connection holding 100 bytes of a frame: {per_conn} bytes");
    assert!(per_conn <= 256, "{per_conn} bytes per waiting connection");
    drop(clients);
}
