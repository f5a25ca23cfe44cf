//! Reading a connection: a loop around the core's receive step over the
//! engine's shared read buffer, handing each message to the handler
//! (borrowed from the buffer when it can be), with the reading state lent
//! from a pool while a connection has a message in progress.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{BufMut, BytesMut};

use crate::discard::{Discarded, discard};
use crate::hub::config::HubConfig;
use crate::hub::conn::{Conn, Slot};
use crate::hub::event::HubMessage;
use crate::hub::handler::Handler;
use crate::hub::transport::Transport;
use crate::hub::turn::Turn;
use crate::hub::write::flush;
use crate::hub::ws::Ws;
#[cfg(feature = "metrics")]
use crate::meter;
use crate::meter::Kind;
use crate::proto::Role;
use crate::proto::conn::{Connection, State};
use crate::proto::decoder::{BorrowedData, MessageDecoder};
use crate::proto::encoder::SHARE_PAYLOAD_MIN;
use crate::proto::inbox::{Inbox, OwnMemory, Plan, ReadMemory};
use crate::proto::message::Message;
#[cfg(feature = "metrics")]
use crate::proto::receive::Note;
use crate::proto::receive::{DISCARD_AT_ONCE, Ended, Input, Link, Receiver, Step, Stepped};
#[cfg(feature = "topics")]
use crate::topics::{Held, Reading};

/// Times per turn a connection whose memory budget had room at once goes
/// on before the others get their turn.
const BUDGET_RETRIES_PER_TURN: usize = 4;
/// Reads per connection per turn before the others get theirs.
const READS_PER_TURN: usize = 4;

/// Receivers kept for connections between messages.
const RECEIVER_POOL_MAX: usize = 1024;

/// Reading state (a [`Receiver`] and its inbox) lent to a connection while
/// it reads and taken back when it holds nothing of its own: an idle
/// connection keeps none.
// Receivers are boxed: they move between the pool and the connections
// that hold them (a pointer each), and a connection holds only the pointer.
#[allow(clippy::vec_box)]
#[derive(Debug, Default)]
pub(crate) struct ReceiverPool(Vec<Box<Receiver>>);

impl ReceiverPool {
    /// A receiver from the pool (made new for this connection), or a new one.
    #[inline(always)]
    pub(crate) fn lend(&mut self, config: &HubConfig) -> Box<Receiver> {
        match self.0.pop() {
            Some(mut rx) => {
                rx.reset();
                rx
            }
            None => {
                let c = &config.config;
                let decoder = MessageDecoder::new(Role::Server, c.limits())
                    .accept_unmasked_frames(c.accept_unmasked_frames);
                // Replies are written before the next read (the engine sends
                // from the task that reads); a handler that asked to close
                // hears no more messages.
                let mut rx = Receiver::new(Inbox::new(decoder, BytesMut::new()), true);
                rx.set_quiet_after_close(true);
                // Timers are the engine's (its heap, served every turn).
                rx.set_engine_timers(true);
                Box::new(rx)
            }
        }
    }

    /// A receiver back to the pool, if it holds nothing of its connection.
    #[inline(always)]
    pub(crate) fn lend_back(&mut self, rx: Box<Receiver>) {
        if rx.inbox().is_at_rest() && self.0.len() < RECEIVER_POOL_MAX {
            self.0.push(rx);
        }
    }
}

