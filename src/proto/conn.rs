//! The connection's state machine, without I/O or clocks: the closing
//! handshake, the frames owed to the peer (pongs, the close echo, the close
//! that reports an error, keepalive pings), the rules for what this side may
//! still send, and the keepalive and close deadlines.
//!
//! The caller moves bytes and time. Inputs are the `handle_*` methods (a
//! received control frame, a decoding error, input heard, the transport
//! ending, the current time); outputs are [`Connection::poll_transmit`]
//! (frames to encode and write, in order), [`Connection::poll_timeout`]
//! (when to call [`Connection::handle_timeout`] next) and
//! [`Connection::phase`] (whether to go on, finish, or stop). Sends are
//! checked with [`Connection::check_send`] and [`Connection::send_close`].
//!
//! ```
//! use std::time::{Duration, Instant};
//! use wavesock::Message;
//! use wavesock::proto::conn::{Connection, Phase, Timers};
//! use wavesock::proto::Role;
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

use std::time::{Duration, Instant};

use crate::proto::Role;
use crate::proto::close::{CloseCode, CloseFrame};
use crate::proto::error::Error;
use crate::proto::header::OpCode;
use crate::proto::message::Message;

/// The connection's timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Timers {
    /// Send a ping after this long without hearing from the peer. Default
    /// `None` (no keepalive).
    pub ping_interval: Option<Duration>,
    /// After a keepalive ping, how long to wait for anything from the peer
    /// before giving it up for dead. Default 10 s.
    pub pong_timeout: Duration,
    /// How long the closing handshake may take once it starts. Default 10 s.
    pub close_timeout: Duration,
}

impl Default for Timers {
    fn default() -> Self {
        Timers {
            ping_interval: None,
            pong_timeout: Duration::from_secs(10),
            close_timeout: Duration::from_secs(10),
        }
    }
}

impl Timers {
    /// Sets [`Timers::ping_interval`].
    pub fn ping_interval(mut self, interval: Option<Duration>) -> Self {
        self.ping_interval = interval;
        self
    }

    /// Sets [`Timers::pong_timeout`].
    pub fn pong_timeout(mut self, timeout: Duration) -> Self {
        self.pong_timeout = timeout;
        self
    }

    /// Sets [`Timers::close_timeout`].
    pub fn close_timeout(mut self, timeout: Duration) -> Self {
        self.close_timeout = timeout;
        self
    }
}

/// Where the connection stands, for the caller to act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Phase {
    /// Messages flow. This side may have sent its close frame and be
    /// waiting for the peer's answer (bounded by the close timeout).
    Open,
    /// The peer broke the protocol. Write out what is owed (our close frame
    /// with the code, if the error has one), then end the connection and
    /// report [`Connection::take_error`].
    Failing,
    /// The peer's close frame arrived. Write out what is owed (our close
    /// echo), then end the connection: a server at once, a client after the
    /// server ends the TCP connection (RFC 6455 §7.1.1), within the close
    /// timeout.
    Closed,
    /// A timer ran out (no answer to a keepalive ping, or the closing
    /// handshake took too long). Write nothing more that must arrive; drop
    /// the connection and report [`Connection::take_error`]: the timeout,
    /// or the violation the connection was failing with; none when the
    /// closing handshake had only the TCP close left to wait for.
    TimedOut,
}

impl Phase {
    /// Whether ending the connection in this phase waits for the peer to
    /// end the transport first: a client whose closing handshake completed
    /// leaves the TCP close to the server (RFC 6455 §7.1.1), so that the
    /// server, not the client, holds TIME_WAIT.
    pub fn awaits_transport_end(self, role: Role) -> bool {
        self == Phase::Closed && role == Role::Client
    }
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
    phase: Phase,
    /// Our close frame is queued or sent: nothing but it may follow.
    close_sent: bool,
    /// The peer ended the connection: its close frame, EOF or an error.
    peer_gone: bool,
    /// The transport itself ended (EOF, reset, a failed write).
    transport_ended: bool,
    /// A message we send in fragments is unfinished: only its continuation
    /// frames and control frames may go out until it ends (RFC 6455 §5.4).
    fragmenting: bool,
    close_timeout: Duration,
    // Boxed, like the keepalive state: made on the first frame owed or when
    // the connection starts to end, as an idle connection should be small.
    busy: Option<Box<Busy>>,
    keepalive: Option<Box<Keepalive>>,
}

