//! Fan-out of `examples/chat` across processes: clients on every server,
//! one publisher, and the time from a line's publication to its receipt by
//! the last client. `run-fanout.sh` starts the servers (one process without
//! Redis, or several sharing a room through Redis) and runs this against
//! them.
//!
//! ```text
//! fanout --urls ws://127.0.0.1:P1/ws,ws://127.0.0.1:P2/ws [options]
//!
//!   --clients M     receiving clients per server (default 100)
//!   --latency L     lines sent one at a time, each waited for (default 200)
//!   --messages K    lines for the throughput phase (default 2000)
//!   --window W      throughput: lines in flight at most (default 32)
//!   --size S        bytes of text per line (default 64)
//!   --label L       name of the configuration in the output
//! ```
//!
//! The publisher is one more client, on the first server. A line counts as
//! delivered when every receiving client on every server has it. Latency:
//! `--latency` lines, each sent once the one before reached everyone;
//! p50/p99/max of publish-to-last-receipt. Throughput: `--messages` lines
//! with at most `--window` not yet delivered everywhere; lines received by
//! all clients per second, times the number of clients, is "deliveries/s".
//! Prints one JSON object per run and a markdown row starting with `|`.

use std::collections::HashMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use tokio::sync::mpsc;
use wavesock::{Message, WebSocketSender};

/// A phase that delivers nothing for this long is stuck (a client lagged
/// behind the chat's channel and missed lines, or a server is down).
const STALL: Duration = Duration::from_secs(10);

struct Args {
    urls: Vec<String>,
    clients: usize,
    latency: usize,
    messages: usize,
    window: usize,
    size: usize,
    label: String,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        urls: Vec::new(),
        clients: 100,
        latency: 200,
        messages: 2000,
        window: 32,
        size: 64,
        label: "chat".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        let number = |v: String| v.parse::<usize>().map_err(|e| format!("{v}: {e}"));
        match flag.as_str() {
            "--urls" => args.urls = value()?.split(',').map(str::to_owned).collect(),
            "--clients" => args.clients = number(value()?)?,
            "--latency" => args.latency = number(value()?)?,
            "--messages" => args.messages = number(value()?)?,
            "--window" => args.window = number(value()?)?.max(1),
            "--size" => args.size = number(value()?)?,
            "--label" => args.label = value()?,
            other => return Err(format!("unknown option {other}")),
        }
    }
    if args.urls.is_empty() {
        return Err("--urls is required".into());
    }
    Ok(args)
}

/// A line's text: a tag the receivers look for, padded to `size` bytes.
fn line(phase: &str, seq: usize, size: usize) -> String {
    let mut text = format!("fanout-{phase}-{seq} ");
    while text.len() < size {
        text.push('.');
    }
    text
}

/// The `(phase, seq)` of a chat line carrying one of our lines.
fn tag(text: &str) -> Option<(String, usize)> {
    let start = text.find("fanout-")? + "fanout-".len();
    let mut parts = text[start..].split(['-', ' ']);
    let phase = parts.next()?.to_owned();
    let seq = parts.next()?.parse().ok()?;
    Some((phase, seq))
}

/// Counts receipts per line and tells when a line has reached everyone.
struct Tally {
    receivers: usize,
    counts: HashMap<(String, usize), usize>,
    rx: mpsc::UnboundedReceiver<(String, usize)>,
}

impl Tally {
    /// Waits for the next line that every receiver has.
    async fn next_complete(&mut self) -> Result<(String, usize), String> {
        loop {
            let got = tokio::time::timeout(STALL, self.rx.recv())
                .await
                .map_err(|_| format!("no line delivered to everyone for {STALL:?}"))?
                .ok_or("every receiver is gone")?;
            let n = self.counts.entry(got.clone()).or_default();
            *n += 1;
            if *n == self.receivers {
                self.counts.remove(&got);
                return Ok(got);
            }
        }
    }
}

