//! wavesock against fastwebsockets, tokio-websockets and tokio-tungstenite,
//! in one run, at the sizes of the well-known ReadFrame/WriteFrame benches
//! (1 KiB + 1 and 1 MiB + 1 bytes, binary).
//!
//! Only public APIs are used, so each peer is measured at the lowest level it
//! exposes; the benchmark ids say which:
//!
//! - `mask/<impl>`: masking a buffer in place. tokio-websockets and
//!   tungstenite keep theirs private, so only wavesock's `apply_mask` and
//!   fastwebsockets' `unmask` are compared.
//! - `decode/<impl>-stream`: one message received through the library's
//!   connection type (the server role: masked client frames) over
//!   [`LoopIo`], an in-memory transport that repeats the same frame for ever.
//!   Every implementation pays one copy of the bytes into its read buffer, as
//!   it would from a socket. fastwebsockets is measured at
//!   `WebSocket::read_frame` (frames, not reassembled messages; the frames
//!   here are all final, so the result is the same).
//!   `decode/wavesock-codec` is wavesock's `Decoder` alone (one copy into a
//!   fresh `BytesMut`, then decode), for reference.
//! - `encode/<impl>-stream`: one message sent (and flushed) through the
//!   library's connection type, server role (no masking), into a transport
//!   that drops the bytes. This is the like-for-like encode: wavesock copies
//!   payloads under 4 KiB into its write buffer and writes larger ones
//!   vectored from where they are; the others may write vectored.
//!   `encode/wavesock-codec` (the `Encoder` into a `BytesMut`) and
//!   `encode/fastwebsockets-frame` (`Frame::write` into a `Vec`) are the two
//!   public "frame into a buffer" functions, compared with each other.
//! - `echo/<impl>`: one 1 KiB + 1 message round trip over an in-memory
//!   duplex pipe on a current-thread runtime: the client writes a pre-masked
//!   frame and reads the echo; the server runs the same echo loop as
//!   `echo_peer`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::codec::{Decoder, Encoder};
use wavesock::{Message, Role, WebSocketCodec, WebSocketStream};
use wavesock_benches::{LoopIo, masked_binary_frame, now, payload};

const SIZES: [(usize, &str); 2] = [(1024 + 1, "1KiB+1"), ((1 << 20) + 1, "1MiB+1")];
const KEY: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];

fn mask(c: &mut Criterion) {
    let mut g = c.benchmark_group("mask");
    for (size, name) in SIZES {
        let mut buf = payload(size);
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_function(BenchmarkId::new("wavesock", name), |b| {
            b.iter(|| wavesock::proto::mask::apply_mask(black_box(&mut buf), KEY, 0))
        });
        g.bench_function(BenchmarkId::new("fastwebsockets", name), |b| {
            b.iter(|| fastwebsockets::unmask(black_box(&mut buf), KEY))
        });
    }
    g.finish();
}

fn decode(c: &mut Criterion) {
    let config = wavesock_benches::wavesock_config();
    let mut g = c.benchmark_group("decode");
    for (size, name) in SIZES {
        let wire = masked_binary_frame(&payload(size), KEY);
        g.throughput(Throughput::Bytes(size as u64));

        let mut codec = WebSocketCodec::new(Role::Server, &config);
        g.bench_function(BenchmarkId::new("wavesock-codec", name), |b| {
            b.iter(|| {
                let mut buf = BytesMut::from(&wire[..]);
                black_box(codec.decode(&mut buf).unwrap().unwrap());
            })
        });

        let mut ws = WebSocketStream::from_raw_socket(
            LoopIo::new(wire.clone()),
            Role::Server,
            config.clone(),
        )
        .unwrap();
        assert_eq!(now(ws.next()).unwrap().unwrap().len(), size);
        g.bench_function(BenchmarkId::new("wavesock-stream", name), |b| {
            b.iter(|| black_box(now(ws.next()).unwrap().unwrap()))
        });

        let mut ws = fastwebsockets::WebSocket::after_handshake(
            LoopIo::new(wire.clone()),
            fastwebsockets::Role::Server,
        );
        ws.set_max_message_size(wavesock_benches::MAX_MESSAGE);
        assert_eq!(now(ws.read_frame()).unwrap().payload.len(), size);
        g.bench_function(BenchmarkId::new("fastwebsockets-stream", name), |b| {
            b.iter(|| black_box(now(ws.read_frame()).unwrap()))
        });

        let mut ws = tokio_websockets::ServerBuilder::new()
            .limits(wavesock_benches::tokio_websockets_limits())
            .serve(LoopIo::new(wire.clone()));
        assert_eq!(now(ws.next()).unwrap().unwrap().as_payload().len(), size);
        g.bench_function(BenchmarkId::new("tokio-websockets-stream", name), |b| {
            b.iter(|| black_box(now(ws.next()).unwrap().unwrap()))
        });

        let mut ws = now(tokio_tungstenite::WebSocketStream::from_raw_socket(
            LoopIo::new(wire.clone()),
            tokio_tungstenite::tungstenite::protocol::Role::Server,
            Some(wavesock_benches::tokio_tungstenite_config()),
        ));
        assert_eq!(now(ws.next()).unwrap().unwrap().len(), size);
        g.bench_function(BenchmarkId::new("tokio-tungstenite-stream", name), |b| {
            b.iter(|| black_box(now(ws.next()).unwrap().unwrap()))
        });
    }
    g.finish();
}

