//! rustls: the configuration the features build, the crypto provider, the
//! handshake and its errors.

use std::io;
use std::sync::{Arc, OnceLock};

use rustls::ClientConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::client::alpn::Alpn;
use crate::error::ConnectError;
use crate::error::{Error, Result};

/// The configuration the features build, made once: loading the
/// platform's store reads files. The platform's verifier when its feature
/// is on, else the roots of the root store features.
// With native-tls on, it comes first: this is left for the tests.
#[cfg_attr(feature = "native-tls", allow(dead_code))]
pub(crate) fn default_config() -> Result<Arc<ClientConfig>> {
    static BUILT: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    if let Some(config) = BUILT.get() {
        return Ok(config.clone());
    }
    let builder = ClientConfig::builder_with_provider(crypto_provider()?)
        .with_safe_default_protocol_versions()
        .map_err(ConnectError::Tls)?;
    #[cfg(feature = "rustls-platform-verifier")]
    let builder = {
        use rustls_platform_verifier::BuilderVerifierExt;
        // On Linux it loads the system's store now, and fails if empty (a
        // slim container): then the root store features' roots, if any,
        // so that a dependency turning the verifier on does not take away
        // the Mozilla roots another part of the build relies on.
        match builder.clone().with_platform_verifier() {
            Ok(verifying) => verifying,
            Err(e) => builder.with_root_certificates(feature_roots().map_err(|_| {
                ConnectError::NoRootCertificates(format!("the platform verifier: {e}"))
            })?),
        }
    };
    #[cfg(not(feature = "rustls-platform-verifier"))]
    let builder = builder.with_root_certificates(feature_roots()?);
    let config = builder.with_no_client_auth();
    Ok(BUILT.get_or_init(|| Arc::new(config)).clone())
}

/// The roots of the root store features: the platform's store, Mozilla's,
/// or both.
fn feature_roots() -> Result<rustls::RootCertStore> {
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
    Ok(roots)
}

/// The rustls crypto provider wavesock's own configurations use: the
/// process-wide default if one is installed, else aws-lc-rs (feature
/// `aws-lc-rs`), else *ring* (feature `ring`); see the [module
/// docs](crate::tls#the-rustls-crypto-provider). Use it to build a `ClientConfig` of
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
    return Ok(Arc::new(ring_provider()));
    #[cfg(not(any(feature = "ring", feature = "aws-lc-rs")))]
    Err(ConnectError::NoCryptoProvider.into())
}

/// *ring*'s provider, as rustls builds it. rustls 0.23.48 deprecates
/// `crypto::ring::default_provider` (*ring* has no post-quantum key
/// exchange) without a replacement within 0.23: its own choice from crate
/// features calls it under `allow(deprecated)` too, and the `ring`
/// feature promises exactly this provider. The deprecation is kept from
/// wavesock's build, here alone. (The tests use it whatever the features:
/// the dev-dependency on rustls turns *ring* on.)
#[cfg(any(test, all(feature = "ring", not(feature = "aws-lc-rs"))))]
#[allow(deprecated)]
pub(crate) fn ring_provider() -> CryptoProvider {
    rustls::crypto::ring::default_provider()
}

/// `config` offering `alpn` (the caller's list replaced, if there is one
/// to offer).
pub(crate) fn with_alpn(config: Arc<ClientConfig>, alpn: Alpn) -> Arc<ClientConfig> {
    match alpn {
        Alpn::None => config,
        _ => {
            let mut config = (*config).clone();
            config.alpn_protocols = alpn.protocols();
            Arc::new(config)
        }
    }
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

    #[tokio::test]
    async fn a_host_that_is_no_server_name_is_a_connect_error() {
        let config = Arc::new(
            ClientConfig::builder_with_provider(Arc::new(ring_provider()))
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

    #[cfg(not(any(
        feature = "rustls-webpki-roots",
        feature = "rustls-native-roots",
        feature = "rustls-platform-verifier"
    )))]
    #[test]
    fn no_roots_is_a_clear_error() {
        assert!(matches!(
            default_config(),
            Err(Error::Connect(ConnectError::NoRootCertificates(_)))
        ));
    }

    #[cfg(feature = "rustls-webpki-roots")]
    #[test]
    fn default_config_is_built_once() {
        let a = default_config().unwrap();
        let b = default_config().unwrap();
        assert!(Arc::ptr_eq(&a, &b));
    }
}
