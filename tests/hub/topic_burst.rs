//! One guest's burst in a chat room on a hub: the publisher is slowed,
//! never its neighbours punished. Eight guests subscribe to one room; one
//! writes a burst of one-byte lines, each published through the registry
//! to every guest (itself included, as `examples/hub_chat.rs` does).
//! Every guest, on every engine, gets every line in order; none is
//! closed; the heap stays within the bound the docs give.
//!
//! Before publishers were paced, a burst of 200 000 lines in one write
//! had the publisher's engine read past its inbox within a turn, and
//! every guest on that engine was closed with 1013 after about 62 600.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use wavesock::http::{Request, Response};
use wavesock::hub::{Closed, Handler, HttpResponse, Hub, HubConfig, HubMessage, Readiness, Ws};
use wavesock::topics::{Topics, TopicsConfig};
use wavesock::{Message, PreparedMessage};

use crate::support::child;
use crate::support::counting::{LIVE, PEAK};

const ROOM: &str = "room";
const GUESTS: usize = 8;

/// The chat of `examples/hub_chat.rs`, reduced: every guest subscribes,
/// every line goes to the room through the registry as `N:line`.
#[derive(Clone)]
struct Chat {
    topics: Topics,
}

impl Handler for Chat {
    type Data = usize;

    fn upgrade(
        &mut self,
        request: &Request<()>,
        _: &mut Response<()>,
    ) -> Result<usize, HttpResponse> {
        Ok(request.uri().path()[1..].parse().unwrap_or(0))
    }

    fn open(&mut self, ws: &mut Ws<'_, usize>) {
        ws.subscribe(ROOM);
        let _ = ws.send_text("welcome");
    }

    fn message(&mut self, ws: &mut Ws<'_, usize>, msg: HubMessage<'_>) {
        if let HubMessage::Text(text) = msg {
            let line = format!("{}:{text}", ws.data());
            let msg = PreparedMessage::new(&Message::text(line)).unwrap();
            self.topics.publish(ROOM, &msg);
        }
    }

    fn close(&mut self, _: Closed, _: usize) {}
}

/// A chat room served on loopback: its address, handle and task.
struct Served {
    addr: std::net::SocketAddr,
    handle: wavesock::hub::HubHandle,
    task: tokio::task::JoinHandle<wavesock::Result<()>>,
}

/// Serves the room with `config`, its registry set to `topics`.
async fn serve(config: HubConfig, topics: &Topics) -> Served {
    let config = config.topics(topics.clone());
    let hub = Hub::new(
        Chat {
            topics: topics.clone(),
        },
        config,
    )
    .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let handle = hub.handle();
    let task = tokio::spawn(hub.serve(listener));
    Served { addr, handle, task }
}

impl Served {
    async fn stop(self) {
        let _ = self.handle.shutdown().await;
        let _ = self.task.await;
    }
}

/// A masked one-frame text message of any size below 64 KiB.
fn text_frame(payload: &[u8], out: &mut Vec<u8>) {
    let mask = [0x11, 0x22, 0x33, 0x44];
    out.push(0x81);
    if payload.len() < 126 {
        out.push(0x80 | payload.len() as u8);
    } else {
        out.push(0x80 | 126);
        out.extend_from_slice(&u16::try_from(payload.len()).unwrap().to_be_bytes());
    }
    out.extend_from_slice(&mask);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
}

/// A masked one-frame text message as a client sends it.
fn line_frame(byte: u8, out: &mut Vec<u8>) {
    let mask = [0x11, 0x22, 0x33, 0x44];
    out.extend_from_slice(&[0x81, 0x81]);
    out.extend_from_slice(&mask);
    out.push(byte ^ mask[0]);
}

/// The `i`th line's one byte: a cycle, so that a line missed, doubled or
/// out of order shows.
fn line_byte(i: usize) -> u8 {
    b'a' + (i % 26) as u8
}

/// What a guest saw: the publisher's lines, and whether a close came.
#[derive(Debug)]
struct Saw {
    lines: usize,
    close: Option<Vec<u8>>,
}

/// Reads the room until `want` lines of guest 0 came (checking their
/// order), or the server closes.
async fn read_room(tcp: tokio::net::tcp::OwnedReadHalf, buf: BytesMut, want: usize) -> Saw {
    read_room_with(tcp, buf, want, true, None).await
}

/// The guest's writing half, shared by its reader (for pongs) and its
/// writer.
type Writer = Arc<tokio::sync::Mutex<tokio::net::tcp::OwnedWriteHalf>>;

