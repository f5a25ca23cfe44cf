//! Connection settings.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::proto::budget::MemoryBudget;
use crate::proto::conn::Timers;
use crate::proto::deflate::DeflateConfig;
use crate::proto::limits::Limits;
use crate::proto::mask::MaskKeys;
#[cfg(feature = "proxy")]
use crate::proxy::config::Proxy;

/// The largest [`HandshakeConfig::max_headers`].
const MAX_HEADERS: usize = 4096;

/// Settings for one WebSocket connection, on every engine and both sides.
///
/// Grouped by who reads them: the protocol core's [`Limits`] and
/// [`Timers`] and [`DeflateConfig`] (the core's own types, documented
/// there), the opening handshake's bounds ([`HandshakeConfig`]), what only
/// a client opening its own connection uses ([`ClientConfig`]), and the
/// few settings of the engines themselves. Start from [`Config::default`]
/// and change what you need with the builder methods, which reach into the
/// groups (`max_message_size` sets `limits.max_message_size`); the
/// connection constructors call [`Config::validate`], so an impossible
/// combination is an error, never a panic.
///
/// ```
/// use wavesock::Config;
///
/// let config = Config::default()
///     .max_frame_size(1 << 20)
///     .max_message_size(4 << 20);
/// assert_eq!(config.limits.max_message_size, 4 << 20);
/// assert!(config.validate().is_ok());
/// assert!(Config::default().max_frame_size(0).validate().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Config {
    /// What the protocol core holds the peer to: the largest frame
    /// (default 16 MiB) and message (64 MiB), and a
    /// [`MemoryBudget`] shared with other connections (default none; see
    /// [`Config::memory_budget`]). A frame is held to the smaller of the
    /// two sizes, so either can be set alone.
    pub limits: Limits,
    /// Keepalive (default off), the pong timeout (10 s), the closing
    /// handshake's timeout (10 s; `Duration::MAX` for none) and the wait
    /// for a memory budget (`None`: the budget's own
    /// [wait timeout](MemoryBudget::wait_timeout)). Messages read but not
    /// yet taken by the application count as hearing from the peer: a
    /// slow reader does not make a live peer look silent.
    pub timers: Timers,
    /// permessage-deflate: what a client offers or a server accepts.
    /// Default `None`: no compression (a server declines offers). Needs the
    /// `deflate` feature: without it, [`validate`](Config::validate)
    /// refuses `Some`.
    pub deflate: Option<DeflateConfig>,
    /// Bytes that may wait to be written to a slow peer, the one setting
    /// for backpressure on every engine: past it a
    /// [`WebSocketStream`](crate::WebSocketStream)'s `send` (its
    /// `poll_ready`) waits until the queue is written out, and a hub's send
    /// is refused (dropped, or the connection closed, per
    /// [`BackpressurePolicy`](crate::hub::BackpressurePolicy)). A
    /// `WebSocketStream` that owes its peer more than this (pongs, its
    /// close) stops reading the peer's input until it is written; a hub
    /// stops reading a connection whenever its socket takes no more.
    ///
    /// `None` (the default): 128 KiB for a `WebSocketStream`, 1 MiB for a
    /// hub, or what the deprecated [`write_buffer_size`](Self::write_buffer_size)
    /// and `HubConfig::max_backpressure` say.
    pub max_backpressure: Option<usize>,
    /// The Stream's backpressure limit, when
    /// [`max_backpressure`](Self::max_backpressure) is `None`. Default
    /// 128 KiB.
    #[deprecated(
        since = "0.2.0",
        note = "use `max_backpressure`, one setting for the Stream and the hub"
    )]
    pub write_buffer_size: usize,
    /// The opening handshake's bounds, on both sides.
    pub handshake: HandshakeConfig,
    /// What a client uses to open its own connection (`connect_async` and
    /// its variants): servers, the hub and clients over a stream you
    /// opened never read it.
    pub client: ClientConfig,
    /// Accept unmasked frames from clients (servers only). RFC 6455 forbids
    /// them; default `false`.
    pub accept_unmasked_frames: bool,
    /// Hand out received text and binary messages in pieces as their bytes
    /// arrive, as [`Message::Frame`](crate::Message::Frame)s, instead of
    /// assembling them: memory stays bounded by what one read brings,
    /// whatever the message size. Limits still apply, `max_message_size` to
    /// the running total. Default `false`; see
    /// [`WebSocketStream::next_message_pieces`](crate::WebSocketStream::next_message_pieces).
    /// The Stream's alone: a hub hands each message whole and borrowed, and
    /// refuses a config that asks for pieces.
    pub stream_messages: bool,
    /// Where a client's masking keys come from. Default
    /// [`MaskKeys::Random`], as RFC 6455 requires; anything else is **for
    /// tests only** and gives up the protection of RFC 6455 §10.3 (see
    /// [`MaskKeys`]); with the `tracing` feature, a client connection made
    /// with it logs a warning. Servers ignore it.
    pub mask_keys: MaskKeys,
}

