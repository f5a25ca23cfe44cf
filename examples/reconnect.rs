//! A client that stays connected: it reconnects with exponential backoff
//! (jittered, capped) whenever the connection drops, and resumes sending
//! where it left off.
//!
//! It sends a numbered line every half second to an echo server and treats
//! each echo as the acknowledgement of that line. Lines not acknowledged yet
//! (written into a connection that then died, or produced while offline) are
//! kept and sent again after reconnecting, so the server sees every line at
//! least once.
//!
//! ```text
//! cargo run --example echo_server -- 127.0.0.1:9001
//! cargo run --example reconnect -- ws://127.0.0.1:9001/
//! ```
//!
//! Stop and restart the echo server to watch it back off and resume.

use std::collections::VecDeque;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::sync::mpsc;
use tokio::time::{Instant, interval, sleep};
use wavesock::{Config, Message};

/// Lines buffered while offline, and lines kept until acknowledged.
const MAX_PENDING: usize = 1000;
/// A connection that lasted this long was healthy: start backing off afresh.
const HEALTHY: Duration = Duration::from_secs(10);

/// Exponential backoff with jitter: each delay doubles up to `cap`, and the
/// actual wait is drawn from its upper half, so clients dropped together do
/// not all come back at the same instant.
struct Backoff {
    base: Duration,
    cap: Duration,
    next: Duration,
}

impl Backoff {
    fn new(base: Duration, cap: Duration) -> Self {
        Backoff {
            base,
            cap,
            next: base,
        }
    }

    fn reset(&mut self) {
        self.next = self.base;
    }

    /// The wait before the next attempt.
    fn delay(&mut self) -> Duration {
        let ceiling = self.next;
        self.next = (self.next * 2).min(self.cap);
        let ms = ceiling.as_millis() as u64;
        Duration::from_millis(rand::random_range(ms / 2..=ms))
    }
}

/// Lines sent and not yet echoed back, oldest first.
#[derive(Default)]
struct Unacked(VecDeque<(u64, String)>);

impl Unacked {
    fn push(&mut self, seq: u64, line: String) {
        if self.0.len() == MAX_PENDING {
            self.0.pop_front(); // give up on the oldest rather than grow
        }
        self.0.push_back((seq, line));
    }

    /// An echo of line `seq` acknowledges it and every line before it.
    fn acknowledge(&mut self, echo: &str) {
        let Some(seq) = echo
            .strip_prefix("line ")
            .and_then(|n| n.parse::<u64>().ok())
        else {
            return;
        };
        while self.0.front().is_some_and(|(s, _)| *s <= seq) {
            self.0.pop_front();
        }
    }
}

/// One connection's life: resend what was never acknowledged, then send
/// each new line and read echoes until the connection fails. `Ok(false)`
/// when the producer is done.
async fn session(
    url: &str,
    lines: &mut mpsc::Receiver<(u64, String)>,
    unacked: &mut Unacked,
) -> wavesock::Result<bool> {
    let config = Config::default()
        .connect_timeout(Some(Duration::from_secs(5)))
        // Notice a dead server even while there is nothing to send.
        .ping_interval(Some(Duration::from_secs(5)))
        .pong_timeout(Duration::from_secs(5));
    let (mut ws, _) = wavesock::connect_async_with_config(url, config).await?;
    eprintln!("connected; resending {} line(s)", unacked.0.len());
    for (_, line) in &unacked.0 {
        ws.feed(Message::text(line.as_str())).await?;
    }
    ws.flush().await?;
    loop {
        // Both branches are cancel safe: a half-received frame stays in the
        // connection's buffer when a line wins the race, and a line stays in
        // the channel when a message does.
        tokio::select! {
            line = lines.recv() => {
                let Some((seq, line)) = line else {
                    // close() only starts the handshake: echoes still in
                    // flight arrive before the server's close frame.
                    ws.close(None).await?;
                    while let Some(msg) = ws.next().await {
                        if let Message::Text(echo) = msg? {
                            unacked.acknowledge(echo.as_str());
                            println!("echoed: {}", echo.as_str());
                        }
                    }
                    return Ok(false);
                };
                unacked.push(seq, line.clone());
                ws.send(Message::text(line)).await?;
            }
            msg = ws.next() => match msg {
                Some(Ok(Message::Text(echo))) => {
                    unacked.acknowledge(echo.as_str());
                    println!("echoed: {}", echo.as_str());
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e),
                None => return Ok(true), // closed by the server
            },
        }
    }
}

#[tokio::main]
async fn main() {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "ws://127.0.0.1:9001/".into());

    // The application produces lines whether or not it is connected; the
    // channel holds them while offline.
    let (tx, mut lines) = mpsc::channel(MAX_PENDING);
    tokio::spawn(async move {
        let mut ticks = interval(Duration::from_millis(500));
        for seq in 1.. {
            ticks.tick().await;
            if tx.send((seq, format!("line {seq}"))).await.is_err() {
                break;
            }
        }
    });

    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(30));
    let mut unacked = Unacked::default();
    loop {
        let started = Instant::now();
        match session(&url, &mut lines, &mut unacked).await {
            Ok(false) => return,
            Ok(true) => eprintln!("server closed the connection"),
            Err(e) => eprintln!("connection failed: {e}"),
        }
        if started.elapsed() >= HEALTHY {
            backoff.reset();
        }
        let wait = backoff.delay();
        eprintln!("reconnecting in {wait:?}");
        sleep(wait).await;
    }
}
