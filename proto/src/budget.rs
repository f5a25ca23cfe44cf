//! A memory budget shared by many connections, and each connection's
//! account of what it holds against it.
//!
//! Every other limit is per connection, so without a budget the memory of a
//! server grows with the number of peers that start large messages and never
//! finish them. A [`MemoryBudget`] bounds what all the connections that share
//! it hold for messages in progress together: read buffers, fragments being
//! reassembled and inflated output. Each connection keeps a
//! [`BudgetAccount`]: the bytes it holds, by kind, of which everything beyond
//! a small per-connection allowance is taken from the shared budget.
//!
//! The core only counts and answers: growing a buffer first asks the account,
//! which says [`Grant::Granted`], [`Grant::Wait`] (the budget is exhausted
//! for now: stop reading, wait for [`MemoryBudget::wake_on_release`]) or
//! [`Grant::Never`] (this connection alone would exceed the whole budget).
//! The layer that does I/O decides how long to wait.
//!
//! Accounting is exact and lock-free: one atomic add or subtract per change
//! beyond the allowance, none within it, and none at all on a connection
//! without a budget. Only parking a waiting connection takes a lock.

use std::fmt;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering, fence};
use std::sync::{Arc, Mutex};
use std::task::Waker;
use std::time::Duration;

/// What a connection may hold without taking from the budget, unless set
/// with [`MemoryBudget::allowance`]: 128 KiB, the room of one pooled read
/// buffer (96 KiB) and a small message, so that connections exchanging
/// small messages never touch the shared counter.
pub const DEFAULT_ALLOWANCE: usize = 128 << 10;

/// How long a connection may wait for budget, or hold budget while nothing
/// arrives, before its message is refused, unless set with
/// [`MemoryBudget::wait_timeout`]: 5 s.
pub const DEFAULT_WAIT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Default)]
struct Shared {
    limit: usize,
    in_use: AtomicUsize,
    peak: AtomicUsize,
    /// Wakers parked in `wakers`; read without the lock on every release.
    waiting: AtomicUsize,
    wakers: Mutex<Vec<Waker>>,
    /// `in_use` as last reported ([`MemoryBudget::report`]), and whether
    /// the limit was.
    reported: AtomicUsize,
    limit_reported: std::sync::atomic::AtomicBool,
}

/// What budgets dropped since the last [`take_dropped_reports`] had
/// reported: bytes in use, and limits.
static DROPPED_REPORTS: [AtomicI64; 2] = [AtomicI64::new(0), AtomicI64::new(0)];

impl Drop for Shared {
    fn drop(&mut self) {
        if *self.limit_reported.get_mut() {
            let in_use = *self.reported.get_mut() as i64;
            DROPPED_REPORTS[0].fetch_add(in_use, Ordering::AcqRel);
            DROPPED_REPORTS[1].fetch_add(self.limit as i64, Ordering::AcqRel);
        }
    }
}

/// For a metric that adds up every budget's [`report`](MemoryBudget::report)s:
/// what to take back for the budgets dropped since the last call (the
/// bytes in use they last reported, and their limits), so that the sums
/// stay those of the budgets alive. A budget is dropped with its last
/// clone.
///
/// ```standalone_crate
/// // Alone in its process: the count is the process's.
/// use wavesock_proto::MemoryBudget;
/// use wavesock_proto::budget::take_dropped_reports;
///
/// let old = MemoryBudget::new(1 << 20);
/// assert_eq!(old.report(), (0, 1 << 20));
/// drop(old);
/// assert_eq!(take_dropped_reports(), (0, 1 << 20));
/// assert_eq!(take_dropped_reports(), (0, 0));
/// ```
pub fn take_dropped_reports() -> (i64, usize) {
    let in_use = DROPPED_REPORTS[0].swap(0, Ordering::AcqRel);
    let limit = DROPPED_REPORTS[1].swap(0, Ordering::AcqRel);
    (in_use, limit as usize)
}

