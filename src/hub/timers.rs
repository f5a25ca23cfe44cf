//! Every connection's next deadline in one heap, served by one Tokio timer
//! per engine. Entries are not removed when a deadline moves: each
//! connection remembers the deadline it wants, and an entry that no longer
//! matches it is skipped when it comes up.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::pin::Pin;
use std::task::Context;
use std::time::Instant;

use tokio::time::Sleep;

use crate::hub::conn::{Slot, Stage};
use crate::hub::slots::{Key, Slots};
use crate::hub::turn::Turn;
use crate::proto::conn::Phase;

#[derive(Debug, Default)]
pub(crate) struct Timers {
    heap: BinaryHeap<Reverse<(Instant, u32, u32)>>,
    /// The engine's one Tokio timer, armed only while a deadline is
    /// pending: a registered timer costs Tokio's time driver work at every
    /// park.
    alarm: Option<(Instant, Pin<Box<Sleep>>)>,
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
    fn peek(&self) -> Option<(Instant, Key)> {
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
    fn pop(&mut self) {
        self.heap.pop();
    }

    /// Takes an entry due by `now`.
    fn pop_due(&mut self, now: Instant) -> Option<(Instant, Key)> {
        let Reverse((at, slot, generation)) = *self.heap.peek()?;
        if at > now {
            return None;
        }
        self.heap.pop();
        Some((at, Key { slot, generation }))
    }

    /// Wakes the engine's task at `at` (the earliest of its deadlines), or
    /// disarms the timer for `None`.
    pub(crate) fn alarm(&mut self, at: Option<Instant>, cx: &mut Context<'_>) {
        let Some(at) = at else {
            self.alarm = None;
            return;
        };
        let sleep = match &mut self.alarm {
            Some((armed, sleep)) => {
                if *armed != at {
                    *armed = at;
                    sleep.as_mut().reset(at.into());
                }
                sleep
            }
            None => {
                let sleep = Box::pin(tokio::time::sleep_until(at.into()));
                &mut self.alarm.insert((at, sleep)).1
            }
        };
        if sleep.as_mut().poll(cx).is_ready() {
            self.alarm = None;
            cx.waker().wake_by_ref();
        }
    }

    /// Number of entries, stale ones included.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }

    /// Takes the next entry due by `now` whose connection still wants it
    /// and hands the deadline to the connection's core (a handshake that
    /// timed out is abandoned): the connection's key, for the engine to
    /// settle. `None` once no entry is due.
    pub(crate) fn fire_next<T>(
        &mut self,
        now: Instant,
        slots: &mut Slots<Box<Slot<T>>>,
        turn: &mut Turn,
    ) -> Option<Key> {
        loop {
            let (at, key) = self.pop_due(now)?;
            let Some(slot) = slots.get_mut(key) else {
                continue;
            };
            if slot.timer_at != Some(at) {
                continue;
            }
            slot.timer_at = None;
            // A connection slowed for what it published has input the
            // engine holds unread: its peer was heard, the server stopped
            // listening, and a keepalive must not blame the peer for it.
            #[cfg(feature = "topics")]
            if slot.held.is_some() {
                slot.conn.core_mut().handle_input(now);
            }
            slot.conn.core_mut().handle_timeout(now);
            if slot.stage == Stage::Handshake && slot.conn.core().phase() == Phase::TimedOut {
                // No answer: the request never came whole (the core's error
                // says so).
                slot.conn.abandoned = true;
            } else {
                slot.conn.transmit_owed(turn);
            }
            return Some(key);
        }
    }

    /// Drops entries at the top of the heap whose connection wants another
    /// deadline (or is gone), so that the engine sleeps only for deadlines
    /// that matter: one past handshake keeps no timer armed.
    pub(crate) fn drop_stale<T>(&mut self, slots: &Slots<Box<Slot<T>>>) {
        while let Some((at, key)) = self.peek() {
            if slots.get(key).is_some_and(|s| s.timer_at == Some(at)) {
                return;
            }
            self.pop();
        }
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
