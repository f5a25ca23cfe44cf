//! Topics on hubs over real loopback sockets: subscribe, publish from
//! handlers, handles, the registry and other threads; one order per topic;
//! slow subscribers under either backpressure policy; permessage-deflate
//! subscribers of every window; subscriptions that end with their
//! connection or hub; hubs sharing a registry or not.
//!
//! Waiting is on events (the handler's `open`, `drain` and `close`
//! callbacks, messages arriving); timeouts only turn a hang into a failure.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use wavesock::Config;
use wavesock::http::{Request, Response};
use wavesock::hub::HttpResponse;
use wavesock::hub::{
    BackpressurePolicy, Closed, ConnId, HandleError, Handler, Hub, HubConfig, HubHandle,
    HubMessage, Readiness, Ws,
};
use wavesock::topics::{Topics, TopicsConfig};
use wavesock::{Error, Message, PreparedMessage, WebSocketStream};

type Client = WebSocketStream<wavesock::MaybeTlsStream<TcpStream>>;

/// How long any one awaited event may take before the test fails: a
/// guard against hangs, never a measure of speed.
const WAIT: Duration = Duration::from_secs(10);

async fn within<F: Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(WAIT, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: nothing within {WAIT:?}"))
}

// ---------------------------------------------------------------------------
// The handler: commands in text messages, callbacks reported on channels.

/// The handler's callbacks, as the tests await them.
struct Events {
    opened: mpsc::UnboundedReceiver<ConnId>,
    drained: mpsc::UnboundedReceiver<ConnId>,
    closed: mpsc::UnboundedReceiver<Closed>,
}

impl Events {
    async fn opened(&mut self) -> ConnId {
        within("open", self.opened.recv())
            .await
            .expect("hub running")
    }

    async fn drained(&mut self) -> ConnId {
        within("drain", self.drained.recv())
            .await
            .expect("hub running")
    }

    async fn closed(&mut self) -> Closed {
        within("close", self.closed.recv())
            .await
            .expect("hub running")
    }
}

/// Text commands, each answered once done:
///
/// - `sub T` / `unsub T`: `ok`, or `again` / `not` when it changed nothing;
/// - `pub T text`: publishes to the others (`Ws::publish`), `ok N` with
///   the subscribers reached;
/// - `all T text`: publishes through the registry, to this connection too;
/// - `is T`: `yes` or `no`; `topics`: the topics, sorted, comma-separated;
/// - `echo text`: `text`, sent as any other message.
#[derive(Clone)]
struct Commands {
    opened: mpsc::UnboundedSender<ConnId>,
    drained: mpsc::UnboundedSender<ConnId>,
    closed: mpsc::UnboundedSender<Closed>,
}

impl Commands {
    fn new() -> (Commands, Events) {
        let (opened, opened_rx) = mpsc::unbounded_channel();
        let (drained, drained_rx) = mpsc::unbounded_channel();
        let (closed, closed_rx) = mpsc::unbounded_channel();
        let events = Events {
            opened: opened_rx,
            drained: drained_rx,
            closed: closed_rx,
        };
        (
            Commands {
                opened,
                drained,
                closed,
            },
            events,
        )
    }
}

impl Handler for Commands {
    type Data = ();

    fn upgrade(&mut self, _: &Request<()>, _: &mut Response<()>) -> Result<(), HttpResponse> {
        Ok(())
    }

    fn open(&mut self, ws: &mut Ws<'_, ()>) {
        // The test may have stopped listening; the hub goes on regardless.
        let _ = self.opened.send(ws.id());
    }

    fn drain(&mut self, ws: &mut Ws<'_, ()>) {
        let _ = self.drained.send(ws.id());
    }

    fn close(&mut self, closed: Closed, _: ()) {
        let _ = self.closed.send(closed);
    }

    fn message(&mut self, ws: &mut Ws<'_, ()>, msg: HubMessage<'_>) {
        let HubMessage::Text(t) = msg else { return };
        if let Some(text) = t.strip_prefix("echo ") {
            ws.send_text(text).unwrap();
            return;
        }
        let mut words = t.splitn(3, ' ');
        let reply = match (words.next(), words.next(), words.next()) {
            (Some("sub"), Some(topic), None) => {
                if ws.subscribe(topic) { "ok" } else { "again" }.to_owned()
            }
            (Some("unsub"), Some(topic), None) => {
                if ws.unsubscribe(topic) { "ok" } else { "not" }.to_owned()
            }
            (Some("pub"), Some(topic), Some(text)) => {
                format!("ok {}", ws.publish(topic, HubMessage::Text(text)).local)
            }
            (Some("all"), Some(topic), Some(text)) => {
                let msg = PreparedMessage::new(&Message::text(text.to_owned())).unwrap();
                format!("ok {}", ws.registry().publish(topic, &msg).local)
            }
            (Some("is"), Some(topic), None) => {
                if ws.is_subscribed(topic) { "yes" } else { "no" }.to_owned()
            }
            (Some("topics"), None, None) => {
                let mut topics: Vec<&str> = ws.topics().collect();
                topics.sort_unstable();
                topics.join(",")
            }
            _ => "?".to_owned(),
        };
        ws.send_text(&reply).unwrap();
    }
}

/// A hub served on a loopback listener.
struct Server {
    addr: SocketAddr,
    handle: HubHandle,
    events: Events,
    task: JoinHandle<wavesock::Result<()>>,
}

async fn start(config: HubConfig) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (handler, events) = Commands::new();
    let hub = Hub::new(handler, config).unwrap();
    let handle = hub.handle();
    let task = tokio::spawn(hub.serve(listener));
    Server {
        addr,
        handle,
        events,
        task,
    }
}

impl Server {
    fn url(&self) -> String {
        format!("ws://{}/", self.addr)
    }

    /// A client and its id. `open` runs before the `101` is written, so
    /// the id is there once the client is connected; connecting one at a
    /// time pairs them.
    async fn connect(&mut self) -> (Client, ConnId) {
        let ws = wavesock::connect_async(self.url()).await.unwrap().0;
        (ws, self.events.opened().await)
    }

    /// A client subscribed to `topic`, and its id.
    async fn subscriber(&mut self, topic: &str) -> (Client, ConnId) {
        let (mut ws, id) = self.connect().await;
        say(&mut ws, &format!("sub {topic}"), "ok").await;
        (ws, id)
    }
}

/// Sends a command and checks its answer.
async fn say(ws: &mut Client, line: &str, answer: &str) {
    ws.send(Message::text(line.to_owned())).await.unwrap();
    assert_eq!(next_text(ws).await, answer, "answer to {line:?}");
}

/// The next data message.
async fn next_data(ws: &mut Client) -> Message {
    loop {
        let msg = within("a message", ws.next()).await.expect("open").unwrap();
        if msg.is_data() {
            return msg;
        }
    }
}

async fn next_text(ws: &mut Client) -> String {
    next_data(ws).await.to_text().unwrap().to_owned()
}

fn prepared(text: &str) -> PreparedMessage {
    PreparedMessage::new(&Message::text(text.to_owned())).unwrap()
}

// ---------------------------------------------------------------------------
// Raw connections, where the bytes on the wire matter.

const UPGRADE: &str = "GET / HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n";

