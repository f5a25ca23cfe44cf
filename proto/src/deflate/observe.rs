//! The sizes of what permessage-deflate compressed and inflated, told to
//! whoever counts them (wavesock's metrics): one function for the
//! process, called once a message. Without the `deflate` feature nothing
//! is compressed and it is never called.

use std::sync::OnceLock;

/// One message through permessage-deflate, in payload bytes (a compressed
/// payload without the `00 00 FF FF` RFC 7692 strips).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Through {
    /// A message to send compressed: `plain` bytes became `compressed`.
    /// A message prepared once for many connections counts once for each
    /// window size it is compressed for.
    Compressed {
        /// Its bytes before.
        plain: usize,
        /// Its bytes after.
        compressed: usize,
    },
    /// A compressed message received: `compressed` bytes inflated to
    /// `plain`.
    Inflated {
        /// Its bytes as they came.
        compressed: usize,
        /// Its bytes inflated.
        plain: usize,
    },
}

static OBSERVER: OnceLock<fn(Through)> = OnceLock::new();

/// Has `observer` told of every message this process compresses or
/// inflates from now on. One observer per process: `false` (and nothing
/// changed) if one was set already.
///
/// ```
/// use wavesock_proto::deflate::{Through, observe};
///
/// fn count(through: Through) {
///     let _ = through; // add it to a metric
/// }
/// assert!(observe(count));
/// assert!(!observe(count));
/// ```
pub fn observe(observer: fn(Through)) -> bool {
    OBSERVER.set(observer).is_ok()
}

/// Tells the observer, if any, of `through`.
#[cfg_attr(not(feature = "deflate"), allow(dead_code))]
#[inline]
pub(crate) fn tell(through: Through) {
    if let Some(observer) = OBSERVER.get() {
        observer(through);
    }
}
