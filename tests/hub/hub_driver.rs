//! The hub's bugs where it once decided for itself what the Stream leaves
//! to the protocol core, each over real loopback sockets: the memory
//! budget (over the limit, missed releases, a deadline left armed), what
//! an idle connection keeps, a refused handshake's deadline, accepts
//! behind handle traffic, ids across hubs, a panicking engine, `Duration`
//! settings of "never".

use std::net::SocketAddr;
use std::time::Duration;

use crate::support::raw;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use wavesock::http::{Request, Response, StatusCode};
use wavesock::hub::HttpResponse;

use raw::{frame, read_frame, until, upgrade_raw, within};
use wavesock::hub::{ConnId, HandleError, Handler, Hub, HubConfig, HubHandle, HubMessage, Ws};
use wavesock::{CloseCode, Config, MemoryBudget, Message, OpCode};

/// Echoes; reports each connection's id when it opens; on request answers
/// with a large page (`/page`) or refuses the upgrade with one
/// (`/refuse`); `panic` panics in its engine.
#[derive(Clone)]
struct Echo {
    opened: mpsc::UnboundedSender<ConnId>,
}

/// The size of the pages `Echo` answers with: far more than loopback's
/// socket buffers hold, so a client that does not read stalls the write.
const PAGE: usize = 64 << 20;

impl Handler for Echo {
    type Data = ();

    fn upgrade(
        &mut self,
        request: &Request<()>,
        _response: &mut Response<()>,
    ) -> Result<(), HttpResponse> {
        if request.uri().path() == "/refuse" {
            return Err(wavesock::hub::respond(
                StatusCode::FORBIDDEN,
                "x".repeat(PAGE),
            ));
        }
        Ok(())
    }

    fn request(&mut self, request: &Request<()>) -> Option<Response<Vec<u8>>> {
        (request.uri().path() == "/page").then(|| Response::new(vec![b'p'; PAGE]))
    }

    fn open(&mut self, ws: &mut Ws<'_, ()>) {
        let _ = self.opened.send(ws.id());
    }

    fn message(&mut self, ws: &mut Ws<'_, ()>, msg: HubMessage<'_>) {
        match msg {
            HubMessage::Text("panic") => panic!("a handler's bug"),
            _ => {
                let _ = ws.send_borrowed(msg);
            }
        }
    }
}

/// The opcode and payload length of the next server frame.
async fn frame_len(tcp: &mut TcpStream) -> (u8, usize) {
    let (opcode, payload) = read_frame(tcp).await;
    (opcode, payload.len())
}

struct Server {
    addr: SocketAddr,
    handle: HubHandle,
    opened: mpsc::UnboundedReceiver<ConnId>,
    done: tokio::task::JoinHandle<wavesock::Result<()>>,
}

async fn start(config: HubConfig) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, opened) = mpsc::unbounded_channel();
    let hub = Hub::new(Echo { opened: tx }, config).unwrap();
    let handle = hub.handle();
    let done = tokio::spawn(hub.serve(listener));
    Server {
        addr,
        handle,
        opened,
        done,
    }
}

impl Server {
    async fn connect(&mut self) -> (wavesock::ClientStream, ConnId) {
        let (ws, _) = wavesock::connect_async(format!("ws://{}/", self.addr))
            .await
            .unwrap();
        let id = within(5, self.opened.recv()).await.unwrap();
        (ws, id)
    }
}

/// The next data or close message.
async fn next_msg<S>(ws: &mut wavesock::WebSocketStream<S>) -> Message
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    loop {
        let msg = within(10, ws.next())
            .await
            .expect("the stream goes on")
            .unwrap();
        if msg.is_data() || msg.is_close() {
            return msg;
        }
    }
}

#[tokio::test]
async fn the_budget_holds_the_hub_to_its_limit_and_a_waiting_client_resumes() {
    const LIMIT: usize = 4 << 20;
    let budget = MemoryBudget::new(LIMIT)
        .allowance(0)
        .wait_timeout(Duration::from_secs(3));
    let config = crate::support::hub::defaults()
        .engines(Some(1))
        .config(Config::default().memory_budget(budget.clone()));
    let server = start(config).await;

    // A holds 3 MiB of an unfinished fragmented message.
    let mut a = upgrade_raw(server.addr).await;
    a.write_all(&frame(false, OpCode::Binary, vec![1; 3 << 20]))
        .await
        .unwrap();
    until(|| budget.in_use() >= 3 << 20).await;

    // B sends 2 MiB in one frame: more than the budget has left. It waits
    // rather than take the budget past its limit.
    let mut b = upgrade_raw(server.addr).await;
    b.write_all(&frame(true, OpCode::Binary, vec![2; 2 << 20]))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        budget.peak() <= LIMIT,
        "peak {} over the limit {LIMIT}",
        budget.peak()
    );

    // A finishes: its message is echoed and its budget given back, which
    // wakes B, whose echo follows.
    a.write_all(&frame(true, OpCode::Continuation, vec![1; 16]))
        .await
        .unwrap();
    assert_eq!(frame_len(&mut a).await, (0x2, (3 << 20) + 16));
    assert_eq!(frame_len(&mut b).await, (0x2, 2 << 20));
    assert!(budget.peak() <= LIMIT, "peak {}", budget.peak());
}

