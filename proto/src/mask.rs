//! Payload masking (RFC 6455 §5.3).
//!
//! Masking is its own inverse, so the same routine masks and unmasks. It can
//! resume mid-payload: `offset` is how many payload bytes came before `buf`,
//! which selects the rotation of the key.

/// XORs `buf` with `key`, as if `buf` started `offset` bytes into the payload.
#[inline]
pub fn apply_mask(buf: &mut [u8], key: [u8; 4], offset: usize) {
    // A whole payload, the usual case, starts at phase 0.
    let key = if offset % 4 == 0 {
        key
    } else {
        rotate(key, offset)
    };
    #[cfg(all(feature = "simd", target_arch = "x86_64"))]
    if wide::try_mask(buf, key) {
        return;
    }
    mask_words(buf, key);
}

/// The key as seen by a buffer starting `offset` bytes into the payload.
#[inline]
fn rotate(key: [u8; 4], offset: usize) -> [u8; 4] {
    let r = offset % 4;
    [key[r], key[(r + 1) % 4], key[(r + 2) % 4], key[(r + 3) % 4]]
}

/// The key repeated to fill a word; a multiple of 4 bytes keeps its phase.
#[inline]
fn key_word(key: [u8; 4]) -> u64 {
    u64::from(u32::from_ne_bytes(key)) * 0x1_0000_0001
}

/// The portable loop, for a buffer at key phase 0.
#[inline]
fn mask_words(buf: &mut [u8], key: [u8; 4]) {
    let k64 = key_word(key);
    // The compiler widens this loop to the baseline vector registers.
    let mut chunks = buf.chunks_exact_mut(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let masked = u64::from_ne_bytes(word) ^ k64;
        chunk.copy_from_slice(&masked.to_ne_bytes());
    }
    for (i, b) in chunks.into_remainder().iter_mut().enumerate() {
        *b ^= key[i % 4];
    }
}

/// Where a client gets the masking key of each frame it sends.
///
/// RFC 6455 §5.3 has a client mask every frame with a fresh key that the
/// application cannot predict, and §10.3 says why: if a script could know
/// the key, it could choose message bytes that look, on the wire, like a
/// request of its choosing to an intermediary that does not understand
/// WebSocket (a transparent proxy or cache), and so poison that cache.
/// [`Random`](MaskKeys::Random), the default, draws each key from a
/// generator seeded from the operating system.
///
/// The other variants exist only so that a test can know a client's frames
/// byte for byte, to script a peer with `tokio_test::io::Builder` for
/// example (see the [guide](https://docs.rs/wavesock/latest/wavesock/guide/index.html#testing-with-tokio-test)). They
/// give up the protection of §10.3: **never use them on a connection that a
/// real network carries.** Servers never mask, and ignore this setting.
///
/// Keys are drawn per connection, one per frame, in the order frames are
/// encoded, which is the order they go on the wire: automatic pongs, close
/// replies, keepalive pings and each fragment of a message take one too.
///
/// ```
/// // Needs bytes.
/// use bytes::BytesMut;
/// use wavesock_proto::encoder::FrameEncoder;
/// use wavesock_proto::{MaskKeys, OpCode, Role};
///
/// let keys = MaskKeys::CountingForTesting(0x0102_0304);
/// let mut encoder = FrameEncoder::with_mask_keys(Role::Client, keys);
/// let mut wire = BytesMut::new();
/// encoder.encode_frame(true, OpCode::Text, b"hi", &mut wire)?;
/// encoder.encode_frame(true, OpCode::Text, b"hi", &mut wire)?;
/// // Header (2 bytes), key (4), masked payload (2): "h" ^ 01, "i" ^ 02.
/// assert_eq!(wire[..8], [0x81, 0x82, 1, 2, 3, 4, b'h' ^ 1, b'i' ^ 2]);
/// // The next frame's key is one more.
/// assert_eq!(wire[10..14], [1, 2, 3, 5]);
/// # Ok::<(), wavesock_proto::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum MaskKeys {
    /// A fresh, unpredictable key for every frame, as RFC 6455 requires.
    /// The default.
    #[default]
    Random,
    /// **For tests only; gives up RFC 6455 §10.3's protection.** Every frame
    /// is masked with this key. `[0; 4]` leaves payloads readable in a
    /// script (masking with zeros changes nothing), the mask bit still set.
    FixedForTesting([u8; 4]),
    /// **For tests only; gives up RFC 6455 §10.3's protection.** Frame `n`
    /// of a connection, counting from 0, is masked with
    /// `first.wrapping_add(n).to_be_bytes()`: `CountingForTesting(0x0102_0304)`
    /// gives `01 02 03 04`, then `01 02 03 05`, and so on, wrapping after
    /// `ff ff ff ff` to `00 00 00 00`. Every connection starts again from
    /// `first`. A script can name each frame's key without running any code,
    /// and no two frames in a row share one.
    CountingForTesting(u32),
}

/// AVX2, chosen at run time: the baseline x86-64 target only lets the
/// compiler use 16-byte registers, and 32-byte ones mask a cached kilobyte in
/// half the time.
#[cfg(all(feature = "simd", target_arch = "x86_64"))]
#[allow(unsafe_code)]
mod wide {
    use super::{key_word, mask_words, rotate};

