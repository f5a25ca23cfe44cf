//! Topic scripts: clients that subscribe, publish (one message or a burst)
//! and unsubscribe in phases, against a hub under each readiness and each
//! backpressure policy, a hub given connections upgraded elsewhere
//! (adopted), a hub whose handler is a `Router`'s route, and Streams
//! serving `Topics::subscribe`'s receivers; what each client receives is
//! checked against what topics document:
//!
//! - **what is owed**: a subscriber that subscribed in an earlier phase,
//!   and has not unsubscribed, gets every publish of another connection to
//!   its topic, once, and nothing is left out for a subscriber that reads;
//! - **nothing it is not owed**: nothing published before it subscribed
//!   (an earlier phase), nothing after its unsubscribe was answered, and
//!   on a hub nothing it published itself (`Ws::publish` skips the
//!   publisher; a Stream's receiver gets its task's own publishes, as
//!   `Topics::publish` reaches every receiver);
//! - **one order per topic**: each publisher's publishes in the order it
//!   made them, and any two subscribers of a topic see the publishes both
//!   got in the same order;
//! - **no subscriber that reads is closed**, and each connection ends
//!   once, with the close it asked for;
//! - **subscriptions end with their connections**: once every connection
//!   ended, the server's registry holds no topic.
//!
//! Within one phase, whether a publish of one client reaches another that
//! subscribes or unsubscribes in the same phase is a race: either is
//! allowed, and only the order is checked. Phases are separated by the
//! server's answers: each client's `sync` is answered after everything it
//! sent before it, and a phase ends once every client is answered and has
//! what it is owed.
//!
//! A third of the scripts publish bursts large enough to pass half of a
//! hub engine's (small) inbox, and past all of it: they check "a fast
//! publisher is slowed, never its neighbours punished" (a hub connection
//! that publishes a burst has its reads paused while inboxes are past
//! half their bound, and no subscriber that reads is closed for it).
//! `HARNESS_TOPIC_BURSTS=1` makes every script one.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use proptest::prelude::*;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use wavesock::hub::{
    BackpressurePolicy, Closed, Handler, Hub, HubConfig, HubHandle, HubMessage, Readiness, Router,
    Ws,
};
use wavesock::topics::{Topics, TopicsConfig};
use wavesock::{CloseCode, CloseFrame, Config, Message, PreparedMessage};

/// How long a client waits for what it is owed before the script fails.
const BOUND: Duration = Duration::from_secs(10);

/// The topics scripts use.
const TOPICS: [&str; 2] = ["a", "b"];

/// A hub engine's inbox when bursts are generated: small, so that a burst
/// passes half of it.
const SMALL_INBOX: usize = 64;

/// The most publishes a script makes: three clients, four phases of four
/// acts of up to 400.
const SCRIPT_PUBLISHES_MAX: usize = 3 * 4 * 4 * 400;

/// A hub engine's inbox otherwise: room for the most a phase publishes
/// (three clients, four acts of twelve: 144), and small enough that a
/// script's publishes together pass it, so that room not given back as
/// publishes are delivered shows.
const INBOX: usize = 160;

/// Whether every script is a burst script (see the module's docs).
pub fn bursts() -> bool {
    std::env::var("HARNESS_TOPIC_BURSTS").is_ok_and(|v| v == "1")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    Sub(u8),
    Unsub(u8),
    /// `count` publishes of `size` bytes to topic `.0`, back to back.
    Pub(u8, u16, u16),
}

