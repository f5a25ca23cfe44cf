//! Sending on a hub connection: the backpressure policy, then the
//! driver's rules and encoding; what is sent is corked in the connection's
//! write queue and written at the end of the read or the turn. Closing is
//! asked here and sent at the end of the turn.

use std::time::Instant;

use crate::error::{Error, Result};
use crate::hub::config::BackpressurePolicy;
use crate::hub::conn::Conn;
use crate::hub::event::SendStatus;
use crate::hub::turn::Turn;
use crate::meter::Kind;
use crate::proto::close::{CloseCode, CloseFrame};
use crate::proto::conn::Outgoing;
use crate::proto::driver::Driver;
use crate::proto::header::OpCode;
use crate::proto::message::{Message, PreparedMessage};
use crate::proto::outbox::QueuePool;

impl Conn {
    /// The peer reads too slowly for the backpressure policy: the core
    /// fails the connection (its close frame next, after the frame being
    /// written; what waits behind that is dropped).
    #[cold]
    fn fail_backlogged(&mut self, turn: &mut Turn, buffered: usize) {
        let now = turn.now();
        match self.driver.fail_backlogged(
            buffered,
            turn.writes.max_backpressure,
            now,
            &mut turn.writes.pool,
        ) {
            Ok(true) => {
                self.linger = true;
                self.mark(turn);
            }
            // Closing already: its close frame waits behind the backlog,
            // which the peer is not reading.
            Ok(false) => self.fail(Error::Backpressure {
                buffered,
                limit: turn.writes.max_backpressure,
            }),
            Err(e) => self.fail(e.into()),
        }
    }

    /// The common path of every send: the backpressure policy, then the
    /// driver's rules and encoding (`send`).
    fn send_with(
        &mut self,
        turn: &mut Turn,
        published: bool,
        sent: Option<(Kind, u64, usize)>,
        send: impl FnOnce(
            &mut Driver,
            Instant,
            &mut QueuePool,
        ) -> std::result::Result<Outgoing, crate::proto::Error>,
    ) -> Result<SendStatus> {
        // A publish goes out until the close frame does: it was made
        // before the end of the turn the close was asked in.
        if self.abandoned || (self.closing && !published) || self.core().is_close_sent() {
            // Closing (a backpressure close among them, whose frame waits
            // behind the frame being written): before the limit is looked
            // at, so that a second send in the call that met it is told so
            // rather than meeting the policy again.
            return Ok(SendStatus::Closed);
        }
        let buffered = self.buffered();
        if buffered > turn.writes.max_backpressure && self.closing {
            // A publish to a connection whose close was asked for: the
            // close comes next, as asked (not the policy's 1013).
            return Ok(SendStatus::Dropped);
        }
        if buffered > turn.writes.max_backpressure {
            self.wants_drain = true;
            return Ok(match turn.writes.policy {
                BackpressurePolicy::Drop => SendStatus::Dropped,
                BackpressurePolicy::Close => {
                    self.fail_backlogged(turn, buffered);
                    SendStatus::Dropped
                }
            });
        }
        let now = turn.now();
        // The hub reports a send after a close as `SendStatus::Closed`
        // where the Stream returns the core's error.
        match send(&mut self.driver, now, &mut turn.writes.pool) {
            Ok(Outgoing::Send) => {
                if let Some((kind, messages, len)) = sent {
                    turn.tally.sent(kind, messages, len);
                }
                self.mark(turn)
            }
            Ok(Outgoing::Skip)
            | Err(crate::proto::Error::AlreadyClosed | crate::proto::Error::ConnectionClosed) => {
                return Ok(SendStatus::Closed);
            }
            Err(e) => return Err(e.into()),
        }
        Ok(if self.buffered() > turn.writes.max_backpressure {
            self.wants_drain = true;
            SendStatus::Backpressure
        } else {
            SendStatus::Sent
        })
    }

