//! Bytes waiting to be written: small frames copied into one buffer, large
//! server payloads kept where they are and written with vectored writes.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::AsyncWrite;

use crate::pool;

/// At most this many slices go into one vectored write.
const MAX_IOV: usize = 32;

/// Outgoing bytes in order: `chunks` first, then `tail`.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    chunks: VecDeque<Bytes>,
    tail: BytesMut,
    len: usize,
}

impl Outbox {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends whatever `f` writes into the copy buffer.
    pub(crate) fn encode<E>(
        &mut self,
        f: impl FnOnce(&mut BytesMut) -> Result<(), E>,
    ) -> Result<(), E> {
        if self.tail.capacity() == 0 {
            self.tail = pool::take();
        }
        let before = self.tail.len();
        let r = f(&mut self.tail);
        self.len += self.tail.len() - before;
        r
    }

    /// Appends bytes without copying them.
    pub(crate) fn push_shared(&mut self, bytes: Bytes) {
        if !self.tail.is_empty() {
            // The tail never shares memory with a chunk, so it can always go
            // back to the pool: a few bytes (typically a frame header) are
            // copied out, a well-filled buffer is handed over whole.
            let head = if 4 * self.tail.len() < self.tail.capacity() {
                let head = Bytes::copy_from_slice(&self.tail);
                self.tail.clear();
                head
            } else {
                std::mem::take(&mut self.tail).freeze()
            };
            self.chunks.push_back(head);
        }
        self.len += bytes.len();
        self.chunks.push_back(bytes);
    }

    /// Drops everything queued and gives the buffer back.
    pub(crate) fn clear(&mut self) {
        pool::give(std::mem::take(&mut self.tail));
        *self = Outbox::default();
    }

