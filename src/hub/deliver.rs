//! Topic delivery (feature `topics`): what was published to the topics
//! this engine's connections subscribe to, taken from the engine's
//! mailbox once a turn and sent to each subscriber as a reference to the
//! one prepared frame, a run of publishes to one topic at a time and
//! subscriber by subscriber.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::error::Error;
use crate::hub::config::BackpressurePolicy;
use crate::hub::conn::{Slot, Stage};
use crate::hub::event::SendStatus;
use crate::hub::slots::{Key, Slots};
use crate::hub::subs::{Subscriber, token};
use crate::hub::turn::Turn;
use crate::meter;
use crate::proto::close::Leaving;
use crate::topics::Delivery;

/// Deliveries a turn makes, about: reads and commands are capped too, so
/// that one burst does not hold up the engine's other connections. A
/// subscriber being served gets its whole run, so a turn may go past the
/// cap by one run.
const DELIVERIES_PER_TURN: usize = 16 << 10;

/// Publishes in one run, at most: consecutive publishes to one topic,
/// delivered subscriber by subscriber, so that each subscriber's share is
/// corked together and goes out in one write however many turns the run
/// takes (publish by publish, the turn's cap would have every subscriber
/// written once a turn). A run gives its room in the mailbox back only
/// once every subscriber has it, so it also holds no more than
/// [`RUN_SHARE`] of the mailbox's bounds (publishes and bytes): the rest
/// stays free for what is published meanwhile.
const RUN_MAX: usize = 256;

/// The part of the mailbox's bounds one run may hold (see [`RUN_MAX`]).
const RUN_SHARE: usize = 4;

/// Bytes corked for one subscriber at which its run is written out before
/// the rest is corked (and at most half of `max_backpressure`): a fast
/// reader never meets the backpressure policy for the size of a run.
const WRITE_AT: usize = 64 << 10;

/// Publishes on their way to an engine's subscribers.
#[derive(Debug, Default)]
pub(crate) struct Deliveries {
    /// Publishes taken from the mailbox, being delivered.
    published: VecDeque<Delivery>,
    /// The run being delivered: the first `run` of `published`, all to
    /// one topic; 0 when none is.
    run: usize,
    /// The run's subscribers, fixed when it starts: one that ends or
    /// unsubscribes meanwhile gets no more of it, one that comes gets the
    /// next run.
    subscribers: Vec<Subscriber>,
    /// The subscriber being served, and the publish of the run it is at
    /// (past 0 only when its run was written out half way).
    next: usize,
    at: usize,
    /// Topics whose publishes the mailbox dropped for this engine, with
    /// the place of the last one dropped.
    missed: Vec<(Arc<str>, u64)>,
    /// Deliveries left in this turn's budget.
    budget: usize,
    /// Publishes every subscriber got this turn, and their size: room in
    /// the mailbox's bounds.
    sent: usize,
    sent_bytes: usize,
}

/// What [`Deliveries::deliver_next`] did to a subscriber.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Served {
    /// It got its share of the run: settle it.
    Done(Key),
    /// What it has corked passed [`WRITE_AT`]: write it out and settle it
    /// before anything more is corked for it (the rest of its share, if
    /// any, is the next call's).
    WriteOut(Key),
}

impl Deliveries {
    /// Deliveries this turn made, about (passing over a closing subscriber
    /// counts as one).
    pub(crate) fn made(&self) -> usize {
        DELIVERIES_PER_TURN.saturating_sub(self.budget)
    }

    /// Starts the turn's deliveries: takes what the mailbox holds for this
    /// engine. Publishes to topics the mailbox dropped meet the
    /// slow-subscriber policy here; the subscribers closed for it, for the
    /// engine to settle (none, but for an engine that fell behind).
    pub(crate) fn begin<T>(
        &mut self,
        slots: &mut Slots<Box<Slot<T>>>,
        turn: &mut Turn,
    ) -> Vec<Key> {
        turn.subs
            .mailbox
            .take(&mut self.published, &mut self.missed);
        self.budget = DELIVERIES_PER_TURN;
        self.sent = 0;
        self.sent_bytes = 0;
        if self.missed.is_empty() {
            return Vec::new();
        }
        missed_publishes(&mut self.missed, slots, turn)
    }

