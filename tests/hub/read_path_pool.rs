//! The hub's read path, its pooled receivers: receivers reused across
//! connections that end every way, frames in the upgrade's segment (with
//! permessage-deflate, idle and back), backpressure policies mid-read, the
//! memory budget under contention, keepalive over pooled receivers.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use wavesock::http::{Request, Response};
use wavesock::hub::{Closed, Handler, HttpResponse, Hub, HubConfig, HubMessage, Readiness, Ws};
use wavesock::{CloseCode, Config};

use crate::support::raw::{Rng, drain, masked_with, within, write_cut};

type Heard = Arc<Mutex<HashMap<String, Vec<(char, Vec<u8>)>>>>;
type ClosedLog = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// Records every message and ping per label. `close` closes with 4000;
/// a message starting `R` gets a 20 KiB reply; `e` is echoed.
#[derive(Clone)]
struct Rec {
    log: Heard,
    closed: ClosedLog,
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
        let label = ws.data().clone();
        self.log
            .lock()
            .unwrap()
            .entry(label)
            .or_default()
            .push((tag, bytes.clone()));
        if bytes == b"close" {
            ws.close(CloseCode::from(4000), "asked").unwrap();
        } else if bytes.first() == Some(&b'R') {
            let reply: Vec<u8> = bytes.iter().copied().cycle().take(20 << 10).collect();
            let _ = ws.send_binary(&reply);
        } else if bytes.first() == Some(&b'e') {
            let _ = ws.send_binary(&bytes);
        }
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
    fn close(&mut self, closed: Closed, label: String) {
        self.closed
            .lock()
            .unwrap()
            .push((label, closed.error.map(|e| e.to_string())));
    }
}

struct Server {
    addr: SocketAddr,
    log: Heard,
    closed: ClosedLog,
}

async fn start(hub: HubConfig) -> Server {
    let log = Heard::default();
    let closed = ClosedLog::default();
    let h = Rec {
        log: log.clone(),
        closed: closed.clone(),
    };
    let hub = Hub::new(h, hub).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(hub.serve(listener));
    Server { addr, log, closed }
}

fn heard(s: &Server, label: &str) -> Vec<(char, Vec<u8>)> {
    s.log
        .lock()
        .unwrap()
        .get(label)
        .cloned()
        .unwrap_or_default()
}

fn request(label: &str, deflate: bool) -> Vec<u8> {
    let ext = if deflate {
        "Sec-WebSocket-Extensions: permessage-deflate\r\n"
    } else {
        ""
    };
    format!(
        "GET /{label} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{ext}\r\n"
    )
    .into_bytes()
}

async fn read_head(tcp: &mut TcpStream) -> String {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        head.push(within(10, tcp.read_u8()).await.unwrap());
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    head
}

/// A client's compressor (context kept across messages).
struct Z(flate2::Compress);
impl Z {
    fn new() -> Self {
        Z(flate2::Compress::new(flate2::Compression::new(3), false))
    }
    fn pack(&mut self, p: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(p.len() + 1024);
        self.0
            .compress_vec(p, &mut out, flate2::FlushCompress::Sync)
            .unwrap();
        assert!(out.ends_with(&[0, 0, 0xff, 0xff]));
        out.truncate(out.len() - 4);
        out
    }
}

