//! Bytes waiting to be written: small frames copied into one buffer, large
//! server payloads kept where they are and written with vectored writes.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::AsyncWrite;

use crate::retry::Retrying;
use crate::stream::pool;

/// At most this many slices go into one vectored write.
const MAX_IOV: usize = 32;

/// Outgoing bytes in order. Copied bytes are gathered in `tail`; once a
/// shared chunk is queued, `segs` records how copied runs and chunks
/// interleave. With no chunk queued `segs` is empty and `tail` is all.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    segs: VecDeque<Seg>,
    tail: BytesMut,
    len: usize,
}

#[derive(Debug)]
enum Seg {
    /// The next this many bytes of `tail`.
    Copied(usize),
    /// Bytes written from where they are.
    Shared(Bytes),
}

thread_local! {
    /// Emptied segment lists, so queueing a shared chunk allocates nothing.
    static SPARE_SEGS: RefCell<Vec<VecDeque<Seg>>> = const { RefCell::new(Vec::new()) };
}

fn give_segs(mut segs: VecDeque<Seg>) {
    segs.clear();
    if segs.capacity() > 0 && segs.capacity() <= 4 * MAX_IOV {
        pool::keep(&SPARE_SEGS, segs);
    }
}

impl Outbox {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends whatever `f` writes into the copy buffer.
    #[inline]
    pub(crate) fn encode<T, E>(
        &mut self,
        f: impl FnOnce(&mut BytesMut) -> Result<T, E>,
    ) -> Result<T, E> {
        if self.tail.capacity() == 0 {
            self.tail = pool::take();
        }
        let before = self.tail.len();
        let r = f(&mut self.tail);
        let added = self.tail.len() - before;
        self.len += added;
        if added > 0 && !self.segs.is_empty() {
            match self.segs.back_mut() {
                Some(Seg::Copied(n)) => *n += added,
                _ => self.segs.push_back(Seg::Copied(added)),
            }
        }
        r
    }

    /// Appends bytes without copying them.
    pub(crate) fn push_shared(&mut self, bytes: Bytes) {
        if bytes.is_empty() {
            return;
        }
        if self.segs.is_empty() {
            if self.segs.capacity() == 0 {
                self.segs = pool::reuse(&SPARE_SEGS).unwrap_or_default();
            }
            if !self.tail.is_empty() {
                self.segs.push_back(Seg::Copied(self.tail.len()));
            }
        }
        self.len += bytes.len();
        self.segs.push_back(Seg::Shared(bytes));
    }

    /// Drops everything queued and gives the buffers back.
    pub(crate) fn clear(&mut self) {
        pool::give(std::mem::take(&mut self.tail));
        if self.segs.capacity() > 0 {
            give_segs(std::mem::take(&mut self.segs));
        }
        self.len = 0;
    }

    /// Writes once; returns how many bytes went out.
    pub(crate) fn poll_write_once<W: AsyncWrite + Unpin>(
        &mut self,
        io: &mut W,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<usize>> {
        let r = if self.segs.is_empty() {
            Pin::new(&mut Retrying(io)).poll_write(cx, &self.tail)
        } else {
            let mut iov = [IoSlice::new(&[]); MAX_IOV];
            let mut at = 0;
            for (slot, seg) in iov.iter_mut().zip(&self.segs) {
                *slot = match seg {
                    Seg::Copied(n) => {
                        at += n;
                        IoSlice::new(&self.tail[at - n..at])
                    }
                    Seg::Shared(b) => IoSlice::new(b),
                };
            }
            let k = self.segs.len().min(MAX_IOV);
            Pin::new(&mut Retrying(io)).poll_write_vectored(cx, &iov[..k])
        };
        if r.is_pending() {
            // Waiting on the peer: hold memory in proportion to what is
            // left. The tail's bytes keep their order, so `segs` holds.
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
        if self.segs.is_empty() {
            self.tail.advance(n);
            return;
        }
        while n > 0 {
            let Some(front) = self.segs.front_mut() else {
                unreachable!("segments cover every queued byte");
            };
            let left = match front {
                Seg::Copied(k) => {
                    let m = (*k).min(n);
                    self.tail.advance(m);
                    *k -= m;
                    n -= m;
                    *k
                }
                Seg::Shared(b) => {
                    let m = b.len().min(n);
                    b.advance(m);
                    n -= m;
                    b.len()
                }
            };
            if left == 0 {
                self.segs.pop_front();
            }
        }
        if let [Seg::Copied(_)] = self.segs.make_contiguous() {
            // Only copied bytes are left: back to the plain form.
            self.segs.clear();
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
            // The spare went back to the pool; the headers wait in a buffer
            // of their size.
            assert!(ob.tail.capacity() <= 64, "{}", ob.tail.capacity());
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
        assert_eq!(ob.segs.capacity(), 0);
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
