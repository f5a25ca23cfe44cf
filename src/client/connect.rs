//! Opening a client's connection: name resolution, TCP, a proxy tunnel,
//! TLS. The WebSocket handshake then runs over what this returns.

use std::io;
use std::net::{IpAddr, SocketAddr};

use http::Uri;
use tokio::net::TcpStream;

pub(crate) use super::alpn::Alpn;
use super::transport::MaybeTlsStream;
use crate::config::Config;
use crate::deadline::{after, within};
use crate::error::ConnectError;
use crate::error::{HandshakeError, Result};
use crate::handshake::client::target::{is_secure, port_or_default, ws_scheme_is_secure};
#[cfg(feature = "proxy")]
use crate::proxy::tunnel::tunnel;

/// What secures `wss://`: with a TLS feature, the caller's connector or
/// the one the features choose.
#[cfg(feature = "__tls")]
pub(crate) type Tls = Option<super::tls::Connector>;
/// Without a TLS feature there is nothing to choose.
#[cfg(not(feature = "__tls"))]
pub(crate) type Tls = ();

/// Refuses a URL whose scheme is not `ws` or `wss`: nothing to connect to.
/// (Without a scheme, [`open`] refuses it: it has no host either.)
pub(crate) fn check_scheme(uri: &Uri) -> Result<(), ConnectError> {
    match uri.scheme_str() {
        Some(s) if ws_scheme_is_secure(s).is_none() => {
            Err(ConnectError::UnsupportedScheme(s.to_owned()))
        }
        _ => Ok(()),
    }
}

/// Opens the transport for a `ws://` or `wss://` URL within
/// `config.client.connect_timeout`.
pub(crate) async fn open(
    uri: &Uri,
    config: &Config,
    tls: Tls,
    alpn: Alpn,
) -> Result<MaybeTlsStream<TcpStream>> {
    let secure = is_secure(uri);
    // prepare_request accepts ws://, wss:// or a bare path with a Host header.
    let Some(host) = uri.host().filter(|_| uri.scheme().is_some()) else {
        return Err(
            HandshakeError::InvalidUrl("connect_async needs a ws:// or wss:// URL".into()).into(),
        );
    };
    // IPv6 literals come bracketed in URLs but not in socket addresses.
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = port_or_default(uri)?;
    // Settle everything that needs no network first, so that a bad
    // configuration fails at once.
    #[cfg(feature = "__tls")]
    let prepared = if secure {
        Some(super::tls::prepare(tls, alpn)?)
    } else {
        None
    };
    #[cfg(not(feature = "__tls"))]
    {
        let ((), _) = (tls, alpn);
        if secure {
            return Err(ConnectError::UnsupportedScheme("wss".into()).into());
        }
    }
    #[cfg(feature = "proxy")]
    let proxy = config.client.proxy.server_for(uri)?;

    let deadline = after(config.client.connect_timeout);
    let opening = async {
        #[cfg(feature = "proxy")]
        let tcp = match &proxy {
            Some(p) => {
                let mut tcp = tcp_connect(&p.host, p.port).await?;
                tunnel(&mut tcp, p, host, port, config.handshake.max_size).await?;
                tcp
            }
            None => tcp_connect(host, port).await?,
        };
        #[cfg(not(feature = "proxy"))]
        let tcp = tcp_connect(host, port).await?;
        tcp.set_nodelay(true)?;
        #[cfg(feature = "__tls")]
        if let Some(prepared) = prepared {
            let stream = super::tls::handshake(tcp, host, prepared).await?;
            // Only a caller's native-tls connector can offer h2 on an
            // HTTP/1.1 attempt: wavesock sets every other offer itself.
            #[cfg(feature = "native-tls")]
            if matches!(alpn, Alpn::None | Alpn::Http1Only) && stream.is_h2() {
                return Err(ConnectError::UnwantedHttp2.into());
            }
            return Ok(stream);
        }
        Ok(MaybeTlsStream::Plain(tcp))
    };
    within(deadline, opening)
        .await
        .ok_or(ConnectError::Timeout)?
}

/// Resolves `host` and connects to its addresses in turn.
async fn tcp_connect(host: &str, port: u16) -> Result<TcpStream> {
    let addrs = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => addresses(
            host,
            tokio::net::lookup_host((host, port))
                .await
                .map(Iterator::collect),
        )?,
    };
    let mut last = None;
    for addr in addrs {
        match TcpStream::connect(addr).await {
            Ok(tcp) => return Ok(tcp),
            Err(e) => last = Some(ConnectError::Tcp { addr, source: e }),
        }
    }
    // `addresses` never returns an empty list.
    Err(last.unwrap_or_else(|| no_address(host)).into())
}

/// The resolver's answer as addresses, or [`ConnectError::Dns`].
fn addresses(
    host: &str,
    found: io::Result<Vec<SocketAddr>>,
) -> Result<Vec<SocketAddr>, ConnectError> {
    match found {
        Ok(addrs) if !addrs.is_empty() => Ok(addrs),
        Ok(_) => Err(no_address(host)),
        Err(source) => Err(ConnectError::Dns {
            host: host.to_owned(),
            source,
        }),
    }
}

fn no_address(host: &str) -> ConnectError {
    ConnectError::Dns {
        host: host.to_owned(),
        source: io::Error::new(io::ErrorKind::NotFound, "the name has no addresses"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_websocket_schemes_are_connected_to() {
        for url in ["ws://h/", "WSS://h/", "/path"] {
            assert!(check_scheme(&url.parse().unwrap()).is_ok(), "{url}");
        }
        for (url, scheme) in [("http://h/", "http"), ("ftp://h/", "ftp")] {
            assert!(matches!(
                check_scheme(&url.parse().unwrap()),
                Err(ConnectError::UnsupportedScheme(s)) if s == scheme
            ));
        }
    }

    #[test]
    fn resolver_failures_are_dns_errors() {
        let failed = io::Error::other("failed to lookup address information");
        assert!(matches!(
            addresses("nope.invalid", Err(failed)),
            Err(ConnectError::Dns { host, .. }) if host == "nope.invalid"
        ));
        assert!(matches!(
            addresses("empty.test", Ok(vec![])),
            Err(ConnectError::Dns { .. })
        ));
        let one = vec![SocketAddr::from(([127, 0, 0, 1], 80))];
        assert_eq!(addresses("localhost", Ok(one.clone())).unwrap(), one);
    }

    #[tokio::test]
    async fn refused_connections_name_the_address() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        match tcp_connect("127.0.0.1", port).await {
            Err(crate::Error::Connect(ConnectError::Tcp { addr, source })) => {
                assert_eq!(addr.port(), port);
                assert_eq!(source.kind(), io::ErrorKind::ConnectionRefused);
            }
            other => panic!("{other:?}"),
        }
    }
}
