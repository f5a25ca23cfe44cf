//! The echo server on each engine, and what each reports: the connections
//! it opened and how each ended, by the client named in the request path.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use wavesock::hub::{Closed, Handler, Hub, HubConfig, HubHandle, HubMessage, Readiness, Ws};
use wavesock::{CloseCode, CloseFrame, Config, MemoryBudget, Message};

use super::reference::{OURS_CODE, OURS_REASON};
use super::script::{Budget, Deflate, MAX_FRAME, MAX_MESSAGE, Setup};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Engine {
    Stream,
    Split,
    /// The hub with its own poller.
    Hub,
    /// The hub with a Tokio registration per socket.
    HubTokio,
}

pub const ENGINES: [Engine; 4] = [Engine::Stream, Engine::Split, Engine::Hub, Engine::HubTokio];

/// How a server connection ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndClass {
    /// A closing handshake.
    Clean,
    /// An error the peer's data caused, with the close code sent for it.
    Code(u16),
    /// The transport failed or ended without a close frame.
    Io,
    /// Anything else: its text.
    Other(String),
}

impl EndClass {
    fn of(e: Option<&wavesock::Error>) -> EndClass {
        match e {
            None => EndClass::Clean,
            Some(e) => match e.close_code() {
                Some(c) => EndClass::Code(c.into()),
                None if matches!(e, wavesock::Error::Io(_)) => EndClass::Io,
                None => EndClass::Other(e.to_string()),
            },
        }
    }
}

#[derive(Debug, Default)]
pub struct Reports {
    /// Connections opened, by client.
    pub opened: HashMap<u32, usize>,
    /// Their ends, by client, in the order reported.
    pub ended: HashMap<u32, Vec<EndClass>>,
    /// Reports that make no sense: an open with no client named.
    pub strays: Vec<String>,
}

pub type Shared = Arc<Mutex<Reports>>;

/// The client a request path (`/c3`) names.
fn client_of(path: &str) -> Option<u32> {
    path.strip_prefix("/c")?.parse().ok()
}

fn opened(reports: &Shared, id: Option<u32>) {
    let mut r = reports.lock().unwrap();
    match id {
        Some(id) => *r.opened.entry(id).or_default() += 1,
        None => r
            .strays
            .push("opened a connection no client asked for".into()),
    }
}

fn ended(reports: &Shared, id: Option<u32>, end: EndClass) {
    let mut r = reports.lock().unwrap();
    match id {
        Some(id) => r.ended.entry(id).or_default().push(end),
        None => r
            .strays
            .push(format!("ended a connection of no client: {end:?}")),
    }
}

pub fn config(setup: &Setup) -> (Config, Option<MemoryBudget>) {
    let budget = match setup.budget {
        Budget::None => None,
        Budget::Counted => Some(MemoryBudget::new(8 << 20).allowance(0)),
        Budget::Allowance => Some(MemoryBudget::new(8 << 20)),
    };
    let mut config = Config::default()
        .max_frame_size(MAX_FRAME)
        .max_message_size(MAX_MESSAGE)
        .handshake_timeout(Some(Duration::from_secs(5)));
    if let Some(b) = &budget {
        config = config.memory_budget(b.clone());
    }
    let policy = match setup.deflate {
        Deflate::Off => None,
        Deflate::Takeover => Some(wavesock::DeflatePolicy::Takeover),
        Deflate::Shared => Some(wavesock::DeflatePolicy::Shared),
        Deflate::Dedicated => Some(wavesock::DeflatePolicy::Dedicated(4096)),
    };
    if let Some(p) = policy {
        config = config.deflate(wavesock::DeflateConfig::default().policy(p));
    }
    (config, budget)
}

/// A running server.
pub struct Server {
    pub engine: Engine,
    pub addr: SocketAddr,
    pub reports: Shared,
    pub budget: Option<MemoryBudget>,
    running: Running,
}

enum Running {
    Stream(JoinSet<()>, Arc<Mutex<JoinSet<()>>>),
    Hub(HubHandle, tokio::task::JoinHandle<wavesock::Result<()>>),
}

#[derive(Clone)]
struct HubEcho(Shared);

impl Handler for HubEcho {
    type Data = Option<u32>;

    fn upgrade(
        &mut self,
        request: &wavesock::http::Request<()>,
        _: &mut wavesock::http::Response<()>,
    ) -> Result<Option<u32>, wavesock::hub::HttpResponse> {
        Ok(client_of(request.uri().path()))
    }

    fn open(&mut self, ws: &mut Ws<'_, Option<u32>>) {
        opened(&self.0, *ws.data());
    }

    fn message(&mut self, ws: &mut Ws<'_, Option<u32>>, msg: HubMessage<'_>) {
        if msg == HubMessage::Text("close") {
            let reason = std::str::from_utf8(OURS_REASON).unwrap();
            ws.close(CloseCode::from(OURS_CODE), reason).unwrap();
            return;
        }
        let _ = ws.send_borrowed(msg);
    }

    fn close(&mut self, closed: Closed, id: Option<u32>) {
        ended(&self.0, id, EndClass::of(closed.error.as_ref()));
    }
}

fn ours() -> Message {
    let reason = std::str::from_utf8(OURS_REASON).unwrap();
    Message::Close(Some(CloseFrame::new(CloseCode::from(OURS_CODE), reason)))
}

