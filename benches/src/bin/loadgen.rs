//! A neutral WebSocket echo load generator: plain Tokio TCP, no WebSocket
//! library, so that it favours no implementation.
//!
//! It performs the HTTP upgrade by hand (the RFC 6455 sample key, checking
//! the server's `101` and `Sec-WebSocket-Accept`), sends binary frames built
//! and masked once at startup (the same bytes are reused for every message),
//! and parses the server's unmasked frames minimally: headers are read,
//! payloads are skipped without being copied or checked, and a message counts
//! when its final frame (FIN) has fully arrived, so fragmented replies work.
//!
//! ```text
//! loadgen MODE --addr 127.0.0.1:PORT [options]
//! loadgen table FILE [--baseline LABEL]
//!
//! modes:
//!   pingpong    N connections each send one message and wait for its echo,
//!               again and again (defaults: --conns 64 --size 1KiB)
//!   throughput  the same loop with large messages
//!               (defaults: --conns 16 --size 64KiB; try --conns 1 --size 16MiB)
//!   pipelined   K messages in flight per connection at all times: K are sent
//!               at the start, then every read that completes n echoes is
//!               answered by one write of n new messages
//!               (defaults: --conns 1 --inflight 64 --size 1KiB)
//!   idle        open N connections, handshake and echo one small message on
//!               each, wait --settle seconds, and report the growth of the
//!               server's VmRSS divided by N (needs --pid)
//!               (defaults: --conns 10000 --size 16). The connections are
//!               held by child processes (`idle-worker`, not for direct use),
//!               at most --per-proc each, child k binding 127.0.0.(k+2) as
//!               its source address: one process could not hold more
//!               connections than its open-files limit, nor one source
//!               address more than the ephemeral port range
//!
//! options:
//!   --addr A       server address; must be a loopback address (required)
//!   --conns N      connections
//!   --size S       payload bytes; suffixes KiB/K and MiB/M allowed
//!   --inflight K   messages in flight per connection (pipelined)
//!   --secs D       measured window in seconds (default 5)
//!   --warmup W     warm-up before the window in seconds (default 1)
//!   --settle T     idle mode: wait before reading VmRSS (default 2)
//!   --pid P        server process: its CPU time (all threads, from
//!                  /proc/P/task/*/schedstat, else /proc/P/stat) is read at
//!                  both ends of the window and divided by the messages echoed
//!                  in it; idle mode reads VmRSS/VmHWM from /proc/P/status
//!   --label L      implementation name written into the results
//!   --source IP    bind this local address before connecting (default: let
//!                  the kernel choose; idle mode chooses one per child)
//!   --per-proc M   idle mode: connections per child process (default 9500,
//!                  lowered to fit the open-files limit)
//!   --deflate on   idle mode: offer permessage-deflate as Chromium does
//!                  (`permessage-deflate; client_max_window_bits`), require
//!                  the server to accept, and send the message compressed
//!                  (from an empty window, readable under any parameters);
//!                  the echo is counted compressed or not
//! ```
//!
//! Every run prints one JSON object on a line of its own (a flat object of
//! numbers and simple strings) followed by a human-readable line starting
//! with `#`. `bytes_per_s` counts echoed payload bytes once (one direction).
//! `server_util` is the server's CPU time over the window's wall time: near
//! 1.0 the server is the bottleneck; well below, the load generator or the
//! machine is, and only `server_cpu_ns_per_msg` remains comparable.
//! `rtt_p50_us` and `rtt_p99_us` (`pingpong` and `throughput`; `null`
//! otherwise) are the median and 99th percentile of the round trips timed
//! in the window, from a message's send to its echo's last byte.
//!
//! `loadgen table FILE` reads such JSON lines and prints a markdown table
//! with one column per label and ratios to the baseline (default
//! `fastwebsockets`).

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::convert::Infallible;
use std::io;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::Notify;

/// The masking key of every frame we send.
const MASK: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];
/// Connections one process opens at once, well under the servers' listen
/// backlogs (512 and more).
const CONNECT_CONCURRENCY: usize = 128;
/// Idle connections per child process: a process with a hard limit of
/// 20 000 open files can hold two shares, and each source address keeps
/// most of the 28 000 ports of Linux's default ephemeral range free (a
/// bind to port 0 searches longer the fuller the range).
const IDLE_PER_PROC: usize = 9_500;
/// Descriptors a process needs besides its connections (stdio, the
/// runtime's epoll and wakers, pipes).
const SPARE_FDS: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    PingPong,
    Throughput,
    Pipelined,
    Idle,
    IdleWorker,
}

