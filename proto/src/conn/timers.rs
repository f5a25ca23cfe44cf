//! The connection's timers, as an engine configures them.

use std::time::Duration;

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
    /// `Duration::MAX` is no close timeout: the closing handshake takes as
    /// long as the peer does, and no deadline is ever set for it, so the
    /// I/O layer needs no timer for it.
    pub close_timeout: Duration,
    /// Under a memory budget, how long the connection may wait for budget
    /// (or hold some while nothing arrives) before it fails with 1013; see
    /// [`Connection::handle_budget_wait`](super::Connection::handle_budget_wait). Default `None` (no budget).
    pub budget_wait: Option<Duration>,
}

impl Default for Timers {
    fn default() -> Self {
        Timers {
            ping_interval: None,
            pong_timeout: Duration::from_secs(10),
            close_timeout: Duration::from_secs(10),
            budget_wait: None,
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

    /// Sets [`Timers::budget_wait`].
    pub fn budget_wait(mut self, wait: Option<Duration>) -> Self {
        self.budget_wait = wait;
        self
    }
}
