//! The server side of the topics benchmark (`run-topics.sh`): every
//! connection subscribes to one topic, and publishes of one
//! `PreparedMessage` are made when a control connection asks.
//!
//! ```text
//! topics_server --mode hub|stream|stream-loop [--deflate] [--policy POLICY] [--control ADDR] ADDR
//! ```
//!
//! `ADDR` (loopback only) takes the WebSocket connections; `--control`
//! (default: `ADDR`'s port + 1) takes a plain TCP connection speaking one
//! command per line, each answered by one line:
//!
//! | command | answer |
//! | --- | --- |
//! | `subscribers` | `subscribers N`: connections subscribed to the topic |
//! | `cpu` | `cpu TOTAL_NS USER_NS`: this process's CPU time, all and user space |
//! | `publish K SIZE` | `published K REACHED`: K messages of SIZE bytes published back to back; REACHED from the last |
//!
//! The control is plain TCP, not a WebSocket, so that it is the same code
//! in every mode and never one of the connections measured.
//!
//! Modes, all on one current-thread runtime (the script pins the process
//! to one core):
//!
//! - `hub`: a [`Hub`] with one engine; each connection subscribes to the
//!   topic in [`Handler::open`] ([`Ws::subscribe`]); a publish is
//!   [`HubHandle::publish`] of one `PreparedMessage`.
//! - `stream`: `accept_async_with_config` and a task per connection, as
//!   `examples/broadcast.rs` writes it: the connection's task reads, and a
//!   fan-out task per connection receives from its
//!   [`TopicReceiver`](wavesock::topics::TopicReceiver) ([`Topics::subscribe`],
//!   a `tokio::sync::broadcast` of `PreparedMessage` inside) and sends with
//!   `send_prepared`. A publish is [`Topics::publish`]: the same call as the
//!   hub's.
//! - `stream-loop`: the same connections, but no fan-out tasks: a publish
//!   is one loop over every connection's `WebSocketSender`,
//!   `feed_prepared` then `flush` on each. Fewest wake-ups, but one peer
//!   that does not read stalls every other (what the broadcast channel
//!   exists to avoid); here for comparison.
//!
//! With `--deflate` every mode offers permessage-deflate with
//! `DeflateConfig::default()` (context takeover, as browsers negotiate it):
//! a prepared message is compressed once per window size, not per
//! connection. `--policy POLICY` sets its `DeflatePolicy` (`takeover`, the
//! default, `shared`, `dedicated:4k`, ...).
//!
//! Payloads are JSON-like text of SIZE bytes (price ticks with varying
//! digits), so they compress about as real feeds do rather than to nothing.

use std::io;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::StreamExt;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use wavesock::hub::{Handler, Hub, HubConfig, HubHandle, HubMessage, Ws};
use wavesock::topics::{RecvError, Topics};
use wavesock::{Config, DeflateConfig, DeflatePolicy, Message, PreparedMessage, WebSocketSender};
use wavesock_benches::BoxError;

/// The one topic every connection subscribes to.
const TOPIC: &str = "bench";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Hub,
    Stream,
    StreamLoop,
}

struct Args {
    mode: Mode,
    deflate: bool,
    policy: DeflatePolicy,
    addr: SocketAddr,
    control: SocketAddr,
}

fn parse_args() -> Result<Args, String> {
    let (mut mode, mut deflate, mut addr, mut control) = (None, false, None, None);
    let mut policy = DeflatePolicy::Takeover;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--mode" => {
                mode = Some(match it.next().as_deref() {
                    Some("hub") => Mode::Hub,
                    Some("stream") => Mode::Stream,
                    Some("stream-loop") => Mode::StreamLoop,
                    other => return Err(format!("unknown mode {other:?}")),
                })
            }
            "--deflate" => deflate = true,
            "--policy" => {
                let v = it.next().ok_or("--policy needs a policy")?;
                policy = v.parse().map_err(|e| format!("{v}: {e}"))?;
            }
            "--control" => {
                let v = it.next().ok_or("--control needs an address")?;
                control = Some(v.parse().map_err(|e| format!("{v}: {e}"))?);
            }
            a if !a.starts_with('-') && addr.is_none() => {
                addr = Some(a.parse::<SocketAddr>().map_err(|e| format!("{a}: {e}"))?)
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let mode = mode.ok_or("--mode is required")?;
    let addr = addr.ok_or("the address is required")?;
    let control = control.unwrap_or_else(|| SocketAddr::new(addr.ip(), addr.port() + 1));
    if !addr.ip().is_loopback() || !control.ip().is_loopback() {
        return Err("only loopback addresses are accepted".into());
    }
    Ok(Args {
        mode,
        deflate,
        policy,
        addr,
        control,
    })
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("topics_server: {e}");
            eprintln!(
                "usage: topics_server --mode hub|stream|stream-loop [--deflate] [--control ADDR] ADDR"
            );
            return ExitCode::from(2);
        }
    };
    // 10 000 connections need 10 000 descriptors; the soft limit is
    // usually 1 024.
    if let Err(e) = rlimit::increase_nofile_limit(u64::MAX) {
        eprintln!("topics_server: could not raise the open-files limit: {e}");
    }
    // One thread: the process is pinned to one core, and the hub's engine
    // and the stream tasks then compete for nothing but that core.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime");
    match rt.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("topics_server: {e}");
            ExitCode::FAILURE
        }
    }
}

