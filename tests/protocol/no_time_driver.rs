//! Every entry point on a runtime built without Tokio's time driver
//! (`Builder::new_current_thread().enable_io()`, as fastwebsockets'
//! `echo_server` builds its own), with a configuration without timeouts
//! (`Config::without_timeouts()`): messages flow, and the closes that
//! end a connection on a violation (1009 for a message too big, 1007 for
//! text that is not UTF-8) reach the peer with their code. The closing
//! handshake used to make a timer for its deadline, a century off when
//! `close_timeout` was `Duration::MAX`, which panics on such a runtime
//! ("timers are disabled"): the close frame never went out and the peer
//! saw the TCP connection drop (1006).
//!
//! Each test builds its runtime and runs it on a thread of its own; the
//! test's thread only waits for it, so that a connection that hangs fails
//! the test instead of holding it for ever. Nothing here may use Tokio's
//! timers: there are none.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::mpsc::{RecvTimeoutError, channel};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use wavesock::upgrade::{self, Body};
use wavesock::{CloseCode, CloseFrame, Config, Frame, Message, OpCode, Role, WebSocketStream};

/// Runs `test` to its end on a current-thread runtime with I/O only.
fn on_a_runtime_without_time<F>(test: impl FnOnce() -> F + Send + 'static)
where
    F: Future<Output = ()>,
{
    let (done, finished) = channel();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .unwrap();
        rt.block_on(test());
        let _ = done.send(());
    });
    // A bound on a hang, not a measure of speed: the test takes well under
    // a second.
    match finished.recv_timeout(Duration::from_secs(60)) {
        Ok(()) => thread.join().unwrap(),
        Err(RecvTimeoutError::Disconnected) => {
            std::panic::resume_unwind(thread.join().expect_err("ended without finishing"))
        }
        Err(RecvTimeoutError::Timeout) => panic!("the test hung"),
    }
}

/// No timeouts (written out, as the field setters have them), and a
/// small message limit for the 1009.
fn untimed() -> Config {
    Config::default()
        .handshake_timeout(None)
        .connect_timeout(None)
        .close_timeout(Duration::MAX)
        .max_message_size(1024)
}

/// Echoes data messages until the connection ends.
async fn echo<S: AsyncRead + AsyncWrite + Unpin>(mut ws: WebSocketStream<S>) {
    while let Some(Ok(msg)) = ws.next().await {
        if msg.is_data() && ws.send(msg).await.is_err() {
            break;
        }
    }
}

/// A text frame that is not UTF-8.
fn not_utf8() -> Message {
    Message::Frame(Frame::new(true, OpCode::Text, vec![b'a', 0xff, 0xfe]))
}

/// What a client sees of a server that echoes and then fails the
/// connection for `offence`: the echo, then a close with `code`, then
/// the end.
async fn echo_then_refusal<S: AsyncRead + AsyncWrite + Unpin>(
    ws: &mut WebSocketStream<S>,
    offence: Message,
    code: CloseCode,
) {
    ws.send(Message::text("hello")).await.unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("hello"));
    ws.send(offence).await.unwrap();
    match ws.next().await {
        Some(Ok(Message::Close(Some(frame)))) => assert_eq!(frame.code, code),
        other => panic!("expected a close with {code:?}, got {other:?}"),
    }
    while let Some(item) = ws.next().await {
        assert!(item.is_ok(), "{item:?}");
    }
}

fn too_big() -> Message {
    Message::binary(vec![7u8; 2000])
}

#[test]
fn accept_and_connect_serve_and_close_with_1009_and_1007() {
    on_a_runtime_without_time(|| async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            for _ in 0..2 {
                let (tcp, _) = listener.accept().await.unwrap();
                let ws = wavesock::accept_async_with_config(tcp, untimed())
                    .await
                    .unwrap();
                tokio::spawn(echo(ws)).await.unwrap();
            }
        });
        let url = format!("ws://{addr}/");
        let (mut ws, _) = wavesock::connect_async_with_config(&url, untimed())
            .await
            .unwrap();
        echo_then_refusal(&mut ws, too_big(), CloseCode::MESSAGE_TOO_BIG).await;
        // The other client entry point, over a socket of our own.
        let tcp = TcpStream::connect(addr).await.unwrap();
        let (mut ws, _) = wavesock::client_async_with_config(&url, tcp, untimed())
            .await
            .unwrap();
        echo_then_refusal(&mut ws, not_utf8(), CloseCode::INVALID_PAYLOAD).await;
        server.await.unwrap();
    });
}

