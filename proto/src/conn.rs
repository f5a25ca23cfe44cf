//! The connection's state machine, without I/O or clocks: the closing
//! handshake, the frames owed to the peer (pongs, the close echo, the close
//! that reports an error, keepalive pings), the rules for what this side may
//! still send, and the keepalive and close deadlines.
//!
//! The caller moves bytes and time. Inputs are the `handle_*` methods (a
//! received control frame, a decoding error, input heard, a wait for memory
//! budget, the transport ending, the current time); outputs are
//! [`Connection::poll_transmit`] (frames to encode and write, in order),
//! [`Connection::poll_timeout`] (when to call [`Connection::handle_timeout`]
//! next: the one clock an engine serves, for keepalive, the closing
//! handshake and the memory budget's wait alike) and [`Connection::state`]
//! (the phase, whether to go on, finish, or stop, and the flags). Sends are
//! checked with [`Connection::check_send`] and [`Connection::send_close`].
//!
//! Every fact about the connection lives here. An engine that needs one
//! without holding the connection (a split receiver) reads the [`State`]
//! byte it published after its last call.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use wavesock_proto::Message;
//! use wavesock_proto::conn::{Connection, Phase, Timers};
//! use wavesock_proto::Role;
//!
//! let start = Instant::now();
//! let timers = Timers::default().ping_interval(Some(Duration::from_secs(30)));
//! let mut conn = Connection::new(Role::Server, timers, start);
//!
//! // A ping is owed a pong.
//! conn.handle_frame(&Message::Ping("hi".into()), start);
//! assert_eq!(conn.poll_transmit(), Some(Message::Pong("hi".into())));
//!
//! // 30 s of silence: a keepalive ping is owed.
//! assert_eq!(conn.poll_timeout(), Some(start + Duration::from_secs(30)));
//! conn.handle_timeout(start + Duration::from_secs(30));
//! assert!(conn.poll_transmit().unwrap().is_ping());
//! assert_eq!(conn.phase(), Phase::Open);
//! ```

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::Role;
use crate::budget::Grant;
use crate::close::{CloseCode, CloseFrame};
use crate::error::Error;
use crate::header::OpCode;
use crate::message::Message;

mod ending;
mod state;
mod timers;

pub use ending::{Ending, Failure};
pub use state::{Phase, State};
pub use timers::Timers;

/// What [`Connection::handle_send`] decided about a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outgoing {
    /// Encode and queue it.
    Send,
    /// Drop it quietly: a close after a close, or after the peer is gone.
    Skip,
}

/// Keepalive: a ping after `interval` of silence, the peer declared dead
/// when `timeout` passes after it with nothing heard.
#[derive(Debug)]
struct Keepalive {
    interval: Duration,
    timeout: Duration,
    last_heard: Instant,
    ping_sent: Option<Instant>,
    /// When the timer next needs looking at; a later `last_heard` is taken
    /// into account then, so hearing from the peer costs no rescheduling.
    check_at: Instant,
}

/// One side's protocol state; see the [module docs](self).
#[derive(Debug)]
pub struct Connection {
    role: Role,
    /// The phase and flags, in the form engines read them.
    state: State,
    /// A message we send in fragments is unfinished: only its continuation
    /// frames and control frames may go out until it ends (RFC 6455 §5.4).
    /// Not in [`State`]: only the sending side asks, and it changes per
    /// fragment, while a change of `State` wakes the receiving side.
    fragmenting: bool,
    /// Made by [`handshaking`](Self::handshaking): its deadline is the
    /// opening handshake's ([`Error::HandshakeTimeout`]).
    handshaking: bool,
    /// How the connection began to end, once it has: kept in the padding
    /// beside the flags, so that reporting it costs an open connection
    /// nothing.
    ending: ending::Began,
    // Nanoseconds (saturated at 584 years), half the size of a `Duration`:
    // every connection of a server holds these two. `NO_CLOSE_TIMEOUT`
    // for none.
    close_timeout: u64,
    /// `NO_BUDGET_WAIT` for none.
    budget_wait: u64,
    // Boxed, like the keepalive state: made on the first frame owed or when
    // the connection starts to end, as an idle connection should be small.
    outstanding: Option<Box<Outstanding>>,
    keepalive: Option<Box<Keepalive>>,
}