/// Reads and dispatches what the transport has, a few reads at most: a
/// loop around the core's receive step ([`Receiver::step_in`]) over the
/// engine's shared read buffer. The core decides (what to decode, when to
/// flush, read, wait or end); this reads, writes and calls the handler.
pub(crate) fn read_frames<H: Handler>(
    slot: &mut Slot<H::Data>,
    cx: &mut Context<'_>,
    handler: &mut H,
    config: &HubConfig,
    shared: &mut BytesMut,
    receivers: &mut ReceiverPool,
    turn: &mut Turn,
) {
    if slot.data.is_none() {
        return;
    }
    #[cfg(feature = "topics")]
    if slot.held.is_some() && still_held(slot, turn) {
        // Slowed for what it published: served again once there is room.
        return;
    }
    slot.conn.begin_read(turn);
    let mut rx = slot.receiver.take().unwrap_or_else(|| {
        let mut rx = receivers.lend(config);
        if let Some(inflater) = slot.idle_inflater.take() {
            rx.inbox_mut().decoder_mut().restore_inflater(inflater);
        }
        rx
    });
    let mem = &mut SharedRead(config.read_buffer_size);
    let mut reads = 0;
    let mut budget_retries = 0;
    // Served again next turn with input still buffered.
    let mut requeued = false;
    let mut input = Input::Start;
    // The turn's time (read once a turn, shared by its connections): the
    // step's clock as well.
    let now = turn.now();
    // What the handlers publish meanwhile is paced: past an engine
    // inbox's mark, the connection reads no further (`held`).
    #[cfg(feature = "topics")]
    let pacing = Reading::begin();
    // Without topics nothing holds a connection's input.
    #[cfg_attr(not(feature = "topics"), allow(unused_mut))]
    let mut held = false;
    loop {
        let mut link = Reach {
            conn: &mut slot.conn,
            turn,
            held,
        };
        let step = rx.step_in(&mut link, input, shared, mem, &|| now);
        input = match step {
            Stepped::Borrowed(data) => {
                let Some(data_) = slot.data.as_mut() else {
                    break;
                };
                let mut ws = Ws {
                    io: &slot.io,
                    conn: &mut slot.conn,
                    data: data_,
                    turn,
                };
                match data {
                    BorrowedData::Text(t) => {
                        ws.turn.tally.received(Kind::Text, t.len());
                        handler.message(&mut ws, HubMessage::Text(t))
                    }
                    BorrowedData::Binary(b) => {
                        ws.turn.tally.received(Kind::Binary, b.len());
                        handler.message(&mut ws, HubMessage::Binary(b))
                    }
                }
                ws.conn.transmit_owed(ws.turn);
                #[cfg(feature = "topics")]
                {
                    held = pacing.is_pressed();
                }
                Input::Start
            }
            Stepped::Step(Step::Message(msg)) => {
                if let Some((kind, len)) = Kind::counted(msg.head().0, msg.len()) {
                    turn.tally.received(kind, len);
                }
                if let Message::Close(frame) = msg {
                    slot.conn.peer_closed(frame);
                    Input::Start
                } else {
                    let own = !rx.decodes_in_scratch();
                    dispatch(slot, handler, turn, &msg, own);
                    #[cfg(feature = "topics")]
                    {
                        held = pacing.is_pressed();
                    }
                    Input::Start
                }
            }
            Stepped::Step(step @ (Step::Read(_) | Step::FlushRead(_))) => {
                let plan = match step {
                    Step::FlushRead(plan) => {
                        // The replies to what one read brought leave
                        // together, now: a peer waiting for them should
                        // not wait for the rest of the turn. Sends to
                        // other connections stay corked until the turn
                        // ends.
                        flush(slot, cx, handler, turn);
                        if slot.conn.abandoned {
                            break;
                        }
                        if slot.conn.write_blocked {
                            input = Input::FlushBlocked;
                            continue;
                        }
                        plan
                    }
                    Step::Read(plan) => plan,
                    _ => unreachable!(),
                };
                if reads == READS_PER_TURN {
                    // Others first; this one comes back next turn.
                    if let Plan::Scratch { .. } = plan {
                        rx.inbox_mut().scratch_unused();
                    }
                    slot.requeue(&mut turn.schedule);
                    requeued = true;
                    break;
                }
                reads += 1;
                let read = match plan {
                    Plan::Scratch { limit } => {
                        // Reclaimed only when a quarter is left: reading
                        // into what remains saves the bookkeeping on most
                        // reads.
                        if shared.capacity() < config.read_buffer_size / 4 {
                            shared.reserve(config.read_buffer_size);
                        }
                        read_buf(&mut slot.io, cx, shared, limit)
                    }
                    Plan::Own => {
                        let inbox = rx.inbox_mut();
                        let read = tokio_util::io::poll_read_buf(
                            Pin::new(&mut slot.io),
                            cx,
                            &mut inbox.target(),
                        );
                        let got = match &read {
                            Poll::Ready(Ok(n)) => Some(*n),
                            _ => None,
                        };
                        inbox.read_done(got, &mut OwnMemory);
                        read
                    }
                    // The step asks the budget itself.
                    Plan::Refused(_) => break,
                };
                match read {
                    Poll::Pending => {
                        if rx.read_pending(&Reach {
                            conn: &mut slot.conn,
                            turn,
                            held,
                        }) {
                            break;
                        }
                        Input::ReadPending
                    }
                    Poll::Ready(r) => Input::Read(r),
                }
            }
            Stepped::Step(Step::Flush) => {
                flush(slot, cx, handler, turn);
                if slot.conn.abandoned {
                    break;
                }
                if slot.conn.write_blocked {
                    Input::FlushBlocked
                } else {
                    Input::Flushed(false)
                }
            }
            Stepped::Step(Step::WriteNow) => Input::Start,
            Stepped::Step(Step::WaitForBudget(wanted)) => {
                // The transport's waker, or one made now for a socket of
                // the engine's poller (which wakes nothing but for the
                // socket): woken when the budget has room, the step asks
                // again and this finds it.
                let waker = slot.waker(&turn.schedule);
                if !rx.inbox().wait_for_budget(wanted, &waker) {
                    break;
                }
                // Room already: go on, a few times a turn at most.
                if budget_retries == BUDGET_RETRIES_PER_TURN {
                    slot.requeue(&mut turn.schedule);
                    break;
                }
                budget_retries += 1;
                Input::BudgetReady
            }
            Stepped::Step(Step::End(how)) => {
                match how {
                    Some(Ended::Error(e)) => slot.conn.set_error(e.into()),
                    Some(Ended::Transport(e)) => slot.conn.set_error(e.into()),
                    None => {}
                }
                slot.conn.abandoned = true;
                break;
            }
            // Waiting for input, the peer or the close to go out; ending
            // (the engine writes out the close and shuts down); timed out.
            Stepped::Step(_) => break,
        };
    }
    // Left mid-read (a write failed, or the handler's data is gone): the
    // rest of the read is not this connection's any more, and must not be
    // the next one's.
    rx.quit_scratch(shared);
    debug_assert!(shared.is_empty());
    slot.conn.end_read(turn);
    #[cfg(feature = "topics")]
    if let Some(inbox) = pacing.end() {
        let waker = slot.waker(&turn.schedule);
        slot.held = Held::wait(inbox, &waker);
        if slot.held.is_none() {
            // Room already (the engine sent meanwhile): others first.
            slot.requeue(&mut turn.schedule);
            requeued = true;
        }
    }
    // What a connection keeps between reads: nothing once its bytes are
    // decoded (after a large message too), and no more than in proportion
    // to an unfinished frame while it waits for the rest.
    if !requeued || rx.inbox().buffered().is_empty() {
        rx.inbox_mut().wait(&mut OwnMemory);
    }
    // An idle compressing connection keeps only its inflater (a few words
    // under the shared and dedicated policies), not a whole inbox.
    slot.idle_inflater = rx.inbox_mut().park_inflater();
    if rx.inbox().is_at_rest() {
        receivers.lend_back(rx);
    } else {
        slot.receiver = Some(rx);
    }
}

