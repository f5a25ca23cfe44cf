//! Topics across servers through a real `redis-server`: three hub servers
//! (each its own registry and link, as three processes would be), 1 000
//! subscribers spread over them, 10 000 publishes from all three. Redis is
//! killed and started again mid-run. What the link promises
//! (src/topics/redis.rs) is checked message by message:
//!
//! - a server's own publishes reach its subscribers exactly once, in order,
//!   Redis or not (local delivery never stops);
//! - while every link is up, every publish reaches every subscriber on
//!   every server exactly once, in its publisher's order;
//! - during the split, a publish the link refused (`Remote::Dropped`) never
//!   reaches another server, not even after the link heals (no replay), and
//!   nothing arrives twice or out of order;
//! - the links report going down and coming back, and their counters add
//!   up to what was published.

use crate::support::redis as redis_server;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use wavesock::http::{Request, Response};
use wavesock::hub::HttpResponse;
use wavesock::hub::{Handler, Hub, HubMessage, Ws};
use wavesock::topics::redis::{LinkState, RedisLink, RedisLinkConfig};
use wavesock::topics::{Remote, Topics};
use wavesock::{Message, PreparedMessage};

const SERVERS: usize = 3;
const SUBSCRIBERS: usize = 1000;
/// Publishes per server in each phase: before the kill, while Redis is
/// down, after the links healed. 3 × (1 334 + 666 + 1 334) = 10 002.
const PHASES: [u32; 3] = [1334, 666, 1334];
const TOPIC: &str = "feed";

/// Subscribes every connection to the feed as it opens.
#[derive(Clone)]
struct Subscribe;

impl Handler for Subscribe {
    type Data = ();

    fn upgrade(&mut self, _: &Request<()>, _: &mut Response<()>) -> Result<(), HttpResponse> {
        Ok(())
    }

    fn open(&mut self, ws: &mut Ws<'_, ()>) {
        ws.subscribe(TOPIC);
    }

    fn message(&mut self, _: &mut Ws<'_, ()>, _: HubMessage<'_>) {}
}

struct Server {
    addr: SocketAddr,
    topics: Topics,
    link: RedisLink,
}

async fn server(redis_url: &str) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let topics = Topics::new();
    let client = wavesock::redis::Client::open(redis_url).unwrap();
    let config = RedisLinkConfig::default()
        .backoff(Duration::from_millis(20), Duration::from_millis(200))
        .ping_interval(Duration::from_millis(200))
        .timeout(Duration::from_secs(2));
    let link = topics.link_redis(client, config).unwrap();
    let hub = Hub::new(
        Subscribe,
        crate::support::hub::defaults().topics(topics.clone()),
    )
    .unwrap();
    tokio::spawn(hub.serve(listener));
    Server { addr, topics, link }
}

/// What one subscriber received from one publishing server.
#[derive(Default, Clone)]
struct FromServer {
    last: Option<u32>,
    /// Per phase, how many arrived.
    per_phase: [u32; 3],
    /// The sequence numbers of phase 2 that arrived.
    split: Vec<u32>,
    /// Out of order or twice: the first such (previous, this).
    disorder: Option<(u32, u32)>,
}

type Received = Arc<Mutex<[FromServer; SERVERS]>>;

fn phase_of(seq: u32) -> usize {
    if seq < PHASES[0] {
        0
    } else if seq < PHASES[0] + PHASES[1] {
        1
    } else {
        2
    }
}

/// A subscriber that reads the wire itself: the server's frames are
/// unmasked and these are small (a 2-byte header and a 5-byte payload:
/// the publishing server, the sequence number), which keeps 10 million
/// receipts cheap in the dev profile.
async fn subscriber(addr: SocketAddr, received: Received) {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n").await.unwrap();
    let mut buf = BytesMut::with_capacity(16 << 10);
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            assert!(buf.starts_with(b"HTTP/1.1 101"));
            buf.advance(end + 4);
            break;
        }
        assert!(tcp.read_buf(&mut buf).await.unwrap() > 0);
    }
    loop {
        while buf.len() >= 7 {
            assert_eq!(&buf[..2], [0x82, 5], "a whole binary frame of 5 bytes");
            let server = buf[2] as usize;
            let seq = u32::from_be_bytes(buf[3..7].try_into().unwrap());
            buf.advance(7);
            let mut r = received.lock().unwrap();
            let from = &mut r[server];
            if from.last.is_some_and(|l| seq <= l) && from.disorder.is_none() {
                from.disorder = Some((from.last.unwrap(), seq));
            }
            from.last = Some(seq);
            let phase = phase_of(seq);
            from.per_phase[phase] += 1;
            if phase == 1 {
                from.split.push(seq);
            }
        }
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(16 << 10);
        }
        match tcp.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