#[derive(Debug, Clone)]
pub struct TopicScript {
    pub policy: Policy,
    pub burst: bool,
    /// By client, by phase: what it sends.
    pub clients: Vec<Vec<Vec<Act>>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Close,
    Drop,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicEngine {
    Stream,
    Hub,
    HubTokio,
    /// The hub, given each connection upgraded elsewhere
    /// (`Adopter::adopt`).
    HubAdopted,
    /// The hub with a `Router`: the topic handler behind a route with a
    /// parameter, beside another route.
    HubRouted,
}

pub const TOPIC_ENGINES: [TopicEngine; 5] = [
    TopicEngine::Stream,
    TopicEngine::Hub,
    TopicEngine::HubTokio,
    TopicEngine::HubAdopted,
    TopicEngine::HubRouted,
];

fn act(burst: bool) -> impl Strategy<Value = Act> {
    let most: u16 = if burst { 400 } else { 12 };
    prop_oneof![
        3 => (0u8..2).prop_map(Act::Sub),
        1 => (0u8..2).prop_map(Act::Unsub),
        4 => (0u8..2, 1u16..=most, prop_oneof![3 => 8u16..64, 1 => 64u16..2000])
            .prop_map(|(t, n, s)| Act::Pub(t, n, s)),
    ]
}

/// Two or three clients, two to four phases, up to four acts a phase.
pub fn topic_script() -> impl Strategy<Value = TopicScript> {
    let all = bursts();
    (
        2usize..=3,
        2usize..=4,
        any::<bool>(),
        prop::bool::weighted(if all { 1.0 } else { 1.0 / 3.0 }),
    )
        .prop_flat_map(move |(n, phases, close, burst)| {
            let client = prop::collection::vec(prop::collection::vec(act(burst), 0..4), phases);
            prop::collection::vec(client, n).prop_map(move |clients| TopicScript {
                policy: if close { Policy::Close } else { Policy::Drop },
                burst,
                clients,
            })
        })
}

/// The payload of publish `k` of client `c`'s act `a` in phase `p`, to
/// `topic`: it names itself, padded to `size`.
fn payload(topic: u8, c: usize, p: usize, a: usize, k: u16, size: u16) -> String {
    let mut s = format!("{}|{c}|{p}|{a}|{k}|", TOPICS[usize::from(topic)]);
    while s.len() < usize::from(size) {
        s.push('.');
    }
    s
}

/// A publish, as named by its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Pubd {
    topic: u8,
    client: usize,
    phase: usize,
    act: usize,
    k: u16,
}

fn parse(s: &str) -> Option<Pubd> {
    let mut f = s.split('|');
    let name = f.next()?;
    let topic = TOPICS.iter().position(|t| *t == name)? as u8;
    Some(Pubd {
        topic,
        client: f.next()?.parse().ok()?,
        phase: f.next()?.parse().ok()?,
        act: f.next()?.parse().ok()?,
        k: f.next()?.parse().ok()?,
    })
}

/// Whether subscriber `s` is owed (`Some(true)`), may get
/// (`Some(false)`) or must not get (`None`) publish `d`.
fn owed(script: &TopicScript, self_delivery: bool, s: usize, d: &Pubd) -> Option<bool> {
    // Its subscription before the phase of `d`, and in that phase up to
    // its act (for its own publishes, which its acts order).
    let mut subscribed = false;
    for (p, acts) in script.clients[s].iter().enumerate() {
        let mut racy = false;
        for (a, act) in acts.iter().enumerate() {
            if p == d.phase && s == d.client && a == d.act {
                if !(subscribed && self_delivery) {
                    return None;
                }
                // A Stream's receiver dropped later in the phase takes
                // what it had not handed on yet with it.
                let dropped = acts[a..].contains(&Act::Unsub(d.topic));
                return Some(!dropped);
            }
            match *act {
                Act::Sub(t) if t == d.topic => {
                    subscribed = true;
                    racy = true;
                }
                Act::Unsub(t) if t == d.topic => {
                    subscribed = false;
                    racy = true;
                }
                _ => {}
            }
        }
        if p == d.phase {
            // Another client's publish in this phase: a race with the
            // changes this subscriber made in it.
            return match (racy, subscribed) {
                (true, _) => Some(false),
                (false, true) => Some(true),
                (false, false) => None,
            };
        }
    }
    None
}

