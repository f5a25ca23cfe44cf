//! An axum application on `wavesock::axum`: one route serving WebSockets
//! over HTTP/1.1 and HTTP/2 (`axum::serve`, h2c), with a subprotocol and
//! (with the `deflate` feature) permessage-deflate negotiated.
#![cfg(all(feature = "axum", feature = "http2"))]

use std::time::Duration;

use axum::Router;
use axum::response::Response;
use axum::routing::any;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::timeout;
use wavesock::axum::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use wavesock::http2::Http2Connection;
use wavesock::{Config, Error};

const LIMIT: Duration = Duration::from_secs(20);

fn config() -> Config {
    let config = Config::default().max_message_size(1 << 20);
    #[cfg(feature = "deflate")]
    let config = config.deflate(wavesock::DeflateConfig::default());
    config
}

async fn handler(ws: WebSocketUpgrade) -> Response {
    let http2 = ws.is_http2();
    ws.config(config())
        .protocols(["v2.chat", "v1.chat"])
        .on_upgrade(move |socket| session(socket, http2))
}

/// Says what it knows, echoes, and closes with 1000 on "bye".
async fn session(socket: WebSocket, http2: bool) {
    let _ = converse(socket, http2).await;
}

async fn converse(mut socket: WebSocket, http2: bool) -> Result<(), Error> {
    let protocol = socket
        .protocol()
        .map(|p| p.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let hello = format!("http2={http2} protocol={protocol}");
    socket.send(Message::text(hello)).await?;
    while let Some(msg) = socket.recv().await {
        match msg? {
            Message::Text(t) if t == "bye" => {
                let frame = CloseFrame {
                    code: close_code::NORMAL,
                    reason: "bye".into(),
                };
                socket.send(Message::Close(Some(frame))).await?;
            }
            msg @ (Message::Text(_) | Message::Binary(_)) => socket.send(msg).await?,
            _ => {}
        }
    }
    Ok(())
}

async fn app() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let app = Router::new().route("/ws", any(handler));
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

fn request(addr: &str) -> http::Request<()> {
    http::Request::get(format!("ws://{addr}/ws"))
        .header("sec-websocket-protocol", "v1.chat, v2.chat")
        .body(())
        .unwrap()
}

async fn exercise<S>(ws: &mut wavesock::WebSocketStream<S>, http2: bool) -> Result<(), Error>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let hello = ws.next().await.unwrap()?;
    assert_eq!(
        hello.as_text(),
        Some(format!("http2={http2} protocol=v2.chat").as_str())
    );
    let big: Vec<u8> = (0..500_000u32).map(|i| (i % 13) as u8).collect();
    for msg in [
        wavesock::Message::text(""),
        wavesock::Message::text("grüße"),
        wavesock::Message::binary(big),
    ] {
        ws.send(msg.clone()).await?;
        assert_eq!(ws.next().await.unwrap()?, msg);
    }
    ws.send(wavesock::Message::text("bye")).await?;
    match ws.next().await.unwrap()? {
        wavesock::Message::Close(Some(frame)) => {
            assert_eq!(frame.code, wavesock::CloseCode::NORMAL);
            assert_eq!(frame.reason, "bye");
        }
        other => panic!("{other:?}"),
    }
    assert!(ws.next().await.is_none());
    Ok(())
}

fn assert_negotiated(response: &wavesock::ClientResponse) {
    assert_eq!(response.headers()["sec-websocket-protocol"], "v2.chat");
    #[cfg(feature = "deflate")]
    assert!(
        response.headers()["sec-websocket-extensions"]
            .to_str()
            .unwrap()
            .starts_with("permessage-deflate"),
        "{response:?}"
    );
    #[cfg(not(feature = "deflate"))]
    assert!(!response.headers().contains_key("sec-websocket-extensions"));
}

#[tokio::test]
async fn one_route_serves_http1_and_http2_websockets() {
    let addr = app().await;

    let (mut ws, response) = timeout(
        LIMIT,
        wavesock::connect_async_with_config(request(&addr), config()),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(response.status(), 101);
    assert_negotiated(&response);
    timeout(LIMIT, exercise(&mut ws, false))
        .await
        .unwrap()
        .unwrap();

    let conn = Http2Connection::connect(format!("ws://{addr}/"), config())
        .await
        .unwrap();
    assert!(
        conn.supports_websockets(),
        "axum::serve advertises RFC 8441"
    );
    let (mut a, response) = conn.websocket(request(&addr)).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_negotiated(&response);
    // A second WebSocket on the same connection, interleaved with the first.
    let (mut b, _) = conn.websocket(request(&addr)).await.unwrap();
    let (ra, rb) = tokio::join!(exercise(&mut a, true), exercise(&mut b, true));
    ra.unwrap();
    rb.unwrap();
}

async fn raw_http1(addr: &str, head: &str) -> String {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = timeout(LIMIT, tcp.read(&mut buf)).await.unwrap().unwrap();
        out.extend_from_slice(&buf[..n]);
        if n == 0 || out.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn bad_upgrades_are_rejected_with_the_right_status() {
    let addr = app().await;
    let base = "Host: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n";
    let no_upgrade = raw_http1(&addr, "GET /ws HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(no_upgrade.starts_with("HTTP/1.1 400"), "{no_upgrade}");
    let post = raw_http1(
        &addr,
        &format!(
            "POST /ws HTTP/1.1\r\n{base}Sec-WebSocket-Version: 13\r\ncontent-length: 0\r\n\r\n"
        ),
    )
    .await;
    assert!(post.starts_with("HTTP/1.1 405"), "{post}");
    assert!(post.to_lowercase().contains("allow: get"), "{post}");
    let old = raw_http1(
        &addr,
        &format!("GET /ws HTTP/1.1\r\n{base}Sec-WebSocket-Version: 8\r\n\r\n"),
    )
    .await;
    assert!(old.starts_with("HTTP/1.1 426"), "{old}");
    assert!(
        old.to_lowercase().contains("sec-websocket-version: 13"),
        "{old}"
    );
    let good = raw_http1(
        &addr,
        &format!("GET /ws HTTP/1.1\r\n{base}Sec-WebSocket-Version: 13\r\n\r\n"),
    )
    .await;
    assert!(good.starts_with("HTTP/1.1 101"), "{good}");
    assert!(good.contains("s3pPLMBiTxaQ9kYGzzhZRbK+xOo="), "{good}");
}

#[test]
fn messages_convert_both_ways_without_loss() {
    let cases = [
        Message::text("héllo"),
        Message::binary(vec![0u8, 1, 2]),
        Message::Ping(bytes::Bytes::from_static(b"p")),
        Message::Pong(bytes::Bytes::from_static(b"q")),
        Message::Close(None),
        Message::Close(Some(CloseFrame {
            code: close_code::AWAY,
            reason: "later".into(),
        })),
    ];
    for msg in cases {
        let ours: wavesock::Message = msg.clone().into();
        match (&msg, &ours) {
            (Message::Close(Some(a)), wavesock::Message::Close(Some(b))) => {
                assert_eq!(a.code, u16::from(b.code));
                assert_eq!(a.reason, b.reason);
            }
            _ => assert_eq!(msg.clone().into_data(), ours.clone().into_data()),
        }
        assert_eq!(ours.is_text(), matches!(msg, Message::Text(_)));
        assert_eq!(ours.is_close(), matches!(msg, Message::Close(_)));
    }
    assert_eq!(Message::from("x").to_text().unwrap(), "x");
    assert!(Message::binary(vec![0xff]).to_text().is_err());
    assert_eq!(Message::from(vec![1u8, 2]).into_data().as_ref(), &[1, 2]);
}
