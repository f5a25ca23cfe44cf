//! A hub's settings.

use std::time::Duration;

use crate::config::Config;
use crate::error::{Error, Result};
#[cfg(feature = "topics")]
use crate::topics::Topics;

/// The largest [`HubConfig::read_buffer_size`].
const MAX_READ_BUFFER: usize = 1 << 30;

/// A hub's settings: the connections' [`Config`] and what the hub adds.
///
/// ```
/// use wavesock::hub::{BackpressurePolicy, HubConfig};
/// use wavesock::Config;
///
/// let config = HubConfig::default()
///     .config(Config::default().max_message_size(1 << 20).max_backpressure(256 << 10))
///     .backpressure_policy(BackpressurePolicy::Drop);
/// assert!(config.validate().is_ok());
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HubConfig {
    /// Every connection's settings, as for a
    /// [`WebSocketStream`](crate::WebSocketStream): limits, timers,
    /// extensions, backpressure ([`Config::max_backpressure`]) and the
    /// handshake's bounds. A hub is a server: [`Config::client`] and
    /// [`Config::mask_keys`] are clients' and go unread, and
    /// [`Config::stream_messages`] is refused (a hub hands messages whole).
    pub config: Config,
    /// The hub's backpressure limit when [`Config::max_backpressure`] is
    /// `None`. Default 1 MiB.
    #[deprecated(
        since = "0.2.0",
        note = "use `Config::max_backpressure`, one setting for the Stream and the hub"
    )]
    pub max_backpressure: usize,
    /// What a send to a connection over [`backpressure`](Self::backpressure)
    /// bytes does. Default
    /// [`BackpressurePolicy::Close`].
    pub backpressure_policy: BackpressurePolicy,
    /// Size of each engine's read buffer, which every connection reads into
    /// in turn: 4 KiB to 1 GiB. Default 512 KiB (as uWebSockets' per-loop
    /// buffer).
    pub read_buffer_size: usize,
    /// Engines (tasks, each with its connections and read buffer); `None`
    /// for one per worker thread of the runtime [`Hub::serve`](crate::hub::Hub::serve) runs on.
    /// Default `Some(1)`.
    pub engines: Option<usize>,
    /// Commands (sends, closes) a [`HubHandle`](crate::hub::HubHandle) may queue per engine before
    /// it waits (or `try_send` fails): 1 to Tokio's
    /// [`Semaphore::MAX_PERMITS`](tokio::sync::Semaphore::MAX_PERMITS), the
    /// most a Tokio channel holds (the queue takes memory for what waits,
    /// not for its capacity). Default 1 024.
    pub handle_capacity: usize,
    /// On [`HubHandle::shutdown`](crate::hub::HubHandle::shutdown), how long connections have to finish
    /// their closing handshakes (code 1001) before they are dropped.
    /// Default 5 s.
    pub shutdown_timeout: Duration,
    /// The registry of topics the hub's connections subscribe and publish
    /// to. Default [`Topics::global`]: shared by every hub of the process.
    #[cfg(feature = "topics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "topics")))]
    pub topics: Topics,
    /// How an engine learns that its TCP sockets are ready. Default
    /// [`Readiness::Owned`] where the platform has a poller to own (Unix),
    /// [`Readiness::Tokio`] elsewhere. Nothing in the environment changes
    /// it: a program that wants to choose at run time parses the choice
    /// itself ([`Readiness`] implements `FromStr`: `owned`, `tokio`), as
    /// the `hub_echo` example's `--readiness` flag does.
    pub readiness: Readiness,
}

impl Default for HubConfig {
    fn default() -> Self {
        #[allow(deprecated)]
        HubConfig {
            config: Config::default(),
            max_backpressure: 1 << 20,
            backpressure_policy: BackpressurePolicy::Close,
            read_buffer_size: 512 << 10,
            engines: Some(1),
            handle_capacity: 1024,
            shutdown_timeout: Duration::from_secs(5),
            #[cfg(feature = "topics")]
            topics: Topics::global(),
            readiness: Readiness::default(),
        }
    }
}

