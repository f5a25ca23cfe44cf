//! What the opening handshake agreed on beyond RFC 6455 itself (today only
//! permessage-deflate), as the handshakes need it. Without the `deflate`
//! feature, `Config::validate` refuses `Config::deflate`, so nothing is
//! offered or accepted.

use http::header::SEC_WEBSOCKET_EXTENSIONS;
use http::{HeaderMap, Request};

use crate::config::Config;
use crate::error::{HandshakeError, Result};
use crate::handshake::server::Accepting;
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

/// Server: what the handshake agreed on.
impl From<Accepting> for Negotiated {
    fn from(accepting: Accepting) -> Self {
        Negotiated {
            deflate: accepting.into_deflate(),
        }
    }
}

impl Negotiated {
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
