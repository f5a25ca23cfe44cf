//! Reaching a hub's connections from other tasks: a bounded queue of
//! commands per engine, so the hub never buffers without limit on behalf
//! of others.

use std::pin::Pin;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};

use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::hub::config::HubConfig;
use crate::hub::event::{Addresses, ConnId};
use crate::proto::close::CloseCode;
use crate::proto::message::{Message, PreparedMessage};
#[cfg(feature = "topics")]
use crate::topics::{Published, Topics};

/// Any transport a hub can serve besides TCP (TLS, Unix sockets, test
/// transports).
pub(crate) trait Io: AsyncRead + AsyncWrite + Send + 'static {}

impl<T: AsyncRead + AsyncWrite + Send + 'static> Io for T {}

/// What other tasks ask of an engine.
pub(crate) enum Command {
    Send(ConnId, Message),
    SendPrepared(ConnId, PreparedMessage),
    Close(ConnId, CloseCode, String),
    #[cfg(feature = "topics")]
    Subscribe(ConnId, String),
    #[cfg(feature = "topics")]
    Unsubscribe(ConnId, String),
    /// A connection accepted by the hub's acceptor, for this engine.
    Accept(TcpStream),
    /// A transport of another kind, its HTTP upgrade still to come, with
    /// the addresses its giver told.
    AcceptIo(Pin<Box<dyn Io>>, Option<Box<Addresses>>),
    /// A connection upgraded elsewhere, with its data: an
    /// `Adopted<H::Data>`, typed by the `Adopter` that sent it.
    Adopt(Box<dyn std::any::Any + Send>),
    Shutdown,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Command::Send(..) => "Send",
            Command::SendPrepared(..) => "SendPrepared",
            Command::Close(..) => "Close",
            #[cfg(feature = "topics")]
            Command::Subscribe(..) => "Subscribe",
            #[cfg(feature = "topics")]
            Command::Unsubscribe(..) => "Unsubscribe",
            Command::Accept(_) => "Accept",
            Command::AcceptIo(..) => "AcceptIo",
            Command::Adopt(_) => "Adopt",
            Command::Shutdown => "Shutdown",
        })
    }
}

/// Why a [`HubHandle`] call did not queue its command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HandleError {
    /// The engine's command queue is full (`try_*` only): it is behind;
    /// try later or use the waiting call.
    #[error("the hub's command queue is full")]
    Full,
    /// The hub has stopped.
    #[error("the hub has stopped")]
    Stopped,
}

/// A cloneable handle to a [`Hub`](crate::hub::Hub): sends to and closes
/// its connections from any task, and shuts it down.
///
/// Commands go through a bounded queue per engine
/// ([`HubConfig::handle_capacity`](crate::hub::HubConfig::handle_capacity)):
/// the waiting calls wait for room, the `try_` calls fail with
/// [`HandleError::Full`]. A message for a connection that has gone is
/// dropped; one for a connection with more than `max_backpressure` bytes
/// waiting meets the hub's backpressure policy.
#[derive(Debug, Clone)]
pub struct HubHandle {
    engines: Arc<[mpsc::Sender<Command>]>,
    /// Each engine's queue of connections to take (accepted, handed over,
    /// adopted): apart from `engines`, so that accepting never waits
    /// behind a flood of sends.
    accepts: Arc<[mpsc::Sender<Command>]>,
    /// The engine the next handed-over connection goes to.
    next: Arc<std::sync::atomic::AtomicUsize>,
    /// Set on shutdown, for the acceptor of several engines.
    stop: Arc<tokio::sync::watch::Sender<bool>>,
    #[cfg(feature = "topics")]
    topics: Topics,
}

