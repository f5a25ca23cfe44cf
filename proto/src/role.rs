//! Which end of the connection this side is: a leaf every part of the
//! core names.

/// Which end of the connection this side is. Clients mask what they send and
/// expect unmasked frames; servers the reverse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// The side that sent the HTTP upgrade request.
    Client,
    /// The side that accepted it.
    Server,
}
