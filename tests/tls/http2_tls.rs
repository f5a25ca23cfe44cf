//! The HTTP/2 client over TLS: ALPN picks the protocol, and the client
//! falls back to HTTP/1.1 the way a browser does.
#![cfg(all(feature = "__tls", feature = "http2", feature = "hyper"))]

use crate::support::proxy as proxy_support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::{SinkExt, StreamExt};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use wavesock::http2::{Http2Connection, connect_async_http2_tls_with_config};
// The server is tokio-rustls (a dev-dependency) whatever the client's stack.
use rustls::ServerConfig;
use rustls::pki_types::CertificateDer;
use tokio_rustls::TlsAcceptor;
#[cfg(feature = "rustls")]
use wavesock::ConnectError;
use wavesock::upgrade::{self, Body};
use wavesock::{Config, Connector, Error, Message};

use proxy_support::tls::self_signed;

#[derive(Default)]
struct Seen {
    /// The ALPN protocol of each TLS connection, in order.
    alpn: Mutex<Vec<String>>,
    http2_websockets: AtomicUsize,
}

async fn handle(mut req: Request<Incoming>, seen: Arc<Seen>) -> Result<Response<Body>, Infallible> {
    let (response, websocket) = match upgrade::upgrade(&mut req) {
        Ok(accepted) => accepted,
        Err(refusal) => return Ok(refusal.into_response()),
    };
    if websocket.is_http2() {
        seen.http2_websockets.fetch_add(1, Ordering::SeqCst);
    }
    tokio::spawn(async move {
        let mut ws = websocket.await?;
        while let Some(msg) = ws.next().await {
            let msg = msg?;
            if msg.is_data() {
                ws.send(msg).await?;
            }
        }
        Ok::<_, Error>(())
    });
    Ok(response)
}

/// A TLS server offering `alpn` and, on HTTP/2, RFC 8441 if `rfc8441`.
async fn server(alpn: &[&str], rfc8441: bool) -> (SocketAddr, CertificateDer<'static>, Arc<Seen>) {
    let (cert, key) = self_signed(&["localhost"]);
    let mut config = ServerConfig::builder_with_provider(crate::support::proxy::tls::ring())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .unwrap();
    config.alpn_protocols = alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let seen2 = seen.clone();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let acceptor = acceptor.clone();
            let seen = seen2.clone();
            tokio::spawn(async move {
                // A client whose ALPN offer we refuse fails here.
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let chosen = tls
                    .get_ref()
                    .1
                    .alpn_protocol()
                    .map(|p| String::from_utf8_lossy(p).into_owned())
                    .unwrap_or_default();
                seen.alpn.lock().unwrap().push(chosen);
                let mut builder =
                    hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                if rfc8441 {
                    builder.http2().enable_connect_protocol();
                }
                let service = service_fn(move |req| handle(req, seen.clone()));
                let _ = builder
                    .serve_connection_with_upgrades(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (addr, cert, seen)
}

/// A rustls connector trusting `cert`: the client replaces its ALPN offer
/// as each attempt needs, which the tests without native-tls check.
#[cfg(feature = "rustls")]
fn trust(cert: &CertificateDer<'static>) -> Option<Connector> {
    Some(Connector::Rustls(proxy_support::tls::trusting(cert)))
}

/// A native-tls connector trusting `cert`, offering `h2` then `http/1.1`:
/// its ALPN offer is fixed when built, so it is the caller's to make.
#[cfg(feature = "native-tls")]
fn native_h2(cert: &CertificateDer<'static>) -> Connector {
    let cert = wavesock::native_tls::Certificate::from_der(cert).unwrap();
    let connector = wavesock::native_tls::TlsConnector::builder()
        .add_root_certificate(cert)
        .request_alpns(&["h2", "http/1.1"])
        .build()
        .unwrap();
    Connector::NativeTls(connector)
}

#[cfg(feature = "native-tls")]
#[tokio::test]
async fn a_native_connector_offering_h2_cannot_fall_back_to_http1() {
    // h2 without RFC 8441: the client falls back to HTTP/1.1, and this
    // connector offers h2 again, which the server takes.
    let (addr, cert, _) = server(&["h2", "http/1.1"], false).await;
    let url = format!("wss://localhost:{}/echo", addr.port());
    let err = connect_async_http2_tls_with_config(&url, Config::default(), Some(native_h2(&cert)))
        .await
        .expect_err("no HTTP/1.1 connection to fall back on");
    assert!(
        matches!(err, Error::Connect(wavesock::ConnectError::UnwantedHttp2)),
        "{err:?}"
    );
    assert!(err.to_string().contains("request_alpns"), "{err}");
}

#[cfg(feature = "native-tls")]
#[tokio::test]
async fn native_tls_carries_the_websocket_over_http2() {
    let (addr, cert, seen) = server(&["h2", "http/1.1"], true).await;
    let url = format!("wss://localhost:{}/echo", addr.port());
    let (mut ws, response) =
        connect_async_http2_tls_with_config(&url, Config::default(), Some(native_h2(&cert)))
            .await
            .unwrap();
    assert_eq!(response.status(), 200);
    assert!(ws.get_ref().is_http2());
    echo_once(&mut ws, "over h2, native-tls").await;
    let conn = Http2Connection::connect_tls(&url, Config::default(), Some(native_h2(&cert)))
        .await
        .unwrap();
    let (mut a, _) = conn.websocket(&url).await.unwrap();
    echo_once(&mut a, "a").await;
    assert_eq!(*seen.alpn.lock().unwrap(), ["h2", "h2"]);
    assert_eq!(seen.http2_websockets.load(Ordering::SeqCst), 2);
}

async fn echo_once<S>(ws: &mut wavesock::WebSocketStream<S>, text: &str)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    ws.send(Message::text(text)).await.unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::text(text));
}

#[cfg(feature = "rustls")]
#[tokio::test]
async fn alpn_h2_with_rfc8441_carries_the_websocket_over_http2() {
    let (addr, cert, seen) = server(&["h2", "http/1.1"], true).await;
    let url = format!("wss://localhost:{}/echo", addr.port());
    let (mut ws, response) =
        connect_async_http2_tls_with_config(&url, Config::default(), trust(&cert))
            .await
            .unwrap();
    assert_eq!(response.status(), 200);
    assert!(ws.get_ref().is_http2());
    echo_once(&mut ws, "over h2").await;

    // Several on one connection, each with the connection's TLS.
    let conn = Http2Connection::connect_tls(&url, Config::default(), trust(&cert))
        .await
        .unwrap();
    let (mut a, _) = conn.websocket(&url).await.unwrap();
    let (mut b, _) = conn.websocket(&url).await.unwrap();
    echo_once(&mut a, "a").await;
    echo_once(&mut b, "b").await;
    assert_eq!(*seen.alpn.lock().unwrap(), ["h2", "h2"]);
    assert_eq!(seen.http2_websockets.load(Ordering::SeqCst), 3);
}

#[cfg(feature = "rustls")]
#[tokio::test]
async fn a_tls_connection_refuses_ws_urls_and_other_hosts() {
    let (addr, cert, seen) = server(&["h2"], true).await;
    let port = addr.port();
    let url = format!("wss://localhost:{port}/echo");
    let conn = Http2Connection::connect_tls(&url, Config::default(), trust(&cert))
        .await
        .unwrap();
    // ws:// asks for no TLS; another host is another server.
    for other in [
        format!("ws://localhost:{port}/echo"),
        format!("wss://127.0.0.1:{port}/echo"),
    ] {
        let err = conn.websocket(other.as_str()).await.unwrap_err();
        assert!(
            matches!(
                &err,
                Error::Handshake(wavesock::HandshakeError::InvalidUrl(why))
                    if why.contains("this HTTP/2 connection")
            ),
            "{other}: {err:?}"
        );
    }
    assert_eq!(seen.http2_websockets.load(Ordering::SeqCst), 0);
    let (mut ws, _) = conn.websocket(&url).await.unwrap();
    echo_once(&mut ws, "same origin").await;
}

#[cfg(feature = "rustls")]
#[tokio::test]
async fn a_server_choosing_http1_in_alpn_upgrades_the_same_connection() {
    let (addr, cert, seen) = server(&["http/1.1"], true).await;
    let url = format!("wss://localhost:{}/echo", addr.port());
    let (mut ws, response) =
        connect_async_http2_tls_with_config(&url, Config::default(), trust(&cert))
            .await
            .unwrap();
    assert_eq!(response.status(), 101);
    assert!(!ws.get_ref().is_http2());
    echo_once(&mut ws, "over HTTP/1.1").await;
    assert_eq!(*seen.alpn.lock().unwrap(), ["http/1.1"], "one connection");

    // Offered only h2, this server refuses the TLS handshake itself.
    let err = Http2Connection::connect_tls(&url, Config::default(), trust(&cert))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Connect(ConnectError::Tls(wavesock::rustls::Error::AlertReceived(
                wavesock::rustls::AlertDescription::NoApplicationProtocol
            )))
        ),
        "{err:?}"
    );
}