/// A mix of messages for one connection: the wire and what the handler
/// must record.
fn script(
    rng: &mut Rng,
    n: usize,
    z: Option<&mut Z>,
    tag: &str,
) -> (Vec<u8>, Vec<(char, Vec<u8>)>) {
    let mut z = z;
    let mut wire = Vec::new();
    let mut want = Vec::new();
    for i in 0..n {
        let kinds = if z.is_some() { 6 } else { 5 };
        let body = |rng: &mut Rng, len: usize| -> Vec<u8> {
            let mut v = format!("{tag}#{i}:").into_bytes();
            v.extend((0..len).map(|_| b'a' + rng.below(26) as u8));
            v
        };
        match rng.below(kinds) {
            0 => {
                let len = rng.below(100) as usize;
                let p = body(rng, len);
                wire.extend(masked_with(0x82, &p, rng));
                want.push(('B', p));
            }
            1 => {
                let len = rng.below(3000) as usize;
                let p = body(rng, len);
                let mid = rng.below(p.len() as u64) as usize;
                wire.extend(masked_with(0x01, &p[..mid], rng));
                let ping = format!("{tag}p{i}").into_bytes();
                wire.extend(masked_with(0x89, &ping, rng));
                want.push(('P', ping));
                wire.extend(masked_with(0x80, &p[mid..], rng));
                want.push(('T', p));
            }
            2 => {
                let len = 20_000 + rng.below(80_000) as usize;
                let p = body(rng, len);
                wire.extend(masked_with(0x82, &p, rng));
                want.push(('B', p));
            }
            3 => {
                let ping = format!("{tag}q{i}").into_bytes();
                wire.extend(masked_with(0x89, &ping, rng));
                want.push(('P', ping));
            }
            4 => {
                let len = rng.below(40) as usize;
                let p = body(rng, len);
                wire.extend(masked_with(0x81, &p, rng));
                want.push(('T', p));
            }
            _ => {
                let len = if rng.below(4) == 0 {
                    50_000
                } else {
                    rng.below(500) as usize
                };
                let p = body(rng, len);
                let packed = z.as_mut().unwrap().pack(&p);
                if rng.below(2) == 0 {
                    wire.extend(masked_with(0xc1, &packed, rng));
                } else {
                    let mid = rng.below(packed.len() as u64 + 1) as usize;
                    wire.extend(masked_with(0x41, &packed[..mid], rng));
                    wire.extend(masked_with(0x80, &packed[mid..], rng));
                }
                want.push(('T', p));
            }
        }
    }
    (wire, want)
}

fn rst(tcp: TcpStream) {
    #[allow(deprecated)]
    tcp.set_linger(Some(Duration::ZERO)).unwrap();
    drop(tcp);
}

/// How a short-lived connection ends.
#[derive(Clone, Copy, Debug)]
enum End {
    PeerClose,
    HandlerClose,
    BadUtf8,
    ResetMidFrame,
    ResetMidFragmentedText,
    Unmasked,
    ResetMidCompressed,
    Eof,
    EofMidFrame,
    /// A frame larger than the whole memory budget (budgeted runs only).
    OverBudget,
}

const ENDS: [End; 9] = [
    End::PeerClose,
    End::HandlerClose,
    End::BadUtf8,
    End::ResetMidFrame,
    End::ResetMidFragmentedText,
    End::Unmasked,
    End::ResetMidCompressed,
    End::Eof,
    End::EofMidFrame,
];

