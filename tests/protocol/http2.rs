//! WebSockets over HTTP/2 (RFC 8441): wavesock's hyper upgrade helper as the
//! server, wavesock's HTTP/2 client, and a hand-written HTTP/2 client for
//! the requests no well-behaved client sends.
#![cfg(all(feature = "hyper", feature = "http2"))]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::timeout;
use wavesock::http2::{Http2Connection, connect_async_http2_with_config};
use wavesock::upgrade::{self, Body};
use wavesock::{Config, ConnectError, Error, HandshakeError, Message, Subprotocols};

const LIMIT: Duration = Duration::from_secs(20);

/// What the server saw.
#[derive(Default)]
struct Seen {
    connections: AtomicUsize,
    /// Requests that reached the service, WebSocket or not.
    requests: AtomicUsize,
    http2_websockets: AtomicUsize,
    http1_websockets: AtomicUsize,
    /// How each server-side WebSocket ended: `Ok` or the error's text.
    endings: Mutex<Vec<Result<(), String>>>,
}

#[derive(Clone, Copy, PartialEq)]
enum Serve {
    /// HTTP/2 only (h2c), advertising extended CONNECT.
    Http2,
    /// HTTP/2 only, without the setting.
    Http2NoConnect,
    /// HTTP/1.1 and h2c on one port, without the setting (a server that
    /// never heard of RFC 8441).
    AutoNoConnect,
}

fn config() -> Config {
    #[cfg(feature = "deflate")]
    return Config::default().deflate(wavesock::DeflateConfig::default());
    #[cfg(not(feature = "deflate"))]
    Config::default()
}

async fn handle(mut req: Request<Incoming>, seen: Arc<Seen>) -> Result<Response<Body>, Infallible> {
    seen.requests.fetch_add(1, Ordering::SeqCst);
    let path = req.uri().path().to_owned();
    let protocols = Subprotocols::new(["echo"]).required(path == "/required");
    let (response, websocket) =
        match upgrade::upgrade_hdr_with_config(&mut req, protocols, config()) {
            Ok(accepted) => accepted,
            Err(refusal) => return Ok(refusal.into_response()),
        };
    if websocket.is_http2() {
        seen.http2_websockets.fetch_add(1, Ordering::SeqCst);
    } else {
        seen.http1_websockets.fetch_add(1, Ordering::SeqCst);
    }
    tokio::spawn(async move {
        let ending = async {
            let mut ws = websocket.await?;
            if path == "/half" {
                // Half a frame, then the stream goes away: hyper resets it.
                ws.get_mut()
                    .write_all(&[0x82, 0x7e, 0x03, 0xe8, 1, 2, 3])
                    .await?;
                ws.get_mut().flush().await?;
                return Ok(());
            }
            while let Some(msg) = ws.next().await {
                let msg = msg?;
                if msg.is_data() {
                    ws.send(msg).await?;
                }
            }
            Ok::<_, Error>(())
        }
        .await;
        seen.endings
            .lock()
            .unwrap()
            .push(ending.map_err(|e| e.to_string()));
    });
    Ok(response)
}

async fn server(mode: Serve) -> (SocketAddr, Arc<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let seen2 = seen.clone();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            seen2.connections.fetch_add(1, Ordering::SeqCst);
            let seen = seen2.clone();
            let service = service_fn(move |req| handle(req, seen.clone()));
            let io = TokioIo::new(tcp);
            tokio::spawn(async move {
                match mode {
                    Serve::Http2 | Serve::Http2NoConnect => {
                        let mut builder =
                            hyper::server::conn::http2::Builder::new(TokioExecutor::new());
                        if mode == Serve::Http2 {
                            builder.enable_connect_protocol();
                        }
                        let _ = builder.serve_connection(io, service).await;
                    }
                    Serve::AutoNoConnect => {
                        let builder =
                            hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                        let _ = builder.serve_connection_with_upgrades(io, service).await;
                    }
                }
            });
        }
    });
    (addr, seen)
}

/// An HTTP/2 connection (h2c) to the test server, default config.
async fn h2c(addr: SocketAddr) -> Http2Connection {
    timeout(
        LIMIT,
        Http2Connection::connect(format!("ws://{addr}/"), Config::default()),
    )
    .await
    .unwrap()
    .unwrap()
}

