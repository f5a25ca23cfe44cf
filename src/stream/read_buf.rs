//! Read-buffer sizing: how much room to make before a read and how much
//! memory to keep after it, in one place.
//!
//! The rules: an idle connection holds no buffer; a connection that has
//! nothing buffered reads into the stack and copies what came into the
//! thread's arena when it is small (small messages, the common case, cost no
//! allocation of their own; the copy goes to memory of its own size if the
//! connection waits with part of a frame), else into a buffer of its size;
//! once such a read comes full, input goes to a per-thread spare until the
//! connection waits, and a read into an empty spare keeps it only if it
//! filled a quarter of it; a frame being
//! received gets room in proportion to what has arrived (never to what its
//! header announced), all of it once a quarter is here; and whenever a read
//! waits, the buffer holds at most four times its bytes.
//!
//! Under a memory budget the buffer's capacity is recorded in the
//! connection's account after every change, and growth is asked for first:
//! when the budget refuses, the read waits (see [`ReadBuf::take_denied`]).

use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{BufMut, BytesMut};
use tokio::io::AsyncRead;
use tokio_util::io::poll_read_buf;

use crate::proto::budget::{BudgetAccount, Grant, Held};
use crate::retry::Retrying;
use crate::stream::pool;

pub(crate) use crate::proto::buffer::READ_CHUNK;
use crate::proto::buffer::growth;

/// A read into an empty buffer goes to the stack first, this large: what
/// comes is copied to a buffer of its size, which is what a small message
/// needs anyway, and a read that finds nothing costs no buffer at all.
const STACK_READ: usize = 4 << 10;

/// The receiving side's buffer and its sizing policy.
#[derive(Debug, Default)]
pub(crate) struct ReadBuf {
    buf: BytesMut,
    /// Messages handed out may share the buffer's memory, so it must not go
    /// back to the pool.
    shared: bool,
    /// The memory budget refused to let the buffer grow: the last read
    /// returned `Pending` without registering a waker.
    // Boxed: rare, and an idle connection should be small.
    denied: Option<Box<Grant>>,
    /// The last read into an empty buffer filled the stack: input comes in
    /// bulk, so the next one goes straight to a spare.
    bulk: bool,
    /// The buffer is a view into the thread's arena (see
    /// [`pool::arena_copy`]): it must not outlive the read that made it,
    /// or a frame left unfinished would keep a whole chunk alive.
    arena: bool,
}

impl ReadBuf {
    /// Starts with `initial`, bytes already read past the handshake.
    pub(crate) fn new(initial: BytesMut) -> Self {
        ReadBuf {
            buf: initial,
            shared: false,
            denied: None,
            bulk: false,
            arena: false,
        }
    }

    /// The bytes to decode. Decoding may split messages off it; call
    /// [`handed_out`](Self::handed_out) when it did.
    pub(crate) fn bytes(&mut self) -> &mut BytesMut {
        &mut self.buf
    }

    /// A message split off the buffer may share its memory.
    #[inline]
    pub(crate) fn handed_out(&mut self) {
        if self.buf.capacity() == 0 {
            // The message took the allocation's last byte: this empty view
            // can hold nothing more, and keeping it would keep the whole
            // allocation alive until the next read. The decoder hands such
            // a payload the buffer whole (`take_payload`); this guards any
            // other split.
            self.buf = BytesMut::new();
            self.shared = false;
            self.arena = false;
            return;
        }
        self.shared = true;
    }

    /// Drops everything, memory too.
    pub(crate) fn release(&mut self, account: &mut BudgetAccount) {
        self.buf = BytesMut::new();
        self.shared = false;
        self.arena = false;
        account.release(Held::ReadBuffer);
    }

    /// Records the buffer's memory in `account` (after decoding split
    /// bytes off it, or any other change).
    #[inline]
    pub(crate) fn sync(&self, account: &mut BudgetAccount) {
        if account.is_on() {
            account.set(Held::ReadBuffer, self.buf.capacity());
        }
    }

    /// After a read returned `Pending`: set if it did so because the memory
    /// budget refused room for it (no waker was registered then; the caller
    /// waits for the budget instead).
    pub(crate) fn take_denied(&mut self) -> Option<Grant> {
        self.denied.take().map(|g| *g)
    }

