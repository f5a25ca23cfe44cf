//! A client scripted byte for byte with `tokio_test::io::Builder`: the
//! request with a given `Sec-WebSocket-Key`, then frames masked with keys
//! chosen through `Config::mask_keys`. And the other side of that knob: by
//! default keys stay random, different on every connection.

use std::future::poll_fn;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, DuplexStream};
use tokio_test::io::Builder;
use wavesock::{
    CloseCode, CloseFrame, Config, Error, HandshakeError, MaskKeys, Message, Role, WebSocketStream,
};

/// RFC 6455 §1.3's key and the accept value derived from it.
const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

/// The request `client_async_with_config` writes for [`request`]: the key as
/// given, then the headers `prepare_request` adds, in that order.
const REQUEST: &[u8] = b"GET /chat HTTP/1.1\r\n\
    sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
    host: localhost\r\n\
    upgrade: websocket\r\n\
    connection: Upgrade\r\n\
    sec-websocket-version: 13\r\n\
    \r\n";

const RESPONSE: &[u8] = b"HTTP/1.1 101 Switching Protocols\r\n\
    Upgrade: websocket\r\n\
    Connection: Upgrade\r\n\
    Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\
    \r\n";

fn request(key: &str) -> http::Request<()> {
    http::Request::builder()
        .uri("ws://localhost/chat")
        .header("Sec-WebSocket-Key", key)
        .body(())
        .unwrap()
}

#[tokio::test]
async fn client_handshake_and_frames_are_scripted_byte_for_byte() {
    // Keys 37 fa 21 3d, 37 fa 21 3e, 37 fa 21 3f: the first is RFC 6455
    // §5.7's, so the text frame is the RFC's own example.
    let config = Config::default().mask_keys(MaskKeys::CountingForTesting(0x37fa_213d));
    let server = Builder::new()
        .write(REQUEST)
        .read(RESPONSE)
        // Text "Hello", key 37 fa 21 3d (RFC 6455 §5.7).
        .write(&[
            0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58,
        ])
        // The server pings with "Hello" (unmasked, §5.7)...
        .read(&[0x89, 0x05, b'H', b'e', b'l', b'l', b'o'])
        // ...and the client's automatic pong carries it back, key 37 fa 21 3e.
        .write(&[
            0x8a, 0x85, 0x37, 0xfa, 0x21, 0x3e, 0x7f, 0x9f, 0x4d, 0x52, 0x58,
        ])
        // Close 1000 "bye" (03 e8 62 79 65), key 37 fa 21 3f.
        .write(&[
            0x88, 0x85, 0x37, 0xfa, 0x21, 0x3f, 0x34, 0x12, 0x43, 0x46, 0x52,
        ])
        // The server's close reply, then the end of the connection.
        .read(&[0x88, 0x02, 0x03, 0xe8])
        .build();

    let (mut ws, response) = wavesock::client_async_with_config(request(KEY), server, config)
        .await
        .unwrap();
    assert_eq!(response.status(), http::StatusCode::SWITCHING_PROTOCOLS);
    ws.send(Message::text("Hello")).await.unwrap();
    assert_eq!(
        ws.next().await.unwrap().unwrap(),
        Message::Ping(Bytes::from_static(b"Hello"))
    );
    ws.close(Some(CloseFrame::new(CloseCode::NORMAL, "bye")))
        .await
        .unwrap();
    // close() starts the handshake; the server's answer comes through next().
    assert_eq!(
        ws.next().await.unwrap().unwrap(),
        Message::Close(Some(CloseFrame::new(CloseCode::NORMAL, "")))
    );
    assert!(ws.next().await.is_none());
    // Dropping the mock checks that every scripted byte was read and written.
}

