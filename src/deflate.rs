//! permessage-deflate compression ([RFC 7692]), behind the `deflate` feature.
//!
//! Turn it on with [`Config::deflate`](crate::Config::deflate): a client
//! then offers compression in its handshake, a server accepts a client's
//! offer, and both sides compress data messages at or above
//! [`DeflateConfig::compression_threshold`] bytes. The negotiation itself
//! is in [`handshake::extensions`](crate::handshake::extensions), for
//! servers that answer the upgrade themselves (hyper, axum).
//!
//! ```no_run
//! use futures_util::{SinkExt, StreamExt};
//! use wavesock::{Config, DeflateConfig, Message};
//!
//! # async fn run() -> wavesock::Result<()> {
//! let config = Config::default().deflate(DeflateConfig::default());
//! let (mut ws, _) = wavesock::connect_async_with_config("ws://127.0.0.1:9001/", config).await?;
//! ws.send(Message::text("compressed if the server agreed")).await?;
//! // Already-compressed data (images, archives) gains nothing: send it as is.
//! ws.send_uncompressed(Message::binary(vec![0x89, b'P', b'N', b'G'])).await?;
//! # Ok(()) }
//! ```
//!
//! [RFC 7692]: https://www.rfc-editor.org/rfc/rfc7692

pub use crate::proto::deflate::{DeflateConfig, DeflateParams};