/// The time for a call that may need it: an [`Instant`] read already, or
/// the engine's clock (`|| Instant::now()`), read only when the call needs
/// the time. Sending data never does (a close starts its deadline): a
/// clock read per message sent cost the Stream about 50 instructions.
pub trait Clock {
    /// The time.
    fn now(self) -> Instant;
}

impl Clock for Instant {
    #[inline]
    fn now(self) -> Instant {
        self
    }
}

impl<F: FnOnce() -> Instant> Clock for F {
    #[inline]
    fn now(self) -> Instant {
        self()
    }
}

/// `now + d`, saturated: a setting of `Duration::MAX` (never) must not
/// panic on `Instant`'s overflow. A century stands in for never.
pub fn later(now: Instant, d: Duration) -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    now.checked_add(d.min(CENTURY))
        .or_else(|| now.checked_add(Duration::from_secs(3600)))
        .unwrap_or(now)
}

/// A duration in nanoseconds, saturated.
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX - 1)
}

/// Pongs owed at most: past that, a ping's pong takes the place of the
/// newest one owed (RFC 6455 §5.5.3 lets an endpoint answer only the most
/// recent of the pings it has not answered yet). A peer that sends pings
/// faster than it reads, or while the caller holds back what is owed
/// (a close asked for and not yet sent), so costs a bounded queue and
/// constant time per ping. Enough that a burst of pings read at once is
/// answered one by one, as peers that check each payload expect.
pub const OWED_PONGS_MAX: usize = 16;

/// `Connection::budget_wait` when there is none.
const NO_BUDGET_WAIT: u64 = u64::MAX;

/// `Connection::close_timeout` for `Duration::MAX`: none. Apart from
/// every finite setting, which [`nanos`] saturates one below.
const NO_CLOSE_TIMEOUT: u64 = u64::MAX;

/// What a connection keeps beyond its flags once it owes a frame, waits
/// for memory budget or has started to end.
#[derive(Debug, Default)]
struct Outstanding {
    /// Frames owed, oldest first; the caller drains them after each input,
    /// so there are rarely more than two. Bounded: at most
    /// [`OWED_PONGS_MAX`] pongs, a keepalive ping and a close.
    owed: VecDeque<Message>,
    /// When the closing handshake must be over.
    close_deadline: Option<Instant>,
    /// When the application first asked to close ([`Connection::ask_close`]),
    /// until the close deadline runs.
    close_asked: Option<Instant>,
    /// When the memory budget's wait runs out.
    budget_deadline: Option<Instant>,
    /// What the connection ends with, until taken.
    error: Option<Error>,
}

/// The earlier of two deadlines, either of which may be unset.
#[inline]
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

impl Connection {
    /// A connection for `role` that starts at `now`.
    pub fn new(role: Role, timers: Timers, now: Instant) -> Self {
        let mut state = State(0);
        state.set(State::HEARS_INPUT, timers.ping_interval.is_some());
        Connection {
            role,
            state,
            fragmenting: false,
            handshaking: false,
            ending: ending::Began::NOT,
            close_timeout: if timers.close_timeout == Duration::MAX {
                NO_CLOSE_TIMEOUT
            } else {
                nanos(timers.close_timeout)
            },
            budget_wait: timers.budget_wait.map_or(NO_BUDGET_WAIT, nanos),
            outstanding: None,
            keepalive: timers.ping_interval.map(|interval| {
                Box::new(Keepalive {
                    interval,
                    timeout: timers.pong_timeout,
                    last_heard: now,
                    ping_sent: None,
                    check_at: later(now, interval),
                })
            }),
        }
    }

    /// A server connection still reading its opening handshake, which must
    /// be over (answered and, if refused, written out) by `deadline`:
    /// [`poll_timeout`](Self::poll_timeout) says so, and
    /// [`handle_timeout`](Self::handle_timeout) past it ends the connection
    /// ([`Phase::TimedOut`], [`Error::HandshakeTimeout`] unless it was
    /// refused and its answer was being written). It has no keepalive
    /// and owes no WebSocket frame: once the upgrade is accepted the engine
    /// replaces it with [`Connection::new`]; once it is refused,
    /// [`handle_refused`](Self::handle_refused) keeps the deadline for the
    /// answer.
    pub fn handshaking(role: Role, deadline: Option<Instant>) -> Self {
        Connection {
            role,
            state: State(0),
            fragmenting: false,
            handshaking: true,
            ending: ending::Began::NOT,
            close_timeout: 0,
            budget_wait: NO_BUDGET_WAIT,
            outstanding: deadline.map(|d| {
                Box::new(Outstanding {
                    close_deadline: Some(d),
                    ..Outstanding::default()
                })
            }),
            keepalive: None,
        }
    }

