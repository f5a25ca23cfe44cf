//! One suite of scenarios, written once and run against every engine: the
//! Stream (`WebSocketStream` in a task per connection), the Stream split
//! into halves, and the hub. Each serves an echo over real loopback TCP
//! with the same `Config`; a client (wavesock's, or raw bytes where the
//! wire is the point) drives the scenario and reads what comes back, and
//! each server reports how its connection ended. The engines share the
//! protocol core's rules, so every scenario must come out the same on all
//! three: the memory budget's wait, resume and refusals (1009, 1013), a
//! quiet client never refused, the handshake's deadline, the closing
//! handshake either way and a hang-up after our close, keepalive, a
//! protocol violation's 1002, settings of `Duration::MAX` (never), and an
//! idle connection holding no buffer after a large message.
//!
//! Every scenario runs twice per engine: over plain loopback, and with the
//! server's socket behind the fault-injection transport of
//! `tests/protocol/faults.rs` (short reads and writes, `Pending`, `Interrupted`,
//! `WouldBlock`), whose faults must change nothing a peer can see.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::support::child;
use crate::support::counting;
use crate::support::faulty;
use crate::support::raw;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use raw::{budget_config, close_code, frame, read_frame, until, upgrade_raw, within};
use wavesock::hub::{Closed, Handler, Hub, HubConfig, HubMessage, Readiness, Ws};
use wavesock::{CloseCode, CloseFrame, Config, MemoryBudget, Message, OpCode};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Engine {
    Stream,
    Split,
    /// The hub with its own poller (`Readiness::Owned`, the default).
    Hub,
    /// The hub with a Tokio registration per socket.
    HubTokio,
}

/// An engine, and whether the server's socket misbehaves.
#[derive(Debug, Clone, Copy)]
struct Case {
    engine: Engine,
    faults: bool,
}

const ENGINES: [Case; 7] = {
    const fn case(engine: Engine, faults: bool) -> Case {
        Case { engine, faults }
    }
    [
        case(Engine::Stream, false),
        case(Engine::Split, false),
        case(Engine::Hub, false),
        case(Engine::HubTokio, false),
        case(Engine::Stream, true),
        case(Engine::Split, true),
        case(Engine::Hub, true),
    ]
};

/// The faulty transport's seed: fixed, so a failure replays.
const SEED: u64 = 0x5eed;

/// How a server connection ended: `None` cleanly, else its error's text.
type Ended = Option<String>;

struct Server {
    addr: SocketAddr,
    ended: mpsc::UnboundedReceiver<Ended>,
}

impl Server {
    async fn ended(&mut self) -> Ended {
        within(15, self.ended.recv())
            .await
            .expect("the server reports the end")
    }
}

/// What every echo server does with a text message `close`: closes with
/// 4000 and this reason. With `close-then-send` it then tries to send
/// [`LATE`] too, which the rules refuse (the Stream with an error, the hub
/// with `SendStatus::Closed`): it must never reach the wire.
const CLOSE_REASON: &str = "asked to";
/// With `close-long`, the reason is this, over the 123 bytes a close frame
/// holds: the hub's `close` cuts it at a character, the Stream refuses the
/// frame (an error, nothing on the wire); neither sends it whole.
fn long_reason() -> String {
    "é".repeat(100)
}
const LATE: &str = "sent after our close";

/// The hub's echo.
#[derive(Clone)]
struct HubEcho(mpsc::UnboundedSender<Ended>);

impl Handler for HubEcho {
    type Data = ();

    fn upgrade(
        &mut self,
        _: &wavesock::http::Request<()>,
        _: &mut wavesock::http::Response<()>,
    ) -> Result<(), wavesock::hub::HttpResponse> {
        Ok(())
    }

    fn message(&mut self, ws: &mut Ws<'_, ()>, msg: HubMessage<'_>) {
        if let HubMessage::Text(t @ ("close" | "close-then-send" | "close-long")) = msg {
            let reason = if t == "close-long" {
                long_reason()
            } else {
                CLOSE_REASON.to_owned()
            };
            ws.close(CloseCode::from(4000), &reason).unwrap();
            if t == "close-then-send" {
                let status = ws.send_text(LATE).unwrap();
                assert_eq!(status, wavesock::hub::SendStatus::Closed);
            }
            return;
        }
        let _ = ws.send_borrowed(msg);
    }

    fn close(&mut self, closed: Closed, _: ()) {
        let _ = self.0.send(closed.error.map(|e| e.to_string()));
    }
}

async fn start(case: Case, config: Config) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, ended) = mpsc::unbounded_channel();
    match (case.engine, case.faults) {
        (Engine::Hub | Engine::HubTokio, false) => {
            let readiness = if case.engine == Engine::Hub {
                Readiness::Owned
            } else {
                Readiness::Tokio
            };
            let config = HubConfig::default()
                .engines(Some(1))
                .readiness(readiness)
                .config(config);
            let hub = Hub::new(HubEcho(tx), config).unwrap();
            tokio::spawn(hub.serve(listener));
        }
        (Engine::Hub | Engine::HubTokio, true) => {
            let config = crate::support::hub::defaults()
                .engines(Some(1))
                .config(config);
            let hub = Hub::new(HubEcho(tx), config).unwrap();
            let handle = hub.handle();
            tokio::spawn(hub.run());
            tokio::spawn(async move {
                let counts = Arc::new(faulty::Counts::default());
                for seed in SEED.. {
                    let (tcp, _) = listener.accept().await.unwrap();
                    let io = faulty::Faulty::new(tcp, seed, counts.clone());
                    if handle.accept(io).await.is_err() {
                        return;
                    }
                }
            });
        }
        (engine, faults) => {
            tokio::spawn(async move {
                let counts = Arc::new(faulty::Counts::default());
                for seed in SEED.. {
                    let (tcp, _) = listener.accept().await.unwrap();
                    let tx = tx.clone();
                    let config = config.clone();
                    let counts = counts.clone();
                    tokio::spawn(async move {
                        let ended = if faults {
                            let io = faulty::Faulty::new(tcp, seed, counts);
                            serve_any(engine, io, config).await
                        } else {
                            serve_any(engine, tcp, config).await
                        };
                        if let Some(ended) = ended {
                            let _ = tx.send(ended);
                        }
                    });
                }
            });
        }
    }
    Server { addr, ended }
}

/// Accepts and serves one connection on the Stream, unsplit or split;
/// `None` if the handshake did not finish.
async fn serve_any<S>(engine: Engine, io: S, config: Config) -> Option<Ended>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // A refused or unfinished handshake ends nothing that was open: it is
    // not reported, as on the hub.
    let ws = wavesock::accept_async_with_config(io, config).await.ok()?;
    Some(if engine == Engine::Split {
        serve_split(ws).await
    } else {
        serve_stream(ws).await
    })
}

async fn serve_stream<S>(mut ws: wavesock::WebSocketStream<S>) -> Ended
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    while let Some(msg) = ws.next().await {
        match msg {
            Ok(Message::Text(t)) if t.as_str().starts_with("close") => {
                let reason = if t.as_str() == "close-long" {
                    long_reason()
                } else {
                    CLOSE_REASON.to_owned()
                };
                let frame = CloseFrame::new(CloseCode::from(4000), reason);
                if let Err(e) = ws.send(Message::Close(Some(frame))).await {
                    return Some(e.to_string());
                }
                if t.as_str() == "close-then-send" {
                    let late = ws.send(Message::text(LATE)).await;
                    assert!(
                        matches!(late, Err(wavesock::Error::AlreadyClosed)),
                        "{late:?}"
                    );
                }
            }
            Ok(m) if m.is_data() => {
                if let Err(e) = ws.send(m).await {
                    return Some(e.to_string());
                }
            }
            Ok(_) => {}
            Err(e) => return Some(e.to_string()),
        }
    }
    None
}

async fn serve_split<S>(ws: wavesock::WebSocketStream<S>) -> Ended
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut tx, mut rx) = ws.split();
    let (queue, mut queued) = mpsc::unbounded_channel::<Message>();
    // The sending half in a task of its own, as split halves are used.
    let sender = tokio::spawn(async move {
        while let Some(m) = queued.recv().await {
            if tx.send(m).await.is_err() {
                return;
            }
        }
    });
    let mut ended = None;
    while let Some(msg) = rx.next().await {
        match msg {
            Ok(Message::Text(t)) if t.as_str().starts_with("close") => {
                let reason = if t.as_str() == "close-long" {
                    long_reason()
                } else {
                    CLOSE_REASON.to_owned()
                };
                let frame = CloseFrame::new(CloseCode::from(4000), reason);
                let _ = queue.send(Message::Close(Some(frame)));
                if t.as_str() == "close-then-send" {
                    // The sender fails this one and stops; the receiver
                    // goes on to the peer's close reply.
                    let _ = queue.send(Message::text(LATE));
                }
            }
            Ok(m) if m.is_data() => {
                let _ = queue.send(m);
            }
            Ok(_) => {}
            Err(e) => {
                ended = Some(e.to_string());
                break;
            }
        }
    }
    drop(queue);
    let _ = sender.await;
    ended
}

#[tokio::test]
async fn echo_and_a_client_close_echoed_with_its_code() {
    for engine in ENGINES {
        eprintln!("engine {engine:?}");
        let mut server = start(engine, Config::default()).await;
        let (mut ws, _) = wavesock::connect_async(format!("ws://{}/", server.addr))
            .await
            .unwrap();
        ws.send(Message::text("hi")).await.unwrap();
        assert_eq!(
            within(5, ws.next()).await.unwrap().unwrap(),
            Message::text("hi")
        );
        ws.close(Some(CloseFrame::new(CloseCode::GOING_AWAY, "bye")))
            .await
            .unwrap();
        let echo = within(5, ws.next()).await.unwrap().unwrap();
        assert_eq!(
            echo,
            Message::Close(Some(CloseFrame::new(CloseCode::GOING_AWAY, "bye"))),
            "{engine:?}"
        );
        assert_eq!(server.ended().await, None, "{engine:?}: a clean close");
    }
}

#[tokio::test]
async fn a_server_close_answered_by_a_hang_up_is_a_clean_end() {
    for engine in ENGINES {
        eprintln!("engine {engine:?}");
        let mut server = start(engine, Config::default()).await;
        let mut tcp = upgrade_raw(server.addr).await;
        tcp.write_all(&frame(true, OpCode::Text, b"close".to_vec()))
            .await
            .unwrap();
        assert_eq!(close_code(&mut tcp).await, 4000, "{engine:?}");
        // No close reply: the client hangs up instead, as many do.
        drop(tcp);
        assert_eq!(server.ended().await, None, "{engine:?}");
    }
}

/// Our close, read by a peer that neither answers nor hangs up: every
/// engine ends the connection at the core's close deadline (not before),
/// with the core's error, and the peer then sees the end.
#[tokio::test]
async fn a_server_close_never_answered_ends_at_the_close_deadline() {
    let timeout = Duration::from_millis(400);
    let config = Config::default().close_timeout(timeout);
    for engine in ENGINES {
        eprintln!("engine {engine:?}");
        let mut server = start(engine, config.clone()).await;
        let mut tcp = upgrade_raw(server.addr).await;
        // Before the server hears the text that makes it close: its
        // deadline starts later.
        let asked = tokio::time::Instant::now();
        tcp.write_all(&frame(true, OpCode::Text, b"close".to_vec()))
            .await
            .unwrap();
        assert_eq!(close_code(&mut tcp).await, 4000, "{engine:?}");
        let ended = server.ended().await;
        assert!(asked.elapsed() >= timeout, "{engine:?}: early");
        assert_eq!(
            ended,
            Some(wavesock::Error::CloseTimeout.to_string()),
            "{engine:?}"
        );
        let mut rest = Vec::new();
        let _ = within(5, tcp.read_to_end(&mut rest)).await;
        assert!(rest.is_empty(), "{engine:?}: {rest:?} after the close");
    }
}

