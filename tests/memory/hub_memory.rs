//! The hub's memory promises, counted with a counting allocator over real
//! loopback sockets: an idle connection costs at most 256 bytes of heap
//! after an echo with the engine's own poller, 512 with a Tokio
//! registration per socket (`WAVESOCK_HUB_READINESS=tokio`), and echoing 16-byte and
//! 1 KiB messages allocates nothing at all once warm, on a current-thread
//! and on a multi-threaded runtime (one engine per worker). The clients
//! are blocking sockets with fixed buffers, so every allocation counted is
//! the server's. One test function, so nothing else allocates meanwhile.
//!
//! Not with the `tracing` feature: spans allocate as the user asked.
#![cfg(not(feature = "tracing"))]

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use wavesock::http::{Request, Response};
use wavesock::hub::HttpResponse;
use wavesock::hub::{Handler, Hub, HubMessage, Readiness, Ws};

use crate::support::child;
use crate::support::counting;

use counting::{ALLOCS, LIVE};

const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";

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

/// Starts a hub on a runtime of its own thread: current-thread with one
/// engine, or multi-threaded with `workers` threads and one engine each.
fn start_hub(workers: Option<usize>) -> SocketAddr {
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = match workers {
            None => tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
            Some(n) => tokio::runtime::Builder::new_multi_thread()
                .worker_threads(n)
                .enable_all()
                .build()
                .unwrap(),
        };
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            addr_tx.send(listener.local_addr().unwrap()).unwrap();
            let config = crate::support::hub::defaults().engines(workers);
            Hub::new(Echo, config)
                .unwrap()
                .serve(listener)
                .await
                .unwrap();
        });
    });
    addr_rx.recv().unwrap()
}

/// A blocking client, upgraded.
fn upgraded(addr: SocketAddr) -> std::net::TcpStream {
    let mut tcp = std::net::TcpStream::connect(addr).unwrap();
    tcp.set_nodelay(true).unwrap();
    tcp.write_all(REQUEST).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8];
    while !head.ends_with(b"\r\n\r\n") {
        tcp.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 101"));
    tcp
}

/// Sends one masked binary message of `len` bytes (different per `id` and
/// `i`) and checks its echo. Fixed buffers: nothing allocated here.
fn echo(tcp: &mut std::net::TcpStream, id: u8, i: usize, len: usize) {
    let mut frame = [0u8; 8 + 1024];
    let key = [7, id, 3, 9];
    let head = if len < 126 {
        frame[..2].copy_from_slice(&[0x82, 0x80 | len as u8]);
        2
    } else {
        frame[..4].copy_from_slice(&[0x82, 0x80 | 126, (len >> 8) as u8, len as u8]);
        4
    };
    frame[head..head + 4].copy_from_slice(&key);
    let mut payload = [id; 1024];
    payload[..8].copy_from_slice(&(i as u64).to_be_bytes());
    for k in 0..len {
        frame[head + 4 + k] = payload[k] ^ key[k % 4];
    }
    tcp.write_all(&frame[..head + 4 + len]).unwrap();
    let mut reply = [0u8; 4 + 1024];
    let reply_head = head;
    tcp.read_exact(&mut reply[..reply_head + len]).unwrap();
    assert_eq!(reply[0], 0x82);
    assert_eq!(&reply[reply_head..reply_head + len], &payload[..len]);
}

/// Allocations by the server while `conns` clients echo `rounds` messages
/// of `len` bytes each, after a warm-up of the same.
fn allocations_per_echo(addr: SocketAddr, conns: usize, len: usize) -> usize {
    const WARM_UP: usize = 300;
    const MEASURED: usize = 2000;
    let barrier = Arc::new(Barrier::new(conns + 1));
    let clients: Vec<_> = (0..conns)
        .map(|id| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let mut tcp = upgraded(addr);
                for i in 0..WARM_UP {
                    echo(&mut tcp, id as u8, i, len);
                }
                barrier.wait();
                for i in 0..MEASURED {
                    echo(&mut tcp, id as u8, WARM_UP + i, len);
                }
                barrier.wait();
                // Held open until counted, so that no close is counted.
                barrier.wait();
            })
        })
        .collect();
    barrier.wait();
    let before = ALLOCS.load(Ordering::SeqCst);
    barrier.wait();
    let allocs = ALLOCS.load(Ordering::SeqCst) - before;
    barrier.wait();
    for c in clients {
        c.join().unwrap();
    }
    eprintln!(
        "{conns} connections, {len} B: {allocs} allocations for {} echoes",
        conns * MEASURED
    );
    allocs
}

#[test]
fn hub_memory_per_connection_and_per_message() {
    if !child::alone() {
        return;
    }
    // Idle connections, on a current-thread runtime.
    let addr = start_hub(None);
    // Warm-up: per-thread and per-engine state is set up once (the read
    // buffer, the pools, the slot table's first growth).
    let mut clients: Vec<_> = (0..2).map(|_| upgraded(addr)).collect();
    for (i, c) in clients.iter_mut().enumerate() {
        echo(c, i as u8, 0, 16);
    }
    std::thread::sleep(Duration::from_millis(100));
    const N: usize = 1000;
    clients.reserve(N);
    let before = LIVE.load(Ordering::SeqCst);
    for i in 0..N {
        let mut c = upgraded(addr);
        echo(&mut c, i as u8, 0, 16);
        clients.push(c);
    }
    std::thread::sleep(Duration::from_millis(200));
    let per_conn = (LIVE.load(Ordering::SeqCst) - before) / N;
    eprintln!("heap per idle hub connection: {per_conn} bytes");
    // With the engine's own poller a socket has no Tokio registration
    // (its ScheduledIo) and no waker: the slot alone. With Tokio's
    // readiness (`WAVESOCK_HUB_READINESS=tokio`), both.
    let owned = cfg!(unix) && crate::support::hub::defaults().readiness == Readiness::Owned;
    let limit = if owned { 256 } else { 512 };
    assert!(
        per_conn <= limit,
        "{per_conn} bytes per idle hub connection (owned poller: {owned})"
    );
    drop(clients);
    std::thread::sleep(Duration::from_millis(200));

    // Steady-state echoes allocate nothing, current-thread.
    for len in [16, 1024] {
        let allocs = allocations_per_echo(addr, 8, len);
        assert_eq!(allocs, 0, "{len} B echoes allocated");
    }

    // And with two workers, an engine each.
    let addr = start_hub(Some(2));
    for len in [16, 1024] {
        let allocs = allocations_per_echo(addr, 8, len);
        assert_eq!(allocs, 0, "{len} B echoes allocated (multi-thread)");
    }
}
