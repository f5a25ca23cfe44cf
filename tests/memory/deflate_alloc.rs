//! Decompression bombs cost at most `max_message_size`, not what they
//! would inflate to, and compression state costs nothing until a
//! compressed message needs it: measured with a counting global allocator.
//! Each test runs in a process of its own (`child::alone`).
#![cfg(feature = "deflate")]

use std::sync::atomic::Ordering;

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wavesock::{Config, DeflateConfig, DeflateParams, Error, Role, WebSocketStream};

use crate::support::child;
use crate::support::counting;

use counting::{LIVE, PEAK};

/// Runs `f` on a runtime of its own, in a process of its own.
fn alone(f: impl std::future::Future<Output = ()>) {
    if !child::alone() {
        return;
    }
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f);
}

/// Peak growth of live heap while `f` runs.
async fn peak_during<F: std::future::Future<Output = ()>>(f: F) -> usize {
    let base = LIVE.load(Ordering::SeqCst);
    PEAK.store(base, Ordering::SeqCst);
    f.await;
    PEAK.load(Ordering::SeqCst) - base
}

/// DEFLATE bits, least significant first (RFC 1951 §3.1.1).
#[derive(Default)]
struct Bits {
    out: Vec<u8>,
    acc: u32,
    n: u32,
}

impl Bits {
    fn put(&mut self, value: u32, len: u32) {
        self.acc |= value << self.n;
        self.n += len;
        while self.n >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.n -= 8;
        }
    }

    /// Huffman codes are packed from their most significant bit.
    fn code(&mut self, code: u32, len: u32) {
        self.put(code.reverse_bits() >> (32 - len), len);
    }

    fn flush(mut self) -> Vec<u8> {
        if self.n > 0 {
            self.out.push(self.acc as u8);
        }
        self.out
    }
}

/// A permessage-deflate payload (tail stripped) that inflates to
/// `1 + 258 * copies` zero bytes: one literal zero, then `copies` times
/// "258 bytes from distance 1", in a fixed-Huffman block: 13 bits per 258
/// bytes.
fn bomb(copies: usize) -> Vec<u8> {
    let mut b = Bits::default();
    b.put(0b0, 1); // BFINAL
    b.put(0b01, 2); // fixed Huffman codes
    b.code(0b0011_0000, 8); // literal 0
    for _ in 0..copies {
        b.code(0b1100_0101, 8); // length 258 (symbol 285)
        b.code(0, 5); // distance 1
    }
    b.code(0, 7); // end of block
    b.put(0, 3); // the empty stored block a sync flush makes; LEN/NLEN stripped
    b.flush()
}

fn masked_frame(b0: u8, payload: &[u8]) -> Vec<u8> {
    let key = [0x5a, 0x11, 0xc3, 0x07];
    let mut out = vec![b0, 0xFF];
    out.extend_from_slice(&(payload.len() as u64).to_be_bytes());
    out.extend_from_slice(&key);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
    out
}

/// A compressed binary message in fragments of `size` bytes.
fn fragmented(payload: &[u8], size: usize) -> Vec<u8> {
    let chunks: Vec<&[u8]> = payload.chunks(size).collect();
    let mut out = Vec::with_capacity(payload.len() + chunks.len() * 14);
    for (i, c) in chunks.iter().enumerate() {
        let fin = if i + 1 == chunks.len() { 0x80 } else { 0 };
        let op = if i == 0 { 0x42 } else { 0x00 }; // RSV1 + binary first
        out.extend(masked_frame(fin | op, c));
    }
    out
}

fn server(
    io: tokio::io::DuplexStream,
    max_message_size: usize,
) -> WebSocketStream<tokio::io::DuplexStream> {
    // Frames (wire bytes) are capped too; a bomb then comes in fragments.
    let config = Config::default()
        .max_frame_size(max_message_size)
        .max_message_size(max_message_size);
    WebSocketStream::from_raw_socket(io, Role::Server, config)
        .unwrap()
        .with_deflate(DeflateParams::default(), &DeflateConfig::default())
}