    /// The opening handshake was refused (an HTTP answer, not an upgrade):
    /// nothing but that answer may be sent, and the connection ends once
    /// it is written, or at the deadline it had, whichever comes first. A
    /// client that never reads a large refusal keeps its slot no longer
    /// than one that never finishes its request.
    pub fn handle_refused(&mut self) {
        if self.phase() != Phase::Open {
            return;
        }
        self.keepalive = None;
        self.stop_budget_wait();
        self.state.set(State::CLOSE_SENT | State::PEER_GONE, true);
        self.state.set_phase(Phase::Failing);
        if let Some(o) = &mut self.outstanding {
            o.owed.clear();
        }
    }

    /// Which side this is.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The phase and flags at once, as an engine publishes them.
    #[inline]
    pub fn state(&self) -> State {
        self.state
    }

    /// Where the connection stands.
    #[inline]
    pub fn phase(&self) -> Phase {
        self.state.phase()
    }

    /// Whether our close frame is queued or sent.
    #[inline]
    pub fn is_close_sent(&self) -> bool {
        self.state.is_close_sent()
    }

    /// Whether the peer's close frame has arrived.
    pub fn is_close_received(&self) -> bool {
        self.state.is_close_received()
    }

    /// Whether the peer has ended the connection (its close frame, or the
    /// transport ending).
    #[inline]
    pub fn is_peer_gone(&self) -> bool {
        self.state.is_peer_gone()
    }

    /// Whether the transport has ended: the connection is closed (RFC 6455
    /// §7.1.4), and bytes still queued for it will not arrive.
    pub fn is_transport_ended(&self) -> bool {
        self.state.is_transport_ended()
    }

    /// How long the closing handshake may take; `Duration::MAX` for no
    /// limit.
    pub fn close_timeout(&self) -> Duration {
        match self.close_timeout {
            NO_CLOSE_TIMEOUT => Duration::MAX,
            nanos => Duration::from_nanos(nanos),
        }
    }

    // Inputs.

    /// A control frame (ping, pong or close) decoded from the peer; data
    /// messages change nothing here. `now` starts the close timer when the
    /// frame is a close.
    #[inline]
    pub fn handle_frame(&mut self, msg: &Message, now: Instant) {
        match msg {
            Message::Ping(payload) if !self.is_close_sent() => {
                self.owe_pong(payload);
            }
            Message::Close(frame) if self.phase() == Phase::Open => {
                self.state.set(State::CLOSE_RECEIVED, true);
                self.state.set_phase(Phase::Closed);
                self.stop_budget_wait();
                self.arm_close(now);
                // The answer to our close leaves sending "already closed" by
                // us; otherwise the peer closed first and we echo its code
                // (RFC 6455 §5.5.1).
                if !self.is_close_sent() {
                    self.ending
                        .set(Ending::PeerClosed(frame.as_ref().map(|f| f.code)));
                    self.state.set(State::PEER_GONE | State::CLOSE_SENT, true);
                    self.owe(Message::Close(frame.clone()));
                }
            }
            _ => {}
        }
    }

    /// A message decoded from the peer at `now`, when
    /// [`State::hears_message`] says the core needs it: a control frame
    /// changes the state ([`handle_frame`](Self::handle_frame)), and any
    /// message is progress for a memory budget's wait.
    pub fn handle_message(&mut self, msg: &Message, now: Instant) {
        if self.state.is_waiting_for_budget() {
            self.handle_input(now);
        }
        self.handle_frame(msg, now);
    }

