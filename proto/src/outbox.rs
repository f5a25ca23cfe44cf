//! Bytes on their way to the peer, for every engine: a queue of frames in
//! order, small ones copied into one buffer and large shared ones (a
//! publish's frame, a large payload sent on as it was read) kept where
//! they are, and the pool that lends queues to connections while they have
//! something to write, so that an idle connection holds none.
//!
//! The engine asks the queue for the slices of its next write
//! ([`WriteQueue::slices`]), writes them however its transport does, and
//! says how much went ([`WriteQueue::consume`]). Nothing here touches a
//! socket.

use std::collections::VecDeque;
use std::io::IoSlice;

use bytes::{Buf, Bytes, BytesMut};

use crate::buffer::keeps;
use crate::header::{FrameHeader, MAX_HEADER_LEN};

/// At most this many slices go into one vectored write: what `writev`
/// takes cheaply, and more than a burst of publishes needs.
pub const MAX_SLICES: usize = 64;

/// Outgoing bytes in order. Copied bytes are gathered in `tail`; once a
/// shared chunk is queued, `segs` records how copied runs and chunks
/// interleave. With no chunk queued `segs` is empty and `tail` is all.
#[derive(Debug, Default)]
pub struct WriteQueue {
    segs: VecDeque<Seg>,
    tail: BytesMut,
    len: usize,
    /// Room given to `tail` when it has none and something is copied in.
    buffer_len: usize,
    /// `tail` was written from in part, so its start moved on: the pool
    /// moves it back when the queue is returned.
    advanced: bool,
    /// Bytes from the front to the end of the frame (or the block of bytes
    /// that are not frames) being written: 0 when the front begins one.
    /// Known without a list of boundaries because frames say their own
    /// length: a write that leaves part of the queue reads the headers it
    /// passes ([`consume`](Self::consume)); one that writes everything, the
    /// usual case, reads none.
    front_unit: usize,
    /// Bytes that are not frames were queued behind frames: where frames
    /// begin is no longer known, and nothing is dropped by
    /// [`drop_unbegun`](Self::drop_unbegun).
    unframed: bool,
}

#[derive(Debug)]
enum Seg {
    /// The next this many bytes of `tail`.
    Copied(usize),
    /// Bytes written from where they are.
    Shared(Bytes),
}

impl WriteQueue {
    /// An empty queue that makes room for `buffer_len` bytes when first
    /// copied into (none before: a queue given only shared frames needs
    /// no buffer of its own).
    pub fn new(buffer_len: usize) -> Self {
        WriteQueue {
            buffer_len,
            ..WriteQueue::default()
        }
    }

    /// Bytes waiting.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing waits.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Memory the queue holds of its own (not counting shared chunks).
    pub fn capacity(&self) -> usize {
        self.tail.capacity() + self.segs.capacity() * std::mem::size_of::<Seg>()
    }

    /// Appends whatever `f` writes into the copy buffer.
    #[inline]
    pub fn encode<T, E>(&mut self, f: impl FnOnce(&mut BytesMut) -> Result<T, E>) -> Result<T, E> {
        self.encode_with(true, f)
    }

