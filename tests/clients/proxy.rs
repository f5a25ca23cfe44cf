//! Connecting through HTTP CONNECT and SOCKS5 proxies started in the test on
//! loopback, for ws:// and (with the `rustls` feature) wss://.

use crate::support::proxy as proxy_support;

use std::collections::HashMap;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use http::StatusCode;
use wavesock::proxy::Proxy;
use wavesock::{Config, ConnectError, Error, Message};

use proxy_support::{
    closed_port, echo_server, http_proxy, scripted_server, silent_server, socks5_proxy,
};

fn via(proxy: Proxy) -> Config {
    Config::default()
        .proxy(proxy)
        .connect_timeout(Some(Duration::from_secs(5)))
}

fn connect_error<T>(r: wavesock::Result<T>) -> ConnectError {
    match r {
        Err(Error::Connect(e)) => e,
        Err(other) => panic!("expected a connect error, got {other:?}"),
        Ok(_) => panic!("expected a connect error, got a connection"),
    }
}

/// Connects to `url` with `config` and checks an echo round trip.
async fn round_trip(url: &str, config: Config) {
    let (mut ws, response) = wavesock::connect_async_with_config(url, config)
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SWITCHING_PROTOCOLS);
    ws.send(Message::text("through the proxy")).await.unwrap();
    assert_eq!(
        ws.next().await.unwrap().unwrap(),
        Message::text("through the proxy")
    );
    ws.close(None).await.unwrap();
}

#[tokio::test]
async fn http_proxy_without_auth_tunnels_ws() {
    let server = echo_server().await;
    let (proxy, seen) = http_proxy(None).await;
    let url = format!("ws://localhost:{}/chat", server.port());
    round_trip(&url, via(Proxy::http(&format!("http://{proxy}")))).await;
    // The proxy got the name, not an address the client resolved.
    assert_eq!(seen.all(), [(format!("localhost:{}", server.port()), 0)]);
}

#[tokio::test]
async fn http_proxy_with_basic_auth_tunnels_ws() {
    let server = echo_server().await;
    let (proxy, seen) = http_proxy(Some(("alice", "p@ss:word"))).await;
    let url = format!("ws://127.0.0.1:{}/", server.port());
    // Percent-encoded in the URL...
    round_trip(
        &url,
        via(Proxy::http(&format!("http://alice:p%40ss%3Aword@{proxy}"))),
    )
    .await;
    // ... or given apart.
    let p = Proxy::http(&format!("http://{proxy}")).credentials("alice", "p@ss:word");
    round_trip(&url, via(p)).await;
    assert_eq!(seen.all().len(), 2);
}

