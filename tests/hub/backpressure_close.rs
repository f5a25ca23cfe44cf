//! The backpressure close (`BackpressurePolicy::Close`) on real sockets: a
//! slow peer that reads later gets whole frames, the one being written
//! when the limit was met finished, then the 1013 close and the end,
//! whatever else happened meanwhile (more sends in the same call, the
//! peer writing, an application close, a shutdown, compression, other
//! transports). Found by breaking the change: a test whose docs say what
//! happened before failed before its fix.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::mpsc;
use wavesock::http::{Request, Response};
use wavesock::hub::HttpResponse;
use wavesock::hub::{
    BackpressurePolicy, Closed, ConnId, Handler, Hub, HubConfig, HubHandle, HubMessage, Readiness,
    SendStatus, Ws,
};
use wavesock::{CloseCode, CloseFrame, Config, Error, OpCode};

use crate::support::raw::{self, within};

#[derive(Debug)]
enum Ev {
    Open,
    Subscribed,
    Close(ConnId, Option<CloseFrame>, Option<Error>),
}

/// Obeys text commands: `big N` (one binary message of N bytes of 7s),
/// `two` (two small texts), `close` (closes with 4000), `bigclose N` (a big
/// message then close).
#[derive(Clone)]
struct H {
    events: mpsc::UnboundedSender<Ev>,
    statuses: Arc<Mutex<Vec<(String, SendStatus)>>>,
}

impl Handler for H {
    type Data = ();

    fn upgrade(&mut self, _: &Request<()>, _: &mut Response<()>) -> Result<(), HttpResponse> {
        Ok(())
    }

    fn open(&mut self, _: &mut Ws<'_, ()>) {
        let _ = self.events.send(Ev::Open);
    }

    fn message(&mut self, ws: &mut Ws<'_, ()>, msg: HubMessage<'_>) {
        let HubMessage::Text(t) = msg else { return };
        let mut st = self.statuses.lock().unwrap();
        if let Some(n) = t.strip_prefix("big ") {
            let big = vec![7u8; n.parse().unwrap()];
            st.push((t.to_owned(), ws.send_binary(&big).unwrap()));
        } else if let Some(n) = t.strip_prefix("rand ") {
            st.push((
                t.to_owned(),
                ws.send_binary(&noise(n.parse().unwrap())).unwrap(),
            ));
        } else if t == "sub" {
            ws.subscribe("t");
            let _ = self.events.send(Ev::Subscribed);
        } else if t == "two" {
            st.push(("two:1".into(), ws.send_text("one").unwrap()));
            st.push(("two:2".into(), ws.send_text("two").unwrap()));
        } else if t == "one" {
            st.push(("one".into(), ws.send_text("one").unwrap()));
        } else if t == "closepub" {
            ws.close(CloseCode::from(4000), "asked to").unwrap();
            let m = wavesock::PreparedMessage::new(&wavesock::Message::text("news")).unwrap();
            ws.handle().publish("t", &m);
        } else if t == "close" {
            ws.close(CloseCode::from(4000), "asked to").unwrap();
        }
    }

    fn close(&mut self, closed: Closed, _: ()) {
        let _ = self
            .events
            .send(Ev::Close(closed.id, closed.frame, closed.error));
    }
}

struct Server {
    addr: SocketAddr,
    handle: HubHandle,
    events: mpsc::UnboundedReceiver<Ev>,
    statuses: Arc<Mutex<Vec<(String, SendStatus)>>>,
}

async fn start(config: HubConfig) -> Server {
    let (tx, events) = mpsc::unbounded_channel();
    let statuses = Arc::new(Mutex::new(Vec::new()));
    let h = H {
        events: tx,
        statuses: statuses.clone(),
    };
    let hub = Hub::new(h, config).unwrap();
    let handle = hub.handle();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(hub.serve(listener));
    Server {
        addr,
        handle,
        events,
        statuses,
    }
}

