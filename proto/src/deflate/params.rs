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

    /// Checks the level and window sizes.
    pub fn validate(&self) -> Result<(), Error> {
        if self.level > 9 {
            return Err(Error::InvalidConfig("deflate level must be 0 to 9"));
        }
        let bad = |b: Option<u8>| b.is_some_and(|b| !(8..=15).contains(&b));
        if bad(self.server_max_window_bits) || bad(self.client_max_window_bits) {
            return Err(Error::InvalidConfig("deflate window bits must be 8 to 15"));
        }
        Ok(())
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
