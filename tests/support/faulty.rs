//! The misbehaving transport of `tests/protocol/faults.rs` and
//! `tests/hub/hub_faults.rs`:
//! short reads and writes, `Pending` with a later wake-up, `Interrupted`,
//! `WouldBlock`, a `poll_flush` that waits, and an error or EOF at any
//! byte, driven by a seed so a failing run replays.
#![allow(dead_code)]

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf};
use wavesock::Message;

/// A small deterministic generator (xorshift64*), so a failing seed replays.
#[derive(Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What a faulty transport did, for the no-spin check.
#[derive(Default)]
pub struct Counts {
    /// Transport calls since a byte last moved either way.
    pub idle: AtomicU64,
    /// The longest such run.
    pub longest_idle: AtomicU64,
}

/// `inner` with faults: each call may return `Pending` (waking the task
/// at once, as a transport that becomes ready again would), `Interrupted`,
/// or move fewer bytes than it could. Over an in-memory pipe by default;
/// `tests/hub/engines.rs` wraps a server's TCP stream.
pub struct Faulty<T = DuplexStream> {
    pub inner: T,
    rng: Rng,
    counts: Arc<Counts>,
    /// Bytes each direction still moves before it breaks, and how.
    pub read_left: Option<(usize, Break)>,
    pub write_left: Option<(usize, Break)>,
}

enum Fault {
    Pending,
    Interrupted,
    WouldBlock,
    Go(usize),
}

/// How a direction of the transport breaks once its bytes run out.
#[derive(Clone, Copy, Debug)]
pub enum Break {
    /// Reads see the end of the stream; writes take nothing.
    Eof,
    /// Reads fail with `ConnectionReset`, writes with `BrokenPipe`.
    Reset,
}

impl<T> Faulty<T> {
    pub fn new(inner: T, seed: u64, counts: Arc<Counts>) -> Self {
        Faulty {
            inner,
            rng: Rng::new(seed),
            counts,
            read_left: None,
            write_left: None,
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
            20..24 => Fault::Interrupted,
            24..27 => Fault::WouldBlock,
            // Mostly tiny, sometimes large.
            27..85 => Fault::Go(1 + self.rng.below(8) as usize),
            _ => Fault::Go(1 + self.rng.below(64 << 10) as usize),
        }
    }

    fn moved(&self, n: usize) {
        if n > 0 {
            self.counts.idle.store(0, Ordering::Relaxed);
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Faulty<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let mut limit = match this.fault(cx) {
            Fault::Pending => return Poll::Pending,
            Fault::Interrupted => return Poll::Ready(Err(io::ErrorKind::Interrupted.into())),
            Fault::WouldBlock => return Poll::Ready(Err(io::ErrorKind::WouldBlock.into())),
            Fault::Go(n) => n.min(buf.remaining()),
        };
        if let Some((left, how)) = this.read_left {
            if left == 0 {
                return Poll::Ready(match how {
                    Break::Eof => Ok(()),
                    Break::Reset => Err(io::ErrorKind::ConnectionReset.into()),
                });
            }
            limit = limit.min(left);
        }
        let mut tmp = vec![0u8; limit];
        let mut part = ReadBuf::new(&mut tmp);
        let r = Pin::new(&mut this.inner).poll_read(cx, &mut part);
        if let Poll::Ready(Ok(())) = r {
            let n = part.filled().len();
            this.moved(n);
            if let Some((left, _)) = &mut this.read_left {
                *left -= n;
            }
            buf.put_slice(part.filled());
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Faulty<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let mut limit = match this.fault(cx) {
            Fault::Pending => return Poll::Pending,
            Fault::Interrupted => return Poll::Ready(Err(io::ErrorKind::Interrupted.into())),
            Fault::WouldBlock => return Poll::Ready(Err(io::ErrorKind::WouldBlock.into())),
            Fault::Go(n) => n.min(data.len()),
        };
        if let Some((left, how)) = this.write_left {
            if left == 0 && !data.is_empty() {
                return Poll::Ready(match how {
                    Break::Eof => Ok(0),
                    Break::Reset => Err(io::ErrorKind::BrokenPipe.into()),
                });
            }
            limit = limit.min(left);
        }
        let r = Pin::new(&mut this.inner).poll_write(cx, &data[..limit]);
        if let Poll::Ready(Ok(n)) = r {
            this.moved(n);
            if let Some((left, _)) = &mut this.write_left {
                *left -= n;
            }
        }
        r
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match this.fault(cx) {
            Fault::Pending => Poll::Pending,
            Fault::Interrupted => Poll::Ready(Err(io::ErrorKind::Interrupted.into())),
            Fault::WouldBlock => Poll::Ready(Err(io::ErrorKind::WouldBlock.into())),
            Fault::Go(_) => Pin::new(&mut this.inner).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// The messages one side sends: mostly small, some large, text and binary.
pub fn messages(rng: &mut Rng) -> Vec<Message> {
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

/// A masked frame from a client, announcing `announced` bytes if given
/// (more than it carries, for the limit tests).
pub fn client_frame(first: u8, payload: &[u8], announced: Option<u64>) -> Vec<u8> {
    let key = [0x11, 0x22, 0x33, 0x44];
    let len = announced.unwrap_or(payload.len() as u64);
    let mut out = vec![first];
    if len < 126 {
        out.push(0x80 | len as u8);
    } else if len <= u16::MAX as u64 {
        out.push(0x80 | 126);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(0x80 | 127);
        out.extend_from_slice(&len.to_be_bytes());
    }
    out.extend_from_slice(&key);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
    out
}

/// A client's whole exchange through the faults: sends `sent` from a task
/// of its own while this one reads the echoes, checks each came back whole
/// and in order, then closes and reads to the end, where nothing but the
/// close may come. Returns the receiving half, for what the caller checks
/// after.
pub async fn echo_and_close<S>(
    ws: wavesock::WebSocketStream<S>,
    sent: Vec<Message>,
    seed: u64,
) -> wavesock::WebSocketReceiver<S>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    use futures_util::{SinkExt, StreamExt};
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
    tx.close().await.expect("close");
    while let Some(msg) = rx.next().await {
        let msg = msg.expect("closing");
        assert!(
            msg.is_close(),
            "seed {seed}: nothing but the close after the echoes"
        );
    }
    rx
}
