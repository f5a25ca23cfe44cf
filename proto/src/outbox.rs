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
mod tests {
    use super::*;

    /// What a writer taking at most `max` bytes per call, vectored, would
    /// receive for the whole queue.
    fn drain(q: &mut WriteQueue, max: usize, slices: usize) -> Vec<u8> {
        let mut wire = Vec::new();
        while !q.is_empty() {
            let mut iov = vec![IoSlice::new(&[]); slices];
            let k = q.slices(&mut iov);
            assert!(k > 0, "bytes wait, so a slice is given");
            let mut n = 0;
            for s in &iov[..k] {
                let take = s.len().min(max - n);
                wire.extend_from_slice(&s[..take]);
                n += take;
                if n == max {
                    break;
                }
            }
            q.consume(n);
        }
        wire
    }

    fn copied(q: &mut WriteQueue, b: &[u8]) {
        q.encode(|t| {
            t.extend_from_slice(b);
            Ok::<_, ()>(())
        })
        .unwrap();
    }

    /// A server's frame (or a client's, masked with a zero key when
    /// `masked`) of `len` bytes of `fill`: its header, its payload.
    fn frame(opcode: u8, len: usize, fill: u8, masked: bool) -> (Vec<u8>, Vec<u8>) {
        let mask = if masked { 0x80 } else { 0 };
        let mut head = vec![0x80 | opcode];
        match len {
            0..=125 => head.push(mask | len as u8),
            126..=0xffff => {
                head.push(mask | 126);
                head.extend_from_slice(&(len as u16).to_be_bytes());
            }
            _ => {
                head.push(mask | 127);
                head.extend_from_slice(&(len as u64).to_be_bytes());
            }
        }
        if masked {
            head.extend_from_slice(&[0; 4]);
        }
        (head, vec![fill; len])
    }

    /// The frames on `wire`, as (opcode, payload length, first payload
    /// byte); panics on a frame cut short.
    fn frames_on(mut wire: &[u8]) -> Vec<(u8, usize, Option<u8>)> {
        let mut out = Vec::new();
        while !wire.is_empty() {
            let (h, at) = FrameHeader::parse(wire).unwrap().expect("a whole header");
            let len = h.payload_len as usize;
            assert!(wire.len() >= at + len, "a frame cut short: {out:?}");
            out.push((h.opcode.as_u8(), len, wire[at..at + len].first().copied()));
            wire = &wire[at + len..];
        }
        out
    }

    /// Four frames, copied and shared, small and with 16- and 64-bit
    /// lengths; what they are on the wire.
    fn four_frames(q: &mut WriteQueue, masked: bool) -> Vec<(u8, usize, Option<u8>)> {
        let specs = [
            (1, 5, b'a', false),
            (2, 300, b'b', true),
            (1, 0, 0, false),
            (2, 70_000, b'd', true),
        ];
        for (opcode, len, fill, shared) in specs {
            let (head, payload) = frame(opcode, len, fill, masked);
            copied(q, &head);
            if shared {
                q.push_shared(Bytes::from(payload));
            } else {
                copied(q, &payload);
            }
        }
        specs
            .iter()
            .map(|&(op, len, fill, _)| (op, len, (len > 0).then_some(fill)))
            .collect()
    }

