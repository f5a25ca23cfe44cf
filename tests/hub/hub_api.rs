//! The hub's API as its users reach for it, over real loopback sockets:
//! the peer's address (TCP, handed-over and hyper-adopted transports),
//! connection ids in their text and `u64` forms, the handle from the
//! start and from a callback, `try_close`, what a close from a handler
//! does to the rest of a read and to what was sent or published before
//! it, routes, and the error of a connection cut by shutdown.

use crate::support::raw;

use std::net::SocketAddr;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use wavesock::http::{Request, Response, StatusCode};
use wavesock::hub::{
    Addresses, Closed, ConnId, HandleError, Handler, HttpResponse, Hub, HubConfig, HubHandle,
    HubMessage, PathParams, Query, Router, Ws,
};
use wavesock::{CloseCode, Error, Message, OpCode, PreparedMessage};

use raw::{frame, read_frame, upgrade_raw, within};

/// What the handler saw.
#[derive(Debug)]
enum Ev {
    Upgrade(Option<Addresses>),
    Open(ConnId, Option<SocketAddr>, Option<SocketAddr>),
    Message(ConnId, String),
    Ping,
    Close(ConnId, Option<Error>),
}

/// Echoes as `echo TEXT`, and obeys: `close` (a reply, a publish to
/// `room`, then a close with 4001), `later` (a reply sent from a spawned
/// task through the handle it was made with), `via-ws-handle` (the same
/// through `Ws::handle`). Subscribes every connection to `room`.
#[derive(Clone)]
struct Api {
    ev: mpsc::UnboundedSender<Ev>,
    hub: Option<HubHandle>,
}

impl Handler for Api {
    type Data = ();

    fn upgrade(&mut self, req: &Request<()>, _: &mut Response<()>) -> Result<(), HttpResponse> {
        let addrs = req.extensions().get::<Addresses>().copied();
        let _ = self.ev.send(Ev::Upgrade(addrs));
        Ok(())
    }

    fn open(&mut self, ws: &mut Ws<'_, ()>) {
        ws.subscribe("room");
        let _ = self
            .ev
            .send(Ev::Open(ws.id(), ws.remote_addr(), ws.local_addr()));
    }

    fn message(&mut self, ws: &mut Ws<'_, ()>, msg: HubMessage<'_>) {
        let HubMessage::Text(text) = msg else {
            return;
        };
        let _ = self.ev.send(Ev::Message(ws.id(), text.to_owned()));
        match text {
            "close" => {
                ws.send_text("reply before close").unwrap();
                let line = PreparedMessage::new(&Message::text("published before close")).unwrap();
                ws.registry().publish("room", &line);
                ws.close(CloseCode::from(4001), "bye").unwrap();
                // Closed now: refused, and never on the wire.
                let after = ws.send_text("after close").unwrap();
                assert_eq!(after, wavesock::hub::SendStatus::Closed);
                assert!(ws.is_closing());
            }
            "later" => {
                let (hub, id) = (self.hub.clone().expect("made with a handle"), ws.id());
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    hub.send(id, Message::text("from a task")).await.unwrap();
                });
            }
            "via-ws-handle" => {
                let (hub, id) = (ws.handle().clone(), ws.id());
                tokio::spawn(async move {
                    hub.send(id, Message::text("from Ws::handle"))
                        .await
                        .unwrap();
                });
            }
            _ => {
                ws.send_text(&format!("echo {text}")).unwrap();
            }
        }
    }

    fn ping(&mut self, ws: &mut Ws<'_, ()>, _: &[u8]) {
        let _ = (self.ev.send(Ev::Ping), ws);
    }

    fn close(&mut self, closed: Closed, _: ()) {
        let _ = self.ev.send(Ev::Close(closed.id, closed.error));
    }
}

struct Running {
    handle: HubHandle,
    ev: mpsc::UnboundedReceiver<Ev>,
    addr: SocketAddr,
}

impl Running {
    async fn next(&mut self) -> Ev {
        within(10, self.ev.recv()).await.expect("the hub runs")
    }

    async fn opened(&mut self) -> (ConnId, Option<SocketAddr>, Option<SocketAddr>) {
        loop {
            if let Ev::Open(id, remote, local) = self.next().await {
                return (id, remote, local);
            }
        }
    }