#[tokio::test]
async fn a_client_that_waited_for_budget_is_not_refused_for_being_quiet_after() {
    const LIMIT: usize = 4 << 20;
    let wait = Duration::from_millis(800);
    let budget = MemoryBudget::new(LIMIT).allowance(0).wait_timeout(wait);
    let config = crate::support::hub::defaults()
        .engines(Some(1))
        .config(Config::default().memory_budget(budget.clone()));
    let server = start(config).await;

    let mut a = upgrade_raw(server.addr).await;
    a.write_all(&frame(false, OpCode::Binary, vec![1; 3 << 20]))
        .await
        .unwrap();
    until(|| budget.in_use() >= 3 << 20).await;

    // B's fragments need budget that A holds: its decoder waits (the
    // core's budget deadline runs), and resumes from what it had read.
    let mut b = upgrade_raw(server.addr).await;
    let mut both = frame(false, OpCode::Binary, vec![2; 1 << 20]);
    both.extend(frame(true, OpCode::Continuation, vec![2; 1 << 20]));
    b.write_all(&both).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    a.write_all(&frame(true, OpCode::Continuation, vec![]))
        .await
        .unwrap();
    assert_eq!(frame_len(&mut b).await, (0x2, 2 << 20));

    // Quiet for longer than the wait: a request/response client between
    // requests. It must not be refused with 1013.
    tokio::time::sleep(wait * 2).await;
    b.write_all(&frame(true, OpCode::Text, b"still here".to_vec()))
        .await
        .unwrap();
    assert_eq!(frame_len(&mut b).await, (0x1, 10));
}

#[tokio::test]
async fn an_idle_connection_keeps_no_buffer_after_a_large_message() {
    let budget = MemoryBudget::new(256 << 20).allowance(0);
    let config = crate::support::hub::defaults()
        .engines(Some(1))
        .config(Config::default().memory_budget(budget.clone()));
    let mut server = start(config).await;
    let mut clients = Vec::new();
    for _ in 0..4 {
        let (mut ws, _) = server.connect().await;
        ws.send(Message::binary(vec![9u8; 8 << 20])).await.unwrap();
        assert_eq!(next_msg(&mut ws).await.len(), 8 << 20);
        clients.push(ws);
    }
    // Each echo is written: nothing is held for messages in progress.
    until(|| budget.in_use() == 0).await;
    assert!(budget.peak() >= 8 << 20, "the budget saw the messages");
    // And the connections still work.
    for ws in &mut clients {
        ws.send(Message::text("small")).await.unwrap();
        assert_eq!(next_msg(ws).await, Message::text("small"));
    }
    assert_eq!(budget.in_use(), 0);
}

/// Asks `path` without reading the answer; then reads what comes: the
/// bytes, and whether the connection ended.
async fn unread_answer(addr: SocketAddr, path: &str, upgrade: bool, stall: Duration) -> usize {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let head = if upgrade {
        format!(
            "GET {path} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
    } else {
        format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n")
    };
    tcp.write_all(head.as_bytes()).await.unwrap();
    tokio::time::sleep(stall).await;
    let mut got = 0;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match within(10, tcp.read(&mut buf)).await {
            Ok(0) | Err(_) => return got,
            Ok(n) => got += n,
        }
    }
}

#[tokio::test]
async fn a_refusal_or_page_never_read_is_cut_at_the_handshake_timeout() {
    let config = crate::support::hub::defaults().engines(Some(1)).config(
        Config::default()
            .handshake_timeout(Some(Duration::from_millis(300)))
            // Keepalive on: it must not apply before an upgrade.
            .ping_interval(Some(Duration::from_millis(50))),
    );
    let mut server = start(config).await;
    for (path, upgrade) in [("/page", false), ("/refuse", true)] {
        let got = unread_answer(server.addr, path, upgrade, Duration::from_millis(1200)).await;
        assert!(
            got < PAGE,
            "{path}: the hub waited for a reader that never came ({got} bytes)"
        );
    }
    // Others are served meanwhile and after.
    let (mut ws, _) = server.connect().await;
    ws.send(Message::text("ok")).await.unwrap();
    assert_eq!(next_msg(&mut ws).await, Message::text("ok"));
}