    #[test]
    fn frames_not_begun_are_dropped_and_the_one_being_written_finished() {
        let close = (8, 2, Some(0x03));
        for masked in [false, true] {
            let total = {
                let mut q = WriteQueue::new(64);
                four_frames(&mut q, masked);
                q.len()
            };
            // Cut points of the first write at and around every frame's
            // start and header, and through the large payload; a second
            // partial write before the drop.
            let starts = [0, 7, 311 + if masked { 8 } else { 0 }];
            let cuts = starts
                .iter()
                .flat_map(|&s| s..s + 20)
                .chain((0..total).step_by(997))
                .chain([total - 1])
                .filter(|&c| c < total);
            for first in cuts {
                for second in [0, 1, 5] {
                    let mut q = WriteQueue::new(64);
                    let sent = four_frames(&mut q, masked);
                    let mut wire = drain_some(&mut q, first);
                    let second = second.min(q.len());
                    wire.extend(drain_some(&mut q, second));
                    let written = wire.len();
                    let dropped = q.drop_unbegun();
                    // The close frame next.
                    copied(&mut q, &[0x88, 2, 0x03, 0xf3]);
                    wire.extend(drain(&mut q, 4093, 2));
                    let got = frames_on(&wire);
                    let (last, whole) = got.split_last().unwrap();
                    assert_eq!(*last, close, "{first}+{second}");
                    // The frames begun, whole and in order, and no other.
                    let begun = sent
                        .iter()
                        .scan(0, |end, f| {
                            let start = *end;
                            *end += frame(f.0, f.1, 0, masked).0.len() + f.1;
                            Some(start)
                        })
                        .take_while(|&start| start < written)
                        .count();
                    assert_eq!(whole, &sent[..begun], "{first}+{second} ({masked})");
                    assert_eq!(wire.len() - 4 + dropped, total, "{first}+{second}");
                }
            }
        }
    }

    /// Writes `n` bytes of the queue, in pieces of at most 100.
    fn drain_some(q: &mut WriteQueue, mut n: usize) -> Vec<u8> {
        let mut wire = Vec::new();
        while n > 0 {
            let mut iov = vec![IoSlice::new(&[]); MAX_SLICES];
            let k = q.slices(&mut iov);
            let mut took = 0;
            for s in &iov[..k] {
                let take = s.len().min(n.min(100) - took);
                wire.extend_from_slice(&s[..take]);
                took += take;
                if took == n.min(100) {
                    break;
                }
            }
            q.consume(took);
            n -= took;
        }
        wire
    }

    #[test]
    fn raw_bytes_at_the_front_are_finished_and_frames_behind_them_dropped() {
        let mut q = WriteQueue::new(64);
        q.copy_raw(b"HTTP/1.1 101 Switching Protocols\r\n\r\n");
        four_frames(&mut q, false);
        let mut wire = drain_some(&mut q, 10);
        assert!(q.drop_unbegun() > 0);
        wire.extend(drain(&mut q, 1000, 4));
        assert_eq!(wire, b"HTTP/1.1 101 Switching Protocols\r\n\r\n");
        // Written whole, the queue starts afresh: frames behind new raw
        // bytes are known again.
        assert!(q.is_empty());
        q.copy_raw(b"HTTP/1.1 101 ok\r\n\r\n");
        copied(&mut q, &[0x81, 1, b'x']);
        drain_some(&mut q, 21);
        assert_eq!(q.drop_unbegun(), 0, "the frame begun is kept");
        assert_eq!(drain(&mut q, 100, 1), [0x81, 1, b'x'][2..]);
    }

    #[test]
    fn raw_bytes_behind_frames_leave_everything_queued() {
        let mut q = WriteQueue::new(64);
        copied(&mut q, &[0x81, 1, b'x', 0x81, 1, b'y']);
        q.copy_raw(b"raw");
        drain_some(&mut q, 1);
        assert_eq!(q.drop_unbegun(), 0, "where frames begin is unknown");
        assert_eq!(drain(&mut q, 100, 1), b"\x01x\x81\x01yraw");
    }

    #[test]
    fn order_is_kept_across_partial_and_vectored_writes() {
        for max in [1, 3, 7, 100] {
            for slices in [1, 2, MAX_SLICES] {
                let mut q = WriteQueue::new(64);
                copied(&mut q, b"ab");
                q.push_shared(Bytes::from_static(b"CDE"));
                copied(&mut q, b"fg");
                copied(&mut q, b"h");
                q.push_shared(Bytes::from_static(b"IJ"));
                q.push_shared(Bytes::new());
                copied(&mut q, b"k");
                assert_eq!(q.len(), 11);
                assert_eq!(drain(&mut q, max, slices), b"abCDEfghIJk", "{max} {slices}");
                assert!(q.is_empty());
            }
        }
    }

