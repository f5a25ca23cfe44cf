//! The hub over real loopback sockets, with wavesock's client (and raw
//! sockets where the wire itself is the point): echo, the handshake's
//! answers, the closing handshake either way, protocol errors, keepalive,
//! handles, shutdown, backpressure, several engines, TLS.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use wavesock::http::{HeaderValue, Request, Response, StatusCode};
use wavesock::hub::HttpResponse;
use wavesock::hub::{
    BackpressurePolicy, Closed, ConnId, Handler, Hub, HubConfig, HubHandle, HubMessage, Readiness,
    SendStatus, Ws,
};

use crate::support::raw::{self, until, within};
use wavesock::{CloseCode, CloseFrame, Config, Error, Message};

/// What the test handler saw.
#[derive(Debug)]
enum Event {
    Open(ConnId, String),
    Message(ConnId, String),
    Ping(ConnId, Vec<u8>),
    Drain(ConnId),
    Close(ConnId, Option<CloseFrame>, Option<Error>, String),
}

/// Echoes, and obeys a few text commands: `close` (closes with 4000),
/// `flood N` (sends N binary messages of 64 KiB, recording the statuses).
#[derive(Clone)]
struct Recorder {
    events: mpsc::UnboundedSender<Event>,
    statuses: Arc<Mutex<Vec<SendStatus>>>,
}

impl Handler for Recorder {
    /// The request's path.
    type Data = String;

    fn upgrade(
        &mut self,
        request: &Request<()>,
        response: &mut Response<()>,
    ) -> Result<String, HttpResponse> {
        let path = request.uri().path().to_owned();
        if path == "/forbidden" {
            return Err(wavesock::hub::respond(StatusCode::FORBIDDEN, "go away"));
        }
        if request.headers().contains_key("sec-websocket-protocol") {
            response
                .headers_mut()
                .insert("sec-websocket-protocol", HeaderValue::from_static("chat"));
        }
        Ok(path)
    }

    fn request(&mut self, request: &Request<()>) -> Option<Response<Vec<u8>>> {
        (request.uri().path() == "/health").then(|| Response::new(b"ok\n".to_vec()))
    }

    fn open(&mut self, ws: &mut Ws<'_, String>) {
        let _ = self.events.send(Event::Open(ws.id(), ws.data().clone()));
    }

    fn message(&mut self, ws: &mut Ws<'_, String>, msg: HubMessage<'_>) {
        if let HubMessage::Text(t) = msg {
            let _ = self.events.send(Event::Message(ws.id(), t.to_owned()));
            if t == "close" {
                ws.close(CloseCode::from(4000), "asked to").unwrap();
                return;
            }
            if let Some(n) = t.strip_prefix("flood ") {
                let big = vec![7u8; 64 << 10];
                let mut statuses = self.statuses.lock().unwrap();
                for _ in 0..n.parse::<usize>().unwrap() {
                    statuses.push(ws.send_binary(&big).unwrap());
                }
                return;
            }
        }
        if let HubMessage::Binary(b) = msg {
            if b.first() == Some(&b'W') {
                // Wrapped: a text before and after the echo, to check that
                // an echo sent from where it was read keeps its place.
                ws.send_text("before").unwrap();
                ws.send_binary(b).unwrap();
                ws.send_text("after").unwrap();
                return;
            }
        }
        ws.send_borrowed(msg).unwrap();
    }

    fn ping(&mut self, ws: &mut Ws<'_, String>, payload: &[u8]) {
        let _ = self.events.send(Event::Ping(ws.id(), payload.to_vec()));
    }

    fn drain(&mut self, ws: &mut Ws<'_, String>) {
        let _ = self.events.send(Event::Drain(ws.id()));
    }

    fn close(&mut self, closed: Closed, data: String) {
        let _ = self
            .events
            .send(Event::Close(closed.id, closed.frame, closed.error, data));
    }
}

struct Server {
    addr: SocketAddr,
    handle: HubHandle,
    events: mpsc::UnboundedReceiver<Event>,
    statuses: Arc<Mutex<Vec<SendStatus>>>,
    done: tokio::task::JoinHandle<wavesock::Result<()>>,
}

