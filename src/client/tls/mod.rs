//! TLS for `wss://`: which stack a client uses, and how to serve over TLS.
//!
//! # Stacks and trust
//!
//! - **`native-tls`**: the operating system's TLS (OpenSSL on Linux,
//!   SChannel on Windows, Security.framework on macOS) and its trust store,
//!   as tokio-tungstenite's feature of that name. On Linux OpenSSL reads
//!   `SSL_CERT_FILE` and `SSL_CERT_DIR` when set.
//! - **rustls** (feature `rustls`), trusting the roots the features add:
//!   `rustls-webpki-roots` (Mozilla's roots, compiled in),
//!   `rustls-native-roots` (the platform's store, loaded once; on Linux
//!   `SSL_CERT_FILE` and `SSL_CERT_DIR` when set), or both; or, with
//!   `rustls-platform-verifier`, the platform's own verifier
//!   (Security.framework, Windows, Android; the system's store on Linux),
//!   which then comes first (if it finds no roots on Linux, Mozilla's are
//!   used when `rustls-webpki-roots` is on; on Android it needs the
//!   crate's JNI initialisation first). Without any, pass your own
//!   configuration as a [`Connector`].
//!
//! # Which stack `connect_async` uses
//!
//! [`connect_async`](crate::connect_async) and the other entry points given
//! no connector use, in this order:
//! 1. native-tls, when the `native-tls` feature is on, even with a rustls
//!    feature on as well (as tokio-tungstenite does: a dependency that
//!    turns `native-tls` on changes the default for the whole build);
//! 2. rustls with the roots of the root store features.
//!
//! [`Connector::from_features`] gives that choice, and
//! [`MaybeTlsStream`](crate::MaybeTlsStream)'s variant says which stack a
//! connection used. Pass a [`Connector`] to choose for yourself.
//!
//! # The rustls crypto provider
//!
//! `tls::crypto_provider` (feature `rustls`) picks it, in this order:
//! 1. the process-wide default, if the application installed one
//!    (`CryptoProvider::install_default`);
//! 2. aws-lc-rs, with the `aws-lc-rs` feature;
//! 3. *ring*, with the `ring` feature (a default feature);
//! 4. none: `wss://` fails with `ConnectError::NoCryptoProvider`, which
//!    says what to enable.
//!
//! The provider is passed to rustls explicitly: wavesock never installs a
//! process-wide provider and never hits rustls' "no process-level
//! CryptoProvider" panic, whichever providers feature unification compiles
//! in.
//!
//! # Serving over TLS
//!
//! [`accept_async`](crate::accept_async) takes any stream, TLS streams
//! included: accept TCP, run the TLS handshake with tokio-rustls' or
//! tokio-native-tls' acceptor, then the WebSocket one. The guide's
//! [Serving over TLS](crate::guide#serving-over-tls) shows both, with the
//! certificate and key loaded from PEM files.

use tokio::io::{AsyncRead, AsyncWrite};

use super::alpn::Alpn;

// `__tls` only says that some stack is compiled in.
#[cfg(not(any(feature = "rustls", feature = "native-tls")))]
compile_error!("the `__tls` feature is internal: enable `rustls` or `native-tls`");
use super::transport::MaybeTlsStream;
use crate::error::ConnectError;
use crate::error::Result;

#[cfg(feature = "native-tls")]
mod native_client;
#[cfg(feature = "rustls")]
mod rustls_client;

#[cfg(feature = "rustls")]
pub use rustls_client::crypto_provider;

/// How a client secures `wss://` connections; given to
/// [`connect_async_tls_with_config`](crate::connect_async_tls_with_config).
///
/// `ws://` URLs are always plain, whatever the connector.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Connector {
    /// No TLS: `wss://` URLs are refused.
    Plain,
    /// rustls with this configuration (roots, client certificates, ALPN,
    /// crypto provider).
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use wavesock::rustls::{ClientConfig, RootCertStore};
    /// use wavesock::{Config, Connector};
    ///
    /// # async fn run(my_ca: wavesock::rustls::pki_types::CertificateDer<'static>) -> wavesock::Result<()> {
    /// let mut roots = RootCertStore::empty();
    /// roots.add(my_ca).expect("a valid CA certificate");
    /// let provider = wavesock::tls::crypto_provider()?;
    /// let tls = ClientConfig::builder_with_provider(provider)
    ///     .with_safe_default_protocol_versions()
    ///     .expect("the provider supports the default versions")
    ///     .with_root_certificates(roots)
    ///     .with_no_client_auth();
    /// let connector = Connector::Rustls(Arc::new(tls));
    /// let (ws, _) = wavesock::connect_async_tls_with_config(
    ///     "wss://internal.example:8443/feed",
    ///     Config::default(),
    ///     Some(connector),
    /// )
    /// .await?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "rustls")]
    Rustls(std::sync::Arc<rustls::ClientConfig>),
    /// native-tls with this connector (roots, client identity, ALPN). Its
    /// ALPN offer is fixed when it is built: for the HTTP/2 client's h2
    /// attempts build it with `request_alpns(&["h2"])`, and one without
    /// for HTTP/1.1; a server choosing h2 on an HTTP/1.1 attempt fails it
    /// with `ConnectError::UnwantedHttp2`.
    ///
    /// ```no_run
    /// use wavesock::native_tls::{Certificate, TlsConnector};
    /// use wavesock::{Config, Connector};
    ///
    /// # async fn run(my_ca_pem: &[u8]) -> wavesock::Result<()> {
    /// let tls = TlsConnector::builder()
    ///     .add_root_certificate(Certificate::from_pem(my_ca_pem).expect("a PEM certificate"))
    ///     .build()
    ///     .expect("a TLS connector");
    /// let (ws, _) = wavesock::connect_async_tls_with_config(
    ///     "wss://internal.example:8443/feed",
    ///     Config::default(),
    ///     Some(Connector::NativeTls(tls)),
    /// )
    /// .await?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "native-tls")]
    NativeTls(native_tls::TlsConnector),
}