#[tokio::test]
async fn a_page_read_slowly_carries_no_websocket_frame() {
    let config = crate::support::hub::defaults().engines(Some(1)).config(
        Config::default()
            .handshake_timeout(Some(Duration::from_secs(20)))
            .ping_interval(Some(Duration::from_millis(30))),
    );
    let server = start(config).await;
    let mut tcp = TcpStream::connect(server.addr).await.unwrap();
    tcp.write_all(b"GET /page HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut all = Vec::new();
    within(20, tcp.read_to_end(&mut all)).await.unwrap();
    let body = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head")
        + 4;
    assert_eq!(all.len() - body, PAGE, "the page and nothing after it");
    assert!(all[body..].iter().all(|&b| b == b'p'));
}

#[tokio::test]
async fn handing_over_a_connection_never_waits_behind_handle_traffic() {
    // Ids naming engines 0 and 1 (of another hub: they name nothing in
    // the hub below, but take room in its engines' command queues).
    let mut other = start(crate::support::hub::defaults().engines(Some(2))).await;
    let (_c0, id0) = other.connect().await;
    let (_c1, id1) = other.connect().await;
    assert_eq!((id0.engine(), id1.engine()), (0, 1));

    let (tx, mut opened) = mpsc::unbounded_channel();
    let config = crate::support::hub::defaults()
        .engines(Some(2))
        .handle_capacity(1);
    let hub = Hub::new(Echo { opened: tx }, config).unwrap();
    let handle = hub.handle();
    // Both engines' command queues are full, and stay so: the engines are
    // not running yet.
    handle.try_send(id0, Message::text("queued")).unwrap();
    handle.try_send(id1, Message::text("queued")).unwrap();
    assert_eq!(
        handle.try_send(id0, Message::text("more")),
        Err(HandleError::Full)
    );
    // A connection handed over still goes in at once.
    let (client_io, server_io) = tokio::io::duplex(64 << 10);
    tokio::time::timeout(Duration::from_secs(1), handle.accept(server_io))
        .await
        .expect("handing over does not wait for command room")
        .unwrap();
    tokio::spawn(hub.run());
    let (mut ws, _) = wavesock::client_async("ws://x/", client_io).await.unwrap();
    within(5, opened.recv()).await.unwrap();
    ws.send(Message::text("hi")).await.unwrap();
    assert_eq!(next_msg(&mut ws).await, Message::text("hi"));
}

#[tokio::test]
async fn an_id_of_another_hub_names_no_connection_here() {
    let config = || crate::support::hub::defaults().engines(Some(1));
    let mut one = start(config()).await;
    let mut two = start(config()).await;
    let (mut a, a_id) = one.connect().await;
    let (mut b, b_id) = two.connect().await;
    assert_ne!(a_id, b_id, "ids carry their hub");
    two.handle.send(a_id, Message::text("stray")).await.unwrap();
    two.handle.send(b_id, Message::text("mine")).await.unwrap();
    assert_eq!(next_msg(&mut b).await, Message::text("mine"));
    a.send(Message::text("a")).await.unwrap();
    assert_eq!(next_msg(&mut a).await, Message::text("a"), "nothing stray");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_engine_is_reported_by_serve_and_the_others_shut_down() {
    let config = crate::support::hub::defaults()
        .engines(Some(2))
        .shutdown_timeout(Duration::from_secs(2));
    let mut server = start(config).await;
    let (mut x, _) = server.connect().await;
    let (mut w, w_id) = server.connect().await;
    assert_eq!(w_id.engine(), 1);
    x.send(Message::text("panic")).await.unwrap();
    let result = within(10, &mut server.done).await.unwrap();
    let err = result.expect_err("serve reports the panic");
    assert!(err.to_string().contains("panic"), "{err}");
    // The healthy engine's connection was closed as on a shutdown.
    match next_msg(&mut w).await {
        Message::Close(Some(f)) => assert_eq!(f.code, CloseCode::GOING_AWAY),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn settings_of_duration_max_mean_never_and_do_not_panic() {
    let config = crate::support::hub::defaults()
        .engines(Some(1))
        .shutdown_timeout(Duration::MAX)
        .config(
            Config::default()
                .handshake_timeout(Some(Duration::MAX))
                .ping_interval(Some(Duration::MAX))
                .pong_timeout(Duration::MAX)
                .close_timeout(Duration::MAX),
        );
    let mut server = start(config).await;
    let (mut ws, _) = server.connect().await;
    ws.send(Message::text("x")).await.unwrap();
    assert_eq!(next_msg(&mut ws).await, Message::text("x"));
    server.handle.shutdown().await.unwrap();
    assert!(next_msg(&mut ws).await.is_close());
    drop(ws);
    within(10, server.done).await.unwrap().unwrap();
}