#[tokio::test]
async fn http_proxy_refusing_credentials_is_a_407() {
    let server = echo_server().await;
    let (proxy, seen) = http_proxy(Some(("alice", "right"))).await;
    let url = format!("ws://127.0.0.1:{}/", server.port());
    for p in [
        Proxy::http(&format!("http://alice:wrong@{proxy}")),
        Proxy::http(&format!("http://{proxy}")),
    ] {
        let err = connect_error(wavesock::connect_async_with_config(&url, via(p)).await);
        assert!(
            matches!(
                err,
                ConnectError::ProxyStatus(StatusCode::PROXY_AUTHENTICATION_REQUIRED)
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("407"), "{err}");
    }
    assert!(seen.all().is_empty());
}

#[tokio::test]
async fn http_proxy_failing_to_reach_the_server_is_its_status() {
    let (proxy, _) = http_proxy(None).await;
    let url = format!("ws://127.0.0.1:{}/", closed_port().await);
    let err = connect_error(
        wavesock::connect_async_with_config(&url, via(Proxy::http(&format!("http://{proxy}"))))
            .await,
    );
    assert!(
        matches!(err, ConnectError::ProxyStatus(StatusCode::BAD_GATEWAY)),
        "{err:?}"
    );
}

#[tokio::test]
async fn socks5_without_auth_tunnels_ws_and_lets_the_proxy_resolve() {
    let server = echo_server().await;
    let (proxy, seen) = socks5_proxy(None).await;
    let url = format!("ws://localhost:{}/", server.port());
    round_trip(&url, via(Proxy::socks5(&format!("socks5://{proxy}")))).await;
    // Address type 3: the host name went to the proxy unresolved.
    assert_eq!(seen.all(), [(format!("localhost:{}", server.port()), 3)]);
    // IP literals go as addresses (type 1).
    let url = format!("ws://127.0.0.1:{}/", server.port());
    round_trip(&url, via(Proxy::from_url(&format!("socks5h://{proxy}")))).await;
    assert_eq!(seen.all()[1], (format!("127.0.0.1:{}", server.port()), 1));
}

#[tokio::test]
async fn socks5_with_username_and_password_tunnels_ws() {
    let server = echo_server().await;
    let (proxy, seen) = socks5_proxy(Some(("bob", "hunter2"))).await;
    let url = format!("ws://localhost:{}/", server.port());
    round_trip(
        &url,
        via(Proxy::socks5(&format!("socks5://bob:hunter2@{proxy}"))),
    )
    .await;
    assert_eq!(seen.all().len(), 1);
}

#[tokio::test]
async fn socks5_refusing_credentials_is_an_auth_failure() {
    let server = echo_server().await;
    let (proxy, seen) = socks5_proxy(Some(("bob", "hunter2"))).await;
    let url = format!("ws://localhost:{}/", server.port());
    let p = Proxy::socks5(&format!("socks5://bob:wrong@{proxy}"));
    let err = connect_error(wavesock::connect_async_with_config(&url, via(p)).await);
    assert!(matches!(err, ConnectError::SocksAuthFailed), "{err:?}");
    // No credentials for a proxy that wants them: no method fits.
    let p = Proxy::socks5(&format!("socks5://{proxy}"));
    let err = connect_error(wavesock::connect_async_with_config(&url, via(p)).await);
    assert!(
        matches!(err, ConnectError::SocksNoAcceptableAuth),
        "{err:?}"
    );
    assert!(seen.all().is_empty());
}

#[tokio::test]
async fn socks5_failing_to_reach_the_server_is_its_reply_code() {
    let (proxy, _) = socks5_proxy(None).await;
    let url = format!("ws://localhost:{}/", closed_port().await);
    let p = Proxy::socks5(&format!("socks5://{proxy}"));
    let err = connect_error(wavesock::connect_async_with_config(&url, via(p)).await);
    assert!(matches!(err, ConnectError::SocksRefused(5)), "{err:?}");
    assert!(err.to_string().contains("connection refused"), "{err}");
}

#[tokio::test]
async fn a_proxy_that_is_down_is_a_tcp_error_naming_it() {
    let port = closed_port().await;
    for p in [
        Proxy::http(&format!("http://127.0.0.1:{port}")),
        Proxy::socks5(&format!("socks5://127.0.0.1:{port}")),
    ] {
        let err =
            connect_error(wavesock::connect_async_with_config("ws://localhost:9/", via(p)).await);
        match err {
            ConnectError::Tcp { addr, source } => {
                assert_eq!(addr.port(), port);
                assert_eq!(source.kind(), std::io::ErrorKind::ConnectionRefused);
            }
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test]
async fn proxies_breaking_protocol_are_protocol_errors() {
    // An answer that never ends its head: stopped at max_handshake_size.
    static ENDLESS: [u8; 20_000] = [b'a'; 20_000];
    let endless = scripted_server(&ENDLESS).await;
    let garbage = scripted_server(b"SSH-2.0-OpenSSH_9.6\r\n").await;
    let closer = scripted_server(b"").await;
    let early_data = scripted_server(b"HTTP/1.1 200 OK\r\n\r\nsurprise").await;
    let not_socks = scripted_server(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
    for p in [
        Proxy::http(&format!("http://{endless}")),
        Proxy::http(&format!("http://{garbage}")),
        Proxy::http(&format!("http://{closer}")),
        Proxy::http(&format!("http://{early_data}")),
        Proxy::socks5(&format!("socks5://{not_socks}")),
        Proxy::socks5(&format!("socks5://{closer}")),
    ] {
        let err = connect_error(
            wavesock::connect_async_with_config("ws://localhost:9/", via(p.clone())).await,
        );
        assert!(
            matches!(err, ConnectError::ProxyProtocol(_)),
            "{p:?}: {err:?}"
        );
    }
}

#[tokio::test]
async fn a_silent_proxy_runs_into_the_connect_timeout() {
    let silent = silent_server().await;
    for p in [
        Proxy::http(&format!("http://{silent}")),
        Proxy::socks5(&format!("socks5://{silent}")),
    ] {
        let config = Config::default()
            .proxy(p)
            .connect_timeout(Some(Duration::from_millis(200)));
        let started = std::time::Instant::now();
        let result = wavesock::connect_async_with_config("ws://localhost:9/", config).await;
        assert!(matches!(result, Err(Error::Connect(ConnectError::Timeout))));
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}

#[tokio::test]
async fn a_bad_proxy_url_is_an_invalid_config_before_any_connection() {
    for p in [
        Proxy::http("http://proxy:notaport"),
        Proxy::from_url("https://proxy"),
    ] {
        let result =
            wavesock::connect_async_with_config("ws://localhost:9/", Config::default().proxy(p))
                .await;
        assert!(matches!(result, Err(Error::InvalidConfig(_))));
    }
}

#[test]
fn environment_selection_over_a_provided_map() {
    let env = HashMap::from([
        ("https_proxy", "socks5://127.0.0.1:1080"),
        ("HTTP_PROXY", "http://user:pw@127.0.0.1:3128"),
        ("NO_PROXY", "internal.example, 10.0.0.0/8, localhost:8080"),
    ]);
    let var = |name: &str| env.get(name).map(|v| v.to_string());
    let pick = |url: &str| Proxy::from_env_vars(&url.parse().unwrap(), var);
    assert_eq!(
        pick("wss://example.com/"),
        Proxy::socks5("socks5://127.0.0.1:1080")
    );
    assert_eq!(
        pick("ws://example.com/"),
        Proxy::http("http://user:pw@127.0.0.1:3128")
    );
    assert!(pick("wss://api.internal.example/").is_none());
    assert!(pick("ws://10.1.2.3:9000/").is_none());
    assert!(pick("ws://localhost:8080/").is_none());
    assert_eq!(
        pick("ws://localhost:8081/"),
        Proxy::http("http://user:pw@127.0.0.1:3128")
    );
    assert!(Proxy::from_env_vars(&"ws://x/".parse().unwrap(), |_| None).is_none());
}

#[cfg(feature = "__tls")]
mod wss {
    use super::*;
    use proxy_support::tls::{self_signed, tls_echo_server};
    use wavesock::{Connector, MaybeTlsStream};

    /// A connector of each TLS stack compiled in, trusting `cert`.
    fn connectors(cert: &rustls::pki_types::CertificateDer<'static>) -> Vec<Connector> {
        vec![
            #[cfg(feature = "rustls")]
            proxy_support::tls::trusting(cert).into(),
            #[cfg(feature = "native-tls")]
            proxy_support::tls::native_trusting(cert),
        ]
    }

    /// Whether `stream` was made by the stack of `connector`.
    fn made_by<S>(connector: &Connector, stream: &MaybeTlsStream<S>) -> bool {
        match (connector, stream) {
            #[cfg(feature = "rustls")]
            (Connector::Rustls(_), MaybeTlsStream::Rustls(_)) => true,
            #[cfg(feature = "native-tls")]
            (Connector::NativeTls(_), MaybeTlsStream::NativeTls(_)) => true,
            _ => false,
        }
    }

    async fn round_trip_tls(url: &str, config: Config, connector: Connector) {
        let (mut ws, _) =
            wavesock::connect_async_tls_with_config(url, config, Some(connector.clone()))
                .await
                .unwrap();
        assert!(made_by(&connector, ws.get_ref()), "{connector:?}");
        ws.send(Message::text("TLS in the tunnel")).await.unwrap();
        assert_eq!(
            ws.next().await.unwrap().unwrap(),
            Message::text("TLS in the tunnel")
        );
        ws.close(None).await.unwrap();
    }

    #[tokio::test]
    async fn wss_through_an_http_proxy_with_and_without_auth() {
        let (server, cert) = tls_echo_server(&["localhost"]).await;
        let url = format!("wss://localhost:{}/", server.port());
        let (open, seen) = http_proxy(None).await;
        let (guarded, _) = http_proxy(Some(("alice", "s3cret"))).await;
        let stacks = connectors(&cert);
        for connector in &stacks {
            let p = Proxy::http(&format!("http://{open}"));
            round_trip_tls(&url, via(p), connector.clone()).await;
            let p = Proxy::http(&format!("http://alice:s3cret@{guarded}"));
            round_trip_tls(&url, via(p), connector.clone()).await;
        }
        let target = (format!("localhost:{}", server.port()), 0);
        assert_eq!(seen.all(), vec![target; stacks.len()]);
    }

    #[tokio::test]
    async fn wss_through_a_socks5_proxy_with_and_without_auth() {
        let (server, cert) = tls_echo_server(&["localhost"]).await;
        let url = format!("wss://localhost:{}/", server.port());
        let (open, seen) = socks5_proxy(None).await;
        let (guarded, _) = socks5_proxy(Some(("bob", "hunter2"))).await;
        let stacks = connectors(&cert);
        for connector in &stacks {
            round_trip_tls(
                &url,
                via(Proxy::socks5(&format!("{open}"))),
                connector.clone(),
            )
            .await;
            let p = Proxy::socks5(&format!("socks5://{guarded}")).credentials("bob", "hunter2");
            round_trip_tls(&url, via(p), connector.clone()).await;
        }
        let target = (format!("localhost:{}", server.port()), 3);
        assert_eq!(seen.all(), vec![target; stacks.len()]);
    }

    #[tokio::test]
    async fn the_certificate_is_checked_inside_the_tunnel() {
        // The proxy is trusted to carry bytes, not to vouch for the server.
        let (server, _) = tls_echo_server(&["localhost"]).await;
        let (other_cert, _) = self_signed(&["localhost"]);
        let (proxy, _) = http_proxy(None).await;
        let url = format!("wss://localhost:{}/", server.port());
        for connector in connectors(&other_cert) {
            let result = wavesock::connect_async_tls_with_config(
                &url,
                via(Proxy::http(&format!("http://{proxy}"))),
                Some(connector),
            )
            .await;
            match connect_error(result) {
                #[cfg(feature = "rustls")]
                ConnectError::Certificate(rustls::Error::InvalidCertificate(_)) => {}
                #[cfg(feature = "native-tls")]
                ConnectError::NativeTls(e) => {
                    assert!(e.to_string().contains("certificate"), "{e}");
                }
                other => panic!("{other:?}"),
            }
        }
    }
}

#[tokio::test]
#[ignore = "asks the system resolver, which may query a name server off this machine"]
async fn a_name_that_does_not_resolve_is_a_dns_error() {
    let err = connect_error(wavesock::connect_async("ws://does-not-exist.invalid/").await);
    assert!(
        matches!(err, ConnectError::Dns { ref host, .. } if host == "does-not-exist.invalid"),
        "{err:?}"
    );
}

#[test]
fn connect_futures_are_send() {
    fn send<T: Send>(_: &T) {}
    let config = Config::default().proxy(Proxy::from_env());
    send(&wavesock::connect_async_with_config(
        "ws://localhost:9/",
        config,
    ));
    #[cfg(feature = "rustls")]
    send(&wavesock::connect_async_tls_with_config(
        "wss://localhost:9/",
        Config::default(),
        None,
    ));
}
