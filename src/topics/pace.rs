//! Pacing publishers: a publisher in this process is slowed while an
//! engine's inbox it publishes to is past half its bounds, so that the
//! engines' subscribers never miss what a fast publisher sends.
//!
//! The rule, in one place:
//!
//! - an inbox is **pressed** once what waits in it (queued, or taken by
//!   its engine and not yet sent) reaches half of
//!   [`inbox_capacity`](crate::topics::TopicsConfig::inbox_capacity) or
//!   passes half of [`inbox_bytes`](crate::topics::TopicsConfig::inbox_bytes);
//! - it has **room** again once that is down to a quarter of each;
//! - a hub connection whose handler published (by any means: `Ws::publish`,
//!   the registry, a handle) to a pressed inbox while the engine was
//!   handing it a message it read stops reading there: the rest of the
//!   read stays buffered and the connection is served again once every
//!   inbox it waits for has room ([`Reading`]);
//! - a task outside an engine waits with
//!   [`Topics::room`](crate::topics::Topics::room) or
//!   [`Topics::publish_when_room`](crate::topics::Topics::publish_when_room).
//!
//! Between the two marks is slack: a resumed publisher gets a quarter of
//! the bounds before it is slowed again, so that it is not woken for each
//! publish an engine sends. The half left above the mark takes what
//! publishers send before they are slowed (each finishes the message its
//! handler is handling) and what cannot be slowed (publishes through the
//! Redis link, immediate publishes from tasks).
//!
//! Waiting publishers are wakers in the inbox, under its lock, each under
//! a name of its own: one per waiting hub connection and one per pending
//! [`Room`] future, taken out when they are woken or stop waiting.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};

use crate::topics::{Mailbox, Topics, Waiting};

/// An inbox's bounds, as the pacing rule reads them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    pub(crate) publishes: usize,
    pub(crate) bytes: usize,
}

impl Waiting {
    /// Publishes waiting for the engine: queued, or taken and not sent.
    fn behind(&self) -> usize {
        self.items.len() + self.taken
    }

    /// Past the mark at which publishers are slowed.
    pub(crate) fn pressed(&self, bounds: Bounds) -> bool {
        !self.closed
            && (self.behind().saturating_mul(2) >= bounds.publishes
                || self.bytes.saturating_mul(2) > bounds.bytes)
    }

    /// Down to the mark at which slowed publishers go on.
    pub(crate) fn has_room(&self, bounds: Bounds) -> bool {
        self.closed
            || (self.behind().saturating_mul(4) <= bounds.publishes
                && self.bytes.saturating_mul(4) <= bounds.bytes)
    }

    /// The waiters to wake, if the inbox has room now (taken out: they are
    /// woken once the lock is let go).
    pub(crate) fn woken(&mut self, bounds: Bounds) -> Vec<Waker> {
        if self.room.is_empty() || !self.has_room(bounds) {
            return Vec::new();
        }
        self.room.drain().map(|(_, w)| w).collect()
    }
}

/// Names a waiter in the inboxes it waits in: registering again replaces
/// its waker, and it takes its waker out when it stops waiting.
fn next_waiter() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl Mailbox {
    /// Waiter `id` waits for room in this inbox unless it has some:
    /// whether it waits.
    fn wait_for_room(&self, id: u64, waker: &Waker) -> bool {
        let mut waiting = self.lock();
        if waiting.has_room(self.bounds) {
            waiting.room.remove(&id);
            return false;
        }
        register(&mut waiting, id, waker);
        true
    }

    /// Waiter `id` waits if the inbox is pressed: whether it does.
    fn wait_if_pressed(&self, id: u64, waker: &Waker) -> bool {
        let mut waiting = self.lock();
        if !waiting.pressed(self.bounds) {
            waiting.room.remove(&id);
            return false;
        }
        register(&mut waiting, id, waker);
        true
    }

    /// Waiter `id` waits no more.
    fn forget(&self, id: u64) {
        let gone = self.lock().room.remove(&id);
        // Dropped with the lock let go: a waker's drop is code of its own.
        drop(gone);
    }

    /// The engine is gone: nobody will take what waits, so nobody waits
    /// for it.
    pub(crate) fn close(&self) {
        let woken: Vec<Waker> = {
            let mut waiting = self.lock();
            waiting.closed = true;
            waiting.room.drain().map(|(_, w)| w).collect()
        };
        woken.into_iter().for_each(Waker::wake);
    }
}

/// Registers (or refreshes) waiter `id`'s waker: one entry a waiter.
fn register(waiting: &mut Waiting, id: u64, waker: &Waker) {
    match waiting.room.get_mut(&id) {
        Some(w) => w.clone_from(waker),
        None => {
            waiting.room.insert(id, waker.clone());
        }
    }
}

