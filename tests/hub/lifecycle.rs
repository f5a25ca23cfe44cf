//! A connection's life in the hub's engine, at its edges, on real
//! loopback sockets: stale ids after slot reuse, shutdown in every stage,
//! timers on many connections, topic bursts with slow and leaving
//! subscribers, half-closed and misbehaving peers, under both readiness
//! modes and with several engines. (From the break-it round on the
//! engine's split into rooms; every test passed before and after it.)

use crate::support;
use crate::support::hub::{Ended, Log, Seen};

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::task::JoinHandle;
use wavesock::http::{Request, Response};
use wavesock::hub::{
    BackpressurePolicy, Closed, ConnId, Handler, HttpResponse, Hub, HubConfig, HubHandle,
    HubMessage, Readiness, Ws,
};
use wavesock::topics::{Topics, TopicsConfig};
use wavesock::{CloseCode, Config, Error, Message, PreparedMessage};

use crate::support::{KEY_REQUEST, close_payload, masked, raw_upgrade, read_frame};

// ---------------------------------------------------------------------------
// A handler: echoes, and takes text commands `sub:T`, `unsub:T`,
// `pub:T:payload` (Ws::publish: to the others), recording opens and ends.

#[derive(Clone)]
struct Breaker {
    log: Arc<Mutex<Log>>,
    echo: bool,
}

impl Handler for Breaker {
    type Data = Seen;

    fn upgrade(&mut self, _: &Request<()>, _: &mut Response<()>) -> Result<Seen, HttpResponse> {
        Ok(Seen::default())
    }

    fn open(&mut self, ws: &mut Ws<'_, Seen>) {
        self.log.lock().unwrap().opened.push(ws.id());
    }

    fn message(&mut self, ws: &mut Ws<'_, Seen>, msg: HubMessage<'_>) {
        if let HubMessage::Text(t) = msg {
            if let Some(topic) = t.strip_prefix("sub:") {
                ws.subscribe(topic);
                let _ = ws.send_text("subscribed");
                return;
            }
            if let Some(topic) = t.strip_prefix("unsub:") {
                ws.unsubscribe(topic);
                let _ = ws.send_text("unsubscribed");
                return;
            }
            if let Some(rest) = t.strip_prefix("pub:") {
                let (topic, payload) = rest.split_once(':').unwrap();
                ws.publish(topic, HubMessage::Text(payload));
                return;
            }
        }
        ws.data_mut().received.push(match msg {
            HubMessage::Text(t) => Message::text(t.to_owned()),
            HubMessage::Binary(b) => Message::binary(b.to_vec()),
        });
        if self.echo {
            let _ = ws.send_borrowed(msg);
        }
    }

    fn close(&mut self, closed: Closed, seen: Seen) {
        self.log.lock().unwrap().ended.push(Ended { closed, seen });
    }
}

struct Running {
    handle: HubHandle,
    log: Arc<Mutex<Log>>,
    addr: SocketAddr,
    task: JoinHandle<wavesock::Result<()>>,
}

impl Running {
    async fn start(config: HubConfig) -> Running {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let log: Arc<Mutex<Log>> = Arc::default();
        let hub = Hub::new(
            Breaker {
                log: log.clone(),
                echo: true,
            },
            config,
        )
        .unwrap();
        let handle = hub.handle();
        let task = tokio::spawn(hub.serve(listener));
        Running {
            handle,
            log,
            addr,
            task,
        }
    }

    fn opened(&self) -> Vec<ConnId> {
        self.log.lock().unwrap().opened.clone()
    }

    fn ended_ids(&self) -> Vec<ConnId> {
        self.log
            .lock()
            .unwrap()
            .ended
            .iter()
            .map(|e| e.closed.id)
            .collect()
    }

    async fn wait_opened(&self, n: usize) -> Vec<ConnId> {
        wait_for(
            10,
            || self.opened().len() >= n,
            || format!("{} of {n} opened", self.opened().len()),
        )
        .await;
        self.opened()
    }

    async fn wait_ended(&self, n: usize, secs: u64) {
        wait_for(
            secs,
            || self.ended_ids().len() >= n,
            || format!("{} of {n} ended", self.ended_ids().len()),
        )
        .await;
    }

    async fn wait_ended_id(&self, id: ConnId) {
        wait_for(
            10,
            || self.ended_ids().contains(&id),
            || format!("{id} ended"),
        )
        .await;
    }

    /// Shuts down, waits (bounded), checks each opened connection ended
    /// once.
    async fn stop(self, within: Duration) -> Log {
        let started = Instant::now();
        self.handle.shutdown().await.unwrap();
        tokio::time::timeout(within, self.task)
            .await
            .unwrap_or_else(|_| panic!("the hub did not stop within {within:?}"))
            .expect("no panic")
            .expect("serve");
        let _ = started;
        let log = std::mem::take(&mut *self.log.lock().unwrap());
        log.assert_each_ended_once();
        log
    }
}

async fn wait_for(secs: u64, mut f: impl FnMut() -> bool, what: impl Fn() -> String) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        if Instant::now() > deadline {
            panic!("after {secs} s: {}", what());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn cfg(readiness: Readiness) -> HubConfig {
    HubConfig::default().readiness(readiness).engines(Some(1))
}

/// Reads frames until one is a data frame: (first byte, payload), `None`
/// at EOF.
async fn next_frame(tcp: &mut TcpStream, buf: &mut BytesMut, secs: u64) -> Option<(u8, Vec<u8>)> {
    tokio::time::timeout(Duration::from_secs(secs), read_frame(tcp, buf))
        .await
        .expect("a frame in time")
}

fn text(f: &(u8, Vec<u8>)) -> String {
    String::from_utf8_lossy(&f.1).into_owned()
}

async fn small_rcvbuf_upgrade(addr: SocketAddr) -> (TcpStream, BytesMut) {
    let sock = TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let mut tcp = sock.connect(addr).await.unwrap();
    tcp.write_all(KEY_REQUEST).await.unwrap();
    let mut buf = BytesMut::new();
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        assert!(tcp.read_buf(&mut buf).await.unwrap() > 0);
    };
    assert!(buf.starts_with(b"HTTP/1.1 101"));
    let rest = buf.split_off(end);
    (tcp, rest)
}

// ---------------------------------------------------------------------------
// Stale ids.

