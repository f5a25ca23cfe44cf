//! Pacing publishers (`pace.rs`, the marks in `mailbox.rs`, `Room`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Wake, Waker};

use super::mailbox::Mailbox;
use super::pace::{Held, Reading, after_room, paced};
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
    let published = tokio_test::task::spawn(topics.publish_when_room("t", &prepared("x"))).poll();
    assert!(published.is_ready());
}

/// Tasks woken together for room, each sure of it, with messages larger
/// than what is left above the mark once one has published: the others
/// find it taken and wait again (queued nowhere) rather than have the
/// subscribers miss their publishes.
#[test]
fn a_task_that_finds_its_room_taken_waits_again() {
    let topics = Topics::with_config(TopicsConfig::default().inbox_bytes(16 << 10));
    let inbox = topics.mailbox();
    topics.join(&inbox, "t");
    let big = PreparedMessage::new(&Message::binary(vec![7u8; 6 << 10])).unwrap();
    // Two tasks saw room (nothing waits); the first publishes.
    let first = after_room(|| topics.publish_after_room("t", &big));
    assert_eq!(first.map(|p| p.local), Some(1));
    let second = after_room(|| topics.publish_after_room("t", &big));
    assert_eq!(
        second.map(|p| p.local),
        Some(1),
        "6 of 16 KiB: below the mark"
    );
    // The third's would pass the bound, the inbox past its mark: declined.
    let third = after_room(|| topics.publish_after_room("t", &big));
    assert!(third.is_none());
    assert_eq!(topics.stats().inbox_dropped, 0);
    assert_eq!(
        topics.stats().published,
        2,
        "the declined one is not counted"
    );
    let mut taken = VecDeque::new();
    inbox.take(&mut taken, &mut Vec::new());
    assert_eq!(taken.len(), 2);
}
