//! The read buffer's rules, for every engine: how much room to make before
//! a read of a frame whose size the decoder knows, and how much memory a
//! connection may keep while it waits. Engines own the memory (a pool, an
//! arena, a stack read) and follow these numbers; the rules are here so
//! that no two engines size the same thing two ways.
//!
//! The two promises: a peer announcing a large frame and sending little of
//! it is held to memory in proportion to what it sent (never to what it
//! announced), and a connection waiting for input keeps at most four times
//! the bytes it holds, so an idle one after a large message keeps nothing.

/// Reads are made at least this large while a frame's size is unknown.
pub const READ_CHUNK: usize = 8 << 10;

/// Bytes queued for the peer past which an engine writes them out without
/// waiting for the rest of what it is handling (a burst of replies to a
/// read that brought many messages): the peer starts on them meanwhile.
/// uWebSockets corks as much.
pub const CORK: usize = 16 << 10;

/// How much a buffer may hold for each byte it keeps while it waits.
pub const KEEP_FACTOR: usize = 4;

/// The room to add to a buffer holding `len` bytes, of which `spare` are
/// free, before the next read, when the frame being received needs
/// `frame_left` more bytes beyond `len` (`None`: its size is not known
/// yet): `None` when the free room will do.
///
/// It grows with what has arrived (four-fold at most) and never past what
/// the frame still needs, so a huge announced length costs nothing until
/// its bytes come; once a quarter of the frame is here, it makes room for
/// the rest at once.
///
/// ```
/// use wavesock_proto::buffer::{READ_CHUNK, growth};
///
/// // A frame announcing 1 GiB, 100 bytes of it here: one read's chunk.
/// assert_eq!(growth(100, 0, Some(1 << 30)), Some(READ_CHUNK));
/// // Half of a 64 KiB frame here: room for the rest at once.
/// assert_eq!(growth(32 << 10, 0, Some(32 << 10)), Some(32 << 10));
/// // Room enough already.
/// assert_eq!(growth(10, READ_CHUNK, None), None);
/// ```
#[inline]
pub fn growth(len: usize, spare: usize, frame_left: Option<usize>) -> Option<usize> {
    let want = frame_left.unwrap_or(READ_CHUNK).max(1);
    let min_spare = want.min(READ_CHUNK);
    if spare >= min_spare {
        return None;
    }
    let additional = if want <= 3 * len {
        want
    } else {
        want.min((3 * len).max(READ_CHUNK))
    };
    Some(additional.max(min_spare))
}

/// Whether a buffer of `capacity` bytes holding `len` may be kept as it is
/// while the connection waits; otherwise the engine moves the bytes to
/// memory of their own size (none for an empty buffer) and gives the rest
/// back.
///
/// ```
/// use wavesock_proto::buffer::keeps;
///
/// assert!(keeps(1000, 4000));
/// assert!(!keeps(0, 20 << 20), "an idle connection keeps no buffer");
/// assert!(!keeps(10, 64 << 10));
/// ```
#[inline]
pub fn keeps(len: usize, capacity: usize) -> bool {
    capacity <= KEEP_FACTOR.saturating_mul(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn unknown_size_reads_a_chunk() {
        assert_eq!(growth(0, 0, None), Some(READ_CHUNK));
        assert_eq!(growth(0, READ_CHUNK - 1, None), Some(READ_CHUNK));
        assert_eq!(growth(0, READ_CHUNK, None), None);
    }

    #[test]
    fn a_small_remainder_needs_only_itself() {
        assert_eq!(growth(4, 0, Some(6)), Some(6));
        assert_eq!(growth(4, 6, Some(6)), None);
    }

    #[test]
    fn growth_follows_what_arrived() {
        // 64 KiB here of a 1 MiB frame: three times as much more.
        assert_eq!(growth(64 << 10, 0, Some(960 << 10)), Some(192 << 10));
        // A quarter here: the rest at once.
        assert_eq!(growth(256 << 10, 0, Some(768 << 10)), Some(768 << 10));
    }

    proptest! {
        #[test]
        fn never_more_than_the_frame_needs_nor_four_times_what_came(
            len in 0usize..1 << 24,
            spare in 0usize..1 << 16,
            left in proptest::option::of(1usize..1 << 40),
        ) {
            if let Some(add) = growth(len, spare, left) {
                let want = left.unwrap_or(READ_CHUNK);
                prop_assert!(add <= want.max(READ_CHUNK.min(want)));
                prop_assert!(add <= (3 * len).max(READ_CHUNK).max(want.min(3 * len)));
                prop_assert!(spare + add >= want.min(READ_CHUNK));
            } else {
                prop_assert!(spare >= left.unwrap_or(READ_CHUNK).min(READ_CHUNK));
            }
        }
    }
}