/// The server starts the closing handshake: the client delivers its close
/// frame, echoes code and reason (masked, key 37 fa 21 3d), writes nothing
/// after it, and waits for the server to end the connection (RFC 6455
/// §7.1.1), which the end of the script is.
#[tokio::test]
async fn a_close_the_server_starts_is_echoed_with_its_code_and_reason() {
    let config = Config::default().mask_keys(MaskKeys::CountingForTesting(0x37fa_213d));
    let server = Builder::new()
        .write(REQUEST)
        .read(RESPONSE)
        // The server says 1001 "restart" (03 e9 + 7 bytes).
        .read(&[
            0x88, 0x09, 0x03, 0xe9, b'r', b'e', b's', b't', b'a', b'r', b't',
        ])
        // The echo: the same 9 bytes, masked with 37 fa 21 3d.
        .write(&[
            0x88, 0x89, 0x37, 0xfa, 0x21, 0x3d, 0x34, 0x13, 0x53, 0x58, 0x44, 0x8e, 0x40, 0x4f,
            0x43,
        ])
        .build();
    let (mut ws, _) = wavesock::client_async_with_config(request(KEY), server, config)
        .await
        .unwrap();
    assert_eq!(
        ws.next().await.unwrap().unwrap(),
        Message::Close(Some(CloseFrame::new(CloseCode::GOING_AWAY, "restart")))
    );
    assert!(ws.is_close_received());
    assert!(ws.is_close_sent(), "the echo counts as our close");
    // The echo is written, then the end of the script reads as the server
    // ending TCP.
    assert!(ws.next().await.is_none());
    assert!(matches!(
        ws.send(Message::text("late")).await,
        Err(Error::ConnectionClosed)
    ));
}

/// The server's close frame, 1001 "restart" (03 e9 + 7 bytes).
const SERVER_CLOSE: &[u8] = &[
    0x88, 0x09, 0x03, 0xe9, b'r', b'e', b's', b't', b'a', b'r', b't',
];

/// A client's close frame with the same payload, masked with 37 fa 21 3d:
/// the echo of a client with `CountingForTesting(0x37fa_213d)` keys.
const CLIENT_CLOSE: &[u8] = &[
    0x88, 0x89, 0x37, 0xfa, 0x21, 0x3d, 0x34, 0x13, 0x53, 0x58, 0x44, 0x8e, 0x40, 0x4f, 0x43,
];

fn restart() -> Message {
    Message::Close(Some(CloseFrame::new(CloseCode::GOING_AWAY, "restart")))
}

/// One poll of the stream: what it returned, without polling again.
async fn poll_once(ws: &mut WebSocketStream<tokio_test::io::Mock>) -> Poll<Option<Message>> {
    poll_fn(|cx| Poll::Ready(ws.poll_next_unpin(cx)))
        .await
        .map(|item| item.map(|r| r.unwrap()))
}

/// A single poll of a client's stream yields the server's close and writes
/// the echo: the stream is dropped right after that one poll, and the mock
/// checks when dropped that every scripted byte was written.
#[tokio::test]
async fn a_client_writes_the_close_reply_in_the_poll_that_yields_the_close() {
    let config = Config::default().mask_keys(MaskKeys::CountingForTesting(0x37fa_213d));
    let io = Builder::new()
        .read(SERVER_CLOSE)
        .write(CLIENT_CLOSE)
        .build();
    let mut ws = WebSocketStream::from_raw_socket(io, Role::Client, config).unwrap();
    assert_eq!(poll_once(&mut ws).await, Poll::Ready(Some(restart())));
    drop(ws);
}

/// The same for a server: one poll yields the client's close and writes
/// the (unmasked) echo.
#[tokio::test]
async fn a_server_writes_the_close_reply_in_the_poll_that_yields_the_close() {
    let io = Builder::new()
        .read(CLIENT_CLOSE)
        .write(SERVER_CLOSE)
        .build();
    let mut ws = WebSocketStream::from_raw_socket(io, Role::Server, Config::default()).unwrap();
    assert_eq!(poll_once(&mut ws).await, Poll::Ready(Some(restart())));
    drop(ws);
}

/// A transport that is not ready when the close is yielded keeps the echo
/// queued, and a flush writes it (the mock checks on drop that it was).
#[tokio::test]
async fn a_close_reply_the_transport_could_not_take_goes_out_with_a_flush() {
    let io = Builder::new()
        .read(CLIENT_CLOSE)
        .wait(Duration::from_millis(20))
        .write(SERVER_CLOSE)
        .build();
    let mut ws = WebSocketStream::from_raw_socket(io, Role::Server, Config::default()).unwrap();
    assert_eq!(poll_once(&mut ws).await, Poll::Ready(Some(restart())));
    ws.flush().await.unwrap();
    drop(ws);
}

/// Writing the echo fails when the close is yielded: as for any write after
/// the peer's close (the peer may be gone), the failure is not reported,
/// and the next poll ends the stream.
#[tokio::test]
async fn a_close_reply_that_fails_to_write_ends_the_stream_without_an_error() {
    let io = Builder::new()
        .read(CLIENT_CLOSE)
        .write_error(std::io::ErrorKind::BrokenPipe.into())
        .build();
    let mut ws = WebSocketStream::from_raw_socket(io, Role::Server, Config::default()).unwrap();
    assert_eq!(poll_once(&mut ws).await, Poll::Ready(Some(restart())));
    assert!(ws.next().await.is_none());
}

