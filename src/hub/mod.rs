//! A server engine for many connections: no task per connection, borrowed
//! messages, replies corked and written once per turn.
//!
//! [`WebSocketStream`](crate::WebSocketStream) gives each connection a task
//! of its own and each received message an owned buffer; that is the right
//! shape for most code. A service holding tens of thousands of connections
//! pays for both in memory and wake-ups. A [`Hub`] runs one Tokio task per
//! engine (one engine per worker thread) that drives all of its
//! connections through the same protocol core, [`Config`], limits,
//! permessage-deflate, memory budget, keepalive and close timers:
//!
//! - **No task per connection.** A connection's transport is polled with a
//!   small waker that queues the connection for its engine when the
//!   transport is ready. An idle connection is its socket registration and
//!   a few hundred bytes of state: no buffer, no task.
//! - **Borrowed messages.** Reads land in one buffer per engine; whole
//!   messages are unmasked and checked there and handed to
//!   [`Handler::message`] as `&str` or `&[u8]`, valid for the call. A
//!   connection keeps bytes of its own only for an unfinished frame or
//!   message, held to its limits and the memory budget.
//! - **Corked replies.** What a handler sends goes into the connection's
//!   write buffer (taken from a pool while it holds bytes) and is written
//!   once all that one read brought is handled, one write for all of it;
//!   sends to other connections are written at the end of the engine's
//!   turn.
//! - **Backpressure.** A connection whose peer does not read stops being
//!   read. Sends to it beyond [`HubConfig::max_backpressure`] bytes waiting
//!   are dropped or close it, per [`BackpressurePolicy`].
//!
//! ```no_run
//! use wavesock::hub::{Handler, Hub, HubConfig, HubMessage, Ws};
//! use wavesock::http::{Request, Response};
//! use wavesock::ErrorResponse;
//!
//! #[derive(Clone)]
//! struct Echo;
//!
//! impl Handler for Echo {
//!     type Data = ();
//!
//!     fn upgrade(&mut self, _: &Request<()>, _: &mut Response<()>) -> Result<(), ErrorResponse> {
//!         Ok(())
//!     }
//!
//!     fn message(&mut self, ws: &mut Ws<'_, ()>, msg: HubMessage<'_>) {
//!         // A peer that does not read is handled by the hub's policy.
//!         let _ = ws.send_borrowed(msg);
//!     }
//! }
//!
//! # async fn run() -> std::io::Result<()> {
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:9001").await?;
//! let hub = Hub::new(Echo, HubConfig::default())?;
//! hub.serve(listener).await
//! # }
//! ```

mod engine;
mod handle;
mod slot;
mod timers;
mod wake;

use std::time::Duration;

use http::{Request, Response};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::handshake::server::ErrorResponse;
use crate::proto::close::CloseFrame;

pub use engine::Hub;
pub use handle::{Adopter, HandleError, HubHandle};
pub use slot::Ws;

/// A hub's settings: the connections' [`Config`] and what the hub adds.
///
/// ```
/// use wavesock::hub::{BackpressurePolicy, HubConfig};
/// use wavesock::Config;
///
/// let config = HubConfig::default()
///     .config(Config::default().max_message_size(1 << 20))
///     .max_backpressure(256 << 10)
///     .backpressure_policy(BackpressurePolicy::Drop);
/// assert!(config.validate().is_ok());
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HubConfig {
    /// Limits, timers and extensions of every connection, as for
    /// [`WebSocketStream`](crate::WebSocketStream). `write_buffer_size` is
    /// not used: [`max_backpressure`](Self::max_backpressure) bounds the
    /// bytes waiting for a peer instead.
    pub config: Config,
    /// Bytes that may wait to be written to a peer before more sends to it
    /// are refused (dropped, or the connection closed, per
    /// [`backpressure_policy`](Self::backpressure_policy)). A single message
    /// larger than this still goes out when nothing waits. Default 1 MiB.
    pub max_backpressure: usize,
    /// What a send to a connection over `max_backpressure` does. Default
    /// [`BackpressurePolicy::Close`].
    pub backpressure_policy: BackpressurePolicy,
    /// Size of each engine's read buffer, which every connection reads into
    /// in turn. Default 512 KiB (as uWebSockets' per-loop buffer).
    pub read_buffer_size: usize,
    /// Engines (tasks, each with its connections and read buffer); `None`
    /// for one per worker thread of the runtime [`Hub::serve`] runs on.
    /// Default `Some(1)`.
    pub engines: Option<usize>,
    /// Commands (sends, closes) a [`HubHandle`] may queue per engine before
    /// it waits (or `try_send` fails). Default 1 024.
    pub handle_capacity: usize,
    /// On [`HubHandle::shutdown`], how long connections have to finish
    /// their closing handshakes (code 1001) before they are dropped.
    /// Default 5 s.
    pub shutdown_timeout: Duration,
}