/// Upgrades `tcp` (offering `extensions` if any); the `101`'s head and
/// the bytes read past it.
async fn upgrade(tcp: &mut TcpStream, extensions: Option<&str>) -> (String, BytesMut) {
    let mut request = UPGRADE.to_owned();
    if let Some(e) = extensions {
        request.push_str(&format!("Sec-WebSocket-Extensions: {e}\r\n"));
    }
    request.push_str("\r\n");
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut buf = BytesMut::new();
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = within("the 101", tcp.read_buf(&mut buf)).await.unwrap();
        assert!(n > 0, "closed during the handshake");
    };
    let head = String::from_utf8(buf.split_to(end).to_vec()).unwrap();
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    (head, buf)
}

/// A masked text frame, as a client sends it.
fn masked_text(text: &str) -> Vec<u8> {
    let payload = text.as_bytes();
    assert!(payload.len() < 126, "short commands only");
    let mask = [0x37, 0xfa, 0x21, 0x3d];
    let mut frame = vec![0x81, 0x80 | payload.len() as u8];
    frame.extend_from_slice(&mask);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    frame
}

/// The next frame from the server: its first byte (FIN, RSV, opcode) and
/// payload. `None` if the connection ends first (a frame cut short
/// included).
async fn read_frame(tcp: &mut TcpStream, buf: &mut BytesMut) -> Option<(u8, Vec<u8>)> {
    loop {
        if buf.len() >= 2 {
            assert_eq!(buf[1] & 0x80, 0, "server frames are not masked");
            let (len, head) = match buf[1] & 0x7f {
                126 if buf.len() >= 4 => (usize::from(u16::from_be_bytes([buf[2], buf[3]])), 4),
                127 if buf.len() >= 10 => {
                    let len = u64::from_be_bytes(buf[2..10].try_into().unwrap());
                    (usize::try_from(len).unwrap(), 10)
                }
                126 | 127 => (usize::MAX, 0),
                n => (usize::from(n), 2),
            };
            if head > 0 && buf.len() >= head + len {
                let first = buf[0];
                buf.advance(head);
                return Some((first, buf.split_to(len).to_vec()));
            }
        }
        match within("a frame", tcp.read_buf(buf)).await {
            Ok(0) | Err(_) => return None,
            Ok(_) => {}
        }
    }
}

/// A raw connection subscribed to `topic` (by a command it sends itself).
async fn raw_subscriber(
    addr: SocketAddr,
    topic: &str,
    recv_buffer: Option<u32>,
    extensions: Option<&str>,
) -> (TcpStream, BytesMut, String) {
    let socket = TcpSocket::new_v4().unwrap();
    if let Some(size) = recv_buffer {
        // Before connecting, so that the window it announces is small too.
        socket.set_recv_buffer_size(size).unwrap();
    }
    let mut tcp = socket.connect(addr).await.unwrap();
    let (head, mut buf) = upgrade(&mut tcp, extensions).await;
    tcp.write_all(&masked_text(&format!("sub {topic}")))
        .await
        .unwrap();
    // Below any compression threshold: a plain text frame either way.
    assert_eq!(
        read_frame(&mut tcp, &mut buf).await,
        Some((0x81, b"ok".to_vec()))
    );
    (tcp, buf, head)
}

// ---------------------------------------------------------------------------
// Publishing and its reach.

#[tokio::test]
async fn publishes_reach_subscribers_on_every_hub_of_the_registry_but_the_publisher() {
    let topics = Topics::new();
    let config = || crate::support::hub::defaults().topics(topics.clone());
    let mut a = start(config()).await;
    let mut b = start(config()).await;
    let (mut on_a, _) = a.subscriber("news").await;
    let (mut on_b, _) = b.subscriber("news").await;
    let (mut publisher, _) = a.subscriber("news").await;
    let (mut bystander, _) = b.subscriber("other").await;
    assert_eq!(topics.subscribers("news"), 3);
    assert_eq!(topics.names(), ["news", "other"]);

    // Two reached: the publisher leaves itself out.
    say(&mut publisher, "pub news one", "ok 2").await;
    assert_eq!(a.handle.publish("news", &prepared("two")).local, 3);
    assert_eq!(next_text(&mut publisher).await, "two");
    // Through the registry, the publisher hears itself (after the answer:
    // publishes go out once the handlers have run).
    say(&mut publisher, "all news three", "ok 3").await;
    assert_eq!(next_text(&mut publisher).await, "three");
    for ws in [&mut on_a, &mut on_b] {
        assert_eq!(next_text(ws).await, "one");
        assert_eq!(next_text(ws).await, "two");
        assert_eq!(next_text(ws).await, "three");
    }

    say(&mut on_b, "unsub news", "ok").await;
    say(&mut on_b, "unsub news", "not").await;
    say(&mut on_b, "is news", "no").await;
    on_a.close(None).await.unwrap();
    // Its subscriptions went before the handler heard it close.
    a.events.closed().await;
    assert_eq!(topics.subscribers("news"), 1);
    assert_eq!(a.handle.publish("news", &prepared("four")).local, 1);
    assert_eq!(next_text(&mut publisher).await, "four");
    // Nobody subscribes to `other` on hub a: the publisher reaches b only.
    say(&mut publisher, "pub other five", "ok 1").await;
    say(&mut on_b, "sub other", "ok").await;
    a.handle.publish("other", &prepared("last"));
    assert_eq!(
        next_text(&mut on_b).await,
        "last",
        "nothing from news after unsub, nothing from other before sub"
    );
    assert_eq!(next_text(&mut bystander).await, "five");
    assert_eq!(next_text(&mut bystander).await, "last");
}

#[tokio::test]
async fn a_connection_knows_its_topics_and_subscribing_twice_is_once() {
    let topics = Topics::new();
    let mut server = start(crate::support::hub::defaults().topics(topics.clone())).await;
    let (mut ws, _) = server.subscriber("b").await;
    say(&mut ws, "sub a", "ok").await;
    say(&mut ws, "sub a", "again").await;
    say(&mut ws, "topics", "a,b").await;
    say(&mut ws, "is a", "yes").await;
    say(&mut ws, "is c", "no").await;
    assert_eq!(topics.subscribers("a"), 1);
    // Subscribed once, so sent once: the second message comes next.
    server.handle.publish("a", &prepared("1"));
    server.handle.publish("a", &prepared("2"));
    assert_eq!(next_text(&mut ws).await, "1");
    assert_eq!(next_text(&mut ws).await, "2");
    say(&mut ws, "unsub a", "ok").await;
    say(&mut ws, "topics", "b").await;
    say(&mut ws, "unsub b", "ok").await;
    say(&mut ws, "topics", "").await;
    assert!(topics.names().is_empty());
}

/// A publish waits in the engine's inbox until the handlers of the turn
/// have run; one of them subscribing meanwhile must not get it.
#[tokio::test]
async fn a_subscription_gets_only_what_is_published_after_it() {
    let topics = Topics::new();
    let mut server = start(crate::support::hub::defaults().topics(topics.clone())).await;
    let (mut a, _) = server.subscriber("t").await;
    let (mut b, _) = server.connect().await;
    // One write: the engine handles both in one turn, the publish still
    // in its inbox when b subscribes.
    b.feed(Message::text("all t early")).await.unwrap();
    b.feed(Message::text("sub t")).await.unwrap();
    b.flush().await.unwrap();
    assert_eq!(next_text(&mut b).await, "ok 1", "b was not subscribed yet");
    assert_eq!(next_text(&mut b).await, "ok");
    assert_eq!(next_text(&mut a).await, "early");
    server.handle.publish("t", &prepared("late"));
    assert_eq!(
        next_text(&mut b).await,
        "late",
        "published before b subscribed"
    );
}

