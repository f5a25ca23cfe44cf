//! TLS with rustls: `wss://` for clients, and how to serve over TLS.
//!
//! Enabled by the `rustls` feature; `rustls-webpki-roots` (Mozilla's roots,
//! compiled in) or `rustls-native-roots` (the platform's store, loaded once)
//! add the roots that [`connect_async`](crate::connect_async) trusts for
//! `wss://` URLs. With both, both sets are trusted. Without either, pass your
//! own configuration as a [`Connector`].
//!
//! # The crypto provider
//!
//! [`crypto_provider`] picks it, in this order:
//! 1. the process-wide default, if the application installed one
//!    (`CryptoProvider::install_default`);
//! 2. aws-lc-rs, with the `aws-lc-rs` feature;
//! 3. *ring*, with the `ring` feature (a default feature);
//! 4. none: `wss://` fails with [`ConnectError::NoCryptoProvider`], which
//!    says what to enable.
//!
//! The provider is passed to rustls explicitly: wavesock never installs a
//! process-wide provider and never hits rustls' "no process-level
//! CryptoProvider" panic, whichever providers feature unification compiles
//! in.
//!
//! # Your own client configuration
//!
//! ```no_run
//! use std::sync::Arc;
//! use wavesock::rustls::{ClientConfig, RootCertStore};
//! use wavesock::{Config, Connector};
//!
//! # async fn run(my_ca: wavesock::rustls::pki_types::CertificateDer<'static>) -> wavesock::Result<()> {
//! let mut roots = RootCertStore::empty();
//! roots.add(my_ca).expect("a valid CA certificate");
//! let provider = wavesock::tls::crypto_provider()?;
//! let tls = ClientConfig::builder_with_provider(provider)
//!     .with_safe_default_protocol_versions()
//!     .expect("the provider supports the default versions")
//!     .with_root_certificates(roots)
//!     .with_no_client_auth();
//! let connector = Connector::Rustls(Arc::new(tls));
//! let (ws, _) = wavesock::connect_async_tls_with_config(
//!     "wss://internal.example:8443/feed",
//!     Config::default(),
//!     Some(connector),
//! )
//! .await?;
//! # Ok(()) }
//! ```
//!
//! # Serving over TLS
//!
//! [`accept_async`](crate::accept_async) takes any stream, a
//! [`tokio_rustls::server::TlsStream`] included: accept TCP, run the TLS
//! handshake with a [`tokio_rustls::TlsAcceptor`], then the WebSocket one.
//!
//! ```no_run
//! use std::sync::Arc;
//! use wavesock::rustls::ServerConfig;
//! use wavesock::rustls::pki_types::{CertificateDer, PrivateKeyDer};
//! use wavesock::tokio_rustls::TlsAcceptor;
//!
//! # async fn run(chain: Vec<CertificateDer<'static>>, key: PrivateKeyDer<'static>) -> wavesock::Result<()> {
//! let provider = wavesock::tls::crypto_provider()?;
//! let tls = ServerConfig::builder_with_provider(provider)
//!     .with_safe_default_protocol_versions()
//!     .expect("the provider supports the default versions")
//!     .with_no_client_auth()
//!     .with_single_cert(chain, key)
//!     .expect("a matching certificate and key");
//! let acceptor = TlsAcceptor::from(Arc::new(tls));
//! let listener = tokio::net::TcpListener::bind("0.0.0.0:443").await?;
//! loop {
//!     let (tcp, _) = listener.accept().await?;
//!     let acceptor = acceptor.clone();
//!     tokio::spawn(async move {
//!         let tls = acceptor.accept(tcp).await?;
//!         let ws = wavesock::accept_async(tls).await?;
//!         // ... use ws as over plain TCP
//!         Ok::<_, wavesock::Error>(())
//!     });
//! }
//! # }
//! ```

use std::io;
use std::sync::{Arc, OnceLock};

use rustls::ClientConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::error::ConnectError;
use crate::error::{Error, Result};

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
    Rustls(Arc<ClientConfig>),
}

impl From<Arc<ClientConfig>> for Connector {
    fn from(config: Arc<ClientConfig>) -> Self {
        Connector::Rustls(config)
    }
}

impl From<ClientConfig> for Connector {
    fn from(config: ClientConfig) -> Self {
        Connector::Rustls(Arc::new(config))
    }
}

impl From<TlsConnector> for Connector {
    fn from(connector: TlsConnector) -> Self {
        Connector::Rustls(connector.config().clone())
    }
}

/// The rustls configuration for a `wss://` URL: the connector's, else the
/// built-in one.
pub(crate) fn client_config(connector: Option<Connector>) -> Result<Arc<ClientConfig>> {
    match connector {
        Some(Connector::Rustls(config)) => Ok(config),
        Some(Connector::Plain) => Err(ConnectError::PlainConnectorForWss.into()),
        None => default_config(),
    }
}