    /// Sends the next subscriber its share of the run: each publish is one
    /// prepared frame, queued by reference as any other send (its
    /// backpressure policy included). `None` once all is sent or the
    /// turn's budget is spent (the rest, in order, next turn).
    #[inline]
    pub(crate) fn deliver_next<T>(
        &mut self,
        slots: &mut Slots<Box<Slot<T>>>,
        turn: &mut Turn,
    ) -> Option<Served> {
        loop {
            if self.run == 0 && !self.start_run(turn) {
                return None;
            }
            while let Some(&Subscriber { key, since }) = self.subscribers.get(self.next) {
                if self.budget == 0 {
                    return None;
                }
                let slot = match slots.get_mut(key) {
                    Some(slot) if slot.stage == Stage::Open && !turn.subs.left_run(key) => slot,
                    _ => {
                        // Passing one over is work too: a run of closing
                        // subscribers must not make a turn unbounded.
                        self.budget -= 1;
                        self.next += 1;
                        self.at = 0;
                        continue;
                    }
                };
                let write_at = WRITE_AT.min(turn.writes.max_backpressure / 2);
                let mut sent = 0;
                let mut write_out = false;
                while self.at < self.run {
                    let d = &self.published[self.at];
                    self.at += 1;
                    // Not for it: published before it subscribed, or by it
                    // (entries naming a connection come only from this
                    // engine).
                    if d.seq < since || d.except.is_some_and(|(_, t)| t == token(key)) {
                        continue;
                    }
                    sent += 1;
                    match slot.conn.deliver(turn, &d.msg) {
                        Ok(SendStatus::Sent | SendStatus::Backpressure) => {}
                        Ok(SendStatus::Dropped) => {
                            meter::topic_dropped(meter::TopicDrop::Backpressure, 1);
                        }
                        // Closing or failed: nothing more goes to it.
                        Ok(SendStatus::Closed) | Err(_) => {
                            self.at = self.run;
                            break;
                        }
                    }
                    // Written out as it grows, within a run and across
                    // runs (short ones: a topic that alternates with
                    // another, a small mailbox); a peer that does not
                    // take what it has is written to when it reads again,
                    // not once a publish.
                    if !slot.conn.write_blocked && slot.conn.buffered() >= write_at {
                        write_out = true;
                        break;
                    }
                }
                self.budget = self.budget.saturating_sub(sent.max(1));
                if self.at >= self.run {
                    self.next += 1;
                    self.at = 0;
                }
                return Some(if write_out {
                    Served::WriteOut(key)
                } else {
                    Served::Done(key)
                });
            }
            // Every subscriber has the run.
            for d in self.published.drain(..self.run) {
                self.sent += 1;
                self.sent_bytes += d.size();
            }
            self.run = 0;
            turn.subs.watch_run(None);
        }
    }

    /// Starts the next run, while the turn's budget lasts: false when it
    /// is spent or nothing is left.
    fn start_run(&mut self, turn: &mut Turn) -> bool {
        if self.budget == 0 {
            return false;
        }
        let Some(first) = self.published.front() else {
            return false;
        };
        let topic = &first.topic;
        let config = turn.subs.topics.config();
        let most = RUN_MAX.min(config.inbox_capacity / RUN_SHARE).max(1);
        let most_bytes = config.inbox_bytes / RUN_SHARE;
        let (mut run, mut bytes) = (0, 0);
        for d in self.published.iter().take(most) {
            if !(Arc::ptr_eq(&d.topic, topic) || d.topic == *topic)
                || (run > 0 && bytes + d.size() > most_bytes)
            {
                break;
            }
            run += 1;
            bytes += d.size();
        }
        let last = self.published[run - 1].seq;
        self.subscribers.clear();
        turn.subs.subscribers(topic, last, &mut self.subscribers);
        // Who unsubscribes before the run is through gets no more of it.
        turn.subs.watch_run(Some(topic.clone()));
        if self.subscribers.is_empty() {
            // A publish with no subscriber here costs a delivery's worth.
            self.budget = self.budget.saturating_sub(run);
        }
        self.run = run;
        self.next = 0;
        self.at = 0;
        true
    }

    /// Ends the turn's deliveries: true if publishes are left for the next.
    pub(crate) fn end(&mut self, turn: &mut Turn) -> bool {
        if self.sent > 0 {
            // Room in the mailbox's bounds for as many more.
            turn.subs.mailbox.sent(self.sent, self.sent_bytes);
        }
        let more = !self.published.is_empty();
        if !more {
            self.subscribers.clear();
        }
        more
    }
}

/// Publishes to `missed` topics were dropped for this engine: its inbox
/// was full (the engine fell that far behind). Their subscribers here meet
/// the slow-subscriber policy, as if each were the one that fell behind:
/// closed under `Close` (their keys returned, to settle), the publish
/// skipped under `Drop`. Only those a dropped publish was for: a
/// connection that subscribed after the last one dropped (in this turn's
/// handlers, say) missed nothing.
#[cold]
fn missed_publishes<T>(
    missed: &mut Vec<(Arc<str>, u64)>,
    slots: &mut Slots<Box<Slot<T>>>,
    turn: &mut Turn,
) -> Vec<Key> {
    let mut closed = Vec::new();
    if turn.writes.policy == BackpressurePolicy::Drop {
        missed.clear();
        return closed;
    }
    let mut subscribers = Vec::new();
    for (topic, last) in missed.drain(..) {
        subscribers.clear();
        turn.subs.subscribers(&topic, last, &mut subscribers);
        for &Subscriber { key, .. } in &subscribers {
            let Some(slot) = slots.get_mut(key) else {
                continue;
            };
            if slot.stage != Stage::Open {
                continue;
            }
            // Closed as the handler would close it, so that a peer that
            // reads is told (1013: come back and resubscribe), and
            // `Handler::close` hears why.
            slot.conn.set_error(Error::PublishesMissed {
                topic: topic.to_string(),
            });
            let _ = slot
                .conn
                .close_with(turn, Some(Leaving::MissedPublishes.frame()));
            closed.push(key);
        }
    }
    closed
}