// ---------------------------------------------------------------------------
// Slow subscribers: closed or skipped, the others get everything.

/// The flood's messages: 1 KiB, numbered, the rest a pattern of the number
/// (so that a corrupted or misplaced byte shows).
const FLOOD_MSG: usize = 1024;
/// Well above one batch of the flood, so that readers that keep up never
/// reach it.
const FLOOD_LIMIT: usize = 64 << 10;
/// Messages published before waiting for the readers: 48 KiB, under the
/// limit, so that a reader that keeps up never has more waiting.
const FLOOD_BATCH: u32 = 48;

/// The flood's filler: message `i` carries a window of it starting at
/// `i % 251`, so that neighbours differ. Copied and compared whole (cheap
/// in the dev profile, where the flood's thousands of messages are checked
/// by each reader).
fn flood_filler(i: u32) -> &'static [u8] {
    static FILLER: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let filler = FILLER.get_or_init(|| (0..2 * FLOOD_MSG).map(|j| (j * 7 % 256) as u8).collect());
    let at = (i % 251) as usize;
    &filler[at..at + FLOOD_MSG - 4]
}

fn flood_payload(i: u32) -> Vec<u8> {
    let mut p = Vec::with_capacity(FLOOD_MSG);
    p.extend_from_slice(&i.to_be_bytes());
    p.extend_from_slice(flood_filler(i));
    p
}

fn flood_index(p: &[u8]) -> u32 {
    assert_eq!(p.len(), FLOOD_MSG);
    let i = u32::from_be_bytes(p[..4].try_into().unwrap());
    assert!(&p[4..] == flood_filler(i), "message {i} corrupted");
    i
}

/// More than the kernel can hold for a peer that does not read: the hub
/// socket's send buffer grows at most to `tcp_wmem`'s maximum; the
/// client's receive buffer is a few KiB; the margin covers the hub's
/// limit and the kernel's accounting.
fn flood_bytes() -> usize {
    let wmem = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_wmem")
        .ok()
        .and_then(|s| s.split_whitespace().nth(2)?.parse().ok())
        .unwrap_or(4 << 20);
    wmem + (1 << 20)
}

/// Reads the flood's messages until `end`, reporting how many came.
fn read_flood(mut ws: Client) -> (watch::Receiver<u32>, JoinHandle<Vec<u32>>) {
    let (tx, rx) = watch::channel(0);
    let task = tokio::spawn(async move {
        let mut got = Vec::new();
        loop {
            match next_data(&mut ws).await {
                Message::Binary(b) => {
                    got.push(flood_index(&b));
                    tx.send_replace(got.len() as u32);
                }
                Message::Text(t) if t == "end" => return got,
                other => panic!("unexpected {other:?}"),
            }
        }
    });
    (rx, task)
}

/// What the raw subscriber that stopped reading gets once it reads again:
/// the flood's numbers, whether `end` came, whether it is still served.
struct SlowRead {
    got: Vec<u32>,
    end: bool,
    alive: bool,
    /// The close frame's code, when one came.
    closed_with: Option<u16>,
}

/// Reads what the slow subscriber was sent: until the connection ends, or
/// until `end`; then asks for an echo to show it is still served.
fn read_slow(mut tcp: TcpStream, mut buf: BytesMut) -> JoinHandle<SlowRead> {
    tokio::spawn(async move {
        let mut got = Vec::new();
        let mut closed_with = None;
        loop {
            match read_frame(&mut tcp, &mut buf).await {
                None => {
                    return SlowRead {
                        got,
                        end: false,
                        alive: false,
                        closed_with,
                    };
                }
                Some((0x82, p)) if closed_with.is_none() => got.push(flood_index(&p)),
                Some((0x88, p)) if closed_with.is_none() => {
                    closed_with = Some(u16::from_be_bytes([p[0], p[1]]));
                }
                Some((0x81, p)) if p == b"end" => break,
                Some(other) => panic!("unexpected frame {other:?}"),
            }
        }
        tcp.write_all(&masked_text("echo alive")).await.unwrap();
        let alive = read_frame(&mut tcp, &mut buf).await == Some((0x81, b"alive".to_vec()));
        SlowRead {
            got,
            end: true,
            alive,
            closed_with,
        }
    })
}

async fn slow_subscriber_among_fast_ones(policy: BackpressurePolicy, engines: usize) {
    let topic = "flood";
    // A close timeout longer than the test: a closed subscriber's
    // connection ends because it read its close frame.
    let config = crate::support::hub::defaults()
        .config(
            Config::default()
                .close_timeout(Duration::from_secs(120))
                .max_backpressure(FLOOD_LIMIT),
        )
        .topics(Topics::new())
        .engines(Some(engines))
        .backpressure_policy(policy);
    let mut server = start(config).await;
    let mut fast = Vec::new();
    let mut fast_engines = HashSet::new();
    for _ in 0..4 {
        let (ws, id) = server.subscriber(topic).await;
        fast_engines.insert(id.engine());
        fast.push(read_flood(ws));
    }
    assert_eq!(
        fast_engines.len(),
        engines,
        "fast subscribers on each engine"
    );
    // Small, so that the kernel holds little of what the hub writes to it.
    let (slow, slow_buf, _) = raw_subscriber(server.addr, topic, Some(4096), None).await;
    let slow_id = server.events.opened().await;
    assert_eq!(server.handle.topics().subscribers(topic), 5);

    let bound = flood_bytes();
    let mut sent = 0u32;
    // Batches published once more than the kernel holds was: the slow one
    // met the policy by then.
    let mut after = 0;
    while after < 2 {
        for _ in 0..FLOOD_BATCH {
            let msg = PreparedMessage::new(&Message::binary(flood_payload(sent))).unwrap();
            server.handle.publish(topic, &msg);
            sent += 1;
        }
        // Each batch is written before the next: the fast ones never have
        // more than a batch waiting.
        for (progress, _) in &mut fast {
            within("a fast subscriber", progress.wait_for(|&n| n >= sent))
                .await
                .unwrap();
        }
        if (sent as usize) * FLOOD_MSG >= bound {
            after += 1;
        }
    }

    // Before `end`, after which the fast ones hang up; and before the slow
    // one reads, whose connection waits for that to end.
    assert!(
        server.events.closed.try_recv().is_err(),
        "no subscriber closed"
    );
    let slow = read_slow(slow, slow_buf);
    match policy {
        BackpressurePolicy::Close => {
            let slow = within("the slow subscriber's end", slow).await.unwrap();
            assert_eq!(slow.closed_with, Some(1013), "told to try again later");
            let closed = within("the slow subscriber's close", server.events.closed.recv())
                .await
                .unwrap();
            assert_eq!(closed.id, slow_id);
            assert!(
                matches!(closed.error, Some(Error::Backpressure { limit, buffered }) if limit == FLOOD_LIMIT && buffered > FLOOD_LIMIT),
                "{:?}",
                closed.error
            );
            assert!(!slow.end, "closed before the end");
            // What the kernel held when it was closed: the flood's start,
            // in order; what the hub held for it was dropped with it.
            assert!(slow.got.len() < sent as usize);
            assert!(slow.got.iter().copied().eq(0..slow.got.len() as u32));
            assert_eq!(
                server.handle.topics().subscribers(topic),
                4,
                "the closed one left the topic"
            );
            server.handle.publish(topic, &prepared("end"));
        }
        BackpressurePolicy::Drop => {
            // It catches up once it reads; the hub says so.
            assert_eq!(server.events.drained().await, slow_id);
            assert_eq!(server.handle.topics().subscribers(topic), 5);
            server.handle.publish(topic, &prepared("end"));
            let slow = within("the slow subscriber's catching up", slow)
                .await
                .unwrap();
            assert!(slow.end && slow.alive, "still connected and served");
            assert_eq!(slow.closed_with, None);
            assert!(
                slow.got.len() < sent as usize,
                "it missed messages: got {} of {sent}",
                slow.got.len()
            );
            // What it got came in order, none twice: the flood with gaps.
            assert!(slow.got.windows(2).all(|w| w[0] < w[1]));
            assert_eq!(slow.got.first(), Some(&0));
        }
        _ => unreachable!(),
    }
    for (_, task) in fast {
        let got = within("a fast subscriber's end", task).await.unwrap();
        assert!(
            got.iter().copied().eq(0..sent),
            "a fast subscriber got {} of {sent}, or out of order",
            got.len()
        );
    }
}

