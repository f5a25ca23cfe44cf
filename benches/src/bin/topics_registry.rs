//! The topics registry's throughput: publishes from every worker of a
//! multi-thread runtime, each to topics of its own, with the registry on
//! one lock (`TopicsConfig::shards(1)`) against sharded (64), alternated
//! in one run.
//!
//! ```text
//! cargo run --profile bench -p wavesock-benches --bin topics_registry -- [options]
//!
//!   --workers W     runtime workers publishing (default: the cores)
//!   --topics T      topics, each with one TopicReceiver (default 1000)
//!   --publishes P   publishes per worker per run (default 200000)
//!   --rounds R      runs of each, alternated (default 5)
//! ```
//!
//! Receivers do not read: each topic's ring stays at its capacity (16),
//! so every publish takes the topic's shard lock, its order lock and its
//! ring's lock, and drops the oldest message. Prints publishes/s, median
//! and range, per setting, and the ratio of the medians.

use std::sync::Arc;
use std::time::Instant;

use wavesock::topics::{Topics, TopicsConfig};
use wavesock::{Message, PreparedMessage};

fn main() {
    let mut workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut topics = 1000;
    let mut publishes = 200_000;
    let mut rounds = 5;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || -> usize {
            args.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{a} needs a number"))
        };
        match a.as_str() {
            "--workers" => workers = value(),
            "--topics" => topics = value(),
            "--publishes" => publishes = value(),
            "--rounds" => rounds = value(),
            other => panic!("unknown option {other}"),
        }
    }
    let settings = [1usize, 64];
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); settings.len()];
    for _ in 0..rounds {
        for (i, &shards) in settings.iter().enumerate() {
            rates[i].push(run(shards, workers, topics, publishes));
        }
    }
    println!(
        "{workers} workers, {topics} topics, {publishes} publishes per worker, {rounds} rounds\n"
    );
    println!("| registry | publishes/s (median) | range |");
    println!("| --- | ---: | ---: |");
    let mut medians = Vec::new();
    for (i, &shards) in settings.iter().enumerate() {
        let r = &mut rates[i];
        r.sort_by(f64::total_cmp);
        let median = r[r.len() / 2];
        medians.push(median);
        let name = if shards == 1 {
            "one lock".to_owned()
        } else {
            format!("{shards} shards")
        };
        println!(
            "| {name} | {:.0} | {:.0}–{:.0} |",
            median,
            r[0],
            r[r.len() - 1]
        );
    }
    println!("\nsharded / one lock: {:.2}×", medians[1] / medians[0]);
}

/// Publishes per second with the registry on `shards` locks.
fn run(shards: usize, workers: usize, topics: usize, publishes: usize) -> f64 {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .build()
        .expect("a runtime");
    let registry = Topics::with_config(TopicsConfig::default().shards(shards).stream_capacity(16));
    let names: Arc<Vec<String>> = Arc::new((0..topics).map(|t| format!("topic:{t}")).collect());
    let _receivers: Vec<_> = names.iter().map(|n| registry.subscribe(n)).collect();
    let msg = PreparedMessage::new(&Message::text("x".repeat(32))).expect("a data message");
    let start = Instant::now();
    rt.block_on(async {
        let tasks: Vec<_> = (0..workers)
            .map(|w| {
                let (registry, names, msg) = (registry.clone(), names.clone(), msg.clone());
                tokio::spawn(async move {
                    // Each worker's own topics, in turn.
                    let mine: Vec<&String> = names.iter().skip(w).step_by(workers).collect();
                    for i in 0..publishes {
                        registry.publish(mine[i % mine.len()], &msg);
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("a publishing task");
        }
    });
    (workers * publishes) as f64 / start.elapsed().as_secs_f64()
}