    /// Below this the feature check costs more than the wider loop saves.
    const MIN_LEN: usize = 128;
    const ALIGN: usize = 32;
    const BLOCK: usize = 64;

    /// Masks `buf` (key phase 0) and returns true, or returns false without
    /// touching it when the buffer is short or the CPU lacks AVX2.
    #[inline(always)]
    pub(super) fn try_mask(buf: &mut [u8], key: [u8; 4]) -> bool {
        buf.len() >= MIN_LEN && try_mask_long(buf, key)
    }

    #[inline(never)]
    fn try_mask_long(buf: &mut [u8], key: [u8; 4]) -> bool {
        if !std::arch::is_x86_feature_detected!("avx2") {
            return false;
        }
        // Unaligned 32-byte stores that straddle cache lines cost more than
        // the few scalar bytes it takes to reach an aligned address.
        let lead = buf.as_ptr().align_offset(ALIGN).min(buf.len());
        let (head, body) = buf.split_at_mut(lead);
        mask_words(head, key);
        let key = rotate(key, lead);
        let whole = body.len() / BLOCK * BLOCK;
        let (blocks, tail) = body.split_at_mut(whole);
        // SAFETY: `mask_blocks` only requires AVX2, detected just above.
        unsafe { mask_blocks(blocks, key_word(key)) };
        mask_words(tail, key);
        true
    }

    /// Plain safe code; the attribute lets the compiler use AVX2 for it.
    /// (A flat loop: unrolled by hand it saves little in release builds and
    /// runs far slower in debug ones, where the test suite masks gigabytes.)
    #[target_feature(enable = "avx2")]
    unsafe fn mask_blocks(buf: &mut [u8], k64: u64) {
        for word in buf.chunks_exact_mut(8) {
            let mut w = [0u8; 8];
            w.copy_from_slice(word);
            word.copy_from_slice(&(u64::from_ne_bytes(w) ^ k64).to_ne_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn slow_mask(buf: &mut [u8], key: [u8; 4], offset: usize) {
        for (i, b) in buf.iter_mut().enumerate() {
            *b ^= key[(offset + i) % 4];
        }
    }

    #[test]
    fn rfc_example_hello() {
        // RFC 6455 §5.7: masked "Hello" with key 37 fa 21 3d.
        let mut data = *b"Hello";
        apply_mask(&mut data, [0x37, 0xfa, 0x21, 0x3d], 0);
        assert_eq!(data, [0x7f, 0x9f, 0x4d, 0x51, 0x58]);
    }

    #[test]
    fn matches_byte_loop_at_every_length_and_offset() {
        let key = [0x12, 0x34, 0x56, 0x78];
        for len in 0..=1030usize {
            for offset in 0..8 {
                let src: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
                let mut fast = src.clone();
                let mut slow = src.clone();
                apply_mask(&mut fast, key, offset);
                slow_mask(&mut slow, key, offset);
                assert_eq!(fast, slow, "len {len} offset {offset}");
            }
        }
    }

    #[cfg(all(feature = "simd", target_arch = "x86_64"))]
    #[test]
    fn wide_path_matches_portable_loop_at_every_alignment() {
        let key = [0x9a, 0x01, 0xfe, 0x42];
        let backing: Vec<u8> = (0..5000).map(|i| (i * 13 + 5) as u8).collect();
        for start in 0..40 {
            for len in [127usize, 128, 129, 191, 192, 255, 1025, 4099] {
                let src = &backing[start..start + len];
                let mut wide = backing.clone();
                let masked = super::wide::try_mask(&mut wide[start..start + len], key);
                if !std::arch::is_x86_feature_detected!("avx2") || len < 128 {
                    assert!(!masked);
                    continue;
                }
                assert!(masked);
                let mut portable = src.to_vec();
                mask_words(&mut portable, key);
                assert_eq!(
                    wide[start..start + len],
                    portable[..],
                    "start {start} len {len}"
                );
            }
        }
    }

    #[test]
    fn resuming_in_pieces_equals_one_pass() {
        let key = [0xde, 0xad, 0xbe, 0xef];
        let src: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        let mut whole = src.clone();
        apply_mask(&mut whole, key, 0);
        let mut pieces = src.clone();
        let mut at = 0;
        for step in [1usize, 3, 7, 8, 13, 64, 100, 804] {
            let end = (at + step).min(pieces.len());
            apply_mask(&mut pieces[at..end], key, at);
            at = end;
        }
        assert_eq!(at, 1000);
        assert_eq!(whole, pieces);
    }

    proptest! {
        #[test]
        fn masking_twice_is_identity(data in proptest::collection::vec(any::<u8>(), 0..2048), key in any::<[u8; 4]>(), offset in 0usize..16) {
            let mut buf = data.clone();
            apply_mask(&mut buf, key, offset);
            apply_mask(&mut buf, key, offset);
            prop_assert_eq!(buf, data);
        }

        #[test]
        fn matches_byte_loop(data in proptest::collection::vec(any::<u8>(), 0..2048), key in any::<[u8; 4]>(), offset in 0usize..1024) {
            let mut fast = data.clone();
            let mut slow = data;
            apply_mask(&mut fast, key, offset);
            slow_mask(&mut slow, key, offset);
            prop_assert_eq!(fast, slow);
        }
    }
}