// ------------------------------------------------------------------------
// The servers.

/// Each connection's end, as its server reported it: the client named in
/// the request path, and the error it ended with, if one.
type Ends = Arc<Mutex<Vec<(Option<usize>, Option<String>)>>>;

fn client_of(path: &str) -> Option<usize> {
    path.strip_prefix("/t")?.parse().ok()
}

#[derive(Clone)]
struct TopicHub(Ends);

impl Handler for TopicHub {
    type Data = Option<usize>;

    fn upgrade(
        &mut self,
        request: &wavesock::http::Request<()>,
        _: &mut wavesock::http::Response<()>,
    ) -> Result<Option<usize>, wavesock::hub::HttpResponse> {
        Ok(client_of(request.uri().path()))
    }

    fn message(&mut self, ws: &mut Ws<'_, Option<usize>>, msg: HubMessage<'_>) {
        let HubMessage::Text(t) = msg else { return };
        match command(t) {
            Some(Command::Sub(topic)) => {
                ws.subscribe(topic);
                let _ = ws.send_text("ok");
            }
            Some(Command::Unsub(topic)) => {
                ws.unsubscribe(topic);
                let _ = ws.send_text("ok");
            }
            Some(Command::Pub(topic, payload)) => {
                ws.publish(topic, HubMessage::Text(payload));
            }
            Some(Command::Sync) => {
                let _ = ws.send_text("ok sync");
            }
            None => {}
        }
    }

    fn close(&mut self, closed: Closed, id: Option<usize>) {
        let e = closed.error.map(|e| e.to_string());
        self.0.lock().unwrap().push((id, e));
    }
}

enum Command<'a> {
    Sub(&'a str),
    Unsub(&'a str),
    Pub(&'a str, &'a str),
    Sync,
}

fn command(t: &str) -> Option<Command<'_>> {
    if t == "sync" {
        return Some(Command::Sync);
    }
    let (verb, rest) = t.split_once(' ')?;
    match verb {
        "sub" => Some(Command::Sub(rest)),
        "unsub" => Some(Command::Unsub(rest)),
        "pub" => {
            let topic = rest.split('|').next()?;
            Some(Command::Pub(topic, rest))
        }
        _ => None,
    }
}

/// A Stream's connection: commands as the hub's handler takes them, each
/// subscription a `TopicReceiver` whose task forwards what it receives
/// to the connection's.
async fn serve_stream(
    ws: wavesock::WebSocketStream<tokio::net::TcpStream>,
    topics: Topics,
) -> Option<String> {
    let (mut tx, mut rx) = ws.split();
    let (deliver, mut delivered) = mpsc::unbounded_channel::<Message>();
    let mut subs: HashMap<String, tokio::task::JoinHandle<()>> = HashMap::new();
    let end = loop {
        tokio::select! {
            biased;
            msg = rx.next() => {
                let t = match msg {
                    None => break None,
                    Some(Err(e)) => break Some(e.to_string()),
                    Some(Ok(Message::Text(t))) => t,
                    Some(Ok(_)) => continue,
                };
                let reply = match command(t.as_str()) {
                    Some(Command::Sub(topic)) => {
                        if !subs.contains_key(topic) {
                            let mut r = topics.subscribe(topic);
                            let d = deliver.clone();
                            subs.insert(topic.to_owned(), tokio::spawn(async move {
                                loop {
                                    let m = match r.recv().await {
                                        Ok(m) => Message::text(
                                            String::from_utf8_lossy(m.payload()).into_owned(),
                                        ),
                                        Err(e) => Message::text(format!("lagged {e}")),
                                    };
                                    if d.send(m).is_err() {
                                        return;
                                    }
                                }
                            }));
                        }
                        Some("ok")
                    }
                    Some(Command::Unsub(topic)) => {
                        // Its receiver dropped before the answer: nothing
                        // it would get after reaches the connection.
                        if let Some(task) = subs.remove(topic) {
                            task.abort();
                            let _ = task.await;
                        }
                        Some("ok")
                    }
                    Some(Command::Pub(topic, payload)) => {
                        let m = PreparedMessage::new(&Message::text(payload.to_owned())).unwrap();
                        topics.publish(topic, &m);
                        None
                    }
                    Some(Command::Sync) => Some("ok sync"),
                    None => None,
                };
                if let Some(r) = reply {
                    if let Err(e) = tx.send(Message::text(r)).await {
                        break Some(e.to_string());
                    }
                }
            }
            Some(m) = delivered.recv() => {
                if let Err(e) = tx.send(m).await {
                    break Some(e.to_string());
                }
            }
        }
    };
    for (_, task) in subs.drain() {
        task.abort();
    }
    end
}