#[cfg(feature = "rustls")]
#[tokio::test]
async fn a_server_without_alpn_is_no_http2_connection() {
    let (addr, cert, seen) = server(&[], true).await;
    let url = format!("wss://localhost:{}/echo", addr.port());
    let err = Http2Connection::connect_tls(&url, Config::default(), trust(&cert))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Connect(ConnectError::Http2NotNegotiated)),
        "{err:?}"
    );
    // connect_async_http2 upgrades that same kind of connection instead.
    let (mut ws, _) = connect_async_http2_tls_with_config(&url, Config::default(), trust(&cert))
        .await
        .unwrap();
    assert!(!ws.get_ref().is_http2());
    echo_once(&mut ws, "no ALPN").await;
    assert_eq!(seen.alpn.lock().unwrap().len(), 2);
}

#[cfg(feature = "rustls")]
#[tokio::test]
async fn http2_without_rfc8441_falls_back_to_a_new_http1_connection() {
    let (addr, cert, seen) = server(&["h2", "http/1.1"], false).await;
    let url = format!("wss://localhost:{}/echo", addr.port());
    let (mut ws, response) =
        connect_async_http2_tls_with_config(&url, Config::default(), trust(&cert))
            .await
            .unwrap();
    assert_eq!(response.status(), 101);
    assert!(!ws.get_ref().is_http2());
    echo_once(&mut ws, "fell back").await;
    assert_eq!(*seen.alpn.lock().unwrap(), ["h2", "http/1.1"]);

    let conn = Http2Connection::connect_tls(&url, Config::default(), trust(&cert))
        .await
        .unwrap();
    assert!(!conn.supports_websockets());
    let err = conn.websocket(&url).await.unwrap_err();
    assert!(
        matches!(err, Error::Connect(ConnectError::Http2WebSocketsDisabled)),
        "{err:?}"
    );
    assert_eq!(seen.http2_websockets.load(Ordering::SeqCst), 0);
}