impl HubHandle {
    pub(crate) fn new(
        engines: Vec<mpsc::Sender<Command>>,
        accepts: Vec<mpsc::Sender<Command>>,
        config: &HubConfig,
    ) -> Self {
        #[cfg(not(feature = "topics"))]
        let _ = config;
        HubHandle {
            engines: engines.into(),
            accepts: accepts.into(),
            next: Arc::default(),
            stop: Arc::new(tokio::sync::watch::Sender::new(false)),
            #[cfg(feature = "topics")]
            topics: config.topics.clone(),
        }
    }

    /// Tells when [`shutdown`](Self::shutdown) was called.
    pub(crate) fn stopped(&self) -> tokio::sync::watch::Receiver<bool> {
        self.stop.subscribe()
    }

    fn engine(&self, id: ConnId) -> Result<&mpsc::Sender<Command>, HandleError> {
        self.engines.get(id.engine()).ok_or(HandleError::Stopped)
    }

    /// Hands engine `engine` a connection to take (`Accept`, `AcceptIo`,
    /// `Adopt`), waiting only behind other connections.
    pub(crate) async fn hand_over(&self, engine: usize, cmd: Command) -> Result<(), HandleError> {
        let tx = self.accepts.get(engine).ok_or(HandleError::Stopped)?;
        tx.send(cmd).await.map_err(|_| HandleError::Stopped)
    }

    /// Sends `msg` to connection `id`, waiting for room in the queue.
    pub async fn send(&self, id: ConnId, msg: Message) -> Result<(), HandleError> {
        let tx = self.engine(id)?;
        tx.send(Command::Send(id, msg))
            .await
            .map_err(|_| HandleError::Stopped)
    }

    /// Sends `msg` to connection `id` if the queue has room.
    pub fn try_send(&self, id: ConnId, msg: Message) -> Result<(), HandleError> {
        self.try_command(id, Command::Send(id, msg))
    }

    /// Sends a prepared message (encoded once for every connection it goes
    /// to) to connection `id`, waiting for room in the queue.
    pub async fn send_prepared(
        &self,
        id: ConnId,
        msg: &PreparedMessage,
    ) -> Result<(), HandleError> {
        let tx = self.engine(id)?;
        tx.send(Command::SendPrepared(id, msg.clone()))
            .await
            .map_err(|_| HandleError::Stopped)
    }

    /// Sends a prepared message to connection `id` if the queue has room.
    pub fn try_send_prepared(&self, id: ConnId, msg: &PreparedMessage) -> Result<(), HandleError> {
        self.try_command(id, Command::SendPrepared(id, msg.clone()))
    }

    /// Starts the closing handshake of connection `id` with `code` and
    /// `reason` (at most 123 bytes; a longer one is cut at a character
    /// boundary), waiting for room in the queue. What was queued for it
    /// before (sends, and publishes to its topics) is written before the
    /// close frame; nothing after it is, and its handler hears no more
    /// messages.
    pub async fn close(
        &self,
        id: ConnId,
        code: CloseCode,
        reason: &str,
    ) -> Result<(), HandleError> {
        let tx = self.engine(id)?;
        tx.send(Command::Close(id, code, reason.to_owned()))
            .await
            .map_err(|_| HandleError::Stopped)
    }

    /// Starts the closing handshake of connection `id`, as
    /// [`close`](Self::close), if the queue has room.
    ///
    /// ```
    /// use wavesock::hub::{ConnId, HandleError, HubHandle};
    /// use wavesock::CloseCode;
    ///
    /// // A moderator's kick, by the id kept in the text form.
    /// fn kick(hub: &HubHandle, id: &str) -> Result<(), Box<dyn std::error::Error>> {
    ///     let id: ConnId = id.parse()?;
    ///     match hub.try_close(id, CloseCode::POLICY_VIOLATION, "kicked") {
    ///         Err(HandleError::Full) => Err("the hub is behind; try again".into()),
    ///         other => Ok(other?),
    ///     }
    /// }
    /// ```
    pub fn try_close(&self, id: ConnId, code: CloseCode, reason: &str) -> Result<(), HandleError> {
        self.try_command(id, Command::Close(id, code, reason.to_owned()))
    }

