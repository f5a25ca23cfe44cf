//! The link's tasks: connecting, publishing, subscribing, delivering.

use crate::meter;
use crate::topics::redis::RedisLinkConfig;
use crate::topics::redis::config::{capped, next_backoff};
use crate::topics::redis::nodes::{Target, Topology};
use crate::topics::redis::shared::{LinkState, PUB_UP, SUB_UP, Shared, lock};
use crate::topics::redis::wire::decode_owned;
use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, watch};

use crate::proto::message::PreparedMessage;
use crate::topics::Topics;

/// Between half and all of `d` (of [`NEVER`] if longer: `mul_f64` panics
/// past `Duration::MAX`, which a float near it rounds to).
pub(super) fn jittered(d: Duration) -> Duration {
    capped(d).mul_f64(0.5 + rand::random::<f64>() / 2.0)
}

/// Connects to every node of `topology`, with `config` for each (a push
/// sender for the subscribing task).
pub(super) async fn connect_all(
    topology: &Topology,
    timeout: Duration,
    resp3: Option<&redis::AsyncConnectionConfig>,
) -> Result<Vec<redis::aio::MultiplexedConnection>, String> {
    let mut conns = Vec::with_capacity(topology.nodes.len());
    for node in &topology.nodes {
        let mut info = node.clone();
        if resp3.is_some() {
            info.redis.protocol = redis::ProtocolVersion::RESP3;
        }
        let client = redis::Client::open(info).map_err(|e| e.to_string())?;
        let connect = async {
            match resp3 {
                Some(c) => client.get_multiplexed_async_connection_with_config(c).await,
                None => client.get_multiplexed_async_connection().await,
            }
        };
        match tokio::time::timeout(timeout, connect).await {
            Ok(Ok(conn)) => conns.push(conn),
            Ok(Err(e)) => return Err(e.to_string()),
            Err(_) => return Err("connecting to Redis timed out".to_owned()),
        }
    }
    Ok(conns)
}

/// The publishing task: a connection per node (one, or each master of a
/// cluster), a pipeline of `PUBLISH` (`SPUBLISH`) per node and round trip,
/// in order; on failure, back off, learn the topology again and connect
/// again.
pub(super) async fn publish(
    target: Target,
    config: Arc<RedisLinkConfig>,
    shared: Arc<Shared>,
    mut queue: mpsc::Receiver<(String, Bytes)>,
    status: watch::Sender<LinkState>,
) {
    let mut backoff = config.backoff_first;
    loop {
        let up = async {
            let topology = crate::topics::redis::nodes::discover(&target, config.timeout).await?;
            let conns = connect_all(&topology, config.timeout, None).await?;
            Ok::<_, String>((topology, conns))
        };
        let error = match up.await {
            Ok((topology, conns)) => {
                backoff = config.backoff_first;
                shared.set_part(PUB_UP, Ok(()), &status);
                let error = carry_publishes(&config, &shared, &mut queue, &topology, conns).await;
                shared.set_part(PUB_UP, Err(error.clone()), &status);
                drop_queued(&shared, &mut queue);
                error
            }
            Err(e) => e,
        };
        shared.set_part(PUB_UP, Err(error), &status);
        #[cfg(feature = "tracing")]
        tracing::warn!("Redis link down (publishing)");
        tokio::time::sleep(jittered(backoff)).await;
        // Publishes that raced the state change are not sent either.
        drop_queued(&shared, &mut queue);
        backoff = next_backoff(backoff, config.backoff_max);
    }
}

/// Publishes queued for a connection that failed: not sent again.
pub(super) fn drop_queued(shared: &Shared, queue: &mut mpsc::Receiver<(String, Bytes)>) {
    while queue.try_recv().is_ok() {
        shared.lost.fetch_add(1, Ordering::Relaxed);
        meter::redis_publishes(meter::RedisOutcome::Lost, 1);
    }
}

