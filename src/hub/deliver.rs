//! Topic delivery (feature `topics`): what was published to the topics
//! this engine's connections subscribe to, taken from the engine's
//! mailbox once a turn and sent to each subscriber as a reference to the
//! one prepared frame.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::error::Error;
use crate::hub::config::BackpressurePolicy;
use crate::hub::conn::{Slot, Stage};
use crate::hub::slots::{Key, Slots};
use crate::hub::subs::token;
use crate::hub::turn::Turn;
use crate::proto::close::Leaving;
use crate::topics::Delivery;

/// Publishes sent to subscribers per turn (one send per subscriber).
const DELIVERIES_PER_TURN: usize = 16 << 10;

/// Publishes on their way to an engine's subscribers.
#[derive(Debug, Default)]
pub(crate) struct Deliveries {
    /// Publishes taken from the mailbox, being delivered.
    published: VecDeque<Delivery>,
    /// Subscribers of the publish being delivered.
    subscribers: Vec<Key>,
    /// How many of them it was sent to (in earlier turns, and in this one
    /// before the stretch being sent).
    delivered: usize,
    /// Topics whose publishes the mailbox dropped for this engine, with
    /// the place of the last one dropped.
    missed: Vec<(Arc<str>, u64)>,
    /// The stretch of the front publish's subscribers being sent this
    /// turn: the engine settles each subscriber before the next is sent
    /// to, so the sending goes one subscriber a call.
    stretch: Option<Stretch>,
    /// Sends left in this turn's budget.
    budget: usize,
    /// Publishes every subscriber got this turn, and their size: room in
    /// the mailbox's bounds.
    sent: usize,
    sent_bytes: usize,
}

/// A stretch of the subscribers of the publish at the front, sent in one
/// go: `subscribers[next..end]` are still to get it.
#[derive(Debug)]
struct Stretch {
    next: usize,
    end: usize,
    /// The token of the connection that published it, if a subscriber.
    except: Option<u64>,
}

impl Deliveries {
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
        self.stretch = None;
        self.budget = DELIVERIES_PER_TURN;
        self.sent = 0;
        self.sent_bytes = 0;
        if self.missed.is_empty() {
            return Vec::new();
        }
        missed_publishes(&mut self.missed, slots, turn)
    }

    /// Sends what was published to topics to the next subscriber: each
    /// publish is one prepared frame, written to each subscriber as to any
    /// other send (its backpressure policy included). The subscriber's
    /// key, for the engine to settle before the next; `None` once all is
    /// sent or the turn's budget is spent: at most `DELIVERIES_PER_TURN`
    /// sends a turn, as reads and commands are capped, the rest, in order,
    /// next turn.
    #[inline]
    pub(crate) fn deliver_next<T>(
        &mut self,
        slots: &mut Slots<Box<Slot<T>>>,
        turn: &mut Turn,
    ) -> Option<Key> {
        loop {
            if let Some(stretch) = &mut self.stretch {
                while stretch.next < stretch.end {
                    let key = self.subscribers[stretch.next];
                    stretch.next += 1;
                    // Entries naming a connection come only from this engine.
                    if stretch.except == Some(token(key)) {
                        continue;
                    }
                    let Some(slot) = slots.get_mut(key) else {
                        continue;
                    };
                    if slot.stage != Stage::Open {
                        continue;
                    }
                    let d = self.published.front()?;
                    let _ = slot.conn.deliver(turn, &d.msg);
                    return Some(key);
                }
            }
            if !self.next_stretch(turn) {
                return None;
            }
        }
    }

    /// Ends the stretch sent (its publish is done once every subscriber
    /// has it) and starts the next, while the turn's budget lasts: false
    /// when it is spent or nothing is left.
    fn next_stretch(&mut self, turn: &mut Turn) -> bool {
        if let Some(Stretch { end, .. }) = self.stretch.take() {
            // A publish with no subscriber here costs a send's worth too.
            self.budget -= (end - self.delivered).clamp(1, self.budget);
            if end == self.subscribers.len() {
                if let Some(d) = self.published.pop_front() {
                    self.sent += 1;
                    self.sent_bytes += d.size();
                }
                self.delivered = 0;
            } else {
                self.delivered = end;
            }
        }
        if self.budget == 0 {
            return false;
        }
        let Some(d) = self.published.front() else {
            return false;
        };
        if self.delivered == 0 {
            // The subscribers are fixed when a publish's delivery starts;
            // one that ends meanwhile is skipped.
            self.subscribers.clear();
            turn.subs
                .subscribers(&d.topic, d.seq, &mut self.subscribers);
        }
        self.stretch = Some(Stretch {
            next: self.delivered,
            end: self.subscribers.len().min(self.delivered + self.budget),
            except: d.except.map(|(_, t)| t),
        });
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
    let mut keys = Vec::new();
    for (topic, last) in missed.drain(..) {
        keys.clear();
        turn.subs.subscribers(&topic, last, &mut keys);
        for &key in &keys {
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
