//! An engine's side of topics: which of its connections subscribe to
//! what, and what a handler does with topics
//! ([`Ws::subscribe`](crate::hub::Ws::subscribe),
//! [`Ws::publish`](crate::hub::Ws::publish), ...). The process's registry knows only which engines
//! have subscribers (and how many, through a count the engine keeps), so a
//! publish is one mailbox entry per engine, not one per subscriber, and
//! the registry's lock is taken only when an engine's first subscriber to
//! a topic comes or its last goes.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::hub::slots::Key;
use crate::meter;
use crate::topics::{Mailbox, Topics};

/// One engine's subscriptions.
#[derive(Debug)]
pub(crate) struct Subs {
    pub(crate) topics: Topics,
    /// Where the registry queues publishes for this engine.
    pub(crate) mailbox: Arc<Mailbox>,
    /// Subscribers per topic.
    by_topic: HashMap<Arc<str>, Subscribers>,
    /// Topics per subscribing slot, to unsubscribe when it ends. Kept here,
    /// not in the connection: a connection that subscribes to nothing pays
    /// nothing for topics.
    by_slot: HashMap<u32, Vec<Arc<str>>>,
    /// The topic of the run of publishes being delivered, whose
    /// subscribers were fixed when it started, and those of them that
    /// unsubscribed since: the rest of the run must not reach them.
    run: Option<Arc<str>>,
    left: HashSet<Key>,
}

/// An engine's subscribers to one topic: slot to generation and the place
/// of the first publish the subscription gets (what came before it, still
/// in the engine's mailbox, is not for it); and their number, which the
/// registry reads.
#[derive(Debug)]
struct Subscribers {
    slots: HashMap<u32, (u32, u64)>,
    count: Arc<AtomicUsize>,
}

impl Subs {
    pub(crate) fn new(topics: Topics) -> Self {
        let mailbox = topics.mailbox();
        Subs {
            topics,
            mailbox,
            by_topic: HashMap::new(),
            by_slot: HashMap::new(),
            run: None,
            left: HashSet::new(),
        }
    }

    /// Subscribes `key`; false if it was already.
    pub(crate) fn subscribe(&mut self, key: Key, topic: &str) -> bool {
        let mine = self.by_slot.entry(key.slot).or_default();
        if mine.iter().any(|t| &**t == topic) {
            return false;
        }
        match self.by_topic.get_key_value(topic) {
            Some((name, subs)) => {
                let name = name.clone();
                subs.count.fetch_add(1, Ordering::Relaxed);
                let since = self.topics.now();
                mine.push(name.clone());
                let subs = self.by_topic.get_mut(&name).expect("found above");
                subs.slots.insert(key.slot, (key.generation, since));
            }
            None => {
                let name: Arc<str> = topic.into();
                let (count, since) = self.topics.join(&self.mailbox, topic);
                mine.push(name.clone());
                let mut slots = HashMap::new();
                slots.insert(key.slot, (key.generation, since));
                self.by_topic.insert(name, Subscribers { slots, count });
            }
        }
        meter::subscriptions(1);
        true
    }

    /// Unsubscribes `key`; false if it was not subscribed.
    pub(crate) fn unsubscribe(&mut self, key: Key, topic: &str) -> bool {
        let Some(mine) = self.by_slot.get_mut(&key.slot) else {
            return false;
        };
        let Some(at) = mine.iter().position(|t| &**t == topic) else {
            return false;
        };
        mine.swap_remove(at);
        if mine.is_empty() {
            self.by_slot.remove(&key.slot);
        }
        self.forget(key.slot, topic);
        true
    }

    fn forget(&mut self, slot: u32, topic: &str) {
        let Some(subs) = self.by_topic.get_mut(topic) else {
            return;
        };
        let Some((generation, _)) = subs.slots.remove(&slot) else {
            return;
        };
        if self.run.as_deref() == Some(topic) {
            self.left.insert(Key { slot, generation });
        }
        subs.count.fetch_sub(1, Ordering::Relaxed);
        meter::subscriptions(-1);
        if subs.slots.is_empty() {
            self.by_topic.remove(topic);
            self.topics.leave(&self.mailbox, topic);
        }
    }

    /// The connection in `slot` is gone: drops its subscriptions.
    pub(crate) fn end(&mut self, slot: u32) {
        if let Some(mine) = self.by_slot.remove(&slot) {
            for topic in mine {
                self.forget(slot, &topic);
            }
        }
    }

    pub(crate) fn is_subscribed(&self, key: Key, topic: &str) -> bool {
        self.by_slot
            .get(&key.slot)
            .is_some_and(|mine| mine.iter().any(|t| &**t == topic))
    }