/// Sends publishes until a connection fails; why it did.
pub(super) async fn carry_publishes(
    config: &RedisLinkConfig,
    shared: &Shared,
    queue: &mut mpsc::Receiver<(String, Bytes)>,
    topology: &Topology,
    conns: Vec<redis::aio::MultiplexedConnection>,
) -> String {
    let (publish, _, _) = topology.commands();
    // Room for a batch is made as publishes come (`recv_many` grows it):
    // a batch setting of any size holds only what was queued.
    let mut batch = Vec::new();
    let mut ping = tokio::time::interval(capped(config.ping_interval));
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ping.reset();
    loop {
        tokio::select! {
            n = queue.recv_many(&mut batch, config.batch) => {
                if n == 0 {
                    // Every sender is gone: nothing more will be published.
                    std::future::pending::<()>().await;
                }
                // A pipeline per node, in the batch's order; the nodes'
                // round trips at once.
                let mut pipes: Vec<(redis::Pipeline, u64)> =
                    (0..conns.len()).map(|_| (redis::pipe(), 0)).collect();
                let mut unplaced = 0;
                for (channel, wire) in &batch {
                    match topology.node_of(channel) {
                        Some(node) => {
                            pipes[node].0.cmd(publish).arg(channel).arg(wire.as_ref()).ignore();
                            pipes[node].1 += 1;
                        }
                        None => unplaced += 1,
                    }
                }
                batch.clear();
                let rounds = pipes.into_iter().zip(conns.iter()).filter(|((_, n), _)| *n > 0).map(
                    |((pipe, n), conn)| {
                        let mut conn = conn.clone();
                        async move {
                            let began = std::time::Instant::now();
                            let sent = tokio::time::timeout(
                                config.timeout,
                                pipe.query_async::<()>(&mut conn),
                            )
                            .await;
                            if let Ok(Ok(())) = sent {
                                meter::redis_confirmed(began.elapsed());
                            }
                            (sent, n)
                        }
                    },
                );
                let mut failed = None;
                for (sent, n) in futures_util::future::join_all(rounds).await {
                    match sent {
                        Ok(Ok(())) => {
                            shared.sent.fetch_add(n, Ordering::Relaxed);
                            meter::redis_publishes(meter::RedisOutcome::Sent, n);
                        }
                        Ok(Err(e)) => {
                            shared.lost.fetch_add(n, Ordering::Relaxed);
                            meter::redis_publishes(meter::RedisOutcome::Lost, n);
                            failed.get_or_insert(e.to_string());
                        }
                        Err(_) => {
                            shared.lost.fetch_add(n, Ordering::Relaxed);
                            meter::redis_publishes(meter::RedisOutcome::Lost, n);
                            failed.get_or_insert("a round trip to Redis timed out".to_owned());
                        }
                    }
                }
                if unplaced > 0 {
                    shared.lost.fetch_add(unplaced, Ordering::Relaxed);
                    meter::redis_publishes(meter::RedisOutcome::Lost, unplaced);
                    failed.get_or_insert("a channel's slot has no master".to_owned());
                }
                if let Some(e) = failed {
                    return e;
                }
                ping.reset();
            }
            _ = ping.tick() => {
                for conn in &conns {
                    let ping = redis::cmd("PING");
                    let mut conn = conn.clone();
                    match tokio::time::timeout(config.timeout, ping.query_async::<()>(&mut conn)).await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => return e.to_string(),
                        Err(_) => return "Redis did not answer a ping".to_owned(),
                    }
                }
            }
        }
    }
}

/// The subscribing task: a RESP3 connection per node whose push messages
/// go to the bounded incoming queue; subscribes a topic's channel (on the
/// master of its slot, in a cluster) when the topic gets its first
/// subscriber here, unsubscribes after
/// [`RedisLinkConfig::unsubscribe_delay`] once it has none (if it still
/// has none). On failure (of any node, or a slot moving), back off, learn
/// the topology again, connect again and subscribe every topic with
/// subscribers here.
pub(super) async fn subscribe(
    target: Target,
    config: Arc<RedisLinkConfig>,
    topics: Topics,
    shared: Arc<Shared>,
    status: watch::Sender<LinkState>,
) {
    let mut backoff = config.backoff_first;
    loop {
        let push = shared.clone();
        let conn_config = redis::AsyncConnectionConfig::new().set_push_sender(
            move |p: redis::PushInfo| -> Result<(), std::convert::Infallible> {
                push.on_push(p);
                Ok(())
            },
        );
        shared.disconnected.store(false, Ordering::Release);
        lock(&shared.unsubscribing).clear();
        let up = async {
            let topology = crate::topics::redis::nodes::discover(&target, config.timeout).await?;
            let conns = connect_all(&topology, config.timeout, Some(&conn_config)).await?;
            Ok::<_, String>((topology, conns))
        };
        let error = match up.await {
            Ok((topology, conns)) => {
                backoff = config.backoff_first;
                shared.set_part(SUB_UP, Ok(()), &status);
                let error = carry_subscriptions(&config, &topics, &shared, &topology, conns).await;
                shared.clear_live();
                error
            }
            Err(e) => e,
        };
        shared.set_part(SUB_UP, Err(error), &status);
        #[cfg(feature = "tracing")]
        tracing::warn!("Redis link down (subscribing)");
        tokio::time::sleep(jittered(backoff)).await;
        backoff = next_backoff(backoff, config.backoff_max);
    }
}