#[tokio::test]
async fn a_close_reason_over_the_limit_never_goes_out_whole() {
    for engine in ENGINES {
        eprintln!("engine {engine:?}");
        let mut server = start(engine, Config::default()).await;
        let mut tcp = upgrade_raw(server.addr).await;
        tcp.write_all(&frame(true, OpCode::Text, b"close-long".to_vec()))
            .await
            .unwrap();
        let mut close = None;
        loop {
            let mut head = [0u8; 2];
            // The split Stream's sender fails and its receiver stays open:
            // nothing more comes.
            let read = tokio::time::timeout(Duration::from_secs(2), tcp.read_exact(&mut head));
            if !matches!(read.await, Ok(Ok(_))) {
                break;
            }
            let len = usize::from(head[1] & 0x7f);
            assert!(len <= 125, "{engine:?}: a control frame of {len} bytes");
            let mut payload = vec![0; len];
            tcp.read_exact(&mut payload).await.unwrap();
            if head[0] & 0x0f == 0x8 {
                close = Some(payload);
                break;
            }
        }
        drop(tcp);
        let ended = server.ended().await;
        if matches!(engine.engine, Engine::Hub | Engine::HubTokio) {
            let payload = close.expect("the hub closes");
            assert_eq!(u16::from_be_bytes([payload[0], payload[1]]), 4000);
            let reason = std::str::from_utf8(&payload[2..]).expect("UTF-8");
            assert_eq!(reason, "é".repeat(61), "cut at a character");
        } else {
            assert_eq!(close, None, "{engine:?}: refused, not sent");
            if engine.engine == Engine::Stream {
                let err = ended.expect("the Stream reports the refusal");
                assert!(err.contains("123"), "{engine:?}: {err}");
            }
        }
    }
}

#[tokio::test]
async fn nothing_sent_after_our_close_reaches_the_wire() {
    for engine in ENGINES {
        eprintln!("engine {engine:?}");
        let mut server = start(engine, Config::default()).await;
        let mut tcp = upgrade_raw(server.addr).await;
        tcp.write_all(&frame(true, OpCode::Text, b"close-then-send".to_vec()))
            .await
            .unwrap();
        let (op, payload) = read_frame(&mut tcp).await;
        assert_eq!(
            (op, &payload[..2]),
            (0x8, &[0x0f, 0xa0][..]),
            "{engine:?}: 4000"
        );
        // Our close reply; then the server ends, and nothing came between.
        tcp.write_all(&frame(true, OpCode::Close, vec![0x0f, 0xa0]))
            .await
            .unwrap();
        let mut rest = Vec::new();
        within(5, tcp.read_to_end(&mut rest)).await.unwrap();
        assert!(rest.is_empty(), "{engine:?}: {rest:?} after the close");
        assert_eq!(server.ended().await, None, "{engine:?}: a clean close");
    }
}

#[tokio::test]
async fn a_refused_client_that_reads_nothing_is_answered_and_cut() {
    let config = Config::default().handshake_timeout(Some(Duration::from_millis(300)));
    for engine in ENGINES {
        eprintln!("engine {engine:?}");
        let server = start(engine, config.clone()).await;
        let mut tcp = TcpStream::connect(server.addr).await.unwrap();
        // No Upgrade: refused. The client reads nothing for a while.
        tcp.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(600)).await;
        let mut answer = Vec::new();
        within(5, tcp.read_to_end(&mut answer))
            .await
            .expect("the connection ends");
        let head = String::from_utf8_lossy(&answer);
        assert!(head.starts_with("HTTP/1.1 4"), "{engine:?}: {head}");
    }
}

#[tokio::test]
async fn a_hang_up_without_closing_is_reported() {
    for engine in ENGINES {
        eprintln!("engine {engine:?}");
        let mut server = start(engine, Config::default()).await;
        let tcp = upgrade_raw(server.addr).await;
        drop(tcp);
        let ended = server.ended().await;
        assert!(ended.is_some(), "{engine:?}: an end without a close");
    }
}

/// The last bytes a peer sends, then its FIN in the same segment burst:
/// the server must read the bytes, answer them, and then see the end,
/// with no further readiness edge to wake it (issue: the owned poller took
/// a short read as "empty" and never read the FIN).
#[tokio::test]
async fn data_then_fin_is_answered_and_ends_the_connection() {
    let lasts: [(&str, Vec<u8>, Option<u8>); 3] = [
        ("text", frame(true, OpCode::Text, b"hi".to_vec()), Some(0x1)),
        ("ping", frame(true, OpCode::Ping, b"p".to_vec()), Some(0xA)),
        ("pong", frame(true, OpCode::Pong, b"p".to_vec()), None),
    ];
    for engine in ENGINES {
        for (what, bytes, answer) in &lasts {
            eprintln!("engine {engine:?}, {what} then FIN");
            let mut server = start(engine, Config::default()).await;
            let mut tcp = upgrade_raw(server.addr).await;
            tcp.write_all(bytes).await.unwrap();
            tcp.shutdown().await.unwrap();
            let mut got = Vec::new();
            within(10, tcp.read_to_end(&mut got))
                .await
                .expect("the server lets go of the socket");
            let ended = server.ended().await;
            assert!(ended.is_some(), "{engine:?}, {what}: ended without a close");
            // The split server's echo is sent by another task, which the
            // end read meanwhile may beat: sends after the end are refused
            // (the guide's "Closing"). The core's own answer, a pong, and
            // every other engine's echo come before the end.
            let raced = engine.engine == Engine::Split && *what == "text";
            match answer {
                Some(op) if !(raced && got.is_empty()) => {
                    assert_eq!(
                        got.first().map(|b| b & 0x0f),
                        Some(*op),
                        "{engine:?}, {what}"
                    );
                }
                Some(_) => {}
                None => assert_eq!(got, b"", "{engine:?}, {what}: nothing to answer"),
            }
        }
    }
}

/// The upgrade request and the FIN together: the server answers, and the
/// end that came with the request ends the connection.
#[tokio::test]
async fn a_handshake_then_fin_is_answered_and_ends_the_connection() {
    for engine in ENGINES {
        eprintln!("engine {engine:?}");
        let mut server = start(engine, Config::default()).await;
        let mut tcp = TcpStream::connect(server.addr).await.unwrap();
        let mut request = raw::REQUEST.to_vec();
        request.extend_from_slice(&frame(true, OpCode::Text, b"hi".to_vec()));
        tcp.write_all(&request).await.unwrap();
        tcp.shutdown().await.unwrap();
        let mut answer = Vec::new();
        within(10, tcp.read_to_end(&mut answer))
            .await
            .expect("the server lets go of the socket");
        assert!(answer.starts_with(b"HTTP/1.1 101"), "{engine:?}");
        let ended = server.ended().await;
        assert!(ended.is_some(), "{engine:?}: ended without a close");
    }
}

/// A reset (`SO_LINGER` 0) after a message: the server's side ends and
/// reports it, on every engine.
#[tokio::test]
async fn a_reset_ends_the_connection() {
    for engine in ENGINES {
        eprintln!("engine {engine:?}");
        let mut server = start(engine, Config::default()).await;
        let mut tcp = upgrade_raw(server.addr).await;
        tcp.write_all(&frame(true, OpCode::Text, b"hi".to_vec()))
            .await
            .unwrap();
        let (op, _) = read_frame(&mut tcp).await;
        assert_eq!(op, 0x1, "{engine:?}: the echo");
        tcp.write_all(&frame(true, OpCode::Pong, Vec::new()))
            .await
            .unwrap();
        tcp.set_zero_linger().unwrap();
        drop(tcp);
        let ended = server.ended().await;
        assert!(ended.is_some(), "{engine:?}: ended without a close");
    }
}

/// A flood of pings behind a message the server closes on: none is
/// answered (the Stream sends its close as it reads the message; the hub
/// reads nothing more until the close it holds is out, and no pong goes
/// out after a close), so one peer costs its engine time linear in what it
/// sent, not quadratic.
#[tokio::test]
async fn a_ping_flood_behind_a_close_is_not_answered() {
    const PINGS: usize = 54_567;
    let ping = frame(true, OpCode::Ping, Vec::new());
    let mut burst = frame(true, OpCode::Text, b"close".to_vec());
    for _ in 0..PINGS {
        burst.extend_from_slice(&ping);
    }
    for engine in ENGINES {
        eprintln!("engine {engine:?}");
        let mut server = start(engine, Config::default()).await;
        let mut tcp = upgrade_raw(server.addr).await;
        let (mut rd, mut wr) = tcp.split();
        let write = async {
            // The server may close before it has read the whole burst.
            let _ = wr.write_all(&burst).await;
        };
        let read = async {
            let mut pongs = 0;
            loop {
                let mut head = [0u8; 2];
                rd.read_exact(&mut head).await.unwrap();
                let mut payload = vec![0; usize::from(head[1] & 0x7f)];
                rd.read_exact(&mut payload).await.unwrap();
                match head[0] & 0x0f {
                    0xA => pongs += 1,
                    0x8 => return (pongs, u16::from_be_bytes([payload[0], payload[1]])),
                    op => panic!("{engine:?}: opcode {op}"),
                }
            }
        };
        let ((), (pongs, code)) = within(30, futures_util::future::join(write, read)).await;
        assert_eq!(code, 4000, "{engine:?}");
        eprintln!("{pongs} pongs");
        // The split server's close goes out from its sending task: until
        // that runs, its receiver answers each ping as it reads it, with
        // nothing held back, so no bound but the scheduler's applies.
        if engine.engine != Engine::Split {
            assert_eq!(pongs, 0, "{engine:?}: pongs before the close");
        }
        drop(tcp);
        server.ended().await;
    }
}

#[tokio::test]
async fn a_protocol_violation_gets_1002() {
    for engine in ENGINES {
        eprintln!("engine {engine:?}");
        let mut server = start(engine, Config::default()).await;
        let mut tcp = upgrade_raw(server.addr).await;
        // Unmasked, from a client.
        tcp.write_all(&[0x81, 0x02, b'h', b'i']).await.unwrap();
        assert_eq!(close_code(&mut tcp).await, 1002, "{engine:?}");
        assert!(server.ended().await.is_some(), "{engine:?}");
    }
}

#[tokio::test]
async fn keepalive_closes_a_silent_peer_and_keeps_a_live_one() {
    let config = Config::default()
        .ping_interval(Some(Duration::from_millis(100)))
        .pong_timeout(Duration::from_millis(200));
    for engine in ENGINES {
        eprintln!("engine {engine:?}");
        let mut server = start(engine, config.clone()).await;
        // wavesock's client answers pings: kept past several intervals.
        let (mut live, _) = wavesock::connect_async(format!("ws://{}/", server.addr))
            .await
            .unwrap();
        let pinger = tokio::spawn(async move {
            // Reading answers the server's pings.
            while let Some(Ok(_)) = live.next().await {}
        });
        // A raw peer that never answers.
        let mut silent = upgrade_raw(server.addr).await;
        assert_eq!(read_frame(&mut silent).await.0, 0x9, "{engine:?}: a ping");
        let ended = server.ended().await;
        assert!(
            ended.as_deref().is_some_and(|e| e.contains("keepalive")),
            "{engine:?}: {ended:?}"
        );
        assert!(!pinger.is_finished(), "{engine:?}: the live peer stays");
        pinger.abort();
    }
}

#[tokio::test]
async fn an_unfinished_handshake_is_cut_at_its_timeout() {
    let config = Config::default().handshake_timeout(Some(Duration::from_millis(200)));
    for engine in ENGINES {
        eprintln!("engine {engine:?}");
        let server = start(engine, config.clone()).await;
        let mut tcp = TcpStream::connect(server.addr).await.unwrap();
        tcp.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        let mut rest = Vec::new();
        let n = within(5, tcp.read_to_end(&mut rest)).await.unwrap_or(0);
        assert_eq!(n, 0, "{engine:?}: cut without an answer");
    }
}

