//! What a read writes, on real loopback sockets in both readiness modes:
//! a read's own replies go out with its flush and join the turn's list
//! to write only if some are left (slow readers, a read cut short by the
//! reads-per-turn share, a drain handler, a close asked mid-read, sends to
//! itself through the handle, publishes in the same turns); small frames'
//! headers read the short way (odd bits, reserved opcodes, every length
//! form); masked payloads cut anywhere. Written as a break-it round on
//! the change that made the engine skip the list for an echo.

use crate::support::raw::{Rng, masked_with, write_cut};
use crate::support::{KEY_REQUEST, masked, read_frame};

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
    HubMessage, Readiness, SendStatus, Ws,
};
use wavesock::{CloseCode, Config, Error, Message, PreparedMessage};

// ---------------------------------------------------------------------------
// A handler taking text commands; anything else is echoed.
//   `close:X`  sends X, then closes (1000)
//   `self:X`   sends X to itself through the hub handle, then `direct`
//   `big:N:I`  sends N bytes of binary, starting with I as 8 bytes
//   `sub:T`    subscribes to T, replies `subscribed`

#[derive(Default)]
struct Shared {
    opened: Vec<ConnId>,
    ended: Vec<Closed>,
    drains: usize,
    /// `drain` sends `drained` to the connection.
    drain_reply: bool,
    statuses: Vec<SendStatus>,
}

#[derive(Clone)]
struct Cmd(Arc<Mutex<Shared>>);

impl Handler for Cmd {
    type Data = ();

    fn upgrade(&mut self, _: &Request<()>, _: &mut Response<()>) -> Result<(), HttpResponse> {
        Ok(())
    }

    fn open(&mut self, ws: &mut Ws<'_, ()>) {
        self.0.lock().unwrap().opened.push(ws.id());
    }

    fn message(&mut self, ws: &mut Ws<'_, ()>, msg: HubMessage<'_>) {
        if let HubMessage::Text(t) = msg {
            if let Some(x) = t.strip_prefix("close:") {
                let _ = ws.send_text(x);
                ws.close(CloseCode::from(1000), "bye").unwrap();
                return;
            }
            if let Some(x) = t.strip_prefix("self:") {
                ws.handle()
                    .try_send(ws.id(), Message::text(x.to_owned()))
                    .unwrap();
                let _ = ws.send_text("direct");
                return;
            }
            if let Some(rest) = t.strip_prefix("big:") {
                let (n, i) = rest.split_once(':').unwrap();
                let n: usize = n.parse().unwrap();
                let i: u64 = i.parse().unwrap();
                let mut payload = vec![0xAB; n.max(8)];
                payload[..8].copy_from_slice(&i.to_be_bytes());
                let s = ws.send_binary(&payload).unwrap();
                self.0.lock().unwrap().statuses.push(s);
                return;
            }
            if let Some(topic) = t.strip_prefix("sub:") {
                ws.subscribe(topic);
                let _ = ws.send_text("subscribed");
                return;
            }
        }
        let s = ws.send_borrowed(msg).unwrap();
        self.0.lock().unwrap().statuses.push(s);
    }

    fn drain(&mut self, ws: &mut Ws<'_, ()>) {
        let reply = {
            let mut s = self.0.lock().unwrap();
            s.drains += 1;
            s.drain_reply
        };
        if reply {
            let _ = ws.send_text("drained");
        }
    }

    fn close(&mut self, closed: Closed, _: ()) {
        self.0.lock().unwrap().ended.push(closed);
    }
}

struct Running {
    handle: HubHandle,
    shared: Arc<Mutex<Shared>>,
    addr: SocketAddr,
    task: JoinHandle<wavesock::Result<()>>,
}

impl Running {
    async fn start(config: HubConfig) -> Running {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared: Arc<Mutex<Shared>> = Arc::default();
        let hub = Hub::new(Cmd(shared.clone()), config).unwrap();
        let handle = hub.handle();
        let task = tokio::spawn(hub.serve(listener));
        Running {
            handle,
            shared,
            addr,
            task,
        }
    }

    fn s(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap()
    }