#[tokio::test]
async fn a_bad_given_key_fails_before_anything_is_written() {
    // A mock with no actions panics on any write.
    let nothing = Builder::new().build();
    let err = wavesock::client_async_with_config(
        request("dGhlIHNhbXBsZSBub25jZQ"),
        nothing,
        Config::default(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Handshake(HandshakeError::BadHeader {
                name: "Sec-WebSocket-Key",
                ..
            })
        ),
        "{err:?}"
    );
}

/// A client over an in-memory pipe with `config`, and the pipe's other end.
fn client(config: Config) -> (WebSocketStream<DuplexStream>, DuplexStream) {
    let (ours, theirs) = tokio::io::duplex(1024);
    let ws = WebSocketStream::from_raw_socket(ours, Role::Client, config).unwrap();
    (ws, theirs)
}

/// Sends `n` one-byte text messages from a client made with `config`; the
/// masking key of each frame as it arrived at the other end.
async fn first_keys(config: Config, n: usize) -> Vec<[u8; 4]> {
    let (mut ws, mut peer) = client(config);
    let mut keys = Vec::new();
    for _ in 0..n {
        ws.send(Message::text("x")).await.unwrap();
        let mut frame = [0u8; 7];
        peer.read_exact(&mut frame).await.unwrap();
        assert_eq!(frame[..2], [0x81, 0x81], "masked one-byte text frame");
        let key: [u8; 4] = frame[2..6].try_into().unwrap();
        assert_eq!(frame[6] ^ key[0], b'x');
        keys.push(key);
    }
    keys
}

#[tokio::test]
async fn default_config_draws_different_keys_on_every_connection() {
    let a = first_keys(Config::default(), 4).await;
    let b = first_keys(Config::default(), 4).await;
    // Sixteen equal random bytes: odds of 2^-128.
    assert_ne!(a, b);
    // And the key changes from frame to frame.
    assert!(a.windows(2).any(|w| w[0] != w[1]), "{a:?}");
}

#[tokio::test]
async fn counting_keys_start_again_on_every_connection() {
    let config = Config::default().mask_keys(MaskKeys::CountingForTesting(0xffff_ffff));
    let expected = [[0xff; 4], [0, 0, 0, 0], [0, 0, 0, 1]];
    assert_eq!(first_keys(config.clone(), 3).await, expected);
    assert_eq!(first_keys(config, 3).await, expected);
}

#[tokio::test]
async fn a_fixed_key_masks_every_frame() {
    let config = Config::default().mask_keys(MaskKeys::FixedForTesting([9, 8, 7, 6]));
    assert_eq!(first_keys(config, 3).await, [[9, 8, 7, 6]; 3]);
}

#[tokio::test]
async fn a_server_ignores_mask_keys() {
    let (ours, mut peer) = tokio::io::duplex(1024);
    let config = Config::default().mask_keys(MaskKeys::FixedForTesting([9, 8, 7, 6]));
    let mut ws = WebSocketStream::from_raw_socket(ours, Role::Server, config).unwrap();
    ws.send(Message::text("x")).await.unwrap();
    let mut frame = [0u8; 3];
    peer.read_exact(&mut frame).await.unwrap();
    assert_eq!(frame, [0x81, 0x01, b'x']);
}

/// The client's ping "hi", masked with a key of zeros.
const CLIENT_PING: &[u8] = &[0x89, 0x82, 0, 0, 0, 0, b'h', b'i'];
/// The server's pong to it.
const SERVER_PONG: &[u8] = &[0x8a, 0x02, b'h', b'i'];

/// A single poll yields the ping and has written its pong, as it writes a
/// close's echo: a program that drops the stream right after `next()`
/// returns the ping has still answered it (the mock checks on drop that
/// every scripted byte was written). (Issue 68: the pong waited for the
/// next poll, and such a program never answered.)
#[tokio::test]
async fn a_server_writes_the_pong_in_the_poll_that_yields_the_ping() {
    let io = Builder::new().read(CLIENT_PING).write(SERVER_PONG).build();
    let mut ws = WebSocketStream::from_raw_socket(io, Role::Server, Config::default()).unwrap();
    assert_eq!(
        poll_once(&mut ws).await,
        Poll::Ready(Some(Message::Ping(Bytes::from_static(b"hi"))))
    );
    drop(ws);
}