thread_local! {
    /// An engine on this thread hands a connection what it read.
    static READING: Cell<bool> = const { Cell::new(false) };
    /// A publish meanwhile found an inbox pressed (read after every
    /// message: a flag, apart from the inbox).
    static PRESSED: Cell<bool> = const { Cell::new(false) };
    /// The first inbox it found pressed.
    static WAITS_FOR: RefCell<Option<Arc<Mailbox>>> = const { RefCell::new(None) };
}

thread_local! {
    /// A task publishes after waiting for room (`publish_when_room`).
    static WAITED: Cell<bool> = const { Cell::new(false) };
}

/// Whether the publish being queued is paced: from a hub connection being
/// read, or a task that waited for room. Such a publish is slowed after
/// it, so an inbox that is not pressed takes it whatever its size (the
/// bytes bound's slack above the mark holds it, or the connection's one
/// message past the bound): a subscriber never misses what a paced
/// publisher sends into an inbox below its mark.
#[inline]
pub(crate) fn paced() -> bool {
    READING.get() || WAITED.get()
}

/// [`paced`] for a task's publish after it waited for room.
pub(crate) fn after_room<T>(publish: impl FnOnce() -> T) -> T {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            WAITED.set(false);
        }
    }
    WAITED.set(true);
    let _reset = Reset;
    publish()
}

/// A publish queued in `inbox`, which is now pressed: the connection
/// being read, if any, is to stop reading.
pub(crate) fn pressed(inbox: &Arc<Mailbox>) {
    if READING.get() && !PRESSED.get() {
        PRESSED.set(true);
        WAITS_FOR.with(|w| *w.borrow_mut() = Some(inbox.clone()));
    }
}

/// An engine hands a connection's messages to its handler: publishes
/// meanwhile are paced. Ended by [`Reading::end`] (or its drop, should a
/// handler panic).
#[derive(Debug)]
pub(crate) struct Reading(());

impl Reading {
    #[inline]
    pub(crate) fn begin() -> Reading {
        READING.set(true);
        Reading(())
    }

    /// Whether a publish since [`begin`](Self::begin) found an inbox
    /// pressed: the connection reads no further for now.
    #[inline]
    pub(crate) fn is_pressed(&self) -> bool {
        PRESSED.get()
    }

    /// The inbox the connection waits for, if any.
    #[inline]
    pub(crate) fn end(self) -> Option<Arc<Mailbox>> {
        // Dropped here, which clears the marks.
        if PRESSED.get() {
            WAITS_FOR.with(|w| w.borrow_mut().take())
        } else {
            None
        }
    }
}

impl Drop for Reading {
    #[inline]
    fn drop(&mut self) {
        READING.set(false);
        if PRESSED.replace(false) {
            WAITS_FOR.with(|w| w.borrow_mut().take());
        }
    }
}

/// A hub connection slowed for an inbox: it reads again once the inbox
/// has room.
#[derive(Debug)]
pub(crate) struct Held {
    inbox: Arc<Mailbox>,
    id: u64,
}

impl Held {
    /// Waits for room in `inbox` (`None`: it has room already).
    pub(crate) fn wait(inbox: Arc<Mailbox>, waker: &Waker) -> Option<Box<Held>> {
        let id = next_waiter();
        inbox
            .wait_for_room(id, waker)
            .then(|| Box::new(Held { inbox, id }))
    }

    /// Whether the connection still waits (registered again if it was
    /// woken and the inbox filled again meanwhile).
    pub(crate) fn still_full(&mut self, waker: &Waker) -> bool {
        self.inbox.wait_for_room(self.id, waker)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.inbox.forget(self.id);
    }
}

/// Resolves once no engine inbox holding `topic`'s subscribers is pressed:
/// from [`Topics::room`]. Dropped before that, it leaves nothing behind
/// in the inboxes it waited in.
#[derive(Debug)]
#[must_use = "a future does nothing unless polled"]
pub struct Room<'a> {
    topics: &'a Topics,
    topic: &'a str,
    id: u64,
    /// The inboxes it waits in.
    waits_in: Vec<Arc<Mailbox>>,
}

impl<'a> Room<'a> {
    pub(crate) fn new(topics: &'a Topics, topic: &'a str) -> Self {
        Room {
            topics,
            topic,
            id: next_waiter(),
            waits_in: Vec::new(),
        }
    }
}

impl Future for Room<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let inboxes = this.topics.inboxes(this.topic);
        // Registered in each pressed one: woken when one has room, this
        // looks at them all again.
        let mut pressed = false;
        for inbox in &inboxes {
            if inbox.wait_if_pressed(this.id, cx.waker()) {
                pressed = true;
                if !this.waits_in.iter().any(|i| Arc::ptr_eq(i, inbox)) {
                    this.waits_in.push(inbox.clone());
                }
            }
        }
        if pressed {
            Poll::Pending
        } else {
            // Nothing left registered (each look took it out).
            for inbox in this.waits_in.drain(..) {
                inbox.forget(this.id);
            }
            Poll::Ready(())
        }
    }
}

