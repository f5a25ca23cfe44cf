//! A tokio-tungstenite-style echo server and client, ported to wavesock
//! with only the crate name changed and the edits MIGRATING.md lists; each
//! edit is marked `// edit N:` with the original. If this stops compiling
//! or passing, the migration guide is wrong.
// The callback's error type is tungstenite's (a whole HTTP response).
#![allow(clippy::result_large_err)]

use std::net::SocketAddr;

// edit 6: `SinkExt` dropped from this import (the split sender's own
// `send` is used; rustc flags the import as unused).
use futures_util::{StreamExt, TryStreamExt, future};
use tokio::net::{TcpListener, TcpStream};
// edit 2: was `use tokio_tungstenite::tungstenite::{Error, Message, Result};`
use wavesock::{Error, Message, Result};
// edit 2: was `use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};`
use wavesock::handshake::server::{ErrorResponse, Request, Response};
// edit 2: was `use tokio_tungstenite::tungstenite::protocol::{frame::coding::CloseCode, CloseFrame};`
use wavesock::{CloseCode, CloseFrame};
// edit 2 and 3: was `use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;`
use wavesock::Config;

async fn accept_connection(peer: SocketAddr, stream: TcpStream) {
    if let Err(e) = handle_connection(peer, stream).await {
        match e {
            Error::ConnectionClosed | Error::Protocol(_) | Error::InvalidUtf8 => (),
            err => panic!("error processing connection from {peer}: {err}"),
        }
    }
}

async fn handle_connection(_peer: SocketAddr, stream: TcpStream) -> Result<()> {
    let callback =
        |req: &Request, mut response: Response| -> std::result::Result<Response, ErrorResponse> {
            if req.uri().path() != "/echo" {
                let mut refusal = ErrorResponse::new(Some("no such endpoint".into()));
                *refusal.status_mut() = http::StatusCode::NOT_FOUND;
                return Err(refusal);
            }
            response
                .headers_mut()
                .insert("x-ported-from", "tokio-tungstenite".parse().unwrap());
            Ok(response)
        };
    // edit 3: was `accept_hdr_async_with_config(stream, callback, Some(config))`
    let config = Config::default().max_message_size(1 << 20);
    let ws_stream = wavesock::accept_hdr_async_with_config(stream, callback, config).await?;
    let (write, read) = ws_stream.split();
    // The echo of tokio-tungstenite's README: data messages forwarded back.
    read.try_filter(|msg| future::ready(msg.is_text() || msg.is_binary()))
        .forward(write)
        .await
}

async fn run_server(listener: TcpListener) {
    while let Ok((stream, _)) = listener.accept().await {
        let peer = stream.peer_addr().expect("connected streams have a peer");
        tokio::spawn(accept_connection(peer, stream));
    }
}

#[tokio::test]
async fn tokio_tungstenite_style_echo_server_and_client_run_unchanged_but_for_the_listed_edits() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(run_server(listener));

    // edit 3: was `connect_async_with_config(url, Some(config), false)`
    let config = Config::default().max_frame_size(1 << 20);
    let url = format!("ws://{addr}/echo");
    let (ws_stream, response) = wavesock::connect_async_with_config(&url, config)
        .await
        .expect("failed to connect");
    assert_eq!(response.status(), 101);
    assert_eq!(response.headers()["x-ported-from"], "tokio-tungstenite");

    let (mut write, mut read) = ws_stream.split();
    // Sending from a second task: a clone instead of Arc<Mutex<SplitSink>>.
    let mut second = write.clone();
    let other = tokio::spawn(async move { second.send(Message::text("from another task")).await });
    write.send(Message::text("hello")).await.unwrap();
    write.send(Message::binary(vec![1, 2, 3])).await.unwrap();
    write
        .send(Message::Ping("are you there".into()))
        .await
        .unwrap();
    other.await.unwrap().unwrap();

    let mut texts = Vec::new();
    let mut binaries = Vec::new();
    let mut pongs = 0;
    while texts.len() < 2 || binaries.is_empty() || pongs == 0 {
        // The exhaustive match tungstenite users write, unchanged.
        match read.next().await.unwrap().unwrap() {
            Message::Text(t) => texts.push(t.to_string()),
            Message::Binary(b) => binaries.push(b),
            Message::Ping(_) => {}
            Message::Pong(p) => {
                assert_eq!(&p[..], b"are you there");
                pongs += 1;
            }
            Message::Close(_) => panic!("closed early"),
            Message::Frame(_) => unreachable!(),
        }
    }
    texts.sort();
    assert_eq!(texts, ["from another task", "hello"]);
    assert_eq!(binaries, [vec![1u8, 2, 3]]);

    // edit 4: was `CloseCode::Normal`
    let bye = CloseFrame {
        code: CloseCode::NORMAL,
        reason: "bye".into(),
    };
    write.send(Message::Close(Some(bye))).await.unwrap();
    // As with tokio-tungstenite: the server's answer, then the end.
    let answer = read.next().await.unwrap().unwrap();
    assert!(answer.is_close(), "{answer:?}");
    assert!(read.next().await.is_none());
    // Sending after closing fails the same way.
    assert!(matches!(
        write.send(Message::text("late")).await,
        Err(Error::AlreadyClosed | Error::ConnectionClosed)
    ));
}

#[tokio::test]
async fn a_refusal_from_a_tungstenite_style_callback_reaches_the_client() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(run_server(listener));
    let err = wavesock::connect_async(format!("ws://{addr}/elsewhere"))
        .await
        .unwrap_err();
    // edit 5: was `Error::Http(response)`
    match err {
        Error::Handshake(wavesock::HandshakeError::UnexpectedStatus { status, response }) => {
            assert_eq!(status, 404);
            assert_eq!(response.body().as_deref(), Some(&b"no such endpoint"[..]));
        }
        other => panic!("{other:?}"),
    }
}