#[derive(Debug)]
struct Opts {
    mode: Mode,
    addr: SocketAddr,
    conns: usize,
    size: usize,
    inflight: usize,
    secs: f64,
    warmup: f64,
    settle: f64,
    pid: Option<u32>,
    label: String,
    source: Option<IpAddr>,
    per_proc: usize,
    /// Idle mode: offer permessage-deflate and send compressed.
    deflate: bool,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("table") {
        return match table(&args[1..]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("loadgen table: {e}");
                ExitCode::from(2)
            }
        };
    }
    let opts = match parse_opts(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("loadgen: {e}\nsee the doc comment of benches/src/bin/loadgen.rs");
            return ExitCode::from(2);
        }
    };
    let fd_limit = match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("loadgen: could not raise the open-files limit: {e}");
            1024
        }
    };
    if opts.mode == Mode::Idle {
        return match idle(&opts, fd_limit) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("loadgen: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if opts.conns as u64 + SPARE_FDS as u64 > fd_limit {
        eprintln!(
            "loadgen: {} connections do not fit the open-files limit ({fd_limit})",
            opts.conns
        );
        return ExitCode::FAILURE;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime");
    let result = rt.block_on(async {
        match opts.mode {
            Mode::PingPong | Mode::Throughput => round_trips(&opts).await,
            Mode::Pipelined => pipelined(&opts).await,
            Mode::IdleWorker => idle_worker(&opts).await,
            Mode::Idle => unreachable!("handled above"),
        }
    });
    // Open connections and tasks are dropped with the runtime.
    rt.shutdown_background();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("loadgen: {e}");
            ExitCode::FAILURE
        }
    }
}