impl Default for HubConfig {
    fn default() -> Self {
        HubConfig {
            config: Config::default(),
            max_backpressure: 1 << 20,
            backpressure_policy: BackpressurePolicy::Close,
            read_buffer_size: 512 << 10,
            engines: Some(1),
            handle_capacity: 1024,
            shutdown_timeout: Duration::from_secs(5),
        }
    }
}

impl HubConfig {
    /// Sets [`config`](Self::config).
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }

    /// Sets [`max_backpressure`](Self::max_backpressure).
    pub fn max_backpressure(mut self, bytes: usize) -> Self {
        self.max_backpressure = bytes;
        self
    }

    /// Sets [`backpressure_policy`](Self::backpressure_policy).
    pub fn backpressure_policy(mut self, policy: BackpressurePolicy) -> Self {
        self.backpressure_policy = policy;
        self
    }

    /// Sets [`read_buffer_size`](Self::read_buffer_size).
    pub fn read_buffer_size(mut self, bytes: usize) -> Self {
        self.read_buffer_size = bytes;
        self
    }

    /// Sets [`engines`](Self::engines).
    pub fn engines(mut self, engines: Option<usize>) -> Self {
        self.engines = engines;
        self
    }

    /// Sets [`handle_capacity`](Self::handle_capacity).
    pub fn handle_capacity(mut self, commands: usize) -> Self {
        self.handle_capacity = commands;
        self
    }

    /// Sets [`shutdown_timeout`](Self::shutdown_timeout).
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = timeout;
        self
    }

    /// Checks the settings, the connections' [`Config`] included.
    pub fn validate(&self) -> Result<()> {
        self.config.validate()?;
        if self.read_buffer_size < 4096 {
            return Err(Error::InvalidConfig(
                "read_buffer_size must be at least 4096 bytes",
            ));
        }
        if self.engines == Some(0) {
            return Err(Error::InvalidConfig("a hub needs at least one engine"));
        }
        if self.handle_capacity == 0 {
            return Err(Error::InvalidConfig("handle_capacity must be at least 1"));
        }
        Ok(())
    }
}

/// What a send to a connection with more than
/// [`HubConfig::max_backpressure`] bytes waiting does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackpressurePolicy {
    /// Close the connection at once (nothing more can reach a peer that does
    /// not read); [`Handler::close`] reports [`Error::Backpressure`].
    Close,
    /// Drop the message ([`SendStatus::Dropped`]); the connection goes on,
    /// and [`Handler::drain`] says when its peer caught up.
    Drop,
}

/// What became of a message sent on a hub connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendStatus {
    /// Queued, with less than `max_backpressure` waiting.
    Sent,
    /// Queued, but now more than `max_backpressure` waits: further sends
    /// are refused until [`Handler::drain`].
    Backpressure,
    /// Not sent: too much waited already ([`BackpressurePolicy::Drop`]), or
    /// the connection was closed for it ([`BackpressurePolicy::Close`]).
    Dropped,
    /// Not sent: the connection is closing or closed.
    Closed,
}