/// A connection ends; the next takes its slot (a new generation). Every
/// command naming the old id must miss the new connection.
async fn stale_ids_miss_the_new_tenant(readiness: Readiness) {
    let hub = Running::start(cfg(readiness)).await;
    let mut old_ids = Vec::new();
    // Many tenants of the same slot, one after another.
    for i in 0..20 {
        let (mut tcp, mut buf) = raw_upgrade(hub.addr).await;
        let ids = hub.wait_opened(i + 1).await;
        let id = ids[i];
        // Leave by a closing handshake, or by dropping the socket.
        if i % 2 == 0 {
            tcp.write_all(&masked(0x88, &close_payload(1000, "")))
                .await
                .unwrap();
            let (b0, _) = next_frame(&mut tcp, &mut buf, 5).await.unwrap();
            assert_eq!(b0 & 0x0f, 8);
        }
        drop(tcp);
        hub.wait_ended_id(id).await;
        old_ids.push(id);
    }
    let (mut tcp, mut buf) = raw_upgrade(hub.addr).await;
    let new = hub.wait_opened(21).await[20];
    for old in &old_ids {
        assert_ne!(*old, new);
    }
    assert!(
        old_ids
            .iter()
            .any(|o| o.to_string().split('.').nth(2) == new.to_string().split('.').nth(2)),
        "the new connection reuses an old slot: {new} vs {old_ids:?}"
    );
    for old in &old_ids {
        hub.handle.send(*old, Message::text("stale")).await.unwrap();
        hub.handle
            .send_prepared(
                *old,
                &PreparedMessage::new(&Message::text("stale prepared")).unwrap(),
            )
            .await
            .unwrap();
        hub.handle.subscribe(*old, "stale-topic").await.unwrap();
        hub.handle
            .close(*old, CloseCode::from(4000), "stale close")
            .await
            .unwrap();
    }
    hub.handle.send(new, Message::text("fresh")).await.unwrap();
    let f = next_frame(&mut tcp, &mut buf, 5).await.unwrap();
    assert_eq!(text(&f), "fresh", "first frame to the new tenant");
    // The stale subscribe must not have subscribed the new tenant.
    hub.handle.publish(
        "stale-topic",
        &PreparedMessage::new(&Message::text("leaked publish")).unwrap(),
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    hub.handle
        .send(new, Message::text("fresh 2"))
        .await
        .unwrap();
    let f = next_frame(&mut tcp, &mut buf, 5).await.unwrap();
    assert_eq!(text(&f), "fresh 2");
    // And it is still open: an echo comes back.
    tcp.write_all(&masked(0x81, b"still here")).await.unwrap();
    let f = next_frame(&mut tcp, &mut buf, 5).await.unwrap();
    assert_eq!(text(&f), "still here");
    drop(tcp);
    hub.stop(Duration::from_secs(10)).await;
}
both_modes!(stale_ids_miss_the_new_tenant);

/// Stale ids to a multi-engine hub: a stale id of engine 0 sent while
/// engine 1's connection holds the same slot number and generation must
/// not reach engine 1's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_ids_across_engines() {
    let hub = Running::start(HubConfig::default().engines(Some(2))).await;
    let mut conns = Vec::new();
    for i in 0..4 {
        conns.push(raw_upgrade(hub.addr).await);
        hub.wait_opened(i + 1).await;
    }
    let ids = hub.opened();
    // Drop the first two (one on each engine), reconnect two.
    conns.remove(0);
    conns.remove(0);
    hub.wait_ended(2, 10).await;
    for _ in 0..2 {
        conns.push(raw_upgrade(hub.addr).await);
    }
    let all = hub.wait_opened(6).await;
    for old in &ids[..2] {
        hub.handle.send(*old, Message::text("stale")).await.unwrap();
        hub.handle
            .close(*old, CloseCode::from(4000), "stale")
            .await
            .unwrap();
    }
    for (i, id) in all[2..].iter().enumerate() {
        hub.handle
            .send(*id, Message::text(format!("fresh {i}")))
            .await
            .unwrap();
    }
    for (i, (tcp, buf)) in conns.iter_mut().enumerate() {
        let f = next_frame(tcp, buf, 5).await.unwrap();
        assert_eq!(text(&f), format!("fresh {i}"));
    }
    drop(conns);
    hub.stop(Duration::from_secs(10)).await;
}

// ---------------------------------------------------------------------------
// Shutdown with connections in every stage.