/// A memory budget shared by many connections: create it once, put a clone
/// in the configuration of every connection it is to cover (wavesock's
/// `Config::memory_budget`; [`Limits::budget`](crate::Limits::budget) for a decoder
/// of your own).
///
/// The bytes a connection holds for the message it is receiving (its read
/// buffer, the fragments being put together, the inflated output of a
/// compressed message) beyond a small per-connection
/// [allowance](MemoryBudget::allowance) are taken from the budget. When it is
/// exhausted, connections that need more stop reading until others give some
/// back; a connection that waits longer than the
/// [wait timeout](MemoryBudget::wait_timeout), or holds budget while its
/// peer sends nothing for that long, has its message refused with close code
/// 1013 (try again later), and one that alone would need more than the whole
/// budget with 1009 (message too big). What is held is given back when the
/// message is complete, when the connection fails and when it is dropped.
///
/// Cloning is cheap (an [`Arc`] inside); clones share the count.
///
/// ```
/// use wavesock_proto::MemoryBudget;
///
/// // All connections together hold at most 256 MiB for messages in progress.
/// let budget = MemoryBudget::new(256 << 20);
/// let for_each_connection = budget.clone();
/// assert_eq!(for_each_connection.in_use(), 0);
/// assert_eq!(budget.limit(), 256 << 20);
/// ```
#[derive(Clone)]
pub struct MemoryBudget {
    shared: Arc<Shared>,
    allowance: usize,
    wait_timeout: Duration,
}

impl fmt::Debug for MemoryBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryBudget")
            .field("limit", &self.limit())
            .field("in_use", &self.in_use())
            .field("allowance", &self.allowance)
            .field("wait_timeout", &self.wait_timeout)
            .finish()
    }
}

/// Two handles are equal when they share the same count and settings.
impl PartialEq for MemoryBudget {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
            && self.allowance == other.allowance
            && self.wait_timeout == other.wait_timeout
    }
}

impl Eq for MemoryBudget {}

impl MemoryBudget {
    /// A budget of `bytes` shared by every connection given a clone of it,
    /// with the [default allowance](DEFAULT_ALLOWANCE) and
    /// [wait timeout](DEFAULT_WAIT_TIMEOUT).
    ///
    /// ```
    /// use wavesock_proto::MemoryBudget;
    ///
    /// let budget = MemoryBudget::new(64 << 20);
    /// assert_eq!(budget.limit(), 64 << 20);
    /// assert_eq!(budget.available(), 64 << 20);
    /// ```
    pub fn new(bytes: usize) -> Self {
        MemoryBudget {
            shared: Arc::new({
                let mut shared = Shared::default();
                shared.limit = bytes;
                shared
            }),
            allowance: DEFAULT_ALLOWANCE,
            wait_timeout: DEFAULT_WAIT_TIMEOUT,
        }
    }

    /// What each connection given this handle may hold without taking from
    /// the budget (default [`DEFAULT_ALLOWANCE`]). Applies to connections
    /// configured with the returned handle; the count stays shared.
    pub fn allowance(mut self, bytes: usize) -> Self {
        self.allowance = bytes;
        self
    }

    /// How long a connection may wait for budget, or hold budget while its
    /// peer sends nothing, before its message is refused with close code
    /// 1013 (default [`DEFAULT_WAIT_TIMEOUT`]).
    pub fn wait_timeout(mut self, timeout: Duration) -> Self {
        self.wait_timeout = timeout;
        self
    }

    /// The per-connection allowance.
    pub fn allowance_bytes(&self) -> usize {
        self.allowance
    }

    /// The wait timeout.
    pub fn wait_timeout_duration(&self) -> Duration {
        self.wait_timeout
    }

    /// The size of the budget.
    pub fn limit(&self) -> usize {
        self.shared.limit
    }

    /// Bytes taken from the budget now, by all the connections sharing it.
    pub fn in_use(&self) -> usize {
        self.shared.in_use.load(Ordering::Acquire)
    }

    /// Bytes left to take.
    pub fn available(&self) -> usize {
        self.limit().saturating_sub(self.in_use())
    }

    /// The most that was ever in use at once (the high-water mark).
    pub fn peak(&self) -> usize {
        self.shared.peak.load(Ordering::Acquire)
    }