    pub(crate) fn send_message(&mut self, turn: &mut Turn, msg: &Message) -> Result<SendStatus> {
        // A message in pieces counts once, as its first piece's kind.
        let mut pieces = self.pieces;
        let sent = pieces.count(msg.head(), msg.len());
        let status = self.send_with(turn, false, sent, |d, now, pool| {
            d.send(msg.clone(), now, pool)
        })?;
        if matches!(status, SendStatus::Sent | SendStatus::Backpressure) {
            self.pieces = pieces;
        }
        Ok(status)
    }

    pub(crate) fn send_data(
        &mut self,
        turn: &mut Turn,
        opcode: OpCode,
        payload: &[u8],
    ) -> Result<SendStatus> {
        let sent = Kind::counted(opcode, payload.len()).map(|(k, len)| (k, 1, len));
        // The message being handled, sent on as it is (an echo, a relay):
        // the driver queues its payload where it was read when nothing
        // transforms it.
        let same = turn
            .writes
            .current
            .as_ref()
            .filter(|c| c.as_ptr() == payload.as_ptr() && c.len() == payload.len());
        if let Some(current) = same.cloned() {
            return self.send_with(turn, false, sent, |d, now, pool| {
                d.send_data_shared(opcode, current, now, pool)
            });
        }
        self.send_with(turn, false, sent, |d, now, pool| {
            d.send_data(opcode, payload, now, pool)
        })
    }

    pub(crate) fn send_prepared(
        &mut self,
        turn: &mut Turn,
        msg: &PreparedMessage,
    ) -> Result<SendStatus> {
        // A publish to thousands: each connection queues a reference to
        // the one frame (compressed once per window size), not a copy.
        let sent = Kind::counted(msg.opcode(), msg.payload().len()).map(|(k, len)| (k, 1, len));
        self.send_with(turn, false, sent, |d, now, pool| {
            d.send_prepared(msg, now, pool)
        })
    }

    #[cfg(feature = "topics")]
    /// Sends what was published to a topic the connection subscribes to,
    /// as [`send_prepared`](Self::send_prepared), closing or not.
    pub(crate) fn deliver(&mut self, turn: &mut Turn, msg: &PreparedMessage) -> Result<SendStatus> {
        let sent = Kind::counted(msg.opcode(), msg.payload().len()).map(|(k, len)| (k, 1, len));
        self.send_with(turn, true, sent, |d, now, pool| {
            d.send_prepared(msg, now, pool)
        })
    }

    pub(crate) fn close(&mut self, turn: &mut Turn, code: CloseCode, reason: &str) -> Result<()> {
        self.close_with(turn, Some(CloseFrame::truncated(code, reason)))
    }

    /// Asks for the closing handshake with `frame`: checked now (an
    /// invalid code is refused and changes nothing), sent by
    /// `send_close` at the end of the turn. Closing twice does nothing.
    pub(crate) fn close_with(&mut self, turn: &mut Turn, frame: Option<CloseFrame>) -> Result<()> {
        CloseFrame::encode(frame.as_ref()).map_err(Error::from)?;
        if self.is_closing() {
            return Ok(());
        }
        self.closing = true;
        self.ending().close = frame;
        turn.writes.closing.push(self.key);
        Ok(())
    }

