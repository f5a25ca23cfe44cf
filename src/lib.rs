//! # wavesock
//!
//! A strict, fast WebSocket ([RFC 6455]) library for Tokio.
//!
//! - A sans-IO protocol core ([`proto`]): frame headers, masking, incremental
//!   UTF-8 validation, close rules.
//! - A [`tokio_util::codec`] [`Decoder`](tokio_util::codec::Decoder) /
//!   [`Encoder`](tokio_util::codec::Encoder) pair ([`WebSocketCodec`]) that
//!   checks every limit before reserving memory and hands out payloads
//!   without copying.
//! - [`WebSocketStream`]: a `Stream + Sink` over any `AsyncRead + AsyncWrite`,
//!   with automatic pongs, the close handshake, and [`split`](WebSocketStream::split)
//!   halves for two tasks.
//! - The opening handshake on both sides ([`handshake`]), strict and bounded
//!   (head size, header count, timeout): [`accept_async`],
//!   [`accept_hdr_async`] and [`accept_async_callback`] to see, amend or
//!   refuse a request; [`connect_async`] for `ws://` URLs and
//!   [`client_async`] over any stream you opened, given a URL, an
//!   [`http::Request`] or a [`ClientRequestBuilder`] (and a `url::Url`
//!   with the `url` feature).
//! - `wss://` with rustls (features `rustls`, `rustls-webpki-roots`,
//!   `rustls-native-roots`, `rustls-platform-verifier`) or the operating
//!   system's TLS (`native-tls`), see the `tls` module, and client
//!   connections through HTTP `CONNECT` and SOCKS5 proxies ([`proxy`],
//!   feature `proxy`).
//! - [`PreparedMessage`]: a message encoded once and sent to many
//!   connections without a copy per connection.
//! - Messages of any size in bounded memory: received in pieces as they
//!   arrive ([`Config::stream_messages`], [`WebSocketStream::next_message_pieces`]),
//!   sent from a stream of chunks ([`WebSocketStream::send_reader`]).
//!
//! # Features
//!
//! A client or a Stream server compiles only the protocol, the handshake
//! and the Stream. What serves fewer users is opt-in:
//!
//! | feature | adds |
//! | --- | --- |
//! | `simd`, `ring` (default) | SIMD UTF-8 validation; rustls' crypto when a rustls feature is on |
//! | `deflate` | permessage-deflate (RFC 7692) |
//! | `rustls`, `native-tls` and the root store features | `wss://` |
//! | `proxy` | clients through HTTP `CONNECT` and SOCKS5 proxies ([`proxy`]) |
//! | `hyper`, `axum`, `http2` | serving from hyper and axum; the HTTP/2 client (RFC 8441) |
//! | `hub` | [`hub`]: many connections per task with borrowed messages (mio and socket2 on Unix) |
//! | `router` | several routes on one hub (implies `hub`) |
//! | `topics` | [`topics`]: publish once to every subscriber, Streams and hub connections alike |
//! | `redis` | topics across servers through Redis (implies `topics`) |
//! | `url`, `tracing` | `url::Url` requests; `tracing` spans and events |
//!
//! The [`guide`] covers what to know before production: limits, split
//! halves and concurrency, cancel safety in `select!`, closing, keepalive,
//! backpressure, streaming large messages, broadcast and errors. The repository's `examples/` hold a
//! browser chat (`cargo run --example chat`), hyper and axum integrations and
//! a reconnecting client.
//!
//! ```no_run
//! use futures_util::{SinkExt, StreamExt};
//!
//! #[tokio::main]
//! async fn main() -> wavesock::Result<()> {
//!     let listener = tokio::net::TcpListener::bind("127.0.0.1:9001").await?;
//!     let (tcp, _) = listener.accept().await?;
//!     let mut ws = wavesock::accept_async(tcp).await?;
//!     while let Some(msg) = ws.next().await {
//!         let msg = msg?;
//!         if msg.is_data() {
//!             ws.feed(msg).await?; // echo; written when next() waits
//!         }
//!     }
//!     Ok(())
//! }
//! ```
//!
//! A client:
//!
//! ```no_run
//! use futures_util::{SinkExt, StreamExt};
//!
//! # async fn run() -> wavesock::Result<()> {
//! let (mut ws, _response) = wavesock::connect_async("ws://127.0.0.1:9001/").await?;
//! ws.send(wavesock::Message::text("hello")).await?;
//! let reply = ws.next().await;
//! # Ok(()) }
//! ```
//!
//! [RFC 6455]: https://www.rfc-editor.org/rfc/rfc6455
#![deny(missing_docs, missing_debug_implementations, unreachable_pub)]
#![deny(unsafe_code)]
// docs.rs builds with `--cfg docsrs` on nightly (Cargo.toml's
// `[package.metadata.docs.rs]`): rustdoc then labels every item gated on a
// feature with the feature it needs. `__tls` is internal ("any TLS stack"),
// so its items name the public features instead.
#![cfg_attr(docsrs, feature(doc_cfg))]
// The docs of items every build has link to the hub, topics and proxies
// where those explain more. Without their features those links have
// nothing to point at and render as plain text; the docs.rs build (every
// feature, scripts/check-docs-rs.sh in CI) checks that each one resolves.
#![cfg_attr(
    not(all(feature = "hub", feature = "topics", feature = "proxy")),
    allow(rustdoc::broken_intra_doc_links)
)]
#![cfg_attr(docsrs, doc(auto_cfg(hide(feature = "__tls"))))]