/// A hub running the recording handler, and what it records.
#[allow(clippy::type_complexity)]
fn recording_hub(
    config: HubConfig,
) -> (
    Hub<Recorder>,
    mpsc::UnboundedReceiver<Event>,
    Arc<Mutex<Vec<SendStatus>>>,
) {
    let (tx, events) = mpsc::unbounded_channel();
    let statuses = Arc::default();
    let handler = Recorder {
        events: tx,
        statuses: Arc::clone(&statuses),
    };
    (Hub::new(handler, config).unwrap(), events, statuses)
}

async fn start(config: HubConfig) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (hub, events, statuses) = recording_hub(config);
    let handle = hub.handle();
    let done = tokio::spawn(hub.serve(listener));
    Server {
        addr,
        handle,
        events,
        statuses,
        done,
    }
}

impl Server {
    async fn next(&mut self) -> Event {
        tokio::time::timeout(Duration::from_secs(10), self.events.recv())
            .await
            .expect("an event within 10 s")
            .expect("the hub is running")
    }

    /// The next event that is not a message or ping.
    async fn next_lifecycle(&mut self) -> Event {
        loop {
            match self.next().await {
                Event::Open(..) | Event::Message(..) | Event::Ping(..) => {}
                other => return other,
            }
        }
    }

    fn url(&self, path: &str) -> String {
        format!("ws://{}{path}", self.addr)
    }
}

/// Reads until the connection ends (the close echo or frame may come
/// first); fails on anything else.
async fn assert_ends(ws: &mut wavesock::ClientStream) {
    loop {
        match tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .expect("the end within 10 s")
        {
            None => return,
            Some(Ok(msg)) => assert!(msg.is_close(), "{msg:?}"),
            Some(Err(e)) => panic!("{e}"),
        }
    }
}

async fn next_data(ws: &mut wavesock::ClientStream) -> Message {
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .expect("a message within 10 s")
            .expect("the stream goes on")
            .unwrap();
        if msg.is_data() || msg.is_close() {
            return msg;
        }
    }
}

