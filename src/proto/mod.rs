//! The sans-IO protocol core: frame headers, masking, UTF-8 validation,
//! message assembly, close rules, compression and the connection's state
//! machine. Nothing here knows about sockets, async or HTTP; the layers
//! above move bytes and time in and out (`scripts/check-layers.sh` keeps it
//! so).

pub mod budget;
pub mod close;
pub mod conn;
pub mod decoder;
pub mod deflate;
pub mod encoder;
pub mod error;
pub mod header;
pub mod limits;
pub mod mask;
pub mod message;
pub mod text;
pub mod utf8;

pub use budget::MemoryBudget;
pub use error::{Error, ProtocolError};
pub use limits::Limits;

/// Which end of the connection this side is. Clients mask what they send and
/// expect unmasked frames; servers the reverse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// The side that sent the HTTP upgrade request.
    Client,
    /// The side that accepted it.
    Server,
}