#[cfg(feature = "axum")]
pub mod axum;
mod client;
pub mod codec;
pub mod config;
mod deadline;
#[cfg(feature = "deflate")]
pub mod deflate;
mod discard;
pub mod error;
pub mod guide;
pub mod handshake;
mod head;
#[cfg(feature = "http2")]
pub mod http2;
#[cfg(feature = "hub")]
pub mod hub;
pub mod meter;
mod negotiated;
pub use wavesock_proto as proto;
#[cfg(feature = "proxy")]
pub mod proxy;
mod retry;
mod server;
pub mod stream;
#[cfg(feature = "topics")]
pub mod topics;
#[cfg(feature = "__tls")]
#[cfg_attr(docsrs, doc(cfg(any(feature = "rustls", feature = "native-tls"))))]
pub use client::tls;
mod trace;
#[cfg(feature = "hyper")]
pub mod upgrade;

pub use client::{
    ClientReceiver, ClientResponse, ClientSender, ClientStream, MaybeTlsStream, client_async,
    client_async_with_config, connect_async, connect_async_with_config,
};
pub use codec::WebSocketCodec;
pub use config::{ClientConfig, Config, HandshakeConfig};
pub use error::{ConnectError, Error, HandshakeError, ProtocolError, Result};
pub use handshake::client::{ClientRequestBuilder, IntoClientRequest};
pub use handshake::server::{AsyncCallback, Callback, ErrorResponse, Subprotocols};
pub use proto::Role;
pub use proto::budget::MemoryBudget;
pub use proto::close::{CloseCode, CloseFrame};
pub use proto::conn::Timers;
pub use proto::deflate::{DeflateConfig, DeflateParams, DeflatePolicy};
pub use proto::header::OpCode;
pub use proto::limits::Limits;
pub use proto::mask::MaskKeys;
pub use proto::message::{Frame, Message, PreparedMessage};
pub use proto::text::Utf8Bytes;
pub use server::{
    accept_async, accept_async_callback, accept_async_callback_with_config,
    accept_async_with_config, accept_hdr_async, accept_hdr_async_with_config,
};
pub use stream::{MessagePieces, WebSocketReceiver, WebSocketSender, WebSocketStream};

#[cfg(feature = "__tls")]
#[cfg_attr(docsrs, doc(cfg(any(feature = "rustls", feature = "native-tls"))))]
pub use client::connect_async_tls_with_config;
#[cfg(feature = "__tls")]
#[cfg_attr(docsrs, doc(cfg(any(feature = "rustls", feature = "native-tls"))))]
pub use client::tls::Connector;
/// The native-tls version wavesock is built with, for
/// [`Connector::NativeTls`] connectors.
#[cfg(feature = "native-tls")]
pub use native_tls;
/// The rustls version wavesock is built with, for [`Connector::Rustls`] configs.
#[cfg(feature = "rustls")]
pub use rustls;
/// The tokio-native-tls version wavesock is built with (a server's
/// `TlsAcceptor`).
#[cfg(feature = "native-tls")]
pub use tokio_native_tls;
/// The tokio-rustls version wavesock is built with (a server's `TlsAcceptor`).
#[cfg(feature = "rustls")]
pub use tokio_rustls;

/// The bytes crate's `Bytes`, which binary payloads are (as `tungstenite::Bytes`).
pub use bytes::Bytes;
/// The http crate wavesock is built with (as `tungstenite::http`): build a
/// client's request with `wavesock::http::Request::builder()`, read a
/// response's headers, or answer a server callback, without adding `http`
/// to your own dependencies.
pub use http;
/// redis-rs, for [`Topics::link_redis`](topics::Topics::link_redis)'s client.
#[cfg(feature = "redis")]
pub use redis;

// The README's and the migration guide's examples are compiled as doc tests
// so that they stay true.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

#[doc = include_str!("../MIGRATING.md")]
#[cfg(doctest)]
pub struct MigratingDoctests;