#[tokio::test]
async fn a_message_larger_than_the_whole_budget_gets_1009() {
    for engine in ENGINES {
        eprintln!("engine {engine:?}");
        let budget = MemoryBudget::new(1 << 20).allowance(0);
        let mut server = start(engine, budget_config(&budget)).await;
        let mut tcp = upgrade_raw(server.addr).await;
        tcp.write_all(&frame(true, OpCode::Binary, vec![7; 2 << 20]))
            .await
            .unwrap_or(());
        assert_eq!(close_code(&mut tcp).await, 1009, "{engine:?}");
        assert!(server.ended().await.is_some(), "{engine:?}");
        assert!(budget.peak() <= budget.limit(), "{engine:?}");
    }
}

/// A frame larger than the whole budget gets 1009 at once on every engine
/// also while another connection holds part of the budget: it must not
/// wait beside the other for room it could never have (holding budget,
/// and its engine, meanwhile). The other goes on.
#[tokio::test]
async fn a_frame_larger_than_the_whole_budget_gets_1009_beside_others() {
    for engine in ENGINES {
        eprintln!("engine {engine:?}");
        let budget = MemoryBudget::new(4 << 20)
            .allowance(0)
            .wait_timeout(Duration::from_secs(30));
        let mut server = start(engine, budget_config(&budget)).await;
        let mut a = upgrade_raw(server.addr).await;
        a.write_all(&frame(false, OpCode::Binary, vec![1; 1 << 20]))
            .await
            .unwrap();
        until(|| budget.in_use() >= 1 << 20).await;
        let (mut rd, mut wr) = upgrade_raw(server.addr).await.into_split();
        let big = frame(true, OpCode::Binary, vec![2; 8 << 20]);
        let writer = tokio::spawn(async move {
            let _ = wr.write_all(&big).await;
            wr
        });
        // (`read_frame` waits 10 s at most: the budget's wait is 30.)
        let (op, payload) = read_frame(&mut rd).await;
        let close = close_of(op, &payload).map(|(code, _)| code);
        assert_eq!(close, Some(1009), "{engine:?}");
        assert!(server.ended().await.is_some(), "{engine:?}");
        a.write_all(&frame(true, OpCode::Continuation, vec![]))
            .await
            .unwrap();
        assert_eq!(read_frame(&mut a).await.1.len(), 1 << 20, "{engine:?}");
        writer.abort();
        drop((a, rd));
        until(|| budget.in_use() == 0).await;
        assert!(budget.peak() <= budget.limit(), "{engine:?}");
    }
}

