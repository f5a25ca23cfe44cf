//! Compressed echo throughput over loopback TCP: wavesock against yawc 0.5
//! (the Rust crate with permessage-deflate that does best on Autobahn).
//!
//! Both sides of each pair are the same crate, with the same settings:
//! permessage-deflate at level 3 on flate2 + zlib-rs, context takeover,
//! 15-bit windows, every message compressed. The server runs on its own
//! thread (current-thread runtime); per iteration the client feeds a batch
//! of 16 KiB JSON-like text messages and reads their echoes.
//!
//! ```text
//! cargo bench -p wavesock-benches --bench deflate_echo
//! ```

use std::convert::Infallible;
use std::hint::black_box;
use std::net::SocketAddr;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures_util::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;

const MESSAGE: usize = 16 << 10;
const BATCH: usize = 32;
const LEVEL: u32 = 3;

/// JSON-like records with varying numbers: compresses like real traffic.
fn message(seed: usize) -> String {
    let mut s = String::with_capacity(MESSAGE + 128);
    let mut i = seed;
    s.push('[');
    while s.len() < MESSAGE - 2 {
        i = i
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let r = i >> 33;
        s.push_str(&format!(
            "{{\"id\":{},\"user\":\"u{}\",\"score\":{}.{},\"tags\":[\"t{}\",\"t{}\"]}},",
            r % 100_000,
            r % 977,
            r % 1000,
            r % 97,
            r % 13,
            r % 7
        ));
    }
    s.truncate(MESSAGE - 1);
    s.push(']');
    s
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Runs `serve` for each connection on a thread of its own; returns the
/// address it listens on.
fn spawn_server<F, Fut>(serve: F) -> SocketAddr
where
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + 'static,
{
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        runtime().block_on(async move {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            let local = tokio::task::LocalSet::new();
            local
                .run_until(async move {
                    loop {
                        let (tcp, _) = listener.accept().await.unwrap();
                        tcp.set_nodelay(true).unwrap();
                        tokio::task::spawn_local(serve(tcp));
                    }
                })
                .await
        })
    });
    rx.recv().unwrap()
}

fn wavesock_config() -> wavesock::Config {
    let deflate = wavesock::DeflateConfig::default()
        .level(LEVEL)
        .compression_threshold(0);
    wavesock::Config::default().deflate(deflate)
}

fn wavesock_pair(c: &mut Criterion, msgs: &[String]) {
    let addr = spawn_server(|tcp| async move {
        let mut ws = wavesock::accept_async_with_config(tcp, wavesock_config())
            .await
            .unwrap();
        while let Some(Ok(msg)) = ws.next().await {
            if msg.is_data() && ws.feed(msg).await.is_err() {
                break;
            }
        }
    });
    let rt = runtime();
    let mut ws = rt.block_on(async {
        let tcp = TcpStream::connect(addr).await.unwrap();
        tcp.set_nodelay(true).unwrap();
        let (ws, resp) =
            wavesock::client_async_with_config(format!("ws://{addr}/"), tcp, wavesock_config())
                .await
                .unwrap();
        assert!(resp.headers().contains_key("sec-websocket-extensions"));
        ws
    });
    let mut g = c.benchmark_group("deflate_echo");
    g.throughput(Throughput::Bytes((MESSAGE * BATCH) as u64));
    g.bench_function("wavesock", |b| {
        b.iter(|| {
            rt.block_on(async {
                for m in msgs {
                    ws.feed(wavesock::Message::text(m.as_str())).await.unwrap();
                }
                ws.flush().await.unwrap();
                for _ in 0..BATCH {
                    let back = ws.next().await.unwrap().unwrap();
                    black_box(back.len());
                }
            })
        })
    });
    g.finish();
}

fn yawc_options() -> yawc::Options {
    yawc::Options::default()
        .with_compression_level(yawc::CompressionLevel::new(LEVEL))
        .with_compression_threshold(0)
        .with_utf8()
}

fn yawc_pair(c: &mut Criterion, msgs: &[String]) {
    let addr = spawn_server(|tcp| async move {
        let service = hyper::service::service_fn(|mut req| async move {
            let (resp, upgrade) = yawc::WebSocket::upgrade_with_options(&mut req, yawc_options())
                .expect("an upgrade request");
            tokio::task::spawn_local(async move {
                let mut ws = upgrade.await.unwrap();
                while let Some(frame) = ws.next().await {
                    let echo = match frame.opcode() {
                        yawc::OpCode::Text => yawc::Frame::text(frame.payload().clone()),
                        yawc::OpCode::Binary => yawc::Frame::binary(frame.payload().clone()),
                        _ => continue,
                    };
                    // yawc has no "write when about to wait for input":
                    // each echo is written as it is sent.
                    if ws.send(echo).await.is_err() {
                        break;
                    }
                }
            });
            Ok::<_, Infallible>(resp)
        });
        let io = hyper_util::rt::TokioIo::new(tcp);
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(io, service)
            .with_upgrades()
            .await;
    });
    let rt = runtime();
    let mut ws = rt.block_on(async {
        let tcp = TcpStream::connect(addr).await.unwrap();
        tcp.set_nodelay(true).unwrap();
        let url: url::Url = format!("ws://{addr}/").parse().unwrap();
        yawc::WebSocket::handshake(url, tcp, yawc_options())
            .await
            .unwrap()
    });
    let mut g = c.benchmark_group("deflate_echo");
    g.throughput(Throughput::Bytes((MESSAGE * BATCH) as u64));
    g.bench_function("yawc", |b| {
        b.iter(|| {
            rt.block_on(async {
                for m in msgs {
                    ws.feed(yawc::Frame::text(m.clone())).await.unwrap();
                }
                ws.flush().await.unwrap();
                for _ in 0..BATCH {
                    let back = ws.next().await.unwrap();
                    black_box(back.payload().len());
                }
            })
        })
    });
    g.finish();
}

fn deflate_echo(c: &mut Criterion) {
    let msgs: Vec<String> = (0..BATCH).map(message).collect();
    wavesock_pair(c, &msgs);
    yawc_pair(c, &msgs);
}

criterion_group!(benches, deflate_echo);
criterion_main!(benches);