#[tokio::test]
async fn a_subscriber_that_stops_reading_is_closed_and_the_others_get_everything() {
    slow_subscriber_among_fast_ones(BackpressurePolicy::Close, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_stops_reading_is_closed_on_two_engines() {
    slow_subscriber_among_fast_ones(BackpressurePolicy::Close, 2).await;
}

#[tokio::test]
async fn a_subscriber_that_stops_reading_misses_messages_under_drop() {
    slow_subscriber_among_fast_ones(BackpressurePolicy::Drop, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_stops_reading_misses_messages_under_drop_on_two_engines() {
    slow_subscriber_among_fast_ones(BackpressurePolicy::Drop, 2).await;
}

// ---------------------------------------------------------------------------
// One order per topic.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_subscriber_sees_one_order_whoever_publishes() {
    const PER: usize = 150;
    let topics = Topics::with_config(TopicsConfig::default().stream_capacity(1 << 16));
    // No backpressure here: every subscriber must get everything.
    let config = crate::support::hub::defaults()
        .config(Config::default().max_backpressure(1 << 30))
        .topics(topics.clone())
        .engines(Some(2));
    let mut server = start(config).await;

    let mut readers = Vec::new();
    let mut engines = HashSet::new();
    for _ in 0..4 {
        let (mut ws, id) = server.subscriber("order").await;
        engines.insert(id.engine());
        readers.push(tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                match next_text(&mut ws).await {
                    t if t == "end" => return got,
                    t => got.push(t),
                }
            }
        }));
    }
    assert_eq!(engines.len(), 2, "subscribers on both engines");
    let mut receiver = topics.subscribe("order");
    let reference = tokio::spawn(async move {
        let mut got = Vec::new();
        loop {
            let m = within("the receiver", receiver.recv()).await.unwrap();
            match std::str::from_utf8(m.payload()).unwrap() {
                "end" => return got,
                t => got.push(t.to_owned()),
            }
        }
    });

    // Four connections publish (two per engine); the first also
    // subscribes, and hears everyone's but its own.
    let parties = 4 + 2;
    let barrier = Arc::new(tokio::sync::Barrier::new(parties));
    let mut publishers = Vec::new();
    let mut engines = HashSet::new();
    let (p0_done_tx, p0_done) = tokio::sync::oneshot::channel();
    let mut p0_done_tx = Some(p0_done_tx);
    let mut p0_reader = None;
    for p in 0..4 {
        let (mut ws, id) = server.connect().await;
        engines.insert(id.engine());
        if p == 0 {
            say(&mut ws, "sub order", "ok").await;
        }
        let barrier = barrier.clone();
        let done = p0_done_tx.take().filter(|_| p == 0);
        let task = tokio::spawn(async move {
            barrier.wait().await;
            for i in 0..PER {
                ws.feed(Message::text(format!("pub order p{p}:{i}")))
                    .await
                    .unwrap();
            }
            ws.flush().await.unwrap();
            // Answers come once each publish is done; p0's are mixed with
            // what it hears.
            let mut heard = Vec::new();
            let mut answers = 0;
            let mut done = done;
            loop {
                let t = next_text(&mut ws).await;
                if t.starts_with("ok ") {
                    answers += 1;
                    if answers == PER {
                        match done.take() {
                            Some(d) => d.send(()).unwrap(),
                            None => return heard,
                        }
                    }
                } else if t == "end" {
                    assert_eq!(answers, PER);
                    return heard;
                } else {
                    heard.push(t);
                }
            }
        });
        if p == 0 {
            p0_reader = Some(task);
        } else {
            publishers.push(task);
        }
    }
    assert_eq!(engines.len(), 2, "publishers on both engines");
    assert_eq!(topics.subscribers("order"), 6);

    let handle = server.handle.clone();
    let b = barrier.clone();
    let from_handle = tokio::spawn(async move {
        b.wait().await;
        for i in 0..PER {
            handle.publish("order", &prepared(&format!("h:{i}")));
            if i % 8 == 0 {
                tokio::task::yield_now().await;
            }
        }
    });
    let (rt, t, b) = (
        tokio::runtime::Handle::current(),
        topics.clone(),
        barrier.clone(),
    );
    let from_thread = std::thread::spawn(move || {
        rt.block_on(b.wait());
        for i in 0..PER {
            assert_eq!(t.publish("order", &prepared(&format!("t:{i}"))).local, 6);
        }
    });

    for task in publishers {
        within("a publisher", task).await.unwrap();
    }
    within("p0", p0_done).await.unwrap();
    within("the handle's publisher", from_handle).await.unwrap();
    tokio::task::spawn_blocking(move || from_thread.join().unwrap())
        .await
        .unwrap();
    // After every publish: last for everyone.
    server.handle.publish("order", &prepared("end"));

    let reference = within("the receiver", reference).await.unwrap();
    let total = 6 * PER;
    assert_eq!(reference.len(), total);
    let mut by_publisher: HashMap<&str, Vec<usize>> = HashMap::new();
    for m in &reference {
        let (who, i) = m.split_once(':').unwrap();
        by_publisher
            .entry(who)
            .or_default()
            .push(i.parse().unwrap());
    }
    assert_eq!(by_publisher.len(), 6, "{:?}", by_publisher.keys());
    for (who, seq) in &by_publisher {
        assert!(
            seq.iter().copied().eq(0..PER),
            "{who}'s messages, in its order, each once"
        );
    }
    for reader in readers {
        let got = within("a subscriber", reader).await.unwrap();
        assert!(got == reference, "a subscriber saw another order");
    }
    let heard = within("p0", p0_reader.unwrap()).await.unwrap();
    let others: Vec<&String> = reference.iter().filter(|m| !m.starts_with("p0:")).collect();
    assert!(
        heard.iter().eq(others),
        "the publishing subscriber saw another order"
    );
}

// ---------------------------------------------------------------------------
// permessage-deflate subscribers.

/// Text whose repeats are `gap` bytes apart: compressible, but only with a
/// window wider than `gap`.
#[cfg(feature = "deflate")]
fn repeats(seed: u32, block: usize, times: usize) -> String {
    let mut x = seed.wrapping_mul(2_654_435_761) | 1;
    let block: String = (0..block)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            char::from(b'a' + (x % 26) as u8)
        })
        .collect();
    block.repeat(times)
}

