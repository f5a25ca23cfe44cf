//! The crate's one error type.

use std::io;
use std::net::SocketAddr;

use http::StatusCode;

use crate::proto;
use crate::proto::close::CloseCode;

pub use crate::proto::error::ProtocolError;

/// Everything that can go wrong on a WebSocket connection.
///
/// Protocol violations and limit breaches carry the close code that was sent
/// to the peer (see [`Error::close_code`]); I/O and handshake failures do not.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The underlying transport failed.
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),

    /// The peer broke a rule of RFC 6455.
    #[error("protocol violation: {0}")]
    Protocol(#[from] ProtocolError),

    /// A text message or close reason was not valid UTF-8.
    #[error("invalid UTF-8 in a text message or close reason")]
    InvalidUtf8,

    /// A single frame announced more payload than `max_frame_size` allows.
    #[error("frame of {size} bytes exceeds the limit of {max} bytes")]
    FrameTooLarge {
        /// The length the frame announced.
        size: u64,
        /// The configured limit.
        max: usize,
    },

    /// A message (all of its fragments) would exceed `max_message_size`.
    #[error("message of at least {size} bytes exceeds the limit of {max} bytes")]
    MessageTooLarge {
        /// The size the message would reach.
        size: u64,
        /// The configured limit.
        max: usize,
    },

    /// The opening HTTP handshake failed.
    #[error("handshake failed: {0}")]
    Handshake(#[from] HandshakeError),

    /// A message was sent on a connection the peer closed (its close frame
    /// arrived, or the connection ended).
    #[error("connection closed by the peer")]
    ConnectionClosed,

    /// A message was sent after this side closed the connection (sent its
    /// close frame, or failed it over an error).
    #[error("connection already closed by this side")]
    AlreadyClosed,

    /// Keepalive: the peer sent nothing within `pong_timeout` of a ping.
    #[error("peer did not answer a keepalive ping in time")]
    KeepaliveTimeout,

    /// The closing handshake did not finish within `close_timeout`; the
    /// connection was dropped anyway.
    #[error("closing handshake timed out")]
    CloseTimeout,

    /// The message given to `send` cannot be put on the wire (for example a
    /// control frame over 125 bytes or a close code that is not allowed).
    #[error("invalid message to send: {0}")]
    InvalidMessage(&'static str),

    /// A [`Config`](crate::Config) combination that cannot work.
    #[error("invalid configuration: {0}")]
    InvalidConfig(&'static str),

    /// A client could not open the connection the handshake runs over: the
    /// name did not resolve, TCP failed, a proxy refused, or TLS failed.
    #[error("could not connect: {0}")]
    Connect(#[from] ConnectError),
}

impl Error {
    /// The close code this error calls for, when it is a fault of the peer's
    /// data: 1002 for protocol violations, 1007 for invalid UTF-8, 1009 for
    /// limit breaches.
    pub fn close_code(&self) -> Option<CloseCode> {
        match self {
            Error::Protocol(_) => Some(CloseCode::PROTOCOL_ERROR),
            Error::InvalidUtf8 => Some(CloseCode::INVALID_PAYLOAD),
            Error::FrameTooLarge { .. } | Error::MessageTooLarge { .. } => {
                Some(CloseCode::MESSAGE_TOO_BIG)
            }
            _ => None,
        }
    }
}

/// The protocol core's errors, each as the variant of the same name.
impl From<proto::Error> for Error {
    fn from(e: proto::Error) -> Error {
        match e {
            proto::Error::Protocol(p) => Error::Protocol(p),
            proto::Error::InvalidUtf8 => Error::InvalidUtf8,
            proto::Error::FrameTooLarge { size, max } => Error::FrameTooLarge { size, max },
            proto::Error::MessageTooLarge { size, max } => Error::MessageTooLarge { size, max },
            proto::Error::InvalidMessage(m) => Error::InvalidMessage(m),
            proto::Error::ConnectionClosed => Error::ConnectionClosed,
            proto::Error::AlreadyClosed => Error::AlreadyClosed,
            proto::Error::KeepaliveTimeout => Error::KeepaliveTimeout,
            proto::Error::CloseTimeout => Error::CloseTimeout,
            proto::Error::InvalidConfig(m) => Error::InvalidConfig(m),
            // A compressor failure is a local fault, like a failed write.
            proto::Error::Compression(m) => Error::Io(io::Error::other(m)),
        }
    }
}

/// For byte-stream adapters such as [`tokio_util::io::StreamReader`] over
/// [`MessagePieces`](crate::MessagePieces): an I/O error is given back as it
/// was, a peer that closed in mid-message becomes
/// [`io::ErrorKind::UnexpectedEof`], invalid UTF-8
/// [`io::ErrorKind::InvalidData`], anything else [`io::ErrorKind::Other`].
impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        match e {
            Error::Io(e) => e,
            Error::ConnectionClosed => io::Error::new(io::ErrorKind::UnexpectedEof, e),
            Error::InvalidUtf8 => io::Error::new(io::ErrorKind::InvalidData, e),
            e => io::Error::other(e),
        }
    }
}

/// Why the opening HTTP handshake failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HandshakeError {
    /// The HTTP head could not be parsed.
    #[error("malformed HTTP: {0}")]
    Malformed(String),
    /// The HTTP head was larger than the configured limit.
    #[error("HTTP head exceeds {0} bytes")]
    TooLarge(usize),
    /// The request used a method other than GET.
    #[error("method {0} is not allowed; a WebSocket handshake uses GET")]
    MethodNotAllowed(String),
    /// A required header was missing or wrong.
    #[error("bad header {name}: {reason}")]
    BadHeader {
        /// Header name.
        name: &'static str,
        /// What was wrong with it.
        reason: &'static str,
    },
    /// The client asked for a WebSocket version other than 13.
    #[error("unsupported WebSocket version")]
    UnsupportedVersion,
    /// The server answered with something other than 101 Switching Protocols.
    #[error("server answered {status}")]
    UnexpectedStatus {
        /// The response status.
        status: StatusCode,
        /// The response as received (head and a bounded part of the body).
        response: Box<http::Response<Option<Vec<u8>>>>,
    },
    /// The handshake did not complete within the configured timeout.
    #[error("handshake timed out")]
    Timeout,
    /// The peer closed the connection during the handshake.
    #[error("connection closed during the handshake")]
    ConnectionClosed,
    /// The URL could not be used to open a WebSocket connection.
    #[error("invalid URL: {0}")]
    InvalidUrl(String),
    /// A client request could not be built from the parts given: a header
    /// name or value that is not valid HTTP, or a subprotocol name that is
    /// not an HTTP token (see
    /// [`ClientRequestBuilder`](crate::ClientRequestBuilder)).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The server's callback refused the request.
    #[error("request refused with status {0}")]
    Refused(StatusCode),
    /// The URL's scheme cannot be used: `wss://` needs a `rustls` feature;
    /// anything but `ws://` and `wss://` is not WebSocket.
    #[error(
        "unsupported URL scheme {0:?}: connect_async takes ws://, and wss:// with a rustls feature (or open the TLS stream yourself and use client_async)"
    )]
    UnsupportedScheme(String),
    /// The connection (name resolution, TCP, proxy tunnel and TLS handshake
    /// together) could not be opened within the configured
    /// [`connect_timeout`](crate::Config::connect_timeout).
    #[error("connecting timed out")]
    ConnectTimeout,
}

