//! See `wavesock_fuzz::utf8` (fuzz/src/lib.rs) for the properties.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| wavesock_fuzz::utf8(data));
