//! Regression tests for bugs found by porting other crates' test suites and
//! by writing the code an application author writes. Each test is named
//! after the bug it pins down.

use crate::support;

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter};
use wavesock::{Config, Error, Message, Role, WebSocketStream};

use crate::support::masked;

/// The README's echo loop over a transport that buffers in `poll_write` and
/// pushes in `poll_flush` (`BufWriter` over a 64-byte pipe): the reply must
/// arrive whole, not just the first 64 bytes.
#[tokio::test]
async fn owed_output_in_a_buffering_transport_is_flushed_to_the_end() {
    let (a, mut peer) = tokio::io::duplex(64);
    let mut ws =
        WebSocketStream::from_raw_socket(BufWriter::new(a), Role::Server, Config::default())
            .unwrap();
    let server = tokio::spawn(async move {
        while let Some(msg) = ws.next().await {
            let msg = msg?;
            if msg.is_data() {
                ws.feed(msg).await?;
            }
        }
        Ok::<_, Error>(())
    });
    let payload: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
    peer.write_all(&masked(0x82, &payload)).await.unwrap();
    let mut reply = vec![0u8; 1004];
    tokio::time::timeout(Duration::from_secs(5), peer.read_exact(&mut reply))
        .await
        .expect("the whole echo arrives")
        .unwrap();
    assert_eq!(&reply[..4], &[0x82, 126, 0x03, 0xE8]);
    assert_eq!(&reply[4..], &payload[..]);
    drop(peer);
    let _ = server.await;
}

/// The same for automatic pongs, which the read side owes on its own.
#[tokio::test]
async fn automatic_pongs_in_a_buffering_transport_are_flushed_to_the_end() {
    let (a, mut peer) = tokio::io::duplex(16);
    let ws = WebSocketStream::from_raw_socket(BufWriter::new(a), Role::Server, Config::default())
        .unwrap();
    // Split: the receiver owes the pong; nobody ever sends.
    let (_tx, mut rx) = ws.split();
    let reader = tokio::spawn(async move { while rx.next().await.is_some() {} });
    let payload = [7u8; 100];
    peer.write_all(&masked(0x89, &payload)).await.unwrap();
    let mut pong = vec![0u8; 102];
    tokio::time::timeout(Duration::from_secs(5), peer.read_exact(&mut pong))
        .await
        .expect("the whole pong arrives")
        .unwrap();
    assert_eq!(&pong[..2], &[0x8A, 100]);
    assert_eq!(&pong[2..], &payload[..]);
    drop(peer);
    let _ = reader.await;
}

/// `max_message_size` set alone (below the default frame limit) is a valid
/// configuration, and it bounds single frames too: a frame announcing more
/// is refused from its header, with 1009, before any payload is sent.
#[tokio::test]
async fn setting_only_the_message_limit_works_and_bounds_frames() {
    let config = Config::default().max_message_size(1 << 20);
    config.validate().unwrap();
    let (a, mut peer) = tokio::io::duplex(1 << 16);
    let mut ws = WebSocketStream::from_raw_socket(a, Role::Server, config).unwrap();
    // A 1 MiB message is fine.
    let ok = vec![1u8; 1 << 20];
    let writer = tokio::spawn(async move {
        peer.write_all(&masked(0x82, &ok)).await.unwrap();
        // Only the header of a 2 MiB frame.
        peer.write_all(&masked(0x82, &vec![0u8; 2 << 20])[..14])
            .await
            .unwrap();
        peer
    });
    assert_eq!(ws.next().await.unwrap().unwrap().len(), 1 << 20);
    let err = ws.next().await.unwrap().unwrap_err();
    assert!(
        matches!(err, Error::MessageTooLarge { size, max } if size == 2 << 20 && max == 1 << 20),
        "{err:?}"
    );
    let mut peer = writer.await.unwrap();
    let mut buf = bytes::BytesMut::new();
    let (b0, payload) = support::read_frame(&mut peer, &mut buf).await.unwrap();
    assert_eq!(b0, 0x88);
    assert_eq!(&payload[..2], &1009u16.to_be_bytes());
}

/// `max_frame_size` set alone, below the default message limit.
#[tokio::test]
async fn setting_only_the_frame_limit_works() {
    let config = Config::default().max_frame_size(1024);
    let (a, mut peer) = tokio::io::duplex(1 << 16);
    let mut ws = WebSocketStream::from_raw_socket(a, Role::Server, config).unwrap();
    peer.write_all(&masked(0x02, &[1u8; 1024])).await.unwrap();
    peer.write_all(&masked(0x80, &[2u8; 1024])).await.unwrap();
    peer.write_all(&masked(0x82, &[3u8; 1025])).await.unwrap();
    // Two frames of 1 KiB make one 2 KiB message.
    assert_eq!(ws.next().await.unwrap().unwrap().len(), 2048);
    let err = ws.next().await.unwrap().unwrap_err();
    assert!(
        matches!(
            err,
            Error::FrameTooLarge {
                size: 1025,
                max: 1024
            }
        ),
        "{err:?}"
    );
}

/// A new data message in the middle of one sent in fragments would break
/// RFC 6455 §5.4 framing: it is refused, control frames still go between
/// fragments, and the message can be finished. Both roles.
#[tokio::test]
async fn a_new_message_cannot_interrupt_a_fragmented_one() {
    use wavesock::{Frame, OpCode};
    for role in [Role::Server, Role::Client] {
        let peer_role = match role {
            Role::Server => Role::Client,
            Role::Client => Role::Server,
        };
        let (a, b) = tokio::io::duplex(1 << 16);
        let mut ws = WebSocketStream::from_raw_socket(a, role, Config::default()).unwrap();
        let mut peer = WebSocketStream::from_raw_socket(b, peer_role, Config::default()).unwrap();
        // A continuation with nothing in progress.
        let err = ws
            .send(Message::Frame(Frame::new(true, OpCode::Continuation, "x")))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::InvalidMessage(_)), "{err:?}");
        ws.send(Message::Frame(Frame::new(false, OpCode::Text, "Hel")))
            .await
            .unwrap();
        for wrong in [
            Message::binary(vec![1u8; 10]),
            Message::text("intruder"),
            Message::Frame(Frame::new(true, OpCode::Binary, "x")),
        ] {
            let err = ws.send(wrong).await.unwrap_err();
            assert!(matches!(err, Error::InvalidMessage(_)), "{role:?}: {err:?}");
        }
        ws.send(Message::Ping("between".into())).await.unwrap();
        ws.send(Message::Frame(Frame::new(false, OpCode::Continuation, "l")))
            .await
            .unwrap();
        ws.send(Message::Frame(Frame::new(true, OpCode::Continuation, "o")))
            .await
            .unwrap();
        // Finished: a new message is fine again.
        ws.send(Message::binary(vec![9u8; 3])).await.unwrap();
        assert_eq!(
            peer.next().await.unwrap().unwrap(),
            Message::Ping("between".into())
        );
        assert_eq!(peer.next().await.unwrap().unwrap(), Message::text("Hello"));
        assert_eq!(
            peer.next().await.unwrap().unwrap(),
            Message::binary(vec![9u8; 3])
        );
    }
}