    /// For a metric that adds up every budget: the change in bytes in use
    /// since the last report, and the limit the first time (else 0).
    /// Reports from several tasks add up to the change in all; once the
    /// budget is dropped, [`take_dropped_reports`] says what to take back.
    ///
    /// ```
    /// use wavesock_proto::MemoryBudget;
    /// use wavesock_proto::budget::{BudgetAccount, Held};
    ///
    /// let budget = MemoryBudget::new(1 << 20).allowance(0);
    /// assert_eq!(budget.report(), (0, 1 << 20));
    /// let mut account = BudgetAccount::new(Some(budget.clone()));
    /// account.set(Held::Fragments, 1000);
    /// assert_eq!(budget.report(), (1000, 0));
    /// drop(account);
    /// assert_eq!(budget.report(), (-1000, 0));
    /// ```
    pub fn report(&self) -> (i64, usize) {
        let now = self.in_use();
        let before = self.shared.reported.swap(now, Ordering::AcqRel);
        let limit = if self.shared.limit_reported.swap(true, Ordering::AcqRel) {
            0
        } else {
            self.limit()
        };
        (now as i64 - before as i64, limit)
    }

    /// How many wakers wait for budget to be given back.
    pub fn waiting(&self) -> usize {
        self.shared.waiting.load(Ordering::Acquire)
    }

    /// Wakes `waker` the next time any connection gives budget back. For
    /// the I/O layer, after an account answered [`Grant::Wait`]: prefer
    /// [`wait_for`](Self::wait_for), which looks again after registering
    /// with the ordering that makes sure no give-back is missed in between.
    pub fn wake_on_release(&self, waker: &Waker) {
        let mut wakers = self.shared.wakers.lock().unwrap_or_else(|e| e.into_inner());
        if !wakers.iter().any(|w| w.will_wake(waker)) {
            wakers.push(waker.clone());
            self.shared.waiting.store(wakers.len(), Ordering::Release);
        }
    }

    /// Waits for `wanted` bytes: registers `waker` to be woken when budget
    /// is given back, then looks again, so that budget given back between
    /// a refusal and the registration is not missed (a wake-up it would
    /// never get). `true`: the room is there now, try again at once;
    /// `false`: wait for the waker.
    #[inline]
    pub fn wait_for(&self, wanted: usize, waker: &Waker) -> bool {
        self.wake_on_release(waker);
        // Registering (a store to `waiting`) then looking (a load of
        // `in_use`), against `give_back`'s store to `in_use` then load of
        // `waiting`: acquire and release alone let each side miss the
        // other's store on a weak-memory CPU, and the wake-up would be
        // lost. A sequentially consistent fence on both sides makes at
        // least one see the other.
        fence(Ordering::SeqCst);
        self.available() >= wanted
    }

    /// Takes `bytes` if that leaves the budget within its limit.
    fn try_take(&self, bytes: usize) -> bool {
        let s = &self.shared;
        let mut cur = s.in_use.load(Ordering::Relaxed);
        loop {
            let Some(next) = cur.checked_add(bytes).filter(|&n| n <= s.limit) else {
                return false;
            };
            match s
                .in_use
                .compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => {
                    s.peak.fetch_max(next, Ordering::AcqRel);
                    return true;
                }
                Err(now) => cur = now,
            }
        }
    }

    /// Takes `bytes` whatever the limit (memory already held).
    fn take(&self, bytes: usize) {
        let s = &self.shared;
        let next = s.in_use.fetch_add(bytes, Ordering::AcqRel) + bytes;
        s.peak.fetch_max(next, Ordering::AcqRel);
    }

    /// Gives `bytes` back and wakes the connections waiting for budget.
    fn give_back(&self, bytes: usize) {
        let s = &self.shared;
        s.in_use.fetch_sub(bytes, Ordering::AcqRel);
        // The other half of `wait_for`'s fence.
        fence(Ordering::SeqCst);
        if s.waiting.load(Ordering::Acquire) > 0 {
            let wakers = {
                let mut w = s.wakers.lock().unwrap_or_else(|e| e.into_inner());
                s.waiting.store(0, Ordering::Release);
                std::mem::take(&mut *w)
            };
            for w in wakers {
                w.wake();
            }
        }
    }
}

