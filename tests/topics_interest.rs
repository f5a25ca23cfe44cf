//! Interest-based routing through a real `redis-server`: each topic is a
//! Redis channel of its own, which a server subscribes to only while it
//! has subscribers to the topic. Servers here are registries, each with its
//! own link, as separate processes would be.
//!
//! - A server with no subscriber to a topic is not subscribed to its
//!   channel (Redis's `PUBSUB NUMSUB`) and receives none of its traffic
//!   (the link's counter), while one with subscribers gets all of it.
//! - Subscribers that come and go, around the link's unsubscribe delay,
//!   lose nothing once the link says the topic is live: every publish made
//!   after that arrives, once, in order.

#[path = "support/redis.rs"]
mod redis_server;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use wavesock::topics::Topics;
use wavesock::topics::redis::{LinkState, RedisLink, RedisLinkConfig};
use wavesock::{Message, PreparedMessage};

async fn within<T>(secs: u64, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), f)
        .await
        .expect("in time")
}

async fn server(url: &str, delay: Duration) -> (Topics, RedisLink) {
    let topics = Topics::new();
    let client = wavesock::redis::Client::open(url).unwrap();
    let config = RedisLinkConfig::default()
        .unsubscribe_delay(delay)
        .backoff(Duration::from_millis(20), Duration::from_millis(200));
    let link = topics.link_redis(client, config).unwrap();
    let mut status = link.status();
    within(10, status.wait_for(|s| *s == LinkState::Up))
        .await
        .unwrap();
    (topics, link)
}

/// Subscribers of `channel` in Redis, over all connections.
async fn numsub(url: &str, channel: &str) -> u64 {
    let client = wavesock::redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let (_, n): (String, u64) = wavesock::redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query_async(&mut conn)
        .await
        .unwrap();
    n
}

async fn until(mut f: impl AsyncFnMut() -> bool) {
    within(10, async {
        while !f().await {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
}

fn text(i: u64) -> PreparedMessage {
    PreparedMessage::new(&Message::text(i.to_string())).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_subscribers_to_a_topic_gets_none_of_its_traffic() {
    let redis = redis_server::RedisServer::start();
    let url = redis.url();
    let delay = Duration::from_millis(100);
    let (a, link_a) = server(&url, delay).await;
    let (b, link_b) = server(&url, delay).await;
    let (c, link_c) = server(&url, delay).await;

    let mut on_a = a.subscribe("news");
    within(10, link_a.live("news")).await;
    assert!(!link_c.is_live("news"));
    assert_eq!(numsub(&url, "wavesock:t:news").await, 1, "only A's");

    for i in 0..100 {
        b.publish("news", &text(i));
    }
    for i in 0..100 {
        let got = within(10, on_a.recv()).await.unwrap();
        assert_eq!(got.payload(), &i.to_string());
    }
    // A topic nobody anywhere subscribes to is not subscribed either.
    c.publish("nobody", &text(0));
    assert_eq!(numsub(&url, "wavesock:t:nobody").await, 0);
    assert_eq!(link_a.stats().received, 100);
    assert_eq!(link_b.stats().sent, 100);
    assert_eq!(link_c.stats().received, 0, "C has no subscriber to news");
    assert_eq!(link_c.stats().subscribes, 0);

    // The last subscriber gone, the channel goes after the delay.
    drop(on_a);
    assert!(a.names().is_empty());
    until(async || numsub(&url, "wavesock:t:news").await == 0).await;
    assert!(!link_a.is_live("news"));
    assert_eq!(link_a.stats().unsubscribes, 1);
    let received = link_a.stats().received;
    b.publish("news", &text(100));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(link_a.stats().received, received, "nothing after leaving");
    let _ = (c, link_b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_that_come_and_go_lose_nothing_once_the_topic_is_live() {
    let redis = redis_server::RedisServer::start();
    let url = redis.url();
    let delay = Duration::from_millis(100);
    let (a, link_a) = server(&url, delay).await;
    let (b, _link_b) = server(&url, delay).await;

    // B publishes 1, 2, 3, ... without pause; `next` is the next number.
    let next = Arc::new(AtomicU64::new(0));
    let publisher = {
        let (b, next) = (b.clone(), next.clone());
        tokio::spawn(async move {
            loop {
                let i = next.load(Ordering::SeqCst);
                b.publish("feed", &text(i));
                next.store(i + 1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
        })
    };
    // Waits around the unsubscribe delay: before it ends (the channel
    // stays), and after (it goes and must come back).
    let pauses = [0, 30, 60, 90, 120, 150, 200, 250, 0, 110];
    for (round, pause) in pauses.into_iter().enumerate() {
        let mut rx = a.subscribe("feed");
        within(10, link_a.live("feed")).await;
        // Everything from here on must arrive.
        let from = next.load(Ordering::SeqCst);
        let mut expect = None;
        while expect.is_none_or(|e| e < from + 50) {
            let got: u64 = within(10, rx.recv()).await.unwrap().payload()[..]
                .iter()
                .fold(0, |n, d| n * 10 + u64::from(d - b'0'));
            match expect {
                // Before `from`, anything goes (it raced the subscription).
                None if got < from => continue,
                None => assert_eq!(got, from, "round {round}: {from} missed"),
                Some(e) => assert_eq!(got, e, "round {round}: out of order or missed"),
            }
            expect = Some(got + 1);
        }
        drop(rx);
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
    publisher.abort();
    let stats = link_a.stats();
    assert!(
        stats.subscribes >= 2,
        "the channel went and came back: {stats:?}"
    );
    assert_eq!(stats.dropped_incoming, 0);
}
