//! A transport that misbehaves the way real networks and TLS stacks do,
//! driven by a seed: short reads and writes (down to one byte), `Pending`
//! with a later wake-up at any point, `Interrupted`, and `poll_flush` that
//! waits. Over it, a client and a server (split and unsplit, with and
//! without compression, handshake included) must deliver every message
//! whole, once and in order, and must not spin (a run of transport calls
//! that move no byte stays short).
//!
//! `FAULT_SEEDS=N` runs N seeds per configuration (default 6, a few seconds).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf};
use wavesock::{Config, Message};

/// A small deterministic generator (xorshift64*), so a failing seed replays.
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What a faulty transport did, for the no-spin check.
#[derive(Default)]
struct Counts {
    /// Transport calls since a byte last moved either way.
    idle: AtomicU64,
    /// The longest such run.
    longest_idle: AtomicU64,
}

/// `inner` with faults: each call may return `Pending` (waking the task
/// at once, as a transport that becomes ready again would), `Interrupted`,
/// or move fewer bytes than it could.
struct Faulty {
    inner: DuplexStream,
    rng: Rng,
    counts: Arc<Counts>,
}

enum Fault {
    Pending,
    Interrupted,
    Go(usize),
}

impl Faulty {
    fn new(inner: DuplexStream, seed: u64, counts: Arc<Counts>) -> Self {
        Faulty {
            inner,
            rng: Rng::new(seed),
            counts,
        }
    }

    fn fault(&mut self, cx: &Context<'_>) -> Fault {
        let idle = self.counts.idle.fetch_add(1, Ordering::Relaxed) + 1;
        self.counts.longest_idle.fetch_max(idle, Ordering::Relaxed);
        match self.rng.below(100) {
            0..20 => {
                cx.waker().wake_by_ref();
                Fault::Pending
            }
            20..25 => Fault::Interrupted,
            // Mostly tiny, sometimes large.
            25..85 => Fault::Go(1 + self.rng.below(8) as usize),
            _ => Fault::Go(1 + self.rng.below(64 << 10) as usize),
        }
    }

    fn moved(&self, n: usize) {
        if n > 0 {
            self.counts.idle.store(0, Ordering::Relaxed);
        }
    }
}

impl AsyncRead for Faulty {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let limit = match this.fault(cx) {
            Fault::Pending => return Poll::Pending,
            Fault::Interrupted => return Poll::Ready(Err(io::ErrorKind::Interrupted.into())),
            Fault::Go(n) => n.min(buf.remaining()),
        };
        let mut tmp = vec![0u8; limit];
        let mut part = ReadBuf::new(&mut tmp);
        let r = Pin::new(&mut this.inner).poll_read(cx, &mut part);
        if let Poll::Ready(Ok(())) = r {
            this.moved(part.filled().len());
            buf.put_slice(part.filled());
        }
        r
    }
}