async fn connect(
    url: &str,
) -> Result<wavesock::WebSocketStream<wavesock::MaybeTlsStream<tokio::net::TcpStream>>, String> {
    let (ws, _) = wavesock::connect_async(url)
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    Ok(ws)
}

async fn publish(
    tx: &mut WebSocketSender<impl tokio::io::AsyncRead + tokio::io::AsyncWrite>,
    text: String,
) -> Result<(), String> {
    tx.send(Message::text(text))
        .await
        .map_err(|e| e.to_string())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn run(args: Args) -> Result<(), String> {
    let (seen, rx) = mpsc::unbounded_channel();
    let receivers = args.urls.len() * args.clients;
    for url in &args.urls {
        for _ in 0..args.clients {
            let ws = connect(url).await?;
            let seen = seen.clone();
            tokio::spawn(async move {
                let (_tx, mut rx) = ws.split();
                while let Some(Ok(msg)) = rx.next().await {
                    if let Some(t) = msg.as_text().and_then(tag)
                        && seen.send(t).is_err()
                    {
                        return;
                    }
                }
            });
        }
    }
    drop(seen);
    let mut tally = Tally {
        receivers,
        counts: HashMap::new(),
        rx,
    };
    let (mut publisher, mut echoes) = connect(&args.urls[0]).await?.split();
    // The publisher's own copies are not counted; keep reading them so the
    // server never waits on this client.
    tokio::spawn(async move { while echoes.next().await.is_some() {} });

    // Warm-up: until a line reaches every client, the servers' Redis links
    // may still be joining the room.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut probe = 0;
    loop {
        publish(&mut publisher, line("probe", probe, args.size)).await?;
        match tokio::time::timeout(Duration::from_millis(500), tally.next_complete()).await {
            Ok(Ok(_)) => break,
            _ if Instant::now() < deadline => probe += 1,
            _ => return Err("the room never reached every client".into()),
        }
    }
    // Late copies of earlier probes are ignored from here on.
    tally.counts.clear();

    let mut latencies = Vec::with_capacity(args.latency);
    for seq in 0..args.latency {
        let sent = Instant::now();
        publish(&mut publisher, line("lat", seq, args.size)).await?;
        loop {
            let (phase, s) = tally.next_complete().await?;
            if phase == "lat" && s == seq {
                break;
            }
        }
        latencies.push(sent.elapsed());
    }
    latencies.sort();

    let started = Instant::now();
    let (mut sent, mut done) = (0, 0);
    while done < args.messages {
        while sent < args.messages && sent - done < args.window {
            publish(&mut publisher, line("tput", sent, args.size)).await?;
            sent += 1;
        }
        let (phase, _) = tally.next_complete().await?;
        if phase == "tput" {
            done += 1;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let lines_per_s = args.messages as f64 / elapsed;
    let deliveries_per_s = lines_per_s * receivers as f64;
    let (p50, p99, max) = (
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        *latencies.last().unwrap_or(&Duration::ZERO),
    );
    println!(
        "{{\"label\":\"{}\",\"servers\":{},\"clients\":{},\"size\":{},\"p50_us\":{},\"p99_us\":{},\"max_us\":{},\"lines_per_s\":{:.0},\"deliveries_per_s\":{:.0}}}",
        args.label,
        args.urls.len(),
        receivers,
        args.size,
        p50.as_micros(),
        p99.as_micros(),
        max.as_micros(),
        lines_per_s,
        deliveries_per_s
    );
    println!(
        "| {} | {} × {} | {} µs | {} µs | {} µs | {:.0} | {:.0} |",
        args.label,
        args.urls.len(),
        args.clients,
        p50.as_micros(),
        p99.as_micros(),
        max.as_micros(),
        lines_per_s,
        deliveries_per_s
    );
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("fanout: {e}");
            return ExitCode::from(2);
        }
    };
    // One thread: the servers and Redis get the machine's other core.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match rt.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fanout: {e}");
            ExitCode::FAILURE
        }
    }
}