/// [`read_room`], checking each line's byte if `exact`, and answering
/// pings through `pongs` if given.
async fn read_room_with(
    mut tcp: tokio::net::tcp::OwnedReadHalf,
    mut buf: BytesMut,
    want: usize,
    exact: bool,
    pongs: Option<Writer>,
) -> Saw {
    let mut lines = 0;
    loop {
        while buf.len() >= 2 {
            let (len, head) = match buf[1] {
                126 if buf.len() >= 4 => (usize::from(u16::from_be_bytes([buf[2], buf[3]])), 4),
                126 => break,
                n if n < 126 => (usize::from(n), 2),
                n => panic!("unexpected length byte {n}"),
            };
            if buf.len() < head + len {
                break;
            }
            let op = buf[0] & 0x0f;
            buf.advance(head);
            let payload = buf.split_to(len);
            if op == 8 {
                return Saw {
                    lines,
                    close: Some(payload.to_vec()),
                };
            }
            if op == 9 {
                if let Some(w) = &pongs {
                    let mut pong = vec![0x8a, 0x80 | len as u8, 0, 0, 0, 0];
                    pong.extend_from_slice(&payload);
                    w.lock().await.write_all(&pong).await.unwrap();
                }
                continue;
            }
            if let Some(line) = payload.strip_prefix(b"0:") {
                if exact {
                    assert_eq!(line, [line_byte(lines)], "line {lines} in order");
                }
                lines += 1;
                if lines == want {
                    return Saw { lines, close: None };
                }
            }
        }
        let read = tokio::time::timeout(Duration::from_secs(20), tcp.read_buf(&mut buf)).await;
        match read {
            Ok(Ok(n)) if n > 0 => {}
            _ => return Saw { lines, close: None },
        }
    }
}

async fn guest(addr: std::net::SocketAddr, n: usize) -> (TcpStream, BytesMut) {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "GET /{n} HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut buf = BytesMut::new();
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        assert!(tcp.read_buf(&mut buf).await.unwrap() > 0);
    };
    assert!(buf.starts_with(b"HTTP/1.1 101"));
    buf.advance(end);
    // The welcome, after which the guest is subscribed.
    while buf.len() < 9 {
        assert!(tcp.read_buf(&mut buf).await.unwrap() > 0);
    }
    assert_eq!(&buf[..9], b"\x81\x07welcome");
    buf.advance(9);
    (tcp, buf)
}

/// `lines` lines from guest 0 in `writes` writes; every guest reads them
/// all. The heap's peak growth, for the caller to bound.
async fn burst(engines: usize, readiness: Readiness, lines: usize, writes: usize) -> usize {
    let topics = Topics::with_config(TopicsConfig::default());
    let config = HubConfig::default()
        .engines(Some(engines))
        .readiness(readiness);
    let served = serve(config, &topics).await;
    let addr = served.addr;
    let mut guests = Vec::new();
    for n in 0..GUESTS {
        guests.push(guest(addr, n).await);
    }
    let base = LIVE.load(Ordering::SeqCst);
    PEAK.store(base, Ordering::SeqCst);
    let mut readers = Vec::new();
    let mut publisher = None;
    for (n, (tcp, buf)) in guests.into_iter().enumerate() {
        let (read, write) = tcp.into_split();
        readers.push(tokio::spawn(read_room(read, buf, lines)));
        if n == 0 {
            publisher = Some(write);
        } else {
            // Kept open: a dropped half would end the guest.
            std::mem::forget(write);
        }
    }
    let mut publisher = publisher.unwrap();
    let writer = tokio::spawn(async move {
        let per = lines.div_ceil(writes);
        let mut i = 0;
        let mut bytes = Vec::with_capacity(per * 7);
        while i < lines {
            bytes.clear();
            for _ in 0..per.min(lines - i) {
                line_frame(line_byte(i), &mut bytes);
                i += 1;
            }
            publisher.write_all(&bytes).await.unwrap();
        }
        publisher
    });
    let mut saw = Vec::new();
    for r in readers {
        saw.push(r.await.unwrap());
    }
    let peak = PEAK.load(Ordering::SeqCst).saturating_sub(base);
    let _publisher = writer.await.unwrap();
    for (n, s) in saw.iter().enumerate() {
        assert_eq!(
            (s.lines, &s.close),
            (lines, &None),
            "guest {n} of {GUESTS} on {engines} engine(s), {readiness:?}: every line, no close"
        );
    }
    assert_eq!(
        topics.stats().inbox_dropped,
        0,
        "no engine missed a publish"
    );
    served.stop().await;
    peak
}

