//! permessage-deflate: the bytes the compressor took and gave, and the
//! bytes the inflater took and gave, as the protocol core tells them
//! (`proto::deflate::observe`), once a message.

#[cfg(all(feature = "metrics", feature = "deflate"))]
use std::sync::OnceLock;

#[cfg(all(feature = "metrics", feature = "deflate"))]
use metrics::{Counter, Unit};

/// Payload bytes of messages sent compressed, before and after
/// compression (counter; label `form`: `uncompressed`, `compressed`). A
/// message prepared once for many connections (a publish) counts once
/// for each window size it is compressed for, not per connection.
pub const DEFLATE_SENT_BYTES: &str = "wavesock_deflate_sent_bytes_total";
/// Payload bytes of compressed messages received, as they came and
/// inflated (counter; label `form`: `compressed`, `uncompressed`).
pub const DEFLATE_RECEIVED_BYTES: &str = "wavesock_deflate_received_bytes_total";

#[cfg(all(feature = "metrics", feature = "deflate"))]
struct Handles {
    /// Sent: uncompressed, compressed; then received: the same.
    bytes: [[Counter; 2]; 2],
}

#[cfg(all(feature = "metrics", feature = "deflate"))]
fn handles() -> &'static Handles {
    static HANDLES: OnceLock<Handles> = OnceLock::new();
    HANDLES.get_or_init(|| Handles {
        bytes: [DEFLATE_SENT_BYTES, DEFLATE_RECEIVED_BYTES].map(|name| {
            ["uncompressed", "compressed"].map(|form| metrics::counter!(name, "form" => form))
        }),
    })
}

#[cfg(all(feature = "metrics", feature = "deflate"))]
fn record(through: crate::proto::deflate::Through) {
    use crate::proto::deflate::Through;
    let (way, plain, compressed) = match through {
        Through::Compressed { plain, compressed } => (0, plain, compressed),
        Through::Inflated { compressed, plain } => (1, plain, compressed),
    };
    let [uncompressed_bytes, compressed_bytes] = &handles().bytes[way];
    uncompressed_bytes.increment(plain as u64);
    compressed_bytes.increment(compressed as u64);
}

/// Has the protocol core tell these metrics of every message compressed
/// or inflated (once per process; engines call it as their handles are
/// taken, before their first connection).
#[cfg(feature = "metrics")]
#[inline]
pub(crate) fn watch() {
    #[cfg(all(feature = "metrics", feature = "deflate"))]
    {
        static WATCHING: std::sync::Once = std::sync::Once::new();
        WATCHING.call_once(|| {
            // Another observer set first (the application's own) keeps
            // its place; these metrics then stay at zero.
            let _ = crate::proto::deflate::observe(record);
        });
    }
}

/// Gives these metrics their help text and unit.
#[cfg(feature = "metrics")]
pub(super) fn describe_all() {
    #[cfg(feature = "deflate")]
    {
        use metrics::describe_counter;
        describe_counter!(
            DEFLATE_SENT_BYTES,
            Unit::Bytes,
            "Payload bytes of messages sent compressed, before and after compression (form)."
        );
        describe_counter!(
            DEFLATE_RECEIVED_BYTES,
            Unit::Bytes,
            "Payload bytes of compressed messages received, as they came and inflated (form)."
        );
    }
}
