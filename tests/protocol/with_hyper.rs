//! wavesock over a connection that hyper 1.x upgraded itself.

use std::convert::Infallible;

use futures_util::{SinkExt, StreamExt};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use wavesock::handshake::server::{accept_response, check_request, error_response};
use wavesock::{Config, Message, Role, WebSocketStream};

use crate::support::{masked_frame, read_head, read_to_end, request};

async fn handle(mut req: Request<Incoming>) -> Result<Response<String>, Infallible> {
    let accept = match check_request(&req) {
        Ok(a) => a,
        Err(e) => {
            let resp = error_response(&e).expect("every check failure has a status");
            return Ok(resp.map(|b| String::from_utf8_lossy(&b).into_owned()));
        }
    };
    tokio::spawn(async move {
        let upgraded = hyper::upgrade::on(&mut req).await.unwrap();
        let io = TokioIo::new(upgraded);
        let mut ws = WebSocketStream::from_raw_socket(io, Role::Server, Config::default()).unwrap();
        while let Some(Ok(msg)) = ws.next().await {
            if msg.is_data() {
                ws.send(msg).await.unwrap();
            }
        }
    });
    Ok(accept_response(&accept).map(|()| String::new()))
}

async fn hyper_server() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            tokio::spawn(
                http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), service_fn(handle))
                    .with_upgrades(),
            );
        }
    });
    addr
}

#[tokio::test]
async fn wavesock_client_talks_to_hyper_upgraded_connection() {
    let addr = hyper_server().await;
    let (mut ws, response) = wavesock::connect_async(format!("ws://{addr}/ws"))
        .await
        .unwrap();
    assert_eq!(response.status(), 101);
    ws.send(Message::text("through hyper")).await.unwrap();
    assert_eq!(
        ws.next().await.unwrap().unwrap(),
        Message::text("through hyper")
    );
    ws.close(None).await.unwrap();
    // close() starts the handshake; the answer comes through next().
    assert!(ws.next().await.unwrap().unwrap().is_close());
    assert!(ws.is_close_received());
    assert!(ws.next().await.is_none());
}

#[tokio::test]
async fn pipelined_frame_survives_hyper_upgrade() {
    let addr = hyper_server().await;
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut bytes = request("").into_bytes();
    bytes.extend_from_slice(&masked_frame(0x1, b"early"));
    tcp.write_all(&bytes).await.unwrap();
    let head = read_head(&mut tcp).await;
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    let mut echo = [0u8; 7];
    tokio::io::AsyncReadExt::read_exact(&mut tcp, &mut echo)
        .await
        .unwrap();
    assert_eq!(&echo, b"\x81\x05early");
}

#[tokio::test]
async fn hyper_refuses_bad_version_with_426() {
    let addr = hyper_server().await;
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let raw = request("Connection: close\r\n")
        .replace("Sec-WebSocket-Version: 13", "Sec-WebSocket-Version: 8");
    tcp.write_all(raw.as_bytes()).await.unwrap();
    let answer = read_to_end(&mut tcp).await;
    assert!(answer.starts_with("HTTP/1.1 426 "), "{answer}");
    assert!(answer.contains("sec-websocket-version: 13\r\n"), "{answer}");
}
