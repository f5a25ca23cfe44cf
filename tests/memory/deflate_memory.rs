//! What permessage-deflate costs an idle connection under each
//! [`DeflatePolicy`], on both engines, counted with a counting allocator
//! over real loopback sockets, against a plain connection on the same
//! engine: right after the handshake, after one 300-byte compressed message
//! each way, and after enough messages to fill any window; and the most
//! the heap grows while every connection's message is in flight at once
//! (the shared policy's pool bounds it). The clients are
//! blocking sockets with fixed buffers and frames compressed beforehand,
//! so what is counted is the server's. One test function, so nothing else
//! allocates meanwhile. To see the figures:
//!
//! ```sh
//! cargo test --features deflate --test memory deflate_memory -- --nocapture
//! ```
#![cfg(feature = "deflate")]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use wavesock::http::{Request, Response};
use wavesock::hub::HttpResponse;
use wavesock::hub::{Handler, Hub, HubConfig, HubMessage, Ws};
use wavesock::{Config, DeflateConfig, DeflatePolicy};

use crate::support::child;
use crate::support::counting;

use counting::{LIVE, PEAK};

/// Chromium's offer.
const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n";

/// Connections measured per row.
const N: usize = 64;
/// Messages each way that fill the largest window measured (8 KiB each
/// way for `dedicated:16k`).
const FILL: usize = 40;

#[derive(Clone)]
struct Echo;

impl Handler for Echo {
    type Data = ();

    fn upgrade(&mut self, _: &Request<()>, _: &mut Response<()>) -> Result<(), HttpResponse> {
        Ok(())
    }

    fn message(&mut self, ws: &mut Ws<'_, ()>, msg: HubMessage<'_>) {
        ws.send_borrowed(msg).unwrap();
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Engine {
    Stream,
    Hub,
}

/// A server on a current-thread runtime of its own thread, compressing
/// under `policy` (`None`: no compression).
fn start(engine: Engine, policy: Option<DeflatePolicy>) -> SocketAddr {
    let mut config = Config::default();
    if let Some(p) = policy {
        config = config.deflate(DeflateConfig::default().policy(p));
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
            match engine {
                Engine::Hub => Hub::new(Echo, HubConfig::default().config(config))
                    .unwrap()
                    .serve(listener)
                    .await
                    .unwrap(),
                Engine::Stream => loop {
                    let (tcp, _) = listener.accept().await.unwrap();
                    let config = config.clone();
                    tokio::spawn(async move {
                        let mut ws = wavesock::accept_async_with_config(tcp, config)
                            .await
                            .unwrap();
                        while let Some(Ok(msg)) = ws.next().await {
                            if msg.is_data() && ws.send(msg).await.is_err() {
                                break;
                            }
                        }
                    });
                },
            }
        });
    });
    addr_rx.recv().unwrap()
}

/// Chat-like JSON lines of about 300 bytes, each different.
fn line(n: usize) -> Vec<u8> {
    let mut s = format!(
        "{{\"type\":\"message\",\"room\":\"general\",\"seq\":{n},\"user\":{{\"id\":{},\"name\":\"user{}\"}},\"text\":\"",
        n * 7919 % 1000,
        n % 13
    );
    while s.len() < 280 {
        s.push_str(["hello ", "there ", "how ", "is ", "it ", "going "][(s.len() + n) % 6]);
    }
    s.push_str("\"}");
    s.into_bytes()
}

/// `payload` compressed from an empty window, tail stripped: the first
/// message of any context, readable under every policy.
fn compressed(payload: &[u8]) -> Vec<u8> {
    let mut c = flate2::Compress::new(flate2::Compression::new(6), false);
    let mut out = Vec::with_capacity(payload.len() + 64);
    c.compress_vec(payload, &mut out, flate2::FlushCompress::Sync)
        .unwrap();
    assert!(out.ends_with(&[0, 0, 0xff, 0xff]));
    out.truncate(out.len() - 4);
    out
}

/// A masked binary frame, RSV1 set when `rsv1`.
fn frame(payload: &[u8], rsv1: bool) -> Vec<u8> {
    let key = [1, 2, 3, 4];
    let b0 = if rsv1 { 0xC2 } else { 0x82 };
    let mut f = if payload.len() < 126 {
        vec![b0, 0x80 | payload.len() as u8]
    } else {
        vec![
            b0,
            0x80 | 126,
            (payload.len() >> 8) as u8,
            payload.len() as u8,
        ]
    };
    f.extend_from_slice(&key);
    f.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
    f
}

/// A blocking client, upgraded; the response's extension line.
fn upgraded(addr: SocketAddr) -> (TcpStream, String) {
    let mut tcp = TcpStream::connect(addr).unwrap();
    tcp.set_nodelay(true).unwrap();
    tcp.write_all(REQUEST).unwrap();
    let mut head = [0u8; 512];
    let mut len = 0;
    while !head[..len].ends_with(b"\r\n\r\n") {
        tcp.read_exact(&mut head[len..len + 1]).unwrap();
        len += 1;
    }
    let head = std::str::from_utf8(&head[..len]).unwrap();
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let ext = head
        .lines()
        .find(|l| {
            l.to_ascii_lowercase()
                .starts_with("sec-websocket-extensions")
        })
        .unwrap_or_default()
        .to_string();
    (tcp, ext)
}

/// Sends a prepared frame and reads the echo's first bytes into `reply`
/// (a fixed buffer): its RSV1 bit says whether it came compressed.
fn echo(tcp: &mut TcpStream, frame: &[u8], reply: &mut [u8; 600]) -> bool {
    tcp.write_all(frame).unwrap();
    read_echo(tcp, reply)
}

