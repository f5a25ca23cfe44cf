//! The compression a server achieves, and what it costs the server's CPU,
//! on a corpus: each line of `--file` a text message (or the whole file
//! one message, with `--whole on`), sent in order over `--conns`
//! connections that offer permessage-deflate as Chromium does, each
//! message compressed as the client is allowed by the server's answer,
//! one message in flight per connection.
//!
//! ```text
//! deflate_corpus --addr 127.0.0.1:9001 --pid PID --file benches/corpus/chat.jsonl
//!                [--whole on] [--conns 16] [--rounds 3] [--label NAME]
//! ```
//!
//! Prints one JSON line and a `#` line: messages, raw bytes, the server's
//! compressed payload bytes (and the ratio raw / compressed), the client's,
//! the server's CPU time per message (all threads, from `/proc/PID`) and
//! messages per second.

use std::io;
use std::net::SocketAddr;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wavesock::handshake::extensions::check_response;
use wavesock::http::{HeaderMap, HeaderValue, header::SEC_WEBSOCKET_EXTENSIONS};
use wavesock::proto::{Message, Role, deflate, encoder::FrameEncoder};
use wavesock::{DeflateConfig, DeflateParams};

const OFFER: &str = "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n";

struct Opts {
    addr: SocketAddr,
    pid: u32,
    file: String,
    whole: bool,
    conns: usize,
    rounds: usize,
    label: String,
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        addr: SocketAddr::from(([127, 0, 0, 1], 9001)),
        pid: 0,
        file: String::new(),
        whole: false,
        conns: 16,
        rounds: 3,
        label: "server".into(),
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let [flag, value] = pair else {
            return Err(format!("{} needs a value", pair[0]));
        };
        let bad = || format!("bad value for {flag}: {value}");
        match flag.as_str() {
            "--addr" => o.addr = value.parse().map_err(|_| bad())?,
            "--pid" => o.pid = value.parse().map_err(|_| bad())?,
            "--file" => o.file = value.clone(),
            "--whole" => o.whole = value == "on",
            "--conns" => o.conns = value.parse().map_err(|_| bad())?,
            "--rounds" => o.rounds = value.parse().map_err(|_| bad())?,
            "--label" => o.label = value.clone(),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if o.pid == 0 || o.file.is_empty() {
        return Err("--pid and --file are required".into());
    }
    Ok(o)
}

/// The parameters the server's answer in `head` grants.
fn agreed(head: &str) -> io::Result<DeflateParams> {
    let line = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("sec-websocket-extensions")
                .then(|| value.trim())
        })
        .ok_or_else(|| io::Error::other("the server declined permessage-deflate"))?;
    let mut headers = HeaderMap::new();
    let value = HeaderValue::from_str(line).map_err(io::Error::other)?;
    headers.insert(SEC_WEBSOCKET_EXTENSIONS, value);
    check_response(&DeflateConfig::default(), &headers)
        .map_err(io::Error::other)?
        .ok_or_else(|| io::Error::other("no permessage-deflate in the answer"))
}

/// Sends every frame, reading each echo; returns the echoes' payload bytes.
async fn echo_all(mut tcp: TcpStream, frames: &[Bytes]) -> io::Result<u64> {
    let mut buf = vec![0u8; 64 << 10];
    let mut got = 0;
    for f in frames {
        tcp.write_all(f).await?;
        loop {
            let mut head = [0u8; 2];
            tcp.read_exact(&mut head).await?;
            let mut len = u64::from(head[1] & 0x7f);
            if len == 126 {
                let mut ext = [0u8; 2];
                tcp.read_exact(&mut ext).await?;
                len = u64::from(u16::from_be_bytes(ext));
            } else if len == 127 {
                let mut ext = [0u8; 8];
                tcp.read_exact(&mut ext).await?;
                len = u64::from_be_bytes(ext);
            }
            if head[0] & 0x0f == 0x8 {
                return Err(io::Error::other("the server closed"));
            }
            let mut left = len;
            while left > 0 {
                let n = left.min(buf.len() as u64) as usize;
                tcp.read_exact(&mut buf[..n]).await?;
                left -= n as u64;
            }
            got += len;
            if head[0] & 0x80 != 0 {
                break;
            }
        }
    }
    Ok(got)
}

