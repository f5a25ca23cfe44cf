//! The sans-IO protocol core: frame headers, masking, UTF-8 validation,
//! message types and close rules. Nothing here knows about sockets or async.

pub mod close;
pub mod decoder;
#[cfg(feature = "deflate")]
pub(crate) mod deflate;
pub mod encoder;
pub mod header;
pub mod mask;
pub mod message;
pub mod text;
pub mod utf8;

/// Which end of the connection this side is. Clients mask what they send and
/// expect unmasked frames; servers the reverse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// The side that sent the HTTP upgrade request.
    Client,
    /// The side that accepted it.
    Server,
}