    /// Subscribes connection `id` to `topic` (see
    /// [`Ws::subscribe`](crate::hub::Ws::subscribe)), waiting for room in
    /// the queue. Subscribing twice is once.
    #[cfg(feature = "topics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "topics")))]
    pub async fn subscribe(&self, id: ConnId, topic: &str) -> Result<(), HandleError> {
        let tx = self.engine(id)?;
        tx.send(Command::Subscribe(id, topic.to_owned()))
            .await
            .map_err(|_| HandleError::Stopped)
    }

    /// Subscribes connection `id` to `topic` if the queue has room.
    #[cfg(feature = "topics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "topics")))]
    pub fn try_subscribe(&self, id: ConnId, topic: &str) -> Result<(), HandleError> {
        self.try_command(id, Command::Subscribe(id, topic.to_owned()))
    }

    /// Unsubscribes connection `id` from `topic`, waiting for room in the
    /// queue.
    #[cfg(feature = "topics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "topics")))]
    pub async fn unsubscribe(&self, id: ConnId, topic: &str) -> Result<(), HandleError> {
        let tx = self.engine(id)?;
        tx.send(Command::Unsubscribe(id, topic.to_owned()))
            .await
            .map_err(|_| HandleError::Stopped)
    }

    /// Unsubscribes connection `id` from `topic` if the queue has room.
    #[cfg(feature = "topics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "topics")))]
    pub fn try_unsubscribe(&self, id: ConnId, topic: &str) -> Result<(), HandleError> {
        self.try_command(id, Command::Unsubscribe(id, topic.to_owned()))
    }

    /// Publishes `msg` to every subscriber of `topic` (see
    /// [`Topics::publish`]): on every hub sharing the hub's registry and,
    /// with a link, on every linked server. It goes straight to the
    /// engines' inboxes, not through the command queue: it never waits.
    #[cfg(feature = "topics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "topics")))]
    pub fn publish(&self, topic: &str, msg: &PreparedMessage) -> Published {
        self.topics.publish(topic, msg)
    }

    /// Waits for room ([`Topics::room`]), then publishes as
    /// [`publish`](Self::publish) does: a task publishing in bursts is
    /// slowed rather than have subscribers miss publishes.
    #[cfg(feature = "topics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "topics")))]
    pub async fn publish_when_room(&self, topic: &str, msg: &PreparedMessage) -> Published {
        self.topics.publish_when_room(topic, msg).await
    }

    /// The hub's registry of topics.
    #[cfg(feature = "topics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "topics")))]
    pub fn topics(&self) -> &Topics {
        &self.topics
    }

    /// Hands the hub a connection over any transport (TLS from
    /// tokio-rustls, a Unix socket, ...) whose HTTP upgrade request is
    /// still to be read: the hub answers it as for the connections it
    /// accepts. Engines take such connections in turn.
    ///
    /// Transports other than `TcpStream` are polled through their own
    /// buffers (a TLS stack decrypts into its own), so the hub's
    /// shared read buffer saves less on them.
    pub async fn accept<S>(&self, io: S) -> Result<(), HandleError>
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let engine = self.next_engine();
        self.hand_over(engine, Command::AcceptIo(Box::pin(io), None))
            .await
    }

    /// Hands the hub a connection as [`accept`](Self::accept) does, with
    /// its addresses (the TCP socket's under a TLS stream): the request's
    /// extensions and [`Ws::remote_addr`](crate::hub::Ws::remote_addr)
    /// give them.
    pub async fn accept_from<S>(&self, io: S, addresses: Addresses) -> Result<(), HandleError>
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let engine = self.next_engine();
        let cmd = Command::AcceptIo(Box::pin(io), Some(Box::new(addresses)));
        self.hand_over(engine, cmd).await
    }

    fn next_engine(&self) -> usize {
        use std::sync::atomic::Ordering;
        self.next.fetch_add(1, Ordering::Relaxed) % self.engines.len()
    }

    /// Shuts the hub down: it stops accepting, closes every connection with
    /// 1001 (going away), and [`Hub::serve`](crate::hub::Hub::serve)
    /// returns once they are closed or
    /// [`HubConfig::shutdown_timeout`](crate::hub::HubConfig::shutdown_timeout)
    /// has passed. Returns once every engine has the command.
    pub async fn shutdown(&self) -> Result<(), HandleError> {
        self.stop.send_replace(true);
        for tx in self.engines.iter() {
            // An engine that stopped already is shut down.
            let _ = tx.send(Command::Shutdown).await;
        }
        Ok(())
    }

    fn try_command(&self, id: ConnId, cmd: Command) -> Result<(), HandleError> {
        self.engine(id)?.try_send(cmd).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => HandleError::Full,
            mpsc::error::TrySendError::Closed(_) => HandleError::Stopped,
        })
    }
}