async fn shutdown_in_every_stage(readiness: Readiness, engines: usize) {
    let timeout = Duration::from_millis(1500);
    let config = HubConfig::default()
        .readiness(readiness)
        .engines(Some(engines))
        .shutdown_timeout(timeout)
        .config(
            Config::default()
                .close_timeout(Duration::from_secs(30))
                .max_backpressure(64 << 20),
        );
    let hub = Running::start(config).await;
    let addr = hub.addr;
    let mut keep = Vec::new();
    // Open ones first, so their ids are in order.
    // 0: honest reader (answers the close).
    let honest = support::client(addr, Config::default()).await;
    hub.wait_opened(1).await;
    // 1: mid-message: a frame header announcing 1000 bytes, 10 sent.
    let (mut mid, _) = raw_upgrade(addr).await;
    hub.wait_opened(2).await;
    let mut m = masked(0x82, &[7u8; 1000]);
    m.truncate(20);
    mid.write_all(&m).await.unwrap();
    // 2: write-blocked: never reads, sent a lot.
    let (blocked, _) = small_rcvbuf_upgrade(addr).await;
    let ids = hub.wait_opened(3).await;
    let big = Message::binary(vec![1u8; 256 << 10]);
    for _ in 0..40 {
        hub.handle.send(ids[2], big.clone()).await.unwrap();
    }
    // 3: lingering: sends a close, reads the answer, keeps the socket.
    let (mut linger, mut lbuf) = raw_upgrade(addr).await;
    hub.wait_opened(4).await;
    linger
        .write_all(&masked(0x88, &close_payload(1000, "bye")))
        .await
        .unwrap();
    let (b0, _) = next_frame(&mut linger, &mut lbuf, 5).await.unwrap();
    assert_eq!(b0 & 0x0f, 8);
    // 4: half-closed after a message.
    let (mut half, _) = raw_upgrade(addr).await;
    hub.wait_opened(5).await;
    half.write_all(&masked(0x81, b"then half")).await.unwrap();
    half.shutdown().await.unwrap();
    // 5: sends a close and keeps sending.
    let (mut chatty, _) = raw_upgrade(addr).await;
    hub.wait_opened(6).await;
    chatty
        .write_all(&masked(0x88, &close_payload(1000, "")))
        .await
        .unwrap();
    for _ in 0..50 {
        if chatty
            .write_all(&masked(0x81, b"after close"))
            .await
            .is_err()
        {
            break;
        }
    }
    // 6, 7: mid-handshake: half a request, nothing at all.
    let mut hs = TcpStream::connect(addr).await.unwrap();
    hs.write_all(&KEY_REQUEST[..30]).await.unwrap();
    let silent = TcpStream::connect(addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    keep.push(hs);
    keep.push(silent);

    // The honest client reads in the background, answering the close.
    let honest_task = tokio::spawn(async move {
        use futures_util::StreamExt;
        let mut ws = honest;
        while let Some(Ok(_)) = ws.next().await {}
    });

    let started = Instant::now();
    // Two shutdowns at once, and commands during and after.
    let h2 = hub.handle.clone();
    let second = tokio::spawn(async move { h2.shutdown().await });
    for id in &ids {
        let _ = hub.handle.try_send(*id, Message::text("during shutdown"));
        let _ = hub.handle.try_close(*id, CloseCode::from(4001), "during");
    }
    let handle = hub.handle.clone();
    let log_arc = hub.log.clone();
    let log = tokio::time::timeout(
        timeout + Duration::from_secs(3),
        hub.stop(timeout + Duration::from_secs(3)),
    )
    .await
    .expect("stop in time");
    let took = started.elapsed();
    assert!(
        took < timeout + Duration::from_millis(1000),
        "hub took {took:?} to stop with a {timeout:?} shutdown timeout"
    );
    second.await.unwrap().unwrap();
    // Commands after the hub stopped return (whatever they say).
    let after = tokio::time::timeout(Duration::from_secs(2), async {
        for id in &ids {
            let _ = handle.send(*id, Message::text("after")).await;
            let _ = handle.close(*id, CloseCode::from(4002), "after").await;
        }
        handle.shutdown().await
    })
    .await;
    assert!(after.is_ok(), "commands after shutdown hang");
    assert_eq!(log.opened.len(), 6, "{:?}", log.opened);
    assert!(log_arc.lock().unwrap().ended.is_empty());
    drop((mid, blocked, linger, half, chatty, keep));
    let _ = honest_task.await;
}

#[tokio::test]
async fn shutdown_in_every_stage_owned() {
    shutdown_in_every_stage(Readiness::Owned, 1).await
}
#[tokio::test]
async fn shutdown_in_every_stage_tokio() {
    shutdown_in_every_stage(Readiness::Tokio, 1).await
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_in_every_stage_two_engines_owned() {
    shutdown_in_every_stage(Readiness::Owned, 2).await
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_in_every_stage_two_engines_tokio() {
    shutdown_in_every_stage(Readiness::Tokio, 2).await
}

/// A hub with nothing but connections that never finish their
/// handshake: shut down, it stops at once (they are not the handler's).
async fn shutdown_with_only_handshakes(readiness: Readiness) {
    let hub = Running::start(cfg(readiness).shutdown_timeout(Duration::from_secs(5))).await;
    let mut socks = Vec::new();
    for _ in 0..50 {
        let mut s = TcpStream::connect(hub.addr).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        socks.push(s);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let log = hub.stop(Duration::from_secs(3)).await;
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert!(log.opened.is_empty());
    // Every socket is closed by the hub.
    for mut s in socks {
        let mut b = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(2), s.read(&mut b))
            .await
            .expect("closed");
        assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
    }
}
both_modes!(shutdown_with_only_handshakes);

// ---------------------------------------------------------------------------
// Timers.

/// Many connections with a keepalive none answers; some leave early, some
/// answer. The silent ones time out; every one ends once.
async fn keepalive_on_many(readiness: Readiness) {
    let config = cfg(readiness).config(
        Config::default()
            .ping_interval(Some(Duration::from_millis(60)))
            .pong_timeout(Duration::from_millis(120)),
    );
    let hub = Running::start(config).await;
    let n = 60;
    let mut socks = Vec::new();
    for _ in 0..n {
        socks.push(raw_upgrade(hub.addr).await);
    }
    let ids = hub.wait_opened(n).await;
    // A third leave at once, while their ping deadline is queued.
    let mut kept = Vec::new();
    for (i, s) in socks.into_iter().enumerate() {
        if i % 3 == 0 {
            drop(s);
        } else {
            kept.push((i, s));
        }
    }
    // Another third answer every ping with a pong for a while.
    let mut answering = Vec::new();
    let mut silent = Vec::new();
    for (i, s) in kept {
        if i % 3 == 1 {
            answering.push(tokio::spawn(async move {
                let (mut tcp, mut buf) = s;
                let until = Instant::now() + Duration::from_millis(700);
                let mut pings = 0;
                while Instant::now() < until {
                    match tokio::time::timeout(
                        Duration::from_millis(200),
                        read_frame(&mut tcp, &mut buf),
                    )
                    .await
                    {
                        Ok(Some((b0, p))) if b0 & 0x0f == 9 => {
                            pings += 1;
                            tcp.write_all(&masked(0x8A, &p)).await.unwrap();
                        }
                        Ok(Some(_)) => {}
                        Ok(None) => panic!("an answering peer was dropped"),
                        Err(_) => {}
                    }
                }
                (tcp, pings)
            }));
        } else {
            silent.push(s);
        }
    }
    // The silent ones and the ones that left end within a second.
    let expect_early: Vec<ConnId> = ids
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 3 != 1)
        .map(|(_, id)| *id)
        .collect();
    wait_for(
        3,
        || {
            let ended = hub.ended_ids();
            expect_early.iter().all(|id| ended.contains(id))
        },
        || format!("{} of {} ended", hub.ended_ids().len(), expect_early.len()),
    )
    .await;
    let mut alive = Vec::new();
    for t in answering {
        let (tcp, pings) = t.await.unwrap();
        assert!(pings >= 5, "pings {pings}");
        alive.push(tcp);
    }
    // The answering ones are still open.
    let ended = hub.ended_ids();
    for (i, id) in ids.iter().enumerate() {
        if i % 3 == 1 {
            assert!(!ended.contains(id), "{id} answered and was ended");
        }
    }
    {
        let log = hub.log.lock().unwrap();
        for (i, id) in ids.iter().enumerate() {
            if i % 3 == 2 {
                let e = log.ended(*id).unwrap();
                assert!(
                    matches!(e.closed.error, Some(Error::KeepaliveTimeout)),
                    "{:?}",
                    e.closed.error
                );
            }
        }
    }
    drop(silent);
    drop(alive);
    hub.stop(Duration::from_secs(5)).await;
}
both_modes!(keepalive_on_many);

/// The hub closes many connections whose peers never answer; the close
/// timeout ends them all, once each; those that leave meanwhile too.
async fn close_timeout_on_many(readiness: Readiness) {
    let config = cfg(readiness).config(Config::default().close_timeout(Duration::from_millis(200)));
    let hub = Running::start(config).await;
    let n = 40;
    let mut socks = Vec::new();
    for _ in 0..n {
        socks.push(raw_upgrade(hub.addr).await);
    }
    let ids = hub.wait_opened(n).await;
    for id in &ids {
        hub.handle
            .close(*id, CloseCode::from(4000), "go")
            .await
            .unwrap();
    }
    // A quarter leave right away.
    let mut kept = Vec::new();
    for (i, s) in socks.into_iter().enumerate() {
        if i % 4 == 0 {
            drop(s);
        } else {
            kept.push(s);
        }
    }
    let started = Instant::now();
    hub.wait_ended(n, 3).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    drop(kept);
    hub.stop(Duration::from_secs(5)).await;
}
both_modes!(close_timeout_on_many);

/// Connections come and go fast while keepalive timers fire every few
/// milliseconds: slots are reused while stale timer entries of their
/// previous tenants are queued.
async fn timers_of_reused_slots(readiness: Readiness) {
    let config = cfg(readiness).config(
        Config::default()
            .ping_interval(Some(Duration::from_millis(5)))
            .pong_timeout(Duration::from_millis(300)),
    );
    let hub = Running::start(config).await;
    let mut rounds = 0;
    let mut live = Vec::new();
    for i in 0..120 {
        live.push(raw_upgrade(hub.addr).await);
        if i % 2 == 1 {
            let k = (i * 7) % live.len();
            live.remove(k);
        }
        if i % 10 == 0 {
            tokio::time::sleep(Duration::from_millis(7)).await;
        }
        rounds += 1;
    }
    assert_eq!(rounds, 120);
    hub.wait_opened(120).await;
    // Those still connected answer nothing: they time out within a second.
    hub.wait_ended(120, 5).await;
    drop(live);
    hub.stop(Duration::from_secs(5)).await;
}
both_modes!(timers_of_reused_slots);

// ---------------------------------------------------------------------------
// Topics.

async fn subscribe(tcp: &mut TcpStream, buf: &mut BytesMut, topic: &str) {
    tcp.write_all(&masked(0x81, format!("sub:{topic}").as_bytes()))
        .await
        .unwrap();
    let f = next_frame(tcp, buf, 5).await.unwrap();
    assert_eq!(text(&f), "subscribed");
}

/// A publish as the tests number them: its source (`a`, the publishing
/// connection; `b`, the handle) and number.
fn numbered(f: &(u8, Vec<u8>)) -> (char, u64) {
    let t = text(f);
    let mut parts = t.rsplitn(3, ':');
    let n: u64 = parts
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("{t}"));
    let src = parts.next().unwrap().chars().next().unwrap();
    (src, n)
}

/// Reads publishes until a close, EOF, `quiet` without any, or the last
/// publish of every source in `last` (numbers only go up, so nothing of
/// theirs follows it): what came (in order) and the close code.
async fn read_publishes(
    mut tcp: TcpStream,
    mut buf: BytesMut,
    quiet: Duration,
    last: Vec<(char, u64)>,
) -> (Vec<(char, u64)>, Option<u16>, TcpStream) {
    let mut seen = Vec::new();
    let mut awaited = last.len();
    loop {
        match tokio::time::timeout(quiet, read_frame(&mut tcp, &mut buf)).await {
            Ok(Some((b0, p))) if b0 & 0x0f == 8 => {
                return (seen, Some(u16::from_be_bytes([p[0], p[1]])), tcp);
            }
            Ok(Some(f)) => {
                let n = numbered(&f);
                seen.push(n);
                if last.contains(&n) {
                    awaited -= 1;
                    if awaited == 0 {
                        return (seen, None, tcp);
                    }
                }
            }
            Ok(None) | Err(_) => return (seen, None, tcp),
        }
    }
}

/// Each source's numbers only go up; a prefix of each when `prefix`.
fn check_order(seen: &[(char, u64)], who: &str) {
    for src in ['a', 'b'] {
        let ns: Vec<u64> = seen
            .iter()
            .filter(|(s, _)| *s == src)
            .map(|(_, n)| *n)
            .collect();
        for w in ns.windows(2) {
            assert!(
                w[1] > w[0],
                "{who}: {src} out of order: {} then {}",
                w[0],
                w[1]
            );
        }
    }
}

async fn topic_burst(readiness: Readiness, policy: BackpressurePolicy, engines: usize) {
    let config = HubConfig::default()
        .readiness(readiness)
        .engines(Some(engines))
        .backpressure_policy(policy)
        .config(Config::default().max_backpressure(2 << 20))
        .topics(Topics::new());
    let hub = Running::start(config).await;
    let fast_n = 8;
    let slow_n = 4;
    let leave_n = 4;
    let unsub_n = 4;
    let mut fast = Vec::new();
    for _ in 0..fast_n {
        let (mut t, mut b) = raw_upgrade(hub.addr).await;
        subscribe(&mut t, &mut b, "burst").await;
        fast.push((t, b));
    }
    let mut slow = Vec::new();
    for _ in 0..slow_n {
        let (mut t, mut b) = small_rcvbuf_upgrade(hub.addr).await;
        subscribe(&mut t, &mut b, "burst").await;
        slow.push((t, b));
    }
    let mut leaving = Vec::new();
    for _ in 0..leave_n {
        let (mut t, mut b) = raw_upgrade(hub.addr).await;
        subscribe(&mut t, &mut b, "burst").await;
        leaving.push((t, b));
    }
    let mut unsub = Vec::new();
    for _ in 0..unsub_n {
        let (mut t, mut b) = raw_upgrade(hub.addr).await;
        subscribe(&mut t, &mut b, "burst").await;
        unsub.push((t, b));
    }
    // The publisher is a subscriber too, publishing to the others.
    let (mut publisher, mut pbuf) = raw_upgrade(hub.addr).await;
    subscribe(&mut publisher, &mut pbuf, "burst").await;
    let total = fast_n + slow_n + leave_n + unsub_n + 1;
    let ids = hub.wait_opened(total).await;
    let unsub_ids: Vec<ConnId> =
        ids[fast_n + slow_n + leave_n..fast_n + slow_n + leave_n + unsub_n].to_vec();

    let count: u64 = 3000;
    let payload = "x".repeat(1000);
    let quiet = Duration::from_millis(1500);
    // Readers for the fast ones, the unsubscribed ones, the publisher.
    // A fast one stops at both sources' last publish (or, should it miss
    // one under Drop, when quiet); an unsubscribed one gets neither.
    let fast_r: Vec<_> = fast
        .into_iter()
        .map(|(t, b)| {
            tokio::spawn(read_publishes(
                t,
                b,
                quiet,
                vec![('a', count), ('b', count)],
            ))
        })
        .collect();
    let unsub_r: Vec<_> = unsub
        .into_iter()
        .map(|(t, b)| tokio::spawn(read_publishes(t, b, quiet, vec![])))
        .collect();
    // The publisher's connection publishes `a:N` (Ws::publish, not to
    // itself); the handle `b:N`, at the same time.
    let mut wire = Vec::new();
    for n in 1..=count {
        wire.extend(masked(
            0x81,
            format!("pub:burst:{payload}:a:{n}").as_bytes(),
        ));
    }
    let (pr, mut pw) = publisher.into_split();
    // It reads on for a while after the handle's last publish: its own
    // would come about then, if at all.
    let pub_r = tokio::spawn(async move {
        let mut pr = pr;
        let mut seen = Vec::new();
        let mut wait = quiet;
        loop {
            match tokio::time::timeout(wait, read_frame(&mut pr, &mut pbuf)).await {
                Ok(Some((b0, _))) if b0 & 0x0f == 8 => return seen,
                Ok(Some(f)) => {
                    let n = numbered(&f);
                    seen.push(n);
                    if n == ('b', count) {
                        wait = Duration::from_millis(300);
                    }
                }
                Ok(None) | Err(_) => return seen,
            }
        }
    });
    let pw_task = tokio::spawn(async move {
        pw.write_all(&wire).await.unwrap();
        pw
    });
    let handle = hub.handle.clone();
    let payload2 = payload.clone();
    let h = tokio::spawn(async move {
        for n in 1..=count {
            handle.publish(
                "burst",
                &PreparedMessage::new(&Message::text(format!("{payload2}:b:{n}"))).unwrap(),
            );
            if n % 50 == 0 {
                tokio::task::yield_now().await;
            }
        }
    });
    // Meanwhile: some leave, some are unsubscribed.
    tokio::task::yield_now().await;
    drop(leaving);
    for id in &unsub_ids {
        hub.handle.unsubscribe(*id, "burst").await.unwrap();
    }
    h.await.unwrap();
    let pw = pw_task.await.unwrap();

    // The publisher gets only the handle's publishes, in order.
    let got = pub_r.await.unwrap();
    // Its read half ended with its reader; the write half, now that all
    // came, sends the FIN that lets the stop below end it without waiting
    // for a close reply (the close timeout is not what this test is about).
    drop(pw);
    check_order(&got, "publisher");
    assert!(
        got.iter().all(|(s, _)| *s == 'b'),
        "the publisher got its own publish"
    );
    // Under Drop a reader that falls behind (a loaded machine) misses some.
    if policy == BackpressurePolicy::Close {
        assert_eq!(
            got.len() as u64,
            count,
            "publisher got {} of the handle's",
            got.len()
        );
    }
    // The fast ones get everything (under Close; a subsequence under
    // Drop should a reader fall behind), in one order for all.
    let mut all = Vec::new();
    for (i, r) in fast_r.into_iter().enumerate() {
        let (got, code, _t) = r.await.unwrap();
        check_order(&got, "fast");
        if policy == BackpressurePolicy::Close {
            assert_eq!(code, None, "fast subscriber {i} closed after {}", got.len());
            assert_eq!(
                got.len() as u64,
                2 * count,
                "fast subscriber {i} got {}",
                got.len()
            );
        } else {
            assert_eq!(code, None);
        }
        all.push(got);
    }
    let sets: Vec<std::collections::HashSet<_>> = all.iter().map(|x| x.iter().collect()).collect();
    for (x, xs) in all.iter().zip(&sets) {
        for (y, ys) in all.iter().zip(&sets) {
            let a: Vec<_> = x.iter().filter(|e| ys.contains(e)).collect();
            let b: Vec<_> = y.iter().filter(|e| xs.contains(e)).collect();
            assert!(a == b, "two subscribers saw the topic in different orders");
        }
    }
    all.sort_by_key(|v| std::cmp::Reverse(v.len()));
    // The unsubscribed ones get a prefix of that order, and then nothing.
    let order = all.swap_remove(0);
    for r in unsub_r {
        let (got, _code, _t) = r.await.unwrap();
        if policy == BackpressurePolicy::Close || order.len() as u64 == 2 * count {
            assert_eq!(
                &order[..got.len()],
                &got[..],
                "an unsubscribed one: not a prefix"
            );
        }
    }
    // The slow ones now read: in order; under Close, closed with 1013;
    // under Drop, open, the last publish there.
    let slow_r: Vec<_> = slow
        .into_iter()
        .map(|(t, b)| tokio::spawn(read_publishes(t, b, Duration::from_millis(700), vec![])))
        .collect();
    for r in slow_r {
        let (got, code, _t) = r.await.unwrap();
        check_order(&got, "slow");
        match policy {
            BackpressurePolicy::Close => {
                assert_eq!(
                    code,
                    Some(1013),
                    "slow subscriber under Close: saw {}",
                    got.len()
                );
                assert_eq!(&order[..got.len()], &got[..], "slow under Close: a prefix");
            }
            _ => {
                assert_eq!(code, None);
                // A subsequence of the one order.
                let mut it = order.iter();
                assert!(
                    got.iter().all(|g| it.any(|o| o == g)),
                    "slow under Drop: not a subsequence of the order"
                );
            }
        }
    }
    hub.stop(Duration::from_secs(10)).await;
}

#[tokio::test]
async fn topic_burst_close_owned() {
    topic_burst(Readiness::Owned, BackpressurePolicy::Close, 1).await
}
#[tokio::test]
async fn topic_burst_close_tokio() {
    topic_burst(Readiness::Tokio, BackpressurePolicy::Close, 1).await
}
#[tokio::test]
async fn topic_burst_drop_owned() {
    topic_burst(Readiness::Owned, BackpressurePolicy::Drop, 1).await
}
#[tokio::test]
async fn topic_burst_drop_tokio() {
    topic_burst(Readiness::Tokio, BackpressurePolicy::Drop, 1).await
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_burst_close_two_engines() {
    topic_burst(Readiness::Owned, BackpressurePolicy::Close, 2).await
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_burst_drop_two_engines() {
    topic_burst(Readiness::Tokio, BackpressurePolicy::Drop, 2).await
}

/// A mailbox of 4: a burst published from another thread while the
/// engine is busy overflows it; subscribers are closed with 1013 under
/// Close (PublishesMissed), left open under Drop; each ends once.
async fn mailbox_overflow(readiness: Readiness, policy: BackpressurePolicy) {
    let topics = Topics::with_config(TopicsConfig::default().inbox_capacity(4));
    let config = cfg(readiness)
        .backpressure_policy(policy)
        .topics(topics.clone());
    let hub = Running::start(config).await;
    let n = 6;
    let mut subs = Vec::new();
    for _ in 0..n {
        let (mut t, mut b) = raw_upgrade(hub.addr).await;
        subscribe(&mut t, &mut b, "m").await;
        subs.push((t, b));
    }
    let ids = hub.wait_opened(n).await;
    // Publish from a plain thread, all at once: the engine cannot keep up.
    let t = topics.clone();
    std::thread::spawn(move || {
        for i in 1..=2000u64 {
            t.publish(
                "m",
                &PreparedMessage::new(&Message::text(format!("m:{i}"))).unwrap(),
            );
        }
    })
    .join()
    .unwrap();
    // Each read at once: a subscriber's reader stops when quiet.
    let read_all = subs.iter_mut().map(|(t, b)| async move {
        let mut seen = Vec::new();
        let mut code = None;
        loop {
            match tokio::time::timeout(Duration::from_millis(700), read_frame(t, b)).await {
                Ok(Some((b0, p))) if b0 & 0x0f == 8 => {
                    code = Some(u16::from_be_bytes([p[0], p[1]]));
                    break;
                }
                Ok(Some(f)) => {
                    let n: u64 = text(&f).rsplit(':').next().unwrap().parse().unwrap();
                    if let Some(&prev) = seen.last() {
                        assert!(n > prev, "out of order {prev} then {n}");
                    }
                    seen.push(n);
                }
                _ => break,
            }
        }
        (seen, code)
    });
    for (seen, code) in futures_util::future::join_all(read_all).await {
        match policy {
            BackpressurePolicy::Close => {
                if seen.len() < 2000 {
                    assert_eq!(
                        code,
                        Some(1013),
                        "missed {} and not closed",
                        2000 - seen.len()
                    );
                }
            }
            _ => assert_eq!(code, None),
        }
    }
    drop(subs);
    if policy == BackpressurePolicy::Close {
        hub.wait_ended(n, 5).await;
        let log = hub.log.lock().unwrap();
        for id in &ids {
            let e = log.ended(*id).unwrap();
            assert!(
                matches!(e.closed.error, Some(Error::PublishesMissed { .. })),
                "{:?}",
                e.closed.error
            );
        }
    }
    hub.stop(Duration::from_secs(10)).await;
}

#[tokio::test]
async fn mailbox_overflow_close_owned() {
    mailbox_overflow(Readiness::Owned, BackpressurePolicy::Close).await
}
#[tokio::test]
async fn mailbox_overflow_close_tokio() {
    mailbox_overflow(Readiness::Tokio, BackpressurePolicy::Close).await
}
#[tokio::test]
async fn mailbox_overflow_drop_owned() {
    mailbox_overflow(Readiness::Owned, BackpressurePolicy::Drop).await
}

// ---------------------------------------------------------------------------
// Half-closed and misbehaving peers.

/// A peer sends messages and shuts its write side: the replies still come
/// (the hub reads EOF after them), and the connection ends once.
async fn half_closed_gets_its_replies(readiness: Readiness) {
    let hub = Running::start(cfg(readiness)).await;
    let (mut tcp, mut buf) = raw_upgrade(hub.addr).await;
    let id = hub.wait_opened(1).await[0];
    let mut wire = Vec::new();
    for i in 0..50 {
        wire.extend(masked(0x81, format!("m{i}").as_bytes()));
    }
    tcp.write_all(&wire).await.unwrap();
    tcp.shutdown().await.unwrap();
    let mut got = Vec::new();
    while let Some(f) = tokio::time::timeout(Duration::from_secs(5), read_frame(&mut tcp, &mut buf))
        .await
        .expect("the hub ends it")
    {
        got.push(f);
    }
    let texts: Vec<String> = got.iter().filter(|f| f.0 & 0x0f == 1).map(text).collect();
    assert_eq!(texts.len(), 50, "{texts:?}");
    hub.wait_ended_id(id).await;
    // Half-closed with nothing pending.
    let (mut tcp2, mut buf2) = raw_upgrade(hub.addr).await;
    let id2 = hub.wait_opened(2).await[1];
    tcp2.shutdown().await.unwrap();
    let f = tokio::time::timeout(Duration::from_secs(5), read_frame(&mut tcp2, &mut buf2))
        .await
        .expect("ended");
    let _ = f;
    hub.wait_ended_id(id2).await;
    hub.stop(Duration::from_secs(5)).await;
}
both_modes!(half_closed_gets_its_replies);

/// A peer that floods pings and never reads, beside an honest one; then
/// shutdown: bounded, each once.
async fn ping_flood_non_reader(readiness: Readiness) {
    let hub = Running::start(
        cfg(readiness)
            .shutdown_timeout(Duration::from_millis(500))
            .config(Config::default().close_timeout(Duration::from_millis(300))),
    )
    .await;
    let (mut flood, _) = small_rcvbuf_upgrade(hub.addr).await;
    let (mut honest, mut hbuf) = raw_upgrade(hub.addr).await;
    hub.wait_opened(2).await;
    let ping = masked(0x89, &[0u8; 125]);
    let mut wire = Vec::new();
    for _ in 0..200 {
        wire.extend_from_slice(&ping);
    }
    let flooder = tokio::spawn(async move {
        let until = Instant::now() + Duration::from_millis(800);
        while Instant::now() < until {
            match tokio::time::timeout(Duration::from_millis(50), flood.write_all(&wire)).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => break,
                Err(_) => {}
            }
        }
        flood
    });
    for i in 0..20 {
        honest
            .write_all(&masked(0x81, format!("h{i}").as_bytes()))
            .await
            .unwrap();
        let f = next_frame(&mut honest, &mut hbuf, 2).await.unwrap();
        assert_eq!(text(&f), format!("h{i}"));
    }
    let flood = flooder.await.unwrap();
    let started = Instant::now();
    hub.stop(Duration::from_secs(3)).await;
    assert!(started.elapsed() < Duration::from_millis(1500));
    drop((flood, honest));
}
both_modes!(ping_flood_non_reader);

/// Echo replies corked for a write-blocked peer when it is closed by a
/// handle: nothing is lost before the close, the close comes last.
async fn close_after_corked_sends(readiness: Readiness) {
    let hub =
        Running::start(cfg(readiness).config(Config::default().max_backpressure(64 << 20))).await;
    let (mut tcp, mut buf) = small_rcvbuf_upgrade(hub.addr).await;
    let id = hub.wait_opened(1).await[0];
    for i in 0..200u32 {
        hub.handle
            .send(id, Message::text(format!("{}:{i}", "y".repeat(2000))))
            .await
            .unwrap();
    }
    hub.handle
        .close(id, CloseCode::from(4000), "done")
        .await
        .unwrap();
    let mut n = 0;
    loop {
        let f = next_frame(&mut tcp, &mut buf, 5).await.expect("a close");
        if f.0 & 0x0f == 8 {
            assert_eq!(u16::from_be_bytes([f.1[0], f.1[1]]), 4000);
            break;
        }
        let t = text(&f);
        assert!(t.ends_with(&format!(":{n}")), "{n}: {}", &t[t.len() - 6..]);
        n += 1;
    }
    assert_eq!(n, 200);
    tcp.write_all(&masked(0x88, &close_payload(4000, "")))
        .await
        .unwrap();
    hub.wait_ended_id(id).await;
    hub.stop(Duration::from_secs(5)).await;
}
both_modes!(close_after_corked_sends);

// ---------------------------------------------------------------------------
// Second round.

/// Many echoes corked for a peer that does not read, then the peer shuts
/// its write side: every echo still arrives once it reads, in order.
async fn half_closed_write_blocked(readiness: Readiness) {
    let hub =
        Running::start(cfg(readiness).config(Config::default().max_backpressure(64 << 20))).await;
    let (mut tcp, mut buf) = small_rcvbuf_upgrade(hub.addr).await;
    let id = hub.wait_opened(1).await[0];
    let n = 1500;
    let mut wire = Vec::new();
    for i in 0..n {
        wire.extend(masked(0x81, format!("{}:{i}", "z".repeat(1000)).as_bytes()));
    }
    tcp.write_all(&wire).await.unwrap();
    tcp.shutdown().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut i = 0;
    loop {
        match tokio::time::timeout(Duration::from_secs(5), read_frame(&mut tcp, &mut buf))
            .await
            .expect("frames or EOF")
        {
            Some((b0, p)) if b0 & 0x0f == 1 => {
                let t = String::from_utf8(p).unwrap();
                assert!(t.ends_with(&format!(":{i}")), "echo {i}");
                i += 1;
            }
            Some(_) => {}
            None => break,
        }
    }
    assert_eq!(i, n, "echoes before EOF");
    hub.wait_ended_id(id).await;
    hub.stop(Duration::from_secs(5)).await;
}
both_modes!(half_closed_write_blocked);

/// A peer sends a close and keeps sending data and pings: the close is
/// answered, nothing after it is dispatched, it ends once with its frame.
async fn close_then_keeps_sending(readiness: Readiness) {
    let hub = Running::start(
        cfg(readiness).config(Config::default().close_timeout(Duration::from_millis(500))),
    )
    .await;
    let (mut tcp, mut buf) = raw_upgrade(hub.addr).await;
    let id = hub.wait_opened(1).await[0];
    let mut wire = masked(0x81, b"before");
    wire.extend(masked(0x88, &close_payload(1000, "bye")));
    for i in 0..500 {
        wire.extend(masked(0x81, format!("after {i}").as_bytes()));
        wire.extend(masked(0x89, b"p"));
    }
    tcp.write_all(&wire).await.unwrap();
    let f = next_frame(&mut tcp, &mut buf, 5).await.unwrap();
    assert_eq!(text(&f), "before");
    let f = next_frame(&mut tcp, &mut buf, 5).await.unwrap();
    assert_eq!(f.0 & 0x0f, 8, "the close answer, nothing else: {f:?}");
    // Keeps sending after the answer too.
    for _ in 0..50 {
        if tcp.write_all(&masked(0x81, b"later")).await.is_err() {
            break;
        }
    }
    // The hub ends it (EOF) without more frames.
    let rest = tokio::time::timeout(Duration::from_secs(3), read_frame(&mut tcp, &mut buf)).await;
    assert!(matches!(rest, Ok(None)), "{rest:?}");
    hub.wait_ended_id(id).await;
    {
        let log = hub.log.lock().unwrap();
        let e = log.ended(id).unwrap();
        assert_eq!(e.seen.received.len(), 1, "{:?}", e.seen.received.len());
        assert_eq!(
            e.closed.frame.as_ref().map(|f| u16::from(f.code)),
            Some(1000)
        );
    }
    hub.stop(Duration::from_secs(5)).await;
}
both_modes!(close_then_keeps_sending);

/// A timer entry of a connection that ended must not fire for the one
/// that took its slot: its first ping comes a whole interval after it
/// opened, not at the old tenant's deadline.
async fn stale_timer_entry_misses_the_new_tenant(readiness: Readiness) {
    let interval = Duration::from_millis(400);
    let hub = Running::start(
        cfg(readiness).config(
            Config::default()
                .ping_interval(Some(interval))
                .pong_timeout(Duration::from_secs(5)),
        ),
    )
    .await;
    for round in 0..3 {
        let (old, _) = raw_upgrade(hub.addr).await;
        let old_id = hub.wait_opened(2 * round + 1).await[2 * round];
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(old);
        hub.wait_ended_id(old_id).await;
        let (mut new, mut buf) = raw_upgrade(hub.addr).await;
        let opened = Instant::now();
        let new_id = hub.wait_opened(2 * round + 2).await[2 * round + 1];
        assert_eq!(
            new_id.to_string().split('.').nth(2),
            old_id.to_string().split('.').nth(2),
            "same slot"
        );
        let f = next_frame(&mut new, &mut buf, 5).await.unwrap();
        let at = opened.elapsed();
        assert_eq!(f.0 & 0x0f, 9, "a ping");
        assert!(
            at + Duration::from_millis(30) >= interval,
            "round {round}: first ping {at:?} after open, interval {interval:?}"
        );
        drop(new);
        hub.wait_ended_id(new_id).await;
    }
    hub.stop(Duration::from_secs(5)).await;
}
both_modes!(stale_timer_entry_misses_the_new_tenant);

/// Connections arrive while the hub shuts down: each opened one ends
/// once, the hub stops in time.
async fn shutdown_while_connecting(readiness: Readiness, engines: usize) {
    let hub = Running::start(
        HubConfig::default()
            .readiness(readiness)
            .engines(Some(engines))
            .shutdown_timeout(Duration::from_millis(800)),
    )
    .await;
    let addr = hub.addr;
    let mut tasks = Vec::new();
    for i in 0..120 {
        tasks.push(tokio::spawn(async move {
            let Ok(mut tcp) = TcpStream::connect(addr).await else {
                return;
            };
            let _ = tcp.write_all(KEY_REQUEST).await;
            let mut buf = BytesMut::new();
            // Read whatever comes until EOF; answer a close if one comes
            // for odd ones, sit on it for even ones.
            let until = Instant::now() + Duration::from_secs(3);
            while Instant::now() < until {
                match tokio::time::timeout(Duration::from_millis(200), tcp.read_buf(&mut buf)).await
                {
                    Ok(Ok(0)) | Ok(Err(_)) => return,
                    Ok(Ok(_)) => {
                        if i % 2 == 1 && buf.windows(1).any(|w| w[0] == 0x88) {
                            let _ = tcp.write_all(&masked(0x88, &close_payload(1001, ""))).await;
                        }
                    }
                    Err(_) => {}
                }
            }
        }));
        if i == 60 {
            let h = hub.handle.clone();
            tokio::spawn(async move { h.shutdown().await });
        }
    }
    let started = Instant::now();
    let log = hub.stop(Duration::from_secs(3)).await;
    assert!(
        started.elapsed() < Duration::from_millis(2000),
        "{:?}",
        started.elapsed()
    );
    let _ = log;
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test]
async fn shutdown_while_connecting_owned() {
    shutdown_while_connecting(Readiness::Owned, 1).await
}
#[tokio::test]
async fn shutdown_while_connecting_tokio() {
    shutdown_while_connecting(Readiness::Tokio, 1).await
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_while_connecting_two_engines() {
    shutdown_while_connecting(Readiness::Owned, 2).await
}

/// Thousands of handle commands to one connection, past a turn's cap,
/// closes interleaved for other connections: order kept, nothing lost.
async fn command_flood(readiness: Readiness) {
    let hub = Running::start(
        cfg(readiness)
            .handle_capacity(8192)
            .config(Config::default().max_backpressure(64 << 20))
            .shutdown_timeout(Duration::from_millis(500)),
    )
    .await;
    let (tcp, buf) = raw_upgrade(hub.addr).await;
    let mut others = Vec::new();
    for _ in 0..10 {
        others.push(raw_upgrade(hub.addr).await);
    }
    let ids = hub.wait_opened(11).await;
    let reader = tokio::spawn(async move {
        let (mut tcp, mut buf) = (tcp, buf);
        let mut next = 0u32;
        while next < 5000 {
            let f = next_frame(&mut tcp, &mut buf, 10).await.unwrap();
            assert_eq!(text(&f), format!("c{next}"));
            next += 1;
        }
        tcp
    });
    for i in 0..5000u32 {
        // Room for all 5 000 (handle_capacity 8 192): the order is the test.
        let _ = hub.handle.try_send(ids[0], Message::text(format!("c{i}")));
        if i % 500 == 0 {
            let k = 1 + (i / 500) as usize;
            hub.handle
                .try_close(ids[k], CloseCode::from(4000), "k")
                .unwrap();
        }
        if i % 1000 == 999 {
            tokio::task::yield_now().await;
        }
    }
    let _tcp = reader.await.unwrap();
    drop(others);
    hub.stop(Duration::from_secs(5)).await;
}
both_modes!(command_flood);

/// Adopted connections (open from the start) and accepted duplexes, some
/// writing, shut down: each ends once, in time.
async fn adopted_and_handed_over_then_shutdown(readiness: Readiness) {
    let log: Arc<Mutex<Log>> = Arc::default();
    let hub = Hub::new(
        Breaker {
            log: log.clone(),
            echo: true,
        },
        cfg(readiness).shutdown_timeout(Duration::from_millis(500)),
    )
    .unwrap();
    let handle = hub.handle();
    let adopter = hub.adopter();
    let task = tokio::spawn(hub.run());
    let mut ends = Vec::new();
    for i in 0..20 {
        let (ours, theirs) = tokio::io::duplex(1024);
        if i % 2 == 0 {
            adopter.adopt(theirs, Seen::default()).await.unwrap();
        } else {
            handle.accept(theirs).await.unwrap();
        }
        ends.push(ours);
    }
    // Half the adopted peers write a message and read nothing.
    for (i, e) in ends.iter_mut().enumerate() {
        if i % 4 == 0 {
            let _ = e.write_all(&masked(0x81, &[b'q'; 100])).await;
        }
        if i % 4 == 1 {
            let _ = e.write_all(&KEY_REQUEST[..20]).await;
        }
    }
    wait_for(
        5,
        || log.lock().unwrap().opened.len() >= 10,
        || "adopted opened".into(),
    )
    .await;
    let started = Instant::now();
    handle.shutdown().await.unwrap();
    tokio::time::timeout(Duration::from_secs(3), task)
        .await
        .expect("stops")
        .unwrap();
    assert!(started.elapsed() < Duration::from_millis(1500));
    let log = std::mem::take(&mut *log.lock().unwrap());
    log.assert_each_ended_once();
    assert_eq!(log.opened.len(), 10);
    // After the hub stopped, adopting is refused, not hung.
    let (_a, b) = tokio::io::duplex(64);
    let r = tokio::time::timeout(Duration::from_secs(2), adopter.adopt(b, Seen::default())).await;
    assert!(matches!(r, Ok(Err(_))), "{r:?}");
    drop(ends);
}
both_modes!(adopted_and_handed_over_then_shutdown);
