use std::time::Duration;

use bytes::Bytes;

use super::*;
use crate::proto::message::{Message, PreparedMessage};
use crate::topics::redis::config::{NEVER, capped, next_backoff};
use crate::topics::redis::tasks::{drop_queued, jittered};
use crate::topics::redis::wire::{HEAD, Incoming, decode, encode};
use crate::topics::{Link, Remote};

fn prepared(msg: Message) -> PreparedMessage {
    PreparedMessage::new(&msg).unwrap()
}

#[test]
fn publishes_round_trip_through_the_wire_form() {
    let origin = [7u8; 16];
    for msg in [
        Message::text("héllo"),
        Message::binary(vec![0u8, 255, 1]),
        Message::text(""),
    ] {
        let wire = encode(&origin, "room/1", &prepared(msg.clone())).unwrap();
        let got = decode(&wire, 1 << 20).unwrap();
        assert_eq!(
            got,
            Incoming {
                origin,
                topic: "room/1".into(),
                msg
            }
        );
    }
}

#[test]
fn control_messages_do_not_travel() {
    let ping = prepared(Message::Ping(Bytes::from_static(b"x")));
    assert_eq!(encode(&[0; 16], "t", &ping), None);
}

#[test]
fn anything_else_on_the_channel_is_refused() {
    let origin = [1u8; 16];
    let good = encode(&origin, "t", &prepared(Message::text("abc"))).unwrap();
    assert!(decode(&good, 4).is_some());
    // Too large for the limit (topic and payload count).
    assert_eq!(decode(&good, 3), None);
    // Truncated, another version, an unknown opcode, a topic longer
    // than the message, a topic or text that is not UTF-8.
    assert_eq!(decode(&good[..HEAD - 1], 1 << 20), None);
    let mut bad = good.to_vec();
    bad[0] = 2;
    assert_eq!(decode(&bad, 1 << 20), None);
    let mut bad = good.to_vec();
    bad[17] = 9;
    assert_eq!(decode(&bad, 1 << 20), None);
    let mut bad = good.to_vec();
    bad[18..22].copy_from_slice(&100u32.to_be_bytes());
    assert_eq!(decode(&bad, 1 << 20), None);
    let mut bad = good.to_vec();
    bad[HEAD] = 0xff;
    assert_eq!(decode(&bad, 1 << 20), None);
    let mut bad = good.to_vec();
    *bad.last_mut().unwrap() = 0xff;
    assert_eq!(decode(&bad, 1 << 20), None);
    assert_eq!(decode(b"hello from redis-cli", 1 << 20), None);
}

#[test]
fn a_link_that_is_not_up_drops_and_counts() {
    let (queue, mut rx) = mpsc::channel(1);
    let shared = Arc::new(Shared::new(queue, &RedisLinkConfig::default()));
    let msg = prepared(Message::text("x"));
    assert_eq!(shared.send("t", &msg), Remote::Dropped);
    assert_eq!(shared.dropped_down.load(Ordering::Relaxed), 1);
    shared.state.store(UP, Ordering::Release);
    assert_eq!(shared.send("t", &msg), Remote::Queued);
    assert_eq!(
        shared.send("t", &msg),
        Remote::Dropped,
        "queue of 1 is full"
    );
    assert_eq!(shared.dropped_full.load(Ordering::Relaxed), 1);
    let (channel, wire) = rx.try_recv().unwrap();
    assert_eq!(channel, "wavesock:t:t");
    assert_eq!(decode(&wire, 100).unwrap().topic, "t");
    drop_queued(&shared, &mut rx);
    assert_eq!(shared.lost.load(Ordering::Relaxed), 0, "nothing was left");
    assert_eq!(shared.send("t", &msg), Remote::Queued);
    drop_queued(&shared, &mut rx);
    assert_eq!(shared.lost.load(Ordering::Relaxed), 1);
}