    /// The topics `key` subscribes to.
    pub(crate) fn of(&self, key: Key) -> &[Arc<str>] {
        self.by_slot.get(&key.slot).map_or(&[], |v| v.as_slice())
    }

    /// A run of publishes to `topic` starts being delivered (`None`: none
    /// is): from now until the next call, [`left_run`](Self::left_run)
    /// tells who unsubscribed from it.
    pub(crate) fn watch_run(&mut self, topic: Option<Arc<str>>) {
        self.run = topic;
        self.left.clear();
    }

    /// Whether `key` unsubscribed from the topic of the run being
    /// delivered since it started.
    #[inline]
    pub(crate) fn left_run(&self, key: Key) -> bool {
        !self.left.is_empty() && self.left.contains(&key)
    }

    /// The subscribers of `topic` that publish `seq` is for (those that
    /// subscribed before it), appended to `into`.
    pub(crate) fn subscribers(&self, topic: &str, seq: u64, into: &mut Vec<Subscriber>) {
        if let Some(subs) = self.by_topic.get(topic) {
            into.extend(
                subs.slots
                    .iter()
                    .filter(|(_, (_, since))| *since <= seq)
                    .map(|(&slot, &(generation, since))| Subscriber {
                        key: Key { slot, generation },
                        since,
                    }),
            );
        }
    }
}

/// A subscriber of a topic: its connection, and the place of the first
/// publish its subscription gets ([`Delivery::seq`](crate::topics::Delivery)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Subscriber {
    pub(crate) key: Key,
    pub(crate) since: u64,
}

impl Drop for Subs {
    /// An engine that stops (its runtime shut down, or the hub) takes its
    /// subscriptions with it: no publish queues for it any more.
    fn drop(&mut self) {
        for (topic, subs) in self.by_topic.drain() {
            meter::subscriptions(-(subs.slots.len() as i64));
            self.topics.leave(&self.mailbox, &topic);
        }
        // Publishers slowed for this engine go on.
        self.mailbox.close();
    }
}

