//! The ring a topic's [`TopicReceiver`](crate::topics::TopicReceiver)s
//! read: messages kept until every receiver has read them, at most
//! `capacity` (a receiver further behind skips ahead). It holds what is
//! unread, not `capacity` slots from the start: a topic whose receivers
//! keep up holds nothing, and memory grows only with a backlog (and is
//! given back as it shrinks).

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use tokio::sync::Notify;

use crate::proto::message::PreparedMessage;

#[derive(Debug)]
pub(crate) struct Ring {
    inner: Mutex<Inner>,
    /// Woken at each send, for receivers waiting.
    sent: Notify,
}

#[derive(Debug)]
struct Inner {
    capacity: usize,
    /// Messages, oldest first, each with the receivers that have not read
    /// it yet.
    items: VecDeque<(PreparedMessage, usize)>,
    /// The place of `items[0]` in the topic's order of sends.
    head: u64,
    receivers: usize,
}

/// What a receiver's next read found.
#[derive(Debug, PartialEq)]
pub(crate) enum Read {
    Message(PreparedMessage),
    /// The receiver fell this many behind; it now reads from the oldest
    /// kept.
    Lagged(u64),
    Empty,
}

impl Inner {
    fn tail(&self) -> u64 {
        self.head + self.items.len() as u64
    }

    /// Drops what every receiver has read from the front, and memory the
    /// backlog no longer needs.
    fn trim(&mut self) {
        while self.items.front().is_some_and(|(_, rem)| *rem == 0) {
            self.items.pop_front();
            self.head += 1;
        }
        if self.items.capacity() > 16 && self.items.capacity() > 4 * self.items.len() {
            self.items.shrink_to(self.items.len() * 2);
        }
    }
}

