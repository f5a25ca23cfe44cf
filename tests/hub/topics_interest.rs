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
//! - Subscribes and drops from several threads while the link reconnects
//!   again and again neither deadlock the registry and the link nor leave
//!   the link's channels different from the topics held, once it settles.

use crate::support::redis as redis_server;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

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
    let Some(redis) = redis_server::RedisServer::start() else {
        return;
    };
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
    let Some(redis) = redis_server::RedisServer::start() else {
        return;
    };
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

/// Topics every churning thread shares, and those each has to itself.
const SHARED_TOPICS: usize = 16;
const OWN_TOPICS: usize = 32;
const CHURNERS: usize = 3;
/// Topics held throughout: the link always has channels to subscribe
/// again after each kill (and so is a pub/sub client Redis can kill).
const STEADY: usize = 100;
/// Times the link's subscribing connection is killed.
const KILLS: u64 = 150;

/// A small deterministic generator, so that each thread's sequence of
/// subscribes and drops is its own without a dependency.
fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// What a churning thread still holds when told to stop.
type Held = Vec<(String, wavesock::topics::TopicReceiver)>;

/// Subscribes to and drops random topics, some shared with the other
/// threads, until `stop`; what it holds then.
fn churn(topics: Topics, n: usize, stop: Arc<AtomicBool>, ops: Arc<AtomicU64>) -> Held {
    let mut rng = 0x9e37_79b9_7f4a_7c15 ^ (n as u64 + 1);
    let names: Vec<String> = (0..SHARED_TOPICS)
        .map(|k| format!("shared:{k}"))
        .chain((0..OWN_TOPICS).map(|k| format!("own:{n}:{k}")))
        .collect();
    let mut held: Vec<Option<wavesock::topics::TopicReceiver>> =
        names.iter().map(|_| None).collect();
    while !stop.load(Ordering::Relaxed) {
        let k = xorshift(&mut rng) as usize % names.len();
        // Dropping the last receiver of a topic tells the link it went;
        // subscribing to a topic nobody held tells it it came.
        match held[k].take() {
            Some(rx) => drop(rx),
            None => held[k] = Some(topics.subscribe(&names[k])),
        }
        ops.fetch_add(1, Ordering::Relaxed);
    }
    names
        .into_iter()
        .zip(held)
        .filter_map(|(name, rx)| Some((name, rx?)))
        .collect()
}

/// The channels with subscribers in Redis (`PUBSUB CHANNELS`), sorted,
/// each with its number of subscribers (`PUBSUB NUMSUB`).
fn channels(conn: &mut wavesock::redis::Connection) -> Vec<(String, u64)> {
    let mut names: Vec<String> = wavesock::redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .arg("wavesock:t:*")
        .query(conn)
        .unwrap();
    names.sort();
    if names.is_empty() {
        return Vec::new();
    }
    let counts: Vec<(String, u64)> = wavesock::redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(&names)
        .query(conn)
        .unwrap();
    counts
}