#[tokio::test]
async fn echoes_text_binary_fragmented_and_large_messages() {
    let mut server = start(crate::support::hub::defaults()).await;
    let (mut ws, _) = wavesock::connect_async(server.url("/echo")).await.unwrap();
    let Event::Open(id, path) = server.next().await else {
        panic!("open first")
    };
    assert_eq!(path, "/echo");
    ws.send(Message::text("héllo")).await.unwrap();
    assert_eq!(next_data(&mut ws).await, Message::text("héllo"));
    ws.send(Message::binary(vec![1, 2, 3])).await.unwrap();
    assert_eq!(next_data(&mut ws).await, Message::binary(vec![1, 2, 3]));
    // Fragments, with a ping between them: assembled by the hub, the ping
    // answered and reported.
    use wavesock::{Frame, OpCode};
    ws.send(Message::Frame(Frame::new(false, OpCode::Text, "frag")))
        .await
        .unwrap();
    ws.send(Message::Ping("p".into())).await.unwrap();
    ws.send(Message::Frame(Frame::new(
        true,
        OpCode::Continuation,
        "mented",
    )))
    .await
    .unwrap();
    assert_eq!(next_data(&mut ws).await, Message::text("fragmented"));
    // A message larger than the hub's read buffer.
    let big: Vec<u8> = (0..3 << 20).map(|i| (i % 251) as u8).collect();
    ws.send(Message::binary(big.clone())).await.unwrap();
    assert_eq!(next_data(&mut ws).await, Message::binary(big));
    // The events came in order, for this connection.
    let mut saw_ping = false;
    let mut texts = Vec::new();
    for _ in 0..3 {
        match server.next().await {
            Event::Message(from, t) => {
                assert_eq!(from, id);
                texts.push(t);
            }
            Event::Ping(from, p) => {
                assert_eq!(from, id);
                assert_eq!(p, b"p");
                saw_ping = true;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(saw_ping);
    assert_eq!(texts, ["héllo", "fragmented"]);
}

#[tokio::test]
async fn large_echoes_keep_their_place_among_other_sends() {
    let server = start(crate::support::hub::defaults()).await;
    let (mut ws, _) = wavesock::connect_async(server.url("/")).await.unwrap();
    // Larger than a read: received into the connection's own buffer and
    // sent back from there; the smaller ones too when a read ends inside
    // them (all are over the size the core queues by reference). Several
    // in flight at once.
    let sizes = [
        700 << 10,
        5 << 10,
        701 << 10,
        (40 << 10) + 7,
        63 << 10,
        702 << 10,
    ];
    let bigs: Vec<Vec<u8>> = (0..sizes.len())
        .map(|i| {
            let mut b: Vec<u8> = (0..sizes[i]).map(|j| (j % 253) as u8 ^ i as u8).collect();
            b[0] = b'W';
            b
        })
        .collect();
    for b in &bigs {
        ws.feed(Message::binary(b.clone())).await.unwrap();
    }
    ws.flush().await.unwrap();
    for b in &bigs {
        assert_eq!(next_data(&mut ws).await, Message::text("before"));
        assert_eq!(next_data(&mut ws).await, Message::binary(b.clone()));
        assert_eq!(next_data(&mut ws).await, Message::text("after"));
    }
    // And small ones still go out as before.
    ws.send(Message::text("small")).await.unwrap();
    assert_eq!(next_data(&mut ws).await, Message::text("small"));
}

#[tokio::test]
async fn many_clients_at_once_each_get_their_own_echo() {
    let server = start(crate::support::hub::defaults()).await;
    let clients = (0..50).map(|i| {
        let url = server.url("/");
        tokio::spawn(async move {
            let (mut ws, _) = wavesock::connect_async(url).await.unwrap();
            for j in 0..20 {
                let text = format!("{i}:{j}");
                ws.send(Message::text(text.clone())).await.unwrap();
                assert_eq!(next_data(&mut ws).await, Message::text(text));
            }
            ws.close(None).await.unwrap();
        })
    });
    for c in clients.collect::<Vec<_>>() {
        c.await.unwrap();
    }
}

#[tokio::test]
async fn the_upgrade_handler_refuses_answers_and_adds_headers() {
    let server = start(crate::support::hub::defaults()).await;
    // A refusal with its status and body.
    let err = wavesock::connect_async(server.url("/forbidden"))
        .await
        .unwrap_err();
    let Error::Handshake(wavesock::HandshakeError::UnexpectedStatus { status, response }) = err
    else {
        panic!("refused, not {err:?}")
    };
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(response.body().as_deref(), Some(&b"go away"[..]));
    // A subprotocol chosen by the handler is in the 101.
    let mut req = wavesock::ClientRequestBuilder::new(
        server.url("/chat").parse::<wavesock::http::Uri>().unwrap(),
    )
    .with_sub_protocol("chat");
    req = req.with_header("X-Test", "1");
    let (_ws, resp) = wavesock::connect_async(req).await.unwrap();
    assert_eq!(resp.headers()["sec-websocket-protocol"], "chat");

    // A plain HTTP request: answered by the handler, or refused.
    for (path, expect) in [("/health", "HTTP/1.1 200"), ("/", "HTTP/1.1 400")] {
        let mut tcp = TcpStream::connect(server.addr).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
        tcp.write_all(req.as_bytes()).await.unwrap();
        let mut resp = Vec::new();
        // The hub closes after answering.
        tcp.read_to_end(&mut resp).await.unwrap();
        let resp = String::from_utf8(resp).unwrap();
        assert!(resp.starts_with(expect), "{path}: {resp}");
        if path == "/health" {
            assert!(resp.ends_with("ok\n"), "{resp}");
        }
    }
}

#[tokio::test]
async fn a_client_close_is_echoed_and_reported_with_its_frame_and_data() {
    let mut server = start(crate::support::hub::defaults()).await;
    let (mut ws, _) = wavesock::connect_async(server.url("/room/1"))
        .await
        .unwrap();
    let Event::Open(id, _) = server.next().await else {
        panic!()
    };
    ws.close(Some(CloseFrame::new(CloseCode::NORMAL, "bye")))
        .await
        .unwrap();
    // The echo arrives and the server ends the TCP connection.
    assert_ends(&mut ws).await;
    let Event::Close(closed, frame, error, data) = server.next_lifecycle().await else {
        panic!()
    };
    assert_eq!(closed, id);
    let frame = frame.unwrap();
    assert_eq!(frame.code, CloseCode::NORMAL);
    assert_eq!(frame.reason.as_str(), "bye");
    assert!(error.is_none(), "{error:?}");
    assert_eq!(data, "/room/1");
}

#[tokio::test]
async fn a_handler_close_reaches_the_client_with_its_code() {
    let mut server = start(crate::support::hub::defaults()).await;
    let (mut ws, _) = wavesock::connect_async(server.url("/")).await.unwrap();
    ws.send(Message::text("close")).await.unwrap();
    let Message::Close(Some(frame)) = next_data(&mut ws).await else {
        panic!("a close frame")
    };
    assert_eq!(u16::from(frame.code), 4000);
    assert_eq!(frame.reason.as_str(), "asked to");
    // wavesock's client answers; the hub then ends the connection cleanly.
    assert_ends(&mut ws).await;
    let Event::Close(_, _, error, _) = server.next_lifecycle().await else {
        panic!()
    };
    assert!(error.is_none(), "{error:?}");
}

#[tokio::test]
async fn a_protocol_violation_gets_1002_and_is_reported() {
    let mut server = start(crate::support::hub::defaults()).await;
    let (mut tcp, _) = upgrade_raw(server.addr).await;
    // An unmasked frame from a client.
    tcp.write_all(&[0x81, 0x02, b'h', b'i']).await.unwrap();
    let mut reply = Vec::new();
    tcp.read_to_end(&mut reply).await.unwrap();
    assert_eq!(reply[0], 0x88, "a close frame");
    assert_eq!(&reply[2..4], &[0x03, 0xea], "code 1002");
    let Event::Close(_, frame, error, _) = server.next_lifecycle().await else {
        panic!()
    };
    assert!(frame.is_none());
    let error = error.expect("the violation");
    assert_eq!(error.close_code(), Some(CloseCode::PROTOCOL_ERROR));
}

#[tokio::test]
async fn handles_send_close_and_ignore_gone_connections() {
    let mut server = start(crate::support::hub::defaults()).await;
    let (mut ws, _) = wavesock::connect_async(server.url("/")).await.unwrap();
    let Event::Open(id, _) = server.next().await else {
        panic!()
    };
    server
        .handle
        .send(id, Message::text("from afar"))
        .await
        .unwrap();
    assert_eq!(next_data(&mut ws).await, Message::text("from afar"));
    server
        .handle
        .try_send(id, Message::binary(vec![9]))
        .unwrap();
    assert_eq!(next_data(&mut ws).await, Message::binary(vec![9]));
    server
        .handle
        .close(id, CloseCode::from(4001), "handle")
        .await
        .unwrap();
    let Message::Close(Some(frame)) = next_data(&mut ws).await else {
        panic!()
    };
    assert_eq!(u16::from(frame.code), 4001);
    assert_ends(&mut ws).await;
    let Event::Close(gone, ..) = server.next_lifecycle().await else {
        panic!()
    };
    assert_eq!(gone, id);
    // A message for a connection that is gone is dropped; a new connection
    // in the same slot does not get it.
    let (mut ws2, _) = wavesock::connect_async(server.url("/")).await.unwrap();
    let Event::Open(id2, _) = server.next().await else {
        panic!()
    };
    assert_ne!(id, id2);
    server
        .handle
        .send(id, Message::text("stale"))
        .await
        .unwrap();
    ws2.send(Message::text("fresh")).await.unwrap();
    assert_eq!(next_data(&mut ws2).await, Message::text("fresh"));
}

#[tokio::test]
async fn shutdown_closes_every_connection_with_1001_and_ends_serve() {
    let mut server = start(crate::support::hub::defaults()).await;
    let mut clients = Vec::new();
    for _ in 0..3 {
        let (ws, _) = wavesock::connect_async(server.url("/")).await.unwrap();
        clients.push(ws);
        assert!(matches!(server.next().await, Event::Open(..)));
    }
    server.handle.shutdown().await.unwrap();
    for ws in &mut clients {
        let Message::Close(Some(frame)) = next_data(ws).await else {
            panic!()
        };
        assert_eq!(frame.code, CloseCode::GOING_AWAY);
        assert_ends(ws).await;
    }
    tokio::time::timeout(Duration::from_secs(10), &mut server.done)
        .await
        .expect("serve returns")
        .unwrap()
        .unwrap();
    for _ in 0..3 {
        let Event::Close(_, _, error, _) = server.next_lifecycle().await else {
            panic!()
        };
        assert!(error.is_none(), "{error:?}");
    }
    // Nothing listens any more.
    assert!(TcpStream::connect(server.addr).await.is_err());
}

/// Upgrades a raw TCP connection; returns it with the bytes after the head.
async fn upgrade_raw(addr: SocketAddr) -> (TcpStream, Vec<u8>) {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(
        b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    )
    .await
    .unwrap();
    let mut buf = Vec::new();
    loop {
        let mut byte = [0u8];
        tcp.read_exact(&mut byte).await.unwrap();
        buf.push(byte[0]);
        if buf.ends_with(b"\r\n\r\n") {
            assert!(buf.starts_with(b"HTTP/1.1 101"));
            return (tcp, Vec::new());
        }
    }
}

/// A masked text frame of `text`.
fn masked_text(text: &str) -> Vec<u8> {
    let key = [1, 2, 3, 4];
    let mut f = vec![0x81, 0x80 | text.len() as u8];
    f.extend_from_slice(&key);
    f.extend(text.bytes().enumerate().map(|(i, b)| b ^ key[i % 4]));
    f
}

#[tokio::test]
async fn a_peer_that_stops_reading_is_closed_at_max_backpressure_others_go_on() {
    for readiness in [Readiness::Owned, Readiness::Tokio] {
        // A close timeout longer than the test: the connection ends because
        // the peer read its close frame, not because the timer gave up.
        let config = crate::support::hub::defaults()
            .config(
                Config::default()
                    .close_timeout(Duration::from_secs(120))
                    .max_backpressure(256 << 10),
            )
            .readiness(readiness)
            .backpressure_policy(BackpressurePolicy::Close);
        let mut server = start(config).await;
        let (mut slow, _) = upgrade_raw(server.addr).await;
        let Event::Open(slow_id, _) = server.next().await else {
            panic!()
        };
        let (mut fast, _) = wavesock::connect_async(server.url("/")).await.unwrap();
        assert!(matches!(server.next().await, Event::Open(..)));
        // The slow peer asks for 64 MiB and reads nothing.
        slow.write_all(&masked_text("flood 1024")).await.unwrap();
        // The other connection is served meanwhile.
        for i in 0..20 {
            fast.send(Message::text(format!("{i}"))).await.unwrap();
            assert_eq!(next_data(&mut fast).await, Message::text(format!("{i}")));
        }
        let statuses = server.statuses.clone();
        until(|| statuses.lock().unwrap().len() == 1024).await;
        let statuses = server.statuses.lock().unwrap().clone();
        // Sent until the limit was passed, then dropped once (and closed):
        // closed for the rest.
        let sent = statuses
            .iter()
            .take_while(|s| matches!(s, SendStatus::Sent | SendStatus::Backpressure))
            .count();
        assert!((4..1024).contains(&sent), "{readiness:?}: {sent} sent");
        assert_eq!(statuses[sent], SendStatus::Dropped, "{readiness:?}");
        assert!(
            statuses[sent + 1..]
                .iter()
                .all(|s| *s == SendStatus::Closed),
            "{readiness:?}: {statuses:?}"
        );
        // Nothing ends until the peer reads: then it gets whole frames, in
        // order, fewer than were sent (those not begun were dropped), and
        // the close frame saying why.
        let mut frames = 0;
        let (code, reason) = loop {
            let (op, payload) = raw::read_frame(&mut slow).await;
            match op {
                0x2 => {
                    assert_eq!(payload.len(), 64 << 10);
                    assert!(payload.iter().all(|&b| b == 7));
                    frames += 1;
                }
                0x8 => {
                    break (
                        u16::from_be_bytes([payload[0], payload[1]]),
                        String::from_utf8(payload[2..].to_vec()).unwrap(),
                    );
                }
                other => panic!("{readiness:?}: opcode {other} after {frames} frames"),
            }
        };
        assert_eq!(code, 1013, "{readiness:?}: try again later ({reason})");
        // Over 256 KiB waited when the limit was met: four frames or more
        // queued, of which one at most was begun and goes out.
        assert!(frames + 3 <= sent, "{readiness:?}: {frames} of {sent}");
        // The server ended the connection after its close frame (then
        // lingers until the peer hangs up).
        let mut rest = Vec::new();
        within(10, slow.read_to_end(&mut rest)).await.unwrap();
        assert!(rest.is_empty(), "{rest:?}");
        drop(slow);
        let (gone, error) = loop {
            if let Event::Close(gone, _, error, _) = server.next_lifecycle().await {
                break (gone, error);
            }
        };
        assert_eq!(gone, slow_id);
        match error {
            Some(Error::Backpressure { buffered, limit }) => {
                assert_eq!(limit, 256 << 10);
                assert!(buffered > limit);
            }
            other => panic!("closed for backpressure, not {other:?}"),
        }
        fast.send(Message::text("still here")).await.unwrap();
        assert_eq!(next_data(&mut fast).await, Message::text("still here"));
    }
}

#[tokio::test]
async fn with_the_drop_policy_a_slow_peer_misses_messages_then_drains() {
    let config = crate::support::hub::defaults()
        .config(Config::default().max_backpressure(256 << 10))
        .backpressure_policy(BackpressurePolicy::Drop);
    let mut server = start(config).await;
    let (mut slow, _) = upgrade_raw(server.addr).await;
    let Event::Open(slow_id, _) = server.next().await else {
        panic!()
    };
    slow.write_all(&masked_text("flood 64")).await.unwrap();
    // Wait for the handler to have run.
    assert!(matches!(server.next().await, Event::Message(..)));
    let statuses = server.statuses.lock().unwrap().clone();
    let dropped = statuses
        .iter()
        .filter(|s| **s == SendStatus::Dropped)
        .count();
    assert!(dropped > 0 && dropped < 64, "{dropped} dropped");
    // The peer reads everything that was sent: whole frames, then the
    // connection drains and goes on.
    let sent = 64 - dropped;
    let mut frame_bytes = 0usize;
    // 64 KiB needs the 8-byte length: a 10-byte header.
    let expected = sent * (64 * 1024 + 10);
    let mut buf = vec![0u8; 1 << 16];
    while frame_bytes < expected {
        let n = slow.read(&mut buf).await.unwrap();
        assert!(n > 0);
        frame_bytes += n;
    }
    assert_eq!(frame_bytes, expected);
    let Event::Drain(id) = server.next_lifecycle().await else {
        panic!()
    };
    assert_eq!(id, slow_id);
    slow.write_all(&masked_text("ping")).await.unwrap();
    let mut echo = [0u8; 6];
    slow.read_exact(&mut echo).await.unwrap();
    assert_eq!(&echo, b"\x81\x04ping");
}

#[tokio::test]
async fn keepalive_closes_a_silent_peer() {
    let config = crate::support::hub::defaults().config(
        Config::default()
            .ping_interval(Some(Duration::from_millis(100)))
            .pong_timeout(Duration::from_millis(200)),
    );
    let mut server = start(config).await;
    let (mut tcp, _) = upgrade_raw(server.addr).await;
    // A ping comes, unanswered; then the connection ends.
    let mut head = [0u8; 2];
    tcp.read_exact(&mut head).await.unwrap();
    assert_eq!(head, [0x89, 0x00]);
    let Event::Close(_, _, error, _) = server.next_lifecycle().await else {
        panic!()
    };
    assert!(matches!(error, Some(Error::KeepaliveTimeout)), "{error:?}");
}

#[tokio::test]
async fn a_slow_handshake_is_cut_off() {
    let config = crate::support::hub::defaults()
        .config(Config::default().handshake_timeout(Some(Duration::from_millis(200))));
    let server = start(config).await;
    let mut tcp = TcpStream::connect(server.addr).await.unwrap();
    tcp.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut rest = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut rest))
        .await
        .expect("closed by the hub")
        .unwrap_or(0);
    assert_eq!(n, 0, "nothing answered");
    // The hub still serves others.
    let (mut ws, _) = wavesock::connect_async(server.url("/")).await.unwrap();
    ws.send(Message::text("ok")).await.unwrap();
    assert_eq!(next_data(&mut ws).await, Message::text("ok"));
}

#[test]
fn one_engine_per_worker_each_with_its_connections() {
    let rt = crate::support::two_workers();
    rt.block_on(async {
        let mut server = start(crate::support::hub::defaults().engines(None)).await;
        let mut clients = Vec::new();
        let mut engines = std::collections::HashSet::new();
        for _ in 0..6 {
            let (ws, _) = wavesock::connect_async(server.url("/")).await.unwrap();
            clients.push(ws);
            let Event::Open(id, _) = server.next().await else {
                panic!()
            };
            engines.insert(id.engine());
        }
        assert_eq!(engines.len(), 2, "connections spread over both engines");
        for (i, ws) in clients.iter_mut().enumerate() {
            ws.send(Message::text(format!("{i}"))).await.unwrap();
            assert_eq!(next_data(ws).await, Message::text(format!("{i}")));
        }
        server.handle.shutdown().await.unwrap();
        for ws in &mut clients {
            assert_ends(ws).await;
        }
        tokio::time::timeout(Duration::from_secs(10), server.done)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    });
}

#[cfg(feature = "deflate")]
#[tokio::test]
async fn permessage_deflate_on_the_hub() {
    let deflate = wavesock::DeflateConfig::default();
    let config = crate::support::hub::defaults().config(Config::default().deflate(deflate.clone()));
    let server = start(config).await;
    let client = Config::default().deflate(deflate);
    let (mut ws, resp) = wavesock::connect_async_with_config(server.url("/"), client)
        .await
        .unwrap();
    assert!(
        resp.headers()["sec-websocket-extensions"]
            .to_str()
            .unwrap()
            .starts_with("permessage-deflate")
    );
    for i in 0..10 {
        let text = "compressible ".repeat(100 + i);
        ws.send(Message::text(text.clone())).await.unwrap();
        assert_eq!(next_data(&mut ws).await, Message::text(text));
    }
}

#[cfg(feature = "rustls")]
use crate::support::proxy as proxy_support;

#[cfg(feature = "rustls")]
#[tokio::test]
async fn wss_through_tokio_rustls_handed_to_the_hub() {
    use proxy_support::tls::{acceptor, trusting};
    let (acceptor, cert) = acceptor(&["localhost"]);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (hub, mut events, _) = recording_hub(crate::support::hub::defaults());
    let handle = hub.handle();
    // The hub serves connections handed to it; this task does TLS.
    tokio::spawn(hub.run());
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let tls = acceptor.accept(tcp).await.unwrap();
            handle.accept(tls).await.unwrap();
        }
    });
    let connector = wavesock::Connector::Rustls(trusting(&cert));
    let (mut ws, _) = wavesock::connect_async_tls_with_config(
        format!("wss://localhost:{port}/tls"),
        Config::default(),
        Some(connector),
    )
    .await
    .unwrap();
    let Some(Event::Open(_, path)) = events.recv().await else {
        panic!()
    };
    assert_eq!(path, "/tls");
    for size in [5, 70_000, 1 << 20] {
        let payload = vec![b'x'; size];
        ws.send(Message::binary(payload.clone())).await.unwrap();
        assert_eq!(next_data_any(&mut ws).await, Message::binary(payload));
    }
}