#[cfg(feature = "deflate")]
#[tokio::test]
async fn deflate_and_plain_subscribers_of_every_policy_and_window_get_the_right_payloads() {
    use wavesock::{DeflateConfig, DeflatePolicy};
    // A hub under each policy, one registry: a publish reaches subscribers
    // under every policy and every window each negotiated.
    let topics = Topics::new();
    let mut servers = Vec::new();
    for policy in [
        DeflatePolicy::Takeover,
        DeflatePolicy::Shared,
        DeflatePolicy::Dedicated(4 << 10),
        DeflatePolicy::Dedicated(16 << 10),
    ] {
        let deflate = DeflateConfig::default().policy(policy);
        let config = crate::support::hub::defaults()
            .topics(topics.clone())
            .config(Config::default().deflate(deflate));
        servers.push((policy, start(config).await));
    }
    let d = DeflateConfig::default;
    let variants: Vec<(&str, Option<DeflateConfig>, Option<&str>)> = vec![
        ("plain", None, None),
        ("default", Some(d()), None),
        (
            "server window 9",
            Some(d().server_max_window_bits(Some(9))),
            Some("server_max_window_bits=9"),
        ),
        (
            "server window 8",
            Some(d().server_max_window_bits(Some(8))),
            Some("server_max_window_bits=8"),
        ),
        (
            "server window 12",
            Some(d().server_max_window_bits(Some(12))),
            Some("server_max_window_bits=12"),
        ),
        (
            "client window 8",
            Some(d().client_max_window_bits(Some(8))),
            Some("client_max_window_bits=8"),
        ),
        (
            "client window 11, server resets",
            Some(
                d().client_max_window_bits(Some(11))
                    .server_no_context_takeover(true),
            ),
            Some("server_no_context_takeover"),
        ),
        (
            "client resets",
            Some(d().client_no_context_takeover(true)),
            // A hint the server need not answer.
            None,
        ),
    ];
    let mut clients = Vec::new();
    for (policy, server) in servers.iter_mut() {
        let policy = *policy;
        for (name, deflate, param) in &variants {
            let config = match deflate {
                Some(d) => Config::default().deflate(d.clone()),
                None => Config::default(),
            };
            let (mut ws, resp) = wavesock::connect_async_with_config(server.url(), config)
                .await
                .unwrap();
            server.events.opened().await;
            let agreed = resp
                .headers()
                .get("sec-websocket-extensions")
                .map(|v| v.to_str().unwrap().to_owned());
            let name = format!("{name} ({policy:?})");
            match (&agreed, deflate) {
                (None, None) => {}
                (Some(a), Some(_)) => {
                    assert!(a.starts_with("permessage-deflate"), "{name}: {a}");
                    // The other policies answer with parameters of their own.
                    if let (Some(p), DeflatePolicy::Takeover) = (param, policy) {
                        assert!(a.contains(p), "{name}: {a}");
                    }
                }
                _ => panic!("{name}: {agreed:?}"),
            }
            say(&mut ws, "sub news", "ok").await;
            clients.push((name, ws));
        }
    }
    let server = &servers[0].1;

    let messages = [
        Message::text("short"),
        Message::text(""),
        Message::text("compressible text, ".repeat(200)),
        // Repeats 300 and 2000 bytes apart: right only if each
        // connection gets the frame compressed for its window.
        Message::text(repeats(1, 300, 12)),
        Message::text(repeats(2, 2000, 3)),
        Message::binary(repeats(3, 5000, 1).into_bytes()),
        Message::binary(vec![7; 40_000]),
        Message::text("compressible text, ".repeat(200)),
    ];
    // What each connection compresses itself, between the shared frames:
    // with context takeover its peer's window now holds the shared frames
    // too, so what the connection's compressor remembers no longer lines
    // up with it unless it starts over.
    let echo = |round: usize| format!("round {round}: {}", "own words, own context; ".repeat(40));
    for (round, msg) in messages.iter().enumerate() {
        let published = server
            .handle
            .publish("news", &PreparedMessage::new(msg).unwrap());
        assert_eq!(published.local, clients.len());
        for (name, ws) in &mut clients {
            assert!(next_data(ws).await == *msg, "{name}: round {round}");
        }
        for (_, ws) in &mut clients {
            say(ws, &format!("echo {}", echo(round)), &echo(round)).await;
        }
    }
    // Published from connections, plain and compressing: the others get it.
    let text = "from a connection, ".repeat(100);
    for from in [0, 1] {
        let line = format!("pub news {text}{from}");
        let others = format!("ok {}", clients.len() - 1);
        say(&mut clients[from].1, &line, &others).await;
        for (i, (name, ws)) in clients.iter_mut().enumerate() {
            if i != from {
                assert_eq!(next_text(ws).await, format!("{text}{from}"), "{name}");
            }
        }
    }
    // Nothing more was queued for anyone: the next is the last.
    server.handle.publish("news", &prepared("last"));
    for (name, ws) in &mut clients {
        assert_eq!(next_text(ws).await, "last", "{name}");
    }
}

/// Inflates one compressed message (RFC 7692: the trailer put back).
#[cfg(feature = "deflate")]
fn inflate(payload: &[u8], window_bits: u8) -> Vec<u8> {
    let mut d = flate2::Decompress::new_with_window_bits(false, window_bits);
    let mut input = payload.to_vec();
    input.extend_from_slice(&[0, 0, 0xff, 0xff]);
    let mut out = Vec::with_capacity(1 << 20);
    d.decompress_vec(&input, &mut out, flate2::FlushDecompress::Sync)
        .unwrap();
    assert_eq!(d.total_in() as usize, input.len(), "all of it inflated");
    out
}

#[cfg(feature = "deflate")]
#[tokio::test]
async fn a_publish_is_compressed_once_per_window_on_the_wire() {
    use wavesock::DeflateConfig;
    let config = crate::support::hub::defaults()
        .topics(Topics::new())
        .config(Config::default().deflate(DeflateConfig::default()));
    let server = start(config).await;
    let w10 = Some("permessage-deflate; server_max_window_bits=10");
    let mut conns = Vec::new();
    for ext in [w10, w10, Some("permessage-deflate"), None] {
        let (tcp, buf, head) = raw_subscriber(server.addr, "wire", None, ext).await;
        let head = head.to_ascii_lowercase();
        match ext {
            Some(e) => assert!(
                head.contains(&format!("sec-websocket-extensions: {e}")),
                "{head}"
            ),
            None => assert!(!head.contains("sec-websocket-extensions"), "{head}"),
        }
        conns.push((tcp, buf));
    }
    let text = repeats(4, 700, 20);
    let msg = prepared(&text);
    assert_eq!(server.handle.publish("wire", &msg).local, 4);
    let mut frames = Vec::new();
    for (tcp, buf) in &mut conns {
        frames.push(read_frame(tcp, buf).await.expect("the publish"));
    }
    // FIN, RSV1 (compressed), text.
    for (first, payload) in &frames[..3] {
        assert_eq!(*first, 0xc1);
        assert!(payload.len() < text.len() / 4, "compressed");
    }
    assert_eq!(frames[0], frames[1], "the same window, the same frame");
    assert_eq!(inflate(&frames[0].1, 10), text.as_bytes());
    assert_eq!(inflate(&frames[2].1, 15), text.as_bytes());
    // The plain one gets the prepared frame itself.
    let (first, payload) = &frames[3];
    let mut plain = vec![*first];
    plain.extend_from_slice(&[126, (text.len() >> 8) as u8, text.len() as u8]);
    plain.extend_from_slice(payload);
    assert_eq!(plain, msg.frame().as_ref());
}

// ---------------------------------------------------------------------------
// Subscriptions by id, and how they end.