/// Subscribes and unsubscribes from several threads while the link's
/// subscribing connection is killed again and again (`CLIENT KILL TYPE
/// pubsub`), each reconnect reading the registry's topics anew. The
/// registry tells the link of a topic's first subscriber and its last, and
/// the link reads the registry: neither may wait for the other's lock
/// while holding its own. The threads run apart from the test, which
/// waits for them with a deadline and fails if they are stuck rather than
/// hang. Once it settles, Redis's subscriptions of the link are exactly
/// the topics still held: none for a topic nobody holds, none missing.
#[test]
fn subscribing_while_the_link_reconnects_neither_deadlocks_nor_strays() {
    let Some(redis) = redis_server::RedisServer::start() else {
        return;
    };
    let url = redis.url();
    let runtime = crate::support::two_workers();
    let topics = Topics::new();
    let config = RedisLinkConfig::default()
        .unsubscribe_delay(Duration::from_millis(20))
        .backoff(Duration::from_millis(1), Duration::from_millis(20))
        .ping_interval(Duration::from_millis(500))
        .timeout(Duration::from_secs(2));
    let client = wavesock::redis::Client::open(url.as_str()).unwrap();
    let link = {
        let _in = runtime.enter();
        topics.link_redis(client.clone(), config).unwrap()
    };
    let steady: Vec<_> = (0..STEADY)
        .map(|k| topics.subscribe(&format!("steady:{k}")))
        .collect();
    runtime.block_on(async {
        let mut status = link.status();
        within(10, status.wait_for(|s| *s == LinkState::Up))
            .await
            .unwrap();
    });

    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let kills = Arc::new(AtomicU64::new(0));
    let (done, finished) = std::sync::mpsc::channel::<(usize, Held)>();
    for n in 0..CHURNERS {
        let (topics, stop, ops, done) = (topics.clone(), stop.clone(), ops.clone(), done.clone());
        std::thread::spawn(move || {
            let held = churn(topics, n, stop, ops);
            let _ = done.send((n, held));
        });
    }
    // The killer: each kill that found the link's connection subscribed
    // (a pub/sub client) counts; between them the link reconnects and
    // subscribes again. It stops the churning threads when done, or when
    // kills stop finding the link (it no longer reconnects); it never
    // panics, so that it always tells the test it is done.
    {
        let (client, stop, kills, done) = (client.clone(), stop.clone(), kills.clone(), done);
        std::thread::spawn(move || {
            let mut conn = client.get_connection().unwrap();
            let mut last = Instant::now();
            while kills.load(Ordering::Relaxed) < KILLS && last.elapsed() < Duration::from_secs(10)
            {
                let killed: u64 = wavesock::redis::cmd("CLIENT")
                    .arg("KILL")
                    .arg("TYPE")
                    .arg("pubsub")
                    .query(&mut conn)
                    .unwrap_or(0);
                if killed > 0 {
                    kills.fetch_add(1, Ordering::Relaxed);
                    last = Instant::now();
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            stop.store(true, Ordering::Relaxed);
            let _ = done.send((CHURNERS, Vec::new()));
        });
    }

    // Every thread done within the deadline, or it is a deadlock: fail
    // (leaking what the stuck threads' locks hold up, the runtime whose
    // workers may be stuck too, and the receivers whose drop would wait
    // for a shard lock), never hang.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut held: Vec<(String, wavesock::topics::TopicReceiver)> = Vec::new();
    let mut stuck: Vec<usize> = (0..=CHURNERS).collect();
    while !stuck.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        match finished.recv_timeout(left) {
            Ok((n, h)) => {
                stuck.retain(|s| *s != n);
                held.extend(h);
            }
            Err(_) => {
                let (kills, ops) = (kills.load(Ordering::Relaxed), ops.load(Ordering::Relaxed));
                std::mem::forget((runtime, link, steady, held, topics));
                panic!(
                    "deadlock: threads {stuck:?} (the killer is {CHURNERS}) still stuck after 30 s, \
                     {kills} kills and {ops} subscribes and drops in: a subscribe or drop never \
                     returned (the registry and the link each waiting for the other's lock)"
                );
            }
        }
    }
    let kills = kills.load(Ordering::Relaxed);
    assert_eq!(kills, KILLS, "the link stopped reconnecting");

    // Settled: the link's channels are the topics held, each once.
    let mut want: Vec<String> = held
        .iter()
        .map(|(name, _)| name.clone())
        .chain((0..STEADY).map(|k| format!("steady:{k}")))
        .collect();
    want.sort();
    want.dedup();
    assert_eq!(
        topics.names(),
        want,
        "the registry holds what the threads hold"
    );
    let want: Vec<(String, u64)> = want
        .iter()
        .map(|t| (format!("wavesock:t:{t}"), 1))
        .collect();
    let mut conn = client.get_connection().unwrap();
    let settle = Instant::now() + Duration::from_secs(30);
    let mut got = channels(&mut conn);
    while got != want && Instant::now() < settle {
        std::thread::sleep(Duration::from_millis(20));
        got = channels(&mut conn);
    }
    let stray: Vec<_> = got.iter().filter(|c| !want.contains(c)).collect();
    let missing: Vec<_> = want.iter().filter(|c| !got.contains(c)).collect();
    assert!(
        stray.is_empty() && missing.is_empty(),
        "after {kills} kills: subscribed though nobody holds the topic (or more than once): \
         {stray:?}; held but not subscribed: {missing:?}"
    );
    // Past the unsubscribe delay, nothing changes any more.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        channels(&mut conn),
        want,
        "still, past the unsubscribe delay"
    );
    for (name, _) in &held {
        assert!(link.is_live(name), "{name} held: live");
    }
    assert_eq!(link.stats().live, want.len() as u64);

    // Every receiver gone, every channel goes.
    drop((held, steady));
    assert!(topics.names().is_empty());
    let settle = Instant::now() + Duration::from_secs(30);
    while !channels(&mut conn).is_empty() {
        assert!(
            Instant::now() < settle,
            "channels left: {:?}",
            channels(&mut conn)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(link);
    runtime.shutdown_timeout(Duration::from_secs(10));
}
