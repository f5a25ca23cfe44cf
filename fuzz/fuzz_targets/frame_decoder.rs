//! See `wavesock_fuzz::frame_decoder` (fuzz/src/lib.rs) for the properties.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| wavesock_fuzz::frame_decoder(data));
