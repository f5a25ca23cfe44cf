//! Why a client could not open the connection its handshake runs over: the
//! connect phase's error, before any HTTP is spoken.

use std::io;
use std::net::SocketAddr;

use http::StatusCode;

/// Why a client could not open the connection its handshake runs over.
///
/// Reached as [`Error::Connect`](crate::Error::Connect). Running out of
/// [`connect_timeout`](crate::Config::connect_timeout) in any of these steps
/// is [`ConnectError::Timeout`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The URL's scheme cannot be connected to: `wss://` needs a TLS
    /// feature (`rustls` or `native-tls`); anything but `ws://` and
    /// `wss://` is not WebSocket.
    #[error(
        "unsupported URL scheme {0:?}: connect_async takes ws://, and wss:// with a TLS feature, rustls or native-tls (or open the TLS stream yourself and use client_async)"
    )]
    UnsupportedScheme(String),
    /// The connection (name resolution, TCP, proxy tunnel and TLS handshake
    /// together) could not be opened within the configured
    /// [`connect_timeout`](crate::Config::connect_timeout).
    #[error("connecting timed out")]
    Timeout,
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
    /// The server's HTTP/2 connection does not advertise
    /// `SETTINGS_ENABLE_CONNECT_PROTOCOL` (RFC 8441 §3): it cannot carry
    /// WebSockets, so none was requested.
    #[error(
        "the server's HTTP/2 connection does not support WebSockets (no SETTINGS_ENABLE_CONNECT_PROTOCOL); connect over HTTP/1.1"
    )]
    Http2WebSocketsDisabled,
    /// The TLS server picked a protocol other than `h2` in ALPN, so there is
    /// no HTTP/2 connection to open WebSockets on.
    #[error("the TLS server did not agree to HTTP/2 (ALPN h2)")]
    Http2NotNegotiated,
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
    /// The host name cannot go through a SOCKS5 proxy: the protocol carries
    /// names of 1 to 255 bytes; this is the name's length.
    #[error("host name of {0} bytes cannot go through SOCKS5 (1 to 255)")]
    SocksHostName(usize),
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
    /// The URL's host is not a name or address a server certificate can be
    /// checked against.
    #[cfg(feature = "rustls")]
    #[error("{0:?} is not a TLS server name")]
    InvalidServerName(String),
    /// A `wss://` URL with [`Connector::Plain`](crate::Connector::Plain),
    /// which refuses TLS.
    #[cfg(feature = "__tls")]
    #[error("a wss:// URL with Connector::Plain; use ws:// or a TLS connector")]
    PlainConnectorForWss,
    /// A `wss://` URL with no root certificates to check the server against.
    #[cfg(feature = "rustls")]
    #[error(
        "no trusted root certificates for wss:// ({0}): enable the rustls-webpki-roots or rustls-native-roots feature, or pass Connector::Rustls with your own ClientConfig"
    )]
    NoRootCertificates(String),
    /// A `wss://` URL with no rustls crypto provider: none is installed
    /// process-wide and neither provider feature is enabled.
    #[cfg(feature = "rustls")]
    #[error(
        "no rustls crypto provider for wss://: enable wavesock's `ring` or `aws-lc-rs` feature, install a process-wide default (rustls::crypto::CryptoProvider::install_default), or pass Connector::Rustls with your own ClientConfig"
    )]
    NoCryptoProvider,
    /// The native-tls handshake failed: the server's certificate was not
    /// accepted (the text says why: "certificate has expired", "unable to
    /// get local issuer certificate", "hostname mismatch", ...), the
    /// server is not speaking TLS, or the stack could not be set up.
    #[cfg(feature = "native-tls")]
    #[error("TLS (native-tls) failed: {0}")]
    NativeTls(#[source] native_tls::Error),
    /// The server chose HTTP/2 in ALPN on a connection that speaks
    /// HTTP/1.1: a native-tls connector's ALPN offer is fixed when it is
    /// built, so one offering `h2` cannot make the HTTP/1.1 attempts.
    #[cfg(feature = "native-tls")]
    #[error(
        "the server chose HTTP/2 (ALPN h2) for an HTTP/1.1 connection: this native-tls connector offers h2; build one without request_alpns for HTTP/1.1, or pass no connector"
    )]
    UnwantedHttp2,
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