    #[test]
    fn plain_bytes_go_out_as_one_slice() {
        let mut q = WriteQueue::new(64);
        copied(&mut q, b"abc");
        copied(&mut q, b"def");
        {
            let mut iov = [IoSlice::new(&[]); 4];
            assert_eq!(q.slices(&mut iov), 1);
            assert_eq!(&*iov[0], b"abcdef");
        }
        assert!(!q.consume(2));
        let mut iov = [IoSlice::new(&[]); 4];
        assert_eq!(q.slices(&mut iov), 1);
        assert_eq!(&*iov[0], b"cdef");
        assert!(q.consume(4));
    }

    #[test]
    fn a_write_past_the_queue_is_refused() {
        let mut q = WriteQueue::new(64);
        copied(&mut q, b"abc");
        let r = std::panic::catch_unwind(move || q.consume(4));
        assert!(r.is_err());
    }

    #[test]
    fn a_queue_given_only_shared_frames_has_no_buffer() {
        let mut q = WriteQueue::new(16 << 10);
        q.push_shared(Bytes::from(vec![1; 1000]));
        assert_eq!(q.tail.capacity(), 0);
        copied(&mut q, b"x");
        assert!(q.tail.capacity() >= 16 << 10);
    }

    fn n_slices(q: &WriteQueue) -> usize {
        let mut iov = [IoSlice::new(&[]); 8];
        q.slices(&mut iov)
    }

    #[test]
    fn copies_stay_one_piece_and_runs_between_shared_chunks_merge() {
        let mut q = WriteQueue::new(64);
        assert_eq!(n_slices(&q), 0, "nothing waits");
        assert_eq!(q.plain(), Some(&[][..]));
        copied(&mut q, b"ab");
        copied(&mut q, b"");
        copied(&mut q, b"cd");
        assert_eq!(q.plain(), Some(&b"abcd"[..]), "copies only: one piece");
        q.push_shared(Bytes::from_static(b"SHARED"));
        assert_eq!(q.plain(), None);
        copied(&mut q, b"");
        assert_eq!(n_slices(&q), 2, "an empty copy adds no piece");
        copied(&mut q, b"e");
        copied(&mut q, b"f");
        assert_eq!(n_slices(&q), 3, "copies after a chunk merge into one run");
        let mut iov = [IoSlice::new(&[]); 8];
        q.slices(&mut iov);
        assert_eq!(&*iov[2], b"ef");
        assert_eq!(q.slices(&mut []), 0, "no room, no slice");
    }

    #[test]
    fn a_drained_queue_is_reused_without_what_it_held() {
        let mut q = WriteQueue::new(64);
        copied(&mut q, b"ab");
        q.push_shared(Bytes::from_static(b"SHARED"));
        assert!(q.consume(8));
        copied(&mut q, b"x");
        assert_eq!(q.plain(), Some(&b"x"[..]), "no stale chunk");
        assert_eq!(drain(&mut q, 100, 8), b"x");
    }

    #[test]
    fn the_pool_counts_the_bytes_it_keeps() {
        let mut pool = QueuePool::new(PoolLimits {
            buffer_len: 1000,
            buffer_max: 1 << 20,
            count_max: 8,
            bytes_max: 1 << 20,
        });
        assert!(pool.is_empty());
        let mut a = pool.take();
        copied(&mut a, b"x");
        a.push_shared(Bytes::from_static(b"SHARED"));
        a.consume(7);
        let segs = a.segs.capacity() * std::mem::size_of::<Seg>();
        assert!(segs > 0, "the chunk list keeps its room");
        let a_cap = a.tail.capacity() + segs;
        assert_eq!(a.capacity(), a_cap);
        let mut b = pool.take();
        copied(&mut b, &[0; 3000]);
        b.consume(3000);
        let b_cap = b.capacity();
        pool.give(a);
        pool.give(b);
        assert!(!pool.is_empty());
        assert_eq!(pool.len(), 2);
        assert_eq!(pool.bytes(), a_cap + b_cap);
        let taken = pool.take();
        assert_eq!(pool.bytes(), a_cap + b_cap - taken.capacity());
    }

