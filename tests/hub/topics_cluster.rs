//! Topics across servers through a real Redis Cluster (three masters, a
//! replica each, started on loopback by the test): sharded pub/sub, each
//! topic's channel on the master of its slot. Three servers (registries,
//! each with its own link, as three processes would be) with 1 000
//! subscribers each over 200 topics, whose channels land on every master.
//!
//! - Once every server says every topic is live, every subscriber gets
//!   every publish of every server exactly once, in each publisher's order.
//! - A master killed mid-run, its replica promoted: the links go down and
//!   come back, their counters account for every publish (sent, dropped,
//!   lost), nothing arrives twice or out of order, and once they are up
//!   and live again every publish reaches every subscriber again.
// chat and hub_chat each include examples/support/redis_args.rs, as
// their binaries do.
#![allow(clippy::duplicate_mod)]

use crate::support::redis as redis_server;

#[allow(dead_code)] // its main() is not ours to call
#[path = "../../examples/chat.rs"]
mod chat;

#[allow(dead_code)]
#[path = "../../examples/hub_chat.rs"]
mod hub_chat;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use wavesock::topics::redis::{LinkState, RedisLink, RedisLinkConfig};
use wavesock::topics::{Remote, Topics};
use wavesock::{Message, PreparedMessage};

const SERVERS: usize = 3;
const SUBSCRIBERS: usize = 1000;
const TOPICS: usize = 200;
/// Publishes per server and topic in each phase: before the failover,
/// during it, after.
const PHASES: [u32; 3] = [10, 10, 10];

async fn within<T>(secs: u64, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), f)
        .await
        .expect("in time")
}

fn topic(t: usize) -> String {
    format!("room:{t}")
}

/// What one subscriber got from each server: the last sequence number,
/// how many, and the first publish out of order or twice.
#[derive(Debug, Default, Clone)]
struct From {
    last: Option<u32>,
    count: u32,
    disorder: Option<(Option<u32>, u32)>,
}

type Got = Arc<Mutex<[From; SERVERS]>>;

