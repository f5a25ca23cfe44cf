//! permessage-deflate on a connection whose handshake was done elsewhere,
//! and sending past the compressor (the `deflate` feature).

use futures_util::SinkExt;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::error::Result;
use crate::proto::deflate::{DeflateConfig, DeflateParams};
use crate::proto::header::OpCode;
use crate::proto::message::{Frame, Message};
use crate::stream::{WebSocketSender, WebSocketStream};

/// A data message as a raw frame, which is never compressed.
fn uncompressed(msg: Message) -> Message {
    match msg {
        Message::Text(t) => Message::Frame(Frame::new(true, OpCode::Text, t.into_bytes())),
        Message::Binary(b) => Message::Frame(Frame::new(true, OpCode::Binary, b)),
        other => other,
    }
}

impl<S> WebSocketStream<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    /// Turns permessage-deflate on for a connection whose handshake you did
    /// yourself, with the parameters
    /// [`negotiate`](crate::handshake::extensions::negotiate) (server) or
    /// [`check_response`](crate::handshake::extensions::check_response)
    /// (client) returned. Call it before any message is sent or received.
    ///
    /// ```
    /// use wavesock::{Config, DeflateConfig, DeflateParams, Role, WebSocketStream};
    ///
    /// let (io, _peer) = tokio::io::duplex(1024);
    /// let ws = WebSocketStream::from_raw_socket(io, Role::Server, Config::default())?
    ///     .with_deflate(DeflateParams::default(), &DeflateConfig::default());
    /// # Ok::<(), wavesock::Error>(())
    /// ```
    ///
    /// Should the compressor pair not be made for `params`, the connection
    /// fails with that error (the next poll returns it), rather than run
    /// uncompressed against a peer that expects compression.
    pub fn with_deflate(mut self, params: DeflateParams, config: &DeflateConfig) -> Self {
        if let Err(e) = self.enable_deflate(&params, config) {
            self.fail_setup(e);
        }
        self
    }

    /// Sends a text or binary message uncompressed even when compression is
    /// on: for payloads that are already compressed (images, archives).
    /// Other messages are sent as [`send`](SinkExt::send) would.
    pub async fn send_uncompressed(&mut self, msg: Message) -> Result<()> {
        self.send(uncompressed(msg)).await
    }

    /// Like [`send_uncompressed`](Self::send_uncompressed), buffered as
    /// [`feed`](SinkExt::feed) does.
    pub async fn feed_uncompressed(&mut self, msg: Message) -> Result<()> {
        self.feed(uncompressed(msg)).await
    }
}

impl<S> WebSocketSender<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    /// See [`WebSocketStream::send_uncompressed`].
    pub async fn send_uncompressed(&mut self, msg: Message) -> Result<()> {
        self.send(uncompressed(msg)).await
    }

    /// See [`WebSocketStream::feed_uncompressed`].
    pub async fn feed_uncompressed(&mut self, msg: Message) -> Result<()> {
        self.feed(uncompressed(msg)).await
    }
}
