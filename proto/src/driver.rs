//! One connection's outgoing side, for every engine: the protocol core
//! ([`Connection`]) with the encoder and the write queue it fills. Every
//! send passes the core's rules here and is encoded here; an engine only
//! asks for the slices to write and says how much went, and keeps to its
//! public API (the Stream's `Sink`, the hub's `SendStatus`) in how it
//! reports the outcome.
//!
//! Queues are lent by the engine's [`Lender`] while something waits and
//! given back once all is written, so an idle connection holds no write
//! buffer whichever engine runs it.

use std::io::IoSlice;
use std::time::Instant;

use bytes::Bytes;

use crate::buffer::CORK;
use crate::conn::{Clock, Connection, Outgoing, Phase};
use crate::encoder::FrameEncoder;
use crate::error::Error;
use crate::header::OpCode;
use crate::message::{Frame, Message, PreparedMessage};
use crate::outbox::{MAX_SLICES, QueuePool, WriteQueue};

/// A prepared frame at least this large is queued as a reference to its
/// one shared copy (a publish to thousands); a smaller one is copied,
/// which costs less than a slice of its own in the write.
pub const SHARE_PREPARED_MIN: usize = 256;

/// Where a driver borrows its write queue from while it has bytes to
/// write, and gives it back to when they are written.
pub trait Lender {
    /// An empty queue.
    fn take(&mut self) -> Box<WriteQueue>;
    /// A queue emptied (or dropped from): keep it or free it.
    fn give(&mut self, q: Box<WriteQueue>);
}

impl Lender for QueuePool {
    #[inline]
    fn take(&mut self) -> Box<WriteQueue> {
        QueuePool::take(self)
    }

    #[inline]
    fn give(&mut self, q: Box<WriteQueue>) {
        QueuePool::give(self, q)
    }
}

/// The core, the encoder and the bytes waiting for the peer.
///
/// ```
/// use std::time::Instant;
/// use wavesock_proto::conn::{Connection, Outgoing, Timers};
/// use wavesock_proto::driver::Driver;
/// use wavesock_proto::encoder::FrameEncoder;
/// use wavesock_proto::outbox::{PoolLimits, QueuePool};
/// use wavesock_proto::{Message, Role};
///
/// let now = Instant::now();
/// let mut pool = QueuePool::new(PoolLimits {
///     buffer_len: 16 << 10,
///     buffer_max: 256 << 10,
///     count_max: 64,
///     bytes_max: 1 << 20,
/// });
/// let conn = Connection::new(Role::Server, Timers::default(), now);
/// let mut d = Driver::new(conn, FrameEncoder::new(Role::Server));
/// assert_eq!(d.send(Message::text("hi"), now, &mut pool)?, Outgoing::Send);
///
/// // The engine writes what the driver gives it, and says how much went.
/// let mut wire = Vec::new();
/// let n = d.with_slices(|slices| {
///     slices.iter().map(|s| { wire.extend_from_slice(s); s.len() }).sum()
/// });
/// assert!(d.written(n, &mut pool), "all written");
/// assert_eq!(wire, [0x81, 2, b'h', b'i']);
/// assert!(!d.holds_queue(), "an idle connection holds no write buffer");
/// # Ok::<(), wavesock_proto::Error>(())
/// ```
#[derive(Debug)]
pub struct Driver {
    conn: Connection,
    encoder: FrameEncoder,
    out: Option<Box<WriteQueue>>,
}

impl Driver {
    /// A driver for `conn`, encoding with `encoder` (of the same role).
    pub fn new(conn: Connection, encoder: FrameEncoder) -> Self {
        debug_assert_eq!(conn.role(), encoder.role());
        Driver {
            conn,
            encoder,
            out: None,
        }
    }

    /// The protocol core.
    #[inline]
    pub fn conn(&self) -> &Connection {
        &self.conn
    }

    /// The protocol core, to give it input.
    #[inline]
    pub fn conn_mut(&mut self) -> &mut Connection {
        &mut self.conn
    }

    /// The encoder, to set compression up after the handshake.
    pub fn encoder_mut(&mut self) -> &mut FrameEncoder {
        &mut self.encoder
    }

    /// Bytes waiting to be written.
    #[inline]
    pub fn buffered(&self) -> usize {
        self.out.as_ref().map_or(0, |q| q.len())
    }