    async fn stop(self) {
        self.handle.shutdown().await.unwrap();
        tokio::time::timeout(Duration::from_secs(20), self.task)
            .await
            .expect("the hub stops")
            .expect("no panic")
            .expect("serve");
        let s = self.shared.lock().unwrap();
        for id in &s.opened {
            assert_eq!(
                s.ended.iter().filter(|c| c.id == *id).count(),
                1,
                "{id}: close callbacks"
            );
        }
        assert_eq!(s.opened.len(), s.ended.len());
    }
}

fn cfg(readiness: Readiness) -> HubConfig {
    // A registry of its own: the default is the process's, shared by the
    // tests running alongside.
    HubConfig::default()
        .readiness(readiness)
        .engines(Some(1))
        .topics(wavesock::topics::Topics::new())
}

async fn upgrade(addr: SocketAddr, rcvbuf: Option<u32>) -> (TcpStream, BytesMut) {
    let sock = TcpSocket::new_v4().unwrap();
    if let Some(n) = rcvbuf {
        sock.set_recv_buffer_size(n).unwrap();
    }
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

async fn next(tcp: &mut TcpStream, buf: &mut BytesMut) -> Option<(u8, Vec<u8>)> {
    tokio::time::timeout(Duration::from_secs(10), read_frame(tcp, buf))
        .await
        .expect("a frame within 10 s (bytes left unwritten?)")
}

fn txt(s: &str) -> Vec<u8> {
    masked(0x81, s.as_bytes())
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

// ---------------------------------------------------------------------------
// 1. A pipelined burst of small frames with pings among them, in one write:
// every echo and every pong, in the order sent.

async fn pipelined_burst_with_pings_in_order(r: Readiness) {
    let hub = Running::start(cfg(r)).await;
    let (mut tcp, mut buf) = upgrade(hub.addr, None).await;
    let mut wire = Vec::new();
    let mut want = Vec::new();
    for i in 0..600 {
        if i % 7 == 3 {
            let p = format!("p{i}");
            wire.extend(masked(0x89, p.as_bytes()));
            want.push((0x8A, p.into_bytes()));
        } else {
            let m = format!("m{i}");
            wire.extend(txt(&m));
            want.push((0x81, m.into_bytes()));
        }
    }
    tcp.write_all(&wire).await.unwrap();
    for (k, w) in want.iter().enumerate() {
        let got = next(&mut tcp, &mut buf).await.expect("not EOF");
        assert_eq!(&got, w, "frame {k}");
    }
    drop(tcp);
    hub.stop().await;
}
both_modes!(pipelined_burst_with_pings_in_order);

// ---------------------------------------------------------------------------
// 2. A reply, then a close asked by the handler: in the same read as an
// echo before it, and in a read of its own after a read whose replies were
// all written (the read leaves the connection off the turn's list).

async fn reply_then_close(r: Readiness, same_read: bool) {
    let hub = Running::start(cfg(r)).await;
    let (mut tcp, mut buf) = upgrade(hub.addr, None).await;
    if same_read {
        let mut w = txt("a");
        w.extend(txt("close:b"));
        w.extend(txt("c"));
        tcp.write_all(&w).await.unwrap();
        assert_eq!(
            next(&mut tcp, &mut buf).await.unwrap(),
            (0x81, b"a".to_vec())
        );
    } else {
        tcp.write_all(&txt("a")).await.unwrap();
        assert_eq!(
            next(&mut tcp, &mut buf).await.unwrap(),
            (0x81, b"a".to_vec())
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        tcp.write_all(&txt("close:b")).await.unwrap();
    }
    assert_eq!(
        next(&mut tcp, &mut buf).await.unwrap(),
        (0x81, b"b".to_vec())
    );
    let (b0, p) = next(&mut tcp, &mut buf).await.unwrap();
    assert_eq!(b0, 0x88, "a close frame");
    assert_eq!(&p[..2], &1000u16.to_be_bytes());
    // Our answer; the hub ends its side.
    tcp.write_all(&masked(0x88, &p[..2])).await.unwrap();
    let end = next(&mut tcp, &mut buf).await;
    assert_eq!(end, None, "EOF after the closing handshake");
    wait_for(5, || hub.s().ended.len() == 1, || "ended".into()).await;
    {
        let s = hub.s();
        assert!(s.ended[0].error.is_none(), "{:?}", s.ended[0].error);
    }
    hub.stop().await;
}

async fn reply_then_close_same_read(r: Readiness) {
    reply_then_close(r, true).await
}
async fn reply_then_close_after_a_written_read(r: Readiness) {
    reply_then_close(r, false).await
}
both_modes!(reply_then_close_same_read);
both_modes!(reply_then_close_after_a_written_read);

// ---------------------------------------------------------------------------
// 3. Replies that do not fit the socket: a peer with a small receive buffer
// that does not read for a while. Everything arrives in order once it
// does (no limit hit), and the hub goes on afterwards.

async fn slow_reader_gets_all_replies_in_order(r: Readiness) {
    let hub = Running::start(cfg(r).config(Config::default().max_backpressure(64 << 20))).await;
    let (mut tcp, mut buf) = upgrade(hub.addr, Some(4096)).await;
    let n = 300u64;
    let mut w = Vec::new();
    for i in 0..n {
        w.extend(txt(&format!("big:3000:{i}")));
    }
    tcp.write_all(&w).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    for i in 0..n {
        let (b0, p) = next(&mut tcp, &mut buf).await.expect("not EOF");
        assert_eq!(b0, 0x82);
        assert_eq!(p.len(), 3000);
        assert_eq!(
            u64::from_be_bytes(p[..8].try_into().unwrap()),
            i,
            "in order"
        );
    }
    // Nothing was left behind: a new message still gets its answer.
    tcp.write_all(&txt("last")).await.unwrap();
    assert_eq!(
        next(&mut tcp, &mut buf).await.unwrap(),
        (0x81, b"last".to_vec())
    );
    drop(tcp);
    hub.stop().await;
}
both_modes!(slow_reader_gets_all_replies_in_order);

/// Under `Drop` with a small limit: replies past it are dropped, the drain
/// callback fires once the peer catches up, what arrives is in order, and
/// a later message is answered.
async fn slow_reader_drop_policy_drains(r: Readiness) {
    let hub = Running::start(
        cfg(r)
            .config(Config::default().max_backpressure(32 << 10))
            .backpressure_policy(BackpressurePolicy::Drop),
    )
    .await;
    let (mut tcp, mut buf) = upgrade(hub.addr, Some(4096)).await;
    let n = 300u64;
    let mut w = Vec::new();
    for i in 0..n {
        w.extend(txt(&format!("big:30000:{i}")));
    }
    tcp.write_all(&w).await.unwrap();
    wait_for(
        5,
        || hub.s().statuses.len() == n as usize,
        || format!("{} of {n} handled", hub.s().statuses.len()),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let sent = hub
        .s()
        .statuses
        .iter()
        .filter(|s| matches!(s, SendStatus::Sent | SendStatus::Backpressure))
        .count();
    assert!(sent < n as usize, "the limit was met");
    let mut last = None;
    for _ in 0..sent {
        let (b0, p) = next(&mut tcp, &mut buf).await.expect("not EOF");
        assert_eq!(b0, 0x82);
        let i = u64::from_be_bytes(p[..8].try_into().unwrap());
        assert!(last.is_none_or(|l| i > l), "in order: {i} after {last:?}");
        last = Some(i);
    }
    wait_for(5, || hub.s().drains >= 1, || "drain fires".into()).await;
    tcp.write_all(&txt("last")).await.unwrap();
    assert_eq!(
        next(&mut tcp, &mut buf).await.unwrap(),
        (0x81, b"last".to_vec())
    );
    drop(tcp);
    hub.stop().await;
}
both_modes!(slow_reader_drop_policy_drains);

// ---------------------------------------------------------------------------
// 4. More than READS_PER_TURN (4) reads' worth in one write, with the
// smallest read buffer: the read loop requeues; every echo still arrives
// with no further event from the peer. Also with the peer half-closing
// right after its burst.

async fn burst_past_reads_per_turn(r: Readiness, half_close: bool) {
    let hub = Running::start(cfg(r).read_buffer_size(4096)).await;
    let (mut tcp, mut buf) = upgrade(hub.addr, None).await;
    let n = 4000;
    let mut w = Vec::new();
    for i in 0..n {
        w.extend(txt(&format!("x{i:06}")));
    }
    // ~60 KB: fifteen reads of 4 KB.
    tcp.write_all(&w).await.unwrap();
    if half_close {
        tcp.shutdown().await.unwrap();
    }
    for i in 0..n {
        let got = next(&mut tcp, &mut buf).await.expect("not EOF");
        assert_eq!(got, (0x81, format!("x{i:06}").into_bytes()), "echo {i}");
    }
    if half_close {
        // The transport ended without a close frame: the hub ends.
        let rest = next(&mut tcp, &mut buf).await;
        assert!(matches!(rest, None | Some((0x88, _))), "{rest:?}");
        wait_for(5, || hub.s().ended.len() == 1, || "ended".into()).await;
    }
    drop(tcp);
    hub.stop().await;
}

async fn burst_past_reads_per_turn_open(r: Readiness) {
    burst_past_reads_per_turn(r, false).await
}
async fn burst_past_reads_per_turn_half_closed(r: Readiness) {
    burst_past_reads_per_turn(r, true).await
}
both_modes!(burst_past_reads_per_turn_open);
both_modes!(burst_past_reads_per_turn_half_closed);

/// The same burst past READS_PER_TURN with replies larger than what the
/// socket takes at once (small receive buffer, peer reads late): the read's
/// flush is write-blocked mid-burst.
async fn burst_past_reads_per_turn_write_blocked(r: Readiness) {
    let hub = Running::start(
        cfg(r)
            .read_buffer_size(4096)
            .config(Config::default().max_backpressure(64 << 20)),
    )
    .await;
    let (tcp, mut buf) = upgrade(hub.addr, Some(4096)).await;
    let n = 1500u64;
    let mut w = Vec::new();
    for i in 0..n {
        w.extend(txt(&format!("big:700:{i}")));
    }
    let (mut rd, mut wr) = tcp.into_split();
    let writer = tokio::spawn(async move {
        wr.write_all(&w).await.unwrap();
        wr
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    for i in 0..n {
        let (b0, p) = tokio::time::timeout(Duration::from_secs(10), read_frame(&mut rd, &mut buf))
            .await
            .unwrap_or_else(|_| panic!("reply {i} within 10 s"))
            .expect("not EOF");
        assert_eq!(b0, 0x82);
        assert_eq!(u64::from_be_bytes(p[..8].try_into().unwrap()), i);
    }
    let wr = writer.await.unwrap();
    drop((rd, wr));
    hub.stop().await;
}
both_modes!(burst_past_reads_per_turn_write_blocked);

// ---------------------------------------------------------------------------
// 5. A handler that sends to its own connection through the hub handle
// (its ConnId) during the read, and directly.

async fn sends_to_itself_through_the_handle(r: Readiness) {
    let hub = Running::start(cfg(r)).await;
    let (mut tcp, mut buf) = upgrade(hub.addr, None).await;
    let n = 100;
    let mut w = Vec::new();
    for i in 0..n {
        w.extend(txt(&format!("self:h{i}")));
    }
    tcp.write_all(&w).await.unwrap();
    let (mut directs, mut handles) = (0, 0);
    while directs + handles < 2 * n {
        let (b0, p) = next(&mut tcp, &mut buf).await.expect("not EOF");
        assert_eq!(b0, 0x81);
        if p == b"direct" {
            directs += 1;
        } else {
            assert_eq!(p, format!("h{handles}").into_bytes());
            handles += 1;
        }
    }
    // One at a time, waiting for both each time.
    for i in 0..20 {
        tcp.write_all(&txt(&format!("self:s{i}"))).await.unwrap();
        let mut got = vec![
            next(&mut tcp, &mut buf).await.unwrap().1,
            next(&mut tcp, &mut buf).await.unwrap().1,
        ];
        got.sort();
        assert_eq!(got, vec![b"direct".to_vec(), format!("s{i}").into_bytes()]);
    }
    drop(tcp);
    hub.stop().await;
}
both_modes!(sends_to_itself_through_the_handle);

// ---------------------------------------------------------------------------
// 6. A reading connection that is also a subscriber: publishes to it in
// the same turns as its own echoes.

async fn subscriber_reading_while_published_to(r: Readiness, policy: BackpressurePolicy) {
    let hub = Running::start(
        cfg(r)
            .backpressure_policy(policy)
            .config(Config::default().max_backpressure(16 << 20)),
    )
    .await;
    let (mut tcp, mut buf) = upgrade(hub.addr, None).await;
    tcp.write_all(&txt("sub:t")).await.unwrap();
    assert_eq!(next(&mut tcp, &mut buf).await.unwrap().1, b"subscribed");
    let n = 400;
    let handle = hub.handle.clone();
    let publisher = tokio::spawn(async move {
        for i in 0..n {
            let msg = PreparedMessage::new(&Message::text(format!("P{i}"))).unwrap();
            handle.publish("t", &msg);
            if i % 8 == 0 {
                tokio::task::yield_now().await;
            }
        }
    });
    let (mut rd, mut wr) = tcp.into_split();
    let writer = tokio::spawn(async move {
        for i in 0..n {
            wr.write_all(&txt(&format!("E{i}"))).await.unwrap();
            if i % 8 == 0 {
                tokio::task::yield_now().await;
            }
        }
        wr
    });
    let (mut pubs, mut echoes) = (0, 0);
    let mut seen: Vec<String> = Vec::new();
    while pubs + echoes < 2 * n {
        let (b0, p) = tokio::time::timeout(Duration::from_secs(10), read_frame(&mut rd, &mut buf))
            .await
            .unwrap_or_else(|_| panic!("{pubs} publishes, {echoes} echoes; then nothing"))
            .expect("not EOF");
        assert_eq!(b0, 0x81);
        let s = String::from_utf8(p).unwrap();
        seen.push(s.clone());
        if let Some(i) = s.strip_prefix('P') {
            assert_eq!(i.parse::<usize>().unwrap(), pubs, "{seen:?}");
            pubs += 1;
        } else {
            assert_eq!(s, format!("E{echoes}"));
            echoes += 1;
        }
    }
    publisher.await.unwrap();
    let wr = writer.await.unwrap();
    drop((rd, wr));
    hub.stop().await;
}

async fn subscriber_reading_while_published_to_close(r: Readiness) {
    subscriber_reading_while_published_to(r, BackpressurePolicy::Close).await
}
async fn subscriber_reading_while_published_to_drop(r: Readiness) {
    subscriber_reading_while_published_to(r, BackpressurePolicy::Drop).await
}
both_modes!(subscriber_reading_while_published_to_close);
both_modes!(subscriber_reading_while_published_to_drop);

/// Under `Close` with a small limit: a subscriber whose own replies and the
/// publishes to it pile up past the limit (it does not read) gets the 1013
/// close once it reads, and the handler hears `Error::Backpressure`.
async fn subscriber_backlogged_is_closed_1013(r: Readiness) {
    let hub = Running::start(
        cfg(r)
            .backpressure_policy(BackpressurePolicy::Close)
            .config(Config::default().max_backpressure(64 << 10)),
    )
    .await;
    let (mut tcp, mut buf) = upgrade(hub.addr, Some(4096)).await;
    tcp.write_all(&txt("sub:t")).await.unwrap();
    assert_eq!(next(&mut tcp, &mut buf).await.unwrap().1, b"subscribed");
    let big = PreparedMessage::new(&Message::binary(vec![7u8; 30000])).unwrap();
    let mut w = Vec::new();
    for i in 0..200u64 {
        w.extend(txt(&format!("big:30000:{i}")));
    }
    let (mut rd, mut wr) = tcp.into_split();
    let writer = tokio::spawn(async move {
        let _ = wr.write_all(&w).await;
        wr
    });
    for _ in 0..200 {
        hub.handle.publish("t", &big);
        tokio::task::yield_now().await;
    }
    wait_for(
        10,
        || hub.s().ended.len() == 1 || !hub.s().statuses.is_empty(),
        || "x".into(),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Read to the close frame.
    let mut frames = 0;
    let code = loop {
        let f = tokio::time::timeout(Duration::from_secs(10), read_frame(&mut rd, &mut buf))
            .await
            .unwrap_or_else(|_| panic!("frames in time: {frames} read, then none"))
            .expect("a close frame before EOF");
        frames += 1;
        if f.0 == 0x88 {
            break u16::from_be_bytes([f.1[0], f.1[1]]);
        }
    };
    assert_eq!(code, 1013);
    let wr = writer.await.unwrap();
    drop((rd, wr));
    wait_for(10, || hub.s().ended.len() == 1, || "ended".into()).await;
    {
        let s = hub.s();
        assert!(
            matches!(s.ended[0].error, Some(Error::Backpressure { .. })),
            "{:?}",
            s.ended[0].error
        );
    }
    hub.stop().await;
}
both_modes!(subscriber_backlogged_is_closed_1013);

// ---------------------------------------------------------------------------
// 7. Slots reused: connections that come and go while another pipelines;
// each new connection's echo arrives, and a stale id misses.

async fn slot_reuse_under_traffic(r: Readiness) {
    let hub = Running::start(cfg(r)).await;
    let (mut busy, mut bbuf) = upgrade(hub.addr, None).await;
    for round in 0..30 {
        let (mut a, mut abuf) = upgrade(hub.addr, None).await;
        let mut w = txt(&format!("a{round}"));
        w.extend(masked(0x88, &1000u16.to_be_bytes()));
        a.write_all(&w).await.unwrap();
        let mut bw = Vec::new();
        for i in 0..20 {
            bw.extend(txt(&format!("b{round}.{i}")));
        }
        busy.write_all(&bw).await.unwrap();
        assert_eq!(
            next(&mut a, &mut abuf).await.unwrap().1,
            format!("a{round}").into_bytes()
        );
        let (b0, _) = next(&mut a, &mut abuf).await.unwrap();
        assert_eq!(b0, 0x88);
        assert_eq!(next(&mut a, &mut abuf).await, None);
        for i in 0..20 {
            assert_eq!(
                next(&mut busy, &mut bbuf).await.unwrap().1,
                format!("b{round}.{i}").into_bytes()
            );
        }
    }
    wait_for(5, || hub.s().ended.len() == 30, || "30 ended".into()).await;
    // A send to a connection gone (its slot taken since) reaches nobody.
    let stale = hub.s().ended[0].id;
    let _ = hub.handle.try_send(stale, Message::text("stale"));
    busy.write_all(&txt("end")).await.unwrap();
    let got = next(&mut busy, &mut bbuf).await.unwrap().1;
    assert_eq!(got, b"end", "nothing stale reached the busy connection");
    drop(busy);
    hub.stop().await;
}
both_modes!(slot_reuse_under_traffic);

// ---------------------------------------------------------------------------
// 8. Odd small frames on the wire (the header fast path): each alone on a
// fresh connection; the close code (or echo) the hub answers with.

async fn answer_to(addr: SocketAddr, wire: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let (mut tcp, mut buf) = upgrade(addr, None).await;
    tcp.write_all(wire).await.unwrap();
    let mut got = Vec::new();
    while let Some(f) = next(&mut tcp, &mut buf).await {
        let close = f.0 == 0x88;
        got.push(f);
        if close {
            break;
        }
    }
    got
}

fn close_code(f: &(u8, Vec<u8>)) -> u16 {
    assert_eq!(f.0, 0x88, "{f:?}");
    u16::from_be_bytes([f.1[0], f.1[1]])
}

async fn odd_small_frames(r: Readiness) {
    let hub = Running::start(cfg(r)).await;
    let a = hub.addr;
    // RSV1..3 on a small text frame.
    for rsv in [0x40u8, 0x20, 0x10] {
        let got = answer_to(a, &masked(0x81 | rsv, b"hi")).await;
        assert_eq!(close_code(&got[0]), 1002, "rsv {rsv:#x}");
    }
    // Reserved opcodes, data and control.
    for op in [0x3u8, 0x7, 0xB, 0xF] {
        let got = answer_to(a, &masked(0x80 | op, b"hi")).await;
        assert_eq!(close_code(&got[0]), 1002, "opcode {op:#x}");
    }
    // An unmasked small frame from a client.
    let got = answer_to(a, &[0x81, 2, b'h', b'i']).await;
    assert_eq!(close_code(&got[0]), 1002, "unmasked");
    // Invalid UTF-8 in a small text frame.
    let got = answer_to(a, &masked(0x81, &[0xff, 0xfe])).await;
    assert_eq!(close_code(&got[0]), 1007, "utf-8");
    // A small payload in the 16-bit and 64-bit length forms, then a normal one.
    for form in [126u8, 127] {
        let key = [1u8, 2, 3, 4];
        let mut w = vec![0x81, 0x80 | form];
        if form == 126 {
            w.extend(5u16.to_be_bytes());
        } else {
            w.extend(5u64.to_be_bytes());
        }
        w.extend(key);
        w.extend(b"hello".iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
        w.extend(txt("after"));
        w.extend(masked(0x88, &1000u16.to_be_bytes()));
        let got = answer_to(a, &w).await;
        // Whatever the full parse makes of it: echoed, or a 1002.
        match got[0].0 {
            0x81 => {
                assert_eq!(got[0].1, b"hello", "form {form}");
                assert_eq!(got[1], (0x81, b"after".to_vec()));
                assert_eq!(close_code(&got[2]), 1000);
            }
            _ => assert_eq!(close_code(&got[0]), 1002, "form {form}: {got:?}"),
        }
    }
    // Fragments of a small message (FIN clear), with a ping between them.
    let mut w = masked(0x01, b"ab");
    w.extend(masked(0x89, b"pp"));
    w.extend(masked(0x80, b"cd"));
    w.extend(masked(0x82, b""));
    w.extend(masked(0x81, &[b'z'; 125]));
    w.extend(masked(0x88, &1000u16.to_be_bytes()));
    let got = answer_to(a, &w).await;
    assert_eq!(got[0], (0x8A, b"pp".to_vec()));
    assert_eq!(got[1], (0x81, b"abcd".to_vec()));
    assert_eq!(got[2], (0x82, Vec::new()));
    assert_eq!(got[3], (0x81, vec![b'z'; 125]));
    assert_eq!(close_code(&got[4]), 1000);
    // A continuation with nothing to continue; a text inside a fragmented
    // message.
    let got = answer_to(a, &masked(0x80, b"x")).await;
    assert_eq!(close_code(&got[0]), 1002, "orphan continuation");
    let mut w = masked(0x01, b"ab");
    w.extend(masked(0x81, b"cd"));
    let got = answer_to(a, &w).await;
    assert_eq!(
        close_code(&got[0]),
        1002,
        "text inside a fragmented message"
    );
    hub.stop().await;
}
both_modes!(odd_small_frames);

// ---------------------------------------------------------------------------
// 9. Masks: every payload length 0..=300 with random keys, the wire cut
// anywhere (frames across reads and turns): every echo exact.

async fn masked_payloads_cut_anywhere(r: Readiness) {
    let hub = Running::start(cfg(r)).await;
    let (tcp, mut buf) = upgrade(hub.addr, None).await;
    let mut rng = Rng(0x98494db);
    let mut wire = Vec::new();
    let mut want = Vec::new();
    for len in 0..=300usize {
        let payload: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        wire.extend(masked_with(0x82, &payload, &mut rng));
        want.push(payload);
    }
    let (mut rd, mut wr) = tcp.into_split();
    let writer = tokio::spawn(async move {
        let mut rng = Rng(7);
        write_cut(&mut wr, &wire, &mut rng).await;
        wr
    });
    for (len, w) in want.iter().enumerate() {
        let (b0, p) = tokio::time::timeout(Duration::from_secs(10), read_frame(&mut rd, &mut buf))
            .await
            .expect("in time")
            .expect("not EOF");
        assert_eq!(b0, 0x82);
        assert!(p == *w, "payload of {len} bytes");
    }
    let wr = writer.await.unwrap();
    drop((rd, wr));
    hub.stop().await;
}
both_modes!(masked_payloads_cut_anywhere);

// ---------------------------------------------------------------------------
// 10. A drain handler that sends: the connection backed up under `Drop`;
// once the peer reads, the drain callback's send arrives with nothing
// more from the peer (the drain runs in the flush of a read, or of the
// write-blocked connection before it).

async fn drain_handler_send_arrives(r: Readiness) {
    let hub = Running::start(
        cfg(r)
            .config(Config::default().max_backpressure(32 << 10))
            .backpressure_policy(BackpressurePolicy::Drop),
    )
    .await;
    hub.s().drain_reply = true;
    let (mut tcp, mut buf) = upgrade(hub.addr, Some(4096)).await;
    let n = 300u64;
    let mut w = Vec::new();
    for i in 0..n {
        w.extend(txt(&format!("big:30000:{i}")));
    }
    tcp.write_all(&w).await.unwrap();
    wait_for(
        5,
        || hub.s().statuses.len() == n as usize,
        || format!("{} of {n} handled", hub.s().statuses.len()),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let sent = hub
        .s()
        .statuses
        .iter()
        .filter(|s| matches!(s, SendStatus::Sent | SendStatus::Backpressure))
        .count();
    assert!(sent < n as usize, "the limit was met");
    for k in 0..sent {
        let (b0, _) = next(&mut tcp, &mut buf).await.expect("not EOF");
        assert_eq!(b0, 0x82, "frame {k}");
    }
    // No more input: the drain's reply must come on its own.
    assert_eq!(
        next(&mut tcp, &mut buf).await.unwrap(),
        (0x81, b"drained".to_vec())
    );
    // And a message in the same read as more replies.
    let mut w = txt("one");
    w.extend(txt("two"));
    tcp.write_all(&w).await.unwrap();
    assert_eq!(next(&mut tcp, &mut buf).await.unwrap().1, b"one");
    assert_eq!(next(&mut tcp, &mut buf).await.unwrap().1, b"two");
    assert_eq!(hub.s().drains, 1);
    drop(tcp);
    hub.stop().await;
}
both_modes!(drain_handler_send_arrives);

/// Replies backed up under `Drop`, and the peer then sends more while it
/// reads: the drain fires inside the read (its flush), and its send
/// arrives.
async fn drain_inside_a_read(r: Readiness) {
    let hub = Running::start(
        cfg(r)
            .config(Config::default().max_backpressure(32 << 10))
            .backpressure_policy(BackpressurePolicy::Drop),
    )
    .await;
    hub.s().drain_reply = true;
    let (tcp, mut buf) = upgrade(hub.addr, Some(4096)).await;
    let (mut rd, mut wr) = tcp.into_split();
    // 9 MB of replies: more than the kernel's send buffer takes at most
    // (4 MiB by default), so the hub's queue backs up past its limit.
    let n = 300u64;
    let mut w = Vec::new();
    for i in 0..n {
        w.extend(txt(&format!("big:30000:{i}")));
    }
    wr.write_all(&w).await.unwrap();
    wait_for(
        5,
        || hub.s().statuses.len() == n as usize,
        || "handled".into(),
    )
    .await;
    let dropped = hub
        .s()
        .statuses
        .iter()
        .filter(|s| **s == SendStatus::Dropped)
        .count();
    assert!(dropped > 0, "the limit was met");
    // Keep sending small messages while reading everything.
    let writer = tokio::spawn(async move {
        for i in 0..200 {
            wr.write_all(&txt(&format!("s{i}"))).await.unwrap();
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        wr
    });
    let mut drained = 0;
    let mut small = 0;
    while small < 200 || drained == 0 {
        let (b0, p) = tokio::time::timeout(Duration::from_secs(10), read_frame(&mut rd, &mut buf))
            .await
            .unwrap_or_else(|_| panic!("{small} small echoes, {drained} drained; then nothing"))
            .expect("not EOF");
        if b0 == 0x81 {
            if p == b"drained" {
                drained += 1;
            } else {
                small += 1;
            }
        }
    }
    let wr = writer.await.unwrap();
    drop((rd, wr));
    hub.stop().await;
}
both_modes!(drain_inside_a_read);