    /// Under a budget: records memory that came back without asking
    /// (reclaimed after messages sharing it were dropped); if the budget has
    /// no room for it, keeps only a buffer the size of the bytes held.
    fn settle(&mut self, account: &mut BudgetAccount) {
        if !account.is_on() {
            return;
        }
        if account.try_set(Held::ReadBuffer, self.buf.capacity()) != Grant::Granted {
            let exact = BytesMut::from(&self.buf[..]);
            if !std::mem::take(&mut self.shared) && self.buf.capacity() <= pool::BUF_LEN {
                pool::give(std::mem::replace(&mut self.buf, exact));
            } else {
                self.buf = exact;
            }
            self.arena = false;
            account.set(Held::ReadBuffer, self.buf.capacity());
        }
    }

    /// Reads more input. `frame_left(buffered)` says how many more payload
    /// bytes the frame being received needs beyond `buffered`, if a payload
    /// is being received. A buffer with nothing in it reads into the free
    /// room of its own memory when there is enough (after a large message),
    /// else into a per-thread spare, and keeps that only if the read filled
    /// a quarter of it.
    ///
    /// Under a memory budget (`account`), growth is asked for first; when
    /// it is refused and the buffer has no room left, this returns
    /// `Pending` without registering a waker and
    /// [`take_denied`](Self::take_denied) says why.
    pub(crate) fn poll_read<R: AsyncRead + Unpin>(
        &mut self,
        io: &mut R,
        cx: &mut Context<'_>,
        account: &mut BudgetAccount,
        frame_left: impl Fn(usize) -> Option<usize>,
    ) -> Poll<io::Result<usize>> {
        let fresh = self.buf.is_empty();
        if fresh {
            // (No memory at all, the usual case after a small message, has
            // nothing to reclaim: not worth the call.)
            if self.buf.capacity() == 0 || !self.buf.try_reclaim(READ_CHUNK) {
                if !self.bulk {
                    return self.poll_read_stack(io, cx, account, frame_left(0));
                }
                // Drops our share of the last burst; messages handed out keep theirs.
                self.buf = pool::take();
                self.shared = false;
                self.arena = false;
            }
            self.settle(account);
        } else if account.is_on() {
            if let Err(denied) = self.reserve_budgeted(frame_left(self.buf.len()), account) {
                if self.buf.capacity() == self.buf.len() {
                    self.denied = Some(Box::new(denied));
                    return Poll::Pending;
                }
            }
        } else {
            self.reserve(frame_left(self.buf.len()));
        }
        // Mid-payload, read little past the frame's end: whatever follows it
        // is moved to the front of the buffer when the next frame needs room.
        let limit =
            frame_left(self.buf.len()).map_or(usize::MAX, |want| want.saturating_add(READ_CHUNK));
        let r = poll_read_buf(
            Pin::new(&mut Retrying(io)),
            cx,
            &mut (&mut self.buf).limit(limit),
        );
        match r {
            Poll::Ready(Ok(n)) if n > 0 => {
                if fresh && n < self.buf.capacity() / 4 {
                    self.bulk = false;
                    self.fit(account);
                }
            }
            // Waiting, at EOF or failed: keep only what is in proportion, so
            // a peer that sends a frame slowly (or never finishes one) costs
            // what it sent, not what it announced.
            _ => self.fit(account),
        }
        self.sync(account);
        r
    }

    /// A read into an empty buffer by way of the stack: a buffer is made
    /// only for bytes that came, of their size. A read that fills the stack
    /// moves them to a spare and marks the input as bulk.
    fn poll_read_stack<R: AsyncRead + Unpin>(
        &mut self,
        io: &mut R,
        cx: &mut Context<'_>,
        account: &mut BudgetAccount,
        frame_left: Option<usize>,
    ) -> Poll<io::Result<usize>> {
        // Memory a handed-out message may still use: drop our share, as
        // taking a spare would (an empty view of no capacity holds a share
        // too).
        self.buf = BytesMut::new();
        self.shared = false;
        self.arena = false;
        let mut stack = [MaybeUninit::<u8>::uninit(); STACK_READ];
        let len = frame_left.map_or(STACK_READ, |want| {
            want.saturating_add(READ_CHUNK).min(STACK_READ)
        });
        let mut into = tokio::io::ReadBuf::uninit(&mut stack[..len]);
        ready!(Pin::new(&mut Retrying(io)).poll_read(cx, &mut into))?;
        let got = into.filled();
        self.bulk = got.len() == STACK_READ;
        if self.bulk {
            // More is likely waiting: it comes into a spare, which goes back
            // when the connection waits (see `fit`), so that a burst is read
            // in a few large reads rather than grown 4 KiB at a time.
            self.buf = pool::take();
            self.buf.extend_from_slice(got);
            self.settle(account);
        } else if !got.is_empty() {
            // Small messages, the common case, come out of the thread's
            // arena: no allocation of their own.
            let view = (got.len() <= pool::ARENA_MAX)
                .then(|| pool::arena_copy(got))
                .flatten();
            self.arena = view.is_some();
            self.shared = self.arena;
            self.buf = view.unwrap_or_else(|| BytesMut::from(got));
        }
        self.sync(account);
        Poll::Ready(Ok(got.len()))
    }