struct Server {
    addr: SocketAddr,
    ends: Ends,
    /// The server's registry, to see that subscriptions end with their
    /// connections.
    topics: Topics,
    running: Running,
}

enum Running {
    Stream(JoinSet<()>, Arc<Mutex<JoinSet<()>>>),
    Hub(HubHandle, tokio::task::JoinHandle<wavesock::Result<()>>),
    Adopted(HubHandle, tokio::task::JoinHandle<()>, JoinSet<()>),
}

/// The upgrade done by hand, as a server beside the hub would do it: the
/// request's head read (the client sends nothing more before the answer),
/// the `101` written; the client the path names.
async fn upgrade_by_hand(tcp: &mut tokio::net::TcpStream) -> Option<usize> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.ends_with(b"\r\n\r\n") {
        let n = tcp.read(&mut buf).await.ok()?;
        if n == 0 || head.len() > 16 << 10 {
            return None;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8(head).ok()?;
    let path = head.lines().next()?.split(' ').nth(1)?;
    let key = head.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("sec-websocket-key")
            .then(|| value.trim().to_owned())
    })?;
    let accept = wavesock::handshake::derive_accept_key(key.as_bytes());
    let answer = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: {accept}\r\n\r\n"
    );
    tcp.write_all(answer.as_bytes()).await.ok()?;
    client_of(path)
}

