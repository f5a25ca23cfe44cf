//! Frame header parsing: never panics, never claims more bytes than it was
//! given, and what it parses encodes back to a header that parses the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wavesock::proto::header::FrameHeader;

fuzz_target!(|data: &[u8]| {
    let Ok(Some((header, len))) = FrameHeader::parse(data) else {
        return;
    };
    assert!(len <= data.len());
    // Any prefix of a complete header is incomplete, never an error the
    // whole header did not have.
    for cut in 0..len {
        assert!(!matches!(FrameHeader::parse(&data[..cut]), Ok(Some(_))));
    }
    let mut out = [0u8; 14];
    let n = header.encode(&mut out);
    let (again, used) = FrameHeader::parse(&out[..n]).unwrap().unwrap();
    assert_eq!(again, header);
    assert_eq!(used, n);
    // The shortest length encoding is always used when encoding.
    assert!(n <= len);
});
