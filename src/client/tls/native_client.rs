//! native-tls: the connector the feature builds, the handshake and its
//! errors.

use std::sync::OnceLock;

use native_tls::TlsConnector;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_native_tls::TlsStream;

use crate::client::alpn::Alpn;
use crate::error::ConnectError;
use crate::error::Result;

/// The connector for `alpn` with the system's trust store, built once per
/// ALPN offer: building one loads the store, which reads files.
pub(crate) fn default_connector(alpn: Alpn) -> Result<TlsConnector> {
    static BUILT: [OnceLock<TlsConnector>; 4] = [const { OnceLock::new() }; 4];
    let slot = &BUILT[match alpn {
        Alpn::None => 0,
        Alpn::H2Only => 1,
        Alpn::H2OrHttp1 => 2,
        Alpn::Http1Only => 3,
    }];
    if let Some(connector) = slot.get() {
        return Ok(connector.clone());
    }
    let protocols = alpn.protocols();
    let protocols: Vec<&str> = protocols
        .iter()
        .map(|p| std::str::from_utf8(p).expect("ALPN names are ASCII"))
        .collect();
    let mut builder = TlsConnector::builder();
    if !protocols.is_empty() {
        builder.request_alpns(&protocols);
    }
    let connector = builder.build().map_err(ConnectError::NativeTls)?;
    Ok(slot.get_or_init(|| connector).clone())
}

/// The TLS handshake over `io` for `host`, which native-tls checks against
/// the server's certificate.
pub(crate) async fn handshake<S>(io: S, host: &str, connector: TlsConnector) -> Result<TlsStream<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    tokio_native_tls::TlsConnector::from(connector)
        .connect(host, io)
        .await
        .map_err(|e| ConnectError::NativeTls(e).into())
}
