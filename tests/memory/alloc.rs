//! Limits are checked before memory is reserved: measured with a counting
//! global allocator. One test function, so no other test allocates meanwhile.

use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::io::AsyncWriteExt;
use wavesock::{Config, Error, Role, WebSocketStream};

use crate::support::child;
use crate::support::counting;

use counting::{LIVE, PEAK};

/// Peak growth of live heap while `f` runs.
async fn peak_during<F: std::future::Future<Output = ()>>(f: F) -> usize {
    let base = LIVE.load(Ordering::SeqCst);
    PEAK.store(base, Ordering::SeqCst);
    f.await;
    PEAK.load(Ordering::SeqCst) - base
}

fn masked_header(len: u64) -> Vec<u8> {
    let mut h = vec![0x82, 0xFF];
    h.extend_from_slice(&len.to_be_bytes());
    h.extend_from_slice(&[1, 2, 3, 4]);
    h
}

#[test]
fn limits_are_checked_before_allocation() {
    if !child::alone() {
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // Warm-up: the first write on a thread sets up its spare buffer
        // (96 KiB, once per thread, not per connection).
        let (a, mut peer) = tokio::io::duplex(1024);
        let mut ws = WebSocketStream::from_raw_socket(a, Role::Server, Config::default()).unwrap();
        peer.write_all(&[0x82, 0x80, 1, 2, 3, 4]).await.unwrap();
        let msg = ws.next().await.unwrap().unwrap();
        ws.send(msg).await.unwrap();

        // 1. A 32 MiB frame is announced (within limits) but only 1 KiB
        //    arrives: the connection holds about what arrived, not 32 MiB.
        let (a, mut peer) = tokio::io::duplex(64 << 10);
        let config = Config::default()
            .max_frame_size(64 << 20)
            .max_message_size(64 << 20);
        let mut ws = WebSocketStream::from_raw_socket(a, Role::Server, config).unwrap();
        let grew = peak_during(async {
            peer.write_all(&masked_header(32 << 20)).await.unwrap();
            peer.write_all(&[0u8; 1024]).await.unwrap();
            let r = tokio::time::timeout(Duration::from_millis(50), ws.next()).await;
            assert!(r.is_err(), "still waiting for the payload");
        })
        .await;
        assert!(
            grew < 64 << 10,
            "32 MiB announced, 1 KiB sent, {grew} bytes allocated"
        );

        // 2. A 2^63 - 1 byte frame over the limit: refused from its header.
        let (a, mut peer) = tokio::io::duplex(64 << 10);
        let mut ws = WebSocketStream::from_raw_socket(a, Role::Server, Config::default()).unwrap();
        let grew = peak_during(async {
            peer.write_all(&masked_header((1 << 63) - 1)).await.unwrap();
            let err = ws.next().await.unwrap().unwrap_err();
            assert!(matches!(err, Error::FrameTooLarge { .. }), "{err}");
        })
        .await;
        assert!(
            grew < 64 << 10,
            "huge frame refused, {grew} bytes allocated"
        );

        // 3. Fragments adding up past max_message_size: refused at the
        //    header of the fragment that would cross it.
        let (a, mut peer) = tokio::io::duplex(1 << 20);
        let config = Config::default()
            .max_frame_size(2 << 20)
            .max_message_size(2 << 20);
        let mut ws = WebSocketStream::from_raw_socket(a, Role::Server, config).unwrap();
        let mut first = vec![0x02, 0xFF];
        first.extend_from_slice(&(1u64 << 20).to_be_bytes());
        first.extend_from_slice(&[0, 0, 0, 0]);
        first.extend(std::iter::repeat_n(0u8, 1 << 20));
        let mut second = first.clone();
        second[0] = 0x00;
        // A one-byte final fragment: 2 MiB + 1 in all.
        let third = vec![0x80, 0x81, 0, 0, 0, 0, 0];
        let writer = tokio::spawn(async move {
            peer.write_all(&first).await.unwrap();
            peer.write_all(&second).await.unwrap();
            peer.write_all(&third).await.unwrap();
            peer
        });
        let err = ws.next().await.unwrap().unwrap_err();
        assert!(
            matches!(err, Error::MessageTooLarge { max, .. } if max == 2 << 20),
            "{err}"
        );
        drop(writer.await.unwrap());
    });
}