/// The token naming a connection in its engine's mailbox entries.
pub(crate) fn token(key: Key) -> u64 {
    (u64::from(key.slot) << 32) | u64::from(key.generation)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(slot: u32) -> Key {
        Key {
            slot,
            generation: 1,
        }
    }

    #[test]
    fn subscriptions_follow_connections_and_reach_the_registry() {
        let topics = Topics::new();
        let mut subs = Subs::new(topics.clone());
        assert!(subs.subscribe(key(1), "a"));
        assert!(!subs.subscribe(key(1), "a"), "twice is once");
        assert!(subs.subscribe(key(2), "a"));
        assert!(subs.subscribe(key(2), "b"));
        assert_eq!(topics.subscribers("a"), 2);
        assert!(subs.is_subscribed(key(2), "b"));
        assert_eq!(subs.of(key(2)).len(), 2);
        let mut got = Vec::new();
        subs.subscribers("a", u64::MAX, &mut got);
        let mut got: Vec<Key> = got.iter().map(|s| s.key).collect();
        got.sort_by_key(|k| k.slot);
        assert_eq!(got, [key(1), key(2)]);
        assert!(subs.unsubscribe(key(1), "a"));
        assert!(!subs.unsubscribe(key(1), "a"));
        assert_eq!(topics.subscribers("a"), 1);
        subs.end(2);
        assert_eq!(topics.subscribers("a"), 0);
        assert!(topics.names().is_empty());
        assert!(subs.of(key(2)).is_empty());
        let mut got = Vec::new();
        subs.subscribers("a", u64::MAX, &mut got);
        assert!(got.is_empty());
    }

    #[test]
    fn a_connection_subscribed_to_nothing_holds_nothing() {
        let topics = Topics::new();
        let mut subs = Subs::new(topics.clone());
        assert!(!subs.is_subscribed(key(1), "a"));
        assert!(!subs.unsubscribe(key(1), "a"), "never subscribed");
        subs.subscribe(key(1), "a");
        subs.subscribe(key(1), "b");
        subs.subscribe(key(2), "a");
        assert!(!subs.is_subscribed(key(1), "c"));
        assert!(!subs.unsubscribe(key(1), "c"), "not to that topic");
        assert!(subs.unsubscribe(key(1), "a"));
        assert!(subs.is_subscribed(key(1), "b"));
        assert!(!subs.is_subscribed(key(1), "a"));
        assert!(subs.is_subscribed(key(2), "a"));
        assert!(subs.unsubscribe(key(1), "b"));
        assert!(
            !subs.by_slot.contains_key(&1),
            "its list went with its last topic"
        );
        assert!(
            !subs.by_topic.contains_key("b"),
            "the topic went with its last subscriber"
        );
        assert_eq!(topics.names(), ["a"]);
        subs.end(2);
        assert!(subs.by_slot.is_empty() && subs.by_topic.is_empty());
        assert!(topics.names().is_empty());
        // Ending a connection that subscribed to nothing changes nothing.
        subs.subscribe(key(3), "a");
        subs.end(4);
        assert_eq!(topics.subscribers("a"), 1);
    }

    #[test]
    fn an_engine_keeps_one_name_per_topic() {
        let topics = Topics::new();
        let mut subs = Subs::new(topics);
        subs.subscribe(key(1), "a");
        subs.subscribe(key(2), "a");
        assert!(Arc::ptr_eq(&subs.of(key(1))[0], &subs.of(key(2))[0]));
    }

    #[test]
    fn subscribers_are_named_with_their_generation() {
        let topics = Topics::new();
        let mut subs = Subs::new(topics);
        let k = Key {
            slot: 5,
            generation: 9,
        };
        subs.subscribe(k, "a");
        let mut got = Vec::new();
        subs.subscribers("a", u64::MAX, &mut got);
        let since = got[0].since;
        assert_eq!(got, [Subscriber { key: k, since }]);
        // Appended: what was there stays.
        subs.subscribers("a", u64::MAX, &mut got);
        assert_eq!(got.len(), 2);
    }

    #[test]
    fn a_subscription_gets_only_what_is_published_after_it() {
        use crate::proto::message::{Message, PreparedMessage};
        use std::collections::VecDeque;
        let msg = PreparedMessage::new(&Message::text("x")).unwrap();
        let topics = Topics::new();
        let mut subs = Subs::new(topics.clone());
        subs.subscribe(key(1), "a");
        topics.publish("a", &msg);
        // Before its engine took the first publish from its mailbox.
        subs.subscribe(key(2), "a");
        topics.publish("a", &msg);
        let mut got = VecDeque::new();
        subs.mailbox.take(&mut got, &mut Vec::new());
        let (first, second) = (got[0].seq, got[1].seq);
        assert!(first < second);
        let mut found = Vec::new();
        subs.subscribers("a", first, &mut found);
        assert_eq!(found.iter().map(|s| s.key).collect::<Vec<_>>(), [key(1)]);
        found.clear();
        subs.subscribers("a", second, &mut found);
        found.sort_by_key(|s| s.key.slot);
        assert_eq!(
            found.iter().map(|s| s.key).collect::<Vec<_>>(),
            [key(1), key(2)]
        );
        // Each with the place it subscribed at: the second after the first
        // publish, up to the second.
        assert!(found[0].since <= first);
        assert!(first < found[1].since && found[1].since <= second);
    }

    #[test]
    fn who_leaves_the_run_being_delivered_is_told() {
        let topics = Topics::new();
        let mut subs = Subs::new(topics);
        subs.subscribe(key(1), "a");
        subs.subscribe(key(2), "a");
        subs.subscribe(key(2), "b");
        subs.subscribe(key(3), "a");
        // No run: nothing is kept.
        subs.unsubscribe(key(3), "a");
        assert!(!subs.left_run(key(3)));
        subs.watch_run(Some("a".into()));
        subs.unsubscribe(key(2), "b");
        assert!(!subs.left_run(key(2)), "another topic");
        subs.unsubscribe(key(2), "a");
        subs.end(1);
        assert!(subs.left_run(key(2)) && subs.left_run(key(1)));
        assert!(
            !subs.left_run(Key {
                slot: 1,
                generation: 2
            }),
            "the slot's next connection"
        );
        subs.watch_run(Some("a".into()));
        assert!(
            !subs.left_run(key(1)),
            "a new run starts from its own subscribers"
        );
        subs.subscribe(key(4), "a");
        subs.unsubscribe(key(4), "a");
        subs.watch_run(None);
        assert!(!subs.left_run(key(4)));
    }

    #[test]
    fn a_dropped_engine_leaves_the_registry() {
        let topics = Topics::new();
        let mut subs = Subs::new(topics.clone());
        subs.subscribe(key(1), "a");
        subs.subscribe(key(2), "a");
        subs.subscribe(key(2), "b");
        drop(subs);
        assert_eq!(topics.subscribers("a"), 0);
        assert!(topics.names().is_empty());
    }

    #[test]
    fn tokens_tell_slots_and_generations_apart() {
        let a = Key {
            slot: 1,
            generation: 2,
        };
        let b = Key {
            slot: 2,
            generation: 1,
        };
        assert_ne!(token(a), token(b));
        assert_eq!(token(a), (1 << 32) | 2);
    }
}