/// A connection upgraded elsewhere, on its way to an engine.
pub(crate) struct Adopted<T> {
    pub(crate) io: Pin<Box<dyn Io>>,
    pub(crate) addresses: Option<Box<Addresses>>,
    pub(crate) data: T,
}

/// Hands a hub connections whose WebSocket handshake was done elsewhere:
/// a hyper or axum service that answered the upgrade itself, then got the
/// connection (hyper's `Upgraded`, wrapped in `hyper_util::rt::TokioIo`).
/// Made by [`Hub::adopter`](crate::hub::Hub::adopter), typed with the
/// handler's data.
///
/// The connection starts open: [`Handler::upgrade`](crate::hub::Handler::upgrade)
/// is not called, [`Handler::open`](crate::hub::Handler::open) is. It runs
/// without extensions, so the `101` it was upgraded with must not have
/// agreed on any (no `Sec-WebSocket-Extensions` header).
pub struct Adopter<T> {
    handle: HubHandle,
    _data: std::marker::PhantomData<fn(T)>,
}

impl<T> Clone for Adopter<T> {
    fn clone(&self) -> Self {
        Adopter {
            handle: self.handle.clone(),
            _data: std::marker::PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for Adopter<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Adopter").finish_non_exhaustive()
    }
}

impl<T: Send + 'static> Adopter<T> {
    pub(crate) fn new(handle: HubHandle) -> Self {
        Adopter {
            handle,
            _data: std::marker::PhantomData,
        }
    }

    /// Hands over `io`, already upgraded, with the connection's `data`.
    /// Engines take such connections in turn.
    pub async fn adopt<S>(&self, io: S, data: T) -> Result<(), HandleError>
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        self.hand_over(io, None, data).await
    }

    /// Hands over `io` as [`adopt`](Self::adopt) does, with its addresses
    /// (from axum's `ConnectInfo`, hyper's accepted socket):
    /// [`Ws::remote_addr`](crate::hub::Ws::remote_addr) gives them.
    ///
    /// ```
    /// use std::net::SocketAddr;
    /// use wavesock::hub::{Addresses, Adopter};
    ///
    /// async fn take<S>(adopter: &Adopter<String>, io: S, peer: SocketAddr, name: String)
    /// where
    ///     S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
    /// {
    ///     let _ = adopter.adopt_from(io, Addresses::new(Some(peer), None), name).await;
    /// }
    /// ```
    pub async fn adopt_from<S>(
        &self,
        io: S,
        addresses: Addresses,
        data: T,
    ) -> Result<(), HandleError>
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        self.hand_over(io, Some(Box::new(addresses)), data).await
    }

    async fn hand_over<S>(
        &self,
        io: S,
        addresses: Option<Box<Addresses>>,
        data: T,
    ) -> Result<(), HandleError>
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let adopted = Adopted {
            io: Box::pin(io),
            addresses,
            data,
        };
        let engine = self.handle.next_engine();
        self.handle
            .hand_over(engine, Command::Adopt(Box::new(adopted)))
            .await
    }
}
