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