/// What a connection holds memory for, each counted apart in its
/// [`BudgetAccount`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Held {
    /// The read buffer: bytes received and not yet handed out, and room for
    /// more.
    ReadBuffer,
    /// The fragments of a message being reassembled.
    Fragments,
    /// The inflated output of a compressed message being received.
    Inflated,
    /// Decompression state: zlib's, while a message borrows or a
    /// connection keeps it, and the bytes of a kept window.
    Compression,
}

impl Held {
    fn index(self) -> usize {
        match self {
            Held::ReadBuffer => 0,
            Held::Fragments => 1,
            Held::Inflated => 2,
            Held::Compression => 3,
        }
    }
}

/// A buffer's growth, asked of a budget with
/// [`BudgetAccount::try_grow`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Growth {
    /// The old buffer's size: it lives on while its bytes are copied.
    pub old: usize,
    /// The bytes to move into the new buffer.
    pub len: usize,
    /// How much larger than `len` the new buffer should be.
    pub step: usize,
    /// The smallest step worth taking when the budget has less room.
    pub min_step: usize,
    /// Bytes the connection will need of other kinds beyond what it holds
    /// now (the rest of a frame that must be held whole): left for them.
    pub beside: usize,
}

/// The answer to a request for more memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// Taken: go ahead.
    Granted,
    /// The budget is exhausted for now; `wanted` more bytes of it are
    /// needed. Stop reading and wait for budget to be given back.
    Wait {
        /// The bytes that must be available in the budget.
        wanted: usize,
    },
    /// This connection would hold more than the whole budget: waiting cannot
    /// help. Refuse the message.
    Never {
        /// What the connection would have taken from the budget in all.
        charge: usize,
        /// The size of the budget.
        limit: usize,
    },
}

/// One connection's memory held against a [`MemoryBudget`]: the bytes it
/// holds of each kind ([`Held`]), of which all beyond the allowance are
/// taken from the budget. Without a budget it counts nothing and every
/// request is granted at once.
///
/// Dropping the account gives back everything it took.
///
/// ```
/// use wavesock_proto::MemoryBudget;
/// use wavesock_proto::budget::{BudgetAccount, Grant, Held};
///
/// let budget = MemoryBudget::new(1 << 20).allowance(1000);
/// let mut account = BudgetAccount::new(Some(budget.clone()));
/// assert_eq!(account.try_set(Held::Fragments, 5000), Grant::Granted);
/// assert_eq!(budget.in_use(), 4000);
/// drop(account);
/// assert_eq!(budget.in_use(), 0);
/// ```
#[derive(Debug, Default)]
pub struct BudgetAccount {
    // Boxed: without a budget an account is one null pointer, and every
    // connection has one.
    counts: Option<Box<Counts>>,
}

/// What an account against a budget keeps.
#[derive(Debug)]
struct Counts {
    budget: MemoryBudget,
    held: [usize; 4],
    /// Taken from the budget: what is held beyond the allowance.
    charged: usize,
}

impl Counts {
    /// What the charge would be with `kind` holding `bytes`.
    fn charge_with(&self, kind: Held, bytes: usize) -> usize {
        let mut held = self.held;
        held[kind.index()] = bytes;
        // Saturating: a request for "as much as there is" (an engine
        // whose scratch memory has no bound) is refused, not an overflow.
        held.iter()
            .fold(0usize, |sum, &n| sum.saturating_add(n))
            .saturating_sub(self.budget.allowance)
    }

    fn set(&mut self, kind: Held, bytes: usize) {
        let charge = self.charge_with(kind, bytes);
        if charge > self.charged {
            self.budget.take(charge - self.charged);
        } else if charge < self.charged {
            self.budget.give_back(self.charged - charge);
        }
        self.charged = charge;
        self.held[kind.index()] = bytes;
    }
}

