//! Broadcasting one message to many server-side connections: a plain
//! `Message` per connection (encoded, and copied when small, for each) versus
//! one `PreparedMessage` (encoded once, shared). The transport discards what
//! it is given, so only wavesock's own work is measured.

use std::hint::black_box;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures_util::SinkExt;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use wavesock::{Config, Message, PreparedMessage, Role, WebSocketStream};
use wavesock_benches::payload;

/// A transport that never has input and swallows all output.
struct Discard;

impl AsyncRead for Discard {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        _: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Poll::Pending
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
            WebSocketStream::from_raw_socket(Discard, Role::Server, Config::default()).unwrap()
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

criterion_group!(benches, broadcast);
criterion_main!(benches);
