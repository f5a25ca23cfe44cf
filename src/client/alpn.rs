//! What a TLS client offers in ALPN: shared by the connecting code and
//! each TLS stack, so it sits below both.

// Only the `http2` feature offers h2.
#[cfg_attr(not(feature = "http2"), allow(dead_code))]
/// Which protocols a TLS client offers in ALPN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Alpn {
    /// None: the WebSocket is an HTTP/1.1 upgrade.
    None,
    /// `h2` only: an HTTP/2 connection.
    H2Only,
    /// `h2`, then `http/1.1`: a browser's offer.
    H2OrHttp1,
    /// `http/1.1` only: the fallback once HTTP/2 failed us.
    Http1Only,
}

impl Alpn {
    // Only TLS speaks ALPN.
    #[cfg_attr(not(feature = "__tls"), allow(dead_code))]
    pub(crate) fn protocols(self) -> Vec<Vec<u8>> {
        match self {
            Alpn::None => vec![],
            Alpn::H2Only => vec![b"h2".to_vec()],
            Alpn::H2OrHttp1 => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
            Alpn::Http1Only => vec![b"http/1.1".to_vec()],
        }
    }
}