fn parse_opts(args: &[String]) -> Result<Opts, String> {
    let mode = match args.first().map(String::as_str) {
        Some("pingpong") => Mode::PingPong,
        Some("throughput") => Mode::Throughput,
        Some("pipelined") => Mode::Pipelined,
        Some("idle") => Mode::Idle,
        Some("idle-worker") => Mode::IdleWorker,
        other => return Err(format!("unknown mode {other:?}")),
    };
    let (conns, size, inflight) = match mode {
        Mode::PingPong => (64, 1024, 1),
        Mode::Throughput => (16, 64 << 10, 1),
        Mode::Pipelined => (1, 1024, 64),
        Mode::Idle | Mode::IdleWorker => (10_000, 16, 1),
    };
    let mut opts = Opts {
        mode,
        addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        conns,
        size,
        inflight,
        secs: 5.0,
        warmup: 1.0,
        settle: 2.0,
        pid: None,
        label: "server".into(),
        source: None,
        per_proc: IDLE_PER_PROC,
        deflate: false,
    };
    let mut have_addr = false;
    let mut rest = args[1..].iter();
    while let Some(flag) = rest.next() {
        let value = rest.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let bad = || format!("bad value for {flag}: {value}");
        match flag.as_str() {
            "--addr" => {
                opts.addr = value.parse().map_err(|_| bad())?;
                have_addr = true;
            }
            "--conns" => opts.conns = value.parse().map_err(|_| bad())?,
            "--size" => opts.size = parse_size(value).ok_or_else(bad)?,
            "--inflight" => opts.inflight = value.parse().map_err(|_| bad())?,
            "--secs" => opts.secs = value.parse().map_err(|_| bad())?,
            "--warmup" => opts.warmup = value.parse().map_err(|_| bad())?,
            "--settle" => opts.settle = value.parse().map_err(|_| bad())?,
            "--pid" => opts.pid = Some(value.parse().map_err(|_| bad())?),
            "--label" => opts.label = value.clone(),
            "--source" => opts.source = Some(value.parse().map_err(|_| bad())?),
            "--per-proc" => opts.per_proc = value.parse().map_err(|_| bad())?,
            "--deflate" => {
                opts.deflate = match value.as_str() {
                    "on" => true,
                    "off" => false,
                    _ => return Err(bad()),
                }
            }
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if !have_addr {
        return Err("--addr is required".into());
    }
    if !opts.addr.ip().is_loopback() {
        return Err(format!(
            "only loopback targets are allowed, not {}",
            opts.addr
        ));
    }
    if opts.conns == 0 || opts.inflight == 0 || opts.per_proc == 0 || opts.secs <= 0.0 {
        return Err("--conns, --inflight, --per-proc and --secs must be positive".into());
    }
    if let Some(ip) = opts.source
        && (!ip.is_loopback() || ip.is_ipv4() != opts.addr.is_ipv4())
    {
        return Err(format!(
            "--source must be a loopback address of the target's family, not {ip}"
        ));
    }
    if opts.mode == Mode::Idle && opts.pid.is_none() {
        return Err("idle mode needs --pid".into());
    }
    if opts.label.contains([',', ':', '"', '\\']) {
        return Err("--label may not contain , : \" or \\".into());
    }
    Ok(opts)
}

/// `1024`, `1KiB`, `1K`, `16MiB`, `16M`.
fn parse_size(s: &str) -> Option<usize> {
    let (digits, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, ""),
    };
    let n: usize = digits.parse().ok()?;
    let shift = match unit {
        "" => 0,
        "K" | "KiB" | "k" => 10,
        "M" | "MiB" => 20,
        _ => return None,
    };
    n.checked_mul(1 << shift)
}

/// A masked binary frame carrying `size` bytes of ASCII.
fn masked_frame(size: usize) -> Vec<u8> {
    wavesock_benches::masked_binary_frame(&wavesock_benches::payload(size), MASK)
}

/// Chromium's permessage-deflate offer, as a request header line.
const CHROMIUM_DEFLATE: &str =
    "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n";

/// A masked binary frame carrying `size` bytes of ASCII compressed with
/// permessage-deflate from an empty window (RSV1 set): the first message
/// of any compression context, whatever the server answered.
fn compressed_frame(size: usize) -> Vec<u8> {
    use wavesock::proto::deflate::{self, DeflateConfig, DeflateParams};
    use wavesock::proto::{Message, Role, encoder::FrameEncoder};
    let mut encoder = FrameEncoder::new(Role::Client);
    let params = DeflateParams::default();
    // No context takeover: our window starts empty for this message.
    let config = DeflateConfig::default()
        .client_no_context_takeover(true)
        .compression_threshold(0);
    let (_, deflater) =
        deflate::pair(Role::Client, &params, &config, usize::MAX).expect("deflate feature");
    encoder.set_deflater(deflater);
    let mut out = bytes::BytesMut::new();
    let msg = Message::binary(wavesock_benches::payload(size));
    encoder.encode_message(&msg, &mut out).expect("encodes");
    assert_eq!(out[0] & 0x40, 0x40, "compressed");
    out.to_vec()
}

/// Connects (from `source` if given), sets `TCP_NODELAY` and performs the
/// opening handshake, with `extensions` (a header line or nothing). Bytes
/// the server sent after its response go into the returned reader, whose
/// buffer holds `read_buf` bytes; the response's head comes with it.
async fn connect(
    addr: SocketAddr,
    source: Option<IpAddr>,
    read_buf: usize,
    extensions: &str,
) -> io::Result<(TcpStream, FrameReader, String)> {
    let mut tcp = match source {
        None => TcpStream::connect(addr).await?,
        Some(ip) => {
            let socket = match ip {
                IpAddr::V4(_) => TcpSocket::new_v4()?,
                IpAddr::V6(_) => TcpSocket::new_v6()?,
            };
            // Port 0: the kernel picks a free port on this address, so each
            // source address brings a whole ephemeral range with it.
            socket.bind(SocketAddr::new(ip, 0))?;
            socket.connect(addr).await?
        }
    };
    tcp.set_nodelay(true)?;
    let (head, early) = wavesock_benches::raw_handshake(&mut tcp, addr, extensions).await?;
    let mut reader = FrameReader::new(read_buf);
    reader.push(&early);
    Ok((tcp, reader, head))
}

/// Counts complete messages in the server's frames without keeping payloads.
struct FrameReader {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Payload bytes of the current frame still to skip.
    remaining: u64,
    in_frame: bool,
    /// Whether the current frame ends a data message.
    ends_message: bool,
}

impl FrameReader {
    fn new(capacity: usize) -> FrameReader {
        FrameReader {
            buf: vec![0; capacity],
            start: 0,
            end: 0,
            remaining: 0,
            in_frame: false,
            ends_message: false,
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        if bytes.len() > self.buf.len() {
            self.buf.resize(bytes.len(), 0);
        }
        self.buf[..bytes.len()].copy_from_slice(bytes);
        self.start = 0;
        self.end = bytes.len();
    }

    /// Consumes what is buffered; returns the messages it completed.
    fn parse(&mut self) -> io::Result<u64> {
        let mut done = 0;
        loop {
            if self.in_frame {
                let avail = (self.end - self.start) as u64;
                let take = avail.min(self.remaining);
                self.start += take as usize;
                self.remaining -= take;
                if self.remaining > 0 {
                    break;
                }
                self.in_frame = false;
                done += u64::from(self.ends_message);
                continue;
            }
            let head = &self.buf[self.start..self.end];
            if head.len() < 2 {
                break;
            }
            let (fin, opcode) = (head[0] & 0x80 != 0, head[0] & 0x0f);
            let masked = head[1] & 0x80 != 0;
            let (len_bytes, short) = match head[1] & 0x7f {
                126 => (2, None),
                127 => (8, None),
                n => (0, Some(u64::from(n))),
            };
            let header_len = 2 + len_bytes + if masked { 4 } else { 0 };
            if head.len() < header_len {
                break;
            }
            let len = short.unwrap_or_else(|| {
                head[2..2 + len_bytes]
                    .iter()
                    .fold(0u64, |acc, &b| (acc << 8) | u64::from(b))
            });
            if opcode == 0x8 {
                return Err(io::Error::other("the server sent a close frame"));
            }
            self.start += header_len;
            self.remaining = len;
            self.in_frame = true;
            self.ends_message = fin && matches!(opcode, 0x0..=0x2);
        }
        // Only a partial header (under 14 bytes) can be left: move it to the front.
        let left = self.end - self.start;
        self.buf.copy_within(self.start..self.end, 0);
        self.start = 0;
        self.end = left;
        Ok(done)
    }

    /// Reads once (after using what is buffered) and returns the messages completed.
    async fn read_some(&mut self, io: &mut (impl AsyncRead + Unpin)) -> io::Result<u64> {
        let done = self.parse()?;
        if done > 0 {
            return Ok(done);
        }
        let n = io.read(&mut self.buf[self.end..]).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        self.end += n;
        self.parse()
    }

    /// Reads until `want` messages have completed.
    async fn read_messages(
        &mut self,
        io: &mut (impl AsyncRead + Unpin),
        want: u64,
    ) -> io::Result<()> {
        let mut done = 0;
        while done < want {
            done += self.read_some(io).await?;
        }
        if done > want {
            return Err(io::Error::other("more echoes than messages sent"));
        }
        Ok(())
    }
}

/// The server's user-space CPU time in nanoseconds (`utime` of
/// `/proc/PID/stat`, all threads): the part a library controls, without
/// the kernel's socket work. Clock ticks are 100 per second on Linux.
fn server_user_ns(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    let utime: u64 = after.split_whitespace().nth(11)?.parse().ok()?;
    Some(utime * 10_000_000)
}

/// This process's CPU time in nanoseconds, all threads.
fn own_cpu_ns() -> Option<u64> {
    wavesock_benches::server_cpu_ns(std::process::id())
}

/// VmRSS and VmHWM of `pid`, in KiB.
fn server_memory_kib(pid: u32) -> io::Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| -> io::Result<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .ok_or_else(|| io::Error::other(format!("no {name} in /proc/{pid}/status")))
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}

struct Window {
    messages: u64,
    secs: f64,
    cpu_ns: Option<u64>,
    user_ns: Option<u64>,
    own_cpu_ns: Option<u64>,
    /// Round trips (send to the echo's last byte) timed in the window:
    /// p50 and p99 in nanoseconds. One message in flight per connection
    /// only: in a pipeline a message's time is mostly its queue's.
    rtt: Option<(u64, u64)>,
}

/// Lets the load run for the warm-up, then measures `counter` and the
/// server's CPU time over the window.
async fn measure(opts: &Opts, counter: &AtomicU64, recording: &AtomicBool) -> Window {
    tokio::time::sleep(Duration::from_secs_f64(opts.warmup)).await;
    recording.store(true, Ordering::Relaxed);
    let (m0, c0, u0, o0, t0) = (
        counter.load(Ordering::Relaxed),
        opts.pid.and_then(wavesock_benches::server_cpu_ns),
        opts.pid.and_then(server_user_ns),
        own_cpu_ns(),
        Instant::now(),
    );
    tokio::time::sleep(Duration::from_secs_f64(opts.secs)).await;
    let (m1, c1, u1, o1, secs) = (
        counter.load(Ordering::Relaxed),
        opts.pid.and_then(wavesock_benches::server_cpu_ns),
        opts.pid.and_then(server_user_ns),
        own_cpu_ns(),
        t0.elapsed().as_secs_f64(),
    );
    recording.store(false, Ordering::Relaxed);
    let diff = |a: Option<u64>, b: Option<u64>| a.zip(b).map(|(a, b)| b.saturating_sub(a));
    Window {
        messages: m1 - m0,
        secs,
        cpu_ns: diff(c0, c1),
        user_ns: diff(u0, u1),
        own_cpu_ns: diff(o0, o1),
        rtt: None,
    }
}

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::PingPong => "pingpong",
        Mode::Throughput => "throughput",
        Mode::Pipelined => "pipelined",
        Mode::Idle | Mode::IdleWorker => "idle",
    }
}

