//! The client side of the opening handshake and the connect entry points.

// Callbacks spell out tokio-tungstenite's `Result<Response<()>, Response<Option<String>>>`.
#![allow(clippy::result_large_err)]

use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use http::{Request, Response, StatusCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use wavesock::handshake::derive_accept_key;
use wavesock::handshake::server::ErrorResponse;
use wavesock::{
    ClientRequestBuilder, CloseCode, CloseFrame, Config, ConnectError, Error, HandshakeError,
    Message, Subprotocols,
};

use crate::support::{Counting, read_head, server_frame};

fn handshake_error<T>(r: wavesock::Result<T>) -> HandshakeError {
    match r {
        Err(Error::Handshake(e)) => e,
        Err(other) => panic!("expected a handshake error, got {other:?}"),
        Ok(_) => panic!("expected a handshake error, got a connection"),
    }
}

fn connect_error<T>(r: wavesock::Result<T>) -> ConnectError {
    match r {
        Err(Error::Connect(e)) => e,
        Err(other) => panic!("expected a connect error, got {other:?}"),
        Ok(_) => panic!("expected a connect error, got a connection"),
    }
}

/// A one-connection raw server: reads the request head, hands it to
/// `answer`, writes what `answer` returns, then holds the connection until
/// the client leaves.
async fn raw_server<F>(answer: F) -> (String, tokio::task::JoinHandle<String>)
where
    F: FnOnce(&str) -> Vec<u8> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}/socket", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let (mut tcp, _) = listener.accept().await.unwrap();
        let head = read_head(&mut tcp).await;
        tcp.write_all(&answer(&head)).await.unwrap();
        let mut rest = Vec::new();
        let _ = tcp.read_to_end(&mut rest).await;
        head
    });
    (url, task)
}

/// The key the client sent in `head`.
fn key_of(head: &str) -> String {
    head.lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("sec-websocket-key")
                .then(|| value.trim().to_owned())
        })
        .expect("request has a key")
}

fn switching(head: &str, extra: &str) -> Vec<u8> {
    let accept = derive_accept_key(key_of(head).as_bytes());
    format!("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n{extra}\r\n")
        .into_bytes()
}

#[tokio::test]
async fn connect_to_wavesock_server_and_echo() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut ws = wavesock::accept_async(tcp).await.unwrap();
        while let Some(msg) = ws.next().await {
            let msg = msg.unwrap();
            if msg.is_data() {
                ws.send(msg).await.unwrap();
            }
        }
    });
    let (mut ws, response) = wavesock::connect_async(format!("ws://{addr}/echo"))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SWITCHING_PROTOCOLS);
    assert!(response.body().is_none());
    ws.send(Message::text("hello")).await.unwrap();
    ws.send(Message::binary(vec![0u8, 1, 2])).await.unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("hello"));
    assert_eq!(
        ws.next().await.unwrap().unwrap(),
        Message::binary(vec![0u8, 1, 2])
    );
    ws.send(Message::Close(Some(CloseFrame::new(
        CloseCode::NORMAL,
        "done",
    ))))
    .await
    .unwrap();
    match ws.next().await {
        Some(Ok(Message::Close(Some(frame)))) => assert_eq!(frame.code, CloseCode::NORMAL),
        other => panic!("{other:?}"),
    }
    assert!(ws.next().await.is_none());
    server.await.unwrap();
}

#[tokio::test]
async fn custom_headers_path_and_query_reach_the_server() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(None));
        let seen2 = seen.clone();
        let callback =
            move |req: &Request<()>, resp: Response<()>| -> Result<Response<()>, ErrorResponse> {
                *seen2.lock().unwrap() = Some((req.uri().to_string(), req.headers().clone()));
                Ok(resp)
            };
        let _ws = wavesock::accept_hdr_async(tcp, callback).await.unwrap();
        seen.lock().unwrap().take().unwrap()
    });
    let request = Request::builder()
        .uri(format!("ws://{addr}/room/7?user=ann"))
        .header("Authorization", "Bearer t0k3n")
        .header("Origin", "https://example.com")
        .header("Cookie", "a=b")
        .body(())
        .unwrap();
    let (_ws, _) = wavesock::connect_async(request).await.unwrap();
    let (uri, headers) = server.await.unwrap();
    assert_eq!(uri, "/room/7?user=ann");
    assert_eq!(headers["authorization"], "Bearer t0k3n");
    assert_eq!(headers["origin"], "https://example.com");
    assert_eq!(headers["cookie"], "a=b");
    assert_eq!(headers["host"], addr.to_string());
}