/// The same for a client, whose pong is masked (key 37 fa 21 3d).
#[tokio::test]
async fn a_client_writes_the_pong_in_the_poll_that_yields_the_ping() {
    let config = Config::default().mask_keys(MaskKeys::CountingForTesting(0x37fa_213d));
    let io = Builder::new()
        .read(SERVER_PONG_AS_PING)
        .write(&[0x8a, 0x82, 0x37, 0xfa, 0x21, 0x3d, b'h' ^ 0x37, b'i' ^ 0xfa])
        .build();
    let mut ws = WebSocketStream::from_raw_socket(io, Role::Client, config).unwrap();
    assert_eq!(
        poll_once(&mut ws).await,
        Poll::Ready(Some(Message::Ping(Bytes::from_static(b"hi"))))
    );
    drop(ws);
}
/// The server's ping "hi" (unmasked).
const SERVER_PONG_AS_PING: &[u8] = &[0x89, 0x02, b'h', b'i'];

/// Two pings in one read: both pongs are written by the poll that yields
/// the second (the last frame read), the first waiting for it so that they
/// go out together (a write per ping would be a segment per pong, which a
/// peer that is not reading runs out of buffer for).
#[tokio::test]
async fn the_pongs_to_pings_read_together_are_written_by_the_last_ping() {
    let io = Builder::new()
        .read(&[CLIENT_PING, CLIENT_PING].concat())
        .write(&[SERVER_PONG, SERVER_PONG].concat())
        .build();
    let mut ws = WebSocketStream::from_raw_socket(io, Role::Server, Config::default()).unwrap();
    for _ in 0..2 {
        assert_eq!(
            poll_once(&mut ws).await,
            Poll::Ready(Some(Message::Ping(Bytes::from_static(b"hi"))))
        );
    }
    drop(ws);
}

/// A transport that cannot take the pong when the ping is yielded does not
/// hold `next()` up: the ping is yielded, the pong stays queued and a flush
/// writes it.
#[tokio::test]
async fn a_pong_the_transport_could_not_take_goes_out_with_a_flush() {
    let io = Builder::new()
        .read(CLIENT_PING)
        .wait(Duration::from_millis(20))
        .write(SERVER_PONG)
        .build();
    let mut ws = WebSocketStream::from_raw_socket(io, Role::Server, Config::default()).unwrap();
    assert_eq!(
        poll_once(&mut ws).await,
        Poll::Ready(Some(Message::Ping(Bytes::from_static(b"hi"))))
    );
    ws.flush().await.unwrap();
    drop(ws);
}

/// The split receiver writes the pong in the poll that yields the ping too.
#[tokio::test]
async fn a_split_receiver_writes_the_pong_in_the_poll_that_yields_the_ping() {
    let io = Builder::new().read(CLIENT_PING).write(SERVER_PONG).build();
    let ws = WebSocketStream::from_raw_socket(io, Role::Server, Config::default()).unwrap();
    let (tx, mut rx) = ws.split();
    let first = poll_fn(|cx| Poll::Ready(rx.poll_next_unpin(cx))).await;
    assert!(
        matches!(&first, Poll::Ready(Some(Ok(Message::Ping(p)))) if p.as_ref() == b"hi"),
        "{first:?}"
    );
    drop((tx, rx));
}

/// Over loopback: a server that drops its Stream (split or not) as soon as
/// `next()` returns the ping has answered it; the client reads the pong
/// before the end of the connection.
#[tokio::test]
async fn a_server_that_drops_the_stream_on_a_ping_has_answered_it() {
    use tokio::io::AsyncWriteExt;
    use tokio::net::{TcpListener, TcpStream};
    for split in [false, true] {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let ws = wavesock::accept_async(tcp).await.unwrap();
            let msg = if split {
                let (_tx, mut rx) = ws.split();
                rx.next().await
            } else {
                let mut ws = ws;
                ws.next().await
            };
            assert!(matches!(msg, Some(Ok(Message::Ping(_)))), "{msg:?}");
            // Dropped here, without another poll or a flush.
        });
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(
            b"GET / HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
              Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        )
        .await
        .unwrap();
        tcp.write_all(CLIENT_PING).await.unwrap();
        server.await.unwrap();
        let mut all = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut all))
            .await
            .expect("the server ends the connection")
            .unwrap();
        let head_end = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        assert!(all.starts_with(b"HTTP/1.1 101"), "split={split}");
        assert_eq!(&all[head_end..], SERVER_PONG, "split={split}");
    }
}
