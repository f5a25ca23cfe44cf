//! The limits the protocol core enforces on what the peer sends.

use crate::budget::MemoryBudget;
use crate::error::Error;

/// Bounds on incoming frames and messages, checked on each frame header
/// before any memory is reserved for its payload.
///
/// A frame is held to the smaller of the two limits, since it is part of a
/// message. wavesock's [`Config`](https://docs.rs/wavesock/latest/wavesock/struct.Config.html) converts down to
/// this with `Config::limits`.
///
/// ```
/// use wavesock_proto::limits::Limits;
///
/// let limits = Limits::default().max_message_size(1 << 20);
/// assert!(limits.validate().is_ok());
/// assert!(Limits::default().max_frame_size(0).validate().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Largest payload one data frame may announce. Default 16 MiB.
    pub max_frame_size: usize,
    /// Largest data message, all fragments (or its inflated size)
    /// together. Default 64 MiB.
    pub max_message_size: usize,
    /// A memory budget shared with other connections, which what this one
    /// holds for messages in progress is counted against. Default `None`.
    pub budget: Option<MemoryBudget>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_frame_size: 16 << 20,
            max_message_size: 64 << 20,
            budget: None,
        }
    }
}

impl Limits {
    /// Sets [`Limits::max_frame_size`].
    pub fn max_frame_size(mut self, bytes: usize) -> Self {
        self.max_frame_size = bytes;
        self
    }

    /// Sets [`Limits::max_message_size`].
    pub fn max_message_size(mut self, bytes: usize) -> Self {
        self.max_message_size = bytes;
        self
    }

    /// Sets [`Limits::budget`].
    pub fn budget(mut self, budget: impl Into<Option<MemoryBudget>>) -> Self {
        self.budget = budget.into();
        self
    }

    /// Refuses a zero limit, which no message could pass.
    pub fn validate(&self) -> Result<(), Error> {
        if self.max_frame_size == 0 {
            return Err(Error::InvalidConfig("max_frame_size must be at least 1"));
        }
        if self.max_message_size == 0 {
            return Err(Error::InvalidConfig("max_message_size must be at least 1"));
        }
        Ok(())
    }
}
