//! The hub's read path, the receive step over the engine's shared read
//! buffer, on real sockets: input cut anywhere, pipelined and compressed,
//! closes and invalid frames in the middle of a read, slow readers,
//! keepalive, the memory budget, ends mid-frame, and a connection whose
//! write fails in the middle of a read, whose rest must not reach the
//! next connection served.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use wavesock::http::{Request, Response};
use wavesock::hub::{Closed, Handler, HttpResponse, Hub, HubConfig, HubMessage, Readiness, Ws};
use wavesock::{CloseCode, Config};

use crate::support::raw::{self, Rng, masked_with, within};

type Log = Arc<Mutex<Vec<(String, Vec<u8>)>>>;
/// Each connection's label and the error it ended with, if any.
type ClosedLog = Arc<Mutex<Vec<(String, Option<String>)>>>;
/// What each connection's handler heard: ('m' message, 'p' ping) and bytes.
type Heard = Arc<Mutex<std::collections::HashMap<String, Vec<(char, Vec<u8>)>>>>;

/// Labels each connection by its request path; records every data
/// message with its connection's label. Connections labelled `A*` get a
/// 20 KiB reply per message (more than a cork); a message `sleep` blocks
/// the engine a while; `close` closes with 4000.
#[derive(Clone)]
struct H {
    log: Log,
    closed: ClosedLog,
}

impl Handler for H {
    type Data = String;

    fn upgrade(&mut self, req: &Request<()>, _: &mut Response<()>) -> Result<String, HttpResponse> {
        Ok(req.uri().path().trim_start_matches('/').to_owned())
    }

    fn message(&mut self, ws: &mut Ws<'_, String>, msg: HubMessage<'_>) {
        let bytes = match msg {
            HubMessage::Text(t) => t.as_bytes().to_vec(),
            HubMessage::Binary(b) => b.to_vec(),
        };
        let label = ws.data().clone();
        self.log
            .lock()
            .unwrap()
            .push((label.clone(), bytes.clone()));
        if bytes == b"sleep" {
            std::thread::sleep(Duration::from_millis(300));
        } else if bytes == b"close" {
            ws.close(CloseCode::from(4000), "asked").unwrap();
        } else if label.starts_with('A') {
            let reply: Vec<u8> = bytes.iter().copied().cycle().take(20 << 10).collect();
            let reply = if reply.is_empty() {
                vec![1u8; 20 << 10]
            } else {
                reply
            };
            let _ = ws.send_binary(&reply);
        }
    }

    fn close(&mut self, closed: Closed, label: String) {
        self.closed
            .lock()
            .unwrap()
            .push((label, closed.error.map(|e| e.to_string())));
    }
}

struct Server {
    addr: SocketAddr,
    log: Log,
    #[allow(dead_code)]
    closed: ClosedLog,
}

async fn start(readiness: Readiness, config: Config) -> Server {
    let log = Log::default();
    let closed = Arc::default();
    let h = H {
        log: log.clone(),
        closed: Arc::clone(&closed),
    };
    let config = crate::support::hub::defaults()
        .engines(Some(1))
        .readiness(readiness)
        .config(config);
    let hub = Hub::new(h, config).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(hub.serve(listener));
    Server { addr, log, closed }
}

async fn upgrade(addr: SocketAddr, path: &str) -> TcpStream {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "GET /{path} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    tcp.write_all(req.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        head.push(tcp.read_u8().await.unwrap());
    }
    assert!(head.starts_with(b"HTTP/1.1 101"), "{head:?}");
    tcp
}

/// A client frame masked with the key 0 (its payload reads as sent).
fn frame0(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![0x80 | opcode];
    let n = payload.len();
    if n < 126 {
        out.push(0x80 | n as u8);
    } else if n < 65536 {
        out.push(0x80 | 126);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(0x80 | 127);
        out.extend_from_slice(&(n as u64).to_be_bytes());
    }
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(payload);
    out
}