    #[inline]
    fn encode_with<T, E>(
        &mut self,
        reserve: bool,
        f: impl FnOnce(&mut BytesMut) -> Result<T, E>,
    ) -> Result<T, E> {
        if reserve && self.tail.capacity() == 0 {
            self.tail.reserve(self.buffer_len);
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

    /// Appends a copy of `bytes`, making no more room than they need when
    /// the queue has no buffer: a small frame copied to thousands of
    /// connections (a publish) costs each its size, not a buffer.
    pub fn copy(&mut self, bytes: &[u8]) {
        let _ = self.encode_with(false, |b| {
            b.extend_from_slice(bytes);
            Ok::<_, ()>(())
        });
    }

    /// Appends a copy of bytes that are not WebSocket frames (the
    /// handshake's response), which come before any frame.
    pub fn copy_raw(&mut self, bytes: &[u8]) {
        if self.len == self.front_unit {
            // Nothing but the unit being written waits: the bytes join it.
            self.front_unit += bytes.len();
        } else {
            self.unframed = true;
        }
        self.copy(bytes);
    }

    /// Appends `bytes` without copying them.
    pub fn push_shared(&mut self, bytes: Bytes) {
        if bytes.is_empty() {
            return;
        }
        if self.segs.is_empty() && !self.tail.is_empty() {
            self.segs.push_back(Seg::Copied(self.tail.len()));
        }
        self.len += bytes.len();
        self.segs.push_back(Seg::Shared(bytes));
    }

    /// Fills `out` with the next bytes to write, in order; how many slices
    /// it used (0 when nothing waits). One slice unless shared chunks are
    /// queued, so a transport without vectored writes loses nothing.
    pub fn slices<'a>(&'a self, out: &mut [IoSlice<'a>]) -> usize {
        if self.segs.is_empty() {
            if self.tail.is_empty() || out.is_empty() {
                return 0;
            }
            out[0] = IoSlice::new(&self.tail);
            return 1;
        }
        let mut at = 0;
        let mut k = 0;
        for (slot, seg) in out.iter_mut().zip(&self.segs) {
            *slot = match seg {
                Seg::Copied(n) => {
                    at += n;
                    IoSlice::new(&self.tail[at - n..at])
                }
                Seg::Shared(b) => IoSlice::new(b),
            };
            k += 1;
        }
        k
    }

    /// The bytes waiting, when they are all in one piece (nothing shared
    /// is queued): the usual case, written without building a slice list.
    #[inline]
    pub fn plain(&self) -> Option<&[u8]> {
        self.segs.is_empty().then_some(&self.tail[..])
    }

    /// `n` bytes from the front were written (from one slice or, by a
    /// vectored write, from several). Returns whether all is written.
    ///
    /// # Panics
    /// If `n` is more than [`len`](Self::len): the transport said it wrote
    /// bytes it was never given.
    #[inline]
    pub fn consume(&mut self, n: usize) -> bool {
        assert!(n <= self.len, "wrote {n} bytes of {}", self.len);
        if n == self.len {
            // All written, the usual case: the buffer is kept whole (not
            // advanced), so it is reused from its start.
            self.clear();
            return true;
        }
        self.consume_part(n);
        false
    }

    fn consume_part(&mut self, mut n: usize) {
        self.pass_frames(n);
        self.len -= n;
        self.advanced = true;
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

    /// Moves the end of the front unit past the `n` bytes about to be
    /// written, reading the headers of the frames they reach into.
    fn pass_frames(&mut self, n: usize) {
        if self.unframed {
            return;
        }
        while self.front_unit < n {
            match self
                .frame_len_at(self.front_unit)
                .and_then(|len| self.front_unit.checked_add(len))
            {
                Some(end) => self.front_unit = end,
                None => {
                    // Not a frame's header: only frames and a first block
                    // of raw bytes are queued, so this is not reached.
                    self.unframed = true;
                    return;
                }
            }
        }
        self.front_unit -= n;
    }

    /// The whole length (header and payload) of the frame whose header
    /// begins `at` bytes from the front.
    fn frame_len_at(&self, at: usize) -> Option<usize> {
        let mut head = [0u8; MAX_HEADER_LEN];
        let got = self.peek(at, &mut head);
        let (header, header_len) = FrameHeader::parse(&head[..got]).ok()??;
        usize::try_from(header.payload_len)
            .ok()?
            .checked_add(header_len)
    }

    /// Copies the bytes from `at` bytes from the front into `out`, as many
    /// as it holds or are queued; how many.
    fn peek(&self, mut at: usize, out: &mut [u8]) -> usize {
        let mut got = 0;
        let mut take = |piece: &[u8]| {
            if at >= piece.len() {
                at -= piece.len();
                return false;
            }
            let k = (piece.len() - at).min(out.len() - got);
            out[got..got + k].copy_from_slice(&piece[at..at + k]);
            got += k;
            at = 0;
            got == out.len()
        };
        if self.segs.is_empty() {
            take(&self.tail);
        } else {
            let mut copied = 0;
            for seg in &self.segs {
                let piece = match seg {
                    Seg::Copied(n) => {
                        copied += n;
                        &self.tail[copied - n..copied]
                    }
                    Seg::Shared(b) => &b[..],
                };
                if take(piece) {
                    break;
                }
            }
        }
        got
    }

    /// Drops the frames not begun yet, keeping the rest of the one being
    /// written (a peer cannot be sent half a frame and then another):
    /// a connection given up for a peer that reads too slowly has its
    /// close frame go out next. Returns the bytes dropped (none when raw
    /// bytes were queued behind frames: where frames begin is unknown).
    pub fn drop_unbegun(&mut self) -> usize {
        if self.unframed || self.front_unit >= self.len {
            return 0;
        }
        let keep = self.front_unit;
        let dropped = self.len - keep;
        self.len = keep;
        if self.segs.is_empty() {
            self.tail.truncate(keep);
            return dropped;
        }
        let (mut left, mut copied, mut kept) = (keep, 0, 0);
        for seg in self.segs.iter_mut() {
            if left == 0 {
                break;
            }
            let m = match seg {
                Seg::Copied(k) => {
                    *k = (*k).min(left);
                    copied += *k;
                    *k
                }
                Seg::Shared(b) => {
                    b.truncate(left);
                    b.len()
                }
            };
            left -= m;
            kept += 1;
        }
        self.segs.truncate(kept);
        self.tail.truncate(copied);
        if let [] | [Seg::Copied(_)] = self.segs.make_contiguous() {
            self.segs.clear();
        }
        dropped
    }

    /// Drops everything queued, keeping the buffers.
    #[inline]
    pub fn clear(&mut self) {
        self.front_unit = 0;
        self.unframed = false;
        self.tail.clear();
        // Not a call per write when, as usual, nothing shared was queued.
        if !self.segs.is_empty() {
            self.segs.clear();
        }
        self.len = 0;
    }

    /// The transport took no more: the queue now waits on the peer. Moves
    /// the copied bytes to a buffer of their size when the one they are in
    /// is over [`KEEP_FACTOR`](crate::buffer::KEEP_FACTOR) times larger,
    /// so a connection's memory while it waits is in proportion to what it
    /// has to write. Returns whether it moved them.
    pub fn fit_waiting(&mut self) -> bool {
        if keeps(self.tail.len(), self.tail.capacity()) {
            return false;
        }
        let exact = if self.tail.is_empty() {
            BytesMut::new()
        } else {
            BytesMut::from(&self.tail[..])
        };
        // The copied bytes keep their order, so `segs` still holds. The
        // old buffer is freed: it was written from, so no pool takes it.
        self.tail = exact;
        true
    }
}

/// Queues lent to connections while they have bytes to write: a busy
/// connection allocates none, an idle one holds none. Boxed, so a
/// connection without one pays a pointer.
#[derive(Debug)]
pub struct QueuePool {
    // Boxed: lent as they are, a connection holds a pointer.
    #[allow(clippy::vec_box)]
    queues: Vec<Box<WriteQueue>>,
    bytes: usize,
    limits: PoolLimits,
}

/// How much a [`QueuePool`] keeps.
#[derive(Debug, Clone, Copy)]
pub struct PoolLimits {
    /// The copy buffer a new queue gets when first copied into.
    pub buffer_len: usize,
    /// A returned queue whose buffer is larger is dropped, not kept.
    pub buffer_max: usize,
    /// Queues kept at most.
    pub count_max: usize,
    /// Bytes of buffers kept at most.
    pub bytes_max: usize,
}

impl QueuePool {
    /// An empty pool.
    pub const fn new(limits: PoolLimits) -> Self {
        QueuePool {
            queues: Vec::new(),
            bytes: 0,
            limits,
        }
    }

    /// An empty queue, kept or new.
    pub fn take(&mut self) -> Box<WriteQueue> {
        match self.queues.pop() {
            Some(q) => {
                self.bytes -= q.capacity();
                q
            }
            None => Box::new(WriteQueue::new(self.limits.buffer_len)),
        }
    }

    /// Takes back a queue; keeps it if it is empty, not large, and the
    /// pool not full.
    pub fn give(&mut self, mut q: Box<WriteQueue>) {
        q.clear();
        // Moves a buffer written from in part back to its start (empty, so
        // nothing is copied; never allocates), so that `capacity` is the
        // whole allocation's. Asking for one byte more than the view has
        // is what makes `try_reclaim` move: asked for less, it answers
        // from the view alone, and a view near the end of a large
        // message's buffer (the last write of it took under
        // `buffer_max`) was kept as a small queue holding the whole
        // message. Only when advanced: a queue written whole was cleared
        // at its start already.
        if std::mem::take(&mut q.advanced) {
            let _ = q.tail.try_reclaim(q.tail.capacity() + 1);
        }
        let cap = q.capacity();
        if cap <= self.limits.buffer_max
            && self.bytes + cap <= self.limits.bytes_max
            && self.queues.len() < self.limits.count_max
        {
            self.bytes += cap;
            self.queues.push(q);
        }
    }

    /// Queues kept.
    pub fn len(&self) -> usize {
        self.queues.len()
    }

    /// Whether none are kept.
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// Bytes of buffers kept.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
#[path = "outbox_tests.rs"]
mod tests;
