//! What the opening handshake agreed on beyond RFC 6455 itself (today only
//! permessage-deflate), as the handshakes need it. Without the `deflate`
//! feature, `Config::validate` refuses `Config::deflate`, so nothing is
//! offered or accepted.

use http::header::{HeaderValue, SEC_WEBSOCKET_EXTENSIONS};
use http::{HeaderMap, Request};

use crate::config::Config;
use crate::error::{HandshakeError, Result};
use crate::proto::deflate::{DeflateConfig, DeflateParams};
use crate::stream::WebSocketStream;

/// The extensions a connection runs with.
#[derive(Debug, Default)]
pub(crate) struct Negotiated {
    deflate: Option<(DeflateParams, DeflateConfig)>,
}

fn not_offered() -> HandshakeError {
    HandshakeError::BadHeader {
        name: "Sec-WebSocket-Extensions",
        reason: "the server chose an extension that wavesock did not offer",
    }
}

impl Negotiated {
    /// Server: picks among the client's offers; the header value, if any,
    /// goes into the `101` response.
    pub(crate) fn server(config: &Config, request: &HeaderMap) -> (Self, Option<HeaderValue>) {
        if let Some(d) = &config.deflate {
            if let Some((params, value)) = crate::handshake::extensions::negotiate(d, request) {
                let deflate = Some((params, d.clone()));
                return (Negotiated { deflate }, Some(value));
            }
        }
        (Negotiated::default(), None)
    }

    /// Client: adds the offers to the request.
    pub(crate) fn offer(config: &Config, request: &mut Request<()>) {
        if let Some(d) = &config.deflate {
            let value = crate::handshake::extensions::offer(d);
            request
                .headers_mut()
                .append(SEC_WEBSOCKET_EXTENSIONS, value);
        }
    }

    /// Client: checks what the server chose.
    pub(crate) fn client(config: &Config, response: &HeaderMap) -> Result<Self, HandshakeError> {
        if let Some(d) = &config.deflate {
            let params = crate::handshake::extensions::check_response(d, response)?;
            let deflate = params.map(|p| (p, d.clone()));
            return Ok(Negotiated { deflate });
        }
        if response.contains_key(SEC_WEBSOCKET_EXTENSIONS) {
            return Err(not_offered());
        }
        Ok(Negotiated::default())
    }

    /// permessage-deflate's parameters and configuration, if it was agreed
    /// on: for an engine that sets its decoder and encoder up itself.
    #[cfg(feature = "hub")]
    pub(crate) fn into_deflate(self) -> Option<(DeflateParams, DeflateConfig)> {
        self.deflate
    }

    /// Sets the connection up accordingly.
    pub(crate) fn apply<S>(self, mut ws: WebSocketStream<S>) -> Result<WebSocketStream<S>>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        if let Some((params, config)) = self.deflate {
            ws.enable_deflate(&params, &config)?;
        }
        Ok(ws)
    }
}