/// A connection whose cork flush (between messages of one read) fails
/// because the peer reset it leaves the rest of that read in the engine's
/// shared buffer: the next connection's read decodes it as its own.
async fn cork_flush_failure_leaks(readiness: Readiness) {
    let server = start(readiness, Config::default()).await;
    let mut b = upgrade(server.addr, "B").await;
    let a = upgrade(server.addr, "A").await;
    // Block the engine while A sends and resets.
    b.write_all(&frame0(0x2, b"sleep")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut wire = Vec::new();
    for i in 0..20 {
        wire.extend(frame0(0x2, format!("A{i}").as_bytes()));
    }
    let mut a = a;
    a.write_all(&wire).await.unwrap();
    #[allow(deprecated)]
    a.set_linger(Some(Duration::ZERO)).unwrap();
    drop(a);
    // After the engine woke and served A: one message from B.
    tokio::time::sleep(Duration::from_millis(600)).await;
    b.write_all(&frame0(0x2, b"B1")).await.unwrap();
    within(5, async {
        while !server
            .log
            .lock()
            .unwrap()
            .iter()
            .any(|(l, m)| l == "B" && m == b"B1")
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let b_got: Vec<String> = server
        .log
        .lock()
        .unwrap()
        .iter()
        .filter(|(l, _)| l == "B")
        .map(|(_, m)| String::from_utf8_lossy(m).into_owned())
        .collect();
    assert_eq!(
        b_got,
        ["sleep", "B1"],
        "B's handler got another connection's bytes"
    );
}

#[tokio::test]
async fn cork_flush_failure_leaks_shared_buffer_owned() {
    cork_flush_failure_leaks(Readiness::Owned).await;
}

#[tokio::test]
async fn cork_flush_failure_leaks_shared_buffer_tokio() {
    cork_flush_failure_leaks(Readiness::Tokio).await;
}

// ---------------------------------------------------------------------
// Many connections, pipelined messages of every kind split at random byte
// boundaries: every message intact, in order, on its own connection.

/// Records every message and ping per connection label; echoes messages
/// whose payload starts with `e` (so replies fill corks).
#[derive(Clone)]
struct Rec {
    log: Heard,
}

impl Handler for Rec {
    type Data = String;
    fn upgrade(&mut self, req: &Request<()>, _: &mut Response<()>) -> Result<String, HttpResponse> {
        Ok(req.uri().path().trim_start_matches('/').to_owned())
    }
    fn message(&mut self, ws: &mut Ws<'_, String>, msg: HubMessage<'_>) {
        let (tag, bytes) = match msg {
            HubMessage::Text(t) => ('T', t.as_bytes().to_vec()),
            HubMessage::Binary(b) => ('B', b.to_vec()),
        };
        if bytes.first() == Some(&b'e') {
            let _ = ws.send_borrowed(msg);
        }
        let label = ws.data().clone();
        self.log
            .lock()
            .unwrap()
            .entry(label)
            .or_default()
            .push((tag, bytes));
    }
    fn ping(&mut self, ws: &mut Ws<'_, String>, payload: &[u8]) {
        let label = ws.data().clone();
        self.log
            .lock()
            .unwrap()
            .entry(label)
            .or_default()
            .push(('P', payload.to_vec()));
    }
}

fn text_of(rng: &mut Rng, n: usize) -> Vec<u8> {
    let mut s = String::new();
    while s.len() < n {
        s.push(match rng.below(4) {
            0 => 'é',
            1 => '€',
            2 => '😀',
            _ => (b'a' + rng.below(26) as u8) as char,
        });
    }
    s.into_bytes()
}

/// One connection's wire and what its handler must record.
fn script(rng: &mut Rng, n: usize, deflate: bool) -> (Vec<u8>, Vec<(char, Vec<u8>)>) {
    let mut wire = Vec::new();
    let mut want = Vec::new();
    let mut z = flate2::Compress::new(flate2::Compression::new(3), false);
    for i in 0..n {
        let echo = rng.below(3) == 0;
        let prefix = |mut v: Vec<u8>| {
            if let Some(b) = v.first_mut() {
                *b = if echo { b'e' } else { b'x' };
            }
            v
        };
        match rng.below(if deflate { 8 } else { 6 }) {
            0 => {
                let len = rng.below(200) as usize;
                let p = prefix((0..len).map(|_| rng.next() as u8).collect());
                wire.extend(masked_with(0x82, &p, rng));
                want.push(('B', p));
            }
            1 => {
                let len = rng.below(300) as usize;
                let p = prefix(text_of(rng, len));
                let p = if std::str::from_utf8(&p).is_ok() {
                    p
                } else {
                    text_of(rng, len)
                };
                wire.extend(masked_with(0x81, &p, rng));
                want.push(('T', p));
            }
            2 => {
                // Fragmented text, cut inside characters, a ping between.
                let len = 50 + rng.below(3000) as usize;
                let p = text_of(rng, len);
                let cuts = 1 + rng.below(4) as usize;
                let mut at = 0;
                for c in 0..=cuts {
                    let end = if c == cuts {
                        p.len()
                    } else {
                        (at + rng.below((p.len() - at) as u64 + 1) as usize).min(p.len())
                    };
                    let op = if c == 0 { 0x1 } else { 0x0 };
                    let fin = if c == cuts { 0x80 } else { 0 };
                    wire.extend(masked_with(fin | op, &p[at..end], rng));
                    at = end;
                    if c == 0 {
                        let ping = format!("ping{i}").into_bytes();
                        wire.extend(masked_with(0x89, &ping, rng));
                        want.push(('P', ping));
                    }
                }
                want.push(('T', p));
            }
            3 => {
                let len = 60_000 + rng.below(150_000) as usize;
                let p = prefix((0..len).map(|_| rng.next() as u8).collect());
                wire.extend(masked_with(0x82, &p, rng));
                want.push(('B', p));
            }
            4 => {
                let ping = format!("p{i}").into_bytes();
                wire.extend(masked_with(0x89, &ping, rng));
                want.push(('P', ping));
            }
            5 => {
                // Fragmented binary.
                let p: Vec<u8> = (0..rng.below(20_000) as usize + 2)
                    .map(|_| rng.next() as u8)
                    .collect();
                let mid = rng.below(p.len() as u64) as usize;
                wire.extend(masked_with(0x02, &p[..mid], rng));
                wire.extend(masked_with(0x80, &p[mid..], rng));
                want.push(('B', p));
            }
            _ => {
                // Compressed (context kept), maybe fragmented.
                let text = rng.below(2) == 0;
                // Never empty: a sync flush of nothing emits nothing.
                let len = if rng.below(4) == 0 {
                    100_000
                } else {
                    1 + rng.below(2000) as usize
                };
                let p = if text {
                    text_of(rng, len)
                } else {
                    (0..len)
                        .map(|j| (j % 7) as u8 ^ rng.below(2) as u8)
                        .collect()
                };
                // Room for all of it in one call (compress_vec writes only
                // into the spare capacity): the worst case of a few bytes
                // per stored block, and what the kept context may owe.
                let mut packed = Vec::with_capacity(2 * p.len() + 4096);
                let before = z.total_in();
                z.compress_vec(&p, &mut packed, flate2::FlushCompress::Sync)
                    .unwrap();
                assert_eq!(z.total_in() - before, p.len() as u64);
                assert!(packed.ends_with(&[0, 0, 0xff, 0xff]));
                packed.truncate(packed.len() - 4);
                let op = if text { 0x1 } else { 0x2 };
                if rng.below(2) == 0 {
                    wire.extend(masked_with(0x80 | 0x40 | op, &packed, rng));
                } else {
                    let mid = rng.below(packed.len() as u64 + 1) as usize;
                    wire.extend(masked_with(0x40 | op, &packed[..mid], rng));
                    wire.extend(masked_with(0x80, &packed[mid..], rng));
                }
                want.push((if text { 'T' } else { 'B' }, p));
            }
        }
    }
    wire.extend(masked_with(0x81, b"END", rng));
    want.push(('T', b"END".to_vec()));
    (wire, want)
}

async fn pipelined(readiness: Readiness, read_buffer: usize, deflate: bool, seed: u64) {
    let log = Arc::new(Mutex::new(std::collections::HashMap::new()));
    #[cfg(feature = "deflate")]
    let config = if deflate {
        Config::default().deflate(wavesock::DeflateConfig::default())
    } else {
        Config::default()
    };
    #[cfg(not(feature = "deflate"))]
    let config = {
        assert!(!deflate, "compression needs the deflate feature");
        Config::default()
    };
    let hub_config = crate::support::hub::defaults()
        .engines(Some(1))
        .readiness(readiness)
        .read_buffer_size(read_buffer)
        .config(config);
    let hub = Hub::new(Rec { log: log.clone() }, hub_config).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(hub.serve(listener));
    let mut tasks = Vec::new();
    let mut wants = Vec::new();
    for c in 0..10u64 {
        let mut rng = Rng(seed * 1000 + c + 1);
        let (wire, want) = script(&mut rng, 120, deflate);
        let label = format!("c{c}");
        wants.push((label.clone(), want));
        tasks.push(tokio::spawn(async move {
            let mut tcp = TcpStream::connect(addr).await.unwrap();
            let ext = if deflate { "Sec-WebSocket-Extensions: permessage-deflate\r\n" } else { "" };
            let req = format!(
                "GET /{label} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                 Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{ext}\r\n"
            );
            tcp.write_all(req.as_bytes()).await.unwrap();
            let mut head = Vec::new();
            while !head.ends_with(b"\r\n\r\n") {
                head.push(tcp.read_u8().await.unwrap());
            }
            assert!(head.starts_with(b"HTTP/1.1 101"));
            if deflate {
                assert!(String::from_utf8_lossy(&head).contains("permessage-deflate"));
            }
            let (r, mut w) = tcp.into_split();
            let drain = raw::drain(r);
            raw::write_cut(&mut w, &wire, &mut rng).await;
            (w, drain)
        }));
    }
    let mut keep = Vec::new();
    for t in tasks {
        keep.push(t.await.unwrap());
    }
    let done = || {
        let log = log.lock().unwrap();
        wants
            .iter()
            .all(|(l, w)| log.get(l).map_or(0, |v| v.len()) >= w.len())
    };
    let _ = tokio::time::timeout(Duration::from_secs(20), async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let log = log.lock().unwrap();
    for (label, want) in &wants {
        let got = log.get(label).cloned().unwrap_or_default();
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(
                g == w,
                "{label} message {i}: got {:?} {} bytes {:?}, want {:?} {} bytes {:?}",
                g.0,
                g.1.len(),
                &g.1[..g.1.len().min(16)],
                w.0,
                w.1.len(),
                &w.1[..w.1.len().min(16)]
            );
        }
        assert_eq!(got.len(), want.len(), "{label}: message count");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_random_cuts_owned() {
    // A seed a read buffer: each run cuts the input differently.
    pipelined(Readiness::Owned, 512 << 10, false, 1).await;
    pipelined(Readiness::Owned, 4096, false, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_random_cuts_tokio() {
    pipelined(Readiness::Tokio, 512 << 10, false, 3).await;
    pipelined(Readiness::Tokio, 4096, false, 4).await;
}

#[cfg(feature = "deflate")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_random_cuts_deflate() {
    pipelined(Readiness::Owned, 512 << 10, true, 5).await;
    pipelined(Readiness::Tokio, 4096, true, 6).await;
}

// ---------------------------------------------------------------------

async fn start_cfg(hub: HubConfig) -> Server {
    let log = Log::default();
    let closed = Arc::default();
    let h = H {
        log: log.clone(),
        closed: Arc::clone(&closed),
    };
    let hub = Hub::new(h, hub).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(hub.serve(listener));
    Server { addr, log, closed }
}

fn of(log: &Log, label: &str) -> Vec<String> {
    log.lock()
        .unwrap()
        .iter()
        .filter(|(l, _)| l == label)
        .map(|(_, m)| String::from_utf8_lossy(m).into_owned())
        .collect()
}

async fn read_until_eof(tcp: &mut TcpStream) -> Vec<(u8, Vec<u8>)> {
    let mut frames = Vec::new();
    let mut all = Vec::new();
    let mut buf = vec![0u8; 65536];
    loop {
        match within(10, tcp.read(&mut buf)).await {
            Ok(0) | Err(_) => break,
            Ok(n) => all.extend_from_slice(&buf[..n]),
        }
    }
    let mut at = 0;
    while at + 2 <= all.len() {
        let op = all[at] & 0x0f;
        let (len, h) = match all[at + 1] & 0x7f {
            126 => (u16::from_be_bytes([all[at + 2], all[at + 3]]) as usize, 4),
            127 => (
                u64::from_be_bytes(all[at + 2..at + 10].try_into().unwrap()) as usize,
                10,
            ),
            n => (n as usize, 2),
        };
        if at + h + len > all.len() {
            frames.push((0xff, all[at..].to_vec()));
            break;
        }
        frames.push((op, all[at + h..at + h + len].to_vec()));
        at += h + len;
    }
    frames
}

fn close_frame(code: u16) -> Vec<u8> {
    frame0(0x8, &code.to_be_bytes())
}

async fn close_mid_read(readiness: Readiness, peer_close_in_same_read: bool) {
    let hub = crate::support::hub::defaults()
        .engines(Some(1))
        .readiness(readiness);
    let server = start_cfg(hub).await;
    let mut x = upgrade(server.addr, "X").await;
    let mut wire = Vec::new();
    wire.extend(frame0(0x1, b"m1"));
    wire.extend(frame0(0x1, b"close"));
    wire.extend(frame0(0x1, b"m3"));
    wire.extend(frame0(0x9, b"pi"));
    wire.extend(frame0(0x2, b"m4"));
    if peer_close_in_same_read {
        wire.extend(close_frame(1000));
    }
    let t0 = std::time::Instant::now();
    x.write_all(&wire).await.unwrap();
    if !peer_close_in_same_read {
        // Answer the server's close once it comes.
        let (op, p) = crate::support::raw::read_frame(&mut x).await;
        assert_eq!((op, &p[..2]), (0x8, &4000u16.to_be_bytes()[..]));
        x.write_all(&close_frame(1000)).await.unwrap();
    }
    let frames = read_until_eof(&mut x).await;
    let elapsed = t0.elapsed();
    assert_eq!(of(&server.log, "X"), ["m1", "close"]);
    if peer_close_in_same_read {
        assert_eq!(frames.len(), 1, "{frames:?}");
        assert_eq!(frames[0].0, 0x8);
        assert_eq!(&frames[0].1[..2], &4000u16.to_be_bytes());
    } else {
        assert!(frames.is_empty(), "{frames:?}");
    }
    assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
}

#[tokio::test]
async fn handler_close_mid_read_owned() {
    close_mid_read(Readiness::Owned, true).await;
    close_mid_read(Readiness::Owned, false).await;
}

#[tokio::test]
async fn handler_close_mid_read_tokio() {
    close_mid_read(Readiness::Tokio, true).await;
    close_mid_read(Readiness::Tokio, false).await;
}

/// Invalid input on some connections, in the middle of reads that bring
/// valid messages: the right codes, the others unaffected.
async fn invalid_inputs(readiness: Readiness) {
    let hub = crate::support::hub::defaults()
        .engines(Some(1))
        .readiness(readiness)
        .config(
            Config::default()
                .max_message_size(1000)
                .max_frame_size(1000),
        );
    let server = start_cfg(hub).await;
    let mut g = upgrade(server.addr, "G").await;
    let mut u8 = upgrade(server.addr, "U").await;
    let mut um = upgrade(server.addr, "M").await;
    let mut big = upgrade(server.addr, "Z").await;
    let mut w = Vec::new();
    w.extend(frame0(0x1, b"u1"));
    w.extend(frame0(0x1, &[b'a', 0xff, 0xfe]));
    w.extend(frame0(0x1, b"u-after"));
    u8.write_all(&w).await.unwrap();
    let mut w = Vec::new();
    w.extend(frame0(0x1, b"m1"));
    w.extend([0x81, 2, b'h', b'i']);
    w.extend(frame0(0x1, b"m-after"));
    um.write_all(&w).await.unwrap();
    let mut w = Vec::new();
    w.extend(frame0(0x1, b"z1"));
    w.extend(frame0(0x2, &vec![5u8; 2000]));
    w.extend(frame0(0x1, b"z-after"));
    big.write_all(&w).await.unwrap();
    let mut w = Vec::new();
    for i in 0..50 {
        w.extend(frame0(0x1, format!("g{i}").as_bytes()));
    }
    g.write_all(&w).await.unwrap();
    assert_eq!(crate::support::raw::close_code(&mut u8).await, 1007);
    assert_eq!(crate::support::raw::close_code(&mut um).await, 1002);
    assert_eq!(crate::support::raw::close_code(&mut big).await, 1009);
    g.write_all(&frame0(0x1, b"g-last")).await.unwrap();
    within(5, async {
        while !of(&server.log, "G").iter().any(|m| m == "g-last") {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let mut want: Vec<String> = (0..50).map(|i| format!("g{i}")).collect();
    want.push("g-last".into());
    assert_eq!(of(&server.log, "G"), want);
    assert_eq!(of(&server.log, "U"), ["u1"]);
    assert_eq!(of(&server.log, "M"), ["m1"]);
    assert_eq!(of(&server.log, "Z"), ["z1"]);
}

#[tokio::test]
async fn invalid_inputs_owned() {
    invalid_inputs(Readiness::Owned).await;
}

#[tokio::test]
async fn invalid_inputs_tokio() {
    invalid_inputs(Readiness::Tokio).await;
}

/// A peer that sends many messages whose replies fill the socket, reads
/// nothing for a while, then reads: every reply, whole and in order.
async fn slow_reader(readiness: Readiness) {
    let hub = crate::support::hub::defaults()
        .engines(Some(1))
        .readiness(readiness)
        .config(Config::default().max_backpressure(64 << 20));
    let server = start_cfg(hub).await;
    let mut a = upgrade(server.addr, "A").await;
    let n = 300;
    let mut w = Vec::new();
    for i in 0..n {
        w.extend(frame0(0x2, format!("msg{i:04}|").as_bytes()));
    }
    // Writes in pieces, reading nothing.
    for chunk in w.chunks(777) {
        a.write_all(chunk).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (r, mut wr) = a.into_split();
    let reader = tokio::spawn(async move {
        let mut r = r;
        let mut got = Vec::new();
        for _ in 0..n {
            got.push(crate::support::raw::read_frame(&mut r).await);
        }
        got
    });
    // More while it reads.
    let mut w = Vec::new();
    for i in n..n + 10 {
        w.extend(frame0(0x2, format!("msg{i:04}|").as_bytes()));
    }
    wr.write_all(&w).await.unwrap();
    let got = within(20, reader).await.unwrap();
    for (i, (op, p)) in got.iter().enumerate() {
        let tag = format!("msg{i:04}|");
        let want: Vec<u8> = tag.bytes().cycle().take(20 << 10).collect();
        assert_eq!(*op, 0x2);
        assert!(
            p == &want,
            "reply {i} wrong: starts {:?}",
            String::from_utf8_lossy(&p[..12])
        );
    }
    within(10, async {
        while of(&server.log, "A").len() < n + 10 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_reader_owned() {
    slow_reader(Readiness::Owned).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_reader_tokio() {
    slow_reader(Readiness::Tokio).await;
}

// ---------------------------------------------------------------------

async fn keepalive(readiness: Readiness) {
    let hub = crate::support::hub::defaults()
        .engines(Some(1))
        .readiness(readiness)
        .config(
            Config::default()
                .ping_interval(Some(Duration::from_millis(200)))
                .pong_timeout(Duration::from_millis(200)),
        );
    let server = start_cfg(hub).await;
    let busy = upgrade(server.addr, "K").await;
    let silent = upgrade(server.addr, "S").await;
    let (mut br, mut bw) = busy.into_split();
    let (mut sr, _sw) = silent.into_split();
    let drain_b = tokio::spawn(async move {
        let mut pings = 0;
        loop {
            let mut h = [0u8; 2];
            if br.read_exact(&mut h).await.is_err() {
                return (pings, true);
            }
            let mut p = vec![0u8; (h[1] & 0x7f) as usize];
            br.read_exact(&mut p).await.unwrap();
            if h[0] & 0x0f == 0x9 {
                pings += 1;
            }
            if h[0] & 0x0f == 0x8 {
                return (pings, true);
            }
        }
    });
    let silent_end = tokio::spawn(async move {
        let t0 = std::time::Instant::now();
        let mut buf = [0u8; 256];
        let mut ops = Vec::new();
        loop {
            match sr.read(&mut buf).await {
                Ok(0) | Err(_) => return (t0.elapsed(), ops),
                Ok(_) => ops.push(buf[0] & 0x0f),
            }
        }
    });
    let t0 = std::time::Instant::now();
    let mut i = 0;
    while t0.elapsed() < Duration::from_millis(1500) {
        bw.write_all(&frame0(0x1, format!("k{i}").as_bytes()))
            .await
            .unwrap();
        i += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (took, ops) = within(5, silent_end).await.unwrap();
    assert!(
        took < Duration::from_millis(1200),
        "silent peer ended after {took:?} ({ops:?})"
    );
    assert!(
        !drain_b.is_finished(),
        "a peer that keeps sending was cut off"
    );
    assert_eq!(of(&server.log, "K").len(), i);
    let closed = server.closed.lock().unwrap().clone();
    assert!(closed.iter().all(|(l, _)| l != "K"), "{closed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalive_owned() {
    keepalive(Readiness::Owned).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalive_tokio() {
    keepalive(Readiness::Tokio).await;
}

/// Many connections sending large messages under a small memory budget:
/// every message arrives, the budget is never exceeded, and all of it
/// comes back.
async fn budget_many(readiness: Readiness) {
    let budget = wavesock::MemoryBudget::new(16 << 20).wait_timeout(Duration::from_secs(20));
    let hub = crate::support::hub::defaults()
        .engines(Some(1))
        .readiness(readiness)
        .config(crate::support::raw::budget_config(&budget));
    let server = start_cfg(hub).await;
    let mut tasks = Vec::new();
    for c in 0..16 {
        let addr = server.addr;
        tasks.push(tokio::spawn(async move {
            let label = format!("Q{c}");
            let mut t = upgrade(addr, &label).await;
            let mut w = Vec::new();
            for i in 0..4u8 {
                let mut p = vec![c as u8 ^ i; 700 << 10];
                p[..4].copy_from_slice(b"msg-");
                w.extend(frame0(0x2, &p));
                w.extend(frame0(0x1, format!("small{i}").as_bytes()));
            }
            for chunk in w.chunks(50_000) {
                t.write_all(chunk).await.unwrap();
            }
            t
        }));
    }
    let mut keep = Vec::new();
    for t in tasks {
        keep.push(t.await.unwrap());
    }
    let res = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let n = (0..16)
                .filter(|c| of(&server.log, &format!("Q{c}")).len() == 8)
                .count();
            if n == 16 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let counts: Vec<usize> = (0..16)
        .map(|c| of(&server.log, &format!("Q{c}")).len())
        .collect();
    let closed = server.closed.lock().unwrap().clone();
    assert!(
        res.is_ok(),
        "stuck: {counts:?}, closed {closed:?}, in use {}",
        budget.in_use()
    );
    let log = server.log.lock().unwrap().clone();
    for c in 0..16u8 {
        let got: Vec<&Vec<u8>> = log
            .iter()
            .filter(|(l, _)| l == &format!("Q{c}"))
            .map(|(_, m)| m)
            .collect();
        for i in 0..4u8 {
            let m = got[2 * i as usize];
            assert_eq!(m.len(), 700 << 10);
            assert!(
                m[4..].iter().all(|&b| b == c ^ i),
                "Q{c} message {i} corrupt"
            );
            assert_eq!(got[2 * i as usize + 1], &format!("small{i}").into_bytes());
        }
    }
    assert!(
        budget.peak() <= budget.limit(),
        "peak {} > {}",
        budget.peak(),
        budget.limit()
    );
    drop(log);
    drop(keep);
    crate::support::raw::until(|| budget.in_use() == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budget_many_owned() {
    budget_many(Readiness::Owned).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budget_many_tokio() {
    budget_many(Readiness::Tokio).await;
}

/// A peer that half-closes in the middle of a frame, one that sends data
/// after its close frame, one that resets mid-frame: each ends, the others'
/// messages arrive intact.
async fn ends_mid_frame(readiness: Readiness) {
    let hub = crate::support::hub::defaults()
        .engines(Some(1))
        .readiness(readiness);
    let server = start_cfg(hub).await;
    let mut g = upgrade(server.addr, "G").await;
    let mut h = upgrade(server.addr, "H").await;
    let mut c = upgrade(server.addr, "C").await;
    let r = upgrade(server.addr, "R").await;
    let mut w = frame0(0x1, b"h1");
    let f = frame0(0x2, &vec![3u8; 3000]);
    w.extend_from_slice(&f[..1500]);
    h.write_all(&w).await.unwrap();
    h.shutdown().await.unwrap();
    let mut w = frame0(0x1, b"c1");
    w.extend(close_frame(1000));
    w.extend(frame0(0x1, b"c-after"));
    w.extend(vec![0xffu8; 500]);
    c.write_all(&w).await.unwrap();
    let mut r = r;
    let mut w = frame0(0x1, b"r1");
    w.extend_from_slice(&f[..2000]);
    r.write_all(&w).await.unwrap();
    #[allow(deprecated)]
    r.set_linger(Some(Duration::ZERO)).unwrap();
    drop(r);
    let mut w = Vec::new();
    for i in 0..100 {
        w.extend(frame0(0x1, format!("g{i}").as_bytes()));
    }
    g.write_all(&w).await.unwrap();
    let frames = read_until_eof(&mut c).await;
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_eq!(frames[0].0, 0x8);
    let frames = read_until_eof(&mut h).await;
    assert!(frames.is_empty() || frames[0].0 == 0x8, "{frames:?}");
    within(5, async {
        while of(&server.log, "G").len() < 100 || server.closed.lock().unwrap().len() < 3 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let want: Vec<String> = (0..100).map(|i| format!("g{i}")).collect();
    assert_eq!(of(&server.log, "G"), want);
    assert_eq!(of(&server.log, "H"), ["h1"]);
    assert_eq!(of(&server.log, "C"), ["c1"]);
    assert_eq!(of(&server.log, "R"), ["r1"]);
    let closed = server.closed.lock().unwrap().clone();
    assert!(
        closed.iter().any(|(l, e)| l == "C" && e.is_none()),
        "{closed:?}"
    );
    assert!(
        closed.iter().any(|(l, e)| l == "H" && e.is_some()),
        "{closed:?}"
    );
}

#[tokio::test]
async fn ends_mid_frame_owned() {
    ends_mid_frame(Readiness::Owned).await;
}

#[tokio::test]
async fn ends_mid_frame_tokio() {
    ends_mid_frame(Readiness::Tokio).await;
}
