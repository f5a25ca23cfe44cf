//! Exact wire behaviour, scripted with `tokio_test::io::Builder`: every byte
//! the connection writes is checked, in order.

use crate::support::{close_payload, masked, unmasked};
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use tokio_test::io::Builder;
use wavesock::{CloseCode, CloseFrame, Config, Error, Message, Role, WebSocketStream};

#[tokio::test]
async fn server_pongs_then_echoes_close_then_ends() {
    let io = Builder::new()
        .read(&masked(0x89, b"hi"))
        .write(&unmasked(0x8A, b"hi"))
        .read(&masked(0x88, &close_payload(1001, "away")))
        .write(&unmasked(0x88, &close_payload(1001, "away")))
        .build();
    let mut ws = WebSocketStream::from_raw_socket(io, Role::Server, Config::default()).unwrap();
    assert_eq!(
        ws.next().await.unwrap().unwrap(),
        Message::Ping(Bytes::from_static(b"hi"))
    );
    assert_eq!(
        ws.next().await.unwrap().unwrap(),
        Message::Close(Some(CloseFrame::new(CloseCode::GOING_AWAY, "away")))
    );
    assert!(ws.next().await.is_none());
}

#[tokio::test]
async fn empty_close_is_echoed_empty() {
    let io = Builder::new()
        .read(&masked(0x88, b""))
        .write(&unmasked(0x88, b""))
        .build();
    let mut ws = WebSocketStream::from_raw_socket(io, Role::Server, Config::default()).unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::Close(None));
    assert!(ws.next().await.is_none());
}

#[tokio::test]
async fn frames_after_the_peer_close_are_ignored() {
    let mut wire = masked(0x88, &close_payload(1000, ""));
    wire.extend(masked(0x81, b"ignored"));
    let io = Builder::new()
        .read(&wire)
        .write(&unmasked(0x88, &close_payload(1000, "")))
        .build();
    let mut ws = WebSocketStream::from_raw_socket(io, Role::Server, Config::default()).unwrap();
    assert!(ws.next().await.unwrap().unwrap().is_close());
    assert!(ws.next().await.is_none());
}

#[tokio::test]
async fn protocol_error_sends_1002_before_the_error() {
    let io = Builder::new()
        .read(&[0x81, 0x01, b'x']) // unmasked from a client
        .write(&unmasked(
            0x88,
            &close_payload(1002, "unmasked frame from a client"),
        ))
        .build();
    let mut ws = WebSocketStream::from_raw_socket(io, Role::Server, Config::default()).unwrap();
    let err = ws.next().await.unwrap().unwrap_err();
    assert_eq!(err.close_code(), Some(CloseCode::PROTOCOL_ERROR));
    assert!(ws.next().await.is_none());
    assert!(matches!(
        ws.send(Message::text("x")).await,
        Err(Error::AlreadyClosed)
    ));
}

#[tokio::test]
async fn oversized_frame_sends_1009_from_the_header_alone() {
    // The header announces 2^63 - 1 bytes; nothing more is read.
    let io = Builder::new()
        .read(&[
            0x82, 0xFF, 0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 1, 2, 3, 4,
        ])
        .write(&unmasked(
            0x88,
            &close_payload(1009, "frame over max_frame_size"),
        ))
        .build();
    let mut ws = WebSocketStream::from_raw_socket(io, Role::Server, Config::default()).unwrap();
    let err = ws.next().await.unwrap().unwrap_err();
    assert!(matches!(err, Error::FrameTooLarge { .. }), "{err}");
    assert_eq!(err.close_code(), Some(CloseCode::MESSAGE_TOO_BIG));
}

#[tokio::test]
async fn invalid_utf8_sends_1007() {
    let io = Builder::new()
        .read(&masked(0x81, &[b'a', 0xFF]))
        .write(&unmasked(0x88, &close_payload(1007, "invalid UTF-8")))
        .build();
    let mut ws = WebSocketStream::from_raw_socket(io, Role::Server, Config::default()).unwrap();
    assert!(matches!(ws.next().await.unwrap(), Err(Error::InvalidUtf8)));
}

#[tokio::test]
async fn server_initiated_close_waits_for_the_reply() {
    let io = Builder::new()
        .write(&unmasked(0x88, &close_payload(1000, "bye")))
        .read(&masked(0x81, b"late data"))
        .read(&masked(0x88, &close_payload(1000, "")))
        .build();
    let mut ws = WebSocketStream::from_raw_socket(io, Role::Server, Config::default()).unwrap();
    ws.send(Message::Close(Some(CloseFrame::new(
        CloseCode::NORMAL,
        "bye",
    ))))
    .await
    .unwrap();
    // Data the peer sent before seeing our close still arrives.
    assert_eq!(
        ws.next().await.unwrap().unwrap(),
        Message::text("late data")
    );
    assert!(ws.next().await.unwrap().unwrap().is_close());
    assert!(ws.next().await.is_none());
}

#[tokio::test]
async fn server_writes_unmasked_frames_with_minimal_lengths() {
    let big = vec![7u8; 300];
    let io = Builder::new()
        .write(&unmasked(0x81, b"Hello"))
        .write(&unmasked(0x82, &big))
        .build();
    let mut ws = WebSocketStream::from_raw_socket(io, Role::Server, Config::default()).unwrap();
    ws.send(Message::text("Hello")).await.unwrap();
    ws.send(Message::binary(big)).await.unwrap();
}
