//! Broadcasting one message to many server-side connections: a plain
//! `Message` per connection (encoded, and copied when small, for each) versus
//! one `PreparedMessage` (encoded once, shared). The transport discards what
//! it is given, so only wavesock's own work is measured. The same on
//! permessage-deflate connections (context takeover on, as browsers
//! negotiate it), where a plain message is compressed once per connection
//! and a prepared one once in all.

use std::hint::black_box;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures_util::SinkExt;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use wavesock::{Config, DeflateConfig, Message, PreparedMessage, Role, WebSocketStream};
use wavesock_benches::payload;

/// A transport that has no input (but the handshake request it is made
/// with) and swallows all output.
#[derive(Default)]
struct Discard {
    input: Vec<u8>,
}

impl AsyncRead for Discard {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.input.is_empty() {
            return Poll::Pending;
        }
        let n = self.input.len().min(buf.remaining());
        buf.put_slice(&self.input[..n]);
        self.input.drain(..n);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Discard {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(Ok(bufs.iter().map(|b| b.len()).sum()))
    }
    fn is_write_vectored(&self) -> bool {
        true
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

const CONNECTIONS: usize = 1000;

fn broadcast(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut conns: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            WebSocketStream::from_raw_socket(Discard::default(), Role::Server, Config::default())
                .unwrap()
        })
        .collect();
    let mut g = c.benchmark_group("broadcast_1000");
    for (size, name) in [(1024usize, "1KiB"), (64 << 10, "64KiB")] {
        let data = Bytes::from(payload(size));
        g.throughput(Throughput::Bytes((size * CONNECTIONS) as u64));
        g.bench_function(format!("message/{name}"), |b| {
            b.iter(|| {
                rt.block_on(async {
                    for ws in conns.iter_mut() {
                        ws.send(Message::Binary(data.clone())).await.unwrap();
                    }
                })
            })
        });
        g.bench_function(format!("prepared/{name}"), |b| {
            b.iter(|| {
                rt.block_on(async {
                    let prepared = PreparedMessage::new(&Message::Binary(data.clone())).unwrap();
                    for ws in conns.iter_mut() {
                        ws.send_prepared(&prepared).await.unwrap();
                    }
                    black_box(prepared);
                })
            })
        });
    }
    g.finish();
}

/// Text shaped like a feed of updates: JSON lines whose numbers change,
/// compressing about as well as real traffic does (to roughly a third).
fn updates(size: usize) -> String {
    let mut out = String::with_capacity(size + 100);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while out.len() < size {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push_str(&format!(
            "{{\"symbol\":\"S{:03}\",\"bid\":{}.{:02},\"ask\":{}.{:02},\"volume\":{}}}\n",
            x % 500,
            x % 1000,
            (x >> 10) % 100,
            x % 1000 + 1,
            (x >> 20) % 100,
            (x >> 30) % 100_000
        ));
    }
    out.truncate(size);
    out
}

fn broadcast_deflate(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let config = Config::default().deflate(DeflateConfig::default());
    let request = "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
        Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
        Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n";
    let mut conns: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            let io = Discard {
                input: request.as_bytes().to_vec(),
            };
            rt.block_on(wavesock::accept_async_with_config(io, config.clone()))
                .unwrap()
        })
        .collect();
    let mut g = c.benchmark_group("broadcast_deflate_1000");
    g.sample_size(10);
    for (size, name) in [(1024usize, "1KiB"), (16 << 10, "16KiB")] {
        let text = updates(size);
        g.throughput(Throughput::Bytes((size * CONNECTIONS) as u64));
        g.bench_function(format!("message/{name}"), |b| {
            b.iter(|| {
                rt.block_on(async {
                    for ws in conns.iter_mut() {
                        ws.send(Message::text(text.as_str())).await.unwrap();
                    }
                })
            })
        });
        g.bench_function(format!("prepared/{name}"), |b| {
            b.iter(|| {
                rt.block_on(async {
                    let prepared = PreparedMessage::new(&Message::text(text.as_str())).unwrap();
                    for ws in conns.iter_mut() {
                        ws.send_prepared(&prepared).await.unwrap();
                    }
                    black_box(prepared);
                })
            })
        });
    }
    g.finish();
}

criterion_group!(benches, broadcast, broadcast_deflate);
criterion_main!(benches);