/// The opening handshake's bounds, on both sides and every server.
///
/// ```
/// use std::time::Duration;
/// use wavesock::Config;
///
/// let config = Config::default().max_handshake_size(16 << 10).handshake_timeout(Some(Duration::from_secs(5)));
/// assert_eq!(config.handshake.max_size, 16 << 10);
/// assert_eq!(config.handshake.timeout, Some(Duration::from_secs(5)));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HandshakeConfig {
    /// Largest HTTP head accepted (256 bytes or more). Default 8 KiB.
    pub max_size: usize,
    /// Most headers accepted: 8 to 4 096 (each read of a head makes room
    /// for this many). Default 64.
    pub max_headers: usize,
    /// Time allowed for the opening handshake. Default 10 s; `None` waits
    /// for ever.
    pub timeout: Option<Duration>,
}

impl Default for HandshakeConfig {
    fn default() -> Self {
        HandshakeConfig {
            max_size: 8 << 10,
            max_headers: 64,
            timeout: Some(Duration::from_secs(10)),
        }
    }
}

/// What only a client opening its own connection uses: `connect_async`,
/// `connect_async_with_config` and the TLS variant read it; servers, the
/// hub and `client_async` over a stream you opened do not.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientConfig {
    /// Time allowed for opening the connection before the handshake
    /// starts: name resolution, TCP, a proxy tunnel and the TLS handshake
    /// together. Default 10 s; `None` waits as long as the operating
    /// system does.
    pub connect_timeout: Option<Duration>,
    /// The proxy to connect through. Default [`Proxy::none`]; see
    /// [`crate::proxy`].
    #[cfg(feature = "proxy")]
    #[cfg_attr(docsrs, doc(cfg(feature = "proxy")))]
    pub proxy: Proxy,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            connect_timeout: Some(Duration::from_secs(10)),
            #[cfg(feature = "proxy")]
            proxy: Proxy::none(),
        }
    }
}

#[allow(deprecated)]
impl Default for Config {
    fn default() -> Self {
        Config {
            limits: Limits::default(),
            timers: Timers::default(),
            deflate: None,
            max_backpressure: None,
            write_buffer_size: 128 << 10,
            handshake: HandshakeConfig::default(),
            client: ClientConfig::default(),
            accept_unmasked_frames: false,
            stream_messages: false,
            mask_keys: MaskKeys::Random,
        }
    }
}

impl Config {
    /// Sets [`Limits::max_frame_size`] in [`Config::limits`].
    pub fn max_frame_size(mut self, bytes: usize) -> Self {
        self.limits.max_frame_size = bytes;
        self
    }

    /// Sets [`Limits::max_message_size`] in [`Config::limits`].
    pub fn max_message_size(mut self, bytes: usize) -> Self {
        self.limits.max_message_size = bytes;
        self
    }

    /// Sets [`Config::max_backpressure`].
    pub fn max_backpressure(mut self, bytes: usize) -> Self {
        self.max_backpressure = Some(bytes);
        self
    }

