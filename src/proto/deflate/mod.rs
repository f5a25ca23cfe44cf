//! permessage-deflate ([RFC 7692]) in the protocol core: the negotiated
//! parameters, and the compressor and decompressor a connection's encoder
//! and decoder use.
//!
//! The parameter types are always here, so the handshake negotiates with
//! them whatever the features. The compressor needs the `deflate` feature;
//! without it this module compiles a stub whose compressor types cannot be
//! made, and [`enable`] refuses.
//!
//! [RFC 7692]: https://www.rfc-editor.org/rfc/rfc7692

mod params;

#[cfg(feature = "deflate")]
mod codec;
#[cfg(not(feature = "deflate"))]
#[path = "stub.rs"]
mod codec;

pub use codec::AVAILABLE;
pub(crate) use codec::{Deflater, Inflater};
pub use params::{DeflateConfig, DeflateParams};

use crate::proto::decoder::MessageDecoder;
use crate::proto::encoder::FrameEncoder;
use crate::proto::error::Error;

/// Sets both directions of a connection up for the negotiated `params`:
/// each side compresses with its own window and context rule (and
/// `config`'s level and threshold) and inflates with the peer's, holding
/// inflated messages to the decoder's message limit. Call it before the
/// first message either way. Fails only in a build without the `deflate`
/// feature ([`AVAILABLE`] says).
///
/// ```
/// use wavesock::Message;
/// use wavesock::proto::deflate::{self, DeflateConfig, DeflateParams};
/// use wavesock::proto::{Limits, Role, decoder::MessageDecoder, encoder::FrameEncoder};
///
/// let mut decoder = MessageDecoder::new(Role::Server, Limits::default());
/// let mut encoder = FrameEncoder::new(Role::Server);
/// let r = deflate::enable(&mut decoder, &mut encoder, &DeflateParams::default(), &DeflateConfig::default());
/// assert_eq!(r.is_ok(), deflate::AVAILABLE);
/// assert_eq!(encoder.compresses(&Message::text("x".repeat(100))), deflate::AVAILABLE);
/// ```
pub fn enable(
    decoder: &mut MessageDecoder,
    encoder: &mut FrameEncoder,
    params: &DeflateParams,
    config: &DeflateConfig,
) -> Result<(), Error> {
    let (inflater, deflater) =
        codec::pair(decoder.role(), params, config, decoder.max_message_size())?;
    decoder.set_inflater(inflater);
    encoder.set_deflater(deflater);
    Ok(())
}
