//! Topic delivery (feature `topics`): what was published to the topics
//! this engine's connections subscribe to, taken from the engine's
//! mailbox once a turn and sent to each subscriber as a reference to the
//! one prepared frame.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::error::Error;
use crate::hub::config::BackpressurePolicy;
use crate::hub::conn::Stage;
use crate::hub::engine::Engine;
use crate::hub::handler::Handler;
use crate::hub::slots::Key;
use crate::hub::subs::token;
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
    /// How many of them it was sent to (in earlier turns).
    delivered: usize,
    /// Topics whose publishes the mailbox dropped for this engine, with
    /// the place of the last one dropped.
    missed: Vec<(Arc<str>, u64)>,
}

impl<H: Handler> Engine<H> {
    /// Sends what was published to topics to this engine's subscribers:
    /// each publish is one prepared frame, written to each subscriber as to
    /// any other send (its backpressure policy included). At most
    /// `DELIVERIES_PER_TURN` sends a turn, as reads and commands are
    /// capped: the rest, in order, next turn. True if some are left.
    pub(crate) fn deliver_published(&mut self) -> bool {
        let mut published = std::mem::take(&mut self.deliveries.published);
        let mut missed = std::mem::take(&mut self.deliveries.missed);
        self.turn.subs.mailbox.take(&mut published, &mut missed);
        if !missed.is_empty() {
            self.missed_publishes(&mut missed);
        }
        self.deliveries.missed = missed;
        let mut keys = std::mem::take(&mut self.deliveries.subscribers);
        let mut budget = DELIVERIES_PER_TURN;
        let (mut sent, mut sent_bytes) = (0, 0);
        while budget > 0 {
            let Some(d) = published.front() else {
                break;
            };
            if self.deliveries.delivered == 0 {
                // The subscribers are fixed when a publish's delivery
                // starts; one that ends meanwhile is skipped below.
                keys.clear();
                self.turn.subs.subscribers(&d.topic, d.seq, &mut keys);
            }
            let end = keys.len().min(self.deliveries.delivered + budget);
            // Entries naming a connection come only from this engine.
            let except = d.except.map(|(_, t)| t);
            for &key in &keys[self.deliveries.delivered..end] {
                if except == Some(token(key)) {
                    continue;
                }
                let Some(slot) = self.slots.get_mut(key) else {
                    continue;
                };
                if slot.stage != Stage::Open {
                    continue;
                }
                let _ = slot.conn.deliver(&mut self.turn, &d.msg);
                self.settle(key);
            }
            // A publish with no subscriber here costs a send's worth too.
            budget -= (end - self.deliveries.delivered).clamp(1, budget);
            if end == keys.len() {
                if let Some(d) = published.pop_front() {
                    sent += 1;
                    sent_bytes += d.size();
                }
                self.deliveries.delivered = 0;
            } else {
                self.deliveries.delivered = end;
            }
        }
        if sent > 0 {
            // Room in the mailbox's bounds for as many more.
            self.turn.subs.mailbox.sent(sent, sent_bytes);
        }
        let more = !published.is_empty();
        if !more {
            keys.clear();
        }
        self.deliveries.subscribers = keys;
        self.deliveries.published = published;
        more
    }

    /// Publishes to `missed` topics were dropped for this engine: its
    /// inbox was full (the engine fell that far behind). Their subscribers
    /// here meet the slow-subscriber policy, as if each were the one that
    /// fell behind: closed under `Close`, the publish skipped under `Drop`.
    /// Only those a dropped publish was for: a connection that subscribed
    /// after the last one dropped (in this turn's handlers, say) missed
    /// nothing.
    #[cold]
    fn missed_publishes(&mut self, missed: &mut Vec<(Arc<str>, u64)>) {
        if self.turn.writes.policy == BackpressurePolicy::Drop {
            missed.clear();
            return;
        }
        let mut keys = Vec::new();
        for (topic, last) in missed.drain(..) {
            keys.clear();
            self.turn.subs.subscribers(&topic, last, &mut keys);
            for &key in &keys {
                let Some(slot) = self.slots.get_mut(key) else {
                    continue;
                };
                if slot.stage != Stage::Open {
                    continue;
                }
                // Closed as the handler would close it, so that a peer
                // that reads is told (1013: come back and resubscribe),
                // and `Handler::close` hears why.
                slot.conn.set_error(Error::PublishesMissed {
                    topic: topic.to_string(),
                });
                let _ = slot
                    .conn
                    .close_with(&mut self.turn, Some(Leaving::MissedPublishes.frame()));
                self.settle(key);
            }
        }
    }
}
