//! See `wavesock_fuzz::receive_in` (fuzz/src/lib.rs) for the properties.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| wavesock_fuzz::receive_in(data));