fn payload(server: usize, seq: u32) -> PreparedMessage {
    let mut b = vec![server as u8];
    b.extend_from_slice(&seq.to_be_bytes());
    PreparedMessage::new(&Message::binary(b)).unwrap()
}

/// Publishes phase `phase` from every server at once, yielding now and
/// then as a busy server would; each publish's `Remote` outcome, by server.
async fn publish_phase(servers: &[Server], phase: usize) -> Vec<Vec<(u32, Remote)>> {
    let start: u32 = PHASES[..phase].iter().sum();
    let tasks: Vec<_> = servers
        .iter()
        .enumerate()
        .map(|(s, server)| {
            let topics = server.topics.clone();
            tokio::spawn(async move {
                let mut outcomes = Vec::new();
                for seq in start..start + PHASES[phase] {
                    let p = topics.publish(TOPIC, &payload(s, seq));
                    outcomes.push((seq, p.remote));
                    if seq % 64 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
                outcomes
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.push(t.await.unwrap());
    }
    all
}

/// Waits (as a failure guard, 60 s) until `done` holds for every subscriber.
async fn until_all(
    subs: &[(usize, Received)],
    what: &str,
    done: impl Fn(usize, &[FromServer; SERVERS]) -> bool,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let pending = subs
            .iter()
            .filter(|(on, r)| !done(*on, &r.lock().unwrap()))
            .count();
        if pending == 0 {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: {pending} subscribers still waiting"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn within<T>(secs: u64, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), f)
        .await
        .expect("in time")
}

async fn until_state(link: &RedisLink, want: impl Fn(&LinkState) -> bool) {
    let mut status = link.status();
    tokio::time::timeout(Duration::from_secs(30), status.wait_for(|s| want(s)))
        .await
        .expect("link state within 30 s")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_share_topics_through_redis_across_a_restart() {
    let Some(mut redis) = redis_server::RedisServer::start() else {
        return;
    };
    let mut servers = Vec::new();
    for _ in 0..SERVERS {
        servers.push(server(&redis.url()).await);
    }
    for s in &servers {
        until_state(&s.link, |st| *st == LinkState::Up).await;
    }
    let mut subs = Vec::new();
    for i in 0..SUBSCRIBERS {
        let on = i % SERVERS;
        let received = Received::default();
        tokio::spawn(subscriber(servers[on].addr, received.clone()));
        subs.push((on, received));
    }
    for (on, server) in servers.iter().enumerate() {
        let want = SUBSCRIBERS / SERVERS + usize::from(on < SUBSCRIBERS % SERVERS);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while server.topics.subscribers(TOPIC) < want {
            assert!(tokio::time::Instant::now() < deadline, "subscribers not in");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    // Each server receives the topic once Redis confirmed its channel.
    for s in &servers {
        within(30, s.link.live(TOPIC)).await;
    }

    // Phase 1, every link up: everything reaches everyone.
    let outcomes = publish_phase(&servers, 0).await;
    for o in &outcomes {
        assert!(
            o.iter().all(|(_, r)| *r == Remote::Queued),
            "link up: all queued"
        );
    }
    until_all(&subs, "phase 1", |_, r| {
        r.iter().all(|f| f.per_phase[0] >= PHASES[0])
    })
    .await;

    // Phase 2: Redis dies; local delivery must not stop.
    redis.kill();
    let split = publish_phase(&servers, 1).await;
    until_all(&subs, "phase 2 on the publisher's own server", |on, r| {
        r[on].per_phase[1] >= PHASES[1]
    })
    .await;
    for s in &servers {
        until_state(&s.link, |st| matches!(st, LinkState::Down(_))).await;
    }

    // Phase 3: Redis is back; once every link says so, all reach all.
    redis.restart();
    for s in &servers {
        until_state(&s.link, |st| *st == LinkState::Up).await;
        // Up, and subscribed again to the topic's channel on the new
        // connection.
        within(30, async {
            while s.link.stats().subscribes < 2 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        within(30, s.link.live(TOPIC)).await;
    }
    let outcomes = publish_phase(&servers, 2).await;
    for o in &outcomes {
        assert!(
            o.iter().all(|(_, r)| *r == Remote::Queued),
            "healed: all queued"
        );
    }
    until_all(&subs, "phase 3", |_, r| {
        r.iter().all(|f| f.per_phase[2] >= PHASES[2])
    })
    .await;
    // Whatever of phase 2 was still on its way has landed by now: phase 3
    // came after it from the same publishers.

    let total: u32 = PHASES.iter().sum();
    for (i, (on, r)) in subs.iter().enumerate() {
        let r = r.lock().unwrap();
        for (from, f) in r.iter().enumerate() {
            assert_eq!(
                f.disorder, None,
                "subscriber {i} on {on}: from {from} out of order or twice"
            );
            if from == *on {
                assert_eq!(
                    f.per_phase.iter().sum::<u32>(),
                    total,
                    "subscriber {i}: all of its own server's, Redis or not"
                );
                continue;
            }
            let refused: HashSet<u32> = split[from]
                .iter()
                .filter(|(_, r)| *r == Remote::Dropped)
                .map(|(s, _)| *s)
                .collect();
            for seq in &f.split {
                assert!(
                    !refused.contains(seq),
                    "subscriber {i} on {on}: {from}'s publish {seq} was refused by its link yet arrived"
                );
            }
        }
    }
    // Every subscriber of one server saw the same publishes of the split.
    for on in 0..SERVERS {
        let mut first: Option<Vec<Vec<u32>>> = None;
        for (_, r) in subs.iter().filter(|(o, _)| *o == on) {
            let got: Vec<Vec<u32>> = r.lock().unwrap().iter().map(|f| f.split.clone()).collect();
            match &first {
                None => first = Some(got),
                Some(f) => assert_eq!(f, &got, "server {on}'s subscribers disagree"),
            }
        }
    }

    let published: u64 = total.into();
    for (n, s) in servers.iter().enumerate() {
        let stats = s.link.stats();
        assert!(stats.connects >= 2, "server {n}: came back: {stats:?}");
        assert_eq!(
            stats.sent + stats.dropped_down + stats.dropped_full + stats.lost,
            published,
            "server {n}: every publish accounted for: {stats:?}"
        );
        assert_eq!(stats.malformed, 0);
        let refused = split[n]
            .iter()
            .filter(|(_, r)| *r == Remote::Dropped)
            .count() as u64;
        assert_eq!(
            stats.dropped_down + stats.dropped_full,
            refused,
            "server {n}"
        );
        assert!(
            stats.received >= u64::from(PHASES[0] + PHASES[2]) * (SERVERS as u64 - 1),
            "server {n}: received the others' publishes: {stats:?}"
        );
    }
}

/// With the `metrics` feature: two servers' links through one Redis, each
/// up (two links up), a publish on one confirmed by Redis and received by
/// the other, then Redis killed: both down, and a publish dropped for it.
/// Alone in a child process: the recorder is the process's.
#[cfg(feature = "metrics")]
#[test]
fn metrics_follow_the_link() {
    use crate::support::{child, metered};
    use wavesock::meter;

    if !child::alone() {
        return;
    }
    let Some(mut redis) = redis_server::RedisServer::start() else {
        return;
    };
    let m = metered::install();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let url = redis.url();
        let (a, b) = (server(&url).await, server(&url).await);
        let within = |what: &'static str, mut ok: Box<dyn FnMut() -> bool>| async move {
            tokio::time::timeout(Duration::from_secs(10), async {
                while !ok() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
            .await
            .unwrap_or_else(|_| panic!("{what}"));
        };
        within(
            "both links up",
            Box::new(|| a.link.is_up() && b.link.is_up()),
        )
        .await;
        assert_eq!(m.gauge(meter::REDIS_UP, &[]), 2.0);
        assert_eq!(m.counter(meter::REDIS_CONNECTS, &[]), 2);
        let mut rx = b.topics.subscribe(TOPIC);
        tokio::time::timeout(Duration::from_secs(10), b.link.live(TOPIC))
            .await
            .expect("the topic live on the second server");
        let msg = PreparedMessage::new(&Message::binary(vec![1, 2, 3])).unwrap();
        assert_eq!(a.topics.publish(TOPIC, &msg).remote, Remote::Queued);
        let got = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.payload().as_ref(), [1, 2, 3]);
        let sent = [("outcome", "sent")];
        within(
            "the publish confirmed",
            Box::new(|| m.counter(meter::REDIS_PUBLISHES, &sent) == 1),
        )
        .await;
        assert_eq!(m.counter(meter::REDIS_RECEIVED, &[]), 1);
        assert!(!m.histogram(meter::REDIS_CONFIRM, &[]).is_empty());
        assert_eq!(m.gauge(meter::REDIS_INCOMING_BYTES, &[]), 0.0);

        redis.kill();
        within(
            "both links down",
            Box::new(|| !a.link.is_up() && !b.link.is_up()),
        )
        .await;
        assert_eq!(m.gauge(meter::REDIS_UP, &[]), 0.0);
        assert_eq!(a.topics.publish(TOPIC, &msg).remote, Remote::Dropped);
        let down = [("outcome", "dropped_down")];
        assert_eq!(m.counter(meter::REDIS_PUBLISHES, &down), 1);
        drop((a, b));
    });
}