#[tokio::test]
async fn a_handle_subscribes_and_unsubscribes_by_id() {
    let topics = Topics::new();
    let mut server = start(crate::support::hub::defaults().topics(topics.clone())).await;
    assert!(server.handle.topics().same(&topics));
    let (mut ws, id) = server.subscriber("sentinel").await;
    let handle = &server.handle;

    handle.subscribe(id, "news").await.unwrap();
    handle.try_subscribe(id, "news").unwrap();
    // An engine takes its commands in order: once this arrives, both
    // subscribes were done.
    handle.send(id, Message::text("marker")).await.unwrap();
    assert_eq!(next_text(&mut ws).await, "marker");
    assert_eq!(topics.subscribers("news"), 1, "twice is once");
    say(&mut ws, "topics", "news,sentinel").await;
    assert_eq!(handle.publish("news", &prepared("n1")).local, 1);
    assert_eq!(next_text(&mut ws).await, "n1");

    handle.unsubscribe(id, "news").await.unwrap();
    handle.try_unsubscribe(id, "news").unwrap();
    handle.send(id, Message::text("marker")).await.unwrap();
    assert_eq!(next_text(&mut ws).await, "marker");
    assert_eq!(topics.subscribers("news"), 0);
    assert_eq!(topics.names(), ["sentinel"]);
    // One registry, one order: had `n2` been sent, it would come first.
    assert_eq!(handle.publish("news", &prepared("n2")).local, 0);
    handle.publish("sentinel", &prepared("s"));
    assert_eq!(next_text(&mut ws).await, "s");
    say(&mut ws, "topics", "sentinel").await;
}

#[tokio::test]
async fn an_id_of_a_connection_that_is_gone_subscribes_nobody() {
    let topics = Topics::new();
    let mut server = start(crate::support::hub::defaults().topics(topics.clone())).await;
    let (mut gone, gone_id) = server.connect().await;
    gone.close(None).await.unwrap();
    assert_eq!(server.events.closed().await.id, gone_id);
    // Its slot, under a new generation.
    let (mut ws, id) = server.subscriber("sentinel").await;
    assert_ne!(id, gone_id);
    server.handle.subscribe(gone_id, "t").await.unwrap();
    server
        .handle
        .send(id, Message::text("marker"))
        .await
        .unwrap();
    assert_eq!(next_text(&mut ws).await, "marker");
    assert_eq!(topics.subscribers("t"), 0);
    server.handle.publish("t", &prepared("not for you"));
    server.handle.publish("sentinel", &prepared("s"));
    assert_eq!(next_text(&mut ws).await, "s");
}