fn report(opts: &Opts, w: &Window, errors: u64) {
    let msgs_per_s = w.messages as f64 / w.secs;
    let bytes_per_s = msgs_per_s * opts.size as f64;
    let gib_per_s = bytes_per_s / f64::from(1u32 << 30);
    let cpu_per_msg = w
        .cpu_ns
        .filter(|_| w.messages > 0)
        .map(|c| c as f64 / w.messages as f64);
    let user_per_msg = w
        .user_ns
        .filter(|_| w.messages > 0)
        .map(|c| c as f64 / w.messages as f64);
    let util = w.cpu_ns.map(|c| c as f64 / 1e9 / w.secs);
    let client_util = w.own_cpu_ns.map(|c| c as f64 / 1e9 / w.secs);
    // The load generator's own CPU per message, next to the server's: when
    // it is as high, the load generator limits the rate as much as the
    // server does (loopback TCP charges each sender the receiver's kernel
    // work, so the two cannot differ by much on small messages).
    let client_per_msg = w
        .own_cpu_ns
        .filter(|_| w.messages > 0)
        .map(|c| c as f64 / w.messages as f64);
    let num = |v: Option<f64>| v.map_or("null".to_string(), |v| format!("{v:.3}"));
    println!(
        "{{\"label\":\"{}\",\"mode\":\"{}\",\"conns\":{},\"size\":{},\"inflight\":{},\
         \"secs\":{:.3},\"messages\":{},\"msgs_per_s\":{:.1},\"bytes_per_s\":{:.0},\
         \"gib_per_s\":{:.4},\"server_cpu_ns_per_msg\":{},\"server_user_ns_per_msg\":{},\"server_util\":{},\"client_util\":{},\"client_cpu_ns_per_msg\":{},\"rtt_p50_us\":{},\"rtt_p99_us\":{},\"errors\":{}}}",
        opts.label,
        mode_name(opts.mode),
        opts.conns,
        opts.size,
        opts.inflight,
        w.secs,
        w.messages,
        msgs_per_s,
        bytes_per_s,
        gib_per_s,
        num(cpu_per_msg),
        num(user_per_msg),
        num(util),
        num(client_util),
        num(client_per_msg),
        num(w.rtt.map(|r| r.0 as f64 / 1000.0)),
        num(w.rtt.map(|r| r.1 as f64 / 1000.0)),
        errors,
    );
    println!(
        "# {} {} {}x{}B{}: {:.0} msg/s, {:.3} GiB/s, server {} CPU/msg ({} user), {} busy (loadgen {}, {} CPU/msg){}{}",
        opts.label,
        mode_name(opts.mode),
        opts.conns,
        opts.size,
        if opts.mode == Mode::Pipelined {
            format!(" ({} in flight)", opts.inflight)
        } else {
            String::new()
        },
        msgs_per_s,
        gib_per_s,
        cpu_per_msg.map_or("?".into(), |c| format!("{:.2} µs", c / 1000.0)),
        user_per_msg.map_or("?".into(), |c| format!("{:.2} µs", c / 1000.0)),
        util.map_or("?".into(), |u| format!("{:.0}%", u * 100.0)),
        client_util.map_or("?".into(), |u| format!("{:.0}%", u * 100.0)),
        client_per_msg.map_or("?".into(), |c| format!("{:.2} µs", c / 1000.0)),
        w.rtt.map_or(String::new(), |(p50, p99)| format!(
            ", round trip p50 {:.1} µs p99 {:.1} µs",
            p50 as f64 / 1000.0,
            p99 as f64 / 1000.0
        )),
        if errors > 0 {
            format!(", {errors} connection errors")
        } else {
            String::new()
        },
    );
}

