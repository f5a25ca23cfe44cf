//! The sans-IO protocol core: frame headers, masking, UTF-8 validation,
//! message assembly, close rules, compression and the connection's state
//! machine. Nothing here knows about sockets, async or HTTP; the layers
//! above move bytes and time in and out (`scripts/check-layers.sh` keeps it
//! so).

pub mod budget;
pub mod close;
mod close_code;
pub mod conn;
pub mod decoder;
pub mod deflate;
pub mod encoder;
pub mod error;
pub mod header;
pub mod limits;
pub mod mask;
pub mod message;
mod role;
pub mod text;
pub mod utf8;

pub use budget::MemoryBudget;
pub use error::{Error, ProtocolError};
pub use limits::Limits;
pub use role::Role;