#[tokio::test]
async fn client_request_builder_headers_and_subprotocols_reach_the_server() {
    let (url, server) =
        raw_server(|head| switching(head, "Sec-WebSocket-Protocol: chat.v1\r\n")).await;
    let request = ClientRequestBuilder::new(url.as_str())
        .with_header("Authorization", "Bearer t0k3n")
        .with_header("Origin", "https://example.com")
        .with_sub_protocol("chat.v2")
        .with_sub_protocol("chat.v1");
    let (ws, response) = wavesock::connect_async(request).await.unwrap();
    assert_eq!(response.headers()["sec-websocket-protocol"], "chat.v1");
    // The raw server returns once the client has left.
    drop(ws);
    let head = server.await.unwrap();
    assert!(head.starts_with("GET /socket HTTP/1.1\r\n"), "{head}");
    let lower = head.to_ascii_lowercase();
    for line in [
        "authorization: bearer t0k3n\r\n",
        "origin: https://example.com\r\n",
        "sec-websocket-protocol: chat.v2, chat.v1\r\n",
        "upgrade: websocket\r\n",
    ] {
        assert!(lower.contains(line), "{line:?} missing from {head}");
    }
}

#[tokio::test]
async fn client_request_builder_mistakes_fail_before_connecting() {
    // Nothing listens on port 1; a connection attempt would be refused.
    let bad = ClientRequestBuilder::new("ws://127.0.0.1:1/").with_header("Bad Name", "x");
    assert!(matches!(
        handshake_error(wavesock::connect_async(bad).await),
        HandshakeError::InvalidRequest(_)
    ));
    let bad = ClientRequestBuilder::new("ws://127.0.0.1:1/ with space");
    assert!(matches!(
        handshake_error(wavesock::connect_async(bad).await),
        HandshakeError::InvalidUrl(_)
    ));
}

#[cfg(feature = "url")]
#[tokio::test]
async fn connect_async_takes_a_url_crate_url() {
    // Borrowed and owned, each to a one-connection server.
    for owned in [false, true] {
        let (url, server) = raw_server(|head| switching(head, "")).await;
        let url = url::Url::parse(&format!("{url}?owned={owned}")).unwrap();
        let (ws, _) = if owned {
            wavesock::connect_async(url).await.unwrap()
        } else {
            wavesock::connect_async(&url).await.unwrap()
        };
        drop(ws);
        let head = server.await.unwrap();
        let line = format!("GET /socket?owned={owned} HTTP/1.1\r\n");
        assert!(head.starts_with(&line), "{head}");
    }
}

#[tokio::test]
async fn server_answering_200_is_an_error_with_status_headers_and_body() {
    let (url, server) = raw_server(|_| {
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Served-By: plain-http\r\n\r\nhello".to_vec()
    })
    .await;
    let err = handshake_error(wavesock::connect_async(url).await);
    match err {
        HandshakeError::UnexpectedStatus { status, response } => {
            assert_eq!(status, StatusCode::OK);
            assert_eq!(response.headers()["x-served-by"], "plain-http");
            assert_eq!(response.body().as_deref(), Some(&b"hello"[..]));
        }
        other => panic!("{other:?}"),
    }
    server.await.unwrap();
}

