//! Codec microbenchmarks in memory: masking, decoding and encoding at the
//! sizes of the well-known ReadFrame/WriteFrame benches (1 KiB + 1, 1 MiB + 1).

use std::hint::black_box;

use bytes::BytesMut;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tokio_util::codec::{Decoder, Encoder};
use wavesock::proto::mask::apply_mask;
use wavesock::{Config, Message, Role, WebSocketCodec};
use wavesock_benches::payload;

const SIZES: [(usize, &str); 2] = [(1024 + 1, "1KiB+1"), ((1 << 20) + 1, "1MiB+1")];

fn mask(c: &mut Criterion) {
    let mut g = c.benchmark_group("mask");
    for (size, name) in SIZES {
        let mut buf = payload(size);
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_function(name, |b| {
            b.iter(|| apply_mask(black_box(&mut buf), [1, 2, 3, 4], 0))
        });
    }
    g.finish();
}

fn decode(c: &mut Criterion) {
    let config = Config::default();
    let mut g = c.benchmark_group("decode");
    for (size, name) in SIZES {
        // Masked binary frames as a client sends them, decoded by a server.
        let mut wire = BytesMut::new();
        WebSocketCodec::new(Role::Client, &config)
            .encode(Message::binary(payload(size)), &mut wire)
            .unwrap();
        let wire = wire.freeze();
        let mut codec = WebSocketCodec::new(Role::Server, &config);
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_function(name, |b| {
            b.iter(|| {
                let mut buf = BytesMut::from(&wire[..]);
                black_box(codec.decode(&mut buf).unwrap().unwrap());
            })
        });
    }
    g.finish();
}

fn encode(c: &mut Criterion) {
    let config = Config::default();
    let mut g = c.benchmark_group("encode");
    for (size, name) in SIZES {
        let msg = Message::binary(payload(size));
        for (role, label) in [(Role::Server, "server"), (Role::Client, "client")] {
            let mut codec = WebSocketCodec::new(role, &config);
            let mut out = BytesMut::with_capacity(size + 14);
            g.throughput(Throughput::Bytes(size as u64));
            g.bench_function(format!("{label}/{name}"), |b| {
                b.iter(|| {
                    out.clear();
                    codec.encode(&msg, &mut out).unwrap();
                    black_box(&out);
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, mask, decode, encode);
criterion_main!(benches);