async fn start(engine: TopicEngine, script: &TopicScript) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let ends = Ends::default();
    // A Stream's receiver more than `stream_capacity` behind skips ahead
    // (documented, and tested in tests/hub/topics.rs): its ring here holds
    // every publish a script can make, so that the rule the scripts check
    // is exact delivery, whatever the scheduling.
    let config = TopicsConfig::default()
        .inbox_capacity(if script.burst { SMALL_INBOX } else { INBOX })
        .stream_capacity(SCRIPT_PUBLISHES_MAX);
    // A registry of its own: nothing of another script or test reaches it.
    let topics = Topics::with_config(config);
    let registry = topics.clone();
    let running = match engine {
        TopicEngine::HubRouted => {
            let policy = match script.policy {
                Policy::Close => BackpressurePolicy::Close,
                Policy::Drop => BackpressurePolicy::Drop,
            };
            let hub_config = HubConfig::default()
                .engines(Some(2))
                .backpressure_policy(policy)
                .topics(topics)
                .config(Config::default());
            // Another route first, with a static segment: the router must
            // still find the topic handler's for `/t{client}`.
            let router = Router::new()
                .route("/other/{name}", TopicHub(Ends::default()))
                .route("/{client}", TopicHub(ends.clone()));
            let hub = Hub::new(router, hub_config).unwrap();
            let handle = hub.handle();
            Running::Hub(handle, tokio::spawn(hub.serve(listener)))
        }
        TopicEngine::Hub | TopicEngine::HubTokio => {
            let readiness = if engine == TopicEngine::Hub {
                Readiness::Owned
            } else {
                Readiness::Tokio
            };
            let policy = match script.policy {
                Policy::Close => BackpressurePolicy::Close,
                Policy::Drop => BackpressurePolicy::Drop,
            };
            let hub_config = HubConfig::default()
                .engines(Some(2))
                .readiness(readiness)
                .backpressure_policy(policy)
                .topics(topics)
                .config(Config::default());
            let hub = Hub::new(TopicHub(ends.clone()), hub_config).unwrap();
            let handle = hub.handle();
            Running::Hub(handle, tokio::spawn(hub.serve(listener)))
        }
        TopicEngine::HubAdopted => {
            let policy = match script.policy {
                Policy::Close => BackpressurePolicy::Close,
                Policy::Drop => BackpressurePolicy::Drop,
            };
            let hub_config = HubConfig::default()
                .engines(Some(2))
                .backpressure_policy(policy)
                .topics(topics)
                .config(Config::default());
            let hub = Hub::new(TopicHub(ends.clone()), hub_config).unwrap();
            let handle = hub.handle();
            let adopter = hub.adopter();
            let mut acceptor = JoinSet::new();
            acceptor.spawn(async move {
                loop {
                    let Ok((mut tcp, _)) = listener.accept().await else {
                        continue;
                    };
                    let _ = tcp.set_nodelay(true);
                    let adopter = adopter.clone();
                    tokio::spawn(async move {
                        if let Some(id) = upgrade_by_hand(&mut tcp).await {
                            let _ = adopter.adopt(tcp, Some(id)).await;
                        }
                    });
                }
            });
            Running::Adopted(handle, tokio::spawn(hub.run()), acceptor)
        }
        TopicEngine::Stream => {
            let conns = Arc::new(Mutex::new(JoinSet::new()));
            let mut acceptor = JoinSet::new();
            let (e, c) = (ends.clone(), conns.clone());
            acceptor.spawn(async move {
                loop {
                    let Ok((tcp, _)) = listener.accept().await else {
                        continue;
                    };
                    let _ = tcp.set_nodelay(true);
                    let (ends, topics) = (e.clone(), topics.clone());
                    c.lock().unwrap().spawn(async move {
                        let id = Arc::new(Mutex::new(None));
                        let named = id.clone();
                        #[allow(clippy::result_large_err)]
                        let callback = move |req: &wavesock::handshake::server::Request,
                                             resp: wavesock::handshake::server::Response| {
                            *named.lock().unwrap() = client_of(req.uri().path());
                            Ok(resp)
                        };
                        let Ok(ws) = wavesock::accept_hdr_async(tcp, callback).await else {
                            return;
                        };
                        let end = serve_stream(ws, topics).await;
                        let id = *id.lock().unwrap();
                        ends.lock().unwrap().push((id, end));
                    });
                }
            });
            Running::Stream(acceptor, conns)
        }
    };
    Server {
        addr,
        ends,
        topics: registry,
        running,
    }
}

impl Server {
    async fn stop(self) -> Result<(), String> {
        match self.running {
            Running::Adopted(handle, serve, mut acceptor) => {
                acceptor.abort_all();
                while acceptor.join_next().await.is_some() {}
                let _ = handle.shutdown().await;
                match tokio::time::timeout(Duration::from_secs(10), serve).await {
                    Err(_) => Err("the hub did not stop after shutdown".into()),
                    Ok(Err(e)) => Err(format!("the hub's task failed: {e}")),
                    Ok(Ok(())) => Ok(()),
                }
            }
            Running::Hub(handle, serve) => {
                let _ = handle.shutdown().await;
                match tokio::time::timeout(Duration::from_secs(10), serve).await {
                    Err(_) => Err("the hub did not stop after shutdown".into()),
                    Ok(Err(e)) => Err(format!("the hub's task failed: {e}")),
                    Ok(Ok(Err(e))) => Err(format!("the hub failed: {e}")),
                    Ok(Ok(Ok(()))) => Ok(()),
                }
            }
            Running::Stream(mut acceptor, conns) => {
                acceptor.abort_all();
                while acceptor.join_next().await.is_some() {}
                let mut conns = std::mem::take(&mut *conns.lock().unwrap());
                conns.abort_all();
                let mut panicked = None;
                while let Some(r) = conns.join_next().await {
                    if let Err(e) = r {
                        if e.is_panic() {
                            panicked = Some(format!("a connection's task panicked: {e}"));
                        }
                    }
                }
                panicked.map_or(Ok(()), Err)
            }
        }
    }
}