/// One short-lived connection: the request and its frames in ONE write,
/// then its end. Returns what its handler must have heard.
async fn short_lived(
    addr: SocketAddr,
    label: String,
    end: End,
    deflate: bool,
    seed: u64,
    log: Heard,
) -> Vec<(char, Vec<u8>)> {
    let mut rng = Rng(seed);
    let mut z = Z::new();
    let n = 1 + rng.below(6) as usize;
    let (mut wire, mut want) = script(&mut rng, n, deflate.then_some(&mut z), &label);
    let mut out = request(&label, deflate);
    out.append(&mut wire);
    let mut tail = Vec::new();
    match end {
        End::PeerClose => tail.extend(masked_with(0x88, &1000u16.to_be_bytes(), &mut rng)),
        End::HandlerClose => {
            tail.extend(masked_with(0x81, b"close", &mut rng));
            want.push(('T', b"close".to_vec()));
            // Unheard: after the close asked for.
            tail.extend(masked_with(0x81, b"after-close", &mut rng));
            tail.extend(masked_with(0x88, &1000u16.to_be_bytes(), &mut rng));
        }
        End::BadUtf8 => {
            tail.extend(masked_with(0x81, &[b'x', 0xc3, 0x28], &mut rng));
            tail.extend(masked_with(0x81, b"after-bad", &mut rng));
        }
        End::ResetMidFrame | End::EofMidFrame => {
            let f = masked_with(0x82, &vec![7u8; 5000], &mut rng);
            tail.extend_from_slice(&f[..2500]);
        }
        End::ResetMidFragmentedText => {
            // First fragment ends inside a character.
            let p = "ab€".as_bytes();
            tail.extend(masked_with(0x01, &p[..3], &mut rng));
        }
        End::Unmasked => {
            tail.extend([0x81, 2, b'h', b'i']);
            tail.extend(masked_with(0x81, b"after-unmasked", &mut rng));
        }
        End::ResetMidCompressed => {
            if deflate {
                let p: Vec<u8> = (0..60_000).map(|i| (i % 251) as u8).collect();
                let packed = z.pack(&p);
                tail.extend(masked_with(0x42, &packed, &mut rng));
                tail.extend(masked_with(0x00, &packed[..packed.len().min(10)], &mut rng));
            } else {
                tail.extend(masked_with(0x01, b"frag-", &mut rng));
            }
        }
        End::Eof => {}
        End::OverBudget => {
            let mut f = vec![0x82, 0x80 | 127];
            f.extend_from_slice(&(8u64 << 20).to_be_bytes());
            f.extend_from_slice(&[1, 2, 3, 4]);
            f.extend(vec![9u8; 5 << 20]);
            tail.extend(f);
        }
    }
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    if matches!(end, End::OverBudget) {
        tcp.write_all(&out).await.unwrap();
        let (mut r, mut w) = tcp.into_split();
        let writer = tokio::spawn(async move {
            let _ = w.write_all(&tail).await;
            w
        });
        let mut all = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        let ended = tokio::time::timeout(Duration::from_secs(10), async {
            while let Ok(n) = r.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                all.extend_from_slice(&buf[..n]);
            }
        })
        .await;
        let at = all.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4);
        assert!(
            ended.is_ok(),
            "{label}: not ended ({} bytes after the head)",
            all.len() - at.unwrap_or(0)
        );
        let at = at.unwrap();
        // 1009 (too big) is what a frame larger than the budget meets.
        assert_eq!(all[at] & 0x0f, 0x8, "{label}");
        assert_eq!(&all[at + 2..at + 4], &1009u16.to_be_bytes(), "{label}");
        writer.abort();
        return want;
    }
    out.extend(tail);
    tcp.write_all(&out).await.unwrap();
    let head = tokio::time::timeout(Duration::from_secs(10), read_head(&mut tcp))
        .await
        .unwrap_or_else(|_| panic!("{label}: no answer to the upgrade"));
    assert_eq!(head.contains("permessage-deflate"), deflate, "{head}");
    match end {
        End::ResetMidFrame | End::ResetMidFragmentedText | End::ResetMidCompressed => {
            // Once the server has heard what came before (a reset throws
            // away what it has not read), mid-frame.
            let n = want.len();
            let ok = tokio::time::timeout(Duration::from_secs(5), async {
                while log.lock().unwrap().get(&label).map_or(0, |v| v.len()) < n {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
            .await;
            assert!(
                ok.is_ok(),
                "{label}: heard {:?} of {n}",
                log.lock().unwrap().get(&label).map(|v| v.len())
            );
            tokio::time::sleep(Duration::from_millis(rng.below(5))).await;
            rst(tcp);
        }
        End::Eof | End::EofMidFrame => {
            tcp.shutdown().await.unwrap();
            let mut buf = vec![0u8; 1 << 16];
            let t0 = std::time::Instant::now();
            let mut first = None;
            let r = tokio::time::timeout(Duration::from_secs(10), async {
                while let Ok(n) = tcp.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    first.get_or_insert_with(|| buf[..n.min(4)].to_vec());
                }
            })
            .await;
            assert!(
                r.is_ok(),
                "{label}: not ended after {:?} (got {first:?})",
                t0.elapsed()
            );
        }
        _ => {
            let mut buf = vec![0u8; 1 << 16];
            let t0 = std::time::Instant::now();
            let mut first = None;
            let r = tokio::time::timeout(Duration::from_secs(10), async {
                while let Ok(n) = tcp.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    first.get_or_insert_with(|| buf[..n.min(4)].to_vec());
                }
            })
            .await;
            assert!(
                r.is_ok(),
                "{label}: not ended after {:?} (got {first:?})",
                t0.elapsed()
            );
        }
    }
    want
}

