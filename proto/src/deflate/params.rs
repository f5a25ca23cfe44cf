//! The permessage-deflate parameters: what a side offers or accepts, and
//! what a connection agreed on. Plain data, compiled with or without the
//! `deflate` feature, so that the handshake can negotiate with them.

use crate::error::Error;

/// What a side offers (client) or accepts (server) for permessage-deflate,
/// and how it compresses.
///
/// The four RFC 7692 parameters read the same in both roles; what they do
/// depends on the role:
///
/// | field | as a client | as a server |
/// | --- | --- | --- |
/// | `server_no_context_takeover` | ask the server to reset its context after each message | reset ours after each message, always |
/// | `client_no_context_takeover` | promise to reset ours after each message | ask the client to reset its context |
/// | `server_max_window_bits` | ask the server for at most 2^n bytes of window | use at most 2^n bytes |
/// | `client_max_window_bits` | use at most 2^n bytes (`client_max_window_bits` is offered either way) | require the client to use at most 2^n bytes; decline clients that cannot |
///
/// Resetting the context costs compression ratio; smaller windows cost ratio
/// and save memory (the window takes 2^n bytes on each side of a direction).
///
/// ```
/// use wavesock_proto::deflate::DeflateConfig;
///
/// let deflate = DeflateConfig::default()
///     .level(6)
///     .server_max_window_bits(Some(12))
///     .compression_threshold(256);
/// assert!(deflate.validate().is_ok());
/// assert!(DeflateConfig::default().client_max_window_bits(Some(16)).validate().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeflateConfig {
    /// Compression level, 0 (store only) to 9 (smallest). Default 3, which
    /// with zlib-rs compresses text about as well as zlib's 6, much faster.
    pub level: u32,
    /// Data messages shorter than this many bytes are sent uncompressed.
    /// Default 32.
    pub compression_threshold: usize,
    /// See the table above. Default `false`.
    pub server_no_context_takeover: bool,
    /// See the table above. Default `false`.
    pub client_no_context_takeover: bool,
    /// See the table above: 8 to 15, or `None` for no limit (15). Default `None`.
    pub server_max_window_bits: Option<u8>,
    /// See the table above: 8 to 15, or `None` for no limit (15). Default `None`.
    pub client_max_window_bits: Option<u8>,
    /// How compression memory is held: see [`DeflatePolicy`]. Default
    /// [`DeflatePolicy::Takeover`]. The policy adds to the four parameters
    /// above what it needs; it never weakens what they ask.
    pub policy: DeflatePolicy,
}

/// How a connection holds its compression memory, and so what it answers
/// in the negotiation.
///
/// | policy | negotiates | held by an idle connection |
/// | --- | --- | --- |
/// | `Takeover` | context kept both ways, full windows | nothing until the first compressed message each way, then zlib's whole state (about 330 KiB out, 40 KiB in) |
/// | `Shared` | `server_no_context_takeover; client_no_context_takeover` | nothing: zlib's state is lent per message by a per-thread pool |
/// | `Dedicated(n)` | context kept, windows shrunk to fit `n` bytes (`server_max_window_bits`, and `client_max_window_bits` when the client offers it, else `client_no_context_takeover`) | at most the two windows' bytes, about `n` |
///
/// `Dedicated` keeps only the bytes each window must remember, not zlib's
/// state: zlib-rs' compressor has a fixed 128 KiB hash table whatever its
/// memLevel, so state of a few KiB cannot be had from it. A lent state is
/// primed with the window's bytes before each message (a preset
/// dictionary), which costs compression time in proportion to the window.
///
/// ```
/// use wavesock_proto::deflate::{DeflateConfig, DeflatePolicy};
///
/// let p: DeflatePolicy = "dedicated:4k".parse().unwrap();
/// assert_eq!(p, DeflatePolicy::Dedicated(4096));
/// assert_eq!(p.windows(), Some((11, 11)));
/// assert_eq!("shared".parse(), Ok(DeflatePolicy::Shared));
/// let config = DeflateConfig::default().policy(p);
/// assert!(config.validate().is_ok());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum DeflatePolicy {
    /// Context takeover with zlib's own state per direction, made by the
    /// first compressed message that direction: the best ratio and the
    /// least CPU per message, the most memory once used.
    #[default]
    Takeover,
    /// No context takeover either way; every message borrows zlib's state
    /// from a per-thread pool (at most a few states per thread) and gives
    /// it back, so an idle connection holds none.
    Shared,
    /// Context takeover within windows that fit this many bytes in all
    /// (1 KiB to 256 KiB; the windows stop growing at 32 KiB each).
    Dedicated(usize),
}