    /// Whether what is queued should start leaving now, before the
    /// engine's own flush point: a cork's worth ([`CORK`]) waits, so a
    /// burst of sends reaches the peer while it goes on, and the queue
    /// stays small. (The receive step keeps the same rule for replies
    /// within one read.)
    #[inline]
    pub fn uncorks(&self) -> bool {
        self.buffered() >= CORK
    }

    /// Whether this connection holds a write queue now.
    pub fn holds_queue(&self) -> bool {
        self.out.is_some()
    }

    #[inline]
    fn queue(&mut self, lender: &mut impl Lender) -> &mut WriteQueue {
        self.out.get_or_insert_with(|| lender.take())
    }

    /// Sends `msg`, which passes the core's rules first
    /// ([`Connection::handle_send`]). A large payload that goes out as it
    /// is (a server's, uncompressed) is queued without a copy.
    #[inline]
    pub fn send(
        &mut self,
        msg: Message,
        now: impl Clock,
        lender: &mut impl Lender,
    ) -> Result<Outgoing, Error> {
        let verdict = self.conn.handle_send(&msg, now)?;
        if verdict == Outgoing::Send {
            self.encode_owned(msg, lender)?;
        }
        Ok(verdict)
    }

    fn encode_owned(&mut self, msg: Message, lender: &mut impl Lender) -> Result<(), Error> {
        let encoder = &mut self.encoder;
        let q = self.out.get_or_insert_with(|| lender.take());
        if let Some(payload) = q.encode(|b| encoder.encode_owned(msg, b))? {
            q.push_shared(payload);
        }
        Ok(())
    }

    /// Sends a whole text or binary message from a borrowed payload.
    #[inline]
    pub fn send_data(
        &mut self,
        opcode: OpCode,
        payload: &[u8],
        now: impl Clock,
        lender: &mut impl Lender,
    ) -> Result<Outgoing, Error> {
        let verdict = self.conn.handle_send_frame(opcode, true, now)?;
        if verdict == Outgoing::Send {
            let encoder = &mut self.encoder;
            self.out
                .get_or_insert_with(|| lender.take())
                .encode(|b| encoder.encode_data(opcode, payload, b))?;
        }
        Ok(verdict)
    }

    /// [`send_data`](Self::send_data) for a payload the caller holds as
    /// `Bytes` (a message sent on as it was received): queued without a
    /// copy when it goes out as it is and is large enough to be worth it.
    #[inline]
    pub fn send_data_shared(
        &mut self,
        opcode: OpCode,
        payload: Bytes,
        now: impl Clock,
        lender: &mut impl Lender,
    ) -> Result<Outgoing, Error> {
        if self.encoder.compresses_len(payload.len()) {
            return self.send_data(opcode, &payload, now, lender);
        }
        // Otherwise it goes out as it is, as a frame: the encoder writes
        // its header and queues the payload after it by reference when
        // that is worth it (large enough, and not a client's, which masks).
        self.send(
            Message::Frame(Frame::new(true, opcode, payload)),
            now,
            lender,
        )
    }

    /// Sends a prepared message: a server queues its one shared frame
    /// (compressed once per window size) by reference when large, a client
    /// masks it anew.
    pub fn send_prepared(
        &mut self,
        p: &PreparedMessage,
        now: impl Clock,
        lender: &mut impl Lender,
    ) -> Result<Outgoing, Error> {
        let verdict = self.conn.handle_send_frame(p.opcode(), true, now)?;
        if verdict == Outgoing::Skip {
            return Ok(verdict);
        }
        let Some(frame) = self.encoder.shared_frame(p)? else {
            let encoder = &mut self.encoder;
            self.out
                .get_or_insert_with(|| lender.take())
                .encode(|b| encoder.encode_prepared(p, b))?;
            return Ok(verdict);
        };
        let q = self.queue(lender);
        if frame.len() < SHARE_PREPARED_MIN {
            q.copy(&frame);
        } else {
            q.push_shared(frame);
        }
        Ok(verdict)
    }

    /// Queues the frames the core owes the peer (pongs, the close reply,
    /// keepalive pings); whether there were any. No backpressure holds
    /// them back: the core owes few and small ones.
    #[inline]
    pub fn transmit(&mut self, lender: &mut impl Lender) -> Result<bool, Error> {
        // Asked after every message: nothing owed is the case to keep
        // cheap, so the loop stays out of line.
        if !self.conn.owes() {
            return Ok(false);
        }
        match self.conn.poll_transmit() {
            None => Ok(false),
            Some(first) => self.transmit_from(first, lender).map(|()| true),
        }
    }

