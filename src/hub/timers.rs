//! Every connection's next deadline in one heap, served by one Tokio timer
//! per engine. Entries are not removed when a deadline moves: each
//! connection remembers the deadline it wants, and an entry that no longer
//! matches it is skipped when it comes up.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

use crate::hub::wake::Key;

#[derive(Debug, Default)]
pub(crate) struct Timers {
    heap: BinaryHeap<Reverse<(Instant, u32, u32)>>,
}

impl Timers {
    /// Schedules `key` at `at`.
    pub(crate) fn push(&mut self, at: Instant, key: Key) {
        self.heap.push(Reverse((at, key.slot, key.generation)));
    }

    /// The earliest entry, if any.
    pub(crate) fn next(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((at, ..))| *at)
    }

    /// The earliest entry.
    pub(crate) fn peek(&self) -> Option<(Instant, Key)> {
        self.heap.peek().map(|Reverse((at, slot, generation))| {
            (
                *at,
                Key {
                    slot: *slot,
                    generation: *generation,
                },
            )
        })
    }

    /// Drops the earliest entry.
    pub(crate) fn pop(&mut self) {
        self.heap.pop();
    }

    /// Takes an entry due by `now`.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<(Instant, Key)> {
        let Reverse((at, slot, generation)) = *self.heap.peek()?;
        if at > now {
            return None;
        }
        self.heap.pop();
        Some((at, Key { slot, generation }))
    }

    /// Number of entries, stale ones included.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn entries_come_out_in_deadline_order_once_due() {
        let start = Instant::now();
        let mut t = Timers::default();
        let key = |slot| Key {
            slot,
            generation: 0,
        };
        t.push(start + Duration::from_secs(3), key(1));
        t.push(start + Duration::from_secs(1), key(2));
        t.push(start + Duration::from_secs(2), key(3));
        assert_eq!(t.next(), Some(start + Duration::from_secs(1)));
        assert_eq!(t.pop_due(start), None);
        let now = start + Duration::from_secs(2);
        assert_eq!(t.pop_due(now).map(|(_, k)| k.slot), Some(2));
        assert_eq!(t.pop_due(now).map(|(_, k)| k.slot), Some(3));
        assert_eq!(t.pop_due(now), None);
        assert_eq!(t.len(), 1);
    }
}
