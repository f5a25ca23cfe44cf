//! Pacing publishers: a publisher in this process is slowed while an
//! engine's inbox it publishes to is past half its bounds, so that the
//! engines' subscribers never miss what a fast publisher sends. This file
//! holds what marks and holds a publisher; the marks themselves and the
//! waiters are the inbox's (`mailbox.rs`), and the task's future is
//! [`Room`](crate::topics::Room).
//!
//! The rule:
//!
//! - an inbox is **pressed** once what waits in it (queued, or taken by
//!   its engine and not yet sent) reaches half of
//!   [`inbox_capacity`](crate::topics::TopicsConfig::inbox_capacity) or
//!   passes half of [`inbox_bytes`](crate::topics::TopicsConfig::inbox_bytes);
//! - it has **room** again once that is down to a quarter of each;
//! - a hub connection whose handler published (by any means: `Ws::publish`,
//!   the registry, a handle) to a pressed inbox while the engine was
//!   handing it a message it read stops reading there: the rest of the
//!   read stays buffered and the connection is served again once the
//!   first inbox it found pressed has room ([`Reading`], [`Held`]);
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
//! `Room` future, taken out when they are woken or stop waiting.

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::task::Waker;

use crate::topics::mailbox::{Mailbox, next_waiter};

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