    fn transmit_from(&mut self, first: Message, lender: &mut impl Lender) -> Result<(), Error> {
        self.encode_owned(first, lender)?;
        while let Some(msg) = self.conn.poll_transmit() {
            self.encode_owned(msg, lender)?;
        }
        Ok(())
    }

    /// Queues bytes that are not WebSocket frames: the handshake's
    /// response.
    pub fn queue_raw(&mut self, bytes: &[u8], lender: &mut impl Lender) {
        self.queue(lender).copy_raw(bytes);
    }

    /// Fills `out` with the next bytes to write; how many slices it used
    /// (0: nothing waits).
    #[inline]
    pub fn slices<'a>(&'a self, out: &mut [IoSlice<'a>]) -> usize {
        self.out.as_ref().map_or(0, |q| q.slices(out))
    }

    /// Calls `write` with the slices of the next write (none when nothing
    /// waits): one when the bytes are in one piece, up to
    /// [`MAX_SLICES`] when shared chunks are queued.
    #[inline]
    pub fn with_slices<R>(&self, write: impl FnOnce(&[IoSlice<'_>]) -> R) -> R {
        let Some(q) = self.out.as_deref() else {
            return write(&[]);
        };
        if let Some(plain) = q.plain() {
            if plain.is_empty() {
                return write(&[]);
            }
            return write(&[IoSlice::new(plain)]);
        }
        let mut iov = [IoSlice::new(&[]); MAX_SLICES];
        let k = q.slices(&mut iov);
        write(&iov[..k])
    }

    /// `n` bytes were written. Once all is, the queue goes back to
    /// `lender`. Returns whether all is written.
    #[inline]
    pub fn written(&mut self, n: usize, lender: &mut impl Lender) -> bool {
        let Some(q) = self.out.as_deref_mut() else {
            assert_eq!(n, 0, "wrote bytes that were never queued");
            return true;
        };
        if q.consume(n) {
            lender.give(self.out.take().expect("checked above"));
            return true;
        }
        false
    }

    /// The transport takes no more for now: what waits keeps memory in
    /// proportion to its size while the peer is slow.
    pub fn write_blocked(&mut self) {
        if let Some(q) = self.out.as_deref_mut() {
            q.fit_waiting();
        }
    }

    /// The peer reads too slowly: `buffered` bytes wait for it, over the
    /// engine's `limit`, and the engine gives it up rather than queue more.
    /// The connection fails with [`Error::Backpressure`], whose close frame
    /// (1013, try again later) goes out next: frames not begun are dropped
    /// (the peer would read them long after the limit), the one being
    /// written is finished first. The connection then ends as any failing
    /// one does: once the close is written, or at the close timeout.
    /// `false` when it was closing already (its close frame waits behind
    /// the backlog): nothing changed.
    pub fn fail_backlogged(
        &mut self,
        buffered: usize,
        limit: usize,
        now: Instant,
        lender: &mut impl Lender,
    ) -> Result<bool, Error> {
        if self.conn.phase() != Phase::Open || self.conn.is_close_sent() {
            return Ok(false);
        }
        if let Some(q) = self.out.as_deref_mut() {
            q.drop_unbegun();
        }
        self.conn
            .handle_error(Error::Backpressure { buffered, limit }, now);
        self.transmit(lender)?;
        Ok(true)
    }

    /// Drops what waits to be written (the transport is gone, or the
    /// connection is abandoned) and gives the queue back.
    pub fn discard_writes(&mut self, lender: &mut impl Lender) {
        if let Some(q) = self.out.take() {
            lender.give(q);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Limits;
    use crate::Role;
    use crate::close::{CloseCode, CloseFrame};
    use crate::conn::Timers;
    use crate::decoder::MessageDecoder;
    use crate::encoder::SHARE_PAYLOAD_MIN;
    use crate::outbox::PoolLimits;
    use bytes::BytesMut;

    fn pool() -> QueuePool {
        QueuePool::new(PoolLimits {
            buffer_len: 1024,
            buffer_max: 1 << 20,
            count_max: 4,
            bytes_max: 1 << 20,
        })
    }

    fn driver(role: Role) -> Driver {
        let now = Instant::now();
        Driver::new(
            Connection::new(role, Timers::default(), now),
            FrameEncoder::new(role),
        )
    }

    /// Everything queued, written in pieces of `max` bytes.
    fn wire(d: &mut Driver, pool: &mut QueuePool, max: usize) -> BytesMut {
        let mut wire = BytesMut::new();
        loop {
            let mut iov = [IoSlice::new(&[]); 8];
            let k = d.slices(&mut iov);
            if k == 0 {
                break;
            }
            let mut n = 0;
            for s in &iov[..k] {
                let take = s.len().min(max - n);
                wire.extend_from_slice(&s[..take]);
                n += take;
            }
            d.written(n, pool);
        }
        wire
    }

    fn decode(role: Role, mut wire: BytesMut) -> Vec<Message> {
        // The peer's decoder: it reads what `role` wrote.
        let peer = match role {
            Role::Server => Role::Client,
            Role::Client => Role::Server,
        };
        let mut dec = MessageDecoder::new(peer, Limits::default());
        let mut out = Vec::new();
        while let Some(m) = dec.decode(&mut wire).unwrap() {
            out.push(m);
        }
        assert!(wire.is_empty());
        out
    }

    #[test]
    fn a_corks_worth_queued_starts_leaving_and_less_waits() {
        let mut pool = pool();
        let mut d = driver(Role::Server);
        let now = Instant::now();
        assert!(!d.uncorks(), "nothing queued");
        // A frame's header is 4 bytes at these sizes: one byte under the
        // cork, then one at it.
        d.send_data(OpCode::Binary, &vec![1; CORK - 5], now, &mut pool)
            .unwrap();
        assert_eq!(d.buffered(), CORK - 1);
        assert!(!d.uncorks());
        d.send_data(OpCode::Binary, &[], now, &mut pool).unwrap();
        assert!(d.buffered() >= CORK);
        assert!(d.uncorks());
        let _ = wire(&mut d, &mut pool, usize::MAX);
        assert!(!d.uncorks(), "written out");
    }

    #[test]
    fn sends_of_every_kind_arrive_in_order_and_the_queue_goes_back() {
        let mut pool = pool();
        let mut d = driver(Role::Server);
        let now = Instant::now();
        let big = Bytes::from(vec![5; SHARE_PAYLOAD_MIN + 10]);
        let prepared = PreparedMessage::new(&Message::binary(vec![9; SHARE_PREPARED_MIN])).unwrap();
        d.send(Message::text("one"), now, &mut pool).unwrap();
        d.send_data_shared(OpCode::Binary, big.clone(), now, &mut pool)
            .unwrap();
        d.send_data(OpCode::Text, b"two", now, &mut pool).unwrap();
        d.send_prepared(&prepared, now, &mut pool).unwrap();
        d.send_prepared(
            &PreparedMessage::new(&Message::text("small")).unwrap(),
            now,
            &mut pool,
        )
        .unwrap();
        assert!(d.holds_queue());
        let mut iov = [IoSlice::new(&[]); 8];
        assert!(d.slices(&mut iov) > 1, "large payloads are not copied");
        let got = decode(Role::Server, wire(&mut d, &mut pool, 100));
        assert_eq!(
            got,
            [
                Message::text("one"),
                Message::Binary(big),
                Message::text("two"),
                Message::binary(vec![9; SHARE_PREPARED_MIN]),
                Message::text("small"),
            ]
        );
        assert!(!d.holds_queue(), "an idle connection holds no queue");
        assert_eq!(pool.len(), 1);
    }

    fn n_slices(d: &Driver) -> usize {
        d.with_slices(|s| s.len())
    }

    /// Data goes out without reading the clock; a close reads it once,
    /// to start its deadline.
    #[test]
    fn only_a_close_reads_the_clock() {
        let mut pool = pool();
        let mut d = driver(Role::Server);
        let never = || -> Instant { panic!("the clock was read for data") };
        d.send(Message::text("x"), never, &mut pool).unwrap();
        d.send_data(OpCode::Binary, b"y", never, &mut pool).unwrap();
        let reads = std::cell::Cell::new(0);
        let at = Instant::now();
        let clock = || {
            reads.set(reads.get() + 1);
            at
        };
        assert_eq!(
            d.send(Message::Close(None), clock, &mut pool),
            Ok(Outgoing::Send)
        );
        assert_eq!(reads.get(), 1);
        assert!(d.conn().close_deadline_from(at).is_some());
    }

    #[test]
    fn a_lent_queue_gets_the_pools_buffer_size() {
        let mut pool = pool();
        let mut d = driver(Role::Server);
        d.send(Message::text("x"), Instant::now(), &mut pool)
            .unwrap();
        assert!(d.out.as_ref().unwrap().capacity() >= 1024);
    }

    #[test]
    fn a_payload_sent_on_is_shared_only_when_it_goes_out_as_it_is() {
        let now = Instant::now();
        let mut pool = pool();
        let big = Bytes::from(vec![5; SHARE_PAYLOAD_MIN]);
        for opcode in [OpCode::Binary, OpCode::Text] {
            let mut d = driver(Role::Server);
            d.send_data_shared(opcode, big.clone(), now, &mut pool)
                .unwrap();
            assert_eq!(n_slices(&d), 2, "{opcode:?}: the header, then the payload");
            let shared = d.with_slices(|s| s[1].as_ptr());
            assert_eq!(shared, big.as_ptr(), "not a copy");
        }
        // Under the threshold: copied.
        let mut d = driver(Role::Server);
        let small = big.slice(..SHARE_PAYLOAD_MIN - 1);
        d.send_data_shared(OpCode::Binary, small, now, &mut pool)
            .unwrap();
        assert_eq!(n_slices(&d), 1);
        // A client masks: copied.
        let mut d = driver(Role::Client);
        d.send_data_shared(OpCode::Binary, big.clone(), now, &mut pool)
            .unwrap();
        assert_eq!(n_slices(&d), 1);
    }

    #[cfg(feature = "deflate")]
    #[test]
    fn a_payload_sent_on_by_a_compressing_connection_is_compressed() {
        use crate::deflate::{DeflateConfig, DeflateParams, pair};
        let mut pool = pool();
        let mut d = driver(Role::Server);
        let (_, deflater) = pair(
            Role::Server,
            &DeflateParams::default(),
            &DeflateConfig::default(),
            1 << 20,
        )
        .unwrap();
        d.encoder_mut().set_deflater(deflater);
        let big = Bytes::from(vec![5; SHARE_PAYLOAD_MIN]);
        d.send_data_shared(OpCode::Binary, big, Instant::now(), &mut pool)
            .unwrap();
        assert_eq!(n_slices(&d), 1, "compressed into the queue");
        assert!(d.buffered() < 100, "{}", d.buffered());
        let rsv1 = d.with_slices(|s| s[0][0] & 0x40);
        assert_eq!(rsv1, 0x40, "marked compressed");
    }

    #[test]
    fn prepared_frames_from_256_bytes_are_shared() {
        let now = Instant::now();
        let mut pool = pool();
        // A 4-byte header (a 16-bit length): payloads of 252 and 251 bytes
        // make frames of 256 and 255.
        for (payload, shared) in [(252, true), (251, false)] {
            let p = PreparedMessage::new(&Message::binary(vec![1; payload])).unwrap();
            let mut d = driver(Role::Server);
            d.send_prepared(&p, now, &mut pool).unwrap();
            let ptr = d.with_slices(|s| s[0].as_ptr());
            assert_eq!(ptr == p.frame().as_ptr(), shared, "{payload}");
        }
    }

    #[test]
    fn a_blocked_write_fits_what_waits() {
        let mut pool = QueuePool::new(PoolLimits {
            buffer_len: 64 << 10,
            buffer_max: 1 << 20,
            count_max: 4,
            bytes_max: 1 << 20,
        });
        let mut d = driver(Role::Server);
        d.send(Message::text("x"), Instant::now(), &mut pool)
            .unwrap();
        assert!(d.out.as_ref().unwrap().capacity() >= 64 << 10);
        d.write_blocked();
        assert!(d.out.as_ref().unwrap().capacity() < 1024);
        assert_eq!(d.buffered(), 3);
    }

    #[test]
    fn a_client_masks_what_it_sends() {
        let mut pool = pool();
        let mut d = driver(Role::Client);
        let now = Instant::now();
        let big = Bytes::from(vec![5; SHARE_PAYLOAD_MIN + 10]);
        d.send(Message::Binary(big.clone()), now, &mut pool)
            .unwrap();
        d.send_prepared(
            &PreparedMessage::new(&Message::text("p")).unwrap(),
            now,
            &mut pool,
        )
        .unwrap();
        let mut iov = [IoSlice::new(&[]); 8];
        assert_eq!(d.slices(&mut iov), 1, "masked: copied");
        let got = decode(Role::Client, wire(&mut d, &mut pool, 7));
        assert_eq!(got, [Message::Binary(big), Message::text("p")]);
    }

    #[test]
    fn nothing_is_queued_after_our_close_and_a_second_close_is_skipped() {
        let mut pool = pool();
        let mut d = driver(Role::Server);
        let now = Instant::now();
        let close = Message::Close(Some(CloseFrame::new(CloseCode::NORMAL, "bye")));
        assert_eq!(d.send(close.clone(), now, &mut pool), Ok(Outgoing::Send));
        assert_eq!(d.send(close, now, &mut pool), Ok(Outgoing::Skip));
        let len = d.buffered();
        assert!(d.send(Message::text("late"), now, &mut pool).is_err());
        assert!(d.send_data(OpCode::Text, b"x", now, &mut pool).is_err());
        assert!(
            d.send_prepared(
                &PreparedMessage::new(&Message::text("x")).unwrap(),
                now,
                &mut pool
            )
            .is_err()
        );
        assert_eq!(d.buffered(), len, "nothing more queued");
    }

    #[test]
    fn a_backlogged_peer_gets_the_frame_begun_then_a_1013_close() {
        for role in [Role::Server, Role::Client] {
            let mut pool = pool();
            let mut d = driver(role);
            let now = Instant::now();
            let big = Bytes::from(vec![5; SHARE_PAYLOAD_MIN + 10]);
            d.send(Message::text("one"), now, &mut pool).unwrap();
            d.send_data_shared(OpCode::Binary, big.clone(), now, &mut pool)
                .unwrap();
            d.send(Message::text("three"), now, &mut pool).unwrap();
            // The peer took the first frame and part of the second.
            let mut got = BytesMut::new();
            d.with_slices(|s| {
                let mut left = 5 + 20;
                for s in s {
                    let k = s.len().min(left);
                    got.extend_from_slice(&s[..k]);
                    left -= k;
                }
            });
            assert!(!d.written(25, &mut pool));
            let buffered = d.buffered();
            assert!(d.fail_backlogged(buffered, 100, now, &mut pool).unwrap());
            got.extend(wire(&mut d, &mut pool, 7));
            let msgs = decode(role, got);
            let close = CloseFrame {
                code: CloseCode::TRY_AGAIN_LATER,
                reason: "reading too slowly: backpressure limit".into(),
            };
            assert_eq!(
                msgs,
                [
                    Message::text("one"),
                    Message::Binary(big.clone()),
                    Message::Close(Some(close))
                ],
                "{role:?}: the frame begun whole, the one behind it dropped"
            );
            assert_eq!(d.conn().phase(), Phase::Failing);
            assert_eq!(
                d.conn_mut().take_error(),
                Some(Error::Backpressure {
                    buffered,
                    limit: 100
                })
            );
            // Once closing, nothing changes: the engine gives it up.
            assert!(!d.fail_backlogged(1, 0, now, &mut pool).unwrap());
            assert!(!d.holds_queue());
        }
    }

    #[test]
    fn owed_frames_are_queued_by_transmit() {
        let mut pool = pool();
        let mut d = driver(Role::Server);
        let now = Instant::now();
        d.conn_mut()
            .handle_frame(&Message::Ping(Bytes::from_static(b"hi")), now);
        assert!(d.transmit(&mut pool).unwrap());
        assert!(!d.transmit(&mut pool).unwrap());
        let got = decode(Role::Server, wire(&mut d, &mut pool, 3));
        assert_eq!(got, [Message::Pong(Bytes::from_static(b"hi"))]);
    }

    #[test]
    fn discarded_writes_give_the_queue_back() {
        let mut pool = pool();
        let mut d = driver(Role::Server);
        d.queue_raw(b"HTTP/1.1 400 Bad Request\r\n\r\n", &mut pool);
        assert_eq!(d.buffered(), 28);
        d.discard_writes(&mut pool);
        assert_eq!(d.buffered(), 0);
        assert!(!d.holds_queue());
        assert_eq!(pool.len(), 1);
        assert!(d.written(0, &mut pool));
    }
}