/// What a connection keeps beyond its flags once it owes a frame or has
/// started to end.
#[derive(Debug, Default)]
struct Busy {
    /// Frames owed, oldest first; the caller drains them after each input,
    /// so there are rarely more than two.
    owed: Vec<Message>,
    /// When the closing handshake must be over.
    close_deadline: Option<Instant>,
    /// What the connection ends with, until taken.
    error: Option<Error>,
}

impl Connection {
    /// A connection for `role` that starts at `now`.
    pub fn new(role: Role, timers: Timers, now: Instant) -> Self {
        Connection {
            role,
            phase: Phase::Open,
            close_sent: false,
            peer_gone: false,
            transport_ended: false,
            fragmenting: false,
            close_timeout: timers.close_timeout,
            busy: None,
            keepalive: timers.ping_interval.map(|interval| {
                Box::new(Keepalive {
                    interval,
                    timeout: timers.pong_timeout,
                    last_heard: now,
                    ping_sent: None,
                    check_at: now + interval,
                })
            }),
        }
    }

    /// Which side this is.
    pub fn role(&self) -> Role {
        self.role
    }

    /// Where the connection stands.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Whether our close frame is queued or sent.
    pub fn is_close_sent(&self) -> bool {
        self.close_sent
    }

    /// Whether the peer has ended the connection (its close frame, or the
    /// transport ending).
    pub fn is_peer_gone(&self) -> bool {
        self.peer_gone
    }

    /// How long the closing handshake may take.
    pub fn close_timeout(&self) -> Duration {
        self.close_timeout
    }

    /// Whether the transport has ended: the connection is closed (RFC 6455
    /// §7.1.4), and bytes still queued for it will not arrive.
    pub fn is_transport_ended(&self) -> bool {
        self.transport_ended
    }

    /// Whether keepalive wants [`handle_input`](Self::handle_input) on
    /// every read; without keepalive the caller may skip it.
    pub fn wants_input_times(&self) -> bool {
        self.keepalive.is_some()
    }

    // Inputs.

    /// A control frame (ping, pong or close) decoded from the peer; data
    /// messages change nothing here. `now` starts the close timer when the
    /// frame is a close.
    pub fn handle_frame(&mut self, msg: &Message, now: Instant) {
        match msg {
            Message::Ping(payload) if !self.close_sent => {
                self.owe(Message::Pong(payload.clone()));
            }
            Message::Close(frame) if self.phase == Phase::Open => {
                self.phase = Phase::Closed;
                self.arm_close(now);
                // The answer to our close leaves sending "already closed" by
                // us; otherwise the peer closed first and we echo its code
                // (RFC 6455 §5.5.1).
                if !self.close_sent {
                    self.peer_gone = true;
                    self.close_sent = true;
                    self.owe(Message::Close(frame.clone()));
                }
            }
            _ => {}
        }
    }

    /// The peer's data broke the protocol (a decoding error): our close
    /// frame with the error's code is owed, once, and the connection ends
    /// with the error after it. Only while open: once the connection ends
    /// (after the peer's close frame too) what the peer sends is discarded.
    pub fn handle_error(&mut self, err: Error, now: Instant) {
        if self.phase != Phase::Open {
            return;
        }
        if let Some(code) = err.close_code() {
            self.owe_close(code, "");
        }
        self.phase = Phase::Failing;
        self.arm_close(now);
        self.busy().error = Some(err);
    }

    /// Bytes arrived from the peer at `now`: it is alive.
    pub fn handle_input(&mut self, now: Instant) {
        if let Some(k) = &mut self.keepalive {
            k.last_heard = now;
        }
    }

    /// The transport ended (EOF, reset, or a read error). Returns whether
    /// that is an expected end: after our close frame, a peer that hangs up
    /// instead of answering ends the connection as surely (many servers
    /// do). Otherwise the caller reports the transport's error.
    pub fn handle_transport_end(&mut self) -> bool {
        self.peer_gone = true;
        self.transport_ended = true;
        self.close_sent
    }