/// Keeps the subscriptions to the topics with subscribers here until a
/// connection fails; why it did.
pub(super) async fn carry_subscriptions(
    config: &RedisLinkConfig,
    topics: &Topics,
    shared: &Shared,
    topology: &Topology,
    mut conns: Vec<redis::aio::MultiplexedConnection>,
) -> String {
    let (_, subscribe, unsubscribe) = topology.commands();
    let mut subscribed: HashSet<Arc<str>> = HashSet::new();
    // Unsubscribes waiting out their delay, oldest first.
    let mut leaving: VecDeque<(tokio::time::Instant, Arc<str>)> = VecDeque::new();
    // Read before the interest set is locked: the registry's locks are
    // never taken under one of the link's (see the lock rule in
    // `topics`). A topic that comes or goes after this read is noticed
    // again anyway.
    let names = topics.names();
    lock(&shared.interest).extend(names.into_iter().map(Arc::from));
    let mut ping = tokio::time::interval(capped(config.ping_interval));
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ping.reset();
    // One channel per command: redis-rs takes each confirmation as the
    // reply of the command in flight.
    macro_rules! call {
        ($cmd:expr, $topic:expr) => {
            let channel = shared.channel($topic);
            let Some(node) = topology.node_of(&channel) else {
                return "a channel's slot has no master".to_owned();
            };
            let cmd = redis::cmd($cmd).arg(&channel).clone();
            let call = cmd.exec_async(&mut conns[node]);
            match tokio::time::timeout(config.timeout, call).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return e.to_string(),
                Err(_) => return "a round trip to Redis timed out".to_owned(),
            }
        };
    }
    loop {
        if shared.disconnected.load(Ordering::Acquire) {
            return "Redis closed a connection, or a slot moved".to_owned();
        }
        let changed: Vec<Arc<str>> = lock(&shared.interest).drain().collect();
        for topic in changed {
            if topics.has(&topic) {
                // Back before its unsubscribe: it stays.
                leaving.retain(|(_, t)| *t != topic);
                if !subscribed.contains(&topic) {
                    call!(subscribe, &topic);
                    subscribed.insert(topic.clone());
                    shared.subscribes.fetch_add(1, Ordering::Relaxed);
                    shared.set_live(&topic, true);
                }
            } else if subscribed.contains(&topic) && !leaving.iter().any(|(_, t)| *t == topic) {
                leaving.push_back((
                    tokio::time::Instant::now() + capped(config.unsubscribe_delay),
                    topic,
                ));
            }
        }
        let now = tokio::time::Instant::now();
        while leaving.front().is_some_and(|(at, _)| *at <= now) {
            let (_, topic) = leaving.pop_front().expect("checked above");
            // Not live first, then the check: a subscriber that comes
            // after the check waits for the subscription that its coming
            // asks for, never for one about to go.
            shared.set_live(&topic, false);
            if topics.has(&topic) {
                shared.set_live(&topic, true);
                continue;
            }
            // Its confirmation comes as a push too: not a slot moving.
            lock(&shared.unsubscribing).insert(shared.channel(&topic).into_bytes());
            call!(unsubscribe, &topic);
            subscribed.remove(&topic);
            shared.unsubscribes.fetch_add(1, Ordering::Relaxed);
        }
        let next = leaving.front().map(|(at, _)| *at);
        tokio::select! {
            () = shared.interest_changed.notified() => {}
            () = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => {}
            _ = ping.tick() => {
                for conn in conns.iter_mut() {
                    let ping = redis::cmd("PING");
                    match tokio::time::timeout(config.timeout, ping.query_async::<()>(conn)).await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => return e.to_string(),
                        Err(_) => return "Redis did not answer a ping".to_owned(),
                    }
                }
            }
        }
    }
}

/// The delivering task: hands what Redis pushed to this process's
/// subscribers, apart from both connections, so that neither waits for
/// the other or for the registry.
pub(super) async fn deliver(config: Arc<RedisLinkConfig>, topics: Topics, shared: Arc<Shared>) {
    loop {
        shared.incoming_ready.notified().await;
        loop {
            // Its bytes stay counted until each is delivered (see
            // `Pending::bytes`).
            let batch = std::mem::take(&mut lock(&shared.incoming).items);
            if batch.is_empty() {
                break;
            }
            for (channel, payload) in batch {
                let size = channel.len() + payload.len();
                let topic = channel.strip_prefix(shared.prefix.as_bytes());
                match (
                    topic,
                    decode_owned(Bytes::from(payload), config.max_message_size),
                ) {
                    // This link's own publish, delivered here already.
                    (Some(_), Some(i)) if i.origin == shared.origin => {}
                    (Some(topic), Some(i)) if topic == i.topic.as_bytes() => {
                        let prepared =
                            PreparedMessage::new(&i.msg).expect("data messages always prepare");
                        topics.deliver(&i.topic, &prepared, None);
                        shared.received.fetch_add(1, Ordering::Relaxed);
                        meter::redis_received();
                    }
                    _ => {
                        shared.malformed.fetch_add(1, Ordering::Relaxed);
                        meter::redis_incoming_dropped(meter::RedisIncoming::Malformed);
                    }
                }
                lock(&shared.incoming).bytes -= size;
                meter::redis_incoming_bytes(-(size as i64));
            }
            tokio::task::yield_now().await;
        }
    }
}