impl HubConfig {
    /// Sets [`config`](Self::config).
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }

    /// Sets the hub's backpressure limit where [`Config::max_backpressure`]
    /// is `None`.
    #[deprecated(
        since = "0.2.0",
        note = "use `Config::max_backpressure`, one setting for the Stream and the hub"
    )]
    pub fn max_backpressure(mut self, bytes: usize) -> Self {
        #[allow(deprecated)]
        {
            self.max_backpressure = bytes;
        }
        self
    }

    /// The backpressure limit the hub keeps to: bytes that may wait to be
    /// written to a peer before more sends to it are refused (dropped, or
    /// the connection closed, per
    /// [`backpressure_policy`](Self::backpressure_policy)); a single
    /// message larger than this still goes out when nothing waits.
    /// [`Config::max_backpressure`], else 1 MiB (or the deprecated
    /// [`HubConfig::max_backpressure`] field).
    pub fn backpressure(&self) -> usize {
        #[allow(deprecated)]
        self.config
            .max_backpressure
            .unwrap_or(self.max_backpressure)
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

    /// Sets [`topics`](Self::topics): a registry of the hub's own, or one
    /// shared with some hubs only.
    #[cfg(feature = "topics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "topics")))]
    pub fn topics(mut self, topics: Topics) -> Self {
        self.topics = topics;
        self
    }

    /// Sets [`readiness`](Self::readiness).
    pub fn readiness(mut self, readiness: Readiness) -> Self {
        self.readiness = readiness;
        self
    }

    /// Checks the settings, the connections' [`Config`] included.
    pub fn validate(&self) -> Result<()> {
        self.config.validate()?;
        // A hub hands each message whole and borrowed: asked for pieces, it
        // would otherwise assemble them silently.
        if self.config.stream_messages {
            return Err(Error::InvalidConfig(
                "a hub hands messages whole: Config::stream_messages is the Stream's",
            ));
        }
        if self.read_buffer_size < 4096 {
            return Err(Error::InvalidConfig(
                "read_buffer_size must be at least 4096 bytes",
            ));
        }
        // Reserved whole by each engine: past what an allocation can be,
        // the reservation would panic mid-serve instead.
        if self.read_buffer_size > MAX_READ_BUFFER {
            return Err(Error::InvalidConfig(
                "read_buffer_size must be at most 1 GiB",
            ));
        }
        if self.engines == Some(0) {
            return Err(Error::InvalidConfig("a hub needs at least one engine"));
        }
        if self.engines > Some(crate::hub::event::MAX_ENGINES) {
            return Err(Error::InvalidConfig(
                "a hub has at most 256 engines (their number is part of a ConnId)",
            ));
        }
        if self.handle_capacity == 0 {
            return Err(Error::InvalidConfig("handle_capacity must be at least 1"));
        }
        // Each engine's queue is a Tokio channel, which panics when made
        // with more.
        if self.handle_capacity > tokio::sync::Semaphore::MAX_PERMITS {
            return Err(Error::InvalidConfig(
                "handle_capacity must be at most tokio::sync::Semaphore::MAX_PERMITS",
            ));
        }
        Ok(())
    }
}

/// What a send to a connection with more than
/// [`HubConfig::backpressure`] bytes waiting does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackpressurePolicy {
    /// Close the connection: what waits behind the frame being written is
    /// dropped (the peer would get it long after the limit) and the close
    /// frame goes next, code 1013 (try again later, as when a server sheds
    /// load). Once it is written the hub ends its side of the transport
    /// and waits for the peer to end its own, reading and dropping what
    /// the peer still sends (closing with input unread would reset the
    /// connection and lose what the kernel still holds for the peer); the
    /// connection ends then, or at the close timeout
    /// ([`Config::close_timeout`](crate::Config::close_timeout)). A peer
    /// that answers the close and keeps its socket open after the hub's
    /// end holds it until that timeout. [`Handler::close`](crate::hub::Handler::close) reports
    /// [`Error::Backpressure`]. Sends to it meanwhile are
    /// [`SendStatus::Closed`](crate::hub::SendStatus::Closed).
    Close,
    /// Drop the message ([`SendStatus::Dropped`](crate::hub::SendStatus::Dropped)); the connection goes on,
    /// and [`Handler::drain`](crate::hub::Handler::drain) says when its peer caught up.
    Drop,
}