async fn churn(readiness: Readiness, deflate: bool, read_buffer: usize, seed: u64) {
    churn_with(readiness, deflate, read_buffer, seed, None, false).await
}

async fn churn_with(
    readiness: Readiness,
    deflate: bool,
    read_buffer: usize,
    seed: u64,
    budget: Option<wavesock::MemoryBudget>,
    over_budget: bool,
) {
    let mut config = match &budget {
        Some(b) => crate::support::raw::budget_config(b),
        None => Config::default(),
    };
    if deflate {
        config = config.deflate(wavesock::DeflateConfig::default());
    }
    let hub = crate::support::hub::defaults()
        .engines(Some(1))
        .readiness(readiness)
        .read_buffer_size(read_buffer)
        .config(config);
    let server = start(hub).await;
    let addr = server.addr;
    // Live connections, writing throughout.
    let mut live = Vec::new();
    for c in 0..3u64 {
        let label = format!("L{c}");
        live.push(tokio::spawn(async move {
            let mut rng = Rng(seed * 7919 + c + 1);
            let mut z = Z::new();
            let (wire, want) = script(&mut rng, 150, deflate.then_some(&mut z), &label);
            let mut tcp = TcpStream::connect(addr).await.unwrap();
            tcp.write_all(&request(&label, deflate)).await.unwrap();
            read_head(&mut tcp).await;
            let (r, mut w) = tcp.into_split();
            let d = drain(r);
            write_cut(&mut w, &wire, &mut rng).await;
            (label, want, w, d)
        }));
    }
    // Short-lived ones, ending every way, meanwhile.
    let mut shorts = Vec::new();
    let ends: Vec<End> = if over_budget {
        ENDS.iter().copied().chain([End::OverBudget]).collect()
    } else {
        ENDS.to_vec()
    };
    for i in 0..60u64 {
        let end = ends[i as usize % ends.len()];
        let label = format!("S{i}-{end:?}");
        shorts.push(tokio::spawn(short_lived(
            addr,
            label.clone(),
            end,
            deflate,
            seed * 31 + i + 100,
            server.log.clone(),
        )));
        if i % 3 == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let mut short_wants = Vec::new();
    for (i, t) in shorts.into_iter().enumerate() {
        let end = ends[i % ends.len()];
        short_wants.push((format!("S{i}-{end:?}"), t.await.unwrap()));
    }
    let mut keep = Vec::new();
    let mut wants = Vec::new();
    for t in live {
        let (label, want, w, d) = t.await.unwrap();
        wants.push((label, want));
        keep.push((w, d));
    }
    // Every long-lived connection heard in full, and every short-lived
    // one ended: on a loaded machine the last resets are handled after
    // the long-lived connections are done.
    let done = || {
        let heard_all = wants
            .iter()
            .all(|(l, w)| heard(&server, l).len() >= w.len());
        let closed = server.closed.lock().unwrap().clone();
        heard_all
            && short_wants
                .iter()
                .all(|(label, _)| closed.iter().any(|(l, _)| l == label))
    };
    let _ = tokio::time::timeout(Duration::from_secs(20), async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    for (label, want) in wants.iter().chain(short_wants.iter()) {
        let got = heard(&server, label);
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(
                g == w,
                "{label} message {i}: got {:?} {} bytes {:?}, want {:?} {} bytes {:?}",
                g.0,
                g.1.len(),
                String::from_utf8_lossy(&g.1[..g.1.len().min(24)]),
                w.0,
                w.1.len(),
                String::from_utf8_lossy(&w.1[..w.1.len().min(24)]),
            );
        }
        assert_eq!(
            got.len(),
            want.len(),
            "{label}: message count ({readiness:?}, deflate {deflate})"
        );
    }
    // Every short-lived connection ended.
    let closed = server.closed.lock().unwrap().clone();
    for (label, _) in &short_wants {
        assert!(
            closed.iter().any(|(l, _)| l == label),
            "{label} never ended: {closed:?}"
        );
    }
    assert!(
        closed.iter().all(|(l, _)| !l.starts_with('L')),
        "{closed:?}"
    );
    drop(keep);
    if let Some(b) = budget {
        crate::support::raw::until(|| server.closed.lock().unwrap().len() == short_wants.len() + 3)
            .await;
        crate::support::raw::until(|| b.in_use() == 0).await;
        assert!(b.peak() <= b.limit());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_churn_budget() {
    for seed in 1..=2 {
        for r in [Readiness::Owned, Readiness::Tokio] {
            let b = wavesock::MemoryBudget::new(4 << 20).wait_timeout(Duration::from_secs(20));
            churn_with(r, false, 64 << 10, seed, Some(b), false).await;
            #[cfg(feature = "deflate")]
            {
                let b = wavesock::MemoryBudget::new(4 << 20).wait_timeout(Duration::from_secs(20));
                churn_with(r, true, 4096, seed, Some(b), false).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_churn_owned() {
    for seed in 1..=2 {
        churn(Readiness::Owned, false, 512 << 10, seed).await;
        churn(Readiness::Owned, false, 4096, seed).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_churn_tokio() {
    for seed in 1..=2 {
        churn(Readiness::Tokio, false, 512 << 10, seed).await;
        churn(Readiness::Tokio, false, 4096, seed).await;
    }
}

#[cfg(feature = "deflate")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_churn_deflate() {
    for seed in 1..=2 {
        churn(Readiness::Owned, true, 512 << 10, seed).await;
        churn(Readiness::Tokio, true, 4096, seed).await;
    }
}

// ---------------------------------------------------------------------
// Backpressure policies hit in the middle of a read that carries more.

async fn backpressure_mid_read(readiness: Readiness, policy: wavesock::hub::BackpressurePolicy) {
    let hub = crate::support::hub::defaults()
        .engines(Some(1))
        .readiness(readiness)
        .config(Config::default().max_backpressure(256 << 10))
        .backpressure_policy(policy);
    let server = start(hub).await;
    let mut b = TcpStream::connect(server.addr).await.unwrap();
    b.write_all(&request("B", false)).await.unwrap();
    read_head(&mut b).await;
    let mut a = TcpStream::connect(server.addr).await.unwrap();
    a.write_all(&request("A", false)).await.unwrap();
    read_head(&mut a).await;
    let mut rng = Rng(5);
    let n = 300;
    let mut w = Vec::new();
    for i in 0..n {
        w.extend(masked_with(0x82, format!("R{i:04}|").as_bytes(), &mut rng));
        if i % 7 == 0 {
            w.extend(masked_with(0x89, format!("p{i}").as_bytes(), &mut rng));
        }
    }
    // A reads nothing; its messages come in few reads.
    let (ar, mut aw) = a.into_split();
    let writer = tokio::spawn(async move {
        let _ = aw.write_all(&w).await;
        aw
    });
    let mut bw = Vec::new();
    let mut want_b = Vec::new();
    for i in 0..200 {
        let p = format!("b{i}").into_bytes();
        bw.extend(masked_with(0x81, &p, &mut rng));
        want_b.push(('T', p));
    }
    for chunk in bw.chunks(97) {
        b.write_all(chunk).await.unwrap();
        tokio::task::yield_now().await;
    }
    eprintln!("waiting for B");
    crate::support::raw::until(|| heard(&server, "B").len() >= 200).await;
    assert_eq!(heard(&server, "B"), want_b);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let got_a = heard(&server, "A");
    // In order, none twice, nothing foreign.
    let mut next = 0;
    for (tag, m) in &got_a {
        match tag {
            'B' => {
                assert_eq!(
                    m,
                    format!("R{next:04}|").as_bytes(),
                    "A out of order: {got_a:?}"
                );
                next += 1;
            }
            'P' => assert!(m.starts_with(b"p")),
            _ => panic!("{tag} {m:?}"),
        }
    }
    match policy {
        wavesock::hub::BackpressurePolicy::Drop => {
            // Every message heard; the replies that were taken arrive
            // whole and in order.
            crate::support::raw::until(|| {
                heard(&server, "A")
                    .iter()
                    .filter(|(t, _)| *t == 'B')
                    .count()
                    == n
            })
            .await;
            let mut r = ar;
            let mut last: i64 = -1;
            let mut frames = 0;
            let _ = tokio::time::timeout(Duration::from_secs(3), async {
                loop {
                    let (op, p) = crate::support::raw::read_frame(&mut r).await;
                    if op == 0xA {
                        continue;
                    }
                    assert_eq!(op, 0x2);
                    assert_eq!(p.len(), 20 << 10);
                    let i: i64 = std::str::from_utf8(&p[1..5]).unwrap().parse().unwrap();
                    assert!(i > last, "reply {i} after {last}");
                    let want: Vec<u8> =
                        format!("R{i:04}|").bytes().cycle().take(20 << 10).collect();
                    assert!(p == want, "reply {i} corrupt");
                    last = i;
                    frames += 1;
                }
            })
            .await;
            assert!(frames > 0);
        }
        wavesock::hub::BackpressurePolicy::Close => {
            assert!(next < n, "never closed for backpressure");
            // A ended, and heard nothing after the message that met the
            // limit (its handler's next sends are refused).
            eprintln!("A heard {next} of {n}");
            let heard_then = heard(&server, "A").len();
            tokio::time::sleep(Duration::from_millis(500)).await;
            assert_eq!(
                heard(&server, "A").len(),
                heard_then,
                "A heard more after its close"
            );
            drop(ar);
        }
        _ => unreachable!(),
    }
    drop(writer);
    // B still served.
    b.write_all(&masked_with(0x81, b"b-last", &mut rng))
        .await
        .unwrap();
    crate::support::raw::until(|| heard(&server, "B").len() == 201).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backpressure_close_mid_read() {
    for r in [Readiness::Owned, Readiness::Tokio] {
        backpressure_mid_read(r, wavesock::hub::BackpressurePolicy::Close).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backpressure_drop_mid_read() {
    for r in [Readiness::Owned, Readiness::Tokio] {
        backpressure_mid_read(r, wavesock::hub::BackpressurePolicy::Drop).await;
    }
}

// ---------------------------------------------------------------------
// The memory budget under contention, compressed.

#[cfg(feature = "deflate")]
async fn budget_deflate(readiness: Readiness) {
    let budget = wavesock::MemoryBudget::new(8 << 20).wait_timeout(Duration::from_secs(20));
    let config =
        crate::support::raw::budget_config(&budget).deflate(wavesock::DeflateConfig::default());
    let hub = crate::support::hub::defaults()
        .engines(Some(1))
        .readiness(readiness)
        .config(config);
    let server = start(hub).await;
    let mut tasks = Vec::new();
    let conns = 12u8;
    for c in 0..conns {
        let addr = server.addr;
        tasks.push(tokio::spawn(async move {
            let label = format!("Q{c}");
            let mut rng = Rng(c as u64 + 9);
            let mut z = Z::new();
            let mut w = request(&label, true);
            let mut want = Vec::new();
            for i in 0..4u8 {
                let mut p = vec![b'a' + (c ^ i) % 26; 600 << 10];
                p[..4].copy_from_slice(b"msg-");
                let packed = z.pack(&p);
                let mid = packed.len() / 2;
                w.extend(masked_with(0x42, &packed[..mid], &mut rng));
                w.extend(masked_with(0x80, &packed[mid..], &mut rng));
                want.push(('B', p));
                let s = format!("small{i}").into_bytes();
                w.extend(masked_with(0x81, &s, &mut rng));
                want.push(('T', s));
                let s = format!("zsmall{i}").into_bytes();
                w.extend(masked_with(0xc1, &z.pack(&s), &mut rng));
                want.push(('T', s));
            }
            let mut t = TcpStream::connect(addr).await.unwrap();
            // The request and the first frames in one write.
            t.write_all(&w[..(w.len()).min(4000)]).await.unwrap();
            for chunk in w[w.len().min(4000)..].chunks(30_000) {
                t.write_all(chunk).await.unwrap();
            }
            read_head(&mut t).await;
            (label, want, t)
        }));
    }
    let mut keep = Vec::new();
    let mut wants = Vec::new();
    for t in tasks {
        let (l, w, t) = t.await.unwrap();
        wants.push((l, w));
        keep.push(t);
    }
    let res = tokio::time::timeout(Duration::from_secs(30), async {
        while !wants
            .iter()
            .all(|(l, w)| heard(&server, l).len() >= w.len())
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let counts: Vec<usize> = wants.iter().map(|(l, _)| heard(&server, l).len()).collect();
    let closed = server.closed.lock().unwrap().clone();
    assert!(
        res.is_ok(),
        "stuck: {counts:?}, closed {closed:?}, in use {}",
        budget.in_use()
    );
    for (l, w) in &wants {
        assert!(&heard(&server, l) == w, "{l} corrupt");
    }
    assert!(
        budget.peak() <= budget.limit(),
        "peak {} > {}",
        budget.peak(),
        budget.limit()
    );
    drop(keep);
    crate::support::raw::until(|| server.closed.lock().unwrap().len() == conns as usize).await;
    crate::support::raw::until(|| budget.in_use() == 0).await;
}

#[cfg(feature = "deflate")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budget_deflate_owned() {
    budget_deflate(Readiness::Owned).await;
}

#[cfg(feature = "deflate")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budget_deflate_tokio() {
    budget_deflate(Readiness::Tokio).await;
}

// ---------------------------------------------------------------------
// Keepalive over pooled receivers.

async fn keepalive_pooled(readiness: Readiness, deflate: bool) {
    let mut config = Config::default()
        .ping_interval(Some(Duration::from_millis(100)))
        .pong_timeout(Duration::from_millis(150));
    if deflate {
        config = config.deflate(wavesock::DeflateConfig::default());
    }
    let hub = crate::support::hub::defaults()
        .engines(Some(1))
        .readiness(readiness)
        .config(config);
    let server = start(hub).await;
    // K answers every ping and sends nothing else.
    let mut k = TcpStream::connect(server.addr).await.unwrap();
    k.write_all(&request("K", deflate)).await.unwrap();
    read_head(&mut k).await;
    let (mut kr, kw) = k.into_split();
    let kw = Arc::new(tokio::sync::Mutex::new(kw));
    let kw2 = kw.clone();
    let answer = tokio::spawn(async move {
        let mut rng = Rng(77);
        let mut pings = 0;
        loop {
            let mut h = [0u8; 2];
            if kr.read_exact(&mut h).await.is_err() {
                return (pings, false);
            }
            let mut p = vec![0u8; (h[1] & 0x7f) as usize];
            kr.read_exact(&mut p).await.unwrap();
            match h[0] & 0x0f {
                0x9 => {
                    pings += 1;
                    let f = masked_with(0x8a, &p, &mut rng);
                    kw2.lock().await.write_all(&f).await.unwrap();
                }
                0x8 => return (pings, true),
                _ => {}
            }
        }
    });
    // Others churn through the pool meanwhile.
    let t0 = std::time::Instant::now();
    let mut i = 0u64;
    while t0.elapsed() < Duration::from_millis(1500) {
        let label = format!("C{i}");
        let end = ENDS[i as usize % ENDS.len()];
        let _ = short_lived(server.addr, label, end, deflate, i + 1, server.log.clone()).await;
        i += 1;
    }
    assert!(
        !answer.is_finished(),
        "K was closed: {:?}",
        server.closed.lock().unwrap()
    );
    let closed = server.closed.lock().unwrap().clone();
    assert!(closed.iter().all(|(l, _)| l != "K"), "{closed:?}");
    drop(kw);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalive_pooled_owned() {
    keepalive_pooled(Readiness::Owned, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalive_pooled_tokio() {
    keepalive_pooled(Readiness::Tokio, false).await;
}

#[cfg(feature = "deflate")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalive_pooled_deflate() {
    keepalive_pooled(Readiness::Owned, true).await;
    keepalive_pooled(Readiness::Tokio, true).await;
}
