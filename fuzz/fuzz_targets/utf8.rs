//! The incremental UTF-8 validator, fed the input in pieces (cut points
//! taken from the input), against `std::str::from_utf8` on the whole.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wavesock::proto::utf8::Utf8Validator;

fuzz_target!(|data: &[u8]| {
    let [cuts, text @ ..] = data else {
        return;
    };
    let mut v = Utf8Validator::new();
    let mut ok = true;
    let mut rest = text;
    // Each bit of the first byte cuts after one more byte than the last cut.
    let mut step = 1;
    for bit in 0..8 {
        if rest.is_empty() || !ok {
            break;
        }
        if cuts & (1 << bit) != 0 {
            let (piece, tail) = rest.split_at(step.min(rest.len()));
            ok = v.feed(piece).is_ok();
            rest = tail;
        }
        step += 1;
    }
    if ok {
        ok = v.feed(rest).is_ok() && v.finish().is_ok();
    }
    assert_eq!(ok, std::str::from_utf8(text).is_ok());
});