    /// Sets [`Config::max_backpressure`]: the name it had on the Stream
    /// (and has on axum's `WebSocketUpgrade`).
    #[deprecated(
        since = "0.2.0",
        note = "use `max_backpressure`, one setting for the Stream and the hub"
    )]
    pub fn write_buffer_size(mut self, bytes: usize) -> Self {
        // The old field too, for code that reads it back.
        #[allow(deprecated)]
        {
            self.write_buffer_size = bytes;
        }
        self.max_backpressure(bytes)
    }

    /// The backpressure limit a [`WebSocketStream`](crate::WebSocketStream)
    /// keeps to: [`max_backpressure`](Self::max_backpressure), else 128 KiB
    /// (or the deprecated `write_buffer_size` field).
    pub fn stream_backpressure(&self) -> usize {
        #[allow(deprecated)]
        self.max_backpressure.unwrap_or(self.write_buffer_size)
    }

    /// Sets [`HandshakeConfig::max_size`] in [`Config::handshake`].
    pub fn max_handshake_size(mut self, bytes: usize) -> Self {
        self.handshake.max_size = bytes;
        self
    }

    /// Sets [`HandshakeConfig::max_headers`] in [`Config::handshake`].
    pub fn max_headers(mut self, count: usize) -> Self {
        self.handshake.max_headers = count;
        self
    }

    /// Sets [`HandshakeConfig::timeout`] in [`Config::handshake`].
    pub fn handshake_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.handshake.timeout = timeout;
        self
    }

    /// Sets [`ClientConfig::connect_timeout`] in [`Config::client`].
    pub fn connect_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.client.connect_timeout = timeout;
        self
    }

    /// Sets [`ClientConfig::proxy`] in [`Config::client`].
    ///
    /// ```
    /// use wavesock::Config;
    /// use wavesock::proxy::Proxy;
    ///
    /// let config = Config::default().proxy(Proxy::socks5("socks5://127.0.0.1:1080"));
    /// assert!(config.validate().is_ok());
    /// let config = Config::default().proxy(Proxy::http("http://proxy:notaport"));
    /// assert!(config.validate().is_err());
    /// ```
    #[cfg(feature = "proxy")]
    #[cfg_attr(docsrs, doc(cfg(feature = "proxy")))]
    pub fn proxy(mut self, proxy: Proxy) -> Self {
        self.client.proxy = proxy;
        self
    }

    /// Sets [`Config::accept_unmasked_frames`].
    pub fn accept_unmasked_frames(mut self, accept: bool) -> Self {
        self.accept_unmasked_frames = accept;
        self
    }

    /// Sets [`Timers::ping_interval`] in [`Config::timers`]: send a ping
    /// after this long without hearing from the peer.
    pub fn ping_interval(mut self, interval: Option<Duration>) -> Self {
        self.timers.ping_interval = interval;
        self
    }

    /// Sets [`Timers::pong_timeout`] in [`Config::timers`].
    pub fn pong_timeout(mut self, timeout: Duration) -> Self {
        self.timers.pong_timeout = timeout;
        self
    }

    /// Sets [`Timers::close_timeout`] in [`Config::timers`].
    pub fn close_timeout(mut self, timeout: Duration) -> Self {
        self.timers.close_timeout = timeout;
        self
    }

    /// Turns off every timeout: the opening handshake's, the client's
    /// connect timeout, keepalive and the closing handshake's
    /// (`close_timeout` of `Duration::MAX`). A connection made with it
    /// makes no Tokio timer (unless it has a
    /// [`memory_budget`](Config::memory_budget), whose wait is timed), so
    /// it runs on a runtime built without Tokio's time driver (no
    /// `enable_time()`, as `Builder::new_current_thread().enable_io()`).
    /// Every wait is then as long as the peer makes it: a peer that stops
    /// answering holds its connection until it goes away.
    ///
    /// With a timeout configured, such a runtime panics at the first timer
    /// (Tokio's "timers are disabled. Call `enable_time` on the runtime
    /// builder"): Tokio offers no way to ask a runtime whether it has a
    /// time driver, so this cannot be an error instead.
    ///
    /// ```
    /// use std::time::Duration;
    /// use wavesock::Config;
    ///
    /// let config = Config::default().without_timeouts();
    /// assert_eq!(config.handshake.timeout, None);
    /// assert_eq!(config.client.connect_timeout, None);
    /// assert_eq!(config.timers.ping_interval, None);
    /// assert_eq!(config.timers.close_timeout, Duration::MAX);
    /// assert!(config.validate().is_ok());
    /// ```
    pub fn without_timeouts(self) -> Self {
        self.handshake_timeout(None)
            .connect_timeout(None)
            .ping_interval(None)
            .close_timeout(Duration::MAX)
    }

    /// Sets [`Config::deflate`]: `Some(DeflateConfig::default())` (or a
    /// `DeflateConfig` itself) turns compression on.
    ///
    /// ```
    /// use wavesock::{Config, DeflateConfig};
    ///
    /// let on = Config::default().deflate(DeflateConfig::default());
    /// assert!(on.deflate.is_some());
    /// // Compression needs the `deflate` feature; without it this is refused.
    /// assert_eq!(on.validate().is_ok(), cfg!(feature = "deflate"));
    /// ```
    pub fn deflate(mut self, deflate: impl Into<Option<DeflateConfig>>) -> Self {
        self.deflate = deflate.into();
        self
    }

    /// Sets [`Config::stream_messages`].
    ///
    /// ```
    /// use wavesock::Config;
    ///
    /// // Messages of up to 1 GiB, received in pieces of what each read brings.
    /// let config = Config::default()
    ///     .stream_messages(true)
    ///     .max_message_size(1 << 30);
    /// assert!(config.validate().is_ok());
    /// ```
    pub fn stream_messages(mut self, stream: bool) -> Self {
        self.stream_messages = stream;
        self
    }

    /// Sets [`Config::mask_keys`]: **for tests only**, to know a client's
    /// frames byte for byte. Any choice but [`MaskKeys::Random`] (the
    /// default) makes the keys predictable, which RFC 6455 §10.3 forbids
    /// because it lets message bytes be chosen as they appear on the wire.
    ///
    /// ```
    /// use wavesock::{Config, MaskKeys};
    ///
    /// // In a test: frame n of each connection is masked with n, big-endian.
    /// let config = Config::default().mask_keys(MaskKeys::CountingForTesting(0));
    /// assert_ne!(config, Config::default());
    /// assert_eq!(Config::default().mask_keys, MaskKeys::Random);
    /// ```
    pub fn mask_keys(mut self, keys: MaskKeys) -> Self {
        self.mask_keys = keys;
        self
    }

    /// Sets [`Limits::budget`] in [`Config::limits`]: give every accepted connection a
    /// clone of the same [`MemoryBudget`] to bound what they all hold
    /// together for messages in progress.
    ///
    /// Without a budget, memory grows with the number of peers: each may
    /// hold up to `max_message_size` (64 MiB by default) in a message it
    /// never finishes, or that inflates from a few kilobytes. With one, all
    /// of them together hold at most the budget beyond a fixed
    /// [allowance](MemoryBudget::allowance) each (128 KiB by default):
    /// connections that need more wait for others to give some back, and
    /// are refused (close code 1013) if the wait lasts longer than the
    /// budget's [wait timeout](MemoryBudget::wait_timeout) or if they hold
    /// budget while their peer sends nothing for that long; a message that
    /// alone would need more than the whole budget is refused at once
    /// (1009).
    ///
    /// Size it as the memory you can spare for messages in flight, at least
    /// a few times `max_message_size` so that several large messages can be
    /// received at once; the server then needs about
    /// `budget + connections × (allowance + fixed per-connection state)`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use wavesock::{Config, MemoryBudget};
    ///
    /// let budget = MemoryBudget::new(512 << 20).wait_timeout(Duration::from_secs(2));
    /// // In the accept loop, for every connection:
    /// let config = Config::default()
    ///     .max_message_size(16 << 20)
    ///     .memory_budget(budget.clone());
    /// assert!(config.validate().is_ok());
    /// assert_eq!(config.limits().budget, Some(budget));
    /// ```
    pub fn memory_budget(mut self, budget: impl Into<Option<MemoryBudget>>) -> Self {
        self.limits.budget = budget.into();
        self
    }

    /// The limits the protocol core holds the peer to.
    ///
    /// ```
    /// use wavesock::Config;
    ///
    /// let limits = Config::default().max_message_size(1 << 20).limits();
    /// assert_eq!(limits.max_message_size, 1 << 20);
    /// ```
    pub fn limits(&self) -> Limits {
        self.limits.clone()
    }

    /// The timers the protocol core runs the connection with.
    /// `budget_wait` left `None` is the budget's own wait timeout.
    pub fn timers(&self) -> Timers {
        let budget_wait = self.timers.budget_wait.or_else(|| {
            self.limits
                .budget
                .as_ref()
                .map(MemoryBudget::wait_timeout_duration)
        });
        self.timers.budget_wait(budget_wait)
    }

    /// Checks that the settings can work together.
    pub fn validate(&self) -> Result<()> {
        if let Some(d) = &self.deflate {
            if !crate::proto::deflate::AVAILABLE {
                return Err(Error::InvalidConfig(
                    "Config::deflate needs wavesock's `deflate` feature",
                ));
            }
            d.validate()?;
        }
        self.limits().validate()?;
        if self.stream_backpressure() == 0 {
            return Err(Error::InvalidConfig("max_backpressure must be at least 1"));
        }
        if self.handshake.max_size < 256 {
            return Err(Error::InvalidConfig(
                "max_handshake_size below 256 bytes cannot hold a handshake",
            ));
        }
        if self.handshake.max_headers < 8 {
            return Err(Error::InvalidConfig(
                "max_headers below 8 cannot hold a handshake",
            ));
        }
        // Room for this many is allocated at each parse of a head: a count
        // no memory holds would panic mid-handshake instead.
        if self.handshake.max_headers > MAX_HEADERS {
            return Err(Error::InvalidConfig("max_headers must be at most 4096"));
        }
        if self.timers.ping_interval.is_some_and(|i| i.is_zero()) {
            return Err(Error::InvalidConfig("ping_interval must not be zero"));
        }
        if self.timers.pong_timeout.is_zero() {
            return Err(Error::InvalidConfig("pong_timeout must not be zero"));
        }
        if self.timers.close_timeout.is_zero() {
            return Err(Error::InvalidConfig("close_timeout must not be zero"));
        }
        if let Some(t) = self.handshake.timeout {
            if t.is_zero() {
                return Err(Error::InvalidConfig("handshake_timeout must not be zero"));
            }
        }
        if self.client.connect_timeout.is_some_and(|t| t.is_zero()) {
            return Err(Error::InvalidConfig("connect_timeout must not be zero"));
        }
        #[cfg(feature = "proxy")]
        self.client.proxy.validate()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        assert!(Config::default().validate().is_ok());
    }

    #[test]
    #[allow(deprecated)]
    fn one_backpressure_setting_and_its_old_names() {
        assert_eq!(Config::default().stream_backpressure(), 128 << 10);
        assert_eq!(
            Config::default()
                .max_backpressure(4096)
                .stream_backpressure(),
            4096
        );
        // The old setter sets the new setting.
        let old = Config::default().write_buffer_size(4096);
        assert_eq!(old.max_backpressure, Some(4096));
        assert_eq!(old.write_buffer_size, 4096, "read back by old code");
        assert_eq!(old.stream_backpressure(), 4096);
        // The old field still counts where the new one is unset.
        let mut field = Config {
            write_buffer_size: 1024,
            ..Config::default()
        };
        assert_eq!(field.stream_backpressure(), 1024);
        assert!(
            Config {
                write_buffer_size: 0,
                ..Config::default()
            }
            .validate()
            .is_err()
        );
        field.max_backpressure = Some(2048);
        assert_eq!(field.stream_backpressure(), 2048);
    }

    #[test]
    fn either_size_limit_can_be_set_alone() {
        // Below the default frame limit: the message limit bounds frames too.
        assert!(
            Config::default()
                .max_message_size(1 << 20)
                .validate()
                .is_ok()
        );
        assert!(Config::default().max_message_size(1).validate().is_ok());
        // Above the default message limit: messages still stop at 64 MiB.
        assert!(Config::default().max_frame_size(1 << 30).validate().is_ok());
        assert!(Config::default().max_message_size(0).validate().is_err());
    }

    #[test]
    fn zero_limits_are_refused() {
        assert!(Config::default().max_frame_size(0).validate().is_err());
        assert!(Config::default().max_backpressure(0).validate().is_err());
        assert!(Config::default().max_handshake_size(10).validate().is_err());
        assert!(Config::default().max_headers(0).validate().is_err());
        assert!(
            Config::default()
                .max_headers(usize::MAX)
                .validate()
                .is_err()
        );
        assert!(
            Config::default()
                .handshake_timeout(Some(std::time::Duration::ZERO))
                .validate()
                .is_err()
        );
        assert!(
            Config::default()
                .connect_timeout(Some(std::time::Duration::ZERO))
                .validate()
                .is_err()
        );
    }
}