#[cfg(feature = "rustls")]
async fn next_data_any<S>(ws: &mut wavesock::WebSocketStream<S>) -> Message
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    loop {
        let msg = ws.next().await.unwrap().unwrap();
        if msg.is_data() {
            return msg;
        }
    }
}

#[tokio::test]
async fn a_connection_upgraded_by_hyper_is_adopted() {
    use http_body_util::Empty;
    use hyper::body::Bytes;
    use hyper_util::rt::TokioIo;
    use wavesock::handshake::server::{accept_response, check_request};

    let (hub, mut events, _) = recording_hub(crate::support::hub::defaults());
    let adopter = hub.adopter();
    tokio::spawn(hub.run());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let service =
            hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
                let adopter = adopter.clone();
                async move {
                    // hyper answers the upgrade; the hub takes the connection.
                    let accept = check_request(&req).unwrap();
                    let path = req.uri().path().to_owned();
                    let on_upgrade = hyper::upgrade::on(&mut req);
                    tokio::spawn(async move {
                        let upgraded = on_upgrade.await.unwrap();
                        adopter.adopt(TokioIo::new(upgraded), path).await.unwrap();
                    });
                    let (parts, ()) = accept_response(&accept).into_parts();
                    Ok::<_, std::convert::Infallible>(hyper::Response::from_parts(
                        parts,
                        Empty::<Bytes>::new(),
                    ))
                }
            });
        hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(tcp), service)
            .with_upgrades()
            .await
            .unwrap();
    });
    let (mut ws, _) = wavesock::connect_async(format!("ws://{addr}/via-hyper"))
        .await
        .unwrap();
    let Some(Event::Open(_, path)) = events.recv().await else {
        panic!()
    };
    assert_eq!(path, "/via-hyper");
    ws.send(Message::text("adopted")).await.unwrap();
    assert_eq!(next_data(&mut ws).await, Message::text("adopted"));
    ws.close(Some(CloseFrame::new(CloseCode::NORMAL, "done")))
        .await
        .unwrap();
    assert_ends(&mut ws).await;
    loop {
        if let Some(Event::Close(_, frame, error, data)) = events.recv().await {
            assert_eq!(frame.unwrap().code, CloseCode::NORMAL);
            assert!(error.is_none(), "{error:?}");
            assert_eq!(data, "/via-hyper");
            break;
        }
    }
}