/// The read buffer of each connection: room for everything that can be in
/// flight (so a read never stops short because of the buffer), between
/// 4 KiB and 256 KiB. Small for small messages, so thousands of connections
/// keep their buffers in a few megabytes.
fn read_buf_len(opts: &Opts) -> usize {
    opts.inflight
        .saturating_mul(opts.size + 14)
        .clamp(4 << 10, 256 << 10)
}

/// Opens `--conns` connections, several at a time, since with thousands of
/// them one handshake after the other would take a while.
async fn connect_all(opts: &Opts) -> io::Result<Vec<(TcpStream, FrameReader)>> {
    let read_buf = read_buf_len(opts);
    futures_util::stream::iter(0..opts.conns)
        .map(|_| async {
            let (tcp, reader, _) = connect(opts.addr, opts.source, read_buf, "").await?;
            Ok::<_, io::Error>((tcp, reader))
        })
        .buffer_unordered(CONNECT_CONCURRENCY)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect()
}

/// `pingpong` and `throughput`: one message in flight per connection,
/// each round trip timed while the window is open.
async fn round_trips(opts: &Opts) -> io::Result<()> {
    let frame: Arc<[u8]> = masked_frame(opts.size).into();
    let counter = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let recording = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for (mut tcp, mut reader) in connect_all(opts).await? {
        let (frame, counter, errors, stop, recording) = (
            frame.clone(),
            counter.clone(),
            errors.clone(),
            stop.clone(),
            recording.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut rtts = Vec::new();
            let run = async {
                while !stop.load(Ordering::Relaxed) {
                    let sent = Instant::now();
                    tcp.write_all(&frame).await?;
                    reader.read_messages(&mut tcp, 1).await?;
                    if recording.load(Ordering::Relaxed) {
                        rtts.push(sent.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64);
                    }
                    counter.fetch_add(1, Ordering::Relaxed);
                }
                io::Result::Ok(())
            };
            if let Err(e) = run.await {
                errors.fetch_add(1, Ordering::Relaxed);
                eprintln!("connection: {e}");
            }
            rtts
        }));
    }
    let mut window = measure(opts, &counter, &recording).await;
    stop.store(true, Ordering::Relaxed);
    // Each connection finishes the round trip it is in; one that never
    // does (its server stopped answering) is left out after a while.
    let mut rtts = Vec::new();
    for task in &mut tasks {
        if let Ok(Ok(mut r)) = tokio::time::timeout(Duration::from_secs(2), task).await {
            rtts.append(&mut r);
        }
    }
    window.rtt = percentiles(&mut rtts);
    report(opts, &window, errors.load(Ordering::Relaxed));
    tasks.iter().for_each(|t| t.abort());
    Ok(())
}

/// The median and the 99th percentile of `samples` (nearest rank), if
/// there are any.
fn percentiles(samples: &mut [u64]) -> Option<(u64, u64)> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_unstable();
    let at =
        |q: f64| samples[((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1];
    Some((at(0.50), at(0.99)))
}

/// `pipelined`: `inflight` messages outstanding per connection at all times.
async fn pipelined(opts: &Opts) -> io::Result<()> {
    let k = opts.inflight;
    let batch: Arc<[u8]> = masked_frame(opts.size).repeat(k).into();
    let counter = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for (tcp, reader) in connect_all(opts).await? {
        let (rd, wr) = tcp.into_split();
        let received = Arc::new(AtomicU64::new(0));
        let wake = Arc::new(Notify::new());
        let (r, w, c, e) = (
            received.clone(),
            wake.clone(),
            counter.clone(),
            errors.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let Err(err) = pipelined_reader(rd, reader, &r, &c, &w).await;
            e.fetch_add(1, Ordering::Relaxed);
            eprintln!("connection (read): {err}");
        }));
        let (batch, e) = (batch.clone(), errors.clone());
        tasks.push(tokio::spawn(async move {
            let Err(err) = pipelined_writer(wr, &batch, k, &received, &wake).await;
            e.fetch_add(1, Ordering::Relaxed);
            eprintln!("connection (write): {err}");
        }));
    }
    let window = measure(opts, &counter, &AtomicBool::new(false)).await;
    report(opts, &window, errors.load(Ordering::Relaxed));
    tasks.iter().for_each(|t| t.abort());
    Ok(())
}