    /// Keeps the memory in proportion to the bytes held (at most four
    /// times); called whenever the connection is about to wait.
    pub(crate) fn fit(&mut self, account: &mut BudgetAccount) {
        if std::mem::take(&mut self.arena) {
            // Waiting with part of a frame: keep those bytes in memory of
            // their own rather than the arena's chunk.
            self.buf = if self.buf.is_empty() {
                BytesMut::new()
            } else {
                BytesMut::from(&self.buf[..])
            };
            self.shared = false;
            self.sync(account);
            return;
        }
        if pool::fit(&mut self.buf, self.shared) {
            self.shared = false;
            self.sync(account);
        }
    }

    /// [`reserve`](Self::reserve) under a memory budget: the same sizing,
    /// asked of the budget before anything is allocated, into a buffer of
    /// exactly the size granted; if the budget has less room, as much as it
    /// has (at least what the next read needs). `Err` when refused.
    fn reserve_budgeted(
        &mut self,
        frame_left: Option<usize>,
        account: &mut BudgetAccount,
    ) -> Result<(), Grant> {
        let len = self.buf.len();
        let spare = self.buf.capacity() - len;
        let Some(mut additional) = growth(len, spare, frame_left) else {
            return Ok(());
        };
        let min_spare = frame_left.unwrap_or(READ_CHUNK).clamp(1, READ_CHUNK);
        // The old buffer lives on while its bytes are copied: ask for both.
        let old_cap = self.buf.capacity();
        let mut grant = account.try_set(Held::ReadBuffer, old_cap + len + additional);
        if grant != Grant::Granted {
            let smaller = additional.min(account.room().saturating_sub(len).max(min_spare));
            if smaller < additional {
                additional = smaller;
                grant = account.try_set(Held::ReadBuffer, old_cap + len + additional);
            }
        }
        if grant != Grant::Granted {
            return Err(grant);
        }
        let mut bigger = BytesMut::with_capacity(len + additional);
        bigger.extend_from_slice(&self.buf);
        let old = std::mem::replace(&mut self.buf, bigger);
        self.arena = false;
        if !std::mem::take(&mut self.shared) && old.capacity() <= pool::BUF_LEN {
            pool::give(old);
        }
        account.set(Held::ReadBuffer, self.buf.capacity());
        Ok(())
    }

