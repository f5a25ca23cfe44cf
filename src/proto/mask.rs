//! Payload masking (RFC 6455 §5.3).
//!
//! Masking is its own inverse, so the same routine masks and unmasks. It can
//! resume mid-payload: `offset` is how many payload bytes came before `buf`,
//! which selects the rotation of the key.

/// XORs `buf` with `key`, as if `buf` started `offset` bytes into the payload.
#[inline]
pub fn apply_mask(buf: &mut [u8], key: [u8; 4], offset: usize) {
    let rot = offset % 4;
    let key = [
        key[rot],
        key[(rot + 1) % 4],
        key[(rot + 2) % 4],
        key[(rot + 3) % 4],
    ];
    let k32 = u32::from_ne_bytes(key);
    let k64 = (u64::from(k32) << 32) | u64::from(k32);
    // Eight bytes at a time keeps the key phase fixed (8 is a multiple of 4),
    // and the compiler widens this loop to vector registers.
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