    #[test]
    fn a_copy_into_a_queue_without_a_buffer_takes_its_size() {
        let mut q = WriteQueue::new(16 << 10);
        q.copy(b"a small publish");
        assert!(q.tail.capacity() < 1024);
        q.copy(b" and more");
        assert_eq!(q.len(), 24);
        let mut iov = [IoSlice::new(&[]); 2];
        assert_eq!(q.slices(&mut iov), 1);
        assert_eq!(&*iov[0], b"a small publish and more");
    }

    #[test]
    fn a_blocked_queue_keeps_memory_in_proportion_to_what_waits() {
        let mut q = WriteQueue::new(96 << 10);
        copied(&mut q, &[7; 100]);
        q.push_shared(Bytes::from_static(b"shared"));
        copied(&mut q, b"end");
        assert!(!q.consume(50));
        assert!(q.fit_waiting(), "a large buffer for 53 bytes");
        assert!(q.tail.capacity() < 1024);
        assert!(!q.fit_waiting(), "moved once");
        let mut wire = vec![7; 50];
        wire.extend(b"shared");
        wire.extend(b"end");
        assert_eq!(drain(&mut q, 5, 3), wire, "order holds after the move");
        // Half full: kept where it is.
        let mut q = WriteQueue::new(1024);
        copied(&mut q, &[1; 600]);
        assert!(!q.fit_waiting());
    }

    #[test]
    fn the_pool_keeps_queues_up_to_its_count_and_bytes() {
        let limits = PoolLimits {
            buffer_len: 1000,
            buffer_max: 4000,
            count_max: 3,
            bytes_max: 2500,
        };
        let mut pool = QueuePool::new(limits);
        let mut qs: Vec<_> = (0..5).map(|_| pool.take()).collect();
        for q in &mut qs {
            copied(q, b"x");
        }
        for q in qs {
            pool.give(q);
        }
        assert_eq!(pool.len(), 2, "bytes bound");
        assert!(pool.bytes() <= 2500);
        let big = {
            let mut q = pool.take();
            copied(&mut q, &[0; 5000]);
            q
        };
        let before = pool.len();
        pool.give(big);
        assert_eq!(pool.len(), before, "a large buffer is not kept");
        let q = pool.take();
        assert!(q.is_empty() && q.tail.capacity() >= 1000, "reused whole");
        let unused: Vec<_> = (0..5).map(|_| pool.take()).collect();
        unused.into_iter().for_each(|q| pool.give(q));
        assert_eq!(pool.len(), 3, "count bound");
    }

    #[test]
    fn a_large_buffer_written_in_parts_is_not_kept_behind_a_small_view() {
        let limits = PoolLimits {
            buffer_len: 1000,
            buffer_max: 4000,
            count_max: 3,
            bytes_max: 1 << 20,
        };
        // The last write takes `last` bytes: what a view of the buffer
        // reports after it. Under `buffer_max`, the pool must still see
        // the 100 000-byte buffer behind it, and drop it.
        for last in [1, 999, 1000, 2500, 4000] {
            let mut pool = QueuePool::new(limits);
            let mut q = pool.take();
            copied(&mut q, &[5; 100_000]);
            assert!(!q.consume(100_000 - last));
            assert!(q.consume(last));
            pool.give(q);
            assert_eq!(pool.len(), 0, "last write of {last}: the buffer kept");
            assert_eq!(pool.bytes(), 0);
        }
    }

    #[test]
    fn a_partly_written_queue_is_reused_from_its_start() {
        let mut pool = QueuePool::new(PoolLimits {
            buffer_len: 1000,
            buffer_max: 4000,
            count_max: 3,
            bytes_max: 1 << 20,
        });
        let mut q = pool.take();
        copied(&mut q, &[1; 900]);
        q.consume(800);
        pool.give(q);
        let q = pool.take();
        assert!(q.tail.capacity() >= 1000);
    }
}
