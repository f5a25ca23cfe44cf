//! Logging through `tracing` when the `tracing` feature is on; nothing at
//! all (not even argument evaluation) when it is off.

/// A `tracing::debug!` event, compiled out without the feature.
macro_rules! debug_event {
    ($($arg:tt)*) => {{
        #[cfg(feature = "tracing")]
        tracing::debug!($($arg)*);
    }};
}

/// A `tracing::warn!` event, compiled out without the feature.
macro_rules! warn_event {
    ($($arg:tt)*) => {{
        #[cfg(feature = "tracing")]
        tracing::warn!($($arg)*);
    }};
}

pub(crate) use {debug_event, warn_event};
