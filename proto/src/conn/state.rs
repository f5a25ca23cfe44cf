//! Where a connection stands: its phase, and the phase with its flags in
//! one byte, for engines that share it.

use std::fmt;

use crate::Role;
use crate::message::Message;

/// Where the connection stands, for the caller to act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Phase {
    /// Messages flow. This side may have sent its close frame and be
    /// waiting for the peer's answer (bounded by the close timeout).
    Open,
    /// The peer broke the protocol. Write out what is owed (our close frame
    /// with the code, if the error has one), then end the connection and
    /// report [`Connection::take_error`](super::Connection::take_error).
    Failing,
    /// The peer's close frame arrived. Write out what is owed (our close
    /// echo), then end the connection: a server at once, a client after the
    /// server ends the TCP connection (RFC 6455 §7.1.1), within the close
    /// timeout.
    Closed,
    /// A timer ran out (no answer to a keepalive ping, or the closing
    /// handshake took too long). Write nothing more that must arrive; drop
    /// the connection and report [`Connection::take_error`](super::Connection::take_error): the timeout,
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

/// What an engine may read of a connection without holding it: the phase
/// and the flags that change it, packed in a byte.
///
/// Every change to it goes through the [`Connection`](super::Connection)'s inputs, so an
/// engine that shares a connection between tasks can publish it in one
/// atomic byte after each call, and a task that finds it unchanged knows
/// that [`Connection::poll_timeout`](super::Connection::poll_timeout) is unchanged too, unless that task made
/// the call itself.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct State(pub(super) u8);

impl State {
    pub(super) const PHASE: u8 = 0b11;
    pub(super) const CLOSE_SENT: u8 = 1 << 2;
    pub(super) const CLOSE_RECEIVED: u8 = 1 << 3;
    pub(super) const PEER_GONE: u8 = 1 << 4;
    pub(super) const TRANSPORT_ENDED: u8 = 1 << 5;
    pub(super) const HEARS_INPUT: u8 = 1 << 6;
    pub(super) const BUDGET_WAIT: u8 = 1 << 7;

    /// Where the connection stands.
    #[inline]
    pub fn phase(self) -> Phase {
        match self.0 & Self::PHASE {
            0 => Phase::Open,
            1 => Phase::Failing,
            2 => Phase::Closed,
            _ => Phase::TimedOut,
        }
    }

    /// Whether our close frame is queued or sent: nothing but it may follow.
    #[inline]
    pub fn is_close_sent(self) -> bool {
        self.0 & Self::CLOSE_SENT != 0
    }

    /// Whether the peer's close frame has arrived.
    pub fn is_close_received(self) -> bool {
        self.0 & Self::CLOSE_RECEIVED != 0
    }

    /// Whether the peer has ended the connection (its close frame, or the
    /// transport ending).
    #[inline]
    pub fn is_peer_gone(self) -> bool {
        self.0 & Self::PEER_GONE != 0
    }

    /// Whether the transport has ended: the connection is closed (RFC 6455
    /// §7.1.4), and bytes still queued for it will not arrive.
    pub fn is_transport_ended(self) -> bool {
        self.0 & Self::TRANSPORT_ENDED != 0
    }

    /// Whether [`Connection::handle_input`](super::Connection::handle_input) is wanted on every read and
    /// every message decoded: keepalive is on, or the memory budget's wait
    /// is running. Otherwise a caller may skip it.
    pub fn hears_input(self) -> bool {
        self.0 & Self::HEARS_INPUT != 0
    }

    /// Whether the memory budget's wait is running: the connection fails
    /// with [`Error::BudgetExhausted`](crate::error::Error::BudgetExhausted) unless input comes before its
    /// deadline ([`Connection::handle_budget_wait`](super::Connection::handle_budget_wait)).
    pub fn is_waiting_for_budget(self) -> bool {
        self.0 & Self::BUDGET_WAIT != 0
    }

    /// Whether the core needs to hear of `msg`, decoded in this state
    /// ([`Connection::handle_message`](super::Connection::handle_message)): a control frame, or any message
    /// while the connection waits for memory budget. A data message
    /// otherwise changes nothing, so a receiver that shares the core with
    /// another task need not reach it.
    #[inline]
    pub fn hears_message(self, msg: &Message) -> bool {
        msg.is_control() || self.is_waiting_for_budget()
    }

    /// The state as one byte, to publish in an atomic.
    pub fn to_bits(self) -> u8 {
        self.0
    }

    /// The state from [`to_bits`](Self::to_bits).
    pub fn from_bits(bits: u8) -> State {
        State(bits)
    }

    pub(super) fn set(&mut self, flag: u8, on: bool) {
        if on {
            self.0 |= flag;
        } else {
            self.0 &= !flag;
        }
    }

    pub(super) fn set_phase(&mut self, phase: Phase) {
        let bits = match phase {
            Phase::Open => 0,
            Phase::Failing => 1,
            Phase::Closed => 2,
            Phase::TimedOut => 3,
        };
        self.0 = (self.0 & !Self::PHASE) | bits;
    }
}

impl fmt::Debug for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("State")
            .field("phase", &self.phase())
            .field("close_sent", &self.is_close_sent())
            .field("close_received", &self.is_close_received())
            .field("peer_gone", &self.is_peer_gone())
            .field("transport_ended", &self.is_transport_ended())
            .field("hears_input", &self.hears_input())
            .field("waiting_for_budget", &self.is_waiting_for_budget())
            .finish()
    }
}