fn config(deflate: Option<DeflatePolicy>) -> Config {
    let config = Config::default();
    match deflate {
        Some(policy) => config.deflate(DeflateConfig::default().policy(policy)),
        None => config,
    }
}

/// Where a publish goes, per mode.
#[derive(Clone)]
enum Publisher {
    Hub(HubHandle),
    Stream(Topics),
    Loop(Senders),
}

type Senders = Arc<Mutex<Vec<WebSocketSender<TcpStream>>>>;

impl Publisher {
    fn subscribers(&self) -> usize {
        match self {
            Publisher::Hub(h) => h.topics().subscribers(TOPIC),
            Publisher::Stream(t) => t.subscribers(TOPIC),
            Publisher::Loop(s) => s.lock().unwrap_or_else(PoisonError::into_inner).len(),
        }
    }

    /// Publishes `msg`; how many subscribers it was queued or written for.
    async fn publish(&self, msg: &PreparedMessage) -> usize {
        match self {
            Publisher::Hub(h) => h.publish(TOPIC, msg).local,
            Publisher::Stream(t) => t.publish(TOPIC, msg).local,
            Publisher::Loop(senders) => {
                // Taken out of the lock for the loop (a std lock cannot be
                // held across `.await`); connections accepted meanwhile are
                // put back with the others after.
                let mut mine =
                    std::mem::take(&mut *senders.lock().unwrap_or_else(PoisonError::into_inner));
                let mut reached = 0;
                let mut alive = Vec::with_capacity(mine.len());
                for mut tx in mine.drain(..) {
                    // feed then flush: the frame encoded once is queued as it
                    // is and written (`send_prepared` does the same two).
                    if tx.feed_prepared(msg).await.is_ok() && tx.flush().await.is_ok() {
                        reached += 1;
                        alive.push(tx);
                    }
                }
                let mut guard = senders.lock().unwrap_or_else(PoisonError::into_inner);
                alive.append(&mut guard);
                *guard = alive;
                reached
            }
        }
    }
}

/// The hub's handler: every connection subscribes on open; what peers
/// send is ignored.
#[derive(Clone)]
struct Subscriber;

impl Handler for Subscriber {
    type Data = ();

    fn upgrade(
        &mut self,
        _: &wavesock::http::Request<()>,
        _: &mut wavesock::http::Response<()>,
    ) -> Result<(), wavesock::hub::HttpResponse> {
        Ok(())
    }

    fn open(&mut self, ws: &mut Ws<'_, ()>) {
        ws.subscribe(TOPIC);
    }

    fn message(&mut self, _: &mut Ws<'_, ()>, _: HubMessage<'_>) {}
}

async fn run(args: Args) -> Result<(), BoxError> {
    let listener = TcpListener::bind(args.addr).await?;
    let control = TcpListener::bind(args.control).await?;
    eprintln!(
        "topics_server {:?}{} on {}, control on {}",
        args.mode,
        if args.deflate { " deflate" } else { "" },
        args.addr,
        args.control
    );
    let config = config(args.deflate.then_some(args.policy));
    match args.mode {
        Mode::Hub => {
            let hub = Hub::new(
                Subscriber,
                HubConfig::default().config(config).topics(Topics::new()),
            )?;
            let publisher = Publisher::Hub(hub.handle());
            // Both on this task: `Hub::serve` drives the engine itself.
            tokio::try_join!(
                async { hub.serve(listener).await.map_err(BoxError::from) },
                serve_control(control, publisher),
            )?;
        }
        Mode::Stream | Mode::StreamLoop => {
            let publisher = if args.mode == Mode::Stream {
                Publisher::Stream(Topics::new())
            } else {
                Publisher::Loop(Senders::default())
            };
            tokio::try_join!(
                accept_streams(listener, config, publisher.clone()),
                serve_control(control, publisher),
            )?;
        }
    }
    Ok(())
}

async fn accept_streams(
    listener: TcpListener,
    config: Config,
    publisher: Publisher,
) -> Result<(), BoxError> {
    loop {
        let (tcp, _) = listener.accept().await?;
        // As the hub does for the connections it accepts.
        tcp.set_nodelay(true)?;
        let publisher = publisher.clone();
        let config = config.clone();
        tokio::spawn(async move {
            // Clients leaving with a reset end here; nothing to report.
            let _ = serve_stream(tcp, config, publisher).await;
        });
    }
}