#[tokio::test]
async fn under_contention_a_client_waits_then_resumes_and_is_not_refused_later() {
    let wait = Duration::from_millis(800);
    for engine in ENGINES {
        eprintln!("engine {engine:?}");
        let budget = MemoryBudget::new(16 << 20).allowance(0).wait_timeout(wait);
        let server = start(engine, budget_config(&budget)).await;
        let mut a = upgrade_raw(server.addr).await;
        a.write_all(&frame(false, OpCode::Binary, vec![1; 5 << 20]))
            .await
            .unwrap();
        until(|| budget.in_use() >= 5 << 20).await;
        // B's message needs budget that A holds (reading a frame holds up
        // to twice its size while the buffer grows): B waits.
        let mut b = upgrade_raw(server.addr).await;
        // B writes while A stays quiet for less than the wait (a write of
        // 8 MiB to a slow server may take longer than that by itself).
        let b_writes = tokio::spawn(async move {
            b.write_all(&frame(true, OpCode::Binary, vec![2; 8 << 20]))
                .await
                .unwrap();
            b
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            budget.peak() <= budget.limit(),
            "{engine:?}: {}",
            budget.peak()
        );
        // A finishes and gives its budget back: B resumes.
        a.write_all(&frame(true, OpCode::Continuation, vec![]))
            .await
            .unwrap();
        assert_eq!(read_frame(&mut a).await.1.len(), 5 << 20, "{engine:?}");
        let mut b = within(10, b_writes).await.unwrap();
        assert_eq!(read_frame(&mut b).await.1.len(), 8 << 20, "{engine:?}");
        // Quiet for longer than the wait, then a request: answered.
        tokio::time::sleep(wait * 2).await;
        b.write_all(&frame(true, OpCode::Text, b"again".to_vec()))
            .await
            .unwrap();
        assert_eq!(
            read_frame(&mut b).await,
            (0x1, b"again".to_vec()),
            "{engine:?}"
        );
        assert!(
            budget.peak() <= budget.limit(),
            "{engine:?}: {}",
            budget.peak()
        );
    }
}

#[tokio::test]
async fn a_client_holding_budget_while_silent_gets_1013_and_the_waiting_one_resumes() {
    let wait = Duration::from_millis(1000);
    for engine in ENGINES {
        let budget = MemoryBudget::new(16 << 20).allowance(0).wait_timeout(wait);
        let mut server = start(engine, budget_config(&budget)).await;
        let mut a = upgrade_raw(server.addr).await;
        a.write_all(&frame(false, OpCode::Binary, vec![1; 5 << 20]))
            .await
            .unwrap();
        until(|| budget.in_use() >= 5 << 20).await;
        // B comes well after A went silent: A's wait runs out first, with
        // most of B's still to go.
        tokio::time::sleep(Duration::from_millis(600)).await;
        let mut b = upgrade_raw(server.addr).await;
        b.write_all(&frame(true, OpCode::Binary, vec![2; 8 << 20]))
            .await
            .unwrap();
        // A never finishes its message: it is refused once it has held
        // budget without sending for the wait's length, which gives the
        // budget back to B, waiting since later.
        assert_eq!(close_code(&mut a).await, 1013, "{engine:?}");
        assert!(server.ended().await.is_some(), "{engine:?}");
        assert_eq!(read_frame(&mut b).await.1.len(), 8 << 20, "{engine:?}");
        drop(b);
        until(|| budget.in_use() == 0).await;
        assert!(budget.peak() <= budget.limit(), "{engine:?}");
    }
}

/// A message that fits in the whole budget, but not beside what another
/// connection holds, waits on every engine (1009 means it could never
/// fit, even in an empty budget), and goes through once the other's wait
/// runs out; the budget's peak never passes its limit meanwhile.
#[tokio::test]
async fn a_message_that_fits_the_empty_budget_waits_rather_than_1009() {
    let wait = Duration::from_millis(1000);
    for engine in ENGINES {
        eprintln!("engine {engine:?}");
        let budget = MemoryBudget::new(32 << 20).allowance(0).wait_timeout(wait);
        let mut server = start(engine, budget_config(&budget)).await;
        let mut a = upgrade_raw(server.addr).await;
        a.write_all(&frame(false, OpCode::Binary, vec![1; 14 << 20]))
            .await
            .unwrap();
        until(|| budget.in_use() >= 14 << 20).await;
        tokio::time::sleep(Duration::from_millis(600)).await;
        let mut b = upgrade_raw(server.addr).await;
        let (mut rd, mut wr) = b.split();
        let big = frame(true, OpCode::Binary, vec![2; 20 << 20]);
        let send = async {
            let _ = wr.write_all(&big).await;
        };
        let echo = async { read_frame(&mut rd).await };
        let ((), (op, echo)) = within(30, futures_util::future::join(send, echo)).await;
        assert_eq!(
            op,
            0x2,
            "{engine:?}: not refused ({:?})",
            close_of(op, &echo)
        );
        assert_eq!(echo.len(), 20 << 20, "{engine:?}");
        assert_eq!(close_code(&mut a).await, 1013, "{engine:?}");
        drop(b);
        until(|| budget.in_use() == 0).await;
        assert!(
            budget.peak() <= budget.limit(),
            "{engine:?}: peak {} over {}",
            budget.peak(),
            budget.limit()
        );
        let _ = server.ended().await;
    }
}

/// The same with permessage-deflate, where the budget holds inflated
/// output: a peer stalled inside a compressed message holding 14 MiB of
/// it, and an honest client's 20 MiB message, which fits the 32 MiB
/// budget once the other is gone: it waits on every engine, then is
/// echoed, and the stalled peer gets 1013.
#[cfg(feature = "deflate")]
#[tokio::test]
async fn a_compressed_message_that_fits_the_empty_budget_waits_rather_than_1009() {
    let wait = Duration::from_millis(1000);
    let deflate = || wavesock::DeflateConfig::default().compression_threshold(0);
    for engine in ENGINES {
        eprintln!("engine {engine:?}");
        let budget = MemoryBudget::new(32 << 20).allowance(0).wait_timeout(wait);
        let config = budget_config(&budget).deflate(deflate());
        let mut server = start(engine, config).await;
        let mut a = upgrade_deflate(server.addr).await;
        // The first fragment of a compressed message (RSV1, no FIN): 14 MiB
        // once inflated.
        let mut z = flate2::Compress::new(flate2::Compression::new(6), false);
        let mut packed = Vec::with_capacity(64 << 10);
        z.compress_vec(
            &vec![1u8; 14 << 20],
            &mut packed,
            flate2::FlushCompress::Sync,
        )
        .unwrap();
        a.write_all(&masked_frame(0x42, &packed)).await.unwrap();
        until(|| budget.in_use() >= 14 << 20).await;
        tokio::time::sleep(Duration::from_millis(600)).await;
        let mut b = deflate_client(server.addr, deflate()).await;
        b.send(Message::binary(vec![2u8; 20 << 20])).await.unwrap();
        let echo = within(30, b.next())
            .await
            .expect("an answer")
            .expect("no error");
        assert_eq!(echo.len(), 20 << 20, "{engine:?}: {echo:?}");
        assert_eq!(close_code(&mut a).await, 1013, "{engine:?}");
        assert!(budget.peak() <= budget.limit(), "{engine:?}");
        drop(b);
        until(|| budget.in_use() == 0).await;
        let _ = server.ended().await;
    }
}

/// A masked client frame with first byte `b0`.
#[cfg(feature = "deflate")]
fn masked_frame(b0: u8, payload: &[u8]) -> Vec<u8> {
    let key = [9u8, 8, 7, 6];
    let mut f = vec![b0];
    match payload.len() {
        n @ 0..=125 => f.push(0x80 | n as u8),
        n @ 126..=0xFFFF => {
            f.push(0x80 | 126);
            f.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            f.push(0x80 | 127);
            f.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    f.extend_from_slice(&key);
    f.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
    f
}

/// A close frame's code and reason, for a message.
fn close_of(op: u8, payload: &[u8]) -> Option<(u16, String)> {
    (op == 0x8 && payload.len() >= 2).then(|| {
        (
            u16::from_be_bytes([payload[0], payload[1]]),
            String::from_utf8_lossy(&payload[2..]).into_owned(),
        )
    })
}

/// The hub reads into a buffer its connections share and keeps what is
/// left of a frame; the Stream reads into the stack and keeps what came.
/// Under a budget nearly full, what a connection keeps of such a read must
/// fit in the budget, never push it past its limit: the read takes no more
/// than the budget has room for, and waits when it has none.
#[tokio::test]
async fn a_read_into_shared_memory_never_pushes_the_budget_past_its_limit() {
    let wait = Duration::from_millis(1000);
    for engine in ENGINES {
        eprintln!("engine {engine:?}");
        let budget = MemoryBudget::new(4 << 20).allowance(0).wait_timeout(wait);
        let mut server = start(engine, budget_config(&budget)).await;
        let mut a = upgrade_raw(server.addr).await;
        let held = (4 << 20) - (100 << 10);
        a.write_all(&frame(false, OpCode::Binary, vec![1; held]))
            .await
            .unwrap();
        until(|| budget.in_use() >= held).await;
        tokio::time::sleep(Duration::from_millis(600)).await;
        let mut b = upgrade_raw(server.addr).await;
        let (mut rd, mut wr) = b.split();
        let big = frame(true, OpCode::Binary, vec![2; 1 << 20]);
        let send = async {
            let _ = wr.write_all(&big).await;
        };
        let ((), (op, echo)) =
            within(30, futures_util::future::join(send, read_frame(&mut rd))).await;
        assert_eq!(op, 0x2, "{engine:?}: {:?}", close_of(op, &echo));
        assert_eq!(echo.len(), 1 << 20, "{engine:?}");
        assert_eq!(close_code(&mut a).await, 1013, "{engine:?}");
        assert!(
            budget.peak() <= budget.limit(),
            "{engine:?}: peak {} over {}",
            budget.peak(),
            budget.limit()
        );
        drop(b);
        until(|| budget.in_use() == 0).await;
        let _ = server.ended().await;
    }
}

#[tokio::test]
async fn an_idle_connection_holds_no_budget_after_a_large_message() {
    for engine in ENGINES {
        eprintln!("engine {engine:?}");
        let budget = MemoryBudget::new(64 << 20).allowance(0);
        let server = start(engine, budget_config(&budget)).await;
        let (mut ws, _) = wavesock::connect_async(format!("ws://{}/", server.addr))
            .await
            .unwrap();
        ws.send(Message::binary(vec![3u8; 8 << 20])).await.unwrap();
        let echo = within(10, ws.next()).await.unwrap().unwrap();
        assert_eq!(echo.len(), 8 << 20, "{engine:?}");
        until(|| budget.in_use() == 0).await;
        assert!(budget.peak() >= 8 << 20, "{engine:?}: the budget saw it");
    }
}

#[tokio::test]
async fn settings_of_duration_max_mean_never_on_every_engine() {
    let config = Config::default()
        .handshake_timeout(Some(Duration::MAX))
        .ping_interval(Some(Duration::MAX))
        .pong_timeout(Duration::MAX)
        .close_timeout(Duration::MAX)
        .memory_budget(MemoryBudget::new(1 << 20).wait_timeout(Duration::MAX));
    for engine in ENGINES {
        let mut server = start(engine, config.clone()).await;
        let (mut ws, _) = wavesock::connect_async(format!("ws://{}/", server.addr))
            .await
            .unwrap();
        ws.send(Message::text("x")).await.unwrap();
        assert_eq!(
            within(5, ws.next()).await.unwrap().unwrap(),
            Message::text("x")
        );
        ws.close(None).await.unwrap();
        while within(5, ws.next()).await.is_some() {}
        assert_eq!(server.ended().await, None, "{engine:?}");
    }
}

#[tokio::test]
async fn an_idle_connection_holds_no_buffer_after_a_large_message() {
    // Alone: the heap is the process's.
    if !child::alone() {
        return;
    }
    let mut held = Vec::new();
    for engine in ENGINES {
        eprintln!("engine {engine:?}");
        let server = start(engine, Config::default().max_message_size(16 << 20)).await;
        let (mut ws, _) = wavesock::connect_async(format!("ws://{}/", server.addr))
            .await
            .unwrap();
        // Warm: the pools and the runtime hold what they keep anyway.
        for _ in 0..3 {
            ws.send(Message::binary(vec![1u8; 100 << 10]))
                .await
                .unwrap();
            within(10, ws.next()).await.unwrap().unwrap();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let idle = counting::LIVE.load(Ordering::SeqCst);
        ws.send(Message::binary(vec![3u8; 8 << 20])).await.unwrap();
        let echo = within(10, ws.next()).await.unwrap().unwrap();
        assert_eq!(echo.len(), 8 << 20, "{engine:?}");
        drop(echo);
        // The client waits for more, as a read loop does: a Stream gives
        // its memory back when it waits, so this one must be polled.
        let _ = tokio::time::timeout(Duration::from_millis(50), ws.next()).await;
        // Both ends idle again: neither keeps the message's buffers (the
        // pools keep at most a few buffers of their bounded size).
        let slack = 1 << 20;
        let mut live = counting::LIVE.load(Ordering::SeqCst);
        for _ in 0..500 {
            if live < idle + slack {
                break;
            }
            let _ = tokio::time::timeout(Duration::from_millis(1), ws.next()).await;
            tokio::time::sleep(Duration::from_millis(10)).await;
            live = counting::LIVE.load(Ordering::SeqCst);
        }
        if live >= idle + slack {
            held.push(format!(
                "{engine:?}: {live} bytes live, {idle} before the 8 MiB echo"
            ));
        }
        drop(ws);
    }
    assert!(held.is_empty(), "{held:#?}");
}

/// With the `metrics` feature, every engine tells the same story of the
/// same connections: four accepted and four ended (the peer's close, a
/// protocol error, our close, a hang-up) with their close codes' classes,
/// messages and bytes in and out by kind, two refused upgrades, and a
/// handshake time each. The recorder is the process's, so this runs alone
/// in a child process and compares each engine's figures with those
/// before it ran.
#[cfg(feature = "metrics")]
#[test]
fn metrics_tell_the_same_story_on_every_engine() {
    use crate::support::metered::{self, Metrics};
    use wavesock::meter;

    if !child::alone() {
        return;
    }
    let m = metered::install();
    /// The figures a scenario moves.
    fn figures(m: &Metrics, engine: &str) -> Vec<(String, f64)> {
        let e = ("engine", engine);
        let mut out = vec![
            (
                "accepted".into(),
                m.counter(meter::CONNECTIONS_ACCEPTED, &[e]) as f64,
            ),
            ("open".into(), m.gauge(meter::CONNECTIONS_OPEN, &[e])),
            (
                "handshakes".into(),
                m.histogram(meter::HANDSHAKE_DURATION, &[e]).len() as f64,
            ),
        ];
        for (by, code) in [
            ("peer", "normal"),
            ("error", "protocol"),
            ("local", "application"),
            ("gone", "none"),
        ] {
            let n = m.counter(meter::CONNECTIONS_CLOSED, &[e, ("by", by), ("code", code)]);
            out.push((format!("closed by {by} with {code}"), n as f64));
        }
        for kind in ["text", "binary", "control"] {
            let k = [("kind", kind)];
            for (what, name) in [
                ("messages in", meter::MESSAGES_RECEIVED),
                ("bytes in", meter::RECEIVED_BYTES),
                ("messages out", meter::MESSAGES_SENT),
                ("bytes out", meter::SENT_BYTES),
            ] {
                out.push((format!("{kind} {what}"), m.counter(name, &k) as f64));
            }
        }
        for reason in ["request", "version"] {
            let n = m.counter(meter::UPGRADES_REFUSED, &[("reason", reason)]);
            out.push((format!("refused: {reason}"), n as f64));
        }
        out
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut stories = Vec::new();
    for case in ENGINES.into_iter().filter(|c| !c.faults) {
        let engine = case.engine.meter_label();
        let before = figures(m, engine);
        rt.block_on(async {
            let mut server = start(case, Config::default()).await;
            // The peer's close, after a text, a binary and a ping.
            let mut a = upgrade_raw(server.addr).await;
            a.write_all(&frame(true, OpCode::Text, b"hello".to_vec()))
                .await
                .unwrap();
            a.write_all(&frame(true, OpCode::Binary, vec![1, 2, 3]))
                .await
                .unwrap();
            a.write_all(&frame(true, OpCode::Ping, b"p".to_vec()))
                .await
                .unwrap();
            let mut got = Vec::new();
            while got.len() < 3 {
                got.push(read_frame(&mut a).await.0);
            }
            got.sort();
            assert_eq!(got, [0x1, 0x2, 0xA], "{case:?}");
            let close = [&1000u16.to_be_bytes()[..], b""].concat();
            a.write_all(&frame(true, OpCode::Close, close))
                .await
                .unwrap();
            assert_eq!(close_code(&mut a).await, 1000);
            assert_eq!(server.ended().await, None, "{case:?}");
            // A protocol error: text that is not UTF-8.
            let mut b = upgrade_raw(server.addr).await;
            b.write_all(&frame(true, OpCode::Text, vec![0xFF]))
                .await
                .unwrap();
            assert_eq!(close_code(&mut b).await, 1007, "{case:?}");
            assert!(server.ended().await.is_some(), "{case:?}");
            // Our close (4000), answered.
            let mut c = upgrade_raw(server.addr).await;
            c.write_all(&frame(true, OpCode::Text, b"close".to_vec()))
                .await
                .unwrap();
            assert_eq!(close_code(&mut c).await, 4000, "{case:?}");
            let close = [&4000u16.to_be_bytes()[..], b""].concat();
            c.write_all(&frame(true, OpCode::Close, close))
                .await
                .unwrap();
            assert_eq!(server.ended().await, None, "{case:?}");
            // A hang-up.
            drop(upgrade_raw(server.addr).await);
            assert!(server.ended().await.is_some(), "{case:?}");
            // Two refusals: not an upgrade, and an old version.
            for request in [
                "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
                "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                 Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 8\r\n\r\n",
            ] {
                let mut r = TcpStream::connect(server.addr).await.unwrap();
                r.write_all(request.as_bytes()).await.unwrap();
                let mut answer = String::new();
                within(10, r.read_to_string(&mut answer)).await.unwrap();
                assert!(answer.starts_with("HTTP/1.1 4"), "{case:?}: {answer}");
            }
            // Everything recorded: the Stream's when it is dropped, the
            // hub's as the engine ends each connection and its turn.
            until(|| {
                let now = figures(m, engine);
                now[1].1 == before[1].1 && now[0].1 == before[0].1 + 4.0
            })
            .await;
        });
        let after = figures(m, engine);
        let moved: Vec<(String, f64)> = after
            .into_iter()
            .zip(before)
            .map(|((name, now), (_, was))| (name, now - was))
            .collect();
        stories.push((case, moved));
    }
    let (first, expected) = &stories[0];
    let want = |name: &str| expected.iter().find(|(n, _)| n == name).unwrap().1;
    assert_eq!(want("accepted"), 4.0, "{first:?}: {expected:?}");
    assert_eq!(want("handshakes"), 4.0, "{first:?}: {expected:?}");
    assert_eq!(want("open"), 0.0);
    for by in [
        "peer with normal",
        "error with protocol",
        "local with application",
        "gone with none",
    ] {
        assert_eq!(
            want(&format!("closed by {by}")),
            1.0,
            "{first:?}: {expected:?}"
        );
    }
    assert_eq!(want("text messages in"), 2.0, "{expected:?}");
    assert_eq!(want("text bytes in"), 10.0, "{expected:?}");
    assert_eq!(want("binary messages in"), 1.0, "{expected:?}");
    assert_eq!(want("binary bytes in"), 3.0, "{expected:?}");
    assert_eq!(want("text messages out"), 1.0, "{expected:?}");
    assert_eq!(want("text bytes out"), 5.0, "{expected:?}");
    assert_eq!(want("binary messages out"), 1.0, "{expected:?}");
    assert_eq!(want("binary bytes out"), 3.0, "{expected:?}");
    // The ping; close frames are counted as connections closed.
    assert_eq!(want("control messages in"), 1.0, "{expected:?}");
    assert_eq!(want("control bytes in"), 1.0, "{expected:?}");
    assert_eq!(want("control messages out"), 0.0, "{expected:?}");
    assert_eq!(want("refused: request"), 1.0, "{expected:?}");
    assert_eq!(want("refused: version"), 1.0, "{expected:?}");
    for (case, moved) in &stories[1..] {
        assert_eq!(moved, expected, "{case:?} against {first:?}");
    }
    // Each accepted connection's handshake timed, on each engine.
    for engine in ["stream", "hub-0"] {
        let times = m.histogram(meter::HANDSHAKE_DURATION, &[("engine", engine)]);
        assert_eq!(times.len(), 8, "{engine}");
        assert!(times.iter().all(|t| (0.0..10.0).contains(t)), "{times:?}");
    }
    assert!(m.description(meter::CONNECTIONS_OPEN).is_some());
}

/// With the `metrics` feature, on every engine: a peer that does not read
/// its echoes is counted write-blocked until it reads them; a connection
/// that waits for the memory budget another holds is counted waiting,
/// with the budget's use and limit recorded; the hub records its turns.
/// Alone in a child process: the recorder is the process's.
#[cfg(feature = "metrics")]
#[test]
fn metrics_count_pressure_on_every_engine() {
    use wavesock::meter;

    let Some((m, rt)) = metered_alone() else {
        return;
    };
    for (case_no, case) in ENGINES.into_iter().filter(|c| !c.faults).enumerate() {
        rt.block_on(async {
            let budget = MemoryBudget::new(1 << 20)
                .allowance(0)
                .wait_timeout(Duration::from_secs(30));
            let mut server = start(case, budget_config(&budget)).await;

            // Echoes nobody reads: 8 MiB, past what the sockets buffer (the
            // client's receive buffer kept small, not autotuned).
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.set_recv_buffer_size(64 << 10).unwrap();
            let mut tcp = socket.connect(server.addr).await.unwrap();
            tcp.write_all(raw::REQUEST).await.unwrap();
            let mut head = Vec::new();
            while !head.ends_with(b"\r\n\r\n") {
                head.push(tcp.read_u8().await.unwrap());
            }
            assert!(head.starts_with(b"HTTP/1.1 101"));
            let blocked = || m.gauge(meter::WRITE_BLOCKED, &[]);
            assert_eq!(blocked(), 0.0, "{case:?}");
            let (mut rd, mut wr) = tcp.into_split();
            let writer = tokio::spawn(async move {
                let chunk = frame(true, OpCode::Binary, vec![7; 256 << 10]);
                for _ in 0..32 {
                    wr.write_all(&chunk).await.unwrap();
                }
                wr
            });
            until(|| blocked() == 1.0).await;
            // What waits for the peer: some of the echoes, at most all.
            let waiting = m.gauge(meter::WRITE_BLOCKED_BYTES, &[]);
            assert!(
                waiting > 0.0 && waiting <= f64::from(32 * ((256 << 10) + 10)),
                "{case:?}: {waiting}"
            );
            // Read every echo: the server writes the rest, and is not
            // blocked any more.
            for _ in 0..32 {
                let (op, payload) = read_frame(&mut rd).await;
                assert_eq!((op, payload.len()), (0x2, 256 << 10), "{case:?}");
            }
            let wr = writer.await.unwrap();
            until(|| blocked() == 0.0).await;
            assert_eq!(m.gauge(meter::WRITE_BLOCKED_BYTES, &[]), 0.0, "{case:?}");
            drop((rd, wr));
            server.ended().await;

            // A holds 768 KiB of the budget in a message it does not
            // finish; B's 512 KiB waits for it.
            let waits = m.counter(meter::BUDGET_WAITS, &[]);
            let mut a = upgrade_raw(server.addr).await;
            let head = frame(false, OpCode::Binary, vec![1; 768 << 10]);
            a.write_all(&head).await.unwrap();
            until(|| budget.in_use() >= 768 << 10).await;
            let mut b = upgrade_raw(server.addr).await;
            b.write_all(&frame(true, OpCode::Binary, vec![2; 512 << 10]))
                .await
                .unwrap();
            until(|| m.counter(meter::BUDGET_WAITS, &[]) > waits).await;
            // The other cases' budgets were given back whole.
            let in_use = m.gauge(meter::BUDGET_IN_USE, &[]);
            assert!(
                in_use >= f64::from(768 << 10) && in_use <= f64::from(1 << 20),
                "{case:?}: {in_use}"
            );
            // Every case's server still runs, each with a budget of its
            // own: the limit is their sum.
            assert_eq!(
                m.gauge(meter::BUDGET_LIMIT, &[]),
                f64::from(1 << 20) * (case_no + 1) as f64,
                "{case:?}"
            );
            // A finishes its message; both are echoed.
            a.write_all(&frame(true, OpCode::Continuation, vec![1; 16]))
                .await
                .unwrap();
            assert_eq!(read_frame(&mut a).await.1.len(), (768 << 10) + 16);
            assert_eq!(read_frame(&mut b).await.1.len(), 512 << 10);
            drop((a, b));
            server.ended().await;
            server.ended().await;
            until(|| m.gauge(meter::BUDGET_IN_USE, &[]) == 0.0).await;
        });
    }
    // The hub's turns, on its engine 0 (both readiness modes).
    let engine = [("engine", "hub-0")];
    let served = m.histogram(meter::TURN_CONNECTIONS, &engine);
    assert!(!served.is_empty() && served.iter().all(|&n| n >= 0.0));
    assert!(served.iter().any(|&n| n >= 1.0), "{served:?}");
    let took = m.histogram(meter::TURN_DURATION, &engine);
    assert_eq!(took.len(), served.len());
    assert!(took.iter().all(|&t| (0.0..10.0).contains(&t)));
}

// ---- Messages that fit the budget alone, on every engine (cases a
// break-it round of the budget's growth rules found). ----

/// A Stream client with permessage-deflate and room for large messages.
#[cfg(feature = "deflate")]
async fn deflate_client(
    addr: SocketAddr,
    deflate: wavesock::DeflateConfig,
) -> wavesock::ClientStream {
    let client = Config::default()
        .deflate(deflate)
        .max_message_size(64 << 20)
        .max_frame_size(64 << 20);
    let url = format!("ws://{addr}/");
    wavesock::connect_async_with_config(url, client)
        .await
        .unwrap()
        .0
}

/// A raw connection that negotiated permessage-deflate.
#[cfg(feature = "deflate")]
async fn upgrade_deflate(addr: SocketAddr) -> TcpStream {
    let mut a = TcpStream::connect(addr).await.unwrap();
    let mut request = raw::REQUEST[..raw::REQUEST.len() - 2].to_vec();
    request.extend_from_slice(b"Sec-WebSocket-Extensions: permessage-deflate\r\n\r\n");
    a.write_all(&request).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        head.push(a.read_u8().await.unwrap());
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    assert!(head.contains("permessage-deflate"), "{head}");
    a
}

/// What the server answered first: `Ok(len)` for an echo, `Err(code)`
/// for a close.
async fn first_answer(tcp: &mut TcpStream) -> Result<usize, u16> {
    let (op, payload) = read_frame(tcp).await;
    if op == 0x8 {
        Err(u16::from_be_bytes([payload[0], payload[1]]))
    } else {
        Ok(payload.len())
    }
}

/// A compressed message of 71% of a budget it has to itself is echoed on
/// every engine: its output doubles to 2 MiB, then takes what is left.
#[cfg(feature = "deflate")]
#[tokio::test]
async fn a_compressed_message_of_71_percent_of_an_empty_budget_is_echoed() {
    let wait = Duration::from_millis(1000);
    let deflate = || wavesock::DeflateConfig::default().compression_threshold(0);
    let size = (2 << 20) + (128 << 10);
    let mut outcomes = Vec::new();
    for engine in ENGINES {
        let budget = MemoryBudget::new(3 << 20).allowance(0).wait_timeout(wait);
        let config = budget_config(&budget).deflate(deflate());
        let server = start(engine, config).await;
        let mut b = deflate_client(server.addr, deflate()).await;
        b.send(Message::binary(vec![2u8; size])).await.unwrap();
        let answer = within(10, b.next()).await;
        let outcome = match answer {
            Some(Ok(m)) if m.len() == size => "echoed".to_string(),
            other => format!("{other:?}"),
        };
        outcomes.push((engine, outcome));
        drop(b);
    }
    assert!(
        outcomes.iter().all(|(_, o)| o == "echoed"),
        "a {size}-byte compressed message alone in a 3 MiB budget: {outcomes:#?}"
    );
}

/// A compressed message of two fragments, 59% of a budget it has to
/// itself, is echoed on every engine: the first fragment's output, grown
/// by doubling to what the budget has, gives back what it does not use
/// for the second fragment, which must be held whole.
#[cfg(feature = "deflate")]
#[tokio::test]
async fn a_fragmented_compressed_message_of_59_percent_of_an_empty_budget_is_echoed() {
    let wait = Duration::from_millis(1000);
    let deflate = || wavesock::DeflateConfig::default().compression_threshold(0);
    let first = (2 << 20) + (64 << 10);
    let second = 384 << 10;
    let mut outcomes = Vec::new();
    for engine in ENGINES {
        let budget = MemoryBudget::new(4 << 20).allowance(0).wait_timeout(wait);
        let config = budget_config(&budget).deflate(deflate());
        let server = start(engine, config).await;
        let mut a = upgrade_deflate(server.addr).await;
        let mut z = flate2::Compress::new(flate2::Compression::new(6), false);
        let mut one = Vec::with_capacity(64 << 10);
        z.compress_vec(&vec![1u8; first], &mut one, flate2::FlushCompress::Sync)
            .unwrap();
        let mut rng = raw::Rng(0x1234_5678);
        let noise: Vec<u8> = (0..second).map(|_| rng.next() as u8).collect();
        let mut two = Vec::with_capacity(second + (64 << 10));
        z.compress_vec(&noise, &mut two, flate2::FlushCompress::Sync)
            .unwrap();
        assert!(two.ends_with(&[0, 0, 0xFF, 0xFF]));
        two.truncate(two.len() - 4);
        a.write_all(&masked_frame(0x42, &one)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let held = budget.in_use();
        a.write_all(&masked_frame(0x80, &two)).await.unwrap();
        let outcome = within(10, first_answer(&mut a)).await;
        outcomes.push((engine, held, outcome));
    }
    assert!(
        outcomes
            .iter()
            // (The echo is compressed: its frame is shorter.)
            .all(|(_, _, o)| o.is_ok()),
        "a {} KiB compressed message (two fragments) alone in a 4 MiB budget: \
         (engine, budget in use after the first fragment, answer) {outcomes:#?}",
        (first + second) >> 10
    );
}

/// An uncompressed message of two fragments, 59% of a budget it has to
/// itself, is echoed on every engine (the continuation counted in the
/// read buffer and in the fragments' copy of it at once).
#[tokio::test]
async fn a_fragmented_message_of_59_percent_of_an_empty_budget_is_echoed() {
    let wait = Duration::from_millis(1000);
    let mut outcomes = Vec::new();
    for engine in ENGINES {
        let budget = MemoryBudget::new(1 << 20).allowance(0).wait_timeout(wait);
        let server = start(engine, budget_config(&budget)).await;
        let mut a = upgrade_raw(server.addr).await;
        a.write_all(&frame(false, OpCode::Binary, vec![1; 1 << 10]))
            .await
            .unwrap();
        a.write_all(&frame(true, OpCode::Continuation, vec![2; 600 << 10]))
            .await
            .unwrap();
        let outcome = within(10, first_answer(&mut a)).await;
        outcomes.push((engine, outcome));
    }
    assert!(
        outcomes.iter().all(|(_, o)| *o == Ok(601 << 10)),
        "a 601 KiB message (two fragments) alone in a 1 MiB budget: {outcomes:#?}"
    );
}

/// A metrics test's start: alone in a child process (`None` in the
/// parent, which only waits for it), the debugging recorder installed, a
/// current-thread runtime.
#[cfg(feature = "metrics")]
fn metered_alone() -> Option<(
    &'static crate::support::metered::Metrics,
    tokio::runtime::Runtime,
)> {
    if !child::alone() {
        return None;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    Some((crate::support::metered::install(), rt))
}

#[cfg(feature = "metrics")]
impl Engine {
    /// The `engine` label its connections are counted under (the hub
    /// with one engine).
    fn meter_label(self) -> &'static str {
        match self {
            Engine::Stream | Engine::Split => "stream",
            Engine::Hub | Engine::HubTokio => "hub-0",
        }
    }
}

/// A connection adopted by the hub (upgraded by hyper or axum, then
/// `Adopter::adopt`) is counted accepted and open, then closed, as a
/// Stream made with `from_raw_socket` after the same upgrade is. (A
/// break-it round found it counted closed only: the gauge went to -1.)
#[cfg(feature = "metrics")]
#[test]
fn metrics_count_an_adopted_connection_opened_and_closed() {
    use wavesock::meter;

    let Some((m, rt)) = metered_alone() else {
        return;
    };
    let mut wrong = Vec::new();
    rt.block_on(async {
        for readiness in [Readiness::Owned, Readiness::Tokio] {
            let base = m.gauge(meter::CONNECTIONS_OPEN, &[("engine", "hub-0")]);
            let (tx, mut ended) = mpsc::unbounded_channel();
            let config = HubConfig::default().engines(Some(1)).readiness(readiness);
            let hub = Hub::new(HubEcho(tx), config).unwrap();
            let adopter = hub.adopter();
            let handle = hub.handle();
            let served = tokio::spawn(hub.run());
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let (client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
            // The upgrade done elsewhere: the hub takes the socket open.
            adopter.adopt(accepted.unwrap().0, ()).await.unwrap();
            let mut ws = wavesock::WebSocketStream::from_raw_socket(
                client.unwrap(),
                wavesock::Role::Client,
                Config::default(),
            )
            .unwrap();
            ws.send(Message::text("hi")).await.unwrap();
            assert_eq!(
                within(5, ws.next()).await.unwrap().unwrap(),
                Message::text("hi")
            );
            let hub_open = || m.gauge(meter::CONNECTIONS_OPEN, &[("engine", "hub-0")]) - base;
            let while_open = hub_open();
            ws.close(None).await.unwrap();
            while within(5, ws.next()).await.is_some() {}
            assert_eq!(within(5, ended.recv()).await, Some(None));
            handle.shutdown().await.unwrap();
            within(5, served).await.unwrap();
            let after = hub_open();
            if (while_open, after) != (1.0, 0.0) {
                wrong.push(format!(
                    "{readiness:?}: hub-0's open gauge {while_open} while the adopted connection \
                     was open, {after} after (want 1 then 0)"
                ));
            }
        }
    });
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A hub whose task is dropped (`serve` in a `select!` with a shutdown
/// signal, its `JoinHandle` aborted, its runtime shut down) closes its
/// connections' sockets and counts them closed, as a Stream's task
/// aborted the same way does. (Found by a break-it round: they stayed
/// counted open.)
#[cfg(feature = "metrics")]
#[test]
fn metrics_count_a_dropped_hubs_connections_closed() {
    use wavesock::meter;

    let Some((m, rt)) = metered_alone() else {
        return;
    };
    let mut wrong = Vec::new();
    rt.block_on(async {
        for case in ENGINES.into_iter().filter(|c| !c.faults) {
            let engine = case.engine.meter_label();
            let base = m.gauge(meter::CONNECTIONS_OPEN, &[("engine", engine)]);
            let open = || m.gauge(meter::CONNECTIONS_OPEN, &[("engine", engine)]) - base;
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let (tx, _ended) = mpsc::unbounded_channel();
            let task = match case.engine {
                Engine::Hub | Engine::HubTokio => {
                    let readiness = if case.engine == Engine::Hub {
                        Readiness::Owned
                    } else {
                        Readiness::Tokio
                    };
                    let config = HubConfig::default().engines(Some(1)).readiness(readiness);
                    let hub = Hub::new(HubEcho(tx), config).unwrap();
                    tokio::spawn(async move {
                        let _ = hub.serve(listener).await;
                    })
                }
                engine => tokio::spawn(async move {
                    let (tcp, _) = listener.accept().await.unwrap();
                    serve_any(engine, tcp, Config::default()).await;
                }),
            };
            let mut tcp = upgrade_raw(addr).await;
            tcp.write_all(&frame(true, OpCode::Text, b"hi".to_vec()))
                .await
                .unwrap();
            assert_eq!(read_frame(&mut tcp).await.0, 0x1);
            until(|| open() == 1.0).await;
            // The server goes away: its socket is closed.
            task.abort();
            let _ = task.await;
            let mut rest = Vec::new();
            let _ = within(5, tcp.read_to_end(&mut rest)).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            if open() != 0.0 {
                wrong.push(format!(
                    "{case:?}: open {} after its server was dropped",
                    open()
                ));
            }
        }
    });
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// At `HubHandle::shutdown`, a connection whose peer reads nothing is cut
/// at the hub's `shutdown_timeout`, and `wavesock_write_blocked_connections`
/// comes back to 0. (Found by a break-it round: the tally that took it
/// back was never recorded, and the gauge stayed at 1.)
#[cfg(feature = "metrics")]
#[test]
fn metrics_unblock_what_a_shutdown_past_its_deadline_ends() {
    use wavesock::meter;

    let Some((m, rt)) = metered_alone() else {
        return;
    };
    let mut wrong = Vec::new();
    rt.block_on(async {
        for readiness in [Readiness::Owned, Readiness::Tokio] {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let (tx, _ended) = mpsc::unbounded_channel();
            let config = HubConfig::default()
                .engines(Some(1))
                .readiness(readiness)
                .shutdown_timeout(Duration::from_millis(300))
                .config(Config::default().close_timeout(Duration::from_secs(60)));
            let hub = Hub::new(HubEcho(tx), config).unwrap();
            let handle = hub.handle();
            let served = tokio::spawn(hub.serve(listener));

            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.set_recv_buffer_size(64 << 10).unwrap();
            let mut tcp = socket.connect(addr).await.unwrap();
            tcp.write_all(raw::REQUEST).await.unwrap();
            let mut head = Vec::new();
            while !head.ends_with(b"\r\n\r\n") {
                head.push(tcp.read_u8().await.unwrap());
            }
            let base = m.gauge(meter::WRITE_BLOCKED, &[]);
            let bytes_base = m.gauge(meter::WRITE_BLOCKED_BYTES, &[]);
            let blocked = || m.gauge(meter::WRITE_BLOCKED, &[]) - base;
            let (rd, mut wr) = tcp.into_split();
            let writer = tokio::spawn(async move {
                let chunk = frame(true, OpCode::Binary, vec![7; 256 << 10]);
                for _ in 0..32 {
                    if wr.write_all(&chunk).await.is_err() {
                        break;
                    }
                }
                wr
            });
            until(|| blocked() == 1.0).await;
            // Shut down; the peer never reads, so the deadline cuts it.
            handle.shutdown().await.unwrap();
            within(10, served).await.unwrap().unwrap();
            writer.abort();
            drop(rd);
            tokio::time::sleep(Duration::from_millis(100)).await;
            let bytes = m.gauge(meter::WRITE_BLOCKED_BYTES, &[]) - bytes_base;
            if (blocked(), bytes) != (0.0, 0.0) {
                wrong.push(format!(
                    "{readiness:?}: {} write-blocked, {bytes} bytes, after the hub shut down",
                    blocked()
                ));
            }
        }
    });
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// `wavesock_handshake_duration_seconds` is the time the handshake took on
/// every engine, with no handshake timeout and with `Duration::MAX`.
/// (Found by a break-it round: the hub worked it out from the handshake's
/// deadline, and recorded nothing, or 0 s.)
#[cfg(feature = "metrics")]
#[test]
fn metrics_time_the_handshake_without_a_handshake_timeout() {
    use wavesock::meter;

    let Some((m, rt)) = metered_alone() else {
        return;
    };
    let mut wrong = Vec::new();
    for timeout in [None, Some(Duration::MAX)] {
        for case in ENGINES.into_iter().filter(|c| !c.faults) {
            let engine = case.engine.meter_label();
            let before = m.histogram(meter::HANDSHAKE_DURATION, &[("engine", engine)]);
            rt.block_on(async {
                let config = Config::default().handshake_timeout(timeout);
                let mut server = start(case, config).await;
                // A request that takes 200 ms to arrive whole.
                let mut tcp = TcpStream::connect(server.addr).await.unwrap();
                let (first, rest) = raw::REQUEST.split_at(20);
                tcp.write_all(first).await.unwrap();
                tokio::time::sleep(Duration::from_millis(200)).await;
                tcp.write_all(rest).await.unwrap();
                let mut head = Vec::new();
                while !head.ends_with(b"\r\n\r\n") {
                    head.push(tcp.read_u8().await.unwrap());
                }
                assert!(head.starts_with(b"HTTP/1.1 101"));
                drop(tcp);
                server.ended().await;
            });
            let after = m.histogram(meter::HANDSHAKE_DURATION, &[("engine", engine)]);
            let new: Vec<f64> = after.into_iter().skip(before.len()).collect();
            if new.len() != 1 || !(0.15..10.0).contains(&new[0]) {
                wrong.push(format!(
                    "{case:?}, handshake timeout {timeout:?}: recorded {new:?}"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// `payload` compressed as one permessage-deflate message (raw DEFLATE,
/// a sync flush, its `00 00 FF FF` stripped), by flate2 rather than by
/// the code under test.
#[cfg(all(feature = "metrics", feature = "deflate"))]
fn packed_message(payload: &[u8]) -> Vec<u8> {
    let mut z = flate2::Compress::new(flate2::Compression::default(), false);
    let mut packed = Vec::with_capacity(payload.len() + 64);
    z.compress_vec(payload, &mut packed, flate2::FlushCompress::Sync)
        .unwrap();
    packed.truncate(packed.len() - 4);
    packed
}

/// The deflate byte counters: [sent, received] x [uncompressed,
/// compressed].
#[cfg(all(feature = "metrics", feature = "deflate"))]
fn deflate_figures(m: &crate::support::metered::Metrics) -> [[u64; 2]; 2] {
    [
        wavesock::meter::DEFLATE_SENT_BYTES,
        wavesock::meter::DEFLATE_RECEIVED_BYTES,
    ]
    .map(|name| ["uncompressed", "compressed"].map(|form| m.counter(name, &[("form", form)])))
}

/// permessage-deflate's bytes on every engine: a compressed text message
/// of 9 000 bytes comes in and its echo goes out compressed; both count
/// 9 000 bytes uncompressed and, compressed, the payloads the wire
/// carried.
#[cfg(all(feature = "metrics", feature = "deflate"))]
#[test]
fn metrics_count_deflate_bytes_on_every_engine() {
    let Some((m, rt)) = metered_alone() else {
        return;
    };
    let text = "wavesock ".repeat(1000);
    let packed = packed_message(text.as_bytes());
    let figures = || deflate_figures(m);
    let mut wrong = Vec::new();
    for case in ENGINES.into_iter().filter(|c| !c.faults) {
        let before = figures();
        let echoed = rt.block_on(async {
            let deflate = wavesock::DeflateConfig::default().compression_threshold(0);
            let mut server = start(case, Config::default().deflate(deflate)).await;
            let mut a = upgrade_deflate(server.addr).await;
            a.write_all(&masked_frame(0xC1, &packed)).await.unwrap();
            let (op, echoed) = read_frame(&mut a).await;
            assert_eq!(op, 0x1, "{case:?}");
            drop(a);
            server.ended().await;
            echoed
        });
        let mut inflated = Vec::with_capacity(2 * text.len());
        let mut tail = echoed.clone();
        tail.extend_from_slice(&[0, 0, 0xFF, 0xFF]);
        flate2::Decompress::new(false)
            .decompress_vec(&tail, &mut inflated, flate2::FlushDecompress::Sync)
            .unwrap();
        assert_eq!(
            inflated,
            text.as_bytes(),
            "{case:?}: the echo is compressed"
        );
        let after = figures();
        let moved = [0, 1].map(|way| [0, 1].map(|form| after[way][form] - before[way][form]));
        let want = [
            [text.len() as u64, echoed.len() as u64],
            [text.len() as u64, packed.len() as u64],
        ];
        if moved != want {
            wrong.push(format!(
                "{case:?}: [sent, received] x [uncompressed, compressed] moved {moved:?}, want {want:?}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Refuses every upgrade with a redirect.
#[cfg(feature = "metrics")]
#[derive(Clone)]
struct Redirect;

#[cfg(feature = "metrics")]
impl Handler for Redirect {
    type Data = ();

    fn upgrade(
        &mut self,
        _: &wavesock::http::Request<()>,
        _: &mut wavesock::http::Response<()>,
    ) -> Result<(), wavesock::hub::HttpResponse> {
        let mut refusal = wavesock::http::Response::new(Vec::new());
        *refusal.status_mut() = wavesock::http::StatusCode::FOUND;
        refusal
            .headers_mut()
            .insert("location", "/login".parse().unwrap());
        Err(refusal)
    }

    fn message(&mut self, _: &mut Ws<'_, ()>, _: HubMessage<'_>) {}
}

/// An upgrade the application refuses with a redirect (302 to a login
/// page) is counted `reason="rejected"` on every engine. (Found by a
/// break-it round: the hub took a refusal whose status is not an error
/// for no refusal.)
#[cfg(feature = "metrics")]
#[test]
fn metrics_count_an_upgrade_refused_with_a_redirect_alike() {
    use wavesock::meter;

    let Some((m, rt)) = metered_alone() else {
        return;
    };
    let refused = || m.counter(meter::UPGRADES_REFUSED, &[]);
    let mut counted = Vec::new();
    rt.block_on(async {
        for engine in ["stream", "hub (owned)", "hub (tokio)"] {
            let before = refused();
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            match engine {
                "stream" => {
                    tokio::spawn(async move {
                        let (tcp, _) = listener.accept().await.unwrap();
                        // The callback shape users know from tokio-tungstenite.
                        #[allow(clippy::result_large_err)]
                        let callback =
                            |_: &wavesock::http::Request<()>, _: wavesock::http::Response<()>| {
                                let mut refusal = wavesock::http::Response::new(None);
                                *refusal.status_mut() = wavesock::http::StatusCode::FOUND;
                                refusal
                                    .headers_mut()
                                    .insert("location", "/login".parse().unwrap());
                                Err(refusal)
                            };
                        let _ = wavesock::accept_hdr_async_with_config(
                            tcp,
                            callback,
                            Config::default(),
                        )
                        .await;
                    });
                }
                _ => {
                    let readiness = if engine == "hub (owned)" {
                        Readiness::Owned
                    } else {
                        Readiness::Tokio
                    };
                    let config = HubConfig::default().engines(Some(1)).readiness(readiness);
                    let hub = Hub::new(Redirect, config).unwrap();
                    tokio::spawn(hub.serve(listener));
                }
            }
            let mut tcp = TcpStream::connect(addr).await.unwrap();
            tcp.write_all(raw::REQUEST).await.unwrap();
            let mut answer = String::new();
            within(5, tcp.read_to_string(&mut answer)).await.unwrap();
            assert!(answer.starts_with("HTTP/1.1 302"), "{engine}: {answer}");
            tokio::time::sleep(Duration::from_millis(100)).await;
            counted.push((engine, refused() - before));
        }
    });
    assert_eq!(
        counted,
        [("stream", 1), ("hub (owned)", 1), ("hub (tokio)", 1)],
        "upgrades refused with a 302, counted"
    );
}

/// An uncompressed message of two fragments, 94% of a budget it has to
/// itself, is echoed on every engine, whether its first fragment is small
/// or not (a break-it round found the hub refusing one the Stream took).
#[tokio::test]
async fn a_fragmented_message_of_94_percent_of_an_empty_budget_is_echoed() {
    let wait = Duration::from_millis(1000);
    let mut outcomes = Vec::new();
    for first in [1usize << 10, 64 << 10] {
        for engine in ENGINES {
            let budget = MemoryBudget::new(1 << 20).allowance(0).wait_timeout(wait);
            let server = start(engine, budget_config(&budget)).await;
            let mut a = upgrade_raw(server.addr).await;
            a.write_all(&frame(false, OpCode::Binary, vec![1; first]))
                .await
                .unwrap();
            let rest = (940 << 10) - first;
            a.write_all(&frame(true, OpCode::Continuation, vec![2; rest]))
                .await
                .unwrap();
            let outcome = within(10, first_answer(&mut a)).await;
            outcomes.push((first, engine, outcome));
        }
    }
    assert!(
        outcomes.iter().all(|(_, _, o)| *o == Ok(940 << 10)),
        "a 940 KiB message (two fragments) alone in a 1 MiB budget: {outcomes:#?}"
    );
}

// ---------------------------------------------------------------------
// Metrics: the clock, deflate bytes, ends and pieces (from a break-it
// round on the metrics).
// ---------------------------------------------------------------------

/// A hub's timers follow Tokio's clock with the `metrics` feature as
/// without it, so that under a paused clock (`start_paused`,
/// `tokio::time::pause`) a handshake timeout fires in virtual time. (A
/// break-it round found the engine seeding each turn's `now` with the
/// turn meter's real clock: the deadline never came in virtual time, and
/// the engine spun until the real clock caught up.)
#[test]
fn hub_timers_follow_tokios_paused_clock() {
    let mut wrong = Vec::new();
    for readiness in [Readiness::Owned, Readiness::Tokio] {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        let real = std::time::Instant::now();
        rt.block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let (tx, _ended) = mpsc::unbounded_channel();
            let config = HubConfig::default()
                .engines(Some(1))
                .readiness(readiness)
                .config(Config::default().handshake_timeout(Some(Duration::from_secs(8))));
            let hub = Hub::new(HubEcho(tx), config).unwrap();
            tokio::spawn(hub.serve(listener));
            let mut tcp = TcpStream::connect(addr).await.unwrap();
            // Nothing sent: the hub cuts it at its handshake timeout.
            let mut rest = Vec::new();
            let cut =
                tokio::time::timeout(Duration::from_secs(3600), tcp.read_to_end(&mut rest)).await;
            assert!(
                cut.is_ok(),
                "{readiness:?}: never cut, even in virtual time"
            );
        });
        if real.elapsed() > Duration::from_secs(4) {
            wrong.push(format!(
                "{readiness:?}: an 8 s handshake timeout under a paused clock took {:?} of real time",
                real.elapsed()
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The deflate byte counters for a compressed message that comes
/// fragmented (3 frames, a ping between them) on every engine: counted
/// once, its compressed bytes the payloads of its frames.
#[cfg(all(feature = "metrics", feature = "deflate"))]
#[test]
fn metrics_count_deflate_bytes_of_a_fragmented_compressed_message() {
    use wavesock::meter;

    let Some((m, rt)) = metered_alone() else {
        return;
    };
    let text = "wavesock fragments ".repeat(800);
    let packed = packed_message(text.as_bytes());
    let figures = || deflate_figures(m);
    let msgs = || {
        [
            m.counter(meter::MESSAGES_RECEIVED, &[("kind", "text")]),
            m.counter(meter::RECEIVED_BYTES, &[("kind", "text")]),
        ]
    };
    let mut wrong = Vec::new();
    for case in ENGINES.into_iter().filter(|c| !c.faults) {
        let before = figures();
        let before_msgs = msgs();
        let echoed = rt.block_on(async {
            let deflate = wavesock::DeflateConfig::default().compression_threshold(0);
            let mut server = start(case, Config::default().deflate(deflate)).await;
            let mut a = upgrade_deflate(server.addr).await;
            let third = packed.len() / 3;
            a.write_all(&masked_frame(0x41, &packed[..third]))
                .await
                .unwrap();
            a.write_all(&masked_frame(0x89, b"p")).await.unwrap();
            a.write_all(&masked_frame(0x00, &packed[third..2 * third]))
                .await
                .unwrap();
            a.write_all(&masked_frame(0x80, &packed[2 * third..]))
                .await
                .unwrap();
            let (mut op, mut echoed) = read_frame(&mut a).await;
            if op == 0xA {
                (op, echoed) = read_frame(&mut a).await;
            }
            assert_eq!(op, 0x1, "{case:?}");
            drop(a);
            server.ended().await;
            echoed
        });
        let after = figures();
        let after_msgs = msgs();
        let moved = [0, 1].map(|way| [0, 1].map(|form| after[way][form] - before[way][form]));
        let want = [
            [text.len() as u64, echoed.len() as u64],
            [text.len() as u64, packed.len() as u64],
        ];
        if moved != want {
            wrong.push(format!(
                "{case:?}: [sent, received] x [uncompressed, compressed] moved {moved:?}, want {want:?}"
            ));
        }
        let got = [0, 1].map(|i| after_msgs[i] - before_msgs[i]);
        if got != [1, text.len() as u64] {
            wrong.push(format!("{case:?}: received text [messages, bytes] {got:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Takes 150 ms to decide on each upgrade (an authentication check done
/// in the callback), then echoes.
#[cfg(feature = "metrics")]
#[derive(Clone)]
struct SlowUpgrade;

#[cfg(feature = "metrics")]
impl Handler for SlowUpgrade {
    type Data = ();

    fn upgrade(
        &mut self,
        _: &wavesock::http::Request<()>,
        _: &mut wavesock::http::Response<()>,
    ) -> Result<(), wavesock::hub::HttpResponse> {
        std::thread::sleep(Duration::from_millis(150));
        Ok(())
    }

    fn message(&mut self, ws: &mut Ws<'_, ()>, msg: HubMessage<'_>) {
        let _ = ws.send_borrowed(msg);
    }
}

/// `wavesock_handshake_duration_seconds` includes the application's
/// `upgrade` callback on the hub as on the Stream server: a callback that
/// takes 150 ms is recorded as at least 150 ms. (A break-it round found
/// the hub timing from one turn start to another, 0 s.)
#[cfg(feature = "metrics")]
#[test]
fn metrics_time_the_handshake_with_its_upgrade_callback() {
    use wavesock::meter;

    let Some((m, rt)) = metered_alone() else {
        return;
    };
    let mut wrong = Vec::new();
    rt.block_on(async {
        // The Stream server, for comparison.
        {
            let before = m
                .histogram(meter::HANDSHAKE_DURATION, &[("engine", "stream")])
                .len();
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let server = tokio::spawn(async move {
                let (tcp, _) = listener.accept().await.unwrap();
                #[allow(clippy::result_large_err)] // tokio-tungstenite's callback shape
                let slow = |_: &wavesock::http::Request<()>, r: wavesock::http::Response<()>| {
                    std::thread::sleep(Duration::from_millis(150));
                    Ok(r)
                };
                let mut ws = wavesock::accept_hdr_async(tcp, slow).await.unwrap();
                while ws.next().await.is_some() {}
            });
            let tcp = upgrade_raw(addr).await;
            drop(tcp);
            let _ = server.await;
            let new: Vec<f64> = m
                .histogram(meter::HANDSHAKE_DURATION, &[("engine", "stream")])
                .into_iter()
                .skip(before)
                .collect();
            if new.len() != 1 || new[0] < 0.15 {
                wrong.push(format!("stream: recorded {new:?}"));
            }
        }
        for readiness in [Readiness::Owned, Readiness::Tokio] {
            let before = m
                .histogram(meter::HANDSHAKE_DURATION, &[("engine", "hub-0")])
                .len();
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let config = HubConfig::default().engines(Some(1)).readiness(readiness);
            let hub = Hub::new(SlowUpgrade, config).unwrap();
            let handle = hub.handle();
            let task = tokio::spawn(hub.serve(listener));
            let tcp = upgrade_raw(addr).await;
            drop(tcp);
            tokio::time::sleep(Duration::from_millis(100)).await;
            let _ = handle.shutdown().await;
            let _ = task.await;
            let new: Vec<f64> = m
                .histogram(meter::HANDSHAKE_DURATION, &[("engine", "hub-0")])
                .into_iter()
                .skip(before)
                .collect();
            if new.len() != 1 || new[0] < 0.15 {
                wrong.push(format!("hub {readiness:?}: recorded {new:?}"));
            }
        }
    });
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The deflate byte counters for a compressed message whose
/// inflating stops to wait for the memory budget (another connection
/// holds it), then resumes: counted once, its compressed bytes as they
/// came.
#[cfg(all(feature = "metrics", feature = "deflate"))]
#[test]
fn metrics_count_deflate_bytes_of_a_message_that_waited_for_budget() {
    use wavesock::meter;

    let Some((m, rt)) = metered_alone() else {
        return;
    };
    let size = 800 << 10;
    let mut z = flate2::Compress::new(flate2::Compression::default(), false);
    let mut packed = Vec::with_capacity(size);
    z.compress_vec(&vec![7u8; size], &mut packed, flate2::FlushCompress::Sync)
        .unwrap();
    packed.truncate(packed.len() - 4);
    let figures = || deflate_figures(m);
    let mut wrong = Vec::new();
    for case in ENGINES.into_iter().filter(|c| !c.faults) {
        let before = figures();
        let budget = MemoryBudget::new(1 << 20)
            .allowance(0)
            .wait_timeout(Duration::from_secs(5));
        let waits_before = m.counter(meter::BUDGET_WAITS, &[]);
        let echoed = rt.block_on(async {
            let deflate = wavesock::DeflateConfig::default().compression_threshold(0);
            let mut server = start(case, budget_config(&budget).deflate(deflate)).await;
            // B holds most of the budget: 600 KiB of a 700 KiB frame.
            let mut b = upgrade_raw(server.addr).await;
            let big = frame(true, OpCode::Binary, vec![1; 700 << 10]);
            b.write_all(&big[..big.len() - (100 << 10)]).await.unwrap();
            tokio::time::sleep(Duration::from_millis(300)).await;
            // A's message inflates to 800 KiB: it waits for B.
            let mut a = upgrade_deflate(server.addr).await;
            a.write_all(&masked_frame(0xC2, &packed)).await.unwrap();
            tokio::time::sleep(Duration::from_millis(300)).await;
            drop(b);
            let (op, echoed) = within(10, read_frame(&mut a)).await;
            assert_eq!(op, 0x2, "{case:?}");
            drop(a);
            server.ended().await;
            echoed
        });
        if m.counter(meter::BUDGET_WAITS, &[]) == waits_before {
            wrong.push(format!("{case:?}: never waited (scenario not reproduced)"));
        }
        let after = figures();
        let moved = [0, 1].map(|way| [0, 1].map(|form| after[way][form] - before[way][form]));
        let want = [
            [size as u64, echoed.len() as u64],
            [size as u64, packed.len() as u64],
        ];
        if moved != want {
            wrong.push(format!(
                "{case:?}: [sent, received] x [uncompressed, compressed] moved {moved:?}, want {want:?}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A hub dropped (its task aborted) with one connection
/// open, one write-blocked and one mid-handshake, on both readiness
/// modes; then a hub shut down gracefully: every connection counted
/// opened is counted closed once, the gauges come back to 0, and the
/// connection mid-handshake is neither opened nor closed.
#[cfg(feature = "metrics")]
#[test]
fn metrics_count_a_dropped_hubs_connections_once() {
    use wavesock::meter;

    let Some((m, rt)) = metered_alone() else {
        return;
    };
    let mut wrong = Vec::new();
    rt.block_on(async {
        for readiness in [Readiness::Owned, Readiness::Tokio] {
            for graceful in [false, true] {
                let l = [("engine", "hub-0")];
                let figures = || {
                    [
                        m.counter(meter::CONNECTIONS_ACCEPTED, &l) as f64,
                        m.counter(meter::CONNECTIONS_CLOSED, &l) as f64,
                        m.gauge(meter::CONNECTIONS_OPEN, &l),
                        m.gauge(meter::WRITE_BLOCKED, &[]),
                    ]
                };
                let before = figures();
                let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
                let addr = listener.local_addr().unwrap();
                let (tx, _ended) = mpsc::unbounded_channel();
                let config = HubConfig::default()
                    .engines(Some(1))
                    .readiness(readiness)
                    .shutdown_timeout(Duration::from_millis(300));
                let hub = Hub::new(HubEcho(tx), config).unwrap();
                let handle = hub.handle();
                let served = tokio::spawn(hub.serve(listener));
                let mut open = upgrade_raw(addr).await;
                open.write_all(&frame(true, OpCode::Text, b"hi".to_vec())).await.unwrap();
                assert_eq!(read_frame(&mut open).await.0, 0x1);
                let mut half = TcpStream::connect(addr).await.unwrap();
                half.write_all(&raw::REQUEST[..20]).await.unwrap();
                let socket = tokio::net::TcpSocket::new_v4().unwrap();
                socket.set_recv_buffer_size(64 << 10).unwrap();
                let mut tcp = socket.connect(addr).await.unwrap();
                tcp.write_all(raw::REQUEST).await.unwrap();
                let mut head = Vec::new();
                while !head.ends_with(b"\r\n\r\n") {
                    head.push(tcp.read_u8().await.unwrap());
                }
                let (rd, mut wr) = tcp.into_split();
                let writer = tokio::spawn(async move {
                    let chunk = frame(true, OpCode::Binary, vec![7; 256 << 10]);
                    for _ in 0..32 {
                        if wr.write_all(&chunk).await.is_err() {
                            break;
                        }
                    }
                    wr
                });
                until(|| figures()[3] - before[3] == 1.0).await;
                if graceful {
                    let _ = handle.shutdown().await;
                    let _ = within(10, served).await;
                } else {
                    served.abort();
                    let _ = served.await;
                }
                writer.abort();
                tokio::time::sleep(Duration::from_millis(200)).await;
                drop((rd, half, open));
                let after = figures();
                let moved: Vec<f64> = (0..4).map(|i| after[i] - before[i]).collect();
                if moved != [2.0, 2.0, 0.0, 0.0] {
                    wrong.push(format!(
                        "{readiness:?} graceful={graceful}: [accepted, closed, open, write_blocked] moved {moved:?}"
                    ));
                }
            }
        }
    });
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Sends a message in pieces (a ping between them) when told `pieces`,
/// after a stray continuation the rules refuse.
#[cfg(feature = "metrics")]
#[derive(Clone)]
struct PieceSender;

#[cfg(feature = "metrics")]
impl Handler for PieceSender {
    type Data = ();

    fn upgrade(
        &mut self,
        _: &wavesock::http::Request<()>,
        _: &mut wavesock::http::Response<()>,
    ) -> Result<(), wavesock::hub::HttpResponse> {
        Ok(())
    }

    fn message(&mut self, ws: &mut Ws<'_, ()>, _: HubMessage<'_>) {
        use wavesock::Frame;
        let piece = |fin, op, p: &'static str| Message::Frame(Frame::new(fin, op, p.as_bytes()));
        let stray = ws.send(&piece(true, OpCode::Continuation, "zz"));
        assert!(stray.is_err(), "a continuation with no message: {stray:?}");
        ws.send(&piece(false, OpCode::Text, "aa")).unwrap();
        ws.send(&Message::Ping(wavesock::Bytes::from_static(b"p")))
            .unwrap();
        ws.send(&piece(false, OpCode::Continuation, "bb")).unwrap();
        ws.send(&piece(true, OpCode::Continuation, "cc")).unwrap();
        ws.send_binary(b"bin").unwrap();
    }
}

/// A hub handler's message sent in pieces, a ping between
/// them, after a refused stray continuation: one text message of 6
/// bytes, one control, one binary.
#[cfg(feature = "metrics")]
#[test]
fn metrics_count_hub_pieces_once_after_a_refused_piece() {
    use wavesock::meter;

    let Some((m, rt)) = metered_alone() else {
        return;
    };
    let mut wrong = Vec::new();
    rt.block_on(async {
        for readiness in [Readiness::Owned, Readiness::Tokio] {
            let figures = || {
                ["text", "binary", "control"].map(|k| {
                    (
                        m.counter(meter::MESSAGES_SENT, &[("kind", k)]),
                        m.counter(meter::SENT_BYTES, &[("kind", k)]),
                    )
                })
            };
            let before = figures();
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let config = HubConfig::default().engines(Some(1)).readiness(readiness);
            let hub = Hub::new(PieceSender, config).unwrap();
            let handle = hub.handle();
            let task = tokio::spawn(hub.serve(listener));
            let mut tcp = upgrade_raw(addr).await;
            tcp.write_all(&frame(true, OpCode::Text, b"go".to_vec()))
                .await
                .unwrap();
            let mut ops = Vec::new();
            for _ in 0..5 {
                ops.push(read_frame(&mut tcp).await.0);
            }
            let _ = handle.shutdown().await;
            let _ = task.await;
            let after = figures();
            let moved: Vec<(u64, u64)> = (0..3)
                .map(|i| (after[i].0 - before[i].0, after[i].1 - before[i].1))
                .collect();
            if moved != [(1, 6), (1, 3), (1, 1)] || ops != [0x1, 0x9, 0x0, 0x0, 0x2] {
                wrong.push(format!(
                    "{readiness:?}: frames {ops:x?}, [text, binary, control] moved {moved:?}"
                ));
            }
        }
    });
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// `wavesock_budget_in_use_bytes` comes back to 0 after a hub ends its
/// connections at `shutdown_timeout` or is dropped with them, the budget
/// kept alive as a server that shares one across listeners does. (A
/// break-it round found it showing the memory they had held.)
#[cfg(feature = "metrics")]
#[test]
fn metrics_take_back_the_budget_a_hub_ends_with() {
    use wavesock::meter;

    let Some((m, rt)) = metered_alone() else {
        return;
    };
    let mut wrong = Vec::new();
    let mut budgets = Vec::new();
    rt.block_on(async {
        for readiness in [Readiness::Owned, Readiness::Tokio] {
            for abort in [false, true] {
                let base = m.gauge(meter::BUDGET_IN_USE, &[]);
                let budget = MemoryBudget::new(4 << 20).allowance(0);
                budgets.push(budget.clone());
                let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
                let addr = listener.local_addr().unwrap();
                let (tx, _ended) = mpsc::unbounded_channel();
                let config = HubConfig::default()
                    .engines(Some(1))
                    .readiness(readiness)
                    .shutdown_timeout(Duration::from_millis(300))
                    .config(budget_config(&budget));
                let hub = Hub::new(HubEcho(tx), config).unwrap();
                let handle = hub.handle();
                let served = tokio::spawn(hub.serve(listener));
                // 600 KiB of a 700 KiB frame, held in the budget.
                let mut b = upgrade_raw(addr).await;
                let big = frame(true, OpCode::Binary, vec![1; 700 << 10]);
                b.write_all(&big[..big.len() - (100 << 10)]).await.unwrap();
                until(|| m.gauge(meter::BUDGET_IN_USE, &[]) - base > 0.0).await;
                if abort {
                    served.abort();
                    let _ = served.await;
                } else {
                    // Our peer never answers the close: cut at the deadline.
                    let _ = handle.shutdown().await;
                    let _ = within(10, served).await;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                let shown = m.gauge(meter::BUDGET_IN_USE, &[]) - base;
                if budget.in_use() != 0 || shown != 0.0 {
                    wrong.push(format!(
                        "{readiness:?} {}: budget in use {}, gauge shows {shown}",
                        if abort {
                            "dropped"
                        } else {
                            "shut down past its deadline"
                        },
                        budget.in_use()
                    ));
                }
                drop(b);
            }
        }
    });
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The `Host` cases of tests/support/hosts.rs on every engine, the hub on
/// either poller and behind faults among them: one field holding a host
/// and an optional port gets 101, anything else 400, with the same answer
/// everywhere. (Issue 68: two fields, an empty one and `Host: a b` got
/// 101.)
#[tokio::test]
async fn the_host_field_is_checked_alike_on_every_engine() {
    use crate::support::hosts::{HOST_CASES, upgrade_with_hosts};
    let mut first: Option<(Case, Vec<String>)> = None;
    for engine in ENGINES {
        let server = start(engine, Config::default()).await;
        let mut answers = Vec::new();
        for (name, hosts, status) in HOST_CASES {
            let mut tcp = TcpStream::connect(server.addr).await.unwrap();
            tcp.write_all(&upgrade_with_hosts(hosts)).await.unwrap();
            let answer = if *status == 101 {
                // The connection stays open: read the head alone.
                let mut head = Vec::new();
                while !head.ends_with(b"\r\n\r\n") {
                    let mut byte = [0];
                    within(5, tcp.read_exact(&mut byte)).await.expect("a head");
                    head.push(byte[0]);
                }
                head
            } else {
                let mut all = Vec::new();
                within(5, tcp.read_to_end(&mut all))
                    .await
                    .expect("a refusal ends the connection");
                all
            };
            let answer = String::from_utf8_lossy(&answer).into_owned();
            let first_line = answer.lines().next().unwrap_or("");
            assert!(
                first_line.starts_with(&format!("HTTP/1.1 {status} ")),
                "{engine:?} {name}: {answer}"
            );
            // The date is the only part that may differ.
            let answer: Vec<_> = answer
                .split("\r\n")
                .filter(|l| !l.to_ascii_lowercase().starts_with("date:"))
                .collect();
            answers.push(format!("{name}: {}", answer.join("|")));
        }
        match &first {
            None => first = Some((engine, answers)),
            Some((e, before)) => assert_eq!(&answers, before, "{engine:?} against {e:?}"),
        }
    }
}