impl HandshakeError {
    /// The HTTP status a server answers this failure with, if any.
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            HandshakeError::Malformed(_) | HandshakeError::BadHeader { .. } => {
                Some(StatusCode::BAD_REQUEST)
            }
            HandshakeError::TooLarge(_) => Some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE),
            HandshakeError::MethodNotAllowed(_) => Some(StatusCode::METHOD_NOT_ALLOWED),
            HandshakeError::UnsupportedVersion => Some(StatusCode::UPGRADE_REQUIRED),
            HandshakeError::Refused(status) => Some(*status),
            _ => None,
        }
    }
}

/// Why a client could not open the connection its handshake runs over.
///
/// Reached as [`Error::Connect`]. Running out of
/// [`connect_timeout`](crate::Config::connect_timeout) in any of these steps
/// is [`HandshakeError::ConnectTimeout`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The host name (of the server, or of the proxy) did not resolve to any
    /// address.
    #[error("could not resolve {host:?}: {source}")]
    Dns {
        /// The name looked up.
        host: String,
        /// The resolver's error.
        #[source]
        source: io::Error,
    },
    /// No TCP connection could be opened: refused, unreachable, reset. With
    /// several addresses for the name, this is the last one tried.
    #[error("TCP connection to {addr} failed: {source}")]
    Tcp {
        /// The address (of the server, or of the proxy).
        addr: SocketAddr,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// The HTTP proxy answered `CONNECT` with a status other than 2xx
    /// (`407` when it wants credentials or refused the ones given).
    #[error("HTTP proxy refused the tunnel: {0}")]
    ProxyStatus(StatusCode),
    /// The SOCKS5 proxy answered the connect request with a failure code
    /// (RFC 1928 §6: 1 general failure, 2 not allowed by ruleset, 3 network
    /// unreachable, 4 host unreachable, 5 connection refused, 6 TTL expired,
    /// 7 command not supported, 8 address type not supported).
    #[error("SOCKS5 proxy refused the connection: {text} (reply {0})", text = socks_reply_text(*.0))]
    SocksRefused(u8),
    /// The SOCKS5 proxy accepted none of the authentication methods offered;
    /// usually it wants a username and password and none were configured.
    #[error("SOCKS5 proxy accepts none of the offered authentication methods")]
    SocksNoAcceptableAuth,
    /// The SOCKS5 proxy refused the username and password (RFC 1929).
    #[error("SOCKS5 proxy refused the username and password")]
    SocksAuthFailed,
    /// The proxy broke its protocol: a malformed or oversized answer, or the
    /// connection closed while the tunnel was being set up.
    #[error("proxy protocol error: {0}")]
    ProxyProtocol(&'static str),
    /// The server's certificate was not accepted: untrusted issuer, wrong
    /// host name, expired, and so on. The rustls error says which.
    #[cfg(feature = "rustls")]
    #[error("server certificate refused: {0}")]
    Certificate(#[source] rustls::Error),
    /// The TLS handshake failed for another reason: the server is not
    /// speaking TLS, no common protocol version or cipher suite, an alert.
    #[cfg(feature = "rustls")]
    #[error("TLS handshake failed: {0}")]
    Tls(#[source] rustls::Error),
    /// A `wss://` URL with no root certificates to check the server against.
    #[cfg(feature = "rustls")]
    #[error(
        "no trusted root certificates for wss:// ({0}): enable the rustls-webpki-roots or rustls-native-roots feature, or pass Connector::Rustls with your own ClientConfig"
    )]
    NoRootCertificates(String),
}

fn socks_reply_text(code: u8) -> &'static str {
    match code {
        1 => "general failure",
        2 => "connection not allowed by ruleset",
        3 => "network unreachable",
        4 => "host unreachable",
        5 => "connection refused",
        6 => "TTL expired",
        7 => "command not supported",
        8 => "address type not supported",
        _ => "unknown reply code",
    }
}

/// A `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
