//! Shared inputs for the wavesock benchmarks.

/// A payload of `len` bytes that is valid UTF-8 (ASCII) and not all one value.
pub fn payload(len: usize) -> Vec<u8> {
    (0..len).map(|i| b'a' + (i % 26) as u8).collect()
}