// ------------------------------------------------------------------------
// The clients.

type Io = wavesock::MaybeTlsStream<tokio::net::TcpStream>;
type Tx = wavesock::WebSocketSender<Io>;
type Rx = wavesock::WebSocketReceiver<Io>;

/// What one client received: the publishes, in order, and what went
/// wrong.
#[derive(Debug, Default)]
struct Got {
    deliveries: Vec<Pubd>,
    problems: Vec<String>,
    /// The server's close frame, if one came before the client's own
    /// close was answered.
    closed_by_server: Option<String>,
}

/// Reads until `done` says so (given what arrived), or `BOUND`: false on
/// the bound, the end or a close from the server.
async fn read_until(
    ws: &mut Rx,
    got: &mut Got,
    mut syncs: usize,
    mut done: impl FnMut(&Got, usize) -> bool,
) -> bool {
    let deadline = Instant::now() + BOUND;
    while !done(got, syncs) {
        let Ok(msg) = tokio::time::timeout_at(deadline.into(), ws.next()).await else {
            return false;
        };
        match msg {
            Some(Ok(Message::Text(t))) => {
                let t = t.as_str();
                if t == "ok sync" {
                    syncs += 1;
                } else if t == "ok" {
                } else if let Some(d) = parse(t) {
                    got.deliveries.push(d);
                } else {
                    got.problems.push(format!("an unknown message {t:?}"));
                }
            }
            Some(Ok(Message::Close(frame))) => {
                got.closed_by_server = Some(format!("{frame:?}"));
                return false;
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                got.problems.push(format!("read: {e}"));
                return false;
            }
            None => {
                got.problems.push("the connection ended".into());
                return false;
            }
        }
    }
    true
}

/// The publishes client `s` is owed in phases up to `phase`.
fn owed_count(script: &TopicScript, self_delivery: bool, s: usize, phase: usize) -> usize {
    let mut n = 0;
    for (c, phases) in script.clients.iter().enumerate() {
        for (p, acts) in phases.iter().enumerate().take(phase + 1) {
            for (a, act) in acts.iter().enumerate() {
                if let Act::Pub(topic, count, _) = *act {
                    let d = Pubd {
                        topic,
                        client: c,
                        phase: p,
                        act: a,
                        k: 0,
                    };
                    if owed(script, self_delivery, s, &d) == Some(true) {
                        n += usize::from(count);
                    }
                }
            }
        }
    }
    n
}

