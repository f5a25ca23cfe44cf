//! The sans-IO WebSocket ([RFC 6455]) protocol core of
//! [wavesock](https://docs.rs/wavesock): frame headers, masking, UTF-8
//! validation, message assembly, close rules, compression ([RFC 7692]) and
//! the connection's state machine.
//!
//! Nothing here knows about sockets, async runtimes, clocks or HTTP: the
//! crate depends on none of them, so the compiler keeps it so. The engines
//! above it (wavesock's `WebSocketStream` and hub) move bytes and time in
//! and out; wavesock re-exports this crate as `wavesock::proto`.
//!
//! The layers, bottom up: frames ([`header`], [`mask`]), messages
//! ([`decoder`], [`encoder`], [`message`], [`deflate`]), the connection's
//! state and deadlines ([`conn::Connection`]), the memory rules
//! ([`budget`], [`buffer`]), and the per-connection [`driver::Driver`]:
//! the core with its encoder and a write queue ([`outbox`]), through which
//! every engine sends and writes, and the [`inbox::Inbox`] beside it: the
//! decoder and the read buffer, through which every engine reads.
//!
//! ```
//! use wavesock_proto::{Limits, Message, Role};
//! use wavesock_proto::decoder::MessageDecoder;
//! use wavesock_proto::encoder::FrameEncoder;
//!
//! // A client's frame, as it arrives at a server.
//! let mut wire = wavesock_proto::bytes::BytesMut::new();
//! FrameEncoder::new(Role::Client).encode_message(&Message::text("hi"), &mut wire)?;
//! let mut decoder = MessageDecoder::new(Role::Server, Limits::default());
//! assert_eq!(decoder.decode(&mut wire)?, Some(Message::text("hi")));
//! # Ok::<(), wavesock_proto::Error>(())
//! ```
//!
//! [RFC 6455]: https://www.rfc-editor.org/rfc/rfc6455
//! [RFC 7692]: https://www.rfc-editor.org/rfc/rfc7692
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod budget;
pub mod buffer;
pub mod close;
mod close_code;
pub mod conn;
pub mod decoder;
pub mod deflate;
pub mod driver;
pub mod encoder;
pub mod error;
pub mod header;
pub mod inbox;
pub mod limits;
pub mod mask;
pub mod message;
pub mod outbox;
pub mod receive;
mod role;
#[cfg(test)]
mod test_frames;
pub mod text;
pub mod utf8;

pub use budget::MemoryBudget;
pub use error::{Error, ProtocolError};
pub use limits::Limits;
pub use role::Role;

pub use bytes::{self, Bytes};
pub use close::{CloseCode, CloseFrame};
pub use deflate::{DeflateConfig, DeflateParams, DeflatePolicy};
pub use header::OpCode;
pub use mask::MaskKeys;
pub use message::{Frame, Message, PreparedMessage};
pub use text::Utf8Bytes;