/// The documented bound on what a burst may hold: the engines' read
/// buffers, a read kept by each connection slowed mid-read, the inboxes
/// (each at most `inbox_capacity` publishes of this size), and each
/// guest's write backlog up to `max_backpressure`; the test's own
/// buffers besides.
fn bound(engines: usize, lines: usize, writes: usize) -> usize {
    let hub = HubConfig::default();
    let topics = TopicsConfig::default();
    // A publish waiting in an inbox: its entry, its frame and topic name
    // (shared with the other inboxes), counted generously.
    let per_publish = 256;
    let read = hub.read_buffer_size;
    let inboxes = engines * topics.inbox_capacity * per_publish;
    let backlogs = GUESTS * hub.backpressure();
    let test_side = GUESTS * (256 << 10) + (lines.div_ceil(writes) * 7);
    engines * read + GUESTS * read + inboxes + backlogs + test_side
}

async fn run(engines: usize, readiness: Readiness, lines: usize, writes: usize) {
    let peak = burst(engines, readiness, lines, writes).await;
    let bound = bound(engines, lines, writes);
    assert!(
        peak <= bound,
        "peak heap growth {peak} B past the bound {bound} B ({engines} engine(s), {readiness:?})"
    );
    println!("{engines} engine(s), {readiness:?}: peak heap growth {peak} B of {bound} B");
}