/// Reads one echo (see [`echo`]).
fn read_echo(tcp: &mut TcpStream, reply: &mut [u8; 600]) -> bool {
    tcp.read_exact(&mut reply[..2]).unwrap();
    let mut len = usize::from(reply[1] & 0x7f);
    let mut at = 2;
    if len == 126 {
        tcp.read_exact(&mut reply[2..4]).unwrap();
        len = usize::from(u16::from_be_bytes([reply[2], reply[3]]));
        at = 4;
    }
    tcp.read_exact(&mut reply[at..at + len]).unwrap();
    reply[0] & 0x40 != 0
}

/// Heap per connection in bytes: after the handshake, after one message
/// each way, after the windows filled.
#[derive(Debug, Clone, Copy)]
struct Row {
    handshake: isize,
    one: isize,
    full: isize,
    /// The most the heap grew above its level with the windows full
    /// while every connection had a message in flight at once.
    burst: isize,
}

fn settle() -> isize {
    std::thread::sleep(Duration::from_millis(150));
    LIVE.load(Ordering::SeqCst) as isize
}

fn measure(engine: Engine, policy: Option<DeflatePolicy>, frames: &[Vec<u8>]) -> Row {
    let addr = start(engine, policy);
    let mut reply = [0u8; 600];
    // Warm-up: the engine's buffers and the thread's zlib pool are made
    // once, by the first connections, not by the ones measured.
    let mut warm: Vec<_> = (0..2).map(|_| upgraded(addr).0).collect();
    for c in &mut warm {
        for f in &frames[..4] {
            echo(c, f, &mut reply);
        }
    }
    let mut clients = Vec::with_capacity(N);
    let base = settle();
    for _ in 0..N {
        let (c, ext) = upgraded(addr);
        assert_eq!(ext.is_empty(), policy.is_none(), "{ext}");
        if policy == Some(DeflatePolicy::Shared) {
            assert!(ext.contains("server_no_context_takeover"), "{ext}");
        }
        clients.push(c);
    }
    let handshake = (settle() - base) / N as isize;
    for c in &mut clients {
        assert_eq!(echo(c, &frames[0], &mut reply), policy.is_some());
    }
    let one = (settle() - base) / N as isize;
    for c in &mut clients {
        for f in &frames[1..FILL] {
            echo(c, f, &mut reply);
        }
    }
    let full_live = settle();
    let full = (full_live - base) / N as isize;
    // A burst: every connection's message in before any echo is read, so
    // the server inflates and compresses for all of them at once. (A frame
    // compressed from an empty window is valid in any context.)
    PEAK.store(full_live as usize, Ordering::SeqCst);
    for c in &mut clients {
        c.write_all(&frames[0]).unwrap();
    }
    for c in &mut clients {
        read_echo(c, &mut reply);
    }
    let burst = PEAK.load(Ordering::SeqCst) as isize - full_live;
    drop(clients);
    drop(warm);
    Row {
        handshake,
        one,
        full,
        burst,
    }
}

#[test]
fn compression_memory_per_idle_connection_under_each_policy() {
    if !child::alone() {
        return;
    }
    let lines: Vec<Vec<u8>> = (0..FILL).map(line).collect();
    let plain_frames: Vec<Vec<u8>> = lines.iter().map(|l| frame(l, false)).collect();
    let deflate_frames: Vec<Vec<u8>> = lines.iter().map(|l| frame(&compressed(l), true)).collect();
    assert!(deflate_frames[0].len() < plain_frames[0].len());
    for engine in [Engine::Stream, Engine::Hub] {
        let plain = measure(engine, None, &plain_frames);
        eprintln!("{engine:?} plain: {plain:?}");
        let over = |r: Row| {
            (
                r.handshake - plain.handshake,
                r.one - plain.one,
                r.full - plain.full,
            )
        };
        for policy in [
            DeflatePolicy::Takeover,
            DeflatePolicy::Shared,
            DeflatePolicy::Dedicated(4 << 10),
            DeflatePolicy::Dedicated(16 << 10),
        ] {
            let row = measure(engine, Some(policy), &deflate_frames);
            let (handshake, one, full) = over(row);
            eprintln!(
                "{engine:?} {policy:?}: {row:?}; over plain: {handshake} B after the handshake, \
                 {one} B after one message each way, {full} B with the windows full"
            );
            // No zlib state before a compressed message, under any policy:
            // a compressor and a decompressor of a few words each.
            assert!(handshake <= 64, "{engine:?} {policy:?}: {handshake} B");
            match policy {
                DeflatePolicy::Shared => {
                    assert!(one <= 64, "{engine:?} shared: {one} B");
                    assert!(full <= 64, "{engine:?} shared: {full} B");
                    // 64 connections compressing at once borrow from the
                    // thread's pool: no zlib state of their own, even for
                    // a moment (one would be 40 KiB in, 330 KiB out).
                    assert!(
                        row.burst < 256 << 10,
                        "{engine:?} shared burst: {} B",
                        row.burst
                    );
                }
                DeflatePolicy::Dedicated(n) => {
                    let n = n as isize;
                    assert!(one <= n, "{engine:?} {policy:?}: {one} B after one message");
                    assert!(
                        (n * 3 / 4..=n * 5 / 4).contains(&full),
                        "{engine:?} {policy:?}: {full} B with the windows full"
                    );
                }
                // zlib's whole state each way once used.
                _ => assert!(one > 64 << 10, "{engine:?} takeover: {one} B"),
            }
        }
    }
}