/// A received message, borrowed from the hub's read buffer for the length
/// of a [`Handler::message`] call. Copy what you keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HubMessage<'a> {
    /// A text message, valid UTF-8.
    Text(&'a str),
    /// A binary message.
    Binary(&'a [u8]),
}

impl<'a> HubMessage<'a> {
    /// The payload's bytes.
    pub fn as_bytes(&self) -> &'a [u8] {
        match *self {
            HubMessage::Text(t) => t.as_bytes(),
            HubMessage::Binary(b) => b,
        }
    }

    /// Whether it is a text message.
    pub fn is_text(&self) -> bool {
        matches!(self, HubMessage::Text(_))
    }
}

/// Names a connection of a hub, for [`HubHandle`]. Unique for the hub's
/// lifetime: an id of a connection that is gone never names another one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId {
    engine: u32,
    slot: u32,
    generation: u32,
}

impl ConnId {
    /// The engine (task) serving the connection.
    pub fn engine(&self) -> usize {
        self.engine as usize
    }
}

impl std::fmt::Display for ConnId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.engine, self.slot, self.generation)
    }
}

/// How a connection ended, for [`Handler::close`].
#[derive(Debug)]
#[non_exhaustive]
pub struct Closed {
    /// The connection.
    pub id: ConnId,
    /// The peer's close frame, if one came (its code and reason).
    pub frame: Option<CloseFrame>,
    /// Why it ended otherwise: a protocol violation of the peer's (the
    /// close code sent for it is [`Error::close_code`]), a timeout, the
    /// transport failing or ending without a closing handshake, or
    /// [`Error::Backpressure`]. `None` after a clean closing handshake.
    pub error: Option<Error>,
}

/// What a hub does with its connections: decides on upgrades and takes
/// their events. Each engine has its own clone; share state between them
/// with an `Arc`.
///
/// Every method is called on the engine's task and should not block: a slow
/// handler holds up every connection of its engine.
pub trait Handler: Clone + Send + 'static {
    /// What the application keeps per connection.
    type Data: Send + 'static;

    /// A WebSocket upgrade request, already checked against RFC 6455. Return
    /// the connection's data to accept it (headers added to `response`,
    /// such as a subprotocol, are sent with the `101`), or a refusal.
    // The refusal is the type `Callback` uses, for one way to refuse.
    #[allow(clippy::result_large_err)]
    fn upgrade(
        &mut self,
        request: &Request<()>,
        response: &mut Response<()>,
    ) -> std::result::Result<Self::Data, ErrorResponse>;

    /// A request that is not a WebSocket upgrade (a page, a health check):
    /// return the response to send, or `None` for the default refusal
    /// (`426 Upgrade Required` or `400 Bad Request`). The connection is
    /// closed after the response.
    fn request(&mut self, request: &Request<()>) -> Option<Response<Vec<u8>>> {
        let _ = request;
        None
    }

    /// The connection is open (the `101` is on its way).
    fn open(&mut self, ws: &mut Ws<'_, Self::Data>) {
        let _ = ws;
    }

    /// A text or binary message, borrowed for the call.
    fn message(&mut self, ws: &mut Ws<'_, Self::Data>, msg: HubMessage<'_>);

    /// Every byte that waited for the peer is written, after a send found
    /// more than `max_backpressure` waiting ([`SendStatus::Backpressure`]
    /// or [`SendStatus::Dropped`]): sending may resume.
    fn drain(&mut self, ws: &mut Ws<'_, Self::Data>) {
        let _ = ws;
    }

    /// A ping arrived (its pong is sent for you).
    fn ping(&mut self, ws: &mut Ws<'_, Self::Data>, payload: &[u8]) {
        let _ = (ws, payload);
    }

    /// A pong arrived.
    fn pong(&mut self, ws: &mut Ws<'_, Self::Data>, payload: &[u8]) {
        let _ = (ws, payload);
    }

    /// The connection is gone; its data is handed back.
    fn close(&mut self, closed: Closed, data: Self::Data) {
        let _ = (closed, data);
    }
}