macro_rules! bursts {
    ($name:ident, $engines:expr, $lines:expr, $writes:expr) => {
        mod $name {
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn owned() {
                if child::alone() {
                    run($engines, Readiness::Owned, $lines, $writes).await
                }
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn tokio() {
                if child::alone() {
                    run($engines, Readiness::Tokio, $lines, $writes).await
                }
            }
        }
    };
}

bursts!(one_write_one_engine, 1, 200_000, 1);
bursts!(one_write_two_engines, 2, 200_000, 1);
bursts!(one_write_four_engines, 4, 200_000, 1);

// Two million lines over ten writes: `cargo test --release --test hub
// topic_burst:: -- --ignored` (minutes in a debug build).
macro_rules! big_bursts {
    ($name:ident, $engines:expr) => {
        mod $name {
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[ignore = "two million lines: run in release"]
            async fn owned() {
                if child::alone() {
                    run($engines, Readiness::Owned, 2_000_000, 10).await
                }
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[ignore = "two million lines: run in release"]
            async fn tokio() {
                if child::alone() {
                    run($engines, Readiness::Tokio, 2_000_000, 10).await
                }
            }
        }
    };
}

big_bursts!(ten_writes_one_engine, 1);
big_bursts!(ten_writes_two_engines, 2);
big_bursts!(ten_writes_four_engines, 4);

/// A subscriber connection reading the room until `want` lines came or
/// the server closed: its count and the close's payload.
async fn subscriber(
    addr: std::net::SocketAddr,
    n: usize,
    want: usize,
) -> tokio::task::JoinHandle<Saw> {
    let (tcp, buf) = guest(addr, n).await;
    let (read, write) = tcp.into_split();
    std::mem::forget(write);
    tokio::spawn(read_room(read, buf, want))
}

/// A task publishing in a burst waits for room with `publish_when_room`:
/// every subscriber, on either engine, gets every line. The same burst
/// published at once, which nothing slows, overflows the inbox and its
/// subscribers meet the policy (closed with 1013): the waiting is what
/// keeps them. One thread: the engines run only when the task waits, so
/// the burst published at once surely overflows.
#[tokio::test]
async fn a_task_that_waits_for_room_loses_no_subscriber() {
    const LINES: usize = 20_000;
    for wait in [true, false] {
        let topics = Topics::with_config(TopicsConfig::default().inbox_capacity(64));
        let config = HubConfig::default().engines(Some(2));
        let served = serve(config, &topics).await;
        let (addr, handle) = (served.addr, served.handle.clone());
        let mut readers = Vec::new();
        for n in 1..=4 {
            readers.push(subscriber(addr, n, LINES).await);
        }
        for i in 0..LINES {
            let line = format!("0:{}", line_byte(i) as char);
            let msg = PreparedMessage::new(&Message::text(line)).unwrap();
            if wait {
                handle.publish_when_room(ROOM, &msg).await;
            } else {
                handle.publish(ROOM, &msg);
            }
        }
        let mut saw = Vec::new();
        for r in readers {
            saw.push(r.await.unwrap());
        }
        if wait {
            for s in &saw {
                assert_eq!((s.lines, &s.close), (LINES, &None));
            }
            assert_eq!(topics.stats().inbox_dropped, 0);
        } else {
            assert!(
                topics.stats().inbox_dropped > 0,
                "a burst 300 times an inbox"
            );
            let closed = saw.iter().filter(|s| s.close.is_some()).count();
            assert!(closed > 0, "{saw:?}");
            for s in saw.iter().filter_map(|s| s.close.as_ref()) {
                assert_eq!(s[..2], 1013u16.to_be_bytes());
            }
        }
        served.stop().await;
    }
}

/// A hub on a runtime of its own whose one thread the test can put to
/// sleep: an engine that does not take its inbox meanwhile.
struct Stallable {
    addr: std::net::SocketAddr,
    /// Each duration sent stalls the runtime that long.
    stall: std::sync::mpsc::Sender<Duration>,
    /// Stalls it woke from.
    woke: Arc<AtomicUsize>,
    thread: std::thread::JoinHandle<()>,
}

impl Stallable {
    fn start(topics: &Topics) -> Stallable {
        Stallable::with(HubConfig::default(), topics)
    }

    fn with(config: HubConfig, topics: &Topics) -> Stallable {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let (stall, stalls) = std::sync::mpsc::channel::<Duration>();
        let stalls = Arc::new(std::sync::Mutex::new(stalls));
        let woke = Arc::new(AtomicUsize::new(0));
        let (topics, woken) = (topics.clone(), woke.clone());
        let thread = std::thread::spawn(move || {
            runtime.block_on(async move {
                let config = config.engines(Some(1)).topics(topics.clone());
                let hub = Hub::new(Chat { topics }, config).unwrap();
                let handle = hub.handle();
                let server = tokio::spawn(hub.serve(TcpListener::from_std(listener).unwrap()));
                loop {
                    let stalls = stalls.clone();
                    let next = tokio::task::spawn_blocking(move || stalls.lock().unwrap().recv())
                        .await
                        .unwrap();
                    let Ok(stall) = next else { break };
                    // The runtime's one thread sleeps: its engine too.
                    std::thread::sleep(stall);
                    woken.fetch_add(1, Ordering::SeqCst);
                }
                let _ = handle.shutdown().await;
                let _ = server.await;
            })
        });
        Stallable {
            addr,
            stall,
            woke,
            thread,
        }
    }

    fn stop(self) {
        drop(self.stall);
        self.thread.join().unwrap();
    }
}

/// `lines` one-byte lines, as one write's bytes.
fn lines_bytes(lines: usize) -> Vec<u8> {
    let mut bytes = Vec::new();
    for i in 0..lines {
        line_frame(line_byte(i), &mut bytes);
    }
    bytes
}

/// A publisher slowed for another hub's engine that does not take its
/// inbox (its runtime is busy) waits, and so do its neighbours' lines;
/// once the other engine runs again, every line reaches every guest of
/// both hubs and nobody missed one. Without the wait, the stalled
/// engine's inbox overflows and its subscriber is closed with 1013.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publisher_slowed_by_a_stalled_engine_waits_and_loses_nobody() {
    const LINES: usize = 5_000;
    let topics = Topics::with_config(TopicsConfig::default().inbox_capacity(256));
    let b = Stallable::start(&topics);
    let mut far = subscriber(b.addr, 9, LINES).await;
    let config = HubConfig::default().engines(Some(1));
    let served = serve(config, &topics).await;
    let addr = served.addr;
    let mut near = subscriber(addr, 1, LINES).await;
    let (tcp, buf) = guest(addr, 0).await;
    let (read, mut write) = tcp.into_split();
    let mut own = tokio::spawn(read_room(read, buf, LINES));
    b.stall.send(Duration::from_secs(2)).unwrap();
    // B's thread is asleep from about now.
    tokio::time::sleep(Duration::from_millis(200)).await;
    write.write_all(&lines_bytes(LINES)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(b.woke.load(Ordering::SeqCst), 0, "B still asleep");
    assert!(!far.is_finished() && !near.is_finished() && !own.is_finished());
    let far = (&mut far).await.unwrap();
    let near = (&mut near).await.unwrap();
    let own = (&mut own).await.unwrap();
    for s in [&far, &near, &own] {
        assert_eq!(
            (s.lines, &s.close),
            (LINES, &None),
            "{far:?} {near:?} {own:?}"
        );
    }
    assert_eq!(topics.stats().inbox_dropped, 0);
    served.stop().await;
    b.stop();
}

/// A hub shutting down closes a publisher slowed for a stalled engine
/// with its closing handshake, reading the peer's answer behind the rest
/// of its burst, rather than wait for room that does not come: the hub
/// is done before the other engine wakes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_shutting_down_closes_a_slowed_publisher() {
    let topics = Topics::with_config(TopicsConfig::default().inbox_capacity(256));
    let b = Stallable::start(&topics);
    let _far = subscriber(b.addr, 9, usize::MAX).await;
    // Its own timeout far past the stall: ending sooner is the handshake.
    let config = HubConfig::default()
        .engines(Some(1))
        .shutdown_timeout(Duration::from_secs(60));
    let served = serve(config, &topics).await;
    let (addr, handle) = (served.addr, served.handle.clone());
    let (tcp, buf) = guest(addr, 0).await;
    let (read, mut write) = tcp.into_split();
    let own = tokio::spawn(read_room(read, buf, usize::MAX));
    b.stall.send(Duration::from_secs(5)).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    write.write_all(&lines_bytes(5_000)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let shutdown = tokio::spawn(async move { handle.shutdown().await });
    let own = own.await.unwrap();
    let close = own.close.clone().expect("closed by the shutdown");
    assert_eq!(close[..2], 1001u16.to_be_bytes());
    assert!(own.lines < 5_000, "slowed: {own:?}");
    // The peer answers, behind what it sent before.
    write.write_all(&[0x88, 0x80, 0, 0, 0, 0]).await.unwrap();
    let _ = shutdown.await.unwrap();
    let _ = served.task.await;
    assert_eq!(b.woke.load(Ordering::SeqCst), 0, "done while B slept");
    b.stop();
}

/// One connection's two messages read together, the first leaving the
/// inbox below its mark and the second taking it past its bytes bound:
/// the second is taken all the same (the connection is slowed after it),
/// and the subscriber gets both. Before, the second was missed and the
/// subscriber closed with 1013.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_past_the_bytes_bound_from_a_paced_publisher_is_taken() {
    let topics = Topics::with_config(TopicsConfig::default().inbox_bytes(16 << 10));
    let hub = Stallable::start(&topics);
    let (tcp, buf) = guest(hub.addr, 1).await;
    let (read, _write) = tcp.into_split();
    let reader = tokio::spawn(read_room_with(read, buf, 2, false, None));
    let (tcp, _) = guest(hub.addr, 0).await;
    let (_read, mut write) = tcp.into_split();
    // Both in the engine's one read: it sleeps while they come.
    hub.stall.send(Duration::from_millis(300)).unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut bytes = Vec::new();
    text_frame(&[b'a'; 6 << 10], &mut bytes);
    text_frame(&[b'b'; 12 << 10], &mut bytes);
    write.write_all(&bytes).await.unwrap();
    let saw = reader.await.unwrap();
    assert_eq!((saw.lines, &saw.close), (2, &None));
    assert_eq!(topics.stats().inbox_dropped, 0);
    hub.stop();
}

/// A publisher slowed for a stalled engine for longer than its keepalive
/// allows, whose client answers every ping: the server holds its input
/// (the pong among it) and must not blame the peer for the silence. It
/// gets every line once the engine runs again, and no close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slowed_publisher_is_not_timed_out_by_its_keepalive() {
    const LINES: usize = 2_000;
    let topics = Topics::with_config(TopicsConfig::default().inbox_capacity(256));
    let far_hub = Stallable::start(&topics);
    let keepalive = wavesock::Config::default()
        .ping_interval(Some(Duration::from_millis(300)))
        .pong_timeout(Duration::from_millis(300));
    let near_hub = Stallable::with(HubConfig::default().config(keepalive), &topics);
    let far = subscriber(far_hub.addr, 9, LINES).await;
    let (tcp, buf) = guest(near_hub.addr, 0).await;
    let (read, write) = tcp.into_split();
    let write: Writer = Arc::new(tokio::sync::Mutex::new(write));
    let own = tokio::spawn(read_room_with(read, buf, LINES, true, Some(write.clone())));
    far_hub.stall.send(Duration::from_secs(2)).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    write
        .lock()
        .await
        .write_all(&lines_bytes(LINES))
        .await
        .unwrap();
    let own = own.await.unwrap();
    let far = far.await.unwrap();
    assert_eq!((own.lines, &own.close), (LINES, &None), "the publisher");
    assert_eq!(
        (far.lines, &far.close),
        (LINES, &None),
        "the far subscriber"
    );
    far_hub.stop();
    near_hub.stop();
}