/// Runs `script` against `engine`: what each client got, and the
/// problems found on the way.
async fn run_engine(engine: TopicEngine, script: &TopicScript) -> (Vec<Got>, Vec<String>) {
    let server = start(engine, script).await;
    let self_delivery = engine == TopicEngine::Stream;
    let mut problems = Vec::new();
    let mut wss: Vec<(Tx, Rx)> = Vec::new();
    for c in 0..script.clients.len() {
        let url = format!("ws://{}/t{c}", server.addr);
        match wavesock::connect_async(url).await {
            Ok((ws, _)) => wss.push(ws.split()),
            Err(e) => {
                problems.push(format!("client {c} could not connect: {e}"));
                let _ = server.stop().await;
                return (Vec::new(), problems);
            }
        }
    }
    let mut gots: Vec<Got> = (0..wss.len()).map(|_| Got::default()).collect();
    let phases = script.clients[0].len();
    let mut broken = false;
    for p in 0..phases {
        // Every client sends its acts and a `sync` while it reads, until
        // the `sync` is answered: all at once.
        let sent =
            futures_util::future::join_all(wss.iter_mut().zip(gots.iter_mut()).enumerate().map(
                |(c, ((tx, rx), got))| async move {
                    let send = async {
                        for (a, act) in script.clients[c][p].iter().enumerate() {
                            let texts: Vec<String> = match *act {
                                Act::Sub(t) => vec![format!("sub {}", TOPICS[usize::from(t)])],
                                Act::Unsub(t) => {
                                    vec![format!("unsub {}", TOPICS[usize::from(t)])]
                                }
                                Act::Pub(t, n, size) => (0..n)
                                    .map(|k| format!("pub {}", payload(t, c, p, a, k, size)))
                                    .collect(),
                            };
                            for t in texts {
                                tx.feed(Message::text(t)).await?;
                            }
                        }
                        tx.send(Message::text("sync")).await
                    };
                    let (sent, read) =
                        futures_util::join!(send, read_until(rx, got, 0, |_, syncs| syncs == 1));
                    if let Err(e) = sent {
                        got.problems.push(format!("phase {p}: send: {e}"));
                    }
                    read
                },
            ))
            .await;
        if sent.iter().any(|ok| !ok) {
            problems.push(format!("phase {p}: a client was not answered"));
            broken = true;
            break;
        }
        // Then until each has what it is owed so far.
        let owed_ok =
            futures_util::future::join_all(wss.iter_mut().zip(gots.iter_mut()).enumerate().map(
                |(c, ((_, rx), got))| async move {
                    let want = owed_count(script, self_delivery, c, p);
                    read_until(rx, got, 0, |g, _| {
                        g.deliveries
                            .iter()
                            .filter(|d| owed(script, self_delivery, c, d) == Some(true))
                            .count()
                            >= want
                    })
                    .await
                },
            ))
            .await;
        if owed_ok.iter().any(|ok| !ok) {
            problems.push(format!("phase {p}: a client never got what it is owed"));
            broken = true;
            break;
        }
    }
    // Each client closes, and reads the rest up to the answer.
    for (c, ((tx, rx), got)) in wss.iter_mut().zip(gots.iter_mut()).enumerate() {
        if broken {
            break;
        }
        let bye = CloseFrame::new(CloseCode::NORMAL, "bye");
        if let Err(e) = tx.send(Message::Close(Some(bye))).await {
            problems.push(format!("client {c}: close: {e}"));
            continue;
        }
        loop {
            match tokio::time::timeout(BOUND, rx.next()).await {
                Err(_) => {
                    problems.push(format!("client {c}: no answer to its close"));
                    break;
                }
                Ok(Some(Ok(Message::Text(t)))) => {
                    if let Some(d) = parse(t.as_str()) {
                        got.deliveries.push(d);
                    }
                }
                Ok(Some(Ok(Message::Close(_)))) | Ok(None) => break,
                Ok(Some(Ok(_))) => {}
                Ok(Some(Err(e))) => {
                    problems.push(format!("client {c}: after its close: {e}"));
                    break;
                }
            }
        }
    }
    drop(wss);
    // Every connection ends once, and cleanly.
    let n = script.clients.len();
    let deadline = Instant::now() + BOUND;
    while server.ends.lock().unwrap().len() < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    if !broken {
        let ends = server.ends.lock().unwrap().clone();
        let mut seen = HashSet::new();
        for (id, e) in &ends {
            match id {
                Some(id) if seen.insert(*id) => {}
                _ => problems.push(format!(
                    "an end for client {id:?} reported twice or unnamed"
                )),
            }
            if let Some(e) = e {
                problems.push(format!("client {id:?}'s connection ended with: {e}"));
            }
        }
        if ends.len() != n {
            problems.push(format!("{} ends reported for {n} connections", ends.len()));
        }
    }
    // Subscriptions end with their connections: with every connection
    // gone and the server still running, its registry holds no topic.
    if !broken {
        let deadline = Instant::now() + BOUND;
        while !server.topics.names().is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let left = server.topics.names();
        if !left.is_empty() {
            problems.push(format!(
                "topics still subscribed to once every connection ended: {left:?}"
            ));
        }
    }
    if let Err(e) = server.stop().await {
        problems.push(e);
    }
    (gots, problems)
}