    /// The peer's data broke the protocol (a decoding error), or its
    /// message cannot be taken (a memory budget's refusal): our close frame
    /// with the error's code is owed, once, and the connection ends with
    /// the error after it. Only while open: once the connection ends (after
    /// the peer's close frame too) what the peer sends is discarded.
    pub fn handle_error(&mut self, err: Error, now: Instant) {
        if self.phase() != Phase::Open {
            return;
        }
        self.ending
            .set(Ending::Failed(err.close_code(), Failure::of(&err)));
        if let Some(code) = err.close_code() {
            self.owe_close(code, err.close_reason());
        }
        self.state.set_phase(Phase::Failing);
        self.stop_budget_wait();
        self.arm_close(now);
        self.outstanding().error = Some(err);
    }

    /// Bytes arrived from the peer, or a message was decoded, at `now`: the
    /// peer is alive, and the connection makes progress (the memory
    /// budget's wait ends). Needed only while [`State::hears_input`].
    #[inline]
    pub fn handle_input(&mut self, now: Instant) {
        if let Some(k) = &mut self.keepalive {
            k.last_heard = now;
        }
        self.stop_budget_wait();
    }

    /// Under a memory budget: at `now` the connection waits for budget to
    /// be given back, or holds some while waiting for input. Unless
    /// [`handle_input`](Self::handle_input) comes within the budget's wait
    /// timeout, [`handle_timeout`](Self::handle_timeout) fails the
    /// connection with [`Error::BudgetExhausted`] (close code 1013). The
    /// wait runs from the first such call; later ones change nothing.
    /// Without a budget wait in the [`Timers`], nothing happens.
    pub fn handle_budget_wait(&mut self, now: Instant) {
        if self.budget_wait == NO_BUDGET_WAIT {
            return;
        }
        let wait = Duration::from_nanos(self.budget_wait);
        if self.phase() != Phase::Open || self.state.is_waiting_for_budget() {
            return;
        }
        self.outstanding().budget_deadline = Some(later(now, wait));
        self.state
            .set(State::BUDGET_WAIT | State::HEARS_INPUT, true);
    }

    /// Under a memory budget: the connection waits for input and holds
    /// none of the budget (a read it waited for budget to make found
    /// nothing): a wait that ran ends. A quiet connection is failed for
    /// holding budget, never for having waited for some.
    pub fn handle_budget_idle(&mut self) {
        self.stop_budget_wait();
    }

    /// The memory budget answered `grant` when the connection asked for
    /// more at `now` (room to read into, to assemble or to inflate a
    /// message). `None`: go on ([`Grant::Granted`]), or stop, the
    /// connection failing ([`Grant::Never`]: it alone would need more than
    /// the whole budget, [`Error::OverBudget`], close code 1009).
    /// `Some(wanted)`: wait until the budget has `wanted` bytes available
    /// ([`MemoryBudget::wait_for`](crate::MemoryBudget::wait_for)); the
    /// wait's deadline runs here ([`handle_budget_wait`](Self::handle_budget_wait)).
    #[inline]
    pub fn handle_grant(&mut self, grant: Grant, now: Instant) -> Option<usize> {
        match grant {
            Grant::Granted => None,
            Grant::Never { charge, limit } => {
                let err = Error::OverBudget {
                    size: charge as u64,
                    budget: limit,
                };
                self.handle_error(err, now);
                None
            }
            Grant::Wait { wanted } => {
                self.handle_budget_wait(now);
                Some(wanted)
            }
        }
    }

    /// The transport ended with `err` (EOF is `UnexpectedEof`): the
    /// error to report, or `None` when the end is part of closing. After
    /// our close frame, a peer that hangs up (EOF, reset, abort, a broken
    /// pipe) instead of answering ends the connection as surely (many
    /// servers do); any other failure, or an end before our close, is
    /// reported. Once the connection is no longer open (failing with its
    /// own error, closed by the peer, timed out) none is: how it ended was
    /// decided already.
    pub fn handle_transport_error(&mut self, err: std::io::Error) -> Option<std::io::Error> {
        use std::io::ErrorKind;
        let open = self.phase() == Phase::Open;
        let expected = self.handle_transport_end();
        if !open {
            return None;
        }
        let hung_up = matches!(
            err.kind(),
            ErrorKind::UnexpectedEof
                | ErrorKind::ConnectionReset
                | ErrorKind::ConnectionAborted
                | ErrorKind::BrokenPipe
        );
        if expected && hung_up { None } else { Some(err) }
    }