fn encode(c: &mut Criterion) {
    let config = wavesock_benches::wavesock_config();
    let mut g = c.benchmark_group("encode");
    for (size, name) in SIZES {
        let data = Bytes::from(payload(size));
        g.throughput(Throughput::Bytes(size as u64));

        let mut codec = WebSocketCodec::new(Role::Server, &config);
        let mut out = BytesMut::with_capacity(size + 14);
        let msg = Message::binary(data.clone());
        g.bench_function(BenchmarkId::new("wavesock-codec", name), |b| {
            b.iter(|| {
                out.clear();
                codec.encode(&msg, &mut out).unwrap();
                black_box(&out);
            })
        });

        let mut vec = Vec::with_capacity(size + 14);
        g.bench_function(BenchmarkId::new("fastwebsockets-frame", name), |b| {
            b.iter(|| {
                let mut frame =
                    fastwebsockets::Frame::binary(fastwebsockets::Payload::Borrowed(&data));
                black_box(frame.write(&mut vec));
            })
        });

        let mut ws =
            WebSocketStream::from_raw_socket(LoopIo::new(Vec::new()), Role::Server, config.clone())
                .unwrap();
        now(ws.send(Message::binary(data.clone()))).unwrap();
        assert!(ws.get_ref().written > size as u64);
        g.bench_function(BenchmarkId::new("wavesock-stream", name), |b| {
            b.iter(|| now(ws.send(Message::binary(data.clone()))).unwrap())
        });

        let mut ws = fastwebsockets::WebSocket::after_handshake(
            LoopIo::new(Vec::new()),
            fastwebsockets::Role::Server,
        );
        g.bench_function(BenchmarkId::new("fastwebsockets-stream", name), |b| {
            b.iter(|| {
                let frame = fastwebsockets::Frame::binary(fastwebsockets::Payload::Borrowed(&data));
                now(ws.write_frame(frame)).unwrap()
            })
        });

        let mut ws = tokio_websockets::ServerBuilder::new().serve(LoopIo::new(Vec::new()));
        g.bench_function(BenchmarkId::new("tokio-websockets-stream", name), |b| {
            b.iter(|| now(ws.send(tokio_websockets::Message::binary(data.clone()))).unwrap())
        });

        let mut ws = now(tokio_tungstenite::WebSocketStream::from_raw_socket(
            LoopIo::new(Vec::new()),
            tokio_tungstenite::tungstenite::protocol::Role::Server,
            Some(wavesock_benches::tokio_tungstenite_config()),
        ));
        g.bench_function(BenchmarkId::new("tokio-tungstenite-stream", name), |b| {
            b.iter(|| {
                now(ws.send(tokio_tungstenite::tungstenite::Message::Binary(
                    data.clone(),
                )))
                .unwrap()
            })
        });
    }
    g.finish();
}

/// Times `iters` round trips of one pre-masked message through an echo
/// server spawned on the same current-thread runtime over a duplex pipe.
fn echo_rounds<F, Fut>(iters: u64, size: usize, serve: F) -> Duration
where
    F: FnOnce(tokio::io::DuplexStream) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let frame = masked_binary_frame(&payload(size), KEY);
    // The server's unmasked reply: the frame without its 4-byte key.
    let mut reply = vec![0; frame.len() - 4];
    rt.block_on(async {
        let (mut client, server) = tokio::io::duplex(256 << 10);
        let task = tokio::spawn(serve(server));
        let start = Instant::now();
        for _ in 0..iters {
            client.write_all(&frame).await.unwrap();
            client.read_exact(&mut reply).await.unwrap();
        }
        let elapsed = start.elapsed();
        task.abort();
        elapsed
    })
}

fn echo(c: &mut Criterion) {
    let (size, name) = SIZES[0];
    let mut g = c.benchmark_group("echo");
    g.throughput(Throughput::Elements(1));
    g.bench_function(BenchmarkId::new("wavesock", name), |b| {
        b.iter_custom(|iters| {
            echo_rounds(iters, size, |io| async move {
                let config = wavesock_benches::wavesock_config();
                let mut ws = WebSocketStream::from_raw_socket(io, Role::Server, config).unwrap();
                let _ = wavesock_benches::wavesock_echo(&mut ws).await;
            })
        })
    });
    g.bench_function(BenchmarkId::new("fastwebsockets", name), |b| {
        b.iter_custom(|iters| {
            echo_rounds(iters, size, |io| async move {
                let ws =
                    fastwebsockets::WebSocket::after_handshake(io, fastwebsockets::Role::Server);
                let _ = wavesock_benches::fastwebsockets_echo(ws).await;
            })
        })
    });
    g.bench_function(BenchmarkId::new("tokio-websockets", name), |b| {
        b.iter_custom(|iters| {
            echo_rounds(iters, size, |io| async move {
                let ws = tokio_websockets::ServerBuilder::new()
                    .limits(wavesock_benches::tokio_websockets_limits())
                    .serve(io);
                let _ = wavesock_benches::tokio_websockets_echo(ws).await;
            })
        })
    });
    g.bench_function(BenchmarkId::new("tokio-tungstenite", name), |b| {
        b.iter_custom(|iters| {
            echo_rounds(iters, size, |io| async move {
                let ws = tokio_tungstenite::WebSocketStream::from_raw_socket(
                    io,
                    tokio_tungstenite::tungstenite::protocol::Role::Server,
                    Some(wavesock_benches::tokio_tungstenite_config()),
                )
                .await;
                let _ = wavesock_benches::tokio_tungstenite_echo(ws).await;
            })
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    // Modest sampling: the whole file runs in a few minutes on two cores.
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    targets = mask, decode, encode, echo
}
criterion_main!(benches);
