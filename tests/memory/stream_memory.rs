//! A large message streamed over a loopback socket with `send_reader` and
//! received with `next_message_pieces`: peak heap measured with a counting
//! global allocator (its own test binary, so that no other test allocates
//! meanwhile). 1 GiB takes about 8 s in a debug build; to see the figures:
//!
//! ```sh
//! cargo test --test memory stream_memory -- --nocapture
//! ```

use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Instant;

use crate::support::{accept, client, listener};
use futures_util::StreamExt;
use tokio::io::{AsyncRead, ReadBuf};
use wavesock::{Config, OpCode};

use crate::support::child;
use crate::support::counting;

use counting::{LIVE, PEAK};

/// The pattern repeats every 251 bytes (a prime, so it never lines up with
/// chunk or read sizes); `BLOCK` holds enough of it for any read.
const PERIOD: usize = 251;
const BLOCK_LEN: usize = (256 << 10) + PERIOD;

fn block() -> Vec<u8> {
    (0..BLOCK_LEN).map(|i| (i % PERIOD) as u8).collect()
}

/// `len` bytes of the pattern, made on the fly.
struct Pattern {
    block: Vec<u8>,
    pos: u64,
    len: u64,
}

impl AsyncRead for Pattern {
    fn poll_read(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let left = (this.len - this.pos).min(BLOCK_LEN as u64 - PERIOD as u64) as usize;
        let n = buf.remaining().min(left);
        let at = (this.pos % PERIOD as u64) as usize;
        buf.put_slice(&this.block[at..at + n]);
        this.pos += n as u64;
        Poll::Ready(Ok(()))
    }
}

/// Sends `len` bytes as one message from a client (so masked) to a server
/// that receives it in pieces, checks every byte and keeps none. Returns the
/// peak heap growth, both ends included, and the largest piece.
async fn stream_through(len: u64) -> (usize, usize) {
    let (l, addr) = listener().await;
    let config = Config::default()
        .stream_messages(true)
        .max_message_size(usize::MAX);
    let server = tokio::spawn(async move {
        let mut ws = accept(&l, config).await;
        let block = block();
        let mut pieces = ws.next_message_pieces();
        let (mut pos, mut largest) = (0u64, 0usize);
        while let Some(piece) = pieces.next().await {
            let piece = piece.unwrap();
            let at = (pos % PERIOD as u64) as usize;
            assert!(
                piece[..] == block[at..at + piece.len()],
                "wrong bytes at {pos}"
            );
            pos += piece.len() as u64;
            largest = largest.max(piece.len());
        }
        assert_eq!(pieces.opcode(), Some(OpCode::Binary));
        assert_eq!(pos, len, "every byte arrived");
        largest
    });
    let mut ws = client(addr, Config::default()).await;

    let base = LIVE.load(Ordering::SeqCst);
    PEAK.store(base, Ordering::SeqCst);
    let pattern = Pattern {
        block: block(),
        pos: 0,
        len,
    };
    let start = Instant::now();
    ws.send_reader(OpCode::Binary, pattern, 64 << 10)
        .await
        .unwrap();
    let largest = server.await.unwrap();
    let peak = PEAK.load(Ordering::SeqCst) - base;
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "{} MiB in {secs:.1} s ({:.0} MiB/s): peak heap growth {} KiB, largest piece {} KiB",
        len >> 20,
        (len >> 20) as f64 / secs,
        peak >> 10,
        largest >> 10
    );
    (peak, largest)
}

/// Two pattern blocks (about 512 KiB) are part of the measurement; the
/// rest is the connection: write buffer, reads, pieces in flight.
const PEAK_LIMIT: usize = 4 << 20;

#[test]
fn one_gib_message_streams_in_bounded_memory() {
    if !child::alone() {
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (peak, largest) = rt.block_on(stream_through(1 << 30));
    assert!(peak < PEAK_LIMIT, "peak heap growth {peak} bytes");
    assert!(largest <= 64 << 10, "a piece is at most one read");
}