#[test]
fn a_gigabyte_bomb_costs_the_limit_not_a_gigabyte() {
    alone(async {
        // The generator is right: a small bomb inflates to exactly its size.
        let (a, mut peer) = tokio::io::duplex(1 << 20);
        let mut ws = server(a, 1 << 20);
        peer.write_all(&fragmented(&bomb(1000), 100)).await.unwrap();
        let got = ws.next().await.unwrap().unwrap().into_payload();
        assert_eq!(got.len(), 1 + 258 * 1000);
        assert!(got.iter().all(|&b| b == 0));

        // Warm-up: the thread's spare buffer (the first write takes it),
        // zlib's window.
        let (a, mut peer) = tokio::io::duplex(1 << 16);
        let mut ws = server(a, 1 << 20);
        peer.write_all(&masked_frame(0xC2, &bomb(10)))
            .await
            .unwrap();
        let msg = ws.next().await.unwrap().unwrap();
        ws.send(msg).await.unwrap();

        // 1 GiB of zeros in 6.5 MiB on the wire (deflate cannot do better
        // than about 1:1032, so a 1 KiB message tops out near 1 MiB).
        let copies = (1 << 30) / 258;
        let bomb = bomb(copies);
        assert!(bomb.len() < 7 << 20);
        let wire = fragmented(&bomb, 8 << 10);

        // Allowed: the limit, plus the old buffer while the last doubling
        // copies it (half the limit), plus one read and zlib's window, plus
        // the spare a burst is read into (per thread, handed back when the
        // connection waits; the close frame's write takes the thread's
        // other one).
        // And the inflater's own state, made by the bomb's first frame
        // (none exists before a compressed message arrives).
        const SPARE: usize = 96 << 10;
        const ZLIB: usize = 56 << 10;
        for (limit, allowed) in [
            (16 << 10, (64 << 10) + SPARE + ZLIB),
            (1 << 20, (3 << 19) + (64 << 10) + SPARE + ZLIB),
        ] {
            let (a, peer) = tokio::io::duplex(8 << 10);
            let mut ws = server(a, limit);
            let wire = wire.clone();
            let (mut rd, mut wr) = tokio::io::split(peer);
            let writer = tokio::spawn(async move {
                // Stops with an error once the server gives up reading.
                let _ = wr.write_all(&wire).await;
            });
            let grew = peak_during(async {
                let err = ws.next().await.unwrap().unwrap_err();
                assert!(
                    matches!(err, Error::MessageTooLarge { max, .. } if max == limit),
                    "{err}"
                );
                assert_eq!(err.close_code().map(|c| c.0), Some(1009));
            })
            .await;
            // The close frame on the wire says 1009, and which limit.
            let reason = b"message over max_message_size";
            let mut frame = vec![0u8; 4 + reason.len()];
            rd.read_exact(&mut frame).await.unwrap();
            assert_eq!(frame[..4], [0x88, 2 + reason.len() as u8, 0x03, 0xF1]);
            assert_eq!(&frame[4..], reason);
            drop(ws);
            writer.await.unwrap();
            eprintln!("limit {limit}: peak growth {grew} bytes for a 1 GiB bomb");
            assert!(grew <= allowed, "limit {limit}: {grew} bytes allocated");
        }
    });
}

/// Live heap growth while `f` runs (what it leaves allocated).
async fn kept_by<F: std::future::Future<Output = ()>>(f: F) -> isize {
    let base = LIVE.load(Ordering::SeqCst) as isize;
    f.await;
    LIVE.load(Ordering::SeqCst) as isize - base
}

#[test]
fn compression_state_is_made_by_the_first_compressed_message_each_way() {
    alone(async {
        // What an idle connection costs, with and without permessage-deflate
        // negotiated (the same transport for both).
        let (a, _pa) = tokio::io::duplex(1 << 16);
        let (b, mut peer) = tokio::io::duplex(1 << 16);
        let mut plain = None;
        let plain_cost = kept_by(async {
            plain =
                Some(WebSocketStream::from_raw_socket(a, Role::Server, Config::default()).unwrap());
        })
        .await;
        let mut ws = None;
        let deflate_cost = kept_by(async { ws = Some(server(b, 1 << 20)) }).await;
        let mut ws = ws.unwrap();
        eprintln!("idle: plain {plain_cost} B, deflate {deflate_cost} B");
        assert!(
            deflate_cost <= plain_cost + 512,
            "deflate {deflate_cost} B against plain {plain_cost} B: zlib state made early"
        );

        // A compressed message in: the inflater's state, not the deflater's.
        let inflating = kept_by(async {
            peer.write_all(&masked_frame(0xC2, &bomb(10)))
                .await
                .unwrap();
            let msg = ws.next().await.unwrap().unwrap();
            assert_eq!(msg.into_payload().len(), 1 + 258 * 10);
        })
        .await;
        eprintln!("after a compressed message in: {inflating} B more");
        assert!(
            (8 << 10..100 << 10).contains(&inflating),
            "{inflating} B: the inflater's state and window, no deflater"
        );

        // One out, over the threshold: now the deflater's.
        let deflating = kept_by(async {
            ws.send(wavesock::Message::binary(vec![7u8; 4096]))
                .await
                .unwrap();
            let mut head = [0u8; 2];
            peer.read_exact(&mut head).await.unwrap();
            assert_eq!(head[0], 0xC2, "sent compressed");
        })
        .await;
        eprintln!("after a compressed message out: {deflating} B more");
        assert!(
            deflating >= 100 << 10,
            "{deflating} B: the deflater's state"
        );
        drop(plain);
    });
}
