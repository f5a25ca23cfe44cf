//! Sending on one connection from many tasks through clones of the split
//! sender: order per handle, whole messages, backpressure, cancellation and
//! closing.

use std::time::Duration;

use futures_util::StreamExt;
use wavesock::{Config, Error, Message, Role, WebSocketStream};

/// Eight tasks, each sending 200 numbered messages through its own clone
/// into a small write buffer and a pipe smaller than one message, on two
/// threads: every message arrives whole, and each task's in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clones_send_from_many_tasks_in_order_under_backpressure() {
    const TASKS: u8 = 8;
    const EACH: u32 = 200;
    let (a, b) = tokio::io::duplex(512);
    let config = Config::default().max_backpressure(2048);
    let (tx, _rx) = WebSocketStream::from_raw_socket(a, Role::Server, config)
        .unwrap()
        .split();
    let mut peer = WebSocketStream::from_raw_socket(b, Role::Client, Config::default()).unwrap();
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let mut tx = tx.clone();
        tasks.push(tokio::spawn(async move {
            for seq in 0..EACH {
                let mut payload = vec![t; 1000];
                payload[1..5].copy_from_slice(&seq.to_be_bytes());
                tx.send(Message::binary(payload)).await.unwrap();
            }
        }));
    }
    drop(tx);
    let mut next = [0u32; TASKS as usize];
    for _ in 0..TASKS as u32 * EACH {
        let msg = tokio::time::timeout(Duration::from_secs(20), peer.next())
            .await
            .expect("no sender stalls")
            .unwrap()
            .unwrap();
        let data = msg.into_data();
        assert_eq!(data.len(), 1000);
        let t = data[0];
        assert!(data[5..].iter().all(|&b| b == t), "a message was torn");
        let seq = u32::from_be_bytes(data[1..5].try_into().unwrap());
        assert_eq!(seq, next[t as usize], "task {t} out of order");
        next[t as usize] += 1;
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// A send cancelled while it waits for room (its task may be the only one
/// the transport would wake) does not leave the other senders stuck.
#[tokio::test]
async fn a_cancelled_send_does_not_strand_the_others() {
    let (a, b) = tokio::io::duplex(256);
    let config = Config::default().max_backpressure(1024);
    let (mut tx, _rx) = WebSocketStream::from_raw_socket(a, Role::Server, config)
        .unwrap()
        .split();
    let mut peer = WebSocketStream::from_raw_socket(b, Role::Client, Config::default()).unwrap();
    // Fill the pipe and the write buffer: the peer does not read yet.
    let mut blocked = tx.clone();
    let waiting = tokio::spawn(async move {
        for i in 0..20u8 {
            blocked.send(Message::binary(vec![i; 500])).await.unwrap();
        }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiting.is_finished(), "the peer is not reading");
    // A second sender waits too, then gives up: the last to ask the pipe.
    let cancelled =
        tokio::time::timeout(Duration::from_millis(50), tx.send(Message::text("x"))).await;
    assert!(cancelled.is_err());
    // The peer reads: the first sender must finish.
    let reader = tokio::spawn(async move {
        let mut n = 0;
        while let Some(Ok(m)) = peer.next().await {
            if m.is_binary() {
                n += 1;
                if n == 20 {
                    break;
                }
            }
        }
        n
    });
    tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the other sender was woken")
        .unwrap();
    assert_eq!(reader.await.unwrap(), 20);
}

/// The first close frame, from any clone, ends sending for all of them;
/// the halves cannot be reunited while clones remain.
#[tokio::test]
async fn one_clone_closing_closes_for_all() {
    let (a, b) = tokio::io::duplex(4096);
    let (tx, rx) = WebSocketStream::from_raw_socket(a, Role::Server, Config::default())
        .unwrap()
        .split();
    let mut peer = WebSocketStream::from_raw_socket(b, Role::Client, Config::default()).unwrap();
    let mut one = tx.clone();
    let mut other = tx.clone();
    one.send(Message::Close(None)).await.unwrap();
    assert!(tx.is_close_sent());
    assert!(matches!(
        other.send(Message::text("late")).await,
        Err(Error::AlreadyClosed)
    ));
    assert_eq!(peer.next().await.unwrap().unwrap(), Message::Close(None));
    let (tx, rx) = rx.reunite(tx).expect_err("clones remain");
    drop((one, other));
    rx.reunite(tx).expect("the last clone");
}

/// Two senders wait on a peer that does not read: the transport remembers
/// only the last to ask. When the peer reads, that one's progress must wake
/// the other, although it keeps its handle (no drop to wake anyone).
#[tokio::test]
async fn a_waiting_sender_is_woken_by_another_senders_progress() {
    let (a, b) = tokio::io::duplex(256);
    let config = Config::default().max_backpressure(1024);
    let (tx, _rx) = WebSocketStream::from_raw_socket(a, Role::Server, config)
        .unwrap()
        .split();
    let mut peer = WebSocketStream::from_raw_socket(b, Role::Client, Config::default()).unwrap();
    let mut first = tx.clone();
    let first_done = tokio::spawn(async move {
        first.send(Message::binary(vec![1u8; 4000])).await.unwrap();
        first
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut second = tx.clone();
    let (keep, kept) = tokio::sync::oneshot::channel::<()>();
    let second_done = tokio::spawn(async move {
        second.send(Message::text("second")).await.unwrap();
        // Stays alive, holding its handle, until the test ends.
        let _ = kept.await;
        drop(second);
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!first_done.is_finished() && !second_done.is_finished());
    let reader = tokio::spawn(async move {
        let mut got = Vec::new();
        while got.len() < 2 {
            got.push(peer.next().await.unwrap().unwrap());
        }
        got
    });
    let first = tokio::time::timeout(Duration::from_secs(5), first_done)
        .await
        .expect("the first sender was woken")
        .unwrap();
    let got = reader.await.unwrap();
    assert_eq!(got[0], Message::binary(vec![1u8; 4000]));
    assert_eq!(got[1], Message::text("second"));
    drop((first, keep, tx));
}

/// A prepared close frame closes like `Message::Close`.
#[tokio::test]
async fn a_prepared_close_frame_closes_the_sending_side() {
    let (a, b) = tokio::io::duplex(4096);
    let (mut tx, _rx) = WebSocketStream::from_raw_socket(a, Role::Server, Config::default())
        .unwrap()
        .split();
    let mut peer = WebSocketStream::from_raw_socket(b, Role::Client, Config::default()).unwrap();
    let bye = wavesock::PreparedMessage::new(&Message::Close(None)).unwrap();
    tx.send_prepared(&bye).await.unwrap();
    assert!(tx.is_close_sent());
    assert!(matches!(
        tx.send(Message::text("late")).await,
        Err(Error::AlreadyClosed)
    ));
    assert_eq!(peer.next().await.unwrap().unwrap(), Message::Close(None));
}

/// The receiver owes a pong while the sender's large message fills the
/// queue, so it waits without reading. When the sender's writes make
/// progress, the receiver must be woken to pay its debt and read on.
#[tokio::test]
async fn a_receiver_waiting_to_pay_a_pong_is_woken_by_the_senders_progress() {
    let (a, b) = tokio::io::duplex(256);
    let config = Config::default().max_backpressure(1024);
    let (mut tx, mut rx) = WebSocketStream::from_raw_socket(a, Role::Server, config)
        .unwrap()
        .split();
    let (mut peer_tx, mut peer_rx) =
        WebSocketStream::from_raw_socket(b, Role::Client, Config::default())
            .unwrap()
            .split();
    let sending = tokio::spawn(async move {
        tx.send(Message::binary(vec![5u8; 8000])).await.unwrap();
        tx
    });
    let received = tokio::spawn(async move {
        let mut got = Vec::new();
        while let Some(Ok(msg)) = rx.next().await {
            let done = msg.is_text();
            got.push(msg);
            if done {
                break;
            }
        }
        got
    });
    peer_tx.send(Message::Ping("p".into())).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    // The peer reads now: the big message, then the pong.
    let mut seen = Vec::new();
    while seen.len() < 2 {
        seen.push(peer_rx.next().await.unwrap().unwrap());
    }
    assert_eq!(seen[1], Message::Pong("p".into()));
    peer_tx.send(Message::text("after")).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), received)
        .await
        .expect("the receiver was woken and read on")
        .unwrap();
    assert_eq!(got, [Message::Ping("p".into()), Message::text("after")]);
    let _tx = sending.await.unwrap();
}
