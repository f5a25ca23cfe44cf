//! The client side of the handshake: build the upgrade request, parse and
//! check the server's response. No I/O here; [`client_async`] and
//! [`connect_async`] drive these functions over a stream.
//!
//! [`client_async`]: crate::client_async
//! [`connect_async`]: crate::connect_async

pub(crate) mod answer;
mod extended_connect;
mod http1;
mod request;
pub(crate) mod target;

pub use extended_connect::{check_extended_connect_response, prepare_extended_connect};
pub use http1::{check_response, parse_response, prepare_request, write_request};
pub use request::{ClientRequestBuilder, IntoClientRequest, Request, Response};