impl Drop for Room<'_> {
    fn drop(&mut self) {
        for inbox in self.waits_in.drain(..) {
            inbox.forget(self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    use super::*;
    use crate::proto::message::{Message, PreparedMessage};
    use crate::topics::TopicsConfig;

    fn prepared(s: &str) -> PreparedMessage {
        PreparedMessage::new(&Message::text(s.to_owned())).unwrap()
    }

    /// A waker that counts its wakes.
    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counting() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count::default());
        (count.clone(), Waker::from(count))
    }

    /// A registry of `capacity` publishes per inbox, one engine in `t`.
    fn one_engine(config: TopicsConfig) -> (Topics, Arc<Mailbox>) {
        let topics = Topics::with_config(config);
        let inbox = topics.mailbox();
        topics.join(&inbox, "t");
        (topics, inbox)
    }

    /// Takes what waits and sends `n` publishes, as the engine does (every
    /// publish here is one byte to a one-letter topic: 2 bytes each).
    fn send(inbox: &Mailbox, n: usize) {
        inbox.take(&mut VecDeque::new(), &mut Vec::new());
        inbox.sent(n, 2 * n);
    }

    #[test]
    fn an_inbox_is_pressed_at_half_and_has_room_at_a_quarter() {
        let (topics, inbox) = one_engine(TopicsConfig::default().inbox_capacity(8));
        let reading = Reading::begin();
        for i in 0..3 {
            topics.publish("t", &prepared(&i.to_string()));
        }
        assert!(!reading.is_pressed(), "3 of 8: not yet");
        topics.publish("t", &prepared("3"));
        assert!(reading.is_pressed(), "4 of 8: half");
        let waiting = reading.end().expect("the inbox it waits for");
        assert!(Arc::ptr_eq(&waiting, &inbox));
        let (count, waker) = counting();
        let mut held = Held::wait(inbox.clone(), &waker).expect("no room yet");
        send(&inbox, 1);
        assert!(held.still_full(&waker), "3 of 8 is above a quarter");
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
        send(&inbox, 1);
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "2 of 8: woken");
        assert!(!held.still_full(&waker));
        assert!(Held::wait(inbox.clone(), &waker).is_none(), "room now");
    }

    #[test]
    fn bytes_press_an_inbox_too() {
        // Each publish of one byte to `t` counts 2 bytes with its name.
        let (topics, inbox) = one_engine(TopicsConfig::default().inbox_bytes(16));
        let reading = Reading::begin();
        for i in 0..4 {
            topics.publish("t", &prepared(&i.to_string()));
        }
        assert!(!reading.is_pressed(), "8 of 16 bytes: not past half");
        topics.publish("t", &prepared("4"));
        assert!(reading.is_pressed(), "10 of 16 bytes");
        drop(reading);
        let (count, waker) = counting();
        let _held = Held::wait(inbox.clone(), &waker).expect("pressed");
        send(&inbox, 2);
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            0,
            "6 bytes: above a quarter"
        );
        send(&inbox, 1);
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "4 bytes: a quarter");
    }

    #[test]
    fn only_a_publish_while_an_engine_reads_is_marked() {
        let (topics, _inbox) = one_engine(TopicsConfig::default().inbox_capacity(2));
        topics.publish("t", &prepared("0"));
        topics.publish("t", &prepared("1"));
        // Not reading: nothing marked, nothing left behind for the next
        // read.
        let reading = Reading::begin();
        assert!(!reading.is_pressed());
        assert!(reading.end().is_none());
        let reading = Reading::begin();
        topics.publish("t", &prepared("2"));
        assert!(reading.is_pressed(), "full, and missed: pressed too");
        drop(reading);
        let reading = Reading::begin();
        assert!(!reading.is_pressed(), "a dropped reading leaves nothing");
        drop(reading);
    }

    #[test]
    fn the_first_pressed_inbox_is_the_one_waited_for() {
        let topics = Topics::with_config(TopicsConfig::default().inbox_capacity(2));
        let a = topics.mailbox();
        let b = topics.mailbox();
        topics.join(&a, "a");
        topics.join(&b, "b");
        let reading = Reading::begin();
        topics.publish("b", &prepared("0"));
        topics.publish("a", &prepared("0"));
        let waiting = reading.end().unwrap();
        assert!(Arc::ptr_eq(&waiting, &b));
    }

    #[test]
    fn a_waiter_registers_once_until_woken() {
        let (topics, inbox) = one_engine(TopicsConfig::default().inbox_capacity(4));
        for i in 0..4 {
            topics.publish("t", &prepared(&i.to_string()));
        }
        let (count, waker) = counting();
        let mut held = Held::wait(inbox.clone(), &waker).unwrap();
        for _ in 0..3 {
            // Served again for another reason: still waits, not again
            // registered.
            assert!(held.still_full(&waker));
        }
        assert_eq!(inbox.lock().room.len(), 1);
        send(&inbox, 3);
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert!(inbox.lock().room.is_empty());
        // Filled again before it read: it registers anew.
        for i in 0..3 {
            topics.publish("t", &prepared(&i.to_string()));
        }
        assert!(held.still_full(&waker));
        assert_eq!(inbox.lock().room.len(), 1);
        send(&inbox, 4);
        assert_eq!(count.0.load(Ordering::SeqCst), 2);
        assert!(!held.still_full(&waker));
        // A connection that ends while it waits takes its waker along.
        for i in 0..4 {
            topics.publish("t", &prepared(&i.to_string()));
        }
        let held = Held::wait(inbox.clone(), &waker).unwrap();
        assert_eq!(inbox.lock().room.len(), 1);
        drop(held);
        assert!(inbox.lock().room.is_empty());
    }

    #[test]
    fn a_dropped_room_future_leaves_nothing_behind() {
        let (topics, inbox) = one_engine(TopicsConfig::default().inbox_capacity(4));
        for i in 0..2 {
            topics.publish("t", &prepared(&i.to_string()));
        }
        for _ in 0..100 {
            let mut room = tokio_test::task::spawn(topics.room("t"));
            assert!(room.poll().is_pending());
            assert!(room.poll().is_pending(), "polled again: one entry still");
            assert_eq!(inbox.lock().room.len(), 1);
        }
        assert!(inbox.lock().room.is_empty(), "each took its waker along");
    }

    #[test]
    fn a_paced_publish_below_the_mark_fits_whatever_its_size() {
        // 16 bytes: a publish of 6 (and its topic) leaves the inbox below
        // its mark; one of 12 more would pass the bound.
        let (topics, _inbox) = one_engine(TopicsConfig::default().inbox_bytes(16));
        topics.publish("t", &prepared("aaaaaa"));
        let big = prepared("bbbbbbbbbbbb");
        assert_eq!(topics.publish("t", &big).local, 0, "not paced: missed");
        assert_eq!(topics.stats().inbox_dropped, 1);
        let reading = Reading::begin();
        assert_eq!(topics.publish("t", &big).local, 1, "paced: taken");
        assert!(reading.is_pressed(), "and slowed after it");
        // Pressed now: even a paced one misses past the bound.
        assert_eq!(topics.publish("t", &big).local, 0);
        drop(reading);
        assert_eq!(topics.stats().inbox_dropped, 2);
    }

    #[tokio::test]
    async fn a_task_that_waited_for_room_is_paced_too() {
        let (topics, _inbox) = one_engine(TopicsConfig::default().inbox_bytes(16));
        topics.publish("t", &prepared("aaaaaa"));
        let big = prepared("bbbbbbbbbbbb");
        assert_eq!(topics.publish_when_room("t", &big).await.local, 1);
        assert_eq!(topics.stats().inbox_dropped, 0);
        assert!(!paced(), "only for that publish");
    }

    #[test]
    fn a_closed_inbox_holds_nobody() {
        let (topics, inbox) = one_engine(TopicsConfig::default().inbox_capacity(2));
        topics.publish("t", &prepared("0"));
        let (count, waker) = counting();
        let mut held = Held::wait(inbox.clone(), &waker).unwrap();
        inbox.close();
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            1,
            "woken when its engine went"
        );
        assert!(!held.still_full(&waker));
        assert!(Held::wait(inbox.clone(), &waker).is_none());
    }

    #[tokio::test]
    async fn room_waits_for_every_engine_of_the_topic() {
        let topics = Topics::with_config(TopicsConfig::default().inbox_capacity(4));
        // No engine at all: room at once.
        topics.room("t").await;
        let a = topics.mailbox();
        let b = topics.mailbox();
        topics.join(&a, "t");
        topics.join(&b, "t");
        let other = topics.mailbox();
        topics.join(&other, "u");
        for i in 0..4 {
            topics.publish("t", &prepared(&i.to_string()));
            topics.publish("u", &prepared(&i.to_string()));
        }
        let mut room = tokio_test::task::spawn(topics.room("t"));
        assert!(room.poll().is_pending());
        send(&a, 4);
        assert!(room.is_woken(), "a has room");
        assert!(room.poll().is_pending(), "b is still pressed");
        send(&b, 3);
        assert!(room.is_woken());
        assert!(
            room.poll().is_ready(),
            "another topic's inbox is not waited for"
        );
        drop(room);
        // Publishing through it.
        let published =
            tokio_test::task::spawn(topics.publish_when_room("t", &prepared("x"))).poll();
        assert!(published.is_ready());
    }
}
