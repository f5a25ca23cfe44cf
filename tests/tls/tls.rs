//! wss:// against a wavesock server behind TLS (tokio-rustls), with
//! certificates made by rcgen at test time.
#![cfg(feature = "rustls")]

use crate::support::proxy as proxy_support;

use std::error::Error as _;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use wavesock::rustls::{self, CertificateError};
use wavesock::{Config, ConnectError, Connector, Error, MaybeTlsStream, Message};

use proxy_support::tls::{acceptor, self_signed, tls_echo_server, trusting};

fn connect_error<T>(r: wavesock::Result<T>) -> ConnectError {
    match r {
        Err(Error::Connect(e)) => e,
        Err(other) => panic!("expected a connect error, got {other:?}"),
        Ok(_) => panic!("expected a connect error, got a connection"),
    }
}

fn certificate_error(e: ConnectError) -> CertificateError {
    match e {
        ConnectError::Certificate(rustls::Error::InvalidCertificate(c)) => c,
        other => panic!("expected a certificate error, got {other:?}"),
    }
}

#[tokio::test]
async fn wss_client_and_tls_server_exchange_messages() {
    let (addr, cert) = tls_echo_server(&["localhost", "127.0.0.1"]).await;
    for host in ["localhost", "127.0.0.1"] {
        let url = format!("wss://{host}:{}/echo", addr.port());
        let connector = Connector::Rustls(trusting(&cert));
        let (mut ws, response) =
            wavesock::connect_async_tls_with_config(url, Config::default(), Some(connector))
                .await
                .unwrap();
        assert_eq!(response.status(), 101);
        assert!(matches!(ws.get_ref(), MaybeTlsStream::Rustls(_)));
        ws.send(Message::text("over TLS")).await.unwrap();
        assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("over TLS"));
        // Larger than a TLS record (16 KiB), so it spans several.
        let big = Message::binary(vec![7u8; 100_000]);
        ws.send(big.clone()).await.unwrap();
        assert_eq!(ws.next().await.unwrap().unwrap(), big);
        ws.close(None).await.unwrap();
    }
}

#[tokio::test]
async fn connector_from_a_tokio_rustls_connector() {
    let (addr, cert) = tls_echo_server(&["localhost"]).await;
    let connector = Connector::from(wavesock::tokio_rustls::TlsConnector::from(trusting(&cert)));
    let url = format!("wss://localhost:{}/", addr.port());
    let (mut ws, _) =
        wavesock::connect_async_tls_with_config(url, Config::default(), Some(connector))
            .await
            .unwrap();
    ws.send(Message::text("hi")).await.unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("hi"));
}

#[tokio::test]
async fn untrusted_certificate_is_refused_with_a_certificate_error() {
    let (addr, _served) = tls_echo_server(&["localhost"]).await;
    // Trust a different self-signed certificate than the one served.
    let (other, _) = self_signed(&["localhost"]);
    let url = format!("wss://localhost:{}/", addr.port());
    let result = wavesock::connect_async_tls_with_config(
        &url,
        Config::default(),
        Some(trusting(&other).into()),
    )
    .await;
    let err = connect_error(result);
    let shown = err.to_string();
    assert!(shown.contains("certificate"), "{shown}");
    // The rustls error is kept as the source.
    assert!(err.source().is_some_and(|s| s.is::<rustls::Error>()));
    let err = certificate_error(err);
    assert!(matches!(err, CertificateError::UnknownIssuer), "{err:?}");
}

// With native-tls on, `connect_async` uses it (tests/tls/tls_stacks.rs).
#[cfg(all(feature = "rustls-webpki-roots", not(feature = "native-tls")))]
#[tokio::test]
async fn default_roots_refuse_a_self_signed_certificate() {
    let (addr, _) = tls_echo_server(&["localhost"]).await;
    let err =
        connect_error(wavesock::connect_async(format!("wss://localhost:{}/", addr.port())).await);
    assert!(matches!(
        certificate_error(err),
        CertificateError::UnknownIssuer
    ));
}

#[tokio::test]
async fn wrong_host_name_is_refused() {
    let (addr, cert) = tls_echo_server(&["example.test"]).await;
    for url in [
        format!("wss://localhost:{}/", addr.port()),
        format!("wss://127.0.0.1:{}/", addr.port()),
    ] {
        let result = wavesock::connect_async_tls_with_config(
            &url,
            Config::default(),
            Some(trusting(&cert).into()),
        )
        .await;
        let err = certificate_error(connect_error(result));
        assert!(
            matches!(
                err,
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }
            ),
            "{url}: {err:?}"
        );
    }
}