/// How a hub's engine learns which of its TCP sockets are ready to read or
/// write ([`HubConfig::readiness`]). Transports other than TCP (TLS, Unix
/// sockets, connections handed over with
/// [`HubHandle::accept`](crate::hub::HubHandle::accept)) are always polled
/// through their own wakers, under either.
///
/// ```
/// use wavesock::hub::{HubConfig, Readiness};
///
/// // The portable path, as every Tokio socket has it.
/// let config = HubConfig::default().readiness(Readiness::Tokio);
/// assert_eq!(config.readiness, Readiness::Tokio);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Readiness {
    /// The engine owns a poller (epoll, kqueue, through mio) whose own
    /// descriptor is registered with Tokio's reactor: the engine is still
    /// a task of the runtime, and it reads the readiness of all its
    /// sockets in one call per turn. A socket has no Tokio registration
    /// (256 bytes each, and the reactor's work per event). On Unix only;
    /// elsewhere it means [`Tokio`](Self::Tokio). If the poller cannot be
    /// made (out of file descriptors), the engine uses `Tokio`.
    Owned,
    /// Each socket is a Tokio `TcpStream`, registered with the reactor,
    /// and wakes its connection through a waker of its own.
    Tokio,
}

impl Default for Readiness {
    fn default() -> Self {
        if cfg!(unix) {
            Readiness::Owned
        } else {
            Readiness::Tokio
        }
    }
}

/// `owned` or `tokio`, as a command line or a configuration file would
/// name them.
///
/// ```
/// use wavesock::hub::Readiness;
///
/// assert_eq!("tokio".parse(), Ok(Readiness::Tokio));
/// assert_eq!("owned".parse(), Ok(Readiness::Owned));
/// assert!("epoll".parse::<Readiness>().is_err());
/// ```
impl std::str::FromStr for Readiness {
    type Err = UnknownReadiness;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        match s {
            "owned" => Ok(Readiness::Owned),
            "tokio" => Ok(Readiness::Tokio),
            _ => Err(UnknownReadiness),
        }
    }
}

/// A name [`Readiness`] does not know (it knows `owned` and `tokio`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("unknown hub readiness mode (expected `owned` or `tokio`)")]
pub struct UnknownReadiness;

impl Readiness {
    /// Whether an engine owns a poller on this platform.
    pub(crate) fn owned(self) -> bool {
        cfg!(unix) && self == Readiness::Owned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hub_refuses_to_be_asked_for_pieces() {
        let pieces = HubConfig::default().config(Config::default().stream_messages(true));
        assert!(
            matches!(pieces.validate(), Err(Error::InvalidConfig(why)) if why.contains("stream_messages"))
        );
        assert!(HubConfig::default().validate().is_ok());
    }

    #[test]
    #[allow(deprecated)]
    fn the_hub_keeps_to_the_one_backpressure_setting() {
        assert_eq!(HubConfig::default().backpressure(), 1 << 20);
        let set = HubConfig::default().config(Config::default().max_backpressure(4096));
        assert_eq!(set.backpressure(), 4096);
        // The old name still works where the new one is unset, in any
        // order with `config`.
        let old = HubConfig::default().max_backpressure(8192);
        assert_eq!(old.backpressure(), 8192);
        let old = HubConfig::default()
            .max_backpressure(8192)
            .config(Config::default().max_message_size(1 << 20));
        assert_eq!(old.backpressure(), 8192);
        // The new one wins.
        let both = HubConfig::default()
            .max_backpressure(8192)
            .config(Config::default().max_backpressure(4096));
        assert_eq!(both.backpressure(), 4096);
        // The Stream's old name, in the hub's config, now counts too.
        let stream_name = HubConfig::default().config(Config::default().write_buffer_size(2048));
        assert_eq!(stream_name.backpressure(), 2048);
    }
}