/// Checks what each client got against the model, and the subscribers of
/// a topic against each other.
fn check(script: &TopicScript, self_delivery: bool, gots: &[Got]) -> Vec<String> {
    let mut bad = Vec::new();
    for (s, got) in gots.iter().enumerate() {
        for p in &got.problems {
            bad.push(format!("client {s}: {p}"));
        }
        if let Some(c) = &got.closed_by_server {
            bad.push(format!("client {s}, which reads, was closed: {c}"));
        }
        let mut once = HashSet::new();
        let mut last: HashMap<(u8, usize), (usize, usize, u16)> = HashMap::new();
        for d in &got.deliveries {
            if !once.insert(*d) {
                bad.push(format!("client {s}: {d:?} twice"));
            }
            if owed(script, self_delivery, s, d).is_none() {
                bad.push(format!("client {s}: {d:?}, which it is not owed"));
            }
            let at = (d.phase, d.act, d.k);
            if let Some(prev) = last.insert((d.topic, d.client), at) {
                if prev > at {
                    bad.push(format!("client {s}: {d:?} after {prev:?} of its publisher"));
                }
            }
        }
        let owed_all = owed_count(script, self_delivery, s, usize::MAX - 1);
        let got_owed = got
            .deliveries
            .iter()
            .filter(|d| owed(script, self_delivery, s, d) == Some(true))
            .count();
        if got_owed != owed_all {
            bad.push(format!(
                "client {s}: {got_owed} of the {owed_all} publishes it is owed"
            ));
        }
    }
    // One order per topic: the publishes two subscribers both got come in
    // the same order to each.
    for a in 0..gots.len() {
        for b in a + 1..gots.len() {
            let in_b: HashSet<&Pubd> = gots[b].deliveries.iter().collect();
            let in_a: HashSet<&Pubd> = gots[a].deliveries.iter().collect();
            for topic in 0..TOPICS.len() as u8 {
                let common_a: Vec<&Pubd> = gots[a]
                    .deliveries
                    .iter()
                    .filter(|d| d.topic == topic && in_b.contains(d))
                    .collect();
                let common_b: Vec<&Pubd> = gots[b]
                    .deliveries
                    .iter()
                    .filter(|d| d.topic == topic && in_a.contains(d))
                    .collect();
                if common_a != common_b {
                    bad.push(format!(
                        "clients {a} and {b} got topic {} in different orders",
                        TOPICS[usize::from(topic)]
                    ));
                }
            }
        }
    }
    bad
}

/// Runs `script` on every engine at once, and checks it all.
pub async fn run_script(script: &TopicScript) -> Result<(), String> {
    let runs = futures_util::future::join_all(TOPIC_ENGINES.iter().map(|&e| async move {
        match tokio::time::timeout(Duration::from_secs(60), run_engine(e, script)).await {
            Ok(r) => (e, r),
            Err(_) => (
                e,
                (
                    Vec::new(),
                    vec!["the script did not finish within 60 s".into()],
                ),
            ),
        }
    }))
    .await;
    let mut findings = Vec::new();
    for (engine, (gots, problems)) in &runs {
        for p in problems {
            findings.push(format!("{engine:?}: {p}"));
        }
        for f in check(script, *engine == TopicEngine::Stream, gots) {
            findings.push(format!("{engine:?}: {f}"));
        }
    }
    if findings.is_empty() {
        Ok(())
    } else {
        Err(findings.join("\n"))
    }
}