impl BudgetAccount {
    /// An account against `budget`; `None` counts nothing.
    pub fn new(budget: Option<MemoryBudget>) -> Self {
        BudgetAccount {
            counts: budget.map(|budget| {
                Box::new(Counts {
                    budget,
                    held: [0; 4],
                    charged: 0,
                })
            }),
        }
    }

    /// The budget, if there is one.
    pub fn budget(&self) -> Option<&MemoryBudget> {
        self.counts.as_ref().map(|c| &c.budget)
    }

    /// Whether there is a budget to count against.
    #[inline]
    pub fn is_on(&self) -> bool {
        self.counts.is_some()
    }

    /// Bytes held of `kind`.
    pub fn held(&self, kind: Held) -> usize {
        self.counts.as_ref().map_or(0, |c| c.held[kind.index()])
    }

    /// Bytes held of every kind together.
    pub fn total(&self) -> usize {
        self.counts.as_ref().map_or(0, |c| c.held.iter().sum())
    }

    /// Bytes taken from the budget (what is held beyond the allowance).
    #[inline]
    pub fn charged(&self) -> usize {
        self.counts.as_ref().map_or(0, |c| c.charged)
    }

    /// How many more bytes this connection may hold without taking from
    /// the shared budget (what is left of its allowance): growing within
    /// it touches no shared counter.
    pub fn allowance_left(&self) -> usize {
        match &self.counts {
            None => usize::MAX,
            Some(c) => c.budget.allowance.saturating_sub(self.total()),
        }
    }

    /// How many more bytes this connection could hold right now without
    /// waiting: what is left of its allowance and of the budget.
    pub fn room(&self) -> usize {
        match &self.counts {
            None => usize::MAX,
            Some(c) => {
                let allowance_left = c.budget.allowance.saturating_sub(self.total());
                allowance_left.saturating_add(c.budget.available())
            }
        }
    }

    /// [`Grant::Never`] if holding `bytes` of `kind` (beside what the
    /// connection holds of the others) would exceed the whole budget:
    /// waiting for others to give budget back could never help. Asks the
    /// budget for nothing.
    #[inline]
    pub fn never_fits(&self, kind: Held, bytes: usize) -> Option<Grant> {
        let c = self.counts.as_ref()?;
        let charge = c.charge_with(kind, bytes);
        (charge > c.budget.limit()).then(|| Grant::Never {
            charge,
            limit: c.budget.limit(),
        })
    }

    /// Asks to hold `bytes` of `kind` (a larger or smaller amount than
    /// now). Shrinking is always granted; growing beyond the allowance
    /// takes from the budget if it has room.
    #[inline]
    pub fn try_set(&mut self, kind: Held, bytes: usize) -> Grant {
        let Some(c) = &mut self.counts else {
            return Grant::Granted;
        };
        let charge = c.charge_with(kind, bytes);
        if charge > c.charged {
            if charge > c.budget.limit() {
                return Grant::Never {
                    charge,
                    limit: c.budget.limit(),
                };
            }
            let more = charge - c.charged;
            if !c.budget.try_take(more) {
                return Grant::Wait { wanted: more };
            }
        } else if charge < c.charged {
            c.budget.give_back(c.charged - charge);
        }
        c.charged = charge;
        c.held[kind.index()] = bytes;
        Grant::Granted
    }

