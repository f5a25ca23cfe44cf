//! Certificates made at test time, and a wavesock echo server over TLS
//! (tokio-rustls, a dev-dependency, whatever the client's stack).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// *ring*'s provider, which rustls 0.23.48 deprecates (no post-quantum key
/// exchange) with no replacement within 0.23; the tests' certificates are
/// *ring*'s.
#[allow(deprecated)]
pub fn ring() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A self-signed certificate for `names` (host names or IP addresses),
/// with a subject of its own so that two of them never pass for each other.
pub fn self_signed(names: &[&str]) -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
    static SERIAL: AtomicUsize = AtomicUsize::new(0);
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let mut params = rcgen::CertificateParams::new(names).unwrap();
    let n = SERIAL.fetch_add(1, Ordering::Relaxed);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("wavesock test {n}"));
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    let key = PrivatePkcs8KeyDer::from(key.serialize_der());
    (cert.der().clone(), key.into())
}

/// A client configuration trusting only `cert`.
pub fn trusting(cert: &CertificateDer<'static>) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    roots.add(cert.clone()).unwrap();
    let config = ClientConfig::builder_with_provider(ring())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Arc::new(config)
}

/// A TLS acceptor with a self-signed certificate for `names`, and the
/// certificate to trust.
pub fn acceptor(names: &[&str]) -> (TlsAcceptor, CertificateDer<'static>) {
    let (cert, key) = self_signed(names);
    let config = ServerConfig::builder_with_provider(ring())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .unwrap();
    (TlsAcceptor::from(Arc::new(config)), cert)
}

/// A wavesock echo server behind TLS with a self-signed certificate for
/// `names`; returns its address and the certificate to trust.
pub async fn tls_echo_server(names: &[&str]) -> (SocketAddr, CertificateDer<'static>) {
    let (acceptor, cert) = acceptor(names);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                // A client refusing the certificate ends the TLS handshake.
                if let Ok(tls) = acceptor.accept(tcp).await {
                    super::echo(tls).await;
                }
            });
        }
    });
    (addr, cert)
}

/// A native-tls connector trusting only `cert` (and the system's roots,
/// which do not include it).
#[cfg(feature = "native-tls")]
pub fn native_trusting(cert: &CertificateDer<'static>) -> wavesock::Connector {
    let cert = wavesock::native_tls::Certificate::from_der(cert).unwrap();
    let connector = wavesock::native_tls::TlsConnector::builder()
        .add_root_certificate(cert)
        .build()
        .unwrap();
    wavesock::Connector::NativeTls(connector)
}