/// The Stream's echo: each data message back, our close on `close`, and
/// nothing sent after it (the sends would be refused).
async fn serve_stream<S>(mut ws: wavesock::WebSocketStream<S>) -> EndClass
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut closing = false;
    while let Some(msg) = ws.next().await {
        match msg {
            Ok(Message::Text(t)) if t.as_str() == "close" && !closing => {
                closing = true;
                if let Err(e) = ws.send(ours()).await {
                    return EndClass::of(Some(&e));
                }
            }
            Ok(m) if m.is_data() && !closing => {
                if let Err(e) = ws.send(m).await {
                    return EndClass::of(Some(&e));
                }
            }
            Ok(_) => {}
            Err(e) => return EndClass::of(Some(&e)),
        }
    }
    EndClass::Clean
}

/// The same echo with the halves in two tasks: the receiver queues what
/// the sending task sends.
async fn serve_split<S>(ws: wavesock::WebSocketStream<S>) -> EndClass
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut tx, mut rx) = ws.split();
    let (queue, mut queued) = mpsc::unbounded_channel::<Message>();
    let sender = tokio::spawn(async move {
        while let Some(m) = queued.recv().await {
            if tx.send(m).await.is_err() {
                return;
            }
        }
    });
    let mut closing = false;
    let mut end = EndClass::Clean;
    while let Some(msg) = rx.next().await {
        match msg {
            Ok(Message::Text(t)) if t.as_str() == "close" && !closing => {
                closing = true;
                let _ = queue.send(ours());
            }
            Ok(m) if m.is_data() && !closing => {
                let _ = queue.send(m);
            }
            Ok(_) => {}
            Err(e) => {
                end = EndClass::of(Some(&e));
                break;
            }
        }
    }
    drop(queue);
    let _ = sender.await;
    end
}

pub async fn start(engine: Engine, setup: &Setup) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let reports = Shared::default();
    let (config, budget) = config(setup);
    let running = match engine {
        Engine::Hub | Engine::HubTokio => {
            let readiness = if engine == Engine::Hub {
                Readiness::Owned
            } else {
                Readiness::Tokio
            };
            let mut hub_config = HubConfig::default()
                .engines(Some(1))
                .readiness(readiness)
                .config(config);
            if setup.small_hub_reads {
                hub_config = hub_config.read_buffer_size(4096);
            }
            let hub = Hub::new(HubEcho(reports.clone()), hub_config).unwrap();
            let handle = hub.handle();
            Running::Hub(handle, tokio::spawn(hub.serve(listener)))
        }
        Engine::Stream | Engine::Split => {
            let conns = Arc::new(Mutex::new(JoinSet::new()));
            let mut acceptor = JoinSet::new();
            let (r, c) = (reports.clone(), conns.clone());
            acceptor.spawn(async move {
                loop {
                    let Ok((tcp, _)) = listener.accept().await else {
                        continue;
                    };
                    let _ = tcp.set_nodelay(true);
                    let (reports, config) = (r.clone(), config.clone());
                    c.lock().unwrap().spawn(async move {
                        let id = Arc::new(Mutex::new(None));
                        let named = id.clone();
                        // The signature `accept_hdr_async` asks for.
                        #[allow(clippy::result_large_err)]
                        let callback = move |req: &wavesock::handshake::server::Request,
                                             resp: wavesock::handshake::server::Response| {
                            *named.lock().unwrap() = client_of(req.uri().path());
                            Ok(resp)
                        };
                        let Ok(ws) =
                            wavesock::accept_hdr_async_with_config(tcp, callback, config).await
                        else {
                            return;
                        };
                        let id = *id.lock().unwrap();
                        opened(&reports, id);
                        let end = if engine == Engine::Split {
                            serve_split(ws).await
                        } else {
                            serve_stream(ws).await
                        };
                        ended(&reports, id, end);
                    });
                }
            });
            Running::Stream(acceptor, conns)
        }
    };
    Server {
        engine,
        addr,
        reports,
        budget,
        running,
    }
}

impl Server {
    /// Stops the server; an error if a task of it panicked or it would
    /// not stop.
    pub async fn stop(self) -> Result<(), String> {
        match self.running {
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

/// Accepted sockets of the server on `port` this process still holds
/// open: each TCP socket whose local port is the server's and is not the
/// listener, among this process's descriptors.
#[cfg(target_os = "linux")]
pub fn held_sockets(port: u16) -> usize {
    let mut inodes = std::collections::HashSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 10 {
                continue;
            }
            let local_port = f[1]
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            // 0A: LISTEN.
            if local_port == Some(port) && f[3] != "0A" {
                if let Ok(inode) = f[9].parse::<u64>() {
                    if inode != 0 {
                        inodes.insert(inode);
                    }
                }
            }
        }
    }
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return 0;
    };
    fds.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l
                .to_str()?
                .strip_prefix("socket:[")?
                .strip_suffix(']')?
                .to_owned();
            l.parse::<u64>().ok()
        })
        .filter(|i| inodes.contains(i))
        .count()
}

#[cfg(not(target_os = "linux"))]
pub fn held_sockets(_: u16) -> usize {
    0
}
