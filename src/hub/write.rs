//! Writing a connection out: what handlers sent is corked in its write
//! queue and written at once after a read (the replies to what it
//! brought) or at the end of the turn (sends to other connections, close
//! frames); a peer that does not read keeps its bytes waiting, and its
//! connection unread, until it does.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use tokio::io::AsyncWrite;

use crate::discard::discard;
use crate::hub::conn::{Conn, Slot, Stage};
use crate::hub::handler::Handler;
use crate::hub::slots::{Key, Slots};
use crate::hub::transport::Transport;
use crate::hub::turn::Turn;
use crate::hub::ws::Ws;
use crate::proto::outbox::QueuePool;
use crate::proto::receive::DISCARD_AT_ONCE;

/// Writes out connection `slot`, which has bytes corked this turn: its
/// key, for the engine to settle, unless there was nothing left to do.
pub(crate) fn flush_corked<H: Handler>(
    slots: &mut Slots<Box<Slot<H::Data>>>,
    slot: u32,
    handler: &mut H,
    turn: &mut Turn,
) -> Option<Key> {
    let (key, s) = slots.at_mut(slot)?;
    s.conn.dirty = false;
    if s.conn.buffered() == 0 && s.stage == Stage::Open && !s.conn.wants_drain && !s.conn.abandoned
    {
        // Written out already, by the read that corked it (the usual
        // echo): nothing left to do, and its service settled it.
        return None;
    }
    let waker = s.io_waker();
    let mut cx = Context::from_waker(waker.as_ref().unwrap_or(Waker::noop()));
    flush(s, &mut cx, handler, turn);
    Some(key)
}

/// Gives the turn back its list of connections to write (`dirty`, written
/// out and emptied), unless connections were marked while flushing (a
/// drain handler's sends): those are written next turn.
pub(crate) fn keep_dirty<T>(dirty: Vec<u32>, slots: &mut Slots<Box<Slot<T>>>, turn: &mut Turn) {
    if turn.writes.dirty.is_empty() {
        turn.writes.dirty = dirty;
        return;
    }
    for &slot in &turn.writes.dirty {
        if let Some((_, s)) = slots.at_mut(slot) {
            s.requeue(&mut turn.schedule);
        }
    }
}

impl Conn {
    /// Writes what waits, in order, until the transport takes no more
    /// (`Pending`) or all is written (the queue then goes back to `pool`).
    pub(crate) fn poll_write_out(
        &mut self,
        io: &mut Transport,
        cx: &mut Context<'_>,
        pool: &mut QueuePool,
    ) -> Poll<io::Result<()>> {
        loop {
            let written = self.driver.with_slices(|s| match s {
                [] => None,
                [one] => Some(Pin::new(&mut *io).poll_write(cx, one)),
                // Shared frames (publishes, large echoes) and what was
                // encoded around them go out in one system call.
                _ => Some(Pin::new(&mut *io).poll_write_vectored(cx, s)),
            });
            let Some(written) = written else {
                return Poll::Ready(Ok(()));
            };
            let n = match written {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {
                    self.driver.write_blocked();
                    return Poll::Pending;
                }
            };
            if self.driver.written(n, pool) {
                return Poll::Ready(Ok(()));
            }
        }
    }
}

/// Writes out what waits for the peer; tells the handler when a backed-up
/// connection drains; shuts an ending connection down once all is out.
pub(crate) fn flush<H: Handler>(
    slot: &mut Slot<H::Data>,
    cx: &mut Context<'_>,
    handler: &mut H,
    turn: &mut Turn,
) {
    if slot.conn.abandoned {
        return;
    }
    match slot
        .conn
        .poll_write_out(&mut slot.io, cx, &mut turn.writes.pool)
    {
        Poll::Ready(Ok(())) => {}
        Poll::Ready(Err(e)) => {
            slot.conn.transport_ended(Some(e));
            return;
        }
        Poll::Pending => {
            slot.conn.write_blocked = true;
            let waiting = slot.conn.buffered();
            turn.tally
                .write_blocked(slot.conn.blocked_share.blocked(waiting));
            return;
        }
    }
    if std::mem::replace(&mut slot.conn.write_blocked, false) {
        turn.tally.write_blocked(slot.conn.blocked_share.cleared());
        // Reading paused while the peer was behind: go on.
        slot.requeue(&mut turn.schedule);
    }
    if std::mem::replace(&mut slot.conn.wants_drain, false) && !slot.conn.is_closing() {
        if let (Stage::Open, Some(data)) = (slot.stage, slot.data.as_mut()) {
            handler.drain(&mut Ws {
                io: &slot.io,
                conn: &mut slot.conn,
                data,
                turn,
            });
        }
    }
    if slot.stage == Stage::Ending && slot.conn.buffered() == 0 {
        match Pin::new(&mut slot.io).poll_shutdown(cx) {
            Poll::Pending => {}
            // Shut down, or failed to: either way the connection is over.
            Poll::Ready(Ok(()))
                if slot.conn.linger && slot.conn.core().poll_timeout().is_some() =>
            {
                slot.stage = Stage::Lingering;
                slot.requeue(&mut turn.schedule);
            }
            Poll::Ready(_) => {
                // Not for a refused upgrade: a peer flooding its request
                // is read no further than the head's limit.
                if slot.data.is_some() {
                    discard(&mut slot.io, cx, DISCARD_AT_ONCE);
                }
                slot.conn.abandoned = true;
            }
        }
    }
}