/// Counts echoes and wakes the writer after every read that completed some.
async fn pipelined_reader(
    mut rd: OwnedReadHalf,
    mut reader: FrameReader,
    received: &AtomicU64,
    counter: &AtomicU64,
    wake: &Notify,
) -> io::Result<Infallible> {
    loop {
        let n = reader.read_some(&mut rd).await?;
        if n > 0 {
            received.fetch_add(n, Ordering::Relaxed);
            counter.fetch_add(n, Ordering::Relaxed);
            wake.notify_one();
        }
    }
}

/// Sends `k` messages, then tops up to `k` outstanding whenever woken, with
/// one write per `k` messages owed.
async fn pipelined_writer(
    mut wr: OwnedWriteHalf,
    batch: &[u8],
    k: usize,
    received: &AtomicU64,
    wake: &Notify,
) -> io::Result<Infallible> {
    let frame_len = batch.len() / k;
    wr.write_all(batch).await?;
    let mut sent = k as u64;
    loop {
        wake.notified().await;
        let mut owed = received.load(Ordering::Relaxed) + k as u64 - sent;
        while owed > 0 {
            let n = owed.min(k as u64);
            wr.write_all(&batch[..n as usize * frame_len]).await?;
            sent += n;
            owed -= n;
        }
    }
}

/// `idle`: the server's resident memory per open, idle connection.
///
/// The connections are opened and held by child processes (`idle-worker`),
/// so that their number is bounded by neither this process's open-files
/// limit nor one source address's ephemeral ports. Each child reports a
/// `ready` line once its share is open and holds it until its standard
/// input closes.
fn idle(opts: &Opts, fd_limit: u64) -> io::Result<()> {
    let pid = opts.pid.expect("checked by parse_opts");
    let per_proc = opts
        .per_proc
        .min(
            usize::try_from(fd_limit)
                .unwrap_or(usize::MAX)
                .saturating_sub(SPARE_FDS),
        )
        .max(1);
    let procs = opts.conns.div_ceil(per_proc);
    if opts.addr.is_ipv4() && procs > 250 {
        return Err(io::Error::other(format!(
            "{} connections at {per_proc} per process need more than 127.0.0.2-127.0.0.251",
            opts.conns
        )));
    }
    let exe = std::env::current_exe()?;
    let (rss0, hwm0) = server_memory_kib(pid)?;
    let started = Instant::now();
    let mut children: Vec<(Child, usize)> = Vec::with_capacity(procs);
    for k in 0..procs {
        // An even split: shares differ by one connection at most.
        let share = opts.conns / procs + usize::from(k < opts.conns % procs);
        let mut cmd = Command::new(&exe);
        cmd.arg("idle-worker")
            .args(["--addr", &opts.addr.to_string()])
            .args(["--conns", &share.to_string()])
            .args(["--size", &opts.size.to_string()])
            .args(["--label", &opts.label])
            .args(["--deflate", if opts.deflate { "on" } else { "off" }]);
        if opts.addr.is_ipv4() {
            // 127.0.0.0/8 is all loopback on Linux: one source address per
            // child, each with its own ephemeral ports.
            let source = Ipv4Addr::new(127, 0, 0, 2 + k as u8);
            cmd.args(["--source", &source.to_string()]);
        }
        let child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn()?;
        children.push((child, share));
    }
    let mut failed = 0;
    for (child, share) in &mut children {
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().expect("piped")).read_line(&mut line)?;
        // `ready OPEN`; a child that died before saying so opened nothing
        // that is still open.
        let open = line
            .strip_prefix("ready ")
            .and_then(|n| n.trim().parse::<usize>().ok())
            .unwrap_or(0);
        failed += *share - open.min(*share);
    }
    let setup_secs = started.elapsed().as_secs_f64();
    if failed > 0 {
        eprintln!("{failed} connections failed");
    }
    let open = (opts.conns - failed) as u64;
    std::thread::sleep(Duration::from_secs_f64(opts.settle));
    let (rss1, hwm1) = server_memory_kib(pid)?;
    let per_conn = (rss1 as f64 - rss0 as f64) * 1024.0 / open.max(1) as f64;
    println!(
        "{{\"label\":\"{}\",\"mode\":\"idle\",\"conns\":{},\"size\":{},\"inflight\":0,\
         \"open\":{},\"rss_before_kib\":{},\"rss_after_kib\":{},\"hwm_before_kib\":{},\
         \"hwm_after_kib\":{},\"bytes_per_conn\":{:.0},\"setup_secs\":{:.3},\"procs\":{},\
         \"errors\":{}}}",
        opts.label,
        opts.conns,
        opts.size,
        open,
        rss0,
        rss1,
        hwm0,
        hwm1,
        per_conn,
        setup_secs,
        procs,
        failed,
    );
    println!(
        "# {} idle: {} connections open (from {} loadgen process{}), server VmRSS {} -> {} KiB \
         (VmHWM {} KiB): {:.0} bytes per connection",
        opts.label,
        open,
        procs,
        if procs == 1 { "" } else { "es" },
        rss0,
        rss1,
        hwm1,
        per_conn,
    );
    std::io::stdout().flush()?;
    for (mut child, _) in children {
        drop(child.stdin.take());
        child.wait()?;
    }
    Ok(())
}