/// Whether a connection slowed for what it published still waits for
/// room; a closing one does not (its peer's answer is to be read).
#[cfg(feature = "topics")]
#[cold]
fn still_held<T>(slot: &mut Slot<T>, turn: &mut Turn) -> bool {
    let open = !slot.conn.is_closing();
    let waker = slot.waker(&turn.schedule);
    let held = slot
        .held
        .as_mut()
        .is_some_and(|h| open && h.still_full(&waker));
    if !held {
        slot.held = None;
    }
    held
}

/// Hands a message the core decoded (not borrowed) to the handler.
fn dispatch<H: Handler>(
    slot: &mut Slot<H::Data>,
    handler: &mut H,
    turn: &mut Turn,
    msg: &Message,
    own: bool,
) {
    let Some(data) = slot.data.as_mut() else {
        return;
    };
    let mut ws = Ws {
        io: &slot.io,
        conn: &mut slot.conn,
        data,
        turn,
    };
    if own {
        // Only a message decoded from the connection's own buffer may
        // have its payload kept (sent on without a copy): the shared read
        // buffer is not held past the read.
        let payload = match msg {
            Message::Text(t) => Some(t.as_bytes()),
            Message::Binary(b) => Some(b),
            _ => None,
        };
        // Kept only where the core would queue it by reference: below
        // that it copies, and a reference kept would cost a count.
        ws.turn.writes.current = payload.filter(|p| p.len() >= SHARE_PAYLOAD_MIN).cloned();
    }
    match msg {
        Message::Text(t) => handler.message(&mut ws, HubMessage::Text(t.as_str())),
        Message::Binary(b) => handler.message(&mut ws, HubMessage::Binary(b)),
        Message::Ping(p) => handler.ping(&mut ws, p),
        Message::Pong(p) => handler.pong(&mut ws, p),
        // Hub decoders assemble messages; close frames are taken apart.
        Message::Close(_) | Message::Frame(_) => {}
    }
    ws.turn.writes.current = None;
    ws.conn.transmit_owed(ws.turn);
}