    async fn closed(&mut self) -> (ConnId, Option<Error>) {
        loop {
            if let Ev::Close(id, error) = self.next().await {
                return (id, error);
            }
        }
    }
}

/// A hub with [`Api`] (made with its handle) on a loopback listener, with
/// a registry of topics of its own (the default one is the process's).
async fn start(config: HubConfig) -> Running {
    let config = config.topics(wavesock::topics::Topics::new());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, ev) = mpsc::unbounded_channel();
    let hub = Hub::with_handle(config, |h| Api {
        ev: tx,
        hub: Some(h.clone()),
    })
    .unwrap();
    let handle = hub.handle();
    tokio::spawn(hub.serve(listener));
    Running { handle, ev, addr }
}

async fn next_text<S>(ws: &mut wavesock::WebSocketStream<S>) -> String
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    loop {
        match within(10, ws.next()).await.unwrap().unwrap() {
            Message::Text(t) => return t.as_str().to_owned(),
            Message::Binary(_) => panic!("binary"),
            _ => {}
        }
    }
}

#[tokio::test]
async fn the_peer_address_reaches_upgrade_and_ws_on_tcp() {
    let mut hub = start(crate::support::hub::defaults()).await;
    let tcp = TcpStream::connect(hub.addr).await.unwrap();
    let client_addr = tcp.local_addr().unwrap();
    let (_ws, _) = wavesock::client_async(format!("ws://{}/", hub.addr), tcp)
        .await
        .unwrap();
    let Ev::Upgrade(addrs) = hub.next().await else {
        panic!("upgrade first")
    };
    assert_eq!(
        addrs,
        Some(Addresses::new(Some(client_addr), Some(hub.addr)))
    );
    let (_, remote, local) = hub.opened().await;
    assert_eq!((remote, local), (Some(client_addr), Some(hub.addr)));
}

#[tokio::test]
async fn a_handed_over_transport_carries_the_addresses_it_was_given() {
    let mut hub = start(crate::support::hub::defaults()).await;
    let given = Addresses::new(
        Some("192.0.2.7:4444".parse().unwrap()),
        Some("198.51.100.1:443".parse().unwrap()),
    );
    for (addrs, expect) in [(Some(given), given), (None, Addresses::default())] {
        let (client, server) = tokio::io::duplex(4096);
        match addrs {
            Some(a) => hub.handle.accept_from(server, a).await.unwrap(),
            None => hub.handle.accept(server).await.unwrap(),
        }
        let (_ws, _) = wavesock::client_async("ws://hub.test/", client)
            .await
            .unwrap();
        let seen = loop {
            // The previous connection's close may come first.
            if let Ev::Upgrade(seen) = hub.next().await {
                break seen;
            }
        };
        assert_eq!(seen, Some(expect));
        let (_, remote, local) = hub.opened().await;
        assert_eq!((remote, local), (expect.remote, expect.local));
    }
}