/// One child of `idle`: opens `--conns` connections (handshake and one
/// echo each), prints `ready OPEN`, and holds them until standard input
/// closes, which also happens when the parent dies.
async fn idle_worker(opts: &Opts) -> io::Result<()> {
    let (frame, offer) = if opts.deflate {
        (compressed_frame(opts.size), CHROMIUM_DEFLATE)
    } else {
        (masked_frame(opts.size), "")
    };
    let read_buf = read_buf_len(opts);
    let conns: Vec<io::Result<TcpStream>> = futures_util::stream::iter(0..opts.conns)
        .map(|_| async {
            let (mut tcp, mut reader, head) =
                connect(opts.addr, opts.source, read_buf, offer).await?;
            if opts.deflate && !head.to_ascii_lowercase().contains("permessage-deflate") {
                return Err(io::Error::other("the server declined permessage-deflate"));
            }
            tcp.write_all(&frame).await?;
            reader.read_messages(&mut tcp, 1).await?;
            // Closed with a reset, not a FIN, so that no TIME_WAIT socket
            // holds the port for a minute: with the previous run's ports
            // still held, binds to port 0 on the same address search so
            // long (about 2 s of kernel time per thousand connections)
            // that servers time out the handshakes waiting behind them.
            tcp.set_zero_linger()?;
            Ok(tcp)
        })
        .buffer_unordered(CONNECT_CONCURRENCY)
        .collect()
        .await;
    let failed = conns.iter().filter(|c| c.is_err()).count();
    if let Some(Err(e)) = conns.iter().find(|c| c.is_err()) {
        let from = opts
            .source
            .map_or(String::new(), |ip| format!(" from {ip}"));
        eprintln!(
            "{}: {failed} connections{from} failed, first: {e}",
            opts.label
        );
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready {}", opts.conns - failed)?;
    out.flush()?;
    // Blocking the runtime's only thread is fine: nothing runs on it while
    // the connections sit idle.
    let mut sink = [0u8; 64];
    while std::io::stdin().read(&mut sink)? > 0 {}
    drop(conns);
    Ok(())
}

/// One flat JSON object as written by `report` or `idle`.
fn parse_flat_json(line: &str) -> Option<HashMap<String, String>> {
    let body = line.trim().strip_prefix('{')?.strip_suffix('}')?;
    body.split(',')
        .map(|pair| {
            let (k, v) = pair.split_once(':')?;
            Some((
                k.trim().trim_matches('"').to_string(),
                v.trim().trim_matches('"').to_string(),
            ))
        })
        .collect()
}

/// `loadgen table FILE [--baseline LABEL]`: a markdown table of the results.
fn table(args: &[String]) -> Result<(), String> {
    let file = args
        .first()
        .ok_or("usage: loadgen table FILE [--baseline LABEL]")?;
    let baseline = match args.get(1..3) {
        Some([flag, b]) if flag == "--baseline" => b.clone(),
        _ => "fastwebsockets".to_string(),
    };
    let text = std::fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?;
    let rows: Vec<HashMap<String, String>> = text
        .lines()
        .filter(|l| l.starts_with('{'))
        .filter_map(parse_flat_json)
        .collect();
    let num =
        |row: &HashMap<String, String>, k: &str| row.get(k).and_then(|v| v.parse::<f64>().ok());
    let mut labels: Vec<String> = Vec::new();
    let mut workloads: Vec<String> = Vec::new();
    let mut cells: HashMap<(String, String), HashMap<String, String>> = HashMap::new();
    let mut rounds = 0;
    for row in &rows {
        let get = |k: &str| row.get(k).cloned().unwrap_or_default();
        let label = get("label");
        let workload = workload_name(&get("mode"), &get("conns"), &get("size"), &get("inflight"));
        if !labels.contains(&label) {
            labels.push(label.clone());
        }
        if !workloads.contains(&workload) {
            workloads.push(workload.clone());
        }
        // Several rounds: keep the best of each figure, since interference
        // from other processes only ever makes a run slower.
        match cells.entry((workload, label)) {
            Entry::Vacant(v) => {
                rounds = rounds.max(1);
                v.insert(row.clone());
            }
            Entry::Occupied(mut o) => {
                let best = o.get_mut();
                let n = best.get("rounds").and_then(|r| r.parse().ok()).unwrap_or(1) + 1;
                rounds = rounds.max(n);
                best.insert("rounds".into(), n.to_string());
                let better = |best: &HashMap<String, String>, k: &str, higher: bool| match (
                    num(row, k),
                    num(best, k),
                ) {
                    (Some(new), Some(old)) => (new > old) == higher && new != old,
                    (Some(_), None) => true,
                    _ => false,
                };
                let take = |best: &mut HashMap<String, String>, keys: &[&str]| {
                    for k in keys {
                        if let Some(v) = row.get(*k) {
                            best.insert((*k).into(), v.clone());
                        }
                    }
                };
                if better(best, "msgs_per_s", true) {
                    take(
                        best,
                        &["msgs_per_s", "gib_per_s", "server_util", "client_util"],
                    );
                }
                if better(best, "server_cpu_ns_per_msg", false) {
                    take(best, &["server_cpu_ns_per_msg"]);
                }
                if better(best, "server_user_ns_per_msg", false) {
                    take(best, &["server_user_ns_per_msg"]);
                }
                // Round-trip times: the lowest too; p50 and p99 from one
                // round, so that the pair was measured together.
                if better(best, "rtt_p99_us", false) {
                    take(best, &["rtt_p50_us", "rtt_p99_us"]);
                }
                if better(best, "bytes_per_conn", false) {
                    take(best, &["bytes_per_conn"]);
                }
            }
        }
    }
    println!("| echo workload | {} |", labels.join(" | "));
    println!("| --- |{}", " --- |".repeat(labels.len()));
    for workload in &workloads {
        let base = cells.get(&(workload.clone(), baseline.clone()));
        let mut line = format!("| {workload} |");
        for label in &labels {
            let cell = match cells.get(&(workload.clone(), label.clone())) {
                None => "—".to_string(),
                Some(row) if row.get("mode").map(String::as_str) == Some("idle") => {
                    let b = num(row, "bytes_per_conn").unwrap_or(f64::NAN);
                    let ratio = base
                        .and_then(|r| num(r, "bytes_per_conn"))
                        .map_or(String::new(), |bb| format!(" ({:.2}×)", b / bb));
                    format!("{:.0} B/conn{ratio}", b)
                }
                Some(row) => {
                    let rate = num(row, "msgs_per_s").unwrap_or(f64::NAN);
                    let ratio = base
                        .and_then(|r| num(r, "msgs_per_s"))
                        .map_or("?".into(), |br| format!("{:.2}", rate / br));
                    let gib = num(row, "gib_per_s").unwrap_or(f64::NAN);
                    let size = num(row, "size").unwrap_or(0.0);
                    let amount = if size >= 65536.0 {
                        format!("{gib:.2} GiB/s")
                    } else {
                        format!("{:.0} k msg/s", rate / 1000.0)
                    };
                    let cpu = num(row, "server_cpu_ns_per_msg").map_or(String::new(), |c| {
                        let r = base
                            .and_then(|b| num(b, "server_cpu_ns_per_msg"))
                            .map_or(String::new(), |bc| format!(" = {:.2}×", c / bc));
                        if c >= 100_000.0 {
                            format!(", {:.2} ms CPU/msg{r}", c / 1e6)
                        } else {
                            format!(", {:.2} µs CPU/msg{r}", c / 1000.0)
                        }
                    });
                    let user = num(row, "server_user_ns_per_msg").map_or(String::new(), |c| {
                        let r = base
                            .and_then(|b| num(b, "server_user_ns_per_msg"))
                            .filter(|&bc| bc > 0.0)
                            .map_or(String::new(), |bc| format!(" = {:.2}×", c / bc));
                        if c >= 100_000.0 {
                            format!(", {:.2} ms user/msg{r}", c / 1e6)
                        } else {
                            format!(", {:.2} µs user/msg{r}", c / 1000.0)
                        }
                    });
                    let util = num(row, "server_util")
                        .map_or(String::new(), |u| format!(", {:.0}% busy", u * 100.0));
                    let rtt = num(row, "rtt_p50_us")
                        .zip(num(row, "rtt_p99_us"))
                        .map_or(String::new(), |(p50, p99)| {
                            format!(", round trip p50 {p50:.0} µs p99 {p99:.0} µs")
                        });
                    format!("**{ratio}** ({amount}{cpu}{user}{util}{rtt})")
                }
            };
            line.push_str(&format!(" {cell} |"));
        }
        println!("{line}");
    }
    println!(
        "\nRatios: messages per second relative to {baseline} (higher is better); CPU/msg is \
         the server's CPU time per echoed message and its ratio to {baseline} (lower is better), \
         user/msg its user-space part (utime, 10 ms ticks); round trip: a message's \
         time from its send to its echo's last byte, one in flight per connection (lower is \
         better); \
         idle: growth of the server's VmRSS per open connection. Best of {rounds} round(s) \
         per figure."
    );
    Ok(())
}

fn workload_name(mode: &str, conns: &str, size: &str, inflight: &str) -> String {
    let size = size
        .parse::<usize>()
        .map(|s| match s {
            s if s >= 1 << 20 && s % (1 << 20) == 0 => format!("{} MiB", s >> 20),
            s if s >= 1 << 10 && s % (1 << 10) == 0 => format!("{} KiB", s >> 10),
            s => format!("{s} B"),
        })
        .unwrap_or_default();
    let conns_word = if conns == "1" {
        "connection"
    } else {
        "connections"
    };
    match mode {
        "pipelined" => format!("{conns} {conns_word}, {inflight} × {size} in flight"),
        "idle" => format!("idle memory per connection ({conns} connections)"),
        _ => format!("{conns} {conns_word}, {size}, {mode}"),
    }
}

#[cfg(test)]
mod tests {
    use super::percentiles;

    /// Nearest rank: of 1..=100, the median is 50 and the 99th percentile
    /// 99, whatever order the samples came in; one sample is both.
    #[test]
    fn percentiles_take_the_nearest_rank() {
        let mut s: Vec<u64> = (1..=100).rev().collect();
        assert_eq!(percentiles(&mut s), Some((50, 99)));
        assert_eq!(percentiles(&mut [7]), Some((7, 7)));
        let mut s: Vec<u64> = (1..=1000).collect();
        assert_eq!(percentiles(&mut s), Some((500, 990)));
        assert_eq!(percentiles(&mut []), None);
    }
}