    /// Time has come to `now`: sends a keepalive ping, declares a silent
    /// peer dead, or ends a closing handshake that took too long.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.phase == Phase::TimedOut {
            return;
        }
        if self.close_sent || self.phase != Phase::Open {
            // A close sent without a clock reading: its timer starts now.
            self.arm_close(now);
        }
        if self.close_deadline().is_some_and(|d| now >= d) {
            self.time_out(Error::CloseTimeout);
            return;
        }
        if self.phase != Phase::Open {
            // Ending: only the close deadline matters now.
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
        let due = k.last_heard + k.interval;
        if now < due {
            k.check_at = due;
            return;
        }
        k.check_at = now + k.timeout;
        // Once closing, the close timer watches the peer instead.
        if !self.close_sent {
            k.ping_sent = Some(now);
            self.owe(Message::Ping(Default::default()));
        }
    }

    /// Gives up on the connection: nothing more will be sent or awaited.
    pub fn abandon(&mut self) {
        self.close_sent = true;
        if let Some(b) = &mut self.busy {
            b.owed.clear();
        }
    }

    // Sending.

    /// Checks that this side may send a frame of `opcode` with `fin`, and
    /// records it; close frames go through [`send_close`](Self::send_close).
    /// After a close either way sending is an error; fragments of a message
    /// may not be interrupted by another data message.
    pub fn check_send(&mut self, opcode: OpCode, fin: bool) -> Result<(), Error> {
        if self.close_sent || self.peer_gone {
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

    /// Checks and records this side's close frame, sent at `now` (or, if
    /// `None`, the close timer starts at the next
    /// [`handle_timeout`](Self::handle_timeout)). Returns `false` when the
    /// frame is not to be sent: a close went out already, or the peer is
    /// gone; closing twice is not an error.
    pub fn send_close(&mut self, now: Option<Instant>) -> bool {
        if self.close_sent || self.peer_gone {
            return false;
        }
        self.close_sent = true;
        if let Some(now) = now {
            self.arm_close(now);
        }
        true
    }

    fn closed_error(&self) -> Error {
        if self.peer_gone {
            Error::ConnectionClosed
        } else {
            Error::AlreadyClosed
        }
    }

    // Outputs.

    /// The next frame owed to the peer, to encode and write before anything
    /// queued after it.
    pub fn poll_transmit(&mut self) -> Option<Message> {
        let owed = &mut self.busy.as_mut()?.owed;
        if owed.is_empty() {
            None
        } else {
            Some(owed.remove(0))
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next needed.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let keepalive = match self.phase {
            Phase::Open => self.keepalive.as_ref().map(|k| k.check_at),
            Phase::Failing | Phase::Closed => None,
            Phase::TimedOut => return None,
        };
        match (self.close_deadline(), keepalive) {
            (Some(c), Some(k)) => Some(c.min(k)),
            (c, k) => c.or(k),
        }
    }

    /// The error the connection ends with, once (in [`Phase::Failing`] and
    /// [`Phase::TimedOut`]).
    pub fn take_error(&mut self) -> Option<Error> {
        self.busy.as_mut()?.error.take()
    }

    fn busy(&mut self) -> &mut Busy {
        self.busy.get_or_insert_with(Default::default)
    }

    fn owe(&mut self, msg: Message) {
        self.busy().owed.push(msg);
    }

    fn close_deadline(&self) -> Option<Instant> {
        self.busy.as_ref()?.close_deadline
    }

    fn owe_close(&mut self, code: CloseCode, reason: &'static str) {
        if !self.close_sent {
            self.close_sent = true;
            self.owe(Message::Close(Some(CloseFrame::new(code, reason))));
        }
    }

    fn arm_close(&mut self, now: Instant) {
        let timeout = self.close_timeout;
        let busy = self.busy();
        if busy.close_deadline.is_none() {
            busy.close_deadline = Some(now + timeout);
        }
    }

    /// Ends the connection on a timer; an error it was already ending with
    /// (a protocol violation) is the one reported.
    fn time_out(&mut self, err: Error) {
        if self.phase == Phase::Open {
            self.busy().error = Some(err);
        }
        self.phase = Phase::TimedOut;
        self.close_sent = true;
    }
}

#[cfg(test)]
#[path = "conn_tests.rs"]
mod tests;