    /// Asks to grow a buffer of `kind` as `growth` says: `Ok` with the
    /// step granted, `kind` then held as the old buffer and the new one
    /// together until the caller records what is left after the copy.
    ///
    /// - A step is never smaller than half of what the buffer holds (nor
    ///   than [`Growth::min_step`]) unless that is all the buffer could
    ///   still take: a budget short of room makes the growth wait rather
    ///   than crawl, as each step copies the whole buffer (steps of 16 KiB
    ///   up to 32 MiB copied 24 GB and stalled the connection's thread for
    ///   16 s).
    /// - The old buffer is counted unless the step could then never fit: a
    ///   message that fits the budget alone is not refused (1009) for the
    ///   moment its bytes move, which then passes the budget by the old
    ///   buffer. Such a step is at least an eighth of the buffer (or all
    ///   it asked for), so the budget is passed by at most eight-ninths of
    ///   it.
    /// - `Err(Never)` when the buffer holds all it ever could beside
    ///   [`Growth::beside`], or could grow only by less than an eighth of
    ///   itself without its copy counted.
    pub fn try_grow(&mut self, kind: Held, growth: Growth) -> Result<usize, Grant> {
        let Growth {
            old,
            len,
            step,
            min_step,
            beside,
        } = growth;
        let Some(c) = &self.counts else {
            return Ok(step);
        };
        let limit = c.budget.limit();
        let others = c
            .held
            .iter()
            .fold(0usize, |sum, &n| sum.saturating_add(n))
            .saturating_sub(c.held[kind.index()])
            .saturating_add(beside);
        // The most `kind` could hold with the budget to itself.
        let most = limit
            .saturating_add(c.budget.allowance)
            .saturating_sub(others);
        let full = step.min(most.saturating_sub(len));
        let geometric = (len / 2).max(min_step);
        let uncounted = old.saturating_add(len).saturating_add(full) > most;
        let counted = if uncounted { 0 } else { old };
        // A copy uncounted for a step under an eighth of the buffer (less
        // than it asked for) would pass the budget by nearly all of it,
        // again each time the others' holdings shrink a little. (Not under
        // half: an engine's read set aside beside the buffer, such as the
        // hub's scratch, would refuse messages of two-thirds the budget.)
        if full == 0 || (uncounted && full < step && full < len / 8) {
            return Err(Grant::Never {
                charge: c.charge_with(kind, len.saturating_add(step.max(1))),
                limit,
            });
        }
        let least = full.min(geometric);
        // What the step could be now, beside `copied` bytes of old buffer.
        let now = |copied: usize| {
            c.budget
                .available()
                .saturating_add(c.charged)
                .saturating_add(c.budget.allowance)
                .saturating_sub(others - beside)
                .saturating_sub(copied.saturating_add(len))
        };
        let (granted, counted) = if now(counted) >= full {
            (full, counted)
        } else {
            // Less than the whole step, beside the copy counted.
            let partial = now(old).min(most.saturating_sub(old.saturating_add(len)));
            if partial < least {
                let held = if old.saturating_add(len + least) <= most {
                    old + len + least
                } else {
                    counted + len + full
                };
                let wanted = c.charge_with(kind, held).saturating_sub(c.charged);
                return Err(Grant::Wait { wanted });
            }
            (partial, old)
        };
        match self.try_set(kind, counted + len + granted) {
            Grant::Granted => Ok(granted),
            // Others took what was available meanwhile.
            refused => Err(refused),
        }
    }

    /// Records that `bytes` of `kind` are held, budget or not: for memory
    /// already in hand (or when shrinking). Prefer
    /// [`try_set`](Self::try_set) before allocating.
    #[inline]
    pub fn set(&mut self, kind: Held, bytes: usize) {
        if let Some(c) = &mut self.counts {
            c.set(kind, bytes);
        }
    }

    /// Moves `bytes` from one kind to another (memory that changed hands
    /// without a copy); the total and the charge stay as they are.
    #[inline]
    pub fn transfer(&mut self, from: Held, to: Held, bytes: usize) {
        let Some(c) = &mut self.counts else {
            return;
        };
        let bytes = bytes.min(c.held[from.index()]);
        c.held[from.index()] -= bytes;
        c.held[to.index()] += bytes;
    }

    /// Gives back everything held of `kind`.
    #[inline]
    pub fn release(&mut self, kind: Held) {
        if let Some(c) = &mut self.counts {
            if c.held[kind.index()] > 0 {
                c.set(kind, 0);
            }
        }
    }

    /// Gives back everything.
    pub fn release_all(&mut self) {
        if let Some(c) = &mut self.counts {
            if c.charged > 0 {
                c.budget.give_back(c.charged);
            }
            c.charged = 0;
            c.held = [0; 4];
        }
    }
}

impl Drop for BudgetAccount {
    fn drop(&mut self) {
        self.release_all();
    }
}

#[cfg(test)]
#[path = "budget_tests.rs"]
mod tests;