impl AsyncWrite for Faulty {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let limit = match this.fault(cx) {
            Fault::Pending => return Poll::Pending,
            Fault::Interrupted => return Poll::Ready(Err(io::ErrorKind::Interrupted.into())),
            Fault::Go(n) => n.min(data.len()),
        };
        let r = Pin::new(&mut this.inner).poll_write(cx, &data[..limit]);
        if let Poll::Ready(Ok(n)) = r {
            this.moved(n);
        }
        r
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match this.fault(cx) {
            Fault::Pending => Poll::Pending,
            Fault::Interrupted => Poll::Ready(Err(io::ErrorKind::Interrupted.into())),
            Fault::Go(_) => Pin::new(&mut this.inner).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// The messages one side sends: mostly small, some large, text and binary.
fn messages(rng: &mut Rng) -> Vec<Message> {
    (0..40)
        .map(|i| {
            let len = match rng.below(10) {
                0 => rng.below(100_000) as usize,
                1..4 => rng.below(2000) as usize,
                _ => rng.below(130) as usize,
            };
            if rng.below(2) == 0 {
                let text: String = (0..len)
                    .map(|j| ['a', 'é', '€', '😀'][(i + j + len) % 4])
                    .take(len / 2)
                    .collect();
                Message::text(text)
            } else {
                Message::binary((0..len).map(|j| (j * 7 + i) as u8).collect::<Vec<u8>>())
            }
        })
        .collect()
}

fn config(deflate: bool) -> Config {
    // A small write buffer, so backpressure is exercised too.
    let config = Config::default().write_buffer_size(4096);
    #[cfg(feature = "deflate")]
    if deflate {
        return config.deflate(wavesock::DeflateConfig::default().compression_threshold(0));
    }
    let _ = deflate;
    config
}

/// One exchange: a client sends its messages from one task and reads the
/// echoes in another (split); the server is the README's echo loop
/// (unsplit, `feed` then `next`), or the same split, as `split_server` says.
async fn exchange(seed: u64, split_server: bool, deflate: bool) {
    let (a, b) = tokio::io::duplex(1 + (seed as usize % 5) * 1024);
    let counts = Arc::new(Counts::default());
    let client_io = Faulty::new(a, seed, counts.clone());
    let server_io = Faulty::new(b, seed ^ 0xABCD, counts.clone());
    let mut rng = Rng::new(seed);
    let sent = messages(&mut rng);

    let server = tokio::spawn(async move {
        let ws = wavesock::accept_async_with_config(server_io, config(deflate))
            .await
            .expect("server handshake");
        if split_server {
            let (mut tx, mut rx) = ws.split();
            while let Some(msg) = rx.next().await {
                let msg = msg.expect("server receives");
                if msg.is_data() {
                    tx.send(msg).await.expect("server sends");
                }
            }
        } else {
            let mut ws = ws;
            while let Some(msg) = ws.next().await {
                let msg = msg.expect("server receives");
                if msg.is_data() {
                    futures_util::SinkExt::feed(&mut ws, msg)
                        .await
                        .expect("server feeds");
                }
            }
        }
    });

    let (ws, _) = wavesock::client_async_with_config("ws://faulty/", client_io, config(deflate))
        .await
        .expect("client handshake");
    let (mut tx, mut rx) = ws.split();
    let expected = sent.clone();
    let sender = tokio::spawn(async move {
        for msg in sent {
            tx.send(msg).await.expect("client sends");
        }
        tx
    });
    let mut got = Vec::new();
    while got.len() < expected.len() {
        let msg = rx
            .next()
            .await
            .expect("the connection stays up")
            .expect("client receives");
        if msg.is_data() {
            got.push(msg);
        }
    }
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        assert!(
            g == e,
            "seed {seed}: message {i} differs ({} vs {} bytes)",
            g.len(),
            e.len()
        );
    }
    // A clean close through the faults, too.
    let mut tx = sender.await.unwrap();
    futures_util::SinkExt::close(&mut tx).await.expect("close");
    while let Some(msg) = rx.next().await {
        let msg = msg.expect("closing");
        assert!(
            msg.is_close(),
            "seed {seed}: nothing but the close after the echoes"
        );
    }
    server.await.expect("server task");

    // No spinning: a byte moves every few transport calls. Injected
    // wake-ups make some calls idle, but a run of them stays short; a
    // library that polls in a loop without progress makes it long.
    let longest = counts.longest_idle.load(Ordering::Relaxed);
    eprintln!("seed {seed}: longest run of transport calls without progress: {longest}");
    assert!(
        longest <= 200,
        "seed {seed}: {longest} transport calls in a row without progress"
    );
}

fn seeds() -> u64 {
    std::env::var("FAULT_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6)
}

async fn run_all(split_server: bool, deflate: bool) {
    for seed in 0..seeds() {
        tokio::time::timeout(
            Duration::from_secs(20),
            exchange(seed, split_server, deflate),
        )
        .await
        .unwrap_or_else(|_| {
            panic!("seed {seed}: stuck (split_server={split_server}, deflate={deflate})")
        });
    }
}

#[tokio::test]
async fn echo_loop_server_delivers_everything_through_faults() {
    run_all(false, false).await;
}

#[tokio::test]
async fn split_server_delivers_everything_through_faults() {
    run_all(true, false).await;
}

#[cfg(feature = "deflate")]
#[tokio::test]
async fn compressed_exchange_delivers_everything_through_faults() {
    run_all(false, true).await;
    run_all(true, true).await;
}