    /// The transport ended (EOF, reset, or a read error). Returns whether
    /// that is an expected end: after our close frame, a peer that hangs up
    /// instead of answering ends the connection as surely (many servers
    /// do). Otherwise the caller reports the transport's error.
    pub fn handle_transport_end(&mut self) -> bool {
        self.state
            .set(State::PEER_GONE | State::TRANSPORT_ENDED, true);
        self.is_close_sent()
    }

    /// Time has come to `now`: sends a keepalive ping, declares a silent
    /// peer dead, ends a closing handshake that took too long, or fails a
    /// connection that waited too long for memory budget.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.phase() == Phase::TimedOut {
            return;
        }
        if self.close_deadline().is_some_and(|d| now >= d) {
            self.time_out(if self.handshaking {
                Error::HandshakeTimeout
            } else {
                Error::CloseTimeout
            });
            return;
        }
        if self.phase() != Phase::Open {
            // Ending: only the close deadline matters now.
            return;
        }
        if self.budget_deadline().is_some_and(|d| now >= d) {
            self.handle_error(Error::BudgetExhausted, now);
            return;
        }
        let Some(k) = self.keepalive.as_deref_mut() else {
            return;
        };
        if now < k.check_at {
            return;
        }
        if let Some(sent) = k.ping_sent {
            if k.last_heard < sent {
                // Say why if the transport still takes bytes; wait for
                // nothing, the peer is presumed gone.
                self.owe_close(CloseCode::INTERNAL_ERROR, "keepalive timeout");
                self.time_out(Error::KeepaliveTimeout);
                return;
            }
            k.ping_sent = None;
        }
        let due = later(k.last_heard, k.interval);
        if now < due {
            k.check_at = due;
            return;
        }
        k.check_at = later(now, k.timeout);
        // Once closing, the close timer watches the peer instead.
        if !self.state.is_close_sent() {
            k.ping_sent = Some(now);
            self.owe(Message::Ping(Default::default()));
        }
    }

    /// Gives up on the connection: nothing more will be sent or awaited.
    /// No close deadline is armed: the caller ends the connection at once
    /// and asks nothing more of this one.
    pub fn abandon(&mut self) {
        self.state.set(State::CLOSE_SENT, true);
        if let Some(o) = &mut self.outstanding {
            o.owed.clear();
        }
    }

    // Sending.

    /// Every send's rules, whatever the engine: a close frame's code and
    /// reason are checked before the close is recorded (an invalid one is
    /// refused and changes nothing); a second close, or one after the peer
    /// is gone, is [`Outgoing::Skip`] (closing twice is not an error); any
    /// other frame after a close either way is an error
    /// ([`Error::AlreadyClosed`], or [`Error::ConnectionClosed`] once the
    /// peer is gone), as is a data message interrupting a fragmented one.
    /// [`Outgoing::Send`]: encode and queue it.
    #[inline]
    pub fn handle_send(&mut self, msg: &Message, now: impl Clock) -> Result<Outgoing, Error> {
        if let Message::Close(frame) = msg {
            CloseFrame::encode(frame.as_ref())?;
            return Ok(
                if self.send_close_with(now.now(), frame.as_ref().map(|f| f.code)) {
                    Outgoing::Send
                } else {
                    Outgoing::Skip
                },
            );
        }
        let (opcode, fin) = msg.head();
        self.handle_send_frame(opcode, fin, now)
    }

    /// [`handle_send`](Self::handle_send) for a frame already encoded or
    /// prepared (a close frame's payload was checked when it was made).
    #[inline]
    pub fn handle_send_frame(
        &mut self,
        opcode: OpCode,
        fin: bool,
        now: impl Clock,
    ) -> Result<Outgoing, Error> {
        if opcode == OpCode::Close {
            return Ok(if self.send_close(now.now()) {
                Outgoing::Send
            } else {
                Outgoing::Skip
            });
        }
        self.check_send(opcode, fin)?;
        Ok(Outgoing::Send)
    }

    /// Checks that this side may send a frame of `opcode` with `fin`, and
    /// records it; close frames go through [`send_close`](Self::send_close).
    /// After a close either way sending is an error; fragments of a message
    /// may not be interrupted by another data message.
    #[inline]
    pub fn check_send(&mut self, opcode: OpCode, fin: bool) -> Result<(), Error> {
        if self.is_close_sent() || self.is_peer_gone() {
            return Err(self.closed_error());
        }
        self.fragmenting = match opcode {
            op if op.is_control() => self.fragmenting,
            OpCode::Continuation if !self.fragmenting => {
                return Err(Error::InvalidMessage(
                    "continuation frame without a fragmented message in progress",
                ));
            }
            OpCode::Continuation => !fin,
            _ if self.fragmenting => {
                return Err(Error::InvalidMessage(
                    "a new message while a fragmented one is unfinished: send its final continuation frame first",
                ));
            }
            _ => !fin,
        };
        Ok(())
    }

    /// Checks and records this side's close frame, sent at `now` (the close
    /// timer starts then). Returns `false` when the frame is not to be
    /// sent: a close went out already, or the peer is gone; closing twice
    /// is not an error.
    #[inline]
    pub fn send_close(&mut self, now: Instant) -> bool {
        self.send_close_with(now, None)
    }

    /// [`send_close`](Self::send_close) for a close frame with `code`.
    fn send_close_with(&mut self, now: Instant, code: Option<CloseCode>) -> bool {
        if self.is_close_sent() || self.is_peer_gone() {
            return false;
        }
        self.ending.set(Ending::Closed(code));
        self.state.set(State::CLOSE_SENT, true);
        self.arm_close(now);
        true
    }

    /// How the connection began to end: the first of the peer's close
    /// frame, ours, or a failure (a protocol error, a limit, the memory
    /// budget, a timer). `None` while it is open, and when its transport
    /// ended without any of them.
    #[inline]
    pub fn ending(&self) -> Option<Ending> {
        self.ending.get()
    }

    fn closed_error(&self) -> Error {
        if self.is_peer_gone() {
            Error::ConnectionClosed
        } else {
            Error::AlreadyClosed
        }
    }

    // Outputs.

    /// Whether [`poll_transmit`](Self::poll_transmit) has a frame to give:
    /// asked after every message, and answered without building one.
    #[inline]
    pub fn owes(&self) -> bool {
        self.outstanding
            .as_ref()
            .is_some_and(|o| !o.owed.is_empty())
    }

    /// The next frame owed to the peer, to encode and write before anything
    /// queued after it.
    #[inline]
    pub fn poll_transmit(&mut self) -> Option<Message> {
        self.outstanding.as_mut()?.owed.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next needed: the
    /// earliest of the close deadline, the memory budget's wait and the
    /// keepalive timer.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let open = match self.phase() {
            Phase::Open => true,
            Phase::Failing | Phase::Closed => false,
            Phase::TimedOut => return None,
        };
        let keepalive = self.keepalive.as_ref().filter(|_| open).map(|k| k.check_at);
        // Asked after every service of a connection: an open one without
        // a closing handshake or a budget wait answers from its keepalive
        // alone.
        let Some(o) = &self.outstanding else {
            return keepalive;
        };
        earliest(earliest(o.close_deadline, o.budget_deadline), keepalive)
    }

    /// The error the connection ends with, once (in [`Phase::Failing`] and
    /// [`Phase::TimedOut`]).
    pub fn take_error(&mut self) -> Option<Error> {
        self.outstanding.as_mut()?.error.take()
    }

    fn outstanding(&mut self) -> &mut Outstanding {
        self.outstanding.get_or_insert_with(Default::default)
    }

    fn owe(&mut self, msg: Message) {
        self.outstanding().owed.push_back(msg);
    }

    /// Owes a pong for a ping with `payload`; past [`OWED_PONGS_MAX`], in
    /// place of the newest pong owed (only a few frames of other kinds
    /// can follow it).
    fn owe_pong(&mut self, payload: &bytes::Bytes) {
        let owed = &mut self.outstanding().owed;
        let pongs = owed.iter().rev().filter(|m| m.is_pong()).count();
        if pongs >= OWED_PONGS_MAX {
            if let Some(last) = owed.iter_mut().rev().find(|m| m.is_pong()) {
                *last = Message::Pong(payload.clone());
                return;
            }
        }
        owed.push_back(Message::Pong(payload.clone()));
    }

    /// When the closing handshake (or a refused handshake's answer) must
    /// be over, once it has started.
    pub fn close_deadline(&self) -> Option<Instant> {
        self.outstanding.as_ref()?.close_deadline
    }

    /// When a closing handshake started at `now` must be over: the
    /// deadline already running if one started, else `now` plus the close
    /// timeout; `None` without a close timeout. A caller that closes and
    /// waits (the Stream's `close`) waits until then, and no fresh timeout
    /// is granted by closing again.
    pub fn close_deadline_from(&self, now: Instant) -> Option<Instant> {
        if let Some(running) = self.close_deadline() {
            return Some(running);
        }
        let from = self.close_asked().unwrap_or(now);
        (self.close_timeout != NO_CLOSE_TIMEOUT).then(|| later(from, self.close_timeout()))
    }

    /// When the application first asked to close ([`ask_close`](Self::ask_close)),
    /// until a closing handshake begins: the time a `close` queues its
    /// frame as of, so that its deadline runs from the ask.
    pub fn close_asked(&self) -> Option<Instant> {
        self.outstanding.as_ref()?.close_asked
    }

    /// The application asks to close (the Stream's `close`), with `frame`
    /// (`None` for none): the frame is checked now, before any wait for
    /// room to queue it, and the time of the first ask is kept until a
    /// closing handshake begins. The asking side queues its frame as of
    /// then ([`close_asked`](Self::close_asked)) and waits until
    /// [`close_deadline_from`](Self::close_deadline_from): a close frame
    /// that waits behind a full write queue, or a `close` cut short and
    /// called again, gets no fresh timeout. A closing handshake begun any
    /// other way (the peer's close, an error, a close frame sent as a
    /// message) runs from its own start and ends the ask. Nothing to
    /// record once our close went out, or without a close timeout.
    pub fn ask_close(&mut self, frame: Option<&CloseFrame>, now: Instant) -> Result<(), Error> {
        if self.is_close_sent() {
            // Nothing more is sent: nothing to check.
            return Ok(());
        }
        CloseFrame::encode(frame)?;
        if self.close_timeout != NO_CLOSE_TIMEOUT {
            self.outstanding().close_asked.get_or_insert(now);
        }
        Ok(())
    }

    fn budget_deadline(&self) -> Option<Instant> {
        self.outstanding.as_ref()?.budget_deadline
    }

    fn stop_budget_wait(&mut self) {
        if self.state.is_waiting_for_budget() {
            self.outstanding().budget_deadline = None;
            self.state.set(State::BUDGET_WAIT, false);
            self.state.set(State::HEARS_INPUT, self.keepalive.is_some());
        }
    }

    fn owe_close(&mut self, code: CloseCode, reason: &'static str) {
        if !self.is_close_sent() {
            self.state.set(State::CLOSE_SENT, true);
            self.owe(Message::Close(Some(CloseFrame::new(code, reason))));
        }
    }

    fn arm_close(&mut self, now: Instant) {
        if self.close_timeout == NO_CLOSE_TIMEOUT {
            // Nothing to arm; `outstanding` is made when needed, not
            // here, so that an ending connection stays as small.
            return;
        }
        let timeout = Duration::from_nanos(self.close_timeout);
        let o = self.outstanding();
        if o.close_deadline.is_none() {
            o.close_deadline = Some(later(now, timeout));
        }
        // A close begun by any way ends what an ask left: one cut short
        // and never asked again must not shorten a later handshake.
        o.close_asked = None;
    }

    /// Ends the connection on a timer; an error it was already ending with
    /// (a protocol violation) is the one reported.
    fn time_out(&mut self, err: Error) {
        if self.phase() == Phase::Open {
            let code = match err {
                Error::KeepaliveTimeout => Some(CloseCode::INTERNAL_ERROR),
                _ => err.close_code(),
            };
            self.ending.set(Ending::Failed(code, Failure::of(&err)));
            self.outstanding().error = Some(err);
        }
        self.state.set_phase(Phase::TimedOut);
        self.stop_budget_wait();
        self.state.set(State::CLOSE_SENT, true);
    }
}

#[cfg(test)]
#[path = "conn_tests.rs"]
mod tests;
