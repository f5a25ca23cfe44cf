//! permessage-deflate ([RFC 7692]) in the protocol core: the negotiated
//! parameters, and the compressor and decompressor a connection's encoder
//! and decoder use.
//!
//! The parameter types are always here, so the handshake negotiates with
//! them whatever the features. The compressor needs the `deflate` feature;
//! without it this module compiles a stub whose compressor types cannot be
//! made, and [`pair`] refuses.
//!
//! The module sits below the decoder and encoder: they hold its
//! [`Inflater`] and [`Deflater`]. So it names them only through the traits
//! they implement, [`TakesInflater`] and [`TakesDeflater`], which
//! [`enable`] takes: a module that used its users back would make the
//! three one knot, none of which could be read or changed alone.
//!
//! [RFC 7692]: https://www.rfc-editor.org/rfc/rfc7692

mod observe;
mod params;

#[cfg(feature = "deflate")]
mod codec;
#[cfg(not(feature = "deflate"))]
#[path = "stub.rs"]
mod codec;
#[cfg(feature = "deflate")]
mod pool;

#[cfg(all(test, feature = "deflate"))]
pub(crate) use codec::INFLATE_STATE;
pub use codec::{AVAILABLE, Deflater, Inflater};
pub use observe::{Through, observe};
pub use params::{DeflateConfig, DeflateParams, DeflatePolicy};

use crate::Role;
use crate::budget::MemoryBudget;
use crate::error::Error;

/// The compressor and decompressor for one side of a connection under the
/// negotiated `params`: it compresses with its own window and context rule
/// (and `config`'s level and threshold) and inflates with the peer's,
/// holding inflated messages to `max_message_size`. Whoever owns both
/// halves of the connection hands them to its
/// [`MessageDecoder::set_inflater`](crate::decoder::MessageDecoder::set_inflater)
/// and [`FrameEncoder::set_deflater`](crate::encoder::FrameEncoder::set_deflater)
/// before the first message either way ([`enable`] does both). Fails only
/// in a build without the `deflate` feature ([`AVAILABLE`] says).
///
/// ```
/// use wavesock_proto::Message;
/// use wavesock_proto::deflate::{self, DeflateConfig, DeflateParams};
/// use wavesock_proto::{Limits, Role, decoder::MessageDecoder, encoder::FrameEncoder};
///
/// let mut decoder = MessageDecoder::new(Role::Server, Limits::default());
/// let mut encoder = FrameEncoder::new(Role::Server);
/// let pair = deflate::pair(Role::Server, &DeflateParams::default(), &DeflateConfig::default(), decoder.max_message_size());
/// assert_eq!(pair.is_ok(), deflate::AVAILABLE);
/// if let Ok((inflater, deflater)) = pair {
///     decoder.set_inflater(inflater);
///     encoder.set_deflater(deflater);
/// }
/// assert_eq!(encoder.compresses(&Message::text("x".repeat(100))), deflate::AVAILABLE);
/// ```
pub fn pair(
    role: Role,
    params: &DeflateParams,
    config: &DeflateConfig,
    max_message_size: usize,
) -> Result<(Inflater, Deflater), Error> {
    codec::pair(role, params, config, max_message_size)
}

/// A message decoder that [`enable`] can switch decompression on for: what
/// it needs to know to make the [`Inflater`], and where the inflater goes.
///
/// The decoder ([`MessageDecoder`](crate::decoder::MessageDecoder))
/// implements it in its own module, so that this module, which the decoder
/// builds on, does not depend on the decoder in turn. Sealed: only this
/// crate's decoder implements it, so methods can be added without breaking
/// anyone.
pub trait TakesInflater: sealed::Sealed {
    /// Which side the decoder reads for: the inflater takes the peer's
    /// window and context rule.
    fn role(&self) -> Role;
    /// The message limit, which inflated messages are held to as well.
    fn max_message_size(&self) -> usize;
    /// The memory budget the decoder's connection is held to, if any: the
    /// compressor's own state is counted against it too.
    fn budget(&self) -> Option<&MemoryBudget>;
    /// Accepts compressed messages from now on, inflated by `inflater`.
    fn set_inflater(&mut self, inflater: Inflater);
}

/// A frame encoder that [`enable`] can switch compression on for.
///
/// The encoder ([`FrameEncoder`](crate::encoder::FrameEncoder)) implements
/// it in its own module, so that this module, which the encoder builds on,
/// does not depend on the encoder in turn. Sealed, as [`TakesInflater`].
pub trait TakesDeflater: sealed::Sealed {
    /// Compresses text and binary messages from now on, with `deflater`.
    fn set_deflater(&mut self, deflater: Deflater);
}

/// Keeps [`TakesInflater`] and [`TakesDeflater`] to this crate's decoder and
/// encoder: `pub` for the decoder and encoder modules to implement, in a
/// module no one outside the crate can name.
pub(crate) mod sealed {
    /// Implemented only by this crate's decoder and encoder.
    pub trait Sealed {}
}

/// Switches compression on for one connection's `decoder` and `encoder`
/// under the negotiated `params`, as [`pair`] makes them, with what the
/// decoder's memory budget (if any) should count: the decompressor's state
/// is charged to the decoder's account, the compressor's own state (the
/// [`Takeover`](DeflatePolicy::Takeover) policy) to an account of its own
/// against the same budget, and a message that finds no room for it goes
/// out uncompressed. Fails only in a build without the `deflate` feature.
///
/// `decoder` is a [`MessageDecoder`](crate::decoder::MessageDecoder) and
/// `encoder` a [`FrameEncoder`](crate::encoder::FrameEncoder); the function
/// is generic over [`TakesInflater`] and [`TakesDeflater`] only so that this
/// module does not depend on the decoder and encoder that depend on it.
///
/// ```
/// use wavesock_proto::deflate::{self, DeflateConfig, DeflateParams};
/// use wavesock_proto::{Limits, Message, Role, decoder::MessageDecoder, encoder::FrameEncoder};
///
/// let mut decoder = MessageDecoder::new(Role::Server, Limits::default());
/// let mut encoder = FrameEncoder::new(Role::Server);
/// let on = deflate::enable(&mut decoder, &mut encoder, &DeflateParams::default(), &DeflateConfig::default());
/// assert_eq!(on.is_ok(), deflate::AVAILABLE);
/// assert_eq!(encoder.compresses(&Message::text("x".repeat(100))), deflate::AVAILABLE);
/// ```
pub fn enable(
    decoder: &mut impl TakesInflater,
    encoder: &mut impl TakesDeflater,
    params: &DeflateParams,
    config: &DeflateConfig,
) -> Result<(), Error> {
    let (inflater, mut deflater) =
        pair(decoder.role(), params, config, decoder.max_message_size())?;
    if let Some(budget) = decoder.budget() {
        deflater.count_in(budget);
    }
    decoder.set_inflater(inflater);
    encoder.set_deflater(deflater);
    Ok(())
}

/// [`enable`], for tests that know the feature is on.
#[cfg(all(test, feature = "deflate"))]
pub(crate) fn enable_for_tests(
    decoder: &mut impl TakesInflater,
    encoder: &mut impl TakesDeflater,
    params: &DeflateParams,
    config: &DeflateConfig,
) {
    enable(decoder, encoder, params, config).unwrap();
}