/// A hub connection as the core's receive step reaches it: owned by the
/// engine, so every call is direct; what the core owes is encoded (and
/// corked) at once.
struct Reach<'a> {
    conn: &'a mut Conn,
    turn: &'a mut Turn,
    /// Slowed for what its handler published: it decodes no further.
    held: bool,
}

impl Link for Reach<'_> {
    #[inline]
    fn state(&self) -> State {
        self.conn.core().state()
    }

    #[inline]
    fn with_conn<T>(
        &mut self,
        f: impl FnOnce(&mut Connection) -> T,
    ) -> std::result::Result<T, crate::proto::Error> {
        let out = f(self.conn.core_mut());
        self.conn.transmit_owed(self.turn);
        Ok(out)
    }

    fn transport_ended(&mut self) {
        self.conn.abandoned = true;
    }

    fn abandon(&mut self) {
        self.conn.abandoned = true;
    }

    #[cfg(feature = "metrics")]
    fn note(&mut self, note: Note<'_>) {
        if let Note::WaitingForBudget(_) = note {
            meter::budget_wait();
        }
    }

    #[inline]
    fn has_writes(&self) -> bool {
        self.conn.dirty || self.conn.write_blocked
    }

    #[inline]
    fn queued(&self) -> usize {
        self.conn.buffered()
    }

    /// A close asked for and not yet out: nothing more of the peer's input
    /// is decoded until it is (see [`Conn::close_pending`]); nor once the
    /// connection is given up.
    #[inline]
    fn holds_input(&self) -> bool {
        self.conn.close_pending() || self.conn.abandoned || self.held
    }
}

/// Reads and drops what the peer sends after the connection shut down
/// ([`Stage::Lingering`]) until it ends the transport; the close deadline
/// bounds the wait, and a turn reads no more than the core's share.
#[cold]
#[inline(never)]
pub(crate) fn linger<T>(slot: &mut Slot<T>, cx: &mut Context<'_>, turn: &mut Turn) {
    match discard(&mut slot.io, cx, DISCARD_AT_ONCE) {
        Discarded::Pending => {}
        Discarded::Ended => slot.conn.abandoned = true,
        // Others first.
        Discarded::More => slot.requeue(&mut turn.schedule),
    }
}

/// Reads into `buf`: straight into its spare capacity for a socket of the
/// engine's poller, through `AsyncRead` for the others.
#[inline]
fn read_buf(
    io: &mut Transport,
    cx: &mut Context<'_>,
    buf: &mut BytesMut,
    limit: usize,
) -> Poll<io::Result<usize>> {
    #[cfg(unix)]
    if let Transport::Polled(p) = io {
        return p.read_buf(buf, limit);
    }
    tokio_util::io::poll_read_buf(Pin::new(io), cx, &mut buf.limit(limit))
}

/// The engine's shared read buffer as the core's plan sees it: reads into
/// it take at most `.0` bytes (what a budget sets aside for one).
struct SharedRead(usize);

impl ReadMemory for SharedRead {
    fn scratch_len(&self) -> usize {
        self.0
    }
}
