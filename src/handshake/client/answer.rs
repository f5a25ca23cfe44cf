//! What both handshakes check of the server's answer beyond its status,
//! and the answer's head handed back to the caller.

use http::HeaderMap;
use http::header;

use crate::handshake::{HandshakeError, list_values};

/// The response's head with `body`, for handing back to the caller.
pub(crate) fn with_body<T>(response: &http::Response<()>, body: T) -> http::Response<T> {
    let mut out = http::Response::new(body);
    *out.status_mut() = response.status();
    *out.version_mut() = response.version();
    *out.headers_mut() = response.headers().clone();
    out
}

/// What both handshakes check of the answer beyond its status: no
/// extension unless some were offered, and the subprotocol chosen.
pub(super) fn agreed(
    request: &HeaderMap,
    response: &HeaderMap,
) -> Result<Option<String>, HandshakeError> {
    if response.contains_key(header::SEC_WEBSOCKET_EXTENSIONS)
        && !request.contains_key(header::SEC_WEBSOCKET_EXTENSIONS)
    {
        return Err(HandshakeError::BadHeader {
            name: "Sec-WebSocket-Extensions",
            reason: "the server chose an extension that was not offered",
        });
    }
    chosen_subprotocol(request, response)
}

fn chosen_subprotocol(
    request: &HeaderMap,
    response: &HeaderMap,
) -> Result<Option<String>, HandshakeError> {
    let mut lines = response.get_all(header::SEC_WEBSOCKET_PROTOCOL).iter();
    let chosen = match (lines.next(), lines.next()) {
        (None, _) => return Ok(None),
        (Some(v), None) => v.to_str().map(str::trim).unwrap_or_default(),
        _ => "",
    };
    if chosen.is_empty() || chosen.contains(',') {
        return Err(HandshakeError::BadHeader {
            name: "Sec-WebSocket-Protocol",
            reason: "the server must choose exactly one subprotocol",
        });
    }
    if !list_values(request, header::SEC_WEBSOCKET_PROTOCOL).any(|p| p == chosen) {
        return Err(HandshakeError::BadHeader {
            name: "Sec-WebSocket-Protocol",
            reason: "the server chose a subprotocol that was not offered",
        });
    }
    Ok(Some(chosen.to_owned()))
}