/// The configuration built from the roots features, made once: loading the
/// platform's store reads files.
fn default_config() -> Result<Arc<ClientConfig>> {
    static BUILT: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    if let Some(config) = BUILT.get() {
        return Ok(config.clone());
    }
    #[allow(unused_mut)]
    let mut roots = rustls::RootCertStore::empty();
    #[cfg(feature = "rustls-native-roots")]
    let why_empty = {
        let found = rustls_native_certs::load_native_certs();
        // Certificates rustls cannot parse are skipped, as browsers do.
        let (_added, _unparsable) = roots.add_parsable_certificates(found.certs);
        match found.errors.first() {
            Some(e) => format!("the platform's store had none usable: {e}"),
            None => "the platform's store had none usable".to_owned(),
        }
    };
    #[cfg(not(feature = "rustls-native-roots"))]
    let why_empty = "no root store feature is enabled".to_owned();
    #[cfg(feature = "rustls-webpki-roots")]
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if roots.is_empty() {
        return Err(ConnectError::NoRootCertificates(why_empty).into());
    }
    let config = ClientConfig::builder_with_provider(crypto_provider()?)
        .with_safe_default_protocol_versions()
        .map_err(ConnectError::Tls)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(BUILT.get_or_init(|| Arc::new(config)).clone())
}

/// The rustls crypto provider wavesock's own configurations use: the
/// process-wide default if one is installed, else aws-lc-rs (feature
/// `aws-lc-rs`), else *ring* (feature `ring`); see the [module
/// docs](self#the-crypto-provider). Use it to build a `ClientConfig` of
/// your own with the same choice.
///
/// ```
/// # fn main() -> wavesock::Result<()> {
/// let provider = wavesock::tls::crypto_provider()?;
/// let builder = wavesock::rustls::ClientConfig::builder_with_provider(provider);
/// # let _ = builder;
/// # Ok(()) }
/// ```
pub fn crypto_provider() -> Result<Arc<CryptoProvider>> {
    if let Some(installed) = CryptoProvider::get_default() {
        return Ok(installed.clone());
    }
    #[cfg(feature = "aws-lc-rs")]
    return Ok(Arc::new(rustls::crypto::aws_lc_rs::default_provider()));
    #[cfg(all(feature = "ring", not(feature = "aws-lc-rs")))]
    return Ok(Arc::new(rustls::crypto::ring::default_provider()));
    #[cfg(not(any(feature = "ring", feature = "aws-lc-rs")))]
    Err(ConnectError::NoCryptoProvider.into())
}

/// The TLS handshake over `io` for `host`, which is checked against the
/// server's certificate (a name, or an IP address).
pub(crate) async fn handshake<S>(
    io: S,
    host: &str,
    config: Arc<ClientConfig>,
) -> Result<TlsStream<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let name = ServerName::try_from(host.to_owned())
        .map_err(|_| ConnectError::InvalidServerName(host.to_owned()))?;
    TlsConnector::from(config)
        .connect(name, io)
        .await
        .map_err(tls_error)
}

/// tokio-rustls reports rustls errors inside `io::Error`; bring them out.
fn tls_error(e: io::Error) -> Error {
    if !e.get_ref().is_some_and(|inner| inner.is::<rustls::Error>()) {
        return Error::Io(e);
    }
    let kind = e.kind();
    match e
        .into_inner()
        .map(|inner| inner.downcast::<rustls::Error>())
    {
        Some(Ok(tls)) => match *tls {
            rustls::Error::InvalidCertificate(_) => ConnectError::Certificate(*tls).into(),
            other => ConnectError::Tls(other).into(),
        },
        Some(Err(inner)) => Error::Io(io::Error::new(kind, inner)),
        None => Error::Io(kind.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rustls_errors_come_out_of_io_errors() {
        let cert = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let e = tls_error(io::Error::new(io::ErrorKind::InvalidData, cert));
        assert!(matches!(
            e,
            Error::Connect(ConnectError::Certificate(
                rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer)
            ))
        ));
        let other = rustls::Error::HandshakeNotComplete;
        let e = tls_error(io::Error::new(io::ErrorKind::InvalidData, other));
        assert!(matches!(e, Error::Connect(ConnectError::Tls(_))));
        let e = tls_error(io::ErrorKind::UnexpectedEof.into());
        assert!(matches!(e, Error::Io(e) if e.kind() == io::ErrorKind::UnexpectedEof));
    }

    #[test]
    fn connect_phase_refusals_are_connect_errors() {
        assert!(matches!(
            client_config(Some(Connector::Plain)),
            Err(Error::Connect(ConnectError::PlainConnectorForWss))
        ));
    }

    #[tokio::test]
    async fn a_host_that_is_no_server_name_is_a_connect_error() {
        let config = Arc::new(
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth(),
        );
        let (io, _peer) = tokio::io::duplex(64);
        assert!(matches!(
            handshake(io, "bad name", config).await,
            Err(Error::Connect(ConnectError::InvalidServerName(h))) if h == "bad name"
        ));
    }

    #[cfg(not(any(feature = "rustls-webpki-roots", feature = "rustls-native-roots")))]
    #[test]
    fn no_roots_is_a_clear_error() {
        assert!(matches!(
            client_config(None),
            Err(Error::Connect(ConnectError::NoRootCertificates(_)))
        ));
    }

    #[cfg(feature = "rustls-webpki-roots")]
    #[test]
    fn default_config_is_built_once() {
        let a = client_config(None).unwrap();
        let b = client_config(None).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
    }
}