#[tokio::test]
async fn a_plain_server_on_a_wss_url_is_a_tls_error() {
    let addr = proxy_support::echo_server().await;
    let (cert, _) = self_signed(&["localhost"]);
    let url = format!("wss://localhost:{}/", addr.port());
    let result = wavesock::connect_async_tls_with_config(
        url,
        Config::default(),
        Some(trusting(&cert).into()),
    )
    .await;
    match result {
        Err(Error::Connect(ConnectError::Tls(_))) => {}
        // The server may hang up on the ClientHello before rustls sees its 400.
        Err(Error::Io(_)) => {}
        Err(other) => panic!("{other:?}"),
        Ok(_) => panic!("TLS with a plain server"),
    }
}

#[tokio::test]
async fn a_plain_connector_refuses_wss_before_connecting() {
    let result = wavesock::connect_async_tls_with_config(
        "wss://127.0.0.1:1/",
        Config::default(),
        Some(Connector::Plain),
    )
    .await;
    assert!(matches!(
        result,
        Err(Error::Connect(ConnectError::PlainConnectorForWss))
    ));
}

#[tokio::test]
async fn a_plain_connector_still_connects_ws() {
    let addr = proxy_support::echo_server().await;
    let (mut ws, _) = wavesock::connect_async_tls_with_config(
        format!("ws://{addr}/"),
        Config::default(),
        Some(Connector::Plain),
    )
    .await
    .unwrap();
    assert!(matches!(ws.get_ref(), MaybeTlsStream::Plain(_)));
    ws.send(Message::text("plain")).await.unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("plain"));
}

#[cfg(not(any(
    feature = "rustls-webpki-roots",
    feature = "rustls-native-roots",
    feature = "rustls-platform-verifier",
    feature = "native-tls"
)))]
#[tokio::test]
async fn without_a_root_store_wss_needs_a_connector() {
    let err = connect_error(wavesock::connect_async("wss://127.0.0.1:1/").await);
    assert!(
        matches!(err, ConnectError::NoRootCertificates(_)),
        "{err:?}"
    );
    assert!(err.to_string().contains("rustls-webpki-roots"));
}

#[tokio::test]
async fn the_tls_handshake_counts_toward_the_connect_timeout() {
    // Accepts TCP, never answers the ClientHello.
    let addr = proxy_support::silent_server().await;
    let (cert, _) = self_signed(&["localhost"]);
    let config = Config::default().connect_timeout(Some(Duration::from_millis(300)));
    let started = std::time::Instant::now();
    let result = wavesock::connect_async_tls_with_config(
        format!("wss://localhost:{}/", addr.port()),
        config,
        Some(trusting(&cert).into()),
    )
    .await;
    assert!(matches!(result, Err(Error::Connect(ConnectError::Timeout))));
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// The README's echo loop (`feed`, then `next`) behind TLS, with a client
/// that sends a burst and reads only later: replies that rustls buffered
/// while the socket was full must still go out once the client reads,
/// without anything else being written.
#[tokio::test]
async fn fed_replies_over_tls_reach_a_slow_reader() {
    let (acceptor, cert) = acceptor(&["localhost"]);
    // Small socket buffers on both ends (accepted sockets inherit the
    // listener's), so the server's writes stall with the end of the reply
    // inside rustls.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_send_buffer_size(4096).unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(8).unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let tls = acceptor.accept(tcp).await.unwrap();
        let mut ws = wavesock::accept_async(tls).await.unwrap();
        while let Some(Ok(msg)) = ws.next().await {
            if msg.is_data() && ws.feed(msg).await.is_err() {
                break;
            }
        }
    });
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let tcp = socket.connect(addr).await.unwrap();
    let name = wavesock::rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tls = wavesock::tokio_rustls::TlsConnector::from(trusting(&cert))
        .connect(name, tcp)
        .await
        .unwrap();
    let (mut ws, _) = wavesock::client_async("wss://localhost/", tls)
        .await
        .unwrap();
    let payload: Vec<u8> = (0..1usize << 20).map(|i| (i % 251) as u8).collect();
    ws.send(Message::binary(payload.clone())).await.unwrap();
    // The slow reader.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let msg = tokio::time::timeout(Duration::from_secs(10), ws.next())
        .await
        .expect("the whole echo arrives")
        .unwrap()
        .unwrap();
    assert!(msg.into_payload() == payload);
}