    /// Writes once; returns how many bytes went out.
    pub(crate) fn poll_write_once<W: AsyncWrite + Unpin>(
        &mut self,
        io: &mut W,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<usize>> {
        let r = if self.chunks.is_empty() {
            Pin::new(io).poll_write(cx, &self.tail)
        } else {
            let mut iov = [IoSlice::new(&[]); MAX_IOV];
            let mut k = 0;
            for c in self.chunks.iter().take(MAX_IOV) {
                iov[k] = IoSlice::new(c);
                k += 1;
            }
            if k < MAX_IOV && !self.tail.is_empty() {
                iov[k] = IoSlice::new(&self.tail);
                k += 1;
            }
            Pin::new(io).poll_write_vectored(cx, &iov[..k])
        };
        if r.is_pending() {
            // Waiting on the peer: hold memory in proportion to what is left.
            pool::fit(&mut self.tail, false);
        }
        let n = ready!(r)?;
        self.consume(n);
        Poll::Ready(Ok(n))
    }

    fn consume(&mut self, mut n: usize) {
        if n == self.len {
            // All written, the usual case: nothing held between bursts, so
            // an idle connection owns no buffers. The tail goes back to the
            // pool without advancing it first, so it needs no reclaiming.
            self.clear();
            return;
        }
        self.len -= n;
        while n > 0 {
            match self.chunks.front_mut() {
                Some(front) if n >= front.len() => {
                    n -= front.len();
                    self.chunks.pop_front();
                }
                Some(front) => {
                    front.advance(n);
                    n = 0;
                }
                None => {
                    self.tail.advance(n);
                    n = 0;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Waker;

    /// A writer that takes at most `max` bytes per call, vectored or not.
    struct Trickle {
        out: Vec<u8>,
        max: usize,
        vectored: bool,
    }

    impl AsyncWrite for Trickle {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let n = buf.len().min(self.max);
            self.out.extend_from_slice(&buf[..n]);
            Poll::Ready(Ok(n))
        }
        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            if !self.vectored {
                let first = bufs
                    .iter()
                    .find(|b| !b.is_empty())
                    .map_or(&[][..], |b| &b[..]);
                let n = first.len().min(self.max);
                self.out.extend_from_slice(&first[..n]);
                return Poll::Ready(Ok(n));
            }
            let mut left = self.max;
            let mut n = 0;
            for b in bufs {
                let take = b.len().min(left);
                self.out.extend_from_slice(&b[..take]);
                n += take;
                left -= take;
            }
            Poll::Ready(Ok(n))
        }
        fn is_write_vectored(&self) -> bool {
            self.vectored
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// A writer that takes nothing: the peer is not reading.
    struct Stalled;

    impl AsyncWrite for Stalled {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            _: &[u8],
        ) -> Poll<io::Result<usize>> {
            Poll::Pending
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Pending
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Pending
        }
    }

    #[test]
    fn a_blocked_write_keeps_memory_in_proportion_to_what_is_queued() {
        let mut ob = Outbox::default();
        ob.encode(|b| {
            b.extend_from_slice(&[7; 100]);
            Ok::<_, ()>(())
        })
        .unwrap();
        assert!(
            ob.tail.capacity() >= pool::BUF_LEN,
            "small frames gather in a spare"
        );
        let mut cx = Context::from_waker(Waker::noop());
        assert!(ob.poll_write_once(&mut Stalled, &mut cx).is_pending());
        assert_eq!(ob.len(), 100);
        assert_eq!(&ob.tail[..], &[7; 100][..]);
        assert!(
            ob.tail.capacity() < 400,
            "{} bytes held for 100",
            ob.tail.capacity()
        );
    }

    #[test]
    fn headers_of_large_frames_waiting_on_a_slow_peer_pin_no_spare() {
        let mut ob = Outbox::default();
        let mut cx = Context::from_waker(Waker::noop());
        for i in 0..8u8 {
            ob.encode(|b| {
                b.extend_from_slice(&[0x82, 0x7e, 0x13, 0x88]);
                Ok::<_, ()>(())
            })
            .unwrap();
            ob.push_shared(Bytes::from(vec![i; 5000]));
            assert!(ob.poll_write_once(&mut Stalled, &mut cx).is_pending());
            // The spare went back to the pool; the header lives on its own.
            assert_eq!(ob.tail.capacity(), 0);
            assert_eq!(pool::pooled(), 1, "message {i}");
        }
        assert_eq!(ob.len(), 8 * 5004);
        let mut w = Trickle {
            out: Vec::new(),
            max: 1 << 20,
            vectored: true,
        };
        while !ob.is_empty() {
            let Poll::Ready(Ok(_)) = ob.poll_write_once(&mut w, &mut cx) else {
                panic!("trickle never blocks")
            };
        }
        for (i, frame) in w.out.chunks(5004).enumerate() {
            assert_eq!(frame[..4], [0x82, 0x7e, 0x13, 0x88]);
            assert!(frame[4..].iter().all(|&b| b == i as u8));
        }
    }

    #[test]
    fn a_drained_outbox_holds_no_buffer() {
        let mut ob = Outbox::default();
        ob.encode(|b| {
            b.extend_from_slice(b"frame");
            Ok::<_, ()>(())
        })
        .unwrap();
        let spare_ptr = ob.tail.as_ptr();
        ob.push_shared(Bytes::from(vec![1; 5000]));
        let mut w = Trickle {
            out: Vec::new(),
            max: 1 << 20,
            vectored: true,
        };
        let mut cx = Context::from_waker(Waker::noop());
        while !ob.is_empty() {
            let Poll::Ready(Ok(_)) = ob.poll_write_once(&mut w, &mut cx) else {
                panic!("trickle never blocks")
            };
        }
        assert_eq!(ob.tail.capacity(), 0);
        assert_eq!(ob.chunks.capacity(), 0);
        // The tail's memory went back to the pool even though a chunk had
        // been queued after it (a test thread starts with an empty pool).
        assert_eq!(pool::pooled(), 1);
        assert_eq!(pool::take().as_ptr(), spare_ptr);
    }

    #[test]
    fn order_is_kept_across_partial_and_vectored_writes() {
        for vectored in [false, true] {
            for max in [1usize, 3, 7, 100, 1 << 20] {
                let mut ob = Outbox::default();
                let mut expect = Vec::new();
                for i in 0..50u8 {
                    let small = vec![i; i as usize % 5];
                    ob.encode(|b| {
                        b.extend_from_slice(&small);
                        Ok::<_, ()>(())
                    })
                    .unwrap();
                    expect.extend_from_slice(&small);
                    if i % 3 == 0 {
                        let big = Bytes::from(vec![i.wrapping_mul(7); 40 + i as usize]);
                        expect.extend_from_slice(&big);
                        ob.push_shared(big);
                    }
                }
                assert_eq!(ob.len(), expect.len());
                let mut w = Trickle {
                    out: Vec::new(),
                    max,
                    vectored,
                };
                let mut cx = Context::from_waker(Waker::noop());
                while !ob.is_empty() {
                    let Poll::Ready(Ok(_)) = ob.poll_write_once(&mut w, &mut cx) else {
                        panic!("trickle never blocks")
                    };
                }
                assert_eq!(w.out, expect, "vectored {vectored} max {max}");
            }
        }
    }
}
