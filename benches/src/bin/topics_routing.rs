//! Many topics across servers through one Redis: what each server receives
//! from Redis with a channel per topic (wavesock's link: a server
//! subscribes only to the topics it has subscribers for) against one
//! channel for all topics (the design before it, which Phoenix PubSub's
//! and Socket.IO's classic Redis adapters use), in the same run.
//!
//! ```text
//! topics_routing --redis URL [--servers S] [--topics T] [--messages K] [--size B]
//! ```
//!
//! S servers (registries in this process, each with its own link, as
//! processes would have) hold T topics between them, each topic's one
//! subscriber on server `t % S`; one more server, with no subscribers,
//! publishes K messages of B bytes round-robin over the topics. Beside
//! it, S plain Redis subscribers of one channel receive the same K
//! publishes (the same wire size), as the one-channel design's servers
//! did. Prints, per design, what a server receives from Redis (messages
//! and bytes, the mean over servers), and for the link publishes/s from
//! the first publish to the last delivery and the publish-to-delivery
//! latency (p50, p99) at that rate.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use wavesock::topics::Topics;
use wavesock::topics::redis::{LinkState, RedisLink, RedisLinkConfig};
use wavesock::{Message, PreparedMessage};

fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_owned())
}

/// The link's wire size of a publish (see src/topics/redis.rs): header,
/// topic, payload.
fn wire_size(topic: &str, size: usize) -> usize {
    22 + topic.len() + size
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let url = arg("--redis", "redis://127.0.0.1:6379/");
    let servers: usize = arg("--servers", "4").parse().expect("--servers");
    let topics_n: usize = arg("--topics", "1000").parse().expect("--topics");
    let messages: usize = arg("--messages", "20000").parse().expect("--messages");
    let size: usize = arg("--size", "64").parse().expect("--size");
    let size = size.max(8);
    let client = wavesock::redis::Client::open(url.as_str()).expect("a Redis URL");
    let prefix = format!("bench:{}:", std::process::id());
    let topic = |t: usize| format!("room:{t}");

    let mut links: Vec<(Topics, RedisLink)> = Vec::new();
    for _ in 0..=servers {
        let registry = Topics::new();
        let config = RedisLinkConfig::default()
            .prefix(prefix.clone())
            .queue(1 << 16);
        let link = registry.link_redis(client.clone(), config).expect("a link");
        let mut status = link.status();
        let _ = status.wait_for(|s| *s == LinkState::Up).await;
        links.push((registry, link));
    }
    // Subscribers: topic t on server t % S, timing each delivery.
    let latencies = Arc::new(Mutex::new(Vec::with_capacity(messages)));
    let delivered = Arc::new(AtomicU64::new(0));
    let epoch = Instant::now();
    for t in 0..topics_n {
        let (registry, _) = &links[t % servers];
        let mut rx = registry.subscribe(&topic(t));
        let (latencies, delivered) = (latencies.clone(), delivered.clone());
        tokio::spawn(async move {
            while let Ok(msg) = rx.recv().await {
                let sent = u64::from_be_bytes(msg.payload()[..8].try_into().unwrap());
                let now = epoch.elapsed().as_nanos() as u64;
                latencies.lock().unwrap().push(now.saturating_sub(sent));
                delivered.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    for t in 0..topics_n {
        links[t % servers].1.live(&topic(t)).await;
    }

    // The one-channel design's servers: plain subscribers of one channel.
    let baseline = format!("{prefix}all");
    let mut base_counts = Vec::new();
    for _ in 0..servers {
        let mut pubsub = client.get_async_pubsub().await.expect("a subscriber");
        pubsub.subscribe(&baseline).await.expect("subscribed");
        let count = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
        let c = count.clone();
        tokio::spawn(async move {
            let mut stream = pubsub.into_on_message();
            while let Some(m) = stream.next().await {
                c.0.fetch_add(1, Ordering::Relaxed);
                c.1.fetch_add(m.get_payload_bytes().len() as u64, Ordering::Relaxed);
            }
        });
        base_counts.push(count);
    }
    let mut base_conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("a connection");

    let (publisher, _) = &links[servers];
    let start = Instant::now();
    let mut pipe = wavesock::redis::pipe();
    let mut in_pipe = 0;
    for i in 0..messages {
        let t = topic(i % topics_n);
        let mut payload = vec![b'x'; size];
        let now = epoch.elapsed().as_nanos() as u64;
        payload[..8].copy_from_slice(&now.to_be_bytes());
        let msg = PreparedMessage::new(&Message::binary(payload)).expect("data");
        publisher.publish(&t, &msg);
        pipe.publish(&baseline, vec![0u8; wire_size(&t, size)])
            .ignore();
        in_pipe += 1;
        if in_pipe == 256 {
            pipe.query_async::<()>(&mut base_conn)
                .await
                .expect("published");
            pipe = wavesock::redis::pipe();
            in_pipe = 0;
        }
        if i % 64 == 0 {
            tokio::task::yield_now().await;
        }
    }
    if in_pipe > 0 {
        pipe.query_async::<()>(&mut base_conn)
            .await
            .expect("published");
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while (delivered.load(Ordering::Relaxed) as usize) < messages && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = start.elapsed();
    let got = delivered.load(Ordering::Relaxed) as usize;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let mean = |v: Vec<u64>| v.iter().sum::<u64>() as f64 / v.len() as f64;
    let link_msgs = mean(
        links[..servers]
            .iter()
            .map(|(_, l)| l.stats().received)
            .collect(),
    );
    let wire_mean = (0..topics_n)
        .map(|t| wire_size(&topic(t), size))
        .sum::<usize>() as f64
        / topics_n as f64;
    let base_msgs = mean(
        base_counts
            .iter()
            .map(|c| c.0.load(Ordering::Relaxed))
            .collect(),
    );
    let base_bytes = mean(
        base_counts
            .iter()
            .map(|c| c.1.load(Ordering::Relaxed))
            .collect(),
    );
    let mut lat = latencies.lock().unwrap().clone();
    lat.sort_unstable();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
            .map_or(0.0, |n| *n as f64 / 1e3)
    };
    println!(
        "{servers} servers, {topics_n} topics, {messages} publishes of {size} B ({got} delivered)\n"
    );
    println!(
        "| design | messages from Redis per server | bytes per server | publishes/s | p50 | p99 |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    println!(
        "| a channel per topic (the link) | {link_msgs:.0} | {:.0} | {:.0} | {:.0} µs | {:.0} µs |",
        link_msgs * wire_mean,
        got as f64 / elapsed.as_secs_f64(),
        pct(0.5),
        pct(0.99)
    );
    println!("| one channel for all topics | {base_msgs:.0} | {base_bytes:.0} | – | – | – |");
    println!(
        "\nper server, channel per topic / one channel: {:.3} of the messages (1/S = {:.3})",
        link_msgs / base_msgs,
        1.0 / servers as f64
    );
}