impl Server {
    /// Waits until the handler has made `n` sends.
    async fn sent(&self, n: usize) {
        within(10, async {
            while self.statuses.lock().unwrap().len() < n {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
    }

    async fn close_event(&mut self) -> (ConnId, Option<CloseFrame>, Option<Error>) {
        loop {
            match within(30, self.events.recv()).await.unwrap() {
                Ev::Close(a, b, c) => return (a, b, c),
                _ => continue,
            }
        }
    }
}

fn config(readiness: Readiness) -> HubConfig {
    crate::support::hub::defaults()
        .config(
            Config::default()
                .close_timeout(Duration::from_secs(120))
                .max_message_size(64 << 20)
                .max_frame_size(64 << 20)
                .max_backpressure(64 << 10),
        )
        .readiness(readiness)
        .backpressure_policy(BackpressurePolicy::Close)
}

/// A server as [`config`] says, and a slow client that asked for an 8 MiB
/// message and then sent `then`, both in one write: the reply is written
/// in part (a cork's worth) when `then` is handled.
async fn backlogged(readiness: Readiness, then: &str) -> (Server, TcpStream) {
    let server = start(config(readiness)).await;
    let mut slow = slow_client(server.addr, 16 << 10).await;
    let mut both = text(&format!("big {}", 8 << 20));
    both.extend(text(then));
    slow.write_all(&both).await.unwrap();
    (server, slow)
}

/// A raw client with a small receive buffer, upgraded.
async fn slow_client(addr: SocketAddr, rcvbuf: u32) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(rcvbuf).unwrap();
    let mut tcp = socket.connect(addr).await.unwrap();
    tcp.write_all(raw::REQUEST).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        head.push(tcp.read_u8().await.unwrap());
    }
    assert!(head.starts_with(b"HTTP/1.1 101"), "{head:?}");
    tcp
}

/// Incompressible bytes.
fn noise(n: usize) -> Vec<u8> {
    let mut x = 0x9e3779b97f4a7c15u64 ^ n as u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn text(s: &str) -> Vec<u8> {
    raw::frame(true, OpCode::Text, s.as_bytes().to_vec())
}

/// Reads frames to the end: (opcode, payload length, a close frame's
/// payload) of each whole frame, and how the stream ended (with the bytes
/// of a frame cut short, or an error).
async fn read_all(tcp: &mut TcpStream) -> (Frames, String) {
    let mut wire = Vec::new();
    let end = match within(60, tcp.read_to_end(&mut wire)).await {
        Ok(_) => "EOF".to_string(),
        Err(e) => format!("error {e}"),
    };
    let (frames, cut) = split_frames(&wire);
    match cut {
        Some(cut) => (frames, format!("{end}; {cut}")),
        None => (frames, end),
    }
}

/// The whole frames on `wire`, and what is left of one cut short.
/// Whole frames read: opcode, payload length, a close frame's payload.
type Frames = Vec<(u8, usize, Vec<u8>)>;

fn split_frames(wire: &[u8]) -> (Frames, Option<String>) {
    let mut frames = Vec::new();
    let mut at = 0;
    loop {
        let rest = &wire[at..];
        if rest.is_empty() {
            return (frames, None);
        }
        if rest.len() < 2 {
            return (frames, Some(format!("{} bytes of a header", rest.len())));
        }
        let (len, head) = match rest[1] & 0x7f {
            126 if rest.len() >= 4 => (u16::from_be_bytes([rest[2], rest[3]]) as usize, 4),
            127 if rest.len() >= 10 => (
                u64::from_be_bytes(rest[2..10].try_into().unwrap()) as usize,
                10,
            ),
            126 | 127 => return (frames, Some("a header cut short".into())),
            n => (n as usize, 2),
        };
        if rest.len() < head + len {
            let cut = format!(
                "frame (opcode {}) of {len} bytes cut at {}",
                rest[0] & 0xf,
                rest.len() - head
            );
            return (frames, Some(cut));
        }
        let p = &rest[head..head + len];
        let keep = if rest[0] & 0xf == 8 {
            p.to_vec()
        } else {
            Vec::new()
        };
        frames.push((rest[0] & 0xf, len, keep));
        at += head + len;
    }
}

fn close_code(frames: &[(u8, usize, Vec<u8>)]) -> Option<u16> {
    frames
        .iter()
        .find(|f| f.0 == 8)
        .map(|f| u16::from_be_bytes([f.2[0], f.2[1]]))
}

/// A frame begun (8 MiB, the peer reads nothing) when the limit is met;
/// the handler sends twice in the call that meets it. The first send fails
/// the connection (1013 after the frame begun); the second is told the
/// connection is closing. (It met the limit again, as the rest of the frame
/// begun still waited, and abandoned the connection: half a frame, the
/// end, no close.)
#[tokio::test]
async fn a_second_send_in_the_call_that_met_the_limit_is_told_closed_owned() {
    second_send(Readiness::Owned).await
}

#[tokio::test]
async fn a_second_send_in_the_call_that_met_the_limit_is_told_closed_tokio() {
    second_send(Readiness::Tokio).await
}

async fn second_send(readiness: Readiness) {
    let (mut server, mut slow) = backlogged(readiness, "two").await;
    server.sent(3).await;
    let statuses: Vec<SendStatus> = server
        .statuses
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.1)
        .collect();
    assert_eq!(
        statuses,
        [
            SendStatus::Backpressure,
            SendStatus::Dropped,
            SendStatus::Closed
        ],
        "{readiness:?}"
    );
    // Then the peer reads.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (frames, end) = read_all(&mut slow).await;
    let got: Vec<(u8, usize)> = frames.iter().map(|f| (f.0, f.1)).collect();
    assert_eq!(
        (got, close_code(&frames), end.as_str()),
        (vec![(2, 8 << 20), (8, 40)], Some(1013), "EOF"),
        "{readiness:?}"
    );
    // The peer hangs up: the server, lingering for that, ends.
    drop(slow);
    let (_, _, error) = server.close_event().await;
    assert!(
        matches!(error, Some(Error::Backpressure { .. })),
        "{error:?}"
    );
}

/// The peer stops reading and then sends something (a message, a ping,
/// its own close) after the 1013 decision, then reads. (The server, no
/// longer reading, closed its socket with the peer's bytes unread: the
/// kernel reset the connection and threw away the rest of the frame begun
/// and the close frame.)
#[tokio::test]
async fn a_peer_that_writes_after_the_limit_still_gets_the_rest_and_the_close_owned() {
    writes_after(Readiness::Owned).await
}

#[tokio::test]
async fn a_peer_that_writes_after_the_limit_still_gets_the_rest_and_the_close_tokio() {
    writes_after(Readiness::Tokio).await
}

async fn writes_after(readiness: Readiness) {
    {
        let (mut server, mut slow) = backlogged(readiness, "one").await;
        // The limit was met (the second message's reply).
        server.sent(2).await;
        // The peer says something (it has not read yet).
        slow.write_all(&text("still there?")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Then it reads everything.
        let (frames, end) = read_all(&mut slow).await;
        // The peer hangs up: the server, lingering for that, ends.
        drop(slow);
        let (_, _, error) = server.close_event().await;
        let got: Vec<(u8, usize)> = frames.iter().map(|f| (f.0, f.1)).collect();
        assert_eq!(
            (got, close_code(&frames), end.as_str()),
            (vec![(2, 8 << 20), (8, 40)], Some(1013), "EOF"),
            "{readiness:?}: error {error:?}"
        );
    }
}

/// The handler closes (4000) in the turn whose end finds the frame begun
/// over the limit: the close asked for goes out behind what was sent
/// before it, as `Ws::close` says. (It met the backpressure policy and
/// became a 1013.)
async fn close_same_turn(readiness: Readiness) {
    let (mut server, mut slow) = backlogged(readiness, "close").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (op, payload) = raw::read_frame(&mut slow).await;
    assert_eq!((op, payload.len()), (2, 8 << 20), "{readiness:?}");
    let (op, payload) = raw::read_frame(&mut slow).await;
    assert_eq!(op, 8, "{readiness:?}");
    assert_eq!(u16::from_be_bytes([payload[0], payload[1]]), 4000);
    // The peer answers; the server ends the connection.
    slow.write_all(&raw::frame(
        true,
        OpCode::Close,
        4000u16.to_be_bytes().to_vec(),
    ))
    .await
    .unwrap();
    let (frames, end) = read_all(&mut slow).await;
    assert_eq!((frames.len(), end.as_str()), (0, "EOF"), "{readiness:?}");
    let (_, frame, error) = server.close_event().await;
    assert!(error.is_none(), "{readiness:?}: {error:?}");
    assert_eq!(frame.map(|f| u16::from(f.code)), Some(4000));
}

#[tokio::test]
async fn an_application_close_as_the_limit_is_met_goes_out_as_asked_owned() {
    close_same_turn(Readiness::Owned).await
}

#[tokio::test]
async fn an_application_close_as_the_limit_is_met_goes_out_as_asked_tokio() {
    close_same_turn(Readiness::Tokio).await
}

/// Shutdown while connections fail for backpressure (close timeout longer
/// than the shutdown's): the hub ends within its shutdown timeout, and each
/// is reported as failed for backpressure. (They were reported as
/// `ShutdownTimeout`.)
async fn shutdown_while_failing(readiness: Readiness) {
    let config = config(readiness).shutdown_timeout(Duration::from_secs(2));
    let mut server = start(config).await;
    let mut peers = Vec::new();
    for _ in 0..20 {
        let mut p = slow_client(server.addr, 4 << 10).await;
        let mut both = text(&format!("big {}", 4 << 20));
        both.extend(text("one"));
        p.write_all(&both).await.unwrap();
        peers.push(p);
    }
    server.sent(40).await;
    within(10, server.handle.shutdown()).await.unwrap();
    let mut errors = Vec::new();
    for _ in 0..20 {
        let (_, _, e) = server.close_event().await;
        errors.push(format!("{e:?}"));
    }
    assert!(
        errors.iter().all(|e| e.contains("Backpressure")),
        "{readiness:?}: {errors:?}"
    );
    drop(peers);
}

#[tokio::test]
async fn a_shutdown_reports_connections_failing_for_backpressure_as_such() {
    shutdown_while_failing(Readiness::Owned).await
}

/// A tokio duplex handed over: the peer reads later, gets the frame begun
/// whole, 1013, EOF.
#[tokio::test]
async fn a_duplex_transport_gets_the_frame_begun_then_1013() {
    let server = start(config(Readiness::Owned)).await;
    let (mut client, theirs) = tokio::io::duplex(16 << 10);
    server.handle.accept(theirs).await.unwrap();
    client.write_all(raw::REQUEST).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        head.push(client.read_u8().await.unwrap());
    }
    let mut both = text(&format!("big {}", 1 << 20));
    both.extend(text("one"));
    client.write_all(&both).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut wire = Vec::new();
    within(20, client.read_to_end(&mut wire)).await.unwrap();
    let mut frames = Vec::new();
    let mut at = 0;
    while at < wire.len() {
        let rest = &wire[at..];
        let (len, h) = match rest[1] & 0x7f {
            126 => (u16::from_be_bytes([rest[2], rest[3]]) as usize, 4),
            127 => (
                u64::from_be_bytes(rest[2..10].try_into().unwrap()) as usize,
                10,
            ),
            n => (n as usize, 2),
        };
        assert!(rest.len() >= h + len, "cut frame after {frames:?}");
        frames.push((rest[0] & 0xf, len));
        at += h + len;
    }
    assert_eq!(frames, [(2, 1 << 20), (8, 40)]);
}

/// permessage-deflate on both ends: a wavesock client whose socket reads
/// little pipelines `rand 8 MiB` (incompressible, so its compressed frame
/// is begun when the limit is met) and `one`, then reads: the message
/// inflates whole, then the 1013 close, no error.
#[cfg(feature = "deflate")]
async fn deflate_slow(readiness: Readiness, first: &str) {
    use futures_util::{SinkExt, StreamExt};
    use wavesock::Message;
    let deflate = || wavesock::DeflateConfig::default();
    let config = crate::support::hub::defaults()
        .config(
            Config::default()
                .close_timeout(Duration::from_secs(120))
                .max_message_size(64 << 20)
                .max_frame_size(64 << 20)
                .max_backpressure(64 << 10)
                .deflate(deflate()),
        )
        .readiness(readiness)
        .backpressure_policy(BackpressurePolicy::Close);
    let mut server = start(config).await;
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(16 << 10).unwrap();
    let tcp = socket.connect(server.addr).await.unwrap();
    let (mut ws, resp) = wavesock::client_async_with_config(
        format!("ws://{}/", server.addr),
        tcp,
        Config::default()
            .max_message_size(64 << 20)
            .max_frame_size(64 << 20)
            .deflate(deflate()),
    )
    .await
    .unwrap();
    assert!(
        resp.headers().contains_key("sec-websocket-extensions"),
        "deflate negotiated"
    );
    for m in first.split(',') {
        ws.feed(Message::text(m.to_string())).await.unwrap();
    }
    ws.feed(Message::text("one")).await.unwrap();
    ws.flush().await.unwrap();
    within(10, async {
        while !server
            .statuses
            .lock()
            .unwrap()
            .iter()
            .any(|s| s.1 == SendStatus::Dropped)
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let statuses = server.statuses.lock().unwrap().clone();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut got = Vec::new();
    let end = loop {
        match within(30, ws.next()).await {
            Some(Ok(Message::Binary(b))) => {
                let n = b.len();
                assert_eq!(
                    &b[..],
                    &noise(n)[..],
                    "{readiness:?}: message {} intact",
                    got.len()
                );
                got.push(n);
            }
            Some(Ok(Message::Close(f))) => {
                break format!("close {:?}", f.map(|f| u16::from(f.code)));
            }
            Some(Ok(other)) => panic!("{other:?}"),
            Some(Err(e)) => break format!("error {e}"),
            None => break "end".into(),
        }
    };
    // The peer hangs up: the server, lingering for that, ends.
    drop(ws);
    let (_, _, error) = server.close_event().await;
    assert_eq!(
        end, "close Some(1013)",
        "{readiness:?}: got {got:?}, statuses {statuses:?}, server error {error:?}"
    );
}

#[cfg(feature = "deflate")]
#[tokio::test]
async fn a_compressed_frame_begun_inflates_whole_before_the_close() {
    deflate_slow(Readiness::Owned, "rand 8388608").await
}

/// Several compressed messages, the later ones dropped unbegun.
#[cfg(feature = "deflate")]
#[tokio::test]
async fn compressed_frames_not_begun_are_dropped_and_the_rest_inflates() {
    deflate_slow(
        Readiness::Owned,
        "rand 3000000,rand 3000001,rand 3000002,rand 100000",
    )
    .await
}

/// The peer resets its connection while the 1013 waits behind the frame
/// begun: the connection ends, reported as backpressure.
async fn rst_while_pending(readiness: Readiness, half_close: bool) {
    let (mut server, mut slow) = backlogged(readiness, "one").await;
    server.sent(2).await;
    if half_close {
        slow.shutdown().await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (frames, end) = read_all(&mut slow).await;
        let got: Vec<(u8, usize)> = frames.iter().map(|f| (f.0, f.1)).collect();
        assert_eq!(
            (got, close_code(&frames), end.as_str()),
            (vec![(2, 8 << 20), (8, 40)], Some(1013), "EOF"),
            "{readiness:?}"
        );
    } else {
        // A zero linger blocks nothing: the drop sends a reset.
        #[allow(deprecated)]
        slow.set_linger(Some(Duration::ZERO)).unwrap();
        drop(slow);
    }
    let (_, _, error) = server.close_event().await;
    assert!(
        matches!(error, Some(Error::Backpressure { .. })),
        "{readiness:?}: {error:?}"
    );
}

#[tokio::test]
async fn a_peer_that_resets_while_the_close_waits_is_reported_as_backpressure() {
    rst_while_pending(Readiness::Owned, false).await
}

#[tokio::test]
async fn a_peer_that_half_closes_while_the_close_waits_still_reads_it() {
    rst_while_pending(Readiness::Owned, true).await
}

/// A Unix socket handed over; the peer writes after the limit, then reads.
#[cfg(unix)]
#[tokio::test]
async fn a_unix_socket_peer_that_writes_after_the_limit_still_gets_the_close() {
    let mut server = start(config(Readiness::Owned)).await;
    let (mut client, theirs) = tokio::net::UnixStream::pair().unwrap();
    server.handle.accept(theirs).await.unwrap();
    client.write_all(raw::REQUEST).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        head.push(client.read_u8().await.unwrap());
    }
    let mut both = text(&format!("big {}", 8 << 20));
    both.extend(text("one"));
    client.write_all(&both).await.unwrap();
    server.sent(2).await;
    client.write_all(&text("still there?")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut wire = Vec::new();
    let end = match within(20, client.read_to_end(&mut wire)).await {
        Ok(_) => "EOF".to_string(),
        Err(e) => format!("error {e}"),
    };
    let mut frames = Vec::new();
    let mut at = 0;
    while at < wire.len() {
        let rest = &wire[at..];
        let (len, h) = match rest[1] & 0x7f {
            126 => (u16::from_be_bytes([rest[2], rest[3]]) as usize, 4),
            127 => (
                u64::from_be_bytes(rest[2..10].try_into().unwrap()) as usize,
                10,
            ),
            n => (n as usize, 2),
        };
        assert!(rest.len() >= h + len, "cut frame after {frames:?} ({end})");
        frames.push((rest[0] & 0xf, len));
        at += h + len;
    }
    // The peer hangs up: the server, lingering for that, ends.
    drop(client);
    let (_, _, error) = server.close_event().await;
    assert_eq!(
        (frames, end.as_str()),
        (vec![(2, 8 << 20), (8, 40)], "EOF"),
        "{error:?}"
    );
}

/// The peer sends one message of `upload` bytes after the limit was met
/// (its own message, not a flood: within the server's message limit), then
/// reads everything.
async fn upload_after(
    readiness: Readiness,
    upload: usize,
) -> (Vec<(u8, usize)>, Option<u16>, String) {
    let (server, slow) = backlogged(readiness, "one").await;
    server.sent(2).await;
    let frame = raw::frame(true, OpCode::Binary, noise(upload));
    // Written while the peer does not read (in a task: it may not all fit).
    let (mut rd, mut wr) = slow.into_split();
    let writer = tokio::spawn(async move {
        let _ = wr.write_all(&frame).await;
        wr
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut wire = Vec::new();
    let end = match within(60, rd.read_to_end(&mut wire)).await {
        Ok(_) => "EOF".to_string(),
        Err(e) => format!("error {e}"),
    };
    let _ = writer.await;
    let (frames, _) = split_frames(&wire);
    let got: Vec<(u8, usize)> = frames.iter().map(|f| (f.0, f.1)).collect();
    (got, close_code(&frames), end)
}

/// A 200 KiB message (more than the 64 KiB read before a socket is
/// dropped) written after the decision, then the peer reads: the frame
/// begun, the 1013 close and EOF. (It was reset once the server dropped its
/// socket with the upload unread.)
#[tokio::test]
async fn an_upload_after_the_limit_does_not_cost_the_peer_its_close_tokio() {
    let r = upload_after(Readiness::Tokio, 200 << 10).await;
    assert_eq!(r, (vec![(2, 8 << 20), (8, 40)], Some(1013), "EOF".into()));
}

#[tokio::test]
async fn an_upload_after_the_limit_does_not_cost_the_peer_its_close_owned() {
    let r = upload_after(Readiness::Owned, 200 << 10).await;
    assert_eq!(r, (vec![(2, 8 << 20), (8, 40)], Some(1013), "EOF".into()));
}

/// The peer reads the backlog at its pace and says something small every
/// 20 ms meanwhile (a heartbeat, a chat line): the whole frame begun, the
/// 1013 close and EOF. (The server dropped its socket once the close was
/// handed to the kernel, and the next heartbeat reset the connection,
/// throwing away megabytes the kernel still held: the server lingers
/// now.)
async fn talking_reader(readiness: Readiness) -> (Vec<(u8, usize)>, Option<u16>, String) {
    let server = start(config(readiness)).await;
    let slow = slow_client(server.addr, 16 << 10).await;
    let (mut rd, mut wr) = slow.into_split();
    let mut both = text(&format!("big {}", 8 << 20));
    both.extend(text("one"));
    wr.write_all(&both).await.unwrap();
    server.sent(2).await;
    let talker = tokio::spawn(async move {
        for _ in 0..500 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            if wr.write_all(&text("hb")).await.is_err() {
                break;
            }
        }
    });
    // Reads at a modest pace: 64 KiB every 5 ms (about 13 MB/s).
    let mut wire = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    let end = within(60, async {
        loop {
            match rd.read(&mut buf).await {
                Ok(0) => return "EOF".to_string(),
                Ok(n) => wire.extend_from_slice(&buf[..n]),
                Err(e) => return format!("error {e}"),
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    talker.abort();
    let (frames, _) = split_frames(&wire);
    let got: Vec<(u8, usize)> = frames.iter().map(|f| (f.0, f.1)).collect();
    (
        got,
        close_code(&frames),
        format!("{end} after {} bytes", wire.len()),
    )
}

#[tokio::test]
async fn a_peer_that_talks_while_it_reads_gets_the_close_tokio() {
    let (got, code, end) = talking_reader(Readiness::Tokio).await;
    assert_eq!(
        (got, code),
        (vec![(2, 8 << 20), (8, 40)], Some(1013)),
        "{end}"
    );
}

#[tokio::test]
async fn a_peer_that_talks_while_it_reads_gets_the_close_owned() {
    let (got, code, end) = talking_reader(Readiness::Owned).await;
    assert_eq!(
        (got, code),
        (vec![(2, 8 << 20), (8, 40)], Some(1013)),
        "{end}"
    );
}

/// The handler closes (4000) a connection whose frame begun is over the
/// limit, and then publishes to a topic the connection subscribes to (a
/// publish made before the end of the turn the close was asked in goes out
/// before the close, by design). The close asked for should still go out
/// as asked (4000), as it does when the handler closes without publishing
/// (`an_application_close_as_the_limit_is_met_goes_out_as_asked_*`): the
/// publish that does not fit should be skipped, not turn the close into a
/// 1013 and the handler's `Closed` into `Error::Backpressure`. (It did.)
async fn close_then_publish(readiness: Readiness) -> (Option<u16>, String, Option<Error>) {
    let mut server = start(config(readiness)).await;
    let mut slow = slow_client(server.addr, 16 << 10).await;
    let mut all = text("sub");
    all.extend(text(&format!("big {}", 8 << 20)));
    all.extend(text("closepub"));
    slow.write_all(&all).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (op, payload) = raw::read_frame(&mut slow).await;
    assert_eq!((op, payload.len()), (2, 8 << 20), "{readiness:?}");
    let (op, payload) = raw::read_frame(&mut slow).await;
    let code = (op == 8).then(|| u16::from_be_bytes([payload[0], payload[1]]));
    let reason = String::from_utf8_lossy(payload.get(2..).unwrap_or(&[])).into_owned();
    if code == Some(4000) {
        let _ = slow
            .write_all(&raw::frame(
                true,
                OpCode::Close,
                4000u16.to_be_bytes().to_vec(),
            ))
            .await;
    }
    let (_, _, error) = server.close_event().await;
    (code, reason, error)
}

#[tokio::test]
async fn an_application_close_then_a_publish_over_the_limit_tokio() {
    let (code, reason, error) = close_then_publish(Readiness::Tokio).await;
    assert_eq!(
        code,
        Some(4000),
        "close reason {reason:?}, handler's error {error:?}"
    );
    assert!(error.is_none(), "{error:?}");
}

#[tokio::test]
async fn an_application_close_then_a_publish_over_the_limit_owned() {
    let (code, reason, error) = close_then_publish(Readiness::Owned).await;
    assert_eq!(
        code,
        Some(4000),
        "close reason {reason:?}, handler's error {error:?}"
    );
    assert!(error.is_none(), "{error:?}");
}