/// Waits until `n` server-side WebSockets have ended.
async fn endings(seen: &Seen, n: usize) -> Vec<Result<(), String>> {
    let deadline = tokio::time::Instant::now() + LIMIT;
    while seen.endings.lock().unwrap().len() < n && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    seen.endings.lock().unwrap().clone()
}

fn payload(len: usize, seed: usize) -> Vec<u8> {
    (0..len).map(|i| ((i * 7 + seed) % 251) as u8).collect()
}

#[tokio::test]
async fn a_hundred_websockets_share_one_http2_connection() {
    let (addr, seen) = server(Serve::Http2).await;
    let conn = timeout(
        LIMIT,
        Http2Connection::connect(format!("ws://{addr}/"), config()),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(conn.supports_websockets());
    let sessions = (0..100).map(|i| {
        let conn = conn.clone();
        async move {
            let request = http::Request::get(format!("ws://{addr}/echo/{i}"))
                .header("sec-websocket-protocol", "echo")
                .body(())
                .unwrap();
            let (mut ws, response) = conn.websocket(request).await?;
            assert_eq!(response.status(), 200);
            assert_eq!(response.headers()["sec-websocket-protocol"], "echo");
            #[cfg(feature = "deflate")]
            assert!(
                response.headers()["sec-websocket-extensions"]
                    .to_str()
                    .unwrap()
                    .starts_with("permessage-deflate")
            );
            // 0 B, small, and larger than a stream's flow-control window.
            for len in [0, 1, 125, 70_000, 300_000] {
                let data = payload(len, i);
                ws.send(Message::binary(data.clone())).await?;
                assert_eq!(ws.next().await.unwrap()?, Message::binary(data));
            }
            ws.send(Message::text(format!("socket {i}"))).await?;
            assert_eq!(
                ws.next().await.unwrap()?,
                Message::text(format!("socket {i}"))
            );
            ws.close(None).await?;
            assert!(ws.next().await.unwrap()?.is_close());
            assert!(ws.next().await.is_none());
            assert!(ws.is_close_received());
            Ok::<_, Error>(())
        }
    });
    let results = timeout(LIMIT * 3, futures_util::future::join_all(sessions))
        .await
        .unwrap();
    for (i, r) in results.into_iter().enumerate() {
        r.unwrap_or_else(|e| panic!("socket {i}: {e}"));
    }
    assert_eq!(
        seen.connections.load(Ordering::SeqCst),
        1,
        "one TCP connection"
    );
    assert_eq!(seen.http2_websockets.load(Ordering::SeqCst), 100);
    assert_eq!(seen.http1_websockets.load(Ordering::SeqCst), 0);
    // Every server side saw the closing handshake complete.
    let endings = endings(&seen, 100).await;
    assert_eq!(endings.len(), 100);
    assert!(endings.iter().all(Result::is_ok), "{endings:?}");
}

#[tokio::test]
async fn without_the_setting_the_client_refuses_and_falls_back() {
    // One HTTP/2 connection: the WebSocket is refused before any request.
    let (addr, seen) = server(Serve::Http2NoConnect).await;
    let conn = h2c(addr).await;
    assert!(!conn.supports_websockets());
    let err = conn
        .websocket(format!("ws://{addr}/echo"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Connect(ConnectError::Http2WebSocketsDisabled)),
        "{err:?}"
    );
    assert!(err.to_string().contains("SETTINGS_ENABLE_CONNECT_PROTOCOL"));
    assert_eq!(seen.http2_websockets.load(Ordering::SeqCst), 0);

    // A server of both protocols without the setting: HTTP/1.1 it is.
    let (addr, seen) = server(Serve::AutoNoConnect).await;
    let (mut ws, response) = connect_async_http2_with_config(format!("ws://{addr}/echo"), config())
        .await
        .unwrap();
    assert_eq!(response.status(), 101);
    assert!(!ws.get_ref().is_http2());
    ws.send(Message::text("over HTTP/1.1")).await.unwrap();
    assert_eq!(
        ws.next().await.unwrap().unwrap(),
        Message::text("over HTTP/1.1")
    );
    ws.close(None).await.unwrap();
    assert!(ws.next().await.unwrap().unwrap().is_close());
    assert_eq!(
        seen.connections.load(Ordering::SeqCst),
        2,
        "h2c tried, then HTTP/1.1"
    );
    assert_eq!(seen.http1_websockets.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_websocket_must_name_the_connections_scheme_and_server() {
    let (addr, seen) = server(Serve::Http2).await;
    let conn = h2c(addr).await;
    let port = addr.port();
    for url in [
        // wss:// would be carried in clear text.
        format!("wss://{addr}/echo"),
        "wss://bank.example/ws".to_owned(),
        // Another server than the one connected to.
        "ws://bank.example/ws".to_owned(),
        format!("ws://localhost:{port}/echo"),
        format!("ws://127.0.0.1:{}/echo", port.wrapping_add(1).max(1)),
    ] {
        let err = conn.websocket(url.as_str()).await.unwrap_err();
        match &err {
            Error::Handshake(HandshakeError::InvalidUrl(why)) => {
                assert!(why.contains("this HTTP/2 connection"), "{url}: {why}")
            }
            other => panic!("{url}: {other:?}"),
        }
    }
    // Refused before anything was sent.
    assert_eq!(seen.requests.load(Ordering::SeqCst), 0);
    // The connection's own origin is still served, its host in any case
    // and its port given with leading zeros.
    for url in [
        format!("ws://{addr}/echo"),
        format!("WS://127.0.0.1:0{port}/echo"),
    ] {
        let (mut ws, response) = conn.websocket(url.as_str()).await.unwrap();
        assert_eq!(response.status(), 200);
        ws.send(Message::text("same origin")).await.unwrap();
        assert_eq!(
            ws.next().await.unwrap().unwrap(),
            Message::text("same origin")
        );
    }
    assert_eq!(seen.http2_websockets.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn connect_async_http2_uses_http2_when_offered() {
    let (addr, seen) = server(Serve::Http2).await;
    let (mut ws, response) = connect_async_http2_with_config(format!("ws://{addr}/echo"), config())
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(ws.get_ref().is_http2());
    ws.send(Message::text("over HTTP/2")).await.unwrap();
    assert_eq!(
        ws.next().await.unwrap().unwrap(),
        Message::text("over HTTP/2")
    );
    ws.close(None).await.unwrap();
    assert!(ws.next().await.unwrap().unwrap().is_close());
    assert_eq!(seen.connections.load(Ordering::SeqCst), 1);
    assert_eq!(seen.http2_websockets.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_refusal_reaches_the_client_with_its_status_and_body() {
    let (addr, _) = server(Serve::Http2).await;
    let conn = h2c(addr).await;
    // Version 8 is refused with 426 and a body saying why.
    let request = http::Request::get(format!("ws://{addr}/echo"))
        .body(())
        .unwrap();
    let mut request = wavesock::handshake::client::prepare_extended_connect(request).unwrap();
    request
        .headers_mut()
        .insert("sec-websocket-version", "8".parse().unwrap());
    // prepare_extended_connect runs again inside websocket() and sets 13, so
    // send it through h2 directly.
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (send, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut send = send.ready().await.unwrap();
    request
        .extensions_mut()
        .insert(h2::ext::Protocol::from_static("websocket"));
    let (response, _stream) = send.send_request(request, false).unwrap();
    let response = timeout(LIMIT, response).await.unwrap().unwrap();
    assert_eq!(response.status(), 426);
    assert!(
        !response.headers().contains_key("connection"),
        "HTTP/2 forbids it"
    );
    let mut body = response.into_body();
    let mut text = Vec::new();
    while let Some(chunk) = body.data().await {
        text.extend_from_slice(&chunk.unwrap());
    }
    assert!(String::from_utf8_lossy(&text).contains("version"));

    // Through wavesock's client: a refusal carries its status and body.
    let err = conn
        .websocket(format!("ws://{addr}/required"))
        .await
        .unwrap_err();
    match err {
        Error::Handshake(HandshakeError::UnexpectedStatus { status, response }) => {
            assert_eq!(status, 400);
            let body = response.body().as_deref().unwrap_or_default();
            assert!(
                String::from_utf8_lossy(body).contains("subprotocol"),
                "{body:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    // Offering it, the same path accepts.
    let request = http::Request::get(format!("ws://{addr}/required"))
        .header("sec-websocket-protocol", "chat, echo")
        .body(())
        .unwrap();
    let (_ws, response) = conn.websocket(request).await.unwrap();
    assert_eq!(response.headers()["sec-websocket-protocol"], "echo");
}

/// Pulls the server's answer to stream 1 out of raw frames: the HEADERS
/// block's first byte (an indexed `:status`) or a RST_STREAM's error code.
enum Answer {
    Headers(Vec<u8>),
    Reset(u32),
}

async fn raw_extended_connect(addr: SocketAddr, fields: &[(&str, &str)]) -> Answer {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    frame(&mut out, 0x4, 0, 0, &[]); // SETTINGS
    frame(&mut out, 0x4, 0x1, 0, &[]); // ACK of the server's, sent ahead
    // HPACK: literal fields without indexing, plain strings.
    let mut block = Vec::new();
    for (name, value) in fields {
        block.push(0x00);
        block.push(name.len() as u8);
        block.extend_from_slice(name.as_bytes());
        block.push(value.len() as u8);
        block.extend_from_slice(value.as_bytes());
    }
    frame(&mut out, 0x1, 0x4, 1, &block); // HEADERS, END_HEADERS, stream 1
    tcp.write_all(&out).await.unwrap();
    loop {
        let mut head = [0u8; 9];
        timeout(LIMIT, tcp.read_exact(&mut head))
            .await
            .unwrap()
            .unwrap();
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let kind = head[3];
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let mut body = vec![0u8; len];
        tcp.read_exact(&mut body).await.unwrap();
        match (kind, stream) {
            (0x1, 1) => return Answer::Headers(body),
            (0x3, 1) => return Answer::Reset(u32::from_be_bytes(body[..4].try_into().unwrap())),
            (0x7, _) => panic!("GOAWAY: the whole connection failed"),
            _ => {}
        }
    }
}

fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
}

#[tokio::test]
async fn malformed_extended_connects_end_cleanly() {
    let (addr, seen) = server(Serve::Http2).await;
    let good = [
        (":method", "CONNECT"),
        (":protocol", "websocket"),
        (":scheme", "http"),
        (":path", "/echo"),
        (":authority", "localhost"),
        ("sec-websocket-version", "13"),
    ];
    let without = |skip: &str, swap: Option<(&'static str, &'static str)>| {
        good.iter()
            .filter(|(n, _)| *n != skip)
            .map(|&(n, v)| match swap {
                Some((sn, sv)) if sn == n => (n, sv),
                _ => (n, v),
            })
            .collect::<Vec<_>>()
    };
    // Indexed `:status 400` (HPACK static table entry 12).
    const STATUS_400: u8 = 0x80 | 12;
    match raw_extended_connect(addr, &without("", Some((":protocol", "chat")))).await {
        Answer::Headers(block) => assert_eq!(block[0], STATUS_400, "bad :protocol"),
        Answer::Reset(code) => panic!("bad :protocol was reset ({code})"),
    }
    match raw_extended_connect(addr, &without(":authority", None)).await {
        Answer::Headers(block) => assert_eq!(block[0], STATUS_400, "no :authority"),
        Answer::Reset(code) => panic!("no :authority was reset ({code})"),
    }
    // h2 itself refuses an extended CONNECT without :path (RFC 8441 §4).
    match raw_extended_connect(addr, &without(":path", None)).await {
        Answer::Reset(code) => assert_eq!(code, 0x1, "PROTOCOL_ERROR"),
        Answer::Headers(_) => panic!("no :path was answered"),
    }
    // The well-formed request, for contrast, is accepted with 200.
    match raw_extended_connect(addr, &good).await {
        Answer::Headers(block) => assert_eq!(block[0], 0x80 | 8, ":status 200"),
        Answer::Reset(code) => panic!("good request reset ({code})"),
    }
    assert_eq!(seen.http2_websockets.load(Ordering::SeqCst), 1);
    // The server still serves.
    let conn = h2c(addr).await;
    let (mut ws, _) = conn.websocket(format!("ws://{addr}/echo")).await.unwrap();
    ws.send(Message::text("still here")).await.unwrap();
    assert_eq!(
        ws.next().await.unwrap().unwrap(),
        Message::text("still here")
    );
}

#[tokio::test]
async fn a_client_reset_mid_message_ends_the_server_side_with_an_error() {
    let (addr, seen) = server(Serve::Http2).await;
    let conn = h2c(addr).await;
    let (mut ws, _) = conn.websocket(format!("ws://{addr}/echo")).await.unwrap();
    // A masked binary frame announcing 1000 bytes, cut after 10.
    let mut partial = vec![0x82, 0xfe, 0x03, 0xe8, 9, 9, 9, 9];
    partial.extend_from_slice(&[0; 10]);
    ws.get_mut().write_all(&partial).await.unwrap();
    ws.get_mut().reset();
    // hyper reads a CANCEL as the end of the stream: mid-frame, that is a
    // connection gone without a close frame.
    let endings = endings(&seen, 1).await;
    let err = endings[0].as_ref().unwrap_err();
    assert!(err.contains("without a close frame"), "{err}");
}

#[tokio::test]
async fn a_server_reset_mid_message_ends_the_client_with_an_error() {
    let (addr, _) = server(Serve::Http2).await;
    let conn = h2c(addr).await;
    let (mut ws, _) = conn.websocket(format!("ws://{addr}/half")).await.unwrap();
    // hyper ends the stream when the server drops it mid-frame.
    let err = timeout(LIMIT, ws.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    match &err {
        Error::Io(e) => assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof, "{e}"),
        other => panic!("{other:?}"),
    }
    // The connection carries on for other WebSockets.
    let (mut other, _) = conn.websocket(format!("ws://{addr}/echo")).await.unwrap();
    other
        .send(Message::binary(Bytes::from_static(b"ok")))
        .await
        .unwrap();
    assert_eq!(
        other.next().await.unwrap().unwrap(),
        Message::binary(Bytes::from_static(b"ok"))
    );
}

#[tokio::test]
async fn a_peer_that_does_not_speak_http2_is_a_clear_error() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut tcp, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 64];
        let _ = tcp.read(&mut buf).await;
        let _ = tcp
            .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
            .await;
    });
    let err = timeout(
        LIMIT,
        Http2Connection::connect(format!("ws://{addr}/"), Config::default()),
    )
    .await
    .unwrap()
    .unwrap_err();
    assert!(matches!(err, Error::Io(_)), "{err:?}");
}

#[tokio::test]
async fn a_reset_stream_is_a_connection_reset_for_the_client() {
    // A bare h2 server that accepts, sends half a frame, and resets.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut conn = h2::server::Builder::new()
            .enable_connect_protocol()
            .handshake::<_, Bytes>(tcp)
            .await
            .unwrap();
        while let Some(Ok((req, mut respond))) = conn.accept().await {
            assert_eq!(req.method(), http::Method::CONNECT);
            let protocol = req.extensions().get::<h2::ext::Protocol>().unwrap();
            assert_eq!(protocol.as_str(), "websocket");
            let mut send = respond
                .send_response(http::Response::new(()), false)
                .unwrap();
            send.send_data(Bytes::from_static(&[0x82, 0x7e, 0x03, 0xe8, 1, 2]), false)
                .unwrap();
            // The connection is driven by accept(): reset from elsewhere.
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(100)).await;
                send.send_reset(h2::Reason::INTERNAL_ERROR);
            });
        }
    });
    let conn = h2c(addr).await;
    let (mut ws, response) = conn.websocket(format!("ws://{addr}/")).await.unwrap();
    assert_eq!(response.status(), 200);
    let err = timeout(LIMIT, ws.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    match &err {
        Error::Io(e) => {
            assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}");
            assert!(format!("{e:?}").contains("INTERNAL_ERROR"), "{e:?}");
        }
        other => panic!("{other:?}"),
    }
}