impl DeflatePolicy {
    /// The window bits `(server, client)` a `Dedicated` policy keeps, the
    /// largest whose bytes fit its size: the server's window takes the
    /// larger half. `None` for the other policies.
    pub fn windows(&self) -> Option<(u8, u8)> {
        let DeflatePolicy::Dedicated(bytes) = *self else {
            return None;
        };
        let log2 = |n: usize| (usize::BITS - 1 - n.max(1).leading_zeros()) as u8;
        let client = log2(bytes).saturating_sub(1).clamp(9, 15);
        let server = log2(bytes.saturating_sub(1 << client)).clamp(9, 15);
        Some((server, client))
    }
}

impl std::str::FromStr for DeflatePolicy {
    type Err = Error;

    /// `takeover`, `shared`, or `dedicated:N` with N in KiB and a `k`
    /// suffix (`dedicated:4k`), as the examples' `--deflate` flag takes.
    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = Error::InvalidConfig("deflate policy is takeover, shared or dedicated:Nk");
        match s {
            "takeover" => Ok(DeflatePolicy::Takeover),
            "shared" => Ok(DeflatePolicy::Shared),
            _ => {
                let kib = s
                    .strip_prefix("dedicated:")
                    .and_then(|n| n.strip_suffix(['k', 'K']))
                    .and_then(|n| n.parse::<usize>().ok())
                    .ok_or(bad)?;
                let policy = DeflatePolicy::Dedicated(kib.saturating_mul(1024));
                policy.check().map(|()| policy)
            }
        }
    }
}

impl DeflatePolicy {
    fn check(&self) -> Result<(), Error> {
        match self {
            DeflatePolicy::Dedicated(n) if !(1024..=256 << 10).contains(n) => Err(
                Error::InvalidConfig("a dedicated deflate policy holds 1 KiB to 256 KiB"),
            ),
            _ => Ok(()),
        }
    }
}

impl Default for DeflateConfig {
    fn default() -> Self {
        DeflateConfig {
            level: 3,
            compression_threshold: 32,
            server_no_context_takeover: false,
            client_no_context_takeover: false,
            server_max_window_bits: None,
            client_max_window_bits: None,
            policy: DeflatePolicy::Takeover,
        }
    }
}

impl DeflateConfig {
    /// Sets [`DeflateConfig::level`].
    pub fn level(mut self, level: u32) -> Self {
        self.level = level;
        self
    }

    /// Sets [`DeflateConfig::compression_threshold`].
    pub fn compression_threshold(mut self, bytes: usize) -> Self {
        self.compression_threshold = bytes;
        self
    }

    /// Sets [`DeflateConfig::server_no_context_takeover`].
    pub fn server_no_context_takeover(mut self, on: bool) -> Self {
        self.server_no_context_takeover = on;
        self
    }

    /// Sets [`DeflateConfig::client_no_context_takeover`].
    pub fn client_no_context_takeover(mut self, on: bool) -> Self {
        self.client_no_context_takeover = on;
        self
    }

    /// Sets [`DeflateConfig::server_max_window_bits`].
    pub fn server_max_window_bits(mut self, bits: Option<u8>) -> Self {
        self.server_max_window_bits = bits;
        self
    }

    /// Sets [`DeflateConfig::client_max_window_bits`].
    pub fn client_max_window_bits(mut self, bits: Option<u8>) -> Self {
        self.client_max_window_bits = bits;
        self
    }

    /// Sets [`DeflateConfig::policy`].
    pub fn policy(mut self, policy: DeflatePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Checks the level, window sizes and policy.
    pub fn validate(&self) -> Result<(), Error> {
        if self.level > 9 {
            return Err(Error::InvalidConfig("deflate level must be 0 to 9"));
        }
        let bad = |b: Option<u8>| b.is_some_and(|b| !(8..=15).contains(&b));
        if bad(self.server_max_window_bits) || bad(self.client_max_window_bits) {
            return Err(Error::InvalidConfig("deflate window bits must be 8 to 15"));
        }
        self.policy.check()
    }
}

/// The permessage-deflate parameters one connection agreed on.
///
/// Made by the negotiation in
/// wavesock's
/// [`handshake::extensions`](https://docs.rs/wavesock/latest/wavesock/handshake/extensions/index.html); window bits are
/// 8 to 15 (15 when the handshake named no limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeflateParams {
    /// The server resets its compression context after each message.
    pub server_no_context_takeover: bool,
    /// The client resets its compression context after each message.
    pub client_no_context_takeover: bool,
    /// The server compresses with at most 2^n bytes of window.
    pub server_max_window_bits: u8,
    /// The client compresses with at most 2^n bytes of window.
    pub client_max_window_bits: u8,
}

impl Default for DeflateParams {
    /// Compression with no parameters: context kept, full windows.
    fn default() -> Self {
        DeflateParams {
            server_no_context_takeover: false,
            client_no_context_takeover: false,
            server_max_window_bits: 15,
            client_max_window_bits: 15,
        }
    }
}
