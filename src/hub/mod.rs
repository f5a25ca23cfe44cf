//! A server engine for many connections: no task per connection, borrowed
//! messages, replies corked and written once per turn.
//!
//! [`WebSocketStream`](crate::WebSocketStream) gives each connection a task
//! of its own and each received message an owned buffer; that is the right
//! shape for most code. A service holding tens of thousands of connections
//! pays for both in memory and wake-ups. A [`Hub`] runs one Tokio task per
//! engine (one engine per worker thread) that drives all of its
//! connections through the same protocol core, [`Config`](crate::Config), limits,
//! permessage-deflate, memory budget, keepalive and close timers:
//!
//! - **No task per connection.** On Unix an engine owns a poller (epoll,
//!   kqueue) registered with Tokio's reactor, and reads which of its TCP
//!   sockets are ready with one call per turn ([`Readiness::Owned`]); other
//!   transports, and TCP under [`Readiness::Tokio`], are polled with a
//!   small waker that queues the connection for its engine. An idle TCP
//!   connection is about 200 bytes of state and the kernel's socket: no
//!   buffer, no task, no Tokio registration.
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
//!   read. Sends to it beyond [`Config::max_backpressure`](crate::Config::max_backpressure) bytes waiting
//!   are dropped or close it, per [`BackpressurePolicy`].
//! - **Topics** (feature `topics`). [`Ws::subscribe`] and [`Ws::publish`] (or
//!   [`HubHandle::publish`]): a publish is encoded once, queued once per
//!   engine and written to each subscriber as a reference to the one
//!   frame. A connection that publishes faster than the engines deliver
//!   stops being read, as under write backpressure, while an engine's
//!   inbox it published to is half full; see [`topics`](crate::topics).
//!
//! # Connections from outside a callback
//!
//! Each connection has a [`ConnId`], unique for the hub's life, with a
//! stable text form (`hub.engine.slot.generation`, parsed back with
//! `FromStr`) and a `u64` form, for keeping it in a map, a database or a
//! message to another service. A [`HubHandle`] reaches a connection by its
//! id from any task (`send`, `close`, `subscribe`, each with a `try_`
//! form that never waits). A handler gets the handle when it is made
//! ([`Hub::with_handle`]) or from any callback ([`Ws::handle`]): the way
//! to answer after async work is to spawn it and send the answer through
//! the handle (`examples/hub_async.rs` keeps the answers in order, with a
//! timeout and limits; see also the [guide](crate::guide)).
//!
//! The peer's address is in the upgrade request's extensions
//! ([`Addresses`], as axum's `ConnectInfo`) and on [`Ws::remote_addr`];
//! for connections handed over, what the giver passed to
//! [`HubHandle::accept_from`] or [`Adopter::adopt_from`].
//!
//! # Closing
//!
//! A connection closes when its handler calls [`Ws::close`], a handle
//! calls [`HubHandle::close`], the hub shuts down, the peer closes, or the
//! protocol, a limit, a timeout or the backpressure policy ends it.
//! [`Handler::close`] is called once for every connection that was
//! opened, last, with the connection's data.
//!
//! Once a close is asked for (by the handler, a handle or shutdown), the
//! handler hears nothing more of the connection but `close`: no
//! `message`, `ping`, `pong` or `drain`, and what the same read brought
//! after the closing message is dropped unheard (as uWebSockets stops
//! calling at `end`). Sends return [`SendStatus::Closed`]. What was sent
//! before is written first, and so is what was published this turn to
//! the connection's topics: the close frame goes out at the end of the
//! engine's turn, after the turn's publishes. A turn sends at most 16 384
//! publishes (one a subscriber); when more wait, the close does not wait
//! for them, and the connection gets none of them after its close frame.
//! Until the close frame is out the hub reads and decodes nothing more of
//! the connection, so that nothing the peer sent after the closing
//! message (its own close, a protocol violation, its end) takes the place
//! of the close asked for; then it reads on only for the peer's answer.
//!
//! # Routes
//!
//! One hub serves one [`Handler`]. With the `router` feature, `Router`
//! is a handler that dispatches each request by its path to the route's
//! own handler, each with its own data type, path parameters and the
//! query string parsed for `upgrade` (uWebSockets' `app.ws(pattern, ...)`).
//!
//! ```no_run
//! use wavesock::hub::{Handler, Hub, HubConfig, HubMessage, Ws};
//! use wavesock::http::{Request, Response};
//! use wavesock::hub::HttpResponse;
//!
//! #[derive(Clone)]
//! struct Echo;
//!
//! impl Handler for Echo {
//!     type Data = ();
//!
//!     fn upgrade(&mut self, _: &Request<()>, _: &mut Response<()>) -> Result<(), HttpResponse> {
//!         Ok(())
//!     }
//!
//!     fn message(&mut self, ws: &mut Ws<'_, ()>, msg: HubMessage<'_>) {
//!         // A peer that does not read is handled by the hub's policy.
//!         let _ = ws.send_borrowed(msg);
//!     }
//! }
//!
//! # async fn run() -> wavesock::Result<()> {
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:9001").await?;
//! let hub = Hub::new(Echo, HubConfig::default())?;
//! hub.serve(listener).await
//! # }
//! ```
//
// Rooms: `serve` runs the engines (`engine`), each a task whose turn
// takes connections in (`accept`, `poller`), commands from handles
// (`commands`, `handle`) and deadlines (`timers`), and serves its
// connections (`slots` of `conn`, each over a `transport`, sharing the
// `turn`): the HTTP `upgrade`, then reading and dispatching (`read`) to
// the `handler` through `ws`, sending (`send`) and writing out (`write`).
// With topics, `subs` holds the engine's subscriptions and `deliver`
// sends publishes. Only `engine` knows the engine: the rooms take the
// parts they need (see its module doc).
mod accept;
mod commands;
mod config;
mod conn;
#[cfg(feature = "topics")]
mod deliver;
mod engine;
mod event;
mod handle;
mod handler;
#[cfg(unix)]
mod poller;
mod read;
#[cfg(feature = "router")]
mod router;
mod send;
mod serve;
mod slots;
#[cfg(feature = "topics")]
mod subs;
mod timers;
mod transport;
mod turn;
mod upgrade;
mod wake;
mod write;
mod ws;

pub use config::{BackpressurePolicy, HubConfig, Readiness, UnknownReadiness};
pub use event::{
    Addresses, Closed, ConnId, HttpResponse, HubMessage, ParseConnIdError, SendStatus, respond,
};
pub use handle::{Adopter, HandleError, HubHandle};
pub use handler::Handler;
#[cfg(feature = "router")]
#[cfg_attr(docsrs, doc(cfg(feature = "router")))]
pub use router::{PathParams, Query, RouteData, RouteError, Router};
pub use serve::Hub;
pub use ws::Ws;