#[test]
fn a_client_closes_a_server_with_1009_and_1007() {
    // The client's side of a violation: it fails the connection, and the
    // server receives the code.
    on_a_runtime_without_time(|| async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let url = format!("ws://{addr}/");
        for (offence, code) in [
            (too_big(), CloseCode::MESSAGE_TOO_BIG),
            (not_utf8(), CloseCode::INVALID_PAYLOAD),
        ] {
            let client = tokio::spawn({
                let url = url.clone();
                async move {
                    let (mut ws, _) = wavesock::connect_async_with_config(&url, untimed())
                        .await
                        .unwrap();
                    // Fails on the offence; its close goes out.
                    while let Some(Ok(_)) = ws.next().await {}
                    while ws.next().await.is_some() {}
                }
            });
            let (tcp, _) = listener.accept().await.unwrap();
            let mut ws = wavesock::accept_async_with_config(tcp, untimed())
                .await
                .unwrap();
            ws.send(offence).await.unwrap();
            match ws.next().await {
                Some(Ok(Message::Close(Some(frame)))) => assert_eq!(frame.code, code),
                other => panic!("expected a close with {code:?}, got {other:?}"),
            }
            while ws.next().await.is_some() {}
            client.await.unwrap();
        }
    });
}

#[test]
fn raw_sockets_serve_and_close_with_1009_and_1007() {
    // `from_raw_socket` on both ends: no handshake, so nothing but the
    // Stream's own clock is tried.
    on_a_runtime_without_time(|| async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        for (offence, code) in [
            (too_big(), CloseCode::MESSAGE_TOO_BIG),
            (not_utf8(), CloseCode::INVALID_PAYLOAD),
        ] {
            let tcp = TcpStream::connect(addr).await.unwrap();
            let (accepted, _) = listener.accept().await.unwrap();
            let server = WebSocketStream::from_raw_socket(accepted, Role::Server, untimed());
            let server = tokio::spawn(echo(server.unwrap()));
            let mut ws = WebSocketStream::from_raw_socket(tcp, Role::Client, untimed()).unwrap();
            echo_then_refusal(&mut ws, offence, code).await;
            server.await.unwrap();
        }
    });
}

/// A hyper server whose WebSocket route is `wavesock::upgrade`.
async fn hyper_server() -> SocketAddr {
    async fn route(mut req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
        let (response, websocket) = match upgrade::upgrade_with_config(&mut req, untimed()) {
            Ok(upgrade) => upgrade,
            Err(refusal) => return Ok(refusal.into_response()),
        };
        tokio::spawn(async move { echo(websocket.await.unwrap()).await });
        Ok(response)
    }
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            tokio::spawn(
                http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), service_fn(route))
                    .with_upgrades(),
            );
        }
    });
    addr
}

#[test]
fn hyper_upgrades_serve_and_close_with_1009_and_1007() {
    on_a_runtime_without_time(|| async {
        let addr = hyper_server().await;
        let url = format!("ws://{addr}/");
        for (offence, code) in [
            (too_big(), CloseCode::MESSAGE_TOO_BIG),
            (not_utf8(), CloseCode::INVALID_PAYLOAD),
        ] {
            let (mut ws, _) = wavesock::connect_async_with_config(&url, untimed())
                .await
                .unwrap();
            echo_then_refusal(&mut ws, offence, code).await;
        }
    });
}

#[test]
fn a_closing_handshake_and_split_halves_need_no_timer() {
    // `close` bounded its wait with a timer whatever the close timeout.
    on_a_runtime_without_time(|| async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let ws = wavesock::accept_async_with_config(tcp, untimed())
                .await
                .unwrap();
            let (mut tx, mut rx) = ws.split();
            let mut closed_with = None;
            while let Some(msg) = rx.next().await {
                match msg.unwrap() {
                    Message::Close(frame) => closed_with = frame.map(|f| f.code),
                    msg => tx.send(msg).await.unwrap(),
                }
            }
            closed_with
        });
        let url = format!("ws://{addr}/");
        let (mut ws, _) = wavesock::connect_async_with_config(&url, untimed())
            .await
            .unwrap();
        ws.send(Message::text("before")).await.unwrap();
        assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("before"));
        ws.close(Some(CloseFrame::new(CloseCode::NORMAL, "bye")))
            .await
            .unwrap();
        match ws.next().await {
            Some(Ok(Message::Close(Some(frame)))) => assert_eq!(frame.code, CloseCode::NORMAL),
            other => panic!("expected the server's answer, got {other:?}"),
        }
        assert!(ws.next().await.is_none());
        assert_eq!(server.await.unwrap(), Some(CloseCode::NORMAL));
    });
}