impl Connector {
    /// The connector [`connect_async`](crate::connect_async) uses for
    /// `wss://` when given none, made from the features (see the [module
    /// docs](self#which-stack-connect_async-uses)): its variant says which
    /// stack that is. Built once per process: loading a trust store reads
    /// files. It offers no protocol in ALPN: for the HTTP/2 client, pass no
    /// connector, and the one built for each attempt offers what it needs.
    pub fn from_features() -> Result<Connector> {
        #[cfg(feature = "native-tls")]
        return native_client::default_connector(Alpn::None).map(Connector::NativeTls);
        #[cfg(all(feature = "rustls", not(feature = "native-tls")))]
        return rustls_client::default_config().map(Connector::Rustls);
    }
}

#[cfg(feature = "rustls")]
impl From<std::sync::Arc<rustls::ClientConfig>> for Connector {
    fn from(config: std::sync::Arc<rustls::ClientConfig>) -> Self {
        Connector::Rustls(config)
    }
}

#[cfg(feature = "rustls")]
impl From<rustls::ClientConfig> for Connector {
    fn from(config: rustls::ClientConfig) -> Self {
        Connector::Rustls(std::sync::Arc::new(config))
    }
}

#[cfg(feature = "rustls")]
impl From<tokio_rustls::TlsConnector> for Connector {
    fn from(connector: tokio_rustls::TlsConnector) -> Self {
        Connector::Rustls(connector.config().clone())
    }
}

#[cfg(feature = "native-tls")]
impl From<native_tls::TlsConnector> for Connector {
    fn from(connector: native_tls::TlsConnector) -> Self {
        Connector::NativeTls(connector)
    }
}

/// A TLS setup for one connection, settled before any network I/O so that
/// a bad configuration fails at once.
pub(crate) enum Prepared {
    #[cfg(feature = "rustls")]
    Rustls(std::sync::Arc<rustls::ClientConfig>),
    #[cfg(feature = "native-tls")]
    NativeTls(native_tls::TlsConnector),
}

/// The TLS setup for a `wss://` URL offering `alpn`: the connector's, else
/// the one the features choose.
pub(crate) fn prepare(connector: Option<Connector>, alpn: Alpn) -> Result<Prepared> {
    match connector {
        Some(Connector::Plain) => Err(ConnectError::PlainConnectorForWss.into()),
        #[cfg(feature = "rustls")]
        Some(Connector::Rustls(config)) => {
            Ok(Prepared::Rustls(rustls_client::with_alpn(config, alpn)))
        }
        // A connector's ALPN is fixed when it is built: the caller's.
        #[cfg(feature = "native-tls")]
        Some(Connector::NativeTls(connector)) => Ok(Prepared::NativeTls(connector)),
        None => {
            #[cfg(feature = "native-tls")]
            return native_client::default_connector(alpn).map(Prepared::NativeTls);
            #[cfg(all(feature = "rustls", not(feature = "native-tls")))]
            return rustls_client::default_config()
                .map(|config| Prepared::Rustls(rustls_client::with_alpn(config, alpn)));
        }
    }
}

/// The TLS handshake over `io` for `host`, which is checked against the
/// server's certificate (a name, or an IP address).
pub(crate) async fn handshake<S>(io: S, host: &str, prepared: Prepared) -> Result<MaybeTlsStream<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    match prepared {
        #[cfg(feature = "rustls")]
        Prepared::Rustls(config) => rustls_client::handshake(io, host, config)
            .await
            .map(|tls| MaybeTlsStream::Rustls(Box::new(tls))),
        #[cfg(feature = "native-tls")]
        Prepared::NativeTls(connector) => native_client::handshake(io, host, connector)
            .await
            .map(|tls| MaybeTlsStream::NativeTls(Box::new(tls))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn a_plain_connector_refuses_wss_before_connecting() {
        assert!(matches!(
            prepare(Some(Connector::Plain), Alpn::None),
            Err(Error::Connect(ConnectError::PlainConnectorForWss))
        ));
    }

    #[cfg(feature = "native-tls")]
    #[test]
    fn native_tls_comes_first_whatever_else_is_on() {
        let connector = Connector::from_features().unwrap();
        assert!(matches!(connector, Connector::NativeTls(_)));
    }
}