async fn run(o: &Opts) -> io::Result<()> {
    let text = std::fs::read_to_string(&o.file)?;
    let messages: Vec<&str> = if o.whole {
        vec![text.as_str()]
    } else {
        text.lines().filter(|l| !l.is_empty()).collect()
    };
    let mut conns = Vec::with_capacity(o.conns);
    let mut params = None;
    for _ in 0..o.conns {
        let mut tcp = TcpStream::connect(o.addr).await?;
        tcp.set_nodelay(true)?;
        let (head, _) = wavesock_benches::raw_handshake(&mut tcp, o.addr, OFFER).await?;
        params = Some(agreed(&head)?);
        conns.push(tcp);
    }
    let params = params.ok_or_else(|| io::Error::other("no connections"))?;
    // Every connection got the same answer: one sequence of frames serves
    // them all (masked alike; the server does not care).
    let config = DeflateConfig::default().compression_threshold(0);
    let (_, deflater) =
        deflate::pair(Role::Client, &params, &config, usize::MAX).map_err(io::Error::other)?;
    let mut encoder = FrameEncoder::new(Role::Client);
    encoder.set_deflater(deflater);
    let (mut raw, mut client_bytes) = (0u64, 0u64);
    let mut frames = Vec::new();
    for _ in 0..o.rounds {
        for m in &messages {
            let mut out = BytesMut::new();
            encoder
                .encode_message(&Message::text(m.to_string()), &mut out)
                .map_err(io::Error::other)?;
            raw += m.len() as u64;
            client_bytes += out.len() as u64;
            frames.push(out.freeze());
        }
    }
    let cpu0 = wavesock_benches::server_cpu_ns(o.pid);
    let started = Instant::now();
    let results =
        futures_util::future::join_all(conns.into_iter().map(|c| echo_all(c, &frames))).await;
    let secs = started.elapsed().as_secs_f64();
    let cpu1 = wavesock_benches::server_cpu_ns(o.pid);
    let mut server_bytes = 0;
    for r in results {
        server_bytes += r?;
    }
    let n = (frames.len() * o.conns) as u64;
    let (raw_all, client_all) = (raw * o.conns as u64, client_bytes * o.conns as u64);
    let cpu = cpu0.zip(cpu1).map(|(a, b)| (b - a) / n.max(1));
    println!(
        "{{\"label\":\"{}\",\"mode\":\"corpus\",\"file\":\"{}\",\"messages\":{n},\"raw_bytes\":{raw_all},\
         \"server_bytes\":{server_bytes},\"client_bytes\":{client_all},\"ratio\":{:.3},\
         \"server_cpu_ns_per_msg\":{},\"msgs_per_s\":{:.0}}}",
        o.label,
        o.file,
        raw_all as f64 / server_bytes.max(1) as f64,
        cpu.map_or("null".into(), |c| c.to_string()),
        n as f64 / secs,
    );
    println!(
        "# {} {}: {n} messages, {:.1} B raw -> {:.1} B from the server ({:.2}x), server CPU {} ns per message, {:.0} messages/s",
        o.label,
        o.file,
        raw as f64 / frames.len() as f64,
        server_bytes as f64 / n as f64,
        raw_all as f64 / server_bytes.max(1) as f64,
        cpu.map_or("?".into(), |c| c.to_string()),
        n as f64 / secs,
    );
    Ok(())
}

fn main() -> std::process::ExitCode {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!(
                "deflate_corpus: {e}\nsee the doc comment of benches/src/bin/deflate_corpus.rs"
            );
            return std::process::ExitCode::from(2);
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime");
    match rt.block_on(run(&o)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("deflate_corpus: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