    /// Sends the close frame [`close_with`](Self::close_with) asked for,
    /// unless the closing handshake began otherwise meanwhile.
    pub(crate) fn send_close(&mut self, turn: &mut Turn) {
        if !std::mem::replace(&mut self.closing, false) {
            return;
        }
        let frame = self.ending.as_mut().and_then(|e| e.close.take());
        if !self.abandoned {
            // Behind what was sent before it, whatever waits: the close
            // asked for is not a send the backpressure policy refuses (nor
            // turns into its own 1013).
            let now = turn.now();
            if let Ok(Outgoing::Send) =
                self.driver
                    .send(Message::Close(frame), now, &mut turn.writes.pool)
            {
                self.mark(turn);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::IoSlice;

    use super::*;
    use crate::hub::config::HubConfig;
    use crate::hub::handle::HubHandle;
    use crate::hub::slots::Key;
    use crate::proto::Role;
    use crate::proto::conn::Connection;

    fn conn() -> Conn {
        let key = Key {
            slot: 0,
            generation: 0,
        };
        let now = Instant::now();
        Conn::new(
            key,
            Connection::new(Role::Server, crate::Config::default().timers(), now),
        )
    }

    fn turn() -> Turn {
        let config = HubConfig {
            backpressure_policy: BackpressurePolicy::Close,
            ..HubConfig::default()
        };
        let handle = HubHandle::new(Vec::new(), Vec::new(), &config);
        Turn::new(0, 0, handle, &config)
    }

    #[test]
    fn large_prepared_frames_are_shared_and_small_ones_copied() {
        let mut turn = turn();
        let mut c = conn();
        let big = PreparedMessage::new(&Message::binary(vec![7u8; 1024])).unwrap();
        let small = PreparedMessage::new(&Message::text("hi")).unwrap();
        assert_eq!(c.send_prepared(&mut turn, &big).unwrap(), SendStatus::Sent);
        let mut iov = [IoSlice::new(&[]); 4];
        assert_eq!(c.driver.slices(&mut iov), 1);
        assert_eq!(&*iov[0], &big.frame()[..], "the same bytes");
        assert_eq!(iov[0].as_ptr(), big.frame().as_ptr(), "not a copy");
        assert_eq!(turn.writes.dirty, [0]);
        assert_eq!(
            c.send_prepared(&mut turn, &small).unwrap(),
            SendStatus::Sent
        );
        let mut iov = [IoSlice::new(&[]); 4];
        assert_eq!(
            c.driver.slices(&mut iov),
            2,
            "the small one copied after it"
        );
        assert_eq!(&*iov[1], &small.frame()[..]);
        assert_eq!(c.buffered(), big.frame().len() + small.frame().len());
    }

    /// What the connection being read sends it joins the turn's list to
    /// write only if the read leaves some unwritten; another connection's
    /// sends join it at once.
    #[test]
    fn a_read_that_writes_its_replies_leaves_nothing_for_the_turn() {
        let mut turn = turn();
        let mut c = conn();
        c.begin_read(&mut turn);
        assert_eq!(
            c.send_data(&mut turn, OpCode::Binary, b"reply").unwrap(),
            SendStatus::Sent
        );
        assert!(c.dirty, "corked: the read's flush writes it");
        assert!(turn.writes.dirty.is_empty(), "not listed while read");
        // The read's flush wrote it all.
        let n = c.buffered();
        assert!(c.driver.written(n, &mut turn.writes.pool));
        c.end_read(&mut turn);
        assert!(!c.dirty);
        assert!(turn.writes.dirty.is_empty());

        // A reply the read could not write out is the turn's to write.
        c.begin_read(&mut turn);
        c.send_data(&mut turn, OpCode::Binary, b"reply").unwrap();
        c.end_read(&mut turn);
        assert!(c.dirty);
        assert_eq!(turn.writes.dirty, [0]);

        // Between reads, a send is listed at once.
        let mut other = conn();
        other.key.slot = 1;
        other.send_data(&mut turn, OpCode::Binary, b"x").unwrap();
        assert_eq!(turn.writes.dirty, [0, 1]);
    }

    #[test]
    fn a_shared_frame_past_the_limit_says_backpressure() {
        let mut turn = turn();
        turn.writes.max_backpressure = 1500;
        let mut c = conn();
        let big = PreparedMessage::new(&Message::binary(vec![7u8; 1024])).unwrap();
        assert_eq!(c.send_prepared(&mut turn, &big).unwrap(), SendStatus::Sent);
        assert_eq!(
            c.send_prepared(&mut turn, &big).unwrap(),
            SendStatus::Backpressure
        );
        assert!(c.wants_drain);
        assert_eq!(
            c.send_prepared(&mut turn, &big).unwrap(),
            SendStatus::Dropped
        );
    }
}
