//! See `wavesock_fuzz::deflate` (fuzz/src/lib.rs) for the properties. This
//! binary counts heap bytes, so the inflation bound is measured here.
#![no_main]

use std::sync::atomic::Ordering;

#[path = "../../tests/support/counting.rs"]
mod counting;

#[global_allocator]
static GLOBAL: counting::Counting = counting::Counting;

fn peak_during(f: &mut dyn FnMut()) -> Option<usize> {
    let base = counting::LIVE.load(Ordering::SeqCst);
    counting::PEAK.store(base, Ordering::SeqCst);
    f();
    Some(counting::PEAK.load(Ordering::SeqCst) - base)
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| wavesock_fuzz::deflate(data, &peak_during));