/// One connection of the stream modes, as `examples/broadcast.rs` serves
/// it: this task reads (and answers pings and the close), a fan-out task
/// sends what is published.
async fn serve_stream(
    tcp: TcpStream,
    config: Config,
    publisher: Publisher,
) -> wavesock::Result<()> {
    let ws = wavesock::accept_async_with_config(tcp, config).await?;
    let (mut tx, mut rx) = ws.split();
    let fan_out = match &publisher {
        Publisher::Stream(topics) => {
            let mut inbox = topics.subscribe(TOPIC);
            Some(tokio::spawn(async move {
                loop {
                    match inbox.recv().await {
                        Ok(prepared) => {
                            if tx.send_prepared(&prepared).await.is_err() {
                                return;
                            }
                        }
                        // Missed messages break the client's count, which
                        // then reports a stall; this says why.
                        Err(RecvError::Lagged(n)) => eprintln!("a subscriber lagged by {n}"),
                    }
                }
            }))
        }
        Publisher::Loop(senders) => {
            senders
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(tx);
            None
        }
        Publisher::Hub(_) => unreachable!("the hub serves its own connections"),
    };
    while let Some(msg) = rx.next().await {
        msg?;
    }
    if let Some(f) = fan_out {
        f.abort();
    }
    Ok(())
}

async fn serve_control(listener: TcpListener, publisher: Publisher) -> Result<(), BoxError> {
    loop {
        let (tcp, _) = listener.accept().await?;
        tcp.set_nodelay(true)?;
        if let Err(e) = control(tcp, &publisher).await {
            eprintln!("control connection: {e}");
        }
    }
}

/// One control connection, served to its end before the next is taken.
async fn control(tcp: TcpStream, publisher: &Publisher) -> io::Result<()> {
    let (rd, mut wr) = tcp.into_split();
    let mut lines = BufReader::new(rd).lines();
    let mut seq = 0u64;
    while let Some(line) = lines.next_line().await? {
        let words: Vec<&str> = line.split_whitespace().collect();
        let answer = match words.as_slice() {
            ["subscribers"] => format!("subscribers {}", publisher.subscribers()),
            ["cpu"] => {
                let (total, user) = cpu_ns();
                format!("cpu {total} {user}")
            }
            ["publish", k, size] => {
                let (Ok(k), Ok(size)) = (k.parse::<u64>(), size.parse::<usize>()) else {
                    return Err(io::Error::other(format!("bad command {line:?}")));
                };
                let mut reached = 0;
                for _ in 0..k {
                    // Made per publish, as an application would with fresh
                    // data: the encoding (and, on deflate connections, the
                    // one compression) is part of a publish's cost.
                    let msg = PreparedMessage::new(&Message::text(tick(seq, size)))
                        .expect("a text message prepares");
                    seq += 1;
                    reached = publisher.publish(&msg).await;
                }
                format!("published {k} {reached}")
            }
            _ => format!("error unknown command {line:?}"),
        };
        wr.write_all(format!("{answer}\n").as_bytes()).await?;
    }
    Ok(())
}

/// This process's CPU time in nanoseconds: in all (the sum of its threads'
/// `/proc/self/task/*/schedstat`, in nanoseconds) and in user space
/// (`utime` of `/proc/self/stat`, in 10 ms ticks: fine over phases of
/// seconds). `/proc` rather than getrusage, to keep the bench crate free
/// of a libc dependency.
fn cpu_ns() -> (u64, u64) {
    let total = std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .filter_map(|t| {
                    let stat = std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok()?;
                    stat.split_whitespace().next()?.parse::<u64>().ok()
                })
                .sum()
        })
        .unwrap_or(0);
    // The fields after the command name (which may hold spaces), from
    // field 3 on: utime is field 14.
    let user_ticks = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let after = &s[s.rfind(')')? + 2..];
            after.split_whitespace().nth(11)?.parse::<u64>().ok()
        })
        .unwrap_or(0);
    // USER_HZ is 100 on every Linux configuration that matters here.
    (total, user_ticks * 10_000_000)
}

/// A message of `size` bytes: JSON-like price ticks whose digits vary (a
/// small LCG seeded by `seq`), which deflate shrinks by a few times, as it
/// does real feeds, rather than to almost nothing as a repeated byte.
fn tick(seq: u64, size: usize) -> String {
    const SYMBOLS: [&str; 8] = [
        "EURUSD", "GBPUSD", "USDJPY", "AUDUSD", "USDCHF", "NZDUSD", "USDCAD", "EURGBP",
    ];
    let mut state = seq
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        state >> 33
    };
    let mut text = format!("{{\"seq\":{seq},\"ticks\":[");
    while text.len() < size {
        let sym = SYMBOLS[(next() % 8) as usize];
        let (bid, spread, qty) = (next() % 200_000, next() % 40, next() % 10_000);
        text.push_str(&format!(
            "{{\"s\":\"{sym}\",\"b\":1.{bid:05},\"a\":1.{:05},\"q\":{qty}}},",
            bid + spread
        ));
    }
    // Exactly `size` bytes (ASCII, so any cut is a character boundary).
    text.truncate(size);
    text
}
