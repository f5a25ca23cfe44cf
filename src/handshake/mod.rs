//! The opening HTTP/1.1 handshake (RFC 6455 §4), without I/O.

mod accepting;
pub mod client;
mod error;
pub mod extensions;
mod host;
pub mod server;

pub use error::HandshakeError;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use sha1::{Digest, Sha1};

const GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// The `Sec-WebSocket-Accept` value for a `Sec-WebSocket-Key`.
///
/// ```
/// // RFC 6455 §1.3
/// assert_eq!(
///     wavesock::handshake::derive_accept_key(b"dGhlIHNhbXBsZSBub25jZQ=="),
///     "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
/// );
/// ```
pub fn derive_accept_key(key: &[u8]) -> String {
    let mut sha = Sha1::new();
    sha.update(key);
    sha.update(GUID);
    STANDARD.encode(sha.finalize())
}

/// A fresh random `Sec-WebSocket-Key`: 16 random bytes, base64-encoded.
pub fn generate_key() -> String {
    STANDARD.encode(rand::random::<[u8; 16]>())
}

/// httparse's verdict on a head as ours: the head's length, `None` while it
/// is incomplete.
pub(crate) fn head_len(
    parsed: Result<httparse::Status<usize>, httparse::Error>,
    max_headers: usize,
) -> Result<Option<usize>, HandshakeError> {
    match parsed {
        Ok(httparse::Status::Complete(n)) => Ok(Some(n)),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err(HandshakeError::Malformed(format!(
            "more than {max_headers} headers"
        ))),
        Err(e) => Err(HandshakeError::Malformed(e.to_string())),
    }
}

/// The HTTP version httparse read (`1` for HTTP/1.1).
pub(crate) fn http_version(minor: Option<u8>) -> http::Version {
    match minor {
        Some(1) => http::Version::HTTP_11,
        _ => http::Version::HTTP_10,
    }
}

/// Whether a key is the base64 encoding of exactly 16 bytes.
pub(crate) fn is_valid_key(key: &[u8]) -> bool {
    key.len() == 24 && STANDARD.decode(key).is_ok_and(|k| k.len() == 16)
}

/// An HTTP token (RFC 9110 §5.6.2): what extension names and parameters and
/// subprotocol names (RFC 6455 §4.1) are made of.
pub(crate) fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Whether a comma-separated header value lists `token` (case-insensitive).
pub(crate) fn has_token(value: &[u8], token: &str) -> bool {
    value
        .split(|&b| b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
}

/// The `Upgrade: websocket` and `Connection: upgrade` that both a request
/// and a `101` response must carry.
pub(crate) fn check_upgrade_headers(h: &http::HeaderMap) -> Result<(), HandshakeError> {
    if !headers_have_token(h, http::header::UPGRADE, "websocket") {
        return Err(HandshakeError::BadHeader {
            name: "Upgrade",
            reason: "must list websocket",
        });
    }
    if !headers_have_token(h, http::header::CONNECTION, "upgrade") {
        return Err(HandshakeError::BadHeader {
            name: "Connection",
            reason: "must list upgrade",
        });
    }
    Ok(())
}

/// Whether any of the (possibly repeated) headers `name` lists `token`.
pub(crate) fn headers_have_token(
    headers: &http::HeaderMap,
    name: http::header::HeaderName,
    token: &str,
) -> bool {
    headers
        .get_all(name)
        .iter()
        .any(|v| has_token(v.as_bytes(), token))
}

/// The values of a comma-separated list header, across all its lines, in
/// order: trimmed, empty items and values that are not UTF-8 skipped.
pub(crate) fn list_values(
    headers: &http::HeaderMap,
    name: http::header::HeaderName,
) -> impl Iterator<Item = &str> {
    headers
        .get_all(name)
        .into_iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc_accept_key() {
        assert_eq!(
            derive_accept_key(b"dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn generated_keys_are_valid_and_differ() {
        let a = generate_key();
        let b = generate_key();
        assert!(is_valid_key(a.as_bytes()));
        assert_ne!(a, b);
    }

    #[test]
    fn key_validation() {
        assert!(is_valid_key(b"dGhlIHNhbXBsZSBub25jZQ=="));
        assert!(!is_valid_key(b"dGhlIHNhbXBsZSBub25jZQ")); // unpadded
        assert!(!is_valid_key(b"aGVsbG8=")); // 5 bytes
        assert!(!is_valid_key(b"!!!!!!!!!!!!!!!!!!!!!!=="));
    }

    #[test]
    fn tokens_are_case_insensitive_lists() {
        assert!(has_token(b"keep-alive, Upgrade", "upgrade"));
        assert!(has_token(b"UPGRADE", "upgrade"));
        assert!(!has_token(b"keep-alive", "upgrade"));
        assert!(!has_token(b"upgraded", "upgrade"));
    }

    #[test]
    fn list_values_span_repeated_headers() {
        let mut h = http::HeaderMap::new();
        h.append("x", http::HeaderValue::from_static("a, b,,"));
        h.append("x", http::HeaderValue::from_static(" c "));
        let v: Vec<_> = list_values(&h, http::header::HeaderName::from_static("x")).collect();
        assert_eq!(v, ["a", "b", "c"]);
    }
}
