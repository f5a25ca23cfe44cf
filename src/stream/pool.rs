//! Spare buffers kept per thread. A busy connection reads into and writes
//! from buffers taken here instead of paying a malloc and a free per read and
//! per flush, and gives them back as soon as it has nothing in them, so an
//! idle connection holds none.

use std::cell::RefCell;
use std::thread::LocalKey;

use bytes::BytesMut;

use crate::proto::inbox::ReadMemory;

/// The size of every pooled buffer: room for a 64 KiB message with its
/// header and what follows it, so that messages of the common 64 KiB size
/// are read in place instead of outgrowing their buffer by a header.
pub(crate) const BUF_LEN: usize = 96 << 10;

/// A read into an empty buffer goes to the stack first, this large: the
/// inbox keeps what came in memory of its size (which is what a small
/// message needs anyway), and a read that finds nothing costs no buffer.
pub(crate) const STACK_READ: usize = 4 << 10;
/// Items kept per thread and per kind: one connection is polled at a time
/// and needs at most one buffer to read into and one to write from; the
/// rest are freed.
const KEEP: usize = 4;

/// A per-thread list of spare items of one kind.
pub(crate) type Spares<T> = LocalKey<RefCell<Vec<T>>>;

/// Reads of at most this many bytes are copied into the thread's arena.
pub(crate) const ARENA_MAX: usize = 2 << 10;
/// The arena's chunks: a few hundred small messages per allocation, and
/// little memory kept alive by one message held long after the others.
const ARENA_CHUNK: usize = 8 << 10;

thread_local! {
    static SPARE: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
    /// What is left of the current arena chunk.
    static ARENA: RefCell<Option<BytesMut>> = const { RefCell::new(None) };
}

/// `bytes` (at most [`ARENA_MAX`]) copied into the thread's arena: memory
/// shared with other small reads of this thread, so that a small message
/// costs a reference count instead of an allocation and a free. The chunk
/// is freed when the last message split off it is dropped. `None` while the
/// thread is shutting down.
pub(crate) fn arena_copy(bytes: &[u8]) -> Option<BytesMut> {
    debug_assert!(bytes.len() <= ARENA_MAX);
    ARENA
        .try_with(|arena| {
            let mut arena = arena.try_borrow_mut().ok()?;
            let chunk = match arena.as_mut() {
                Some(chunk) if chunk.capacity() >= bytes.len() => chunk,
                // Dropping the old chunk's view leaves it to the messages.
                _ => arena.insert(BytesMut::with_capacity(ARENA_CHUNK)),
            };
            chunk.extend_from_slice(bytes);
            Some(chunk.split())
        })
        .ok()
        .flatten()
}

/// A kept item, if the thread has one (none while the list is in use or
/// the thread is shutting down).
pub(crate) fn reuse<T: 'static>(spares: &'static Spares<T>) -> Option<T> {
    spares
        .try_with(|s| s.try_borrow_mut().ok()?.pop())
        .ok()
        .flatten()
}

/// Keeps `item` unless the thread already keeps enough of its kind.
pub(crate) fn keep<T: 'static>(spares: &'static Spares<T>, item: T) {
    let _ = spares.try_with(|s| {
        if let Ok(mut s) = s.try_borrow_mut() {
            if s.len() < KEEP {
                s.push(item);
            }
        }
    });
}

/// An empty buffer with room for [`BUF_LEN`] bytes (not zero-filled).
pub(crate) fn take() -> BytesMut {
    reuse(&SPARE).unwrap_or_else(|| BytesMut::with_capacity(BUF_LEN))
}

/// Keeps `buf` for reuse if its memory is of the pooled size; otherwise
/// drops it. The caller guarantees that nothing else shares that memory
/// (`BytesMut` cannot tell without a reallocation of its own).
pub(crate) fn give(mut buf: BytesMut) {
    buf.clear();
    // Too large: succeeds when the memory behind the view (it is moved back
    // to the start of its allocation here) could hold twice a spare.
    if buf.try_reclaim(2 * BUF_LEN + 1) {
        return;
    }
    // Too small, unless it is a view that can be moved back to the start.
    if !buf.try_reclaim(BUF_LEN) {
        return;
    }
    keep(&SPARE, buf);
}

/// The thread's spares and arena, lent to a connection's inbox.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ThreadMemory;

impl ReadMemory for ThreadMemory {
    #[inline]
    fn take_spare(&mut self) -> BytesMut {
        take()
    }

    #[inline]
    fn give_spare(&mut self, buf: BytesMut) {
        give(buf)
    }

    #[inline]
    fn spare_len(&self) -> usize {
        BUF_LEN
    }

    #[inline]
    fn scratch_len(&self) -> usize {
        STACK_READ
    }

    #[inline]
    fn arena_copy(&mut self, bytes: &[u8]) -> Option<BytesMut> {
        if bytes.len() > ARENA_MAX {
            return None;
        }
        arena_copy(bytes)
    }
}

/// How many spares this thread holds.
#[cfg(test)]
pub(crate) fn pooled() -> usize {
    SPARE.with(|s| s.borrow().len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_buffer_is_taken_again_without_allocating() {
        let buf = take();
        let ptr = buf.as_ptr();
        give(buf);
        let again = take();
        assert_eq!(again.as_ptr(), ptr);
        assert!(again.is_empty());
        assert!(again.capacity() >= BUF_LEN);
    }

    #[test]
    fn a_view_into_a_large_allocation_is_not_kept() {
        while pooled() > 0 {
            drop(take());
        }
        // What a 600 000-byte frame leaves behind: a view of the rest of a
        // larger allocation, itself of about a spare's size.
        let mut big = BytesMut::with_capacity(600_000 + BUF_LEN + 100);
        big.resize(600_000, 0);
        let msg = big.split().freeze();
        drop(msg);
        assert!(big.capacity() > BUF_LEN && big.capacity() <= 2 * BUF_LEN);
        give(big);
        assert_eq!(pooled(), 0);
    }

    #[test]
    fn a_view_moved_back_to_its_start_is_kept() {
        while pooled() > 0 {
            drop(take());
        }
        let mut buf = take();
        buf.extend_from_slice(&[1; 1000]);
        let msg = buf.split_to(1000).freeze();
        drop(msg);
        give(buf);
        assert_eq!(pooled(), 1);
        assert!(take().capacity() >= BUF_LEN);
    }

    #[test]
    fn small_and_huge_buffers_are_not_kept() {
        while pooled() > 0 {
            drop(take());
        }
        give(BytesMut::with_capacity(100));
        give(BytesMut::with_capacity(1 << 20));
        assert_eq!(pooled(), 0);
    }

    #[test]
    fn at_most_keep_buffers_are_kept() {
        let bufs: Vec<_> = (0..KEEP + 3).map(|_| take()).collect();
        bufs.into_iter().for_each(give);
        assert_eq!(pooled(), KEEP);
    }
}
