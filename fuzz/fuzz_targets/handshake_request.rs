//! The handshake request parser and checker on arbitrary bytes: no panic, a
//! head never longer than the input and parsed the same on its own, and
//! every verdict either an accept key or an HTTP client error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wavesock::handshake::server::{check_request, error_response, parse_request, write_response};

fuzz_target!(|data: &[u8]| {
    let Ok(Some((req, len))) = parse_request(data, 32) else {
        return;
    };
    assert!(len <= data.len());
    let (again, len_again) = parse_request(&data[..len], 32).unwrap().unwrap();
    assert_eq!(len_again, len);
    assert_eq!(again.headers(), req.headers());
    match check_request(&req) {
        Ok(accept) => assert_eq!(accept.len(), 28),
        Err(e) => {
            let status = e.status().expect("refusals have a status");
            assert!(status.is_client_error());
            let resp = error_response(&e).unwrap();
            let mut out = Vec::new();
            write_response(&resp, resp.body(), &mut out);
            assert!(out.starts_with(b"HTTP/1.1 4"));
        }
    }
});