    /// Makes room for the next read of a frame that needs `frame_left` more
    /// bytes (`None`: its size is not known yet).
    fn reserve(&mut self, frame_left: Option<usize>) {
        let len = self.buf.len();
        let spare = self.buf.capacity() - len;
        let want = frame_left.unwrap_or(READ_CHUNK).max(1);
        if spare < want && self.buf.try_reclaim(want) {
            // The memory of messages already handed out and dropped holds the
            // whole frame: the few bytes buffered moved to its front.
            return;
        }
        // The core's rule (`proto::buffer::growth`): memory stays within
        // four times what the peer actually sent.
        let Some(additional) = growth(len, spare, frame_left) else {
            return;
        };
        if self.buf.capacity() <= pool::BUF_LEN {
            // Outgrowing a spare: move to a buffer of our own and give the
            // spare back, rather than reallocating it away, so the spares
            // stay put for the thread's life.
            let mut bigger = BytesMut::with_capacity(len + additional);
            bigger.extend_from_slice(&self.buf);
            let spare = std::mem::replace(&mut self.buf, bigger);
            self.arena = false;
            if !std::mem::take(&mut self.shared) {
                pool::give(spare);
            }
        } else {
            self.buf.reserve(additional);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Waker;

    /// A reader that has `data` and then waits.
    struct Trickle<'a>(&'a [u8]);

    impl AsyncRead for Trickle<'_> {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            if self.0.is_empty() {
                return Poll::Pending;
            }
            let n = self.0.len().min(buf.remaining());
            buf.put_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Poll::Ready(Ok(()))
        }
    }

    fn read(rb: &mut ReadBuf, data: &[u8], frame_left: impl Fn(usize) -> Option<usize>) -> usize {
        let mut cx = Context::from_waker(Waker::noop());
        let mut none = BudgetAccount::new(None);
        match rb.poll_read(&mut Trickle(data), &mut cx, &mut none, frame_left) {
            Poll::Ready(Ok(n)) => n,
            other => panic!("{other:?}"),
        }
    }

    fn wait(rb: &mut ReadBuf) {
        let mut cx = Context::from_waker(Waker::noop());
        assert!(
            rb.poll_read(
                &mut Trickle(&[]),
                &mut cx,
                &mut BudgetAccount::new(None),
                |_| None
            )
            .is_pending()
        );
    }

    /// A buffer whose input has come in bulk: empty, it reads into a spare.
    fn bulk() -> ReadBuf {
        ReadBuf {
            bulk: true,
            ..ReadBuf::default()
        }
    }

    fn empty_pool() {
        while pool::pooled() > 0 {
            drop(pool::take());
        }
    }

    #[test]
    fn a_small_read_into_an_empty_buffer_takes_no_spare() {
        empty_pool();
        let spare = pool::take();
        pool::give(spare);
        let mut rb = ReadBuf::default();
        assert_eq!(read(&mut rb, &[9; 22], |_| None), 22);
        assert_eq!(rb.bytes().capacity(), 22, "a buffer of exactly what came");
        assert_eq!(pool::pooled(), 1, "the spare was not taken");
        rb.bytes().clear();
        wait(&mut rb);
        assert_eq!(pool::pooled(), 1);
        assert_eq!(rb.buf.capacity(), 0);
    }

    #[test]
    fn small_reads_share_the_threads_arena_and_larger_ones_do_not() {
        pool::new_arena_chunk();
        let (mut a, mut b, mut c) = (ReadBuf::default(), ReadBuf::default(), ReadBuf::default());
        read(&mut a, &[1; 22], |_| None);
        read(&mut b, &[2; pool::ARENA_MAX], |_| None);
        read(&mut c, &[3; pool::ARENA_MAX + 1], |_| None);
        assert!(a.arena && b.arena && !c.arena);
        assert!(a.shared && b.shared, "never given to the pool");
        // One after the other in one chunk: no allocation for the second.
        assert_eq!(b.bytes().as_ptr(), a.bytes()[22..].as_ptr());
        assert_eq!(c.bytes().capacity(), pool::ARENA_MAX + 1, "its own buffer");
        let msg = a.bytes().split_to(22).freeze();
        // The chunk outlives the arena's interest in it while a message
        // holds it.
        pool::new_arena_chunk();
        drop(b);
        let mut d = ReadBuf::default();
        read(&mut d, &[4; 8], |_| None);
        assert_eq!(&msg[..], &[1; 22][..]);
        assert_eq!(&d.bytes()[..], &[4; 8][..]);
    }

    #[test]
    fn part_of_a_frame_waits_in_memory_of_its_own_not_the_arena() {
        pool::new_arena_chunk();
        let mut rb = ReadBuf::default();
        read(&mut rb, &[6; 10], |_| None);
        let in_arena = rb.bytes().as_ptr();
        rb.fit(&mut BudgetAccount::new(None));
        assert!(!rb.arena && !rb.shared);
        assert_ne!(rb.bytes().as_ptr(), in_arena, "copied out");
        assert_eq!(&rb.bytes()[..], &[6; 10][..]);
        assert_eq!(rb.bytes().capacity(), 10);
        // Taken whole, then waiting: nothing held.
        read(&mut ReadBuf::default(), &[0; 3], |_| None);
        let mut rb = ReadBuf::default();
        read(&mut rb, &[7; 12], |_| None);
        drop(std::mem::take(rb.bytes()));
        wait(&mut rb);
        assert_eq!(rb.buf.capacity(), 0);
        assert!(!rb.arena);
    }

    #[test]
    fn reads_that_fill_the_stack_go_to_a_spare_until_they_come_small() {
        let mut rb = ReadBuf::default();
        let input = vec![4; 3 * STACK_READ];
        assert_eq!(read(&mut rb, &input, |_| None), STACK_READ);
        assert!(rb.bulk);
        assert!(rb.buf.capacity() >= pool::BUF_LEN, "moved to a spare");
        assert_eq!(&rb.bytes()[..], &input[..STACK_READ]);
        // Not empty: the rest comes into the same buffer.
        assert_eq!(read(&mut rb, &input, |_| None), input.len());
        rb.bytes().clear();
        // Waiting: the spare goes back.
        wait(&mut rb);
        assert_eq!(rb.buf.capacity(), 0);
        // Empty and bulk: straight into a spare, whole, and kept when well
        // used.
        let burst = vec![5; pool::BUF_LEN / 2];
        assert_eq!(read(&mut rb, &burst, |_| None), burst.len());
        assert!(rb.buf.capacity() >= pool::BUF_LEN, "read into a spare");
        assert!(rb.bulk);
        rb.bytes().clear();
        // A small read into a spare: back to the stack next time.
        assert_eq!(read(&mut rb, &[1; 10], |_| None), 10);
        assert!(!rb.bulk);
        assert!(rb.buf.capacity() <= 40, "{}", rb.buf.capacity());
        rb.bytes().clear();
        assert_eq!(read(&mut rb, &input, |_| None), STACK_READ);
    }

    #[test]
    fn an_empty_buffer_waiting_drops_memory_a_message_still_uses() {
        let mut rb = bulk();
        read(&mut rb, &[8; 5000], |_| None);
        let msg = rb.bytes().split_to(100).freeze();
        rb.handed_out();
        rb.bytes().clear();
        rb.bulk = false;
        wait(&mut rb);
        assert_eq!(rb.buf.capacity(), 0);
        assert_eq!(&msg[..], &[8; 100][..]);
    }

    #[test]
    fn an_idle_connection_holds_no_memory() {
        let mut rb = ReadBuf::default();
        wait(&mut rb);
        assert_eq!(rb.buf.capacity(), 0);
    }

    #[test]
    fn a_small_read_keeps_only_its_size() {
        let mut rb = ReadBuf::default();
        assert_eq!(read(&mut rb, &[7; 100], |_| None), 100);
        assert_eq!(rb.bytes().len(), 100);
        assert!(rb.buf.capacity() <= 4 * 100, "{}", rb.buf.capacity());
    }

    #[test]
    fn a_huge_announced_frame_costs_what_arrived() {
        let mut rb = ReadBuf::default();
        read(&mut rb, &[1; 100], |_| None);
        // The header said a gigabyte follows; 100 bytes are here.
        let announced = 1 << 30;
        read(&mut rb, &[2; 1000], |held| Some(announced - held));
        assert!(rb.buf.capacity() < 64 << 10, "{}", rb.buf.capacity());
        wait(&mut rb);
        assert!(
            rb.buf.capacity() <= 4 * rb.buf.len(),
            "{}",
            rb.buf.capacity()
        );
    }

    #[test]
    fn a_quarter_of_the_frame_here_makes_room_for_all_of_it() {
        let mut rb = bulk();
        // One read brings what a spare holds, over a quarter of the frame.
        let first = read(&mut rb, &vec![3; 200_000], |_| None);
        let frame = 3 * first;
        read(&mut rb, &[4; 10], |held| Some(frame - held));
        assert!(rb.buf.capacity() >= frame, "{}", rb.buf.capacity());
        // Below a quarter, growth follows what arrived instead.
        let mut rb = bulk();
        let first = read(&mut rb, &vec![3; 200_000], |_| None);
        let frame = 100 * first;
        read(&mut rb, &[4; 10], |held| Some(frame - held));
        assert!(
            rb.buf.capacity() <= 4 * first + READ_CHUNK,
            "{}",
            rb.buf.capacity()
        );
    }

    #[test]
    fn a_read_mid_payload_stops_soon_after_the_frame() {
        let mut rb = ReadBuf::default();
        read(&mut rb, &[5; 10], |_| None);
        let n = read(&mut rb, &vec![6; 100_000], |held| Some(20 - held.min(20)));
        assert!(n <= 10 + READ_CHUNK, "{n}");
    }

    #[test]
    fn a_message_that_fills_its_allocation_leaves_no_share_behind() {
        let mut rb = ReadBuf::new(BytesMut::with_capacity(5000));
        rb.buf.extend_from_slice(&[4; 5000]);
        let msg = rb.bytes().split_to(5000).freeze();
        assert_eq!(rb.buf.capacity(), 0);
        rb.handed_out();
        // The message is the allocation's only owner now: dropping it
        // frees the memory (a share left in the buffer would keep it until
        // the next read).
        let Ok(owned) = msg.try_into_mut() else {
            panic!("the read buffer kept a share of the message's memory");
        };
        assert_eq!(owned.len(), 5000);
        assert!(!rb.shared);
    }

    #[test]
    fn memory_shared_with_a_message_is_not_pooled() {
        let mut rb = bulk();
        read(&mut rb, &[8; 5000], |_| None);
        let msg = rb.bytes().split_to(5000).freeze();
        rb.handed_out();
        // The buffer is empty, its memory still behind `msg`: the next read
        // must not treat that memory as a spare.
        wait(&mut rb);
        assert_eq!(&msg[..], &[8; 5000][..]);
    }
}