/// What Redis pushes waits within `incoming_bytes`, what is being
/// delivered counted too: taking a batch frees no room until the batch
/// is delivered.
#[test]
fn what_redis_pushed_waits_within_incoming_bytes_until_delivered() {
    let config = Arc::new(RedisLinkConfig::default().incoming_bytes(1000));
    let (queue, _publishes) = mpsc::channel(1);
    let shared = Arc::new(Shared::new(queue, &config));
    let topics = Topics::new();
    let mut rx = topics.subscribe("t");
    // 100 bytes each (channel and payload): ten fit.
    let channel = shared.channel("t").into_bytes();
    let wire = encode(&[9; 16], "t", &prepared(Message::binary(vec![0; 65]))).unwrap();
    assert_eq!(channel.len() + wire.len(), 100);
    let push = || {
        shared.on_push(redis::PushInfo {
            kind: redis::PushKind::Message,
            data: vec![
                redis::Value::BulkString(channel.clone()),
                redis::Value::BulkString(wire.to_vec()),
            ],
        })
    };
    let dropped = || shared.dropped_incoming.load(Ordering::Relaxed);
    let until = |what: &str, done: &dyn Fn() -> bool| {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    for _ in 0..10 {
        push();
    }
    assert_eq!(dropped(), 0, "ten fit");
    push();
    assert_eq!(dropped(), 1, "the eleventh does not");

    // The delivering task takes the ten, and waits mid-batch for the
    // topic's shard, held here.
    let shard = topics.inner.shard("t");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = {
        let (config, topics, shared) = (config.clone(), topics.clone(), shared.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                tokio::select! {
                    () = deliver(config, topics, shared) => {}
                    _ = stopped => {}
                }
            });
        })
    };
    until("the batch taken", &|| {
        lock(&shared.incoming).items.is_empty()
    });
    for _ in 0..10 {
        push();
    }
    assert_eq!(
        dropped(),
        11,
        "the ten being delivered still hold their room"
    );
    drop(shard);
    until("the ten delivered", &|| lock(&shared.incoming).bytes == 0);
    for _ in 0..10 {
        assert_eq!(rx.try_recv().unwrap().unwrap().payload().len(), 65);
    }
    assert_eq!(rx.try_recv(), Ok(None));
    // Delivered: room for ten again.
    for _ in 0..10 {
        push();
    }
    assert_eq!(dropped(), 11);
    until("the next ten delivered", &|| {
        lock(&shared.incoming).bytes == 0
    });
    let _ = stop.send(());
    task.join().unwrap();
    assert_eq!(shared.received.load(Ordering::Relaxed), 20);
}

#[test]
fn backoff_is_jittered_within_half_and_all() {
    let d = Duration::from_millis(100);
    let waits: Vec<_> = (0..100).map(|_| jittered(d)).collect();
    assert!(waits.iter().all(|j| *j >= d / 2 && *j <= d), "{waits:?}");
    assert!(waits.iter().any(|j| *j != waits[0]), "not all the same");
}

#[test]
fn waits_of_any_length_never_overflow() {
    // `mul_f64` of `Duration::MAX` used to panic: a link whose backoff
    // was set that long died on its first failure.
    assert!(jittered(Duration::MAX) <= NEVER);
    assert!(jittered(Duration::MAX) >= NEVER / 2);
    let max = Duration::MAX;
    assert_eq!(next_backoff(max, max), max);
    assert_eq!(next_backoff(max / 2 + Duration::from_nanos(1), max), max);
    let first = Duration::from_millis(100);
    assert_eq!(next_backoff(first, Duration::from_secs(5)), first * 2);
    assert_eq!(
        next_backoff(Duration::from_secs(4), Duration::from_secs(5)),
        Duration::from_secs(5)
    );
    let _ = tokio::time::Instant::now() + capped(Duration::MAX);
}

#[test]
fn linking_needs_a_runtime_and_happens_once() {
    let client = redis::Client::open("redis://127.0.0.1:1/").unwrap();
    let topics = Topics::new();
    assert!(matches!(
        topics.link_redis(client.clone(), RedisLinkConfig::default()),
        Err(LinkError::NoRuntime)
    ));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let link = topics
            .link_redis(client.clone(), RedisLinkConfig::default())
            .unwrap();
        assert!(matches!(
            topics.link_redis(client, RedisLinkConfig::default()),
            Err(LinkError::AlreadyLinked)
        ));
        // Nothing listens on port 1: the link reports it is down.
        let mut status = link.status();
        let down = status
            .wait_for(|s| matches!(s, LinkState::Down(_)))
            .await
            .map(|s| s.clone());
        assert!(matches!(down, Ok(LinkState::Down(_))));
        let p = topics.publish("t", &prepared(Message::text("x")));
        assert_eq!(p.remote, Remote::Dropped);
        assert_eq!(link.stats().dropped_down, 1);
        assert!(!link.is_up());
        let watcher = link.status();
        drop(link);
        assert_eq!(*watcher.borrow(), LinkState::Stopped);
    });
}