#[tokio::test]
async fn refusal_body_is_bounded() {
    // No Content-Length: the body runs to the close, but is kept only up to
    // the cap.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let (mut tcp, _) = listener.accept().await.unwrap();
        read_head(&mut tcp).await;
        tcp.write_all(b"HTTP/1.1 403 Forbidden\r\n\r\n")
            .await
            .unwrap();
        let _ = tcp.write_all(&vec![b'x'; 1 << 20]).await;
    });
    let config = Config::default().max_handshake_size(1024);
    let err = handshake_error(wavesock::connect_async_with_config(url, config).await);
    match err {
        HandshakeError::UnexpectedStatus { status, response } => {
            assert_eq!(status, StatusCode::FORBIDDEN);
            assert_eq!(response.body().as_ref().map(Vec::len), Some(1024));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn refusal_from_wavesock_server_reaches_the_client() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let callback = |_: &Request<()>, _: Response<()>| -> Result<Response<()>, ErrorResponse> {
            Err(Response::builder()
                .status(StatusCode::UNAUTHORIZED)
                .header("www-authenticate", "Bearer")
                .body(Some("log in".into()))
                .unwrap())
        };
        let _ = wavesock::accept_hdr_async(tcp, callback).await;
    });
    let err = handshake_error(wavesock::connect_async(format!("ws://{addr}/")).await);
    match err {
        HandshakeError::UnexpectedStatus { status, response } => {
            assert_eq!(status, StatusCode::UNAUTHORIZED);
            assert_eq!(response.headers()["www-authenticate"], "Bearer");
            assert_eq!(response.body().as_deref(), Some(&b"log in"[..]));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn wrong_accept_key_is_refused() {
    let (url, _server) = raw_server(|_| {
        // The RFC's accept value, for a key the client did not send.
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n".to_vec()
    })
    .await;
    let err = handshake_error(wavesock::connect_async(url).await);
    assert!(
        matches!(
            err,
            HandshakeError::BadHeader {
                name: "Sec-WebSocket-Accept",
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn missing_upgrade_or_connection_is_refused() {
    for (drop_line, name) in [
        ("Upgrade: websocket\r\n", "Upgrade"),
        ("Connection: Upgrade\r\n", "Connection"),
    ] {
        let (url, _server) = raw_server(move |head| {
            String::from_utf8(switching(head, ""))
                .unwrap()
                .replace(drop_line, "")
                .into_bytes()
        })
        .await;
        match handshake_error(wavesock::connect_async(url).await) {
            HandshakeError::BadHeader { name: got, .. } => assert_eq!(got, name),
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test]
async fn response_header_case_variants_are_accepted() {
    for style in 0..3 {
        let (url, _server) = raw_server(move |head| {
            let accept = derive_accept_key(key_of(head).as_bytes());
            let raw = match style {
                0 => format!("HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\nsec-websocket-accept: {accept}\r\n\r\n"),
                1 => format!("HTTP/1.1 101 Switching Protocols\r\nUPGRADE: WEBSOCKET\r\nCONNECTION: UPGRADE\r\nSEC-WEBSOCKET-ACCEPT: {accept}\r\n\r\n"),
                _ => format!("HTTP/1.1 101 Web Socket Protocol Handshake\r\nUpgrade: WebSocket\r\nConnection: keep-alive, Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"),
            };
            raw.into_bytes()
        })
        .await;
        assert!(wavesock::connect_async(url).await.is_ok(), "style {style}");
    }
}

#[tokio::test]
async fn response_split_byte_by_byte_then_a_pipelined_frame() {
    let (client, server) = tokio::io::duplex(64);
    let server = tokio::spawn(async move {
        let mut server = server;
        let head = read_head(&mut server).await;
        let mut bytes = switching(&head, "");
        bytes.extend_from_slice(&server_frame(0x1, b"welcome"));
        for b in &bytes {
            server.write_all(&[*b]).await.unwrap();
            tokio::task::yield_now().await;
        }
        (server, bytes.len())
    });
    let (client, read) = Counting::new(client, 1);
    let (mut ws, response) = wavesock::client_async("ws://localhost/", client)
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SWITCHING_PROTOCOLS);
    // The frame sent right after the 101 is not lost.
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("welcome"));
    let (_server, sent) = server.await.unwrap();
    assert_eq!(read.load(Ordering::SeqCst), sent);
}

#[tokio::test]
async fn frame_in_the_same_packet_as_the_101_is_decoded() {
    let (url, _server) = raw_server(|head| {
        let mut bytes = switching(head, "");
        bytes.extend_from_slice(&server_frame(0x2, b"\x01\x02"));
        bytes
    })
    .await;
    let (mut ws, _) = wavesock::connect_async(url).await.unwrap();
    assert_eq!(
        ws.next().await.unwrap().unwrap(),
        Message::binary(vec![1u8, 2])
    );
}

#[tokio::test]
async fn subprotocol_negotiated_with_wavesock_server() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        for _ in 0..2 {
            let (tcp, _) = listener.accept().await.unwrap();
            let protocols = Subprotocols::new(["chat.v2", "chat.v1"]).required(true);
            let _ = wavesock::accept_hdr_async(tcp, protocols).await;
        }
    });
    let request = Request::builder()
        .uri(format!("ws://{addr}/"))
        .header("Sec-WebSocket-Protocol", "chat.v1, chat.v2")
        .body(())
        .unwrap();
    let (_ws, response) = wavesock::connect_async(request).await.unwrap();
    assert_eq!(response.headers()["sec-websocket-protocol"], "chat.v2");

    let request = Request::builder()
        .uri(format!("ws://{addr}/"))
        .header("Sec-WebSocket-Protocol", "mqtt")
        .body(())
        .unwrap();
    match handshake_error(wavesock::connect_async(request).await) {
        HandshakeError::UnexpectedStatus { status, .. } => {
            assert_eq!(status, StatusCode::BAD_REQUEST)
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn subprotocol_not_offered_is_refused() {
    for offered in [None, Some("chat")] {
        let (url, _server) =
            raw_server(|head| switching(head, "Sec-WebSocket-Protocol: superchat\r\n")).await;
        let mut request = Request::builder().uri(url);
        if let Some(p) = offered {
            request = request.header("Sec-WebSocket-Protocol", p);
        }
        let err = handshake_error(wavesock::connect_async(request.body(()).unwrap()).await);
        assert!(
            matches!(
                err,
                HandshakeError::BadHeader {
                    name: "Sec-WebSocket-Protocol",
                    ..
                }
            ),
            "{err:?}"
        );
    }
}

#[tokio::test]
async fn extension_not_offered_is_refused() {
    let (url, _server) =
        raw_server(|head| switching(head, "Sec-WebSocket-Extensions: permessage-deflate\r\n"))
            .await;
    let err = handshake_error(wavesock::connect_async(url).await);
    assert!(matches!(
        err,
        HandshakeError::BadHeader {
            name: "Sec-WebSocket-Extensions",
            ..
        }
    ));
}

#[tokio::test]
async fn request_on_the_wire_is_a_valid_handshake() {
    let (url, server) = raw_server(|head| switching(head, "")).await;
    let (ws, _) = wavesock::connect_async(&url).await.unwrap();
    drop(ws);
    let head = server.await.unwrap();
    assert!(head.starts_with("GET /socket HTTP/1.1\r\n"), "{head}");
    let lower = head.to_ascii_lowercase();
    for line in [
        "upgrade: websocket\r\n",
        "connection: upgrade\r\n",
        "sec-websocket-version: 13\r\n",
    ] {
        assert!(lower.contains(line), "{head}");
    }
    assert_eq!(key_of(&head).len(), 24);
}

#[tokio::test]
async fn response_header_flood_is_refused_at_the_cap() {
    let (client, server) = tokio::io::duplex(8 << 10);
    tokio::spawn(async move {
        let mut server = server;
        read_head(&mut server).await;
        let _ = server
            .write_all(b"HTTP/1.1 101 Switching Protocols\r\nX: ")
            .await;
        let _ = server.write_all(&vec![b'a'; 1 << 20]).await;
    });
    let (client, read) = Counting::new(client, usize::MAX);
    let config = Config::default().max_handshake_size(2048);
    let err = handshake_error(wavesock::client_async_with_config("ws://h/", client, config).await);
    assert!(matches!(err, HandshakeError::TooLarge(2048)), "{err:?}");
    assert!(read.load(Ordering::SeqCst) <= 2048);
}

#[tokio::test(start_paused = true)]
async fn silent_server_times_out() {
    let (client, _server) = tokio::io::duplex(4096);
    let config = Config::default().handshake_timeout(Some(Duration::from_secs(3)));
    let started = tokio::time::Instant::now();
    let err = handshake_error(wavesock::client_async_with_config("ws://h/", client, config).await);
    assert!(matches!(err, HandshakeError::Timeout), "{err:?}");
    assert_eq!(started.elapsed().as_secs(), 3);
}

#[tokio::test]
async fn server_closing_mid_response_is_connection_closed() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let (mut tcp, _) = listener.accept().await.unwrap();
        read_head(&mut tcp).await;
        tcp.write_all(b"HTTP/1.1 101 Switching").await.unwrap();
    });
    let err = handshake_error(wavesock::connect_async(url).await);
    assert!(matches!(err, HandshakeError::ConnectionClosed), "{err:?}");
}

#[cfg(not(feature = "__tls"))]
#[tokio::test]
async fn wss_is_refused_clearly_without_a_tls_feature() {
    // Nothing listens on this port; the refusal comes before connecting.
    let err = connect_error(wavesock::connect_async("wss://127.0.0.1:1/").await);
    match err {
        ConnectError::UnsupportedScheme(s) => assert_eq!(s, "wss"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn bad_urls_are_refused() {
    for url in ["http://127.0.0.1:1/", "ftp://x/"] {
        assert!(matches!(
            connect_error(wavesock::connect_async(url).await),
            ConnectError::UnsupportedScheme(_)
        ));
    }
    for url in ["not a url", "/just/a/path"] {
        assert!(
            matches!(
                handshake_error(wavesock::connect_async(url).await),
                HandshakeError::InvalidUrl(_)
            ),
            "{url}"
        );
    }
    // Over a stream of your own nothing is connected to: a scheme that is
    // not WebSocket is a bad URL for the request.
    let (io, _peer) = tokio::io::duplex(64);
    assert!(matches!(
        handshake_error(wavesock::client_async("http://127.0.0.1:1/", io).await),
        HandshakeError::InvalidUrl(_)
    ));
}

#[tokio::test]
async fn invalid_port_is_invalid_url_before_any_connection() {
    // Were the port replaced by 80, each URL would be tried: a name under
    // `.invalid` would fail to resolve (Error::Connect(Dns)), an address
    // would be connected to. A listener posing as the proxy shows that no
    // TCP connection is opened at all.
    let watcher = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = format!("http://{}", watcher.local_addr().unwrap());
    let config = Config::default()
        .proxy(wavesock::proxy::Proxy::http(&proxy))
        .connect_timeout(Some(Duration::from_secs(2)));
    for url in [
        "ws://nowhere.invalid:99999/",
        "ws://nowhere.invalid:abc/",
        "ws://127.0.0.1:99999/",
        "ws://127.0.0.1:abc/",
        "ws://[::1]:65536/",
    ] {
        let err = handshake_error(wavesock::connect_async(url).await);
        assert!(
            matches!(err, HandshakeError::InvalidUrl(_)),
            "{url}: {err:?}"
        );
        let err = handshake_error(wavesock::connect_async_with_config(url, config.clone()).await);
        assert!(
            matches!(err, HandshakeError::InvalidUrl(_)),
            "{url}: {err:?}"
        );
    }
    let nobody = tokio::time::timeout(Duration::from_millis(100), watcher.accept()).await;
    assert!(nobody.is_err(), "a connection was opened: {nobody:?}");
}

#[tokio::test]
async fn connection_refused_is_a_connect_error_naming_the_address() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap().port()
    };
    match wavesock::connect_async(format!("ws://127.0.0.1:{port}/")).await {
        Err(Error::Connect(wavesock::ConnectError::Tcp { addr, source })) => {
            assert_eq!(addr.port(), port);
            assert_eq!(source.kind(), std::io::ErrorKind::ConnectionRefused);
        }
        Err(other) => panic!("{other:?}"),
        Ok(_) => panic!("connected to a closed port"),
    }
}

#[tokio::test]
async fn client_async_over_a_stream_you_opened() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut ws = wavesock::accept_async(tcp).await.unwrap();
        ws.send(Message::text("hi")).await.unwrap();
        while ws.next().await.is_some() {}
    });
    let tcp = TcpStream::connect(addr).await.unwrap();
    // A bare path with an explicit Host, as over a Unix socket.
    let request = Request::builder()
        .uri("/")
        .header("Host", "localhost")
        .body(())
        .unwrap();
    let (mut ws, _) = wavesock::client_async(request, tcp).await.unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("hi"));
}

// Relies on Linux dropping SYNs to a listener whose backlog is full.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn connect_timeout_fires_when_the_server_never_answers() {
    // A listener that never accepts, with its backlog filled: the kernel
    // drops further SYNs, so connecting hangs.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(1).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut held = Vec::new();
    for _ in 0..8 {
        match tokio::time::timeout(Duration::from_millis(200), TcpStream::connect(addr)).await {
            Ok(Ok(tcp)) => held.push(tcp),
            _ => break,
        }
    }
    let config = Config::default().connect_timeout(Some(Duration::from_millis(300)));
    let started = std::time::Instant::now();
    let result = wavesock::connect_async_with_config(format!("ws://{addr}/"), config).await;
    assert!(
        matches!(connect_error(result), ConnectError::Timeout),
        "after {} held connections",
        held.len()
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}