#[tokio::test]
async fn a_connection_adopted_from_hyper_carries_the_address_its_adopter_gives() {
    use http_body_util::Empty;
    use hyper::body::Bytes;
    use hyper_util::rt::TokioIo;
    use wavesock::handshake::server::{accept_response, check_request};

    let (tx, ev) = mpsc::unbounded_channel();
    let config = crate::support::hub::defaults().topics(wavesock::topics::Topics::new());
    let hub = Hub::new(Api { ev: tx, hub: None }, config).unwrap();
    let adopter = hub.adopter();
    let mut hub_ev = Running {
        handle: hub.handle(),
        ev,
        addr: "127.0.0.1:1".parse().unwrap(),
    };
    tokio::spawn(hub.run());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (tcp, peer) = listener.accept().await.unwrap();
        let local = tcp.local_addr().unwrap();
        let service =
            hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
                let adopter = adopter.clone();
                async move {
                    let accept = check_request(&req).unwrap();
                    let on_upgrade = hyper::upgrade::on(&mut req);
                    tokio::spawn(async move {
                        let upgraded = TokioIo::new(on_upgrade.await.unwrap());
                        let addrs = Addresses::new(Some(peer), Some(local));
                        adopter.adopt_from(upgraded, addrs, ()).await.unwrap();
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
    let tcp = TcpStream::connect(addr).await.unwrap();
    let client_addr = tcp.local_addr().unwrap();
    let (mut ws, _) = wavesock::client_async(format!("ws://{addr}/"), tcp)
        .await
        .unwrap();
    let (_, remote, local) = hub_ev.opened().await;
    assert_eq!((remote, local), (Some(client_addr), Some(addr)));
    ws.send(Message::text("adopted")).await.unwrap();
    assert_eq!(next_text(&mut ws).await, "echo adopted");
}

#[tokio::test]
async fn an_id_in_its_text_and_u64_forms_reaches_its_connection() {
    let mut hub = start(crate::support::hub::defaults()).await;
    let mut other = start(crate::support::hub::defaults()).await;
    let (mut ws, _) = wavesock::connect_async(format!("ws://{}/", hub.addr))
        .await
        .unwrap();
    let (id, ..) = hub.opened().await;
    let (_ws2, _) = wavesock::connect_async(format!("ws://{}/", other.addr))
        .await
        .unwrap();
    let (other_id, ..) = other.opened().await;
    // Each hub's ids name its own connections.
    assert_ne!(id.to_string(), other_id.to_string());
    assert_ne!(id.as_u64(), other_id.as_u64());

    let text = id.to_string();
    assert_eq!(text.split('.').count(), 4, "{text}");
    let from_text: ConnId = text.parse().unwrap();
    hub.handle
        .send(from_text, Message::text("by text"))
        .await
        .unwrap();
    assert_eq!(next_text(&mut ws).await, "by text");
    let from_u64 = ConnId::from_u64(id.as_u64());
    hub.handle
        .send(from_u64, Message::text("by u64"))
        .await
        .unwrap();
    assert_eq!(next_text(&mut ws).await, "by u64");
    // The other hub's id, given to this hub, names nothing here.
    hub.handle
        .send(other_id, Message::text("not yours"))
        .await
        .unwrap();
    ws.send(Message::text("ping")).await.unwrap();
    assert_eq!(next_text(&mut ws).await, "echo ping");
}

#[tokio::test]
async fn a_handler_reaches_connections_through_the_handle_it_was_made_with() {
    let hub = start(crate::support::hub::defaults()).await;
    let (mut ws, _) = wavesock::connect_async(format!("ws://{}/", hub.addr))
        .await
        .unwrap();
    ws.send(Message::text("later")).await.unwrap();
    assert_eq!(next_text(&mut ws).await, "from a task");
    ws.send(Message::text("via-ws-handle")).await.unwrap();
    assert_eq!(next_text(&mut ws).await, "from Ws::handle");
}

#[tokio::test]
async fn try_close_closes_by_id_and_says_when_the_queue_is_full() {
    let mut hub = start(crate::support::hub::defaults()).await;
    let (mut ws, _) = wavesock::connect_async(format!("ws://{}/", hub.addr))
        .await
        .unwrap();
    let (id, ..) = hub.opened().await;
    hub.handle
        .try_close(id, CloseCode::POLICY_VIOLATION, "kicked")
        .unwrap();
    let close = loop {
        match within(10, ws.next()).await.unwrap().unwrap() {
            Message::Close(frame) => break frame.unwrap(),
            _ => continue,
        }
    };
    assert_eq!(
        (close.code, close.reason.as_str()),
        (CloseCode::POLICY_VIOLATION, "kicked")
    );
    assert!(within(10, ws.next()).await.is_none());
    let (closed, error) = hub.closed().await;
    assert_eq!(closed, id);
    assert!(error.is_none(), "{error:?}");

    // A hub not yet running takes no commands: its queue fills.
    let (tx, _ev) = mpsc::unbounded_channel();
    let idle = Hub::new(
        Api { ev: tx, hub: None },
        crate::support::hub::defaults().handle_capacity(1),
    )
    .unwrap();
    let handle = idle.handle();
    let any = ConnId::from_u64(0);
    assert_eq!(handle.try_close(any, CloseCode::NORMAL, ""), Ok(()));
    assert_eq!(
        handle.try_close(any, CloseCode::NORMAL, ""),
        Err(HandleError::Full)
    );
    drop(idle);
    assert_eq!(
        handle.try_close(any, CloseCode::NORMAL, ""),
        Err(HandleError::Stopped)
    );
}

#[tokio::test]
async fn a_close_from_a_handler_drops_the_rest_of_the_read_and_writes_what_came_before() {
    let mut hub = start(crate::support::hub::defaults()).await;
    let mut tcp = upgrade_raw(hub.addr).await;
    let (id, ..) = hub.opened().await;
    // One write: the hub reads it whole and handles it in one turn.
    let mut burst = Vec::new();
    for (op, payload) in [
        (OpCode::Text, "first"),
        (OpCode::Text, "close"),
        (OpCode::Text, "after"),
        (OpCode::Ping, "p"),
        (OpCode::Binary, "bin"),
    ] {
        burst.extend(frame(true, op, payload.as_bytes().to_vec()));
    }
    tcp.write_all(&burst).await.unwrap();

    let mut data = Vec::new();
    let close = loop {
        let (op, payload) = read_frame(&mut tcp).await;
        match op {
            0x1 => data.push(String::from_utf8(payload).unwrap()),
            // The core may answer a ping that came before the close frame
            // went out; the handler does not hear of it.
            0xA => {}
            0x8 => break payload,
            other => panic!("opcode {other}"),
        }
    };
    assert_eq!(
        data,
        ["echo first", "reply before close", "published before close"]
    );
    assert_eq!(&close[..2], 4001u16.to_be_bytes());
    assert_eq!(&close[2..], b"bye");
    tcp.write_all(&frame(true, OpCode::Close, close.clone()))
        .await
        .unwrap();
    let (closed, error) = hub.closed().await;
    assert_eq!(closed, id);
    assert!(error.is_none(), "{error:?}");

    // The handler heard the two messages up to its close, nothing after.
    let mut heard = Vec::new();
    while let Ok(ev) = hub.ev.try_recv() {
        heard.push(ev);
    }
    assert!(
        heard.is_empty(),
        "calls after close() or before the close callback: {heard:?}"
    );
}

#[tokio::test]
async fn the_handler_hears_every_message_up_to_its_close_in_order() {
    let mut hub = start(crate::support::hub::defaults()).await;
    let mut tcp = upgrade_raw(hub.addr).await;
    let (id, ..) = hub.opened().await;
    let mut burst = Vec::new();
    for payload in ["one", "two", "close", "three"] {
        burst.extend(frame(true, OpCode::Text, payload.as_bytes().to_vec()));
    }
    burst.extend(frame(true, OpCode::Ping, b"p".to_vec()));
    tcp.write_all(&burst).await.unwrap();
    let mut heard = Vec::new();
    loop {
        match hub.next().await {
            Ev::Message(i, text) => {
                assert_eq!(i, id);
                let done = text == "close";
                heard.push(text);
                if done {
                    break;
                }
            }
            Ev::Ping => panic!("a ping before the close"),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(heard, ["one", "two", "close"]);
    drop(tcp);
    let (closed, _) = hub.closed().await;
    assert_eq!(closed, id);
    if let Ok(ev) = hub.ev.try_recv() {
        panic!("a call after the close: {ev:?}");
    }
}

#[tokio::test]
async fn a_connection_cut_by_shutdown_reports_its_own_error() {
    let config = crate::support::hub::defaults().shutdown_timeout(Duration::from_millis(200));
    let mut hub = start(config).await;
    let mut tcp = upgrade_raw(hub.addr).await;
    let (id, ..) = hub.opened().await;
    hub.handle.shutdown().await.unwrap();
    // The peer reads the server's 1001 and never answers.
    let (op, payload) = read_frame(&mut tcp).await;
    assert_eq!((op, &payload[..2]), (0x8, &1001u16.to_be_bytes()[..]));
    let (closed, error) = hub.closed().await;
    assert_eq!(closed, id);
    assert!(matches!(error, Some(Error::ShutdownTimeout)), "{error:?}");

    // An ordinary close the peer does not answer keeps its own error.
    let config = crate::support::hub::defaults()
        .config(wavesock::Config::default().close_timeout(Duration::from_millis(200)));
    let mut hub = start(config).await;
    let mut tcp = upgrade_raw(hub.addr).await;
    tcp.write_all(&frame(true, OpCode::Text, b"close".to_vec()))
        .await
        .unwrap();
    let (closed_id, error) = hub.closed().await;
    assert!(matches!(error, Some(Error::CloseTimeout)), "{error:?}");
    let _ = closed_id;
    drop(tcp);
}

/// A route's handler with data of its own type: the room from the path,
/// the name from the query; it greets and publishes to the room.
#[derive(Clone)]
struct Room {
    ev: mpsc::UnboundedSender<String>,
}

impl Handler for Room {
    type Data = (String, String);

    fn upgrade(
        &mut self,
        req: &Request<()>,
        _: &mut Response<()>,
    ) -> Result<(String, String), HttpResponse> {
        let room = req.extensions().get::<PathParams>().unwrap().get("room");
        let name = Query::from_request(req).get("name").map(str::to_owned);
        match (room, name) {
            (Some(room), Some(name)) => Ok((room.to_owned(), name)),
            _ => Err(wavesock::hub::respond(StatusCode::BAD_REQUEST, "name?")),
        }
    }

    fn open(&mut self, ws: &mut Ws<'_, (String, String)>) {
        let (room, name) = ws.data().clone();
        ws.send_text(&format!("{name} in {room}")).unwrap();
    }

    fn message(&mut self, ws: &mut Ws<'_, (String, String)>, msg: HubMessage<'_>) {
        let (room, name) = ws.data();
        let line = format!("{name}@{room}: {}", String::from_utf8_lossy(msg.as_bytes()));
        ws.send_text(&line).unwrap();
    }

    fn close(&mut self, _: Closed, (room, name): (String, String)) {
        let _ = self.ev.send(format!("room closed {name}@{room}"));
    }
}

/// Another route's handler, with a number for data.
#[derive(Clone)]
struct Counter {
    ev: mpsc::UnboundedSender<String>,
}

impl Handler for Counter {
    type Data = u32;

    fn upgrade(&mut self, req: &Request<()>, _: &mut Response<()>) -> Result<u32, HttpResponse> {
        let start = req.extensions().get::<PathParams>().unwrap().get("start");
        start
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| wavesock::hub::respond(StatusCode::BAD_REQUEST, "a number"))
    }

    fn message(&mut self, ws: &mut Ws<'_, u32>, _: HubMessage<'_>) {
        *ws.data_mut() += 1;
        let n = *ws.data();
        ws.send_text(&n.to_string()).unwrap();
    }

    fn close(&mut self, _: Closed, n: u32) {
        let _ = self.ev.send(format!("counter closed at {n}"));
    }
}

#[tokio::test]
async fn a_route_table_dispatches_two_paths_with_parameters_to_two_handler_types() {
    let (tx, mut ev) = mpsc::unbounded_channel();
    let router = Router::new()
        .route("/rooms/{room}", Room { ev: tx.clone() })
        .route("/count/{start}", Counter { ev: tx });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hub = Hub::new(router, crate::support::hub::defaults().engines(Some(2))).unwrap();
    tokio::spawn(hub.serve(listener));

    let (mut room, _) = wavesock::connect_async(format!("ws://{addr}/rooms/caf%C3%A9?name=Ann+B"))
        .await
        .unwrap();
    let (mut counter, _) = wavesock::connect_async(format!("ws://{addr}/count/41"))
        .await
        .unwrap();
    assert_eq!(next_text(&mut room).await, "Ann B in café");
    room.send(Message::text("hi")).await.unwrap();
    assert_eq!(next_text(&mut room).await, "Ann B@café: hi");
    counter.send(Message::text("+")).await.unwrap();
    assert_eq!(next_text(&mut counter).await, "42");
    counter.send(Message::text("+")).await.unwrap();
    assert_eq!(next_text(&mut counter).await, "43");

    // A path no route matches, and a route's own refusal.
    for (path, status) in [
        ("/nowhere", StatusCode::NOT_FOUND),
        ("/count/x", StatusCode::BAD_REQUEST),
        ("/rooms/a", StatusCode::BAD_REQUEST),
    ] {
        match wavesock::connect_async(format!("ws://{addr}{path}")).await {
            Err(Error::Handshake(wavesock::HandshakeError::UnexpectedStatus {
                status: s, ..
            })) => {
                assert_eq!(s, status, "{path}")
            }
            other => panic!("{path}: {:?}", other.map(|_| ())),
        }
    }

    counter.close(None).await.unwrap();
    room.close(None).await.unwrap();
    let mut closes = vec![
        within(10, ev.recv()).await.unwrap(),
        within(10, ev.recv()).await.unwrap(),
    ];
    closes.sort();
    assert_eq!(closes, ["counter closed at 43", "room closed Ann B@café"]);
}