impl Ring {
    pub(crate) fn new(capacity: usize) -> Ring {
        Ring {
            inner: Mutex::new(Inner {
                capacity: capacity.max(1),
                items: VecDeque::new(),
                head: 0,
                receivers: 0,
            }),
            sent: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new receiver: its place, where the next send will be.
    pub(crate) fn join(&self) -> u64 {
        let mut inner = self.lock();
        inner.receivers += 1;
        inner.tail()
    }

    /// A receiver at `next` is gone: what it had not read is one reader
    /// fewer. The receivers left.
    pub(crate) fn leave(&self, next: u64) -> usize {
        let mut inner = self.lock();
        inner.receivers -= 1;
        let from = next.saturating_sub(inner.head) as usize;
        for (_, rem) in inner.items.iter_mut().skip(from) {
            *rem -= 1;
        }
        inner.trim();
        inner.receivers
    }

    pub(crate) fn receivers(&self) -> usize {
        self.lock().receivers
    }

    /// Queues `msg` for every receiver; how many. Wakes none: the caller
    /// calls [`wake`](Self::wake) once it holds no lock of its own, as
    /// waking runs the receivers' wakers, which are not ours.
    pub(crate) fn push(&self, msg: &PreparedMessage) -> usize {
        let mut inner = self.lock();
        if inner.receivers == 0 {
            return 0;
        }
        if inner.items.len() >= inner.capacity {
            // The slowest skip ahead: the oldest goes.
            inner.items.pop_front();
            inner.head += 1;
        }
        let receivers = inner.receivers;
        inner.items.push_back((msg.clone(), receivers));
        receivers
    }

    /// Wakes the receivers waiting, after a [`push`](Self::push). A
    /// receiver registers before it reads (see [`recv`](Self::recv)), so
    /// one that read nothing before the push is woken by this.
    pub(crate) fn wake(&self) {
        self.sent.notify_waiters();
    }

    /// [`push`](Self::push) and [`wake`](Self::wake), for the tests.
    #[cfg(test)]
    pub(crate) fn send(&self, msg: &PreparedMessage) -> usize {
        let receivers = self.push(msg);
        self.wake();
        receivers
    }

    /// The next message for the receiver at `next`, moving it on.
    pub(crate) fn read(&self, next: &mut u64) -> Read {
        let mut inner = self.lock();
        if *next < inner.head {
            let skipped = inner.head - *next;
            *next = inner.head;
            return Read::Lagged(skipped);
        }
        let at = (*next - inner.head) as usize;
        let Some((msg, rem)) = inner.items.get_mut(at) else {
            return Read::Empty;
        };
        *rem -= 1;
        let msg = msg.clone();
        *next += 1;
        if at == 0 {
            inner.trim();
        }
        Read::Message(msg)
    }

    /// Waits for the next message for the receiver at `next`; `Err` with
    /// how many it skipped if it fell behind.
    pub(crate) async fn recv(&self, next: &mut u64) -> Result<PreparedMessage, u64> {
        loop {
            let sent = self.sent.notified();
            tokio::pin!(sent);
            // Registered before the check: a send between the two wakes it.
            sent.as_mut().enable();
            match self.read(next) {
                Read::Empty => sent.await,
                Read::Message(m) => return Ok(m),
                Read::Lagged(n) => return Err(n),
            }
        }
    }

    /// Messages kept (for the tests of memory).
    #[cfg(test)]
    pub(crate) fn kept(&self) -> (usize, usize) {
        let inner = self.lock();
        (inner.items.len(), inner.items.capacity())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::message::Message;

    fn msg(i: usize) -> PreparedMessage {
        PreparedMessage::new(&Message::text(i.to_string())).unwrap()
    }

    fn text(r: Read) -> String {
        match r {
            Read::Message(m) => String::from_utf8(m.payload().to_vec()).unwrap(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_ring_holds_only_what_is_unread_and_gives_memory_back() {
        let ring = Ring::new(1024);
        assert_eq!(ring.send(&msg(0)), 0, "nobody to send to");
        assert_eq!(ring.kept(), (0, 0), "nothing allocated up front");
        let mut a = ring.join();
        let mut b = ring.join();
        for i in 0..100 {
            assert_eq!(ring.send(&msg(i)), 2);
        }
        assert_eq!(ring.kept().0, 100);
        for i in 0..100 {
            assert_eq!(text(ring.read(&mut a)), i.to_string());
        }
        assert_eq!(ring.kept().0, 100, "b has read none");
        for i in 0..100 {
            assert_eq!(text(ring.read(&mut b)), i.to_string());
        }
        assert_eq!(ring.read(&mut a), Read::Empty);
        let (len, capacity) = ring.kept();
        assert_eq!(len, 0);
        assert!(capacity <= 16, "memory given back: {capacity}");
    }

    #[test]
    fn a_receiver_past_the_capacity_skips_ahead_and_is_told() {
        let ring = Ring::new(4);
        let mut slow = ring.join();
        let mut fast = ring.join();
        for i in 0..6 {
            ring.send(&msg(i));
            assert_eq!(text(ring.read(&mut fast)), i.to_string());
        }
        assert_eq!(ring.kept().0, 4);
        assert_eq!(ring.read(&mut slow), Read::Lagged(2));
        for i in 2..6 {
            assert_eq!(text(ring.read(&mut slow)), i.to_string());
        }
        assert_eq!(ring.kept().0, 0);
    }

    #[test]
    fn a_receiver_that_leaves_unread_lets_the_others_messages_go() {
        let ring = Ring::new(64);
        let mut a = ring.join();
        let b = ring.join();
        for i in 0..10 {
            ring.send(&msg(i));
        }
        for _ in 0..10 {
            ring.read(&mut a);
        }
        assert_eq!(ring.kept().0, 10, "b holds them");
        assert_eq!(ring.leave(b), 1);
        assert_eq!(ring.kept().0, 0);
        // A receiver joins at the tail: it gets only what comes after.
        let mut c = ring.join();
        ring.send(&msg(10));
        assert_eq!(text(ring.read(&mut c)), "10");
        assert_eq!(text(ring.read(&mut a)), "10");
        assert_eq!(ring.leave(a), 1);
        assert_eq!(ring.leave(c), 0);
        assert_eq!(ring.receivers(), 0);
    }

    #[tokio::test]
    async fn a_waiting_receiver_wakes_for_the_next_send() {
        let ring = std::sync::Arc::new(Ring::new(8));
        let mut next = ring.join();
        let waiting = {
            let ring = ring.clone();
            tokio::spawn(async move { text(Read::Message(ring.recv(&mut next).await.unwrap())) })
        };
        tokio::task::yield_now().await;
        ring.send(&msg(7));
        assert_eq!(waiting.await.unwrap(), "7");
    }
}