/// A publish: the server, then its sequence number for the topic.
fn payload(server: usize, seq: u32) -> PreparedMessage {
    let mut b = vec![server as u8];
    b.extend_from_slice(&seq.to_be_bytes());
    PreparedMessage::new(&Message::binary(b)).unwrap()
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn all_live(links: &[RedisLink]) {
    for link in links {
        for t in 0..TOPICS {
            within(60, link.live(&topic(t))).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_share_200_topics_over_a_cluster_across_a_failover() {
    let Some(mut cluster) = redis_server::RedisCluster::start() else {
        return;
    };
    // The topics' channels are on every master.
    let masters: HashSet<u16> = (0..TOPICS)
        .map(|t| cluster.master_of(&format!("wavesock:t:{}", topic(t))))
        .collect();
    assert_eq!(masters.len(), 3, "channels on every master");

    let mut servers = Vec::new();
    let mut links = Vec::new();
    for _ in 0..SERVERS {
        let topics = Topics::new();
        let config = RedisLinkConfig::default()
            .backoff(Duration::from_millis(50), Duration::from_millis(500))
            .ping_interval(Duration::from_millis(300))
            .timeout(Duration::from_secs(2));
        let link = topics.link_redis_cluster(cluster.urls(), config).unwrap();
        servers.push(topics);
        links.push(link);
    }
    // Subscribers: 1 000 per server, topic by topic.
    let mut subs: Vec<(usize, Got)> = Vec::new();
    for (s, topics) in servers.iter().enumerate() {
        for i in 0..SUBSCRIBERS {
            let t = i % TOPICS;
            let got = Got::default();
            let mut rx = topics.subscribe(&topic(t));
            let seen = got.clone();
            tokio::spawn(async move {
                loop {
                    let msg = rx.recv().await.expect("kept up");
                    let p = msg.payload();
                    let from = usize::from(p[0]);
                    let seq = u32::from_be_bytes(p[1..5].try_into().unwrap());
                    let mut seen = seen.lock().unwrap();
                    let f = &mut seen[from];
                    if f.last.is_some_and(|l| seq <= l) && f.disorder.is_none() {
                        f.disorder = Some((f.last, seq));
                    }
                    f.last = Some(seq);
                    f.count += 1;
                }
            });
            subs.push((s, got));
        }
    }
    for link in &links {
        let mut status = link.status();
        within(30, status.wait_for(|s| *s == LinkState::Up))
            .await
            .unwrap();
    }
    all_live(&links).await;

    let publish = |phase: usize| {
        let start: u32 = PHASES[..phase].iter().sum();
        let mut outcomes = vec![Vec::new(); SERVERS];
        for seq in start..start + PHASES[phase] {
            for (s, topics) in servers.iter().enumerate() {
                for t in 0..TOPICS {
                    outcomes[s].push(topics.publish(&topic(t), &payload(s, seq)).remote);
                }
            }
        }
        outcomes
    };

    // Phase 1: every publish reaches every subscriber.
    let outcomes = publish(0);
    assert!(outcomes.iter().flatten().all(|r| *r == Remote::Queued));
    let per_sub = PHASES[0];
    until("phase 1", || {
        subs.iter()
            .all(|(_, g)| g.lock().unwrap().iter().all(|f| f.count >= per_sub))
    })
    .await;

    // Phase 2: a master dies mid-phase; its replica takes over.
    let victim = cluster.master_of(&format!("wavesock:t:{}", topic(0)));
    let first_half = publish(1);
    let new_master = cluster.fail_over(victim);
    assert_ne!(new_master, victim);
    for link in &links {
        let mut status = link.status();
        within(
            30,
            status.wait_for(|s| matches!(s, LinkState::Down(_)) || link.stats().connects >= 2),
        )
        .await
        .unwrap();
    }
    // Back: up on the new topology, every topic live again.
    for link in &links {
        until("the link comes back", || {
            link.stats().connects >= 2 && link.is_up()
        })
        .await;
    }
    all_live(&links).await;

    // Phase 3: everything reaches everyone again.
    let outcomes = publish(2);
    assert!(
        outcomes.iter().flatten().all(|r| *r == Remote::Queued),
        "healed: all queued"
    );
    let total: u32 = PHASES.iter().sum();
    until("phase 3", || {
        subs.iter()
            .all(|(_, g)| g.lock().unwrap().iter().all(|f| f.last == Some(total - 1)))
    })
    .await;

    for (i, (on, got)) in subs.iter().enumerate() {
        let got = got.lock().unwrap();
        for (from, f) in got.iter().enumerate() {
            assert_eq!(f.disorder, None, "subscriber {i} on {on}: from {from}");
            if from == *on {
                assert_eq!(f.count, total, "subscriber {i}: all of its own server's");
            } else {
                assert!(
                    f.count >= PHASES[0] + PHASES[2],
                    "subscriber {i} on {on}: {} from {from}",
                    f.count
                );
            }
        }
    }
    let remote_publishes = u64::from(total) * TOPICS as u64;
    for (s, link) in links.iter().enumerate() {
        let stats = link.stats();
        assert_eq!(
            stats.sent + stats.dropped_down + stats.dropped_full + stats.lost,
            remote_publishes,
            "server {s}: every publish accounted for: {stats:?}"
        );
        assert!(stats.connects >= 2, "server {s}: came back: {stats:?}");
        assert_eq!(stats.dropped_incoming, 0, "server {s}: {stats:?}");
        assert_eq!(stats.live, TOPICS as u64);
    }
    let _ = first_half;
}

type Client = wavesock::WebSocketStream<wavesock::MaybeTlsStream<tokio::net::TcpStream>>;

/// Says `line` (numbered) on `from` until `to` hears it: the servers'
/// links subscribe to the room as their first guests come.
async fn heard_across(from: &mut Client, to: &mut Client, line: &str) {
    within(60, async {
        for n in 0.. {
            from.send(Message::text(format!("{line} {n}")))
                .await
                .unwrap();
            let wait = tokio::time::sleep(Duration::from_millis(200));
            tokio::pin!(wait);
            loop {
                tokio::select! {
                    msg = to.next() => {
                        if let Message::Text(t) = msg.unwrap().unwrap() {
                            if t.as_str().contains(line) {
                                return;
                            }
                        }
                    }
                    () = &mut wait => break,
                }
            }
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chat_examples_share_a_room_over_a_cluster() {
    let Some(cluster) = redis_server::RedisCluster::start() else {
        return;
    };
    let cluster_arg = || {
        let value = cluster.urls().join(",");
        chat::redis_args::Redis::parse("--redis-cluster", Some(value)).unwrap()
    };
    let hub_cluster_arg = || {
        let value = cluster.urls().join(",");
        hub_chat::redis_args::Redis::parse("--redis-cluster", Some(value)).unwrap()
    };
    // Two servers of each example.
    let mut addrs = Vec::new();
    for n in 0..4 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        addrs.push(listener.local_addr().unwrap());
        if n < 2 {
            tokio::spawn(chat::serve_with(listener, Some(cluster_arg())));
        } else {
            tokio::spawn(hub_chat::serve(listener, Some(hub_cluster_arg())));
        }
    }
    let mut guests = Vec::new();
    for addr in &addrs {
        let (ws, _) = wavesock::connect_async(format!("ws://{addr}/ws"))
            .await
            .unwrap();
        guests.push(ws);
    }
    let (chats, hubs) = guests.split_at_mut(2);
    let (a, b) = chats.split_at_mut(1);
    heard_across(&mut a[0], &mut b[0], "over the cluster").await;
    let (c, d) = hubs.split_at_mut(1);
    heard_across(&mut c[0], &mut d[0], "over the cluster too").await;
}