#[tokio::test]
async fn subscriptions_end_with_their_connection() {
    let topics = Topics::new();
    let mut server = start(crate::support::hub::defaults().topics(topics.clone())).await;
    let (mut a, a_id) = server.subscriber("x").await;
    say(&mut a, "sub y", "ok").await;
    let (raw, _, _) = raw_subscriber(server.addr, "x", None, None).await;
    let raw_id = server.events.opened().await;
    let (mut c, c_id) = server.connect().await;
    server.handle.subscribe(c_id, "x").await.unwrap();
    server.handle.subscribe(c_id, "z").await.unwrap();
    server
        .handle
        .send(c_id, Message::text("marker"))
        .await
        .unwrap();
    assert_eq!(next_text(&mut c).await, "marker");
    assert_eq!(topics.subscribers("x"), 3);
    assert_eq!(topics.names(), ["x", "y", "z"]);

    // A closing handshake.
    a.close(None).await.unwrap();
    let closed = server.events.closed().await;
    assert_eq!(closed.id, a_id);
    // The subscriptions went before the handler heard of it.
    assert_eq!(topics.subscribers("x"), 2);
    assert_eq!(topics.subscribers("y"), 0);
    assert_eq!(topics.names(), ["x", "z"]);

    // A peer that just goes.
    drop(raw);
    assert_eq!(server.events.closed().await.id, raw_id);
    assert_eq!(topics.subscribers("x"), 1);

    // Closed by the server, through the handle.
    server
        .handle
        .close(c_id, wavesock::CloseCode::NORMAL, "bye")
        .await
        .unwrap();
    // The client answers the close as it reads.
    while let Some(Ok(_)) = within("the close", c.next()).await {}
    assert_eq!(server.events.closed().await.id, c_id);
    assert!(topics.names().is_empty());
    assert_eq!(server.handle.publish("x", &prepared("nobody")).local, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_end_when_the_hub_shuts_down() {
    let topics = Topics::new();
    let config = crate::support::hub::defaults()
        .topics(topics.clone())
        .engines(Some(2));
    let mut server = start(config).await;
    // A task's subscription stays: it is not the hub's.
    let mut receiver = topics.subscribe("a");
    let mut clients = Vec::new();
    let mut engines = HashSet::new();
    for i in 0..4 {
        let (ws, id) = server.subscriber("a").await;
        server.handle.subscribe(id, &format!("b{i}")).await.unwrap();
        engines.insert(id.engine());
        clients.push((ws, id));
    }
    assert_eq!(engines.len(), 2);
    for (ws, _) in &mut clients {
        say(ws, "sub c", "ok").await;
    }
    assert_eq!(topics.subscribers("a"), 5);
    assert_eq!(topics.subscribers("c"), 4);
    assert_eq!(topics.names(), ["a", "b0", "b1", "b2", "b3", "c"]);

    server.handle.shutdown().await.unwrap();
    for (ws, _) in &mut clients {
        // The hub's close (1001), answered by the client.
        loop {
            match within("the hub's close", ws.next()).await {
                Some(Ok(Message::Close(frame))) => {
                    assert_eq!(frame.unwrap().code, wavesock::CloseCode::GOING_AWAY);
                }
                Some(Ok(_)) => {}
                None | Some(Err(_)) => break,
            }
        }
    }
    within("the hub's end", &mut server.task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(topics.subscribers("a"), 1);
    assert_eq!(topics.names(), ["a"]);
    assert_eq!(topics.publish("a", &prepared("after")).local, 1);
    assert_eq!(receiver.recv().await.unwrap(), prepared("after"));
    let id = clients[0].1;
    assert_eq!(
        server.handle.subscribe(id, "a").await,
        Err(HandleError::Stopped)
    );
    assert_eq!(
        server.handle.try_subscribe(id, "a"),
        Err(HandleError::Stopped)
    );
}

#[tokio::test]
async fn subscriptions_end_when_the_hub_is_dropped() {
    let topics = Topics::new();
    let mut server = start(crate::support::hub::defaults().topics(topics.clone())).await;
    let (_ws, _) = server.subscriber("a").await;
    let (mut ws2, id) = server.subscriber("b").await;
    server.handle.subscribe(id, "a").await.unwrap();
    server
        .handle
        .send(id, Message::text("marker"))
        .await
        .unwrap();
    assert_eq!(next_text(&mut ws2).await, "marker");
    assert_eq!(topics.subscribers("a"), 2);
    // Its task dropped (as when a runtime shuts down): no close callback,
    // but no publish queues for it any more.
    server.task.abort();
    assert!(within("the abort", &mut server.task).await.is_err());
    assert!(topics.names().is_empty());
    assert_eq!(server.handle.publish("a", &prepared("x")).local, 0);
}

// ---------------------------------------------------------------------------
// Registries.

#[tokio::test]
async fn hubs_with_their_own_registries_do_not_hear_each_other() {
    let (topics_a, topics_b) = (Topics::new(), Topics::new());
    let mut a = start(crate::support::hub::defaults().topics(topics_a.clone())).await;
    let mut b = start(crate::support::hub::defaults().topics(topics_b.clone())).await;
    assert!(a.handle.topics().same(&topics_a));
    assert!(!a.handle.topics().same(b.handle.topics()));
    let (mut on_a, _) = a.subscriber("t").await;
    let (mut on_b, _) = b.subscriber("t").await;
    let (mut pub_a, _) = a.connect().await;
    let mut on_b_receiver = topics_b.subscribe("t");
    assert_eq!(topics_a.subscribers("t"), 1);
    assert_eq!(topics_b.subscribers("t"), 2);

    say(&mut pub_a, "pub t from-a", "ok 1").await;
    assert_eq!(a.handle.publish("t", &prepared("handle-a")).local, 1);
    assert_eq!(topics_a.publish("t", &prepared("registry-a")).local, 1);
    assert_eq!(next_text(&mut on_a).await, "from-a");
    assert_eq!(next_text(&mut on_a).await, "handle-a");
    assert_eq!(next_text(&mut on_a).await, "registry-a");
    // Had any of a's reached b, it would have come before this.
    assert_eq!(b.handle.publish("t", &prepared("b")).local, 2);
    assert_eq!(next_text(&mut on_b).await, "b");
    assert_eq!(on_b_receiver.recv().await.unwrap(), prepared("b"));
    assert_eq!(topics_a.stats().published, 3);
    assert_eq!(topics_b.stats().published, 1);
}

#[tokio::test]
async fn hubs_on_one_registry_hear_each_other() {
    let topics = Topics::new();
    let mut a = start(crate::support::hub::defaults().topics(topics.clone())).await;
    let mut b = start(crate::support::hub::defaults().topics(topics.clone())).await;
    let (mut on_a, _) = a.subscriber("t").await;
    let (mut on_b, _) = b.subscriber("t").await;
    let mut receiver = topics.subscribe("t");
    assert_eq!(topics.subscribers("t"), 3);
    say(&mut on_a, "pub t from-a", "ok 2").await;
    assert_eq!(next_text(&mut on_b).await, "from-a");
    say(&mut on_b, "pub t from-b", "ok 2").await;
    assert_eq!(next_text(&mut on_a).await, "from-b");
    assert_eq!(b.handle.publish("t", &prepared("handle-b")).local, 3);
    assert_eq!(next_text(&mut on_a).await, "handle-b");
    assert_eq!(next_text(&mut on_b).await, "handle-b");
    for text in ["from-a", "from-b", "handle-b"] {
        assert_eq!(receiver.recv().await.unwrap(), prepared(text));
    }
}

#[tokio::test]
async fn the_global_registry_is_the_default() {
    assert!(
        crate::support::hub::defaults()
            .topics
            .same(&Topics::global())
    );
    let mut server = start(crate::support::hub::defaults()).await;
    assert!(server.handle.topics().same(&Topics::global()));
    // The global registry is the whole test binary's: a name of its own.
    let topic = "topics.rs/the-global-registry-is-the-default";
    let (mut ws, _) = server.subscriber(topic).await;
    assert_eq!(Topics::global().subscribers(topic), 1);
    assert_eq!(Topics::global().publish(topic, &prepared("hi")).local, 1);
    assert_eq!(next_text(&mut ws).await, "hi");
    // And not any other.
    assert_eq!(Topics::new().publish(topic, &prepared("lost")).local, 0);
    Topics::global().publish(topic, &prepared("again"));
    assert_eq!(next_text(&mut ws).await, "again");
}

// ---------------------------------------------------------------------------
// What a burst costs.

/// A hub on one engine whose subscribers to "burst" are loopback
/// connections it adopted, their server ends counting writes.
struct Burst {
    handle: HubHandle,
    task: JoinHandle<wavesock::Result<()>>,
    clients: Vec<(TcpStream, BytesMut)>,
    ids: Vec<ConnId>,
    writes: Vec<Arc<AtomicUsize>>,
    adopter: wavesock::hub::Adopter<()>,
    events: Events,
    side: TcpListener,
}

impl Burst {
    async fn start(config: HubConfig, subscribers: usize) -> Burst {
        let topics = Topics::new();
        let (handler, mut events) = Commands::new();
        let hub = Hub::new(handler, config.engines(Some(1)).topics(topics.clone())).unwrap();
        let (handle, adopter) = (hub.handle(), hub.adopter());
        let task = tokio::spawn(hub.serve(TcpListener::bind("127.0.0.1:0").await.unwrap()));
        let side = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut clients = Vec::new();
        let mut ids = Vec::new();
        let mut writes = Vec::new();
        for _ in 0..subscribers {
            let client = TcpStream::connect(side.local_addr().unwrap())
                .await
                .unwrap();
            let (server, _) = side.accept().await.unwrap();
            let (io, count) = crate::support::CountingIo::new(server);
            adopter.adopt(io, ()).await.unwrap();
            let id = events.opened().await;
            handle.subscribe(id, "burst").await.unwrap();
            clients.push((client, BytesMut::new()));
            ids.push(id);
            writes.push(count);
        }
        // A handle's subscribe is a command the engine carries out later.
        within("the subscriptions", async {
            while topics.subscribers("burst") < subscribers {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await;
        Burst {
            handle,
            task,
            clients,
            ids,
            writes,
            adopter,
            events,
            side,
        }
    }

    /// One more connection, not subscribed, that publishes `count`
    /// messages of 4 digits to "burst" in one write: the engine reads and
    /// publishes them all in one turn (`Ws::publish`).
    async fn publish_from_a_connection(&mut self, count: usize) -> TcpStream {
        let mut client = TcpStream::connect(self.side.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = self.side.accept().await.unwrap();
        self.adopter.adopt(server, ()).await.unwrap();
        self.events.opened().await;
        let mut wire = Vec::new();
        for i in 0..count {
            wire.extend(masked_text(&format!("pub burst {i:04}")));
        }
        client.write_all(&wire).await.unwrap();
        client
    }

    fn writes(&self) -> usize {
        self.writes.iter().map(|c| c.load(Ordering::SeqCst)).sum()
    }

    /// Publishes `count` messages of `size` bytes before the engine's next
    /// turn: the test's runtime has one thread, and publishing does not
    /// yield.
    fn publish(&self, count: usize, size: usize) {
        for i in 0..count {
            self.handle
                .publish("burst", &prepared(&format!("{i:0size$}")));
        }
    }

    /// Reads the burst on every connection at once; each must get all of
    /// it, in order.
    async fn read_all(&mut self, count: usize, size: usize) {
        let reads = self
            .clients
            .iter_mut()
            .enumerate()
            .map(|(c, (client, buf))| async move {
                for i in 0..count {
                    let frame = read_frame(client, buf)
                        .await
                        .unwrap_or_else(|| panic!("subscriber {c} got {i} of {count}"));
                    assert_eq!(
                        frame,
                        (0x81, format!("{i:0size$}").into_bytes()),
                        "subscriber {c}"
                    );
                }
            });
        futures_util::future::join_all(reads).await;
    }

    async fn stop(self) {
        // Gone first: the shutdown need not wait for their close replies.
        drop(self.clients);
        self.handle.shutdown().await.unwrap();
        within("the hub's end", self.task).await.unwrap().unwrap();
    }
}

/// A burst of publishes to many subscribers goes out as about one write
/// to each: a subscriber's share of the burst is corked and written
/// together, however many turns the engine takes to deliver the burst
/// (it caps a turn's deliveries, here 40 000 of them).
#[tokio::test]
async fn a_burst_to_many_subscribers_is_one_write_each() {
    const SUBSCRIBERS: usize = 200;
    const BURST: usize = 200;
    for readiness in [Readiness::Owned, Readiness::Tokio] {
        let mut hub = Burst::start(HubConfig::default().readiness(readiness), SUBSCRIBERS).await;
        let before = hub.writes();
        hub.publish(BURST, 4);
        hub.read_all(BURST, 4).await;
        let made = hub.writes() - before;
        assert!(
            made <= SUBSCRIBERS + SUBSCRIBERS / 10,
            "{readiness:?}: {made} writes for a burst of {BURST} to {SUBSCRIBERS} subscribers"
        );
        hub.stop().await;
    }
}

/// A burst larger than the backpressure limit reaches subscribers that
/// read: their share is written out as it grows, before the rest is
/// corked, so none meets the Close policy for the size of a burst.
#[tokio::test]
async fn a_burst_larger_than_the_backpressure_limit_reaches_readers_whole() {
    const SUBSCRIBERS: usize = 20;
    const BURST: usize = 64;
    for readiness in [Readiness::Owned, Readiness::Tokio] {
        let config = HubConfig::default()
            .readiness(readiness)
            .backpressure_policy(BackpressurePolicy::Close)
            .config(Config::default().max_backpressure(16 << 10));
        let mut hub = Burst::start(config, SUBSCRIBERS).await;
        // 64 KiB for each, four times the limit.
        hub.publish(BURST, 1024);
        hub.read_all(BURST, 1024).await;
        hub.stop().await;
    }
}

/// Subscribers unsubscribed while a burst is being delivered (many
/// turns: 100 000 deliveries) get none of it after: each gets a prefix,
/// and those not yet reached when the engine took the unsubscribes get
/// less than all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsubscribing_during_a_burst_stops_its_deliveries() {
    const SUBSCRIBERS: usize = 400;
    const BURST: usize = 256;
    for readiness in [Readiness::Owned, Readiness::Tokio] {
        let mut hub = Burst::start(HubConfig::default().readiness(readiness), SUBSCRIBERS).await;
        let publisher = hub.publish_from_a_connection(BURST).await;
        // Once the engine has reached someone, every subscriber leaves.
        let readable = hub
            .clients
            .iter()
            .map(|(client, _)| Box::pin(client.readable()));
        within(
            "a first delivery",
            futures_util::future::select_all(readable),
        )
        .await
        .0
        .unwrap();
        for id in &hub.ids {
            hub.handle.unsubscribe(*id, "burst").await.unwrap();
        }
        let reads = hub.clients.iter_mut().map(|(client, buf)| async move {
            let mut got = 0;
            while let Ok(frame) =
                tokio::time::timeout(Duration::from_millis(300), read_frame(client, buf)).await
            {
                let frame = frame.expect("open");
                assert_eq!(frame, (0x81, format!("{got:04}").into_bytes()), "a prefix");
                got += 1;
            }
            got
        });
        let got = futures_util::future::join_all(reads).await;
        let mut counts = std::collections::BTreeMap::new();
        for n in &got {
            *counts.entry(*n).or_insert(0) += 1;
        }
        assert!(
            got.iter().any(|&n| n > 0),
            "{readiness:?}: no one was reached before the unsubscribes: {counts:?}"
        );
        assert!(
            got.iter().any(|&n| n < BURST),
            "{readiness:?}: every subscriber got the whole burst, after unsubscribing too"
        );
        drop(publisher);
        hub.stop().await;
    }
}

/// With the `metrics` feature: topics and subscriptions (hub connections'
/// and a receiver's) as gauges that follow subscribes, unsubscribes and
/// ends; publishes and the deliveries each queued; a receiver's skipped
/// messages as drops. Alone in a child process: the recorder is the
/// process's.
#[cfg(feature = "metrics")]
#[test]
fn metrics_count_topics_subscriptions_publishes_and_drops() {
    use crate::support::{child, metered};
    use wavesock::meter;

    if !child::alone() {
        return;
    }
    let m = metered::install();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let topics = Topics::with_config(TopicsConfig::default().stream_capacity(2));
        let config = HubConfig::default().engines(Some(1)).topics(topics.clone());
        let mut server = start(config).await;
        let (mut a, _) = server.subscriber("news").await;
        let (mut b, _) = server.subscriber("news").await;
        let (mut c, _) = server.subscriber("sport").await;
        let mut rx = topics.subscribe("news");
        let gauges = || {
            (
                m.gauge(meter::TOPICS, &[]),
                m.gauge(meter::SUBSCRIPTIONS, &[]),
            )
        };
        assert_eq!(gauges(), (2.0, 4.0));

        assert_eq!(topics.publish("news", &prepared("one")).local, 3);
        assert_eq!(next_text(&mut a).await, "one");
        assert_eq!(next_text(&mut b).await, "one");
        assert_eq!(rx.recv().await.unwrap().payload().as_ref(), b"one");
        assert_eq!(m.counter(meter::PUBLISHES, &[]), 1);
        assert_eq!(m.counter(meter::DELIVERIES, &[]), 3);

        // The receiver falls three behind a ring of two: one skipped.
        for text in ["two", "three", "four"] {
            topics.publish("news", &prepared(text));
        }
        assert_eq!(
            rx.try_recv().unwrap_err(),
            wavesock::topics::RecvError::Lagged(1)
        );
        let lagged = [("reason", "lagged")];
        assert_eq!(m.counter(meter::DROPS, &lagged), 1);
        assert_eq!(m.counter(meter::PUBLISHES, &[]), 4);
        assert_eq!(m.counter(meter::DELIVERIES, &[]), 12);

        say(&mut c, "unsub sport", "ok").await;
        assert_eq!(gauges(), (1.0, 3.0));
        drop(rx);
        assert_eq!(gauges(), (1.0, 2.0));
        a.close(None).await.unwrap();
        server.events.closed().await;
        assert_eq!(gauges(), (1.0, 1.0));
        b.close(None).await.unwrap();
        server.events.closed().await;
        assert_eq!(gauges(), (0.0, 0.0));
        drop(c);
    });
}

/// With the `metrics` feature: a publish an engine's full inbox missed
/// counts one `inbox_full` drop per subscriber it was for (what the
/// metric says: deliveries dropped), while the registry's stats count it
/// once for the engine. The publishes come from this task, at once, with
/// the engine's runtime not running: nothing slows them.
#[cfg(feature = "metrics")]
#[test]
fn metrics_count_an_inbox_full_drop_per_subscriber() {
    use crate::support::{child, metered};
    use wavesock::meter;

    if !child::alone() {
        return;
    }
    let m = metered::install();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let topics = Topics::with_config(TopicsConfig::default().inbox_capacity(1));
        let config = HubConfig::default().engines(Some(1)).topics(topics.clone());
        let mut server = start(config).await;
        let mut subs = Vec::new();
        for _ in 0..3 {
            subs.push(server.subscriber("news").await.0);
        }
        // No await between them: the engine takes nothing meanwhile.
        assert_eq!(topics.publish("news", &prepared("one")).local, 3);
        assert_eq!(topics.publish("news", &prepared("two")).local, 0);
        assert_eq!(topics.stats().inbox_dropped, 1);
        assert_eq!(m.counter(meter::DROPS, &[("reason", "inbox_full")]), 3);
        for mut ws in subs {
            assert_eq!(next_text(&mut ws).await, "one");
        }
    });
}
