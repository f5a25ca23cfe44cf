//! The Redis leg of a cross-server fan-out, alone: a `PUBLISH` on one
//! connection, timed until Redis answers it and until a subscriber on
//! another connection has the message. `run-fanout.sh` prints it beside
//! the fan-out rows, so that what the servers add can be told from what
//! Redis costs.
//!
//! ```text
//! redis_rtt --addr 127.0.0.1:6379 [--count N] [--size S]
//! ```
//!
//! Speaks RESP on plain sockets (no client library in the measurement).
//! Prints p50/p99 of both times as a markdown row starting with `|`.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CHANNEL: &str = "wavesock-redis-rtt";

/// A RESP command as an array of bulk strings.
fn command(parts: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", parts.len()).into_bytes();
    for p in parts {
        out.extend_from_slice(format!("${}\r\n", p.len()).as_bytes());
        out.extend_from_slice(p);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Reads until `buf` holds at least `n` bytes.
async fn fill(tcp: &mut TcpStream, buf: &mut Vec<u8>, n: usize) -> std::io::Result<()> {
    let mut chunk = [0u8; 16 << 10];
    while buf.len() < n {
        let got = tcp.read(&mut chunk).await?;
        if got == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..got]);
    }
    Ok(())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

async fn run(addr: &str, count: usize, size: usize) -> std::io::Result<()> {
    let mut publisher = TcpStream::connect(addr).await?;
    let mut subscriber = TcpStream::connect(addr).await?;
    publisher.set_nodelay(true)?;
    subscriber.set_nodelay(true)?;
    subscriber
        .write_all(&command(&[b"SUBSCRIBE", CHANNEL.as_bytes()]))
        .await?;
    // *3 $9 subscribe $N channel :1
    let confirm = format!(
        "*3\r\n$9\r\nsubscribe\r\n${}\r\n{CHANNEL}\r\n:1\r\n",
        CHANNEL.len()
    );
    let mut sub_buf = Vec::new();
    fill(&mut subscriber, &mut sub_buf, confirm.len()).await?;
    assert_eq!(sub_buf, confirm.as_bytes(), "subscribed");
    sub_buf.clear();

    let payload = vec![b'.'; size];
    let publish = command(&[b"PUBLISH", CHANNEL.as_bytes(), &payload]);
    let delivered = format!(
        "*3\r\n$7\r\nmessage\r\n${}\r\n{CHANNEL}\r\n${size}\r\n",
        CHANNEL.len()
    )
    .len()
        + size
        + 2;
    let mut acked = Vec::with_capacity(count);
    let mut received = Vec::with_capacity(count);
    let mut pub_buf = Vec::new();
    for i in 0..count + count / 10 {
        let start = Instant::now();
        publisher.write_all(&publish).await?;
        // ":1\r\n": one subscriber had it.
        fill(&mut publisher, &mut pub_buf, 4).await?;
        let ack = start.elapsed();
        assert_eq!(&pub_buf[..4], b":1\r\n");
        pub_buf.drain(..4);
        fill(&mut subscriber, &mut sub_buf, delivered).await?;
        let got = start.elapsed();
        sub_buf.drain(..delivered);
        // The first tenth warms up.
        if i >= count / 10 {
            acked.push(ack);
            received.push(got);
        }
    }
    acked.sort();
    received.sort();
    let us = |d: Duration| format!("{:.0} µs", d.as_secs_f64() * 1e6);
    println!(
        "| Redis alone: PUBLISH acknowledged / at a subscriber ({size} B) | p50 {} / {} | p99 {} / {} |",
        us(percentile(&acked, 0.5)),
        us(percentile(&received, 0.5)),
        us(percentile(&acked, 0.99)),
        us(percentile(&received, 0.99)),
    );
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let mut addr = "127.0.0.1:6379".to_owned();
    let mut count = 2000;
    let mut size = 64;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next();
        match (flag.as_str(), value) {
            ("--addr", Some(v)) => addr = v,
            ("--count", Some(v)) => count = v.parse().unwrap_or(count).max(10),
            ("--size", Some(v)) => size = v.parse().unwrap_or(size),
            _ => {
                eprintln!("usage: redis_rtt --addr HOST:PORT [--count N] [--size S]");
                return ExitCode::from(2);
            }
        }
    }
    match run(&addr, count, size).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("redis_rtt: {e}");
            ExitCode::FAILURE
        }
    }
}
